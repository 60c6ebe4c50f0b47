/* Unit tests of the wire codec (raft/message.h) and of frames (frame.h):
 * round trips of every frame type with edge values, the exact bytes of
 * each, wrapping the core's messages, every truncation, trailing bytes,
 * bad versions and types, hostile entry counts, and a seeded fuzz loop. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "raft/byte.h"
#include "raft/message.h"

/* An encoded frame: the whole frame and its length. */
struct encoded {
    uint8_t *bytes; /* length prefix + body */
    size_t len;     /* total bytes */
};

static struct raft_buf *pattern_buf(size_t len, unsigned seed)
{
    struct raft_buf *b = raft_buf_new(len);
    size_t i;

    assert_non_null(b);
    for (i = 0; i < len; i++) {
        b->data[i] = (unsigned char)(i * 31 + seed);
    }
    return b;
}

/* wire_of is the version the tests encode @type in: the lowest that has
 * it (version 1 for all but CHECKSUM), so the sample bytes stay those of
 * the version they were written for. */
static unsigned wire_of(uint8_t type)
{
    unsigned v = raft_frame_type_wire_min(type);

    return v < RAFT_WIRE_VERSION_MIN ? RAFT_WIRE_VERSION_MIN : v;
}

static struct encoded encode(const struct raft_frame *m)
{
    struct encoded f;

    f.len = raft_frame_encoded_len_at(m, wire_of(m->type));
    assert_true(f.len > RAFT_FRAME_HEADER);
    f.bytes = malloc(f.len);
    assert_non_null(f.bytes);
    assert_int_equal(raft_frame_encode_at(m, wire_of(m->type), f.bytes, f.len),
                     0);
    assert_int_equal(raft_byte_load_u32(f.bytes), f.len - RAFT_FRAME_HEADER);
    return f;
}

static const uint8_t *body_of(const struct encoded *f)
{
    return f->bytes + RAFT_FRAME_HEADER;
}

static size_t body_len(const struct encoded *f)
{
    return f->len - RAFT_FRAME_HEADER;
}

static void assert_buf_equal(const struct raft_buf *a, const struct raft_buf *b)
{
    size_t alen = a == NULL ? 0 : a->len;
    size_t blen = b == NULL ? 0 : b->len;

    assert_int_equal(alen, blen);
    if (alen == 0) {
        /* An empty payload always decodes to NULL. */
        assert_null(b);
        return;
    }
    assert_memory_equal(a->data, b->data, alen);
}

/* assert_frame_equal compares every field of their type between @a and @b. */
static void assert_frame_equal(const struct raft_frame *a,
                               const struct raft_frame *b)
{
    const struct raft_message *ma = &a->message, *mb = &b->message;
    uint32_t i;

    assert_int_equal(a->type, b->type);
    assert_true(a->from == b->from);
    assert_true(a->to == b->to);
    if (raft_frame_is_message(a)) {
        assert_true(ma->type == a->type && mb->type == b->type);
        assert_true(ma->from == a->from && mb->from == b->from);
        assert_true(ma->to == a->to && mb->to == b->to);
    }
    switch (a->type) {
        case RAFT_MSG_REQUEST_VOTE:
            assert_true(ma->request_vote.term == mb->request_vote.term);
            assert_true(ma->request_vote.last_log_index ==
                        mb->request_vote.last_log_index);
            assert_true(ma->request_vote.last_log_term ==
                        mb->request_vote.last_log_term);
            assert_int_equal(ma->request_vote.pre_vote,
                             mb->request_vote.pre_vote);
            assert_int_equal(ma->request_vote.disrupt,
                             mb->request_vote.disrupt);
            break;
        case RAFT_MSG_TIMEOUT_NOW:
            assert_true(ma->timeout_now.term == mb->timeout_now.term);
            break;
        case RAFT_MSG_REQUEST_VOTE_RESULT:
            assert_true(ma->request_vote_result.term ==
                        mb->request_vote_result.term);
            assert_int_equal(ma->request_vote_result.vote_granted,
                             mb->request_vote_result.vote_granted);
            assert_int_equal(ma->request_vote_result.pre_vote,
                             mb->request_vote_result.pre_vote);
            break;
        case RAFT_MSG_APPEND_ENTRIES:
            assert_true(ma->append_entries.term == mb->append_entries.term);
            assert_true(ma->append_entries.prev_log_index ==
                        mb->append_entries.prev_log_index);
            assert_true(ma->append_entries.prev_log_term ==
                        mb->append_entries.prev_log_term);
            assert_true(ma->append_entries.leader_commit ==
                        mb->append_entries.leader_commit);
            assert_true(ma->append_entries.seq == mb->append_entries.seq);
            assert_int_equal(ma->append_entries.n_entries,
                             mb->append_entries.n_entries);
            for (i = 0; i < ma->append_entries.n_entries; i++) {
                const struct raft_entry *ea = &ma->append_entries.entries[i];
                const struct raft_entry *eb = &mb->append_entries.entries[i];
                assert_true(ea->term == eb->term);
                assert_true(ea->index == eb->index);
                assert_int_equal(ea->type, eb->type);
                assert_buf_equal(ea->data, eb->data);
            }
            if (ma->append_entries.n_entries == 0) {
                assert_null(mb->append_entries.entries);
            }
            break;
        case RAFT_MSG_APPEND_ENTRIES_RESULT:
            assert_true(ma->append_entries_result.term ==
                        mb->append_entries_result.term);
            assert_int_equal(ma->append_entries_result.success,
                             mb->append_entries_result.success);
            assert_true(ma->append_entries_result.reject_index ==
                        mb->append_entries_result.reject_index);
            assert_true(ma->append_entries_result.last_log_index ==
                        mb->append_entries_result.last_log_index);
            assert_true(ma->append_entries_result.conflict_index ==
                        mb->append_entries_result.conflict_index);
            assert_true(ma->append_entries_result.seq ==
                        mb->append_entries_result.seq);
            break;
        case RAFT_FRAME_SNAPSHOT_CHUNK:
            assert_true(a->snapshot_chunk.term == b->snapshot_chunk.term);
            assert_true(a->snapshot_chunk.last_index ==
                        b->snapshot_chunk.last_index);
            assert_true(a->snapshot_chunk.last_term ==
                        b->snapshot_chunk.last_term);
            assert_true(a->snapshot_chunk.total == b->snapshot_chunk.total);
            assert_true(a->snapshot_chunk.offset == b->snapshot_chunk.offset);
            assert_true(a->snapshot_chunk.checksum ==
                        b->snapshot_chunk.checksum);
            assert_buf_equal(a->snapshot_chunk.data, b->snapshot_chunk.data);
            break;
        case RAFT_FRAME_SNAPSHOT_CHUNK_RESULT:
            assert_true(a->snapshot_chunk_result.term ==
                        b->snapshot_chunk_result.term);
            assert_true(a->snapshot_chunk_result.last_index ==
                        b->snapshot_chunk_result.last_index);
            assert_true(a->snapshot_chunk_result.offset ==
                        b->snapshot_chunk_result.offset);
            assert_int_equal(a->snapshot_chunk_result.status,
                             b->snapshot_chunk_result.status);
            break;
        case RAFT_FRAME_FORWARD:
            assert_true(a->forward.request_id[0] == b->forward.request_id[0]);
            assert_true(a->forward.request_id[1] == b->forward.request_id[1]);
            assert_buf_equal(a->forward.data, b->forward.data);
            break;
        case RAFT_FRAME_FORWARD_RESULT:
            assert_true(a->forward_result.request_id[0] ==
                        b->forward_result.request_id[0]);
            assert_true(a->forward_result.request_id[1] ==
                        b->forward_result.request_id[1]);
            assert_int_equal(a->forward_result.status,
                             b->forward_result.status);
            assert_true(a->forward_result.index == b->forward_result.index);
            assert_true(a->forward_result.term == b->forward_result.term);
            break;
        case RAFT_FRAME_CHECKSUM:
            assert_true(a->checksum.index == b->checksum.index);
            assert_true(a->checksum.checksum == b->checksum.checksum);
            assert_int_equal(a->checksum.probe, b->checksum.probe);
            break;
        case RAFT_FRAME_REPAIR_REQUEST:
            assert_true(a->repair_request.applied == b->repair_request.applied);
            break;
        case RAFT_FRAME_READ_INDEX:
            assert_true(a->read_index.tag == b->read_index.tag);
            break;
        case RAFT_FRAME_READ_INDEX_RESULT:
            assert_true(a->read_index_result.tag == b->read_index_result.tag);
            assert_int_equal(a->read_index_result.status,
                             b->read_index_result.status);
            assert_true(a->read_index_result.index ==
                        b->read_index_result.index);
            break;
        case RAFT_FRAME_LEASE:
            assert_true(a->lease.tag == b->lease.tag);
            assert_int_equal(a->lease.op, b->lease.op);
            assert_true(a->lease.holder == b->lease.holder);
            assert_true(a->lease.id == b->lease.id);
            assert_buf_equal(a->lease.data, b->lease.data);
            break;
        case RAFT_FRAME_LEASE_RESULT:
            assert_true(a->lease_result.tag == b->lease_result.tag);
            assert_int_equal(a->lease_result.op, b->lease_result.op);
            assert_int_equal(a->lease_result.status, b->lease_result.status);
            assert_true(a->lease_result.id == b->lease_result.id);
            assert_true(a->lease_result.index == b->lease_result.index);
            assert_true(a->lease_result.server == b->lease_result.server);
            break;
        default:
            fail_msg("unexpected type %u", (unsigned)a->type);
    }
}

