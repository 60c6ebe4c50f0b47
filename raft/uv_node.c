/* The node driver: runs the pure Raft core on a libuv loop thread of its
 * own and carries out its updates (raft.h driver contract).
 *
 * Happy path of an update:
 *   1. hard state and entries are merged into the pending storage job; the
 *      job runs on the libuv thread pool when none is running (group
 *      commit: one storage write, one fsync, for all that arrived);
 *   2. messages go out at once, unless the update changed the hard state:
 *      then they are copied into the job and sent once it is durable;
 *   3. committed entries go to the application's apply callback.
 * When a job is durable the loop sends its held messages and steps
 * RAFT_EVENT_PERSISTED with its last entry.
 * Failure modes: a failed storage write (log full, I/O error) is logged at
 * ERROR and the driver stops stepping the core: it neither acknowledges nor
 * votes again until restarted, so nothing undurable is ever acknowledged.
 * A message the core rejects is logged and dropped. */

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "message.h"
#include "uv.h"
#include "uv_node.h"

/* One storage write: the merged hard state and entries of the updates that
 * arrived while the previous write ran, and the messages that may only be
 * sent once it is durable. */
struct job {
    bool has_hs;               /* write hs */
    struct raft_hard_state hs; /* term and vote */
    struct raft_entry *entries; /* owned references, n_entries */
    unsigned n_entries;
    unsigned cap_entries;
    struct raft_message *held; /* deep copies, n_held */
    unsigned n_held;
    unsigned cap_held;
    int rc;                    /* result of the write */
    char errmsg[256];          /* its message on failure */
};

struct raft_uv_node {
    raft_id id;                          /* this server */
    struct raft *raft;                   /* the core (loop thread) */
    struct raft_uv_storage storage;      /* durable writes */
    struct raft_uv_node_callbacks cb;    /* the application */
    unsigned tick_ms;                    /* tick period */
    uv_loop_t loop;                      /* the driver's own loop */
    uv_thread_t thread;                  /* runs the loop */
    uv_async_t wake;                     /* raft_uv_node_wake */
    uv_async_t stop_async;               /* raft_uv_node_stop */
    uv_timer_t tick;                     /* drives RAFT_EVENT_TICK */
    struct raft_uv_transport *transport; /* peers, NULL once closed */
    bool stopping;                       /* closing handles */
    uv_work_t disk_req;                  /* the running job's request */
    bool disk_busy;                      /* a job is running */
    bool disk_failed;                    /* a write failed: stop */
    struct job running;                  /* written by the worker */
    struct job pending;                  /* being merged */
    struct raft_uv_node_stats stats;     /* counters */
};

