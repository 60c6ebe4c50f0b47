/* The node runtime's composition root: start and stop, the loop thread,
 * carrying out the Raft core's updates, and the LMDB write jobs.
 *
 * Happy path of an update (raft.h driver contract):
 *   1. hard state and entries are merged into the pending disk job; the
 *      job runs on the libuv thread pool when none is running (group
 *      commit: one LMDB transaction, one fsync, for all that arrived);
 *   2. messages go out at once, unless the update changed the hard state:
 *      then they are copied into the job and sent after it is durable;
 *   3. committed entries go to the apply thread.
 * When a job is durable the loop sends its held messages and steps
 * RAFT_EVENT_PERSISTED with its last entry.
 * Failure modes: a failed LMDB write (log full, I/O error) is reported in
 * status and the node stops writing: it neither acknowledges nor votes
 * again until restarted, so nothing undurable is ever acknowledged. */

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "../raft/message.h"
#include "node_internal.h"

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

uint64_t node_now(struct ext_node *n)
{
    uv_update_time(&n->loop);
    return uv_now(&n->loop);
}

static void transport_log(void *data, int level, const char *msg)
{
    node_log(data, level, "transport: %s", msg);
}

void node_send(struct ext_node *n, const struct raft_message *m)
{
    int rc;
    if (n->transport == NULL) {
        return;
    }
    rc = raft_uv_transport_send(n->transport, m);
    if (rc != 0 && rc != RAFT_NOCONN) {
        node_log(n, RAFT_LOG_WARN, "send to %" PRIu64 ": %s", m->to,
                 raft_strerror(rc));
    }
}

/* ---- Disk jobs ---------------------------------------------------------- */

static void job_clear(struct ext_disk_job *j)
{
    for (unsigned i = 0; i < j->n_entries; i++) {
        raft_buf_unref(j->entries[i].data);
    }
    for (unsigned i = 0; i < j->n_held; i++) {
        raft_message_release(&j->held[i]);
    }
    free(j->entries);
    free(j->held);
    memset(j, 0, sizeof *j);
}

static bool job_empty(const struct ext_disk_job *j)
{
    return !j->has_hs && j->n_entries == 0 && j->n_held == 0;
}

/* msg_clone deep-copies @src into @dst: the entries array is copied and
 * every buf referenced, so it can be freed by raft_message_release. */
static int msg_clone(const struct raft_message *src, struct raft_message *dst)
{
    *dst = *src;
    if (src->type == RAFT_MSG_APPEND_ENTRIES &&
        src->append_entries.n_entries > 0) {
        uint32_t cnt = src->append_entries.n_entries;
        struct raft_entry *e = malloc(cnt * sizeof *e);
        if (e == NULL) {
            return RAFT_NOMEM;
        }
        memcpy(e, src->append_entries.entries, cnt * sizeof *e);
        for (uint32_t i = 0; i < cnt; i++) {
            raft_buf_ref(e[i].data);
        }
        dst->append_entries.entries = e;
    } else if (src->type == RAFT_MSG_FORWARD) {
        raft_buf_ref(src->forward.data);
    }
    return 0;
}

/* job_merge adds an update's durable work to @j. Entries starting at or
 * before the job's tail replace that tail (a conflicting suffix). */
