/* Tests of the guard's list of connections (ext/surface/guard.c): expiring
 * their prepared statements from another thread (ext_guard_expire_all, as the
 * loop thread does when a node turns stale) makes them reprepare, and so
 * be authorized again, at their next step; the authorizer in place stays
 * (the guard with a host's chained, or one a host set directly); a
 * connection in use is only tried and expired by a later retry; a closed
 * one is forgotten; one without a mutex is left alone. The refusal watch
 * (ext/surface/refusal_watch.c) expires, on its own thread, the statements of a
 * process that runs no node when the node of another process turns stale
 * or diverged (its notice appears) or, on a file bound by max_staleness_ms, when no
 * node serves it any more (or its node stopped refreshing the marker). */

#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ext/runtime/attach_sock.h"
#include "ext/surface/guard.h"
#include "ext/surface/refusal_watch.h"
#include "ext/surface/wal_lock.h"
#include "tests/sql/helpers.h"

/* counter is an authorizer that counts its calls and allows all. */
static int counter(void *arg, int action, const char *a1, const char *a2,
                   const char *db_name, const char *trigger)
{
    (void)action;
    (void)a1;
    (void)a2;
    (void)db_name;
    (void)trigger;
    (*(int *)arg)++;
    return SQLITE_OK;
}

/* open_guarded opens @path (@flags added) with the guard installed and a
 * table t. */
static sqlite3 *open_guarded(const char *path, int flags)
{
    sqlite3 *db = NULL;
    assert_int_equal(
        sqlite3_open_v2(path, &db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | flags,
                        NULL),
        SQLITE_OK);
    assert_int_equal(ext_guard_install(db), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(db, "CREATE TABLE IF NOT EXISTS t(x)", NULL, NULL, NULL),
        SQLITE_OK);
    return db;
}

/* run steps @st to its end and resets it; returns how often it was
 * reprepared so far. */
static int run(sqlite3_stmt *st)
{
    while (sqlite3_step(st) == SQLITE_ROW) {
    }
    assert_int_equal(sqlite3_reset(st), SQLITE_OK);
    return sqlite3_stmt_status(st, SQLITE_STMTSTATUS_REPREPARE, 0);
}

static void *expire_thread(void *arg)
{
    (void)arg;
    ext_guard_expire_all();
    return NULL;
}

/* in_thread runs ext_guard_expire_all on another thread, which must be
 * done within 5 s (it never waits for a connection). */
static void in_thread(void)
{
    pthread_t t;
    struct timespec deadline;
    assert_int_equal(pthread_create(&t, NULL, expire_thread, NULL), 0);
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 5;
    assert_int_equal(pthread_timedjoin_np(t, NULL, &deadline), 0);
}

/* A statement prepared before is reprepared at its next step, through the
 * authorizer in place: the host's, chained behind the guard, sees it
 * again. */
static void test_expire_reprepares(void **state)
{
    struct tmpdb d;
    sqlite3 *db;
    sqlite3_stmt *st;
    int calls = 0, before;
    (void)state;

    tmpdb_init(&d);
    db = open_guarded(d.path, 0);
    assert_int_equal(ext_guard_set_host(db, counter, &calls), SQLITE_OK);
    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, NULL),
        SQLITE_OK);
    assert_int_equal(run(st), 0);
    assert_int_equal(run(st), 0);
    before = calls;
    in_thread();
    assert_int_equal(run(st), 1);
    assert_true(calls > before);
    /* Once only: nothing is marked any more. */
    ext_guard_expire_retry();
    assert_int_equal(run(st), 1);
    sqlite3_finalize(st);
    sqlite3_close(db);
    tmpdb_remove(&d);
}

/* An authorizer a host set directly, after the guard, stays in place. */
static void test_direct_authorizer_kept(void **state)
{
    struct tmpdb d;
    sqlite3 *db;
    sqlite3_stmt *st;
    int calls = 0;
    (void)state;

    tmpdb_init(&d);
    db = open_guarded(d.path, 0);
    sqlite3_set_authorizer(db, counter, &calls);
    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, NULL),
        SQLITE_OK);
    assert_int_equal(run(st), 0);
    calls = 0;
    in_thread();
    assert_int_equal(run(st), 1);
    assert_true(calls > 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    tmpdb_remove(&d);
}

/* A connection whose mutex another thread holds is not waited for: it
 * stays marked, and a later retry expires its statements. */
