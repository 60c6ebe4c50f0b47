/* The node's durable log (store.h): the log directory, the LMDB log half
 * of the driver's storage (struct raft_persist_log: the cluster id made
 * durable first in each job, appends, compactions, and the term lookup and
 * reset that raft_persist_run asks for after an install), the compaction
 * policy and the repairs at start. The install itself is the applier's
 * (applier_persist_fsm).
 *
 * Happy path: the driver's disk thread calls append and compact in queue
 * order; the loop thread's tick queues a compaction once enough entries
 * are applied durably; after the state machine installed a snapshot, the
 * log is compacted through it or reset (paper §7, as the core decides).
 * Failure modes: a failed append, compaction, lookup or reset is the
 * driver's to handle (the message names LMDB's failure); a log that
 * cannot be changed after an install leaves the database ahead of the log
 * (RAFT_IOERR), which store_load repairs at the next start. */

#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../lmdb_log/lmdb_log.h"
#include "../../raft/persist.h"

_Static_assert(LMDB_LOG_CLUSTER_ID_LEN == RAFT_UV_CLUSTER_ID_LEN,
               "one cluster id length");

struct ext_store {
    char dir[4096];               /* log directory */
    char db_path[4096];           /* the database file, for messages */
    char snapshot_dir[4096];      /* <dir>/snapshots */
    uint64_t snapshot_threshold;  /* compaction policy */
    uint64_t trailing_entries;    /* compaction policy */
    unsigned election_timeout_ms; /* compaction policy: live followers */
    struct ext_node_log *log;     /* the node's log lines */
    struct lmdb_log *lmdb;        /* the LMDB log (the driver's disk thread
                                    writes; reads at start) */
    int lock_fd;                  /* flock on <dir>/node.lock */
    bool created_dir;             /* this open created @dir (a failed
                                     start removes it, store_discard) */
    struct ext_applier *applier;  /* applied and durable indexes */
    atomic_uint_least64_t used;   /* bytes the entries occupy, as the disk
                                     thread last read after a write */
    atomic_uint_least64_t budget; /* the most they may occupy, 0 unknown */
    pthread_mutex_t cluster_mu;   /* guards the two below */
    bool cluster_pending;         /* @cluster_id waits to be written by
                                     the next storage job */
    uint8_t cluster_id[LMDB_LOG_CLUSTER_ID_LEN]; /* the id to write */
};

/* note_usage reads the log's usage after a write that changed it, on the
 * disk thread, for the compaction policy on the loop thread (which must
 * not open LMDB transactions every tick, nor wait while a rewrite swaps
 * the data file). */
static void note_usage(struct ext_store *s)
{
    uint64_t used = 0, budget = 0;
    if (lmdb_log_usage(s->lmdb, &used, &budget) == 0) {
        atomic_store(&s->used, used);
        atomic_store(&s->budget, budget);
    }
}

/* lock_dir creates the log directory if needed and takes an exclusive
 * lock on <dir>/node.lock, so two processes never run a node on the same
 * log (and so database). */
static int lock_dir(struct ext_store *s, char *errmsg, size_t errmsg_len)
{
    char path[4200];
    if (mkdir(s->dir, 0700) == 0) {
        s->created_dir = true;
    } else if (errno != EEXIST) {
        snprintf(errmsg, errmsg_len, "dir: cannot create %s: %s", s->dir,
                 strerror(errno));
        return RAFT_IOERR;
    }
    snprintf(path, sizeof path, "%s/node.lock", s->dir);
    s->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (s->lock_fd < 0) {
        snprintf(errmsg, errmsg_len, "dir: cannot open %s: %s", path,
                 strerror(errno));
        return RAFT_IOERR;
    }
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        snprintf(errmsg, errmsg_len,
                 "dir: another process runs a node on %s (%s is locked)",
                 s->dir, path);
        close(s->lock_fd);
        s->lock_fd = -1;
        s->created_dir = false; /* the holder's now, whoever made it */
        return RAFT_BUSY;
    }
    return 0;
}

/* remove_entry removes one file or (emptied, FTW_DEPTH) directory of a
 * log directory being removed. */
static int remove_entry(const char *path, const struct stat *st, int type,
                        struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if ((type == FTW_DP ? rmdir(path) : unlink(path)) != 0) {
        fprintf(stderr, "raftsql: cannot remove %s: %s\n", path,
                strerror(errno));
    }
    return 0;
}

