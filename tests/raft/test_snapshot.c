/* Log compaction and snapshots in the Raft core (paper §7): COMPACT and
 * its bounds, the snapshot boundary in consistency checks and elections,
 * raft_restore, the leader's SNAPSHOT progress (offer once, failure and
 * retry, timeout, the follower's acknowledgement), the follower's
 * SNAPSHOT_INSTALLED, and bounded memory under steady load with periodic
 * compaction. Hand-stepped cores of 3 voters. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "raft/raft.h"
#include "raft/raft_internal.h"
#include "tests/raft/step.h"

static int step_compact(struct raft *r, raft_index index, struct raft_update *u)
{
    struct raft_event e = {.type = RAFT_EVENT_COMPACT};

    e.compact.index = index;
    return raft_step(r, &e, u);
}

static const struct raft_append_entries_result *result_to(
    const struct raft_update *u, raft_id to)
{
    unsigned i;

    for (i = 0; i < u->n_messages; i++) {
        if (u->messages[i].type == RAFT_MSG_APPEND_ENTRIES_RESULT &&
            u->messages[i].to == to) {
            return &u->messages[i].append_entries_result;
        }
    }
    return NULL;
}

/* leader_with makes node 1 leader of term 2 with @n entries of its own
 * after the NOOP (index 1), all durable; node 2 holds them all (REPLICATE,
 * so they commit), node 3 never answered. */
static struct raft *leader_with(unsigned n, struct raft_update *u)
{
    struct raft_config cfg;
    struct raft_hard_state hs = {1, 0};
    struct raft *r = NULL;

    config3(&cfg, 1, 1 << 20, 4, 3);
    assert_int_equal(raft_new(&cfg, &hs, 1, NULL, 0, 0, &r), 0);
    make_leader(r, u);
    if (n > 0) {
        assert_int_equal(step_propose(r, n, 8, 'x', 0, u), 0);
    }
    assert_int_equal(step_persisted(r, 1 + n, 2, u), 0);
    assert_int_equal(step_result(r, 2, true, 0, 1 + n, 0, u), 0);
    assert_int_equal(raft_commit_index(r), 1 + n);
    return r;
}

/* COMPACT drops the prefix: only up to what was handed out and persisted
 * (else RAFT_INVALID, nothing changed); an index at or below the boundary
 * changes nothing; the boundary's term answers consistency checks. */
static void test_compact_bounds(void **state)
{
    struct raft_update u;
    struct raft *r = leader_with(9, &u);
    const struct raft_append_entries *ae;
    struct raft_progress_info pi;

    (void)state;
    assert_int_equal(raft_first_index(r), 1);
    /* 11: neither durable nor committed */
    assert_int_equal(step_propose(r, 1, 8, 'x', 0, &u), 0);
    assert_int_equal(step_compact(r, 11, &u), RAFT_INVALID);
    assert_int_equal(raft_first_index(r), 1);
    assert_int_equal(step_compact(r, 6, &u), 0);
    assert_int_equal(raft_first_index(r), 7);
    assert_int_equal(raft_snapshot_index(r), 6);
    assert_int_equal(raft_snapshot_term(r), 2);
    assert_int_equal(raft_last_index(r), 11);
    assert_int_equal(u.n_messages, 0);
    assert_int_equal(step_compact(r, 4, &u), 0);
    assert_int_equal(raft_first_index(r), 7);
    assert_int_equal(step_compact(r, 10, &u), 0);
    assert_int_equal(raft_first_index(r), 11);
    /* Node 2 at next 12, so fine; a probe of node 2 at the boundary
     * carries the boundary's term. */
    assert_int_equal(step_unreachable(r, RAFT_EVENT_UNREACHABLE, 2, &u), 0);
    pi.next_index = 0;
    assert_int_equal(raft_progress(r, 2, &pi), 0);
    assert_int_equal(pi.next_index, 11);
    assert_int_equal(step_tick(r, 1000, &u), 0);
    ae = append_to(&u, 2, 0);
    assert_non_null(ae);
    assert_int_equal(ae->prev_log_index, 10);
    assert_int_equal(ae->prev_log_term, 2);
    assert_int_equal(ae->n_entries, 1);
    raft_close(r);
}

/* raft_restore: a compacted log restarts with its boundary; an empty log
 * still has a last term (the snapshot's) for the vote rule (§5.4.1) and
 * AppendEntries at the boundary match. applied below the boundary is
 * refused. */
