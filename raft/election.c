/* Leader election (paper §5.2, Fig. 2): the randomized election timer,
 * becoming candidate, RequestVote and its answers, and the vote rules
 * (one vote per term, the candidate's log at least as up-to-date, §5.4.1).
 * Pre-vote (thesis §9.6) and check-quorum are not implemented yet. */

#include "quorum.h"
#include "raft_internal.h"

/* splitmix64: the core's only source of randomness, seeded by cfg.seed. */
static uint64_t prng_next(struct raft *r)
{
    uint64_t z = (r->prng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void election_reset_timer(struct raft *r)
{
    r->election_start = r->now;
    r->election_rand =
        r->election_timeout + prng_next(r) % r->election_timeout;
}

void election_become_follower(struct raft *r, raft_term term,
                              raft_id leader)
{
    if (term > r->term) {
        r->term = term;
        r->vote = 0;
        r->verified = 0;
    }
    if (r->role != RAFT_FOLLOWER) {
        r->verified = 0;
    }
    r->role = RAFT_FOLLOWER;
    r->leader = leader;
    election_reset_timer(r);
}

static void become_candidate(struct raft *r)
{
    unsigned i;
    struct raft_message *m;

    /* Paper §5.2: increment currentTerm, vote for self, reset the timer,
     * send RequestVote to all other servers. */
    r->term++;
    r->vote = r->id;
    r->role = RAFT_CANDIDATE;
    r->leader = 0;
    r->verified = 0;
    election_reset_timer(r);
    for (i = 0; i < r->n_voters; i++) {
        r->votes[i] = 0;
    }
    r->votes[r->self_slot] = 1;
    if (quorum_vote_result(r->votes, r->n_voters) == QUORUM_WON) {
        replication_become_leader(r);
        return;
    }
    for (i = 0; i < r->n_voters; i++) {
        if (i == r->self_slot) {
            continue;
        }
        m = raft_out_message(r, RAFT_MSG_REQUEST_VOTE, r->voters[i]);
        if (m == NULL) {
            continue;
        }
        m->request_vote.term = r->term;
        m->request_vote.last_log_index = log_last_index(&r->log);
        m->request_vote.last_log_term = log_last_term(&r->log);
        m->request_vote.pre_vote = false;
    }
}

void election_tick(struct raft *r)
{
    /* Invariant: r is a follower or a candidate. */
    if (r->now - r->election_start >= r->election_rand) {
        become_candidate(r);
    }
}

/* log_up_to_date: paper §5.4.1, the candidate's log is at least as
 * up-to-date as ours (later last term, or same last term and at least as
 * long). */
static bool log_up_to_date(const struct raft *r, raft_term last_term,
                           raft_index last_index)
{
    raft_term my_term = log_last_term(&r->log);

    if (last_term != my_term) {
        return last_term > my_term;
    }
    return last_index >= log_last_index(&r->log);
}

void election_recv_request_vote(struct raft *r, const struct raft_message *m)
{
    const struct raft_request_vote *rv = &m->request_vote;
    struct raft_message *out;
    bool granted = false;

    /* Paper Fig. 2 RequestVote receiver rule 2: one vote per term, and
     * only for a log at least as up-to-date as ours. A candidate or leader
     * of this term voted for itself, so it never grants. */
    if ((r->vote == 0 || r->vote == m->from) &&
        log_up_to_date(r, rv->last_log_term, rv->last_log_index)) {
        granted = true;
        r->vote = m->from;
        r->step_vote_granted = true;
        election_reset_timer(r);
    }
    out = raft_out_message(r, RAFT_MSG_REQUEST_VOTE_RESULT, m->from);
    if (out != NULL) {
        out->request_vote_result.term = r->term;
        out->request_vote_result.vote_granted = granted;
        out->request_vote_result.pre_vote = false;
    }
}

void election_recv_request_vote_result(struct raft *r,
                                       const struct raft_message *m)
{
    unsigned slot;

    if (r->role != RAFT_CANDIDATE) {
        return;
    }
    slot = raft_slot_of(r, m->from);
    r->votes[slot] = m->request_vote_result.vote_granted ? 1 : -1;
    if (quorum_vote_result(r->votes, r->n_voters) == QUORUM_WON) {
        replication_become_leader(r);
    }
}
