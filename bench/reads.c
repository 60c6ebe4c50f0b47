/* reads-bench: point selects by primary key on a replica's kv table, with
 * the same SQLite (the program links the system's libsqlite3) with or
 * without raftsql loaded: what the write guard costs a plain read
 * (bench/reads.sh runs it in interleaved rounds, bench/README.md).
 *
 * Usage: reads-bench --db FILE [--load EXT] [--start CONFIG] [--wrote]
 *                    [--prepare] [--rows N] [--queries N] [--setup]
 *                    [--touch] [--name NAME]
 *
 * Without --load nothing but SQLite runs (stock). --load EXT loads the
 * extension (sqlite3_load_extension, as any SQLite program can) before
 * the reading connection opens, so that connection is guarded as every
 * connection of the process is. --start CONFIG then runs raft_start(CONFIG)
 * on FILE in this process (the node's own process); without it FILE is
 * served by a node of another process (its attach socket). Either way the
 * bench waits until the table holds its --rows rows (with --start, then
 * writes one row through raft_exec, so that the WAL holds a frame).
 * --setup (with
 * --load, no --start) creates kv(k INTEGER PRIMARY KEY, v TEXT) with
 * --rows rows through raft_exec and exits. --touch (with --load, no
 * --start) writes one row through raft_exec, returns once the node
 * serving FILE applied it, and exits: reads.sh runs it before each run
 * on another process's file, so that every run, stock or not, reads a
 * WAL that holds a commit not yet checkpointed, as the run that wrote
 * does (with the WAL checkpointed to its end SQLite reads the database
 * file alone and looks no page up in the WAL, about 100 instructions a
 * read less: no cost of raftsql's). --wrote makes the reading
 * connection write one row (plain SQL, autocommit) before it reads: its
 * plain-write hooks are then installed. --prepare prepares each query
 * anew (sqlite3_prepare_v2 + finalize, as a driver without a statement
 * cache does); otherwise one statement is reset and bound again.
 *
 * It reads --queries keys (default 100,000) uniformly at random after a
 * tenth as many unmeasured, and prints one line:
 *   RESULT name=NAME reads_per_s=R ns_per_read=W cpu_ns_per_read=C
 * (C: the reading thread's CPU time, RUSAGE_THREAD). Exits 1 with a
 * message on any SQLite error. */

#define _GNU_SOURCE
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "timing.h"
#include "xorshift.h"

#define READS__SQL "SELECT v FROM kv WHERE k = ?"

/* The command line. */
struct reads_opts {
    const char *db;    /* --db */
    const char *ext;   /* --load, NULL: stock */
    const char *start; /* --start, NULL: the node runs elsewhere */
    const char *name;  /* --name */
    bool wrote;        /* --wrote */
    bool prepare;      /* --prepare */
    bool setup;        /* --setup */
    bool touch;        /* --touch */
    long rows;         /* --rows */
    long queries;      /* --queries */
};

/* fail prints @what and @db's error and exits 1. */
static void fail(sqlite3 *db, const char *what)
{
    fprintf(stderr, "reads-bench: %s: %s\n", what,
            db != NULL ? sqlite3_errmsg(db) : "out of memory");
    exit(1);
}

/* scalar runs @sql on @db and returns its first column as an integer
 * (-1 when it fails or has no row; *@err the error when it fails). */
static long long scalar(sqlite3 *db, const char *sql, bool *err)
{
    sqlite3_stmt *s = NULL;
    long long v = -1;
    *err = sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK;
    if (!*err) {
        int rc = sqlite3_step(s);
        if (rc == SQLITE_ROW) {
            v = sqlite3_column_int64(s, 0);
        } else if (rc != SQLITE_DONE) {
            *err = true;
        }
    }
    sqlite3_finalize(s);
    return v;
}

/* exec runs @sql on @db or exits. */
static void exec(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        fprintf(stderr, "reads-bench: %s: %s\n", sql, err);
        exit(1);
    }
}

