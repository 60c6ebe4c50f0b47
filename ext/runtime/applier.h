/* The apply thread: takes committed entries from the loop thread and
 * applies them, in order, to the SQLite state machine (sql.h) in batches,
 * then hands each result to the node's callers. It owns the apply
 * connection, the queue of committed entries and the applied and durable
 * indexes; other threads ask it through these functions. */

#ifndef EXT_APPLIER_H
#define EXT_APPLIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../raft/histogram.h"
#include "../../raft/persist.h"
#include "../../raft/raft.h"
#include "../../sql/sql.h"
#include "node_log.h"
#include "start_scan.h"

/* What the apply thread calls back, with @data. */
struct ext_applier_hooks {
    void *data;
    /* A batch was applied: @n entries (@entries, data NULL for a no-op)
     * and their results; @last is the new applied index. The apply
     * thread, holding no lock of the applier. */
    void (*applied)(void *data, const struct sql_fsm_entry *entries,
                    const struct sql_result *results, unsigned n,
                    raft_index last);
    /* Whether the next batch must start at once (this node leads, or a
     * caller waits on it) instead of keeping follower_apply_ms. The apply
     * thread, holding the applier's lock: it must not call the applier. */
    bool (*apply_now)(void *data);
    /* The state machine holds cluster id @id (sql.h, "The cluster id"),
     * as read after a batch that applied a cluster id entry, or after a
     * snapshot install (all zero when it holds none). The apply thread,
     * or the thread that installed; no lock of the applier held. May be
     * NULL. */
    void (*cluster_id)(void *data, const uint8_t id[SQL_CLUSTER_ID_LEN]);
    /* A snapshot was installed into @fsm (applier_install): its applied
     * index and replica checksum are the snapshot's. The thread that
     * installed, while nothing applies: it may read @fsm. May be NULL. */
    void (*installed)(void *data, struct sql_fsm *fsm);
};

/* Settings of the apply thread. */
struct ext_applier_config {
    unsigned follower_apply_ms;    /* a follower's pace between batches, ms,
                                    0 for none */
    uint64_t snapshot_threshold;   /* checkpoint after a batch when the
                                    durable index lags this / 2 entries */
    char mark_path[4200];          /* where a divergence is recorded, so a
                                    restart keeps it ("" for nowhere):
                                    written when one is seen, removed by
                                    the install that ends it */
    char notice_path[4200];        /* beside the database, readable by the
                                    other processes' guards while this node
                                    runs diverged ("" for none): written
                                    with the reason when one is seen or
                                    read at start, removed by the install
                                    that ends it and at stop
                                    (attach_sock_diverged reads it) */
    char stopped_path[4200];       /* the record of a clean stop ("" for
                                    none, stopped.h): read and removed at
                                    start, where a missing or differing one
                                    makes the start verify the file
                                    against the running checksum in the
                                    background (start_scan.h: the node
                                    serves meanwhile), a mismatch marking
                                    the replica diverged (unless @next
                                    explains it); written at a stop that
                                    is not diverged, once that
                                    verification found the file equal */
    const struct raft_entry *next; /* the stored entry after the applied
                                    index and the no-ops that follow it
                                    (sql_fsm_apply records none alone),
                                    at @next_index, or NULL: a plain write's
                                    changeset whose writer's commit landed
                                    before this node recorded it (a writer
                                    killed in between) explains a
                                    mismatch the start's scan finds at the
                                    applied index, which is then checked
                                    again once the entry is applied
                                    (borrowed for applier_start only) */
    raft_index next_index;         /* @next's index; when @next is NULL,
                                    the first index past the applied one
                                    and the stored no-ops after it (0:
                                    the applied index + 1) */
    unsigned start_next_ms;        /* when the start's verification finds
                                    a mismatch and @next is NULL (this
                                    node's log holds no entry after the
                                    applied index yet: the writer's entry
                                    reached a quorum without it), how long
                                    to wait for that entry before marking
                                    the replica diverged, ms (0: 10,000) */
    char db_path[4200];            /* the database file (for stopped_path) */
    char settings_path[4200];      /* beside the database, the cluster-wide
                                    settings in force for the guards of
                                    every process ("" for none): written
                                    at start and before the callers of
                                    a batch that changed them are
                                    answered (again at each batch or idle
                                    second while a write fails), removed
                                    at stop (attach_sock_settings reads
                                    it) */
};

