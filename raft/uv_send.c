/* The transport's sending side: each message is encoded at once into one
 * heap block (write request + frame) and handed to uv_write on the peer's
 * outgoing connection; libuv writes a stream's requests in order.
 *
 * Happy path: raft_uv_transport_send checks the peer is connected and its
 * queue is under 64 MiB, encodes, and queues; on_write frees the block.
 *
 * Failure modes: not connected or queue full drop the message (Raft
 * tolerates loss) and say so; a failed write closes the connection and
 * schedules a re-dial (uv_tcp.c); writes still queued on a closed
 * connection complete with UV_ECANCELED and are freed. */

#include <stdlib.h>
#include <string.h>

#include "byte.h"
#include "message.h"
#include "uv_internal.h"

/* One queued frame: the request and the bytes it writes. */
struct raft_uv_write {
    uv_write_t req;          /* req.data is this block */
    struct raft_uv_out *out; /* peer it goes to */
    size_t len;              /* bytes at @bytes */
    uint8_t bytes[];         /* the frame */
};

static void on_write(uv_write_t *req, int status)
{
    struct raft_uv_write *w = req->data;
    struct raft_uv_out *out = w->out;

    /* Invariant: queued_bytes counts exactly the blocks not yet here. */
    out->queued_bytes -= w->len;
    if (status < 0 && status != UV_ECANCELED && out->conn != NULL &&
        req->handle == (uv_stream_t *)&out->conn->tcp) {
        raft_uv_tcp_log(out->t, RAFT_LOG_WARN, "%s: write: %s", out->name,
                        uv_strerror(status));
        raft_uv_tcp_out_fail(out);
    }
    free(w);
}

/* queue_write hands @w to libuv on @out's connection. On failure @w is
 * freed and RAFT_IOERR returned; the caller fails the connection. */
static int queue_write(struct raft_uv_out *out, struct raft_uv_write *w)
{
    uv_buf_t buf = uv_buf_init((char *)w->bytes, (unsigned)w->len);
    int rv;

    w->out = out;
    w->req.data = w;
    rv = uv_write(&w->req, (uv_stream_t *)&out->conn->tcp, &buf, 1,
                  on_write);
    if (rv != 0) {
        raft_uv_tcp_log(out->t, RAFT_LOG_WARN, "%s: uv_write: %s", out->name,
                        uv_strerror(rv));
        free(w);
        return RAFT_IOERR;
    }
    out->queued_bytes += w->len;
    return 0;
}

int raft_uv_send_handshake(struct raft_uv_out *out)
{
    struct raft_uv_write *w;

    w = malloc(sizeof *w + RAFT__UV_HANDSHAKE_LEN);
    if (w == NULL) {
        return RAFT_NOMEM;
    }
    w->len = RAFT__UV_HANDSHAKE_LEN;
    memcpy(w->bytes, RAFT__UV_MAGIC, RAFT__UV_MAGIC_LEN);
    w->bytes[RAFT__UV_MAGIC_LEN] = RAFT_WIRE_VERSION;
    raft_byte_store_u64(w->bytes + RAFT__UV_MAGIC_LEN + 1, out->t->self);
    return queue_write(out, w);
}

int raft_uv_transport_send(struct raft_uv_transport *t,
                           const struct raft_message *m)
{
    struct raft_uv_out *out;
    struct raft_uv_write *w;
    size_t len;
    int rc;

    out = raft_uv_tcp_find(t, m->to);
    if (out == NULL) {
        return RAFT_NOTFOUND;
    }
    if (m->from != t->self) {
        return RAFT_INVALID;
    }
    if (t->closing || out->state != RAFT__UV_CONNECTED) {
        return RAFT_NOCONN;
    }
    len = raft_message_encoded_len(m);
    if (len == 0) {
        return RAFT_INVALID;
    }
    /* uv_buf_t lengths are unsigned int. */
    if (len - RAFT_FRAME_HEADER > t->max_frame_bytes || len > UINT32_MAX) {
        return RAFT_TOOBIG;
    }
    /* A frame larger than the bound still goes when nothing is queued. */
    if (out->queued_bytes > 0 &&
        out->queued_bytes + len > RAFT__UV_MAX_QUEUED) {
        return RAFT_BUSY;
    }
    w = malloc(sizeof *w + len);
    if (w == NULL) {
        return RAFT_NOMEM;
    }
    w->len = len;
    rc = raft_message_encode(m, w->bytes, len);
    if (rc != 0) {
        free(w);
        return rc;
    }
    if (queue_write(out, w) != 0) {
        raft_uv_tcp_out_fail(out);
        return RAFT_NOCONN;
    }
    return 0;
}
