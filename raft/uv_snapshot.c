/* Streaming snapshots between drivers (InstallSnapshot, paper §7, carried
 * outside the core in RAFT_FRAME_SNAPSHOT_CHUNK frames, frame.h).
 *
 * Happy path, leader: the core names a follower in update.snapshot_to ->
 * the driver creates a snapshot file on the thread pool (or reuses the
 * current one if it still joins the log) and computes its XXH64 -> it
 * streams chunks of snapshot_chunk_bytes, at most RAFT__UV_SNAPSHOT_WINDOW
 * unacknowledged and, while the cluster takes writes, no faster than
 * snapshot_rate_bytes a second (each tick sends what the pace allows by
 * then: a transfer at full speed fills the one disk of a small cluster,
 * and every log fsync waits behind it) -> the follower's last answer
 * (offset == total) ends the transfer; the core learns the follower's
 * new match index from its AppendEntries result.
 * Happy path, follower: chunks are written in order to a temporary file ->
 * once complete, a sealed storage job verifies the checksum, installs the
 * file into the state machine and resets the log -> the driver steps
 * RAFT_EVENT_SNAPSHOT_INSTALLED, and the core acknowledges to the leader.
 * Repair (REPAIR_REQUEST from a diverged follower, ext/runtime/repair.c): the
 * leader makes a fresh snapshot at least at the follower's applied index
 * (once per request) and streams it the same way; the follower installs
 * it although the core handed out that index already (the applier's
 * install, applier_persist_fsm in ext/runtime/applier.h), and
 * the driver then steps RAFT_EVENT_COMPACT for the log the install
 * compacted: for the core, a repair is a compaction. The core never
 * hears of a repair transfer's failure; the follower asks again. Every
 * request is recorded (raft_uv_node_peer_repair_age: a diverged leader
 * hands its leadership to a peer that is not diverged); a driver whose
 * own state machine is diverged (it asks the application,
 * raft_uv_node_callbacks.diverged) makes no snapshot for one.
 * Failure modes: a chunk out of order, a newer snapshot or a failed write
 * restarts the transfer from offset 0; three failed attempts in a row, a
 * stall of RAFT__UV_SNAPSHOT_STALL_MS (plus the follower's install time
 * at RAFT__UV_SNAPSHOT_INSTALL_RATE once every chunk is sent: the last
 * one is answered after the install), a broken connection or a lost
 * leadership end it, and the leader's core gets RAFT_EVENT_SNAPSHOT_FAILED
 * (it offers a snapshot again later). Nothing is installed half-way: the
 * state machine's install is atomic, and runs only on a verified file.
 * Limitation: chunk file reads and writes are synchronous on the loop
 * thread (page-cache speed; a 1 MiB chunk at a time). */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "uv_node_internal.h"

int raft_uv_snapshot_checksum(const char *path, uint64_t *out,
                              uint64_t *out_size)
{
    XXH64_state_t *st;
    unsigned char *buf;
    uint64_t size = 0;
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int rc = 0;
    if (fd < 0) {
        return RAFT_IOERR;
    }
    st = XXH64_createState();
    buf = malloc(1 << 20);
    if (st == NULL || buf == NULL) {
        rc = RAFT_NOMEM;
        goto out;
    }
    XXH64_reset(st, 0);
    while ((n = read(fd, buf, 1 << 20)) > 0) {
        XXH64_update(st, buf, (size_t)n);
        size += (uint64_t)n;
    }
    if (n < 0) {
        rc = RAFT_IOERR;
        goto out;
    }
    *out = XXH64_digest(st);
    *out_size = size;
out:
    free(buf);
    XXH64_freeState(st);
    close(fd);
    return rc;
}

static struct raft_uv_snapshot_send *send_of(struct raft_uv_node *d, raft_id id)
{
    for (unsigned i = 0; i < d->n_peers; i++) {
        if (d->peers[i] == id) {
            return &d->sends[i];
        }
    }
    return NULL;
}

