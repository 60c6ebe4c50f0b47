/* Unit tests of raft/configuration.c: building a configuration, the codec
 * round trip (versions 1 and 2, the auto_promote flag), every decode
 * error, and the bootstrap entry. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "raft/configuration.h"

/* three fills @c with voters 1, 2 and learner 3. */
static void three(struct raft_configuration *c)
{
    raft_configuration_init(c);
    assert_int_equal(raft_configuration_add(c, 1, RAFT_VOTER, "a:1"), 0);
    assert_int_equal(raft_configuration_add(c, 2, RAFT_VOTER, "b:2"), 0);
    assert_int_equal(raft_configuration_add(c, 3, RAFT_LEARNER, NULL), 0);
}

/* Adding, finding, counting and removing servers; each refusal. */
static void test_build(void **state)
{
    struct raft_configuration c;
    char longaddr[RAFT_ADDRESS_MAX + 2];

    (void)state;
    three(&c);
    assert_int_equal(c.n, 3);
    assert_int_equal(raft_configuration_find(&c, 2), 1);
    assert_int_equal(raft_configuration_find(&c, 9), -1);
    assert_int_equal(raft_configuration_role(&c, 3), RAFT_LEARNER);
    assert_int_equal(raft_configuration_role(&c, 9), 0);
    assert_int_equal(raft_configuration_n_voters(&c), 2);
    assert_int_equal(raft_configuration_add(&c, 2, RAFT_VOTER, ""),
                     RAFT_INVALID);
    assert_int_equal(raft_configuration_add(&c, 0, RAFT_VOTER, ""),
                     RAFT_INVALID);
    assert_int_equal(raft_configuration_add(&c, 4, 7, ""), RAFT_INVALID);
    memset(longaddr, 'x', sizeof longaddr - 1);
    longaddr[sizeof longaddr - 1] = '\0';
    assert_int_equal(raft_configuration_add(&c, 4, RAFT_VOTER, longaddr),
                     RAFT_INVALID);
    longaddr[RAFT_ADDRESS_MAX] = '\0';
    assert_int_equal(raft_configuration_add(&c, 4, RAFT_VOTER, longaddr), 0);
    assert_int_equal(raft_configuration_remove(&c, 1), 0);
    assert_int_equal(raft_configuration_remove(&c, 1), RAFT_NOTFOUND);
    assert_int_equal(c.servers[0].id, 2);
    assert_int_equal(c.servers[2].id, 4);
}

/* A full configuration refuses one more server. */
static void test_full(void **state)
{
    struct raft_configuration c;
    raft_id id;

    (void)state;
    raft_configuration_init(&c);
    for (id = 1; id <= RAFT_MAX_SERVERS; id++) {
        assert_int_equal(raft_configuration_add(&c, id, RAFT_VOTER, "x"), 0);
    }
    assert_int_equal(raft_configuration_add(&c, id, RAFT_VOTER, "x"),
                     RAFT_INVALID);
}

/* Encode then decode gives the same configuration, empty ones included. */
static void test_round_trip(void **state)
{
    struct raft_configuration c;
    struct raft_configuration d;
    struct raft_buf *b = NULL;
    uint8_t small[4];

    (void)state;
    three(&c);
    assert_int_equal(raft_configuration_encode_buf(&c, &b), 0);
    assert_int_equal(b->len, raft_configuration_encoded_len(&c));
    assert_int_equal(b->len, 5 + 3 * 11 + 3 + 3);
    assert_int_equal(b->data[0], RAFT_CONFIGURATION_VERSION);
    assert_int_equal(raft_configuration_decode(b->data, b->len, &d, NULL, 0),
                     0);
    assert_true(raft_configuration_equal(&c, &d));
    raft_buf_unref(b);
    assert_int_equal(raft_configuration_encode(&c, small, sizeof small),
                     RAFT_INVALID);

    raft_configuration_init(&c);
    assert_int_equal(raft_configuration_encode_buf(&c, &b), 0);
    assert_int_equal(b->len, RAFT_CONFIGURATION_HEADER);
    assert_int_equal(raft_configuration_decode(b->data, b->len, &d, NULL, 0),
                     0);
    assert_int_equal(d.n, 0);
    raft_buf_unref(b);
}

