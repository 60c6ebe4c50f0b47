/* The transport's sending side: each frame is encoded at once, in the
 * connection's agreed wire version, into one heap block (write request +
 * frame) and held for its peer; at the end of
 * the loop iteration (the transport's prepare and check handles) every
 * peer's held frames go to uv_write together, one request and so one
 * writev for all of them; libuv writes a stream's requests in order.
 *
 * Happy path: raft_uv_transport_send checks the peer is connected and its
 * queue is under 64 MiB, encodes, and holds the frame; raft_uv_send_flush
 * queues what is held; the write callback frees the blocks. Under TLS the
 * flush coalesces the held frames into records of up to 16 KiB (one
 * SSL_write per record's worth of small frames, one per large frame),
 * frees them, and writes the ciphertext in one block; its completion
 * settles the frames' bytes in the queue. The acceptor's answer to a
 * handshake goes out on the accepted connection (raft_uv_send_answer,
 * encrypted under TLS), which closes after a refusal.
 *
 * Failure modes: not connected or queue full drop the frame (Raft
 * tolerates loss) and say so; a failed write (EPIPE on a connection the
 * peer reset: SIGPIPE is blocked on the loop thread, uv_node.c) closes
 * the connection and schedules a re-dial (uv_tcp.c), and frames still
 * held for it are dropped; writes still queued on a closed connection
 * complete with UV_ECANCELED and are freed. */

#include <stdlib.h>
#include <string.h>

#include "byte.h"
#include "message.h"
#include "uv_internal.h"

/* One queued frame: the request and the bytes it writes: @head_len bytes
 * at @bytes, with the payloads of @refs inserted at their offsets (each
 * referenced until the block is freed). */
struct raft_uv_write {
    uv_write_t req;               /* req.data is this block */
    struct raft_uv_out *out;      /* peer it goes to */
    size_t len;                   /* bytes of the whole frame */
    size_t head_len;              /* bytes at @bytes */
    uint8_t *bytes;               /* the frame less its referenced
                                      payloads (after @refs) */
    unsigned n_refs;              /* payloads referenced */
    struct raft_frame_ref refs[]; /* they, in frame order */
};

/* Ciphertext written to a peer (TLS). */
struct raft_uv_cipher {
    uv_write_t req;          /* req.data is this block */
    struct raft_uv_out *out; /* peer it goes to */
    uint64_t plain_len;      /* bytes of frames it carries, queued until
                                it completes */
    uint8_t bytes[];         /* the ciphertext */
};

/* Several held frames written by one request. */
struct raft_uv_batch {
    uv_write_t req;                             /* req.data is this batch */
    struct raft_uv_out *out;                    /* peer they go to */
    uint64_t len;                               /* bytes of all frames */
    unsigned n;                                 /* frames */
    struct raft_uv_write *w[RAFT__UV_CORK_MAX]; /* their blocks */
    uv_buf_t bufs[RAFT__UV_CORK_MAX];           /* their bytes */
};

/* write_new returns a block for a frame of @len bytes, @head_len of them
 * in the block and @n_refs referenced payloads, or NULL. */
static struct raft_uv_write *write_new(size_t len, size_t head_len,
                                       unsigned n_refs)
{
    struct raft_uv_write *w =
        malloc(sizeof *w + n_refs * sizeof w->refs[0] + head_len);

    if (w == NULL) {
        return NULL;
    }
    w->len = len;
    w->head_len = head_len;
    w->n_refs = 0; /* none held yet */
    w->bytes = (uint8_t *)(w->refs + n_refs);
    return w;
}

/* write_free drops the payloads @w references and frees it. */
static void write_free(struct raft_uv_write *w)
{
    for (unsigned i = 0; i < w->n_refs; i++) {
        raft_buf_unref(w->refs[i].buf);
    }
    free(w);
}

/* write_pieces fills @bufs (room for 2 n_refs + 1) with the pieces of
 * @w's frame in order, and returns their number. */
static unsigned write_pieces(const struct raft_uv_write *w, uv_buf_t *bufs)
{
    size_t at = 0;
    unsigned n = 0;

    for (unsigned i = 0; i < w->n_refs; i++) {
        const struct raft_frame_ref *r = &w->refs[i];
        if (r->at > at) {
            bufs[n++] =
                uv_buf_init((char *)w->bytes + at, (unsigned)(r->at - at));
        }
        bufs[n++] = uv_buf_init((char *)r->buf->data, (unsigned)r->buf->len);
        at = r->at;
    }
    if (w->head_len > at || n == 0) {
        bufs[n++] =
            uv_buf_init((char *)w->bytes + at, (unsigned)(w->head_len - at));
    }
    return n;
}