/* ---- Leader: the snapshot file ----------------------------------------- */

static void create_work(uv_work_t *req)
{
    struct raft_uv_node *d = req->data;
    struct raft_uv_snapshot_file *f = &d->snap;
    f->rc =
        d->storage.fsm.snapshot_create(d->storage.fsm.data, f->path, &f->index,
                                       &f->term, f->errmsg, sizeof f->errmsg);
    if (f->rc == 0 &&
        raft_uv_snapshot_checksum(f->path, &f->checksum, &f->size) != 0) {
        f->rc = RAFT_IOERR;
        snprintf(f->errmsg, sizeof f->errmsg, "cannot read snapshot %.200s",
                 f->path);
    }
}

static void pump(struct raft_uv_node *d);

static void fail_send(struct raft_uv_node *d, struct raft_uv_snapshot_send *s,
                      const char *why)
{
    struct raft_event ev;
    if (s->active) {
        raft_uv_remove_close(d, s->fd);
        s->active = false;
    }
    if (s->repair && !s->wanted) {
        raft_uv_node_log(d, RAFT_LOG_WARN,
                         "repair snapshot to %" PRIu64 " abandoned: %s", s->to,
                         why);
    }
    s->repair = false;
    if (!s->wanted) {
        return;
    }
    s->wanted = false;
    s->failures = 0;
    raft_uv_node_log(d, RAFT_LOG_WARN, "snapshot to %" PRIu64 " abandoned: %s",
                     s->to, why);
    memset(&ev, 0, sizeof ev);
    ev.type = RAFT_EVENT_SNAPSHOT_FAILED;
    ev.unreachable.id = s->to;
    raft_uv_node_step(d, &ev, NULL);
}

static void create_after_work(uv_work_t *req, int status)
{
    struct raft_uv_node *d = req->data;
    struct raft_uv_snapshot_file *f = &d->snap;
    f->creating = false;
    if (status != 0 || f->rc != 0) {
        raft_uv_node_log(d, RAFT_LOG_WARN, "snapshot: %s",
                         status != 0 ? uv_strerror(status) : f->errmsg);
        raft_uv_remove_file(d, f->path);
        for (unsigned i = 0; i < d->n_peers; i++) {
            fail_send(d, &d->sends[i], "the snapshot could not be made");
        }
        return;
    }
    f->ready = true;
    raft_uv_node_log(d, RAFT_LOG_INFO,
                     "snapshot at index %" PRIu64 " (%" PRIu64 " bytes)",
                     f->index, f->size);
    pump(d);
}

/* start_create makes a new snapshot file, replacing the current one (open
 * transfers keep reading the old file through their descriptors). */
static void start_create(struct raft_uv_node *d)
{
    struct raft_uv_snapshot_file *f = &d->snap;
    int rc;
    if (f->ready) {
        raft_uv_remove_file(d, f->path);
        f->ready = false;
    }
    snprintf(f->path, sizeof f->path, "%s/snapshot-%" PRIu64 "-%u.db",
             d->snapshot_dir, d->id, ++f->counter);
    /* The names count from 1 in each life of the node: one an earlier
     * life left (killed while it sent it) is garbage, and the store
     * makes no snapshot over a file that exists. */
    if (raft_uv_remove_file(d, f->path)) {
        raft_uv_node_log(d, RAFT_LOG_INFO,
                         "snapshot: removing %s, left by an earlier run",
                         f->path);
    }
    f->req.data = d;
    rc = uv_queue_work(&d->loop, &f->req, create_work, create_after_work);
    if (rc != 0) {
        raft_uv_node_log(d, RAFT_LOG_WARN, "snapshot: %s", uv_strerror(rc));
        return;
    }
    f->creating = true;
}

