/* Tests of ext/runtime/config.c: addresses (listen, advertise, cluster=, dial=
 * and join= with IPv4, IPv6 and hostnames, wildcards, the advertised
 * address each combination gives, and the loopback gate that insecure=on
 * lifts), a blank inside a list, and the paths a start needs. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ext/runtime/config.h"
#include "raft/configuration.h"

/* parse_ok parses @text, which must be valid, into a fresh config. */
static struct ext_config *parse_ok(const char *text)
{
    struct ext_config *c = calloc(1, sizeof *c);
    char err[512] = "";

    assert_non_null(c);
    if (ext_config_parse(text, "/tmp/x.db", c, err, sizeof err) != 0) {
        fail_msg("'%s': %s", text, err);
    }
    return c;
}

/* parse_bad checks that @text is refused with a message holding @why. */
static void parse_bad(const char *text, const char *why)
{
    struct ext_config *c = calloc(1, sizeof *c);
    char err[512] = "";

    assert_non_null(c);
    assert_int_equal(ext_config_parse(text, "/tmp/x.db", c, err, sizeof err),
                     RAFT_INVALID);
    if (strstr(err, why) == NULL) {
        fail_msg("'%s': message '%s' lacks '%s'", text, err, why);
    }
    free(c);
}

/* check_listen checks what @c binds and advertises. */
static void check_listen(struct ext_config *c, const char *host, unsigned port,
                         const char *advertise)
{
    assert_string_equal(c->listen_host, host);
    assert_int_equal(c->listen_port, port);
    assert_string_equal(c->advertise, advertise);
    free(c);
}

/* The advertised address: advertise=, else a listen= that is no wildcard,
 * else this id's cluster= address. */
static void test_advertised(void **state)
{
    char line[256];

    (void)state;
    check_listen(parse_ok("id=1 cluster=1@127.0.0.1:7001"), "127.0.0.1", 7001,
                 "127.0.0.1:7001");
    check_listen(parse_ok("id=1 listen=127.0.0.1:7001"), "127.0.0.1", 7001,
                 "127.0.0.1:7001");
    check_listen(parse_ok("id=1 cluster=1@[::1]:7001"), "::1", 7001,
                 "[::1]:7001");
    check_listen(parse_ok("id=1 cluster=1@localhost:7001,2@localhost:7002"),
                 "127.0.0.1", 7001, "localhost:7001");
    check_listen(parse_ok("id=1 listen=localhost:7001"), "127.0.0.1", 7001,
                 "localhost:7001");
    check_listen(parse_ok("id=1 insecure=on listen=0.0.0.0:7001 "
                          "cluster=1@node1:7001,2@node2:7001"),
                 "0.0.0.0", 7001, "node1:7001");
    check_listen(parse_ok("id=1 insecure=on listen=[::]:7001 "
                          "cluster=1@node1:7001,2@node2:7001"),
                 "::", 7001, "node1:7001");
    check_listen(parse_ok("id=1 insecure=on listen=0.0.0.0:7001 "
                          "advertise=node1:9001"),
                 "0.0.0.0", 7001, "node1:9001");
    /* NAT: listen differs from the cluster address advertise= gives. */
    check_listen(parse_ok("id=1 insecure=on listen=10.0.0.5:7001 "
                          "advertise=203.0.113.9:9001 "
                          "cluster=1@203.0.113.9:9001,2@203.0.113.10:9001"),
                 "10.0.0.5", 7001, "203.0.113.9:9001");
    check_listen(parse_ok("id=2 insecure=on listen=0.0.0.0:7002 "
                          "advertise=db2.example.com:7002 "
                          "join=db1.example.com:7001"),
                 "0.0.0.0", 7002, "db2.example.com:7002");
    /* The configuration cluster= builds holds the addresses as given. */
    {
        struct ext_config *c =
            parse_ok("id=1 cluster=1@[::1]:7001,2@localhost:7002");
        struct raft_configuration conf;
        char host[64];
        uint16_t port;
        assert_true(ext_config_cluster(c, &conf));
        assert_string_equal(conf.servers[0].address, "[::1]:7001");
        assert_string_equal(conf.servers[1].address, "localhost:7002");
        assert_int_equal(ext_config_dial(c, 2, conf.servers[1].address, host,
                                         sizeof host, &port),
                         0);
        assert_string_equal(host, "localhost");
        assert_int_equal(port, 7002);
        assert_int_equal(
            ext_config_dial(c, 1, "[::1]:7001", host, sizeof host, &port), 0);
        assert_string_equal(host, "::1");
        free(c);
    }
    snprintf(line, sizeof line, "id=1 cluster=1@[::1]:7001 dial=2@[::1]:1");
    parse_bad(line, "dial: server 2 is not in cluster");
}

