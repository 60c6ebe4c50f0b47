/* libFuzzer target: the transport's receive path (raft/uv_recv.c), from
 * the handshake through length prefixes to decoded frames, on a connection
 * of its own without socket or loop (raft_uv_recv_consume; nothing calls
 * libuv). Input: one byte that picks how the stream is cut into reads,
 * then the bytes a peer sends. */

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "fuzz.h"
#include "raft/byte.h"
#include "raft/message.h"
#include "raft/uv_internal.h"

#define SELF 1               /* the receiving server */
#define N_PEERS 2            /* servers 2 and 3 */
#define MAX_FRAME (1u << 20) /* the transport's bound on a body */

/* What one feeding of the stream saw. */
struct run {
    struct raft_uv_in *in; /* the connection */
    unsigned n_frames;     /* frames handed to recv_cb */
    uint64_t hash;         /* FNV-1a of their encodings, in order */
    bool closed;           /* consume asked for the connection closed */
};

static uint64_t fnv(uint64_t h, const uint8_t *p, size_t len)
{
    size_t i;

    for (i = 0; i < len; i++) {
        h = (h ^ p[i]) * 0x100000001b3ull;
    }
    return h;
}

/* on_frame is recv_cb: a frame comes from the handshake's sender to this
 * server, and encodes back to the very body it was decoded from. */
static void on_frame(void *data, const struct raft_frame *f)
{
    struct run *r = data;
    const struct raft_uv_in *in = r->in;
    uint8_t *buf;
    size_t len;

    FUZZ_CHECK(f->from == in->peer && f->to == SELF,
               "frame from %llu to %llu on the connection of %llu",
               (unsigned long long)f->from, (unsigned long long)f->to,
               (unsigned long long)in->peer);
    len = raft_frame_encoded_len(f);
    FUZZ_CHECK(len == RAFT_FRAME_HEADER + in->body_len,
               "encoded length %zu, body %zu", len, in->body_len);
    buf = malloc(len);
    FUZZ_CHECK(buf != NULL, "out of memory");
    FUZZ_CHECK(raft_frame_encode(f, buf, len) == 0, "encode failed");
    FUZZ_CHECK(memcmp(buf + RAFT_FRAME_HEADER, in->body, in->body_len) == 0,
               "frame %u re-encodes to other bytes", r->n_frames);
    r->hash = fnv(r->hash, buf, len);
    r->n_frames++;
    free(buf);
}

/* on_log is log_cb: a line is a short NUL-terminated text of a level. */
static void on_log(void *data, int level, const char *msg)
{
    (void)data;
    FUZZ_CHECK(level >= RAFT_LOG_DEBUG && level <= RAFT_LOG_ERROR, "level %d",
               level);
    FUZZ_CHECK(msg != NULL && strlen(msg) < 512, "log line");
}

/* feed runs the @len bytes of @stream through @in made a new connection of
 * @t (for release once done), in reads cut by @cut (0: one read; else
 * pieces of 1..@cut bytes, sizes drawn from a generator seeded by @cut),
 * until the end or until the connection is to be closed. */
static void feed(struct raft_uv_transport *t, struct raft_uv_in *in,
                 struct run *r, const uint8_t *stream, size_t len, unsigned cut)
{
    uint32_t x = 0x9e3779b9u ^ cut;
    size_t done = 0;

    memset(r, 0, sizeof *r);
    r->hash = 0xcbf29ce484222325ull;
    /* As accepted (uv_tcp.c): zeroed, but for the read buffer, unused
     * here and 64 KiB to clear for every input. */
    r->in = in;
    memset(r->in, 0, offsetof(struct raft_uv_in, rbuf));
    r->in->t = t;
    r->in->stage = RAFT__UV_HANDSHAKE;
    snprintf(r->in->name, sizeof r->in->name, "127.0.0.1:40000");
    t->data = r;
    while (done < len && !r->closed) {
        size_t k = len - done;

        if (cut > 0) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            k = 1 + x % cut;
            k = k < len - done ? k : len - done;
        }
        r->closed = !raft_uv_recv_consume(r->in, stream + done, k);
        done += k;
    }
}

/* release frees what the connection of @r holds, as the transport's close
 * callback does. */
static void release(struct run *r)
{
    free(r->in->body);
    r->in->body = NULL;
    r->in = NULL;
}

/* The two connections of a run: fed whole, fed in pieces. */
static struct raft_uv_in conns[2];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct raft_uv_out outs[N_PEERS];
    struct raft_uv_transport t;
    struct run whole, cut;
    const uint8_t *stream;
    raft_id want = 0;
    size_t len;
    unsigned i;

    if (size < 1) {
        return 0;
    }
    stream = data + 1;
    len = size - 1;
    memset(&t, 0, sizeof t);
    memset(outs, 0, sizeof outs);
    for (i = 0; i < N_PEERS; i++) {
        outs[i].t = &t;
        outs[i].id = SELF + 1 + i;
    }
    t.self = SELF;
    t.max_frame_bytes = MAX_FRAME;
    t.recv_cb = on_frame;
    t.log_cb = on_log;
    t.outs = outs;
    t.n_outs = N_PEERS;

    feed(&t, &conns[0], &whole, stream, len, 0);

    /* The handshake is accepted exactly when it is one a peer sends. */
    if (len >= RAFT__UV_HANDSHAKE_LEN) {
        for (i = 0; i < N_PEERS; i++) {
            uint8_t hs[RAFT__UV_HANDSHAKE_LEN];
            raft_uv_send_handshake_encode(outs[i].id, hs);
            if (memcmp(hs, stream, sizeof hs) == 0) {
                want = outs[i].id;
            }
        }
        FUZZ_CHECK(
            whole.in->peer == want, "handshake gave peer %llu, want %llu",
            (unsigned long long)whole.in->peer, (unsigned long long)want);
        FUZZ_CHECK(want != 0 || whole.closed, "bad handshake not refused");
    } else {
        FUZZ_CHECK(
            !whole.closed && whole.in->peer == 0 && whole.in->hs_got == len,
            "a partial handshake of %zu bytes", len);
    }
    FUZZ_CHECK(whole.n_frames == 0 || whole.in->peer != 0,
               "frames before the handshake");

    /* Where the reads cut the stream changes nothing. */
    feed(&t, &conns[1], &cut, stream, len, data[0]);
    FUZZ_CHECK(cut.closed == whole.closed && cut.n_frames == whole.n_frames &&
                   cut.hash == whole.hash,
               "cut %u: closed %d, %u frames; whole: closed %d, %u frames",
               (unsigned)data[0], cut.closed, cut.n_frames, whole.closed,
               whole.n_frames);
    if (!whole.closed) {
        FUZZ_CHECK(cut.in->stage == whole.in->stage &&
                       cut.in->peer == whole.in->peer &&
                       cut.in->hs_got == whole.in->hs_got &&
                       cut.in->hdr_got == whole.in->hdr_got &&
                       cut.in->body_got == whole.in->body_got,
                   "cut %u: the connection ends in another state",
                   (unsigned)data[0]);
    }
    release(&cut);
    release(&whole);
    return 0;
}
