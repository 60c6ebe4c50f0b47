/* The node runtime's composition root: start and stop. It opens the LMDB
 * log and the apply connection, builds the Raft core from what they hold,
 * and hands the core to the driver (raft/uv_node.h), which runs it on its
 * loop thread; this file supplies the driver's storage (lmdb_log_append)
 * and callbacks (apply, forwarded requests, wake, tick, status). */

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>
#include <time.h>

#include "../raft/message.h"
#include "node_internal.h"
#include "sqlbridge.h"

/* Longest frame accepted from a peer: a full AppendEntries batch of the
 * largest request plus headroom. */
#define FRAME_HEADROOM (4u * 1024 * 1024)

/* Most payload bytes in one AppendEntries. */
#define MAX_SIZE_PER_MSG (1u * 1024 * 1024)

/* AppendEntries in flight per follower. */
#define MAX_INFLIGHT_MSGS 16

static const char *level_names[] = {"DEBUG", "INFO", "WARN", "ERROR"};

void node_log(struct ext_node *n, int level, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    if (level < n->cfg.log_level) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "raftsql[%" PRIu64 "] %s: %s\n", n->cfg.id,
            level_names[level < 0 || level > 3 ? 3 : level], line);
}

void node_set_error(struct ext_node *n, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&n->mu);
    snprintf(n->last_error, sizeof n->last_error, "%s", msg);
    pthread_mutex_unlock(&n->mu);
    node_log(n, RAFT_LOG_ERROR, "%s", msg);
}

/* ---- Driver callbacks (loop thread) ------------------------------------ */

static void on_driver_log(void *data, int level, const char *msg)
{
    struct ext_node *n = data;
    if (level >= RAFT_LOG_ERROR) {
        node_set_error(n, "%s", msg);
    } else {
        node_log(n, level, "%s", msg);
    }
}

static int on_append(void *data, const struct raft_hard_state *hs,
                     const struct raft_entry *entries, unsigned cnt,
                     char *errmsg, size_t errmsg_len)
{
    struct ext_node *n = data;
    int rc = lmdb_log_append(n->log, hs, entries, cnt);
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "%s", lmdb_log_errmsg(n->log));
    }
    return rc;
}

static int on_compact(void *data, raft_index index, char *errmsg,
                      size_t errmsg_len)
{
    struct ext_node *n = data;
    int rc = lmdb_log_compact(n->log, index);
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "compact: %s", lmdb_log_errmsg(n->log));
    }
    return rc;
}

static int on_snapshot_create(void *data, const char *path, raft_index *index,
                              raft_term *term, char *errmsg,
                              size_t errmsg_len)
{
    struct ext_node *n = data;
    uint64_t i = 0, t = 0;
    int rc;
    pthread_mutex_lock(&n->snapshot_mu);
    rc = sqlbridge_rc(
        sql_fsm_snapshot_create(n->fsm, path, &i, &t, errmsg, errmsg_len));
    pthread_mutex_unlock(&n->snapshot_mu);
    if (rc == 0) {
        *index = i;
        *term = t;
    }
    return rc;
}

static int on_snapshot_install(void *data, const char *path,
                               raft_index index, raft_term term,
                               char *errmsg, size_t errmsg_len)
{
    struct ext_node *n = data;
    int rc;
    (void)term;
    pthread_mutex_lock(&n->snapshot_mu);
    rc = applier_install(n, path, index, errmsg, errmsg_len);
    pthread_mutex_unlock(&n->snapshot_mu);
    return rc;
}

static void on_apply(void *data, const struct raft_entry *entries,
                     unsigned cnt)
{
    struct ext_node *n = data;
    if (applier_push(n, entries, cnt) != 0) {
        node_set_error(n, "apply queue: out of memory");
    }
}

static void on_forward(void *data, const struct raft_message *m)
{
    exec_on_forward(data, m);
}

static void on_wake(void *data)
{
    exec_on_wake(data);
}

/* maybe_compact applies the compaction policy: once more than
 * snapshot_threshold entries lie beyond the last compaction point, drop
 * the log up to the database's durable applied index less
 * trailing_entries (kept for followers a little behind); when the log is
 * full, up to the durable index itself. */
