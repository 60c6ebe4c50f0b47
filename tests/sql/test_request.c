/* Tests of the request codec (sql/request.c): round trips of every value
 * type at its edges, refusal of every truncation and of malformed fields,
 * a seeded mutation fuzz, TOOBIG, stamping and the id reader. */

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sql/sql.h"
#include "tests/sql/helpers.h"

/* Offsets of the documented format (request.c). */
#define OFF_VERSION 2
#define OFF_FLAGS 3
#define OFF_N_PARAMS 4
#define OFF_TIME 24
#define OFF_SEED 32
#define OFF_MAX_STEPS 40
#define OFF_SQL_LEN 48
#define HEADER 52

static const char text_nul[] = {'a', '\0', 'b'};
static const char text_utf8[] = "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80";
static const unsigned char blob_bytes[] = {0x00, 0xff, 0x10, 0x00, 0x7f};

static struct sql_param p_int(const char *name, int64_t v)
{
    struct sql_param p = {name, {.type = SQL_INTEGER}};
    p.value.integer = v;
    return p;
}

static struct sql_param p_real(const char *name, double v)
{
    struct sql_param p = {name, {.type = SQL_FLOAT}};
    p.value.real = v;
    return p;
}

static struct sql_param p_bytes(const char *name, int type, const void *b,
                                size_t len)
{
    struct sql_param p = {name, {.type = (uint8_t)type}};
    p.value.bytes.p = b;
    p.value.bytes.len = len;
    return p;
}

static struct sql_param p_null(const char *name)
{
    struct sql_param p = {name, {.type = SQL_NULL}};
    return p;
}

/* The parameters of the round-trip request: every type and edge. */
static unsigned all_params(struct sql_param *ps)
{
    unsigned n = 0;

    ps[n++] = p_int(NULL, INT64_MIN);
    ps[n++] = p_int(NULL, INT64_MAX);
    ps[n++] = p_int(NULL, 0);
    ps[n++] = p_int(NULL, -1);
    ps[n++] = p_real(NULL, -0.0);
    ps[n++] = p_real(NULL, INFINITY);
    ps[n++] = p_real(NULL, -INFINITY);
    ps[n++] = p_real(NULL, 0.1);
    ps[n++] = p_real(NULL, NAN);
    ps[n++] = p_bytes(NULL, SQL_TEXT, text_nul, sizeof text_nul);
    ps[n++] = p_bytes(NULL, SQL_TEXT, text_utf8, strlen(text_utf8));
    ps[n++] = p_bytes(NULL, SQL_TEXT, "", 0);
    ps[n++] = p_bytes(NULL, SQL_TEXT, NULL, 0);
    ps[n++] = p_bytes(NULL, SQL_BLOB, NULL, 0);
    ps[n++] = p_bytes(NULL, SQL_BLOB, blob_bytes, sizeof blob_bytes);
    ps[n++] = p_null(NULL);
    ps[n++] = p_int(":a", 42);
    ps[n++] = p_bytes("@b", SQL_TEXT, "x", 1);
    ps[n++] = p_null("$c");
    ps[n++] = p_real("?5", 2.5);
    return n;
}

static struct buf *encode_ok(const uint64_t id[2], const char *sql,
                             const struct sql_param *ps, unsigned n)
{
    struct buf *b = NULL;
    char msg[256] = "";
    int rc;

    rc = encode_request(id, sql, strlen(sql), ps, n, UINT64_MAX, &b, msg,
                        sizeof msg);
    if (rc != 0) {
        fail_msg("encode: %d %s", rc, msg);
    }
    return b;
}

static struct buf *encode_all(void)
{
    static const uint64_t id[2] = {UINT64_MAX, 12345};
    struct sql_param ps[32];
    unsigned n = all_params(ps);

    return encode_ok(id, "INSERT INTO t VALUES (?, ?)", ps, n);
}

