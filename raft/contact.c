/* What a server last heard of its leader, for a bound on the staleness of
 * local reads: the leader's commit index as last told, and a leader's last
 * contact with a quorum (thesis §6.2's check-quorum counts the same
 * voters). Pure: times come from TICK. */

#include "quorum.h"
#include "raft_internal.h"

void contact_note_append(struct raft *r, const struct raft_message *m)
{
    if (m->append_entries.leader_commit > r->leader_commit_seen) {
        r->leader_commit_seen = m->append_entries.leader_commit;
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
        heard[n++] = i == r->self_slot ? r->now
                     : p->heard        ? p->last_heard
                                       : p->round_start;
    }
    if (n == 0) {
        return 0;
    }
    /* The same order statistic as a commit index: the time a majority of
     * the voters was heard at or after. */
    t = quorum_commit_index(heard, n);
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
