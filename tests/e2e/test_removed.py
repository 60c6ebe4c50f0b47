"""A node removed from the cluster (raft_remove) says so, end to end: once
its removal committed, within an election timeout, its raft_exec fails at
once with RAFTSQL_REMOVED (not retryable: it never receives entries
again), a raft_exec_id there is "outcome unknown" (an earlier try under
the id may have applied), reads of replicated tables are refused as
stale, in its own process and in others (the notice beside the
database), plain writes are refused at once, their COMMIT vetoed (in its
own process and in others), and raft_status() says removed; a write racing the removal is
never answered "not applied". Restarted with its log, it says so from its
first call. A node removed while it was down, started after the leader
stopped sending to it, learns it within a few election timeouts (the
leader replicates to a non-member that campaigns), from the log or from
a snapshot, and disrupts nobody. Added back, it is a member again.
"""

import os
import shutil
import tempfile
import threading
import time
import unittest

from codes import CODES, other_process
from e2e import wait_for
from raftsql_cluster import NodeError
from test_membership import ELECTION_MS, Members

SQLITE_AUTH = 23
SQLITE_CONSTRAINT_COMMITHOOK = 531
REMOVED_WORDS = "this node was removed from the cluster (configuration entry"


class RemovedTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-e2e-removed-")
        self.m = Members(self.dir, 3)
        # Tests named *_compacted compact the log soon.
        extra = ("snapshot_threshold=16 trailing_entries=0"
                 if self._testMethodName.endswith("_compacted") else "")
        for i in (1, 2, 3):
            self.m.start(i, extra)
        leader = self.m.leader()
        leader.value("SELECT raft_exec('CREATE TABLE kv(k PRIMARY KEY, v)')")
        leader.value("SELECT raft_exec('INSERT INTO kv VALUES (0, 0)')")
        applied = leader.status()["applied"]
        for n in self.m.live():
            wait_for("server %d applied %d" % (n.id, applied),
                     lambda n=n: n.status()["applied"] >= applied)

    def tearDown(self):
        codes = [self.m.stop(i) for i in list(self.m.nodes)]
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertEqual([c for c in codes if c not in (0, None)], [])

    def remove(self, victim):
        """raft_remove(@victim) on the leader; the monotonic time its
        removal was known committed."""
        text = self.m.leader().value("SELECT raft_remove(?)", victim.id)
        self.assertIn("server %d removed" % victim.id, text)
        return time.monotonic()

    def assert_removed_answers(self, victim):
        """@victim refuses writes (RAFTSQL_REMOVED; with an id, outcome
        unknown), reads of kv (SQLITE_AUTH) in its process and in
        another, and says removed in raft_status()."""
        with self.assertRaises(NodeError) as cm:
            victim.value("SELECT raft_exec('INSERT INTO kv VALUES (1, 1)')")
        self.assertIn("raft_exec: not applied: this node was removed from "
                      "the cluster (configuration entry", str(cm.exception))
        self.assertEqual(cm.exception.code, CODES["RAFTSQL_REMOVED"])
        with self.assertRaises(NodeError) as cm:
            victim.value("SELECT raft_exec_id('r1', 'INSERT INTO kv VALUES "
                         "(2, 2)')")
        self.assertIn("raft_exec_id: outcome unknown: this node was removed",
                      str(cm.exception))
        self.assertEqual(cm.exception.code, CODES["RAFTSQL_UNKNOWN"])
        with self.assertRaises(NodeError) as cm:
            victim.value("SELECT count(*) FROM kv")
        self.assertEqual(cm.exception.code, SQLITE_AUTH)
        # The schema and the internals stay readable.
        self.assertGreater(victim.value(
            "SELECT count(*) FROM sqlite_schema"), 0)
        st = victim.status()
        self.assertTrue(st["removed"], st)
        self.assertTrue(st["stale"], st)
        self.assertIn("stale replica: removed from the cluster "
                      "(configuration entry %d committed)" %
                      st["configuration"]["index"], st["stale_reason"])
        got = other_process(victim.db, [
            ["SELECT count(*) FROM kv"],
            ["SELECT raft_exec('INSERT INTO kv VALUES (3, 3)')"]])
        self.assertEqual(got[0].get("code"), SQLITE_AUTH, got)
        self.assertEqual(got[1].get("code"), CODES["RAFTSQL_REMOVED"], got)
        self.assertIn("this node was removed from the cluster",
                      got[1]["error"])
        self.assert_plain_refused(victim)

    def assert_plain_refused(self, victim):
        """A plain write on @victim, in its process and in another, is
        refused at once (its COMMIT vetoed: it would wait for entries that
        never come), saying why, and is applied nowhere. Before, it took
        the lease from the leader (applied on every node), or answered
        SQLITE_BUSY after four times its busy timeout (make jepsen, seed
        26001)."""
        t0 = time.monotonic()
        with self.assertRaises(NodeError) as cm:
            victim.sql("INSERT INTO kv VALUES (4, 4)")
        self.assertEqual(cm.exception.code, SQLITE_CONSTRAINT_COMMITHOOK,
                         cm.exception)
        self.assertIn(REMOVED_WORDS, victim.value("SELECT raft_last_error()"))
        t1 = time.monotonic()
        got = other_process(victim.db, [
            ["INSERT INTO kv VALUES (5, 5)"], ["SELECT raft_last_error()"]])
        t2 = time.monotonic()
        self.assertEqual(got[0].get("code"), SQLITE_CONSTRAINT_COMMITHOOK,
                         got)
        self.assertIn(REMOVED_WORDS, str(got[1]), got)
        # At once: well under a busy timeout (the other process's is 5 s,
        # its start included).
        self.assertLess(t1 - t0, 1.0)
        self.assertLess(t2 - t1, 4.0)
        leader = self.m.leader()
        leader.value("SELECT raft_barrier()")
        self.assertEqual(leader.value("SELECT count(*) FROM kv WHERE k IN "
                                      "(4, 5)"), 0)

    def test_removed_node_says_so(self):
        """After raft_remove, the removed node's writes fail with
        RAFTSQL_REMOVED within an election timeout, writes racing the
        removal are applied or "outcome unknown", never "not applied",
        and its reads are refused, also after a restart."""
        leader = self.m.leader()
        victim = next(n for n in self.m.live() if n.id != leader.id)
        answers, halt = [], threading.Event()
        first_removed = []

        def race():
            # Writes on the victim before, during and after the removal.
            k = 100
            while not halt.is_set():
                k += 1
                try:
                    victim.value("SELECT raft_exec('INSERT INTO kv VALUES "
                                 "(?, 0)', ?)", k)
                    answers.append(("ok", k))
                except NodeError as e:
                    answers.append((e.code, str(e)))
                    if e.code == CODES["RAFTSQL_REMOVED"]:
                        first_removed.append(time.monotonic())
                        return
        racer = threading.Thread(target=race)
        racer.start()
        try:
            wait_for("a write on server %d before the removal" % victim.id,
                     lambda: len(answers) > 0)
            committed = self.remove(victim)
            racer.join(ELECTION_MS / 1000.0 + 10)
        finally:
            halt.set()
            racer.join(30)
        self.assertTrue(first_removed, "no RAFTSQL_REMOVED: %r" %
                        answers[-5:])
        elapsed = first_removed[0] - committed
        print("RAFTSQL_REMOVED %.3f s after the removal committed "
              "(election_timeout_ms=%d)" % (elapsed, ELECTION_MS))
        self.assertLess(elapsed, ELECTION_MS / 1000.0, answers[-5:])
        for code, text in answers:
            self.assertIn(code, ("ok", CODES["RAFTSQL_UNKNOWN"],
                                 CODES["RAFTSQL_REMOVED"]), text)
        self.assert_removed_answers(victim)
        # The members go on; what the victim acknowledged is there.
        self.assertEqual(self.m.leader().value(
            "SELECT raft_exec('INSERT INTO kv VALUES (-1, 0)')"), 1)
        acked = {k for code, k in answers if code == "ok"}
        got = {r[0] for r in self.m.leader().sql("SELECT k FROM kv")}
        self.assertEqual(acked - got, set())

        # Restarted from its log (listen= alone), it knows at once.
        applied = victim.status()["applied"]
        self.assertGreaterEqual(applied,
                                victim.status()["configuration"]["index"])
        self.assertEqual(self.m.stop(victim.id), 0)
        victim = self.m.start(victim.id, "join=")
        self.assert_removed_answers(victim)

    def test_added_back_takes_writes_again(self):
        """A removed node added back (raft_add of its id and address, its
        files kept) is a member again: it takes writes (raft_exec and
        plain ones, which it refused while removed) and serves reads,
        raft_status() no longer says removed."""
        leader = self.m.leader()
        victim = next(n for n in self.m.live() if n.id != leader.id)
        self.remove(victim)
        wait_for("server %d knows it was removed" % victim.id,
                 lambda: victim.status()["removed"])
        self.assert_plain_refused(victim)
        self.m.leader().value("SELECT raft_add(?, ?)", victim.id,
                              self.m.address(victim.id))
        wait_for("server %d is a member again (status: %r)" % (
            victim.id, victim.status()),
            lambda: not victim.status()["removed"] and
            not victim.status()["stale"])
        self.assertEqual(victim.value(
            "SELECT raft_exec('INSERT INTO kv VALUES (7, 7)')"), 1)
        self.assertEqual(victim.value("SELECT v FROM kv WHERE k = 7"), 7)
        # Plain writes too, once the leader promoted it back to voter: the
        # promotion is a membership change, which ends a lease in force
        # (its COMMIT refused, "not applied": seen on a loaded machine).
        wait_for("server %d is a voter again" % victim.id,
                 lambda: self.m.leader().sql(
                     "SELECT role FROM raft_members WHERE id = ?",
                     victim.id) == [["voter"]])
        victim.sql("INSERT INTO kv VALUES (8, 8)")
        self.assertEqual(victim.value("SELECT v FROM kv WHERE k = 8"), 8)

    def removed_while_down(self, compacted):
        """Remove a follower while it is down; once the leader stopped
        sending to it (and, with @compacted, compacted the removal away),
        restart it from its files: within a few election timeouts it
        says RAFTSQL_REMOVED and refuses reads, as after a removal it
        saw, and the members keep their leader and term."""
        leader = self.m.leader()
        victim = next(n for n in self.m.live() if n.id != leader.id)
        self.assertEqual(self.m.stop(victim.id), 0)
        self.remove(victim)
        lead = self.m.leader()
        removal = lead.status()["configuration"]["index"]
        if compacted:
            # snapshot_threshold=16: the leader compacts past the
            # removal, so the victim can only learn it from a snapshot.
            for k in range(40):
                lead.value("SELECT raft_exec('INSERT INTO kv VALUES "
                           "(?, 0)', ?)", 1000 + k)
            wait_for("server %d compacted past index %d (status: %r)" % (
                lead.id, removal, lead.status()),
                lambda: lead.status()["first_index"] > removal)
        # The leader sends to a removed server an election timeout past
        # the commit of its removal (raft_leaving): then no more.
        line = "server %d left the configuration: no longer dialled" % (
            victim.id)

        def dropped():
            with open(os.path.join(self.dir, "node%d.log" % lead.id)) as f:
                return line in f.read()
        wait_for("%r in server %d's log" % (line, lead.id), dropped)
        term = lead.status()["term"]
        # RAFTSQL_TEST_LATE_TICK: its loop never comes to a tick that
        # judges staleness, so it learns its removal where raft_status()
        # does, or nowhere: whoever sees raft_status() say removed must
        # get RAFTSQL_REMOVED from the next write, never a write that
        # leaves for the leader ("outcome unknown", or applied there).
        victim = self.m.start(victim.id, "join=",
                              env={"RAFTSQL_TEST_LATE_TICK": "1"})
        started = time.monotonic()
        seen = []

        def removed():
            seen[:] = [victim.status()]
            return seen[0]["removed"]
        bound = 5 * ELECTION_MS / 1000.0
        try:
            wait_for("server %d knows it was removed" % victim.id, removed,
                     timeout=bound)
        except TimeoutError:
            self.fail("server %d does not say it was removed %.1f s after "
                      "its restart (election_timeout_ms=%d); its status: "
                      "%r" % (victim.id, time.monotonic() - started,
                              ELECTION_MS, seen))
        print("removed while down (compacted=%s): knows it %.3f s after "
              "its restart (election_timeout_ms=%d)" % (
                  compacted, time.monotonic() - started, ELECTION_MS))
        self.assert_removed_answers(victim)
        st = victim.status()
        if compacted:
            self.assertGreaterEqual(st["snapshots_installed"], 1, st)
            self.assertEqual(st["configuration"]["index"], 0, st)
        else:
            self.assertEqual(st["configuration"]["index"], removal, st)
        self.assertIn("removed from the cluster", st["member_why"])
        # It disrupted nobody.
        self.assertEqual(self.m.leader().id, lead.id)
        self.assertEqual(self.m.leader().status()["term"], term)
        self.assertEqual(self.m.leader().value(
            "SELECT raft_exec('INSERT INTO kv VALUES (-2, 0)')"), 1)

    def test_removed_while_down_learns_it(self):
        """A node removed while it was down, started after the leader
        stopped sending to it, campaigns from its old log; the leader
        hears it and replicates to it again, so it learns its removal
        and says so."""
        self.removed_while_down(False)

    def test_removed_while_down_learns_it_compacted(self):
        """The same when the leader compacted its removal away: it
        learns it from a snapshot whose configuration leaves it out."""
        self.removed_while_down(True)

if __name__ == "__main__":
    unittest.main()
