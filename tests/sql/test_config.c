/* Tests of the configuration stored in the state machine (sql/sql.h "The
 * configuration", sql/config.c, apply.c): a configuration entry is stored
 * with the applied index, survives a reopen, travels in a snapshot file
 * (read before install, and installed), rolls back with a failed batch, and
 * stays out of the requests' reach; and the same of the cluster id
 * (sql/cluster_id.c). */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sql/fsm_internal.h"
#include "tests/sql/helpers.h"

/* A fixture: two databases (the second receives snapshots) and a snapshot
 * path in the first's directory. */
struct fixture {
    struct tmpdb a, b;     /* the database files */
    struct sql_fsm *fa;    /* apply connection of a */
    struct sql_fsm *fb;    /* apply connection of b */
    char snap[128];        /* snapshot file path (removed at teardown) */
    struct sql_result res; /* result of the last single entry */
};

static struct sql_fsm *open_ok(const char *path)
{
    struct sql_fsm *fsm = NULL;
    char msg[256] = "";

    if (sql_fsm_open(path, NULL, 0, &fsm, msg, sizeof msg) != 0) {
        fail_msg("open %s: %s", path, msg);
    }
    return fsm;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);

    assert_non_null(f);
    tmpdb_init(&f->a);
    tmpdb_init(&f->b);
    f->fa = open_ok(f->a.path);
    f->fb = open_ok(f->b.path);
    snprintf(f->snap, sizeof f->snap, "%s/snap", f->a.dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    sql_result_clear(&f->res);
    sql_fsm_close(f->fa);
    sql_fsm_close(f->fb);
    unlink(f->snap);
    tmpdb_remove(&f->a);
    tmpdb_remove(&f->b);
    free(f);
    return 0;
}

/* A configuration entry of @len bytes @data. */
static struct sql_fsm_entry config_entry(uint64_t index, uint64_t term,
                                         const char *data)
{
    struct sql_fsm_entry e = {index, term, data, strlen(data),
                              SQL_ENTRY_CONFIG};
    return e;
}

/* apply_ok applies the @n entries @e on @fsm, expecting success and
 * SQLITE_OK results. */
static void apply_ok(struct sql_fsm *fsm, const struct sql_fsm_entry *e,
                     unsigned n)
{
    struct sql_result res[8];
    unsigned i;
    int rc;

    assert_true(n <= 8);
    rc = sql_fsm_apply(fsm, e, n, res);
    if (rc != 0) {
        fail_msg("apply: %d %s", rc, sql_fsm_errmsg(fsm));
    }
    for (i = 0; i < n; i++) {
        if (res[i].rc != 0) {
            fail_msg("entry %u: %d %s", i, res[i].rc,
                     res[i].errmsg != NULL ? res[i].errmsg : "");
        }
        if (e[i].kind == SQL_ENTRY_CONFIG) {
            assert_int_equal(res[i].id[0], 0);
            assert_int_equal(res[i].id[1], 0);
        }
        sql_result_clear(&res[i]);
    }
}

/* apply_sql applies request @sql as entry @index and returns its result
 * (in the fixture, valid until the next call). */
static const struct sql_result *apply_sql(struct fixture *f,
                                          struct sql_fsm *fsm, uint64_t index,
                                          const char *sql)
{
    struct buf *b = make_request(index, sql);
    struct sql_fsm_entry e = {index, 2, b->data, b->len, SQL_ENTRY_REQUEST};

    sql_result_clear(&f->res);
    if (sql_fsm_apply(fsm, &e, 1, &f->res) != 0) {
        fail_msg("apply: %s", sql_fsm_errmsg(fsm));
    }
    buf_free(b);
    return &f->res;
}

/* assert_config checks that @c holds entry @index, @term, @data. */
static void assert_config(struct sql_config *c, uint64_t index, uint64_t term,
                          const char *data)
{
    assert_int_equal(c->index, index);
    assert_int_equal(c->term, term);
    assert_int_equal(c->len, strlen(data));
    if (c->len > 0) {
        assert_memory_equal(c->data, data, c->len);
    } else {
        assert_null(c->data);
    }
    sql_config_clear(c);
    assert_null(c->data);
}