/* test_hold says whether test fault RAFTSQL_TEST_SNAPSHOT_HOLD (test
 * builds only: a file path) holds transfer @s after its first chunk
 * while that file exists, so a test sees a transfer under way in status,
 * still: once that chunk is acknowledged, nothing moves on either side;
 * the transfer goes on at the first tick after the file is removed. */
static bool test_hold(const struct raft_uv_snapshot_send *s)
{
#ifdef RAFTSQL_TEST_FAULTS
    const char *path = getenv("RAFTSQL_TEST_SNAPSHOT_HOLD");
    return path != NULL && path[0] != '\0' && s->sent > 0 &&
           access(path, F_OK) == 0;
#else
    (void)s;
    return false;
#endif
}

/* taking_writes says whether this leader took writes lately: its last
 * index grew within RAFT__UV_SNAPSHOT_PACE_IDLE_MS (looked at every tick
 * and at every send). */
static bool taking_writes(struct raft_uv_node *d, uint64_t now)
{
    raft_index last = raft_last_index(d->raft);
    if (last != d->pace_last) {
        d->pace_last = last;
        d->pace_writes = now;
    }
    return d->pace_writes != 0 &&
           now - d->pace_writes <= RAFT__UV_SNAPSHOT_PACE_IDLE_MS;
}

/* paced says whether transfer @s has sent what its pace allows by @now
 * (loop clock, ms). The pace holds while the leader takes writes:
 * snapshot_rate bytes a second from where it began to hold, and one chunk
 * more (so a chunk goes at once); with no writes to protect the transfer
 * goes at full speed, and the pace starts afresh from where it is when
 * writes come. */
static bool paced(struct raft_uv_node *d, struct raft_uv_snapshot_send *s,
                  uint64_t now)
{
    uint64_t elapsed;

    if (d->snapshot_rate == 0) {
        return false;
    }
    if (!taking_writes(d, now)) {
        s->pace_from = now;
        s->pace_sent = s->sent;
        return false;
    }
    elapsed = now - s->pace_from;
    return s->sent >= s->pace_sent + d->snapshot_rate / 1000 * elapsed +
                          d->snapshot_rate % 1000 * elapsed / 1000 +
                          d->chunk_bytes;
}

/* from_start makes transfer @s start over from offset 0 now: nothing
 * sent or acknowledged, its stall timer and its pace counted from here. */
static void from_start(struct raft_uv_node *d, struct raft_uv_snapshot_send *s)
{
    s->sent = 0;
    s->acked = 0;
    s->last_progress = raft_uv_node_now(d);
    s->pace_from = s->last_progress;
    s->pace_sent = 0;
}

/* send_chunks fills the window of transfer @s, as far as its pace allows
 * (the tick calls it again). */
static void send_chunks(struct raft_uv_node *d, struct raft_uv_snapshot_send *s)
{
    uint64_t now = raft_uv_node_now(d);

    while (s->active && s->sent < s->total && !test_hold(s) &&
           !paced(d, s, now) &&
           s->sent - s->acked <
               (uint64_t)RAFT__UV_SNAPSHOT_WINDOW * d->chunk_bytes) {
        uint64_t len = s->total - s->sent;
        struct raft_frame m;
        struct raft_buf *b;
        ssize_t n;
        if (len > d->chunk_bytes) {
            len = d->chunk_bytes;
        }
        b = raft_buf_new((size_t)len);
        if (b == NULL) {
            fail_send(d, s, "out of memory");
            return;
        }
        n = pread(s->fd, b->data, (size_t)len, (off_t)s->sent);
        if (n != (ssize_t)len) {
            raft_buf_unref(b);
            fail_send(d, s, "cannot read the snapshot file");
            return;
        }
        memset(&m, 0, sizeof m);
        m.type = RAFT_FRAME_SNAPSHOT_CHUNK;
        m.from = d->id;
        m.to = s->to;
        m.snapshot_chunk.term = raft_current_term(d->raft);
        m.snapshot_chunk.last_index = s->index;
        m.snapshot_chunk.last_term = s->last_term;
        m.snapshot_chunk.total = s->total;
        m.snapshot_chunk.offset = s->sent;
        m.snapshot_chunk.checksum = s->checksum;
        m.snapshot_chunk.data = b;
        if (raft_uv_node_send_frame(d, &m) != 0) {
            raft_buf_unref(b);
            /* Not connected: the stall timer or the unreachable event
             * will end it; the window is re-sent from @acked then. */
            return;
        }
        raft_buf_unref(b);
        s->sent += len;
    }
}

