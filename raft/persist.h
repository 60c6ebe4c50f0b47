/* The storage job queue of a driver (raft.h driver contract), libuv-free:
 * the libuv driver (raft/uv_storage.c) and the deterministic simulation
 * (tests/lib/cluster_disk.c) both run their storage through it.
 *
 * Happy path: raft_persist_merge adds an update's hard state and entries
 * to the open tail job (group commit: one write, one fsync, for all that
 * arrived while the previous job ran), holding the update's messages when
 * its hard state changed (driver rule 1) -> raft_persist_next hands out
 * the head job -> raft_persist_run carries it out on the storage (on the
 * disk thread) -> raft_persist_done (back on the loop thread) says what to
 * do: send the held messages, then step RAFT_EVENT_PERSISTED, then
 * RAFT_EVENT_COMPACT. Compactions (raft_persist_compact) run in order
 * with the writes; a snapshot install (raft_persist_install) is a sealed
 * job of its own, so no write of the old log runs after it unfiltered.
 * Failure modes: an append refused for lack of space (RAFT_NOSPACE,
 * nothing written) stays first in the queue, behind a compaction it
 * carried, which then runs first; the refused job waits (log full) until
 * a compaction is queued (it runs ahead) or raft_persist_retry. A write
 * handed out before an install that runs after it drops its entries at or
 * below the install's index; when the install reset the log it drops all
 * the entries handed out before the install (they belong to the reset
 * log: no PERSISTED for them); and when what remains no longer follows the
 * log it is stale (no PERSISTED). Any other failure is the caller's to
 * handle: the driver stops writing, voting and acknowledging.
 * Threads: raft_persist_run on any one thread at a time (the disk thread),
 * everything else on the caller's loop thread; raft_persist_next and
 * raft_persist_done order the two. */

#ifndef RAFT_PERSIST_H
#define RAFT_PERSIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "raft.h"

/* The log half of a driver's storage: the durable log and hard state.
 * Every function returns 0 or a project error code with a message in
 * @errmsg (@errmsg_len bytes); on an error nothing changed. They run in
 * raft_persist_run, one storage job at a time, in queue order (the libuv
 * driver: on a thread-pool thread).
 *
 * @prepare (may be NULL) runs first in every job that writes (before
 * @append, @compact, or the state machine's install): it makes durable
 * what must precede anything the job writes (ext/runtime/store.c: a cluster id
 * the node adopted); an error fails the job as the write would have
 * (RAFT_NOSPACE: an append waits for room), nothing else done.
 * @append makes @hs (NULL when unchanged) and @entries (@n, after deleting
 * every stored entry with index >= entries[0].index) durable in one step;
 * it returns RAFT_INVALID, changing nothing, when @entries do not follow
 * the stored log (a gap after it, or a start below its first index), and
 * RAFT_NOSPACE, changing nothing, when the log is full.
 * @compact deletes the stored log up to @index (the snapshot boundary);
 * an @index at or below the boundary changes nothing.
 * @entry_term gives the first stored index in *@out_first (the boundary
 * + 1 for an empty log) and the term of the stored entry @index in
 * *@out_term, 0 when the log holds none there; it only reads (an error,
 * e.g. RAFT_IOERR for a damaged entry or RAFT_NOMEM, fails the install
 * before anything changed: RAFT_BUSY, the leader sends it again).
 * @reset deletes every stored entry and makes (@index, @term) the
 * boundary: the log takes appends from @index + 1; the hard state stays.
 * After the state machine installed a snapshot, raft_persist_run changes
 * the log through @entry_term, then @compact or @reset, as
 * raft_snapshot_log_action (raft.h) decides.
 * @compact may be NULL (no compaction); @compact, @entry_term and @reset
 * may be NULL only when the state machine half has no @snapshot_install. */
struct raft_persist_log {
    void *data; /* passed to every function */
    int (*prepare)(void *data, char *errmsg, size_t errmsg_len);
    int (*append)(void *data, const struct raft_hard_state *hs,
                  const struct raft_entry *entries, unsigned n, char *errmsg,
                  size_t errmsg_len);
    int (*compact)(void *data, raft_index index, char *errmsg,
                   size_t errmsg_len);
    int (*entry_term)(void *data, raft_index index, raft_index *out_first,
                      raft_term *out_term, char *errmsg, size_t errmsg_len);
    int (*reset)(void *data, raft_index index, raft_term term, char *errmsg,
                 size_t errmsg_len);
};

