/* The fakes of tests/uv/fake.h: an in-memory store and a capturing
 * transport around one real driver, and the scripted follower that a
 * send hook can play. */

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include <cmocka.h>

#include "raft/message.h"
#include "tests/uv/fake.h"

/* How long a held store call waits for its release at most, ms. */
#define FAKE_HOLD_MS 10000

/* One thing queued for the loop: a frame to deliver, or a function. */
struct fake_item {
    struct fake_item *next;            /* queue */
    uint8_t *bytes;                    /* an encoded frame, or NULL */
    size_t len;                        /* its bytes */
    void (*fn)(struct fake *, void *); /* else this, with @arg */
    void *arg;                         /* its argument */
    bool *done;                        /* set under the mutex once run */
};

/* ---- Locking and waiting ----------------------------------------------- */

/* The fake whose mutex this thread holds, if any: a test that fails (a
 * cmocka assert jumps out) with it held has it released by fake_free. */
static _Thread_local struct fake *locked;

void fake_lock(struct fake *f)
{
    pthread_mutex_lock(&f->mu);
    locked = f;
}

void fake_unlock(struct fake *f)
{
    locked = NULL;
    pthread_mutex_unlock(&f->mu);
}

static struct timespec deadline_in(unsigned ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

struct timespec fake_deadline(void)
{
    return deadline_in(FAKE_WAIT_MS);
}

bool fake_wait_locked(struct fake *f, const struct timespec *deadline)
{
    return pthread_cond_timedwait(&f->cond, &f->mu, deadline) != ETIMEDOUT;
}

static void changed(struct fake *f)
{
    pthread_cond_broadcast(&f->cond);
}

/* grow makes room for one more item of @size in *@v (n, *cap). */
static void *grow(void *v, unsigned n, unsigned *cap, size_t size)
{
    if (n < *cap) {
        return v;
    }
    *cap = *cap == 0 ? 16 : *cap * 2;
    v = realloc(v, *cap * size);
    if (v == NULL) {
        abort(); /* a test helper: out of memory ends the test run */
    }
    return v;
}

/* note_thread remembers the loop thread (called on it, mutex held). */
static void note_thread(struct fake *f)
{
    if (!f->loop_known) {
        f->loop_thread = pthread_self();
        f->loop_known = true;
    }
}

/* on_remove counts a removal the driver makes (seams.on_remove), and
 * those it makes on its loop thread. */
static void on_remove(void *data, const char *path)
{
    struct fake *f = data;
    struct timespec dl;
    (void)path;
    pthread_mutex_lock(&f->mu);
    f->n_removes++;
    f->n_removes_on_loop +=
        f->loop_known && pthread_equal(pthread_self(), f->loop_thread);
    changed(f);
    if (f->hold_remove) {
        f->remove_held = true;
        changed(f);
        dl = deadline_in(FAKE_HOLD_MS);
        while (f->hold_remove && !f->release_all && fake_wait_locked(f, &dl)) {
        }
        f->remove_held = false;
        changed(f);
    }
    pthread_mutex_unlock(&f->mu);
}

/* ---- The store ----------------------------------------------------------- */

/* begin_call blocks a call of @op that a test holds (mutex held). */
static void begin_call(struct fake *f, int op)
{
    struct timespec dl;
    if (!f->hold[op]) {
        return;
    }
    f->hold[op] = false;
    f->held[op] = true;
    changed(f);
    dl = deadline_in(FAKE_HOLD_MS);
    while (f->held[op] && !f->release_all && fake_wait_locked(f, &dl)) {
    }
    f->held[op] = false;
}

/* injected returns the failure planned for a call of @op, or 0. */
static int injected(struct fake *f, int op, char *errmsg, size_t errmsg_len)
{
    if (f->fail_n[op] == 0) {
        return 0;
    }
    if (f->fail_skip[op] > 0) {
        f->fail_skip[op]--;
        return 0;
    }
    if (f->fail_n[op] != UINT_MAX) {
        f->fail_n[op]--;
    }
    if (f->fail_text[op][0] != '\0') {
        snprintf(errmsg, errmsg_len, "%s", f->fail_text[op]);
    } else {
        snprintf(errmsg, errmsg_len, "fake: injected %s",
                 raft_strerror(f->fail_rc[op]));
    }
    return f->fail_rc[op];
}

/* record adds a call of @op that returned @rc (mutex held). */
static struct fake_call *record(struct fake *f, int op, int rc)
{
    struct fake_call *c;
    f->calls = grow(f->calls, f->n_calls, &f->cap_calls, sizeof *f->calls);
    c = &f->calls[f->n_calls++];
    memset(c, 0, sizeof *c);
    c->op = op;
    c->rc = rc;
    c->seq = ++f->seq;
    c->on_loop = f->loop_known && pthread_equal(pthread_self(), f->loop_thread);
    changed(f);
    return c;
}

static int store_append(void *data, const struct raft_hard_state *hs,
                        const struct raft_entry *entries, unsigned n,
                        char *errmsg, size_t errmsg_len)
{
    struct fake *f = data;
    struct fake_call *c;
    int rc;

    fake_lock(f);
    begin_call(f, FAKE_APPEND);
    rc = injected(f, FAKE_APPEND, errmsg, errmsg_len);
    if (rc == 0 && n > 0 &&
        (entries[0].index < f->log_first ||
         entries[0].index > f->log_last + 1 ||
         entries[n - 1].index >= FAKE_MAX_INDEX)) {
        snprintf(errmsg, errmsg_len, "fake: entries do not follow the log");
        rc = RAFT_INVALID;
    }
    if (rc == 0) {
        if (hs != NULL) {
            f->hs = *hs;
        }
        for (unsigned i = 0; i < n; i++) {
            f->terms[entries[i].index] = entries[i].term;
        }
        if (n > 0) {
            f->log_last = entries[n - 1].index;
        }
    }
    c = record(f, FAKE_APPEND, rc);
    c->has_hs = hs != NULL;
    if (hs != NULL) {
        c->hs = *hs;
    }
    c->first = n > 0 ? entries[0].index : 0;
    c->n = n;
    fake_unlock(f);
    return rc;
}

static int store_compact(void *data, raft_index index, char *errmsg,
                         size_t errmsg_len)
{
    struct fake *f = data;
    int rc;

    fake_lock(f);
    if (f->installing) {
        /* The log after an install that keeps its suffix. */
        f->installing = false;
        f->log_first = index + 1;
        fake_unlock(f);
        return 0;
    }
    begin_call(f, FAKE_COMPACT);
    rc = injected(f, FAKE_COMPACT, errmsg, errmsg_len);
    if (rc == 0 && index >= f->log_first) {
        f->log_first = index + 1;
    }
    record(f, FAKE_COMPACT, rc)->index = index;
    fake_unlock(f);
    return rc;
}

static int store_create(void *data, const char *path, raft_index *index,
                        raft_term *term, char *errmsg, size_t errmsg_len)
{
    struct fake *f = data;
    FILE *fp;
    int rc;

    fake_lock(f);
    begin_call(f, FAKE_CREATE);
    rc = injected(f, FAKE_CREATE, errmsg, errmsg_len);
    if (rc == 0 && access(path, F_OK) == 0) {
        /* The real store's contract (sql_snapshot_write): never over a
         * file that exists. */
        snprintf(errmsg, errmsg_len, "fake: %s already exists", path);
        rc = RAFT_INVALID;
    }
    if (rc == 0) {
        fp = fopen(path, "wb");
        if (fp == NULL || fwrite(f->snap, 1, f->snap_len, fp) != f->snap_len) {
            snprintf(errmsg, errmsg_len, "fake: cannot write %s", path);
            rc = RAFT_IOERR;
        }
        if (fp != NULL && fclose(fp) != 0) {
            rc = RAFT_IOERR;
        }
    }
    if (rc == 0) {
        *index = f->snap_index;
        *term = f->snap_term;
    }
    record(f, FAKE_CREATE, rc)->index = f->snap_index;
    fake_unlock(f);
    return rc;
}

/* read_file reads @path into a new buffer. */
static uint8_t *read_file(const char *path, size_t *out_len)
{
    FILE *fp = fopen(path, "rb");
    uint8_t *b = NULL;
    size_t len = 0, cap = 0, n;
    if (fp == NULL) {
        return NULL;
    }
    do {
        if (len == cap) {
            cap = cap == 0 ? 4096 : cap * 2;
            b = realloc(b, cap);
            if (b == NULL) {
                abort();
            }
        }
        n = fread(b + len, 1, cap - len, fp);
        len += n;
    } while (n > 0);
    fclose(fp);
    *out_len = len;
    return b;
}

/* store_install is the state machine's install: it keeps the file's
 * bytes; raft_persist_run then changes the log (store_entry_term, then
 * store_compact or store_reset, as part of this call's record). */
static int store_install(void *data, const char *path, raft_index index,
                         raft_term term, bool *out_installed, char *errmsg,
                         size_t errmsg_len)
{
    struct fake *f = data;
    struct fake_call *c;
    size_t len = 0;
    uint8_t *b;
    int rc;

    fake_lock(f);
    begin_call(f, FAKE_INSTALL);
    rc = injected(f, FAKE_INSTALL, errmsg, errmsg_len);
    if (rc == 0 && (b = read_file(path, &len)) == NULL) {
        snprintf(errmsg, errmsg_len, "fake: cannot read %s", path);
        rc = RAFT_IOERR;
    } else if (rc == 0) {
        free(f->installed);
        f->installed = b;
        f->installed_len = len;
        f->installing = true;
    }
    *out_installed = rc == 0;
    c = record(f, FAKE_INSTALL, rc);
    c->index = index;
    c->term = term;
    fake_unlock(f);
    return rc;
}

static int store_entry_term(void *data, raft_index index, raft_index *out_first,
                            raft_term *out_term, char *errmsg,
                            size_t errmsg_len)
{
    struct fake *f = data;

    (void)errmsg;
    (void)errmsg_len;
    fake_lock(f);
    *out_first = f->log_first;
    *out_term =
        index >= f->log_first && index <= f->log_last ? f->terms[index] : 0;
    f->installing = index >= f->log_first; /* else nothing changes */
    fake_unlock(f);
    return 0;
}

static int store_reset(void *data, raft_index index, raft_term term,
                       char *errmsg, size_t errmsg_len)
{
    struct fake *f = data;

    (void)errmsg;
    (void)errmsg_len;
    fake_lock(f);
    f->installing = false;
    f->log_first = index + 1;
    f->log_last = index;
    f->terms[index] = term;
    fake_unlock(f);
    return 0;
}

void fake_fail_after(struct fake *f, int op, int rc, unsigned n, unsigned skip)
{
    fake_lock(f);
    f->fail_rc[op] = rc;
    f->fail_n[op] = n;
    f->fail_skip[op] = skip;
    fake_unlock(f);
}

void fake_fail_text(struct fake *f, int op, const char *text)
{
    fake_lock(f);
    snprintf(f->fail_text[op], sizeof f->fail_text[op], "%s", text);
    fake_unlock(f);
}

void fake_fail(struct fake *f, int op, int rc, unsigned n)
{
    fake_fail_after(f, op, rc, n, 0);
}

void fake_hold(struct fake *f, int op)
{
    fake_lock(f);
    f->hold[op] = true;
    fake_unlock(f);
}

void fake_release(struct fake *f, int op)
{
    fake_lock(f);
    f->held[op] = false;
    changed(f);
    fake_unlock(f);
}

void fake_release_remove(struct fake *f)
{
    fake_lock(f);
    f->hold_remove = false;
    changed(f);
    fake_unlock(f);
}

void fake_store_log(struct fake *f, raft_index first, raft_index last,
                    raft_term term)
{
    f->log_first = first;
    f->log_last = last;
    for (raft_index i = first; i <= last; i++) {
        f->terms[i] = term;
    }
}

void fake_snapshot(struct fake *f, size_t len, raft_index index, raft_term term)
{
    uint64_t x = len | 1;
    fake_lock(f);
    free(f->snap);
    f->snap = malloc(len > 0 ? len : 1);
    assert_non_null(f->snap);
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        f->snap[i] = (uint8_t)x;
    }
    f->snap_len = len;
    f->snap_index = index;
    f->snap_term = term;
    fake_unlock(f);
}

