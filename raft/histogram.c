/* A histogram in fixed buckets (histogram.h). */

#include "histogram.h"

#include <string.h>

const double raft_histogram_seconds[] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
const unsigned raft_histogram_n_seconds =
    sizeof raft_histogram_seconds / sizeof raft_histogram_seconds[0];

const double raft_histogram_sizes[] = {1,   2,   4,   8,    16,   32,  64,
                                       128, 256, 512, 1024, 2048, 4096};
const unsigned raft_histogram_n_sizes =
    sizeof raft_histogram_sizes / sizeof raft_histogram_sizes[0];

void raft_histogram_init(struct raft_histogram *h, const double *bounds,
                         unsigned n_bounds)
{
    memset(h, 0, sizeof *h);
    h->bounds = bounds;
    h->n_bounds = n_bounds < RAFT_HISTOGRAM_BOUNDS_MAX
                      ? n_bounds
                      : RAFT_HISTOGRAM_BOUNDS_MAX;
}

void raft_histogram_observe(struct raft_histogram *h, double v)
{
    unsigned i = 0;
    while (i < h->n_bounds && v > h->bounds[i]) {
        i++;
    }
    h->buckets[i]++;
    h->count++;
    h->sum += v;
}

uint64_t raft_histogram_cumulative(const struct raft_histogram *h, unsigned i)
{
    uint64_t n = 0;
    for (unsigned k = 0; k <= i && k <= h->n_bounds; k++) {
        n += h->buckets[k];
    }
    return n;
}