/* The state machine half of a driver's storage: its snapshots. Every
 * function returns 0 or a project error code with a message in @errmsg
 * (@errmsg_len bytes); on an error nothing changed.
 *
 * @snapshot_create (leader) writes a consistent snapshot of the state
 * machine to file @path and gives the index and term it reflects; it may
 * run concurrently with the storage jobs (raft_persist does not call it).
 * @snapshot_install (follower, in raft_persist_run, in queue order with
 * the log's writes) is the whole install as the state machine sees it,
 * one step: it installs the verified snapshot @path (through @index of
 * @term) into the state machine, atomically for readers, when it covers
 * the state machine's applied index (above it; a state machine that
 * knows itself diverged may also take one at it), and sets
 * *@out_installed; a snapshot that does not cover changes nothing
 * (*@out_installed false, 0 returned). raft_persist_run then changes the
 * log (struct raft_persist_log), the driver steps
 * RAFT_EVENT_SNAPSHOT_INSTALLED, and raft_persist drops the entries of
 * later queued writes that the install made stale. It returns
 * RAFT_CORRUPT or RAFT_INVALID for a snapshot it refuses and RAFT_BUSY
 * for one it could not install for now (a full disk), both with nothing
 * changed (the leader sends it again); any other error means the state
 * machine may be part installed, and the driver stops writing (so does
 * a log that cannot follow it: raft_persist_run's RAFT_IOERR).
 * @snapshot_configuration (follower, may be NULL) reads the cluster
 * configuration that the verified snapshot @path reflects into @out, just
 * before @snapshot_install, in the same job; it returns RAFT_NOTFOUND when
 * the snapshot holds none (made before configurations were stored: the
 * core keeps the one it has), RAFT_CORRUPT for one that does not decode
 * (the snapshot is refused, nothing installed) and RAFT_BUSY when it could
 * not read the file for now (nothing installed, the leader sends it
 * again).
 * Each may be NULL, disabling snapshots (and, for the last, the
 * snapshot's configuration). */
struct raft_persist_fsm {
    void *data; /* passed to every function */
    int (*snapshot_create)(void *data, const char *path, raft_index *index,
                           raft_term *term, char *errmsg, size_t errmsg_len);
    int (*snapshot_install)(void *data, const char *path, raft_index index,
                            raft_term term, bool *out_installed, char *errmsg,
                            size_t errmsg_len);
    int (*snapshot_configuration)(void *data, const char *path,
                                  struct raft_configuration *out, char *errmsg,
                                  size_t errmsg_len);
};

/* A driver's storage: the log half and the state machine half. */
struct raft_persist_storage {
    struct raft_persist_log log;
    struct raft_persist_fsm fsm;
};

/* A received snapshot to install. */
struct raft_persist_install {
    char path[4096];        /* its file (a name the storage knows) */
    raft_index index;       /* its last index */
    raft_term last_term;    /* term of that entry */
    uint64_t checksum;      /* expected checksum of the file, for the
                              driver to verify (raft_persist ignores it) */
    raft_id leader;         /* the leader that sent it */
    raft_term leader_term;  /* in this term */
    bool has_configuration; /* @configuration was read from the file
                               (snapshot_configuration) */
    struct raft_configuration configuration; /* the snapshot's, for
                               RAFT_EVENT_SNAPSHOT_INSTALLED */
};

/* One storage job: an append (the merged hard state and entries of the
 * updates that arrived while the previous job ran, with the messages that
 * may only be sent once they are durable), possibly a compaction, or,
 * alone in its job, a snapshot install. The queue owns it until
 * raft_persist_done hands it back. Read-only for callers but for @rc and
 * @errmsg, which a caller may set instead of raft_persist_run (a snapshot
 * refused before the install, a cancelled run).
 * Invariant: a sealed job takes no more merges. */
struct raft_persist_job {
    bool has_hs;                /* write hs */
    struct raft_hard_state hs;  /* term and vote */
    struct raft_entry *entries; /* owned references, n_entries */
    unsigned n_entries;
    unsigned cap_entries;
    struct raft_message *held; /* deep copies, n_held */
    unsigned n_held;
    unsigned cap_held;
    raft_index compact_to;            /* compact the log up to here, or 0 */
    bool install;                     /* install @snap */
    struct raft_persist_install snap; /* the snapshot, when @install */
    bool sealed;                      /* no more merges */
    bool refused;                     /* its append was refused with
                                      RAFT_NOSPACE (or it is half of one
                                      that was): it waits for room */
    bool after_install;               /* it was queued when an install
                                      completed: its entries may be stale */
    unsigned n_old;                   /* leading entries handed out before an
                                      install that reset the log: dropped */
    raft_index boundary;              /* the install boundary when handed out */
    unsigned skip;                    /* leading entries dropped as stale */
    bool stale;                       /* the write was dropped after an
                                      install: no PERSISTED */
    int rc;                           /* result */
    char errmsg[256];                 /* its message on failure */
    struct raft_persist_job *next;    /* queue */
};

