/* Per-follower replication progress, PROBE, REPLICATE and SNAPSHOT, with
 * answers accounted for in request order (see progress.h; etcd
 * tracker/progress.go, thesis §3.5 and §10.2.1). */

#include "progress.h"

#include <string.h>

int progress_init(struct raft_peer_progress *p, unsigned cap,
                  uint64_t max_bytes)
{
    int rc;

    memset(p, 0, sizeof *p);
    rc = inflights_init(&p->inflights, cap, max_bytes);
    if (rc != 0) {
        return rc;
    }
    p->next_seq = 1;
    progress_reset(p, 1, 0);
    return 0;
}

void progress_close(struct raft_peer_progress *p)
{
    inflights_close(&p->inflights);
}

/* new_window empties the window and bumps the epoch: every answer to a
 * request sent so far is from now on stale. */
static void new_window(struct raft_peer_progress *p, uint8_t state,
                       uint64_t now)
{
    inflights_reset(&p->inflights);
    p->epoch++;
    p->epoch_seq = p->next_seq;
    p->acked_seq = 0;
    p->pending.seq = 0;
    p->state = state;
    p->paused = false;
    p->last_progress = now;
    p->snapshot_index = 0;
    p->boundary_probed = false;
}

void progress_reset(struct raft_peer_progress *p, raft_index next, uint64_t now)
{
    p->match = 0;
    p->next = next > 0 ? next : 1;
    p->snapshot_retry = 0;
    p->heard = false;
    p->last_heard = 0;
    p->contact_at = 0;
    p->echo = 0;
    p->marks_start = 0;
    p->n_marks = 0;
    p->mark_floor = (struct raft_send_mark){0, 0};
    p->unreachable = false;
    p->round_target = next > 0 ? next - 1 : 0;
    p->round_start = now;
    p->round_ms = 0;
    p->round_done = false;
    new_window(p, RAFT_PROGRESS_PROBE, now);
}

void progress_become_probe(struct raft_peer_progress *p, uint64_t now)
{
    new_window(p, RAFT_PROGRESS_PROBE, now);
    p->next = p->match + 1;
}

void progress_become_replicate(struct raft_peer_progress *p, uint64_t now)
{
    new_window(p, RAFT_PROGRESS_REPLICATE, now);
    p->next = p->match + 1;
}

void progress_become_snapshot(struct raft_peer_progress *p, raft_index index,
                              uint64_t now)
{
    new_window(p, RAFT_PROGRESS_SNAPSHOT, now);
    p->next = p->match + 1;
    p->snapshot_index = index;
}

uint64_t progress_take_seq(struct raft_peer_progress *p, uint64_t now,
                           uint64_t gap)
{
    uint64_t seq = p->next_seq++;
    unsigned newest = (p->marks_start + p->n_marks - 1) % RAFT__SEND_MARKS;

    if (p->n_marks > 0 && now < p->marks[newest].at + gap) {
        return seq; /* the newest mark is a lower bound of now */
    }
    if (p->n_marks == RAFT__SEND_MARKS) {
        p->mark_floor = p->marks[p->marks_start];
        p->marks_start = (p->marks_start + 1) % RAFT__SEND_MARKS;
        p->n_marks--;
    }
    p->marks[(p->marks_start + p->n_marks) % RAFT__SEND_MARKS] =
        (struct raft_send_mark){seq, now};
    p->n_marks++;
    return seq;
}

/* request_sent_at writes to @out_at a lower bound of the time request
 * @seq went out: the time of the newest mark at or below it. Returns
 * false when no mark covers it. Same thread as raft_step. */
static bool request_sent_at(const struct raft_peer_progress *p, uint64_t seq,
                            uint64_t *out_at)
{
    if (seq == 0 || seq >= p->next_seq) {
        return false;
    }
    for (unsigned i = p->n_marks; i > 0; i--) {
        const struct raft_send_mark *k =
            &p->marks[(p->marks_start + i - 1) % RAFT__SEND_MARKS];
        if (k->seq <= seq) {
            *out_at = k->at;
            return true;
        }
    }
    if (p->mark_floor.seq != 0 && p->mark_floor.seq <= seq) {
        *out_at = p->mark_floor.at;
        return true;
    }
    return false;
}

void progress_answered(struct raft_peer_progress *p, uint64_t seq,
                       uint64_t sent_at)
{
    uint64_t at;

    if (sent_at != 0) {
        p->echo = sent_at;
    }
    if (request_sent_at(p, seq, &at) && at > p->contact_at) {
        p->contact_at = at;
    }
}

bool progress_is_stale(const struct raft_peer_progress *p, uint64_t seq)
{
    return seq != 0 && seq < p->epoch_seq;
}

bool progress_maybe_update(struct raft_peer_progress *p, raft_index index,
                           uint64_t now)
{
    bool updated = false;

    if (index > p->match) {
        p->match = index;
        p->last_progress = now;
        updated = true;
    }
    if (p->next < p->match + 1) {
        p->next = p->match + 1;
    }
    return updated;
}

unsigned progress_ack(struct raft_peer_progress *p, raft_index index)
{
    unsigned before = p->inflights.n;
    uint64_t seq = inflights_free_le(&p->inflights, index);

    /* Invariant: members leave oldest first, so acked_seq only grows. */
    if (seq > p->acked_seq) {
        p->acked_seq = seq;
    }
    return before - p->inflights.n;
}