/* pump starts the transfers the core asked for once a snapshot that still
 * joins the log exists. */
static void pump(struct raft_uv_node *d)
{
    struct raft_uv_snapshot_file *f = &d->snap;
    bool waiting = false;
    bool stale;
    if (raft_role(d->raft) != RAFT_LEADER) {
        return;
    }
    for (unsigned i = 0; i < d->n_peers; i++) {
        waiting |=
            (d->sends[i].wanted || d->sends[i].repair) && !d->sends[i].active;
    }
    if (!waiting || f->creating) {
        return;
    }
    stale = !f->ready || f->index + 1 < raft_first_index(d->raft);
    for (unsigned i = 0; i < d->n_peers; i++) {
        const struct raft_uv_snapshot_send *s = &d->sends[i];
        /* A repair needs a snapshot at least at the follower's applied
         * index: made once per request, so a leader that lags makes no
         * snapshot per tick. */
        stale |= s->repair && s->repair_fresh && !s->active &&
                 f->index < s->repair_index;
    }
    if (stale) {
        for (unsigned i = 0; i < d->n_peers; i++) {
            d->sends[i].repair_fresh = false;
        }
        start_create(d);
        return;
    }
    for (unsigned i = 0; i < d->n_peers; i++) {
        struct raft_uv_snapshot_send *s = &d->sends[i];
        if (!(s->wanted || s->repair) || s->active ||
            (!s->wanted && f->index < s->repair_index)) {
            continue;
        }
        s->fd = open(f->path, O_RDONLY | O_CLOEXEC);
        if (s->fd < 0) {
            fail_send(d, s, strerror(errno));
            continue;
        }
        s->active = true;
        s->index = f->index;
        s->last_term = f->term;
        s->total = f->size;
        s->checksum = f->checksum;
        from_start(d, s);
        s->last_resend = s->last_progress;
        raft_uv_node_log(d, RAFT_LOG_INFO,
                         "sending snapshot at index %" PRIu64 " (%" PRIu64
                         " bytes) to %" PRIu64,
                         s->index, s->total, s->to);
        send_chunks(d, s);
    }
}

void raft_uv_snapshot_want(struct raft_uv_node *d, const raft_id *ids,
                           unsigned n)
{
    if (d->storage.fsm.snapshot_create == NULL) {
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        struct raft_uv_snapshot_send *s = send_of(d, ids[i]);
        if (s != NULL) {
            s->wanted = true;
        }
    }
    pump(d);
}

static void on_chunk_result(struct raft_uv_node *d, const struct raft_frame *m)
{
    const struct raft_snapshot_chunk_result *r = &m->snapshot_chunk_result;
    struct raft_uv_snapshot_send *s = send_of(d, m->from);
    if (s == NULL || !s->active || r->last_index != s->index) {
        return;
    }
    if (r->status != 0) {
        if (++s->failures >= 3) {
            fail_send(d, s, raft_strerror(r->status));
            return;
        }
        /* Start over from the beginning. */
        from_start(d, s);
        send_chunks(d, s);
        return;
    }
    if (r->offset > s->acked && r->offset <= s->sent) {
        s->acked = r->offset;
        s->last_progress = raft_uv_node_now(d);
    }
    if (s->acked == s->total) {
        raft_uv_remove_close(d, s->fd);
        s->active = false;
        s->wanted = false;
        s->repair = false;
        s->failures = 0;
        d->stats.n_snapshots_sent++;
        d->stats.n_snapshot_bytes_sent += s->total;
        raft_uv_node_log(d, RAFT_LOG_INFO,
                         "snapshot at index %" PRIu64 " installed on %" PRIu64,
                         s->index, s->to);
        return;
    }
    send_chunks(d, s);
}

