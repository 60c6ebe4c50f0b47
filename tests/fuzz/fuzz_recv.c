/* libFuzzer target: the transport's receive path (raft/uv_recv.c), from
 * the handshake (raft/uv_handshake.c: checked, and answered) through
 * length prefixes to decoded frames, on a connection of its own without
 * socket or loop (raft_uv_recv_consume; nothing calls libuv); and the
 * dialler's decoder of an answer, on the same bytes. Input: one byte that
 * picks how the stream is cut into reads, then the bytes a peer sends. */

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

/* The receiver's cluster id (gen_corpus.c's samples carry it, or none). */
static const uint8_t cluster[RAFT_UV_CLUSTER_ID_LEN] = FUZZ_CLUSTER_ID;

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
 * server, and encodes back, at the wire version it came in, to the very
 * body it was decoded from. */
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
    len = raft_frame_encoded_len_at(f, in->body->data[0]);
    FUZZ_CHECK(len == RAFT_FRAME_HEADER + in->body_len,
               "encoded length %zu, body %zu", len, in->body_len);
    buf = malloc(len);
    FUZZ_CHECK(buf != NULL, "out of memory");
    /* At the version the body says (its first byte): a peer may speak an
     * older one than this build's. */
    FUZZ_CHECK(raft_frame_encode_at(f, in->body->data[0], buf, len) == 0,
               "encode failed");
    FUZZ_CHECK(
        memcmp(buf + RAFT_FRAME_HEADER, in->body->data, in->body_len) == 0,
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

/* No answer: a bad magic is not raftsql. */
#define NO_ANSWER 99

/* expect_handshake is the reference verdict on the handshake at the start
 * of @s (@len bytes), from the layout of uv.h and the order in which the
 * receiver checks it (magic and handshake version at 9 bytes; wire
 * versions, cluster id, id and build id length at the fixed part; the
 * build id's bytes after it; the address's bytes at the whole): -1
 * refused, with the answer's verdict in *@out_verdict (NO_ANSWER for
 * none), 0 valid so far but incomplete, 1 accepted, with the sender's id
 * (any but 0 and the receiver's) in *@out_id. */
static int expect_handshake(const uint8_t *s, size_t len, raft_id *out_id,
                            unsigned *out_verdict)
{
    static const uint8_t zero[RAFT_UV_CLUSTER_ID_LEN];
    size_t n_build, n_addr, at;
    unsigned lo, hi;
    const uint8_t *cid;
    raft_id id;

    *out_verdict = RAFT__UV_REFUSED_HANDSHAKE;
    if (len < RAFT__UV_HANDSHAKE_VERSIONS) {
        return 0;
    }
    if (memcmp(s, RAFT__UV_MAGIC, RAFT__UV_MAGIC_LEN) != 0) {
        *out_verdict = NO_ANSWER;
        return -1;
    }
    if (s[RAFT__UV_MAGIC_LEN] != RAFT__UV_HANDSHAKE_VERSION) {
        return -1;
    }
    if (len < RAFT__UV_HANDSHAKE_FIXED) {
        return 0;
    }
    lo = s[7];
    hi = s[8];
    cid = s + 9;
    id = raft_byte_load_u64(s + 25);
    n_build = s[RAFT__UV_HANDSHAKE_FIXED - 1];
    if (lo == 0 || lo > hi) {
        return -1;
    }
    if (hi < RAFT_WIRE_VERSION_MIN || lo > RAFT_WIRE_VERSION) {
        *out_verdict = RAFT__UV_REFUSED_WIRE;
        return -1;
    }
    if (memcmp(cid, zero, sizeof zero) != 0 &&
        memcmp(cid, cluster, sizeof zero) != 0) {
        *out_verdict = RAFT__UV_REFUSED_CLUSTER;
        return -1;
    }
    if (id == 0 || id == SELF) {
        *out_verdict = RAFT__UV_REFUSED_ID;
        return -1;
    }
    if (n_build > RAFT_UV_BUILD_ID_MAX) {
        return -1;
    }
    at = RAFT__UV_HANDSHAKE_FIXED + n_build;
    if (len < at + 1) {
        return 0;
    }
    n_addr = s[at];
    if (!printable_bytes(s + RAFT__UV_HANDSHAKE_FIXED, n_build)) {
        return -1;
    }
    if (len < at + 1 + n_addr) {
        return 0;
    }
    *out_id = id;
    return printable_bytes(s + at + 1, n_addr) ? 1 : -1;
}

/* check_answer checks the answer the receiver prepared on @in: the
 * reference verdict @verdict, of this receiver. */
static void check_answer(const struct raft_uv_in *in, unsigned verdict)
{
    struct raft_uv_answer a;
    char why[128];

    if (verdict == NO_ANSWER) {
        FUZZ_CHECK(in->answer_len == 0, "an answer to a bad magic");
        return;
    }
    FUZZ_CHECK(in->answer_len >= RAFT__UV_ANSWER_FIXED &&
                   raft_uv_handshake_answer_decode(in->answer, in->answer_len,
                                                   &a, why, sizeof why),
               "the receiver's answer does not decode: %s", why);
    FUZZ_CHECK(a.verdict == verdict && a.id == SELF &&
                   a.wire_min == RAFT_WIRE_VERSION_MIN &&
                   a.wire_max == RAFT_WIRE_VERSION &&
                   memcmp(a.cluster_id, cluster, sizeof cluster) == 0 &&
                   (verdict == RAFT__UV_ACCEPTED) == (a.reason[0] == '\0'),
               "answer verdict %u, want %u", a.verdict, verdict);
}

/* fuzz_answer runs the dialler's decoder on the @len bytes at @s, as if
 * they answered a handshake: it reads no byte past what it asked for, and
 * what it accepts re-encodes the same. */
static void fuzz_answer(const uint8_t *s, size_t len)
{
    struct raft_uv_answer a;
    size_t need = raft_uv_handshake_answer_need(s, len);
    char why[128];

    FUZZ_CHECK(need >= RAFT__UV_ANSWER_FIXED && need <= RAFT__UV_ANSWER_MAX,
               "answer length %zu", need);
    if (len < need) {
        return;
    }
    if (!raft_uv_handshake_answer_decode(s, need, &a, why, sizeof why)) {
        FUZZ_CHECK(fuzz_msg_ok(why, sizeof why), "no message");
        return;
    }
    FUZZ_CHECK(
        a.verdict <= RAFT__UV_REFUSED_HANDSHAKE && a.wire_min > 0 &&
            a.wire_min <= a.wire_max &&
            strlen(a.reason) == need - RAFT__UV_ANSWER_FIXED &&
            printable_bytes((const uint8_t *)a.reason, strlen(a.reason)) &&
            a.id == raft_byte_load_u64(s + 26),
        "a decoded answer differs from its bytes");
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
    raft_buf_unref(r->in->body);
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
    unsigned refusal;
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
    memcpy(t.cluster_id, cluster, sizeof cluster);
    snprintf(t.build_id, sizeof t.build_id, "%s", BUILD);
    t.max_frame_bytes = MAX_FRAME;
    t.recv_cb = on_frame;
    t.log_cb = on_log;
    t.n_outs = N_PEERS;

    feed(&t, &conns[0], &whole, stream, len, 0);

    /* The handshake is accepted exactly when it is well formed, refused
     * as soon as its bytes show it is not, and waited for otherwise; an
     * accepted one records the sender's build id. */
    verdict = expect_handshake(stream, len, &want, &refusal);
    if (verdict < 0) {
        FUZZ_CHECK(whole.closed && whole.in->peer == 0,
                   "bad handshake not refused");
        check_answer(whole.in, refusal);
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
        FUZZ_CHECK(
            o == NULL ||
                memcmp(o->cluster_id, stream + 9, RAFT_UV_CLUSTER_ID_LEN) == 0,
            "cluster id of peer %llu not recorded", (unsigned long long)want);
        FUZZ_CHECK(
            whole.in->wire_version ==
                (stream[8] < RAFT_WIRE_VERSION ? stream[8] : RAFT_WIRE_VERSION),
            "wire version %u agreed", whole.in->wire_version);
        check_answer(whole.in, RAFT__UV_ACCEPTED);
    }
    /* The encoder's handshakes are the accepted ones. */
    for (i = 0; i < N_PEERS; i++) {
        uint8_t hs[RAFT__UV_HANDSHAKE_MAX];
        size_t n = raft_uv_send_handshake_encode(outs[i].id, cluster, BUILD,
                                                 "127.0.0.1:7002", hs);
        raft_id id = 0;
        FUZZ_CHECK(
            expect_handshake(hs, n, &id, &refusal) == 1 && id == outs[i].id,
            "the encoder's handshake is refused");
    }
    FUZZ_CHECK(whole.n_frames == 0 || whole.in->peer != 0,
               "frames before the handshake");
    fuzz_answer(stream, len);

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
