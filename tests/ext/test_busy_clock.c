/* Tests of the busy timeout that counts raftsql's own waits
 * (ext/surface/busy_clock.c): a busy handler's sleeps of whole
 * milliseconds are shortened by what the thread is owed, other sleeps
 * never; SQLite's own busy handler, with its count of sleeps unchanged,
 * gives up with the waits and the sleeps together at its timeout. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "ext/surface/busy_clock.h"

#define MS 1000000LL /* ns */

/* Whole milliseconds take what is owed; the rest of the sleep is slept. */
static void test_take(void **state)
{
    int64_t owed = 25 * MS;
    (void)state;

    assert_int_equal(busy_clock_take(&owed, 10000), 0);
    assert_int_equal(owed, 15 * MS);
    assert_int_equal(busy_clock_take(&owed, 20000), 5000);
    assert_int_equal(owed, 0);
    assert_int_equal(busy_clock_take(&owed, 20000), 20000);
    assert_int_equal(owed, 0);
    /* A part of a millisecond owed: the sleep is that much shorter, to
     * the microsecond below. */
    owed = 1500000;
    assert_int_equal(busy_clock_take(&owed, 2000), 500);
    assert_int_equal(owed, 0);
}

/* Sleeps that are not whole milliseconds (the WAL's own backoffs, of 1
 * us or (n-9)^2 * 39 us) are never shortened, and take nothing. */
static void test_other_sleeps_untouched(void **state)
{
    int64_t owed = 100 * MS;
    (void)state;

    assert_int_equal(busy_clock_take(&owed, 1), 1);
    for (int n = 10; n <= 100; n++) {
        int us = (n - 9) * (n - 9) * 39;
        assert_int_equal(busy_clock_take(&owed, us), us);
    }
    assert_int_equal(busy_clock_take(&owed, 0), 0);
    assert_int_equal(owed, 100 * MS);
}

/* Installed, the default VFS sleeps through the clock: a sleep owed in
 * full is not slept and marks the thread as having slept; ahead while
 * something is still owed; forgotten, nothing is. */
static void test_installed_vfs(void **state)
{
    sqlite3_vfs *vfs = sqlite3_vfs_find(NULL);
    int (*before)(sqlite3_vfs *, int) = vfs->xSleep;
    (void)state;

    busy_clock_install();
    assert_ptr_not_equal(vfs->xSleep, before);
    busy_clock_install(); /* once per process */
    busy_clock_forget();
    busy_clock_owe(30 * MS);
    assert_false(busy_clock_ahead()); /* no sleep yet */
    sqlite3_sleep(20);
    assert_int_equal(busy_clock_owed(), 10 * MS);
    assert_true(busy_clock_ahead());
    sqlite3_sleep(20);
    assert_int_equal(busy_clock_owed(), 0);
    assert_false(busy_clock_ahead());
    busy_clock_owe(-5); /* nothing negative is owed */
    assert_int_equal(busy_clock_owed(), 0);
    busy_clock_owe(5 * MS);
    busy_clock_forget();
    assert_int_equal(busy_clock_owed(), 0);
    assert_false(busy_clock_ahead());
}

/* SQLite's own busy handler (sqlite3_busy_timeout): a write that meets
 * another connection's lock gives up after sleeps that add up to its
 * timeout, and each of them takes from what the thread is owed first:
 * owed 1 s, a timeout of 100 ms leaves 900 ms owed. */
static void test_sqlite_busy_handler(void **state)
{
    char path[] = "/tmp/raftsql-busy-clock-XXXXXX";
    char file[64];
    sqlite3 *locker = NULL, *writer = NULL;
    int fd = mkstemp(path);
    (void)state;

    assert_true(fd >= 0);
    close(fd);
    unlink(path);
    snprintf(file, sizeof file, "%s.db", path);
    busy_clock_install();
    assert_int_equal(sqlite3_open(file, &locker), SQLITE_OK);
    assert_int_equal(sqlite3_exec(locker,
                                  "PRAGMA journal_mode=WAL; CREATE TABLE "
                                  "t(x); BEGIN IMMEDIATE; INSERT INTO t "
                                  "VALUES(1)",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_open(file, &writer), SQLITE_OK);
    assert_int_equal(sqlite3_busy_timeout(writer, 100), SQLITE_OK);
    busy_clock_forget();
    busy_clock_owe(1000 * MS);
    assert_int_equal(
        sqlite3_exec(writer, "INSERT INTO t VALUES(2)", NULL, NULL, NULL),
        SQLITE_BUSY);
    assert_int_equal(busy_clock_owed(), 900 * MS);
    busy_clock_forget();
    sqlite3_close(writer);
    sqlite3_close(locker);
    unlink(file);
    snprintf(file, sizeof file, "%s.db-wal", path);
    unlink(file);
    snprintf(file, sizeof file, "%s.db-shm", path);
    unlink(file);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_take),
        cmocka_unit_test(test_other_sleeps_untouched),
        cmocka_unit_test(test_installed_vfs),
        cmocka_unit_test(test_sqlite_busy_handler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
