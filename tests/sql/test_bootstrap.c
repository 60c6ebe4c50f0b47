/* Tests of sql_fsm_bootstrap_from (sql/bootstrap.c, bootstrap_from=): the
 * content of a plain database, of a replica's copy (its raftsql_* tables
 * made anew) and of a database with another page size becomes a fresh
 * replica's, at the index, term and configuration given, the source left
 * unchanged; the refusals name the file and leave the replica as it was. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <sys/stat.h>
#include <unistd.h>

#include "tests/sql/helpers.h"

static const unsigned char config[] = {1, 2, 3, 4, 5};

/* One fresh replica and a source file beside it. */
struct fixture {
    struct tmpdb live;   /* the replica */
    struct sql_fsm *fsm; /* its apply connection */
    char src[128];       /* the source file */
    char tmp[128];       /* the copy's path */
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    char msg[256] = "";
    assert_non_null(f);
    tmpdb_init(&f->live);
    if (sql_fsm_open(f->live.path, NULL, 0, &f->fsm, msg, sizeof msg) != 0) {
        fail_msg("open: %s", msg);
    }
    snprintf(f->src, sizeof f->src, "%s/source.db", f->live.dir);
    snprintf(f->tmp, sizeof f->tmp, "%s/copy.tmp", f->live.dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    sql_fsm_close(f->fsm);
    unlink(f->src);
    unlink(f->tmp);
    tmpdb_remove(&f->live);
    free(f);
    return 0;
}

/* make_source writes @sql into a new database at @path. */
static void make_source(const char *path, const char *sql)
{
    sqlite3 *db;
    char *err = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        fail_msg("%s: %s", sql, err);
    }
    sqlite3_close(db);
}

/* file_bytes returns @path's content (malloc'd) and its size. */
static char *file_bytes(const char *path, size_t *out_len)
{
    FILE *fp = fopen(path, "rb");
    struct stat st;
    char *b;
    assert_non_null(fp);
    assert_int_equal(fstat(fileno(fp), &st), 0);
    b = malloc((size_t)st.st_size + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)st.st_size, fp), (size_t)st.st_size);
    fclose(fp);
    *out_len = (size_t)st.st_size;
    return b;
}

/* A plain database becomes the replica's content at the index and term
 * given, with the configuration; nothing else of raftsql's is set (no
 * cluster id, no settings); the source is not changed and the copy is
 * gone. */
static void test_plain_database(void **state)
{
    struct fixture *f = *state;
    unsigned n_tables = 0;
    char err[512] = "";
    struct sql_config sc;
    size_t before_len, after_len;
    char *before, *after;
    uint8_t id[SQL_CLUSTER_ID_LEN], zero[SQL_CLUSTER_ID_LEN] = {0};

    make_source(f->src,
                "CREATE TABLE a(k INTEGER PRIMARY KEY, v TEXT);"
                "INSERT INTO a VALUES (1, 'one'), (2, 'two;');"
                "CREATE TABLE b(x BLOB); INSERT INTO b VALUES (x'00ff');"
                "CREATE INDEX b_x ON b(x);"
                "CREATE VIEW va AS SELECT v FROM a;");
    before = file_bytes(f->src, &before_len);
    if (sql_fsm_bootstrap_from(f->fsm, f->src, f->tmp, 2, 1, config,
                               sizeof config, &n_tables, err,
                               sizeof err) != 0) {
        fail_msg("bootstrap: %s", err);
    }
    assert_int_equal(n_tables, 2);
    assert_int_equal(sql_fsm_applied(f->fsm), 2);
    assert_int_equal(sql_fsm_applied_term(f->fsm), 1);
    assert_int_equal(sql_fsm_config_read(f->fsm, &sc), 0);
    assert_int_equal(sc.index, 1);
    assert_int_equal(sc.term, 1);
    assert_int_equal(sc.len, sizeof config);
    assert_memory_equal(sc.data, config, sizeof config);
    sql_config_clear(&sc);
    assert_int_equal(sql_fsm_cluster_id(f->fsm, id), 0);
    assert_memory_equal(id, zero, sizeof id);
    assert_query(f->live.path, "SELECT group_concat(v, ',') FROM a",
                 "one,two;");
    assert_query(f->live.path, "SELECT hex(x) FROM b", "00FF");
    assert_query(f->live.path, "SELECT count(*) FROM va", "2");
    assert_query(f->live.path,
                 "SELECT count(*) FROM sqlite_schema WHERE name = 'b_x'", "1");
    assert_query(f->live.path, "SELECT count(*) FROM raftsql_settings", "0");
    after = file_bytes(f->src, &after_len);
    assert_int_equal(before_len, after_len);
    assert_memory_equal(before, after, before_len);
    free(before);
    free(after);
    assert_int_not_equal(access(f->tmp, F_OK), 0);
}