struct ext_applier; /* opaque */

/* applier_mark_diverged marks the replica diverged for @reason (copied;
 * what raft_status() and the record at cfg->mark_path show), as a
 * foreign commit does: nothing applies until a snapshot install repairs
 * it; logged at ERROR once. Nothing when it is diverged already.
 * Thread: any. */
void applier_mark_diverged(struct ext_applier *a, const char *reason);

/* applier_start takes ownership of the open state machine @fsm and starts the
 * apply thread on it with @cfg and @hooks (both copied); a divergence recorded
 * at cfg->mark_path by an earlier run holds it diverged at once; lines and
 * errors go to @log, which must outlive the applier. Writes *out only on
 * success; on failure @fsm is still the caller's. Errors: RAFT_NOMEM (also
 * when the thread cannot start). Thread: any. */
int applier_start(struct sql_fsm *fsm, const struct ext_applier_config *cfg,
                  const struct ext_applier_hooks *hooks,
                  struct ext_node_log *log, struct ext_applier **out);

/* applier_start_scan copies into *@out where the start's verification of
 * the file stands (start_scan.h) and returns true, or returns false when
 * this start needed none (a clean stop recorded an unchanged file, a new
 * database, the checksum off, a replica diverged already). Any thread. */
bool applier_start_scan(struct ext_applier *a, struct ext_start_scan_view *out);

/* applier_start_scan_pending says whether the start's verification of the
 * file has not ended yet (start_scan_pending). Any thread. */
bool applier_start_scan_pending(struct ext_applier *a);

/* applier_stop stops the apply thread, interrupting its running batch
 * (rolled back: a restart applies it again), drops the queued entries,
 * closes the state machine and frees @a. Thread: any but
 * the apply thread; no other call on @a may run or follow. */
void applier_stop(struct ext_applier *a);

/* applier_push queues committed @entries (@n long, references taken) for
 * the apply thread. Errors: RAFT_NOMEM (nothing queued). Loop thread. */
int applier_push(struct ext_applier *a, const struct raft_entry *entries,
                 unsigned n);

/* applier_hurry_begin makes the apply thread start its next batches at
 * once instead of keeping follower_apply_ms, until the matching
 * applier_hurry_end: a caller waits on this node for an index to be
 * applied (raft_barrier), as hooks.apply_now does for a waiting write.
 * It wakes a batch already waiting for its pace. Any thread; calls nest
 * (each begin needs its end). */
void applier_hurry_begin(struct ext_applier *a);

/* applier_hurry_end ends one applier_hurry_begin. Any thread. */
void applier_hurry_end(struct ext_applier *a);

/* applier_lease_hold holds the apply thread for a write lease (lease.h):
 * no batch takes an entry at or above index @from, and the idle check
 * for foreign commits does not run, until applier_lease_end. The
 * lease's writer then holds the file's write lock, which a batch would
 * wait for. Any thread (the loop, at the grant). */
void applier_lease_hold(struct ext_applier *a, raft_index from);

/* applier_lease_end ends the hold; with @landed (a changeset entry the
 * lease proposed, 0 for none) the idle check stays off until @landed is
 * applied: the writer's own commit may reach the file first (its batch
 * then only records it, sql/changeset_apply.c). @marks (copied; NULL
 * when not known) are what the writer read of the file's WAL-index
 * header under its write lock, handed to the state machine with
 * @landed's batch (sql_fsm_writer_marks): without them that batch
 * compares the file with the running checksum. Any thread. */
void applier_lease_end(struct ext_applier *a, raft_index landed,
                       const struct sql_wal_marks *marks);

/* applier_wal_base_is says whether @hdr, the WAL-index header a plain
 * writer read as it took the file's write lock under a lease, is the one
 * the state machine read of the file holding only the node's own
 * commits (sql_fsm_wal_base): false when they differ, or no such reading
 * is known (another connection committed, or checkpointed with TRUNCATE,
 * since the node last looked: the writer may have read a foreign state).
 * Any thread (a lease's holder, before its commit is proposed). */
