/* The apply thread (applier.h): takes committed entries from the loop
 * thread and applies them to SQLite in batches through the state machine
 * (sql.h), then hands the results to the node's callers.
 *
 * Happy path: wait for entries -> take every queued one -> sql_fsm_apply
 * (one SQLite transaction, a savepoint per request, the applied index in
 * the same transaction) -> hooks.applied with each result.
 * Failure modes: an environmental error (I/O, disk full, a lock held
 * longer than the busy timeout) leaves the batch unapplied; the batch goes
 * back to the head of the queue and is retried with backoff (100 ms
 * doubling to 5 s), never skipped, and raft_status() shows the condition
 * (applying false, apply_error) until a retry succeeds. An entry of a type
 * this version does not know stops applying the same way, at that entry:
 * it is never skipped. A commit the node did not make (sql_fsm_foreign_check:
 * checked inside every batch and once a second when idle; around a plain
 * writer's landed commit, by the writer's readings of the WAL that the
 * lease's release hands over, sql_fsm_writer_marks) marks the
 * replica diverged: the batch goes back to the queue and nothing applies
 * until a snapshot install replaces the database (the log keeps the
 * entries durably, so nothing is lost). */

#include "applier.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../raft/configuration.h"
#include "attach_sock.h"
#include "../../sql/changeset.h"
#include "sqlbridge.h"
#include "start_scan.h"
#include "stopped.h"

/* Most entries applied in one SQLite transaction. */
#define EXT__APPLY_BATCH_MAX 4096

/* How often an idle apply thread looks for foreign commits, ms. */
#define EXT__FOREIGN_CHECK_MS 1000
/* How long a start's verification that found a mismatch waits for the
 * entry after the applied index, when its log held none at start, ms
 * (cfg.start_next_ms when set). */
#define EXT__START_NEXT_MS 10000

/* Backoff between retries of a failed batch, ms. */
#define EXT__RETRY_MIN_MS 100
#define EXT__RETRY_MAX_MS 5000
/* After a checkpoint that waited for readers and gave up (a long reader:
 * a copy), how long the next ones wait for nobody, ms: doubled at each
 * such give-up, up to the max (checkpoint_try). */
#define EXT__CHECKPOINT_BACKOFF_MS 1000
#define EXT__CHECKPOINT_BACKOFF_MAX_MS 16000

struct ext_applier {
    struct ext_applier_config cfg;  /* settings (copy) */
    struct ext_applier_hooks hooks; /* callbacks (copy) */
    struct ext_node_log *log;       /* the node's log lines */
    struct sql_fsm *fsm;            /* the apply connection (apply thread,
                                      or the holder during a hold) */
    unsigned settings;              /* the settings notice holds these (as
                                      fsm) */
    bool settings_written;          /* it does (as fsm) */
    bool settings_warned;           /* a failure to write it was logged
                                      (as fsm) */
    pthread_t thread;               /* the apply thread */
    pthread_mutex_t mu;             /* guards the fields marked (mu) */
    pthread_mutex_t snapshot_mu;    /* one snapshot create or install at a
                                      time (applier_persist_fsm) */
    pthread_cond_t cond;            /* entries queued, a hold ended, a
                                      checkpoint asked, or stop (mu) */
    pthread_cond_t idle_cond;       /* busy became false (mu) */
    struct raft_entry *queue;       /* committed entries, references (mu) */
    unsigned n_queue;               /* (mu) */
    unsigned cap_queue;             /* (mu) */
    bool stop;                      /* the thread must end (mu) */
    atomic_bool failed;             /* the last batch failed: retried at
                                      retry_at (set under mu) */
    struct timespec retry_at;       /* CLOCK_MONOTONIC of the next retry
                                      (mu) */
    unsigned backoff_ms;            /* the wait before the next retry (mu) */
    char error[512];                /* why the last batch failed, "" when
                                      applying (mu) */
    bool busy;                      /* the thread uses the connection (mu) */
    bool want_checkpoint;           /* checkpoint now (log full) (mu) */
    bool ckpt_gave_up;              /* the last checkpoint gave up, left
                                      the durable index behind (the
                                      apply thread) */
    struct timespec ckpt_wait_at;   /* CLOCK_MONOTONIC from which
                                      checkpoint_try may wait for
                                      readers again (the apply thread) */
    unsigned ckpt_backoff_ms;       /* the pause after its last waiting
                                      try gave up, 0 (the apply thread) */
    bool held;                      /* a snapshot install waits for or holds
                                      the connection (mu) */
    unsigned n_hurry;               /* callers between applier_hurry_begin
                                      and _end: no pace (mu) */
    raft_index lease_from;          /* a write lease's hold: no entry at or
                                      above it applies, no idle check
                                      runs; 0 for none (mu) */
    raft_index lease_landed;        /* no idle check until this index is
                                      applied (a writer's own commit may be
                                      in the file first); 0 (mu) */
    raft_index marks_index;         /* the entry @marks are of, 0 (mu) */
    struct sql_wal_marks marks;     /* its writer's readings of the WAL
                                      (applier_lease_end) (mu) */
    unsigned char wal_base[SQL_WAL_HDR_LEN]; /* the state machine's
                                      reading of the file holding only the
                                      node's own commits (note_wal_base)
                                      (mu) */
    bool wal_base_ok;                        /* wal_base holds one (mu) */
    atomic_uint_least64_t applied;           /* last applied index */
    atomic_uint_least64_t pushed;            /* last index applier_push took
                                                (committed), 0 before one */
    atomic_uint_least64_t durable;           /* applied index durable in the
                                      database file (sql_fsm_durable) */
    atomic_bool stopping; /* applier_stop interrupted the state
                                      machine */
    atomic_bool diverged; /* a foreign commit was seen: nothing
                                      applies until an install (set under
                                      mu) */
    struct ext_applier_divergence divergence; /* what was seen (mu) */
    struct ext_start_scan *scan;              /* the start's verification of the
                                     file, NULL when the start needed
                                     none (set before the thread starts) */
    bool scan_failed;                 /* it was needed but could not start
                                     (set before the thread starts) */
    atomic_uint_least64_t n_repairs;  /* installs that ended a divergence */
    atomic_uint_least64_t n_installs; /* snapshots installed (written
                                          under mu) */
    atomic_uint_least64_t installed_index; /* last index of the snapshot
                                               installed last, 0 */
    struct ext_applier_metrics metrics;    /* the batches applied (mu) */
};

/* Appliers of the process that are diverged (applier_any_diverged). */
static atomic_int n_diverged;

bool applier_any_diverged(void)
{
    return atomic_load(&n_diverged) > 0;
}

/* notice_write puts @reason in cfg->notice_path, the notice the guards of
 * other processes read (best effort: without it they let reads through,
 * this process's guard still refuses them). */
static void notice_write(struct ext_applier *a, const char *reason)
{
    char text[sizeof a->divergence.reason + 2];
    snprintf(text, sizeof text, "%s\n", reason);
    if (a->cfg.notice_path[0] != '\0' &&
        !stopped_write_file(a->cfg.notice_path, text, false)) {
        node_log_line(a->log, RAFT_LOG_WARN,
                      "cannot write %s: %s (other processes' reads of the "
                      "diverged replica are not refused)",
                      a->cfg.notice_path, strerror(errno));
    }
}