/* wait_rows waits (up to 120 s) until @db's kv holds @rows keys 1..@rows. */
static void wait_rows(sqlite3 *db, long rows)
{
    double end = timing_now_s() + 120;
    static const volatile sig_atomic_t never = 0;
    while (timing_now_s() < end) {
        bool err;
        long long n = scalar(db, "SELECT count(*) FROM kv WHERE k >= 1", &err);
        if (!err && n == rows) {
            return;
        }
        (void)timing_sleep_s(0.1, &never);
    }
    fprintf(stderr, "reads-bench: kv never held %ld rows\n", rows);
    exit(1);
}

/* open_db opens @path with a busy timeout, or exits. */
static sqlite3 *open_db(const char *path)
{
    sqlite3 *db = NULL;
    if (sqlite3_open(path, &db) != SQLITE_OK ||
        sqlite3_busy_timeout(db, 5000) != SQLITE_OK) {
        fail(db, path);
    }
    return db;
}

/* thread_cpu_s returns this thread's CPU time (user + system), seconds. */
static double thread_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* read_one reads key @k with @s (reused) or a statement of its own. */
static void read_one(sqlite3 *db, sqlite3_stmt *s, long k, size_t *bytes)
{
    sqlite3_stmt *own = NULL;
    if (s == NULL &&
        sqlite3_prepare_v2(db, READS__SQL, -1, &own, NULL) != SQLITE_OK) {
        fail(db, "prepare");
    }
    sqlite3_stmt *q = s != NULL ? s : own;
    sqlite3_bind_int64(q, 1, k);
    if (sqlite3_step(q) != SQLITE_ROW) {
        fail(db, "step");
    }
    *bytes += (size_t)sqlite3_column_bytes(q, 0);
    if (sqlite3_step(q) != SQLITE_DONE) {
        fail(db, "step to the end");
    }
    if (own != NULL) {
        sqlite3_finalize(own);
    } else {
        sqlite3_reset(q);
    }
}

/* run reads @n random keys on @db; returns the seconds it took and, in
 * *@cpu_s, the thread's CPU seconds. */
static double run(const struct reads_opts *o, sqlite3 *db, sqlite3_stmt *s,
                  long n, uint64_t *seed, double *cpu_s)
{
    size_t bytes = 0;
    double t0 = timing_now_s(), c0 = thread_cpu_s();
    for (long i = 0; i < n; i++) {
        long k = 1 + (long)(xorshift_next(seed) % (uint64_t)o->rows);
        read_one(db, s, k, &bytes);
    }
    *cpu_s = thread_cpu_s() - c0;
    return timing_now_s() - t0;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: reads-bench --db FILE [--load EXT] [--start CONFIG] "
            "[--wrote] [--prepare] [--rows N] [--queries N] [--setup] "
            "[--touch] [--name NAME]\n");
    exit(2);
}

static void parse(int argc, char **argv, struct reads_opts *o)
{
    *o =
        (struct reads_opts){.name = "reads", .rows = 100000, .queries = 100000};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--wrote") == 0) {
            o->wrote = true;
        } else if (strcmp(a, "--prepare") == 0) {
            o->prepare = true;
        } else if (strcmp(a, "--setup") == 0) {
            o->setup = true;
        } else if (strcmp(a, "--touch") == 0) {
            o->touch = true;
        } else if (v == NULL) {
            usage();
        } else if (strcmp(a, "--db") == 0) {
            o->db = v, i++;
        } else if (strcmp(a, "--load") == 0) {
            o->ext = v, i++;
        } else if (strcmp(a, "--start") == 0) {
            o->start = v, i++;
        } else if (strcmp(a, "--name") == 0) {
            o->name = v, i++;
        } else if (strcmp(a, "--rows") == 0) {
            o->rows = atol(v), i++;
        } else if (strcmp(a, "--queries") == 0) {
            o->queries = atol(v), i++;
        } else {
            usage();
        }
    }
    if (o->db == NULL || o->rows < 1 || o->queries < 1 ||
        ((o->start != NULL || o->setup || o->touch || o->wrote) &&
         o->ext == NULL) ||
        (o->touch && (o->start != NULL || o->setup))) {
        usage();
    }
}