/* round_trip encodes @m, decodes the body and compares. */
static void round_trip(const struct raft_frame *m)
{
    struct encoded f = encode(m);
    struct raft_frame out;
    char err[128] = "";
    int rc;

    rc = raft_frame_decode(body_of(&f), body_len(&f), &out, err, sizeof err);
    if (rc != 0) {
        fail_msg("decode type %u: %d %s", (unsigned)m->type, rc, err);
    }
    assert_frame_equal(m, &out);
    raft_frame_release(&out);
    assert_int_equal(out.type, 0);
    free(f.bytes);
}

/* round_trip_message wraps the core's message @c in a frame and round
 * trips that. */
static void round_trip_message(const struct raft_message *c)
{
    struct raft_frame f;

    raft_frame_wrap(c, &f);
    round_trip(&f);
}

/* A set of sample frames covering every type, owned by the test: the
 * core's messages first (N_CORE, wrapped), then the runtime's frames. */
#define N_SAMPLES 12
#define N_CORE 5

struct samples {
    struct raft_frame m[N_SAMPLES];   /* the frames */
    struct raft_message core[N_CORE]; /* the core's, wrapped in m[0..4] */
    struct raft_entry entries[3];     /* entries of the AppendEntries */
    struct raft_buf *bufs[4];         /* payloads to drop at the end */
};

static void samples_init(struct samples *s)
{
    struct raft_frame *m = s->m;
    struct raft_message *c = s->core;
    unsigned i;

    memset(s, 0, sizeof *s);
    s->bufs[0] = pattern_buf(40, 1);
    s->bufs[1] = pattern_buf(3, 2);
    s->bufs[2] = pattern_buf(17, 3);
    s->bufs[3] = pattern_buf(29, 4);
    s->entries[0] = (struct raft_entry){7, 11, RAFT_ENTRY_NORMAL, s->bufs[0]};
    s->entries[1] = (struct raft_entry){7, 12, RAFT_ENTRY_NOOP, NULL};
    s->entries[2] = (struct raft_entry){8, 13, RAFT_ENTRY_NORMAL, s->bufs[1]};

    c[0].type = RAFT_MSG_REQUEST_VOTE;
    c[0].from = 1;
    c[0].to = 2;
    c[0].request_vote = (struct raft_request_vote){5, 10, 4, true, false};
    c[1].type = RAFT_MSG_REQUEST_VOTE_RESULT;
    c[1].from = 2;
    c[1].to = 1;
    c[1].request_vote_result =
        (struct raft_request_vote_result){5, true, false};
    c[2].type = RAFT_MSG_APPEND_ENTRIES;
    c[2].from = 1;
    c[2].to = 3;
    c[2].append_entries.term = 8;
    c[2].append_entries.prev_log_index = 10;
    c[2].append_entries.prev_log_term = 6;
    c[2].append_entries.leader_commit = 9;
    c[2].append_entries.entries = s->entries;
    c[2].append_entries.n_entries = 3;
    c[2].append_entries.seq = 77;
    c[3].type = RAFT_MSG_APPEND_ENTRIES;
    c[3].from = 1;
    c[3].to = 2;
    c[3].append_entries.term = 8;
    c[3].append_entries.prev_log_index = 13;
    c[4].type = RAFT_MSG_APPEND_ENTRIES_RESULT;
    c[4].from = 3;
    c[4].to = 1;
    c[4].append_entries_result =
        (struct raft_append_entries_result){8, false, 10, 7, 5, 41, 97};
    for (i = 0; i < N_CORE; i++) {
        raft_frame_wrap(&c[i], &m[i]);
    }
    m[5].type = RAFT_FRAME_FORWARD;
    m[5].from = 2;
    m[5].to = 1;
    m[5].forward.request_id[0] = 2;
    m[5].forward.request_id[1] = 99;
    m[5].forward.data = s->bufs[2];
    m[6].type = RAFT_FRAME_FORWARD_RESULT;
    m[6].from = 1;
    m[6].to = 2;
    m[6].forward_result.request_id[0] = 2;
    m[6].forward_result.request_id[1] = 99;
    m[6].forward_result.status = -RAFT_NOTLEADER;
    m[6].forward_result.index = 14;
    m[6].forward_result.term = 8;
    m[7].type = RAFT_FRAME_FORWARD;
    m[7].from = 3;
    m[7].to = 1;
    m[7].forward.request_id[0] = 3;
    m[7].forward.request_id[1] = 0;
    m[7].forward.data = NULL;
    m[8].type = RAFT_FRAME_SNAPSHOT_CHUNK;
    m[8].from = 1;
    m[8].to = 3;
    m[8].snapshot_chunk.term = 8;
    m[8].snapshot_chunk.last_index = 900;
    m[8].snapshot_chunk.last_term = 7;
    m[8].snapshot_chunk.total = 100;
    m[8].snapshot_chunk.offset = 71;
    m[8].snapshot_chunk.checksum = 0x0123456789abcdefULL;
    m[8].snapshot_chunk.data = s->bufs[3];
    m[9].type = RAFT_FRAME_SNAPSHOT_CHUNK_RESULT;
    m[9].from = 3;
    m[9].to = 1;
    m[9].snapshot_chunk_result.term = 8;
    m[9].snapshot_chunk_result.last_index = 900;
    m[9].snapshot_chunk_result.offset = 100;
    m[9].snapshot_chunk_result.status = -RAFT_CORRUPT;
    m[10].type = RAFT_FRAME_CHECKSUM;
    m[10].from = 2;
    m[10].to = 3;
    m[10].checksum.index = 4242;
    m[10].checksum.checksum = 0xfedcba9876543210ULL;
    m[10].checksum.probe = true;
    m[11].type = RAFT_FRAME_REPAIR_REQUEST;
    m[11].from = 3;
    m[11].to = 1;
    m[11].repair_request.applied = 0x1234;
}

static void samples_close(struct samples *s)
{
    unsigned i;

    for (i = 0; i < 4; i++) {
        raft_buf_unref(s->bufs[i]);
    }
}

/* The frames of the samples, byte for byte, as version 1 of the wire
 * format has them (hex; CHECKSUM and REPAIR_REQUEST, of version 2 only,
 * in version 2): a
 * change of the codec or of the message structs must leave these
 * unchanged. */