static void test_restore(void **state)
{
    struct raft_config cfg;
    struct raft_hard_state hs = {5, 0};
    struct raft_entry more[2] = {{5, 11, RAFT_ENTRY_NOOP, NULL},
                                 {5, 12, RAFT_ENTRY_NOOP, NULL}};
    struct raft_update u;
    struct raft *r = NULL;

    (void)state;
    config3(&cfg, 1, 1 << 20, 4, 3);
    assert_int_equal(raft_restore(&cfg, &hs, 10, 4, NULL, 0, 9, &r),
                     RAFT_INVALID);
    assert_int_equal(raft_restore(&cfg, &hs, 10, 4, NULL, 0, 10, &r), 0);
    assert_int_equal(raft_first_index(r), 11);
    assert_int_equal(raft_last_index(r), 10);
    assert_int_equal(raft_commit_index(r), 10);
    /* A candidate of term 6 whose last entry is 9 of term 4: older than
     * our boundary (10 of term 4): refused. */
    assert_int_equal(step_request_vote(r, 2, 6, 9, 4, false, &u), 0);
    assert_false(u.messages[0].request_vote_result.vote_granted);
    /* The boundary matches; the entries are appended. */
    assert_int_equal(step_append_seq(r, 2, 6, 10, 4, 12, more, 2, 1, &u), 0);
    assert_int_equal(u.n_entries, 2);
    assert_int_equal(u.entries[0].index, 11);
    assert_int_equal(step_persisted(r, 12, 5, &u), 0);
    assert_int_equal(u.n_committed, 2);
    assert_int_equal(u.committed[0].index, 11);
    raft_close(r);
}

/* The leader's side: node 3 needs compacted entries. It is probed once
 * at the boundary; refused, it enters SNAPSHOT and is named in
 * snapshot_to exactly once; it gets heartbeats without entries. A failed
 * transfer returns it to probing, and it is not offered again before a
 * heartbeat interval; then it is. Its acknowledgement of the installed
 * snapshot (seq 0, last >= the snapshot index) brings it to REPLICATE and
 * the rest follows. A SNAPSHOT state without progress times out after 10
 * election timeouts. */
