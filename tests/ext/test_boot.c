/* Tests of ext/runtime/boot.c, the configuration at start, on a real LMDB log
 * and database in a temporary directory: the bootstrap of a new cluster, the
 * stored configuration in force whatever the founding keys say (cluster=,
 * join=, bootstrap_from= ignored once a node has a log), a database whose
 * log was lost, join=, an old log without configurations, and
 * force_new_cluster=1; and of the cluster id at start
 * (ext/runtime/cluster_id.c) and in the store (ext/runtime/store.h). */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "ext/runtime/boot.h"
#include "ext/runtime/cluster_id.h"
#include "raft/configuration.h"
#include "tests/ext/helpers.h"

#define TRIO "cluster=2@127.0.0.1:7002,1@127.0.0.1:7001,3@127.0.0.1:7003"

/* A database file, its log directory, the store and the apply
 * connection. */
struct fixture {
    struct tmpdb db;
    char dir[128];
    struct ext_node_log log;
    struct ext_store *s;
    struct sql_fsm *fsm;
    struct ext_store_state st;
    char msg[1024];
};

static void open_all(struct fixture *f)
{
    f->s = store_open_ok(f->dir, f->db.path, &f->log);
    f->fsm = open_fsm(f->db.path);
}

static void close_all(struct fixture *f)
{
    store_state_free(&f->st);
    store_close(f->s);
    sql_fsm_close(f->fsm);
    f->s = NULL;
    f->fsm = NULL;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    store_dir_init(&f->db, f->dir, sizeof f->dir, &f->log);
    open_all(f);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    close_all(f);
    store_dir_remove(&f->db, f->dir, &f->log);
    free(f);
    return 0;
}

/* prepare loads the log and runs boot_prepare with configuration string
 * @text; returns its code (the message in f->msg). */
static int prepare(struct fixture *f, const char *text, struct ext_boot *b,
                   struct ext_config *cfg)
{
    store_state_free(&f->st);
    if (ext_config_parse(text, f->db.path, cfg, f->msg, sizeof f->msg) != 0) {
        fail_msg("ext_config_parse '%s': %s", text, f->msg);
    }
    if (store_load(f->s, sql_fsm_applied(f->fsm), sql_fsm_applied_term(f->fsm),
                   &f->st, f->msg, sizeof f->msg) != 0) {
        fail_msg("store_load: %s", f->msg);
    }
    return boot_prepare(f->s, f->fsm, cfg, &f->log, &f->st, b, f->msg,
                        sizeof f->msg);
}

/* A fresh node with cluster= writes entry 1 of term 1, the servers sorted
 * by id, and hard state term 1; a restart with the same servers (in any
 * order) or without cluster= keeps it and takes its listen address. */
static void test_bootstrap_then_stored(void **state)
{
    struct fixture *f = *state;
    struct ext_config cfg;
    struct ext_boot b;
    char servers[256];

    assert_int_equal(prepare(f, "id=1 " TRIO, &b, &cfg), 0);
    assert_true(b.bootstrapped);
    assert_int_equal(b.source, EXT_BOOT_LOG);
    assert_int_equal(b.conf_index, 1);
    assert_int_equal(f->st.n_entries, 1);
    assert_int_equal(f->st.entries[0].type, RAFT_ENTRY_CONFIG);
    assert_int_equal(f->st.entries[0].term, 1);
    assert_int_equal(f->st.hs.term, 1);
    boot_format_servers(&b.conf, servers, sizeof servers);
    assert_string_equal(servers,
                        "1@127.0.0.1:7001,2@127.0.0.1:7002,"
                        "3@127.0.0.1:7003");

    assert_int_equal(prepare(f, "id=1 " TRIO, &b, &cfg), 0);
    assert_false(b.bootstrapped);
    assert_int_equal(f->st.n_entries, 1);

    assert_int_equal(prepare(f, "id=3", &b, &cfg), 0);
    assert_int_equal(b.conf_index, 1);
    assert_string_equal(cfg.listen_host, "127.0.0.1");
    assert_int_equal(cfg.listen_port, 7003);
}