/* assert_stored reads the configuration of @fsm and checks it. */
static void assert_stored(struct sql_fsm *fsm, uint64_t index, uint64_t term,
                          const char *data)
{
    struct sql_config c;

    if (sql_fsm_config_read(fsm, &c) != 0) {
        fail_msg("config read: %s", sql_fsm_errmsg(fsm));
    }
    assert_config(&c, index, term, data);
}

/* A new database stores no configuration; a configuration entry is
 * stored with its index and term in the batch that applies it, the last
 * one of a batch wins, and requests and no-ops around it apply as
 * usual. */
static void test_applied(void **state)
{
    struct fixture *f = *state;
    struct buf *req = make_request(2, "CREATE TABLE t(x)");
    struct sql_fsm_entry e[4] = {
        config_entry(1, 1, "conf-1"),
        {2, 1, req->data, req->len, SQL_ENTRY_REQUEST},
        {3, 2, NULL, 0, SQL_ENTRY_REQUEST},
        config_entry(4, 2, "conf-4\0binary"),
    };

    assert_stored(f->fa, 0, 0, "");
    apply_ok(f->fa, e, 1);
    assert_stored(f->fa, 1, 1, "conf-1");
    e[3].len = 13; /* with the NUL inside: the payload is opaque */
    apply_ok(f->fa, e + 1, 3);
    buf_free(req);
    assert_int_equal(sql_fsm_applied(f->fa), 4);
    {
        struct sql_config c;

        assert_int_equal(sql_fsm_config_read(f->fa, &c), 0);
        assert_int_equal(c.index, 4);
        assert_int_equal(c.len, 13);
        assert_memory_equal(c.data, "conf-4\0binary", 13);
        sql_config_clear(&c);
    }
    assert_query(f->a.path, "SELECT idx || ',' || term FROM raftsql_config",
                 "4,2");
    /* An empty payload is stored as an empty BLOB. */
    {
        struct sql_fsm_entry empty = {5, 2, NULL, 0, SQL_ENTRY_CONFIG};

        apply_ok(f->fa, &empty, 1);
        assert_stored(f->fa, 5, 2, "");
    }
}

/* The stored configuration survives closing and reopening the
 * database. */
static void test_survives_reopen(void **state)
{
    struct fixture *f = *state;
    struct sql_fsm_entry e = config_entry(1, 7, "members 1 2 3");

    apply_ok(f->fa, &e, 1);
    sql_fsm_close(f->fa);
    f->fa = open_ok(f->a.path);
    assert_int_equal(sql_fsm_applied(f->fa), 1);
    assert_stored(f->fa, 1, 7, "members 1 2 3");
}

/* A snapshot file carries the configuration it reflects: it reads back
 * from the file before any install, and after the install on another
 * node the state machine holds it; a snapshot without raftsql_config, a
 * file that is no database and a missing file are refused, each named. */
static void test_in_snapshot(void **state)
{
    struct fixture *f = *state;
    struct sql_fsm_entry e[2] = {config_entry(1, 1, "old"),
                                 config_entry(2, 3, "new config")};
    struct sql_config c;
    uint64_t index = 0, term = 0;
    char msg[256] = "";

    apply_ok(f->fa, e, 2);
    assert_int_equal(
        sql_fsm_snapshot_create(f->fa, f->snap, &index, &term, msg, sizeof msg),
        0);
    assert_int_equal(index, 2);
    assert_int_equal(sql_snapshot_config_read(f->snap, &c, msg, sizeof msg), 0);
    assert_config(&c, 2, 3, "new config");

    assert_stored(f->fb, 0, 0, "");
    assert_int_equal(sql_fsm_snapshot_install(f->fb, f->snap, &index, &term),
                     0);
    assert_stored(f->fb, 2, 3, "new config");

    /* Refusals. */
    assert_int_equal(
        sql_snapshot_config_read("/nonexistent/snap", &c, msg, sizeof msg),
        SQL_ERR_NOTFOUND);
    assert_non_null(strstr(msg, "/nonexistent/snap"));
    {
        sqlite3 *db;

        assert_int_equal(sqlite3_open(f->snap, &db), SQLITE_OK);
        assert_int_equal(
            sqlite3_exec(db, "DROP TABLE raftsql_config", NULL, NULL, NULL),
            SQLITE_OK);
        sqlite3_close(db);
    }
    assert_int_equal(sql_snapshot_config_read(f->snap, &c, msg, sizeof msg),
                     SQL_ERR_CORRUPT);
    assert_non_null(strstr(msg, "raftsql_config"));
    assert_int_equal(sql_fsm_snapshot_install(f->fb, f->snap, &index, &term),
                     SQL_ERR_CORRUPT);
    assert_non_null(
        strstr(sql_fsm_errmsg(f->fb), "table raftsql_config is missing"));
    unlink(f->snap);
    {
        FILE *fp = fopen(f->snap, "w");

        assert_non_null(fp);
        fputs("this is not a SQLite database, only some text to read\n", fp);
        fclose(fp);
    }
    assert_int_equal(sql_snapshot_config_read(f->snap, &c, msg, sizeof msg),
                     SQL_ERR_CORRUPT);
    assert_non_null(strstr(msg, "not a database"));
}

