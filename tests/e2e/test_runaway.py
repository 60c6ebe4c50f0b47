"""End-to-end: requests that never end on their own (runaway requests),
which used to run for ever on every node, across restarts, or keep
raft_stop() waiting; each with the test that reproduced it (moved here
from test_wedges.py).

Real raftsql-testhost processes on 127.0.0.1, a fresh cluster per test.
"""

import threading
import time
import unittest

from e2e import ClusterCase, wait_for  # noqa: E402
from raftsql_cluster import NodeError  # noqa: E402

# Runaway requests keep every node's apply thread busy: run.py runs this
# file after the others, alone, so its bounds hold on a 2-core machine.
E2E_ALONE = True

FAST = "election_timeout_ms=300 heartbeat_ms=30"

# A request that never ends on its own.
RUNAWAY = ("INSERT INTO t SELECT x FROM (WITH RECURSIVE c(x) AS "
           "(SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT x FROM c)")


class RunawayTest(ClusterCase):

    def start(self, extra, env=None):
        super().start(FAST + " " + extra, prefix="raftsql-runaway-", env=env)

    def test_runaway_request_fails_alike_and_the_log_moves_on(self):
        """A request past the leader's max_request_steps fails with the
        same error on every node, and later writes go through (before, it
        ran forever on every node, across restarts)."""
        self.start("exec_timeout_ms=20000 max_request_steps=3000000")
        f1 = self.followers[0]
        self.exec(f1, "CREATE TABLE t(x)")
        with self.assertRaises(NodeError) as cm:
            self.exec(f1, RUNAWAY)
        self.assertIn("max_request_steps (3000000)", str(cm.exception))
        self.assertEqual(self.exec(self.leader, "INSERT INTO t VALUES(1)"),
                         1)
        applied = self.leader.status()["applied"]
        self.cluster.wait_applied(applied)
        for n in self.cluster.nodes:
            st = n.status()
            self.assertTrue(st["applying"])
            self.assertIsNone(st["last_error"])
            self.assertIsNone(st["last_error_age_ms"])
            self.assertEqual(n.value("SELECT count(*) FROM t"), 1)

    def test_leaders_budget_holds_on_every_node(self):
        """The budget is the leader's, stamped into the entry: a follower
        configured without one still interrupts the request at the same
        step, so the replicas agree."""
        self.start("exec_timeout_ms=20000 max_request_steps=2000000")
        leader = self.leader
        # The followers restart without a budget; the leader keeps leading
        # (followers that hear from it do not campaign).
        for n in self.followers:
            n.sql("SELECT raft_stop()")
            n.sql("SELECT raft_start(?)", "id=%d cluster=%s %s" % (
                n.id, self.cluster.members,
                FAST + " exec_timeout_ms=20000 max_request_steps=0"))
        self.assertEqual(self.cluster.wait_leader().id, leader.id)
        self.exec(leader, "CREATE TABLE t(x)")
        with self.assertRaises(NodeError) as cm:
            self.exec(leader, RUNAWAY)
        self.assertIn("max_request_steps (2000000)", str(cm.exception))
        self.exec(leader, "INSERT INTO t VALUES(7)")
        self.cluster.wait_applied(leader.status()["applied"])
        for n in self.cluster.nodes:
            self.assertEqual(n.sql("SELECT x FROM t"), [[7]])

    def stop_returns(self, node, timeout=60.0):
        """raft_stop() on @node, from a thread. A stop
        that waited for a request without end would never return: fails
        after @timeout s (a bound for a loaded machine, not a speed
        check), saying so."""
        returned = []
        th = threading.Thread(target=lambda: (
            node.sql("SELECT raft_stop()"), returned.append(True)))
        th.start()
        th.join(timeout)
        self.assertFalse(th.is_alive(), "raft_stop() on node %d did not "
                         "return within %.0f s" % (node.id, timeout))
        self.assertEqual(returned, [True], "raft_stop() on node %d failed "
                         "(see its log)" % node.id)

    def test_stop_does_not_wait_for_a_long_request(self):
        """raft_stop returns while the apply thread runs a request
        without end (no budget): the batch is interrupted and rolled back
        (before, raft_stop hung). The leader applies each batch 1.5 s
        late (test fault RAFTSQL_TEST_APPLY_DELAY_MS), as a loaded
        machine may: the follower that took the write has applied it
        while the leader has not yet, so the applied index counted from
        is that follower's, not the leader's."""
        slow = {"RAFTSQL_TEST_APPLY_DELAY_MS": "1500"}
        self.start("exec_timeout_ms=2000 max_request_steps=0",
                   env={1: slow})
        if self.leader.id != 1:
            self.leader.value("SELECT raft_transfer(1)")
            self.leader = wait_for("node 1 leads",
                                   lambda: self.cluster.wait_leader().id
                                   == 1 and self.cluster.node(1), 30)
        f1, f2 = [n for n in self.cluster.nodes if n.id != 1]
        self.exec(f1, "CREATE TABLE t(x)")
        # f1 applied the table before it answered; the leader may not
        # have yet.
        done = f1.status()["applied"]
        self.cluster.wait_applied(done)
        errors = []

        def runaway():
            try:
                self.exec(f1, RUNAWAY)
            except NodeError as e:
                errors.append(str(e))

        th = threading.Thread(target=runaway)
        th.start()
        # Wait until f2 has the entry committed but cannot finish it (a
        # generous bound: three apply threads run without end meanwhile,
        # under the sanitizers).
        deadline = time.monotonic() + 60
        while True:
            st = f2.status()
            if st["commit"] > done and st["applied"] == done:
                break
            self.assertLess(time.monotonic(), deadline,
                            "node %d: commit %d, applied %d; the table at "
                            "%d" % (f2.id, st["commit"], st["applied"],
                                    done))
            time.sleep(0.05)
        time.sleep(0.3)
        self.stop_returns(f2)
        th.join()
        self.assertEqual(len(errors), 1)
        self.assertIn("outcome unknown", errors[0])
        self.assertEqual(f2.value("SELECT count(*) FROM t"), 0)
        # The other nodes are stopped the same way by tearDown.
        for n in (self.leader, f1):
            self.stop_returns(n)


if __name__ == "__main__":
    unittest.main()
