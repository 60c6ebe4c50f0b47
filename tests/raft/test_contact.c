/* What a server last heard of its leader (raft/contact.c), for the bound
 * on stale reads: a leader's last contact with a quorum of voters
 * (raft_quorum_contact) and the leader's commit index as last heard
 * (raft_leader_commit); clusters via tests/lib/cluster.h. And the
 * liveness of a peer in the middle of a long message
 * (RAFT_EVENT_CONTACT), single cores stepped by hand. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "raft/raft.h"
#include "tests/lib/cluster.h"
#include "tests/raft/step.h"

static bool has_leader(struct cluster *c, void *arg)
{
    (void)arg;
    return cluster_leader(c) != 0;
}

/* committed says whether every live node's commit index reached the
 * leader's last index. */
static bool committed(struct cluster *c, void *arg)
{
    raft_id leader = cluster_leader(c);
    raft_index last;
    (void)arg;
    if (leader == 0) {
        return false;
    }
    last = raft_last_index(cluster_raft(c, leader));
    for (raft_id id = 1; id <= cluster_n_nodes(c); id++) {
        struct raft *r = cluster_raft(c, id);
        if (r != NULL && raft_commit_index(r) < last) {
            return false;
        }
    }
    return true;
}

/* A leader in touch with its followers heard a quorum within a few
 * heartbeats; a follower is no leader (UINT64_MAX) and knows the
 * leader's commit index. Cut off, the old leader's quorum contact grows
 * with the clock while it still leads (check-quorum steps it down one to
 * two election timeouts later). */
static void test_quorum_contact(void **state)
{
    struct cluster_config cfg;
    struct cluster *c;
    struct raft *leader;
    raft_id id, old;
    uint64_t t0;

    (void)state;
    cluster_config_default(&cfg, 3, 7);
    c = cluster_new(&cfg);
    assert_true(cluster_run_until(c, 2000, has_leader, NULL));
    old = cluster_leader(c);
    assert_int_equal(cluster_propose(c, old, "x", 1), 0);
    assert_true(cluster_run_until(c, 1000, committed, NULL));
    cluster_run(c, 100);
    leader = cluster_raft(c, old);
    /* Heartbeats every 20 ms, network 1..5 ms each way. */
    assert_true(raft_quorum_contact(leader) <= 40);
    assert_int_equal(raft_leader_commit(leader), raft_commit_index(leader));
    for (id = 1; id <= 3; id++) {
        struct raft *r = cluster_raft(c, id);
        if (id == old) {
            continue;
        }
        assert_true(raft_quorum_contact(r) == UINT64_MAX);
        assert_int_equal(raft_leader_commit(r), raft_commit_index(leader));
        assert_true(raft_leader_contact(r) <= 40);
    }

    cluster_isolate(c, old, false);
    t0 = cluster_now(c);
    cluster_run(c, 60);
    assert_int_equal(raft_role(leader), RAFT_LEADER);
    assert_true(raft_quorum_contact(leader) >= 60);
    assert_true(raft_quorum_contact(leader) <= cluster_now(c) - t0 + 40);
    cluster_free(c);
}

/* Each AppendEntries tells the leader's quorum contact (wire version 6):
 * a follower of a leader in touch with a quorum hears a few heartbeats'
 * worth; one cut off with its leader from the majority of 5 hears it
 * grow with the clock while the leader leads on (the follower's state is
 * current as of the leader's last quorum contact, not of its own
 * receipt: the staleness rule, tests/sim's test_staleness_minority). 0
 * on the leader itself; a new leader's followers hear its own. */
