/* Tests of ext/runtime/change_codec.c: the change request a follower forwards
 * to its leader (round trip, every malformed form refused), how its frames
 * are told apart from write requests, and the words for each refusal. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ext/runtime/change_codec.h"
#include "tests/ext/helpers.h"

/* A request survives encode and decode unchanged. */
static void test_round_trip(void **state)
{
    struct ext_change_request q = {
        .op = EXT_CHANGE_ADD, .manual = true, .id = 42};
    struct ext_change_request out;
    struct raft_buf *b = NULL;
    (void)state;

    snprintf(q.address, sizeof q.address, "127.0.0.1:7004");
    assert_int_equal(change_codec_encode(&q, &b), 0);
    assert_int_equal(change_codec_decode(b->data, b->len, &out), 0);
    assert_int_equal(out.op, EXT_CHANGE_ADD);
    assert_true(out.manual);
    assert_int_equal(out.id, 42);
    assert_string_equal(out.address, "127.0.0.1:7004");
    raft_buf_unref(b);

    q = (struct ext_change_request){.op = EXT_CHANGE_TRANSFER};
    assert_int_equal(change_codec_encode(&q, &b), 0);
    assert_int_equal(b->len, 16);
    assert_int_equal(change_codec_decode(b->data, b->len, &out), 0);
    assert_int_equal(out.op, EXT_CHANGE_TRANSFER);
    assert_int_equal(out.id, 0);
    assert_string_equal(out.address, "");
    raft_buf_unref(b);

    q.op = 99; /* an unknown op is not encoded */
    assert_int_equal(change_codec_encode(&q, &b), RAFT_INVALID);
}

/* Every malformed payload is refused, none misread. */
static void test_malformed_refused(void **state)
{
    struct ext_change_request q = {.op = EXT_CHANGE_UPDATE, .id = 3};
    struct ext_change_request out;
    struct raft_buf *b = NULL;
    uint8_t p[64];
    (void)state;

    snprintf(q.address, sizeof q.address, "10.0.0.1:1");
    assert_int_equal(change_codec_encode(&q, &b), 0);
    assert_true(b->len < sizeof p);
    for (size_t n = 0; n < b->len; n++) { /* every truncation */
        assert_int_not_equal(change_codec_decode(b->data, n, &out), 0);
    }
    memcpy(p, b->data, b->len);
    p[b->len] = 'x'; /* trailing byte */
    assert_int_equal(change_codec_decode(p, b->len + 1, &out), RAFT_CORRUPT);
    memcpy(p, b->data, b->len);
    p[2] = 2; /* a later version */
    assert_int_equal(change_codec_decode(p, b->len, &out), RAFT_FORMAT);
    memcpy(p, b->data, b->len);
    p[1] = 'Q'; /* a write request's magic */
    assert_int_equal(change_codec_decode(p, b->len, &out), RAFT_CORRUPT);
    memcpy(p, b->data, b->len);
    p[3] = 7; /* unknown op */
    assert_int_equal(change_codec_decode(p, b->len, &out), RAFT_CORRUPT);
    memcpy(p, b->data, b->len);
    p[4] = 2; /* unknown flag */
    assert_int_equal(change_codec_decode(p, b->len, &out), RAFT_CORRUPT);
    memcpy(p, b->data, b->len);
    p[16] = 0; /* NUL in the address */
    assert_int_equal(change_codec_decode(p, b->len, &out), RAFT_CORRUPT);
    raft_buf_unref(b);
}

/* Change frames are told from write requests and their answers. */
static void test_frames_told_apart(void **state)
{
    struct ext_change_request q = {.op = EXT_CHANGE_REMOVE, .id = 2};
    struct raft_buf *change = NULL;
    struct raft_buf *write = request_buf(2, 1, "SELECT 1");
    struct raft_frame m = {.type = RAFT_FRAME_FORWARD};
    (void)state;

    assert_int_equal(change_codec_encode(&q, &change), 0);
    m.forward.data = change;
    assert_true(change_codec_is_change(&m));
    m.forward.data = write;
    assert_false(change_codec_is_change(&m));
    m.forward.data = NULL;
    assert_false(change_codec_is_change(&m));

    m = (struct raft_frame){.type = RAFT_FRAME_FORWARD_RESULT};
    m.forward_result.request_id[1] = 5;
    assert_false(change_codec_is_change(&m));
    m.forward_result.request_id[1] = EXT_CHANGE_SEQ_BIT | 5;
    assert_true(change_codec_is_change(&m));
    /* Another frame is no change's, whatever its bytes. */
    m = (struct raft_frame){.type = RAFT_FRAME_CHECKSUM};
    assert_false(change_codec_is_change(&m));
    raft_buf_unref(change);
    raft_buf_unref(write);
}

/* Each refusal reads as what it is. */
static void test_words(void **state)
{
    struct ext_change_request q = {.op = EXT_CHANGE_PROMOTE, .id = 4};
    char buf[256];
    (void)state;

    change_codec_describe(&q, RAFT_BUSY, EXT_WHY_PENDING, 0, buf, sizeof buf);
    assert_non_null(strstr(buf, "another membership change is pending"));
    change_codec_describe(&q, RAFT_NOTFOUND, 0, 0, buf, sizeof buf);
    assert_string_equal(buf, "unknown id: server 4 is not a member");
    change_codec_describe(&q, RAFT_INVALID, EXT_WHY_VOTER, 0, buf, sizeof buf);
    assert_string_equal(buf, "server 4 is a voter already");
    change_codec_describe(&q, RAFT_NOTLEADER, 0, 2, buf, sizeof buf);
    assert_non_null(strstr(buf, "(the leader is server 2)"));
    change_codec_describe(&q, RAFT_UNKNOWN, EXT_WHY_LOST, 0, buf, sizeof buf);
    assert_non_null(strstr(buf, "outcome unknown"));
}

/* A refusal of a request sent again reads as done exactly when it says
 * that an earlier copy did it. */
static void test_already(void **state)
{
    struct ext_change_request add = {.op = EXT_CHANGE_ADD, .id = 4};
    struct ext_change_request rm = {.op = EXT_CHANGE_REMOVE, .id = 4};
    struct ext_change_request tr = {.op = EXT_CHANGE_TRANSFER, .id = 2};
    (void)state;

    assert_true(change_codec_already(&add, RAFT_INVALID, EXT_WHY_MEMBER, 1));
    assert_false(change_codec_already(&add, RAFT_INVALID, EXT_WHY_FULL, 1));
    assert_false(change_codec_already(&add, RAFT_BUSY, EXT_WHY_PENDING, 1));
    assert_true(change_codec_already(&rm, RAFT_NOTFOUND, 0, 1));
    assert_true(change_codec_already(&tr, RAFT_INVALID, EXT_WHY_SELF, 2));
    assert_false(change_codec_already(&tr, RAFT_INVALID, EXT_WHY_SELF, 3));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_malformed_refused),
        cmocka_unit_test(test_frames_told_apart),
        cmocka_unit_test(test_words),
        cmocka_unit_test(test_already),
    };
    return cmocka_run_group_tests_name("ext_change_codec", tests, NULL, NULL);
}
