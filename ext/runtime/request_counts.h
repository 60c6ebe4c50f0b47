/* How the writes of a node's callers ended when they did not apply, and
 * how often its requests were forwarded to the leader: counters by
 * reason, for raft_metrics(). The callers' threads and the loop thread
 * count where the event happens (relaxed atomic increments: no lock on
 * the write path); any thread reads them. */

#ifndef EXT_REQUEST_COUNTS_H
#define EXT_REQUEST_COUNTS_H

#include <stdatomic.h>
#include <stdint.h>

/* Why a write was refused: it did not apply, and never will. */
enum ext_refusal_reason {
    EXT_REFUSED_INVALID = 0,   /* a bad call (RAFTSQL_INVALID) */
    EXT_REFUSED_TOO_BIG,       /* over max_request_bytes (RAFTSQL_TOOBIG) */
    EXT_REFUSED_BUSY,          /* the submission queue was full */
    EXT_REFUSED_LOG_FULL,      /* the log had no room (RAFTSQL_FULL) */
    EXT_REFUSED_REMOVED,       /* the node is no member (RAFTSQL_REMOVED) */
    EXT_REFUSED_DIVERGED,      /* the replica is diverged */
    EXT_REFUSED_POLICY,        /* raft_exec's policy (RAFTSQL_REFUSED) */
    EXT_REFUSED_WIRE_GATE,     /* request format 3 while a member cannot
                                  apply it */
    EXT_REFUSED_SHUTTING_DOWN, /* the node was stopping */
    EXT_REFUSED_OTHER,         /* anything else not applied */
    EXT_REFUSED_N
};

/* Why a write's wait ended at exec_timeout_ms. */
enum ext_timeout_reason {
    EXT_TIMEOUT_NO_LEADER = 0, /* no leader took it: not applied */
    EXT_TIMEOUT_LEASE,         /* held behind a plain write's lease: not
                                  applied */
    EXT_TIMEOUT_UNANSWERED,    /* it left this node, no answer: outcome
                                  unknown */
    EXT_TIMEOUT_N
};

/* Why a request went to the leader. */
enum ext_forward_reason {
    EXT_FORWARD_FIRST = 0, /* its first send */
    EXT_FORWARD_AGAIN,     /* sent again: a new leader, or no answer */
    EXT_FORWARD_N
};

/* The counters. Zero them (memset or static storage) before use. */
struct ext_request_counts {
    atomic_uint_least64_t refused[EXT_REFUSED_N];
    atomic_uint_least64_t timed_out[EXT_TIMEOUT_N];
    atomic_uint_least64_t forwarded[EXT_FORWARD_N];
};

/* A copy of the counters, read at one moment (each counter on its
 * own). */
struct ext_request_tally {
    uint64_t refused[EXT_REFUSED_N];
    uint64_t timed_out[EXT_TIMEOUT_N];
    uint64_t forwarded[EXT_FORWARD_N];
};

/* request_counts_refused, _timed_out and _forwarded add one to the
 * counter of @reason (an enum ext_refusal_reason, ext_timeout_reason, ext_forward_reason; one
 * out of range is ignored) in @c. Any thread. */
void request_counts_refused(struct ext_request_counts *c, int reason);
void request_counts_timed_out(struct ext_request_counts *c, int reason);
void request_counts_forwarded(struct ext_request_counts *c, int reason);

/* request_counts_read copies @c into @out. Any thread. */
void request_counts_read(struct ext_request_counts *c,
                         struct ext_request_tally *out);

/* request_counts_refusal_name, _timeout_name and _forward_name return the
 * label of @reason ("busy", "no_leader", "first", ...; static), "" for
 * one out of range. Pure. */
const char *request_counts_refusal_name(int reason);
const char *request_counts_timeout_name(int reason);
const char *request_counts_forward_name(int reason);

#endif /* EXT_REQUEST_COUNTS_H */
