/* Tests of foreign-commit detection (sql/sql.h sql_fsm_foreign_check,
 * sql/foreign.c): a commit by any other connection is seen, by the check
 * and inside sql_fsm_apply, which then applies nothing; the state
 * machine's own commits, checkpoints, snapshots and other connections'
 * reads are not; a snapshot install ends it. With the checksum on, a
 * TRUNCATE checkpoint of another connection is not either. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <unistd.h>

#include "sql/fsm_internal.h"
#include "tests/sql/helpers.h"

/* The fixture: a replica with table kv and its apply connection. */
struct fixture {
    struct tmpdb tmp;    /* the database file */
    struct sql_fsm *fsm; /* its apply connection */
    uint64_t seq;        /* request sequence numbers */
    char snap[128];      /* a snapshot file, "" for none */
};

/* apply applies request @sql alone in a batch; returns sql_fsm_apply's
 * code, and the request must succeed (as SQL) when that is 0. */
static int apply(struct fixture *f, const char *sql)
{
    struct sql_fsm_entry e;
    struct sql_result res;
    struct buf *b = make_request(++f->seq, sql);
    int rc;

    e.index = sql_fsm_applied(f->fsm) + 1;
    e.term = 1;
    entry_set_payload(&e, b);
    rc = sql_fsm_apply(f->fsm, &e, 1, &res);
    buf_free(b);
    if (rc == 0) {
        assert_int_equal(res.rc, SQLITE_OK);
        sql_result_clear(&res);
    }
    return rc;
}

/* outside runs @sql on a plain connection of its own to the file: a
 * process that does not load raftsql. */