static void test_busy_connection_retried(void **state)
{
    struct tmpdb d;
    sqlite3 *db;
    sqlite3_stmt *st;
    (void)state;

    tmpdb_init(&d);
    db = open_guarded(d.path, 0);
    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, NULL),
        SQLITE_OK);
    assert_int_equal(run(st), 0);
    sqlite3_mutex_enter(sqlite3_db_mutex(db));
    in_thread(); /* returns although the connection is held */
    sqlite3_mutex_leave(sqlite3_db_mutex(db));
    assert_int_equal(run(st), 0); /* not expired yet */
    ext_guard_expire_retry();
    assert_int_equal(run(st), 1);
    sqlite3_finalize(st);
    sqlite3_close(db);
    tmpdb_remove(&d);
}

/* A connection closed while marked is forgotten (ASan: no use after
 * free), and connections closing while another thread expires them in a
 * loop neither deadlock nor crash. */
static _Atomic int stop_loop;

static void *loop_thread(void *arg)
{
    (void)arg;
    while (!stop_loop) {
        ext_guard_expire_all();
        ext_guard_expire_retry();
    }
    return NULL;
}

static void test_closed_forgotten(void **state)
{
    struct tmpdb d;
    sqlite3 *db;
    pthread_t t;
    (void)state;

    tmpdb_init(&d);
    db = open_guarded(d.path, 0);
    sqlite3_mutex_enter(sqlite3_db_mutex(db));
    in_thread(); /* marked, not expired */
    sqlite3_mutex_leave(sqlite3_db_mutex(db));
    sqlite3_close(db);
    ext_guard_expire_retry();

    stop_loop = 0;
    assert_int_equal(pthread_create(&t, NULL, loop_thread, NULL), 0);
    for (int i = 0; i < 200; i++) {
        sqlite3_stmt *st;
        db = open_guarded(d.path, 0);
        assert_int_equal(
            sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, NULL),
            SQLITE_OK);
        (void)run(st);
        sqlite3_finalize(st);
        sqlite3_close(db);
    }
    stop_loop = 1;
    assert_int_equal(pthread_join(t, NULL), 0);
    tmpdb_remove(&d);
}

/* A connection without a mutex (SQLITE_OPEN_NOMUTEX) is not touched from
 * another thread: its mark is dropped, its statements not expired. */
static void test_nomutex_left_alone(void **state)
{
    struct tmpdb d;
    sqlite3 *db;
    sqlite3_stmt *st;
    (void)state;

    tmpdb_init(&d);
    db = open_guarded(d.path, SQLITE_OPEN_NOMUTEX);
    assert_null(sqlite3_db_mutex(db));
    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, NULL),
        SQLITE_OK);
    assert_int_equal(run(st), 0);
    in_thread();
    ext_guard_expire_retry();
    assert_int_equal(run(st), 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    tmpdb_remove(&d);
}

/* write_file writes @text to "<@db><@suffix>". */
static void write_file(const char *db, const char *suffix, const char *text)
{
    char path[600];
    FILE *f;
    snprintf(path, sizeof path, "%s%s", db, suffix);
    f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

/* remove_file removes "<@db><@suffix>". */
static void remove_file(const char *db, const char *suffix)
{
    char path[600];
    snprintf(path, sizeof path, "%s%s", db, suffix);
    unlink(path);
}

/* refused_within steps @st (prepared while reads were allowed) until the
 * guard refuses it (SQLITE_AUTH: it was expired and reprepared), at most
 * 30 s of wall time (the refusal watch is a thread of its own: under
 * ThreadSanitizer on a loaded machine 5 s was once not enough); returns
 * whether it was refused. */
static bool refused_within(sqlite3_stmt *st)
{
    struct timespec t0, now;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int rc = sqlite3_step(st);
        if (rc == SQLITE_AUTH) {
            return true;
        }
        assert_int_equal(rc, SQLITE_ROW);
        assert_int_equal(sqlite3_reset(st), SQLITE_OK);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec > 30) {
            return false;
        }
        usleep(5000);
    }
}

/* watch_notice: a process that runs no node, whose connection prepared a
 * read while the node of another process (this pid in the pointer file)
 * was healthy: its statement is refused once that node's notice
 * "<db>@suffix" (@text) appears, without being prepared anew; the notice
 * gone, it reads again. */
