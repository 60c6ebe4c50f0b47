/* Leadership transfer (thesis §3.10): the leader stops taking proposals
 * and changes, brings the transferee up to date, then sends it TimeoutNow,
 * on which it starts an election at once; the transfer is abandoned after
 * an election timeout. */

#include "raft_internal.h"

/* most_caught_up returns the voter other than the leader with the highest
 * match index (the lowest slot on ties), 0 when there is none. */
static raft_id most_caught_up(const struct raft *r)
{
    raft_id best = 0;
    raft_index best_match = 0;
    unsigned i;

    for (i = 0; i < r->conf.n; i++) {
        if (i == r->self_slot || !raft_is_voter(r, i)) {
            continue;
        }
        if (best == 0 || r->progress[i].match > best_match) {
            best = r->conf.servers[i].id;
            best_match = r->progress[i].match;
        }
    }
    return best;
}

int transfer_check(const struct raft *r, raft_id id)
{
    unsigned slot;

    if (r->role != RAFT_LEADER) {
        return RAFT_NOTLEADER;
    }
    if (r->transfer_to != 0) {
        return RAFT_BUSY;
    }
    if (id == 0) {
        return most_caught_up(r) != 0 ? 0 : RAFT_NOTFOUND;
    }
    if (id == r->id) {
        return RAFT_INVALID;
    }
    slot = raft_slot_of(r, id);
    if (slot == RAFT_MAX_SERVERS) {
        return RAFT_NOTFOUND;
    }
    return raft_is_voter(r, slot) ? 0 : RAFT_INVALID;
}

void transfer_start(struct raft *r, raft_id id)
{
    r->transfer_to = id != 0 ? id : most_caught_up(r);
    r->transfer_start = r->now;
    r->transfer_sent = false;
    transfer_progress(r);
}

void transfer_progress(struct raft *r)
{
    unsigned slot = raft_slot_of(r, r->transfer_to);
    struct raft_message *m;

    if (r->transfer_to == 0 || r->transfer_sent || slot >= r->conf.n ||
        r->progress[slot].match < log_last_index(&r->log)) {
        return;
    }
    m = raft_out_message(r, RAFT_MSG_TIMEOUT_NOW, r->transfer_to);
    if (m == NULL) {
        return; /* a loss: the transfer times out */
    }
    m->timeout_now.term = r->term;
    r->transfer_sent = true;
}

void transfer_tick(struct raft *r)
{
    if (r->transfer_to != 0 &&
        r->now - r->transfer_start >= r->election_timeout) {
        r->transfer_to = 0; /* abandoned: the leader serves again */
    }
}