/* bootstrap_from= beside a cluster= of several servers is refused, naming
 * the safe start (found alone, the others join=), and writes nothing; on
 * a fresh founder alone it makes the file's content a snapshot at index 2
 * of term 1 (no entry; hard state term 1; the configuration from the
 * database, as of index 1), with no cluster id; a later start with the
 * key (the founder's unchanged file) ignores it and changes nothing, as
 * does one without it. */
static void test_bootstrap_from(void **state)
{
    struct fixture *f = *state;
    struct ext_config cfg;
    struct ext_boot b;
    char text[512], src[160], servers[256];
    uint8_t id[SQL_CLUSTER_ID_LEN], zero[SQL_CLUSTER_ID_LEN] = {0};
    sqlite3 *db;

    snprintf(src, sizeof src, "%s.source", f->db.path);
    assert_int_equal(sqlite3_open(src, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "CREATE TABLE t(x); INSERT INTO t VALUES "
                                  "(1), (2);",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    snprintf(text, sizeof text, "id=1 " TRIO " bootstrap_from=%s", src);
    assert_int_equal(prepare(f, text, &b, &cfg), RAFT_INVALID);
    assert_non_null(strstr(f->msg,
                           "bootstrap_from: cluster= names 3 "
                           "servers: the others"));
    assert_non_null(strstr(f->msg,
                           "found it alone (id=1 "
                           "cluster=1@127.0.0.1:7001 "
                           "bootstrap_from=...), then start each "
                           "other node with join=127.0.0.1:7001"));
    assert_int_equal(f->st.n_entries, 0);
    assert_int_equal(f->st.snap_index, 0);
    assert_int_equal(sql_fsm_applied(f->fsm), 0);
    snprintf(text, sizeof text,
             "id=1 cluster=1@127.0.0.1:7001 bootstrap_from=%s", src);
    if (prepare(f, text, &b, &cfg) != 0) {
        fail_msg("bootstrap_from: %s", f->msg);
    }
    assert_true(b.bootstrapped);
    assert_int_equal(b.source, EXT_BOOT_DATABASE);
    assert_int_equal(b.conf_index, 1);
    assert_int_equal(f->st.n_entries, 0);
    assert_int_equal(f->st.snap_index, 2);
    assert_int_equal(f->st.snap_term, 1);
    assert_int_equal(f->st.hs.term, 1);
    assert_int_equal(sql_fsm_applied(f->fsm), 2);
    boot_format_servers(&b.conf, servers, sizeof servers);
    assert_string_equal(servers, "1@127.0.0.1:7001");
    assert_int_equal(sql_fsm_cluster_id(f->fsm, id), 0);
    assert_memory_equal(id, zero, sizeof id);
    assert_query(f->db.path, "SELECT sum(x) FROM t", "3");

    assert_int_equal(prepare(f, text, &b, &cfg), 0);
    assert_false(b.bootstrapped);
    assert_int_equal(b.ignored, EXT_BOOT_IGNORED_BOOTSTRAP_FROM);
    assert_int_equal(b.source, EXT_BOOT_DATABASE);
    assert_int_equal(f->st.n_entries, 0);
    assert_int_equal(f->st.snap_index, 2);
    assert_int_equal(sql_fsm_applied(f->fsm), 2);

    assert_int_equal(prepare(f, "id=1", &b, &cfg), 0);
    assert_false(b.bootstrapped);
    assert_int_equal(b.source, EXT_BOOT_DATABASE);
    assert_int_equal(b.conf_index, 1);
    unlink(src);
}

/* A cluster= whose servers differ from the stored configuration (one
 * missing, or another address) is ignored: the stored one is in force,
 * nothing is written, and the start says what it ignored. */
static void test_disagreeing_cluster_ignored(void **state)
{
    struct fixture *f = *state;
    struct ext_config cfg;
    struct ext_boot b;
    char servers[256];

    assert_int_equal(prepare(f, "id=1 " TRIO, &b, &cfg), 0);
    assert_int_equal(b.ignored, 0);
    assert_int_equal(prepare(f, "id=3 cluster=3@127.0.0.1:7003", &b, &cfg), 0);
    assert_int_equal(b.ignored, EXT_BOOT_IGNORED_CLUSTER);
    assert_false(b.bootstrapped);
    assert_int_equal(b.source, EXT_BOOT_LOG);
    assert_int_equal(b.conf_index, 1);
    boot_format_servers(&b.conf, servers, sizeof servers);
    assert_string_equal(servers,
                        "1@127.0.0.1:7001,2@127.0.0.1:7002,"
                        "3@127.0.0.1:7003");
    assert_int_equal(prepare(f,
                             "id=1 cluster=1@127.0.0.1:7001,2@127.0.0.1:7002,"
                             "3@127.0.0.1:7009",
                             &b, &cfg),
                     0);
    assert_int_equal(b.ignored, EXT_BOOT_IGNORED_CLUSTER);
    assert_int_equal(b.conf.n, 3);
    assert_int_equal(f->st.n_entries, 1);
    assert_int_equal(f->st.hs.term, 1);
}

/* append_conf appends the configuration of servers @ids (@n, voters at
 * 127.0.0.1:7000+id) to @f's log as the next entry of term 1, as a
 * membership change would. */
static void append_conf(struct fixture *f, const raft_id *ids, unsigned n)
{
    struct raft_configuration c;
    struct raft_hard_state hs = {.term = 1, .vote = 0};
    struct raft_entry e;
    char address[32];

    raft_configuration_init(&c);
    for (unsigned i = 0; i < n; i++) {
        snprintf(address, sizeof address, "127.0.0.1:%u",
                 7000 + (unsigned)ids[i]);
        assert_int_equal(
            raft_configuration_add(&c, ids[i], RAFT_VOTER, address), 0);
    }
    memset(&e, 0, sizeof e);
    assert_int_equal(raft_configuration_encode_buf(&c, &e.data), 0);
    e.type = RAFT_ENTRY_CONFIG;
    e.term = 1;
    e.index = f->st.n_entries > 0 ? f->st.entries[f->st.n_entries - 1].index + 1
                                  : f->st.snap_index + 1;
    assert_int_equal(store_write(f->s, &hs, &e, 1, f->msg, sizeof f->msg), 0);
    raft_buf_unref(e.data);
}

/* A founder restarted with its first start's cluster= after a fourth
 * server joined takes the stored configuration of four, writes nothing
 * and ignores cluster= (it was refused: a daemon whose file keeps the
 * founding keys stayed down after any membership change). */
static void test_founder_restarts_after_a_join(void **state)
{
    struct fixture *f = *state;
    static const raft_id four[] = {1, 2, 3, 4};
    struct ext_config cfg;
    struct ext_boot b;
    char servers[256];

    assert_int_equal(prepare(f, "id=2 " TRIO, &b, &cfg), 0);
    append_conf(f, four, 4);
    if (prepare(f, "id=2 " TRIO, &b, &cfg) != 0) {
        fail_msg("restart with cluster=: %s", f->msg);
    }
    assert_int_equal(b.ignored, EXT_BOOT_IGNORED_CLUSTER);
    assert_false(b.bootstrapped);
    assert_int_equal(b.conf_index, 2);
    boot_format_servers(&b.conf, servers, sizeof servers);
    assert_string_equal(servers,
                        "1@127.0.0.1:7001,2@127.0.0.1:7002,"
                        "3@127.0.0.1:7003,4@127.0.0.1:7004");
    assert_int_equal(f->st.n_entries, 2);
    assert_int_equal(cfg.listen_port, 7002);
}

/* join= on a node that holds a configuration is ignored and cleared, so
 * that no JOIN goes out: at INFO on a member, at WARN (a bit of
 * b.ignored) on a server the configuration does not name, which stays
 * out rather than undo its removal. */
static void test_join_ignored_once_in_a_cluster(void **state)
{
    struct fixture *f = *state;
    static const raft_id without_one[] = {2, 3};
    struct ext_config cfg;
    struct ext_boot b;

    assert_int_equal(prepare(f, "id=1 " TRIO, &b, &cfg), 0);
    assert_int_equal(prepare(f,
                             "id=1 join=127.0.0.1:7002 "
                             "listen=127.0.0.1:7001",
                             &b, &cfg),
                     0);
    assert_int_equal(b.ignored, 0);
    assert_int_equal(b.source, EXT_BOOT_LOG);
    assert_false(ext_config_join(&cfg));
    append_conf(f, without_one, 2);
    assert_int_equal(prepare(f,
                             "id=1 join=127.0.0.1:7002 "
                             "listen=127.0.0.1:7001",
                             &b, &cfg),
                     0);
    assert_int_equal(b.ignored, EXT_BOOT_IGNORED_JOIN);
    assert_int_equal(b.conf.n, 2);
    assert_false(ext_config_join(&cfg));
    assert_int_equal(f->st.n_entries, 2);
}

/* join= on a fresh node writes nothing and starts with no configuration;
 * a fresh node with neither cluster= nor join= is refused. */
static void test_join_and_missing_cluster(void **state)
{
    struct fixture *f = *state;
    struct ext_config cfg;
    struct ext_boot b;

    assert_int_equal(prepare(f, "id=4", &b, &cfg), RAFT_INVALID);
    assert_non_null(strstr(f->msg, "cluster: missing: a new node"));
    assert_int_equal(
        prepare(f, "id=4 join=127.0.0.1:7001 listen=127.0.0.1:7004", &b, &cfg),
        0);
    assert_int_equal(b.source, EXT_BOOT_JOIN);
    assert_int_equal(b.conf.n, 0);
    assert_int_equal(b.prefix.n, 0);
    assert_int_equal(f->st.n_entries, 0);
    assert_int_equal(f->st.hs.term, 0);
}

/* A log made before configurations were stored (entries, none a
 * configuration) takes cluster= as the compacted prefix's; without
 * cluster= it is refused. */
static void test_old_log_takes_cluster(void **state)
{
    struct fixture *f = *state;
    struct raft_hard_state hs = {.term = 2, .vote = 1};
    struct raft_entry e = {.term = 2, .index = 1, .type = RAFT_ENTRY_NOOP};
    struct ext_config cfg;
    struct ext_boot b;

    assert_int_equal(store_write(f->s, &hs, &e, 1, f->msg, sizeof f->msg), 0);
    assert_int_equal(prepare(f, "id=2 " TRIO, &b, &cfg), 0);
    assert_int_equal(b.source, EXT_BOOT_CLUSTER);
    assert_int_equal(b.prefix.n, 3);
    assert_int_equal(b.conf_index, 0);
    assert_int_equal(f->st.n_entries, 1);
    assert_int_equal(prepare(f, "id=2", &b, &cfg), RAFT_INVALID);
    assert_non_null(strstr(f->msg, "hold no configuration"));
}

/* force_new_cluster=1 appends this server alone, a voter, at the next
 * index and a term above the current one; given again it forces nothing.
 * On a fresh node it is refused. */
static void test_force_new_cluster(void **state)
{
    struct fixture *f = *state;
    struct ext_config cfg;
    struct ext_boot b;
    char servers[256];

    assert_int_equal(prepare(f, "id=2 force_new_cluster=1", &b, &cfg),
                     RAFT_INVALID);
    assert_non_null(strstr(f->msg, "no log nor database to recover"));
    assert_int_equal(prepare(f, "id=2 " TRIO, &b, &cfg), 0);
    assert_int_equal(prepare(f, "id=2 force_new_cluster=1", &b, &cfg), 0);
    assert_true(b.forced);
    assert_int_equal(b.conf_index, 2);
    assert_int_equal(f->st.n_entries, 2);
    assert_int_equal(f->st.entries[1].type, RAFT_ENTRY_CONFIG);
    assert_int_equal(f->st.entries[1].term, 2);
    assert_int_equal(f->st.hs.term, 2);
    boot_format_servers(&b.conf, servers, sizeof servers);
    assert_string_equal(servers, "2@127.0.0.1:7002");
    assert_int_equal(cfg.listen_port, 7002);

    assert_int_equal(prepare(f, "id=2 force_new_cluster=1", &b, &cfg), 0);
    assert_false(b.forced);
    assert_int_equal(f->st.n_entries, 2);
    /* The old string now disagrees with the forced configuration: it is
     * ignored. */
    assert_int_equal(prepare(f, "id=2 " TRIO, &b, &cfg), 0);
    assert_int_equal(b.ignored, EXT_BOOT_IGNORED_CLUSTER);
    boot_format_servers(&b.conf, servers, sizeof servers);
    assert_string_equal(servers, "2@127.0.0.1:7002");
}

/* apply_id applies the cluster id entry of @id as entry @index. */
static void apply_id(struct fixture *f, uint64_t index, const uint8_t *id)
{
    uint8_t p[SQL_CLUSTER_ENTRY_LEN];
    struct sql_fsm_entry e = {index, 1, p, sizeof p, SQL_ENTRY_CLUSTER_ID};
    struct sql_result r;

    sql_cluster_entry_encode(id, p);
    if (sql_fsm_apply(f->fsm, &e, 1, &r) != 0) {
        fail_msg("apply: %s", sql_fsm_errmsg(f->fsm));
    }
    sql_result_clear(&r);
}

/* boot_id runs cluster_id_boot on a new cluster id over @f's store and
 * database and returns its code, with the id it took in @out (zero for
 * none) and its hex in @hex ("" for none). */
static int boot_id(struct fixture *f, uint8_t out[RAFT_UV_CLUSTER_ID_LEN],
                   char hex[RAFT_UV_CLUSTER_ID_HEX])
{
    struct ext_cluster_id *c = NULL;
    bool known;
    int rc;

    assert_int_equal(cluster_id_new(f->s, &f->log, &c), 0);
    rc = cluster_id_boot(c, f->fsm, f->msg, sizeof f->msg);
    known = cluster_id_get(c, out);
    assert_int_equal(known, !raft_uv_cluster_id_is_zero(out));
    cluster_id_hex(c, hex);
    cluster_id_free(c);
    return rc;
}

/* assert_in_log checks the id the log directory keeps: @want, or none
 * when NULL. */
static void assert_in_log(struct fixture *f, const uint8_t *want)
{
    static const uint8_t zero[RAFT_UV_CLUSTER_ID_LEN];
    uint8_t got[RAFT_UV_CLUSTER_ID_LEN];

    assert_int_equal(store_cluster_id(f->s, got, f->msg, sizeof f->msg), 0);
    assert_memory_equal(got, want != NULL ? want : zero, sizeof got);
}

/* A new node has no cluster id anywhere; once the database holds one,
 * the next start keeps it in the log directory too and knows it; an id
 * kept in the log directory alone (adopted from a leader) is known at
 * start; a log directory and a database of two clusters are refused,
 * naming both. */
static void test_cluster_id_at_start(void **state)
{
    struct fixture *f = *state;
    uint8_t id[RAFT_UV_CLUSTER_ID_LEN], got[RAFT_UV_CLUSTER_ID_LEN];
    char hex[RAFT_UV_CLUSTER_ID_HEX];

    memset(id, 0x5a, sizeof id);
    assert_int_equal(boot_id(f, got, hex), 0);
    assert_string_equal(hex, "");
    assert_in_log(f, NULL);

    apply_id(f, 1, id);
    assert_int_equal(boot_id(f, got, hex), 0);
    assert_memory_equal(got, id, sizeof id);
    assert_string_equal(hex, "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a");
    assert_in_log(f, id);

    /* The log directory alone. */
    close_all(f);
    tmpdb_reset(&f->db);
    open_all(f);
    assert_int_equal(boot_id(f, got, hex), 0);
    assert_memory_equal(got, id, sizeof id);

    /* Two clusters. */
    memset(id, 0xbb, sizeof id);
    apply_id(f, 1, id);
    assert_int_equal(boot_id(f, got, hex), RAFT_CORRUPT);
    assert_non_null(strstr(f->msg,
                           "the log directory belongs to cluster "
                           "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a, the "
                           "database to cluster "
                           "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"));
}

/* check_owner runs boot_check_owner as a --check of @f with @text
 * would. */
static int check_owner(struct fixture *f, const char *text)
{
    struct ext_config cfg;

    if (ext_config_parse(text, f->db.path, &cfg, f->msg, sizeof f->msg) != 0) {
        fail_msg("ext_config_parse '%s': %s", text, f->msg);
    }
    snprintf(cfg.dir, sizeof cfg.dir, "%s", f->dir);
    return boot_check_owner(&cfg, f->db.path, f->msg, sizeof f->msg);
}

/* check_log runs boot_check_log as a start of @f with @text would. */
static int check_log(struct fixture *f, const char *text)
{
    struct ext_config cfg;

    if (ext_config_parse(text, f->db.path, &cfg, f->msg, sizeof f->msg) != 0) {
        fail_msg("ext_config_parse '%s': %s", text, f->msg);
    }
    return boot_check_log(f->s, f->fsm, &cfg, f->db.path, f->msg,
                          sizeof f->msg);
}

/* A founder whose log directory was wiped while its database holds the
 * cluster's data (its id, an applied index) founds nothing from cluster=:
 * it is refused, naming the cluster id and the way to replace the member
 * (raft_remove, then join=), and nothing is written to the new log (no
 * cluster id). A fresh node and a node with a log pass. */
static void test_lost_log_refused(void **state)
{
    struct fixture *f = *state;
    uint8_t id[RAFT_UV_CLUSTER_ID_LEN];
    char cmd[256];
    struct ext_config cfg;
    struct ext_boot b;

    memset(id, 0x5a, sizeof id);
    assert_int_equal(check_log(f, "id=2 " TRIO), 0);
    assert_int_equal(prepare(f, "id=2 " TRIO, &b, &cfg), 0);
    apply_id(f, 1, id);
    assert_int_equal(check_log(f, "id=2 " TRIO), 0);

    close_all(f);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    assert_int_equal(system(cmd), 0);
    open_all(f);
    assert_int_equal(check_log(f, "id=2 " TRIO), RAFT_INVALID);
    assert_non_null(strstr(f->msg,
                           "holds a cluster's data (cluster id "
                           "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a, applied up to "
                           "index 1) but the log in"));
    assert_non_null(strstr(f->msg, "is new (no term, no vote, no entry)"));
    assert_non_null(strstr(f->msg, "founds no cluster"));
    assert_non_null(strstr(f->msg, "raft_remove(2) on a member"));
    assert_non_null(strstr(f->msg, "start it with join=HOST:PORT"));
    assert_in_log(f, NULL);
    assert_int_equal(check_log(f,
                               "id=2 join=127.0.0.1:7001 "
                               "listen=127.0.0.1:7002"),
                     RAFT_INVALID);
}

/* A log belongs to the server that first started on it: a start with
 * another id is refused, naming both ids (two configuration files
 * swapped between machines would otherwise let one log vote under two
 * ids), and the owner starts again. */
static void test_log_of_another_server_refused(void **state)
{
    struct fixture *f = *state;
    struct ext_config cfg;
    struct ext_boot b;

    assert_int_equal(check_log(f, "id=2 " TRIO), 0);
    assert_int_equal(prepare(f, "id=2 " TRIO, &b, &cfg), 0);
    assert_int_equal(check_log(f, "id=3 " TRIO), RAFT_INVALID);
    assert_non_null(strstr(f->msg,
                           "belongs to server 2 (it first started "
                           "with id=2), and this start gives id=3"));
    assert_non_null(strstr(f->msg, "could vote twice in a term"));
    assert_int_equal(check_log(f, "id=2 " TRIO), 0);
    close_all(f);
    open_all(f);
    assert_int_equal(check_log(f, "id=1 " TRIO), RAFT_INVALID);
    assert_int_equal(check_log(f, "id=2 " TRIO), 0);
    /* The check before a start (--check) reads the same, read-only,
     * with the log closed (it runs in another process than the node). */
    close_all(f);
    assert_int_equal(check_owner(f, "id=3 " TRIO), RAFT_INVALID);
    assert_non_null(strstr(f->msg, "belongs to server 2"));
    assert_int_equal(check_owner(f, "id=2 " TRIO), 0);
    open_all(f);
}

/* With no log in the directory, or a log of no server yet, the check
 * before a start passes and creates nothing. */
static void test_owner_check_without_a_log(void **state)
{
    struct fixture *f = *state;
    struct ext_config cfg;
    char cmd[300];
    struct stat st;

    close_all(f);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    assert_int_equal(system(cmd), 0);
    if (ext_config_parse("id=3 " TRIO, f->db.path, &cfg, f->msg,
                         sizeof f->msg) != 0) {
        fail_msg("ext_config_parse: %s", f->msg);
    }
    snprintf(cfg.dir, sizeof cfg.dir, "%s", f->dir);
    assert_int_equal(boot_check_owner(&cfg, f->db.path, f->msg, sizeof f->msg),
                     0);
    assert_int_equal(stat(f->dir, &st), -1);
    open_all(f); /* a new log: no server yet */
    close_all(f);
    assert_int_equal(check_owner(f, "id=3 " TRIO), 0);
    open_all(f);
}

/* An id set while the driver runs is written by the next storage job
 * (an append here), and a later one by the job after. */
static void test_cluster_id_written_by_next_job(void **state)
{
    struct fixture *f = *state;
    struct raft_persist_storage st;
    struct raft_persist_job j;
    uint8_t a[RAFT_UV_CLUSTER_ID_LEN], b[RAFT_UV_CLUSTER_ID_LEN];

    memset(a, 0x01, sizeof a);
    memset(b, 0x02, sizeof b);
    memset(&st, 0, sizeof st);
    store_log(f->s, NULL, &st.log);
    memset(&j, 0, sizeof j);
    j.has_hs = true;
    j.hs = (struct raft_hard_state){.term = 2, .vote = 1};
    store_cluster_id_set(f->s, a);
    assert_in_log(f, NULL);
    raft_persist_run(&j, &st);
    assert_int_equal(j.rc, 0);
    assert_in_log(f, a);
    store_cluster_id_set(f->s, b);
    raft_persist_run(&j, &st);
    assert_int_equal(j.rc, 0);
    close_all(f);
    open_all(f);
    assert_in_log(f, b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bootstrap_then_stored, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_bootstrap_from, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disagreeing_cluster_ignored, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_founder_restarts_after_a_join,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_join_ignored_once_in_a_cluster,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_join_and_missing_cluster, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_old_log_takes_cluster, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_force_new_cluster, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_cluster_id_at_start, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_cluster_id_written_by_next_job,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_lost_log_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_of_another_server_refused,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_owner_check_without_a_log, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