static const char *const sample_wire[N_SAMPLES] = {
    /* 0 */
    "2b00000001010100000000000000020000000000000005000000000000000a00"
    "000000000000040000000000000001",
    /* 1 */
    "1c00000001020200000000000000010000000000000005000000000000000100",
    /* 2 */
    "a800000001030100000000000000030000000000000008000000000000000a00"
    "000000000000060000000000000009000000000000004d000000000000000300"
    "000007000000000000000b00000000000000012800000001203f5e7d9cbbdaf9"
    "1837567594b3d2f1102f4e6d8cabcae90827466584a3c2e1001f3e5d7c9bba07"
    "000000000000000c00000000000000020000000008000000000000000d000000"
    "000000000103000000022140",
    /* 3 */
    "3e00000001030100000000000000020000000000000008000000000000000d00"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000",
    /* 4 */
    "3b0000000104030000000000000001000000000000000800000000000000000a"
    "00000000000000070000000000000005000000000000002900000000000000",
    /* 5 */
    "3700000001050200000000000000010000000000000002000000000000006300"
    "00000000000011000000032241607f9ebddcfb1a39587796b5d4f3",
    /* 6 */
    "3600000001060100000000000000020000000000000002000000000000006300"
    "000000000000faffffff0e000000000000000800000000000000",
    /* 7 */
    "2600000001050300000000000000010000000000000003000000000000000000"
    "00000000000000000000",
    /* 8 */
    "6300000001070100000000000000030000000000000008000000000000008403"
    "000000000000070000000000000064000000000000004700000000000000efcd"
    "ab89674523011d00000004234261809fbeddfc1b3a597897b6d5f4133251708f"
    "aecdec0b2a4968",
    /* 9 */
    "2e00000001080300000000000000010000000000000008000000000000008403"
    "0000000000006400000000000000fbffffff",
    /* 10 */
    "2300000002"
    "0a"
    "0200000000000000"
    "0300000000000000"
    "9210000000000000"
    "1032547698badcfe"
    "01",
    /* 11 */
    "1a00000002"
    "0b"
    "0300000000000000"
    "0100000000000000"
    "3412000000000000",
};

/* hex_of writes @len bytes at @p as lowercase hex into a new string. */
static char *hex_of(const uint8_t *p, size_t len)
{
    char *s = malloc(2 * len + 1);
    size_t i;

    assert_non_null(s);
    for (i = 0; i < len; i++) {
        snprintf(s + 2 * i, 3, "%02x", p[i]);
    }
    s[2 * len] = '\0';
    return s;
}

/* A snapshot chunk must lie within its file: the encoder refuses one that
 * does not, and so does the decoder (the frame is forged by hand). */
static void test_chunk_past_total(void **state)
{
    struct raft_buf *b = pattern_buf(10, 9);
    struct raft_frame m;
    struct raft_frame out;
    struct encoded f;
    uint8_t buf[256];
    char err[128] = "";

    (void)state;
    memset(&m, 0, sizeof m);
    m.type = RAFT_FRAME_SNAPSHOT_CHUNK;
    m.from = 1;
    m.to = 2;
    m.snapshot_chunk.total = 10;
    m.snapshot_chunk.offset = 0;
    m.snapshot_chunk.data = b;
    f = encode(&m); /* exactly the whole file: fine */
    m.snapshot_chunk.offset = 1;
    assert_int_equal(raft_frame_encode(&m, buf, sizeof buf), RAFT_INVALID);
    m.snapshot_chunk.offset = 11;
    m.snapshot_chunk.data = NULL;
    assert_int_equal(raft_frame_encode(&m, buf, sizeof buf), RAFT_INVALID);
    /* total (bytes 18 + 24..32 of the body) lowered to 9 by hand. */
    f.bytes[RAFT_FRAME_HEADER + 18 + 24] = 9;
    assert_int_equal(
        raft_frame_decode(body_of(&f), body_len(&f), &out, err, sizeof err),
        RAFT_PROTO);
    assert_non_null(strstr(err, "past total"));
    free(f.bytes);
    raft_buf_unref(b);
}

/* Every sample message encodes to exactly its bytes in sample_wire and
 * survives an encode/decode round trip. */
static void test_round_trip_samples(void **state)
{
    struct samples s;
    unsigned i;

    (void)state;
    samples_init(&s);
    for (i = 0; i < N_SAMPLES; i++) {
        struct encoded f = encode(&s.m[i]);
        char *hex = hex_of(f.bytes, f.len);
        assert_string_equal(hex, sample_wire[i]);
        free(hex);
        free(f.bytes);
        round_trip(&s.m[i]);
    }
    samples_close(&s);
}

/* Unwrapping a sample frame of the core's gives back the message it was
 * wrapped from (sharing its entries), and wrapping that again gives the
 * same frame and bytes; a runtime frame carries no core message and leaves
 * the output alone. */
static void test_wrap_unwrap(void **state)
{
    struct samples s;
    unsigned i;

    (void)state;
    samples_init(&s);
    for (i = 0; i < N_SAMPLES; i++) {
        struct raft_message m;
        struct raft_frame f;
        struct encoded a, b;
        memset(&m, 0xA5, sizeof m);
        if (i >= N_CORE) {
            assert_false(raft_frame_is_message(&s.m[i]));
            assert_false(raft_frame_unwrap(&s.m[i], &m));
            assert_int_equal(m.type, 0xA5);
            continue;
        }
        assert_true(raft_frame_is_message(&s.m[i]));
        assert_true(raft_frame_unwrap(&s.m[i], &m));
        assert_int_equal(m.type, s.core[i].type);
        assert_true(m.from == s.core[i].from && m.to == s.core[i].to);
        assert_true(raft_message_term(&m) == raft_message_term(&s.core[i]));
        assert_true(raft_message_term(&m) > 0);
        raft_frame_wrap(&m, &f);
        assert_frame_equal(&s.m[i], &f);
        a = encode(&s.m[i]);
        b = encode(&f);
        assert_int_equal(a.len, b.len);
        assert_memory_equal(a.bytes, b.bytes, a.len);
        free(a.bytes);
        free(b.bytes);
    }
    assert_ptr_equal(s.m[2].message.append_entries.entries, s.entries);
    samples_close(&s);
}

/* A message of a type the core does not have, the runtime's numbers
 * included, wraps into a frame of type 0, which the codec refuses (its
 * bytes are never read as a runtime frame's). */
static void test_wrap_unknown_type(void **state)
{
    const uint8_t types[3] = {0, RAFT_FRAME_FORWARD, 10};
    struct raft_message m;
    struct raft_frame f;
    uint8_t buf[256];
    unsigned t;

    (void)state;
    for (t = 0; t < 3; t++) {
        memset(&m, 0, sizeof m);
        m.type = types[t];
        m.from = 1;
        m.to = 2;
        raft_frame_wrap(&m, &f);
        assert_int_equal(f.type, 0);
        assert_true(f.from == 1 && f.to == 2);
        assert_false(raft_frame_is_message(&f));
        assert_int_equal(raft_frame_encoded_len(&f), 0);
        assert_int_equal(raft_frame_encode(&f, buf, sizeof buf), RAFT_INVALID);
        assert_int_equal(raft_message_term(&m), 0);
    }
}