static void watch_notice(const char *suffix, const char *text)
{
    struct ext_attach_pointer p = {.pid = (long)getpid(),
                                   .socket = "/nonexistent/node.sock",
                                   .timeout_ms = 1000};
    struct tmpdb d;
    sqlite3 *db;
    sqlite3_stmt *st;
    char err[256];

    tmpdb_init(&d);
    db = open_guarded(d.path, 0);
    assert_int_equal(attach_sock_pointer_write(d.path, &p, err, sizeof err), 0);
    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, NULL),
        SQLITE_OK);
    assert_int_equal(run(st), 0);
    write_file(d.path, suffix, text);
    assert_true(refused_within(st));
    remove_file(d.path, suffix);
    sqlite3_finalize(st);
    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, NULL),
        SQLITE_OK);
    assert_int_equal(run(st), 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    attach_sock_pointer_remove(d.path, p.pid);
    tmpdb_remove(&d);
}

/* The node of another process turned stale (max_staleness_ms). */
static void test_watch_stale_notice(void **state)
{
    (void)state;
    watch_notice("-raftsql-stale",
                 "stale replica: no round trip with its leader since "
                 "2026-12-01T17:49:25.123Z (max_staleness_ms=500)\n");
}

/* The node of another process found its replica diverged. */
static void test_watch_diverged_notice(void **state)
{
    (void)state;
    watch_notice("-raftsql-diverged",
                 "diverged replica: a write the node did not make was "
                 "committed to the file\n");
}

/* bound_by_us writes the bound marker of @path (max_staleness_ms=500)
 * naming this process, a live one. */
static void bound_by_us(const char *path)
{
    char text[128];
    snprintf(text, sizeof text,
             "raftsql-bound 1\nmax_staleness_ms=500\npid=%ld\n",
             (long)getpid());
    write_file(path, "-raftsql-bound", text);
}

/* served_by_us writes the pointer file of @path naming this process, as
 * a node serving the file does once started. */
static void served_by_us(const char *path)
{
    struct ext_attach_pointer p = {.pid = (long)getpid(),
                                   .socket = "/nonexistent/node.sock",
                                   .timeout_ms = 1000};
    char err[256];
    assert_int_equal(attach_sock_pointer_write(path, &p, err, sizeof err), 0);
}

/* A file whose node ran with max_staleness_ms (its bound marker) is
 * refused while no node serves it: the marker names no process (a clean
 * stop) or a dead one (killed), or a live one whose pointer file is not
 * out yet (it is starting: its stale notice does not count until then,
 * and a restarted node served, in other processes, the state of before
 * its kill -9); a statement prepared while its node ran is expired. A
 * marker naming a live process that serves the file lets reads
 * through. */
static void test_watch_unserved(void **state)
{
    struct tmpdb d;
    sqlite3 *db;
    sqlite3_stmt *st;
    char why[600];
    (void)state;

    tmpdb_init(&d);
    db = open_guarded(d.path, 0);
    bound_by_us(d.path);
    assert_int_equal(ext_guard_read_refusal(d.path, why, sizeof why),
                     EXT_GUARD_STALE);
    assert_non_null(strstr(why, ") is starting (max_staleness_ms=500)"));
    served_by_us(d.path);
    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, NULL),
        SQLITE_OK);
    assert_int_equal(run(st), 0);
    assert_int_equal(ext_guard_read_refusal(d.path, why, sizeof why), 0);
    /* The node stopped. */
    write_file(d.path, "-raftsql-bound",
               "raftsql-bound 1\nmax_staleness_ms=500\npid=0\n");
    assert_int_equal(ext_guard_read_refusal(d.path, why, sizeof why),
                     EXT_GUARD_STALE);
    assert_non_null(strstr(why, "stale replica: no raftsql node serves "));
    assert_non_null(strstr(why, "stopped with max_staleness_ms=500"));
    assert_true(refused_within(st));
    sqlite3_finalize(st);
    assert_int_not_equal(
        sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, NULL),
        SQLITE_OK);
    /* Killed: a pid no process has (above pid_max). */
    write_file(d.path, "-raftsql-bound",
               "raftsql-bound 1\nmax_staleness_ms=500\npid=99999999\n");
    assert_int_equal(ext_guard_read_refusal(d.path, why, sizeof why),
                     EXT_GUARD_STALE);
    assert_non_null(strstr(why, "died with max_staleness_ms=500"));
    remove_file(d.path, "-raftsql-bound");
    assert_int_equal(ext_guard_read_refusal(d.path, why, sizeof why), 0);
    sqlite3_close(db);
    attach_sock_pointer_remove(d.path, (long)getpid());
    tmpdb_remove(&d);
}