/* settings_follow writes the settings notice (cfg->settings_path) when
 * the settings in force differ from what it holds, best effort: a
 * failure is one WARN line, and the next call tries again. The guards
 * of every process read it (attach_sock_settings). Apply thread, or its
 * owner before it starts and after it is joined. */
static void settings_follow(struct ext_applier *a)
{
    unsigned mask = sql_fsm_settings(a->fsm);
    if (a->cfg.settings_path[0] == '\0' ||
        (a->settings_written && a->settings == mask)) {
        return;
    }
    if (!attach_sock_settings_write(a->cfg.settings_path, mask)) {
        if (!a->settings_warned) {
            a->settings_warned = true;
            node_log_line(a->log, RAFT_LOG_WARN,
                          "cannot write %s: %s (connections read the "
                          "cluster-wide settings of before until it is "
                          "written; tried again at each batch)",
                          a->cfg.settings_path, strerror(errno));
        }
        a->settings_written = false;
        return;
    }
    a->settings_warned = false;
    a->settings_written = true;
    a->settings = mask;
}

/* notice_remove removes the notice of notice_write. */
static void notice_remove(struct ext_applier *a)
{
    if (a->cfg.notice_path[0] != '\0') {
        unlink(a->cfg.notice_path);
    }
}

int applier_push(struct ext_applier *a, const struct raft_entry *entries,
                 unsigned n)
{
    pthread_mutex_lock(&a->mu);
    if (a->n_queue + n > a->cap_queue) {
        unsigned cap = (a->n_queue + n) * 2;
        struct raft_entry *q = realloc(a->queue, cap * sizeof *q);
        if (q == NULL) {
            pthread_mutex_unlock(&a->mu);
            return RAFT_NOMEM;
        }
        a->queue = q;
        a->cap_queue = cap;
    }
    for (unsigned i = 0; i < n; i++) {
        a->queue[a->n_queue++] = entries[i];
        raft_buf_ref(entries[i].data);
    }
    if (n > 0) {
        atomic_store(&a->pushed, entries[n - 1].index);
    }
    pthread_cond_signal(&a->cond);
    pthread_mutex_unlock(&a->mu);
    return 0;
}

void applier_hurry_begin(struct ext_applier *a)
{
    pthread_mutex_lock(&a->mu);
    a->n_hurry++;
    pthread_cond_signal(&a->cond);
    pthread_mutex_unlock(&a->mu);
}

void applier_hurry_end(struct ext_applier *a)
{
    pthread_mutex_lock(&a->mu);
    a->n_hurry--;
    pthread_mutex_unlock(&a->mu);
}

uint64_t applier_applied(const struct ext_applier *a)
{
    return atomic_load(&a->applied);
}

uint64_t applier_committed(const struct ext_applier *a)
{
    uint64_t pushed = atomic_load(&a->pushed), applied = applier_applied(a);
    return pushed > applied ? pushed : applied;
}

bool applier_wait_applied(struct ext_applier *a, raft_index index,
                          unsigned timeout_ms)
{
    struct timespec now, until;
    bool reached;

    if (atomic_load(&a->applied) >= index) {
        return true;
    }
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)(timeout_ms / 1000);
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&a->mu);
    while (atomic_load(&a->applied) < index) {
        /* Slices of at most 10 ms: a wall clock set back does not
         * stretch the wait. */
        struct timespec slice;
        clock_gettime(CLOCK_REALTIME, &now);
        if (now.tv_sec > until.tv_sec ||
            (now.tv_sec == until.tv_sec && now.tv_nsec >= until.tv_nsec)) {
            break;
        }
        slice = now;
        slice.tv_nsec += 10000000L;
        if (slice.tv_nsec >= 1000000000L) {
            slice.tv_sec++;
            slice.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&a->idle_cond, &a->mu, &slice);
    }
    reached = atomic_load(&a->applied) >= index;
    pthread_mutex_unlock(&a->mu);
    return reached;
}

uint64_t applier_durable(const struct ext_applier *a)
{
    return atomic_load(&a->durable);
}

bool applier_failed(const struct ext_applier *a)
{
    return atomic_load(&a->failed);
}

void applier_request_checkpoint(struct ext_applier *a)
{
    pthread_mutex_lock(&a->mu);
    a->want_checkpoint = true;
    pthread_cond_signal(&a->cond);
    pthread_mutex_unlock(&a->mu);
}

void applier_hold(struct ext_applier *a)
{
    pthread_mutex_lock(&a->mu);
    a->held = true;
    while (a->busy) {
        pthread_cond_wait(&a->idle_cond, &a->mu);
    }
    pthread_mutex_unlock(&a->mu);
}

static void note_wal_base(struct ext_applier *a);

/* tell_cluster_id hands the cluster id the state machine holds to the
 * cluster_id hook. */
static void tell_cluster_id(struct ext_applier *a)
{
    uint8_t id[SQL_CLUSTER_ID_LEN];

    if (a->hooks.cluster_id == NULL) {
        return;
    }
    if (sql_fsm_cluster_id(a->fsm, id) != 0) {
        node_log_line(a->log, RAFT_LOG_WARN, "apply: %s",
                      sql_fsm_errmsg(a->fsm));
        return;
    }
    a->hooks.cluster_id(a->hooks.data, id);
}

int applier_install(struct ext_applier *a, const char *path,
                    uint64_t *out_index, uint64_t *out_term, char *errmsg,
                    size_t errmsg_len)
{
    int rc = sqlbridge_rc(
        sql_fsm_snapshot_install(a->fsm, path, out_index, out_term));
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "install: %s", sql_fsm_errmsg(a->fsm));
        return rc == RAFT_NOMEM || rc == RAFT_IOERR ? rc : RAFT_CORRUPT;
    }
    atomic_store(&a->applied, *out_index);
    atomic_store(&a->durable, sql_fsm_durable(a->fsm));
    note_wal_base(a);
    settings_follow(a);
    /* The records that judged the old content go first (the replica
     * checksum's peers), then the divergence ends: a judgement made from
     * them before this install is dropped by applier_mark_diverged_since,
     * which sees n_installs moved. */
    if (a->hooks.installed != NULL) {
        a->hooks.installed(a->hooks.data, a->fsm);
    }
    pthread_mutex_lock(&a->mu);
    atomic_store(&a->installed_index, *out_index);
    atomic_fetch_add(&a->n_installs, 1);
    if (atomic_load(&a->diverged)) {
        /* The database is the snapshot's now: the foreign commit is gone
         * (the state machine forgot it too). */
        atomic_store(&a->diverged, false);
        atomic_fetch_sub(&n_diverged, 1);
        if (a->cfg.mark_path[0] != '\0') {
            unlink(a->cfg.mark_path);
        }
        notice_remove(a);
        a->divergence.repaired_index = *out_index;
        atomic_fetch_add(&a->n_repairs, 1);
    }
    pthread_mutex_unlock(&a->mu);
    tell_cluster_id(a);
    return 0;
}