/* out_write writes @n @bufs on @out's connection (uv_write) and counts
 * their bytes in its @submitted, which tells how many the socket took
 * (raft_uv_transport_contacts). Returns uv_write's result. */
static int out_write(struct raft_uv_out *out, uv_write_t *req,
                     const uv_buf_t *bufs, unsigned n, uv_write_cb cb)
{
    int rv = uv_write(req, (uv_stream_t *)&out->conn->tcp, bufs, n, cb);

    for (unsigned i = 0; rv == 0 && i < n; i++) {
        out->conn->submitted += bufs[i].len;
    }
    return rv;
}

/* write_done accounts for @len bytes of @out that completed with @status
 * on the stream of @req. */
static void write_done(struct raft_uv_out *out, uv_write_t *req, int status,
                       uint64_t len)
{
    /* Invariant: queued_bytes counts exactly the blocks held or written
     * and not yet here. */
    out->queued_bytes -= len;
    if (status < 0 && status != UV_ECANCELED && out->conn != NULL &&
        req->handle == (uv_stream_t *)&out->conn->tcp) {
        raft_uv_tcp_log(out->t, RAFT_LOG_WARN, "%s: write: %s", out->name,
                        uv_strerror(status));
        raft_uv_tcp_out_fail(out);
    }
}

static void on_write(uv_write_t *req, int status)
{
    struct raft_uv_write *w = req->data;

    write_done(w->out, req, status, w->len);
    write_free(w);
}

static void on_batch_write(uv_write_t *req, int status)
{
    struct raft_uv_batch *b = req->data;

    write_done(b->out, req, status, b->len);
    for (unsigned i = 0; i < b->n; i++) {
        write_free(b->w[i]);
    }
    free(b);
}

static void on_cipher_write(uv_write_t *req, int status)
{
    struct raft_uv_cipher *c = req->data;

    write_done(c->out, req, status, c->plain_len);
    free(c);
}

int raft_uv_send_cipher(struct raft_uv_out *out, uint64_t plain_len)
{
    struct raft_uv_tls_session *s = out->conn->tls;
    size_t n = raft_uv_tls_session_pending(s);
    struct raft_uv_cipher *c;
    uv_buf_t buf;
    int rv;

    if (n == 0) {
        out->queued_bytes -= plain_len;
        return 0;
    }
    c = n <= UINT32_MAX ? malloc(sizeof *c + n) : NULL;
    if (c == NULL) {
        raft_uv_tcp_log(out->t, RAFT_LOG_ERROR, "%s: TLS write: out of memory",
                        out->name);
        out->queued_bytes -= plain_len;
        return RAFT_NOMEM;
    }
    raft_uv_tls_session_take(s, c->bytes, n);
    c->out = out;
    c->plain_len = plain_len;
    c->req.data = c;
    buf = uv_buf_init((char *)c->bytes, (unsigned)n);
    rv = out_write(out, &c->req, &buf, 1, on_cipher_write);
    if (rv != 0) {
        raft_uv_tcp_log(out->t, RAFT_LOG_WARN, "%s: uv_write: %s", out->name,
                        uv_strerror(rv));
        out->queued_bytes -= plain_len;
        free(c);
        return RAFT_IOERR;
    }
    return 0;
}

/* tls_write encrypts the @n bytes at @p for @out, logging a failure. */
static int tls_write(struct raft_uv_out *out, const void *p, size_t n)
{
    int rc = raft_uv_tls_session_write(out->conn->tls, p, n);

    if (rc != 0) {
        raft_uv_tcp_log(out->t, RAFT_LOG_WARN, "%s: TLS write: %s", out->name,
                        raft_uv_tls_session_error(out->conn->tls));
    }
    return rc;
}

/* tls_write_frame encrypts every piece of @w's frame for @out. */
static int tls_write_frame(struct raft_uv_out *out,
                           const struct raft_uv_write *w)
{
    uv_buf_t small[1];
    uv_buf_t *bufs = small;
    unsigned n;
    int rc = 0;

    if (w->n_refs > 0) {
        bufs = malloc((2 * w->n_refs + 1) * sizeof *bufs);
        if (bufs == NULL) {
            return RAFT_NOMEM;
        }
    }
    n = write_pieces(w, bufs);
    for (unsigned i = 0; i < n && rc == 0; i++) {
        rc = tls_write(out, bufs[i].base, bufs[i].len);
    }
    if (bufs != small) {
        free(bufs);
    }
    return rc;
}