/* A batch that fails (an undecodable request after the configuration
 * entry) stores nothing of its configuration: it stays as it was, with
 * the applied index. */
static void test_rolled_back(void **state)
{
    struct fixture *f = *state;
    struct sql_fsm_entry first = config_entry(1, 1, "first");
    struct sql_fsm_entry e[2] = {
        config_entry(2, 1, "second"),
        {3, 1, "garbage", 7, SQL_ENTRY_REQUEST},
    };
    struct sql_result res[2];

    apply_ok(f->fa, &first, 1);
    assert_int_equal(sql_fsm_apply(f->fa, e, 2, res), SQL_ERR_CORRUPT);
    assert_int_equal(sql_fsm_applied(f->fa), 1);
    assert_stored(f->fa, 1, 1, "first");
    /* An unknown kind is refused before anything runs. */
    e[1].kind = 9;
    assert_int_equal(sql_fsm_apply(f->fa, e, 2, res), SQL_ERR_INVALID);
    assert_non_null(strstr(sql_fsm_errmsg(f->fa), "entry 3 has unknown kind"));
    assert_stored(f->fa, 1, 1, "first");
}

/* Requests can neither read nor write raftsql_config, nor rename a table
 * to it. */
static void test_out_of_reach(void **state)
{
    struct fixture *f = *state;
    struct sql_fsm_entry e = config_entry(1, 1, "conf");
    static const char *const sqls[] = {
        "UPDATE raftsql_config SET data = x'00'",
        "DELETE FROM raftsql_config",
        "INSERT OR REPLACE INTO raftsql_config VALUES (0, 9, 9, x'01')",
        "DROP TABLE raftsql_config",
        "CREATE TABLE t(x)",
        "INSERT INTO t SELECT data FROM raftsql_config",
        "ALTER TABLE t RENAME TO raftsql_config",
    };
    static const char *const want[] = {
        "raftsql_config is an internal raftsql table",
        "raftsql_config is an internal raftsql table",
        "raftsql_config is an internal raftsql table",
        "raftsql_config is an internal raftsql table",
        NULL,
        "raftsql_config cannot be read in raft_exec",
        "there is already another table",
    };
    unsigned i;

    apply_ok(f->fa, &e, 1);
    for (i = 0; i < sizeof sqls / sizeof sqls[0]; i++) {
        const struct sql_result *r = apply_sql(f, f->fa, 2 + i, sqls[i]);

        if (want[i] == NULL) {
            assert_int_equal(r->rc, SQLITE_OK);
            continue;
        }
        assert_int_not_equal(r->rc, SQLITE_OK);
        assert_non_null(r->errmsg);
        if (strstr(r->errmsg, want[i]) == NULL) {
            fail_msg("%s: \"%s\" lacks \"%s\"", sqls[i], r->errmsg, want[i]);
        }
    }
    assert_stored(f->fa, 1, 1, "conf");
}

