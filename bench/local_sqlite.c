/* local-sqlite-bench: the local limit of the kv write benchmark: one
 * plain SQLite database, WAL, synchronous=FULL, no
 * replication, one writer inserting the rows of raftsql-bench (32-byte
 * random keys, 1024-byte random values) with --rows-per-txn rows per
 * transaction. Reports rows/s and the latency of each transaction
 * (BEGIN..COMMIT, including its fsync), in raftsql-bench's RESULT format,
 * with this process's CPU seconds and disk bytes per row in the window.
 *
 * Usage: local-sqlite-bench [--rows-per-txn N] [--duration S] [--name NAME]
 *                           [--dir DIR] */

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/latency.h"
#include "bench/proc_cost.h"
#include "bench/timing.h"
#include "bench/xorshift.h"

#define KEY_LEN 32
#define VALUE_LEN 1024
#define TXN_PER_S 100000 /* latency slots allocated per second of run */

static volatile sig_atomic_t g_signal;

static void on_signal(int sig)
{
    g_signal = sig;
}

static int exec_ok(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
    if (rc != SQLITE_OK) {
        fprintf(stderr, "local-sqlite-bench: %s: %s\n", sql,
                err ? err : sqlite3_errstr(rc));
    }
    sqlite3_free(err);
    return rc;
}

static void usage(FILE *f, const char *argv0)
{
    fprintf(f,
            "usage: %s [options]\n"
            "  --rows-per-txn N  rows in each transaction (1)\n"
            "  --duration S      measured seconds (20)\n"
            "  --name NAME       RESULT name (local-<N>)\n"
            "  --dir DIR         directory of the database (a temporary "
            "one, removed)\n",
            argv0);
}