static void test_leader_quorum_contact(void **state)
{
    struct cluster_config cfg;
    struct cluster *c;
    raft_id id, old, f;
    uint64_t t0;

    (void)state;
    cluster_config_default(&cfg, 5, 13);
    cfg.election_timeout = 400;
    c = cluster_new(&cfg);
    assert_true(cluster_run_until(c, 4000, has_leader, NULL));
    old = cluster_leader(c);
    assert_int_equal(cluster_propose(c, old, "x", 1), 0);
    assert_true(cluster_run_until(c, 1000, committed, NULL));
    cluster_run(c, 100);
    assert_int_equal(raft_leader_quorum_contact(cluster_raft(c, old)), 0);
    for (id = 1; id <= 5; id++) {
        if (id != old) {
            /* Heartbeats every 20 ms, network 1..5 ms each way. */
            assert_true(raft_leader_quorum_contact(cluster_raft(c, id)) <= 40);
        }
    }

    f = old % 5 + 1;
    for (id = 1; id <= 5; id++) {
        if (id != old && id != f) {
            cluster_set_link(c, id, old, false);
            cluster_set_link(c, old, id, false);
            cluster_set_link(c, id, f, false);
            cluster_set_link(c, f, id, false);
        }
    }
    t0 = cluster_now(c);
    cluster_run(c, 200);
    assert_int_equal(raft_role(cluster_raft(c, old)), RAFT_LEADER);
    assert_true(raft_leader_contact(cluster_raft(c, f)) <= 40);
    assert_true(raft_leader_quorum_contact(cluster_raft(c, f)) >= 150);
    assert_true(raft_leader_quorum_contact(cluster_raft(c, f)) <=
                cluster_now(c) - t0 + 40);

    cluster_heal(c);
    assert_true(cluster_run_until(c, 4000, committed, NULL));
    cluster_run(c, 100);
    for (id = 1; id <= 5; id++) {
        if (id != cluster_leader(c)) {
            assert_true(raft_leader_quorum_contact(cluster_raft(c, id)) <= 40);
        }
    }
    cluster_free(c);
}

/* Before any contact raft_leader_commit is 0; a follower restarted while
 * the others committed entries learns the leader's commit index from its
 * AppendEntries. */
static void test_leader_commit_ahead(void **state)
{
    struct cluster_config cfg;
    struct cluster *c;
    raft_id leader, lagging = 0;
    const char *p[] = {"a", "b", "c", "d", "e"};

    (void)state;
    cluster_config_default(&cfg, 3, 11);
    c = cluster_new(&cfg);
    assert_int_equal(raft_leader_commit(cluster_raft(c, 1)), 0);
    assert_true(cluster_run_until(c, 2000, has_leader, NULL));
    leader = cluster_leader(c);
    lagging = leader == 3 ? 2 : 3;
    cluster_crash(c, lagging);
    for (unsigned i = 0; i < 5; i++) {
        assert_int_equal(cluster_propose(c, leader, p[i], 1), 0);
    }
    assert_true(cluster_run_until(c, 1000, committed, NULL));
    cluster_restart(c, lagging);
    assert_true(cluster_run_until(c, 1000, committed, NULL));
    assert_int_equal(raft_leader_commit(cluster_raft(c, lagging)),
                     raft_commit_index(cluster_raft(c, leader)));
    cluster_free(c);
}

/* new_leader_other says whether a leader other than *(raft_id *)@arg
 * leads. */
static bool new_leader_other(struct cluster *c, void *arg)
{
    raft_id l = cluster_leader(c);
    return l != 0 && l != *(raft_id *)arg;
}

/* all_current says whether every live node's commit index is at an entry
 * of its term. */
static bool all_current(struct cluster *c, void *arg)
{
    (void)arg;
    for (raft_id id = 1; id <= cluster_n_nodes(c); id++) {
        struct raft *r = cluster_raft(c, id);
        if (r != NULL && cluster_alive(c, id) && !raft_commit_current(r)) {
            return false;
        }
    }
    return true;
}

/* raft_commit_current: false on a new leader until its NOOP commits, and
 * on a follower until it holds a committed entry of the term (the
 * staleness rule takes no commit index as current before: a new leader's
 * may lag what the leader before it committed, which let a follower
 * serve a read past its bound, seed 450868 of the fault suite); true on
 * every node once the NOOP is committed and told. */
static void test_commit_current(void **state)
{
    struct cluster_config cfg;
    struct cluster *c;
    raft_id old, now;

    (void)state;
    cluster_config_default(&cfg, 3, 5);
    c = cluster_new(&cfg);
    for (raft_id id = 1; id <= 3; id++) {
        assert_false(raft_commit_current(cluster_raft(c, id)));
    }
    assert_true(cluster_run_until(c, 2000, has_leader, NULL));
    old = cluster_leader(c);
    /* Elected at this step: its NOOP is not durable on a quorum yet. */
    assert_false(raft_commit_current(cluster_raft(c, old)));
    assert_true(cluster_run_until(c, 1000, all_current, NULL));
    assert_int_equal(cluster_propose(c, old, "x", 1), 0);
    assert_true(cluster_run_until(c, 1000, committed, NULL));

    /* The old leader cut off: the next one's commit index is not current
     * when it is elected, nor on its followers, until its NOOP commits. */
    cluster_isolate(c, old, false);
    assert_true(cluster_run_until(c, 3000, new_leader_other, &old));
    now = cluster_leader(c);
    assert_false(raft_commit_current(cluster_raft(c, now)));
    for (raft_id id = 1; id <= 3; id++) {
        if (id != old && id != now) {
            assert_false(raft_commit_current(cluster_raft(c, id)));
        }
    }
    cluster_crash(c, old);
    assert_true(cluster_run_until(c, 1000, all_current, NULL));
    assert_int_equal(cluster_leader(c), now);
    cluster_free(c);
}