static void maybe_compact(struct ext_node *n)
{
    raft_index first = raft_first_index(n->core);
    raft_index last = raft_last_index(n->core);
    uint64_t durable = atomic_load(&n->durable);
    raft_index target;
    if (raft_uv_node_log_full(n->driver)) {
        /* Out of space: make everything applied durable in the database,
         * then keep no trailing entries. */
        if (atomic_load(&n->applied) > durable) {
            pthread_mutex_lock(&n->mu);
            n->want_checkpoint = true;
            pthread_cond_signal(&n->apply_cond);
            pthread_mutex_unlock(&n->mu);
        }
        if (durable >= first) {
            raft_uv_node_compact(n->driver, durable);
        }
        return;
    }
    if (last + 1 - first <= n->cfg.snapshot_threshold ||
        durable <= n->cfg.trailing_entries) {
        return;
    }
    target = durable - n->cfg.trailing_entries;
    if (target >= first && target <= raft_persisted_index(n->core)) {
        raft_uv_node_compact(n->driver, target);
    }
}

static void on_tick(void *data)
{
    exec_on_tick(data);
    maybe_compact(data);
}

static void on_stepped(void *data)
{
    status_refresh(data);
}

const struct raft *node_core(struct ext_node *n)
{
    return n->core;
}

/* ---- Start and stop ----------------------------------------------------- */

static uint64_t random_u64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != sizeof v) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^
            (uint64_t)(uintptr_t)&v;
    }
    return v;
}

/* lock_dir creates the log directory if needed and takes an exclusive
 * lock on <dir>/node.lock, so two processes never run a node on the same
 * log (and so database). */
static int lock_dir(struct ext_node *n, char *errmsg, size_t errmsg_len)
{
    char path[4200];
    if (mkdir(n->cfg.dir, 0700) != 0 && errno != EEXIST) {
        snprintf(errmsg, errmsg_len, "dir: cannot create %s: %s", n->cfg.dir,
                 strerror(errno));
        return RAFT_IOERR;
    }
    snprintf(path, sizeof path, "%s/node.lock", n->cfg.dir);
    n->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (n->lock_fd < 0) {
        snprintf(errmsg, errmsg_len, "dir: cannot open %s: %s", path,
                 strerror(errno));
        return RAFT_IOERR;
    }
    if (flock(n->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        snprintf(errmsg, errmsg_len,
                 "dir: another process runs a node on %s (%s is locked)",
                 n->cfg.dir, path);
        close(n->lock_fd);
        return RAFT_BUSY;
    }
    return 0;
}

/* repair_log handles a log entry whose checksum fails (lmdb_log reports
 * RAFT_CORRUPT): the garbage is never used. An entry the database already
 * holds (index <= @applied) is not needed: the log is compacted past it.
 * A later one is dropped with the rest of the log after it, which the
 * leader sends again (or a snapshot replaces). Returns 0 or the error. */
static int repair_log(struct ext_node *n, raft_index first, raft_index last,
                      uint64_t applied)
{
    raft_index bad = 0;
    int rc;
    for (raft_index i = first; i <= last && bad == 0; i++) {
        struct raft_entry *e = NULL;
        unsigned cnt = 0;
        if (lmdb_log_entries(n->log, i, i, 0, &e, &cnt) == RAFT_CORRUPT) {
            bad = i;
        }
        lmdb_log_entries_free(e, cnt);
    }
    if (bad == 0) {
        return RAFT_CORRUPT;
    }
    if (bad < applied) {
        node_log(n, RAFT_LOG_WARN,
                 "log entry %" PRIu64 " is corrupt (checksum mismatch); the "
                 "database already holds it: compacting the log through "
                 "%" PRIu64,
                 bad, applied);
        rc = lmdb_log_compact(n->log, applied);
    } else if (bad == applied) {
        node_log(n, RAFT_LOG_WARN,
                 "log entry %" PRIu64 " is corrupt (checksum mismatch); the "
                 "database already holds it: the log restarts after it and "
                 "the leader sends what follows again",
                 bad);
        rc = lmdb_log_reset(n->log, applied, sql_fsm_applied_term(n->fsm));
    } else {
        node_log(n, RAFT_LOG_WARN,
                 "log entry %" PRIu64 " is corrupt (checksum mismatch) and "
                 "not applied here: dropping the log from it on; the leader "
                 "sends those entries again",
                 bad);
        rc = lmdb_log_truncate_suffix(n->log, bad);
    }
    return rc;
}

/* read_bounds reads the log's first and last index and its snapshot
 * boundary; on failure @errmsg names the log. */
static int read_bounds(struct ext_node *n, raft_index *first,
                       raft_index *last, raft_index *snap_index,
                       raft_term *snap_term, char *errmsg, size_t errmsg_len)
{
    int rc = lmdb_log_bounds(n->log, first, last);
    if (rc == 0) {
        rc = lmdb_log_snapshot(n->log, snap_index, snap_term);
    }
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "log %s: %s", n->cfg.dir,
                 lmdb_log_errmsg(n->log));
    }
    return rc;
}