bool applier_diverged(struct ext_applier *a, struct ext_applier_divergence *out)
{
    bool diverged;
    pthread_mutex_lock(&a->mu);
    diverged = atomic_load(&a->diverged);
    if (out != NULL) {
        *out = a->divergence;
    }
    pthread_mutex_unlock(&a->mu);
    return diverged;
}

void applier_metrics(struct ext_applier *a, struct ext_applier_metrics *out)
{
    pthread_mutex_lock(&a->mu);
    *out = a->metrics;
    pthread_mutex_unlock(&a->mu);
}

uint64_t applier_repairs(const struct ext_applier *a)
{
    return atomic_load(&a->n_repairs);
}

/* mark_write records divergence @dv at cfg->mark_path ("<since_ms>
 * <at_index>\n<reason>"), durably (best effort: a failure is logged, the
 * divergence holds in memory). */
static void mark_write(struct ext_applier *a,
                       const struct ext_applier_divergence *dv)
{
    char text[sizeof dv->reason + 64];
    snprintf(text, sizeof text, "%" PRIu64 " %" PRIu64 "\n%s\n", dv->since_ms,
             dv->at_index, dv->reason);
    if (a->cfg.mark_path[0] != '\0' &&
        !stopped_write_file(a->cfg.mark_path, text, true)) {
        node_log_line(a->log, RAFT_LOG_WARN,
                      "cannot record the divergence in %s: %s (a restart "
                      "would forget it)",
                      a->cfg.mark_path, strerror(errno));
    }
}

/* mark_read takes in a divergence recorded by an earlier run, if any. */
static void mark_read(struct ext_applier *a)
{
    struct ext_applier_divergence *dv = &a->divergence;
    char reason[sizeof dv->reason];
    FILE *fp;
    if (a->cfg.mark_path[0] == '\0' ||
        (fp = fopen(a->cfg.mark_path, "r")) == NULL) {
        return;
    }
    if (fscanf(fp, "%" SCNu64 " %" SCNu64 "\n", &dv->since_ms, &dv->at_index) !=
            2 ||
        fgets(reason, sizeof reason, fp) == NULL) {
        snprintf(reason, sizeof reason, "unreadable record");
    }
    fclose(fp);
    reason[strcspn(reason, "\n")] = '\0';
    snprintf(dv->reason, sizeof dv->reason,
             "%.400s (recorded before a restart)", reason);
    atomic_store(&a->diverged, true);
    atomic_fetch_add(&n_diverged, 1);
    notice_write(a, dv->reason);
    node_log_error(a->log,
                   "diverged replica: %s; applying holds until a "
                   "snapshot of a healthy peer replaces the database",
                   dv->reason);
}

static void note_diverged_since(struct ext_applier *a, uint64_t installs,
                                const char *reason);

/* note_diverged marks the replica diverged for @reason, and logs it at
 * ERROR once. Called without mu. */
static void note_diverged(struct ext_applier *a, const char *reason)
{
    note_diverged_since(a, UINT64_MAX, reason);
}

/* note_diverged_since is note_diverged unless a snapshot was installed
 * since n_installs was @installs (UINT64_MAX: whatever was installed). */