/* remove_created removes @s's log directory and all in it if this open
 * created it: only this store (holding its lock) wrote there. A directory
 * that existed before is never touched. */
static void remove_created(struct ext_store *s)
{
    if (s->created_dir) {
        nftw(s->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        s->created_dir = false;
    }
}

int store_open(const struct ext_store_config *cfg, struct ext_node_log *log,
               struct ext_store **out, char *errmsg, size_t errmsg_len)
{
    struct ext_store *s = calloc(1, sizeof *s);
    int rc;

    if (s == NULL) {
        snprintf(errmsg, errmsg_len, "out of memory");
        return RAFT_NOMEM;
    }
    snprintf(s->dir, sizeof s->dir, "%s", cfg->dir);
    snprintf(s->db_path, sizeof s->db_path, "%s", cfg->db_path);
    s->snapshot_threshold = cfg->snapshot_threshold;
    s->trailing_entries = cfg->trailing_entries;
    s->election_timeout_ms = cfg->election_timeout_ms;
    s->log = log;
    s->lock_fd = -1;
    rc = lock_dir(s, errmsg, errmsg_len);
    if (rc != 0) {
        goto err_free;
    }
    rc =
        lmdb_log_open(s->dir, cfg->log_max_bytes, &s->lmdb, errmsg, errmsg_len);
    if (rc != 0) {
        char why[512];
        snprintf(why, sizeof why, "%s", errmsg);
        snprintf(errmsg, errmsg_len, "dir: cannot open the log in %s: %s",
                 s->dir, why);
        goto err_lock;
    }
    snprintf(s->snapshot_dir, sizeof s->snapshot_dir, "%.4000s/snapshots",
             s->dir);
    if (mkdir(s->snapshot_dir, 0700) != 0 && errno != EEXIST) {
        snprintf(errmsg, errmsg_len, "dir: cannot create %s: %s",
                 s->snapshot_dir, strerror(errno));
        rc = RAFT_IOERR;
        goto err_log;
    }
    pthread_mutex_init(&s->cluster_mu, NULL);
    note_usage(s);
    *out = s;
    return 0;

err_log:
    lmdb_log_close(s->lmdb);
err_lock:
    close(s->lock_fd);
err_free:
    remove_created(s);
    free(s);
    return rc;
}

/* close_store closes @s's log and lock, removes its log directory when
 * @discard and this open created it, and frees @s. */
static void close_store(struct ext_store *s, bool discard)
{
    if (s == NULL) {
        return;
    }
    lmdb_log_close(s->lmdb);
    close(s->lock_fd); /* the lock goes before the files it guards */
    if (discard) {
        remove_created(s);
    }
    pthread_mutex_destroy(&s->cluster_mu);
    free(s);
}

void store_close(struct ext_store *s)
{
    close_store(s, false);
}

void store_discard(struct ext_store *s)
{
    close_store(s, true);
}

const char *store_snapshot_dir(const struct ext_store *s)
{
    return s->snapshot_dir;
}

/* ---- At start ---------------------------------------------------------- */

/* log_error formats "log <dir>: <LMDB's message>" into @errmsg and
 * returns @rc. */
static int log_error(struct ext_store *s, int rc, char *errmsg,
                     size_t errmsg_len)
{
    snprintf(errmsg, errmsg_len, "log %s: %s", s->dir,
             lmdb_log_errmsg(s->lmdb));
    return rc;
}

/* repair_log handles a log entry whose checksum fails (lmdb_log reports
 * RAFT_CORRUPT): the garbage is never used. An entry the database already
 * holds (index <= @applied) is not needed: the log is compacted past it.
 * A later one is dropped with the rest of the log after it, which the
 * leader sends again (or a snapshot replaces). Returns 0 or the error. */
static int repair_log(struct ext_store *s, raft_index first, raft_index last,
                      uint64_t applied, uint64_t applied_term)
{
    raft_index bad = 0;
    int rc;
    for (raft_index i = first; i <= last && bad == 0; i++) {
        struct raft_entry *e = NULL;
        unsigned cnt = 0;
        if (lmdb_log_entries(s->lmdb, i, i, 0, &e, &cnt) == RAFT_CORRUPT) {
            bad = i;
        }
        lmdb_log_entries_free(e, cnt);
    }
    if (bad == 0) {
        return RAFT_CORRUPT;
    }
    if (bad < applied) {
        node_log_line(s->log, RAFT_LOG_WARN,
                      "log entry %" PRIu64
                      " is corrupt (checksum "
                      "mismatch); the database already holds it: "
                      "compacting the log through %" PRIu64,
                      bad, applied);
        rc = lmdb_log_compact(s->lmdb, applied);
    } else if (bad == applied) {
        node_log_line(s->log, RAFT_LOG_WARN,
                      "log entry %" PRIu64
                      " is corrupt (checksum "
                      "mismatch); the database already holds it: the log "
                      "restarts after it and the leader sends what follows "
                      "again",
                      bad);
        rc = lmdb_log_reset(s->lmdb, applied, applied_term);
    } else {
        node_log_line(s->log, RAFT_LOG_WARN,
                      "log entry %" PRIu64
                      " is corrupt (checksum "
                      "mismatch) and not applied here: dropping the log "
                      "from it on; the leader sends those entries again",
                      bad);
        rc = lmdb_log_truncate_suffix(s->lmdb, bad);
    }
    return rc;
}

/* read_bounds reads the log's first and last index and its snapshot
 * boundary. */
static int read_bounds(struct ext_store *s, raft_index *first, raft_index *last,
                       struct ext_store_state *st, char *errmsg,
                       size_t errmsg_len)
{
    int rc = lmdb_log_bounds(s->lmdb, first, last);
    if (rc == 0) {
        rc = lmdb_log_snapshot(s->lmdb, &st->snap_index, &st->snap_term);
    }
    return rc != 0 ? log_error(s, rc, errmsg, errmsg_len) : 0;
}

/* read_entries reads the stored entries into @st, repairing a corrupt
 * one (repair_log). */
static int read_entries(struct ext_store *s, raft_index first, raft_index last,
                        uint64_t applied, uint64_t applied_term,
                        struct ext_store_state *st, char *errmsg,
                        size_t errmsg_len)
{
    int rc;
    if (last < first) {
        return 0;
    }
    rc =
        lmdb_log_entries(s->lmdb, first, last, 0, &st->entries, &st->n_entries);
    if (rc == RAFT_CORRUPT) {
        rc = repair_log(s, first, last, applied, applied_term);
        if (rc == 0) {
            rc = lmdb_log_bounds(s->lmdb, &first, &last);
        }
        if (rc == 0) {
            rc = lmdb_log_snapshot(s->lmdb, &st->snap_index, &st->snap_term);
        }
        if (rc == 0 && last >= first) {
            rc = lmdb_log_entries(s->lmdb, first, last, 0, &st->entries,
                                  &st->n_entries);
        }
    }
    return rc != 0 ? log_error(s, rc, errmsg, errmsg_len) : 0;
}

/* read_head reads the hard state and the bounds of the log into @st,
 * *@first and *@last. */
static int read_head(struct ext_store *s, raft_index *first, raft_index *last,
                     struct ext_store_state *st, char *errmsg,
                     size_t errmsg_len)
{
    int rc;

    memset(st, 0, sizeof *st);
    rc = lmdb_log_hard_state(s->lmdb, &st->hs);
    if (rc != 0) {
        return log_error(s, rc, errmsg, errmsg_len);
    }
    return read_bounds(s, first, last, st, errmsg, errmsg_len);
}

int store_is_new(struct ext_store *s, bool *out, char *errmsg,
                 size_t errmsg_len)
{
    struct ext_store_state st;
    raft_index first, last;
    int rc = read_head(s, &first, &last, &st, errmsg, errmsg_len);

    if (rc != 0) {
        return rc;
    }
    *out = st.hs.term == 0 && st.hs.vote == 0 && last < first &&
           st.snap_index == 0;
    return 0;
}

int store_entry(struct ext_store *s, raft_index index, struct raft_entry *out)
{
    struct raft_entry *e = NULL;
    unsigned n = 0;
    int rc = lmdb_log_entries(s->lmdb, index, index, 0, &e, &n);

    if (rc != 0) {
        return rc;
    }
    *out = e[0];
    e[0].data = NULL; /* the reference is the caller's */
    lmdb_log_entries_free(e, n);
    return 0;
}

int store_load(struct ext_store *s, uint64_t applied, uint64_t applied_term,
               struct ext_store_state *out, char *errmsg, size_t errmsg_len)
{
    struct ext_store_state st;
    raft_index first, last;
    int rc = read_head(s, &first, &last, &st, errmsg, errmsg_len);

    if (rc != 0) {
        return rc;
    }
    if (applied > last && st.hs.term > 0) {
        /* A snapshot was installed but the node stopped before the log was
         * reset after it: the database holds only committed entries, so
         * the log restarts after them. */
        node_log_line(s->log, RAFT_LOG_WARN,
                      "database applied up to %" PRIu64
                      ", log ends at "
                      "%" PRIu64
                      ": resetting the log after the database "
                      "(interrupted snapshot install)",
                      applied, last);
        rc = lmdb_log_reset(s->lmdb, applied, applied_term);
        if (rc != 0) {
            return log_error(s, rc, errmsg, errmsg_len);
        }
        rc = read_bounds(s, &first, &last, &st, errmsg, errmsg_len);
        if (rc != 0) {
            return rc;
        }
    } else if (applied > last) {
        snprintf(errmsg, errmsg_len,
                 "database %s was applied up to index %" PRIu64
                 " but the log in %s is new (no term, no vote): they do not "
                 "belong together; restore the log directory or start from "
                 "a fresh database",
                 s->db_path, applied, s->dir);
        return RAFT_INVALID;
    }
    if (applied < st.snap_index) {
        snprintf(errmsg, errmsg_len,
                 "database %s was applied up to index %" PRIu64
                 " but the log in %s was compacted up to %" PRIu64
                 ": the database lost durable writes",
                 s->db_path, applied, s->dir, st.snap_index);
        return RAFT_CORRUPT;
    }
    rc = read_entries(s, first, last, applied, applied_term, &st, errmsg,
                      errmsg_len);
    if (rc != 0) {
        return rc;
    }
    *out = st;
    return 0;
}

int store_write(struct ext_store *s, const struct raft_hard_state *hs,
                const struct raft_entry *entries, unsigned n, char *errmsg,
                size_t errmsg_len)
{
    int rc = lmdb_log_append(s->lmdb, hs, entries, n);
    if (rc != 0) {
        return log_error(s, rc, errmsg, errmsg_len);
    }
    note_usage(s);
    return 0;
}

int store_write_snapshot(struct ext_store *s, const struct raft_hard_state *hs,
                         raft_index index, raft_term term, char *errmsg,
                         size_t errmsg_len)
{
    int rc = lmdb_log_reset(s->lmdb, index, term);
    if (rc == 0) {
        rc = lmdb_log_append(s->lmdb, hs, NULL, 0);
    }
    if (rc != 0) {
        return log_error(s, rc, errmsg, errmsg_len);
    }
    note_usage(s);
    return 0;
}

int store_cluster_id(struct ext_store *s, uint8_t out[LMDB_LOG_CLUSTER_ID_LEN],
                     char *errmsg, size_t errmsg_len)
{
    int rc = lmdb_log_cluster_id(s->lmdb, out);
    return rc != 0 ? log_error(s, rc, errmsg, errmsg_len) : 0;
}

int store_server_id(struct ext_store *s, uint64_t *out, char *errmsg,
                    size_t errmsg_len)
{
    int rc = lmdb_log_server_id(s->lmdb, out);
    return rc != 0 ? log_error(s, rc, errmsg, errmsg_len) : 0;
}

int store_server_id_write(struct ext_store *s, uint64_t id, char *errmsg,
                          size_t errmsg_len)
{
    int rc = lmdb_log_set_server_id(s->lmdb, id);
    return rc != 0 ? log_error(s, rc, errmsg, errmsg_len) : 0;
}

int store_cluster_id_write(struct ext_store *s,
                           const uint8_t id[LMDB_LOG_CLUSTER_ID_LEN],
                           char *errmsg, size_t errmsg_len)
{
    int rc = lmdb_log_set_cluster_id(s->lmdb, id);
    return rc != 0 ? log_error(s, rc, errmsg, errmsg_len) : 0;
}

void store_cluster_id_set(struct ext_store *s,
                          const uint8_t id[LMDB_LOG_CLUSTER_ID_LEN])
{
    pthread_mutex_lock(&s->cluster_mu);
    memcpy(s->cluster_id, id, sizeof s->cluster_id);
    s->cluster_pending = true;
    pthread_mutex_unlock(&s->cluster_mu);
}

void store_state_free(struct ext_store_state *st)
{
    lmdb_log_entries_free(st->entries, st->n_entries);
    st->entries = NULL;
    st->n_entries = 0;
}

/* ---- The driver's storage (a libuv thread-pool thread) ----------------- */

/* defragment rewrites the data file compacted when an append was refused
 * for space although the entries take less than half of their budget: the
 * free pages are too scattered for a large entry (LMDB keeps a value in
 * consecutive pages), a state that compaction alone never ends. Returns
 * whether it did (then the append is worth retrying). */
static bool defragment(struct ext_store *s)
{
    uint64_t used = 0, budget = 0;
    if (strstr(lmdb_log_errmsg(s->lmdb), "disk full") != NULL) {
        return false; /* no room for a copy either: wait for space */
    }
    if (lmdb_log_usage(s->lmdb, &used, &budget) != 0 || used >= budget / 2) {
        return false;
    }
    if (lmdb_log_defragment(s->lmdb) != 0) {
        node_log_line(s->log, RAFT_LOG_WARN, "log: %s",
                      lmdb_log_errmsg(s->lmdb));
        return false;
    }
    node_log_line(s->log, RAFT_LOG_WARN,
                  "log: an append found no room although the entries take "
                  "%llu of their %llu bytes (free pages too scattered): the "
                  "data file was rewritten compacted",
                  (unsigned long long)used, (unsigned long long)budget);
    return true;
}

/* write_cluster_id writes the cluster id store_cluster_id_set left for
 * the storage, if any, before the job's own write: the id of the leader
 * a node adopted is durable before what that leader sent (uv_node.h). */
static int write_cluster_id(struct ext_store *s, char *errmsg,
                            size_t errmsg_len)
{
    uint8_t id[LMDB_LOG_CLUSTER_ID_LEN];
    bool pending;
    int rc;

    pthread_mutex_lock(&s->cluster_mu);
    pending = s->cluster_pending;
    memcpy(id, s->cluster_id, sizeof id);
    pthread_mutex_unlock(&s->cluster_mu);
    if (!pending) {
        return 0;
    }
    rc = lmdb_log_set_cluster_id(s->lmdb, id);
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "store the cluster id: %s",
                 lmdb_log_errmsg(s->lmdb));
        return rc;
    }
    pthread_mutex_lock(&s->cluster_mu);
    /* A newer id set meanwhile waits for the next job. */
    s->cluster_pending = memcmp(id, s->cluster_id, sizeof id) != 0;
    pthread_mutex_unlock(&s->cluster_mu);
    return 0;
}