static void outside(struct fixture *f, const char *sql)
{
    outside_exec(f->tmp.path, sql);
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    char msg[256] = "";

    assert_non_null(f);
    tmpdb_init(&f->tmp);
    if (sql_fsm_open(f->tmp.path, NULL, 0, &f->fsm, msg, sizeof msg) != 0) {
        fail_msg("open: %s", msg);
    }
    assert_int_equal(apply(f, "CREATE TABLE kv(k TEXT PRIMARY KEY, v)"), 0);
    assert_int_equal(apply(f, "INSERT INTO kv VALUES('a', 1)"), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    sql_fsm_close(f->fsm);
    if (f->snap[0] != '\0') {
        unlink(f->snap);
    }
    tmpdb_remove(&f->tmp);
    free(f);
    return 0;
}

/* The state machine's own commits and checkpoints, a snapshot made of it
 * and reads by other connections are not foreign. */
static void test_own_work_is_not_foreign(void **state)
{
    struct fixture *f = *state;
    uint64_t durable, index, term;
    char msg[256] = "";

    /* Over 1,000 WAL frames: the background checkpointer runs. */
    for (int i = 0; i < 8; i++) {
        assert_int_equal(apply(f,
                               "WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL "
                               "SELECT x + 1 FROM s WHERE x < 100) INSERT "
                               "INTO kv SELECT hex(randomblob(8)), "
                               "zeroblob(8192) FROM s"),
                         0);
        usleep(20 * 1000);
        assert_int_equal(sql_fsm_foreign_check(f->fsm), 0);
    }
    assert_int_equal(sql_fsm_checkpoint(f->fsm, SQL_CHECKPOINT_WAIT, &durable),
                     0);
    assert_int_equal(apply(f, "UPDATE kv SET v = 2 WHERE k = 'a'"), 0);
    snprintf(f->snap, sizeof f->snap, "%s/snap", f->tmp.dir);
    assert_int_equal(sql_fsm_snapshot_create(f->fsm, f->snap, &index, &term,
                                             msg, sizeof msg),
                     0);
    assert_query(f->tmp.path, "SELECT v FROM kv WHERE k = 'a'", "2");
    assert_int_equal(sql_fsm_foreign_check(f->fsm), 0);
    assert_int_equal(apply(f, "UPDATE kv SET v = 3 WHERE k = 'a'"), 0);
}

/* A commit by another connection is seen by the check, with a message
 * naming the file and the next index, and stays seen. */
static void test_foreign_commit_is_seen(void **state)
{
    struct fixture *f = *state;
    char expect[256];
    uint64_t applied = sql_fsm_applied(f->fsm);

    outside(f, "INSERT INTO kv VALUES('k', 1)");
    assert_int_equal(sql_fsm_foreign_check(f->fsm), SQL_ERR_DIVERGED);
    snprintf(expect, sizeof expect,
             "a write the node did not make was committed to %s (PRAGMA "
             "data_version changed) before index %llu",
             f->fsm->path, (unsigned long long)applied + 1);
    assert_string_equal(sql_fsm_errmsg(f->fsm), expect);
    assert_int_equal(sql_fsm_foreign_check(f->fsm), SQL_ERR_DIVERGED);
}

/* sql_fsm_apply checks under its write lock, without an idle check
 * before: it fails and applies nothing, however many times it is tried. */
static void test_apply_applies_nothing_on_top(void **state)
{
    struct fixture *f = *state;
    uint64_t applied = sql_fsm_applied(f->fsm);

    outside(f, "DELETE FROM kv");
    for (int i = 0; i < 2; i++) {
        assert_int_equal(apply(f, "INSERT INTO kv VALUES('b', 2)"),
                         SQL_ERR_DIVERGED);
        assert_int_equal(sql_fsm_applied(f->fsm), applied);
    }
    assert_query(f->tmp.path, "SELECT count(*) FROM kv", "0");
    assert_query(f->tmp.path, "SELECT idx FROM raftsql_applied", "2");
}

/* A snapshot install replaces the database and ends the divergence. */
static void test_install_ends_it(void **state)
{
    struct fixture *f = *state;
    uint64_t index, term, got_index, got_term;
    char msg[256] = "";

    snprintf(f->snap, sizeof f->snap, "%s/snap", f->tmp.dir);
    assert_int_equal(sql_fsm_snapshot_create(f->fsm, f->snap, &index, &term,
                                             msg, sizeof msg),
                     0);
    outside(f, "UPDATE kv SET v = 99");
    assert_int_equal(sql_fsm_foreign_check(f->fsm), SQL_ERR_DIVERGED);
    assert_int_equal(
        sql_fsm_snapshot_install(f->fsm, f->snap, &got_index, &got_term), 0);
    assert_int_equal(got_index, index);
    assert_int_equal(sql_fsm_foreign_check(f->fsm), 0);
    assert_query(f->tmp.path, "SELECT v FROM kv WHERE k = 'a'", "1");
    assert_int_equal(apply(f, "INSERT INTO kv VALUES('b', 2)"), 0);
}

/* With the checksum on, a moved data_version is confirmed first: a
 * TRUNCATE checkpoint by another connection (no commit) is no foreign
 * write, leaves a note and a new baseline, by the idle check and inside
 * sql_fsm_apply; a real commit is still seen, naming the table. */
static void test_checkpoint_is_not_foreign_with_checksum(void **state)
{
    struct fixture *f = *state;
    char note[512], expect[512];

    assert_int_equal(sql_fsm_checksum_enable(f->fsm, 1), 0);
    assert_int_equal(apply(f, "INSERT INTO kv VALUES('b', 2)"), 0);
    outside(f, "PRAGMA wal_checkpoint(TRUNCATE)");
    assert_int_equal(sql_fsm_foreign_check(f->fsm), 0);
    assert_int_equal(sql_fsm_foreign_note(f->fsm, note, sizeof note), 1);
    assert_non_null(strstr(note, "no foreign write"));
    assert_int_equal(sql_fsm_foreign_note(f->fsm, note, sizeof note), 0);
    assert_int_equal(apply(f, "INSERT INTO kv VALUES('c', 3)"), 0);
    outside(f, "PRAGMA wal_checkpoint(TRUNCATE)");
    assert_int_equal(apply(f, "INSERT INTO kv VALUES('d', 4)"), 0);
    assert_int_equal(sql_fsm_foreign_note(f->fsm, note, sizeof note), 1);
    assert_int_equal(sql_fsm_foreign_check(f->fsm), 0);
    /* The node's own schema change is no foreign one. */
    assert_int_equal(apply(f, "CREATE TABLE t2(x)"), 0);
    outside(f, "PRAGMA wal_checkpoint(TRUNCATE)");
    assert_int_equal(sql_fsm_foreign_check(f->fsm), 0);
    outside(f, "UPDATE kv SET v = 9 WHERE k = 'a'");
    assert_int_equal(sql_fsm_foreign_check(f->fsm), SQL_ERR_DIVERGED);
    snprintf(expect, sizeof expect,
             "a write the node did not make was committed to %s (PRAGMA "
             "data_version changed, and the content of kv differs from the "
             "running checksum) before index %llu",
             f->fsm->path, (unsigned long long)sql_fsm_applied(f->fsm) + 1);
    assert_string_equal(sql_fsm_errmsg(f->fsm), expect);
}

/* A foreign schema change that writes no row is seen by the schema
 * cookie; sql_fsm_verify names a table whose rows changed. */
static void test_schema_cookie_and_verify(void **state)
{
    struct fixture *f = *state;
    char differ[200];

    assert_int_equal(sql_fsm_checksum_enable(f->fsm, 1), 0);
    assert_int_equal(sql_fsm_verify(f->fsm, differ, sizeof differ), 0);
    assert_string_equal(differ, "");
    outside(f, "CREATE INDEX kv_v ON kv(v)");
    assert_int_equal(sql_fsm_foreign_check(f->fsm), SQL_ERR_DIVERGED);
    assert_non_null(strstr(sql_fsm_errmsg(f->fsm), "and the schema"));
    outside(f, "INSERT INTO kv VALUES('z', 26)");
    assert_int_equal(sql_fsm_verify(f->fsm, differ, sizeof differ),
                     SQL_ERR_DIVERGED);
    assert_string_equal(differ, "kv");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_own_work_is_not_foreign, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_foreign_commit_is_seen, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_apply_applies_nothing_on_top,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_install_ends_it, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_checkpoint_is_not_foreign_with_checksum, setup, teardown),
        cmocka_unit_test_setup_teardown(test_schema_cookie_and_verify, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
