/* Leader election (paper §5.2, Fig. 2): the randomized election timer,
 * the pre-vote round (thesis §9.6), becoming candidate, RequestVote and its
 * answers, the vote rules (one vote per term, the candidate's log at least
 * as up-to-date, §5.4.1) and the leader lease that makes followers ignore
 * RequestVote while their leader is alive (thesis §6.2, §9.6). */

#include "configuration.h"
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

/* Invariant: a fresh draw in [T, 2T) at every reset, so every node draws
 * anew in every term and after every heard heartbeat (paper §5.2). */
void election_reset_timer(struct raft *r)
{
    r->election_start = r->now;
    r->election_rand = r->election_timeout + prng_next(r) % r->election_timeout;
}

void election_become_follower(struct raft *r, raft_term term, raft_id leader)
{
    if (term > r->term) {
        r->term = term;
        r->vote = 0;
        r->verified = 0;
        r->ack_seq = 0;
    }
    r->term_unsure = false;
    if (r->role != RAFT_FOLLOWER) {
        r->verified = 0;
    }
    if (r->role == RAFT_LEADER) {
        membership_unlead(r);
    }
    if (r->leader != leader) {
        r->ack_seq = 0; /* seqs number one leader's requests */
    }
    r->role = RAFT_FOLLOWER;
    r->leader = leader;
    r->leader_seen = r->now;
    r->pre_candidate = false;
    r->transfer_to = 0;
    r->disrupt = false;
    election_reset_timer(r);
}

bool election_in_lease(const struct raft *r)
{
    if (!r->check_quorum || r->leader == 0) {
        return false;
    }
    if (r->role == RAFT_LEADER) {
        /* A leader that lost its quorum steps down within an election
         * timeout (replication_tick); until then it keeps its lease. */
        return true;
    }
    /* Bytes of the leader's still arriving (CONTACT) count: it is alive,
     * its heartbeats are only queued behind them. */
    return r->now - (r->leader_alive > r->leader_seen ? r->leader_alive
                                                      : r->leader_seen) <
           r->election_timeout;
}

/* send_request_votes asks every other voter of the configuration in
 * force for a vote (pre-vote for @term when @pre_vote) with our last log
 * index and term. */
static void send_request_votes(struct raft *r, raft_term term, bool pre_vote)
{
    unsigned i;
    struct raft_message *m;

    for (i = 0; i < r->conf.n; i++) {
        if (i == r->self_slot || !raft_is_voter(r, i)) {
            continue;
        }
        m = raft_out_message(r, RAFT_MSG_REQUEST_VOTE, r->conf.servers[i].id);
        if (m == NULL) {
            continue;
        }
        m->request_vote.term = term;
        m->request_vote.last_log_index = log_last_index(&r->log);
        m->request_vote.last_log_term = log_last_term(&r->log);
        m->request_vote.pre_vote = pre_vote;
        m->request_vote.disrupt = r->disrupt && !pre_vote;
    }
}

/* may_campaign tells whether @r may start an election: as a voter of the
 * configuration in force, or while that configuration is not known to be
 * committed (hashicorp/raft's rule: a server demoted or removed by an
 * entry that may never commit must still be able to win the election
 * that commits it, or a configuration whose voters need its vote would
 * elect nobody; it then leads without counting itself and steps down
 * once the entry commits, thesis §4.2.2). A learner, a server that joins
 * or one that was removed, in a committed configuration, never
 * campaigns (thesis §4.2.1, §4.2.3). */
static bool may_campaign(const struct raft *r)
{
    return raft_is_voter(r, r->self_slot) ||
           (r->conf_index > r->commit &&
            raft_configuration_n_voters(&r->conf) > 0);
}

/* vote_self resets the tally and counts our own vote (a voter's). */
static void vote_self(struct raft *r)
{
    unsigned i;

    for (i = 0; i < RAFT_MAX_SERVERS; i++) {
        r->votes[i] = 0;
    }
    if (r->self_slot < RAFT_MAX_SERVERS) {
        r->votes[r->self_slot] = 1;
    }
}

/* become_candidate starts an election (@disrupt: one TimeoutNow asked
 * for, which overrides the voters' leader stickiness). */
static void become_candidate(struct raft *r, bool disrupt)
{
    if (!may_campaign(r)) {
        return; /* its configuration changed meanwhile */
    }

    /* Paper §5.2: increment currentTerm, vote for self, reset the timer,
     * send RequestVote to all other servers. */
    r->term++;
    r->vote = r->id;
    r->role = RAFT_CANDIDATE;
    r->leader = 0;
    r->verified = 0;
    r->ack_seq = 0;
    r->pre_candidate = false;
    r->disrupt = disrupt;
    r->campaign_at = r->now;
    election_reset_timer(r);
    vote_self(r);
    r->term_unsure = false;
    if (membership_tally(r, r->votes) == QUORUM_WON) {
        /* The only voter: its new term may not be durable yet, and a
         * later step's messages go out at once (driver rule 1). */
        r->term_unsure = true;
        replication_become_leader(r);
        return;
    }
    send_request_votes(r, r->term, false);
}

/* become_pre_candidate starts a pre-vote round for term + 1 (thesis §9.6):
 * the real election starts only if a majority would vote for us, so a
 * server that cannot win (cut off, or with a stale log) never raises the
 * cluster's term. Neither the term nor the vote changes: the round needs
 * no write and its messages go out at once. The server stays a follower
 * (a candidate whose election timed out goes back to being one) that
 * knows no leader. */