/* load_core builds the Raft core from the log and the applied index. */
static int load_core(struct ext_node *n, struct raft **out, char *errmsg,
                     size_t errmsg_len)
{
    struct raft_hard_state hs;
    struct raft_config rc_cfg;
    raft_id voters[EXT_MAX_NODES];
    raft_index first, last, snap_index;
    raft_term snap_term;
    struct raft_entry *entries = NULL;
    unsigned n_entries = 0;
    uint64_t applied = sql_fsm_applied(n->fsm);
    int rc;

    rc = lmdb_log_hard_state(n->log, &hs);
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "log %s: %s", n->cfg.dir,
                 lmdb_log_errmsg(n->log));
        return rc;
    }
    rc = read_bounds(n, &first, &last, &snap_index, &snap_term, errmsg,
                     errmsg_len);
    if (rc != 0) {
        return rc;
    }
    if (applied > last && hs.term > 0) {
        /* A snapshot was installed but the node stopped before the log was
         * reset after it: the database holds only committed entries, so
         * the log restarts after them. */
        node_log(n, RAFT_LOG_WARN,
                 "database applied up to %" PRIu64 ", log ends at %" PRIu64
                 ": resetting the log after the database (interrupted "
                 "snapshot install)",
                 applied, last);
        rc = lmdb_log_reset(n->log, applied, sql_fsm_applied_term(n->fsm));
        if (rc != 0) {
            snprintf(errmsg, errmsg_len, "log %s: %s", n->cfg.dir,
                     lmdb_log_errmsg(n->log));
            return rc;
        }
        rc = read_bounds(n, &first, &last, &snap_index, &snap_term, errmsg,
                         errmsg_len);
        if (rc != 0) {
            return rc;
        }
    } else if (applied > last) {
        snprintf(errmsg, errmsg_len,
                 "database %s was applied up to index %" PRIu64
                 " but the log in %s is new (no term, no vote): they do not "
                 "belong together; restore the log directory or start from "
                 "a fresh database",
                 n->path, applied, n->cfg.dir);
        return RAFT_INVALID;
    }
    if (applied < snap_index) {
        snprintf(errmsg, errmsg_len,
                 "database %s was applied up to index %" PRIu64
                 " but the log in %s was compacted up to %" PRIu64
                 ": the database lost durable writes",
                 n->path, applied, n->cfg.dir, snap_index);
        return RAFT_CORRUPT;
    }
    if (last >= first) {
        rc = lmdb_log_entries(n->log, first, last, 0, &entries, &n_entries);
        if (rc == RAFT_CORRUPT) {
            rc = repair_log(n, first, last, applied);
            if (rc == 0) {
                rc = lmdb_log_bounds(n->log, &first, &last);
            }
            if (rc == 0) {
                rc = lmdb_log_snapshot(n->log, &snap_index, &snap_term);
            }
            if (rc == 0 && last >= first) {
                rc = lmdb_log_entries(n->log, first, last, 0, &entries,
                                      &n_entries);
            }
        }
        if (rc != 0) {
            snprintf(errmsg, errmsg_len, "log %s: %s", n->cfg.dir,
                     lmdb_log_errmsg(n->log));
            return rc;
        }
    }
    for (unsigned i = 0; i < n->cfg.n_members; i++) {
        voters[i] = n->cfg.members[i].id;
    }
    memset(&rc_cfg, 0, sizeof rc_cfg);
    rc_cfg.id = n->cfg.id;
    rc_cfg.voters = voters;
    rc_cfg.n_voters = n->cfg.n_members;
    rc_cfg.election_timeout = n->cfg.election_timeout_ms;
    rc_cfg.heartbeat_interval = n->cfg.heartbeat_ms;
    rc_cfg.max_size_per_msg = MAX_SIZE_PER_MSG;
    rc_cfg.max_inflight_msgs = MAX_INFLIGHT_MSGS;
    rc_cfg.seed = random_u64();
    rc = raft_restore(&rc_cfg, &hs, snap_index, snap_term, entries,
                      n_entries, applied, out);
    lmdb_log_entries_free(entries, n_entries);
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "raft: %s", raft_strerror(rc));
        return rc;
    }
    atomic_store(&n->applied, applied);
    atomic_store(&n->durable, sql_fsm_durable(n->fsm));
    return 0;
}