/* Fields at 0 and at their maximum survive a round trip. */
static void test_round_trip_edge_values(void **state)
{
    const uint64_t vals[2] = {0, UINT64_MAX};
    struct raft_message c;
    struct raft_frame m;
    unsigned v;

    (void)state;
    for (v = 0; v < 2; v++) {
        uint64_t x = vals[v];
        memset(&c, 0, sizeof c);
        c.from = x;
        c.to = x;

        c.type = RAFT_MSG_REQUEST_VOTE;
        c.request_vote = (struct raft_request_vote){x, x, x, v == 1, v == 2};
        round_trip_message(&c);

        memset(&c.request_vote_result, 0, sizeof c.request_vote_result);
        c.type = RAFT_MSG_REQUEST_VOTE_RESULT;
        c.request_vote_result =
            (struct raft_request_vote_result){x, v == 1, v == 1};
        round_trip_message(&c);

        c.type = RAFT_MSG_APPEND_ENTRIES;
        c.append_entries = (struct raft_append_entries){.term = x,
                                                        .prev_log_index = x,
                                                        .prev_log_term = x,
                                                        .leader_commit = x,
                                                        .seq = x,
                                                        .echo = x};
        round_trip_message(&c);

        c.type = RAFT_MSG_APPEND_ENTRIES_RESULT;
        c.append_entries_result =
            (struct raft_append_entries_result){x, v == 1, x, x, x, x, x};
        round_trip_message(&c);

        memset(&m, 0, sizeof m);
        m.from = x;
        m.to = x;
        m.type = RAFT_FRAME_FORWARD;
        m.forward.request_id[0] = x;
        m.forward.request_id[1] = x;
        m.forward.data = NULL;
        round_trip(&m);

        m.type = RAFT_FRAME_FORWARD_RESULT;
        m.forward_result.request_id[0] = x;
        m.forward_result.request_id[1] = x;
        m.forward_result.status = v == 0 ? INT32_MIN : INT32_MAX;
        m.forward_result.index = x;
        m.forward_result.term = x;
        round_trip(&m);
        m.forward_result.status = -1;
        round_trip(&m);

        m.type = RAFT_FRAME_SNAPSHOT_CHUNK_RESULT;
        m.snapshot_chunk_result.term = x;
        m.snapshot_chunk_result.last_index = x;
        m.snapshot_chunk_result.offset = x;
        m.snapshot_chunk_result.status = v == 0 ? INT32_MIN : INT32_MAX;
        round_trip(&m);

        memset(&m.snapshot_chunk, 0, sizeof m.snapshot_chunk);
        m.type = RAFT_FRAME_SNAPSHOT_CHUNK;
        m.snapshot_chunk.term = x;
        m.snapshot_chunk.last_index = x;
        m.snapshot_chunk.last_term = x;
        m.snapshot_chunk.total = x;
        m.snapshot_chunk.offset = x;
        m.snapshot_chunk.checksum = x;
        round_trip(&m);

        m.type = RAFT_FRAME_CHECKSUM;
        m.checksum.index = x;
        m.checksum.checksum = x;
        m.checksum.probe = v == 1;
        round_trip(&m);

        m.type = RAFT_FRAME_REPAIR_REQUEST;
        m.repair_request.applied = x;
        round_trip(&m);
    }
}

/* CHECKSUM and REPAIR_REQUEST exist from wire version 2: the encoder
 * refuses to write them in version 1, and the decoder refuses a version 1
 * body that carries one, naming both; every other type exists from
 * version 1. */
static void test_checksum_needs_version_2(void **state)
{
    struct samples s;
    struct encoded f;
    char err[128] = "";
    struct raft_frame out;
    unsigned i;

    (void)state;
    samples_init(&s);
    for (i = 0; i < N_SAMPLES; i++) {
        assert_int_equal(raft_frame_type_wire_min(s.m[i].type),
                         s.m[i].type == RAFT_FRAME_CHECKSUM ||
                                 s.m[i].type == RAFT_FRAME_REPAIR_REQUEST
                             ? 2
                             : 1);
    }
    assert_int_equal(raft_frame_type_wire_min(0), 0);
    assert_int_equal(raft_frame_type_wire_min(16), 0);
    for (i = 10; i < 12; i++) {
        char expect[80];
        f = encode(&s.m[i]);
        assert_int_equal(raft_frame_encode_at(&s.m[i], 1, f.bytes, f.len),
                         RAFT_INVALID);
        assert_int_equal(raft_frame_encode(&s.m[i], f.bytes, f.len), 0);
        f.bytes[RAFT_FRAME_HEADER] = 1;
        assert_int_equal(
            raft_frame_decode(body_of(&f), body_len(&f), &out, err, sizeof err),
            RAFT_PROTO);
        snprintf(expect, sizeof expect,
                 "message type %u in wire version 1 (it exists from version "
                 "2)",
                 (unsigned)s.m[i].type);
        assert_string_equal(err, expect);
        free(f.bytes);
    }
    samples_close(&s);
}

/* READ_INDEX and its result exist from wire version 3: byte for byte as
 * that version has them, round trips (a negative status too), refused by
 * the encoder in versions 1 and 2 and by the decoder in a body of those
 * versions, naming both; truncated and padded bodies are refused. */
static void test_read_index_needs_version_3(void **state)
{
    static const char *const hex[2] = {
        "1a000000030c0200000000000000010000000000000007000000000000"
        "80",
        "26000000030d0100000000000000020000000000000007000000000000"
        "00090000003412000000000000",
    };
    struct raft_frame m[2];
    struct raft_frame out;
    struct encoded f;
    char err[128] = "";
    unsigned i, v;

    (void)state;
    memset(m, 0, sizeof m);
    m[0].type = RAFT_FRAME_READ_INDEX;
    m[0].from = 2;
    m[0].to = 1;
    m[0].read_index.tag = 0x8000000000000007ULL;
    m[1].type = RAFT_FRAME_READ_INDEX_RESULT;
    m[1].from = 1;
    m[1].to = 2;
    m[1].read_index_result.tag = 7;
    m[1].read_index_result.status = RAFT_TIMEOUT;
    m[1].read_index_result.index = 0x1234;
    for (i = 0; i < 2; i++) {
        char *got;
        char expect[80];
        assert_int_equal(raft_frame_type_wire_min(m[i].type), 3);
        f = encode(&m[i]);
        got = hex_of(f.bytes, f.len);
        assert_string_equal(got, hex[i]);
        free(got);
        round_trip(&m[i]);
        for (v = 1; v < 3; v++) {
            assert_int_equal(raft_frame_encode_at(&m[i], v, f.bytes, f.len),
                             RAFT_INVALID);
        }
        f.bytes[RAFT_FRAME_HEADER] = 2;
        assert_int_equal(
            raft_frame_decode(body_of(&f), body_len(&f), &out, err, sizeof err),
            RAFT_PROTO);
        snprintf(expect, sizeof expect,
                 "message type %u in wire version 2 (it exists from version "
                 "3)",
                 (unsigned)m[i].type);
        assert_string_equal(err, expect);
        f.bytes[RAFT_FRAME_HEADER] = 3;
        assert_int_equal(raft_frame_decode(body_of(&f), body_len(&f) - 1, &out,
                                           err, sizeof err),
                         RAFT_PROTO);
        free(f.bytes);
    }
    m[1].read_index_result.status = -RAFT_NOTLEADER;
    round_trip(&m[1]);
}

/* LEASE and its result exist from wire version 5: they round trip (a
 * changeset payload, a negative status), are refused by the encoder in
 * version 4 and by the decoder in a body of version 4, naming both; an
 * unknown op is refused; truncated bodies are refused. */