/* new3_protected returns node @id of {1, 2, 3} in @term with pre-vote and
 * check-quorum on (raft.h's defaults), election timeout 100 ms. */
static struct raft *new3_protected(raft_id id, raft_term term)
{
    struct raft_config cfg;
    struct raft_hard_state hs = {term, 0};
    struct raft *r = NULL;

    config3(&cfg, id, 1024, 4, 42);
    cfg.disable_pre_vote = false;
    cfg.disable_check_quorum = false;
    assert_int_equal(raft_new(&cfg, &hs, 1, NULL, 0, 0, &r), 0);
    return r;
}

/* step_contact steps RAFT_EVENT_CONTACT from peer @id. Returns what
 * raft_step returns. */
static int step_contact(struct raft *r, raft_id id, struct raft_update *u)
{
    struct raft_event e;

    memset(&e, 0, sizeof e);
    e.type = RAFT_EVENT_CONTACT;
    e.contact.id = id;
    return raft_step(r, &e, u);
}

/* assert_quiet_step checks that a CONTACT step changed and sent
 * nothing. */
static void assert_quiet_step(const struct raft_update *u)
{
    assert_false(u->hard_state_changed);
    assert_int_equal(u->n_messages, 0);
    assert_int_equal(u->n_entries, 0);
    assert_int_equal(u->n_committed, 0);
}

/* A snapshot installed from the leader makes it known (contact), but
 * tells no commit index: its last index may lag the leader's commit
 * index far behind, so raft_leader_commit_contact stays unknown until an
 * AppendEntries of the term tells one. Before, the staleness rule took
 * the snapshot's arrival as contact and its index as the leader's commit
 * index: a follower restarted behind a compaction called itself caught
 * up, and fresh, with the snapshot's state. */
static void test_commit_contact_after_snapshot(void **state)
{
    struct raft *r = new3_protected(1, 2);
    struct raft_update u;

    (void)state;
    assert_int_equal(step_tick(r, 1000, &u), 0);
    assert_true(raft_leader_commit_contact(r) == UINT64_MAX);
    assert_int_equal(step_installed(r, 2, 2, 50, 2, &u), 0);
    assert_int_equal(raft_leader_id(r), 2);
    assert_int_equal(raft_leader_contact(r), 0);
    assert_int_equal(raft_leader_commit(r), 50);
    assert_true(raft_leader_commit_contact(r) == UINT64_MAX);
    assert_int_equal(step_tick(r, 1030, &u), 0);
    assert_int_equal(step_append(r, 2, 2, 50, 2, 80, NULL, 0, &u), 0);
    assert_int_equal(raft_leader_commit(r), 80);
    assert_int_equal(raft_leader_commit_contact(r), 0);
    assert_int_equal(step_tick(r, 1050, &u), 0);
    assert_int_equal(raft_leader_commit_contact(r), 20);
    /* A new term: none told by its leader yet. */
    assert_int_equal(step_installed(r, 3, 3, 90, 3, &u), 0);
    assert_int_equal(raft_leader_id(r), 3);
    assert_true(raft_leader_commit_contact(r) == UINT64_MAX);
    raft_close(r);
}

/* A follower's contact with its leader is a round trip timed by its own
 * clock: each answer carries its send time (plus one), and the commit
 * index of an AppendEntries that echoes one is current as of then, not
 * of its arrival. An AppendEntries that echoes none yet (a new leader's
 * first), an older echo than the one counted (reordered) or one ahead
 * of the clock tells no time; one of an older leader (echo 0) counts
 * from its arrival, as before wire version 7. */