/* A replica's copy (raftsql_* tables of its own: another applied index,
 * configuration, cluster id, settings) starts afresh: its internal state
 * is dropped, its user tables and its cluster-wide settings (replicated
 * state) kept. */
static void test_replica_copy(void **state)
{
    struct fixture *f = *state;
    unsigned n_tables = 0;
    char err[512] = "";
    struct sql_config sc;
    uint8_t id[SQL_CLUSTER_ID_LEN], zero[SQL_CLUSTER_ID_LEN] = {0};

    make_source(
        f->src,
        "CREATE TABLE t(x); INSERT INTO t VALUES (7);"
        "CREATE TABLE raftsql_applied(id INTEGER PRIMARY KEY, idx INTEGER,"
        " term INTEGER, sums BLOB);"
        "INSERT INTO raftsql_applied VALUES (0, 900, 9, NULL);"
        "CREATE TABLE raftsql_config(id INTEGER PRIMARY KEY, idx INTEGER,"
        " term INTEGER, data BLOB);"
        "INSERT INTO raftsql_config VALUES (0, 800, 8, x'09');"
        "CREATE TABLE raftsql_cluster(id INTEGER PRIMARY KEY, cluster_id BLOB,"
        " idx INTEGER, term INTEGER);"
        "INSERT INTO raftsql_cluster VALUES (0, randomblob(16), 3, 1);"
        "CREATE TABLE raftsql_settings(name TEXT PRIMARY KEY, value INTEGER);"
        "INSERT INTO raftsql_settings VALUES ('foreign_keys', 1);");
    if (sql_fsm_bootstrap_from(f->fsm, f->src, f->tmp, 2, 1, config,
                               sizeof config, &n_tables, err,
                               sizeof err) != 0) {
        fail_msg("bootstrap: %s", err);
    }
    assert_int_equal(n_tables, 1);
    assert_int_equal(sql_fsm_applied(f->fsm), 2);
    assert_int_equal(sql_fsm_config_read(f->fsm, &sc), 0);
    assert_int_equal(sc.index, 1);
    sql_config_clear(&sc);
    assert_int_equal(sql_fsm_cluster_id(f->fsm, id), 0);
    assert_memory_equal(id, zero, sizeof id);
    assert_query(f->live.path,
                 "SELECT group_concat(name || '=' || value) FROM "
                 "raftsql_settings",
                 "foreign_keys=1");
    assert_query(f->live.path, "SELECT x FROM t", "7");
}

/* A source with pages of another size is copied all the same (the live
 * database, in WAL mode, keeps its own). */
static void test_other_page_size(void **state)
{
    struct fixture *f = *state;
    unsigned n_tables = 0;
    char err[512] = "";

    make_source(f->src,
                "PRAGMA page_size=1024; VACUUM;"
                "CREATE TABLE t(x);"
                "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT"
                " i + 1 FROM c WHERE i < 2000)"
                " INSERT INTO t SELECT printf('%0100d', i) FROM c;");
    assert_query(f->src, "PRAGMA page_size", "1024");
    if (sql_fsm_bootstrap_from(f->fsm, f->src, f->tmp, 2, 1, config,
                               sizeof config, &n_tables, err,
                               sizeof err) != 0) {
        fail_msg("bootstrap: %s", err);
    }
    assert_query(f->live.path, "SELECT count(*) FROM t", "2000");
    assert_query(f->live.path, "PRAGMA page_size", "4096");
}

/* bootstrap_bad checks that the bootstrap fails with @code and a message
 * holding @why, leaving the replica fresh. */
