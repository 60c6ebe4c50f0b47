/* The node's durable log: the log directory (its lock and snapshots
 * folder), the LMDB log (lmdb_log/) behind the driver's storage interface,
 * the compaction policy, the repairs at start, and the log half of a
 * snapshot install. The only file of ext/ that calls lmdb_log_*. */

#ifndef EXT_STORE_H
#define EXT_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "../../raft/raft.h"
#include "../../raft/uv_node.h"
#include "applier.h"
#include "node_log.h"

/* What the log holds at start, for raft_restore. */
struct ext_store_state {
    struct raft_hard_state hs;  /* term and vote */
    raft_index snap_index;      /* snapshot boundary: last compacted */
    raft_term snap_term;        /* its term */
    struct raft_entry *entries; /* the stored entries, n_entries, owned:
                                   store_state_free */
    unsigned n_entries;
};

/* Settings of the store. */
struct ext_store_config {
    const char *dir;              /* log directory (copied) */
    const char *db_path;          /* the database file, for messages
                                     (copied) */
    uint64_t log_max_bytes;       /* LMDB map ceiling, bytes */
    uint64_t snapshot_threshold;  /* compact once this many entries are
                                     past the boundary */
    uint64_t trailing_entries;    /* entries kept behind the durable index */
    unsigned election_timeout_ms; /* a follower heard from within it is
                                     live: the compaction keeps what it
                                     still needs (store_plan_compaction) */
};

struct ext_store; /* opaque */

/* store_open creates the log directory if needed (mode 0700), takes an
 * exclusive lock on <dir>/node.lock, so two processes never run a node on
 * the same log (and database), opens the LMDB log and creates
 * <dir>/snapshots. Lines go to @log, which must outlive the store. Writes
 * *out only on success; on failure nothing is left open, a log
 * directory it created is removed, and @errmsg
 * (@errmsg_len bytes) names the cause, starting with "dir: ".
 * Errors: RAFT_IOERR, RAFT_BUSY (another process holds the lock), and
 * lmdb_log_open's. Thread: any. */
int store_open(const struct ext_store_config *cfg, struct ext_node_log *log,
               struct ext_store **out, char *errmsg, size_t errmsg_len);

/* store_close closes the log, releases the lock and frees @s. NULL is
 * ignored. Thread: any, once the driver stopped. */
void store_close(struct ext_store *s);

/* store_discard is store_close after a start that failed: when this
 * store_open created the log directory, it also removes it and all in it
 * (the LMDB files, node.lock, snapshots/), so a failed start leaves
 * nothing behind; a directory that existed before (a node's restart) is
 * never touched. A failed store_open already removed what it created.
 * NULL is ignored. Thread: any, once the driver stopped (or never ran). */
void store_discard(struct ext_store *s);

/* store_load reads the log into @out for a state machine applied up to
 * @applied (an entry of term @applied_term), repairing what a crash or
 * damage left: a database ahead of a log that was not reset after a
 * snapshot install (the log is reset after the database), and an entry
 * whose checksum fails (compacted away when the database holds it, else
 * the log is dropped from it on; the leader sends those again).
 * Errors: RAFT_INVALID (the database was applied beyond a new log: they do
 * not belong together), RAFT_CORRUPT (the log was compacted beyond the
 * database, or is unreadable), RAFT_IOERR, RAFT_NOMEM; @errmsg says why.
 * Thread: any, before the driver starts. */
int store_load(struct ext_store *s, uint64_t applied, uint64_t applied_term,
               struct ext_store_state *out, char *errmsg, size_t errmsg_len);

/* store_entry reads stored entry @index into *@out, its data a new
 * reference (raft_buf_unref it). Errors: RAFT_NOTFOUND (not stored),
 * RAFT_COMPACTED, RAFT_CORRUPT, RAFT_IOERR, RAFT_NOMEM. Thread: any,
 * before the driver starts. */
int store_entry(struct ext_store *s, raft_index index, struct raft_entry *out);