/* ---- The transport ------------------------------------------------------- */

/* push queues @it for the loop; false (and @it freed) once closed. */
static bool push(struct fake *f, struct fake_item *it)
{
    bool ok;
    pthread_mutex_lock(&f->inbox_mu);
    ok = !f->inbox_closed;
    if (ok) {
        if (f->inbox_t != NULL) {
            f->inbox_t->next = it;
        } else {
            f->inbox = it;
        }
        f->inbox_t = it;
        /* Under the lock: close cannot run between the check and this. */
        uv_async_send(&f->async);
    }
    pthread_mutex_unlock(&f->inbox_mu);
    if (!ok) {
        free(it->bytes);
        free(it);
    }
    return ok;
}

static struct fake_item *pop(struct fake *f)
{
    struct fake_item *it;
    pthread_mutex_lock(&f->inbox_mu);
    it = f->inbox_closed ? NULL : f->inbox;
    if (it != NULL) {
        f->inbox = it->next;
        if (f->inbox == NULL) {
            f->inbox_t = NULL;
        }
    }
    pthread_mutex_unlock(&f->inbox_mu);
    return it;
}

/* push_bytes queues the encoded frame @bytes (taken) for @f. */
static void push_bytes(struct fake *f, uint8_t *bytes, size_t len)
{
    struct fake_item *it = calloc(1, sizeof *it);
    if (it == NULL) {
        abort();
    }
    it->bytes = bytes;
    it->len = len;
    push(f, it);
}

