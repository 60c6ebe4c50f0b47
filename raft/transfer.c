/* Leadership transfer (thesis §3.10): the leader stops taking proposals
 * and changes, brings the transferee up to date, then sends it TimeoutNow,
 * on which it starts an election at once; the transfer is abandoned after
 * an election timeout. */

#include "raft_internal.h"

/* silent says whether the voter of @p has not answered within two
 * heartbeat intervals: a live follower answers every heartbeat. */
static bool silent(const struct raft *r, const struct raft_peer_progress *p)
{
    return !p->heard || r->now - p->last_heard > 2u * r->heartbeat_interval;
}

/* reach ranks the voter in @slot for a transfer this leader picks the
 * transferee of: 3 when it answered within two heartbeat intervals, 2
 * within the last election timeout, 1 when not (yet) in this term, 0 when
 * its connection broke (RAFT_EVENT_UNREACHABLE) and nothing came from it
 * since. */
static int reach(const struct raft *r, unsigned slot)
{
    const struct raft_peer_progress *p = &r->progress[slot];

    if (p->unreachable) {
        return 0;
    }
    if (!silent(r, p)) {
        return 3;
    }
    return p->heard && r->now - p->last_heard < r->election_timeout ? 2 : 1;
}

/* most_caught_up returns the voter other than the leader and @except
 * that is best reached (reach) and, among those, has the highest match
 * index (the lowest slot on ties), 0 when there is none; *out_reach (may
 * be NULL) gets its rank. A voter that answered lately is preferred to
 * a more caught-up one that did not: TimeoutNow to a stopped or cut-off
 * voter would leave the cluster without a leader for an election
 * timeout, and a caught-up one needs only to be brought up to date. */
static raft_id most_caught_up(const struct raft *r, raft_id except,
                              int *out_reach)
{
    raft_id best = 0;
    raft_index best_match = 0;
    int best_reach = 0;
    unsigned i;

    for (i = 0; i < r->conf.n; i++) {
        int rank;

        if (i == r->self_slot || !raft_is_voter(r, i) ||
            r->conf.servers[i].id == except) {
            continue;
        }
        rank = reach(r, i);
        if (best == 0 || rank > best_reach ||
            (rank == best_reach && r->progress[i].match > best_match)) {
            best = r->conf.servers[i].id;
            best_match = r->progress[i].match;
            best_reach = rank;
        }
    }
    if (out_reach != NULL) {
        *out_reach = best_reach;
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
        int rank;
        return most_caught_up(r, 0, &rank) != 0 && rank > 0 ? 0 : RAFT_NOTFOUND;
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
    r->transfer_to = id != 0 ? id : most_caught_up(r, 0, NULL);
    r->transfer_any = id == 0;
    r->transfer_start = r->now;
    r->transfer_sent = false;
    transfer_progress(r);
}

/* send_timeout_now sends TimeoutNow to @to when it holds the whole log;
 * returns true when it went out. */
static bool send_timeout_now(struct raft *r, raft_id to)
{
    unsigned slot = raft_slot_of(r, to);
    struct raft_message *m;

    if (to == 0 || r->term_unsure || slot >= r->conf.n ||
        r->progress[slot].match < log_last_index(&r->log)) {
        return false;
    }
    m = raft_out_message(r, RAFT_MSG_TIMEOUT_NOW, to);
    if (m == NULL) {
        return false; /* a loss: the transfer times out */
    }
    m->timeout_now.term = r->term;
    return true;
}

void transfer_progress(struct raft *r)
{
    if (r->transfer_to != 0 && !r->transfer_sent &&
        send_timeout_now(r, r->transfer_to)) {
        r->transfer_sent = true;
    }
}

void transfer_hand_over(struct raft *r)
{
    raft_id best = 0;
    int best_reach = -1;
    unsigned i;

    /* One TimeoutNow, to a voter that holds the whole log (no other
     * would get it): the best reached among those. */
    for (i = 0; i < r->conf.n; i++) {
        int rank;

        if (i == r->self_slot || !raft_is_voter(r, i) ||
            r->progress[i].match < log_last_index(&r->log)) {
            continue;
        }
        rank = reach(r, i);
        if (rank > best_reach) {
            best = r->conf.servers[i].id;
            best_reach = rank;
        }
    }
    (void)send_timeout_now(r, best);
}

void transfer_unreachable(struct raft *r, raft_id id)
{
    raft_id next;
    int rank;

    if (r->transfer_to == 0 || r->transfer_to != id || !r->transfer_any) {
        return;
    }
    next = most_caught_up(r, id, &rank);
    if (next == 0 || rank == 0) {
        r->transfer_to = 0; /* abandoned: the leader serves again */
        return;
    }
    r->transfer_to = next;
    r->transfer_sent = false;
    transfer_progress(r);
}

void transfer_tick(struct raft *r)
{
    unsigned slot;
    raft_id next;
    int rank;

    if (r->transfer_to == 0) {
        return;
    }
    if (r->now - r->transfer_start >= r->election_timeout) {
        r->transfer_to = 0; /* abandoned: the leader serves again */
        return;
    }
    /* A picked transferee that fell silent (a paused process, a cut
     * link that did not break the connection) gives way to one that
     * answers: its TimeoutNow, sent or not, may never be acted on. */
    slot = raft_slot_of(r, r->transfer_to);
    if (!r->transfer_any || slot >= r->conf.n ||
        r->now - r->transfer_start <= 2u * r->heartbeat_interval ||
        !silent(r, &r->progress[slot])) {
        return;
    }
    next = most_caught_up(r, r->transfer_to, &rank);
    if (next != 0 && rank == 3) {
        r->transfer_to = next;
        r->transfer_sent = false;
        transfer_progress(r);
    }
}
