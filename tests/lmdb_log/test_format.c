/* Tests of the LMDB log's record codecs (lmdb_log/format.h): key order,
 * entry and meta round trips, and that every damaged value is refused. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "lmdb_log/format.h"

/* Keys sort byte-wise in numeric order (LMDB's default comparison) and
 * decode back; a key of the wrong size is corrupt. */
static void test_key_order(void **state)
{
    static const raft_index idx[] = {
        1,         2,        255,        256,        65535,
        65536,     1u << 31, UINT32_MAX, 1ull << 40, UINT64_MAX - 1,
        UINT64_MAX};
    uint8_t prev[LMDB_LOG_FORMAT_KEY_LEN];
    uint8_t key[LMDB_LOG_FORMAT_KEY_LEN];
    raft_index got;

    (void)state;
    for (size_t i = 0; i < sizeof idx / sizeof idx[0]; i++) {
        format_key_encode(idx[i], key);
        assert_int_equal(format_key_decode(key, sizeof key, &got), 0);
        assert_int_equal(got, idx[i]);
        if (i > 0) {
            assert_true(memcmp(prev, key, sizeof key) < 0);
        }
        memcpy(prev, key, sizeof key);
    }
    got = 7;
    assert_int_equal(format_key_decode(key, 7, &got), RAFT_CORRUPT);
    assert_int_equal(got, 7);
}

/* Encodes @e into a new buffer of format_entry_len bytes. */
static uint8_t *encode(const struct raft_entry *e, size_t *out_len)
{
    size_t len = format_entry_len(e->data != NULL ? e->data->len : 0);
    uint8_t *v = malloc(len);

    assert_non_null(v);
    format_entry_encode(e, v);
    *out_len = len;
    return v;
}

/* An entry round-trips with its term, type, index and payload; the layout
 * is the one format.h documents. */
static void test_entry_round_trip(void **state)
{
    struct raft_entry e = {0x0102030405060708ull, 42, RAFT_ENTRY_NORMAL,
                           raft_buf_copy("hello", 5)};
    struct raft_entry d;
    size_t len;
    uint8_t *v;

    (void)state;
    v = encode(&e, &len);
    assert_int_equal(len, 21 + 5);
    assert_int_equal(v[0], 0x08); /* term, little-endian */
    assert_int_equal(v[7], 0x01);
    assert_int_equal(v[8], RAFT_ENTRY_NORMAL);
    assert_int_equal(v[9], 5); /* payload length */
    assert_memory_equal(v + 13, "hello", 5);
    assert_null(format_entry_check(42, v, len));
    assert_int_equal(format_entry_decode(42, v, len, &d), 0);
    assert_int_equal(d.term, e.term);
    assert_int_equal(d.index, 42);
    assert_int_equal(d.type, RAFT_ENTRY_NORMAL);
    assert_non_null(d.data);
    assert_int_equal(d.data->len, 5);
    assert_memory_equal(d.data->data, "hello", 5);
    raft_buf_unref(d.data);
    raft_buf_unref(e.data);
    free(v);

    e.data = NULL;
    e.type = RAFT_ENTRY_NOOP;
    v = encode(&e, &len);
    assert_int_equal(len, 21);
    assert_null(format_entry_check(42, v, len));
    assert_int_equal(format_entry_decode(42, v, len, &d), 0);
    assert_null(d.data);
    assert_int_equal(d.type, RAFT_ENTRY_NOOP);
    free(v);
}

/* Every single-bit flip, every truncation, and the same value under any
 * other index are refused by format_entry_check. */
static void test_entry_damage_detected(void **state)
{
    struct raft_entry e = {7, 1000, RAFT_ENTRY_NORMAL,
                           raft_buf_copy("payload bytes", 13)};
    size_t len;
    uint8_t *v;

    (void)state;
    v = encode(&e, &len);
    for (size_t i = 0; i < len; i++) {
        for (unsigned bit = 0; bit < 8; bit++) {
            v[i] ^= (uint8_t)(1u << bit);
            assert_non_null(format_entry_check(1000, v, len));
            v[i] ^= (uint8_t)(1u << bit);
        }
    }
    for (size_t cut = 0; cut < len; cut++) {
        assert_non_null(format_entry_check(1000, v, cut));
    }
    assert_null(format_entry_check(1000, v, len));
    assert_string_equal(format_entry_check(999, v, len), "checksum mismatch");
    assert_string_equal(format_entry_check(1001, v, len), "checksum mismatch");
    raft_buf_unref(e.data);
    free(v);
}

/* Meta records round-trip; a damaged one, or one stored under another
 * name, is corrupt and leaves the output alone. */
static void test_meta(void **state)
{
    uint8_t rec[LMDB_LOG_FORMAT_META_LEN];
    uint64_t got = 5;

    (void)state;
    format_meta_encode("term", 0xfedcba9876543210ull, rec);
    assert_int_equal(format_meta_decode("term", rec, sizeof rec, &got), 0);
    assert_int_equal(got, 0xfedcba9876543210ull);
    got = 5;
    assert_int_equal(format_meta_decode("vote", rec, sizeof rec, &got),
                     RAFT_CORRUPT);
    assert_int_equal(format_meta_decode("term", rec, 15, &got), RAFT_CORRUPT);
    rec[3] ^= 0x10;
    assert_int_equal(format_meta_decode("term", rec, sizeof rec, &got),
                     RAFT_CORRUPT);
    assert_int_equal(got, 5);
}

/* The version record is a bare little-endian u32 of exactly 4 bytes. */
static void test_version(void **state)
{
    uint8_t rec[LMDB_LOG_FORMAT_VERSION_LEN];
    uint32_t got = 0;

    (void)state;
    format_version_encode(LMDB_LOG_FORMAT_VERSION, rec);
    assert_int_equal(rec[0], LMDB_LOG_FORMAT_VERSION);
    assert_int_equal(rec[1] | rec[2] | rec[3], 0);
    assert_int_equal(format_version_decode(rec, sizeof rec, &got), 0);
    assert_int_equal(got, LMDB_LOG_FORMAT_VERSION);
    got = 9;
    assert_int_equal(format_version_decode(rec, 3, &got), RAFT_CORRUPT);
    assert_int_equal(format_version_decode(rec, 8, &got), RAFT_CORRUPT);
    assert_int_equal(got, 9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_order),
        cmocka_unit_test(test_entry_round_trip),
        cmocka_unit_test(test_entry_damage_detected),
        cmocka_unit_test(test_meta),
        cmocka_unit_test(test_version),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