static void test_lease_needs_version_5(void **state)
{
    struct raft_frame m[2];
    struct raft_frame out;
    struct encoded f;
    char err[128] = "";

    (void)state;
    memset(m, 0, sizeof m);
    m[0].type = RAFT_FRAME_LEASE;
    m[0].from = 2;
    m[0].to = 1;
    m[0].lease.tag = 9;
    m[0].lease.op = RAFT_LEASE_COMMIT;
    m[0].lease.id = (3ULL << 32) | 5;
    m[0].lease.data = pattern_buf(40, 7);
    m[1].type = RAFT_FRAME_LEASE_RESULT;
    m[1].from = 1;
    m[1].to = 2;
    m[1].lease_result.tag = 9;
    m[1].lease_result.op = RAFT_LEASE_ASK;
    m[1].lease_result.status = RAFT_BUSY;
    m[1].lease_result.server = 3;
    for (unsigned i = 0; i < 2; i++) {
        char expect[80];
        assert_int_equal(raft_frame_type_wire_min(m[i].type), 5);
        round_trip(&m[i]);
        f = encode(&m[i]);
        assert_int_equal(raft_frame_encode_at(&m[i], 4, f.bytes, f.len),
                         RAFT_INVALID);
        f.bytes[RAFT_FRAME_HEADER] = 4;
        assert_int_equal(
            raft_frame_decode(body_of(&f), body_len(&f), &out, err, sizeof err),
            RAFT_PROTO);
        snprintf(expect, sizeof expect,
                 "message type %u in wire version 4 (it exists from version "
                 "5)",
                 (unsigned)m[i].type);
        assert_string_equal(err, expect);
        f.bytes[RAFT_FRAME_HEADER] = 5;
        assert_int_equal(raft_frame_decode(body_of(&f), body_len(&f) - 1, &out,
                                           err, sizeof err),
                         RAFT_PROTO);
        free(f.bytes);
    }
    m[1].lease_result.status = -RAFT_NOTLEADER;
    round_trip(&m[1]);
    m[0].lease.op = 4;
    f = encode(&m[0]);
    assert_int_equal(
        raft_frame_decode(body_of(&f), body_len(&f), &out, err, sizeof err),
        RAFT_PROTO);
    assert_string_equal(err, "lease: unknown op 4");
    free(f.bytes);
    raft_buf_unref(m[0].lease.data);
}

/* Entries ending exactly at index UINT64_MAX round trip. */
static void test_round_trip_last_index(void **state)
{
    struct raft_entry e[3] = {
        {UINT64_MAX, UINT64_MAX - 2, RAFT_ENTRY_NORMAL, NULL},
        {0, UINT64_MAX - 1, RAFT_ENTRY_NOOP, NULL},
        {1, UINT64_MAX, RAFT_ENTRY_NORMAL, NULL},
    };
    struct raft_message c;

    (void)state;
    memset(&c, 0, sizeof c);
    c.type = RAFT_MSG_APPEND_ENTRIES;
    c.from = 1;
    c.to = 2;
    c.append_entries.prev_log_index = UINT64_MAX - 3;
    c.append_entries.entries = e;
    c.append_entries.n_entries = 3;
    e[2].data = pattern_buf(1, 9);
    round_trip_message(&c);
    raft_buf_unref(e[2].data);
}

/* Big payloads (4 MiB entry, 1 MiB forward) round trip byte for byte. */
static void test_round_trip_big_payloads(void **state)
{
    struct raft_entry e[2];
    struct raft_message c;
    struct raft_frame m;

    (void)state;
    memset(&c, 0, sizeof c);
    e[0] =
        (struct raft_entry){3, 1, RAFT_ENTRY_NORMAL, pattern_buf(4u << 20, 5)};
    e[1] = (struct raft_entry){3, 2, RAFT_ENTRY_NORMAL, NULL};
    c.type = RAFT_MSG_APPEND_ENTRIES;
    c.from = 2;
    c.to = 1;
    c.append_entries.term = 3;
    c.append_entries.entries = e;
    c.append_entries.n_entries = 2;
    round_trip_message(&c);
    raft_buf_unref(e[0].data);

    memset(&m, 0, sizeof m);
    m.type = RAFT_FRAME_FORWARD;
    m.from = 2;
    m.to = 1;
    m.forward.data = pattern_buf(1u << 20, 6);
    round_trip(&m);
    raft_buf_unref(m.forward.data);
}

/* Ten thousand entries, with empty and non-empty payloads, round trip. */
static void test_round_trip_many_entries(void **state)
{
    const uint32_t n = 10000;
    struct raft_entry *e = calloc(n, sizeof *e);
    struct raft_message c;
    uint32_t i;

    (void)state;
    assert_non_null(e);
    for (i = 0; i < n; i++) {
        e[i].term = 1 + i / 100;
        e[i].index = 1001 + i;
        e[i].type = i % 7 == 0 ? RAFT_ENTRY_NOOP : RAFT_ENTRY_NORMAL;
        e[i].data = i % 3 == 0 ? NULL : pattern_buf(i % 50 + 1, i);
    }
    memset(&c, 0, sizeof c);
    c.type = RAFT_MSG_APPEND_ENTRIES;
    c.from = 1;
    c.to = 2;
    c.append_entries.prev_log_index = 1000;
    c.append_entries.entries = e;
    c.append_entries.n_entries = n;
    round_trip_message(&c);
    for (i = 0; i < n; i++) {
        raft_buf_unref(e[i].data);
    }
    free(e);
}

/* decode_fails asserts that decoding @len bytes at @body fails with @want,
 * leaves @out untouched and sets a message. */
static void decode_fails(const void *body, size_t len, int want)
{
    struct raft_frame out;
    char err[128] = "";
    int rc;

    memset(&out, 0xA5, sizeof out);
    rc = raft_frame_decode(body, len, &out, err, sizeof err);
    if (rc != want) {
        fail_msg("decode of %zu bytes: got %d (%s), want %d", len, rc, err,
                 want);
    }
    assert_true(err[0] != '\0');
    assert_int_equal(out.type, 0xA5);
}

/* Every strict prefix of every sample body is refused as a protocol
 * error, without leaking. */
static void test_truncations(void **state)
{
    struct samples s;
    unsigned i;
    size_t len;

    (void)state;
    samples_init(&s);
    for (i = 0; i < N_SAMPLES; i++) {
        struct encoded f = encode(&s.m[i]);
        for (len = 0; len < body_len(&f); len++) {
            /* A heap copy of exactly @len bytes: ASan catches overreads. */
            uint8_t *copy = malloc(len == 0 ? 1 : len);
            assert_non_null(copy);
            memcpy(copy, body_of(&f), len);
            decode_fails(copy, len, RAFT_PROTO);
            free(copy);
        }
        free(f.bytes);
    }
    samples_close(&s);
}

/* One byte after a valid body is refused. */
static void test_trailing_byte(void **state)
{
    struct samples s;
    unsigned i;

    (void)state;
    samples_init(&s);
    for (i = 0; i < N_SAMPLES; i++) {
        struct encoded f = encode(&s.m[i]);
        uint8_t *copy = malloc(body_len(&f) + 1);
        assert_non_null(copy);
        memcpy(copy, body_of(&f), body_len(&f));
        copy[body_len(&f)] = 0;
        decode_fails(copy, body_len(&f) + 1, RAFT_PROTO);
        free(copy);
        free(f.bytes);
    }
    samples_close(&s);
}

/* APPEND_ENTRIES carries quorum_contact from wire version 6: it round
 * trips in 6, a body of 5 is 4 bytes shorter and reads as 0, and a body
 * of 6 cut short of the field (or of n_entries after it) is refused;
 * raft_frame_encoded_len_at says each length. */
