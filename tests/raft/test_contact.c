/* What a server last heard of its leader (raft/contact.c), for the bound
 * on stale reads: a leader's last contact with a quorum of voters
 * (raft_quorum_contact) and the leader's commit index as last heard
 * (raft_leader_commit); clusters via tests/lib/cluster.h. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "raft/raft.h"
#include "tests/lib/cluster.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quorum_contact),
        cmocka_unit_test(test_leader_commit_ahead),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