int main(int argc, char **argv)
{
    static const struct option longs[] = {
        {"rows-per-txn", required_argument, NULL, 'r'},
        {"duration", required_argument, NULL, 'd'},
        {"name", required_argument, NULL, 'n'},
        {"dir", required_argument, NULL, 'D'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    long rows = 1;
    double duration = 20, t0, t1, end;
    struct proc_cost cost0 = {0}, cost1 = {0};
    char cost[256];
    char name[128] = "", dir[1024] = "", path[1200];
    bool tmp = false;
    sqlite3 *db = NULL;
    sqlite3_stmt *ins = NULL, *begin = NULL, *commit = NULL;
    uint32_t *lat = NULL;
    size_t cap, n_txn = 0, n_rows = 0;
    uint64_t seed = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ULL | 1;
    unsigned char key[KEY_LEN], value[VALUE_LEN];
    struct sigaction sa;
    int ch, rc = 1;

    while ((ch = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
        char *e = NULL;
        switch (ch) {
            case 'r':
                rows = strtol(optarg, &e, 10);
                if (*e || rows < 1 || rows > 1000000) {
                    fprintf(stderr, "--rows-per-txn: 1 to 1000000\n");
                    return 2;
                }
                break;
            case 'd':
                duration = strtod(optarg, &e);
                if (*e || duration <= 0 || duration > 86400) {
                    fprintf(stderr, "--duration: a number of seconds\n");
                    return 2;
                }
                break;
            case 'n':
                snprintf(name, sizeof name, "%s", optarg);
                break;
            case 'D':
                snprintf(dir, sizeof dir, "%s", optarg);
                break;
            case 'h':
                usage(stdout, argv[0]);
                return 0;
            default:
                usage(stderr, argv[0]);
                return 2;
        }
    }
    if (optind != argc) {
        usage(stderr, argv[0]);
        return 2;
    }
    if (name[0] == '\0') {
        snprintf(name, sizeof name, "local-%ld", rows);
    }
    if (dir[0] == '\0') {
        snprintf(dir, sizeof dir, "/tmp/local-sqlite-bench-XXXXXX");
        if (mkdtemp(dir) == NULL) {
            fprintf(stderr, "local-sqlite-bench: mkdtemp: %s\n",
                    strerror(errno));
            return 1;
        }
        tmp = true;
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    snprintf(path, sizeof path, "%s/local.db", dir);

    cap = (size_t)(duration * TXN_PER_S) + 1024;
    lat = malloc(cap * sizeof *lat);
    if (lat == NULL) {
        fprintf(stderr, "local-sqlite-bench: out of memory\n");
        goto out;
    }
    memset(lat, 0, cap * sizeof *lat);
    if (sqlite3_open(path, &db) != SQLITE_OK) {
        fprintf(stderr, "local-sqlite-bench: open %s: %s\n", path,
                sqlite3_errmsg(db));
        goto out;
    }
    if (exec_ok(db, "PRAGMA journal_mode=WAL") ||
        exec_ok(db, "PRAGMA synchronous=FULL") ||
        exec_ok(db,
                "CREATE TABLE IF NOT EXISTS "
                "kv(k BLOB PRIMARY KEY, v BLOB)")) {
        goto out;
    }
    if (sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO kv(k, v) VALUES(?, ?)",
                           -1, &ins, NULL) ||
        sqlite3_prepare_v2(db, "BEGIN", -1, &begin, NULL) ||
        sqlite3_prepare_v2(db, "COMMIT", -1, &commit, NULL)) {
        fprintf(stderr, "local-sqlite-bench: prepare: %s\n",
                sqlite3_errmsg(db));
        goto out;
    }

    proc_cost_add(getpid(), false, &cost0);
    t0 = timing_now_s();
    end = t0 + duration;
    while (!g_signal) {
        double a = timing_now_s(), us;
        if (a >= end) {
            break;
        }
        if (sqlite3_step(begin) != SQLITE_DONE) {
            goto step_err;
        }
        sqlite3_reset(begin);
        for (long r = 0; r < rows; r++) {
            xorshift_fill(&seed, key, sizeof key);
            xorshift_fill(&seed, value, sizeof value);
            sqlite3_bind_blob(ins, 1, key, sizeof key, SQLITE_STATIC);
            sqlite3_bind_blob(ins, 2, value, sizeof value, SQLITE_STATIC);
            if (sqlite3_step(ins) != SQLITE_DONE) {
                goto step_err;
            }
            sqlite3_reset(ins);
        }
        if (sqlite3_step(commit) != SQLITE_DONE) {
            goto step_err;
        }
        sqlite3_reset(commit);
        us = (timing_now_s() - a) * 1e6;
        if (n_txn < cap) {
            lat[n_txn] = us > 4e9 ? 4000000000u : (uint32_t)(us + 0.5);
        }
        n_txn++;
        n_rows += (size_t)rows;
    }
    t1 = timing_now_s();
    proc_cost_add(getpid(), false, &cost1);
    if (g_signal) {
        fprintf(stderr, "local-sqlite-bench: interrupted\n");
        goto out;
    }
    {
        size_t n = n_txn < cap ? n_txn : cap;
        double secs = t1 - t0, wps = (double)n_rows / secs;
        double p50, p99, p999;
        latency_sort(lat, n);
        proc_cost_format(cost, sizeof cost, &cost0, &cost1, n_rows);
        p50 = latency_pct_ms(lat, n, 0.50);
        p99 = latency_pct_ms(lat, n, 0.99);
        p999 = latency_pct_ms(lat, n, 0.999);
        printf(
            "%s: %.0f rows/s (%zu rows in %zu transactions of %ld in "
            "%.1f s, %.0f commits/s), transaction latency ms p50 %.3f "
            "p99 %.3f p99.9 %.3f\n",
            name, wps, n_rows, n_txn, rows, secs, (double)n_txn / secs, p50,
            p99, p999);
        printf(
            "RESULT name=%s writes_per_s=%.1f p50_ms=%.3f p99_ms=%.3f "
            "p999_ms=%.3f writes=%zu errors=0 seconds=%.2f "
            "rows_per_txn=%ld commits_per_s=%.1f %s\n",
            name, wps, p50, p99, p999, n_rows, secs, rows, (double)n_txn / secs,
            cost);
        fflush(stdout);
        rc = 0;
    }
    goto out;

step_err:
    fprintf(stderr, "local-sqlite-bench: %s\n", sqlite3_errmsg(db));
out:
    sqlite3_finalize(ins);
    sqlite3_finalize(begin);
    sqlite3_finalize(commit);
    sqlite3_close(db);
    free(lat);
    if (tmp) {
        char p2[1300];
        static const char *const suffixes[] = {"", "-wal", "-shm"};
        for (size_t i = 0; i < 3; i++) {
            snprintf(p2, sizeof p2, "%s%s", path, suffixes[i]);
            unlink(p2);
        }
        rmdir(dir);
    }
    if (g_signal) {
        return 128 + g_signal;
    }
    return rc;
}