static void assert_value_equal(const struct sql_value *a,
                               const struct sql_value *b)
{
    assert_int_equal(a->type, b->type);
    switch (a->type) {
        case SQL_INTEGER:
            assert_true(a->integer == b->integer);
            break;
        case SQL_FLOAT:
            if (isnan(a->real)) {
                assert_true(isnan(b->real));
            } else {
                assert_true(a->real == b->real);
                assert_int_equal(signbit(a->real) != 0, signbit(b->real) != 0);
            }
            break;
        case SQL_TEXT:
        case SQL_BLOB:
            assert_int_equal(a->bytes.len, b->bytes.len);
            if (a->bytes.len > 0) {
                assert_memory_equal(a->bytes.p, b->bytes.p, a->bytes.len);
            }
            break;
        default:
            break;
    }
}

/* Every value type survives a round trip bit for bit: int64 extremes,
 * -0.0, infinities, NaN, text with NUL and multibyte UTF-8, '' vs a
 * zero-length blob vs NULL, named and positional parameters. */
static void test_round_trip(void **state)
{
    struct sql_param ps[32];
    unsigned n = all_params(ps), i;
    struct buf *b = encode_all();
    struct sql_request r;
    char msg[256];

    (void)state;
    assert_int_equal(sql_request_decode(b->data, b->len, &r, msg, sizeof msg),
                     0);
    assert_true(r.id[0] == UINT64_MAX);
    assert_true(r.id[1] == 12345);
    assert_true(r.time_ms == 0);
    assert_true(r.seed == 0);
    assert_int_equal(r.sql_len, strlen("INSERT INTO t VALUES (?, ?)"));
    assert_memory_equal(r.sql, "INSERT INTO t VALUES (?, ?)", r.sql_len);
    assert_int_equal(r.n_params, n);
    for (i = 0; i < n; i++) {
        if (ps[i].name == NULL) {
            assert_null(r.params[i].name);
        } else {
            assert_string_equal(r.params[i].name, ps[i].name);
        }
        assert_value_equal(&ps[i].value, &r.params[i].value);
    }
    /* The extremes, spelled out to the last digit. */
    assert_true(r.params[0].value.integer == -9223372036854775807LL - 1);
    assert_true(r.params[1].value.integer == 9223372036854775807LL);
    assert_true(signbit(r.params[4].value.real));
    assert_true(isinf(r.params[5].value.real) && r.params[5].value.real > 0);
    /* '' stays TEXT, the empty blob stays BLOB. */
    assert_int_equal(r.params[11].value.type, SQL_TEXT);
    assert_int_equal(r.params[11].value.bytes.len, 0);
    assert_int_equal(r.params[13].value.type, SQL_BLOB);
    assert_int_equal(r.params[13].value.bytes.len, 0);
    assert_int_equal(r.params[15].value.type, SQL_NULL);
    sql_request_free(&r);
    buf_free(b);
}

/* A request without parameters decodes with a NULL array. */
static void test_no_params(void **state)
{
    static const uint64_t id[2] = {0, 0};
    struct buf *b = encode_ok(id, "SELECT 1", NULL, 0);
    struct sql_request r;

    (void)state;
    assert_int_equal(b->len, HEADER + 8);
    assert_int_equal(sql_request_decode(b->data, b->len, &r, NULL, 0), 0);
    assert_int_equal(r.n_params, 0);
    assert_null(r.params);
    sql_request_free(&r);
    buf_free(b);
}

/* decode_copy decodes an exact-size heap copy of the first @len bytes, so
 * that ASan catches any read past them. */
static int decode_copy(const uint8_t *p, size_t len, char *msg, size_t msg_len)
{
    uint8_t *copy = malloc(len > 0 ? len : 1);
    struct sql_request r;
    int rc;

    assert_non_null(copy);
    if (len > 0) {
        memcpy(copy, p, len);
    }
    rc = sql_request_decode(copy, len, &r, msg, msg_len);
    if (rc == 0) {
        sql_request_free(&r);
    }
    free(copy);
    return rc;
}

/* Every strict prefix of a valid payload is refused as corrupt, with a
 * message, without reading past it. */