/* start_driver hands @core to the Raft driver with this node's storage
 * and callbacks. */
static int start_driver(struct ext_node *n, struct raft *core, char *errmsg,
                        size_t errmsg_len)
{
    struct raft_uv_peer peers[EXT_MAX_NODES];
    struct raft_uv_node_config dc;
    struct raft_uv_storage storage = {
        .data = n,
        .append = on_append,
        .compact = on_compact,
        .snapshot_create = on_snapshot_create,
        .snapshot_install = on_snapshot_install,
    };
    struct raft_uv_node_callbacks cb = {
        .data = n,
        .apply = on_apply,
        .forward = on_forward,
        .wake = on_wake,
        .tick = on_tick,
        .stepped = on_stepped,
        .log = on_driver_log,
    };
    unsigned n_peers = 0;

    for (unsigned i = 0; i < n->cfg.n_members; i++) {
        const struct ext_member *m = &n->cfg.members[i];
        if (m->id == n->cfg.id) {
            continue;
        }
        peers[n_peers].id = m->id;
        snprintf(peers[n_peers].host, sizeof peers[n_peers].host, "%s",
                 m->host);
        peers[n_peers].port = m->port;
        n_peers++;
    }
    memset(&dc, 0, sizeof dc);
    dc.id = n->cfg.id;
    dc.listen_host = n->cfg.listen_host;
    dc.listen_port = n->cfg.listen_port;
    dc.peers = peers;
    dc.n_peers = n_peers;
    dc.max_frame_bytes = n->cfg.max_request_bytes + FRAME_HEADROOM;
    dc.tick_ms = EXT_TICK_MS;
    dc.snapshot_dir = n->snapshot_dir;
    dc.snapshot_chunk_bytes = n->cfg.snapshot_chunk_bytes;
    return raft_uv_node_start(core, &dc, &storage, &cb, &n->driver, errmsg,
                              errmsg_len);
}

int ext_node_start(const char *db_path, const struct ext_config *cfg,
                   struct ext_node **out, char *errmsg, size_t errmsg_len)
{
    struct ext_node *n = calloc(1, sizeof *n);
    struct raft *core = NULL;
    pthread_condattr_t ca;
    int rc;

    if (n == NULL) {
        snprintf(errmsg, errmsg_len, "out of memory");
        return RAFT_NOMEM;
    }
    snprintf(n->path, sizeof n->path, "%s", db_path);
    n->cfg = *cfg;
    n->seed_state = random_u64();
    /* Request ids are (node id, sequence): start each run's sequence at a
     * random point so ids never repeat those of an earlier run, which the
     * state machine would skip as duplicates. */
    n->next_seq = random_u64() >> 1;
    pthread_mutex_init(&n->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&n->apply_cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&n->idle_cond, NULL);
    pthread_mutex_init(&n->snapshot_mu, NULL);

