/* Time for the benchmarks (raftsql_bench.c and its files, local_sqlite.c):
 * a monotonic clock in seconds and a sleep that a signal cuts short. */

#ifndef BENCH_TIMING_H
#define BENCH_TIMING_H

#include <signal.h>
#include <stdbool.h>
#include <time.h>

/* timing_now_s returns CLOCK_MONOTONIC in seconds. Any thread. */
static inline double timing_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* timing_sleep_s sleeps @s seconds in steps of at most 50 ms; returns true,
 * or false as soon as *@stop (a signal number set by a handler) is not 0. */
static inline bool timing_sleep_s(double s, const volatile sig_atomic_t *stop)
{
    double end = timing_now_s() + s;
    while (!*stop) {
        double left = end - timing_now_s();
        struct timespec ts;
        if (left <= 0) {
            return true;
        }
        if (left > 0.05) {
            left = 0.05;
        }
        ts.tv_sec = 0;
        ts.tv_nsec = (long)(left * 1e9);
        nanosleep(&ts, NULL);
    }
    return false;
}

#endif /* BENCH_TIMING_H */