/* queue_write hands @w, already counted in queued_bytes, to libuv on
 * @out's connection (encrypted under TLS: @w is freed at once). On failure
 * @w is freed and uncounted and RAFT_IOERR returned; the caller fails the
 * connection. */
static int queue_write(struct raft_uv_out *out, struct raft_uv_write *w)
{
    uv_buf_t small[1];
    uv_buf_t *bufs = small;
    unsigned n;
    int rv;

    if (out->conn->tls != NULL) {
        size_t len = w->len;
        rv = tls_write_frame(out, w);
        write_free(w);
        if (rv != 0) {
            out->queued_bytes -= len;
            return RAFT_IOERR;
        }
        return raft_uv_send_cipher(out, len) == 0 ? 0 : RAFT_IOERR;
    }
    if (w->n_refs > 0) {
        bufs = malloc((2 * w->n_refs + 1) * sizeof *bufs);
        if (bufs == NULL) {
            out->queued_bytes -= w->len;
            write_free(w);
            return RAFT_IOERR;
        }
    }
    n = write_pieces(w, bufs);
    w->out = out;
    w->req.data = w;
    /* libuv copies the uv_buf_t array; the bytes stay in @w. */
    rv = out_write(out, &w->req, bufs, n, on_write);
    if (bufs != small) {
        free(bufs);
    }
    if (rv != 0) {
        raft_uv_tcp_log(out->t, RAFT_LOG_WARN, "%s: uv_write: %s", out->name,
                        uv_strerror(rv));
        out->queued_bytes -= w->len;
        write_free(w);
        return RAFT_IOERR;
    }
    return 0;
}

void raft_uv_send_drop(struct raft_uv_out *out)
{
    for (unsigned i = 0; i < out->n_pend; i++) {
        out->queued_bytes -= out->pend[i]->len;
        write_free(out->pend[i]);
    }
    out->n_pend = 0;
}

/* flush_tls encrypts the frames held for @out, coalescing small ones into
 * records of up to RAFT__UV_TLS_RECORD bytes, frees them, and writes the
 * ciphertext in one request. */
static void flush_tls(struct raft_uv_out *out)
{
    uint8_t *stage = out->t->tls_stage;
    size_t staged = 0;
    uint64_t plain = 0;
    unsigned n = out->n_pend;
    int rc = 0;

    out->n_pend = 0;
    for (unsigned i = 0; i < n; i++) {
        struct raft_uv_write *w = out->pend[i];
        if (rc == 0 && staged > 0 && staged + w->len > RAFT__UV_TLS_RECORD) {
            rc = tls_write(out, stage, staged);
            staged = 0;
        }
        if (rc == 0 && (w->len >= RAFT__UV_TLS_RECORD || w->n_refs > 0)) {
            rc = tls_write_frame(out, w);
        } else if (rc == 0) {
            memcpy(stage + staged, w->bytes, w->len);
            staged += w->len;
        }
        plain += w->len;
        write_free(w);
    }
    if (rc == 0) {
        rc = tls_write(out, stage, staged);
    }
    if (rc != 0) {
        out->queued_bytes -= plain;
        raft_uv_tcp_out_fail(out);
    } else if (raft_uv_send_cipher(out, plain) != 0) {
        raft_uv_tcp_out_fail(out);
    }
}

/* write_each hands @n frames of @w to libuv on @out's connection, a
 * request each; those left once the connection is gone are dropped. */
static void write_each(struct raft_uv_out *out, struct raft_uv_write **w,
                       unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        if (out->conn == NULL) {
            out->queued_bytes -= w[i]->len;
            write_free(w[i]);
        } else if (queue_write(out, w[i]) != 0) {
            raft_uv_tcp_out_fail(out);
        }
    }
}

/* write_batch hands @n frames of @w, none with referenced payloads, to
 * libuv on @out's connection in one request (one writev), or a request
 * each when there is no memory for the batch. */