/* assert_cluster_id checks the cluster id stored in @fsm: @want, or none
 * when NULL. */
static void assert_cluster_id(struct sql_fsm *fsm, const uint8_t *want)
{
    static const uint8_t zero[SQL_CLUSTER_ID_LEN];
    uint8_t got[SQL_CLUSTER_ID_LEN];

    if (sql_fsm_cluster_id(fsm, got) != 0) {
        fail_msg("cluster id: %s", sql_fsm_errmsg(fsm));
    }
    assert_memory_equal(got, want != NULL ? want : zero, sizeof got);
}

/* A cluster id entry stores its id; the first one of the log wins, a
 * later one changes nothing; requests may read the id, not write it; a
 * snapshot carries it; a malformed entry fails its batch. */
static void test_cluster_id(void **state)
{
    struct fixture *f = *state;
    uint8_t id1[SQL_CLUSTER_ID_LEN], id2[SQL_CLUSTER_ID_LEN];
    uint8_t p1[SQL_CLUSTER_ENTRY_LEN], p2[SQL_CLUSTER_ENTRY_LEN];
    struct sql_fsm_entry e[2] = {
        {1, 2, p1, sizeof p1, SQL_ENTRY_CLUSTER_ID},
        {2, 3, p2, sizeof p2, SQL_ENTRY_CLUSTER_ID},
    };
    struct sql_result res;
    uint64_t index = 0, term = 0;
    char msg[256] = "";
    const struct sql_result *r;

    memset(id1, 0x11, sizeof id1);
    memset(id2, 0x22, sizeof id2);
    sql_cluster_entry_encode(id1, p1);
    sql_cluster_entry_encode(id2, p2);
    assert_true(sql_cluster_entry_is(p1, sizeof p1));
    assert_false(sql_cluster_entry_is("RQ", 2));
    assert_cluster_id(f->fa, NULL);
    apply_ok(f->fa, e, 2);
    assert_cluster_id(f->fa, id1);
    assert_query(f->a.path,
                 "SELECT hex(cluster_id) || ',' || idx || ',' || term "
                 "FROM raftsql_cluster",
                 "11111111111111111111111111111111,1,2");
    r = apply_sql(f, f->fa, 3,
                  "CREATE TABLE t AS SELECT * FROM raftsql_cluster");
    assert_int_equal(r->rc, SQLITE_OK);
    r = apply_sql(f, f->fa, 4, "DELETE FROM raftsql_cluster");
    assert_non_null(r->errmsg);
    assert_non_null(
        strstr(r->errmsg, "raftsql_cluster is an internal raftsql table"));
    assert_int_equal(
        sql_fsm_snapshot_create(f->fa, f->snap, &index, &term, msg, sizeof msg),
        0);
    assert_int_equal(sql_fsm_snapshot_install(f->fb, f->snap, &index, &term),
                     0);
    assert_cluster_id(f->fb, id1);
    sql_fsm_close(f->fa);
    f->fa = open_ok(f->a.path);
    assert_cluster_id(f->fa, id1);

    /* Malformed: another version, a short payload, a zero id. */
    e[0].index = 5;
    p1[2] = 2;
    assert_int_equal(sql_fsm_apply(f->fa, e, 1, &res), SQL_ERR_FORMAT);
    assert_non_null(strstr(sql_fsm_errmsg(f->fa), "version 2, want 1"));
    p1[2] = 1;
    e[0].len = 5;
    assert_int_equal(sql_fsm_apply(f->fa, e, 1, &res), SQL_ERR_CORRUPT);
    memset(p1 + 3, 0, SQL_CLUSTER_ID_LEN);
    e[0].len = sizeof p1;
    assert_int_equal(sql_fsm_apply(f->fa, e, 1, &res), SQL_ERR_CORRUPT);
    assert_int_equal(sql_fsm_applied(f->fa), 4);
    assert_cluster_id(f->fa, id1);
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_applied),     T(test_survives_reopen), T(test_in_snapshot),
        T(test_rolled_back), T(test_out_of_reach),    T(test_cluster_id),
    };
#undef T
    return cmocka_run_group_tests_name("sql_config", tests, NULL, NULL);
}