static int on_prepare(void *data, char *errmsg, size_t errmsg_len)
{
    return write_cluster_id(data, errmsg, errmsg_len);
}

static int on_append(void *data, const struct raft_hard_state *hs,
                     const struct raft_entry *entries, unsigned n, char *errmsg,
                     size_t errmsg_len)
{
    struct ext_store *s = data;
    int rc = lmdb_log_append(s->lmdb, hs, entries, n);
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "%s", lmdb_log_errmsg(s->lmdb));
    }
    if (rc == RAFT_NOSPACE && defragment(s)) {
        rc = lmdb_log_append(s->lmdb, hs, entries, n);
        if (rc != 0) {
            snprintf(errmsg, errmsg_len, "%s", lmdb_log_errmsg(s->lmdb));
        }
    }
    if (rc == 0 && n > 0) {
        note_usage(s);
    }
    return rc;
}

static int on_compact(void *data, raft_index index, char *errmsg,
                      size_t errmsg_len)
{
    struct ext_store *s = data;
    int rc = lmdb_log_compact(s->lmdb, index);
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "%s", lmdb_log_errmsg(s->lmdb));
    } else {
        note_usage(s);
    }
    return rc;
}

static int on_entry_term(void *data, raft_index index, raft_index *out_first,
                         raft_term *out_term, char *errmsg, size_t errmsg_len)
{
    struct ext_store *s = data;
    struct raft_entry *e = NULL;
    unsigned cnt = 0;
    raft_index last;
    int rc = lmdb_log_bounds(s->lmdb, out_first, &last);

    *out_term = 0;
    if (rc == 0 && index >= *out_first && index <= last) {
        rc = lmdb_log_entries(s->lmdb, index, index, 0, &e, &cnt);
        if (rc == 0) {
            *out_term = cnt == 1 ? e[0].term : 0;
            lmdb_log_entries_free(e, cnt);
        }
    }
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "%s", lmdb_log_errmsg(s->lmdb));
    }
    return rc;
}

