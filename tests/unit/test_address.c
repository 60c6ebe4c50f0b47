/* Unit tests of raft/address.c: every accepted form, every refusal and
 * its message, formatting round trips, equality, loopback and wildcards. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "raft/address.h"
#include "raft/err.h"

/* parse_ok parses @text, checks kind, host and port, and that it formats
 * back to @text. */
static void parse_ok(const char *text, int kind, const char *host,
                     unsigned port)
{
    struct raft_address a;
    char err[160] = "";
    char back[RAFT_ADDRESS_TEXT_MAX + 1];
    int rc = raft_address_parse(text, &a, err, sizeof err);

    if (rc != 0) {
        fail_msg("'%s': %s", text, err);
    }
    assert_int_equal(a.kind, kind);
    assert_string_equal(a.host, host);
    assert_int_equal(a.port, port);
    assert_int_equal(raft_address_format(&a, back, sizeof back), strlen(text));
    assert_string_equal(back, text);
}

/* parse_bad checks that @text is refused with a message holding @why, and
 * that the output is not written. */
static void parse_bad(const char *text, const char *why)
{
    struct raft_address a;
    struct raft_address untouched;
    char err[200] = "";

    memset(&a, 0x5a, sizeof a);
    untouched = a;
    assert_int_equal(raft_address_parse(text, &a, err, sizeof err),
                     RAFT_INVALID);
    if (strstr(err, why) == NULL) {
        fail_msg("'%s': message '%s' lacks '%s'", text, err, why);
    }
    assert_memory_equal(&a, &untouched, sizeof a);
}

/* IPv4 literals, bracketed IPv6 literals (with a zone) and hostnames. */
static void test_accepted(void **state)
{
    (void)state;
    parse_ok("127.0.0.1:7001", RAFT_ADDRESS_IPV4, "127.0.0.1", 7001);
    parse_ok("0.0.0.0:1", RAFT_ADDRESS_IPV4, "0.0.0.0", 1);
    parse_ok("255.255.255.255:65535", RAFT_ADDRESS_IPV4, "255.255.255.255",
             65535);
    parse_ok("[::1]:7001", RAFT_ADDRESS_IPV6, "::1", 7001);
    parse_ok("[::]:7001", RAFT_ADDRESS_IPV6, "::", 7001);
    parse_ok("[fe80::1%eth0]:7001", RAFT_ADDRESS_IPV6, "fe80::1%eth0", 7001);
    parse_ok("[2001:db8::a:b]:9", RAFT_ADDRESS_IPV6, "2001:db8::a:b", 9);
    parse_ok("[::ffff:10.0.0.1]:9", RAFT_ADDRESS_IPV6, "::ffff:10.0.0.1", 9);
    parse_ok("localhost:7001", RAFT_ADDRESS_NAME, "localhost", 7001);
    parse_ok("node-1.example.com:7001", RAFT_ADDRESS_NAME, "node-1.example.com",
             7001);
    parse_ok("N1:80", RAFT_ADDRESS_NAME, "N1", 80);
    parse_ok("1node:80", RAFT_ADDRESS_NAME, "1node", 80);
    parse_ok("10.0.0.x:80", RAFT_ADDRESS_NAME, "10.0.0.x", 80);
}

/* Each malformed address is refused with a message naming the fault. */
static void test_refused(void **state)
{
    char longname[RAFT_ADDRESS_TEXT_MAX + 8];

    (void)state;
    parse_bad("", "empty address");
    parse_bad("127.0.0.1", "has no port");
    parse_bad("127.0.0.1:", "no port after ':'");
    parse_bad("127.0.0.1:70000", "port 70000 out of range (1-65535)");
    parse_bad("127.0.0.1:0", "port 0 out of range");
    parse_bad("127.0.0.1:123456789012", "out of range");
    parse_bad("127.0.0.1:-1", "port '-1' is not a number");
    parse_bad("127.0.0.1:7o01", "port '7o01' is not a number");
    parse_bad(":7001", "empty host");
    parse_bad("::1:7001", "IPv6 literal needs brackets");
    parse_bad("fe80::1%eth0:7001", "IPv6 literal needs brackets");
    parse_bad("[::1:7001", "lacks its closing ']'");
    parse_bad("[::1]7001", "no ':port' after the IPv6 literal");
    parse_bad("[::1]", "no ':port'");
    parse_bad("[]:7001", "empty host");
    parse_bad("[127.0.0.1]:7001", "'[127.0.0.1]' is not an IPv6 literal");
    parse_bad("[node1]:7001", "is not an IPv6 literal");
    parse_bad("[fe80::1%]:7001", "IPv6 zone '' of 0 characters");
    parse_bad("[fe80::1%a b]:7001", "is not an interface name");
    parse_bad("[fe80::1%abcdefghijklmnop]:1", "of 16 characters, want 1-15");
    parse_bad("10.0.0.256:7001", "'10.0.0.256' is not an IPv4 address");
    parse_bad("010.0.0.1:7001", "is not an IPv4 address");
    parse_bad("10.0.0:7001", "is not an IPv4 address");
    parse_bad("12:7001", "is not an IPv4 address");
    parse_bad("node_1:7001", "hostname 'node_1' has '_'");
    parse_bad("a..b:7001", "has an empty label");
    parse_bad(".a:7001", "has an empty label");
    parse_bad("a.:7001", "has an empty label");
    parse_bad("-a:7001", "starts or ends with '-'");
    parse_bad("a-.b:7001", "starts or ends with '-'");
    parse_bad("a b:7001", "has ' '");
    memset(longname, 'a', sizeof longname);
    snprintf(longname + RAFT_ADDRESS_TEXT_MAX - 4, 8, ":7001");
    parse_bad(longname, "at most 255");
}

