/* query_apply.c - the cost of RETURNING rows and client request ids on
 * the apply path: the state machine applies the
 * benchmark's unit of work (INSERT OR REPLACE INTO kv(k, v) of a random
 * 32-byte key and a 1024-byte value, with "RETURNING k" when rows are
 * wanted) in batches of 20 requests, as a plain raft_exec (format version
 * 2), as raft_query (rows as JSON), as raft_exec_id (a 16-byte client id)
 * and as raft_query_id, the modes in turn on fresh databases, each round
 * in the other order than the last. It reports the apply thread's CPU
 * time per request (CLOCK_THREAD_CPUTIME_ID).
 *
 * Usage: build/query-apply-bench [--requests N] [--rounds R]
 * Output: one line per round and mode, then the medians and their ratio
 * to plain. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "bench/fsm_apply.h"
#include "bench/xorshift.h"
#include "sql/sql.h"

#define BATCH 20
#define N_MODES 4

static const char *const mode_names[N_MODES] = {
    "raft_exec", "raft_query", "raft_exec_id", "raft_query_id"};

/* encode makes the stamped payload of request @seq in @mode (bit 0: rows
 * wanted, bit 1: a client id) into *@out (malloc'd). */
static int encode(int mode, uint64_t seq, uint64_t *rng, const char *sql,
                  unsigned char **out, size_t *out_len)
{
    unsigned char key[32], value[1024], cid[16];
    struct sql_param ps[2];
    struct sql_request_opts o = {NULL, 0, 0};
    struct sql_stamp st = {.time_ms = 1764000000000 + (int64_t)seq,
                           .seed = seq,
                           .id_window = 100000,
                           .id_window_ms = 86400000,
                           .max_result_bytes = 16u << 20};
    uint64_t id[2] = {1, seq};
    size_t len = 0;

    xorshift_fill(rng, key, sizeof key);
    xorshift_fill(rng, value, sizeof value);
    bench_kv_params(ps, key, sizeof key, value, sizeof value);
    if (mode & 1) {
        o.flags = SQL_REQUEST_WANT_ROWS;
    }
    if (mode & 2) {
        xorshift_fill(rng, cid, sizeof cid);
        o.client_id = cid;
        o.client_id_len = sizeof cid;
    }
    if (sql_request_size_opts(sql, strlen(sql), ps, 2, &o, UINT64_MAX, &len,
                              NULL, 0) != 0 ||
        (*out = malloc(len)) == NULL) {
        return -1;
    }
    if (sql_request_encode_opts(id, sql, strlen(sql), ps, 2, &o, *out, len) !=
            0 ||
        sql_request_stamp(*out, len, &st, *out) != 0) {
        free(*out);
        return -1;
    }
    *out_len = len;
    return 0;
}

/* run_mode applies @n requests of @mode to a fresh database in @dir and
 * gives the CPU µs per request. */
static int run_mode(const char *dir, int mode, long n, double *cpu_us)
{
    static const char create[] = "CREATE TABLE kv(k BLOB PRIMARY KEY, v BLOB)";
    const char *sql = mode & 1 ? "INSERT OR REPLACE INTO kv(k, v) VALUES "
                                 "(?, ?) RETURNING k"
                               : "INSERT OR REPLACE INTO kv(k, v) VALUES "
                                 "(?, ?)";
    unsigned char *payloads[BATCH];
    size_t lens[BATCH];
    uint64_t rng = 0x9e3779b97f4a7c15ULL, index = 2;
    struct sql_fsm *f = NULL;
    char path[128], msg[256];
    FILE *fp;
    int rc = -1;

    snprintf(path, sizeof path, "%s/db%d", dir, mode);
    if ((fp = fopen(path, "w")) == NULL) {
        return -1;
    }
    fclose(fp);
    if (sql_fsm_open(path, NULL, 0, &f, msg, sizeof msg) != 0) {
        fprintf(stderr, "query-apply-bench: open: %s\n", msg);
        return -1;
    }
    {
        uint64_t id[2] = {1, 0};
        size_t len = 0;
        sql_request_size(create, sizeof create - 1, NULL, 0, UINT64_MAX, &len,
                         NULL, 0);
        payloads[0] = malloc(len);
        lens[0] = len;
        sql_request_encode(id, create, sizeof create - 1, NULL, 0, payloads[0],
                           len);
        rc = bench_apply(f, 1, payloads, lens, 1, "query-apply-bench");
        free(payloads[0]);
    }
    *cpu_us = 0;
    for (long done = 0; rc == 0 && done < n; done += BATCH) {
        double c0;
        for (unsigned i = 0; i < BATCH; i++) {
            if (encode(mode, (uint64_t)(done + i + 1), &rng, sql, &payloads[i],
                       &lens[i]) != 0) {
                rc = -1;
                break;
            }
        }
        c0 = bench_thread_cpu_s();
        rc = rc == 0 ? bench_apply(f, index, payloads, lens, BATCH,
                                   "query-apply-bench")
                     : rc;
        *cpu_us += bench_thread_cpu_s() - c0;
        index += BATCH;
        for (unsigned i = 0; i < BATCH; i++) {
            free(payloads[i]);
        }
    }
    *cpu_us = *cpu_us * 1e6 / (double)n;
    sql_fsm_close(f);
    for (const char *sfx = "";; sfx = sfx[0] == '\0' ? "-wal" : "-shm") {
        char side[160];
        snprintf(side, sizeof side, "%s%s", path, sfx);
        unlink(side);
        if (strcmp(sfx, "-shm") == 0) {
            break;
        }
    }
    return rc;
}

int main(int argc, char **argv)
{
    long n = 20000;
    int rounds = 4;
    char dir[] = "/tmp/raftsql-qbench-XXXXXX";
    double cpu[N_MODES][64], med[N_MODES];

    if (bench_options(argc, argv, "query-apply-bench", BATCH, &n, &rounds) !=
        0) {
        return 2;
    }
    if (mkdtemp(dir) == NULL) {
        perror("query-apply-bench: mkdtemp");
        return 1;
    }
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < N_MODES; k++) {
            /* Forward in even rounds, backward in odd ones. */
            int m = r % 2 == 0 ? k : N_MODES - 1 - k;
            if (run_mode(dir, m, n, &cpu[m][r]) != 0) {
                rmdir(dir);
                return 1;
            }
            printf("round %d %-14s %.2f CPU us/request\n", r, mode_names[m],
                   cpu[m][r]);
        }
    }
    rmdir(dir);
    for (int m = 0; m < N_MODES; m++) {
        qsort(cpu[m], (size_t)rounds, sizeof cpu[m][0], bench_cmp_double);
        med[m] = cpu[m][rounds / 2];
    }
    for (int m = 0; m < N_MODES; m++) {
        printf("median %-14s %.2f CPU us/request (%.3f of raft_exec)\n",
               mode_names[m], med[m], med[m] / med[0]);
    }
    return 0;
}