/* encode returns @fr encoded in a new buffer (length in *out_len). */
static uint8_t *encode(const struct raft_frame *fr, size_t *out_len)
{
    size_t len = raft_frame_encoded_len(fr);
    uint8_t *b = len > 0 ? malloc(len) : NULL;
    if (b == NULL || raft_frame_encode(fr, b, len) != 0) {
        free(b);
        return NULL;
    }
    *out_len = len;
    return b;
}

void fake_reply(struct fake *f, const struct raft_frame *fr)
{
    size_t len;
    uint8_t *b = encode(fr, &len);
    if (b != NULL) {
        push_bytes(f, b, len);
    }
}

void fake_inject(struct fake *f, const struct raft_frame *fr)
{
    fake_reply(f, fr);
}

void fake_inject_message(struct fake *f, const struct raft_message *m)
{
    struct raft_frame fr;
    raft_frame_wrap(m, &fr);
    fake_inject(f, &fr);
}

/* message_to fills @m as a message of @type from @from to @f. */
static void message_to(struct fake *f, struct raft_message *m, uint8_t type,
                       raft_id from)
{
    memset(m, 0, sizeof *m);
    m->type = type;
    m->from = from;
    m->to = f->id;
}

void fake_inject_vote(struct fake *f, raft_id from, raft_term term)
{
    struct raft_message m;
    message_to(f, &m, RAFT_MSG_REQUEST_VOTE, from);
    m.request_vote.term = term;
    fake_inject_message(f, &m);
}

