/* The node processes of raftsql-bench (nodes 2 and 3): build/raftsql-testhost
 * children driven over their stdin with JSON lines (tools/raftsql_testhost.c),
 * and stopped in order (stdin closed, SIGKILL after a grace period). */

#ifndef BENCH_CHILD_H
#define BENCH_CHILD_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include <jansson.h>

/* One node process. */
struct bench_child {
    pid_t pid; /* 0 when not running */
    int in_fd; /* its stdin (we write requests) */
    FILE *out; /* its stdout (we read replies) */
};

/* child_spawn starts @bin with the database path @db as its argument, its
 * stderr appended to the file @log, in a process group of its own (a ^C
 * reaches only the bench) and killed when the bench dies
 * (PR_SET_PDEATHSIG). On success @c holds the process and its pipes, which
 * child_stop releases. Returns 0, or -1 with errno set (pipe2, fork or
 * fdopen failed); after an fdopen failure @c->pid is set and child_stop
 * must still be called. Main thread. */
int child_spawn(struct bench_child *c, const char *bin, const char *db,
                const char *log);

/* child_stop closes the node's stdin (it stops its node and exits), waits
 * up to @grace_s, then kills it, and releases @c's pipes. A @c that is not
 * running (pid 0) is left as is. Main thread. */
void child_stop(struct bench_child *c, double grace_s);

/* child_sql sends [sql, param] (param may be NULL) and returns the reply's
 * first value as a new JSON reference (JSON null for a reply without rows)
 * that the caller drops with json_decref, or NULL on error with a message
 * in @err (@err_len bytes): "out of memory", a failed write, "node exited",
 * a bad reply, or the node's error text. Main thread. */
json_t *child_sql(struct bench_child *c, const char *sql, const char *param,
                  char *err, size_t err_len);

#endif /* BENCH_CHILD_H */
