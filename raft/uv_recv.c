/* The transport's receiving side: reassembles the byte stream of an
 * accepted connection into the handshake and then length-prefixed frames,
 * decodes each frame and hands it to the receive callback.
 *
 * Happy path: bytes land in the connection's read buffer and are consumed
 * by a small state machine (handshake, length prefix, body); a read may hold
 * part of a frame or several frames, and a large frame spans many reads.
 * The handshake is checked as it arrives (uv_handshake.c) and answered
 * (uv_send.c). Each complete body is decoded (message.c), checked against
 * the sender, this server and the agreed wire version, passed to recv_cb
 * and released.
 *
 * Failure modes: a refused handshake (uv_handshake.c: another cluster,
 * version or id, malformed, or under TLS a certificate that does not name
 * its sender) is answered with the refusal and closed; a
 * length outside [2, max_frame_bytes], a frame of another wire version, a
 * body the decoder refuses, or a frame whose from/to do not match the
 * connection each log a WARN naming the connection and close it; other
 * connections go on. EOF closes the connection quietly. A handshake not
 * complete within
 * RAFT__UV_HANDSHAKE_TIMEOUT_MS, and a frame in progress that receives no
 * byte for RAFT__UV_STALL_TIMEOUT_MS, close the connection too (uv_tcp.c's
 * sweep), so stalled peers hold nothing for long. Nothing is delivered once the transport or
 * the connection is closing. Under TLS, what is read is decrypted first
 * (uv_tls_stream.c), and the client's certificate must name the server
 * the handshake claims (the identity rule, uv.h) before any frame. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "byte.h"
#include "message.h"
#include "uv_internal.h"

/* Initial (and retained) body buffer; bigger bodies grow as bytes arrive,
 * so a peer's announced length alone never allocates much. */
#define RAFT__UV_BODY_MIN 65536

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    struct raft_uv_in *in = handle->data;

    (void)suggested;
    buf->base = in->rbuf;
    buf->len = sizeof in->rbuf;
}

/* start_body checks the length prefix of @in and readies the body buffer. */
static bool start_body(struct raft_uv_in *in)
{
    struct raft_uv_transport *t = in->t;
    uint32_t len = raft_byte_load_u32(in->hdr);

    if (len < RAFT__UV_MIN_FRAME || len > t->max_frame_bytes) {
        raft_uv_tcp_log(t, RAFT_LOG_WARN,
                        "%s: frame length %lu outside [%d, %llu]: closing",
                        in->name, (unsigned long)len, RAFT__UV_MIN_FRAME,
                        (unsigned long long)t->max_frame_bytes);
        return false;
    }
    /* Invariant: a retained body buffer has RAFT__UV_BODY_MIN bytes. */
    if (in->body == NULL) {
        in->body = raft_buf_new(RAFT__UV_BODY_MIN);
        if (in->body == NULL) {
            raft_uv_tcp_log(t, RAFT_LOG_ERROR, "%s: out of memory: closing",
                            in->name);
            return false;
        }
        in->body_cap = RAFT__UV_BODY_MIN;
    }
    in->body_len = len;
    in->body_got = 0;
    return true;
}

/* Past this many bytes received, a body buffer grows to the announced
 * length at once: the peer has shown that it sends, and growing by
 * doubling would copy up to half the frame at each step, on the loop
 * (realloc moves a large block unless the allocator remaps it). The
 * pages of the new buffer are touched only as bytes arrive. */
#define RAFT__UV_BODY_GROW 1048576

/* reserve_body grows the body buffer to hold @more bytes beyond what was
 * received: doubling up to RAFT__UV_BODY_GROW, then to the announced
 * length, never past it. */
static bool reserve_body(struct raft_uv_in *in, size_t more)
{
    size_t need = in->body_got + more;
    size_t cap = in->body_cap;
    struct raft_buf *p;

    if (need <= cap) {
        return true;
    }
    while (cap < need) {
        cap *= 2;
    }
    if (cap > RAFT__UV_BODY_GROW) {
        cap = in->body_len;
    }
    if (cap > in->body_len) {
        cap = in->body_len;
    }
    p = raft_buf_resize(in->body, cap);
    if (p == NULL) {
        raft_uv_tcp_log(in->t, RAFT_LOG_ERROR, "%s: out of memory: closing",
                        in->name);
        return false;
    }
    in->body = p;
    in->body_cap = cap;
    return true;
}

/* deliver decodes the complete body of @in and hands it to recv_cb.
 * Returns false when the connection must be closed. */
