/* The transport's receiving side: reassembles the byte stream of an
 * accepted connection into the handshake and then length-prefixed frames,
 * decodes each frame and hands it to the receive callback.
 *
 * Happy path: bytes land in the connection's read buffer and are consumed
 * by a small state machine (handshake, length prefix, body); a read may hold
 * part of a frame or several frames, and a large frame spans many reads.
 * Each complete body is decoded (message.c), checked against the sender and
 * this server, passed to recv_cb and released.
 *
 * Failure modes: a bad magic, version, sender id (0 or ours), malformed
 * build id or listen address in the handshake, a length outside [2, max_frame_bytes], a body the decoder
 * refuses, or a frame whose from/to do not match the connection each log
 * a WARN naming the connection and close it; other connections go on. EOF
 * closes the connection quietly. A peer whose build id differs from ours
 * is logged (WARN, once per connection) and accepted. A handshake not complete within
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

/* address_at returns the offset of the address length byte of @in's
 * handshake (after the build id). */
static size_t address_at(const struct raft_uv_in *in)
{
    return RAFT__UV_HANDSHAKE_FIXED + in->hs[RAFT__UV_HANDSHAKE_FIXED - 1];
}

/* handshake_need returns how many handshake bytes @in must hold before
 * the next check: the versions, then the fixed part, then through the
 * address length, then the whole. */
static size_t handshake_need(const struct raft_uv_in *in)
{
    if (in->hs_got < RAFT__UV_HANDSHAKE_VERSIONS) {
        return RAFT__UV_HANDSHAKE_VERSIONS;
    }
    if (in->hs_got < RAFT__UV_HANDSHAKE_FIXED) {
        return RAFT__UV_HANDSHAKE_FIXED;
    }
    if (in->hs_got < address_at(in) + 1) {
        return address_at(in) + 1;
    }
    return address_at(in) + 1 + in->hs[address_at(in)];
}

/* check_versions validates the magic and both versions of @in's
 * handshake (its first RAFT__UV_HANDSHAKE_VERSIONS bytes). */
static bool check_versions(struct raft_uv_in *in)
{
    struct raft_uv_transport *t = in->t;
    unsigned hv = in->hs[RAFT__UV_MAGIC_LEN];
    unsigned wv = in->hs[RAFT__UV_MAGIC_LEN + 1];

    if (memcmp(in->hs, RAFT__UV_MAGIC, RAFT__UV_MAGIC_LEN) != 0) {
        raft_uv_tcp_log(t, RAFT_LOG_WARN, "%s: bad handshake magic: closing",
                        in->name);
        return false;
    }
    if (hv != RAFT__UV_HANDSHAKE_VERSION) {
        raft_uv_tcp_log(
            t, RAFT_LOG_WARN,
            "%s: handshake version %u, want %u: closing (the "
            "peer runs %s raftsql)",
            in->name, hv, (unsigned)RAFT__UV_HANDSHAKE_VERSION,
            hv < RAFT__UV_HANDSHAKE_VERSION ? "an older" : "a newer");
        return false;
    }
    if (wv != RAFT_WIRE_VERSION) {
        raft_uv_tcp_log(t, RAFT_LOG_WARN,
                        "%s: handshake wire version %u, want %u: closing",
                        in->name, wv, (unsigned)RAFT_WIRE_VERSION);
        return false;
    }
    return true;
}

/* printable checks that the @len bytes at @b, the handshake's @what, are
 * printable ASCII, logging the first that is not. */
static bool printable(struct raft_uv_in *in, const char *what, const uint8_t *b,
                      size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (b[i] < 0x20 || b[i] > 0x7e) {
            raft_uv_tcp_log(in->t, RAFT_LOG_WARN,
                            "%s: handshake %s has byte 0x%02x at %zu, "
                            "not printable ASCII: closing",
                            in->name, what, (unsigned)b[i], i);
            return false;
        }
    }
    return true;
}

/* check_build keeps the build id of @in's complete handshake as its
 * peer's (@out, NULL for none), and logs a build that differs from
 * ours. */
static void check_build(struct raft_uv_in *in, struct raft_uv_out *out)
{
    struct raft_uv_transport *t = in->t;
    size_t len = in->hs[RAFT__UV_HANDSHAKE_FIXED - 1];
    const uint8_t *b = in->hs + RAFT__UV_HANDSHAKE_FIXED;

    if (out == NULL) {
        return;
    }
    memcpy(out->build_id, b, len);
    out->build_id[len] = '\0';
    out->build_known = true;
    if (strcmp(out->build_id, t->build_id) != 0) {
        raft_uv_tcp_log(t, RAFT_LOG_WARN,
                        "%s: its build differs from this server's: build id "
                        "'%s' there, '%s' here (accepted: a rolling upgrade "
                        "passes through this)",
                        in->name, out->build_id, t->build_id);
    }
}

/* check_handshake validates the handshake of @in once it holds
 * handshake_need bytes. Returns -1 to refuse it, 0 while more bytes are
 * needed, 1 when it is complete and accepted. */