/* on_repair_request takes a diverged follower's request for a snapshot at
 * least at its applied index. */
static void on_repair_request(struct raft_uv_node *d,
                              const struct raft_frame *m)
{
    struct raft_uv_snapshot_send *s = send_of(d, m->from);
    uint64_t now = raft_uv_node_now(d);
    bool known;
    if (s == NULL) {
        return;
    }
    /* Asked within the last few retries (once a second): not new. */
    known = s->repair_asked != 0 &&
            now - s->repair_asked < RAFT__UV_REPAIR_KNOWN_MS;
    s->repair_asked = now > 0 ? now : 1;
    if (raft_role(d->raft) != RAFT_LEADER || raft_uv_node_diverged(d) ||
        d->storage.fsm.snapshot_create == NULL || s->active) {
        return; /* asked again later; a running transfer may repair it */
    }
    if (!s->repair && !known) {
        raft_uv_node_log(d, RAFT_LOG_WARN,
                         "server %" PRIu64
                         " diverged and asks for a snapshot to repair "
                         "(applied %" PRIu64 ")",
                         m->from, m->repair_request.applied);
    }
    s->repair = true;
    s->repair_index = m->repair_request.applied;
    s->repair_fresh = true;
    pump(d);
}

bool raft_uv_node_peer_snapshot(const struct raft_uv_node *d, raft_id id,
                                uint64_t *out_bytes, uint64_t *out_total)
{
    for (unsigned i = 0; i < d->n_peers; i++) {
        const struct raft_uv_snapshot_send *s = &d->sends[i];
        if (s->to == id && s->active) {
            *out_bytes = s->acked;
            *out_total = s->total;
            return true;
        }
    }
    return false;
}

uint64_t raft_uv_node_peer_repair_age(struct raft_uv_node *d, raft_id id)
{
    for (unsigned i = 0; i < d->n_peers; i++) {
        if (d->peers[i] == id && d->sends[i].repair_asked != 0) {
            return raft_uv_node_now(d) - d->sends[i].repair_asked;
        }
    }
    return UINT64_MAX;
}

/* ---- Follower ----------------------------------------------------------- */

static void answer(struct raft_uv_node *d, const struct raft_frame *m,
                   uint64_t offset, int status)
{
    struct raft_frame r;
    memset(&r, 0, sizeof r);
    r.type = RAFT_FRAME_SNAPSHOT_CHUNK_RESULT;
    r.from = d->id;
    r.to = m->from;
    r.snapshot_chunk_result.term = raft_current_term(d->raft);
    r.snapshot_chunk_result.last_index = m->snapshot_chunk.last_index;
    r.snapshot_chunk_result.offset = offset;
    r.snapshot_chunk_result.status = status;
    raft_uv_node_send_frame(d, &r);
}

static void recv_reset(struct raft_uv_node *d)
{
    struct raft_uv_snapshot_recv *r = &d->recv;
    if (r->active && !r->installing) {
        close(r->fd);
        raft_uv_remove_file(d, r->path);
    }
    r->active = false;
}

