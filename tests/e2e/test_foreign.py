"""Foreign writes: a commit to a replica's database by a
process that does not load raftsql (the sqlite3 shell) cannot be refused,
so the node catches it (PRAGMA data_version on its apply connection,
checked in every batch and once a second when idle), marks itself
diverged in raft_status() and the log, refuses raft_exec and reads of
replicated tables through itself, and repairs from a snapshot of the
leader: at once by default, on raft_repair() with repair=manual. A
diverged leader hands its leadership on first; a lone node has nobody to
repair from and says so."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from codes import CODES, other_process
from e2e import NODE, ClusterCase, wait_for
from raftsql_cluster import Cluster, Node, NodeError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))), "tools"))
from fingerprint import fingerprint  # noqa: E402

FAST = ("election_timeout_ms=300 heartbeat_ms=30 exec_timeout_ms=10000 "
        "log_level=info")


def foreign_write(db, sql):
    """Commit @sql to @db with the stock sqlite3 shell, which does not
    load raftsql: nothing can refuse it."""
    subprocess.run(["sqlite3", "-init", "/dev/null", "-batch", "-cmd",
                    ".timeout 10000", db, sql], check=True,
                   stdout=subprocess.DEVNULL, timeout=30)


def log_text(node):
    with open(node.log_path, errors="replace") as f:
        return f.read()


def diverged(node):
    return node.status()["diverged"]


class ForeignWriteTest(ClusterCase):
    """A fresh 3-node cluster per test, with table kv(k PRIMARY KEY, v)."""

    EXTRA = ""

    def setUp(self):
        self.start_kv(FAST + " " + self.EXTRA)

    def assert_equal_replicas(self):
        """Every node applied the leader's last index and holds the same
        content (tools/fingerprint.py, raftsql_* tables left out)."""
        leader = self.cluster.wait_leader()
        index = leader.status()["applied"]
        # A node that just repaired catches up from the new leader: under
        # ThreadSanitizer on a loaded machine that took over 30 s once.
        self.cluster.wait_applied(index, timeout=90)
        prints = [fingerprint(n.db) for n in self.cluster.nodes]
        self.assertEqual(prints[0], prints[1])
        self.assertEqual(prints[0], prints[2])
        return prints[0]

    def restart_with(self, node, env):
        """Restart follower @node with @env added to its environment (the
        test builds' faults); returns the new Node, caught up."""
        node.stop()
        node = Node(NODE, node.id, node.db, node.log_path, env=env)
        self.cluster.nodes[node.id - 1] = node
        node.sql("SELECT raft_start(?)", "id=%d cluster=%s %s" % (
            node.id, self.cluster.members, FAST + " " + self.EXTRA))
        self.cluster.wait_applied(self.leader.status()["applied"], [node])
        return node

    def wait_repaired(self, node, timeout=30):
        wait_for("node %d repaired" % node.id,
                 lambda: node.status()["repairs"] >= 1 and
                 diverged(node) is None, timeout)

    def diverge_leader_and_low(self):
        """Foreign writes on the follower that a tie would pick (the
        lowest slot), then on the leader. Returns the leader, that
        follower, the other one and the term before."""
        old = self.leader
        low = min(self.followers, key=lambda n: n.id)
        healthy = max(self.followers, key=lambda n: n.id)
        term = old.status()["term"]
        foreign_write(low.db, "INSERT INTO kv VALUES('y', 2)")
        foreign_write(old.db, "INSERT INTO kv VALUES('x', 1)")
        return old, low, healthy, term

    def assert_detection_logged_first(self, node):
        """The ERROR line that detects the divergence comes before any
        line of its repair."""
        text = log_text(node)
        detected = text.find("ERROR: diverged replica: a write")
        self.assertGreaterEqual(detected, 0, "no detection line")
        repair = text.find("diverged replica: repair:")
        self.assertGreaterEqual(repair, 0, "no repair line")
        self.assertLess(detected, repair, text[:4000])


class AutoRepairTest(ForeignWriteTest):

    def test_foreign_then_replicated_insert_ends_with_equal_replicas(self):
        """A plain sqlite3 INSERT on a follower, then a
        raft_exec INSERT of the same key, which fails with UNIQUE on that
        follower only: the follower is caught diverged (an ERROR line
        naming it), repairs from the leader's snapshot (a line saying
        so), and all three replicas end equal, holding the raft_exec
        value."""
        f = self.followers[0]
        foreign_write(f.db, "INSERT INTO kv VALUES('k', 1)")
        self.assertEqual(
            self.exec(self.leader, "INSERT INTO kv VALUES('k', 10)"), 1)
        self.wait_repaired(f)
        self.assert_equal_replicas()
        self.assertEqual(f.sql("SELECT v FROM kv WHERE k = 'k'"), [[10]])
        text = log_text(f)
        self.assertRegex(
            text, r"ERROR: diverged replica: a write the node did not make "
            r"was committed to \S*node%d\.db \(PRAGMA data_version "
            r"changed, and the content of kv differs from the running "
            r"checksum\) before index \d+" % f.id)
        self.assertRegex(
            text, r"diverged replica repaired from server %d's snapshot "
            r"at index \d+" % self.leader.id)
        self.assert_detection_logged_first(f)

    def test_checksum_view_follows_the_install(self):
        """After a repair, raft_status()'s checksum is the snapshot's (its
        index the applied one) at once, not the diverged replica's until
        the next apply."""
        f = self.followers[0]
        foreign_write(f.db, "INSERT INTO kv VALUES('z', 50)")
        self.exec(self.leader, "INSERT INTO kv VALUES('b', 2)")
        self.wait_repaired(f)
        st = f.status()
        self.assertEqual(st["checksum"]["index"], st["applied"], st)
        self.assertEqual(st["checksum"]["value"],
                         self.leader.status()["checksum"]["value"])

    def test_repaired_line_names_the_sender(self):
        """The "repaired" line names the server whose snapshot repaired
        the replica, also when ticks run between the state machine's
        install and the driver's (a test-build delay of 300 ms there:
        the line said "server 0" in that window)."""
        f = self.restart_with(self.followers[0],
                              {"RAFTSQL_TEST_INSTALL_DELAY_MS": "300"})
        foreign_write(f.db, "INSERT INTO kv VALUES('z', 50)")
        self.exec(self.leader, "INSERT INTO kv VALUES('b', 2)")
        self.wait_repaired(f)
        wait_for("the repaired line", lambda: "repaired from server" in
                 log_text(f), 10)
        self.assertRegex(log_text(f), "repaired from server %d's snapshot" %
                         self.leader.id)
        self.assert_equal_replicas()

    def test_leader_snapshot_never_carries_an_unseen_foreign_write(self):
        """A foreign commit on the leader that its apply thread has not
        seen yet (a test build without the idle check: it would take up
        to a second) never reaches a follower through a snapshot: the
        leader checks each snapshot it makes against its running
        checksum, and the difference marks it diverged instead. Before,
        a follower repairing from it installed the leader's foreign row."""
        f1, f2 = self.followers
        f1 = self.restart_with(f1, {"RAFTSQL_TEST_NO_IDLE_CHECK": "1"})
        def transferred():
            try:
                self.leader.value("SELECT raft_transfer(?)", f1.id)
            except NodeError:
                pass  # abandoned (it was catching up): again
            return f1.status()["role"] == "leader"
        wait_for("node %d leads" % f1.id, transferred, 20)
        # Its term's first entry applied: an entry applied after the
        # foreign commit would find it (data_version) before a snapshot.
        wait_for("node %d applied its term's entry" % f1.id, lambda: (
            lambda st: st["applied"] == st["last_index"] == st["commit"])(
                f1.status()), 20)
        foreign_write(f1.db, "INSERT INTO kv VALUES('L', 1)")
        foreign_write(f2.db, "INSERT INTO kv VALUES('F', 2)")
        wait_for("node %d repaired" % f2.id,
                 lambda: f2.status()["repairs"] >= 1, 30)
        self.assertEqual(f2.sql("SELECT k FROM kv ORDER BY k"), [["a"]])
        self.assertRegex(log_text(f1), "a snapshot made at index \\d+ "
                         "differs from the running checksum in kv")
        self.wait_repaired(f1)
        self.assert_equal_replicas()
        self.assertEqual(f1.sql("SELECT k FROM kv ORDER BY k"), [["a"]])

    def test_idle_node_notices_within_a_second(self):
        """With no traffic at all, a foreign write is seen within about a
        second (the idle check), and repaired."""
        f = self.followers[1]
        start = time.monotonic()
        foreign_write(f.db, "DELETE FROM kv")
        wait_for("the ERROR line", lambda: "ERROR: diverged replica"
                 in log_text(f), 5)
        # 1 s check period, slack for a loaded machine.
        self.assertLess(time.monotonic() - start, 4.0)
        self.wait_repaired(f)
        self.assertEqual(f.sql("SELECT k, v FROM kv"), [["a", 1]])
        self.assert_equal_replicas()

    def test_foreign_write_on_the_leader(self):
        """A diverged leader hands its leadership on, then repairs as a
        follower from the new leader; nothing of its diverged database
        reaches the others."""
        old = self.leader
        foreign_write(old.db, "UPDATE kv SET v = 99")
        wait_for("a new leader", lambda: (
            self.cluster.wait_leader().id != old.id), 20)
        self.wait_repaired(old)
        self.exec(self.cluster.wait_leader(), "INSERT INTO kv VALUES('b', 2)")
        self.assert_equal_replicas()
        for n in self.cluster.nodes:
            self.assertEqual(n.sql("SELECT k, v FROM kv ORDER BY k"),
                             [["a", 1], ["b", 2]])
        self.assertIn("handing the leadership on", log_text(old))

    def test_leader_and_follower_diverged_at_once(self):
        """Foreign writes on the leader and on the follower that
        raft/transfer.c would pick on a tie (the lowest slot) at once:
        the leadership goes to the healthy node (a diverged server
        declines TimeoutNow; the diverged leader skips the peers that
        asked it for a repair), both repair from it, the replicas end
        equal, and the term does not run away (it bounced ~2 terms/s)."""
        old, low, healthy, term = self.diverge_leader_and_low()
        self.wait_repaired(old)
        self.wait_repaired(low)
        self.assertEqual(self.cluster.wait_leader().id, healthy.id)
        self.exec(healthy, "INSERT INTO kv VALUES('b', 2)")
        self.assert_equal_replicas()
        self.assertEqual(old.sql("SELECT k, v FROM kv ORDER BY k"),
                         [["a", 1], ["b", 2]])
        time.sleep(1.0)
        for n in self.cluster.nodes:
            self.assertLess(n.status()["term"], term + 10)
        self.assert_detection_logged_first(old)
        self.assert_detection_logged_first(low)

    def test_all_diverged_says_so_and_stays(self):
        """With every replica diverged, the leader stays (no loop of
        transfers), says in status that no healthy peer is left, naming
        the others, in one ERROR line, and raft_repair() tells why."""
        for n in self.cluster.nodes:
            foreign_write(n.db, "INSERT INTO kv VALUES('x%d', 1)" % n.id)

        def stuck():
            for n in self.cluster.nodes:
                d = diverged(n)
                if d and d["repair"].startswith("no healthy peer"):
                    return n
            return None
        lead = wait_for("no healthy peer in status", stuck, 20)
        others = sorted(n.id for n in self.cluster.nodes if n.id != lead.id)
        self.assertEqual(
            diverged(lead)["repair"], "no healthy peer to repair from: "
            "servers %d, %d are diverged too (stays diverged, leading)" %
            tuple(others))
        term = lead.status()["term"]
        time.sleep(3.0)
        st = lead.status()
        self.assertEqual(st["term"], term, "transfers went on")
        self.assertEqual(st["role"], "leader")
        self.assertEqual(log_text(lead).count(
            "ERROR: diverged replica: repair: no healthy peer"), 1)
        with self.assertRaises(NodeError) as e:
            lead.value("SELECT raft_repair()")
        self.assertIn("no healthy peer to repair from", str(e.exception))

class OwnTrafficTest(ForeignWriteTest):

    EXTRA = "snapshot_threshold=16 trailing_entries=0"

    def test_own_traffic_never_trips_it(self):
        """The node's own commits, checkpoints (a WAL over 1,000 frames),
        compactions and a snapshot installed on a follower that fell
        behind do not count as foreign."""
        late = self.followers[1]
        had = late.status()["last_index"]
        self.assertEqual(late.stop(), 0)
        for i in range(30):
            self.exec(self.followers[0] if i % 2 else self.leader,
                      "WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT "
                      "x + 1 FROM s WHERE x < 20) INSERT INTO kv SELECT "
                      "'r%d.' || x, zeroblob(4096) FROM s" % i)
        # The leader compacts up to what its file holds (the durable
        # index, after a checkpoint): only then does the late follower
        # need a snapshot.
        wait_for("the leader's log compacted past index %d" % had,
                 lambda: self.leader.status()["first_index"] > had + 1, 30)
        self.cluster.nodes[late.id - 1] = self.cluster.spawn(late.id)
        late = self.cluster.node(late.id)
        self.assert_equal_replicas()
        self.assertGreaterEqual(late.status()["snapshots_installed"], 1)
        time.sleep(1.5)  # an idle check more
        for n in self.cluster.nodes:
            self.assertIsNone(diverged(n))
            self.assertEqual(n.status()["repairs"], 0)
            self.assertNotIn("diverged", log_text(n))


class ManualRepairTest(ForeignWriteTest):

    EXTRA = "repair=manual"

    def test_manual_refuses_until_raft_repair(self):
        """repair=manual: status shows the divergence, raft_exec through
        the node and a read of a replicated table are refused with a
        clear error, raft_status and the internals stay readable, and
        raft_repair() repairs."""
        f = self.followers[0]
        foreign_write(f.db, "INSERT INTO kv VALUES('z', 50)")
        # The repair phase follows at the next tick (10 ms).
        d = wait_for("diverged in status", lambda: (
            diverged(f) or {}).get("repair", "").startswith("waiting")
            and diverged(f), 5)
        self.assertRegex(d["since"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        self.assertIn("PRAGMA data_version changed", d["reason"])
        self.assertEqual(d["repair"], "waiting for raft_repair() "
                         "(repair=manual)")
        with self.assertRaises(NodeError) as e:
            self.exec(f, "INSERT INTO kv VALUES('q', 1)")
        self.assertIn("raft_exec: not applied: diverged replica: a write "
                      "the node did not make", str(e.exception))
        self.assertEqual(e.exception.code, CODES["RAFTSQL_DIVERGED"])
        # The same code for a caller in another process.
        got = other_process(f.db, [["SELECT raft_exec('INSERT INTO kv "
                                    "VALUES(''q'', 1)')"]])[0]
        self.assertIn("not applied: diverged replica", got["error"])
        self.assertEqual(got["code"], CODES["RAFTSQL_DIVERGED"])
        with self.assertRaises(NodeError) as e:
            f.sql("SELECT * FROM kv")
        self.assertRegex(str(e.exception), "prohibited|not authorized")
        self.assertGreater(f.value("SELECT idx FROM raftsql_applied"), 0)
        # The others carry on meanwhile.
        self.exec(self.leader, "INSERT INTO kv VALUES('b', 2)")
        # A barrier fails at once too (it waited exec_timeout_ms for an
        # index the replica would never apply, as RAFTSQL_STALE): well
        # within half of exec_timeout_ms (10 s), a bound that a loaded
        # machine does not reach; the message says why it failed.
        began = time.monotonic()
        with self.assertRaises(NodeError) as e:
            f.value("SELECT raft_barrier()")
        self.assertLess(time.monotonic() - began, 5.0)
        self.assertIn("raft_barrier: diverged replica: a write the node "
                      "did not make", str(e.exception))
        self.assertIn("repair: waiting for raft_repair()", str(e.exception))
        self.assertEqual(e.exception.code, CODES["RAFTSQL_DIVERGED"])
        time.sleep(1.5)
        self.assertIsNotNone(diverged(f), "repair=manual repaired alone")
        msg = f.value("SELECT raft_repair()")
        self.assertRegex(msg, r"^repaired from a snapshot at index \d+$")
        self.assertIsNone(diverged(f))
        self.assertEqual(f.sql("SELECT k, v FROM kv ORDER BY k"),
                         [["a", 1], ["b", 2]])
        self.assertEqual(self.exec(f, "INSERT INTO kv VALUES('c', 3)"), 1)
        self.assert_equal_replicas()
        with self.assertRaises(NodeError) as e:
            f.value("SELECT raft_repair()")
        self.assertIn("raft_repair: not diverged", str(e.exception))

    def test_other_process_reads_refused_until_repaired(self):
        """Another process that loads raftsql on the diverged node's file
        (through its socket) is refused reads of replicated tables too,
        with the reason on stderr; raft_status() there shows the
        divergence, raft_repair() from there repairs, and its reads work
        again."""
        from test_attach import writer
        f = self.followers[0]
        foreign_write(f.db, "INSERT INTO kv VALUES('z', 50)")
        wait_for("diverged in status", lambda: (
            diverged(f) or {}).get("repair", "").startswith("waiting"), 5)
        got = writer(f.db, [["SELECT * FROM kv"],
                            ["SELECT raft_status()"],
                            ["SELECT count(*) FROM raftsql_applied"]])
        self.assertRegex(got[0].get("error", ""), "prohibited|not authorized",
                         got[0])
        self.assertIsNotNone(json.loads(got[1]["rows"][0][0])["diverged"])
        self.assertEqual(got[2], {"rows": [[1]]})
        got = writer(f.db, [["SELECT raft_repair()"],
                            ["SELECT k, v FROM kv ORDER BY k"]])
        self.assertRegex(got[0]["rows"][0][0], "^repaired from", got)
        self.assertEqual(got[1], {"rows": [["a", 1]]})
        self.assertFalse(os.path.exists(f.db + "-raftsql-diverged"))
        self.assert_equal_replicas()

    def test_waiting_caller_told_at_once(self):
        """A write through a follower right after a foreign write there
        is told at once that the replica diverged (outcome unknown when
        it entered the log: it applies on the others), not after
        exec_timeout_ms (10 s)."""
        f = self.followers[0]
        foreign_write(f.db, "INSERT INTO kv VALUES('z', 50)")
        start = time.monotonic()
        with self.assertRaises(NodeError) as e:
            self.exec(f, "INSERT INTO kv VALUES('w', 1)")
        self.assertLess(time.monotonic() - start, 5.0)
        self.assertIn("diverged replica: a write the node did not make",
                      str(e.exception))
        self.assertRegex(f.value("SELECT raft_repair()"), "^repaired from")
        self.assert_equal_replicas()

    def test_restart_keeps_the_divergence(self):
        """A diverged node that restarts is still diverged (the mark is
        recorded in its log directory), refuses writes, and repairs on
        raft_repair(); the mark goes with the repair."""
        f = self.followers[1]
        foreign_write(f.db, "DELETE FROM kv")
        wait_for("diverged in status", lambda: diverged(f), 5)
        self.assertEqual(f.stop(), 0)
        f = self.cluster.spawn(f.id)
        self.cluster.nodes[f.id - 1] = f
        d = diverged(f)
        self.assertIsNotNone(d, "the restart forgot the divergence")
        self.assertIn("PRAGMA data_version changed", d["reason"])
        self.assertIn("recorded before a restart", d["reason"])
        with self.assertRaises(NodeError) as e:
            self.exec(f, "INSERT INTO kv VALUES('q', 1)")
        self.assertIn("diverged replica", str(e.exception))
        self.assertRegex(f.value("SELECT raft_repair()"), "^repaired from")
        self.assertFalse(os.path.exists(f.db + "-raft/diverged"))
        self.assertEqual(f.sql("SELECT k, v FROM kv"), [["a", 1]])
        self.assert_equal_replicas()

    def test_diverged_leader_skips_a_diverged_follower(self):
        """Deterministic order (repair=manual): the follower a tie would
        pick diverges and asks the diverged leader for a repair (which it
        cannot give); the leader, repaired next, hands its leadership
        straight to the healthy node, never to that follower: one term
        more, and both repair from the healthy node."""
        old, low, healthy, term = self.diverge_leader_and_low()
        for n in (low, old):
            wait_for("node %d diverged" % n.id, lambda: (
                diverged(n) or {}).get("repair", "").startswith("waiting"),
                10)
        got = {}
        t = threading.Thread(target=lambda: got.setdefault(
            "msg", low.value("SELECT raft_repair()")))
        t.start()
        try:
            # Its log, not its status: the node serves one call at a time.
            wait_for("node %d asks the leader" % low.id, lambda: (
                "repair: asked server %d for a snapshot" % old.id) in
                log_text(low), 10)
            time.sleep(1.5)  # its requests reach the leader
            self.assertRegex(old.value("SELECT raft_repair()"),
                             "^repaired from")
        finally:
            t.join(30)
        self.assertRegex(got.get("msg", ""), "^repaired from")
        self.assertEqual(self.cluster.wait_leader().id, healthy.id)
        self.assertEqual(healthy.status()["term"], term + 1)
        text = log_text(old)
        self.assertIn("handing the leadership on to server %d" % healthy.id,
                      text)
        self.assertNotIn("handing the leadership on to server %d" % low.id,
                         text)
        self.assert_equal_replicas()

    def test_repair_key_is_checked(self):
        """A bad repair= value names the key."""
        with self.assertRaises(NodeError) as e:
            self.leader.value("SELECT raft_start('id=9 repair=sometimes')")
        self.assertIn("repair: 'sometimes' is not auto or manual",
                      str(e.exception))


class LoneNodeTest(unittest.TestCase):

    def test_single_node_has_no_peer_to_repair_from(self):
        """A one-node cluster stays diverged and says why."""
        workdir = tempfile.mkdtemp(prefix="raftsql-e2e-foreign-")
        cluster = Cluster(NODE, workdir, 1, FAST)
        try:
            n = cluster.wait_leader()
            n.value("SELECT raft_exec('CREATE TABLE kv(k PRIMARY KEY, v)')")
            foreign_write(n.db, "INSERT INTO kv VALUES('k', 1)")
            d = wait_for("diverged", lambda: (
                (diverged(n) or {}).get("repair", "").startswith("no peer")
                and diverged(n)), 10)
            self.assertIn("no peer to repair from", d["repair"])
            with self.assertRaises(NodeError) as e:
                n.value("SELECT raft_repair()")
            self.assertIn("no peer to repair from", str(e.exception))
        finally:
            codes = cluster.stop()
            shutil.rmtree(workdir, ignore_errors=True)
        self.assertEqual(codes, [0])


if __name__ == "__main__":
    unittest.main()
