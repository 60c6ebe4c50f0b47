/* ReadIndex (thesis §6.4): a leader serves a linearizable read without
 * writing to the log. It records its commit index as the read index (once
 * an entry of its own term committed, its NOOP: before that its commit
 * index may lag what an earlier leader committed), then confirms that it
 * still leads with one heartbeat round: the read is ready once a quorum
 * of voters answered an AppendEntries sent after the read index was
 * taken. No other leader can then have committed anything past it. The
 * caller applies the log through the read index before it reads.
 *
 * Rounds are batched: while one round runs, new reads wait, and the next
 * round serves all of them. Each AppendEntries carries the per-follower
 * @seq its answer echoes (raft.h), the round's context: a round records
 * each follower's next seq when it starts, and an answer of this term
 * echoing a seq at or above that mark confirms it (etcd-io/raft
 * read_only.go does the same with a context in heartbeats, hashicorp/raft
 * verifyLeader with a counter of heartbeats answered).
 *
 * Failure modes: a server that stops leading fails every pending read
 * (RAFT_NOTLEADER); a read not confirmed within an election timeout of
 * its registration fails (RAFT_TIMEOUT). */

#include <stdlib.h>
#include <string.h>

#include "raft_internal.h"

/* grow makes room for one more pending read and one more output of each
 * pending read (so that outputs never need memory). */
static int grow(struct raft_read_index *ri)
{
    unsigned cap;
    struct raft__read *pending;
    struct raft_read *out;

    if (ri->n_pending < ri->cap) {
        return 0;
    }
    cap = ri->cap == 0 ? 8 : ri->cap * 2;
    pending = realloc(ri->pending, cap * sizeof *pending);
    if (pending == NULL) {
        return RAFT_NOMEM;
    }
    ri->pending = pending;
    out = realloc(ri->out, cap * sizeof *out);
    if (out == NULL) {
        return RAFT_NOMEM; /* pending grew: harmless, cap unchanged */
    }
    ri->out = out;
    ri->cap = cap;
    return 0;
}

int read_index_check(const struct raft *r)
{
    if (r->role != RAFT_LEADER) {
        return RAFT_NOTLEADER;
    }
    if (r->read_index.n_pending >= RAFT__READS_MAX) {
        return RAFT_BUSY;
    }
    return 0;
}

int read_index_request(struct raft *r, uint64_t tag)
{
    struct raft_read_index *ri = &r->read_index;
    struct raft__read *p;
    int rc;

    rc = grow(ri);
    if (rc != 0) {
        return rc;
    }
    p = &ri->pending[ri->n_pending++];
    p->tag = tag;
    p->start = r->now;
    p->in_round = false;
    return 0;
}

void read_index_lead(struct raft *r, raft_index noop)
{
    struct raft_read_index *ri = &r->read_index;

    ri->term_start = noop;
    ri->round_active = false;
}

void read_index_ack(struct raft *r, raft_id id, uint64_t seq)
{
    struct raft_read_index *ri = &r->read_index;
    unsigned i;

    if (!ri->round_active) {
        return;
    }
    for (i = 0; i < ri->n_round; i++) {
        if (ri->ids[i] == id && seq >= ri->marks[i]) {
            ri->acked[i] = 1;
        }
    }
}

/* confirmed tells whether a quorum of the voters in force confirmed the
 * round: this leader (when it is a voter) and the voters that answered;
 * a voter added since the round started counts as not answered. */
static bool confirmed(const struct raft *r)
{
    const struct raft_read_index *ri = &r->read_index;
    int8_t votes[RAFT_MAX_SERVERS];
    unsigned slot, i;

    for (slot = 0; slot < r->conf.n; slot++) {
        raft_id id = r->conf.servers[slot].id;
        votes[slot] = id == r->id ? 1 : 0;
        for (i = 0; i < ri->n_round; i++) {
            if (ri->ids[i] == id && ri->acked[i]) {
                votes[slot] = 1;
            }
        }
    }
    return membership_tally(r, votes) == QUORUM_WON;
}

/* emit hands pending read @i out with @status and removes it (the order
 * of the others is kept: they go out in registration order). */
static void emit(struct raft_read_index *ri, unsigned i, raft_index index,
                 int status)
{
    struct raft_read *o = &ri->out[ri->n_out++];

    o->tag = ri->pending[i].tag;
    o->index = status == 0 ? index : 0;
    o->status = status;
    memmove(&ri->pending[i], &ri->pending[i + 1],
            (ri->n_pending - i - 1) * sizeof ri->pending[0]);
    ri->n_pending--;
}

void read_index_tick(struct raft *r)
{
    struct raft_read_index *ri = &r->read_index;
    unsigned i = 0;

    while (i < ri->n_pending) {
        if (r->now - ri->pending[i].start >= r->election_timeout) {
            emit(ri, i, 0, RAFT_TIMEOUT);
        } else {
            i++;
        }
    }
}

/* start_round takes the read index and sends the heartbeat round that
 * confirms it, for every read not in a round yet. */
static void start_round(struct raft *r)
{
    struct raft_read_index *ri = &r->read_index;
    unsigned i;

    ri->round_active = true;
    ri->round_index = r->commit;
    ri->n_round = 0;
    for (i = 0; i < raft_n_slots(r); i++) {
        if (i != r->self_slot) {
            ri->ids[ri->n_round] = raft_slot_id(r, i);
            ri->marks[ri->n_round] = r->progress[i].next_seq;
            ri->acked[ri->n_round] = 0;
            ri->n_round++;
        }
    }
    for (i = 0; i < ri->n_pending; i++) {
        ri->pending[i].in_round = true;
    }
    for (i = 0; i < raft_n_slots(r); i++) {
        if (i != r->self_slot) {
            replication_heartbeat(r, i);
        }
    }
}

/* finish_round hands out the reads of a confirmed round. */
static void finish_round(struct raft *r)
{
    struct raft_read_index *ri = &r->read_index;
    unsigned i = 0;

    ri->round_active = false;
    while (i < ri->n_pending) {
        if (ri->pending[i].in_round) {
            emit(ri, i, ri->round_index, 0);
        } else {
            i++;
        }
    }
}

void read_index_after_step(struct raft *r)
{
    struct raft_read_index *ri = &r->read_index;
    unsigned i;

    if (r->role != RAFT_LEADER) {
        ri->round_active = false;
        while (ri->n_pending > 0) {
            emit(ri, 0, 0, RAFT_NOTLEADER);
        }
        return;
    }
    /* At most two passes: a round confirmed at once (a single voter)
     * lets the reads that waited for it start theirs. */
    for (i = 0; i < 2; i++) {
        if (ri->round_active && confirmed(r)) {
            finish_round(r);
        }
        if (ri->round_active || ri->n_pending == 0 ||
            r->commit < ri->term_start) {
            return;
        }
        start_round(r);
    }
}

void read_index_begin_step(struct raft *r)
{
    r->read_index.n_out = 0;
}

void read_index_close(struct raft *r)
{
    free(r->read_index.pending);
    free(r->read_index.out);
}