static void test_commit_contact_echo(void **state)
{
    struct raft *r = new3_protected(1, 2);
    struct raft_update u;

    (void)state;
    assert_int_equal(step_tick(r, 1000, &u), 0);
    assert_int_equal(
        step_append_echo(r, 2, 2, 0, 0, 0, NULL, 0, 1, RAFT_ECHO_NONE, &u), 0);
    assert_int_equal(raft_leader_id(r), 2);
    assert_true(raft_leader_commit_contact(r) == UINT64_MAX);
    assert_int_equal(u.n_messages, 1);
    assert_int_equal(u.messages[0].type, RAFT_MSG_APPEND_ENTRIES_RESULT);
    assert_int_equal(u.messages[0].append_entries_result.sent_at, 1001);
    assert_int_equal(step_tick(r, 1300, &u), 0);
    assert_int_equal(step_append_echo(r, 2, 2, 0, 0, 0, NULL, 0, 1, 1001, &u),
                     0);
    assert_int_equal(raft_leader_commit_contact(r), 300);
    assert_int_equal(step_tick(r, 1400, &u), 0);
    assert_int_equal(step_append_echo(r, 2, 2, 0, 0, 0, NULL, 0, 1, 1301, &u),
                     0);
    assert_int_equal(raft_leader_commit_contact(r), 100);
    assert_int_equal(step_append_echo(r, 2, 2, 0, 0, 0, NULL, 0, 1, 1001, &u),
                     0);
    assert_int_equal(raft_leader_commit_contact(r), 100);
    assert_int_equal(step_append_echo(r, 2, 2, 0, 0, 0, NULL, 0, 1, 5001, &u),
                     0);
    assert_int_equal(raft_leader_commit_contact(r), 100);
    assert_int_equal(step_append_echo(r, 2, 2, 0, 0, 0, NULL, 0, 1, 0, &u), 0);
    assert_int_equal(raft_leader_commit_contact(r), 0);
    raft_close(r);
}

/* A follower whose leader's bytes keep arriving (a large entry on its
 * way, heartbeats queued behind it) neither campaigns nor gives a vote
 * to a later term for many election timeouts; its read staleness
 * (raft_leader_contact) still grows, since no commit index arrived. Once
 * the bytes stop it campaigns within two timeouts. Bytes of a server that
 * is not its leader change nothing. */
static void test_contact_follower(void **state)
{
    struct raft *r = new3_protected(1, 2);
    struct raft_update u;
    uint64_t t;

    (void)state;
    assert_int_equal(step_tick(r, 1000, &u), 0);
    assert_int_equal(step_append(r, 2, 2, 0, 0, 0, NULL, 0, &u), 0);
    assert_int_equal(raft_leader_id(r), 2);
    for (t = 1010; t <= 2000; t += 10) {
        assert_int_equal(step_contact(r, 2, &u), 0);
        assert_quiet_step(&u);
        assert_int_equal(step_tick(r, t, &u), 0);
        assert_int_equal(u.n_messages, 0); /* no pre-vote */
    }
    assert_int_equal(raft_role(r), RAFT_FOLLOWER);
    assert_int_equal(raft_leader_id(r), 2);
    assert_int_equal(raft_current_term(r), 2);
    assert_true(raft_leader_contact(r) >= 1000);
    /* Leader stickiness holds: a later term's RequestVote is ignored. */
    assert_int_equal(step_request_vote(r, 3, 3, 9, 9, false, &u), 0);
    assert_int_equal(u.n_messages, 0);
    assert_int_equal(raft_current_term(r), 2);
    /* Bytes of node 3 (not its leader) do not keep it: the timer that
     * started at the last contact of 2 fires within 2 timeouts. */
    for (t = 2010; u.n_messages == 0; t += 10) {
        assert_true(t <= 2200);
        assert_int_equal(step_contact(r, 3, &u), 0);
        assert_quiet_step(&u);
        assert_int_equal(step_tick(r, t, &u), 0);
    }
    assert_int_equal(u.messages[0].type, RAFT_MSG_REQUEST_VOTE);
    assert_true(u.messages[0].request_vote.pre_vote);
    assert_int_equal(raft_leader_id(r), 0);
    /* A pre-candidate knows no leader: bytes of the old one change
     * nothing (its pre-vote round goes on to its own timeout). */
    assert_int_equal(step_contact(r, 2, &u), 0);
    assert_quiet_step(&u);
    assert_int_equal(raft_leader_id(r), 0);
    /* Its own id or 0 is no peer. */
    assert_int_equal(step_contact(r, 1, &u), RAFT_INVALID);
    assert_int_equal(step_contact(r, 0, &u), RAFT_INVALID);
    raft_close(r);
}

/* tick_to_leader makes @r (node 1, never ticked, check-quorum on) leader
 * of term 1 with node 2's pre-vote and vote, and node 2 answering its
 * NOOP (so it replicates); returns the time reached. */