/* setup creates and fills kv through raft_exec on @db. */
static void setup(sqlite3 *db, long rows)
{
    char sql[512];
    bool err;
    snprintf(sql, sizeof sql,
             "SELECT raft_exec('CREATE TABLE IF NOT EXISTS kv(k INTEGER "
             "PRIMARY KEY, v TEXT)'), raft_exec('WITH RECURSIVE c(x) AS "
             "(SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < %ld) "
             "INSERT OR REPLACE INTO kv SELECT x, printf(''value-%%090d'', "
             "x) FROM c')",
             rows);
    (void)scalar(db, sql, &err);
    if (err) {
        fail(db, "setup");
    }
}

int main(int argc, char **argv)
{
    struct reads_opts o;
    sqlite3 *boot = NULL, *db;
    sqlite3_stmt *s = NULL;
    uint64_t seed = 0x9E3779B97F4A7C15ULL;
    double secs, cpu_s;
    bool err;

    parse(argc, argv, &o);
    if (o.ext != NULL) {
        char *msg = NULL;
        boot = open_db(o.db);
        if (sqlite3_enable_load_extension(boot, 1) != SQLITE_OK ||
            sqlite3_load_extension(boot, o.ext, NULL, &msg) != SQLITE_OK) {
            fprintf(stderr, "reads-bench: load %s: %s\n", o.ext,
                    msg != NULL ? msg : sqlite3_errmsg(boot));
            return 1;
        }
        if (o.setup) {
            setup(boot, o.rows);
            wait_rows(boot, o.rows);
            sqlite3_close(boot);
            return 0;
        }
        if (o.touch) {
            (void)scalar(boot,
                         "SELECT raft_exec('INSERT OR REPLACE INTO kv "
                         "VALUES(-2, ''touch'')')",
                         &err);
            if (err) {
                fail(boot, "raft_exec");
            }
            sqlite3_close(boot);
            return 0;
        }
        if (o.start != NULL) {
            sqlite3_stmt *st = NULL;
            if (sqlite3_prepare_v2(boot, "SELECT raft_start(?)", -1, &st,
                                   NULL) != SQLITE_OK ||
                sqlite3_bind_text(st, 1, o.start, -1, SQLITE_STATIC) !=
                    SQLITE_OK ||
                sqlite3_step(st) != SQLITE_ROW) {
                fail(boot, "raft_start");
            }
            sqlite3_finalize(st);
        }
    }
    db = open_db(o.db);
    wait_rows(db, o.rows);
    if (o.start != NULL) {
        /* One write through the node (its applier's, not this
         * connection's): the WAL then holds a frame, as the daemon's
         * file does when stock reads it. With a WAL reset and empty,
         * SQLite pays an fstat() per read transaction (the page count
         * of the database file), which is no cost of raftsql's. */
        (void)scalar(boot,
                     "SELECT raft_exec('INSERT OR REPLACE INTO kv "
                     "VALUES(-1, ''node'')')",
                     &err);
        if (err) {
            fail(boot, "raft_exec");
        }
    }
    if (o.wrote) {
        exec(db, "INSERT OR REPLACE INTO kv VALUES(0, 'written')");
    }
    if (!o.prepare &&
        sqlite3_prepare_v2(db, READS__SQL, -1, &s, NULL) != SQLITE_OK) {
        fail(db, "prepare");
    }
    (void)run(&o, db, s, o.queries / 10 + 1, &seed, &cpu_s);
    secs = run(&o, db, s, o.queries, &seed, &cpu_s);
    printf(
        "RESULT name=%s reads_per_s=%.0f ns_per_read=%.0f "
        "cpu_ns_per_read=%.0f\n",
        o.name, (double)o.queries / secs, secs * 1e9 / (double)o.queries,
        cpu_s * 1e9 / (double)o.queries);
    fflush(stdout);
    sqlite3_finalize(s);
    sqlite3_close(db);
    if (o.start != NULL) {
        (void)scalar(boot, "SELECT raft_stop()", &err);
    }
    sqlite3_close(boot);
    return 0;
}