    /* The database first: a file that is no replica leaves nothing
     * behind. */
    rc = sqlbridge_open(db_path, &n->fsm, errmsg, errmsg_len);
    if (rc != 0) {
        goto err_free;
    }
    rc = lock_dir(n, errmsg, errmsg_len);
    if (rc != 0) {
        goto err_fsm_only;
    }
    rc = lmdb_log_open(cfg->dir, cfg->log_max_bytes, &n->log, errmsg,
                       errmsg_len);
    if (rc != 0) {
        char why[512];
        snprintf(why, sizeof why, "%s", errmsg);
        snprintf(errmsg, errmsg_len, "dir: cannot open the log in %s: %s",
                 cfg->dir, why);
        goto err_lock;
    }
    snprintf(n->snapshot_dir, sizeof n->snapshot_dir, "%.4000s/snapshots",
             cfg->dir);
    if (mkdir(n->snapshot_dir, 0700) != 0 && errno != EEXIST) {
        snprintf(errmsg, errmsg_len, "dir: cannot create %s: %s",
                 n->snapshot_dir, strerror(errno));
        rc = RAFT_IOERR;
        goto err_log;
    }
    rc = load_core(n, &core, errmsg, errmsg_len);
    if (rc != 0) {
        goto err_log;
    }
    n->core = core;
    status_refresh(n);
    if (pthread_create(&n->apply_thread, NULL, applier_main, n) != 0) {
        snprintf(errmsg, errmsg_len, "cannot start the apply thread");
        rc = RAFT_NOMEM;
        goto err_raft;
    }
    rc = start_driver(n, core, errmsg, errmsg_len);
    if (rc != 0) {
        goto err_apply;
    }
    node_log(n, RAFT_LOG_INFO, "started: listen %s:%u, log %s, applied %" PRIu64,
             cfg->listen_host, cfg->listen_port, cfg->dir,
             (uint64_t)atomic_load(&n->applied));
    *out = n;
    return 0;

err_apply:
    pthread_mutex_lock(&n->mu);
    n->apply_stop = true;
    pthread_cond_signal(&n->apply_cond);
    pthread_mutex_unlock(&n->mu);
    pthread_join(n->apply_thread, NULL);
err_raft:
    raft_close(core);
err_log:
    lmdb_log_close(n->log);
err_lock:
    close(n->lock_fd);
err_fsm_only:
    sql_fsm_close(n->fsm);
err_free:
    pthread_cond_destroy(&n->apply_cond);
    pthread_cond_destroy(&n->idle_cond);
    pthread_mutex_destroy(&n->snapshot_mu);
    pthread_mutex_destroy(&n->mu);
    free(n);
    return rc;
}

void ext_node_stop(struct ext_node *n)
{
    pthread_mutex_lock(&n->mu);
    n->shutdown = true;
    pthread_mutex_unlock(&n->mu);

    /* The driver finishes its running log write, joins its loop thread
     * and closes the core; no callback runs after this. */
    raft_uv_node_stop(n->driver);
    n->driver = NULL;
    n->core = NULL;
    exec_drop_forwarded(n);

    pthread_mutex_lock(&n->mu);
    n->apply_stop = true;
    pthread_cond_signal(&n->apply_cond);
    pthread_mutex_unlock(&n->mu);
    pthread_join(n->apply_thread, NULL);

    exec_fail_all(n, "the node is shutting down (raft_stop)");

    for (unsigned i = 0; i < n->n_apply_queue; i++) {
        raft_buf_unref(n->apply_queue[i].data);
    }
    free(n->apply_queue);
    sql_fsm_close(n->fsm);
    lmdb_log_close(n->log);
    close(n->lock_fd);
    node_log(n, RAFT_LOG_INFO, "stopped");
    pthread_cond_destroy(&n->apply_cond);
    pthread_cond_destroy(&n->idle_cond);
    pthread_mutex_destroy(&n->snapshot_mu);
    pthread_mutex_destroy(&n->mu);
    free(n);
}

uint64_t ext_node_leader(struct ext_node *n)
{
    uint64_t id;
    pthread_mutex_lock(&n->mu);
    id = n->status.leader;
    pthread_mutex_unlock(&n->mu);
    return id;
}

uint64_t ext_node_id(const struct ext_node *n)
{
    return n->cfg.id;
}

void ext_node_shutdown(struct ext_node *n)
{
    exec_fail_all(n, "the node is shutting down (raft_stop)");
}