static void bootstrap_bad(struct fixture *f, const char *src, int code,
                          const char *why)
{
    unsigned n_tables = 0;
    char err[512] = "";
    assert_int_equal(
        sql_fsm_bootstrap_from(f->fsm, src, f->tmp, 2, 1, config, sizeof config,
                               &n_tables, err, sizeof err),
        code);
    if (strstr(err, why) == NULL) {
        fail_msg("refused with '%s', not '%s'", err, why);
    }
    assert_int_not_equal(access(f->tmp, F_OK), 0);
}

/* Refusals: a missing file, a file that is no database, a directory,
 * the live file itself, and a replica that holds tables (written around
 * the node) or entries. */
static void test_refusals(void **state)
{
    struct fixture *f = *state;
    FILE *fp;

    bootstrap_bad(f, "/nonexistent/x.db", SQL_ERR_NOTFOUND,
                  "/nonexistent/x.db: No such file or directory");
    fp = fopen(f->src, "w");
    assert_non_null(fp);
    fputs("this is not a database, it is a text file of some length ....", fp);
    fclose(fp);
    bootstrap_bad(f, f->src, SQL_ERR_CORRUPT, "file is not a database");
    bootstrap_bad(f, f->live.dir, SQL_ERR_INVALID, "is not a regular file");
    bootstrap_bad(f, f->live.path, SQL_ERR_INVALID,
                  "is this node's own database file");
    assert_int_equal(sql_fsm_applied(f->fsm), 0);

    unlink(f->src);
    make_source(f->src, "CREATE TABLE t(x);");
    make_source(f->live.path, "CREATE TABLE mine(x);");
    bootstrap_bad(f, f->src, SQL_ERR_INVALID, "holds 1 schema objects already");
    make_source(f->live.path, "DROP TABLE mine;");
    unlink(f->src);
    make_source(f->src, "CREATE TABLE t(x);");
    {
        unsigned n = 0;
        char err[512] = "";
        assert_int_equal(
            sql_fsm_bootstrap_from(f->fsm, f->src, f->tmp, 2, 1, config,
                                   sizeof config, &n, err, sizeof err),
            0);
    }
    bootstrap_bad(f, f->src, SQL_ERR_INVALID,
                  "is a replica applied up to index 2");
}

/* The raftsql_ names are reserved: a plain database with a table of such
 * a name is refused (its table was dropped silently as if internal), and
 * so is a replica copy with one that is none of the internal tables (those
 * are dropped and made anew). */
static void test_reserved_names(void **state)
{
    struct fixture *f = *state;
    static const char replica[] =
        "CREATE TABLE t(x);"
        "CREATE TABLE raftsql_applied(id INTEGER PRIMARY KEY, idx INTEGER,"
        " term INTEGER, sums BLOB);"
        "INSERT INTO raftsql_applied VALUES (0, 900, 9, NULL);"
        "CREATE TABLE raftsql_settings(name TEXT PRIMARY KEY, value INTEGER);";

    make_source(f->src, "CREATE TABLE t(x); CREATE TABLE raftsql_notes(x);");
    bootstrap_bad(f, f->src, SQL_ERR_INVALID,
                  "has a table raftsql_notes: names starting with raftsql_ "
                  "are reserved; rename it first");
    unlink(f->src);
    make_source(f->src, "CREATE TABLE t(x); CREATE INDEX RaftSQL_x ON t(x);");
    bootstrap_bad(f, f->src, SQL_ERR_INVALID,
                  "has an index RaftSQL_x: names starting with raftsql_ are "
                  "reserved; rename it first");
    unlink(f->src);
    make_source(f->src, replica);
    make_source(f->src, "CREATE TABLE raftsql_notes(x);");
    bootstrap_bad(f, f->src, SQL_ERR_INVALID,
                  "has a table raftsql_notes: names starting with raftsql_ "
                  "are reserved; rename it first");
    assert_int_equal(sql_fsm_applied(f->fsm), 0);
    unlink(f->src);
    make_source(f->src, replica);
    {
        unsigned n = 0;
        char err[512] = "";
        if (sql_fsm_bootstrap_from(f->fsm, f->src, f->tmp, 2, 1, config,
                                   sizeof config, &n, err, sizeof err) != 0) {
            fail_msg("bootstrap: %s", err);
        }
        assert_int_equal(n, 1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_plain_database, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replica_copy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_page_size, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reserved_names, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