bool progress_maybe_decr(struct raft_peer_progress *p, raft_index reject,
                         raft_index hint, raft_index conflict, uint64_t now)
{
    raft_index next;

    (void)now;
    /* Only the answer to the outstanding probe counts.
     * Invariant: next >= match + 1 >= 1. */
    if (p->state != RAFT_PROGRESS_PROBE || reject != p->next - 1) {
        return false;
    }
    if (hint < p->match) {
        /* The follower's log ends before what it acknowledged as durable:
         * it lost its storage (an operator wiped it). Raft assumes this
         * never happens; the best the leader can do is to trust nothing
         * it held and rebuild it from the log or a snapshot. */
        p->match = 0;
    }
    next = reject;
    if (hint + 1 < next) {
        next = hint + 1;
    }
    if (conflict != 0 && conflict < next) {
        next = conflict;
    }
    if (next < p->match + 1) {
        next = p->match + 1;
    }
    p->next = next;
    p->paused = false;
    return true;
}

/* predecessors_done tells whether every member of the window older than
 * request @seq is accounted for. */
static bool predecessors_done(const struct raft_peer_progress *p, uint64_t seq)
{
    const struct raft_inflight *oldest = inflights_oldest(&p->inflights);
    return oldest == NULL || oldest->seq >= seq;
}

/* in_window tells whether request @seq is a member of the window. */
static bool in_window(const struct raft_peer_progress *p, uint64_t seq)
{
    unsigned i;

    for (i = 0; i < p->inflights.n; i++) {
        if (inflights_at(&p->inflights, i)->seq == seq) {
            return true;
        }
    }
    return false;
}

enum progress_verdict progress_reject(struct raft_peer_progress *p,
                                      uint64_t seq, raft_index reject,
                                      raft_index hint, raft_index conflict,
                                      uint64_t now)
{
    bool member;

    if (p->state != RAFT_PROGRESS_REPLICATE || progress_is_stale(p, seq) ||
        (seq != 0 && seq <= p->acked_seq)) {
        return PROGRESS_IGNORED;
    }
    member = seq != 0 && in_window(p, seq);
    if (!member && reject <= p->match) {
        return PROGRESS_IGNORED;
    }
    if (!predecessors_done(p, seq)) {
        if (p->pending.seq == 0 || seq < p->pending.seq) {
            p->pending.seq = seq;
            p->pending.in_window = member;
            p->pending.reject = reject;
            p->pending.hint = hint;
            p->pending.conflict = conflict;
        }
        return PROGRESS_DEFERRED;
    }
    /* In REPLICATE the follower held match when the window began; a
     * refusal of a request of the window means it was refused for lack
     * of an earlier one (lost, or overtaken): probe again from what the
     * follower is known to hold. */
    progress_become_probe(p, now);
    return PROGRESS_RESET;
}

bool progress_apply_pending(struct raft_peer_progress *p, bool force,
                            uint64_t now)
{
    const struct raft_inflight *oldest = inflights_oldest(&p->inflights);

    if (p->state != RAFT_PROGRESS_REPLICATE || p->pending.seq == 0) {
        return false;
    }
    if (p->pending.in_window) {
        if (oldest == NULL || oldest->seq > p->pending.seq) {
            /* A success accounted for the refused request after all. */
            p->pending.seq = 0;
            return false;
        }
        if (oldest->seq < p->pending.seq && !force) {
            return false;
        }
    } else {
        if (p->pending.reject <= p->match) {
            p->pending.seq = 0;
            return false;
        }
        if (!force && !predecessors_done(p, p->pending.seq)) {
            return false;
        }
    }
    progress_become_probe(p, now);
    return true;
}

bool progress_is_paused(const struct raft_peer_progress *p)
{
    switch (p->state) {
        case RAFT_PROGRESS_PROBE:
            return p->paused;
        case RAFT_PROGRESS_REPLICATE:
            return inflights_full(&p->inflights);
        default:
            return true;
    }
}

uint64_t progress_room(const struct raft_peer_progress *p)
{
    if (p->state != RAFT_PROGRESS_REPLICATE) {
        return UINT64_MAX;
    }
    return inflights_room(&p->inflights);
}

void progress_sent(struct raft_peer_progress *p, uint64_t seq, raft_index last,
                   unsigned n_entries, uint64_t bytes)
{
    if (p->state == RAFT_PROGRESS_PROBE) {
        p->paused = true;
        return;
    }
    if (p->state != RAFT_PROGRESS_REPLICATE || n_entries == 0) {
        return;
    }
    p->next = last + 1;
    /* Invariant: the window is not full (checked by progress_is_paused). */
    inflights_add(&p->inflights, seq, last, bytes);
}

void progress_round(struct raft_peer_progress *p, raft_index match,
                    raft_index last, uint64_t now)
{
    if (match < p->round_target) {
        return;
    }
    p->round_ms = now - p->round_start;
    p->round_done = true;
    p->round_target = last;
    p->round_start = now;
}

bool progress_caught_up(const struct raft_peer_progress *p, uint64_t timeout,
                        uint64_t now)
{
    return p->round_done && p->round_ms < timeout &&
           (p->match >= p->round_target || now - p->round_start < timeout);
}
