/* Tests of ext/boot.c, the configuration at start, on a real LMDB log and
 * database in a temporary directory: the bootstrap of a new cluster, the
 * stored configuration winning over cluster=, join=, an old log without
 * configurations, and force_new_cluster=1. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ext/boot.h"
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
    struct ext_store_config cfg = {
        .dir = f->dir,
        .db_path = f->db.path,
        .log_max_bytes = 16u << 20,
        .snapshot_threshold = 100,
        .trailing_entries = 10,
    };
    if (store_open(&cfg, &f->log, &f->s, f->msg, sizeof f->msg) != 0) {
        fail_msg("store_open: %s", f->msg);
    }
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
    tmpdb_init(&f->db);
    snprintf(f->dir, sizeof f->dir, "%s/log", f->db.dir);
    node_log_init(&f->log, 1, RAFT_LOG_ERROR + 1); /* quiet */
    open_all(f);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    char cmd[256];
    close_all(f);
    node_log_close(&f->log);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    assert_int_equal(system(cmd), 0);
    tmpdb_remove(&f->db);
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

/* A cluster= whose servers differ from the stored configuration (one
 * missing, or another address) is refused, naming both, and nothing is
 * written. */
static void test_disagreeing_cluster_refused(void **state)
{
    struct fixture *f = *state;
    struct ext_config cfg;
    struct ext_boot b;

    assert_int_equal(prepare(f, "id=1 " TRIO, &b, &cfg), 0);
    assert_int_equal(prepare(f, "id=3 cluster=3@127.0.0.1:7003", &b, &cfg),
                     RAFT_INVALID);
    assert_non_null(strstr(f->msg,
                           "cluster= says 3@127.0.0.1:7003; the "
                           "stored configuration (index 1, from the "
                           "log) says 1@127.0.0.1:7001,"));
    assert_non_null(strstr(f->msg, "force_new_cluster=1"));
    assert_int_equal(prepare(f,
                             "id=1 cluster=1@127.0.0.1:7001,2@127.0.0.1:7002,"
                             "3@127.0.0.1:7009",
                             &b, &cfg),
                     RAFT_INVALID);
    assert_int_equal(f->st.n_entries, 1);
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
    /* The old string now disagrees with the forced configuration. */
    assert_int_equal(prepare(f, "id=2 " TRIO, &b, &cfg), RAFT_INVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bootstrap_then_stored, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_disagreeing_cluster_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_join_and_missing_cluster, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_old_log_takes_cluster, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_force_new_cluster, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