/* expect_invalid checks that @c is refused alike by
 * raft_configuration_valid and by the encoder. */
static void expect_invalid(const struct raft_configuration *c)
{
    struct raft_buf *b = NULL;

    assert_false(raft_configuration_valid(c));
    assert_int_equal(raft_configuration_encode_buf(c, &b), RAFT_INVALID);
    assert_null(b);
}

/* The encoder refuses what the decoder would refuse, and
 * raft_configuration_valid tells it without encoding. */
static void test_encode_invalid(void **state)
{
    struct raft_configuration c;

    (void)state;
    three(&c);
    assert_true(raft_configuration_valid(&c));
    c.servers[1].id = 1;
    expect_invalid(&c);
    three(&c);
    c.servers[1].role = 0;
    expect_invalid(&c);
    three(&c);
    c.servers[0].id = 0;
    expect_invalid(&c);
    three(&c);
    c.servers[0].auto_promote = true; /* a voter */
    expect_invalid(&c);
    three(&c);
    c.servers[1].role = RAFT_LEARNER;
    c.servers[1].auto_promote = true;
    assert_true(raft_configuration_valid(&c));
    c.n = RAFT_MAX_SERVERS + 1;
    expect_invalid(&c);
}

/* expect_decode checks that decoding @len bytes at @p fails with @rc and
 * a message holding @what, leaving the output alone. */
static void expect_decode(const uint8_t *p, size_t len, int rc,
                          const char *what)
{
    struct raft_configuration d;
    char msg[128] = "";

    d.n = 77;
    assert_int_equal(raft_configuration_decode(p, len, &d, msg, sizeof msg),
                     rc);
    assert_int_equal(d.n, 77);
    if (strstr(msg, what) == NULL) {
        print_error("message '%s' lacks '%s'\n", msg, what);
        fail();
    }
}

/* Every decode error has its code and its message. */
static void test_decode_errors(void **state)
{
    struct raft_configuration c;
    uint8_t b[64];
    uint8_t bad[64];
    size_t len;

    (void)state;
    raft_configuration_init(&c);
    assert_int_equal(raft_configuration_add(&c, 5, RAFT_VOTER, "ab"), 0);
    len = raft_configuration_encoded_len(&c);
    assert_int_equal(raft_configuration_encode(&c, b, sizeof b), 0);

    expect_decode(b, 0, RAFT_CORRUPT, "empty");
    memcpy(bad, b, len);
    bad[0] = 3;
    expect_decode(bad, len, RAFT_FORMAT, "unknown version 3");
    expect_decode(b, 3, RAFT_CORRUPT, "truncated count");
    memcpy(bad, b, len);
    bad[1] = RAFT_MAX_SERVERS + 1;
    expect_decode(bad, len, RAFT_CORRUPT, "at most");
    expect_decode(b, 10, RAFT_CORRUPT, "server 0 truncated");
    memcpy(bad, b, len);
    memset(bad + 5, 0, 8);
    expect_decode(bad, len, RAFT_CORRUPT, "zero id");
    memcpy(bad, b, len);
    bad[13] = 9;
    expect_decode(bad, len, RAFT_CORRUPT, "unknown role 9");
    memcpy(bad, b, len);
    bad[14] = 0;
    bad[15] = 1;
    expect_decode(bad, len, RAFT_CORRUPT, "address of 256 bytes");
    expect_decode(b, len - 1, RAFT_CORRUPT, "address truncated");
    memcpy(bad, b, len);
    bad[len - 1] = 0;
    expect_decode(bad, len, RAFT_CORRUPT, "NUL in address");
    memcpy(bad, b, len);
    bad[len] = 0;
    expect_decode(bad, len + 1, RAFT_CORRUPT, "1 trailing bytes");

    /* A duplicate id: two copies of the same server. */
    memcpy(bad, b, len);
    bad[1] = 2;
    memcpy(bad + len, b + 5, len - 5);
    expect_decode(bad, len + len - 5, RAFT_CORRUPT, "duplicate id 5");
}

/* A learner's auto_promote flag makes the encoding version 2, one byte
 * more per server, and round-trips; entries written before it (version 1,
 * the bytes below) decode as before, unflagged; a version 2 encoding
 * refuses flags on a voter, unknown flags, and no flag at all (version 1
 * encodes that). */
