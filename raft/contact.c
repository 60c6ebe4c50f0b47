/* What a server last heard of its leader, for a bound on the staleness of
 * local reads: the leader's commit index as last told, current as of the
 * send time of this server's own answer that the leader echoed (wire
 * version 7), and a leader's last contact with a quorum (thesis §6.2's
 * check-quorum counts the same voters), timed by the send time of the
 * requests a quorum answered: either way a round trip, so that transit
 * time counts against the bound; and the liveness of a peer in the
 * middle of a long message (RAFT_EVENT_CONTACT), which only timers use.
 * Pure: times come from TICK. */

#include "quorum.h"
#include "raft_internal.h"

void contact_note_append(struct raft *r, const struct raft_message *m)
{
    const struct raft_append_entries *ae = &m->append_entries;
    uint64_t at;

    if (ae->leader_commit > r->leader_commit_seen) {
        r->leader_commit_seen = ae->leader_commit;
    }
    if (ae->echo == 0) {
        /* A leader of wire version 6 or older echoes nothing: its commit
         * index counts from its arrival, the transit time not counted
         * (raft.h: raft_leader_commit_contact). */
        at = r->now;
    } else if (ae->echo == RAFT_ECHO_NONE || ae->echo - 1 > r->now) {
        /* No answer of ours reached this leader in its term yet (or one
         * of a clock that restarted since): no round trip completed,
         * so this tells no time the commit index was current at. */
        return;
    } else {
        /* Our answer went at echo - 1 by our clock; the leader took it,
         * then sent this: its commit index was current after then. */
        at = ae->echo - 1;
    }
    if (r->leader_commit_term == r->term && at < r->leader_commit_at) {
        return; /* an older round trip than the one counted: reordered */
    }
    r->leader_commit_at = at;
    r->leader_commit_term = r->term;
    r->leader_quorum_contact = ae->quorum_contact;
}

uint64_t raft_leader_quorum_contact(const struct raft *r)
{
    if (r->role == RAFT_LEADER || r->leader == 0 ||
        r->leader_commit_term != r->term) {
        return 0;
    }
    return r->leader_quorum_contact;
}

uint64_t raft_leader_commit_contact(const struct raft *r)
{
    if (r->role == RAFT_LEADER) {
        return 0;
    }
    if (r->leader == 0 || r->leader_commit_term != r->term) {
        return UINT64_MAX;
    }
    return r->now >= r->leader_commit_at ? r->now - r->leader_commit_at : 0;
}

void contact_step(struct raft *r, raft_id id)
{
    unsigned slot;

    if (r->role == RAFT_FOLLOWER && r->leader == id) {
        /* The leader is sending: its heartbeats wait behind the bytes
         * that arrive. Invariant: r->leader != 0 (id is not 0). */
        election_reset_timer(r);
        r->leader_alive = r->now;
        return;
    }
    if (r->role != RAFT_LEADER) {
        return; /* a candidate, or bytes of a server it follows not */
    }
    slot = raft_track_of(r, id);
    if (slot >= RAFT_MAX_SERVERS || slot == r->self_slot) {
        return;
    }
    /* Check-quorum asks whether a majority is alive and reachable in
     * this term; the peer reads this leader's bytes. Not last_heard nor
     * contact_at: no answer came, and reads bounded by
     * raft_quorum_contact need one. */
    r->active[slot] = true;
    r->progress[slot].unreachable = false; /* a transfer may pick it */
    if (r->progress[slot].state == RAFT_PROGRESS_REPLICATE) {
        /* Its window is in transit, not lost. */
        r->progress[slot].last_progress = r->now;
    }
}

uint64_t raft_quorum_contact(const struct raft *r)
{
    raft_index heard[RAFT_MAX_SERVERS];
    unsigned n = 0;
    uint64_t t;

    if (r->role != RAFT_LEADER) {
        return UINT64_MAX;
    }
    for (unsigned i = 0; i < r->conf.n; i++) {
        const struct raft_peer_progress *p = &r->progress[i];
        if (!raft_is_voter(r, i)) {
            continue;
        }
        /* Not last_heard, the answer's arrival: an answer delayed in
         * transit (a link slow one way) would keep a leader cut off
         * from the majority in quorum long after the majority elected
         * another and committed. contact_at is the send time of the
         * request answered (progress.h). */
        heard[n++] = i == r->self_slot ? r->now : p->contact_at;
    }
    if (n == 0) {
        return 0;
    }
    /* The same order statistic as a commit index: the time a majority of
     * the voters was known to follow this leader at or after. 0: no
     * majority known to (a voter added since the election that has not
     * answered yet). */
    t = quorum_commit_index(heard, n);
    if (t == 0) {
        return UINT64_MAX;
    }
    return r->now >= t ? r->now - t : 0;
}

raft_index raft_leader_commit(const struct raft *r)
{
    if (r->role == RAFT_LEADER) {
        return r->commit;
    }
    return r->leader_commit_seen > r->commit ? r->leader_commit_seen
                                             : r->commit;
}

bool raft_commit_current(const struct raft *r)
{
    if (r->role == RAFT_CANDIDATE ||
        (r->role == RAFT_FOLLOWER && r->leader == 0) || r->commit == 0) {
        return false;
    }
    /* An entry of the current term can only come from its leader, at
     * the index the leader holds it: the leader's NOOP is at or below
     * it, and committed. */
    return log_term_at(&r->log, r->commit) == r->term;
}