static void test_leader_snapshot(void **state)
{
    struct raft_update u;
    struct raft *r = leader_with(19, &u);
    const struct raft_append_entries *ae;
    struct raft_progress_info pi;
    uint64_t t = 1000;
    unsigned offers = 0;

    (void)state;
    assert_int_equal(step_compact(r, 15, &u), 0);
    /* Node 3 never answered: its next index is 1, compacted. First the
     * boundary probe (prev 15). */
    assert_int_equal(step_tick(r, t, &u), 0);
    ae = append_to(&u, 3, 0);
    assert_non_null(ae);
    assert_int_equal(ae->prev_log_index, 15);
    assert_int_equal(ae->prev_log_term, 2);
    assert_int_equal(u.n_snapshot_to, 0);
    assert_int_equal(step_result(r, 3, false, 15, 0, ae->seq, &u), 0);
    assert_int_equal(u.n_snapshot_to, 1);
    assert_int_equal(u.snapshot_to[0], 3);
    assert_null(append_to(&u, 3, 0));
    pi.state = 0;
    assert_int_equal(raft_progress(r, 3, &pi), 0);
    assert_int_equal(pi.state, RAFT_PROGRESS_SNAPSHOT);
    assert_int_equal(pi.snapshot_index, 15);
    /* Heartbeats only, at index 0 (match's term was compacted), and the
     * id is not offered again. */
    for (t = 1001; t < 1100; t++) {
        assert_int_equal(step_tick(r, t, &u), 0);
        assert_int_equal(u.n_snapshot_to, 0);
        ae = append_to(&u, 3, 0);
        if (ae != NULL) {
            assert_int_equal(ae->n_entries, 0);
            assert_int_equal(ae->prev_log_index, 0);
        }
    }
    /* The transfer fails: probing again, no offer within a heartbeat
     * interval (20 ms), then one. */
    assert_int_equal(step_unreachable(r, RAFT_EVENT_SNAPSHOT_FAILED, 3, &u), 0);
    assert_int_equal(raft_progress(r, 3, &pi), 0);
    assert_int_equal(pi.state, RAFT_PROGRESS_PROBE);
    for (t = 1100; offers == 0; t++) {
        assert_int_equal(step_tick(r, t, &u), 0);
        if (u.n_snapshot_to > 0) {
            offers++;
            assert_true(t >= 1120);
        }
        if (append_to(&u, 3, 0) != NULL && append_to(&u, 3, 0)->n_entries > 0) {
            /* the boundary probe again */
            assert_int_equal(append_to(&u, 3, 0)->prev_log_index, 15);
            assert_int_equal(
                step_result(r, 3, false, 15, 0, append_to(&u, 3, 0)->seq, &u),
                0);
            offers += u.n_snapshot_to;
        }
        assert_true(t < 1300);
    }
    /* The follower installed 18 and acknowledges (seq 0). */
    assert_int_equal(step_result(r, 3, true, 0, 18, 0, &u), 0);
    assert_int_equal(raft_progress(r, 3, &pi), 0);
    assert_int_equal(pi.state, RAFT_PROGRESS_REPLICATE);
    assert_int_equal(pi.match_index, 18);
    ae = append_to(&u, 3, 0);
    assert_non_null(ae);
    assert_int_equal(ae->prev_log_index, 18);
    assert_int_equal(ae->n_entries, 2);
    raft_close(r);

    /* Timeout: 10 election timeouts in SNAPSHOT without progress. */
    r = leader_with(4, &u);
    assert_int_equal(step_compact(r, 5, &u), 0);
    assert_int_equal(step_tick(r, 1000, &u), 0);
    assert_int_equal(
        step_result(r, 3, false, 5, 0, append_to(&u, 3, 0)->seq, &u), 0);
    assert_int_equal(raft_progress(r, 3, &pi), 0);
    assert_int_equal(pi.state, RAFT_PROGRESS_SNAPSHOT);
    for (t = 1001; t < 1000 + 10 * 100 - 20; t++) {
        assert_int_equal(step_tick(r, t, &u), 0);
    }
    assert_int_equal(raft_progress(r, 3, &pi), 0);
    assert_int_equal(pi.state, RAFT_PROGRESS_SNAPSHOT);
    for (; t < 1000 + 10 * 100 + 40; t++) {
        assert_int_equal(step_tick(r, t, &u), 0);
    }
    /* Timed out: probing at the boundary again (unanswered here). */
    assert_int_equal(raft_progress(r, 3, &pi), 0);
    assert_int_equal(pi.state, RAFT_PROGRESS_PROBE);
    assert_int_equal(pi.next_index, 6);
    raft_close(r);

    /* A transfer the driver still delivers (SNAPSHOT_PROGRESS every 500
     * ms) does not time out, however long it takes: 30 election
     * timeouts; once the driver stops vouching, 10 more end it. */
    r = leader_with(4, &u);
    assert_int_equal(step_compact(r, 5, &u), 0);
    assert_int_equal(step_tick(r, 1000, &u), 0);
    assert_int_equal(
        step_result(r, 3, false, 5, 0, append_to(&u, 3, 0)->seq, &u), 0);
    for (t = 1001; t < 1000 + 30 * 100; t++) {
        assert_int_equal(step_tick(r, t, &u), 0);
        if (t % 50 == 0) {
            assert_int_equal(
                step_unreachable(r, RAFT_EVENT_SNAPSHOT_PROGRESS, 3, &u), 0);
        }
    }
    assert_int_equal(raft_progress(r, 3, &pi), 0);
    assert_int_equal(pi.state, RAFT_PROGRESS_SNAPSHOT);
    assert_int_equal(pi.snapshot_index, 5);
    for (; t < 1000 + 30 * 100 + 10 * 100 + 40; t++) {
        assert_int_equal(step_tick(r, t, &u), 0);
    }
    assert_int_equal(raft_progress(r, 3, &pi), 0);
    assert_int_equal(pi.state, RAFT_PROGRESS_PROBE);
    /* Ignored for a follower not in SNAPSHOT, refused for no id. */
    assert_int_equal(step_unreachable(r, RAFT_EVENT_SNAPSHOT_PROGRESS, 3, &u),
                     0);
    assert_int_equal(raft_progress(r, 3, &pi), 0);
    assert_int_equal(pi.state, RAFT_PROGRESS_PROBE);
    assert_int_equal(step_unreachable(r, RAFT_EVENT_SNAPSHOT_PROGRESS, 0, &u),
                     RAFT_INVALID);
    raft_close(r);
}