/* Each inconsistent or malformed address is refused naming its key. */
static void test_refused(void **state)
{
    (void)state;
    {
        struct ext_config *c =
            parse_ok("id=1 cluster=1@127.0.0.1:7001 bootstrap_from=/data/a.db");
        assert_string_equal(c->bootstrap_from, "/data/a.db");
        free(c);
    }
    parse_bad("id=1 listen=127.0.0.1:70000",
              "listen: '127.0.0.1:70000' is "
              "not host:port: port 70000 out "
              "of range (1-65535)");
    parse_bad("id=1 listen=::1:7001", "IPv6 literal needs brackets");
    parse_bad("id=1 insecure=on listen=node1:7001",
              "listen: 'node1:7001' is a hostname; listen= takes the IP");
    parse_bad("id=1 insecure=on listen=0.0.0.0:7001 join=127.0.0.1:7002",
              "listen: 0.0.0.0:7001 is a wildcard: give advertise= (the "
              "address peers dial to reach this node) or a cluster= entry "
              "for server 1");
    parse_bad("id=1 insecure=on listen=[::]:7001 join=127.0.0.1:7002",
              "listen: [::]:7001 is a wildcard");
    parse_bad(
        "id=1 insecure=on listen=0.0.0.0:7001 "
        "cluster=1@node1:7002,2@node2:7002",
        "listen: port 7001 differs from server 1's address "
        "node1:7002 in cluster; give advertise=");
    parse_bad("id=1 insecure=on cluster=1@node1:7001",
              "listen: missing, and server 1's address node1:7001 in "
              "cluster is a hostname: give listen=");
    parse_bad("id=1 advertise=127.0.0.1:7001", "advertise: needs listen=");
    parse_bad(
        "id=2 listen=127.0.0.1:7002 join=127.0.0.1:7001 "
        "bootstrap_from=/data/old.db",
        "bootstrap_from: needs cluster= (it fills the first node of a "
        "new cluster; a joining node receives the data as a snapshot)");
    parse_bad(
        "id=1 cluster=1@127.0.0.1:7001 force_new_cluster=1 "
        "bootstrap_from=/data/old.db",
        "bootstrap_from: cannot be given with force_new_cluster=1");
    parse_bad("id=1 cluster=1@127.0.0.1:7001 bootstrap_from=",
              "bootstrap_from: empty or too long");
    parse_bad("id=1 listen=127.0.0.1:7001 advertise=0.0.0.0:7001",
              "advertise: '0.0.0.0:7001' is a wildcard");
    parse_bad(
        "id=1 listen=127.0.0.1:7001 advertise=127.0.0.1:7002 "
        "cluster=1@127.0.0.1:7001",
        "advertise: 127.0.0.1:7002 differs from server 1's address "
        "127.0.0.1:7001 in cluster");
    parse_bad("id=1 cluster=1@127.0.0.1:7001 listen=localhost:7001",
              "listen: localhost:7001 differs from server 1's address");
    parse_bad("id=1 cluster=1@0.0.0.0:7001",
              "cluster: '0.0.0.0:7001' is a wildcard");
    parse_bad("id=1 cluster=1@[::1]:7001,2@[0::1]:7001",
              "cluster: address [0::1]:7001 appears twice");
    parse_bad("id=1 cluster=1@localhost:7001,2@LOCALHOST:7001",
              "appears twice");
    parse_bad("id=2 listen=127.0.0.1:7002 join=[::]:7001",
              "join: '[::]:7001' is a wildcard");
    parse_bad("id=1 insecure=yes", "insecure: 'yes' is not on or off");
}

