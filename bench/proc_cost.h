/* What a set of processes cost in a measured window (bench/README.md, "CPU
 * s/write"): CPU seconds (user + system) and bytes sent to the disk, read
 * from /proc/<pid>/stat and /proc/<pid>/io at the window's start and end. */

#ifndef BENCH_PROC_COST_H
#define BENCH_PROC_COST_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The cumulative cost of some processes at one instant. */
struct proc_cost {
    double cpu_s;          /* utime + stime + cutime + cstime, seconds: all
                            * threads, and children already reaped */
    long long write_bytes; /* write_bytes of /proc/<pid>/io: bytes the
                            * processes (and their reaped children) caused
                            * to be sent to the disk, 0 if unreadable */
    int n_procs;           /* processes read */
};

/* proc_cost_add adds the current cost of process @pid to @acc, and with
 * @descendants that of every live descendant of @pid too (found by the
 * parent ids in /proc/<pid>/stat). A descendant that exits while it is
 * being read is skipped. Returns 0, or -1 when @pid's /proc/<pid>/stat
 * cannot be read (it has exited, or no such process); @acc is then
 * unchanged. Any thread. */
int proc_cost_add(pid_t pid, bool descendants, struct proc_cost *acc);

/* proc_cost_format writes into @buf (@buf_len bytes, NUL-terminated,
 * truncated if short) the RESULT words of the window from @start to @end
 * over @n_writes writes: `cpu_s=<s> cpu_s_per_write=<s> write_bytes=<bytes>
 * bytes_per_write=<bytes>`, each per-write figure `n/a` when @n_writes is
 * 0. Any thread. */
void proc_cost_format(char *buf, size_t buf_len, const struct proc_cost *start,
                      const struct proc_cost *end, size_t n_writes);

#endif /* BENCH_PROC_COST_H */