static void become_pre_candidate(struct raft *r)
{
    if (r->role != RAFT_FOLLOWER) {
        r->verified = 0;
    }
    r->role = RAFT_FOLLOWER;
    r->leader = 0;
    r->ack_seq = 0;
    r->pre_candidate = true;
    election_reset_timer(r);
    vote_self(r);
    if (membership_tally(r, r->votes) == QUORUM_WON) {
        become_candidate(r, false);
        return;
    }
    send_request_votes(r, r->term + 1, true);
}

void election_tick(struct raft *r)
{
    /* Invariant: r is a follower or a candidate. */
    if (r->now - r->election_start < r->election_rand) {
        return;
    }
    if (r->storage_stalled) {
        /* It could not make its own entries durable: leave leading to
         * a server that can (raft.h, STORAGE_STALLED). */
        election_reset_timer(r);
        return;
    }
    if (!may_campaign(r)) {
        /* It waits for a leader. One that sent nothing for an election
         * timeout is known no more, as a voter would forget it on
         * campaigning (a learner's or a removed server's view). */
        r->leader = 0;
        r->ack_seq = 0;
        election_reset_timer(r);
        return;
    }
    if (r->pre_vote) {
        become_pre_candidate(r);
    } else {
        become_candidate(r, false);
    }
}

void election_recv_timeout_now(struct raft *r, const struct raft_message *m)
{
    (void)m;
    /* Thesis §3.10: the leader brought us up to date and stops serving;
     * start the election now rather than after a timeout, without a
     * pre-vote round, which the voters' leases would refuse. A server
     * that declines (raft.h, DECLINE) leaves the transfer to time out. */
    if (r->role == RAFT_LEADER || r->storage_stalled || r->declining ||
        !raft_is_voter(r, r->self_slot)) {
        return;
    }
    become_candidate(r, true);
}

/* may_vote tells whether @r may grant a vote or a pre-vote: it has a
 * configuration. One with none (a server that joins, or waits for
 * raft_add: empty log, nothing applied, no bootstrap) may be a voter that
 * lost its state (a wiped node started again with join=): its empty log
 * would let a candidate without committed entries win (a lost write),
 * hence it grants nothing until a leader sends it a configuration.
 * With one, a server votes also when no voter
 * of it (thesis §4.2.3: the candidate's configuration may be newer). */
static bool may_vote(const struct raft *r)
{
    return r->conf.n > 0;
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
     * of this term voted for itself, so it never grants; nor does a
     * server without a configuration (may_vote). */
    if (may_vote(r) && (r->vote == 0 || r->vote == m->from) &&
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

    slot = raft_slot_of(r, m->from);
    if (r->role != RAFT_CANDIDATE || slot >= RAFT_MAX_SERVERS) {
        return; /* only members' votes count, and only voters' tally */
    }
    r->votes[slot] = m->request_vote_result.vote_granted ? 1 : -1;
    if (membership_tally(r, r->votes) == QUORUM_WON) {
        replication_become_leader(r);
    }
}

void election_recv_pre_vote(struct raft *r, const struct raft_message *m)
{
    const struct raft_request_vote *rv = &m->request_vote;
    struct raft_message *out;
    bool granted = false;

    /* Thesis §9.6: grant when we would grant the real vote of rv->term:
     * the log is at least as up-to-date (§5.4.1), and the term is ahead of
     * ours, or it is ours and we are free to vote in it. The caller already
     * ignored requests made while our leader is alive. Nothing changes
     * here: no term, no vote, no timer. Never without a configuration
     * (may_vote). */
    /* Invariant: rv->term >= r->term (older ones were answered stale). */
    if (may_vote(r) &&
        (rv->term > r->term || r->vote == m->from ||
         (r->vote == 0 && r->leader == 0)) &&
        log_up_to_date(r, rv->last_log_term, rv->last_log_index)) {
        granted = true;
    }
    out = raft_out_message(r, RAFT_MSG_REQUEST_VOTE_RESULT, m->from);
    if (out != NULL) {
        /* A grant carries the term asked for, a refusal ours, so that a
         * pre-candidate behind us catches up with our term. */
        out->request_vote_result.term = granted ? rv->term : r->term;
        out->request_vote_result.vote_granted = granted;
        out->request_vote_result.pre_vote = true;
    }
}

void election_recv_pre_vote_result(struct raft *r, const struct raft_message *m)
{
    const struct raft_request_vote_result *res = &m->request_vote_result;
    unsigned slot;

    /* Invariant: a pre-candidate is a follower (every role change clears
     * the flag). */
    if (!r->pre_candidate) {
        return;
    }
    if (res->vote_granted && res->term != r->term + 1) {
        return; /* a grant of an older round */
    }
    slot = raft_slot_of(r, m->from);
    if (slot >= RAFT_MAX_SERVERS) {
        return;
    }
    r->votes[slot] = res->vote_granted ? 1 : -1;
    switch (membership_tally(r, r->votes)) {
        case QUORUM_WON:
            become_candidate(r, false);
            break;
        case QUORUM_LOST:
            /* Wait for the next timeout to try again. */
            r->pre_candidate = false;
            break;
        default:
            break;
    }
}
