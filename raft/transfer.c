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

/* How well a leader reaches a voter, for a transfer whose transferee it
 * picks: the higher the better. */
enum reach {
    REACH_CUT = 0,     /* its connection broke (RAFT_EVENT_UNREACHABLE) and
                         nothing came from it since */
    REACH_UNHEARD = 1, /* not heard within the last election timeout (or
                          not yet in this term) */
    REACH_LATELY = 2,  /* heard within the last election timeout */
    REACH_NOW = 3,     /* heard within two heartbeat intervals */
};

/* reach ranks the voter in @slot (enum reach). */
static enum reach reach(const struct raft *r, unsigned slot)
{
    const struct raft_peer_progress *p = &r->progress[slot];

    if (p->unreachable) {
        return REACH_CUT;
    }
    if (!silent(r, p)) {
        return REACH_NOW;
    }
    return p->heard && r->now - p->last_heard < r->election_timeout
               ? REACH_LATELY
               : REACH_UNHEARD;
}

/* most_caught_up returns the voter other than the leader and @except
 * (and, when @whole_log, holding the leader's whole log) that is best
 * reached (reach) and, among those, has the highest match index (the
 * lowest slot on ties), 0 when there is none; *out_reach (may be NULL)
 * gets its rank. A voter that answered lately is preferred to a more
 * caught-up one that did not: TimeoutNow to a stopped or cut-off voter
 * would leave the cluster without a leader for an election timeout, and
 * a caught-up one needs only to be brought up to date. */
static raft_id most_caught_up(const struct raft *r, raft_id except,
                              bool whole_log, enum reach *out_reach)
{
    raft_id best = 0;
    raft_index best_match = 0;
    enum reach best_reach = REACH_CUT;
    unsigned i;

    for (i = 0; i < r->conf.n; i++) {
        enum reach rank;

        if (i == r->self_slot || !raft_is_voter(r, i) ||
            r->conf.servers[i].id == except ||
            (whole_log && r->progress[i].match < log_last_index(&r->log))) {
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
        enum reach rank;
        return most_caught_up(r, 0, false, &rank) != 0 && rank != REACH_CUT
                   ? 0
                   : RAFT_NOTFOUND;
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
    r->transfer_to = id != 0 ? id : most_caught_up(r, 0, false, NULL);
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
    /* One TimeoutNow, to a voter that holds the whole log (no other
     * would get it). */
    (void)send_timeout_now(r, most_caught_up(r, 0, true, NULL));
}

/* retarget moves the transfer under way to @next, which gets TimeoutNow
 * once up to date. */
static void retarget(struct raft *r, raft_id next)
{
    r->transfer_to = next;
    r->transfer_sent = false;
    transfer_progress(r);
}

void transfer_unreachable(struct raft *r, raft_id id)
{
    raft_id next;
    enum reach rank;

    if (r->transfer_to == 0 || r->transfer_to != id || !r->transfer_any) {
        return;
    }
    next = most_caught_up(r, id, false, &rank);
    if (next == 0 || rank == REACH_CUT) {
        r->transfer_to = 0; /* abandoned: the leader serves again */
        return;
    }
    retarget(r, next);
}

void transfer_tick(struct raft *r)
{
    unsigned slot;
    raft_id next;
    enum reach rank;

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
    next = most_caught_up(r, r->transfer_to, false, &rank);
    if (next != 0 && rank == REACH_NOW) {
        retarget(r, next);
    }
}