/* looked waits until the refusal watch has looked at every watched file
 * twice more (a whole look after this call), at most 30 s; returns
 * whether it did. */
static bool looked(void)
{
    uint64_t from = refusal_watch_looks();
    for (unsigned i = 0; i < 30000; i++) {
        if (refusal_watch_looks() >= from + 2) {
            return true;
        }
        usleep(1000);
    }
    return false;
}

/* A file refused at one look of the watch and at the next, but served
 * in between (a node started, then stopped) while a connection prepared
 * a read: that statement is expired and refused too. Before, the watch
 * saw "refused" twice, no turn, and the statement read on for ever;
 * test_watch_unserved failed so whenever no look fell in its fresh
 * window of a few microseconds. Here the watch is stopped across that
 * window, so the looks fall where they must. */
static void test_watch_fresh_between_looks(void **state)
{
    struct tmpdb d;
    sqlite3 *db;
    sqlite3_stmt *st;
    char why[600];
    (void)state;

    tmpdb_init(&d);
    db = open_guarded(d.path, 0);
    bound_by_us(d.path); /* starting: refused */
    assert_true(looked());
    refusal_watch_stop();
    served_by_us(d.path);
    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, NULL),
        SQLITE_OK);
    assert_int_equal(run(st), 0);
    write_file(d.path, "-raftsql-bound",
               "raftsql-bound 1\nmax_staleness_ms=500\npid=0\n");
    assert_int_equal(ext_guard_read_refusal(d.path, why, sizeof why),
                     EXT_GUARD_STALE);
    refusal_watch_add(d.path); /* starts the thread again */
    assert_true(refused_within(st));
    refusal_watch_remove(d.path);
    sqlite3_finalize(st);
    remove_file(d.path, "-raftsql-bound");
    sqlite3_close(db);
    attach_sock_pointer_remove(d.path, (long)getpid());
    tmpdb_remove(&d);
}

/* open_wrapped is open_guarded in WAL mode with @path's main file
 * wrapped as a plain writer's connection's is (wal_lock_wrap): the read
 * transactions of every connection on a node's file begin there. */
static sqlite3 *open_wrapped(const char *path)
{
    sqlite3 *db = open_guarded(path, 0);
    char why[256];
    assert_int_equal(
        sqlite3_exec(db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL),
        SQLITE_OK);
    assert_int_equal(wal_lock_wrap(db, path, 1, why, sizeof why), 0);
    return db;
}

/* A connection busy since before its expiry was asked for (its mutex
 * held throughout) whose reads are allowed reads on: its statements,
 * prepared before, begin their reads with the expiry still pending and
 * are not cut short (expired while running, a statement would end in
 * SQLITE_ABORT_ROLLBACK as it opens its table); a retry once the
 * connection is free expires them. */
static void test_busy_connection_reads_on(void **state)
{
    struct tmpdb d;
    sqlite3 *db;
    sqlite3_stmt *st;
    (void)state;

    tmpdb_init(&d);
    db = open_wrapped(d.path);
    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, NULL),
        SQLITE_OK);
    assert_int_equal(run(st), 0);
    sqlite3_mutex_enter(sqlite3_db_mutex(db));
    in_thread(); /* cannot take the connection */
    assert_int_equal(run(st), 0);
    assert_int_equal(run(st), 0);
    sqlite3_mutex_leave(sqlite3_db_mutex(db));
    assert_false(ext_guard_expire_retry());
    assert_int_equal(run(st), 1);
    sqlite3_finalize(st);
    sqlite3_close(db);
    tmpdb_remove(&d);
}

/* The node of another process turns stale while a connection of this
 * one is busy for longer than the watch's period (its mutex held by
 * this thread throughout, so that the watch can never expire it): a
 * read prepared before is refused at its next step all the same, as its
 * read transaction begins. Before, it read the replica's old state, for
 * as long as the connection stayed busy: make jepsen seed 451370, a
 * read of an attached process served 2.9 s stale (1.77 s past its
 * bound) after a raft_barrier that waited 3 s on its connection. */