static int job_merge(struct ext_disk_job *j, const struct raft_update *u)
{
    if (u->hard_state_changed) {
        j->has_hs = true;
        j->hs = u->hard_state;
    }
    if (u->n_entries > 0) {
        raft_index first = u->entries[0].index;
        while (j->n_entries > 0 &&
               j->entries[j->n_entries - 1].index >= first) {
            raft_buf_unref(j->entries[--j->n_entries].data);
        }
        if (j->n_entries + u->n_entries > j->cap_entries) {
            unsigned cap = (j->n_entries + u->n_entries) * 2;
            struct raft_entry *e = realloc(j->entries, cap * sizeof *e);
            if (e == NULL) {
                return RAFT_NOMEM;
            }
            j->entries = e;
            j->cap_entries = cap;
        }
        for (unsigned i = 0; i < u->n_entries; i++) {
            j->entries[j->n_entries] = u->entries[i];
            raft_buf_ref(u->entries[i].data);
            j->n_entries++;
        }
    }
    if (u->hard_state_changed && u->n_messages > 0) {
        if (j->n_held + u->n_messages > j->cap_held) {
            unsigned cap = (j->n_held + u->n_messages) * 2;
            struct raft_message *m = realloc(j->held, cap * sizeof *m);
            if (m == NULL) {
                return RAFT_NOMEM;
            }
            j->held = m;
            j->cap_held = cap;
        }
        for (unsigned i = 0; i < u->n_messages; i++) {
            int rc = msg_clone(&u->messages[i], &j->held[j->n_held]);
            if (rc != 0) {
                return rc;
            }
            j->n_held++;
        }
    }
    return 0;
}

static void disk_work(uv_work_t *req)
{
    struct ext_node *n = req->data;
    struct ext_disk_job *j = &n->running;
    if (!j->has_hs && j->n_entries == 0) {
        j->rc = 0;
        return;
    }
    j->rc = lmdb_log_append(n->log, j->has_hs ? &j->hs : NULL, j->entries,
                            j->n_entries);
    if (j->rc != 0) {
        snprintf(j->errmsg, sizeof j->errmsg, "%s",
                 lmdb_log_errmsg(n->log));
    }
}

static void disk_start(struct ext_node *n);

static void disk_after_work(uv_work_t *req, int status)
{
    struct ext_node *n = req->data;
    struct ext_disk_job *j = &n->running;
    n->disk_busy = false;
    if (status != 0 || j->rc != 0) {
        n->disk_failed = true;
        node_set_error(n,
                       "log write failed, node stops writing until "
                       "restarted: %s",
                       status != 0 ? uv_strerror(status) : j->errmsg);
        job_clear(j);
        return;
    }
    bool persisted = false;
    struct raft_event ev = {.type = RAFT_EVENT_PERSISTED};
    if (!n->stopping) {
        for (unsigned i = 0; i < j->n_held; i++) {
            node_send(n, &j->held[i]);
        }
        if (j->n_entries > 0) {
            ev.persisted.index = j->entries[j->n_entries - 1].index;
            ev.persisted.term = j->entries[j->n_entries - 1].term;
            persisted = true;
        }
    }
    /* Clear before stepping: the step may start the next job in
     * n->running. */
    job_clear(j);
    if (persisted) {
        node_step(n, &ev, NULL);
    }
    disk_start(n);
}

static void disk_start(struct ext_node *n)
{
    int rc;
    if (n->disk_busy || n->disk_failed || n->stopping ||
        job_empty(&n->pending)) {
        return;
    }
    n->running = n->pending;
    memset(&n->pending, 0, sizeof n->pending);
    n->disk_req.data = n;
    rc = uv_queue_work(&n->loop, &n->disk_req, disk_work, disk_after_work);
    if (rc != 0) {
        n->disk_failed = true;
        node_set_error(n, "log write: uv_queue_work: %s", uv_strerror(rc));
        job_clear(&n->running);
        return;
    }
    n->disk_busy = true;
}

/* ---- Updates ------------------------------------------------------------ */

int node_step(struct ext_node *n, const struct raft_event *event,
              struct raft_update *out)
{
    struct raft_update local;
    struct raft_update *up = out != NULL ? out : &local;
    struct raft_update u;
    int rc;
    if (n->disk_failed) {
        /* Without a working log the node must not vote or acknowledge. */
        return RAFT_IOERR;
    }
    rc = raft_step(n->raft, event, up);
    if (rc != 0) {
        return rc;
    }
    u = *up;
    if (u.hard_state_changed || u.n_entries > 0) {
        rc = job_merge(&n->pending, &u);
        if (rc != 0) {
            n->disk_failed = true;
            node_set_error(n, "log write: out of memory");
            return rc;
        }
    }
    if (!u.hard_state_changed) {
        for (unsigned i = 0; i < u.n_messages; i++) {
            node_send(n, &u.messages[i]);
        }
    }
    if (u.n_committed > 0 &&
        applier_push(n, u.committed, u.n_committed) != 0) {
        node_set_error(n, "apply queue: out of memory");
    }
    disk_start(n);
    status_refresh(n);
    return 0;
}