static void test_every_truncation(void **state)
{
    struct buf *b = encode_all();
    char msg[256];
    size_t cut;

    (void)state;
    for (cut = 0; cut < b->len; cut++) {
        msg[0] = '\0';
        if (decode_copy(b->data, cut, msg, sizeof msg) != SQL_ERR_CORRUPT) {
            fail_msg("prefix of %zu/%zu bytes not refused", cut, b->len);
        }
        assert_true(msg[0] != '\0');
    }
    assert_int_equal(decode_copy(b->data, b->len, msg, sizeof msg), 0);
    buf_free(b);
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* Malformed fields are refused with the right code: unknown version,
 * reserved flags, trailing bytes, hostile counts and lengths, bad value
 * type, bad name flag, a name missing its terminator. */
static void test_malformed(void **state)
{
    static const uint64_t id[2] = {1, 2};
    struct sql_param one = p_bytes(":n", SQL_TEXT, "v", 1);
    struct buf *b = encode_ok(id, "SELECT :n", &one, 1);
    size_t len = b->len;
    uint8_t *p = malloc(len + 1);
    size_t param = HEADER + strlen("SELECT :n");
    char msg[256];

    (void)state;
    assert_non_null(p);
#define RESET() memcpy(p, b->data, len)
    RESET();
    assert_int_equal(decode_copy(p, len, msg, sizeof msg), 0);

    RESET();
    p[OFF_VERSION] = 4;
    assert_int_equal(decode_copy(p, len, msg, sizeof msg), SQL_ERR_FORMAT);
    assert_non_null(strstr(msg, "version 4"));

    RESET();
    p[0] = 'X';
    assert_int_equal(decode_copy(p, len, msg, sizeof msg), SQL_ERR_CORRUPT);

    RESET();
    p[OFF_FLAGS] = 1;
    assert_int_equal(decode_copy(p, len, msg, sizeof msg), SQL_ERR_CORRUPT);

    RESET();
    p[len] = 0;
    assert_int_equal(decode_copy(p, len + 1, msg, sizeof msg), SQL_ERR_CORRUPT);
    assert_non_null(strstr(msg, "trailing"));

    RESET();
    put32(p + OFF_N_PARAMS, UINT32_MAX);
    assert_int_equal(decode_copy(p, len, msg, sizeof msg), SQL_ERR_CORRUPT);

    RESET();
    put32(p + OFF_N_PARAMS, 0);
    assert_int_equal(decode_copy(p, len, msg, sizeof msg), SQL_ERR_CORRUPT);

    RESET();
    put32(p + OFF_SQL_LEN, UINT32_MAX);
    assert_int_equal(decode_copy(p, len, msg, sizeof msg), SQL_ERR_CORRUPT);

    RESET();
    put32(p + OFF_SQL_LEN, 0);
    assert_int_equal(decode_copy(p, len, msg, sizeof msg), SQL_ERR_CORRUPT);

    RESET();
    p[HEADER + 2] = 0; /* a NUL byte inside the SQL text */
    assert_int_equal(decode_copy(p, len, msg, sizeof msg), SQL_ERR_CORRUPT);

    RESET();
    p[param] = 0;
    assert_int_equal(decode_copy(p, len, msg, sizeof msg), SQL_ERR_CORRUPT);
    RESET();
    p[param] = 6;
    assert_int_equal(decode_copy(p, len, msg, sizeof msg), SQL_ERR_CORRUPT);
    RESET();
    p[param + 1] = 2;
    assert_int_equal(decode_copy(p, len, msg, sizeof msg), SQL_ERR_CORRUPT);
    RESET();
    put32(p + param + 2, UINT32_MAX); /* name length */
    assert_int_equal(decode_copy(p, len, msg, sizeof msg), SQL_ERR_CORRUPT);
    RESET();
    put32(p + param + 2, 0);
    assert_int_equal(decode_copy(p, len, msg, sizeof msg), SQL_ERR_CORRUPT);
    RESET();
    p[param + 6 + 2] = 'x'; /* the name's terminating NUL */
    assert_int_equal(decode_copy(p, len, msg, sizeof msg), SQL_ERR_CORRUPT);
    RESET();
    p[param + 6] = 'n'; /* a name not starting with ? : @ $ */
    assert_int_equal(decode_copy(p, len, msg, sizeof msg), SQL_ERR_CORRUPT);
    RESET();
    put32(p + param + 9, UINT32_MAX); /* value length */
    assert_int_equal(decode_copy(p, len, msg, sizeof msg), SQL_ERR_CORRUPT);
#undef RESET
    free(p);
    buf_free(b);
}

/* Seeded mutations of a valid payload either decode or fail cleanly with
 * CORRUPT or FORMAT: no crash, no overread, no leak. */
static void test_fuzz_mutations(void **state)
{
    struct buf *b = encode_all();
    uint8_t *p = malloc(b->len);
    uint64_t seed = 0x5eed1234u;
    int iter, ok = 0;

    (void)state;
    assert_non_null(p);
    for (iter = 0; iter < 20000; iter++) {
        int k, flips;
        size_t len = b->len;
        int rc;

        memcpy(p, b->data, b->len);
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        flips = 1 + (int)((seed >> 33) % 4);
        for (k = 0; k < flips; k++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            p[(seed >> 33) % b->len] = (uint8_t)(seed >> 17);
        }
        if ((seed >> 60) == 0) {
            len = (size_t)((seed >> 20) % b->len);
        }
        rc = decode_copy(p, len, NULL, 0);
        if (rc != 0 && rc != SQL_ERR_CORRUPT && rc != SQL_ERR_FORMAT) {
            fail_msg("iteration %d: rc %d (seed 0x5eed1234)", iter, rc);
        }
        ok += rc == 0;
    }
    /* Some mutations (inside values) keep the payload valid. */
    assert_true(ok > 0);
    free(p);
    buf_free(b);
}

/* The size limit is exact, and the message names both numbers. */
static void test_toobig(void **state)
{
    static const uint64_t id[2] = {1, 1};
    const char *sql = "INSERT INTO t VALUES (?)";
    struct sql_param p = p_bytes(NULL, SQL_BLOB, blob_bytes, sizeof blob_bytes);
    struct buf *b = NULL;
    size_t len;
    char msg[256], want[256];

    (void)state;
    assert_int_equal(encode_request(id, sql, strlen(sql), &p, 1, UINT64_MAX, &b,
                                    msg, sizeof msg),
                     0);
    len = b->len;
    buf_free(b);
    b = NULL;
    assert_int_equal(
        encode_request(id, sql, strlen(sql), &p, 1, len, &b, msg, sizeof msg),
        0);
    assert_int_equal(b->len, len);
    buf_free(b);
    b = NULL;
    assert_int_equal(encode_request(id, sql, strlen(sql), &p, 1, len - 1, &b,
                                    msg, sizeof msg),
                     SQL_ERR_TOOBIG);
    assert_null(b);
    snprintf(want, sizeof want,
             "request of %zu bytes exceeds max_request_bytes (%zu)", len,
             len - 1);
    assert_string_equal(msg, want);
}

/* Invalid arguments are refused before anything is allocated. */
static void test_invalid(void **state)
{
    static const uint64_t id[2] = {1, 1};
    struct sql_param p;
    struct buf *b = NULL;
    char msg[256];

    (void)state;
    assert_int_equal(
        encode_request(id, "", 0, NULL, 0, UINT64_MAX, &b, msg, sizeof msg),
        SQL_ERR_INVALID);
    assert_int_equal(
        encode_request(id, "a\0b", 3, NULL, 0, UINT64_MAX, &b, msg, sizeof msg),
        SQL_ERR_INVALID);
    /* No statement: whitespace, semicolons and comments only; an
     * unterminated comment runs to the end. A statement after them is
     * one. */
    {
        static const char *const none[] = {"  ;  ", " ; -- x\n /* y */ ;",
                                           "-- only", "/* open", ";;\t\r\n"};
        for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
            assert_int_equal(encode_request(id, none[i], strlen(none[i]), NULL,
                                            0, UINT64_MAX, &b, msg, sizeof msg),
                             SQL_ERR_INVALID);
            assert_non_null(strstr(msg, "empty SQL: no statement"));
        }
    }
    assert_int_equal(encode_request(id, " ; /* c */ SELECT 1", 19, NULL, 0,
                                    UINT64_MAX, &b, msg, sizeof msg),
                     0);
    buf_free(b);
    b = NULL;
    p = p_null(NULL);
    p.value.type = 9;
    assert_int_equal(encode_request(id, "SELECT ?", 8, &p, 1, UINT64_MAX, &b,
                                    msg, sizeof msg),
                     SQL_ERR_INVALID);
    assert_non_null(strstr(msg, "parameter 1"));
    p = p_bytes(NULL, SQL_TEXT, NULL, 3);
    assert_int_equal(encode_request(id, "SELECT ?", 8, &p, 1, UINT64_MAX, &b,
                                    msg, sizeof msg),
                     SQL_ERR_INVALID);
    p = p_int("a", 1);
    assert_int_equal(encode_request(id, "SELECT :a", 9, &p, 1, UINT64_MAX, &b,
                                    msg, sizeof msg),
                     SQL_ERR_INVALID);
    assert_null(b);
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    int i;

    for (i = 7; i >= 0; i--) {
        v = v << 8 | p[i];
    }
    return v;
}