static uint64_t tick_to_leader(struct raft *r, struct raft_update *u)
{
    uint64_t t, seq;

    for (t = 0; u->n_messages == 0 || t == 0; t++) {
        assert_true(t < 10000);
        assert_int_equal(step_tick(r, t, u), 0);
    }
    t--;
    assert_int_equal(step_vote_result(r, 2, 1, true, true, u), 0);
    assert_int_equal(step_vote_result(r, 2, 1, true, false, u), 0);
    assert_int_equal(raft_role(r), RAFT_LEADER);
    assert_non_null(append_to(u, 2, 0));
    seq = append_to(u, 2, 0)->seq;
    assert_int_equal(step_persisted(r, 1, 1, u), 0);
    assert_int_equal(step_result(r, 2, true, 0, 1, seq, u), 0);
    return t;
}

/* A leader whose follower keeps taking its bytes (a large entry on its
 * way; no answer can come before it ends) stays leader for many
 * check-quorum rounds, and does not take the follower's window for lost
 * (no re-probe: the entry would go again); raft_quorum_contact and
 * last_contact still grow, since no answer came. Once the bytes stop, it
 * steps down within two rounds. A learner's or a stranger's bytes count
 * for nothing. */
static void test_contact_leader(void **state)
{
    struct raft *r = new3_protected(1, 0);
    struct raft_update u;
    struct raft_progress_info pi;
    uint64_t t0, t;

    (void)state;
    memset(&u, 0, sizeof u);
    t0 = tick_to_leader(r, &u);
    assert_int_equal(raft_progress(r, 2, &pi), 0);
    assert_int_equal(pi.state, RAFT_PROGRESS_REPLICATE);
    /* A large entry goes out to 2 (and 3, which says nothing). */
    assert_int_equal(step_propose(r, 1, 4096, 'x', 0, &u), 0);
    assert_non_null(append_to(&u, 2, 0));
    for (t = t0 + 10; t <= t0 + 1000; t += 10) {
        assert_int_equal(step_contact(r, 2, &u), 0);
        assert_quiet_step(&u);
        assert_int_equal(step_tick(r, t, &u), 0);
        assert_int_equal(raft_role(r), RAFT_LEADER);
    }
    assert_int_equal(raft_progress(r, 2, &pi), 0);
    assert_int_equal(pi.state, RAFT_PROGRESS_REPLICATE);
    assert_int_equal(pi.inflight, 1);
    assert_true(pi.last_contact >= 900);
    assert_true(raft_quorum_contact(r) >= 900);
    assert_int_equal(raft_current_term(r), 1);
    /* Bytes stop, or come from a stranger: it steps down. */
    for (t = t0 + 1010; raft_role(r) == RAFT_LEADER; t += 10) {
        assert_true(t <= t0 + 1210);
        assert_int_equal(step_contact(r, 7, &u), 0);
        assert_quiet_step(&u);
        assert_int_equal(step_tick(r, t, &u), 0);
    }
    assert_int_equal(raft_role(r), RAFT_FOLLOWER);
    assert_int_equal(raft_current_term(r), 1);
    raft_close(r);

    /* Without the contacts the same leader re-probes 2 and steps down
     * after one to two rounds: what the event prevents. */
    r = new3_protected(1, 0);
    memset(&u, 0, sizeof u);
    t0 = tick_to_leader(r, &u);
    assert_int_equal(step_propose(r, 1, 4096, 'x', 0, &u), 0);
    for (t = t0 + 10; raft_role(r) == RAFT_LEADER; t += 10) {
        assert_true(t <= t0 + 210);
        if (raft_progress(r, 2, &pi) == 0 && pi.state == RAFT_PROGRESS_PROBE) {
            break;
        }
        assert_int_equal(step_tick(r, t, &u), 0);
    }
    assert_true(
        raft_role(r) != RAFT_LEADER ||
        (raft_progress(r, 2, &pi) == 0 && pi.state == RAFT_PROGRESS_PROBE));
    raft_close(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quorum_contact),
        cmocka_unit_test(test_leader_quorum_contact),
        cmocka_unit_test(test_leader_commit_ahead),
        cmocka_unit_test(test_commit_current),
        cmocka_unit_test(test_commit_contact_after_snapshot),
        cmocka_unit_test(test_commit_contact_echo),
        cmocka_unit_test(test_contact_follower),
        cmocka_unit_test(test_contact_leader),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