static void test_busy_connection_refused_at_read_begin(void **state)
{
    struct tmpdb d;
    sqlite3 *db;
    sqlite3_stmt *st;
    (void)state;

    tmpdb_init(&d);
    db = open_wrapped(d.path);
    served_by_us(d.path);
    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, NULL),
        SQLITE_OK);
    assert_int_equal(run(st), 0);
    sqlite3_mutex_enter(sqlite3_db_mutex(db));
    write_file(d.path, "-raftsql-stale",
               "stale replica: no round trip with its leader since "
               "2026-12-06T13:47:56.272Z (max_staleness_ms=500)\n");
    assert_true(looked()); /* it saw the notice, and could not expire */
    assert_int_equal(sqlite3_step(st), SQLITE_AUTH);
    assert_string_equal(sqlite3_errmsg(db), "not authorized");
    sqlite3_mutex_leave(sqlite3_db_mutex(db));
    assert_int_equal(sqlite3_reset(st), SQLITE_AUTH);
    remove_file(d.path, "-raftsql-stale");
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    sqlite3_finalize(st);
    sqlite3_close(db);
    attach_sock_pointer_remove(d.path, (long)getpid());
    tmpdb_remove(&d);
}

/* allow_commit is a commit hook that lets every commit through (in
 * place of the guard's, which vetoes one to a replica's file). */
static int allow_commit(void *arg)
{
    (void)arg;
    return 0;
}

/* A commit whose hook accepted it is never failed by the read-begin
 * check: a transaction that read with the WAL wholly checkpointed (read
 * mark 0) restarts the WAL as it commits and takes another read mark
 * then, under the write lock. Refused there, SQLite rolled back a commit
 * that a plain write's hook had already replicated (a review of the fix
 * above: COMMIT failed, "cannot commit - no transaction is active"). */
static void test_commit_not_failed_at_wal_restart(void **state)
{
    struct tmpdb d;
    sqlite3 *db;
    sqlite3_stmt *st;
    char why[256];
    (void)state;

    tmpdb_init(&d);
    db = open_guarded(d.path, 0);
    assert_int_equal(
        sqlite3_exec(db,
                     "PRAGMA journal_mode=WAL; INSERT INTO t VALUES(0); "
                     "PRAGMA wal_checkpoint(PASSIVE)",
                     NULL, NULL, NULL),
        SQLITE_OK);
    assert_int_equal(wal_lock_wrap_reads(db, d.path, why, sizeof why), 0);
    assert_int_equal(
        sqlite3_exec(db, "BEGIN; INSERT INTO t VALUES(1)", NULL, NULL, NULL),
        SQLITE_OK);
    served_by_us(d.path);
    sqlite3_mutex_enter(sqlite3_db_mutex(db));
    write_file(d.path, "-raftsql-stale",
               "stale replica: no round trip with its leader since "
               "2026-12-06T13:47:56.272Z (max_staleness_ms=500)\n");
    assert_true(looked()); /* an expiry pending, reads refused */
    sqlite3_commit_hook(db, allow_commit, NULL);
    assert_int_equal(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_mutex_leave(sqlite3_db_mutex(db));
    remove_file(d.path, "-raftsql-stale");
    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, NULL),
        SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 2);
    sqlite3_finalize(st);
    sqlite3_close(db);
    attach_sock_pointer_remove(d.path, (long)getpid());
    tmpdb_remove(&d);
}

/* asked counts the calls of counting_begin, with the connection of the
 * last one. */
static int asked;
static sqlite3 *asked_db;

/* counting_begin is a read-begin check that counts and lets reads
 * begin. */
static int counting_begin(sqlite3 *db)
{
    asked++;
    asked_db = db;
    return SQLITE_OK;
}

/* The read-begin check is asked with the connection whose read begins,
 * never on a file that SQLite's shared cache gives two connections: the
 * wrapper's connection is then the first one only, which may be closed
 * (a review of the fix above: the second connection's reads asked about
 * the closed first one). */