/* The queue. Embed it and call raft_persist_init. */
struct raft_persist {
    struct raft_persist_job *head; /* runs first */
    struct raft_persist_job *tail; /* takes merges unless sealed or
                                      running */
    bool running;                  /* the head job was handed out */
    bool compact_queued;           /* a compaction is queued */
    bool log_full;                 /* the head job was refused with
                                      RAFT_NOSPACE: it waits */
    raft_index install_boundary;   /* last index of the last snapshot
                                      installed, 0 for none */
};

/* How a job ended (raft_persist_done). */
enum raft_persist_outcome {
    RAFT_PERSIST_DONE = 1,     /* it succeeded: carry out the result */
    RAFT_PERSIST_REQUEUED = 2, /* refused with RAFT_NOSPACE, nothing
                                  written: it is back in the queue */
    RAFT_PERSIST_FAILED = 3,   /* it failed (the job's @rc): for an append
                                  or compaction the caller must stop
                                  writing */
};

/* What to do once a job finished, in this order: send @messages, step
 * RAFT_EVENT_PERSISTED when @persisted, step RAFT_EVENT_COMPACT when
 * @compact_index > 0 (all only for DONE). Pointers are into the job. */
struct raft_persist_result {
    int outcome;                                /* enum raft_persist_outcome */
    int rc;                                     /* the job's code, 0 for DONE */
    const char *errmsg;                         /* its message when @rc != 0 */
    const struct raft_persist_install *install; /* an install job (DONE:
                                                   installed; FAILED:
                                                   refused), else NULL */
    bool reset;         /* an install DONE: the core resets its
                                     log (raft_snapshot_resets_log) */
    bool wrote;         /* it wrote hard state or entries */
    unsigned n_entries; /* entries it carried (the dropped stale
                                     ones included) */
    const struct raft_message *messages; /* held messages, n_messages */
    unsigned n_messages;
    bool persisted;             /* step PERSISTED with: */
    raft_index persisted_index; /* its last entry's index */
    raft_term persisted_term;   /* and term */
    raft_index compact_index;   /* step COMPACT with it, 0 for none */
    unsigned n_skipped;         /* leading entries dropped: at or below
                                     the install boundary, or handed out
                                     before an install that reset the log */
    bool stale;                 /* its entries were dropped: they no
                                     longer followed the log */
    bool after_install;         /* the job's after_install */
    bool log_full;              /* REQUEUED: the refused job is first and
                                     waits; false: its compaction runs
                                     first (call raft_persist_next) */
};

/* raft_persist_init makes @p an empty queue. Loop thread. */
void raft_persist_init(struct raft_persist *p);

/* raft_persist_close frees every queued job; no job may run (a job handed
 * out by raft_persist_next and not given to raft_persist_done is freed
 * too: it must not run any more). @p is then empty. Loop thread. */
void raft_persist_close(struct raft_persist *p);

/* raft_persist_merge adds the durable work of update @u to the open tail
 * job, or to a new job when the tail is sealed or running: the hard state
 * (when @u->hard_state_changed), the entries (replacing those of the job
 * at or after the first one: a conflicting suffix; the job's write
 * deletes older jobs' ones) with buf references taken, and, when the hard
 * state changed, deep copies of @u's messages, held until the job is
 * durable (driver rule 1); the caller sends the other updates' messages
 * at once. Merge only updates with a changed hard state or entries: an
 * update with neither leaves an empty job, which raft_persist_next drops.
 * While the queue waits for space (log full), a changed hard state goes
 * ahead of the waiting append, in a job of its own with every held
 * message, and the wait ends so that it is written at once: a full log
 * still takes a new term and vote (the store's reserve), and elections go
 * on. A refused append with entries likewise lets the queue's newest hard
 * state go first (raft_persist_done).
 * Errors: RAFT_NOMEM (the job may hold part of the update: the caller
 * must stop writing). Loop thread. */
