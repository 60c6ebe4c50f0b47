/* A histogram of observations in fixed buckets (Prometheus's shape: the
 * count per upper bound, the count and the sum of all), for the figures a
 * node measures where they happen (the log's write and fsync time, the
 * apply time, batch sizes) and shows in raft_metrics(). Plain counters, no
 * clock, no lock: its owner's thread observes, and readers on other
 * threads see a copy taken where the owner publishes its state. */

#ifndef RAFT_HISTOGRAM_H
#define RAFT_HISTOGRAM_H

#include <stdint.h>

/* Most upper bounds a histogram has (the +Inf bucket comes on top). */
#define RAFT_HISTOGRAM_BOUNDS_MAX 16

/* A histogram. Copy it by value to read it elsewhere.
 * Invariant: count is the sum of buckets[0 .. n_bounds], and bounds
 * ascend. */
struct raft_histogram {
    const double *bounds; /* upper bounds, ascending, n_bounds (static
                             storage: a copy shares them) */
    unsigned n_bounds;    /* at most RAFT_HISTOGRAM_BOUNDS_MAX */
    uint64_t buckets[RAFT_HISTOGRAM_BOUNDS_MAX + 1]; /* observations per
                             bucket, not cumulative: buckets[i] those
                             above bounds[i - 1] and at most bounds[i];
                             buckets[n_bounds] those above the last */
    uint64_t count;                                  /* observations */
    double sum;                                      /* their sum */
};

/* Upper bounds for durations in seconds, 100 us to 10 s (16), and for
 * sizes in entries, powers of two from 1 to 4096 (13): the node's
 * histograms use one of these two. */
extern const double raft_histogram_seconds[];
extern const unsigned raft_histogram_n_seconds;
extern const double raft_histogram_sizes[];
extern const unsigned raft_histogram_n_sizes;

/* raft_histogram_init makes @h empty over the @n_bounds upper bounds
 * @bounds (ascending; static storage, borrowed for @h's life and its
 * copies'; at most RAFT_HISTOGRAM_BOUNDS_MAX, more are ignored). Pure. */
void raft_histogram_init(struct raft_histogram *h, const double *bounds,
                         unsigned n_bounds);

/* raft_histogram_observe adds observation @v to @h: its bucket is the
 * first whose bound is >= @v, else +Inf. The owner's thread. */
void raft_histogram_observe(struct raft_histogram *h, double v);

/* raft_histogram_cumulative returns the observations of @h at most
 * bounds[@i] (0 <= @i < n_bounds), or all of them for @i == n_bounds
 * (the +Inf bucket). Pure. */
uint64_t raft_histogram_cumulative(const struct raft_histogram *h, unsigned i);

#endif /* RAFT_HISTOGRAM_H */
