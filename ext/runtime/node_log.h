/* A node's log lines (stderr, filtered by log_level) and its last error,
 * which raft_status() shows. One per node; every thread of the node writes
 * through it. */

#ifndef EXT_NODE_LOG_H
#define EXT_NODE_LOG_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "../../raft/logging.h"

/* The log of one node. Its fields belong to node_log.c: other files call
 * the functions below. */
struct ext_node_log {
    uint64_t id;            /* the node's server id, printed on each line */
    int level;              /* least enum raft_log_level printed */
    pthread_mutex_t mu;     /* guards last_error and last_error_at */
    char last_error[512];   /* the last error recorded, "" for none (mu) */
    uint64_t last_error_at; /* CLOCK_MONOTONIC ms when recorded (mu) */
};

/* node_log_init prepares @l for node @id printing lines at or above @level
 * (an enum raft_log_level). Cannot fail. Thread: the node's owner, before
 * any other call. */
void node_log_init(struct ext_node_log *l, uint64_t id, int level);

/* node_log_close releases what node_log_init set up. Thread: the owner,
 * after every other call. */
void node_log_close(struct ext_node_log *l);

/* node_log_line prints "raftsql[<id>] <LEVEL>: <message>" to stderr when
 * @level reaches the node's log_level. Any thread. */
void node_log_line(struct ext_node_log *l, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* node_log_error records the message as the node's last error (at most 511
 * bytes kept) and prints it at ERROR. Any thread. */
void node_log_error(struct ext_node_log *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* node_log_last_error copies the last error recorded into @out (@len bytes,
 * always NUL-terminated; "" when none) and returns how long ago it was
 * recorded, in ms (0 when none). Any thread. */
uint64_t node_log_last_error(struct ext_node_log *l, char *out, size_t len);

/* Bytes node_log_iso_time writes at most, the NUL included. */
#define EXT_ISO_TIME_LEN 32

/* node_log_iso_time writes wall-clock time @ms (ms since the epoch) as
 * ISO 8601 UTC with milliseconds, "2026-12-01T17:49:25.123Z", into @out.
 * Pure; any thread. */
void node_log_iso_time(uint64_t ms, char out[EXT_ISO_TIME_LEN]);

#endif /* EXT_NODE_LOG_H */