static void test_append_entries_quorum_contact(void **state)
{
    struct raft_entry e = {.term = 3, .index = 8, .type = RAFT_ENTRY_NORMAL};
    struct raft_message c;
    struct raft_frame m;
    struct raft_frame out;
    struct encoded f5, f6;
    char err[128] = "";

    (void)state;
    memset(&c, 0, sizeof c);
    c.type = RAFT_MSG_APPEND_ENTRIES;
    c.from = 1;
    c.to = 2;
    c.append_entries.term = 3;
    c.append_entries.prev_log_index = 7;
    c.append_entries.prev_log_term = 3;
    c.append_entries.leader_commit = 6;
    c.append_entries.seq = 11;
    c.append_entries.quorum_contact = 0x01020304;
    e.data = pattern_buf(5, 1);
    c.append_entries.entries = &e;
    c.append_entries.n_entries = 1;
    raft_frame_wrap(&c, &m);
    assert_int_equal(raft_frame_encoded_len_at(&m, 5) + 4,
                     raft_frame_encoded_len_at(&m, 6));
    assert_int_equal(raft_frame_encoded_len(&m),
                     raft_frame_encoded_len_at(&m, RAFT_WIRE_VERSION));
    for (unsigned v = 5; v <= 6; v++) {
        struct encoded *f = v == 5 ? &f5 : &f6;
        f->len = raft_frame_encoded_len_at(&m, v);
        f->bytes = malloc(f->len);
        assert_non_null(f->bytes);
        assert_int_equal(raft_frame_encode_at(&m, v, f->bytes, f->len), 0);
        assert_int_equal(raft_byte_load_u32(f->bytes),
                         f->len - RAFT_FRAME_HEADER);
        assert_int_equal(
            raft_frame_decode(body_of(f), body_len(f), &out, err, sizeof err),
            0);
        assert_int_equal(out.message.append_entries.quorum_contact,
                         v == 6 ? 0x01020304u : 0u);
        assert_int_equal(out.message.append_entries.seq, 11);
        assert_int_equal(out.message.append_entries.n_entries, 1);
        assert_int_equal(out.message.append_entries.entries[0].index, 8);
        raft_frame_release(&out);
    }
    /* The field sits after seq: body header 18, five u64 fields. */
    assert_int_equal(raft_byte_load_u32(body_of(&f6) + 18 + 40), 0x01020304);
    /* Version 6's body read as version 5 has 4 bytes too many. */
    f6.bytes[RAFT_FRAME_HEADER] = 5;
    assert_int_not_equal(
        raft_frame_decode(body_of(&f6), body_len(&f6), &out, err, sizeof err),
        0);
    f6.bytes[RAFT_FRAME_HEADER] = 6;
    for (size_t cut = 18 + 40; cut < 18 + 40 + 4 + 4; cut++) {
        decode_fails(body_of(&f6), cut, RAFT_PROTO);
    }
    free(f5.bytes);
    free(f6.bytes);
    raft_buf_unref(e.data);
}

/* Wire version 7: APPEND_ENTRIES carries echo (a u64 after
 * quorum_contact) and APPEND_ENTRIES_RESULT sent_at (a u64 after seq).
 * Both round trip in 7; a body of 6 is 8 bytes shorter and reads them as
 * 0 (an older peer: the follower then counts from arrival); a body of 7
 * cut short of either is refused. */
static void test_wire_echo(void **state)
{
    struct raft_message c[2];
    struct raft_frame m;
    struct raft_frame out;
    char err[128] = "";

    (void)state;
    memset(c, 0, sizeof c);
    c[0].type = RAFT_MSG_APPEND_ENTRIES;
    c[0].from = 1;
    c[0].to = 2;
    c[0].append_entries.term = 3;
    c[0].append_entries.seq = 11;
    c[0].append_entries.quorum_contact = 9;
    c[0].append_entries.echo = 0x0102030405060708ULL;
    c[1].type = RAFT_MSG_APPEND_ENTRIES_RESULT;
    c[1].from = 2;
    c[1].to = 1;
    c[1].append_entries_result.term = 3;
    c[1].append_entries_result.seq = 11;
    c[1].append_entries_result.sent_at = 0x1112131415161718ULL;
    for (unsigned k = 0; k < 2; k++) {
        raft_frame_wrap(&c[k], &m);
        assert_int_equal(raft_frame_encoded_len_at(&m, 6) + 8,
                         raft_frame_encoded_len_at(&m, 7));
        for (unsigned v = 6; v <= 7; v++) {
            struct encoded f;
            uint64_t got;
            f.len = raft_frame_encoded_len_at(&m, v);
            f.bytes = malloc(f.len);
            assert_non_null(f.bytes);
            assert_int_equal(raft_frame_encode_at(&m, v, f.bytes, f.len), 0);
            assert_int_equal(raft_frame_decode(body_of(&f), body_len(&f), &out,
                                               err, sizeof err),
                             0);
            got = k == 0 ? out.message.append_entries.echo
                         : out.message.append_entries_result.sent_at;
            assert_true(got == (v == 7 ? (k == 0 ? 0x0102030405060708ULL
                                                 : 0x1112131415161718ULL)
                                       : 0));
            assert_int_equal(k == 0 ? out.message.append_entries.seq
                                    : out.message.append_entries_result.seq,
                             11);
            raft_frame_release(&out);
            if (v == 7) {
                /* Cut anywhere in the last 8 bytes: refused. */
                for (size_t cut = body_len(&f) - 8; cut < body_len(&f); cut++) {
                    decode_fails(body_of(&f), cut, RAFT_PROTO);
                }
            }
            free(f.bytes);
        }
    }
}

/* A version byte outside [RAFT_WIRE_VERSION_MIN, RAFT_WIRE_VERSION]
 * gives RAFT_FORMAT, and the encoder writes no version outside it. */
static void test_wrong_version(void **state)
{
    const uint8_t versions[3] = {0, RAFT_WIRE_VERSION + 1, 255};
    struct samples s;
    unsigned v;

    (void)state;
    samples_init(&s);
    for (v = 0; v < 3; v++) {
        struct encoded f = encode(&s.m[2]);
        f.bytes[RAFT_FRAME_HEADER] = versions[v];
        decode_fails(body_of(&f), body_len(&f), RAFT_FORMAT);
        decode_fails(body_of(&f), 1, RAFT_FORMAT);
        assert_int_equal(
            raft_frame_encode_at(&s.m[2], versions[v], f.bytes, f.len),
            RAFT_INVALID);
        assert_int_equal(raft_frame_encode_at(&s.m[2], RAFT_WIRE_VERSION_MIN,
                                              f.bytes, f.len),
                         0);
        assert_int_equal(f.bytes[RAFT_FRAME_HEADER], RAFT_WIRE_VERSION_MIN);
        free(f.bytes);
    }
    samples_close(&s);
}

/* A type byte naming no message type gives RAFT_PROTO. */
static void test_unknown_type(void **state)
{
    const uint8_t types[4] = {0, 7, 100, 255};
    struct samples s;
    unsigned t;

    (void)state;
    samples_init(&s);
    for (t = 0; t < 4; t++) {
        struct encoded f = encode(&s.m[0]);
        f.bytes[RAFT_FRAME_HEADER + 1] = types[t];
        decode_fails(body_of(&f), body_len(&f), RAFT_PROTO);
        free(f.bytes);
    }
    samples_close(&s);
}

/* The encoder refuses unknown types, short buffers, gaps in indexes and
 * a core message whose header differs from its frame's. */
static void test_encode_errors(void **state)
{
    struct samples s;
    struct raft_frame m;
    uint8_t buf[256];
    size_t need;

    (void)state;
    samples_init(&s);
    memset(&m, 0, sizeof m);
    m.type = 100;
    assert_int_equal(raft_frame_encoded_len(&m), 0);
    assert_int_equal(raft_frame_encode(&m, buf, sizeof buf), RAFT_INVALID);

    need = raft_frame_encoded_len(&s.m[2]);
    assert_true(need <= sizeof buf);
    assert_int_equal(raft_frame_encode(&s.m[2], buf, need - 1), RAFT_INVALID);
    assert_int_equal(raft_frame_encode(&s.m[2], buf, need), 0);

    s.entries[1].index = 20;
    assert_int_equal(raft_frame_encode(&s.m[2], buf, sizeof buf), RAFT_INVALID);

    /* A core message whose header is not the frame's. */
    m = s.m[0];
    m.message.from = 3;
    assert_int_equal(raft_frame_encode(&m, buf, sizeof buf), RAFT_INVALID);
    m = s.m[0];
    m.message.type = RAFT_MSG_REQUEST_VOTE_RESULT;
    assert_int_equal(raft_frame_encode(&m, buf, sizeof buf), RAFT_INVALID);
    m = s.m[0];
    m.to = 3;
    assert_int_equal(raft_frame_encode(&m, buf, sizeof buf), RAFT_INVALID);
    samples_close(&s);
}

/* build_append_header writes a version-1 AppendEntries body header with
 * @n_entries into @w. */