/* Stamping writes the payload with the time and seed patched at their
 * fixed offsets into the caller's buffer; the input is untouched and the
 * rest is identical. Stamping in place gives the same bytes. */
static void test_stamp(void **state)
{
    struct buf *b = encode_all();
    struct buf *s = buf_new(b->len);
    struct buf *junk = buf_copy("not a request at all, no", 24);
    struct buf *out = buf_new(24);
    struct sql_stamp st = {.time_ms = -1234567890123LL,
                           .seed = 0xfedcba9876543210ULL,
                           .max_steps = 777000};
    struct sql_request r;
    uint64_t id[2];
    int64_t t = 42;

    (void)state;
    assert_int_equal(sql_request_stamp(b->data, b->len, &st, s->data), 0);
    assert_true(get64(b->data + OFF_TIME) == 0);
    assert_true(get64(b->data + OFF_SEED) == 0);
    assert_true(get64(b->data + OFF_MAX_STEPS) == 0);
    assert_true(get64(s->data + OFF_TIME) == (uint64_t)-1234567890123LL);
    assert_true(get64(s->data + OFF_MAX_STEPS) == 777000);
    assert_memory_equal(s->data, b->data, OFF_TIME);
    assert_memory_equal(s->data + HEADER - 4, b->data + HEADER - 4,
                        b->len - HEADER + 4);
    assert_int_equal(sql_request_decode(s->data, s->len, &r, NULL, 0), 0);
    assert_true(r.time_ms == -1234567890123LL);
    assert_true(r.seed == 0xfedcba9876543210ULL);
    assert_true(r.max_steps == 777000);
    sql_request_free(&r);

    assert_int_equal(sql_request_id(s->data, s->len, id), 0);
    assert_true(id[0] == UINT64_MAX && id[1] == 12345);
    assert_int_equal(sql_request_id(s->data, HEADER - 1, id), SQL_ERR_CORRUPT);

    /* The stamp alone, read from the header: 0 before stamping; no
     * stamp in what is no request (*out untouched). */
    assert_int_equal(sql_request_time(s->data, s->len, &t), 0);
    assert_true(t == -1234567890123LL);
    assert_int_equal(sql_request_time(b->data, b->len, &t), 0);
    assert_true(t == 0);
    t = 42;
    assert_int_equal(sql_request_time(s->data, HEADER - 1, &t),
                     SQL_ERR_CORRUPT);
    assert_int_equal(sql_request_time(junk->data, junk->len, &t),
                     SQL_ERR_CORRUPT);
    assert_true(t == 42);

    assert_int_equal(sql_request_stamp(b->data, b->len, &st, b->data), 0);
    assert_memory_equal(b->data, s->data, b->len);

    memset(out->data, 0xaa, out->len);
    assert_int_equal(sql_request_stamp(junk->data, junk->len, &st, out->data),
                     SQL_ERR_CORRUPT);
    assert_int_equal(out->data[0], 0xaa);
    assert_int_equal(out->data[23], 0xaa);
    buf_free(out);
    buf_free(junk);
    buf_free(s);
    buf_free(b);
}