/* Off loopback needs authenticated peers (TLS: the three tls_ keys, or
 * secret_file) or insecure=on; localhost counts as loopback, any other
 * hostname does not. */
static void test_loopback_gate(void **state)
{
    static const char *const off[][2] = {
        {"id=1 listen=0.0.0.0:7001 advertise=127.0.0.1:7001", "listen: "},
        {"id=1 listen=10.1.2.3:7001",
         "listen: '10.1.2.3:7001' is off "
         "loopback"},
        {"id=1 listen=127.0.0.1:7001 advertise=node1:7001", "advertise: "},
        {"id=1 cluster=1@127.0.0.1:7001,2@[2001:db8::2]:7001",
         "cluster: server 2's address: '[2001:db8::2]:7001' is off "
         "loopback"},
        {"id=1 cluster=1@127.0.0.1:7001,2@node2:7001",
         "cluster: server 2's address"},
        {"id=1 cluster=1@127.0.0.1:7001,2@127.0.0.1:7002 dial=2@10.0.0.2:1",
         "dial: server 2: '10.0.0.2:1' is off loopback"},
        {"id=2 listen=127.0.0.1:7002 join=node1:7001", "join: "},
    };
    char line[256];

    (void)state;
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
        parse_bad(off[i][0], off[i][1]);
        parse_bad(off[i][0], "anyone who can reach the port can write");
        snprintf(line, sizeof line, "%s insecure=on", off[i][0]);
        free(parse_ok(line));
        snprintf(line, sizeof line, "%s tls_cert=c tls_key=k tls_ca=a",
                 off[i][0]);
        free(parse_ok(line));
        snprintf(line, sizeof line, "%s secret_file=s", off[i][0]);
        free(parse_ok(line));
        /* Two of the three tls_ keys authenticate nothing. */
        snprintf(line, sizeof line, "%s tls_cert=c tls_ca=a", off[i][0]);
        parse_bad(line, "tls_key: missing");
    }
    free(
        parse_ok("id=1 cluster=1@[::1]:7001,2@localhost:7002,"
                 "3@127.0.0.3:7003 dial=2@127.0.0.1:9002"));
    {
        struct ext_config *c = parse_ok("id=1 listen=127.0.0.1:1");
        assert_false(c->insecure);
        assert_false(ext_config_peers_authenticated(c));
        free(c);
        c = parse_ok("id=1 listen=10.0.0.1:1 secret_file=s");
        assert_true(ext_config_peers_authenticated(c));
        free(c);
    }
}

/* metrics_check returns ext_config_metrics_check's code for @address on
 * the node @text configures, its message in @err (512 bytes) and whether
 * it serves TLS in *@tls. */
static int metrics_check(const char *text, const char *address, bool *tls,
                         char *err)
{
    struct ext_config *c = parse_ok(text);
    int rc;
    err[0] = '\0';
    *tls = false;
    rc = ext_config_metrics_check(c, address, tls, err, 512);
    free(c);
    return rc;
}

/* The metrics endpoint: loopback (IPv4, IPv6) as plain HTTP; off loopback
 * (a wildcard too) only with the node's certificate, then TLS, or with
 * insecure=on; a pre-shared secret does not open it; a hostname or no
 * port refused, each message naming metrics_listen. */
