/* What a set of processes cost: CPU seconds and bytes written, from
 * /proc/<pid>/stat (utime, stime, cutime, cstime in clock ticks, all
 * threads) and /proc/<pid>/io (write_bytes). */

#include "bench/proc_cost.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One process's figures, from its stat file. */
struct stat_line {
    pid_t ppid;      /* parent */
    long long ticks; /* utime + stime + cutime + cstime */
};

/* read_stat fills @out from /proc/@pid/stat; 0, or -1 if unreadable. */
static int read_stat(pid_t pid, struct stat_line *out)
{
    char path[64], buf[1024], *p;
    long long v[15];
    FILE *f;
    size_t n;

    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL) {
        return -1;
    }
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name may hold spaces and ')': the fields start after
     * the last ')'. Field 3 (state) is v[0]; ppid (4) v[1]; utime (14)
     * v[11], stime v[12], cutime v[13], cstime v[14]. */
    p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ') {
        return -1;
    }
    p += 2;
    v[0] = 0;
    p++; /* the state letter */
    for (int i = 1; i < 15; i++) {
        char *end;
        v[i] = strtoll(p, &end, 10);
        if (end == p) {
            return -1;
        }
        p = end;
    }
    out->ppid = (pid_t)v[1];
    out->ticks = v[11] + v[12] + v[13] + v[14];
    return 0;
}

/* write_bytes_of returns write_bytes of /proc/@pid/io, or 0. */
static long long write_bytes_of(pid_t pid)
{
    char path[64], line[128];
    long long wb = 0;
    FILE *f;

    snprintf(path, sizeof path, "/proc/%d/io", (int)pid);
    f = fopen(path, "r");
    if (f == NULL) {
        return 0;
    }
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "write_bytes:", 12) == 0) {
            wb = strtoll(line + 12, NULL, 10);
            break;
        }
    }
    fclose(f);
    return wb;
}

/* add_one adds @pid (whose stat is @st) to @acc. */
static void add_one(pid_t pid, const struct stat_line *st,
                    struct proc_cost *acc)
{
    static long tck;
    if (tck <= 0) {
        tck = sysconf(_SC_CLK_TCK);
        if (tck <= 0) {
            tck = 100;
        }
    }
    acc->cpu_s += (double)st->ticks / (double)tck;
    acc->write_bytes += write_bytes_of(pid);
    acc->n_procs++;
}

/* add_descendants adds every live descendant of @root to @acc: one pass
 * over /proc for the parent ids, then the tree walked from @root. */
static void add_descendants(pid_t root, struct proc_cost *acc)
{
    struct entry {
        pid_t pid;
        struct stat_line st;
        bool in;
    } *all = NULL;
    size_t n = 0, cap = 0;
    struct dirent *d;
    DIR *dir = opendir("/proc");
    bool grew = true;

    if (dir == NULL) {
        return;
    }
    while ((d = readdir(dir)) != NULL) {
        struct stat_line st;
        pid_t pid;
        if (!isdigit((unsigned char)d->d_name[0])) {
            continue;
        }
        pid = (pid_t)strtol(d->d_name, NULL, 10);
        if (pid == root || read_stat(pid, &st) != 0) {
            continue;
        }
        if (n == cap) {
            size_t ncap = cap ? 2 * cap : 256;
            struct entry *a = realloc(all, ncap * sizeof *a);
            if (a == NULL) {
                break;
            }
            all = a;
            cap = ncap;
        }
        all[n].pid = pid;
        all[n].st = st;
        all[n].in = false;
        n++;
    }
    closedir(dir);
    /* Mark the tree: a process is in once its parent is root or in. The
     * passes end when one adds nothing (at most the tree's depth + 1). */
    while (grew) {
        grew = false;
        for (size_t i = 0; i < n; i++) {
            if (all[i].in) {
                continue;
            }
            bool parent_in = all[i].st.ppid == root;
            for (size_t j = 0; j < n && !parent_in; j++) {
                parent_in = all[j].in && all[j].pid == all[i].st.ppid;
            }
            if (parent_in) {
                all[i].in = true;
                grew = true;
                add_one(all[i].pid, &all[i].st, acc);
            }
        }
    }
    free(all);
}

int proc_cost_add(pid_t pid, bool descendants, struct proc_cost *acc)
{
    struct stat_line st;
    if (read_stat(pid, &st) != 0) {
        return -1;
    }
    add_one(pid, &st, acc);
    if (descendants) {
        add_descendants(pid, acc);
    }
    return 0;
}

void proc_cost_format(char *buf, size_t buf_len, const struct proc_cost *start,
                      const struct proc_cost *end, size_t n_writes)
{
    double cpu = end->cpu_s - start->cpu_s;
    long long wb = end->write_bytes - start->write_bytes;
    if (n_writes == 0) {
        snprintf(buf, buf_len,
                 "cpu_s=%.2f cpu_s_per_write=n/a write_bytes=%lld "
                 "bytes_per_write=n/a",
                 cpu, wb);
        return;
    }
    snprintf(buf, buf_len,
             "cpu_s=%.2f cpu_s_per_write=%.7f write_bytes=%lld "
             "bytes_per_write=%.0f",
             cpu, cpu / (double)n_writes, wb, (double)wb / (double)n_writes);
}