static void test_flags(void **state)
{
    static const uint8_t v1[] = {1, 1, 0, 0, 0, 7, 0,   0,   0,  0,
                                 0, 0, 0, 2, 3, 0, 'a', ':', '1'};
    struct raft_configuration c;
    struct raft_configuration d;
    struct raft_buf *b = NULL;
    uint8_t bad[64];

    (void)state;
    assert_int_equal(raft_configuration_decode(v1, sizeof v1, &d, NULL, 0), 0);
    assert_int_equal(d.n, 1);
    assert_int_equal(d.servers[0].id, 7);
    assert_int_equal(d.servers[0].role, RAFT_LEARNER);
    assert_false(d.servers[0].auto_promote);
    assert_string_equal(d.servers[0].address, "a:1");
    assert_int_equal(raft_configuration_encoded_len(&d), sizeof v1);

    three(&c);
    c.servers[2].auto_promote = true;
    assert_int_equal(raft_configuration_encode_buf(&c, &b), 0);
    assert_int_equal(b->len, 5 + 3 * 12 + 3 + 3);
    assert_int_equal(b->data[0], RAFT_CONFIGURATION_VERSION_FLAGS);
    assert_int_equal(raft_configuration_decode(b->data, b->len, &d, NULL, 0),
                     0);
    assert_true(d.servers[2].auto_promote);
    assert_false(d.servers[0].auto_promote);
    assert_true(raft_configuration_equal(&c, &d));
    d.servers[2].auto_promote = false;
    assert_false(raft_configuration_equal(&c, &d));

    /* Server 0 (a voter, 1 + 4 + 8 + 1 bytes in): its flags byte. */
    memcpy(bad, b->data, b->len);
    bad[14] = 1;
    expect_decode(bad, b->len, RAFT_CORRUPT, "on a voter");
    memcpy(bad, b->data, b->len);
    bad[14] = 4;
    expect_decode(bad, b->len, RAFT_CORRUPT, "unknown");
    /* Server 2 (the learner) unflagged: no flag left. */
    memcpy(bad, b->data, b->len);
    bad[b->len - 3] = 0;
    expect_decode(bad, b->len, RAFT_CORRUPT, "without any flag");
    raft_buf_unref(b);
}

/* Founding servers given the same servers in any order write the same
 * bytes: entry 1 of term 1, all voters, sorted by id; hard state term 1. */
static void test_bootstrap(void **state)
{
    struct raft_configuration a;
    struct raft_configuration b;
    struct raft_configuration d;
    struct raft_entry ea;
    struct raft_entry eb;
    struct raft_hard_state hs;

    (void)state;
    three(&a);
    raft_configuration_init(&b);
    assert_int_equal(raft_configuration_add(&b, 3, RAFT_VOTER, NULL), 0);
    assert_int_equal(raft_configuration_add(&b, 1, RAFT_VOTER, "a:1"), 0);
    assert_int_equal(raft_configuration_add(&b, 2, RAFT_VOTER, "b:2"), 0);
    assert_int_equal(raft_configuration_bootstrap(&a, &ea, &hs), 0);
    assert_int_equal(raft_configuration_bootstrap(&b, &eb, &hs), 0);
    assert_int_equal(ea.index, 1);
    assert_int_equal(ea.term, 1);
    assert_int_equal(ea.type, RAFT_ENTRY_CONFIG);
    assert_int_equal(hs.term, 1);
    assert_int_equal(hs.vote, 0);
    assert_int_equal(ea.data->len, eb.data->len);
    assert_memory_equal(ea.data->data, eb.data->data, ea.data->len);
    assert_int_equal(
        raft_configuration_decode(ea.data->data, ea.data->len, &d, NULL, 0), 0);
    assert_int_equal(raft_configuration_n_voters(&d), 3);
    assert_int_equal(d.servers[2].id, 3);
    raft_buf_unref(ea.data);
    raft_buf_unref(eb.data);

    raft_configuration_init(&a);
    assert_int_equal(raft_configuration_bootstrap(&a, &ea, &hs), RAFT_INVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_build),
        cmocka_unit_test(test_full),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_encode_invalid),
        cmocka_unit_test(test_decode_errors),
        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_bootstrap),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