static void build_append_header(struct raft_byte_writer *w, uint64_t prev,
                                uint32_t n_entries)
{
    assert_true(raft_byte_put_u8(w, RAFT_WIRE_VERSION));
    assert_true(raft_byte_put_u8(w, RAFT_MSG_APPEND_ENTRIES));
    assert_true(raft_byte_put_u64(w, 1));    /* from */
    assert_true(raft_byte_put_u64(w, 2));    /* to */
    assert_true(raft_byte_put_u64(w, 3));    /* term */
    assert_true(raft_byte_put_u64(w, prev)); /* prev_log_index */
    assert_true(raft_byte_put_u64(w, 2));    /* prev_log_term */
    assert_true(raft_byte_put_u64(w, 0));    /* leader_commit */
    assert_true(raft_byte_put_u32(w, n_entries));
}

static void build_entry(struct raft_byte_writer *w, uint64_t index,
                        uint8_t type, uint32_t len)
{
    assert_true(raft_byte_put_u64(w, 3));
    assert_true(raft_byte_put_u64(w, index));
    assert_true(raft_byte_put_u8(w, type));
    assert_true(raft_byte_put_u32(w, len));
    while (len-- > 0) {
        assert_true(raft_byte_put_u8(w, 'x'));
    }
}

/* A huge n_entries with a short body is refused before any allocation
 * (ASan aborts on an allocation of tens of gigabytes, so a test that
 * passes did not try one). */
static void test_huge_entry_count(void **state)
{
    const uint32_t counts[4] = {UINT32_MAX, 1u << 30, 3, 2};
    uint8_t body[256];
    unsigned c;

    (void)state;
    for (c = 0; c < 4; c++) {
        struct raft_byte_writer w = raft_byte_writer_init(body, sizeof body);
        size_t len;
        build_append_header(&w, 0, counts[c]);
        build_entry(&w, 1, RAFT_ENTRY_NORMAL, 2);
        len = sizeof body - w.left;
        decode_fails(body, len, RAFT_PROTO);
    }
}

/* A payload length running past the body is refused. */
static void test_payload_past_end(void **state)
{
    uint8_t body[256];
    struct raft_byte_writer w = raft_byte_writer_init(body, sizeof body);
    size_t len;

    (void)state;
    build_append_header(&w, 0, 2);
    build_entry(&w, 1, RAFT_ENTRY_NORMAL, 4);
    build_entry(&w, 2, RAFT_ENTRY_NORMAL, 0);
    len = sizeof body - w.left;
    /* Claim a payload of UINT32_MAX in the second entry. */
    raft_byte_store_u32(body + len - 4, UINT32_MAX);
    decode_fails(body, len, RAFT_PROTO);
}

/* Entries not numbered prev_log_index+1, +2, ... are refused, and the
 * payloads already decoded are freed (LeakSanitizer checks). */
static void test_non_consecutive_indexes(void **state)
{
    const uint64_t cases[4][3] = {
        {11, 12, 14}, /* gap */
        {11, 11, 12}, /* repeat */
        {12, 13, 14}, /* first is not prev+1 */
        {11, 13, 12}, /* out of order */
    };
    uint8_t body[512];
    unsigned c, i;

    (void)state;
    for (c = 0; c < 4; c++) {
        struct raft_byte_writer w = raft_byte_writer_init(body, sizeof body);
        build_append_header(&w, 10, 3);
        for (i = 0; i < 3; i++) {
            build_entry(&w, cases[c][i], RAFT_ENTRY_NORMAL, 5);
        }
        decode_fails(body, sizeof body - w.left, RAFT_PROTO);
    }
}

/* Index wrap-around past UINT64_MAX is refused. */
static void test_index_wraps(void **state)
{
    uint8_t body[256];
    struct raft_byte_writer w = raft_byte_writer_init(body, sizeof body);

    (void)state;
    build_append_header(&w, UINT64_MAX, 1);
    build_entry(&w, 0, RAFT_ENTRY_NORMAL, 0);
    decode_fails(body, sizeof body - w.left, RAFT_PROTO);
}

/* Unknown entry types and booleans other than 0 and 1 are refused. */
static void test_bad_field_values(void **state)
{
    struct samples s;
    uint8_t body[256];
    struct raft_byte_writer w = raft_byte_writer_init(body, sizeof body);
    struct encoded f;

    (void)state;
    build_append_header(&w, 0, 2);
    build_entry(&w, 1, RAFT_ENTRY_NORMAL, 3);
    build_entry(&w, 2, 9, 0);
    decode_fails(body, sizeof body - w.left, RAFT_PROTO);

    samples_init(&s);
    f = encode(&s.m[0]); /* RequestVote: its flags are the last byte */
    f.bytes[f.len - 1] = 4;
    decode_fails(body_of(&f), body_len(&f), RAFT_PROTO);
    free(f.bytes);
    f = encode(&s.m[10]); /* CHECKSUM: its probe boolean is the last */
    f.bytes[f.len - 1] = 2;
    decode_fails(body_of(&f), body_len(&f), RAFT_PROTO);
    free(f.bytes);
    samples_close(&s);
}

/* TimeoutNow (type 9) round trips in 8 bytes after the header;
 * RequestVote's flags byte is 1 for a pre-vote (as the boolean it was),
 * 2 for a transfer's election, 3 for both; AppendEntries carries
 * CONFIG entries. */
static void test_timeout_now_and_flags(void **state)
{
    struct raft_message c;
    struct raft_frame f;
    struct encoded e;
    struct raft_entry entry = {3, 5, RAFT_ENTRY_CONFIG, NULL};
    unsigned v;

    (void)state;
    memset(&c, 0, sizeof c);
    c.type = RAFT_MSG_TIMEOUT_NOW;
    c.from = 1;
    c.to = 2;
    c.timeout_now.term = 42;
    round_trip_message(&c);
    raft_frame_wrap(&c, &f);
    assert_int_equal(f.type, 9);
    assert_int_equal(raft_frame_encoded_len(&f),
                     RAFT_FRAME_HEADER + 1 + 1 + 8 + 8 + 8);

    for (v = 0; v < 4; v++) {
        memset(&c, 0, sizeof c);
        c.type = RAFT_MSG_REQUEST_VOTE;
        c.from = 2;
        c.to = 1;
        c.request_vote =
            (struct raft_request_vote){7, 8, 6, (v & 1) != 0, (v & 2) != 0};
        round_trip_message(&c);
        raft_frame_wrap(&c, &f);
        e = encode(&f);
        assert_int_equal(e.bytes[e.len - 1], v);
        free(e.bytes);
    }

    memset(&c, 0, sizeof c);
    c.type = RAFT_MSG_APPEND_ENTRIES;
    c.from = 1;
    c.to = 2;
    c.append_entries.term = 3;
    c.append_entries.prev_log_index = 4;
    c.append_entries.entries = &entry;
    c.append_entries.n_entries = 1;
    entry.data = pattern_buf(9, 5);
    round_trip_message(&c);
    raft_buf_unref(entry.data);
}

/* A NULL or empty errmsg buffer is accepted. */
static void test_no_errmsg_buffer(void **state)
{
    uint8_t body[1] = {0};
    struct raft_frame out;
    char err[1] = {'z'};

    (void)state;
    assert_int_equal(raft_frame_decode(body, 1, &out, NULL, 0), RAFT_FORMAT);
    assert_int_equal(raft_frame_decode(body, 1, &out, err, 0), RAFT_FORMAT);
    assert_int_equal(err[0], 'z');
}

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64*, seeded, deterministic. */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

/* Seeded fuzz: random byte flips and truncations of valid bodies either
 * decode (and then re-encode to the very same bytes) or fail cleanly. */