static void write_batch(struct raft_uv_out *out, struct raft_uv_write **w,
                        unsigned n)
{
    struct raft_uv_batch *b = n > 1 ? malloc(sizeof *b) : NULL;
    int rv;

    if (b == NULL) {
        write_each(out, w, n);
        return;
    }
    b->out = out;
    b->len = 0;
    b->n = n;
    b->req.data = b;
    for (unsigned i = 0; i < n; i++) {
        b->w[i] = w[i];
        b->bufs[i] = uv_buf_init((char *)w[i]->bytes, (unsigned)w[i]->len);
        b->len += w[i]->len;
    }
    rv = out_write(out, &b->req, b->bufs, n, on_batch_write);
    if (rv != 0) {
        raft_uv_tcp_log(out->t, RAFT_LOG_WARN, "%s: uv_write: %s", out->name,
                        uv_strerror(rv));
        out->queued_bytes -= b->len;
        for (unsigned i = 0; i < n; i++) {
            write_free(b->w[i]);
        }
        free(b);
        raft_uv_tcp_out_fail(out);
    }
}

/* flush_out hands the frames held for @out to libuv, in order: runs of
 * frames without referenced payloads in one request each (one writev), a
 * frame with them in a request of its own; under TLS, flush_tls. */
static void flush_out(struct raft_uv_out *out)
{
    struct raft_uv_write *pend[RAFT__UV_CORK_MAX];
    unsigned n = out->n_pend;
    unsigned start = 0;

    if (n == 0) {
        return;
    }
    if (out->state != RAFT__UV_CONNECTED || out->conn == NULL) {
        raft_uv_send_drop(out);
        return;
    }
    if (out->conn->tls != NULL) {
        flush_tls(out);
        return;
    }
    memcpy(pend, out->pend, n * sizeof pend[0]);
    out->n_pend = 0;
    for (unsigned i = 0; i <= n; i++) {
        if (i < n && pend[i]->n_refs == 0) {
            continue;
        }
        if (i > start && out->conn != NULL) {
            write_batch(out, pend + start, i - start);
        } else if (i > start) {
            write_each(out, pend + start, i - start);
        }
        if (i < n) {
            write_each(out, pend + i, 1);
        }
        start = i + 1;
    }
}

void raft_uv_send_flush(struct raft_uv_transport *t)
{
    for (unsigned i = 0; i < t->n_outs; i++) {
        flush_out(t->outs[i]);
    }
}

size_t raft_uv_send_handshake_encode(
    raft_id self, const uint8_t cluster_id[RAFT_UV_CLUSTER_ID_LEN],
    const char *build_id, const char *address,
    uint8_t out[RAFT__UV_HANDSHAKE_MAX])
{
    size_t len = strlen(build_id);
    size_t alen = strlen(address);
    uint8_t *p = out + RAFT__UV_HANDSHAKE_FIXED + len;

    memcpy(out, RAFT__UV_MAGIC, RAFT__UV_MAGIC_LEN);
    out[RAFT__UV_MAGIC_LEN] = RAFT__UV_HANDSHAKE_VERSION;
    out[RAFT__UV_MAGIC_LEN + 1] = RAFT_WIRE_VERSION_MIN;
    out[RAFT__UV_MAGIC_LEN + 2] = RAFT_WIRE_VERSION;
    memcpy(out + RAFT__UV_HANDSHAKE_VERSIONS, cluster_id,
           RAFT_UV_CLUSTER_ID_LEN);
    raft_byte_store_u64(out + RAFT__UV_HANDSHAKE_ID, self);
    out[RAFT__UV_HANDSHAKE_FIXED - 1] = (uint8_t)len;
    memcpy(out + RAFT__UV_HANDSHAKE_FIXED, build_id, len);
    p[0] = (uint8_t)alen;
    memcpy(p + 1, address, alen);
    return RAFT__UV_HANDSHAKE_FIXED + len + 1 + alen;
}

int raft_uv_send_handshake(struct raft_uv_out *out)
{
    struct raft_uv_write *w;

    w = write_new(0, RAFT__UV_HANDSHAKE_MAX, 0);
    if (w == NULL) {
        return RAFT_NOMEM;
    }
    w->len = w->head_len = raft_uv_send_handshake_encode(
        out->t->self, out->t->cluster_id, out->t->build_id, out->t->address,
        w->bytes);
    out->queued_bytes += w->len;
    return queue_write(out, w);
}

