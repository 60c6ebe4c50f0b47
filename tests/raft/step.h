/* Helpers shared by the hand-stepped tests of the Raft core (header-only,
 * static inline): the configuration of a voter of {1, 2, 3}, one event
 * stepped into a core per call, electing node 1, and finding messages in an
 * update. The core under test is node 1: every message stepped in is
 * addressed to it. Include after <cmocka.h>. */

#ifndef TESTS_RAFT_STEP_H
#define TESTS_RAFT_STEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "raft/raft.h"

/* config3 fills @cfg for voter @id of {1, 2, 3} (the list is static):
 * election timeout 100 ms, heartbeat interval 20 ms, @max_size bytes per
 * AppendEntries, a window of @inflight messages, PRNG @seed, and the
 * classic protocol (pre-vote and check-quorum off; they have their own
 * tests). Everything else is zero. */
static inline void config3(struct raft_config *cfg, raft_id id,
                           uint64_t max_size, unsigned inflight, uint64_t seed)
{
    static const raft_id voters[3] = {1, 2, 3};

    memset(cfg, 0, sizeof *cfg);
    cfg->id = id;
    cfg->voters = voters;
    cfg->n_voters = 3;
    cfg->election_timeout = 100;
    cfg->heartbeat_interval = 20;
    cfg->max_size_per_msg = max_size;
    cfg->max_inflight_msgs = inflight;
    cfg->seed = seed;
    cfg->disable_pre_vote = true;
    cfg->disable_check_quorum = true;
}

/* step_tick steps RAFT_EVENT_TICK at time @now into @r; returns what
 * raft_step returns, the update in @u. */
static inline int step_tick(struct raft *r, uint64_t now, struct raft_update *u)
{
    struct raft_event e;

    memset(&e, 0, sizeof e);
    e.type = RAFT_EVENT_TICK;
    e.tick.now = now;
    return raft_step(r, &e, u);
}

/* step_persisted steps RAFT_EVENT_PERSISTED: entries up to @index, the
 * last of term @term, are durable. Returns what raft_step returns. */
static inline int step_persisted(struct raft *r, raft_index index,
                                 raft_term term, struct raft_update *u)
{
    struct raft_event e;

    memset(&e, 0, sizeof e);
    e.type = RAFT_EVENT_PERSISTED;
    e.persisted.index = index;
    e.persisted.term = term;
    return raft_step(r, &e, u);
}

/* step_unreachable steps an event of @type (RAFT_EVENT_UNREACHABLE or
 * RAFT_EVENT_SNAPSHOT_FAILED) naming peer @id. Returns what raft_step
 * returns. */
static inline int step_unreachable(struct raft *r, uint8_t type, raft_id id,
                                   struct raft_update *u)
{
    struct raft_event e;

    memset(&e, 0, sizeof e);
    e.type = type;
    e.unreachable.id = id;
    return raft_step(r, &e, u);
}

/* step_propose steps a PROPOSE of @n (at most 64) payloads of @len bytes;
 * payload i is filled with the byte @fill + i * @stride. The payloads are
 * the helper's: released before it returns. Returns what raft_step
 * returns. */
static inline int step_propose(struct raft *r, unsigned n, size_t len, int fill,
                               int stride, struct raft_update *u)
{
    struct raft_buf *bufs[64];
    struct raft_event e;
    unsigned i;
    int rc;

    assert_true(n <= 64);
    for (i = 0; i < n; i++) {
        bufs[i] = raft_buf_new(len);
        assert_non_null(bufs[i]);
        memset(bufs[i]->data, fill + (int)i * stride, len);
    }
    memset(&e, 0, sizeof e);
    e.type = RAFT_EVENT_PROPOSE;
    e.propose.bufs = bufs;
    e.propose.n = n;
    rc = raft_step(r, &e, u);
    for (i = 0; i < n; i++) {
        raft_buf_unref(bufs[i]);
    }
    return rc;
}

/* init_receive zeroes @e and makes it the RAFT_EVENT_RECEIVE of a message
 * of @type from @from to node 1; the caller fills in the payload. */
static inline void init_receive(struct raft_event *e, uint8_t type,
                                raft_id from)
{
    memset(e, 0, sizeof *e);
    e->type = RAFT_EVENT_RECEIVE;
    e->receive.type = type;
    e->receive.from = from;
    e->receive.to = 1;
}

/* step_request_vote steps a RequestVote (a pre-vote if @pre_vote) of
 * @term from candidate @from whose log ends at @last_index of
 * @last_term. Returns what raft_step returns. */
static inline int step_request_vote(struct raft *r, raft_id from,
                                    raft_term term, raft_index last_index,
                                    raft_term last_term, bool pre_vote,
                                    struct raft_update *u)
{
    struct raft_event e;

    init_receive(&e, RAFT_MSG_REQUEST_VOTE, from);
    e.receive.request_vote.term = term;
    e.receive.request_vote.last_log_index = last_index;
    e.receive.request_vote.last_log_term = last_term;
    e.receive.request_vote.pre_vote = pre_vote;
    return raft_step(r, &e, u);
}

/* step_vote_result steps the answer of @from, of @term, to a RequestVote
 * (to a pre-vote if @pre_vote): granted or not. Returns what raft_step
 * returns. */
static inline int step_vote_result(struct raft *r, raft_id from, raft_term term,
                                   bool granted, bool pre_vote,
                                   struct raft_update *u)
{
    struct raft_event e;