static void test_metrics_listen(void **state)
{
    static const char *const bad[][3] = {
        {"id=1 listen=127.0.0.1:7001", "10.0.0.1:9101", "off loopback"},
        {"id=1 listen=127.0.0.1:7001", "0.0.0.0:9101", "off loopback"},
        {"id=1 listen=127.0.0.1:7001 secret_file=s", "10.0.0.1:9101",
         "a pre-shared secret_file does not count"},
        {"id=1 listen=127.0.0.1:7001", "localhost:9101", "not a hostname"},
        {"id=1 listen=127.0.0.1:7001", "127.0.0.1", "is not host:port"},
    };
    char err[512];
    bool tls;

    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(metrics_check(bad[i][0], bad[i][1], &tls, err),
                         RAFT_INVALID);
        assert_non_null(strstr(err, "metrics_listen: "));
        if (strstr(err, bad[i][2]) == NULL) {
            fail_msg("%s on %s: '%s' lacks '%s'", bad[i][1], bad[i][0], err,
                     bad[i][2]);
        }
    }
    assert_int_equal(metrics_check("id=1 listen=127.0.0.1:7001",
                                   "127.0.0.1:9101", &tls, err),
                     0);
    assert_false(tls);
    assert_int_equal(
        metrics_check("id=1 listen=127.0.0.1:7001", "[::1]:9101", &tls, err),
        0);
    assert_false(tls);
    assert_int_equal(metrics_check("id=1 listen=127.0.0.1:7001 insecure=on",
                                   "10.0.0.1:9101", &tls, err),
                     0);
    assert_false(tls);
    assert_int_equal(
        metrics_check("id=1 listen=127.0.0.1:7001 tls_cert=c tls_key=k "
                      "tls_ca=a",
                      "0.0.0.0:9101", &tls, err),
        0);
    assert_true(tls);
    assert_int_equal(
        metrics_check("id=1 listen=127.0.0.1:7001 tls_cert=c tls_key=k "
                      "tls_ca=a",
                      "127.0.0.1:9101", &tls, err),
        0);
    assert_true(tls);
}

/* The stored configuration's address becomes the listen and advertised
 * address, with the same checks. */
static void test_listen_set(void **state)
{
    struct ext_config *c = parse_ok("id=1");
    char err[512];

    (void)state;
    assert_int_equal(c->listen_port, 0);
    assert_string_equal(c->advertise, "");
    assert_int_equal(ext_config_listen_set(c, "[::1]:7001", err, sizeof err),
                     0);
    assert_string_equal(c->listen_host, "::1");
    assert_string_equal(c->advertise, "[::1]:7001");
    ext_config_listen_format(c, err, sizeof err);
    assert_string_equal(err, "[::1]:7001");
    assert_int_equal(ext_config_listen_set(c, "node1:7001", err, sizeof err),
                     RAFT_INVALID);
    assert_non_null(strstr(err, "is a hostname; give listen="));
    assert_int_equal(ext_config_listen_set(c, "10.0.0.1:7001", err, sizeof err),
                     RAFT_INVALID);
    assert_non_null(strstr(err, "off loopback"));
    c->tls = true; /* as the tls_ keys set it */
    assert_int_equal(ext_config_listen_set(c, "10.0.0.1:7001", err, sizeof err),
                     0);
    c->tls = false;
    c->insecure = true;
    assert_int_equal(ext_config_listen_set(c, "10.0.0.1:7001", err, sizeof err),
                     0);
    assert_int_equal(ext_config_listen_set(c, "0.0.0.0:7001", err, sizeof err),
                     RAFT_INVALID);
    assert_non_null(strstr(err, "a wildcard"));
    free(c);
}

/* A restart with a wildcard listen= and neither advertise= nor cluster=
 * advertises this id's address in the stored configuration, a hostname
 * too (db3:7001, localhost:7001), on the same port. */
static void test_wildcard_restart(void **state)
{
    const char *stored[] = {"db3:7001", "localhost:7001", "10.0.0.3:7001"};
    char err[512];

    (void)state;
    for (unsigned i = 0; i < sizeof stored / sizeof *stored; i++) {
        struct ext_config *c = parse_ok("id=3 insecure=on listen=0.0.0.0:7001");
        assert_string_equal(c->advertise, "");
        assert_int_equal(ext_config_listen_set(c, stored[i], err, sizeof err),
                         0);
        check_listen(c, "0.0.0.0", 7001, stored[i]);
    }
    {
        struct ext_config *c = parse_ok("id=3 insecure=on listen=[::]:7001");
        assert_int_equal(ext_config_listen_set(c, "db3:7002", err, sizeof err),
                         RAFT_INVALID);
        assert_non_null(strstr(err,
                               "listen: port 7001 differs from this "
                               "server's address 'db3:7002'"));
        assert_int_equal(
            ext_config_listen_set(c, "0.0.0.0:7001", err, sizeof err),
            RAFT_INVALID);
        assert_non_null(strstr(err, "is a wildcard; give advertise="));
        free(c);
    }
}