int raft_persist_merge(struct raft_persist *p, const struct raft_update *u);

/* raft_persist_install queues the install of snapshot @in (copied) alone
 * in a sealed job. Errors: RAFT_NOMEM. Loop thread. */
int raft_persist_install(struct raft_persist *p,
                         const struct raft_persist_install *in);

/* raft_persist_compact queues the compaction of the stored log through
 * @index, in order with the writes (in the open tail job), or, when the
 * queue waits after a refused append and nothing runs, first, ahead of
 * that append (it only deletes entries the state machine holds), which
 * ends the wait. The caller checks @index against the core (at most the
 * persisted index, at least the first index). Errors: RAFT_BUSY (a
 * compaction is queued already), RAFT_NOMEM. Loop thread. */
int raft_persist_compact(struct raft_persist *p, raft_index index);

/* raft_persist_log_full says whether the queue waits after an append
 * refused with RAFT_NOSPACE. Loop thread. */
bool raft_persist_log_full(const struct raft_persist *p);

/* raft_persist_room_wanted says whether an append refused with
 * RAFT_NOSPACE is still queued, even while other jobs (a new hard state,
 * a compaction) run ahead of it: the log is full for what the node must
 * write. Loop thread. */
bool raft_persist_room_wanted(const struct raft_persist *p);

/* raft_persist_retry ends the wait after a refused append, when nothing
 * runs, so that raft_persist_next hands the refused job out again (the
 * driver calls it once a second). Returns whether it did. Loop thread. */
bool raft_persist_retry(struct raft_persist *p);

/* raft_persist_next hands out the head job to run, or NULL when a job
 * runs, the queue waits (log full) or is empty; empty jobs at the head are
 * dropped first. The job belongs to the queue: run it with
 * raft_persist_run, then give it to raft_persist_done; until then no other
 * job is handed out, and merges go to a later job. Loop thread. */
struct raft_persist_job *raft_persist_next(struct raft_persist *p);

/* raft_persist_run carries out job @j on storage @s and sets @j->rc and
 * @j->errmsg: an install calls @s->fsm.snapshot_configuration, then
 * @s->log.prepare, then @s->log.entry_term at the snapshot's index (an
 * error there: RAFT_BUSY, nothing changed), then @s->fsm.snapshot_install,
 * and, when that installed the snapshot, changes the log by paper §7
 * (@s->log.compact or @s->log.reset, as raft_snapshot_log_action decides
 * from the term read before; a snapshot below the log's first index
 * changes nothing; a failure there: RAFT_IOERR, the state machine ahead
 * of the log);
 * otherwise, @s->log.prepare first, then, when it has a hard state or
 * entries, @s->log.append, without the entries handed out
 * before an install that ran first (those at or below its index, and,
 * when it reset the log, all of them), and, when the rest no longer
 * follows the log (@append refuses them with RAFT_INVALID after an
 * install), with none (the write is stale: the hard state alone is
 * written); then, when that succeeded, @s->log.compact. Reads only @j and
 * @s:
 * call it on the disk thread (or at once, as the simulation does). */
void raft_persist_run(struct raft_persist_job *j,
                      const struct raft_persist_storage *s);

/* raft_persist_done takes back job @j (handed out by raft_persist_next,
 * then run) and fills @out with what to do. An append refused with
 * RAFT_NOSPACE goes back to the head of the queue when @requeue (a
 * compaction it carried goes ahead of it, as a job of its own) and is
 * REQUEUED; otherwise the job leaves the queue, DONE or FAILED. A
 * successful install raises the install boundary to its index and marks
 * the queued jobs after_install; it asks @core, the core whose updates
 * the queue takes and which has not yet stepped the install's
 * RAFT_EVENT_SNAPSHOT_INSTALLED, whether the log is reset
 * (raft_snapshot_resets_log), and if so marks every entry queued so far
 * to be dropped. Unless REQUEUED, the caller owns @j (which @out points
 * into) and frees it with raft_persist_job_free once it carried out
 * @out. Loop thread. */
void raft_persist_done(struct raft_persist *p, struct raft_persist_job *j,
                       bool requeue, const struct raft *core,
                       struct raft_persist_result *out);

/* raft_persist_job_free frees job @j (after raft_persist_done), its
 * entry references and held messages. NULL is ignored. Loop thread. */
void raft_persist_job_free(struct raft_persist_job *j);

#endif /* RAFT_PERSIST_H */
