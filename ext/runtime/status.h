/* What raft_status() shows: a copy of the core's and the driver's state
 * that the loop thread refreshes after every step, for readers on other
 * threads, and its rendering as JSON (jansson). */

#ifndef EXT_STATUS_H
#define EXT_STATUS_H

#include <stdbool.h>
#include <stdint.h>

#include "../../raft/raft.h"
#include "../../raft/uv_node.h"
#include "applier.h"
#include "config.h"
#include "divergence.h"
#include "lease.h"
#include "load_status.h"
#include "request_counts.h"
#include "staleness.h"

/* What other parts of the node add to the JSON, read by the caller of
 * status_json just before. */
struct ext_status_extra {
    unsigned queue;               /* requests in the submission queue */
    unsigned waiters;             /* callers waiting */
    uint64_t applied;             /* last applied index */
    uint64_t durable;             /* durable applied index */
    bool applying;                /* the last batch applied (no failure being
                               retried) */
    const char *apply_error;      /* why applying is failing now, "" for none */
    const char *last_error;       /* "" for none */
    uint64_t last_error_age_ms;   /* ms since @last_error was recorded */
    const char *cluster_id;       /* the cluster id in hex, "" for none */
    const char *tls;              /* peers' TLS: "off", "certificates",
                                     "psk" */
    const char *tls_cert_expires; /* notAfter of the certificate in use,
                                     ISO 8601 UTC, "" without one */
    struct ext_divergence_status checksum; /* the replica checksum */
    bool diverged;                         /* a foreign commit was seen, not yet
                                     repaired (applier.h) */
    struct ext_applier_divergence divergence; /* what was seen */
    char repair[200];    /* where the repair stands (repair_describe) */
    uint64_t repairs;    /* divergences repaired since start */
    bool has_start_scan; /* the start verifies the file: @start_scan is
                            valid */
    struct ext_start_scan_view start_scan; /* where that stands */
    bool has_load;                 /* a raft_load_sql ran: @load is valid */
    struct ext_load_progress load; /* the latest one's progress */
    struct ext_staleness_verdict staleness; /* the lag, and whether reads
                                               are refused as stale */
    struct ext_lease_view lease;            /* the write lease (lease.h) */
    unsigned changes_waiting;               /* membership changes waiting
                                               for it to end (change.h) */
    struct ext_applier_metrics apply;       /* the batches applied (read
                                               by raft_metrics() only) */
    struct ext_request_tally requests;      /* refused, timed-out and
                                               forwarded requests (read by
                                               raft_metrics() only) */
};

struct ext_status; /* opaque */

/* status_new creates the status of a node configured by @cfg (its dial=
 * overrides are copied, shown beside the peers' addresses, which come from
 * the configuration in force) whose build id, as sent in the
 * peer handshake, is @build_id (copied, truncated to
 * RAFT_UV_BUILD_ID_MAX bytes): a peer whose own differs is shown as a
 * warning. Errors: RAFT_NOMEM. Any thread. */
int status_new(const struct ext_config *cfg, const char *build_id,
               struct ext_status **out);

/* status_set_boot says how the node started: @joining (join=, no
 * configuration yet: a non-member is joining, not removed), @forced
 * (force_new_cluster=1 wrote the configuration in force) and @listen, its
 * advertised "host:port" (advertise=, else listen=; copied; warned about
 * while it differs from its address in the configuration in force,
 * status_describe_listen).
 * Call it before the first status_refresh. Thread: the owner, before the
 * loop starts. */
void status_set_boot(struct ext_status *s, bool joining, bool forced,
                     const char *listen);

/* status_describe_listen tells whether server @id, advertising @listen
 * ("host:port": advertise=, else listen=), has another address in @conf, and
 * then writes into @buf (@len bytes) a warning naming both: the other servers
 * dial the one in the configuration (NAT and containers may listen elsewhere
 * on purpose, so it is no error). Pure. */
bool status_describe_listen(raft_id id, const char *listen,
                            const struct raft_configuration *conf, char *buf,
                            size_t len);

/* status_free frees @s. NULL is ignored. */
void status_free(struct ext_status *s);

/* A change of role, term or leader seen by one status_refresh. */
struct ext_status_change {
    int old_role, role;         /* enum raft_role before and after */
    raft_term old_term, term;   /* current term before and after */
    raft_id old_leader, leader; /* known leader before and after, 0 none */
    bool removed;               /* this server is no member any more */
    raft_index conf_index;      /* the configuration's index after */
};

/* status_refresh copies the state of @core and of driver @d (NULL before
 * it runs) into @s: the peers are the other servers of the configuration
 * in force. Returns true, filling @out (may be NULL), when the role, the
 * term, the leader or whether this server was removed changed since the
 * previous refresh. The
 * loop thread (or the owner before the loop starts). */