static bool deliver(struct raft_uv_in *in)
{
    struct raft_uv_transport *t = in->t;
    struct raft_frame f;
    char err[160];
    int rc;

    if (in->body->data[0] != in->wire_version) {
        raft_uv_tcp_log(t, RAFT_LOG_WARN,
                        "%s: frame of wire version %u, the handshake agreed "
                        "on %u: closing",
                        in->name, (unsigned)in->body->data[0],
                        in->wire_version);
        return false;
    }
    if (in->body_len > RAFT__UV_BODY_MIN) {
        /* Large payloads become slices of the body: no copy here. */
        rc = raft_frame_decode_buf(in->body, in->body_len, &f, err, sizeof err);
    } else {
        rc = raft_frame_decode(in->body->data, in->body_len, &f, err,
                               sizeof err);
    }
    if (rc != 0) {
        raft_uv_tcp_log(t, RAFT_LOG_WARN, "%s: bad frame: %s: %s: closing",
                        in->name, raft_strerror(rc), err);
        return false;
    }
    if (f.from != in->peer || f.to != t->self) {
        raft_uv_tcp_log(t, RAFT_LOG_WARN,
                        "%s: message from %llu to %llu on this connection: "
                        "closing",
                        in->name, (unsigned long long)f.from,
                        (unsigned long long)f.to);
        raft_frame_release(&f);
        return false;
    }
    t->recv_cb(t->data, &f);
    raft_frame_release(&f);
    /* Give back what a big frame took (its slices may keep it alive);
     * keep a small buffer, which no slice shares, for the next. */
    if (in->body_cap > RAFT__UV_BODY_MIN) {
        raft_buf_unref(in->body);
        in->body = NULL;
        in->body_cap = 0;
    }
    return true;
}

bool raft_uv_recv_consume(struct raft_uv_in *in, const uint8_t *p, size_t n)
{
    while (n > 0) {
        size_t k;

        /* The callback may have closed the transport or this connection. */
        if (in->t->closing || in->closing || in->refused) {
            return true;
        }
        switch (in->stage) {
            case RAFT__UV_HANDSHAKE: {
                size_t need = raft_uv_handshake_need(in);
                int ok;

                k = need - in->hs_got;
                k = k < n ? k : n;
                memcpy(in->hs + in->hs_got, p, k);
                in->hs_got += k;
                if (in->hs_got == need) {
                    ok = raft_uv_handshake_check(in);
                    if (ok < 0) {
                        return false;
                    }
                    if (ok > 0) {
                        in->stage = RAFT__UV_HEADER;
                    }
                }
                break;
            }
            case RAFT__UV_HEADER:
                k = sizeof in->hdr - in->hdr_got;
                k = k < n ? k : n;
                memcpy(in->hdr + in->hdr_got, p, k);
                in->hdr_got += k;
                if (in->hdr_got == sizeof in->hdr) {
                    in->hdr_got = 0;
                    if (!start_body(in)) {
                        return false;
                    }
                    in->stage = RAFT__UV_BODY;
                }
                break;
            default:
                k = in->body_len - in->body_got;
                k = k < n ? k : n;
                if (!reserve_body(in, k)) {
                    return false;
                }
                memcpy(in->body->data + in->body_got, p, k);
                in->body_got += k;
                if (in->body_got == in->body_len) {
                    in->stage = RAFT__UV_HEADER;
                    if (!deliver(in)) {
                        return false;
                    }
                }
                break;
        }
        p += k;
        n -= k;
    }
    return true;
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct raft_uv_in *in = stream->data;
    struct raft_uv_transport *t = in->t;

    if (nread == 0 || in->closing || t->closing) {
        return;
    }
    in->last_read_at = uv_now(t->loop);
    if (nread < 0) {
        bool mid = in->stage == RAFT__UV_BODY || in->hdr_got > 0 ||
                   (in->stage == RAFT__UV_HANDSHAKE && in->hs_got > 0);
        raft_uv_tcp_log(t, mid ? RAFT_LOG_WARN : RAFT_LOG_INFO,
                        "%s: %s%s: closing", in->name, uv_strerror((int)nread),
                        mid ? " in the middle of a frame" : "");
        raft_uv_tcp_in_close(in);
        return;
    }
    if (in->tls != NULL) {
        if (!raft_uv_tls_stream_in_read(in, (const uint8_t *)buf->base,
                                        (size_t)nread)) {
            raft_uv_tcp_in_close(in);
            return;
        }
    } else if (!raft_uv_recv_consume(in, (const uint8_t *)buf->base,
                                     (size_t)nread)) {
        in->refused = true; /* a refusal, if any, goes out first */
    }
    /* Contact is for what whole frames cannot say in time: a large frame
     * still arriving (from the peer its handshake proved). A small frame
     * arrives whole and speaks for itself: counting its bytes as contact
     * would let a restarted leader's pre-votes keep its old followers'
     * election timers from firing, for ever. */
    if (!in->closing && in->stage == RAFT__UV_BODY &&
        in->body_len >= RAFT__UV_CONTACT_MIN) {
        in->heard = true;
    }
    raft_uv_send_answer(in);
}

int raft_uv_recv_start(struct raft_uv_in *in)
{
    int rv;

    rv = uv_read_start((uv_stream_t *)&in->tcp, on_alloc, on_read);
    if (rv != 0) {
        raft_uv_tcp_log(in->t, RAFT_LOG_WARN, "%s: read: %s", in->name,
                        uv_strerror(rv));
        return RAFT_IOERR;
    }
    return 0;
}
