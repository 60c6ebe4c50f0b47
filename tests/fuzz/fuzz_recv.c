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

#define SELF 1 /* the receiving server */
#define N_PEERS                                                                \
    RAFT_MAX_SERVERS         /* servers 2..17: the transport is full,
                                    so an unknown sender (accepted) is
                                    never dialled back: no loop needed */
#define MAX_FRAME (1u << 20) /* the transport's bound on a body */
#define BUILD "fuzz build"   /* the receiver's build id */

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

/* printable_bytes tells whether the @len bytes at @p are printable ASCII. */
static bool printable_bytes(const uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (p[i] < 0x20 || p[i] > 0x7e) {
            return false;
        }
    }
    return true;
}

/* expect_handshake is the reference verdict on the handshake at the start
 * of @s (@len bytes), from the layout of uv.h and the order in which the
 * receiver checks it (versions at 8 bytes, id and build id length at the
 * fixed part, the build id's bytes and the address length after the build
 * id, the address's bytes at the whole): -1 refused, 0 valid so far but
 * incomplete, 1 accepted, with the sender's id (any but 0 and the
 * receiver's) in *@out_id. */
static int expect_handshake(const uint8_t *s, size_t len, raft_id *out_id)
{
    size_t n_build, n_addr, at;
    raft_id id;

    if (len < RAFT__UV_HANDSHAKE_VERSIONS) {
        return 0;
    }
    if (memcmp(s, RAFT__UV_MAGIC, RAFT__UV_MAGIC_LEN) != 0 ||
        s[RAFT__UV_MAGIC_LEN] != RAFT__UV_HANDSHAKE_VERSION ||
        s[RAFT__UV_MAGIC_LEN + 1] != RAFT_WIRE_VERSION) {
        return -1;
    }
    if (len < RAFT__UV_HANDSHAKE_FIXED) {
        return 0;
    }
    id = raft_byte_load_u64(s + RAFT__UV_HANDSHAKE_VERSIONS);
    n_build = s[RAFT__UV_HANDSHAKE_FIXED - 1];
    if (id == 0 || id == SELF || n_build > RAFT_UV_BUILD_ID_MAX) {
        return -1;
    }
    at = RAFT__UV_HANDSHAKE_FIXED + n_build;
    if (len < at + 1) {
        return 0;
    }
    n_addr = s[at];
    if (!printable_bytes(s + RAFT__UV_HANDSHAKE_FIXED, n_build) ||
        n_addr > RAFT__UV_ADDRESS_MAX) {
        return -1;
    }
    if (len < at + 1 + n_addr) {
        return 0;
    }
    *out_id = id;
    return printable_bytes(s + at + 1, n_addr) ? 1 : -1;
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
    int verdict;
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
        t.outs[i] = &outs[i];
    }
    t.self = SELF;
    snprintf(t.build_id, sizeof t.build_id, "%s", BUILD);
    t.max_frame_bytes = MAX_FRAME;
    t.recv_cb = on_frame;
    t.log_cb = on_log;
    t.n_outs = N_PEERS;

    feed(&t, &conns[0], &whole, stream, len, 0);

    /* The handshake is accepted exactly when it is well formed, refused
     * as soon as its bytes show it is not, and waited for otherwise; an
     * accepted one records the sender's build id. */
    verdict = expect_handshake(stream, len, &want);
    if (verdict < 0) {
        FUZZ_CHECK(whole.closed && whole.in->peer == 0,
                   "bad handshake not refused");
    } else if (verdict == 0) {
        FUZZ_CHECK(
            !whole.closed && whole.in->peer == 0 && whole.in->hs_got == len,
            "a partial handshake of %zu bytes", len);
    } else {
        size_t n_build = stream[RAFT__UV_HANDSHAKE_FIXED - 1];
        const struct raft_uv_out *o =
            want <= SELF + N_PEERS ? &outs[want - SELF - 1] : NULL;

        FUZZ_CHECK(
            whole.in->peer == want, "handshake gave peer %llu, want %llu",
            (unsigned long long)whole.in->peer, (unsigned long long)want);
        FUZZ_CHECK(
            o == NULL || (o->build_known && strlen(o->build_id) == n_build &&
                          memcmp(o->build_id, stream + RAFT__UV_HANDSHAKE_FIXED,
                                 n_build) == 0),
            "build id of peer %llu not recorded", (unsigned long long)want);
        FUZZ_CHECK(t.n_outs == N_PEERS, "a full transport took a peer");
    }
    /* The encoder's handshakes are the accepted ones. */
    for (i = 0; i < N_PEERS; i++) {
        uint8_t hs[RAFT__UV_HANDSHAKE_MAX];
        size_t n = raft_uv_send_handshake_encode(outs[i].id, BUILD,
                                                 "127.0.0.1:7002", hs);
        raft_id id = 0;
        FUZZ_CHECK(expect_handshake(hs, n, &id) == 1 && id == outs[i].id,
                   "the encoder's handshake is refused");
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
