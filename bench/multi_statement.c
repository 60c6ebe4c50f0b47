/* multi_statement.c - the time to apply one request of many statements
 * (it must grow linearly with N): raftsql's state machine
 * (sql_fsm_apply of one request holding N "INSERT INTO t VALUES(i);"
 * statements) beside stock SQLite running the same script with
 * sqlite3_exec, for N = 5,000, 20,000 and 80,000, on a fresh database in
 * a temporary directory each time. A linear apply grows 4x per step; a
 * quadratic one 16x.
 *
 * Usage: build/multi-statement-bench [--max N]   (default 80000)
 * Output: one line per N: "N <n> raftsql_ms <ms> sqlite_ms <ms>". */

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "bench/timing.h"
#include "sql/sql.h"

/* script returns "INSERT INTO t VALUES(i);\n" for i < @n (malloc'd). */
static char *script(long n, size_t *out_len)
{
    size_t cap = (size_t)n * 32 + 1, len = 0;
    char *s = malloc(cap);
    if (s == NULL) {
        return NULL;
    }
    for (long i = 0; i < n; i++) {
        len += (size_t)snprintf(s + len, cap - len,
                                "INSERT INTO t VALUES(%ld);\n", i);
    }
    *out_len = len;
    return s;
}

/* fresh_db makes an empty database file in @dir named @name. */
static void fresh_db(const char *dir, const char *name, char *out,
                     size_t out_len)
{
    FILE *fp;
    snprintf(out, out_len, "%s/%s", dir, name);
    fp = fopen(out, "w");
    if (fp != NULL) {
        fclose(fp);
    }
}

/* apply_one applies request @seq (@sql) as log entry @index. */
static int apply_one(struct sql_fsm *f, uint64_t index, const char *sql,
                     size_t len)
{
    uint64_t id[2] = {1, index};
    size_t size = 0;
    char msg[256];
    unsigned char *p;
    struct sql_fsm_entry e = {.index = index, .term = 1};
    struct sql_result r;
    int rc =
        sql_request_size(sql, len, NULL, 0, UINT64_MAX, &size, msg, sizeof msg);
    if (rc != 0 || (p = malloc(size)) == NULL) {
        return -1;
    }
    rc = sql_request_encode(id, sql, len, NULL, 0, p, size);
    if (rc == 0) {
        struct sql_stamp st = {.time_ms = 1700000000000LL, .seed = index};
        rc = sql_request_stamp(p, size, &st, p);
    }
    e.data = p;
    e.len = size;
    memset(&r, 0, sizeof r);
    if (rc == 0) {
        rc = sql_fsm_apply(f, &e, 1, &r);
    }
    if (rc == 0 && r.rc != SQLITE_OK) {
        fprintf(stderr, "multi-statement-bench: %s\n", r.errmsg);
        rc = -1;
    }
    sql_result_clear(&r);
    free(p);
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option longs[] = {
        {"max", required_argument, NULL, 'm'},
        {NULL, 0, NULL, 0},
    };
    long max = 80000;
    char dir[] = "/tmp/raftsql-multi-XXXXXX";
    int c;

    while ((c = getopt_long(argc, argv, "m:", longs, NULL)) != -1) {
        if (c != 'm' || (max = atol(optarg)) < 1) {
            fprintf(stderr, "usage: multi-statement-bench [--max N]\n");
            return 2;
        }
    }
    if (mkdtemp(dir) == NULL) {
        perror("multi-statement-bench: mkdtemp");
        return 1;
    }
    for (long n = 5000; n <= max; n *= 4) {
        char path[128], msg[256], cmd[160];
        size_t len = 0;
        char *sql = script(n, &len);
        struct sql_fsm *f = NULL;
        sqlite3 *db = NULL;
        double t0, t_raft, t_sqlite;

        fresh_db(dir, "raftsql.db", path, sizeof path);
        if (sql == NULL ||
            sql_fsm_open(path, NULL, 0, &f, msg, sizeof msg) != 0 ||
            apply_one(f, 1, "CREATE TABLE t(x)", 17) != 0) {
            fprintf(stderr, "multi-statement-bench: setup failed\n");
            return 1;
        }
        t0 = timing_now_s();
        if (apply_one(f, 2, sql, len) != 0) {
            return 1;
        }
        t_raft = timing_now_s() - t0;
        sql_fsm_close(f);

        fresh_db(dir, "sqlite.db", path, sizeof path);
        if (sqlite3_open(path, &db) != SQLITE_OK ||
            sqlite3_exec(db,
                         "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                         " CREATE TABLE t(x);",
                         NULL, NULL, NULL) != SQLITE_OK) {
            fprintf(stderr, "multi-statement-bench: sqlite setup failed\n");
            return 1;
        }
        t0 = timing_now_s();
        if (sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK ||
            sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK ||
            sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
            fprintf(stderr, "multi-statement-bench: %s\n", sqlite3_errmsg(db));
            return 1;
        }
        t_sqlite = timing_now_s() - t0;
        sqlite3_close(db);
        printf("N %ld raftsql_ms %.1f sqlite_ms %.1f\n", n, t_raft * 1e3,
               t_sqlite * 1e3);
        free(sql);
        snprintf(cmd, sizeof cmd, "rm -f %s/*", dir);
        if (system(cmd) != 0) {
            return 1;
        }
    }
    rmdir(dir);
    return 0;
}