/* The follower's side: SNAPSHOT_INSTALLED drops every entry, moves the
 * boundary, persisted and commit to the snapshot, never hands out what it
 * covers, and acknowledges the leader with last_log_index = index, seq 0.
 * A higher term is adopted (and must be durable before the answer). An
 * index not above what was handed out changes nothing but is
 * acknowledged; a lower term is not acknowledged; a bad leader id and a
 * leader of the same term are invalid. */
static void test_follower_installed(void **state)
{
    struct raft_config cfg;
    struct raft_hard_state hs = {3, 0};
    struct raft_entry log[4];
    struct raft_update u;
    const struct raft_append_entries_result *res;
    struct raft *r = NULL;
    unsigned i;

    (void)state;
    config3(&cfg, 1, 1 << 20, 4, 3);
    for (i = 0; i < 4; i++) {
        log[i] = (struct raft_entry){3, i + 1, RAFT_ENTRY_NOOP, NULL};
    }
    assert_int_equal(raft_new(&cfg, &hs, 1, log, 4, 2, &r), 0);
    assert_int_equal(step_installed(r, 1, 3, 9, 3, &u), RAFT_INVALID);
    assert_int_equal(step_installed(r, 0, 3, 9, 3, &u), RAFT_INVALID);
    assert_int_equal(step_installed(r, 2, 3, 0, 3, &u), RAFT_INVALID);
    /* Not above the applied index (2): nothing changes, acknowledged. */
    assert_int_equal(step_installed(r, 2, 3, 2, 3, &u), 0);
    assert_int_equal(raft_last_index(r), 4);
    res = result_to(&u, 2);
    assert_non_null(res);
    assert_true(res->success);
    assert_int_equal(res->last_log_index, 2);
    assert_true(res->seq == 0);
    /* A real install at 9 of term 4, from the leader of term 5. */
    assert_int_equal(step_installed(r, 2, 5, 9, 4, &u), 0);
    assert_true(u.hard_state_changed);
    assert_int_equal(u.hard_state.term, 5);
    assert_int_equal(raft_current_term(r), 5);
    assert_int_equal(raft_leader_id(r), 2);
    assert_int_equal(raft_first_index(r), 10);
    assert_int_equal(raft_last_index(r), 9);
    assert_int_equal(raft_persisted_index(r), 9);
    assert_int_equal(raft_commit_index(r), 9);
    assert_int_equal(raft_snapshot_term(r), 4);
    assert_int_equal(u.n_committed, 0);
    assert_int_equal(u.n_entries, 0);
    res = result_to(&u, 2);
    assert_non_null(res);
    assert_int_equal(res->last_log_index, 9);
    assert_int_equal(res->term, 5);
    /* A late completion of an old write is ignored. */
    assert_int_equal(step_persisted(r, 4, 3, &u), 0);
    assert_int_equal(raft_persisted_index(r), 9);
    /* The leader continues at the boundary: 10 committed, handed out. */
    log[0] = (struct raft_entry){5, 10, RAFT_ENTRY_NOOP, NULL};
    assert_int_equal(step_append_seq(r, 2, 5, 9, 4, 10, log, 1, 1, &u), 0);
    assert_int_equal(step_persisted(r, 10, 5, &u), 0);
    assert_int_equal(u.n_committed, 1);
    assert_int_equal(u.committed[0].index, 10);
    /* An older term: installed state kept, no answer. */
    assert_int_equal(step_installed(r, 3, 4, 10, 5, &u), 0);
    assert_null(result_to(&u, 3));
    raft_close(r);
}

/* Bounded memory: a leader under steady load (200 000 entries, 100 per
 * proposal, followers answering everything) that compacts every 4096
 * entries keeping 1024 keeps a log array of a few thousand slots. */
