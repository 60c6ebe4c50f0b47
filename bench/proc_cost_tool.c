/* proc-cost: the CPU seconds and disk bytes of some processes and their
 * descendants, for bench/compare.sh's peers (etcd, dqlite), whose window it
 * samples from outside (raftsql-bench and local-sqlite-bench sample their
 * own, bench/proc_cost.h).
 *
 * Usage: proc-cost PID...               one line now
 *        proc-cost --watch S PID...     one line every S seconds until no
 *                                       PID is left (or a signal)
 *
 * Each line: `COST t=<CLOCK_REALTIME s> cpu_s=<s> write_bytes=<bytes>
 * procs=<n>`, summed over every PID still running and its live
 * descendants (bench/README.md). Exit status 0, or 2 on bad arguments, or
 * 1 when no PID could be read at the first sample. */

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/proc_cost.h"
#include "bench/timing.h"

static volatile sig_atomic_t g_signal;

static void on_signal(int sig)
{
    g_signal = sig;
}

/* sample prints one line for @pids; returns the processes read. */
static int sample(const pid_t *pids, int n_pids)
{
    struct proc_cost c = {0};
    struct timespec ts;
    int n_roots = 0;
    for (int i = 0; i < n_pids; i++) {
        n_roots += proc_cost_add(pids[i], true, &c) == 0;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    if (n_roots > 0) {
        printf("COST t=%.3f cpu_s=%.2f write_bytes=%lld procs=%d\n",
               (double)ts.tv_sec + (double)ts.tv_nsec / 1e9, c.cpu_s,
               c.write_bytes, c.n_procs);
        fflush(stdout);
    }
    return n_roots;
}

int main(int argc, char **argv)
{
    double every = 0;
    int first = 1, n_pids;
    pid_t *pids;
    struct sigaction sa;

    if (argc > 2 && strcmp(argv[1], "--watch") == 0) {
        char *e;
        every = strtod(argv[2], &e);
        if (*e || every < 0.01 || every > 3600) {
            fprintf(stderr,
                    "proc-cost: --watch: seconds between 0.01 and "
                    "3600, not '%s'\n",
                    argv[2]);
            return 2;
        }
        first = 3;
    }
    n_pids = argc - first;
    if (n_pids < 1) {
        fprintf(stderr, "usage: proc-cost [--watch S] PID...\n");
        return 2;
    }
    pids = calloc((size_t)n_pids, sizeof *pids);
    if (pids == NULL) {
        fprintf(stderr, "proc-cost: out of memory\n");
        return 1;
    }
    for (int i = 0; i < n_pids; i++) {
        char *e;
        long v = strtol(argv[first + i], &e, 10);
        if (*e || v < 1 || v > 0x7fffffff) {
            fprintf(stderr, "proc-cost: not a process id: '%s'\n",
                    argv[first + i]);
            free(pids);
            return 2;
        }
        pids[i] = (pid_t)v;
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    if (sample(pids, n_pids) == 0) {
        fprintf(stderr, "proc-cost: none of the %d processes is running\n",
                n_pids);
        free(pids);
        return 1;
    }
    if (every > 0) {
        while (timing_sleep_s(every, &g_signal) && sample(pids, n_pids) > 0) {
        }
    }
    free(pids);
    return 0;
}
