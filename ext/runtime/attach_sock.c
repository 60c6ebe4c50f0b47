/* The pointer file and the notices beside a database (attach_sock.h). */

#include "attach_sock.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../raft/err.h"
#include "../../sql/sql.h"
#include "staleness.h"
#include "stopped.h"

/* The first line of a pointer file. */
#define EXT__ATTACH_MAGIC "raftsql-attach 1"

/* pointer_path writes "<db_path>-raftsql" into @out; false when too long. */
static bool pointer_path(const char *db_path, char *out, size_t len)
{
    int n = snprintf(out, len, "%s-raftsql", db_path);
    return n > 0 && (size_t)n < len;
}

/* alive says whether process @pid exists (EPERM: it does, as another
 * user). */
static bool alive(long pid)
{
    return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

int attach_sock_find(const char *db_path, struct ext_attach_pointer *out)
{
    char path[4200], line[256], magic[64];
    struct ext_attach_pointer p;
    FILE *f;
    int ok;

    if (!pointer_path(db_path, path, sizeof path)) {
        return RAFT_NOTFOUND;
    }
    f = fopen(path, "re");
    if (f == NULL) {
        return RAFT_NOTFOUND;
    }
    memset(&p, 0, sizeof p);
    ok = fgets(magic, sizeof magic, f) != NULL &&
         strncmp(magic, EXT__ATTACH_MAGIC "\n", sizeof EXT__ATTACH_MAGIC) == 0;
    ok = ok && fgets(line, sizeof line, f) != NULL &&
         sscanf(line, "pid=%ld", &p.pid) == 1;
    ok = ok && fgets(line, sizeof line, f) != NULL &&
         strncmp(line, "socket=", 7) == 0 &&
         strlen(line + 7) < sizeof p.socket + 1 &&
         line[strlen(line) - 1] == '\n';
    if (ok) {
        line[strlen(line) - 1] = '\0';
        memcpy(p.socket, line + 7, strlen(line + 7) + 1);
    }
    ok = ok && fgets(line, sizeof line, f) != NULL &&
         sscanf(line, "timeout_ms=%u", &p.timeout_ms) == 1;
    /* The version line came later: a file without it is version 1. */
    if (!ok || fgets(line, sizeof line, f) == NULL ||
        sscanf(line, "attach=%u", &p.version) != 1 || p.version == 0) {
        p.version = 1;
    }
    fclose(f);
    if (!ok || p.socket[0] == '\0' || !alive(p.pid)) {
        return RAFT_NOTFOUND;
    }
    *out = p;
    return 0;
}

/* full says whether errno @err means a full file system (or quota): a
 * condition that ends by itself as space frees. */
static bool full(int err)
{
    return err == ENOSPC || err == EDQUOT;
}

int attach_sock_pointer_write(const char *db_path,
                              const struct ext_attach_pointer *p, char *errmsg,
                              size_t errmsg_len)
{
    char path[4200], tmp[4300];
    FILE *f;
    int fd, ok, err;

    if (!pointer_path(db_path, path, sizeof path)) {
        snprintf(errmsg, errmsg_len, "%s-raftsql: path too long", db_path);
        return RAFT_IOERR;
    }
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || fchmod(fd, 0644) != 0 || (f = fdopen(fd, "w")) == NULL) {
        err = errno;
        snprintf(errmsg, errmsg_len, "%s: %s", tmp, strerror(err));
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        return full(err) ? RAFT_NOSPACE : RAFT_IOERR;
    }
    ok = fprintf(f,
                 EXT__ATTACH_MAGIC
                 "\npid=%ld\nsocket=%s\ntimeout_ms=%u\nattach=%u\n",
                 p->pid, p->socket, p->timeout_ms,
                 p->version > 0 ? p->version : 1) > 0;
    ok = fflush(f) == 0 && ok;
    err = ok ? 0 : errno; /* the write's, before fclose may set another */
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        err = err != 0 ? err : errno;
        snprintf(errmsg, errmsg_len, "%s: %s", path, strerror(err));
        unlink(tmp);
        return full(err) ? RAFT_NOSPACE : RAFT_IOERR;
    }
    return 0;
}