/* store_is_new tells in *@out whether the log was never written: no term,
 * no vote, no entry and no snapshot boundary (a log directory made by
 * this start, or one whose files were removed). Errors: RAFT_CORRUPT,
 * RAFT_IOERR (the log cannot be read); @errmsg (@errmsg_len bytes) says
 * why. Thread: any, before the driver starts. */
int store_is_new(struct ext_store *s, bool *out, char *errmsg,
                 size_t errmsg_len);

/* store_write makes @hs and @entries (@n, following the stored log)
 * durable in one write, before the driver starts: the bootstrap entry of
 * a new cluster, or the configuration force_new_cluster=1 writes.
 * Errors: lmdb_log_append's (RAFT_INVALID, RAFT_NOSPACE, RAFT_IOERR,
 * RAFT_NOMEM); @errmsg (@errmsg_len bytes) says why. Thread: any, before
 * the driver starts. */
int store_write(struct ext_store *s, const struct raft_hard_state *hs,
                const struct raft_entry *entries, unsigned n, char *errmsg,
                size_t errmsg_len);

/* store_write_snapshot sets the empty log's snapshot boundary to
 * (@index, @term), then makes @hs durable, before the driver starts: a
 * cluster bootstrapped from a file (bootstrap_from=), whose database
 * holds that snapshot already. Errors: lmdb_log_reset's and
 * lmdb_log_append's (RAFT_INVALID, RAFT_NOSPACE, RAFT_IOERR); @errmsg
 * (@errmsg_len bytes) says why. Thread: any, before the driver starts. */
int store_write_snapshot(struct ext_store *s, const struct raft_hard_state *hs,
                         raft_index index, raft_term term, char *errmsg,
                         size_t errmsg_len);

/* store_cluster_id reads the cluster id kept in the log directory into
 * @out (all zero for none). Errors: lmdb_log_cluster_id's (RAFT_CORRUPT,
 * RAFT_IOERR); @errmsg says why. Thread: any, before the driver starts. */
int store_cluster_id(struct ext_store *s, uint8_t out[RAFT_UV_CLUSTER_ID_LEN],
                     char *errmsg, size_t errmsg_len);

/* store_server_id reads into *@out the id of the server the log
 * directory belongs to, 0 for none stored yet. Errors:
 * lmdb_log_server_id's (RAFT_CORRUPT, RAFT_IOERR); @errmsg says why.
 * Thread: any, before the driver starts. */
int store_server_id(struct ext_store *s, uint64_t *out, char *errmsg,
                    size_t errmsg_len);

/* store_server_id_write keeps @id (not 0) as the id of the server the log
 * directory belongs to, durably. Errors: lmdb_log_set_server_id's
 * (RAFT_NOSPACE, RAFT_IOERR); @errmsg says why. Thread: any, before the
 * driver starts. */
int store_server_id_write(struct ext_store *s, uint64_t id, char *errmsg,
                          size_t errmsg_len);

/* store_cluster_id_write keeps @id in the log directory, durably, before
 * the driver starts. Errors: lmdb_log_set_cluster_id's (RAFT_NOSPACE,
 * RAFT_IOERR); @errmsg says why. Thread: any, before the driver starts. */
int store_cluster_id_write(struct ext_store *s,
                           const uint8_t id[RAFT_UV_CLUSTER_ID_LEN],
                           char *errmsg, size_t errmsg_len);

/* store_cluster_id_set makes @id (copied) the cluster id to keep in the
 * log directory once the driver runs: the next storage job (an append, a
 * compaction or a snapshot install, on the disk thread) writes it, in a
 * durable write of its own, before its own write; a job that cannot
 * write it fails with the reason (and leaves it for the next). So what a
 * storage job queued after this call writes is durable only after the
 * id. Thread: any (the loop thread). */
void store_cluster_id_set(struct ext_store *s,
                          const uint8_t id[RAFT_UV_CLUSTER_ID_LEN]);