/* sql_request_encode writes exactly the size sql_request_size gave, and
 * refuses another size or an invalid request without writing. */
static void test_encode_size(void **state)
{
    static const uint64_t id[2] = {7, 8};
    const char *sql = "SELECT :n";
    struct sql_param p = p_int(":n", 5);
    unsigned char out[128];
    uint64_t got[2];
    size_t len = 0;
    char msg[256];

    (void)state;
    assert_int_equal(sql_request_size(sql, strlen(sql), &p, 1, UINT64_MAX, &len,
                                      msg, sizeof msg),
                     0);
    assert_true(len < sizeof out);
    memset(out, 0xaa, sizeof out);
    assert_int_equal(
        sql_request_encode(id, sql, strlen(sql), &p, 1, out, len - 1),
        SQL_ERR_INVALID);
    assert_int_equal(out[0], 0xaa);
    assert_int_equal(sql_request_encode(id, "", 0, NULL, 0, out, len),
                     SQL_ERR_INVALID);
    assert_int_equal(out[0], 0xaa);
    assert_int_equal(sql_request_encode(id, sql, strlen(sql), &p, 1, out, len),
                     0);
    assert_int_equal(out[len], 0xaa);
    assert_int_equal(sql_request_id(out, len, got), 0);
    assert_true(got[0] == 7 && got[1] == 8);
    assert_string_equal(sql_strerror(SQL_ERR_TOOBIG), "too big");
    assert_string_equal(sql_strerror(0), "ok");
    assert_string_equal(sql_strerror(99), "unknown error");
}