/* The leader's keys of client ids and rows: their defaults, values
 * taken, and their ranges refused naming the key; every key of the list
 * repeated is refused (the parser's mask of seen keys is 64 bits). */
static void test_id_keys(void **state)
{
    struct ext_config *c;

    (void)state;
    c = parse_ok("id=1");
    assert_true(c->request_id_window == 100000);
    assert_true(c->request_id_window_ms == 86400000);
    assert_true(c->max_result_bytes == 16u << 20);
    free(c);
    c = parse_ok(
        "id=1 request_id_window=5 request_id_window_ms=7 "
        "max_result_bytes=67108864");
    assert_true(c->request_id_window == 5 && c->request_id_window_ms == 7 &&
                c->max_result_bytes == 64u << 20);
    free(c);
    parse_bad("id=1 request_id_window=0",
              "request_id_window: '0' is not an integer in [1, 100000000]");
    parse_bad("id=1 request_id_window_ms=0", "request_id_window_ms: '0'");
    parse_bad("id=1 max_result_bytes=67108865",
              "max_result_bytes: '67108865' is not an integer in [1024, "
              "67108864]");
    parse_bad("id=1 max_result_bytes=2048 max_result_bytes=4096",
              "max_result_bytes");
    parse_bad("id=1 repair=manual repair=auto", "repair");
}

/* socket_max_clients: 256 by default, 1 to 1024, refused with a message
 * naming the key. */
static void test_socket_max_clients(void **state)
{
    struct ext_config *c;

    (void)state;
    c = parse_ok("id=1");
    assert_true(c->socket_max_clients == 256);
    free(c);
    c = parse_ok("id=1 socket_max_clients=4");
    assert_true(c->socket_max_clients == 4);
    free(c);
    parse_bad("id=1 socket_max_clients=0",
              "socket_max_clients: '0' is not an integer in [1, 1024]");
    parse_bad("id=1 socket_max_clients=1025", "socket_max_clients: '1025'");
}

/* max_staleness_ms: off (0) by default, 0 to 3600000, refused with a
 * message naming the key. */
static void test_max_staleness(void **state)
{
    struct ext_config *c;
    (void)state;
    c = parse_ok("id=1");
    assert_int_equal(c->max_staleness_ms, 0);
    free(c);
    c = parse_ok("id=1 max_staleness_ms=500");
    assert_int_equal(c->max_staleness_ms, 500);
    free(c);
    parse_bad("id=1 max_staleness_ms=3600001", "max_staleness_ms");
    parse_bad("id=1 max_staleness_ms=-1", "max_staleness_ms");
    parse_bad("id=1 max_staleness_ms=soon", "max_staleness_ms");
}

/* snapshot_rate_mb: 100 by default, 0 (unpaced) to 1048576, held in
 * bytes; refused with a message naming the key. */
static void test_snapshot_rate(void **state)
{
    struct ext_config *c;
    (void)state;
    c = parse_ok("id=1");
    assert_true(c->snapshot_rate_bytes == 100ull << 20);
    free(c);
    c = parse_ok("id=1 snapshot_rate_mb=0");
    assert_true(c->snapshot_rate_bytes == 0);
    free(c);
    c = parse_ok("id=1 snapshot_rate_mb=40");
    assert_true(c->snapshot_rate_bytes == 40ull << 20);
    free(c);
    parse_bad("id=1 snapshot_rate_mb=1048577",
              "snapshot_rate_mb: '1048577' is not an integer in [0, 1048576]");
    parse_bad("id=1 snapshot_rate_mb=fast", "snapshot_rate_mb");
}