bool applier_wal_base_is(struct ext_applier *a,
                         const unsigned char hdr[SQL_WAL_HDR_LEN]);

/* applier_applied returns the last applied index. Any thread. */
uint64_t applier_applied(const struct ext_applier *a);

/* applier_committed returns the last index known committed here: the
 * last one handed to the applier (applier_push), or the applied index
 * when that is higher (an install). Any thread. */
uint64_t applier_committed(const struct ext_applier *a);

/* applier_wait_applied waits until this node applied @index (woken as
 * each batch ends), at most @timeout_ms. Returns whether it did. Any
 * thread but the apply thread. */
bool applier_wait_applied(struct ext_applier *a, raft_index index,
                          unsigned timeout_ms);

/* applier_durable returns the applied index that is durable in the
 * database file (sql.h, "The durable point"). Any thread. */
uint64_t applier_durable(const struct ext_applier *a);

/* applier_failed says whether the last batch failed on an environmental
 * error (it is retried with backoff until it applies). Any thread. */
bool applier_failed(const struct ext_applier *a);

/* applier_error copies why the last batch failed into @out (@len bytes,
 * always NUL-terminated), "" while applying works. Any thread. */
void applier_error(struct ext_applier *a, char *out, size_t len);

/* applier_request_checkpoint asks the apply thread to checkpoint soon,
 * between batches, so that the durable index catches up with the applied
 * one (when the log is full). Any thread. */
void applier_request_checkpoint(struct ext_applier *a);

/* A divergence: a commit the node did not make reached its database. */
struct ext_applier_divergence {
    uint64_t since_ms;       /* when it was seen, ms since the epoch */
    uint64_t at_index;       /* seen before applying this index */
    uint64_t repaired_index; /* the snapshot index that last ended one, 0 */
    char reason[512];        /* what was seen (sql_fsm_foreign_check) */
};

/* applier_diverged says whether the replica is diverged: a foreign commit
 * was seen (inside a batch, or by the idle check once a second), so
 * nothing applies until applier_install replaces the database. Copies
 * what was seen into @out (may be NULL; kept after a repair, with
 * repaired_index set). Any thread. */
bool applier_diverged(struct ext_applier *a,
                      struct ext_applier_divergence *out);

/* applier_any_diverged says whether any applier of the process is
 * diverged (one atomic load: the write guard asks it for every column a
 * host statement reads). Any thread. */
bool applier_any_diverged(void);

/* applier_repairs returns how many installs ended a divergence since
 * start. Any thread. */
uint64_t applier_repairs(const struct ext_applier *a);

/* What the apply thread measured of the batches it applied, for
 * raft_metrics(). */
struct ext_applier_metrics {
    struct raft_histogram apply_seconds; /* the time of each batch applied
                                            (one SQLite transaction, its
                                            commit included), s */
    struct raft_histogram batch_entries; /* entries per batch applied */
};

/* applier_metrics copies what the apply thread measured into @out (under
 * the applier's mutex, which the apply thread takes once per batch
 * anyway). Any thread. */
void applier_metrics(struct ext_applier *a, struct ext_applier_metrics *out);

/* applier_installs returns how many snapshots @a installed since start.
 * A judgement of the replica's content made from records taken after
 * this was read is marked with applier_mark_diverged_since. Any
 * thread. */
uint64_t applier_installs(const struct ext_applier *a);

/* applier_installed_index returns the last index of the snapshot @a
 * installed last since start (0 for none). The core learns of an install
 * after the state machine (the log half of the storage runs after it):
 * until the core's snapshot index reaches this, evidence the core judged
 * against its old log may concern content already replaced. Any
 * thread. */
uint64_t applier_installed_index(const struct ext_applier *a);

/* applier_mark_diverged_since marks @a diverged with @reason, as
 * applier_mark_diverged does, unless a snapshot was installed since
 * applier_installs gave @installs: the content judged is gone (an
 * install resets the records the judgement came from before it ends a
 * divergence), so a repaired replica is not marked again for it. Any
 * thread. */
void applier_mark_diverged_since(struct ext_applier *a, uint64_t installs,
                                 const char *reason);