/* The first line of a settings notice. */
#define EXT__SETTINGS_MAGIC "raftsql-settings 1"

void attach_sock_settings_path(const char *db_path, char *out, size_t len)
{
    int n = snprintf(out, len, "%s-raftsql-settings", db_path);
    if (n < 0 || (size_t)n >= len) {
        out[0] = '\0';
    }
}

bool attach_sock_settings_write(const char *path, unsigned mask)
{
    char text[512];
    size_t at = (size_t)snprintf(text, sizeof text, EXT__SETTINGS_MAGIC "\n");
    for (int i = 0; i < sql_setting_count() && at < sizeof text; i++) {
        at += (size_t)snprintf(text + at, sizeof text - at, "%s=%u\n",
                               sql_setting_name(i), (mask >> i) & 1u);
    }
    return stopped_write_file(path, text, false);
}

int64_t attach_sock_settings_stamp(const char *db_path)
{
    char path[4200];
    struct stat st;
    attach_sock_settings_path(db_path, path, sizeof path);
    if (path[0] == '\0' || stat(path, &st) != 0) {
        return 0;
    }
    return (int64_t)st.st_ino * 1000003 +
           (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
}

bool attach_sock_settings(const char *db_path, unsigned *out_mask)
{
    char path[4200], line[128];
    unsigned mask = 0;
    bool ok;
    FILE *f;

    attach_sock_settings_path(db_path, path, sizeof path);
    if (path[0] == '\0' || (f = fopen(path, "re")) == NULL) {
        return false;
    }
    ok = fgets(line, sizeof line, f) != NULL &&
         strcmp(line, EXT__SETTINGS_MAGIC "\n") == 0;
    while (ok && fgets(line, sizeof line, f) != NULL) {
        char *eq = strchr(line, '=');
        int i;
        if (eq == NULL) {
            ok = false;
            break;
        }
        *eq = '\0';
        for (i = 0;
             i < sql_setting_count() && strcmp(line, sql_setting_name(i)) != 0;
             i++) {
        }
        if (i < sql_setting_count() && eq[1] == '1') {
            mask |= 1u << i;
        }
    }
    fclose(f);
    if (ok) {
        *out_mask = mask;
    }
    return ok;
}

void attach_sock_diverged_path(const char *db_path, char *out, size_t len)
{
    int n = snprintf(out, len, "%s-raftsql-diverged", db_path);
    if (n < 0 || (size_t)n >= len) {
        out[0] = '\0';
    }
}

/* notice_read says whether the notice @path of a node of another process
 * serving @db_path exists, and copies its first line into @why (@why_len
 * bytes; @fallback when it cannot be read). */
static bool notice_read(const char *db_path, const char *path,
                        const char *fallback, char *why, size_t why_len)
{
    struct ext_attach_pointer p;
    struct stat st;
    FILE *f;
    if (path[0] == '\0' || stat(path, &st) != 0 ||
        attach_sock_find(db_path, &p) != 0) {
        return false; /* none, or left by a node that is gone */
    }
    snprintf(why, why_len, "%s", fallback);
    if ((f = fopen(path, "re")) != NULL) {
        if (fgets(why, (int)why_len, f) != NULL) {
            why[strcspn(why, "\n")] = '\0';
        }
        fclose(f);
    }
    return true;
}

bool attach_sock_diverged(const char *db_path, char *why, size_t why_len)
{
    char path[4200];
    attach_sock_diverged_path(db_path, path, sizeof path);
    return notice_read(db_path, path, "diverged replica", why, why_len);
}

void attach_sock_stale_path(const char *db_path, char *out, size_t len)
{
    int n = snprintf(out, len, "%s-raftsql-stale", db_path);
    if (n < 0 || (size_t)n >= len) {
        out[0] = '\0';
    }
}

bool attach_sock_stale(const char *db_path, char *why, size_t why_len)
{
    char path[4200];
    attach_sock_stale_path(db_path, path, sizeof path);
    return notice_read(db_path, path, "stale replica", why, why_len);
}

void attach_sock_bound_path(const char *db_path, char *out, size_t len)
{
    int n = snprintf(out, len, "%s-raftsql-bound", db_path);
    if (n < 0 || (size_t)n >= len) {
        out[0] = '\0';
    }
}

/* silent says whether the node of process @pid serving @db_path with the
 * bound @max_ms stopped beating: its marker's mtime (@st) is further than
 * EXT_BOUND_SILENCE_MS from this wall clock, either way (a clock stepped
 * back past a beat that never came again), a second more when the mtime
 * has no fraction (a file system keeping whole seconds); then writes
 * @why. */
static bool silent(const char *db_path, long pid, unsigned max_ms,
                   const struct stat *st, char *why, size_t why_len)
{
    struct timespec now;
    int64_t age, limit = EXT_BOUND_SILENCE_MS(max_ms);
    if (st->st_mtim.tv_nsec == 0) {
        limit += 1000;
    }
    clock_gettime(CLOCK_REALTIME, &now);
    age = ((int64_t)now.tv_sec - (int64_t)st->st_mtim.tv_sec) * 1000 +
          ((int64_t)now.tv_nsec - (int64_t)st->st_mtim.tv_nsec) / 1000000;
    if (age <= limit && age >= -limit) {
        return false; /* it beats */
    }
    if (age > 0) {
        snprintf(why, why_len,
                 "stale replica: the node serving %.300s (pid %ld) showed "
                 "no sign of life for %lld ms (max_staleness_ms=%u)",
                 db_path, pid, (long long)age, max_ms);
    } else {
        snprintf(why, why_len,
                 "stale replica: the node serving %.300s (pid %ld) showed "
                 "no sign of life since the wall clock went back %lld ms "
                 "(max_staleness_ms=%u)",
                 db_path, pid, (long long)-age, max_ms);
    }
    return true;
}

bool attach_sock_unserved(const char *db_path, char *why, size_t why_len)
{
    char path[4200], magic[64], line[64];
    unsigned max_ms = 0;
    long pid = -1;
    struct stat st;
    FILE *f;
    attach_sock_bound_path(db_path, path, sizeof path);
    if (path[0] == '\0' || stat(path, &st) != 0 ||
        (f = fopen(path, "re")) == NULL) {
        return false;
    }
    if (fgets(magic, sizeof magic, f) != NULL &&
        strncmp(magic, EXT_BOUND_MAGIC "\n", sizeof EXT_BOUND_MAGIC) == 0 &&
        fgets(line, sizeof line, f) != NULL &&
        sscanf(line, "max_staleness_ms=%u", &max_ms) == 1 &&
        fgets(line, sizeof line, f) != NULL) {
        (void)sscanf(line, "pid=%ld", &pid);
    }
    fclose(f);
    if (max_ms == 0 || pid < 0) {
        return false; /* malformed */
    }
    if (pid > 0 && alive(pid)) {
        struct ext_attach_pointer p;
        if (attach_sock_find(db_path, &p) != 0 || p.pid != pid) {
            /* Starting: its notice counts only once its pointer is out
             * (notice_read), and until then the state it serves is the
             * one it had when it stopped, or was killed. */
            snprintf(why, why_len,
                     "stale replica: the node serving %.300s (pid %ld) is "
                     "starting (max_staleness_ms=%u)",
                     db_path, pid, max_ms);
            return true;
        }
        return silent(db_path, pid, max_ms, &st, why, why_len);
    }
    snprintf(why, why_len,
             "stale replica: no raftsql node serves %.300s (its node %s "
             "with max_staleness_ms=%u: start one; a start without "
             "max_staleness_ms lifts this)",
             db_path, pid == 0 ? "stopped" : "died", max_ms);
    return true;
}

void attach_sock_pointer_remove(const char *db_path, long pid)
{
    char path[4200], magic[64], line[256];
    long named = 0;
    FILE *f;
    if (!pointer_path(db_path, path, sizeof path) ||
        (f = fopen(path, "re")) == NULL) {
        return;
    }
    if (fgets(magic, sizeof magic, f) != NULL &&
        fgets(line, sizeof line, f) != NULL) {
        (void)sscanf(line, "pid=%ld", &named);
    }
    fclose(f);
    if (named == pid) {
        unlink(path);
    }
}