/* store_state_free frees what store_load put in @st. */
void store_state_free(struct ext_store_state *st);

/* store_snapshot_dir returns <dir>/snapshots, where the driver writes and
 * receives snapshot files. Any thread. */
const char *store_snapshot_dir(const struct ext_store *s);

/* store_log fills @out with the log half of the driver's storage
 * (raft/persist.h) over this store's LMDB log: appends, compactions, the
 * lookups and resets of the log after a snapshot install, and, first in
 * each job, the cluster id left by store_cluster_id_set. @applier (which
 * must outlive the driver; NULL when store_on_tick is not used) is what
 * the compaction policy asks for the applied and durable indexes; the
 * state machine half is applier_persist_fsm's. Thread: any, before the
 * driver starts. */
void store_log(struct ext_store *s, struct ext_applier *applier,
               struct raft_persist_log *out);

/* What the compaction policy looks at. */
struct ext_store_view {
    raft_index first;     /* the core's first log index */
    raft_index last;      /* its last log index */
    raft_index persisted; /* its last durable index */
    uint64_t applied;     /* the state machine's applied index */
    uint64_t durable;     /* its durable applied index */
    bool log_full;        /* the log refused a write for lack of space */
    uint64_t used_bytes;  /* bytes the stored entries occupy */
    uint64_t budget;      /* the most they may occupy (0: unknown) */
    raft_index hold;      /* leader: the first index of the entries a
                             live follower still needs (those after the
                             last it matched, or, for one that a snapshot
                             is on its way to, after the index the
                             snapshot must reach), which compaction keeps;
                             0: none */
};

/* store_plan_compaction is the compaction policy: it returns the index to
 * compact the log up to, 0 for none, and sets *@out_checkpoint when the
 * apply thread should checkpoint first. Once more than
 * snapshot_threshold entries lie in the log, the target is the durable
 * applied index less trailing_entries (kept for followers a little
 * behind), and below @v->hold (what a live follower still needs: a
 * follower installing a snapshot needs the entries after it, and had
 * they been compacted meanwhile it would need another snapshot, for ever
 * when a snapshot takes longer than the writes need to fill
 * snapshot_threshold), when it lies in the persisted log; when the log
 * is full, or its entries take more than half of what they may (large
 * requests fill the bytes long before the count), the durable index
 * itself, with a checkpoint asked when it lags the applied index,
 * whatever @v->hold says (so a hold costs at most half of log_max_mb).
 * Pure; any thread. */
raft_index store_plan_compaction(const struct ext_store *s,
                                 const struct ext_store_view *v,
                                 bool *out_checkpoint);

/* store_follower_needs is what one follower holds against compaction:
 * the first index it still needs (after the index a snapshot on its way
 * to it must reach, in SNAPSHOT; else after its match index), given its
 * progress @pi, the leader's first index @first and its election timeout
 * @election_ms; 0 when it holds nothing: it needs a compacted entry (a
 * snapshot) already, or it is not live (not heard within @election_ms).
 * A follower in SNAPSHOT holds however long it was silent: installing a
 * large snapshot takes it seconds in which its answers may lag (0.7 s
 * measured at 1 GB), and had the entries after the snapshot been
 * compacted meanwhile it would need another; the core ends SNAPSHOT when
 * the transfer fails or after 10 election timeouts, and the hold costs
 * at most half of log_max_mb (store_plan_compaction). Pure; any
 * thread. */
raft_index store_follower_needs(const struct raft_progress_info *pi,
                                raft_index first, unsigned election_ms);

/* store_on_tick applies the compaction policy to driver @d's core and the
 * applier (the hold from the core's progress of its followers, when it
 * leads): it asks for the checkpoint and queues the compaction
 * (raft_uv_node_compact) that store_plan_compaction names. Loop thread of
 * driver @d. */
void store_on_tick(struct ext_store *s, struct raft_uv_node *d);

#endif /* EXT_STORE_H */