static void note_diverged_since(struct ext_applier *a, uint64_t installs,
                                const char *reason)
{
    char seen[EXT_ISO_TIME_LEN];
    struct timespec now;
    uint64_t since_ms;
    bool is_new;
    clock_gettime(CLOCK_REALTIME, &now);
    since_ms = (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
    pthread_mutex_lock(&a->mu);
    is_new =
        !atomic_load(&a->diverged) &&
        (installs == UINT64_MAX || atomic_load(&a->n_installs) == installs);
    if (is_new) {
        a->divergence.since_ms = since_ms;
        a->divergence.at_index = atomic_load(&a->applied) + 1;
        snprintf(a->divergence.reason, sizeof a->divergence.reason, "%s",
                 reason);
        mark_write(a, &a->divergence);
        notice_write(a, a->divergence.reason);
        /* Logged before the loop thread can see the divergence: its
         * repair lines come after this one. */
        node_log_iso_time(since_ms, seen);
        node_log_error(a->log,
                       "diverged replica: %s (seen %s); applying holds (the "
                       "log keeps every entry) until a snapshot of a healthy "
                       "peer replaces the database",
                       reason, seen);
        atomic_store(&a->diverged, true);
        atomic_fetch_add(&n_diverged, 1);
    }
    pthread_mutex_unlock(&a->mu);
}

void applier_mark_diverged(struct ext_applier *a, const char *reason)
{
    note_diverged(a, reason);
}

void applier_mark_diverged_since(struct ext_applier *a, uint64_t installs,
                                 const char *reason)
{
    note_diverged_since(a, installs, reason);
}

uint64_t applier_installed_index(const struct ext_applier *a)
{
    return atomic_load(&a->installed_index);
}

uint64_t applier_installs(const struct ext_applier *a)
{
    return atomic_load(&a->n_installs);
}

/* note_checkpoint logs the state machine's note of a moved data_version
 * that was no foreign write (sql_fsm_foreign_note), if any. Apply thread. */
static void note_checkpoint(struct ext_applier *a)
{
    char note[600];
    if (sql_fsm_foreign_note(a->fsm, note, sizeof note)) {
        node_log_line(a->log, RAFT_LOG_INFO, "%s", note);
    }
}

/* lease_blocks says whether a write lease's hold keeps the head of the
 * queue from applying (applier_lease_hold). Caller holds mu. */
static bool lease_blocks(const struct ext_applier *a)
{
    return a->lease_from != 0 && a->n_queue > 0 &&
           a->queue[0].index >= a->lease_from;
}

/* lease_quiet says whether the idle check must not run: a lease's writer
 * may have committed into the file an entry not applied yet. A foreign
 * commit of that window is not missed: the batch that records the entry
 * looks for it (sql_fsm_writer_marks). Caller holds mu. */
static bool lease_quiet(const struct ext_applier *a)
{
    return a->lease_from != 0 ||
           (a->lease_landed != 0 && atomic_load(&a->applied) < a->lease_landed);
}

void applier_lease_hold(struct ext_applier *a, raft_index from)
{
    pthread_mutex_lock(&a->mu);
    a->lease_from = from;
    pthread_mutex_unlock(&a->mu);
}

/* note_wal_base copies the state machine's WAL-index reading of a file
 * holding only the node's own commits (sql_fsm_wal_base) for
 * applier_wal_base_is. Called without mu, on the apply thread, after
 * what may move it: a batch, an idle check, a checkpoint, the start. */
static void note_wal_base(struct ext_applier *a)
{
    unsigned char hdr[SQL_WAL_HDR_LEN];
    bool ok = sql_fsm_wal_base(a->fsm, hdr);

    pthread_mutex_lock(&a->mu);
    a->wal_base_ok = ok;
    if (ok) {
        memcpy(a->wal_base, hdr, sizeof hdr);
    }
    pthread_mutex_unlock(&a->mu);
}

bool applier_wal_base_is(struct ext_applier *a,
                         const unsigned char hdr[SQL_WAL_HDR_LEN])
{
    bool is;

    pthread_mutex_lock(&a->mu);
    is = a->wal_base_ok && memcmp(a->wal_base, hdr, SQL_WAL_HDR_LEN) == 0;
    pthread_mutex_unlock(&a->mu);
    return is;
}

void applier_lease_end(struct ext_applier *a, raft_index landed,
                       const struct sql_wal_marks *marks)
{
    pthread_mutex_lock(&a->mu);
    a->lease_from = 0;
    if (landed > a->lease_landed) {
        a->lease_landed = landed;
    }
    if (landed != 0) {
        a->marks_index = marks != NULL ? landed : 0;
        if (marks != NULL) {
            a->marks = *marks;
        }
    }
    pthread_cond_signal(&a->cond);
    pthread_mutex_unlock(&a->mu);
}

/* idle_check looks for a foreign commit while no batch runs. Called
 * without mu, with busy set. */
static void idle_check(struct ext_applier *a)
{
    int rc;

    rc = sqlbridge_rc(sql_fsm_foreign_check(a->fsm));
    note_wal_base(a);
    settings_follow(a);
    if (rc == RAFT_DIVERGED) {
        note_diverged(a, sql_fsm_errmsg(a->fsm));
    }
    note_checkpoint(a);
}

/* The start scan's hooks (start_scan.h): the applier's own calls. */
static uint64_t scan_applied(void *data)
{
    return applier_applied(data);
}

static bool scan_wait_applied(void *data, raft_index index, unsigned ms)
{
    return applier_wait_applied(data, index, ms);
}

static uint64_t scan_installs(void *data)
{
    return applier_installs(data);
}

static void scan_diverged_since(void *data, uint64_t installs,
                                const char *reason)
{
    note_diverged_since(data, installs, reason);
}

/* begin_scan starts the verification of the file in the background when
 * it may have changed while no node ran (stopped.h), a replica not
 * diverged already with the checksum kept and something applied (else
 * the sums come from the file). It tells the scan about the stored entry
 * after the applied index (cfg.next): a plain write's changeset may be
 * in the file unrecorded. A scan that cannot start is a WARN line: the
 * node runs unverified, and records no clean stop. Before the apply
 * thread starts. */
static void begin_scan(struct ext_applier *a)
{
    struct ext_start_scan_config sc;
    struct ext_start_scan_hooks h = {
        .data = a,
        .applied = scan_applied,
        .wait_applied = scan_wait_applied,
        .installs = scan_installs,
        .diverged_since = scan_diverged_since,
    };
    const struct raft_entry *next = a->cfg.next;
    uint64_t value;

    a->scan_failed = false;
    if (a->cfg.stopped_path[0] == '\0' || atomic_load(&a->diverged)) {
        return;
    }
    memset(&sc, 0, sizeof sc);
    if (sql_fsm_applied(a->fsm) == 0 ||
        !stopped_changed(a->cfg.stopped_path, a->cfg.db_path, sc.why,
                         sizeof sc.why) ||
        !sql_fsm_checksum(a->fsm, &value)) {
        return;
    }
    snprintf(sc.db_path, sizeof sc.db_path, "%s", a->cfg.db_path);
    sc.applied = sql_fsm_applied(a->fsm);
    sc.next_index = a->cfg.next_index != 0 ? a->cfg.next_index : sc.applied + 1;
    sc.next_stored = next != NULL;
    sc.next_plain = next != NULL && next->type == RAFT_ENTRY_NORMAL &&
                    next->data != NULL &&
                    sql_changeset_is(next->data->data, next->data->len);
    sc.next_ms =
        a->cfg.start_next_ms > 0 ? a->cfg.start_next_ms : EXT__START_NEXT_MS;
    if (start_scan_begin(&sc, &h, a->log, &a->scan) != 0) {
        a->scan_failed = true;
        node_log_line(a->log, RAFT_LOG_WARN,
                      "start: %.300s, but the verification of the database "
                      "cannot start (out of memory): it runs unverified, and "
                      "the next start verifies it",
                      sc.why);
    }
}

bool applier_start_scan(struct ext_applier *a, struct ext_start_scan_view *out)
{
    if (a->scan == NULL) {
        return false;
    }
    start_scan_view(a->scan, out);
    return true;
}

bool applier_start_scan_pending(struct ext_applier *a)
{
    return start_scan_pending(a->scan);
}

void applier_release(struct ext_applier *a, uint64_t covered)
{
    unsigned keep = 0;
    pthread_mutex_lock(&a->mu);
    if (covered > 0) {
        /* Entries the snapshot covers will not be applied again. */
        for (unsigned i = 0; i < a->n_queue; i++) {
            if (a->queue[i].index <= covered) {
                raft_buf_unref(a->queue[i].data);
            } else {
                a->queue[keep++] = a->queue[i];
            }
        }
        a->n_queue = keep;
    }
    a->held = false;
    pthread_cond_signal(&a->cond);
    pthread_mutex_unlock(&a->mu);
}

int applier_copy_check(struct ext_applier *a, const char *path,
                       const char *what, char *errmsg, size_t errmsg_len)
{
    struct sql_verify v;
    char reason[1200]; /* note_diverged keeps what fits */
    memset(&v, 0, sizeof v);
    if (sql_checksum_verify(path, &v, NULL, 0) != 0 || !v.available ||
        v.n_differ == 0) {
        sql_verify_clear(&v);
        return 0; /* an unreadable copy fails its reader's own checks */
    }
    snprintf(reason, sizeof reason,
             "%s made at index %llu differs from the running checksum in "
             "%.200s: a write the node did not make reached %.400s before the "
             "apply thread saw it",
             what, (unsigned long long)v.index, v.differ[0].name,
             a->cfg.db_path);
    snprintf(errmsg, errmsg_len,
             "%s made at index %llu differs from the running checksum in "
             "%.200s%s: a write the node did not make reached %.400s; this "
             "replica is now marked diverged and is repaired",
             what, (unsigned long long)v.index, v.differ[0].name,
             v.n_differ > 1 ? " (and more tables)" : "", a->cfg.db_path);
    sql_verify_clear(&v);
    note_diverged(a, reason);
    return RAFT_DIVERGED;
}

void applier_set_copy_gate(struct ext_applier *a,
                           const struct sql_copy_gate *gate)
{
    sql_fsm_set_copy_gate(a->fsm, gate);
}

void applier_set_pace(struct ext_applier *a, const struct sql_pace *pace)
{
    sql_fsm_set_pace(a->fsm, pace);
}

int applier_snapshot_create(struct ext_applier *a, const char *path,
                            uint64_t *out_index, uint64_t *out_term,
                            char *errmsg, size_t errmsg_len)
{
    int rc;
    if (atomic_load(&a->diverged)) {
        snprintf(errmsg, errmsg_len,
                 "this replica diverged (a foreign write): no snapshot is "
                 "made of it");
        return RAFT_DIVERGED;
    }
    rc = sqlbridge_rc(sql_fsm_snapshot_create(a->fsm, path, out_index, out_term,
                                              errmsg, errmsg_len));
    if (rc == 0 && (rc = applier_copy_check(a, path, "a snapshot", errmsg,
                                            errmsg_len)) != 0) {
        unlink(path);
    }
    return rc;
}

/* note_failure records that the batch starting at @index failed with
 * @why: logged at ERROR (and kept as the node's last error) when the
 * reason is new, and shown as apply_error until a retry succeeds. Called
 * without mu. */
static void note_failure(struct ext_applier *a, raft_index index,
                         const char *why)
{
    char msg[512];
    bool is_new;
    snprintf(msg, sizeof msg,
             "apply failed at index %llu, retrying with backoff (the entry "
             "is never skipped): %s",
             (unsigned long long)index, why);
    pthread_mutex_lock(&a->mu);
    is_new = strcmp(a->error, msg) != 0;
    snprintf(a->error, sizeof a->error, "%s", msg);
    pthread_mutex_unlock(&a->mu);
    if (is_new) {
        node_log_error(a->log, "%s", msg);
    }
}

/* ms_from_now sets @out to @ms from now on CLOCK_MONOTONIC. */
static void ms_from_now(struct timespec *out, unsigned ms)
{
    clock_gettime(CLOCK_MONOTONIC, out);
    out->tv_sec += ms / 1000;
    out->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (out->tv_nsec >= 1000000000L) {
        out->tv_sec++;
        out->tv_nsec -= 1000000000L;
    }
}

/* retry_later puts the @n entries of a failed @batch back at the head of
 * the queue (their references move with them) and sets the next retry.
 * Returns false when the queue cannot grow (out of memory: the entries
 * are dropped and applying stops for good). Caller holds mu. */
static bool retry_later(struct ext_applier *a, const struct raft_entry *batch,
                        unsigned n)
{
    if (a->n_queue + n > a->cap_queue) {
        unsigned cap = (a->n_queue + n) * 2;
        struct raft_entry *q = realloc(a->queue, cap * sizeof *q);
        if (q == NULL) {
            return false;
        }
        a->queue = q;
        a->cap_queue = cap;
    }
    memmove(a->queue + n, a->queue, a->n_queue * sizeof *batch);
    memcpy(a->queue, batch, n * sizeof *batch);
    a->n_queue += n;
    a->backoff_ms = a->backoff_ms == 0                      ? EXT__RETRY_MIN_MS
                    : a->backoff_ms * 2 > EXT__RETRY_MAX_MS ? EXT__RETRY_MAX_MS
                                                            : a->backoff_ms * 2;
    ms_from_now(&a->retry_at, a->backoff_ms);
    return true;
}

/* resumed clears the failure after a batch applied. Caller holds mu. */
static void resumed(struct ext_applier *a, raft_index last)
{
    if (atomic_load(&a->failed)) {
        /* At WARN, as the ERROR it clears. */
        node_log_line(a->log, RAFT_LOG_WARN,
                      "applying resumed, applied through %llu (it had "
                      "failed: %s)",
                      (unsigned long long)last, a->error);
    }
    atomic_store(&a->failed, false);
    a->backoff_ms = 0;
    a->error[0] = '\0';
}

void applier_error(struct ext_applier *a, char *out, size_t len)
{
    if (len == 0) {
        return;
    }
    pthread_mutex_lock(&a->mu);
    snprintf(out, len, "%s", a->error);
    pthread_mutex_unlock(&a->mu);
}

/* checkpoint runs a checkpoint on the apply connection, waiting as @wait
 * says, and takes in the durable index it reached. */
static int checkpoint(struct ext_applier *a, enum sql_checkpoint_wait wait)
{
    uint64_t durable;
    int rc = sql_fsm_checkpoint(a->fsm, wait, &durable);
    if (rc == 0) {
        atomic_store(&a->durable, durable);
        if (a->ckpt_gave_up) {
            node_log_line(a->log, RAFT_LOG_INFO,
                          "the durable index moves again: %llu",
                          (unsigned long long)durable);
        }
        a->ckpt_gave_up = false;
    } else {
        /* Each give-up at DEBUG (with the applied index: tests wait for
         * the one after their last write); the first of a run at INFO. */
        node_log_line(a->log, RAFT_LOG_DEBUG,
                      "checkpoint at applied index %llu gave up: %s",
                      (unsigned long long)atomic_load(&a->applied),
                      sql_fsm_errmsg(a->fsm));
        if (!a->ckpt_gave_up) {
            node_log_line(a->log, RAFT_LOG_INFO,
                          "%s (tried again after each batch, and each "
                          "second while no batch comes)",
                          sql_fsm_errmsg(a->fsm));
        }
        a->ckpt_gave_up = true;
    }
    note_wal_base(a);
    return rc;
}

/* checkpoint_now is checkpoint for a caller that needs the durable point
 * (the log is full: applier_request_checkpoint): it waits for readers,
 * briefly (sql.h). */
static void checkpoint_now(struct ext_applier *a)
{
    (void)checkpoint(a, SQL_CHECKPOINT_WAIT);
}

/* durable_lags says whether the durable index fell behind the applied
 * index by half a snapshot threshold: the background checkpointer could
 * not move it (a WAL under its threshold, readers holding frames back),
 * and the log cannot be compacted past it. */
static bool durable_lags(const struct ext_applier *a)
{
    return atomic_load(&a->applied) - atomic_load(&a->durable) >=
           a->cfg.snapshot_threshold / 2;
}

/* checkpoint_try is checkpoint between batches, and in the idle loop
 * while the durable index lags. Readers come in two kinds. Short ones
 * (plain writers, which read the frame before their own commit until
 * their entry is applied) always hold some frames back, while writes
 * go on: the checkpoint waits briefly for them (SQL_CHECKPOINT_WAIT;
 * one that never waits never moves the durable index under plain
 * writes, and the log is compacted only once full: a new-user trial).
 * A long one (a snapshot's or a backup's copy, a minute at a few GB)
 * outlasts any wait, and a wait of 100 ms after every batch for as long
 * as it ran held every write back (docs/performance.md "The copy's real
 * cost"): so after a waiting try that gave up, the tries wait for
 * nobody (SQL_CHECKPOINT_NOWAIT) for EXT__CHECKPOINT_BACKOFF_MS, then
 * twice as long after the next give-up, up to
 * EXT__CHECKPOINT_BACKOFF_MAX_MS, until one succeeds. One that gave up
 * is tried again after the next batch, or within EXT__FOREIGN_CHECK_MS
 * when no batch comes (applier_main), so that a cluster that stopped
 * writing still compacts its log. */
static void checkpoint_try(struct ext_applier *a)
{
    struct timespec now;
    bool wait;

    clock_gettime(CLOCK_MONOTONIC, &now);
    wait = a->ckpt_backoff_ms == 0 || now.tv_sec > a->ckpt_wait_at.tv_sec ||
           (now.tv_sec == a->ckpt_wait_at.tv_sec &&
            now.tv_nsec >= a->ckpt_wait_at.tv_nsec);
    if (checkpoint(a, wait ? SQL_CHECKPOINT_WAIT : SQL_CHECKPOINT_NOWAIT) ==
        0) {
        a->ckpt_backoff_ms = 0;
        return;
    }
    if (wait) {
        a->ckpt_backoff_ms =
            a->ckpt_backoff_ms == 0 ? EXT__CHECKPOINT_BACKOFF_MS
            : a->ckpt_backoff_ms >= EXT__CHECKPOINT_BACKOFF_MAX_MS / 2
                ? EXT__CHECKPOINT_BACKOFF_MAX_MS
                : 2 * a->ckpt_backoff_ms;
        ms_from_now(&a->ckpt_wait_at, a->ckpt_backoff_ms);
    }
}

/* known_type says whether entry type @type is one the applier maps. */
static bool known_type(uint8_t type)
{
    return type == RAFT_ENTRY_NORMAL || type == RAFT_ENTRY_NOOP ||
           type == RAFT_ENTRY_CONFIG;
}

/* batch_size is how many of the @n queued entries @q the next batch
 * takes: at most EXT__APPLY_BATCH_MAX, and none past an entry of an
 * unknown type, which comes alone (so that what precedes it applies). */
static unsigned batch_size(const struct raft_entry *q, unsigned n)
{
    unsigned k;
    if (n > EXT__APPLY_BATCH_MAX) {
        n = EXT__APPLY_BATCH_MAX;
    }
    for (k = 0; k < n; k++) {
        if (!known_type(q[k].type)) {
            return k == 0 ? 1 : k;
        }
    }
    return n;
}

/* apply_batch applies @n entries; returns 0 or the state machine's error.
 * An entry of an unknown type comes first and alone (batch_size): it fails
 * the batch. Called without mu. */
static int apply_batch(struct ext_applier *a, const struct raft_entry *batch,
                       unsigned n)
{
    struct sql_fsm_entry *fe = calloc(n, sizeof *fe);
    struct sql_result *res = calloc(n, sizeof *res);
    raft_index last = batch[n - 1].index;
    bool has_cluster_id = false;
    int rc = RAFT_NOMEM;
    if (fe == NULL || res == NULL) {
        node_log_error(a->log, "apply: out of memory");
        goto out;
    }
    if (!known_type(batch[0].type)) {
        char why[128];
        snprintf(why, sizeof why,
                 "entry %llu has unknown type %u (written by a newer "
                 "version?)",
                 (unsigned long long)batch[0].index, (unsigned)batch[0].type);
        note_failure(a, batch[0].index, why);
        rc = RAFT_CORRUPT;
        goto out;
    }
    for (unsigned i = 0; i < n; i++) {
        fe[i].index = batch[i].index;
        fe[i].term = batch[i].term;
        fe[i].kind = batch[i].type == RAFT_ENTRY_CONFIG ? SQL_ENTRY_CONFIG
                                                        : SQL_ENTRY_REQUEST;
        if (batch[i].type != RAFT_ENTRY_NOOP && batch[i].data != NULL) {
            fe[i].data = batch[i].data->data;
            fe[i].len = batch[i].data->len;
        }
        /* The cluster id travels in a normal entry of its own. */
        if (batch[i].type == RAFT_ENTRY_NORMAL && fe[i].data != NULL &&
            sql_cluster_entry_is(fe[i].data, fe[i].len)) {
            fe[i].kind = SQL_ENTRY_CLUSTER_ID;
            has_cluster_id = true;
        }
    }
    rc = sqlbridge_rc(sql_fsm_apply(a->fsm, fe, n, res));
    note_wal_base(a); /* before applied moves: a holder waits for it */
    /* Before the callers have their answers: one that set a setting
     * reads it on its connection (guard.h). */
    settings_follow(a);
    if (rc != 0 && atomic_load(&a->stopping)) {
        goto out; /* interrupted by applier_stop: applied after a restart */
    }
    if (rc == RAFT_DIVERGED) {
        note_diverged(a, sql_fsm_errmsg(a->fsm)); /* the batch waits */
        goto out;
    }
    note_checkpoint(a);
    if (rc != 0) {
        note_failure(a, batch[0].index, sql_fsm_errmsg(a->fsm));
        goto out;
    }
    atomic_store(&a->applied, last);
    atomic_store(&a->durable, sql_fsm_durable(a->fsm));
    if (a->hooks.applied != NULL) {
        a->hooks.applied(a->hooks.data, fe, res, n, last);
    }
    if (has_cluster_id) {
        tell_cluster_id(a);
    }
    /* The durable point: the background checkpointer moves it as the WAL
     * fills; when it falls behind (a WAL under its threshold, readers
     * holding frames back), checkpoint here, after the callers have their
     * results, so the log can be compacted up to what the file holds. */
    if (durable_lags(a)) {
        checkpoint_try(a);
    }
    for (unsigned i = 0; i < n; i++) {
        sql_result_clear(&res[i]);
    }
out:
    free(fe);
    free(res);
    return rc;
}

/* follower_pace holds a follower's next batch until follower_apply_ms
 * after the end of the previous one (@last_end, CLOCK_MONOTONIC), so that
 * everything committed meanwhile is applied in one SQLite transaction:
 * fewer commits, and fewer pages written per row (the internal tables'
 * pages, page 1, the table's last leaf are written once per transaction).
 * Under a light load (batches further apart than the pace) nothing waits.
 * It returns at once when hooks.apply_now says so (the leader's callers
 * wait for the apply; a caller waiting on this node must have its write
 * applied at once: it is on its way through the queue), when a barrier
 * waits for an index (applier_hurry_begin, which wakes it), or when the
 * queue holds a full batch. A caller arriving or the node becoming leader does
 * not wake it: the caller's entry arrives through applier_push, which
 * does, and any wait ends within the pace. Caller holds mu. */
static void follower_pace(struct ext_applier *a,
                          const struct timespec *last_end)
{
    struct timespec until = *last_end;
    unsigned ms = a->cfg.follower_apply_ms;

    if (ms == 0) {
        return;
    }
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    while (!a->stop && !a->want_checkpoint && !a->held && !a->failed &&
           a->n_queue > 0 && a->n_queue < EXT__APPLY_BATCH_MAX &&
           a->n_hurry == 0 &&
           (a->hooks.apply_now == NULL || !a->hooks.apply_now(a->hooks.data))) {
        if (pthread_cond_timedwait(&a->cond, &a->mu, &until) != 0) {
            break; /* ETIMEDOUT: the pace is kept */
        }
    }
}

/* run_unlocked runs @work on the apply connection between batches: busy
 * (so a hold waits for it) and without mu. Caller holds mu. */
static void run_unlocked(struct ext_applier *a,
                         void (*work)(struct ext_applier *a))
{
    a->busy = true;
    pthread_mutex_unlock(&a->mu);
    work(a);
    pthread_mutex_lock(&a->mu);
    a->busy = false;
    pthread_cond_broadcast(&a->idle_cond);
}

#ifdef RAFTSQL_TEST_FAULTS
/* test_apply_delay_ms returns how long (ms) test builds hold the next
 * batch before applying it: RAFTSQL_TEST_FIRST_APPLY_DELAY_MS for the
 * first batch of this run (@first), so that a restarted node is caught
 * catching up, plus RAFTSQL_TEST_APPLY_DELAY_MS for every batch: the slow
 * apply of a loaded machine, made deterministic, so that a test's
 * assumptions about which node applies first show. 0 for none. */
static unsigned test_apply_delay_ms(bool first)
{
    const char *first_ms = getenv("RAFTSQL_TEST_FIRST_APPLY_DELAY_MS");
    const char *every_ms = getenv("RAFTSQL_TEST_APPLY_DELAY_MS");
    unsigned ms = every_ms != NULL ? (unsigned)atoi(every_ms) : 0;

    if (first && first_ms != NULL) {
        ms += (unsigned)atoi(first_ms);
    }
    return ms;
}
#endif

/* applier_main is the apply thread's body. */
static void *applier_main(void *arg)
{
    struct ext_applier *a = arg;
    struct raft_entry *batch = malloc(EXT__APPLY_BATCH_MAX * sizeof *batch);
    struct timespec last_end = {0, 0}, began;
#ifdef RAFTSQL_TEST_FAULTS
    bool first_done = false;    /* the first batch of this run was held */
    bool batch_delayed = false; /* the next batch was held already */
#endif

    /* Named for top -H and perf (best effort). */
    pthread_setname_np(pthread_self(), "raftsql-apply");
    if (batch == NULL) {
        node_log_error(a->log, "apply thread: out of memory");
        return NULL;
    }
    pthread_mutex_lock(&a->mu);
    for (;;) {
        unsigned n;
        int rc;
        while (!a->stop && !a->want_checkpoint &&
               (a->n_queue == 0 || a->held || atomic_load(&a->diverged) ||
                lease_blocks(a))) {
            struct timespec until;
            if (a->held || atomic_load(&a->diverged) || lease_blocks(a)) {
                pthread_cond_wait(&a->cond, &a->mu);
                continue;
            }
            /* Idle: look for foreign commits within a second. */
            ms_from_now(&until, EXT__FOREIGN_CHECK_MS);
            if (pthread_cond_timedwait(&a->cond, &a->mu, &until) == 0 ||
                a->stop || a->held || a->n_queue > 0 || lease_quiet(a)) {
                continue;
            }
#ifdef RAFTSQL_TEST_FAULTS
            /* Test builds only: no idle check, so that a foreign commit
             * stays unseen until a batch or a snapshot meets it. */
            if (getenv("RAFTSQL_TEST_NO_IDLE_CHECK") != NULL) {
                continue;
            }
#endif
            run_unlocked(a, idle_check);
            if (durable_lags(a) && !a->stop && !a->held &&
                !atomic_load(&a->diverged)) {
                /* The checkpoint after the last batch gave up (a reader
                 * held frames back, or the checkpointer ran): try again. */
                run_unlocked(a, checkpoint_try);
            }
        }
        if (!a->stop && !a->want_checkpoint && atomic_load(&a->failed) &&
            pthread_cond_timedwait(&a->cond, &a->mu, &a->retry_at) == 0) {
            continue; /* woken before the retry is due */
        }
        follower_pace(a, &last_end);
        if (a->stop) {
            break;
        }
        if (!a->want_checkpoint &&
            (a->n_queue == 0 || a->held || lease_blocks(a))) {
            continue; /* an install took the queue while it paced */
        }
        if (a->want_checkpoint) {
            a->want_checkpoint = false;
            if (!a->held) {
                run_unlocked(a, checkpoint_now);
            }
            continue;
        }
#ifdef RAFTSQL_TEST_FAULTS
        if (!batch_delayed) {
            unsigned ms = test_apply_delay_ms(!first_done);
            first_done = true;
            batch_delayed = true;
            if (ms > 0) {
                struct timespec t = {.tv_sec = ms / 1000,
                                     .tv_nsec = (ms % 1000) * 1000000L};
                pthread_mutex_unlock(&a->mu);
                nanosleep(&t, NULL);
                pthread_mutex_lock(&a->mu);
                continue;
            }
        }
        batch_delayed = false;
#endif
        a->busy = true;
        n = batch_size(a->queue, a->n_queue);
        if (a->lease_from != 0) {
            /* The queue is in index order: stop before the hold. */
            unsigned k = 0;
            while (k < n && a->queue[k].index < a->lease_from) {
                k++;
            }
            n = k; /* at least 1: lease_blocks was false */
        }
        memcpy(batch, a->queue, n * sizeof *batch);
        memmove(a->queue, a->queue + n, (a->n_queue - n) * sizeof *batch);
        a->n_queue -= n;
        /* Only a batch's first entry can be a writer's landed commit. */
        sql_fsm_writer_marks(
            a->fsm, batch[0].index,
            a->marks_index == batch[0].index ? &a->marks : NULL);
        pthread_mutex_unlock(&a->mu);

        clock_gettime(CLOCK_MONOTONIC, &began);
        rc = apply_batch(a, batch, n);
        clock_gettime(CLOCK_MONOTONIC, &last_end);

        pthread_mutex_lock(&a->mu);
        if (rc == 0) {
            raft_histogram_observe(
                &a->metrics.apply_seconds,
                (double)(last_end.tv_sec - began.tv_sec) +
                    (double)(last_end.tv_nsec - began.tv_nsec) / 1e9);
            raft_histogram_observe(&a->metrics.batch_entries, n);
            resumed(a, batch[n - 1].index);
        } else if (rc == RAFT_DIVERGED && retry_later(a, batch, n)) {
            n = 0; /* held in the queue until a repair */
        } else if (retry_later(a, batch, n)) {
            atomic_store(&a->failed, true);
            n = 0; /* the references went back into the queue */
        } else {
            atomic_store(&a->failed, true);
            a->stop = true;
            node_log_error(a->log,
                           "apply: out of memory: applying stops "
                           "until restarted");
        }
        a->busy = false;
        pthread_cond_broadcast(&a->idle_cond);
        pthread_mutex_unlock(&a->mu);
        for (unsigned i = 0; i < n; i++) {
            raft_buf_unref(batch[i].data);
        }
        pthread_mutex_lock(&a->mu);
    }
    pthread_mutex_unlock(&a->mu);
    free(batch);
    return NULL;
}

int applier_start(struct sql_fsm *fsm, const struct ext_applier_config *cfg,
                  const struct ext_applier_hooks *hooks,
                  struct ext_node_log *log, struct ext_applier **out)
{
    struct ext_applier *a = calloc(1, sizeof *a);
    pthread_condattr_t ca;

    if (a == NULL) {
        return RAFT_NOMEM;
    }
    a->cfg = *cfg;
    a->hooks = *hooks;
    raft_histogram_init(&a->metrics.apply_seconds, raft_histogram_seconds,
                        raft_histogram_n_seconds);
    raft_histogram_init(&a->metrics.batch_entries, raft_histogram_sizes,
                        raft_histogram_n_sizes);
    a->log = log;
    a->fsm = fsm;
    mark_read(a);
    note_wal_base(a);
    settings_follow(a);
    atomic_store(&a->applied, sql_fsm_applied(fsm));
    atomic_store(&a->durable, sql_fsm_durable(fsm));
    pthread_mutex_init(&a->mu, NULL);
    pthread_mutex_init(&a->snapshot_mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&a->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&a->idle_cond, NULL);
    /* The scan uses the applier's calls: after they can run. */
    begin_scan(a);
    if (pthread_create(&a->thread, NULL, applier_main, a) != 0) {
        start_scan_end(a->scan);
        pthread_cond_destroy(&a->cond);
        pthread_cond_destroy(&a->idle_cond);
        pthread_mutex_destroy(&a->mu);
        pthread_mutex_destroy(&a->snapshot_mu);
        free(a);
        return RAFT_NOMEM;
    }
    *out = a;
    return 0;
}

/* record_stop catches a foreign commit of the last second, then records
 * the file's look for the next start (stopped.h); not when the start's
 * verification had not found the file equal (@verified false): the next
 * start verifies it. Apply thread and scan joined. */
static void record_stop(struct ext_applier *a, bool verified)
{
    if (a->cfg.stopped_path[0] == '\0') {
        return;
    }
    idle_check(a);
    if (!verified && !atomic_load(&a->diverged)) {
        node_log_line(a->log, RAFT_LOG_INFO,
                      "stop: the start's verification of the database had "
                      "not found it equal to its running checksum: no clean "
                      "stop is recorded, the next start verifies it");
        return;
    }
    if (!atomic_load(&a->diverged)) {
        stopped_record(a->fsm, a->log, a->cfg.stopped_path, a->cfg.db_path);
    }
}

void applier_stop(struct ext_applier *a)
{
    bool verified;

    pthread_mutex_lock(&a->mu);
    a->stop = true;
    pthread_cond_signal(&a->cond);
    pthread_mutex_unlock(&a->mu);
    /* A long request must not hold the stop: interrupted, its batch is
     * rolled back and applied again after a restart. */
    atomic_store(&a->stopping, true);
    sql_fsm_interrupt(a->fsm);
    pthread_join(a->thread, NULL);
    verified = start_scan_end(a->scan) && !a->scan_failed;
    if (!atomic_load(&a->diverged)) {
        record_stop(a, verified);
    }
    if (atomic_load(&a->diverged)) {
        atomic_fetch_sub(&n_diverged, 1);
        notice_remove(a); /* no node serves the file now; the mark stays */
    }
    if (a->cfg.settings_path[0] != '\0') {
        unlink(a->cfg.settings_path); /* connections keep what they have */
    }
    for (unsigned i = 0; i < a->n_queue; i++) {
        raft_buf_unref(a->queue[i].data);
    }
    free(a->queue);
    sql_fsm_close(a->fsm);
    pthread_cond_destroy(&a->cond);
    pthread_cond_destroy(&a->idle_cond);
    pthread_mutex_destroy(&a->mu);
    pthread_mutex_destroy(&a->snapshot_mu);
    free(a);
}

/* ---- The state machine half of the driver's storage -------------------- */

/* covers says whether a snapshot through @index is one to install: above
 * the applied index, or, for a diverged replica (a repair), at least at
 * it, so that nothing needs re-applying from a log that may be compacted
 * (the core then changes nothing but its compaction: uv_snapshot.c). */
static bool covers(struct ext_applier *a, raft_index index)
{
    raft_index applied = applier_applied(a);
    return index > applied || (index == applied && applier_diverged(a, NULL));
}

/* install_delay holds the install, in test builds only, between the
 * database's install and the driver's (RAFTSQL_TEST_INSTALL_DELAY_MS), to
 * let ticks run between the two. */
static void install_delay(void)
{
#ifdef RAFTSQL_TEST_FAULTS
    const char *ms = getenv("RAFTSQL_TEST_INSTALL_DELAY_MS");
    if (ms != NULL) {
        struct timespec t = {.tv_sec = atoi(ms) / 1000,
                             .tv_nsec = (atoi(ms) % 1000) * 1000000L};
        nanosleep(&t, NULL);
    }
#endif
}

static int on_snapshot_create(void *data, const char *path, raft_index *index,
                              raft_term *term, char *errmsg, size_t errmsg_len)
{
    struct ext_applier *a = data;
    uint64_t i = 0, t = 0;
    int rc;
    pthread_mutex_lock(&a->snapshot_mu);
    rc = applier_snapshot_create(a, path, &i, &t, errmsg, errmsg_len);
    pthread_mutex_unlock(&a->snapshot_mu);
    if (rc == 0) {
        *index = i;
        *term = t;
    }
    return rc;
}

/* on_snapshot_install is the install of applier_persist_fsm (applier.h),
 * the state machine's whole step, one at a time with the snapshots
 * created (snapshot_mu). */
static int on_snapshot_install(void *data, const char *path, raft_index index,
                               raft_term term, bool *out_installed,
                               char *errmsg, size_t errmsg_len)
{
    struct ext_applier *a = data;
    uint64_t got_index = 0, got_term = 0;
    int rc = 0;
    (void)term;

    *out_installed = false;
    pthread_mutex_lock(&a->snapshot_mu);
    if (!covers(a, index)) {
        /* Nothing new in it: change nothing (raft.h SNAPSHOT_INSTALLED). */
        goto out;
    }
    applier_hold(a);
    /* Asked again once held: the batch that was running may have applied
     * past the snapshot meanwhile, and an older snapshot must never
     * replace a newer database. */
    if (!covers(a, index)) {
        applier_release(a, 0);
        goto out;
    }
    rc = applier_install(a, path, &got_index, &got_term, errmsg, errmsg_len);
    install_delay();
    if (rc == RAFT_IOERR || rc == RAFT_NOSPACE || rc == RAFT_NOMEM) {
        /* The database is unchanged (a full disk under it, say): not a
         * reason to stop, the leader sends the snapshot again. */
        rc = RAFT_BUSY;
    }
    *out_installed = rc == 0;
    applier_release(a, rc == 0 ? got_index : 0);
out:
    pthread_mutex_unlock(&a->snapshot_mu);
    return rc;
}

/* on_snapshot_configuration reads the configuration snapshot file @path
 * reflects (raftsql_config), before it is installed. */
static int on_snapshot_configuration(void *data, const char *path,
                                     struct raft_configuration *out,
                                     char *errmsg, size_t errmsg_len)
{
    struct sql_config sc;
    char why[128];
    int rc;
    (void)data;
    rc = sql_snapshot_config_read(path, &sc, errmsg, errmsg_len);
    if (rc != 0) {
        rc = sqlbridge_rc(rc);
        return rc == RAFT_NOMEM || rc == RAFT_IOERR ? RAFT_BUSY : RAFT_CORRUPT;
    }
    if (sc.index == 0) {
        rc = RAFT_NOTFOUND;
    } else if (raft_configuration_decode(sc.data, sc.len, out, why,
                                         sizeof why) != 0) {
        snprintf(errmsg, errmsg_len,
                 "snapshot %s: the configuration of entry %" PRIu64
                 " does not decode: %s",
                 path, sc.index, why);
        rc = RAFT_CORRUPT;
    }
    sql_config_clear(&sc);
    return rc;
}

void applier_persist_fsm(struct ext_applier *a, struct raft_persist_fsm *out)
{
    memset(out, 0, sizeof *out);
    out->data = a;
    out->snapshot_create = on_snapshot_create;
    out->snapshot_install = on_snapshot_install;
    out->snapshot_configuration = on_snapshot_configuration;
}