/* An answer to a handshake being written on an accepted connection. */
struct raft_uv_answer_write {
    uv_write_t req;                     /* req.data is this block */
    struct raft_uv_in *in;              /* the connection */
    uint8_t bytes[RAFT__UV_ANSWER_MAX]; /* the answer */
};

static void on_answer_written(uv_write_t *req, int status)
{
    struct raft_uv_answer_write *w = req->data;

    /* Invariant: libuv runs write callbacks before the close callback
     * that frees @w->in. */
    if (status < 0 && status != UV_ECANCELED && !w->in->closing) {
        raft_uv_tcp_log(w->in->t, RAFT_LOG_DEBUG, "%s: answer: %s", w->in->name,
                        uv_strerror(status));
        raft_uv_tcp_in_close(w->in);
    } else if (w->in->refused) {
        raft_uv_tcp_in_close(w->in);
    }
    free(w);
}

void raft_uv_send_answer(struct raft_uv_in *in)
{
    struct raft_uv_answer_write *w;
    uv_buf_t buf;
    int rv;

    if (in->closing) {
        return;
    }
    if (in->answer_len == 0) {
        if (in->refused) {
            raft_uv_tcp_in_close(in);
        }
        return;
    }
    if (in->refused) {
        uv_read_stop((uv_stream_t *)&in->tcp);
    }
    if (in->tls != NULL) {
        raft_uv_tls_stream_in_answer(in);
        return;
    }
    w = malloc(sizeof *w);
    if (w == NULL) {
        raft_uv_tcp_in_close(in);
        return;
    }
    memcpy(w->bytes, in->answer, in->answer_len);
    buf = uv_buf_init((char *)w->bytes, (unsigned)in->answer_len);
    in->answer_len = 0;
    w->in = in;
    w->req.data = w;
    rv = uv_write(&w->req, (uv_stream_t *)&in->tcp, &buf, 1, on_answer_written);
    if (rv != 0) {
        raft_uv_tcp_log(in->t, RAFT_LOG_DEBUG, "%s: answer: %s", in->name,
                        uv_strerror(rv));
        free(w);
        raft_uv_tcp_in_close(in);
    }
}

int raft_uv_transport_send(struct raft_uv_transport *t,
                           const struct raft_frame *f)
{
    struct raft_uv_out *out;
    struct raft_uv_write *w;
    uint64_t limit;
    unsigned n_refs;
    size_t len;
    size_t head;
    int rc;

    out = raft_uv_tcp_find(t, f->to);
    if (out == NULL) {
        return RAFT_NOTFOUND;
    }
    if (f->from != t->self) {
        return RAFT_INVALID;
    }
    if (t->closing || out->state != RAFT__UV_CONNECTED) {
        return RAFT_NOCONN;
    }
    len = raft_frame_encoded_len_at(f, out->wire_version);
    if (len == 0) {
        return RAFT_INVALID;
    }
    /* uv_buf_t lengths are unsigned int. */
    if (len - RAFT_FRAME_HEADER > t->max_frame_bytes || len > UINT32_MAX) {
        return RAFT_TOOBIG;
    }
    /* A frame larger than the bound still goes when nothing is queued;
     * a small one has a reserve of its own. */
    limit = RAFT__UV_MAX_QUEUED;
    if (len <= RAFT__UV_SMALL_FRAME) {
        limit += RAFT__UV_SMALL_RESERVE;
    }
    if (out->queued_bytes > 0 && out->queued_bytes + len > limit) {
        return RAFT_BUSY;
    }
    head = raft_frame_encoded_len_refs(f, out->wire_version, RAFT__UV_REF_MIN,
                                       &n_refs);
    w = write_new(len, head, n_refs);
    if (w == NULL) {
        return RAFT_NOMEM;
    }
    rc = raft_frame_encode_refs(f, out->wire_version, w->bytes, head,
                                RAFT__UV_REF_MIN, w->refs, &n_refs);
    if (rc != 0) {
        free(w);
        return rc;
    }
    /* The payloads are the frame's: hold them until the write is done. */
    for (unsigned i = 0; i < n_refs; i++) {
        raft_buf_ref(w->refs[i].buf);
    }
    w->n_refs = n_refs;
    if (out->n_pend == RAFT__UV_CORK_MAX) {
        flush_out(out);
        if (out->state != RAFT__UV_CONNECTED) {
            write_free(w);
            return RAFT_NOCONN;
        }
    }
    out->pend[out->n_pend++] = w;
    out->queued_bytes += len;
    return 0;
}