static void on_chunk(struct raft_uv_node *d, const struct raft_frame *m)
{
    const struct raft_snapshot_chunk *c = &m->snapshot_chunk;
    struct raft_uv_snapshot_recv *r = &d->recv;
    size_t len = c->data != NULL ? c->data->len : 0;
    uint64_t synced_at;
    bool synced;
    int err;

    if (d->storage.fsm.snapshot_install == NULL || d->disk_failed) {
        answer(d, m, 0, RAFT_INVALID);
        return;
    }
    if (c->term < raft_current_term(d->raft)) {
        answer(d, m, 0, RAFT_NOTLEADER);
        return;
    }
    if (r->installing) {
        return; /* the answer comes when the install is done */
    }
    if (c->offset == 0) {
        recv_reset(d);
        snprintf(r->path, sizeof r->path, "%s/incoming-%" PRIu64 ".db",
                 d->snapshot_dir, d->id);
        /* One an earlier life left: O_TRUNC would free it here. */
        raft_uv_remove_file(d, r->path);
        r->fd = open(r->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (r->fd < 0) {
            raft_uv_node_log(d, RAFT_LOG_WARN, "snapshot: %s: %s", r->path,
                             strerror(errno));
            answer(d, m, 0, RAFT_IOERR);
            return;
        }
        r->active = true;
        r->from = m->from;
        r->term = c->term;
        r->index = c->last_index;
        r->last_term = c->last_term;
        r->total = c->total;
        r->checksum = c->checksum;
        r->expected = 0;
        r->written_back = 0;
    }
    if (!r->active || m->from != r->from || c->last_index != r->index ||
        c->offset != r->expected || c->offset + len > r->total) {
        answer(d, m, r->active ? r->expected : 0, RAFT_INVALID);
        return;
    }
    if (len > 0 &&
        pwrite(r->fd, c->data->data, len, (off_t)c->offset) != (ssize_t)len) {
        raft_uv_node_log(d, RAFT_LOG_WARN, "snapshot: write %s: %s", r->path,
                         strerror(errno));
        recv_reset(d);
        answer(d, m, 0, RAFT_IOERR);
        return;
    }
    r->expected += len;
    if (r->expected - r->written_back >= RAFT__UV_SNAPSHOT_WRITE_BEHIND) {
        /* Starts writing back what arrived, waits for none of it: dirty
         * pages do not pile up into a flush of gigabytes at the fsync
         * below, during which every log fsync on the disk would wait. */
        (void)sync_file_range(r->fd, (off_t)r->written_back,
                              (off_t)(r->expected - r->written_back),
                              SYNC_FILE_RANGE_WRITE);
        r->written_back = r->expected;
    }
    if (r->expected < r->total) {
        answer(d, m, r->expected, 0);
        return;
    }
    synced_at = uv_hrtime();
    synced = fsync(r->fd) == 0;
    err = errno;
    if (close(r->fd) != 0 && synced) {
        synced = false;
        err = errno;
    }
    if (!synced) {
        /* The descriptor is closed either way (a failed fsync used to
         * leave it open). */
        raft_uv_node_log(d, RAFT_LOG_WARN, "snapshot: sync %s: %s", r->path,
                         strerror(err));
        r->fd = -1;
        raft_uv_remove_file(d, r->path);
        r->active = false;
        answer(d, m, 0, RAFT_IOERR);
        return;
    }
    raft_uv_node_log(d, RAFT_LOG_INFO,
                     "snapshot: received %" PRIu64 " bytes from server %" PRIu64
                     "; its fsync took %" PRIu64 " ms (on the loop thread)",
                     r->total, r->from, (uv_hrtime() - synced_at) / 1000000);
    r->installing = true;
    if (raft_uv_storage_install(d, r) != 0) {
        r->installing = false;
        r->active = false;
        raft_uv_remove_file(d, r->path);
        answer(d, m, 0, RAFT_NOMEM);
        return;
    }
    raft_uv_storage_start(d);
}

void raft_uv_snapshot_installed(struct raft_uv_node *d,
                                const struct raft_persist_install *in, int rc,
                                const char *errmsg)
{
    struct raft_uv_snapshot_recv *r = &d->recv;
    struct raft_frame m;
    struct raft_event ev;

    r->installing = false;
    r->active = false;
    raft_uv_remove_file(d, in->path);
    memset(&m, 0, sizeof m);
    m.from = in->leader;
    m.snapshot_chunk.last_index = in->index;
    if (rc != 0) {
        snprintf(d->stats.install_error, sizeof d->stats.install_error, "%s",
                 errmsg != NULL ? errmsg : raft_strerror(rc));
        if (rc == RAFT_BUSY) {
            /* Not installed, nothing changed (a full disk under the
             * database): the leader sends it again later. */
            raft_uv_node_log(d, RAFT_LOG_WARN,
                             "snapshot not installed, the leader sends it "
                             "again: %s",
                             errmsg);
        } else if (rc != RAFT_CORRUPT && rc != RAFT_INVALID) {
            /* The state machine may be ahead of the log now: only a
             * restart (which repairs that) is safe. */
            raft_uv_storage_fail(d, errmsg);
        } else {
            raft_uv_node_log(d, RAFT_LOG_WARN, "snapshot refused: %s", errmsg);
        }
        answer(d, &m, 0, rc);
        return;
    }
    d->stats.n_snapshots_installed++;
    d->stats.n_snapshot_bytes_installed += r->total;
    d->stats.last_install_from = in->leader;
    d->stats.install_error[0] = '\0';
    raft_uv_node_log(d, RAFT_LOG_INFO,
                     "installed snapshot at index %" PRIu64 " from %" PRIu64,
                     in->index, in->leader);
    memset(&ev, 0, sizeof ev);
    ev.type = RAFT_EVENT_SNAPSHOT_INSTALLED;
    ev.snapshot.leader = in->leader;
    ev.snapshot.term = in->leader_term;
    ev.snapshot.index = in->index;
    ev.snapshot.last_term = in->last_term;
    ev.snapshot.configuration =
        in->has_configuration ? &in->configuration : NULL;
    raft_uv_node_step(d, &ev, NULL);
    if (in->index >= raft_first_index(d->raft)) {
        /* A repair (or a slow applier) installed a snapshot at an index
         * the core handed out already: it changed nothing for that
         * event (raft.h), but the install compacted the durable log
         * through @index, so the core drops it as after a compaction
         * (valid: at most the handed-out and persisted indexes). */
        memset(&ev, 0, sizeof ev);
        ev.type = RAFT_EVENT_COMPACT;
        ev.compact.index = in->index;
        raft_uv_node_step(d, &ev, NULL);
    }
    answer(d, &m, r->total, 0);
}

/* ---- Both --------------------------------------------------------------- */

void raft_uv_snapshot_message(struct raft_uv_node *d,
                              const struct raft_frame *m)
{
    if (m->type == RAFT_FRAME_SNAPSHOT_CHUNK) {
        on_chunk(d, m);
    } else if (m->type == RAFT_FRAME_REPAIR_REQUEST) {
        on_repair_request(d, m);
    } else {
        on_chunk_result(d, m);
    }
}

/* vouch tells the core, every RAFT__UV_SNAPSHOT_VOUCH_MS, that transfer
 * @s (one it asked for) is on its way: chunks go and are acknowledged,
 * or the follower installs the file (the last answer comes after the
 * install). The transfer's own stall timeout and a broken connection end
 * it with SNAPSHOT_FAILED; without this the core would take a transfer
 * longer than 10 election timeouts for lost, and the follower, back to
 * probing, would hold nothing of the log against compaction. Only while
 * the follower is connected: a transfer to a server that is down is on
 * no way (the core's expiry ends it, and a removed server's leaving
 * waits for that: test_removed). */
static void vouch(struct raft_uv_node *d, struct raft_uv_snapshot_send *s,
                  uint64_t now)
{
    struct raft_event ev;

    if (!s->wanted || now - s->vouched < RAFT__UV_SNAPSHOT_VOUCH_MS ||
        !raft_uv_node_connected(d, s->to)) {
        return;
    }
    s->vouched = now;
    memset(&ev, 0, sizeof ev);
    ev.type = RAFT_EVENT_SNAPSHOT_PROGRESS;
    ev.unreachable.id = s->to;
    raft_uv_node_step(d, &ev, NULL);
}

/* stall_limit_ms returns how long transfer @s may go without an
 * acknowledgement: the stall timeout, and once the whole file is sent,
 * the time the follower may take to verify and install it (its answer to
 * the last chunk waits for that). */
static uint64_t stall_limit_ms(const struct raft_uv_node *d,
                               const struct raft_uv_snapshot_send *s)
{
    if (s->sent < s->total) {
        return d->stall_ms;
    }
    return d->stall_ms + s->total / d->install_rate * 1000 +
           s->total % d->install_rate * 1000 / d->install_rate;
}

void raft_uv_snapshot_tick(struct raft_uv_node *d)
{
    uint64_t now = raft_uv_node_now(d);
    bool leader = raft_role(d->raft) == RAFT_LEADER;
    (void)taking_writes(d, now); /* so a transfer knows from its start */
    for (unsigned i = 0; i < d->n_peers; i++) {
        struct raft_uv_snapshot_send *s = &d->sends[i];
        if (!leader) {
            if (s->active) {
                raft_uv_remove_close(d, s->fd);
                s->active = false;
            }
            s->wanted = false;
            s->repair = false;
            continue;
        }
        if (s->active && now > s->last_progress + stall_limit_ms(d, s)) {
            fail_send(d, s, "no progress");
        } else if (s->active) {
            uint64_t quiet_since = s->last_progress > s->last_resend
                                       ? s->last_progress
                                       : s->last_resend;
            if (s->sent > s->acked && now > quiet_since + 1000) {
                /* Chunks were lost (a reconnect): send the window again.
                 * Only an acknowledgement is progress: a peer that never
                 * answers is abandoned after the stall timeout. */
                s->sent = s->acked;
                s->last_resend = now;
            }
            /* Fill the window (also when the peer was not connected). */
            send_chunks(d, s);
            vouch(d, s, now);
        }
    }
    pump(d);
    /* Progress for status: the first active transfer. */
    d->stats.snapshot_peer = 0;
    d->stats.snapshot_done = 0;
    d->stats.snapshot_total = 0;
    for (unsigned i = 0; i < d->n_peers; i++) {
        if (d->sends[i].active) {
            d->stats.snapshot_peer = d->sends[i].to;
            d->stats.snapshot_done = d->sends[i].acked;
            d->stats.snapshot_total = d->sends[i].total;
            return;
        }
    }
    if (d->recv.active) {
        d->stats.snapshot_peer = d->recv.from;
        d->stats.snapshot_done = d->recv.expected;
        d->stats.snapshot_total = d->recv.total;
    }
}

void raft_uv_snapshot_unreachable(struct raft_uv_node *d, raft_id id)
{
    struct raft_uv_snapshot_send *s = send_of(d, id);
    if (s != NULL && s->active) {
        fail_send(d, s, "connection lost");
    }
}

void raft_uv_snapshot_forget(struct raft_uv_node *d, raft_id id)
{
    struct raft_uv_snapshot_send *s = send_of(d, id);
    if (s != NULL && s->active) {
        raft_uv_remove_close(d, s->fd);
        s->active = false;
    }
    if (s != NULL) {
        s->wanted = false;
        s->repair = false;
    }
}

void raft_uv_snapshot_close(struct raft_uv_node *d)
{
    for (unsigned i = 0; i < d->n_peers; i++) {
        if (d->sends[i].active) {
            close(d->sends[i].fd);
            d->sends[i].active = false;
        }
    }
    if (d->snap.ready) {
        unlink(d->snap.path);
        d->snap.ready = false;
    }
    if (d->recv.active) {
        if (!d->recv.installing) {
            close(d->recv.fd);
        }
        unlink(d->recv.path);
        d->recv.active = false;
    }
}