/* parse_host checks a bare host and port as the text parser does; the
 * hostname rules that the text limit hides are checked too. */
static void test_parse_host(void **state)
{
    struct raft_address a;
    char err[200];
    char name[300];

    (void)state;
    assert_int_equal(raft_address_parse_host("::1", 7, &a, err, sizeof err), 0);
    assert_int_equal(a.kind, RAFT_ADDRESS_IPV6);
    assert_int_equal(raft_address_format(&a, name, sizeof name), 7);
    assert_string_equal(name, "[::1]:7");
    assert_int_equal(
        raft_address_parse_host("10.1.2.3", 65535, &a, err, sizeof err), 0);
    assert_int_equal(a.kind, RAFT_ADDRESS_IPV4);
    assert_int_equal(raft_address_parse_host("db", 5, &a, err, sizeof err), 0);
    assert_int_equal(a.kind, RAFT_ADDRESS_NAME);
    assert_int_equal(
        raft_address_parse_host("10.1.2.3", 0, &a, err, sizeof err),
        RAFT_INVALID);
    assert_non_null(strstr(err, "port 0 out of range"));
    assert_int_equal(
        raft_address_parse_host("10.1.2.3", 65536, &a, err, sizeof err),
        RAFT_INVALID);
    memset(name, 'a', 254);
    name[254] = '\0';
    assert_int_equal(raft_address_parse_host(name, 1, &a, err, sizeof err),
                     RAFT_INVALID);
    assert_non_null(strstr(err, "hostname of 254 characters, at most 253"));
    memset(name, 'a', 64);
    name[64] = '\0';
    assert_int_equal(raft_address_parse_host(name, 1, &a, err, sizeof err),
                     RAFT_INVALID);
    assert_non_null(strstr(err, "label of 64 characters, at most 63"));
    /* A 253-character name of 63-character labels: with ":1" it fills
     * the 255 bytes, with ":10000" it is 4 bytes too many. */
    memset(name, 'a', 253);
    name[63] = name[127] = name[191] = '.';
    name[253] = '\0';
    assert_int_equal(raft_address_parse_host(name, 1, &a, err, sizeof err), 0);
    assert_int_equal(raft_address_parse_host(name, 10000, &a, err, sizeof err),
                     RAFT_INVALID);
    assert_non_null(strstr(err, "more than 255 bytes"));
}

/* addr parses @text, which must be valid. */
static struct raft_address addr(const char *text)
{
    struct raft_address a;

    assert_int_equal(raft_address_parse(text, &a, NULL, 0), 0);
    return a;
}

/* Equality compares IPs as numbers and names ignoring case. */
static void test_equal(void **state)
{
    struct raft_address a = addr("[::1]:7001");
    struct raft_address b = addr("[0:0::0:1]:7001");
    struct raft_address c = addr("Node1:7001");
    struct raft_address d = addr("node1:7001");

    (void)state;
    assert_true(raft_address_equal(&a, &b));
    assert_true(raft_address_equal(&c, &d));
    b = addr("[::1]:7002");
    assert_false(raft_address_equal(&a, &b));
    b = addr("127.0.0.1:7001");
    assert_false(raft_address_equal(&a, &b));
    b = addr("localhost:7001");
    assert_false(raft_address_equal(&a, &b));
    a = addr("[fe80::1%eth0]:1");
    b = addr("[fe80::1%eth1]:1");
    assert_false(raft_address_equal(&a, &b));
    b = addr("[FE80::1%eth0]:1");
    assert_true(raft_address_equal(&a, &b));
    a = addr("10.0.0.1:1");
    b = addr("10.0.0.1:1");
    assert_true(raft_address_equal(&a, &b));
}

/* Loopback: 127/8, ::1, v4-mapped 127/8, localhost; nothing else. */
static void test_loopback_and_wildcard(void **state)
{
    static const char *const loop[] = {"127.0.0.1:1", "127.9.8.7:1",
                                       "[::1]:1",     "[::ffff:127.0.0.1]:1",
                                       "localhost:1", "LocalHost:1"};
    static const char *const off[] = {
        "10.0.0.1:1", "0.0.0.0:1",     "[::]:1",     "[::2]:1",
        "node1:1",    "localhost.a:1", "128.0.0.1:1"};
    struct raft_address a;

    (void)state;
    for (size_t i = 0; i < sizeof loop / sizeof loop[0]; i++) {
        a = addr(loop[i]);
        assert_true(raft_address_loopback(&a));
        assert_false(raft_address_wildcard(&a));
    }
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
        a = addr(off[i]);
        assert_false(raft_address_loopback(&a));
    }
    a = addr("0.0.0.0:1");
    assert_true(raft_address_wildcard(&a));
    a = addr("[::]:1");
    assert_true(raft_address_wildcard(&a));
    a = addr("[0::0]:1");
    assert_true(raft_address_wildcard(&a));
    a = addr("10.0.0.1:1");
    assert_false(raft_address_wildcard(&a));
}

/* A short buffer gets a cut, terminated text and the whole length. */
static void test_format_short_buffer(void **state)
{
    struct raft_address a = addr("[::1]:7001");
    char out[4];

    (void)state;
    assert_int_equal(raft_address_format(&a, out, sizeof out), 10);
    assert_string_equal(out, "[::");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepted),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_parse_host),
        cmocka_unit_test(test_equal),
        cmocka_unit_test(test_loopback_and_wildcard),
        cmocka_unit_test(test_format_short_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