/* A blank inside a list (cluster=, dial=) is named as such, wherever it
 * falls: after a comma, before one, or after the =. */
static void test_blank_in_list(void **state)
{
    (void)state;
    parse_bad("id=1 cluster=1@127.0.0.1:7001, 2@127.0.0.1:7002",
              "cluster: a blank inside the cluster= list, before "
              "'2@127.0.0.1:7002': write its entries separated by commas "
              "only");
    parse_bad("id=1 cluster=1@127.0.0.1:7001 ,2@127.0.0.1:7002",
              "cluster: a blank inside the cluster= list, before "
              "',2@127.0.0.1:7002'");
    parse_bad("id=1 cluster= 1@127.0.0.1:7001", "cluster: a blank inside");
    parse_bad(
        "id=1 cluster=1@127.0.0.1:7001 dial=2@127.0.0.1:9, "
        "3@127.0.0.1:9",
        "dial: a blank inside the dial= list, before '3@127.0.0.1:9'");
    parse_bad("id=1 stray cluster=1@127.0.0.1:7001",
              "'stray' is not key=value");
}

/* check_paths_bad checks that the paths of @text for database @db are
 * refused with a message holding @why. */
static void check_paths_bad(const char *text, const char *db, const char *why)
{
    struct ext_config *c = calloc(1, sizeof *c);
    char err[512] = "";

    assert_non_null(c);
    if (ext_config_parse(text, db, c, err, sizeof err) != 0) {
        fail_msg("'%s': %s", text, err);
    }
    assert_int_equal(ext_config_check_paths(c, db, err, sizeof err),
                     RAFT_INVALID);
    if (strstr(err, why) == NULL) {
        fail_msg("'%s' on %s: message '%s' lacks '%s'", text, db, err, why);
    }
    free(c);
}

/* The paths a start needs: the database's directory must exist (and be
 * writable), the log directory must exist or be creatable (its parent
 * existing); nothing is created by the check. */
static void test_paths(void **state)
{
    char dir[] = "/tmp/raftsql-test-config-XXXXXX", db[256], file[256];
    char text[600], err[512] = "";
    struct ext_config *c = calloc(1, sizeof *c);
    FILE *f;

    (void)state;
    assert_non_null(c);
    assert_non_null(mkdtemp(dir));
    snprintf(db, sizeof db, "%s/x.db", dir);
    snprintf(file, sizeof file, "%s/plain", dir);
    f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);

    assert_int_equal(ext_config_parse("id=1", db, c, err, sizeof err), 0);
    assert_int_equal(ext_config_check_paths(c, db, err, sizeof err), 0);
    check_paths_bad("id=1", "/nonexistent/dir/x.db",
                    "database: the directory /nonexistent/dir of "
                    "/nonexistent/dir/x.db does not exist");
    snprintf(text, sizeof text, "%s/x.db", file);
    check_paths_bad("id=1", text, "database: ");
    check_paths_bad("id=1", text, "is not a directory");
    check_paths_bad("id=1", dir, "is a directory");
    snprintf(text, sizeof text, "id=1 dir=%s/no/log", dir);
    check_paths_bad(text, db, "dir: the directory ");
    check_paths_bad(text, db, "/no of the log directory ");
    check_paths_bad(text, db, "/no/log does not exist");
    snprintf(text, sizeof text, "id=1 dir=%s", file);
    check_paths_bad(text, db, "is not a directory");
    /* Nothing was created. */
    assert_int_equal(access(db, F_OK), -1);
    assert_int_equal(access(c->dir, F_OK), -1);
    remove(file);
    assert_int_equal(rmdir(dir), 0);
    free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_advertised),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_loopback_gate),
        cmocka_unit_test(test_listen_set),
        cmocka_unit_test(test_wildcard_restart),
        cmocka_unit_test(test_id_keys),
        cmocka_unit_test(test_max_staleness),
        cmocka_unit_test(test_snapshot_rate),
        cmocka_unit_test(test_socket_max_clients),
        cmocka_unit_test(test_blank_in_list),
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_metrics_listen),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