static int check_handshake(struct raft_uv_in *in)
{
    struct raft_uv_transport *t = in->t;
    struct raft_uv_out *out;
    char address[RAFT__UV_ADDRESS_MAX + 1];
    raft_id id;

    if (in->hs_got == RAFT__UV_HANDSHAKE_VERSIONS) {
        return check_versions(in) ? 0 : -1;
    }
    if (in->hs_got == RAFT__UV_HANDSHAKE_FIXED) {
        size_t len = in->hs[RAFT__UV_HANDSHAKE_FIXED - 1];

        id = raft_byte_load_u64(in->hs + RAFT__UV_HANDSHAKE_VERSIONS);
        if (id == 0 || id == t->self) {
            raft_uv_tcp_log(t, RAFT_LOG_WARN,
                            "%s: handshake from server id %llu (%s): closing",
                            in->name, (unsigned long long)id,
                            id == 0 ? "no server" : "this server's own");
            return -1;
        }
        if (len > RAFT_UV_BUILD_ID_MAX) {
            raft_uv_tcp_log(t, RAFT_LOG_WARN,
                            "%s: handshake build id of %zu bytes, at most "
                            "%d: closing",
                            in->name, len, RAFT_UV_BUILD_ID_MAX);
            return -1;
        }
        return 0; /* the address length follows */
    }
    if (in->hs_got == address_at(in) + 1) {
        if (!printable(in, "build id", in->hs + RAFT__UV_HANDSHAKE_FIXED,
                       address_at(in) - RAFT__UV_HANDSHAKE_FIXED)) {
            return -1;
        }
        if (in->hs[address_at(in)] > RAFT__UV_ADDRESS_MAX) {
            raft_uv_tcp_log(t, RAFT_LOG_WARN,
                            "%s: handshake listen address of %u bytes, at "
                            "most %d: closing",
                            in->name, (unsigned)in->hs[address_at(in)],
                            RAFT__UV_ADDRESS_MAX);
            return -1;
        }
        if (in->hs[address_at(in)] > 0) {
            return 0;
        }
    }
    {
        size_t alen = in->hs[address_at(in)];
        if (!printable(in, "listen address", in->hs + address_at(in) + 1,
                       alen)) {
            return -1;
        }
        memcpy(address, in->hs + address_at(in) + 1, alen);
        address[alen] = '\0';
    }
    id = raft_byte_load_u64(in->hs + RAFT__UV_HANDSHAKE_VERSIONS);
    out = raft_uv_tcp_find(t, id);
    /* Under TLS the client's certificate must name the server it claims
     * to be (before it is dialled back or any frame is taken). */
    if (!raft_uv_tls_stream_identity(in, id, out, address)) {
        return -1;
    }
    /* From now on, logs name the peer as well as the address. */
    {
        char addr[sizeof in->name];
        memcpy(addr, in->name, sizeof addr);
        snprintf(in->name, sizeof in->name, "peer %llu (%.60s)",
                 (unsigned long long)id, addr);
    }
    if (out == NULL && address[0] != '\0') {
        out = raft_uv_tcp_learn(t, id, address);
    }
    check_build(in, out);
    in->peer = id;
    raft_uv_tcp_log(t, RAFT_LOG_DEBUG, "%s: handshake ok", in->name);
    raft_uv_accept_verified(in);
    return 1;
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
        in->body = malloc(RAFT__UV_BODY_MIN);
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

/* reserve_body grows the body buffer to hold @more bytes beyond what was
 * received, doubling but never past the announced length. */
static bool reserve_body(struct raft_uv_in *in, size_t more)
{
    size_t need = in->body_got + more;
    size_t cap = in->body_cap;
    uint8_t *p;

    if (need <= cap) {
        return true;
    }
    while (cap < need) {
        cap *= 2;
    }
    if (cap > in->body_len) {
        cap = in->body_len;
    }
    p = realloc(in->body, cap);
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

    rc = raft_frame_decode(in->body, in->body_len, &f, err, sizeof err);
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
    /* Give back what a big frame took; keep a small buffer for the next. */
    if (in->body_cap > RAFT__UV_BODY_MIN) {
        free(in->body);
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
        if (in->t->closing || in->closing) {
            return true;
        }
        switch (in->stage) {
            case RAFT__UV_HANDSHAKE: {
                size_t need = handshake_need(in);
                int ok;

                k = need - in->hs_got;
                k = k < n ? k : n;
                memcpy(in->hs + in->hs_got, p, k);
                in->hs_got += k;
                if (in->hs_got == need) {
                    ok = check_handshake(in);
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
                memcpy(in->body + in->body_got, p, k);
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

void raft_uv_recv_out_bytes(struct raft_uv_out *out, const uint8_t *p, size_t n)
{
    (void)p;
    (void)n;
    raft_uv_tcp_log(out->t, RAFT_LOG_WARN,
                    "%s: unexpected bytes on outgoing connection: "
                    "closing",
                    out->name);
    raft_uv_tcp_out_fail(out);
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
        }
        return;
    }
    if (!raft_uv_recv_consume(in, (const uint8_t *)buf->base, (size_t)nread)) {
        raft_uv_tcp_in_close(in);
    }
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