    init_receive(&e, RAFT_MSG_REQUEST_VOTE_RESULT, from);
    e.receive.request_vote_result.term = term;
    e.receive.request_vote_result.vote_granted = granted;
    e.receive.request_vote_result.pre_vote = pre_vote;
    return raft_step(r, &e, u);
}

/* step_installed steps RAFT_EVENT_SNAPSHOT_INSTALLED: a snapshot of
 * leader @leader of @term, through @index of @last_term. Returns what
 * raft_step returns. */
static inline int step_installed(struct raft *r, raft_id leader, raft_term term,
                                 raft_index index, raft_term last_term,
                                 struct raft_update *u)
{
    struct raft_event e = {.type = RAFT_EVENT_SNAPSHOT_INSTALLED};

    e.snapshot.leader = leader;
    e.snapshot.term = term;
    e.snapshot.index = index;
    e.snapshot.last_term = last_term;
    return raft_step(r, &e, u);
}

/* step_append_echo steps an AppendEntries of @term from leader @from:
 * @prev at @prev_term, @leader_commit, the @n @entries (borrowed for the
 * call), request number @seq, echoing @echo (wire version 7; 0: an
 * older leader's, which echoes nothing). Returns what raft_step
 * returns. */
static inline int step_append_echo(struct raft *r, raft_id from, raft_term term,
                                   raft_index prev, raft_term prev_term,
                                   raft_index leader_commit,
                                   struct raft_entry *entries, unsigned n,
                                   uint64_t seq, uint64_t echo,
                                   struct raft_update *u)
{
    struct raft_event e;

    init_receive(&e, RAFT_MSG_APPEND_ENTRIES, from);
    e.receive.append_entries.term = term;
    e.receive.append_entries.prev_log_index = prev;
    e.receive.append_entries.prev_log_term = prev_term;
    e.receive.append_entries.leader_commit = leader_commit;
    e.receive.append_entries.entries = entries;
    e.receive.append_entries.n_entries = n;
    e.receive.append_entries.seq = seq;
    e.receive.append_entries.echo = echo;
    return raft_step(r, &e, u);
}

/* step_append_seq is step_append_echo of an older leader (no echo). */
static inline int step_append_seq(struct raft *r, raft_id from, raft_term term,
                                  raft_index prev, raft_term prev_term,
                                  raft_index leader_commit,
                                  struct raft_entry *entries, unsigned n,
                                  uint64_t seq, struct raft_update *u)
{
    return step_append_echo(r, from, term, prev, prev_term, leader_commit,
                            entries, n, seq, 0, u);
}

/* step_append is step_append_seq with request number 0; with no entries
 * and everything 0 but @from and @term, it is a bare heartbeat. */
static inline int step_append(struct raft *r, raft_id from, raft_term term,
                              raft_index prev, raft_term prev_term,
                              raft_index leader_commit,
                              struct raft_entry *entries, unsigned n,
                              struct raft_update *u)
{
    return step_append_seq(r, from, term, prev, prev_term, leader_commit,
                           entries, n, 0, u);
}

/* step_result_term steps the answer of @from, of @term, to an
 * AppendEntries: @success, @reject (the refused prev index), the
 * follower's @last index, the answered request's @seq. Returns what
 * raft_step returns. */
static inline int step_result_term(struct raft *r, raft_id from, raft_term term,
                                   bool success, raft_index reject,
                                   raft_index last, uint64_t seq,
                                   struct raft_update *u)
{
    struct raft_event e;

    init_receive(&e, RAFT_MSG_APPEND_ENTRIES_RESULT, from);
    e.receive.append_entries_result.term = term;
    e.receive.append_entries_result.success = success;
    e.receive.append_entries_result.reject_index = reject;
    e.receive.append_entries_result.last_log_index = last;
    e.receive.append_entries_result.seq = seq;
    return raft_step(r, &e, u);
}

/* step_result is step_result_term in @r's current term. */
static inline int step_result(struct raft *r, raft_id from, bool success,
                              raft_index reject, raft_index last, uint64_t seq,
                              struct raft_update *u)
{
    return step_result_term(r, from, raft_current_term(r), success, reject,
                            last, seq, u);
}

/* make_leader ticks @r (node 1, a follower that has never ticked) from
 * time 0 into candidacy, then steps node 2's vote for it, which makes it
 * leader (asserted); @u holds the last update. */
static inline void make_leader(struct raft *r, struct raft_update *u)
{
    uint64_t t;

    for (t = 0; raft_role(r) != RAFT_CANDIDATE; t++) {
        assert_int_equal(step_tick(r, t, u), 0);
    }
    assert_int_equal(
        step_vote_result(r, 2, raft_current_term(r), true, false, u), 0);
    assert_int_equal(raft_role(r), RAFT_LEADER);
}

/* append_to returns the @k-th AppendEntries (from 0) addressed to @to in
 * @u, pointing into @u; NULL if there is none. */
static inline const struct raft_append_entries *append_to(
    const struct raft_update *u, raft_id to, unsigned k)
{
    unsigned i;

    for (i = 0; i < u->n_messages; i++) {
        if (u->messages[i].type == RAFT_MSG_APPEND_ENTRIES &&
            u->messages[i].to == to && k-- == 0) {
            return &u->messages[i].append_entries;
        }
    }
    return NULL;
}

#endif /* TESTS_RAFT_STEP_H */