static int on_reset(void *data, raft_index index, raft_term term, char *errmsg,
                    size_t errmsg_len)
{
    struct ext_store *s = data;
    int rc = lmdb_log_reset(s->lmdb, index, term);
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "%s", lmdb_log_errmsg(s->lmdb));
    }
    return rc;
}

void store_log(struct ext_store *s, struct ext_applier *applier,
               struct raft_persist_log *out)
{
    s->applier = applier;
    memset(out, 0, sizeof *out);
    out->data = s;
    out->prepare = on_prepare;
    out->append = on_append;
    out->compact = on_compact;
    out->entry_term = on_entry_term;
    out->reset = on_reset;
}

/* ---- The compaction policy (loop thread) ------------------------------- */

raft_index store_plan_compaction(const struct ext_store *s,
                                 const struct ext_store_view *v,
                                 bool *out_checkpoint)
{
    raft_index target;
    *out_checkpoint = false;
    if (v->log_full || (v->budget > 0 && v->used_bytes > v->budget / 2)) {
        /* Out of space: make everything applied durable in the database,
         * then keep no trailing entries. */
        *out_checkpoint = v->applied > v->durable;
        return v->durable >= v->first ? v->durable : 0;
    }
    if (v->last + 1 - v->first <= s->snapshot_threshold ||
        v->durable <= s->trailing_entries) {
        return 0;
    }
    target = v->durable - s->trailing_entries;
    if (v->hold > 0 && target >= v->hold) {
        target = v->hold - 1;
    }
    return target >= v->first && target <= v->persisted ? target : 0;
}