void fake_inject_append(struct fake *f, raft_id from, raft_term term,
                        raft_index prev, raft_term prev_term,
                        const char *payload, raft_index commit)
{
    struct raft_message m;
    struct raft_entry e;
    message_to(f, &m, RAFT_MSG_APPEND_ENTRIES, from);
    m.append_entries.term = term;
    m.append_entries.prev_log_index = prev;
    m.append_entries.prev_log_term = prev_term;
    m.append_entries.leader_commit = commit;
    m.append_entries.seq = ++f->seq_out;
    if (payload != NULL) {
        memset(&e, 0, sizeof e);
        e.term = term;
        e.index = prev + 1;
        e.type = RAFT_ENTRY_NORMAL;
        e.data = raft_buf_copy(payload, strlen(payload));
        assert_non_null(e.data);
        m.append_entries.entries = &e;
        m.append_entries.n_entries = 1;
    }
    fake_inject_message(f, &m);
    if (payload != NULL) {
        raft_buf_unref(e.data);
    }
}

/* observe reads the driver's state into @o (loop thread, outside the
 * core's raft_step). */
static void observe(struct fake *f, struct fake_obs *o)
{
    const struct raft *r;
    memset(o, 0, sizeof *o);
    if (f->d == NULL) {
        return;
    }
    r = raft_uv_node_core(f->d);
    o->role = raft_role(r);
    o->term = raft_current_term(r);
    o->leader = raft_leader_id(r);
    o->commit = raft_commit_index(r);
    o->first = raft_first_index(r);
    o->last = raft_last_index(r);
    o->persisted = raft_persisted_index(r);
    o->snapshot_index = raft_snapshot_index(r);
    o->failed = raft_uv_node_failed(f->d);
    snprintf(o->failure, sizeof o->failure, "%s", raft_uv_node_failure(f->d));
    o->log_full = raft_uv_node_log_full(f->d);
    raft_uv_node_stats(f->d, &o->stats);
}

/* publish makes @o the recorded state (loop thread, mutex held), so that
 * what a callback records and the state it ran in change together. */
static void publish(struct fake *f, const struct fake_obs *o)
{
    unsigned ticks = f->obs.n_ticks;
    note_thread(f);
    if (f->d != NULL) {
        f->obs = *o;
        f->obs.n_ticks = ticks;
    }
    changed(f);
}

/* refresh observes and publishes. */
static void refresh(struct fake *f)
{
    struct fake_obs o;
    observe(f, &o);
    fake_lock(f);
    publish(f, &o);
    fake_unlock(f);
}

/* deliver hands the encoded frame @it to the driver. */
static void deliver(struct fake *f, const struct fake_item *it)
{
    struct raft_frame fr;
    if (raft_frame_decode(it->bytes + RAFT_FRAME_HEADER,
                          it->len - RAFT_FRAME_HEADER, &fr, NULL, 0) != 0) {
        return;
    }
    if (fr.type == RAFT_FRAME_SNAPSHOT_CHUNK_RESULT) {
        /* What the leader acknowledged, for the window of fake_peer. */
        const struct raft_snapshot_chunk_result *r = &fr.snapshot_chunk_result;
        fake_lock(f);
        if (r->status != 0) {
            f->peer.acked = 0;
        } else if (r->offset > f->peer.acked) {
            f->peer.acked = r->offset;
        }
        fake_unlock(f);
    }
    f->recv_cb(f->recv_data, &fr);
    raft_frame_release(&fr);
}

static void on_async(uv_async_t *a)
{
    struct fake *f = a->data;
    struct fake_item *it;
    while ((it = pop(f)) != NULL) {
        if (it->bytes != NULL) {
            deliver(f, it);
        } else {
            it->fn(f, it->arg);
            fake_lock(f);
            *it->done = true;
            changed(f);
            fake_unlock(f);
        }
        free(it->bytes);
        free(it);
        refresh(f);
    }
}

static int tr_start(void *data, uv_loop_t *loop,
                    const struct raft_uv_node_config *cfg,
                    raft_uv_recv_cb recv_cb, raft_log_cb log_cb,
                    void *recv_data, void **out, char *errmsg,
                    size_t errmsg_len)
{
    struct fake *f = data;
    int rc = uv_async_init(loop, &f->async, on_async);
    (void)cfg;
    (void)log_cb;
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "uv_async_init: %s", uv_strerror(rc));
        return RAFT_IOERR;
    }
    f->async.data = f;
    f->loop = loop;
    f->recv_cb = recv_cb;
    f->recv_data = recv_data;
    pthread_mutex_lock(&f->inbox_mu);
    f->inbox_closed = false;
    pthread_mutex_unlock(&f->inbox_mu);
    *out = f;
    return 0;
}

