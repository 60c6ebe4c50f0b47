/* Pure quorum arithmetic: the commit index a set of match indexes allows,
 * and the outcome of a vote tally (paper §5.2, §5.3). */

#ifndef RAFT_QUORUM_H
#define RAFT_QUORUM_H

#include <stdint.h>

#include "raft.h"

/* Outcome of an election tally. */
enum quorum_vote {
    QUORUM_PENDING = 0, /* neither side has a majority yet */
    QUORUM_WON = 1,     /* a majority granted */
    QUORUM_LOST = 2,    /* too many refused: a majority is out of reach */
};

/* quorum_commit_index returns the largest index held by a majority of the
 * @n voters whose match indexes are @matches (the (n/2+1)-th largest); 0
 * when @n is 0. @n is at most RAFT_MAX_VOTERS. Does not apply the
 * current-term rule of §5.4.2: the caller does. */
raft_index quorum_commit_index(const raft_index *matches, unsigned n);

/* quorum_vote_result tallies @n votes: 1 granted, -1 refused, 0 not yet
 * answered. @n is at most RAFT_MAX_VOTERS. */
enum quorum_vote quorum_vote_result(const int8_t *votes, unsigned n);

#endif /* RAFT_QUORUM_H */