raft_index store_follower_needs(const struct raft_progress_info *pi,
                                raft_index first, unsigned election_ms)
{
    bool snapshot = pi->state == RAFT_PROGRESS_SNAPSHOT;
    raft_index needs = 1 + (snapshot ? pi->snapshot_index : pi->match_index);

    if ((!snapshot && pi->last_contact > election_ms) || needs < first) {
        return 0;
    }
    return needs;
}

/* follower_hold is ext_store_view.hold for core @core: the lowest of its
 * followers' store_follower_needs, 0 when none holds or @core does not
 * lead. */
static raft_index follower_hold(const struct ext_store *s,
                                const struct raft *core)
{
    const struct raft_configuration *c = raft_current_configuration(core);
    raft_index first = raft_first_index(core);
    raft_index hold = 0;
    struct raft_progress_info pi;

    if (c == NULL || raft_role(core) != RAFT_LEADER) {
        return 0;
    }
    for (unsigned i = 0; i < c->n; i++) {
        raft_index needs;
        if (raft_progress(core, c->servers[i].id, &pi) != 0) {
            continue;
        }
        needs = store_follower_needs(&pi, first, s->election_timeout_ms);
        if (needs != 0 && (hold == 0 || needs < hold)) {
            hold = needs;
        }
    }
    return hold;
}

void store_on_tick(struct ext_store *s, struct raft_uv_node *d)
{
    const struct raft *core = raft_uv_node_core(d);
    struct ext_store_view v = {
        .first = raft_first_index(core),
        .last = raft_last_index(core),
        .persisted = raft_persisted_index(core),
        .applied = applier_applied(s->applier),
        .durable = applier_durable(s->applier),
        .log_full = raft_uv_node_log_full(d),
        .hold = follower_hold(s, core),
    };
    bool checkpoint;
    v.used_bytes = atomic_load(&s->used);
    v.budget = atomic_load(&s->budget); /* 0 until the first write */
    raft_index target = store_plan_compaction(s, &v, &checkpoint);
    if (checkpoint) {
        applier_request_checkpoint(s->applier);
    }
    if (target > 0) {
        raft_uv_node_compact(d, target);
    }
}