static int tr_send(void *t, const struct raft_frame *fr)
{
    struct fake *f = t;
    struct fake *link = NULL;
    struct fake_sent *s;
    size_t len;
    uint8_t *b = encode(fr, &len);
    int rc = 0;

    struct fake_obs o;

    if (b == NULL) {
        return RAFT_INVALID;
    }
    observe(f, &o);
    fake_lock(f);
    publish(f, &o);
    if (fr->to < 8 && f->down[fr->to]) {
        rc = RAFT_NOCONN;
    } else if (f->hook != NULL) {
        rc = f->hook(f, fr);
    }
    if (rc == 0) {
        f->sent = grow(f->sent, f->n_sent, &f->cap_sent, sizeof *f->sent);
        s = &f->sent[f->n_sent++];
        s->seq = ++f->seq;
        if (raft_frame_decode(b + RAFT_FRAME_HEADER, len - RAFT_FRAME_HEADER,
                              &s->f, NULL, 0) != 0) {
            f->n_sent--;
        }
        link = fr->to < 8 ? f->links[fr->to] : NULL;
    }
    if (link != NULL && fr->type == RAFT_FRAME_SNAPSHOT_CHUNK &&
        fr->snapshot_chunk.data != NULL && f->corrupt_next_chunk) {
        f->corrupt_next_chunk = false;
        b[len - 1] ^= 0xff; /* the chunk's last data byte */
    }
    changed(f);
    fake_unlock(f);
    if (link != NULL) {
        push_bytes(link, b, len);
    } else {
        free(b);
    }
    return rc;
}

static bool tr_connected(const void *t, raft_id id)
{
    struct fake *f = (struct fake *)t;
    bool up;
    fake_lock(f);
    up = !(id < 8 && f->down[id]);
    fake_unlock(f);
    return up;
}

static unsigned tr_connected_peers(const void *t, raft_id *ids, unsigned max)
{
    struct fake *f = (struct fake *)t;
    unsigned n = 0;
    fake_lock(f);
    for (unsigned i = 0; i < f->n_peer_ids && n < max; i++) {
        raft_id id = f->peer_ids[i];
        if (!(id < 8 && f->down[id])) {
            ids[n++] = id;
        }
    }
    fake_unlock(f);
    return n;
}

static void on_async_closed(uv_handle_t *h)
{
    struct fake *f = h->data;
    if (f->close_cb != NULL) {
        f->close_cb(f->close_data);
    }
}

static void tr_close(void *t, void (*cb)(void *data), void *data)
{
    struct fake *f = t;
    struct fake_item *it;
    pthread_mutex_lock(&f->inbox_mu);
    f->inbox_closed = true;
    while ((it = f->inbox) != NULL) {
        f->inbox = it->next;
        free(it->bytes);
        free(it);
    }
    f->inbox_t = NULL;
    pthread_mutex_unlock(&f->inbox_mu);
    fake_lock(f);
    f->transport_closed = true;
    changed(f);
    fake_unlock(f);
    f->close_cb = cb;
    f->close_data = data;
    uv_close((uv_handle_t *)&f->async, on_async_closed);
}

void fake_link(struct fake *a, struct fake *b)
{
    a->links[b->id] = b;
    b->links[a->id] = a;
}

void fake_on_loop(struct fake *f, void (*fn)(struct fake *, void *), void *arg)
{
    bool done = false;
    struct fake_item *it = calloc(1, sizeof *it);
    assert_non_null(it);
    it->fn = fn;
    it->arg = arg;
    it->done = &done;
    if (!push(f, it)) {
        fail_msg("fake_on_loop: the transport is closed");
    }
    FAKE_WAIT(f, done);
}

static void nothing(struct fake *f, void *arg)
{
    (void)f;
    (void)arg;
}

void fake_barrier(struct fake *f)
{
    fake_on_loop(f, nothing, NULL);
}

/* A proposal run on the loop thread. */
struct propose_args {
    const char *payload; /* the entry's payload */
    int rc;              /* raft_uv_node_propose's code */
    raft_index index;    /* the entry's index */
};

static void do_propose(struct fake *f, void *arg)
{
    struct propose_args *p = arg;
    struct raft_buf *b = raft_buf_copy(p->payload, strlen(p->payload));
    struct raft_buf *bufs[1] = {b};
    raft_term term;
    p->rc = raft_uv_node_propose(f->d, bufs, 1, &p->index, &term);
    raft_buf_unref(b);
}

int fake_propose(struct fake *f, const char *payload, raft_index *out_index)
{
    struct propose_args p = {.payload = payload};
    fake_on_loop(f, do_propose, &p);
    if (out_index != NULL) {
        *out_index = p.index;
    }
    return p.rc;
}

/* A compaction run on the loop thread. */
struct compact_args {
    raft_index index; /* up to here */
    int rc;           /* raft_uv_node_compact's code */
};

static void do_compact(struct fake *f, void *arg)
{
    struct compact_args *c = arg;
    c->rc = raft_uv_node_compact(f->d, c->index);
}

int fake_compact(struct fake *f, raft_index index)
{
    struct compact_args c = {.index = index};
    fake_on_loop(f, do_compact, &c);
    return c.rc;
}

