/* checksum_apply.c - the cost of the replica checksum on the apply path:
 * the state machine applies the benchmark's unit of
 * work (INSERT OR REPLACE INTO kv(k, v) of a random 32-byte key and a
 * 1024-byte value) in batches of 20 requests (about the entries per
 * fsync of raftsql-64-leader), with the checksum on and off, alternating
 * rounds on fresh databases (each pair in the other order than the
 * last). It reports the apply thread's CPU time per
 * request (CLOCK_THREAD_CPUTIME_ID: what other processes on the machine
 * move least) and the wall time.
 *
 * Usage: build/checksum-apply-bench [--requests N] [--rounds R]
 * Output: one line per round, then the medians and their ratio. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "bench/timing.h"
#include "bench/fsm_apply.h"
#include "bench/xorshift.h"
#include "sql/sql.h"

#define BATCH 20

/* encode makes the payload of request @seq into @out (malloc'd). */
static unsigned char *encode(uint64_t seq, uint64_t *rng, size_t *out_len)
{
    static const char sql[] = "INSERT OR REPLACE INTO kv(k, v) VALUES (?, ?)";
    unsigned char key[32], value[1024];
    struct sql_param ps[2];
    uint64_t id[2] = {1, seq};
    unsigned char *p;
    size_t len = 0;

    xorshift_fill(rng, key, sizeof key);
    xorshift_fill(rng, value, sizeof value);
    bench_kv_params(ps, key, sizeof key, value, sizeof value);
    if (sql_request_size(sql, sizeof sql - 1, ps, 2, UINT64_MAX, &len, NULL,
                         0) != 0 ||
        (p = malloc(len)) == NULL) {
        return NULL;
    }
    if (sql_request_encode(id, sql, sizeof sql - 1, ps, 2, p, len) != 0) {
        free(p);
        return NULL;
    }
    *out_len = len;
    return p;
}

/* round runs one round; writes CPU and wall µs per request. */
static int round_run(const char *dir, int on, long n, double *cpu_us,
                     double *wall_us)
{
    char path[128], msg[256], side[160];
    unsigned char *payloads[BATCH];
    size_t lens[BATCH];
    uint64_t rng = 0x9e3779b97f4a7c15ULL, index = 1;
    struct sql_fsm *f = NULL;
    double c0, w0;
    FILE *fp;

    snprintf(path, sizeof path, "%s/db", dir);
    unlink(path);
    snprintf(side, sizeof side, "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", path);
    unlink(side);
    if ((fp = fopen(path, "w")) == NULL) {
        return -1;
    }
    fclose(fp);
    if (sql_fsm_open(path, NULL, 0, &f, msg, sizeof msg) != 0 ||
        sql_fsm_checksum_enable(f, on) != 0) {
        fprintf(stderr, "checksum-apply-bench: open: %s\n", msg);
        return -1;
    }
    {
        static const char create[] =
            "CREATE TABLE kv(k BLOB PRIMARY KEY, v BLOB)";
        uint64_t id[2] = {1, 0};
        size_t len = 0;
        unsigned char *p;
        sql_request_size(create, sizeof create - 1, NULL, 0, UINT64_MAX, &len,
                         NULL, 0);
        p = malloc(len);
        sql_request_encode(id, create, sizeof create - 1, NULL, 0, p, len);
        lens[0] = len;
        payloads[0] = p;
        if (bench_apply(f, index++, payloads, lens, 1,
                        "checksum-apply-bench") != 0) {
            return -1;
        }
        free(p);
    }
    *cpu_us = 0;
    w0 = timing_now_s();
    for (long done = 0; done < n; done += BATCH) {
        for (unsigned i = 0; i < BATCH; i++) {
            payloads[i] = encode((uint64_t)(done + i + 1), &rng, &lens[i]);
            if (payloads[i] == NULL) {
                return -1;
            }
        }
        c0 = bench_thread_cpu_s();
        if (bench_apply(f, index, payloads, lens, BATCH,
                        "checksum-apply-bench") != 0) {
            return -1;
        }
        *cpu_us += bench_thread_cpu_s() - c0;
        index += BATCH;
        for (unsigned i = 0; i < BATCH; i++) {
            free(payloads[i]);
        }
    }
    *wall_us = (timing_now_s() - w0) * 1e6 / (double)n;
    *cpu_us = *cpu_us * 1e6 / (double)n;
    sql_fsm_close(f);
    return 0;
}

int main(int argc, char **argv)
{
    long n = 20000;
    int rounds = 4;
    char dir[] = "/tmp/raftsql-ckbench-XXXXXX";
    double cpu[2][64], wall[2][64];

    if (bench_options(argc, argv, "checksum-apply-bench", BATCH, &n, &rounds) !=
        0) {
        return 2;
    }
    if (mkdtemp(dir) == NULL) {
        perror("checksum-apply-bench: mkdtemp");
        return 1;
    }
    for (int r = 0; r < rounds; r++) {
        /* Off first in even rounds, on first in odd ones: what the order
         * moves (the page cache, the disk) falls on both alike. */
        for (int k = 0; k < 2; k++) {
            int on = r % 2 == 0 ? k : 1 - k;
            if (round_run(dir, on, n, &cpu[on][r], &wall[on][r]) != 0) {
                return 1;
            }
            printf(
                "round %d checksum=%s cpu_us_per_request %.2f "
                "wall_us_per_request %.2f\n",
                r + 1, on ? "on" : "off", cpu[on][r], wall[on][r]);
            fflush(stdout);
        }
    }
    for (int on = 0; on < 2; on++) {
        qsort(cpu[on], (size_t)rounds, sizeof cpu[on][0], bench_cmp_double);
        qsort(wall[on], (size_t)rounds, sizeof wall[on][0], bench_cmp_double);
    }
    printf(
        "median cpu_us_per_request off %.2f on %.2f (on/off %.3f); "
        "wall off %.2f on %.2f (on/off %.3f)\n",
        cpu[0][rounds / 2], cpu[1][rounds / 2],
        cpu[1][rounds / 2] / cpu[0][rounds / 2], wall[0][rounds / 2],
        wall[1][rounds / 2], wall[1][rounds / 2] / wall[0][rounds / 2]);
    {
        char p[128];
        static const char *const files[] = {"db", "db-wal", "db-shm"};
        for (int i = 0; i < 3; i++) {
            snprintf(p, sizeof p, "%s/%s", dir, files[i]);
            unlink(p);
        }
        rmdir(dir);
    }
    return 0;
}