bool status_refresh(struct ext_status *s, const struct raft *core,
                    struct raft_uv_node *d, struct ext_status_change *out);

/* status_note_commit publishes @core's commit, first, last and persisted
 * indexes ahead of the next status_refresh: the loop calls it before it
 * hands a step's committed entries to the applier, so that raft_status()
 * never shows an applied index above the commit index it shows (the
 * apply thread may apply them, and a caller ask, before the step's
 * status_refresh). The loop thread. */
void status_note_commit(struct ext_status *s, const struct raft *core);

/* status_describe_change writes one line for the log saying what @c is:
 * "became leader of term 3", "follows leader 2 in term 3", "stepped down
 * in term 4, no leader known", ... into @buf (@len bytes). Pure. */
void status_describe_change(const struct ext_status_change *c, char *buf,
                            size_t len);

/* status_describe_removal writes why this server is not a member into
 * @buf (@len bytes): @removed ("removed from the cluster at index N: it no
 * longer campaigns") or joining, with @conf_index the configuration's
 * index. Pure. */
void status_describe_removal(bool removed, raft_index conf_index, char *buf,
                             size_t len);

/* status_removed says whether @core shows this server removed from the
 * cluster now: the configuration in force leaves it out after it was a
 * member at a refresh (or when it did not start joining), and that
 * configuration is committed (a removal not committed yet may still be
 * undone by a new leader; once committed, the leader stops sending to
 * this server an election timeout later, raft_leaving). Writes the
 * configuration's log index into @out_index (0 for the compacted
 * prefix's) when true. The node then takes no writes and refuses reads
 * as stale (exec.h, staleness.h), until a configuration adding it again
 * reaches it. It reads @core, not the last refresh, so that the node
 * tells its callers and its staleness state of a removal before
 * status_refresh publishes it to raft_status(). The loop thread (or the
 * owner before the loop starts). */
bool status_removed(const struct ext_status *s, const struct raft *core,
                    raft_index *out_index);

/* status_role returns the role last seen (enum raft_role). Any thread. */
int status_role(struct ext_status *s);

/* status_leader returns the leader last seen, 0 for none. Any thread. */
raft_id status_leader(struct ext_status *s);

/* status_log_full says whether the log has refused writes for lack of
 * space for an election timeout or longer (the node stopped leading,
 * raft_storage_stalled), as last seen, and copies why into @reason (@len
 * bytes; may be NULL). A log full for less (compaction frees it in a
 * moment) reads false: new writes queue. Any thread. */
bool status_log_full(struct ext_status *s, char *reason, size_t len);

/* status_note_failure copies why the storage of driver @d failed
 * (raft_uv_node_failure) into @s once it has: the node then neither
 * writes, votes nor acknowledges until restarted. Call it on every tick:
 * a failed driver steps no more, so status_refresh no longer runs. Loop
 * thread. */
void status_note_failure(struct ext_status *s, struct raft_uv_node *d);

/* status_failure says whether the node's storage failed, as last noted,
 * and then copies why into @why (@len bytes; may be NULL). Any thread. */
bool status_failure(struct ext_status *s, char *why, size_t len);

/* What raft_metrics() shows of a peer. */
struct ext_status_peer_view {
    raft_id id;        /* the peer */
    bool connected;    /* the outgoing connection is up */
    bool has_progress; /* match is valid (this node leads) */
    raft_index match;  /* its match index, the leader's view */
};

/* The figures of the last status_refresh that raft_metrics() shows: a
 * copy of the snapshot raft_status() renders, no second source. */
struct ext_status_view {
    raft_id id;                                       /* this server */
    int role;                                         /* enum raft_role */
    raft_term term;                                   /* current term */
    raft_id leader;                                   /* 0 for none */
    raft_index commit;                                /* commit index */
    raft_index first;                                 /* first log index */
    raft_index last;                                  /* last log index */
    raft_index persisted;                             /* last durable one */
    struct ext_status_peer_view peers[EXT_MAX_NODES]; /* the other servers
                                                          of the
                                                          configuration */
    unsigned n_peers;                                 /* entries used */
    struct raft_uv_node_stats stats; /* the driver's counters */
    bool log_full;                   /* the log refuses writes now */
    bool failed;                     /* the storage failed (log_failed) */
    bool removed;                    /* removed from the cluster by a
                                        committed configuration */
};

/* status_view copies the figures of the last refresh of @s into @out.
 * Any thread. */
void status_view(struct ext_status *s, struct ext_status_view *out);

/* status_json renders @s with @extra as a JSON object text (malloc'd, the
 * caller frees it), or returns NULL when out of memory. Fields are listed
 * at ext_node_status (node.h). Any thread. */
char *status_json(struct ext_status *s, const struct ext_status_extra *extra);

#endif /* EXT_STATUS_H */