/* ---- The scripted follower ----------------------------------------------- */

static void reply_message(struct fake *f, const struct raft_message *m)
{
    struct raft_frame fr;
    raft_frame_wrap(m, &fr);
    fake_reply(f, &fr);
}

static void peer_answer(struct fake *f, const struct raft_frame *fr,
                        uint64_t offset, int status)
{
    struct raft_frame r;
    memset(&r, 0, sizeof r);
    r.type = RAFT_FRAME_SNAPSHOT_CHUNK_RESULT;
    r.from = fr->to;
    r.to = fr->from;
    r.snapshot_chunk_result.term = fr->snapshot_chunk.term;
    r.snapshot_chunk_result.last_index = fr->snapshot_chunk.last_index;
    r.snapshot_chunk_result.offset = offset;
    r.snapshot_chunk_result.status = status;
    fake_reply(f, &r);
}

static int peer_chunk(struct fake *f, const struct raft_frame *fr)
{
    struct fake_peer *p = &f->peer;
    const struct raft_snapshot_chunk *c = &fr->snapshot_chunk;
    size_t len = c->data != NULL ? c->data->len : 0;
    struct raft_message m;

    if (p->busy_after > 0 && p->n_chunks >= p->busy_after) {
        return RAFT_BUSY;
    }
    if (p->n_chunks < 8) {
        p->chunk_offs[p->n_chunks] = c->offset;
    }
    p->n_chunks++;
    if (c->offset == 0) {
        p->n_starts++;
        p->acked = 0; /* the leader sends offset 0 only with nothing acked */
        p->len = 0;
        free(p->buf);
        p->buf = malloc(c->total > 0 ? c->total : 1);
        assert_non_null(p->buf);
    }
    if (c->offset + len > p->acked &&
        c->offset + len - p->acked > p->max_window) {
        p->max_window = c->offset + len - p->acked;
    }
    if (p->chunk_silent) {
        return 0;
    }
    if (p->buf == NULL || c->offset != p->len) {
        peer_answer(f, fr, p->len, RAFT_INVALID);
        return 0;
    }
    if (len > 0) {
        memcpy(p->buf + p->len, c->data->data, len);
    }
    p->len += len;
    if (p->len < c->total) {
        peer_answer(f, fr, p->len, 0);
        return 0;
    }
    p->n_last++;
    if (p->installing) {
        p->len -= len; /* the leader sends it again: take it then */
        return 0;
    }
    if (XXH64(p->buf, p->len, 0) != c->checksum || p->n_refused < p->n_refuse) {
        p->n_refused++;
        peer_answer(f, fr, 0, RAFT_CORRUPT);
        return 0;
    }
    p->installed = true;
    p->snap_index = c->last_index;
    p->last = c->last_index;
    peer_answer(f, fr, c->total, 0);
    memset(&m, 0, sizeof m);
    m.type = RAFT_MSG_APPEND_ENTRIES_RESULT;
    m.from = fr->to;
    m.to = fr->from;
    m.append_entries_result.term = c->term;
    m.append_entries_result.success = true;
    m.append_entries_result.last_log_index = c->last_index;
    reply_message(f, &m);
    return 0;
}

int fake_peer_hook(struct fake *f, const struct raft_frame *fr)
{
    struct fake_peer *p = &f->peer;
    struct raft_message m;

    if (fr->to != p->id) {
        return 0;
    }
    memset(&m, 0, sizeof m);
    m.from = fr->to;
    m.to = fr->from;
    switch (fr->type) {
        case RAFT_MSG_REQUEST_VOTE: {
            const struct raft_request_vote *v = &fr->message.request_vote;
            m.type = RAFT_MSG_REQUEST_VOTE_RESULT;
            m.request_vote_result.term = v->term;
            m.request_vote_result.vote_granted = !p->deny_votes;
            m.request_vote_result.pre_vote = v->pre_vote;
            reply_message(f, &m);
            return 0;
        }
        case RAFT_MSG_APPEND_ENTRIES: {
            const struct raft_append_entries *ae = &fr->message.append_entries;
            struct raft_append_entries_result *r = &m.append_entries_result;
            m.type = RAFT_MSG_APPEND_ENTRIES_RESULT;
            r->term = ae->term;
            r->seq = ae->seq;
            if (ae->prev_log_index > p->last) {
                r->reject_index = ae->prev_log_index;
                r->last_log_index = p->last;
            } else {
                if (ae->n_entries > 0) {
                    p->last = ae->prev_log_index + ae->n_entries;
                }
                r->success = true;
                r->last_log_index = ae->prev_log_index + ae->n_entries;
            }
            reply_message(f, &m);
            return 0;
        }
        case RAFT_FRAME_SNAPSHOT_CHUNK:
            return peer_chunk(f, fr);
        default:
            return 0;
    }
}

/* ---- The driver's callbacks ---------------------------------------------- */