/* applier_persist_fsm fills @out with the state machine half of the
 * driver's storage (raft/persist.h) over @a, which must outlive the
 * driver: snapshot creation (applier_snapshot_create), the configuration
 * a snapshot file holds, and installs. One create or install runs at a
 * time. An install is the whole install of a received snapshot file, as
 * the state machine does it, in one step: when the snapshot covers the
 * applied index (above it, or at it while the replica is diverged: a
 * repair), it holds the apply thread off (applier_hold), asks again (the
 * batch that was running may have applied past it: an older snapshot
 * never replaces a newer database), installs it (applier_install: a
 * divergence ends) and releases the apply thread, dropping the queued
 * entries the snapshot covers (applier_release); it says whether it
 * installed, and a snapshot that does not cover changes nothing. Its
 * errors: RAFT_CORRUPT (refused), RAFT_BUSY (not installed for now: an
 * I/O error, a full disk or no memory under an unchanged database), both
 * leaving everything unchanged, with the message saying why; it runs on
 * a libuv thread-pool thread (the storage job that installs), never
 * concurrently with another install or applier_hold. Thread: any, before
 * the driver starts. */
void applier_persist_fsm(struct ext_applier *a, struct raft_persist_fsm *out);

/* The three steps of an install (applier_persist_fsm), its own and the
 * tests'. */

/* applier_hold keeps the apply thread off the apply connection: it returns
 * once the running batch, if any, has ended, and no batch starts until
 * applier_release. Thread: a libuv thread-pool thread (the storage job
 * that installs a snapshot); one hold at a time. */
void applier_hold(struct ext_applier *a);

/* applier_install installs snapshot file @path into the database, between
 * applier_hold and applier_release, and gives the index and term it
 * reflects; the applied and durable indexes become that index, and a
 * divergence ends (applier_diverged).
 * Errors: RAFT_CORRUPT (refused: the database is unchanged), RAFT_IOERR,
 * RAFT_NOMEM; @errmsg (@errmsg_len bytes) says why. Thread: the holder. */
int applier_install(struct ext_applier *a, const char *path,
                    uint64_t *out_index, uint64_t *out_term, char *errmsg,
                    size_t errmsg_len);

/* applier_release ends a hold: queued entries at or below @covered (0 for
 * none) are dropped, as the installed snapshot holds them, and the apply
 * thread resumes. Thread: the holder. */
void applier_release(struct ext_applier *a, uint64_t covered);

/* applier_copy_check verifies the copy of the database at @path (a
 * snapshot, a raft_backup() file) against the running checksum stored in
 * it: a foreign commit the apply thread has not seen yet (it looks before
 * each batch and once a second) would otherwise travel in the copy. A
 * difference marks this replica diverged (applier_mark_diverged) and
 * returns RAFT_DIVERGED, @errmsg (@errmsg_len bytes) naming @what ("a
 * snapshot"), the index and the first table that differs; the copy is
 * left for the caller to remove. Without stored sums (checksum=off) or
 * when the copy cannot be read, nothing is checked: 0. Thread: any but
 * the apply thread; O(the copy) (a full scan). */
int applier_copy_check(struct ext_applier *a, const char *path,
                       const char *what, char *errmsg, size_t errmsg_len);

/* applier_set_copy_gate makes the snapshots of @a's database begin their
 * read transaction through @gate (sql_fsm_set_copy_gate; copied). Thread:
 * before the driver starts. */
void applier_set_copy_gate(struct ext_applier *a,
                           const struct sql_copy_gate *gate);

/* applier_set_pace paces the snapshots' copies and installs of @a's
 * database at @pace (sql_fsm_set_pace; copied). Thread: before the
 * driver starts. */
void applier_set_pace(struct ext_applier *a, const struct sql_pace *pace);

/* applier_snapshot_create writes a snapshot of the database to the new file
 * @path and gives the index and term it reflects (sql_fsm_snapshot_create,
 * which never blocks the apply thread). Errors: RAFT_DIVERGED (the replica is
 * diverged: a copy of it would spread the foreign write), those of
 * sql_fsm_snapshot_create, @errmsg says why. Thread: a libuv thread-pool
 * thread, never concurrently with an install. */
int applier_snapshot_create(struct ext_applier *a, const char *path,
                            uint64_t *out_index, uint64_t *out_term,
                            char *errmsg, size_t errmsg_len);

#endif /* EXT_APPLIER_H */