static void logf_(struct raft_uv_node *d, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void logf_(struct raft_uv_node *d, int level, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    if (d->cb.log == NULL) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    d->cb.log(d->cb.data, level, line);
}

/* ---- Storage jobs ------------------------------------------------------- */

static void job_clear(struct job *j)
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

static bool job_empty(const struct job *j)
{
    return !j->has_hs && j->n_entries == 0 && j->n_held == 0;
}

/* msg_clone deep-copies @src into @dst: the entries array is copied and
 * every buf referenced, so raft_message_release frees it. */
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
static int job_merge(struct job *j, const struct raft_update *u)
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

static void fail_storage(struct raft_uv_node *d, const char *why)
{
    d->disk_failed = true;
    logf_(d, RAFT_LOG_ERROR,
          "log write failed, the node stops writing, voting and "
          "acknowledging until restarted: %s",
          why);
}

static void disk_work(uv_work_t *req)
{
    struct raft_uv_node *d = req->data;
    struct job *j = &d->running;
    j->rc = 0;
    if (j->has_hs || j->n_entries > 0) {
        j->rc = d->storage.append(d->storage.data, j->has_hs ? &j->hs : NULL,
                                  j->entries, j->n_entries, j->errmsg,
                                  sizeof j->errmsg);
    }
}

static int step(struct raft_uv_node *d, const struct raft_event *event,
                struct raft_update *out);

static void disk_start(struct raft_uv_node *d);

static void disk_after_work(uv_work_t *req, int status)
{
    struct raft_uv_node *d = req->data;
    struct job *j = &d->running;
    struct raft_event ev = {.type = RAFT_EVENT_PERSISTED};
    bool persisted = false;

    d->disk_busy = false;
    if (status == 0 && j->rc == 0 && (j->has_hs || j->n_entries > 0)) {
        d->stats.n_writes++;
        d->stats.n_entries_written += j->n_entries;
    }
    if (status != 0 || j->rc != 0) {
        fail_storage(d, status != 0 ? uv_strerror(status) : j->errmsg);
        job_clear(j);
        return;
    }
    if (!d->stopping) {
        for (unsigned i = 0; i < j->n_held; i++) {
            raft_uv_node_send(d, &j->held[i]);
        }
        if (j->n_entries > 0) {
            ev.persisted.index = j->entries[j->n_entries - 1].index;
            ev.persisted.term = j->entries[j->n_entries - 1].term;
            persisted = true;
        }
    }
    /* Clear before stepping: the step may start the next job. */
    job_clear(j);
    if (persisted) {
        step(d, &ev, NULL);
    }
    disk_start(d);
}

static void disk_start(struct raft_uv_node *d)
{
    int rc;
    if (d->disk_busy || d->disk_failed || d->stopping ||
        job_empty(&d->pending)) {
        return;
    }
    d->running = d->pending;
    memset(&d->pending, 0, sizeof d->pending);
    d->disk_req.data = d;
    rc = uv_queue_work(&d->loop, &d->disk_req, disk_work, disk_after_work);
    if (rc != 0) {
        fail_storage(d, uv_strerror(rc));
        job_clear(&d->running);
        return;
    }
    d->disk_busy = true;
}

/* ---- Stepping the core -------------------------------------------------- */

/* step feeds @event to the core and carries out the update; @out, when not
 * NULL, receives it. */
static int step(struct raft_uv_node *d, const struct raft_event *event,
                struct raft_update *out)
{
    struct raft_update local;
    struct raft_update *u = out != NULL ? out : &local;
    int rc;

    if (d->disk_failed) {
        /* Without working storage the node must not vote or acknowledge. */
        return RAFT_IOERR;
    }
    if (d->stopping) {
        return RAFT_SHUTDOWN;
    }
    rc = raft_step(d->raft, event, u);
    if (rc != 0) {
        return rc;
    }
    if (u->hard_state_changed || u->n_entries > 0) {
        rc = job_merge(&d->pending, u);
        if (rc != 0) {
            fail_storage(d, "out of memory");
            return rc;
        }
    }
    if (!u->hard_state_changed) {
        for (unsigned i = 0; i < u->n_messages; i++) {
            raft_uv_node_send(d, &u->messages[i]);
        }
    }
    if (u->n_committed > 0 && d->cb.apply != NULL) {
        d->cb.apply(d->cb.data, u->committed, u->n_committed);
    }
    disk_start(d);
    if (d->cb.stepped != NULL) {
        d->cb.stepped(d->cb.data);
    }
    return 0;
}

int raft_uv_node_propose(struct raft_uv_node *d, struct raft_buf *const *bufs,
                         unsigned n, raft_index *out_index,
                         raft_term *out_term)
{
    struct raft_event ev = {.type = RAFT_EVENT_PROPOSE};
    struct raft_update u;
    int rc;
    ev.propose.bufs = bufs;
    ev.propose.n = n;
    rc = step(d, &ev, &u);
    if (rc == 0) {
        *out_index = u.proposed_index;
        *out_term = u.proposed_term;
    }
    return rc;
}

int raft_uv_node_send(struct raft_uv_node *d, const struct raft_message *m)
{
    int rc;
    if (d->transport == NULL) {
        return RAFT_SHUTDOWN;
    }
    rc = raft_uv_transport_send(d->transport, m);
    if (rc == 0 && m->type == RAFT_MSG_APPEND_ENTRIES &&
        m->append_entries.n_entries > 0) {
        d->stats.n_appends_sent++;
        d->stats.n_entries_sent += m->append_entries.n_entries;
    }
    if (rc != 0 && rc != RAFT_NOCONN) {
        logf_(d, RAFT_LOG_WARN, "send to %" PRIu64 ": %s", m->to,
              raft_strerror(rc));
    }
    return rc;
}

const struct raft *raft_uv_node_core(const struct raft_uv_node *d)
{
    return d->raft;
}

uint64_t raft_uv_node_now(struct raft_uv_node *d)
{
    uv_update_time(&d->loop);
    return uv_now(&d->loop);
}

void raft_uv_node_stats(const struct raft_uv_node *d,
                        struct raft_uv_node_stats *out)
{
    *out = d->stats;
}

bool raft_uv_node_failed(const struct raft_uv_node *d)
{
    return d->disk_failed;
}

bool raft_uv_node_connected(const struct raft_uv_node *d, raft_id id)
{
    return d->transport != NULL &&
           raft_uv_transport_connected(d->transport, id);
}

/* ---- Loop callbacks ----------------------------------------------------- */

static void on_recv(void *data, const struct raft_message *m)
{
    struct raft_uv_node *d = data;
    struct raft_event ev;
    int rc;
    if (d->stopping) {
        return;
    }
    if (m->type == RAFT_MSG_FORWARD || m->type == RAFT_MSG_FORWARD_RESULT) {
        if (d->cb.forward != NULL) {
            d->cb.forward(d->cb.data, m);
        }
        return;
    }
    ev.type = RAFT_EVENT_RECEIVE;
    ev.receive = *m;
    rc = step(d, &ev, NULL);
    if (rc != 0 && rc != RAFT_IOERR && rc != RAFT_SHUTDOWN) {
        logf_(d, RAFT_LOG_WARN, "message type %u from %" PRIu64 ": %s",
              m->type, m->from, raft_strerror(rc));
    }
}

static void on_tick(uv_timer_t *t)
{
    struct raft_uv_node *d = t->data;
    struct raft_event ev = {.type = RAFT_EVENT_TICK};
    ev.tick.now = raft_uv_node_now(d);
    step(d, &ev, NULL);
    if (d->cb.tick != NULL && !d->stopping) {
        d->cb.tick(d->cb.data);
    }
}

static void on_wake(uv_async_t *a)
{
    struct raft_uv_node *d = a->data;
    if (d->cb.wake != NULL && !d->stopping) {
        d->cb.wake(d->cb.data);
    }
}

static void transport_log(void *data, int level, const char *msg)
{
    logf_(data, level, "transport: %s", msg);
}

static void on_transport_closed(void *data)
{
    struct raft_uv_node *d = data;
    d->transport = NULL;
}

static void on_stop(uv_async_t *a)
{
    struct raft_uv_node *d = a->data;
    d->stopping = true;
    uv_timer_stop(&d->tick);
    uv_close((uv_handle_t *)&d->tick, NULL);
    uv_close((uv_handle_t *)&d->wake, NULL);
    uv_close((uv_handle_t *)&d->stop_async, NULL);
    if (d->transport != NULL) {
        raft_uv_transport_close(d->transport, on_transport_closed, d);
    }
}

static void loop_main(void *arg)
{
    struct raft_uv_node *d = arg;
    uv_run(&d->loop, UV_RUN_DEFAULT);
}

/* ---- Start and stop ----------------------------------------------------- */

int raft_uv_node_start(struct raft *r, const struct raft_uv_node_config *cfg,
                       const struct raft_uv_storage *storage,
                       const struct raft_uv_node_callbacks *cb,
                       struct raft_uv_node **out, char *errmsg,
                       size_t errmsg_len)
{
    struct raft_uv_node *d;
    int rc;

    if (cfg->tick_ms == 0 || storage->append == NULL) {
        snprintf(errmsg, errmsg_len, "node: tick_ms and storage required");
        return RAFT_INVALID;
    }
    d = calloc(1, sizeof *d);
    if (d == NULL) {
        snprintf(errmsg, errmsg_len, "out of memory");
        return RAFT_NOMEM;
    }
    d->id = cfg->id;
    d->storage = *storage;
    d->cb = *cb;
    d->tick_ms = cfg->tick_ms;
    rc = uv_loop_init(&d->loop);
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "uv_loop_init: %s", uv_strerror(rc));
        free(d);
        return RAFT_IOERR;
    }
    rc = raft_uv_transport_start(&d->loop, cfg->id, cfg->listen_host,
                                 cfg->listen_port, cfg->peers, cfg->n_peers,
                                 cfg->max_frame_bytes, on_recv,
                                 transport_log, d, &d->transport, errmsg,
                                 errmsg_len);
    if (rc != 0) {
        uv_loop_close(&d->loop);
        free(d);
        return rc;
    }
    d->raft = r;
    uv_async_init(&d->loop, &d->wake, on_wake);
    d->wake.data = d;
    uv_async_init(&d->loop, &d->stop_async, on_stop);
    d->stop_async.data = d;
    uv_timer_init(&d->loop, &d->tick);
    d->tick.data = d;
    uv_timer_start(&d->tick, on_tick, 0, cfg->tick_ms);
    /* Written before the loop runs, so callbacks may already use it. */
    *out = d;
    rc = uv_thread_create(&d->thread, loop_main, d);
    if (rc != 0) {
        *out = NULL;
        snprintf(errmsg, errmsg_len, "cannot start the loop thread: %s",
                 uv_strerror(rc));
        on_stop(&d->stop_async);
        uv_run(&d->loop, UV_RUN_DEFAULT);
        uv_loop_close(&d->loop);
        free(d);
        return RAFT_IOERR;
    }
    return 0;
}

void raft_uv_node_wake(struct raft_uv_node *d)
{
    uv_async_send(&d->wake);
}

void raft_uv_node_stop(struct raft_uv_node *d)
{
    /* The loop finishes the running storage job, closes its handles and
     * returns; after the join nothing runs on it. */
    uv_async_send(&d->stop_async);
    uv_thread_join(&d->thread);
    uv_loop_close(&d->loop);
    job_clear(&d->pending);
    job_clear(&d->running);
    raft_close(d->raft);
    free(d);
}