static void cb_apply(void *data, const struct raft_entry *entries, unsigned n)
{
    struct fake *f = data;
    struct fake_obs o;
    observe(f, &o);
    fake_lock(f);
    publish(f, &o);
    for (unsigned i = 0; i < n; i++) {
        struct fake_applied *a;
        size_t len = entries[i].data != NULL ? entries[i].data->len : 0;
        f->applied =
            grow(f->applied, f->n_applied, &f->cap_applied, sizeof *f->applied);
        a = &f->applied[f->n_applied++];
        memset(a, 0, sizeof *a);
        a->index = entries[i].index;
        a->term = entries[i].term;
        a->type = entries[i].type;
        if (len > sizeof a->data - 1) {
            len = sizeof a->data - 1;
        }
        if (len > 0) {
            memcpy(a->data, entries[i].data->data, len);
        }
    }
    changed(f);
    fake_unlock(f);
    if (f->app.apply != NULL) {
        f->app.apply(f->app.data, entries, n);
    }
}

static void cb_tick(void *data)
{
    struct fake *f = data;
    struct fake_obs o;
    observe(f, &o);
    fake_lock(f);
    publish(f, &o);
    f->obs.n_ticks++;
    fake_unlock(f);
    if (f->app.tick != NULL) {
        f->app.tick(f->app.data);
    }
}

static void cb_stepped(void *data)
{
    struct fake *f = data;
    refresh(f);
    if (f->app.stepped != NULL) {
        f->app.stepped(f->app.data);
    }
}

/* The application's own callbacks (fake_opts.app). */
static void cb_appended(void *data, const struct raft_entry *entries,
                        unsigned n)
{
    struct fake *f = data;
    f->app.appended(f->app.data, entries, n);
}

static void cb_wake(void *data)
{
    struct fake *f = data;
    f->app.wake(f->app.data);
}

static void cb_forward(void *data, const struct raft_frame *fr)
{
    struct fake *f = data;
    f->app.forward(f->app.data, fr);
}

static void cb_read(void *data, const struct raft_read *reads, unsigned n)
{
    struct fake *f = data;
    f->app.read(f->app.data, reads, n);
}

static void cb_log(void *data, int level, const char *msg)
{
    struct fake *f = data;
    struct fake_line *l;
    struct fake_obs o;
    if (getenv("TEST_VERBOSE") != NULL) {
        fprintf(stderr, "[%llu %d] %s\n", (unsigned long long)f->id, level,
                msg);
    }
    observe(f, &o);
    fake_lock(f);
    publish(f, &o);
    f->lines = grow(f->lines, f->n_lines, &f->cap_lines, sizeof *f->lines);
    l = &f->lines[f->n_lines++];
    l->level = level;
    snprintf(l->text, sizeof l->text, "%s", msg);
    fake_unlock(f);
}

/* ---- Set-up -------------------------------------------------------------- */

void fake_init(struct fake *f, raft_id id)
{
    pthread_condattr_t ca;
    memset(f, 0, sizeof *f);
    f->id = id;
    f->log_first = 1;
    f->log_last = 0;
    f->inbox_closed = true; /* until the driver starts the transport */
    snprintf(f->dir, sizeof f->dir, "/tmp/raftsql-uv-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    pthread_mutex_init(&f->mu, NULL);
    pthread_mutex_init(&f->inbox_mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&f->cond, &ca);
    pthread_condattr_destroy(&ca);
    f->tr.data = f;
    f->tr.start = tr_start;
    f->tr.send = tr_send;
    f->tr.connected = tr_connected;
    f->tr.connected_peers = tr_connected_peers;
    f->tr.close = tr_close;
}

void fake_config(struct raft_config *cfg, raft_id id, const raft_id *voters,
                 unsigned n, unsigned election_ms)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->id = id;
    cfg->voters = voters;
    cfg->n_voters = n;
    cfg->election_timeout = election_ms;
    cfg->heartbeat_interval = election_ms / 5;
    cfg->max_size_per_msg = 1 << 20;
    cfg->max_inflight_msgs = 64;
    cfg->seed = id;
}

struct raft *fake_core(raft_id id, const raft_id *voters, unsigned n,
                       unsigned election_ms)
{
    struct raft_config cfg;
    struct raft *r = NULL;
    fake_config(&cfg, id, voters, n, election_ms);
    assert_int_equal(raft_new(&cfg, NULL, 1, NULL, 0, 0, &r), 0);
    return r;
}

