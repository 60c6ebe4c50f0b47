/* Commit index and vote tally over a majority of voters (see quorum.h). */

#include "quorum.h"

raft_index quorum_commit_index(const raft_index *matches, unsigned n)
{
    raft_index sorted[RAFT_MAX_VOTERS];
    unsigned i;
    unsigned j;

    if (n == 0 || n > RAFT_MAX_VOTERS) {
        return 0;
    }
    /* Insertion sort, descending: n is at most 16. */
    for (i = 0; i < n; i++) {
        raft_index v = matches[i];
        for (j = i; j > 0 && sorted[j - 1] < v; j--) {
            sorted[j] = sorted[j - 1];
        }
        sorted[j] = v;
    }
    /* Invariant: n/2 + 1 voters hold sorted[n/2] or more. */
    return sorted[n / 2];
}

enum quorum_vote quorum_vote_result(const int8_t *votes, unsigned n)
{
    unsigned granted = 0;
    unsigned refused = 0;
    unsigned majority = n / 2 + 1;
    unsigned i;

    for (i = 0; i < n; i++) {
        if (votes[i] > 0) {
            granted++;
        } else if (votes[i] < 0) {
            refused++;
        }
    }
    if (n > 0 && granted >= majority) {
        return QUORUM_WON;
    }
    if (n > 0 && refused > n - majority) {
        return QUORUM_LOST;
    }
    return QUORUM_PENDING;
}