static void test_read_begin_asked_for_its_connection(void **state)
{
    struct tmpdb d;
    sqlite3 *a, *b, *solo;
    char uri[700], why[256];
    (void)state;

    tmpdb_init(&d);
    solo = open_guarded(d.path, 0);
    assert_int_equal(
        sqlite3_exec(solo, "PRAGMA journal_mode=WAL", NULL, NULL, NULL),
        SQLITE_OK);
    assert_int_equal(wal_lock_wrap_reads(solo, d.path, why, sizeof why), 0);
    snprintf(uri, sizeof uri, "file:%s?cache=shared", d.path);
    a = open_guarded(uri, SQLITE_OPEN_URI);
    b = open_guarded(uri, SQLITE_OPEN_URI);
    assert_int_equal(wal_lock_wrap_reads(a, d.path, why, sizeof why), 0);
    assert_int_equal(wal_lock_wrap_reads(b, d.path, why, sizeof why), 0);
    wal_lock_set_read_begin(counting_begin);
    assert_int_equal(
        sqlite3_exec(solo, "SELECT count(*) FROM t", NULL, NULL, NULL),
        SQLITE_OK);
    assert_int_equal(asked, 1);
    assert_ptr_equal(asked_db, solo);
    assert_int_equal(sqlite3_close(a), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(b, "SELECT count(*) FROM t", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(asked, 1);
    wal_lock_set_read_begin(ext_guard_read_begin);
    sqlite3_close(b);
    sqlite3_close(solo);
    tmpdb_remove(&d);
}

/* set_age sets the mtime of the bound marker of @path to @age_ms before
 * now (negative: after). */
static void set_age(const char *path, int64_t age_ms)
{
    char marker[4200];
    struct timespec t[2];
    int64_t ns;
    attach_sock_bound_path(path, marker, sizeof marker);
    clock_gettime(CLOCK_REALTIME, &t[0]);
    ns = (int64_t)t[0].tv_sec * 1000000000 + t[0].tv_nsec - age_ms * 1000000;
    t[0].tv_sec = (time_t)(ns / 1000000000);
    t[0].tv_nsec = (long)(ns % 1000000000);
    t[1] = t[0];
    assert_int_equal(utimensat(AT_FDCWD, marker, t, 0), 0);
}

/* A marker naming a live process (a stopped one, or a zombie: its pid
 * exists) whose mtime the node stopped refreshing, older than the bound
 * or ahead of the clock by more (a wall clock stepped back), is refused
 * too: a statement prepared while it beat is expired; a fresh mtime lets
 * reads through. */
static void test_watch_silent(void **state)
{
    struct tmpdb d;
    sqlite3 *db;
    sqlite3_stmt *st;
    char why[600], want[128];
    (void)state;

    tmpdb_init(&d);
    db = open_guarded(d.path, 0);
    bound_by_us(d.path);
    served_by_us(d.path);
    set_age(d.path, 400); /* within the bound */
    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, NULL),
        SQLITE_OK);
    assert_int_equal(run(st), 0);
    assert_int_equal(ext_guard_read_refusal(d.path, why, sizeof why), 0);
    set_age(d.path, 2000);
    assert_int_equal(ext_guard_read_refusal(d.path, why, sizeof why),
                     EXT_GUARD_STALE);
    snprintf(want, sizeof want, "(pid %ld) showed no sign of life for ",
             (long)getpid());
    assert_non_null(strstr(why, "stale replica: the node serving "));
    assert_non_null(strstr(why, want));
    assert_non_null(strstr(why, " ms (max_staleness_ms=500)"));
    assert_true(refused_within(st));
    sqlite3_finalize(st);
    set_age(d.path, -2000);
    assert_int_equal(ext_guard_read_refusal(d.path, why, sizeof why),
                     EXT_GUARD_STALE);
    assert_non_null(strstr(why, "since the wall clock went back "));
    set_age(d.path, 0); /* it beats again */
    assert_int_equal(ext_guard_read_refusal(d.path, why, sizeof why), 0);
    remove_file(d.path, "-raftsql-bound");
    sqlite3_close(db);
    attach_sock_pointer_remove(d.path, (long)getpid());
    tmpdb_remove(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expire_reprepares),
        cmocka_unit_test(test_direct_authorizer_kept),
        cmocka_unit_test(test_busy_connection_retried),
        cmocka_unit_test(test_closed_forgotten),
        cmocka_unit_test(test_nomutex_left_alone),
        cmocka_unit_test(test_watch_stale_notice),
        cmocka_unit_test(test_watch_diverged_notice),
        cmocka_unit_test(test_watch_unserved),
        cmocka_unit_test(test_watch_fresh_between_looks),
        cmocka_unit_test(test_watch_silent),
        cmocka_unit_test(test_busy_connection_reads_on),
        cmocka_unit_test(test_busy_connection_refused_at_read_begin),
        cmocka_unit_test(test_commit_not_failed_at_wal_restart),
        cmocka_unit_test(test_read_begin_asked_for_its_connection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