void fake_start(struct fake *f, struct raft *r, const struct fake_opts *o)
{
    struct raft_uv_peer peers[8];
    struct raft_uv_node_config cfg;
    struct raft_persist_storage st = {
        .log = {.data = f,
                .append = store_append,
                .compact = o->no_compact ? NULL : store_compact,
                .entry_term = store_entry_term,
                .reset = store_reset},
        .fsm = {.data = f,
                .snapshot_create = o->no_snapshots ? NULL : store_create,
                .snapshot_install =
                    o->no_snapshots || o->no_compact ? NULL : store_install},
    };
    struct raft_uv_node_callbacks cb = {
        .data = f,
        .apply = cb_apply,
        .tick = cb_tick,
        .stepped = cb_stepped,
        .log = cb_log,
    };
    if (o->app != NULL && o->app->appended != NULL) {
        cb.appended = cb_appended;
    }
    struct raft_uv_node_seams seams = {
        .transport = &f->tr,
        .snapshot_stall_ms = o->stall_ms,
        .install_rate = o->install_rate,
        .on_remove = on_remove,
        .on_remove_data = f,
    };
    char errmsg[256] = "";
    int rc;

    assert_true(o->n_peers <= 7);
    if (o->app != NULL) {
        f->app = *o->app;
        cb.wake = f->app.wake != NULL ? cb_wake : NULL;
        cb.forward = f->app.forward != NULL ? cb_forward : NULL;
        cb.read = f->app.read != NULL ? cb_read : NULL;
    }
    memset(peers, 0, sizeof peers);
    for (unsigned i = 0; i < o->n_peers; i++) {
        f->peer_ids[i] = o->peers[i];
        peers[i].id = o->peers[i];
        snprintf(peers[i].host, sizeof peers[i].host, "127.0.0.1");
        peers[i].port = 1;
    }
    f->n_peer_ids = o->n_peers;
    memset(&cfg, 0, sizeof cfg);
    cfg.id = f->id;
    cfg.listen_host = "127.0.0.1";
    cfg.peers = peers;
    cfg.n_peers = o->n_peers;
    cfg.max_frame_bytes = 1 << 20;
    cfg.tick_ms = o->tick_ms > 0 ? o->tick_ms : 2;
    cfg.snapshot_dir = f->dir;
    cfg.snapshot_chunk_bytes = o->chunk_bytes > 0 ? o->chunk_bytes : 1000;
    cfg.snapshot_rate_bytes = o->snapshot_rate;
    rc = raft_uv_node_start_with(r, &cfg, &st, &cb, &seams, &f->d, errmsg,
                                 sizeof errmsg);
    if (rc != 0) {
        fail_msg("raft_uv_node_start_with: %s", errmsg);
    }
}

void fake_stop(struct fake *f)
{
    if (locked == f) {
        fake_unlock(f); /* the test failed while holding it */
    }
    if (f->d == NULL) {
        return;
    }
    fake_lock(f);
    f->release_all = true;
    changed(f);
    fake_unlock(f);
    raft_uv_node_stop(f->d);
    f->d = NULL;
}

void fake_free(struct fake *f)
{
    DIR *dir;
    struct dirent *e;
    char path[512];

    fake_stop(f);
    for (unsigned i = 0; i < f->n_sent; i++) {
        raft_frame_release(&f->sent[i].f);
    }
    free(f->sent);
    free(f->calls);
    free(f->applied);
    free(f->lines);
    free(f->snap);
    free(f->installed);
    free(f->peer.buf);
    dir = opendir(f->dir);
    while (dir != NULL && (e = readdir(dir)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            snprintf(path, sizeof path, "%s/%s", f->dir, e->d_name);
            unlink(path);
        }
    }
    if (dir != NULL) {
        closedir(dir);
    }
    rmdir(f->dir);
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->mu);
    pthread_mutex_destroy(&f->inbox_mu);
}

int fake_setup(void **state)
{
    struct fake_pair *p = calloc(1, sizeof *p);
    assert_non_null(p);
    *state = p;
    return 0;
}

int fake_teardown(void **state)
{
    struct fake_pair *p = *state;
    fake_stop(&p->a);
    fake_stop(&p->b);
    if (p->a.dir[0] != '\0') {
        fake_free(&p->a);
    }
    if (p->b.dir[0] != '\0') {
        fake_free(&p->b);
    }
    free(p);
    return 0;
}

struct fake *fake_a(void **state)
{
    return &((struct fake_pair *)*state)->a;
}

/* ---- Reading what was recorded ------------------------------------------- */

unsigned fake_n_calls(const struct fake *f, int op, int rc)
{
    unsigned n = 0;
    for (unsigned i = 0; i < f->n_calls; i++) {
        n += f->calls[i].op == op && (rc < 0 || f->calls[i].rc == rc);
    }
    return n;
}

const struct fake_call *fake_last_call(const struct fake *f, int op)
{
    for (unsigned i = f->n_calls; i > 0; i--) {
        if (f->calls[i - 1].op == op) {
            return &f->calls[i - 1];
        }
    }
    return NULL;
}

unsigned fake_n_sent(const struct fake *f, int type)
{
    unsigned n = 0;
    for (unsigned i = 0; i < f->n_sent; i++) {
        n += f->sent[i].f.type == type;
    }
    return n;
}

const struct fake_sent *fake_last_sent(const struct fake *f, int type)
{
    for (unsigned i = f->n_sent; i > 0; i--) {
        if (f->sent[i - 1].f.type == type) {
            return &f->sent[i - 1];
        }
    }
    return NULL;
}

unsigned fake_logged(const struct fake *f, int level, const char *text)
{
    unsigned n = 0;
    for (unsigned i = 0; i < f->n_lines; i++) {
        n += f->lines[i].level == level &&
             strstr(f->lines[i].text, text) != NULL;
    }
    return n;
}