/* ---- Loop callbacks ----------------------------------------------------- */

static void on_recv(void *data, const struct raft_message *m)
{
    struct ext_node *n = data;
    struct raft_event ev;
    int rc;
    if (n->stopping) {
        return;
    }
    if (m->type == RAFT_MSG_FORWARD || m->type == RAFT_MSG_FORWARD_RESULT) {
        exec_on_forward(n, m);
        return;
    }
    ev.type = RAFT_EVENT_RECEIVE;
    ev.receive = *m;
    rc = node_step(n, &ev, NULL);
    if (rc != 0 && rc != RAFT_IOERR) {
        node_log(n, RAFT_LOG_WARN, "message type %u from %" PRIu64 ": %s",
                 m->type, m->from, raft_strerror(rc));
    }
}

static void on_tick(uv_timer_t *t)
{
    struct ext_node *n = t->data;
    struct raft_event ev = {.type = RAFT_EVENT_TICK};
    ev.tick.now = node_now(n);
    node_step(n, &ev, NULL);
    exec_on_tick(n);
}

static void on_wake(uv_async_t *a)
{
    exec_on_wake(a->data);
}

static void on_transport_closed(void *data)
{
    struct ext_node *n = data;
    n->transport = NULL;
}

static void on_stop(uv_async_t *a)
{
    struct ext_node *n = a->data;
    n->stopping = true;
    uv_timer_stop(&n->tick);
    uv_close((uv_handle_t *)&n->tick, NULL);
    uv_close((uv_handle_t *)&n->wake, NULL);
    uv_close((uv_handle_t *)&n->stop_async, NULL);
    if (n->transport != NULL) {
        raft_uv_transport_close(n->transport, on_transport_closed, n);
    }
}

static void *loop_main(void *arg)
{
    struct ext_node *n = arg;
    uv_run(&n->loop, UV_RUN_DEFAULT);
    return NULL;
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

/* load_core builds the Raft core from the log and the applied index. */
static int load_core(struct ext_node *n, char *errmsg, size_t errmsg_len)
{
    struct raft_hard_state hs;
    struct raft_config rc_cfg;
    raft_id voters[EXT_MAX_NODES];
    raft_index first, last;
    struct raft_entry *entries = NULL;
    unsigned n_entries = 0;
    uint64_t applied = sql_fsm_applied(n->fsm);
    int rc;

    rc = lmdb_log_hard_state(n->log, &hs);
    if (rc == 0) {
        rc = lmdb_log_bounds(n->log, &first, &last);
    }
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "log %s: %s", n->cfg.dir,
                 lmdb_log_errmsg(n->log));
        return rc;
    }
    if (applied > last) {
        snprintf(errmsg, errmsg_len,
                 "database %s was applied up to index %" PRIu64
                 " but the log in %s ends at %" PRIu64
                 ": they do not belong together",
                 n->path, applied, n->cfg.dir, last);
        return RAFT_INVALID;
    }
    if (last >= first) {
        rc = lmdb_log_entries(n->log, first, last, 0, &entries, &n_entries);
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
    rc = raft_new(&rc_cfg, &hs, first, entries, n_entries, applied,
                  &n->raft);
    lmdb_log_entries_free(entries, n_entries);
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "raft: %s", raft_strerror(rc));
        return rc;
    }
    atomic_store(&n->applied, applied);
    return 0;
}