static void test_fuzz(void **state)
{
    const unsigned iterations = 20000;
    const char *env = getenv("RAFT_TEST_SEED");
    uint64_t seed = env != NULL ? strtoull(env, NULL, 0) : 0x5eedf00dULL;
    uint64_t rng = seed | 1;
    struct encoded frames[N_SAMPLES];
    struct samples s;
    unsigned it, i, n_ok = 0, n_bad = 0;

    (void)state;
    samples_init(&s);
    for (i = 0; i < N_SAMPLES; i++) {
        frames[i] = encode(&s.m[i]);
    }
    for (it = 0; it < iterations; it++) {
        struct encoded *f = &frames[rng_next(&rng) % N_SAMPLES];
        size_t len = body_len(f);
        uint8_t *copy = malloc(len + 1);
        unsigned n_flips = 1 + (unsigned)(rng_next(&rng) % 4);
        struct raft_frame out;
        char err[128];
        int rc;

        assert_non_null(copy);
        memcpy(copy, body_of(f), len);
        for (i = 0; i < n_flips; i++) {
            size_t at = (size_t)(rng_next(&rng) % len);
            if (rng_next(&rng) % 4 == 0 && at >= 2) {
                /* Bias some flips towards small values (counts, lengths). */
                copy[at] = (uint8_t)(rng_next(&rng) % 4);
            } else {
                copy[at] ^= (uint8_t)(1 + rng_next(&rng) % 255);
            }
        }
        if (rng_next(&rng) % 8 == 0) {
            len = (size_t)(rng_next(&rng) % (len + 1));
        }
        rc = raft_frame_decode(copy, len, &out, err, sizeof err);
        if (rc == 0) {
            uint8_t *again = malloc(len + RAFT_FRAME_HEADER);
            assert_non_null(again);
            if (raft_frame_encoded_len_at(&out, copy[0]) !=
                    len + RAFT_FRAME_HEADER ||
                raft_frame_encode_at(&out, copy[0], again,
                                     len + RAFT_FRAME_HEADER) != 0 ||
                memcmp(again + RAFT_FRAME_HEADER, copy, len) != 0) {
                fail_msg(
                    "fuzz seed %llu iteration %u: decoded message "
                    "does not re-encode to its bytes",
                    (unsigned long long)seed, it);
            }
            free(again);
            raft_frame_release(&out);
            n_ok++;
        } else {
            if (rc != RAFT_PROTO && rc != RAFT_FORMAT) {
                fail_msg("fuzz seed %llu iteration %u: rc %d",
                         (unsigned long long)seed, it, rc);
            }
            n_bad++;
        }
        free(copy);
    }
    /* Both outcomes must have happened for the loop to mean anything. */
    if (n_ok == 0 || n_bad == 0) {
        fail_msg("fuzz seed %llu: %u decoded, %u refused",
                 (unsigned long long)seed, n_ok, n_bad);
    }
    for (i = 0; i < N_SAMPLES; i++) {
        free(frames[i].bytes);
    }
    samples_close(&s);
}

/* A large entry is written by reference, not copied, and read back as a
 * slice of the received body: the frame assembled from the buffer and
 * its references is byte for byte the plain encoding, and the decoded
 * large payload points into the body while a small one is a copy. */
static void test_refs_and_slices(void **state)
{
    struct raft_buf *big = pattern_buf(RAFT_FRAME_SLICE_MIN + 7, 5);
    struct raft_buf *small = pattern_buf(100, 9);
    struct raft_entry entries[3] = {
        {.term = 2, .index = 11, .type = RAFT_ENTRY_NORMAL, .data = small},
        {.term = 2, .index = 12, .type = RAFT_ENTRY_NORMAL, .data = big},
        {.term = 2, .index = 13, .type = RAFT_ENTRY_NORMAL, .data = small},
    };
    struct raft_frame m = {.type = RAFT_MSG_APPEND_ENTRIES, .from = 1, .to = 2};
    struct raft_frame_ref refs[3];
    struct encoded plain;
    struct raft_buf *body;
    struct raft_frame out;
    size_t head, at = 0, k = 0;
    uint8_t *buf;
    unsigned n_refs = 9;
    char err[128];

    m.message.type = m.type;
    m.message.from = 1;
    m.message.to = 2;
    m.message.append_entries.term = 2;
    m.message.append_entries.prev_log_index = 10;
    m.message.append_entries.prev_log_term = 2;
    m.message.append_entries.n_entries = 3;
    m.message.append_entries.entries = entries;
    plain = encode(&m);

    head = raft_frame_encoded_len_refs(&m, wire_of(m.type),
                                       RAFT_FRAME_SLICE_MIN, &n_refs);
    assert_int_equal(n_refs, 1);
    assert_int_equal(head, plain.len - big->len);
    buf = malloc(head);
    assert_non_null(buf);
    assert_int_equal(
        raft_frame_encode_refs(&m, wire_of(m.type), buf, head,
                               RAFT_FRAME_SLICE_MIN, refs, &n_refs),
        0);
    assert_int_equal(n_refs, 1);
    assert_ptr_equal(refs[0].buf, big);
    /* The body as a receiver assembles it: buffer, reference, buffer. */
    body = raft_buf_new(plain.len - RAFT_FRAME_HEADER);
    assert_non_null(body);
    memcpy(body->data, buf + RAFT_FRAME_HEADER, refs[0].at - RAFT_FRAME_HEADER);
    k = refs[0].at - RAFT_FRAME_HEADER;
    memcpy(body->data + k, big->data, big->len);
    k += big->len;
    at = refs[0].at;
    memcpy(body->data + k, buf + at, head - at);
    assert_memory_equal(body->data, body_of(&plain), body_len(&plain));
    assert_memory_equal(buf, plain.bytes, RAFT_FRAME_HEADER);

    assert_int_equal(
        raft_frame_decode_buf(body, body->len, &out, err, sizeof err), 0);
    assert_int_equal(out.message.append_entries.n_entries, 3);
    {
        const struct raft_buf *d1 = out.message.append_entries.entries[1].data;
        const struct raft_buf *d0 = out.message.append_entries.entries[0].data;
        assert_int_equal(d1->len, big->len);
        assert_memory_equal(d1->data, big->data, big->len);
        assert_true(d1->data > body->data &&
                    d1->data + d1->len <= body->data + body->len);
        assert_memory_equal(d0->data, small->data, small->len);
        assert_false(d0->data >= body->data &&
                     d0->data < body->data + body->len);
    }
    /* The slice keeps the body alive once the receiver drops it. */
    raft_buf_unref(body);
    assert_memory_equal(out.message.append_entries.entries[1].data->data,
                        big->data, big->len);
    raft_frame_release(&out);
    free(buf);
    free(plain.bytes);
    raft_buf_unref(big);
    raft_buf_unref(small);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_samples),
        cmocka_unit_test(test_wrap_unwrap),
        cmocka_unit_test(test_wrap_unknown_type),
        cmocka_unit_test(test_chunk_past_total),
        cmocka_unit_test(test_round_trip_edge_values),
        cmocka_unit_test(test_round_trip_last_index),
        cmocka_unit_test(test_round_trip_big_payloads),
        cmocka_unit_test(test_round_trip_many_entries),
        cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_trailing_byte),
        cmocka_unit_test(test_wrong_version),
        cmocka_unit_test(test_unknown_type),
        cmocka_unit_test(test_encode_errors),
        cmocka_unit_test(test_huge_entry_count),
        cmocka_unit_test(test_payload_past_end),
        cmocka_unit_test(test_non_consecutive_indexes),
        cmocka_unit_test(test_index_wraps),
        cmocka_unit_test(test_bad_field_values),
        cmocka_unit_test(test_no_errmsg_buffer),
        cmocka_unit_test(test_timeout_now_and_flags),
        cmocka_unit_test(test_checksum_needs_version_2),
        cmocka_unit_test(test_read_index_needs_version_3),
        cmocka_unit_test(test_lease_needs_version_5),
        cmocka_unit_test(test_append_entries_quorum_contact),
        cmocka_unit_test(test_wire_echo),
        cmocka_unit_test(test_fuzz),
        cmocka_unit_test(test_refs_and_slices),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