static void test_bounded_memory(void **state)
{
    struct raft_update u;
    struct raft *r = leader_with(0, &u);
    raft_index last;
    size_t most = 0;
    unsigned k;

    (void)state;
    for (k = 0; k < 2000; k++) {
        assert_int_equal(step_propose(r, 64, 8, 'x', 0, &u), 0);
        last = raft_last_index(r);
        assert_int_equal(step_persisted(r, last, 2, &u), 0);
        assert_int_equal(step_result(r, 2, true, 0, last, 0, &u), 0);
        assert_int_equal(step_result(r, 3, true, 0, last, 0, &u), 0);
        assert_int_equal(raft_commit_index(r), last);
        if (last - raft_snapshot_index(r) > 4096 + 1024) {
            assert_int_equal(step_compact(r, last - 1024, &u), 0);
        }
        if (r->log.cap > most) {
            most = r->log.cap;
        }
    }
    assert_true(raft_last_index(r) > 120000);
    if (most > 16384) {
        fail_msg("log array grew to %zu slots", most);
    }
    raft_close(r);
}

/* assert_conflict checks that @r counted @n conflicts, the latest @want. */
static void assert_conflict(const struct raft *r, uint64_t n,
                            struct raft_conflict want)
{
    struct raft_conflict c;

    memset(&c, 0, sizeof c);
    assert_int_equal(raft_conflicts(r, &c), n);
    assert_int_equal(c.leader, want.leader);
    assert_int_equal(c.leader_term, want.leader_term);
    assert_int_equal(c.index, want.index);
    assert_int_equal(c.ours, want.ours);
    assert_int_equal(c.theirs, want.theirs);
    assert_int_equal(c.snapshot, want.snapshot);
}

/* A leader whose history contradicts our committed one (a split
 * founding: its term at our snapshot's boundary, or at a committed entry,
 * is another): its AppendEntries is dropped unanswered, nothing is
 * appended nor committed, and raft_conflicts says where; one that agrees
 * goes on as before. */
static void test_conflict_with_committed_history(void **state)
{
    struct raft_config cfg;
    struct raft_hard_state hs = {1, 0};
    struct raft_entry theirs[2] = {{2, 2, RAFT_ENTRY_NOOP, NULL},
                                   {2, 3, RAFT_ENTRY_NOOP, NULL}};
    struct raft_entry ours[1] = {{3, 3, RAFT_ENTRY_NOOP, NULL}};
    struct raft_entry other[1] = {{4, 3, RAFT_ENTRY_NOOP, NULL}};
    struct raft_conflict c;
    struct raft_update u;
    struct raft *r = NULL;

    (void)state;
    config3(&cfg, 1, 1 << 20, 4, 3);
    /* A snapshot at 2 of term 1 (bootstrap_from=), an empty log. */
    assert_int_equal(raft_restore(&cfg, &hs, 2, 1, NULL, 0, 2, &r), 0);
    assert_int_equal(raft_conflicts(r, &c), 0);
    /* Leader 2 of term 2 holds entry 2 of term 2: at our boundary. */
    assert_int_equal(step_append(r, 2, 2, 2, 2, 3, NULL, 0, &u), 0);
    assert_int_equal(u.n_messages, 0);
    assert_conflict(r, 1, (struct raft_conflict){2, 2, 2, 1, 2, true});
    /* Probed lower, its entry 2 comes along: dropped too, nothing
     * appended. */
    assert_int_equal(step_append(r, 2, 2, 1, 1, 3, theirs, 2, &u), 0);
    assert_int_equal(u.n_messages, 0);
    assert_int_equal(u.n_entries, 0);
    assert_int_equal(raft_last_index(r), 2);
    assert_int_equal(raft_conflicts(r, NULL), 2);
    /* A leader of term 3 that agrees: appended, committed. */
    assert_int_equal(step_append(r, 3, 3, 2, 1, 3, ours, 1, &u), 0);
    assert_int_equal(u.n_entries, 1);
    assert_int_equal(step_persisted(r, 3, 3, &u), 0);
    assert_int_equal(raft_commit_index(r), 3);
    /* Then one of term 4 that has another entry 3: committed here. */
    assert_int_equal(step_append(r, 2, 4, 2, 1, 3, other, 1, &u), 0);
    assert_int_equal(u.n_messages, 0);
    assert_conflict(r, 3, (struct raft_conflict){2, 4, 3, 3, 4, false});
    raft_close(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compact_bounds),
        cmocka_unit_test(test_restore),
        cmocka_unit_test(test_leader_snapshot),
        cmocka_unit_test(test_follower_installed),
        cmocka_unit_test(test_bounded_memory),
        cmocka_unit_test(test_conflict_with_committed_history),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