/* A payload of format version 1 (written before the work budget: no
 * max_steps, sql_len at offset 40) is still decoded, with no budget, so
 * the entries of an old log apply; it is never stamped again. */
static void test_version1_decoded(void **state)
{
    static const uint64_t id[2] = {7, 8};
    struct sql_param one = p_int(NULL, 42);
    struct buf *b = encode_ok(id, "SELECT ?", &one, 1);
    struct buf *v1 = buf_new(b->len - 8);
    struct sql_stamp st = {.time_ms = 1, .seed = 2, .max_steps = 3};
    struct sql_request r;
    char msg[256];

    (void)state;
    /* v1 = v2 without the 8 bytes of max_steps. */
    memcpy(v1->data, b->data, OFF_MAX_STEPS);
    memcpy(v1->data + OFF_MAX_STEPS, b->data + OFF_SQL_LEN,
           b->len - OFF_SQL_LEN);
    v1->data[OFF_VERSION] = 1;
    assert_int_equal(sql_request_decode(v1->data, v1->len, &r, msg, sizeof msg),
                     0);
    assert_int_equal(r.sql_len, strlen("SELECT ?"));
    assert_memory_equal(r.sql, "SELECT ?", r.sql_len);
    assert_int_equal(r.n_params, 1);
    assert_true(r.params[0].value.integer == 42);
    assert_true(r.max_steps == 0);
    assert_true(r.id[0] == 7 && r.id[1] == 8);
    sql_request_free(&r);
    assert_int_equal(sql_request_stamp(v1->data, v1->len, &st, v1->data),
                     SQL_ERR_FORMAT);
    buf_free(v1);
    buf_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_no_params),
        cmocka_unit_test(test_every_truncation),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_fuzz_mutations),
        cmocka_unit_test(test_toobig),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_stamp),
        cmocka_unit_test(test_encode_size),
        cmocka_unit_test(test_version1_decoded),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