static int start_loop(struct ext_node *n, char *errmsg, size_t errmsg_len)
{
    struct raft_uv_peer peers[EXT_MAX_NODES];
    unsigned n_peers = 0;
    int rc;

    rc = uv_loop_init(&n->loop);
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "uv_loop_init: %s", uv_strerror(rc));
        return RAFT_IOERR;
    }
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
    rc = raft_uv_transport_start(
        &n->loop, n->cfg.id, n->cfg.listen_host, n->cfg.listen_port, peers,
        n_peers, n->cfg.max_request_bytes + FRAME_HEADROOM, on_recv,
        transport_log, n, &n->transport, errmsg, errmsg_len);
    if (rc != 0) {
        uv_loop_close(&n->loop);
        return rc;
    }
    uv_async_init(&n->loop, &n->wake, on_wake);
    n->wake.data = n;
    uv_async_init(&n->loop, &n->stop_async, on_stop);
    n->stop_async.data = n;
    uv_timer_init(&n->loop, &n->tick);
    n->tick.data = n;
    uv_timer_start(&n->tick, on_tick, 0, EXT_TICK_MS);
    if (pthread_create(&n->loop_thread, NULL, loop_main, n) != 0) {
        snprintf(errmsg, errmsg_len, "cannot start the loop thread");
        on_stop(&n->stop_async);
        uv_run(&n->loop, UV_RUN_DEFAULT);
        uv_loop_close(&n->loop);
        return RAFT_NOMEM;
    }
    return 0;
}

int ext_node_start(const char *db_path, const struct ext_config *cfg,
                   struct ext_node **out, char *errmsg, size_t errmsg_len)
{
    struct ext_node *n = calloc(1, sizeof *n);
    pthread_condattr_t ca;
    int rc;

    if (n == NULL) {
        snprintf(errmsg, errmsg_len, "out of memory");
        return RAFT_NOMEM;
    }
    snprintf(n->path, sizeof n->path, "%s", db_path);
    n->cfg = *cfg;
    n->seed_state = random_u64();
    pthread_mutex_init(&n->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&n->apply_cond, &ca);
    pthread_condattr_destroy(&ca);

    rc = lmdb_log_open(cfg->dir, cfg->log_max_bytes, &n->log, errmsg,
                       errmsg_len);
    if (rc != 0) {
        goto err_free;
    }
    rc = sql_fsm_open(db_path, &n->fsm, errmsg, errmsg_len);
    if (rc != 0) {
        goto err_log;
    }
    rc = load_core(n, errmsg, errmsg_len);
    if (rc != 0) {
        goto err_fsm;
    }
    status_refresh(n);
    if (pthread_create(&n->apply_thread, NULL, applier_main, n) != 0) {
        snprintf(errmsg, errmsg_len, "cannot start the apply thread");
        rc = RAFT_NOMEM;
        goto err_raft;
    }
    rc = start_loop(n, errmsg, errmsg_len);
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
    raft_close(n->raft);
err_fsm:
    sql_fsm_close(n->fsm);
err_log:
    lmdb_log_close(n->log);
err_free:
    pthread_cond_destroy(&n->apply_cond);
    pthread_mutex_destroy(&n->mu);
    free(n);
    return rc;
}

void ext_node_stop(struct ext_node *n)
{
    pthread_mutex_lock(&n->mu);
    n->shutdown = true;
    pthread_mutex_unlock(&n->mu);

    /* The loop finishes the running disk job, closes its handles and
     * returns; after the join nothing runs on it. */
    uv_async_send(&n->stop_async);
    pthread_join(n->loop_thread, NULL);
    uv_loop_close(&n->loop);

    pthread_mutex_lock(&n->mu);
    n->apply_stop = true;
    pthread_cond_signal(&n->apply_cond);
    pthread_mutex_unlock(&n->mu);
    pthread_join(n->apply_thread, NULL);

    exec_fail_all(n, "the node is shutting down (raft_stop)");

    job_clear(&n->pending);
    job_clear(&n->running);
    for (unsigned i = 0; i < n->n_apply_queue; i++) {
        raft_buf_unref(n->apply_queue[i].data);
    }
    free(n->apply_queue);
    raft_close(n->raft);
    sql_fsm_close(n->fsm);
    lmdb_log_close(n->log);
    node_log(n, RAFT_LOG_INFO, "stopped");
    pthread_cond_destroy(&n->apply_cond);
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
