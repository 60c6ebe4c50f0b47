"""The replica checksum: every node keeps a checksum of
its replicated content as it applies; nodes compare theirs at equal
indexes (CHECKSUM frames) and report a mismatch at once, in raft_status(),
raft_members and the log, naming the first index that differs;
raft_verify() recomputes it from the database file.

The divergence is made by a test-only fault of the sanitizer build
(RAFTSQL_TEST_APPLY_SKEW=<index>: that node deletes the row the request of
that entry wrote), so these tests need RAFTSQL_TESTHOST to be
build/san/raftsql-testhost or build/tsan/raftsql-testhost (as `make e2e`
and `make tsan` run them)."""

import json
import os
import re
import shutil
import sqlite3
import tempfile
import unittest

from e2e import NODE, ClusterCase, connect, wait_for, without_raftsql
from raftsql_cluster import Node, NodeError
from test_attach import writer
from test_divergence_checks import flip_row_bytes

FAST = "election_timeout_ms=300 heartbeat_ms=30 exec_timeout_ms=10000"


class VerifyPlainTest(unittest.TestCase):
    """raft_verify() on a database that never was a replica."""

    def test_plain_database_is_not_a_replica(self):
        tmp = tempfile.mkdtemp(prefix="raftsql-verify-")
        self.addCleanup(shutil.rmtree, tmp, True)
        db = os.path.join(tmp, "plain.db")
        con = connect(db)
        self.addCleanup(con.close)
        con.execute("CREATE TABLE t(x)")
        with self.assertRaises(sqlite3.OperationalError) as e:
            con.execute("SELECT raft_verify()")
        self.assertEqual(str(e.exception),
                         "raft_verify: not a raftsql replica: %s has no "
                         "raftsql_applied table" % db)


@unittest.skipUnless("san/" in NODE,
                     "needs a sanitizer node, ASan or TSan "
                     "(RAFTSQL_TEST_FAULTS)")
class ChecksumTest(ClusterCase):
    # repair=manual: a write that bypasses the node is also a foreign
    # write (PRAGMA data_version), which would otherwise be repaired from
    # the leader before raft_verify looks.
    def setUp(self):
        self.start(FAST + " repair=manual")
        self.exec(self.leader,
                  "CREATE TABLE kv(k TEXT PRIMARY KEY, v INTEGER)")
        for i in range(10):
            self.exec(self.leader, "INSERT INTO kv VALUES (?, ?)",
                      "k%d" % i, i)
        self.cluster.wait_applied(self.leader.status()["applied"])

    def verify(self, node):
        return json.loads(node.value("SELECT raft_verify()"))

    def restart_skewed(self, node):
        """Restart @node so that it applies the entry 5 after the applied
        index differently (RAFTSQL_TEST_APPLY_SKEW); return the new Node
        once caught up, and that entry's index."""
        applied = self.leader.status()["applied"]
        target = applied + 5
        node.stop()
        config = "id=%d cluster=%s %s repair=manual" % (
            node.id, self.cluster.members, FAST)
        bad = Node(NODE, node.id, node.db, node.log_path,
                   env={"RAFTSQL_TEST_APPLY_SKEW": str(target)})
        self.cluster.nodes[bad.id - 1] = bad
        bad.sql("SELECT raft_start(?)", config)
        self.cluster.wait_applied(applied, [bad])
        return bad, target

    def test_equal_checksums_at_equal_indexes(self):
        """Every node has the same checksum once it applied the same
        entries, raft_verify finds it equal to the file's content, and no
        mismatch is reported."""
        self.exec(self.leader, "UPDATE kv SET v = v * 2 WHERE v > 4")
        self.exec(self.followers[0], "DELETE FROM kv WHERE k = 'k1'")
        # The follower answered once it applied its write; the leader may
        # not have applied it yet: wait for the highest index any node has.
        applied = max(n.status()["applied"] for n in self.cluster.nodes)
        self.cluster.wait_applied(applied)
        sums = {(n.status()["checksum"]["index"],
                 n.status()["checksum"]["value"]) for n in self.cluster.nodes}
        self.assertEqual(len(sums), 1, sums)
        for n in self.cluster.nodes:
            st = n.status()["checksum"]
            self.assertTrue(st["on"], st)
            self.assertIsNone(st["mismatch"])
            v = self.verify(n)
            self.assertTrue(v["equal"], v)
            self.assertEqual(v["stored"], st["value"])
        rows = self.leader.sql("SELECT id, checksum_differs FROM raft_members")
        self.assertEqual([r[1] for r in rows], [None, None, None])

    def test_injected_divergence_caught_at_its_index(self):
        """A follower that applies one entry differently (the last one
        written) is caught by the others and by itself at exactly that
        entry's index: in status, raft_members and an ERROR line; as its
        checksum differs from its leader's it is marked diverged, its own
        raft_verify still finds its file equal to its running checksum,
        and raft_repair() gives it the leader's content."""
        bad, target = self.restart_skewed(self.followers[0])
        for i in range(10, 15):
            self.exec(self.leader, "INSERT INTO kv VALUES (?, ?)",
                      "k%d" % i, i)
        self.cluster.wait_applied(self.leader.status()["applied"])
        with open(bad.log_path, errors="replace") as f:
            m = re.search(r"TEST FAULT RAFTSQL_TEST_APPLY_SKEW: entry (\d+)",
                          f.read())
        self.assertIsNotNone(m, "the fault did not fire")
        skewed = int(m.group(1))
        self.assertEqual(skewed, target)
        # Read from the file without raftsql: the node refuses reads
        # once diverged, and so would this process once it loaded raftsql.
        self.assertEqual(without_raftsql(bad.db, "SELECT count(*) FROM kv"),
                         ["14"])
        self.assertEqual(self.leader.value("SELECT count(*) FROM kv"), 15)

        def found(node):
            mm = node.status()["checksum"]["mismatch"]
            return (mm is not None and mm["index"] == skewed and
                    mm["equal_at"] == skewed - 1) and mm
        for n in self.cluster.nodes:
            try:
                mm = wait_for("node %d finds index %d" % (n.id, skewed),
                              lambda: found(n), timeout=30)
            except TimeoutError as e:
                with open(n.log_path, errors="replace") as f:
                    lines = [ln for ln in f if "checksum" in ln]
                raise AssertionError("%s; its checksum status: %r; its "
                                     "checksum log lines: %s"
                                     % (e, n.status()["checksum"],
                                        "".join(lines[-10:])))
            self.assertNotEqual(mm["ours"], mm["theirs"])
            if n.id != bad.id:
                self.assertEqual(mm["server"], bad.id)
        rows = dict(self.leader.sql(
            "SELECT id, checksum_differs FROM raft_members"))
        self.assertEqual(rows[bad.id], skewed)
        # Another process reads every column, checksum_differs included.
        got = writer(self.leader.db, [
            ["SELECT id, checksum_differs FROM raft_members"]])
        self.assertIn("rows", got[0], got)
        self.assertEqual(dict(got[0]["rows"]), rows)
        with open(self.leader.log_path, errors="replace") as f:
            text = f.read()
        self.assertIn("ERROR: replica checksum differs from server %d: "
                      "first index known to differ %d" % (bad.id, skewed),
                      text)
        # Only the follower that differs from both other voters (so from
        # a majority) is diverged.
        div = wait_for("diverged", lambda: bad.status()["diverged"], 20)
        self.assertIn("the replica checksum differs from those of a "
                      "majority of the voters (server ", div["reason"])
        self.assertIn("from index %d;" % skewed, div["reason"])
        for n in self.cluster.nodes:
            if n.id != bad.id:
                self.assertIsNone(n.status()["diverged"], n.id)
        # Its own file still matches its running checksum (raft_verify
        # works on a diverged replica: it is the one to look at).
        self.assertTrue(self.verify(bad)["equal"])
        self.assertIn("repaired from a snapshot at index",
                      bad.value("SELECT raft_repair()"))
        self.assertEqual(bad.value("SELECT count(*) FROM kv"), 15)
        self.assertTrue(self.verify(bad)["equal"])

    def test_a_leader_whose_content_differs_is_outvoted(self):
        """A leader that applies one entry differently is the one marked
        diverged: its followers agree with each other, so it differs from
        a majority of the voters and they from it alone. A rule "the
        leader's content wins" would mark both followers instead and
        repair them with the wrong content."""
        # Its restart and the transfer: the new term's no-op comes first.
        bad, _ = self.restart_skewed(self.followers[0])

        def transferred():
            # Just restarted, it may not be caught up for the first try.
            try:
                self.cluster.wait_leader().value("SELECT raft_transfer(?)",
                                                 bad.id)
            except NodeError:
                pass
            return self.cluster.wait_leader().id == bad.id
        wait_for("server %d leads" % bad.id, transferred, 20)
        # One row a write until the skewed entry is applied, and no more:
        # the followers' verdict may come at once (a loaded run saw the
        # next write refused, "diverged replica", before a tenth).
        rows = 10
        for i in range(10, 30):
            self.exec(bad, "INSERT INTO kv VALUES (?, ?)", "k%d" % i, i)
            rows += 1
            with open(bad.log_path, errors="replace") as f:
                m = re.search(r"TEST FAULT RAFTSQL_TEST_APPLY_SKEW: "
                              r"entry (\d+)", f.read())
            if m:
                break
        self.assertIsNotNone(m, "the fault did not fire in 20 writes")
        div = wait_for("the leader diverged",
                       lambda: bad.status()["diverged"], 20)
        self.assertIn("the replica checksum differs from those of a "
                      "majority of the voters", div["reason"])
        # The followers found it too, and stay healthy.
        others = [n for n in self.cluster.nodes if n.id != bad.id]
        for n in others:
            wait_for("server %d finds the mismatch" % n.id,
                     lambda: n.status()["checksum"]["mismatch"], 20)
        for n in others:
            self.assertIsNone(n.status()["diverged"], n.id)
            self.assertEqual(n.value("SELECT count(*) FROM kv"), rows)
        # repair=manual: raft_repair() hands the leadership on, then
        # repairs it from the new leader: it holds the followers' content.
        self.assertIn("repaired from a snapshot at index",
                      bad.value("SELECT raft_repair()"))
        self.assertNotEqual(self.cluster.wait_leader().id, bad.id)
        self.assertEqual(bad.value("SELECT count(*) FROM kv"), rows)
        for n in others:
            self.assertIsNone(n.status()["diverged"], n.id)

    def test_verify_finds_bytes_changed_and_writes_bypassing_hooks(self):
        """raft_verify names the table whose rows no longer sum to the
        running checksum: after a byte of a row changed in the file, and
        after a write from a connection without the extension."""
        f = self.followers[0]
        self.exec(self.leader, "CREATE TABLE other(x)")
        self.exec(self.leader, "INSERT INTO other VALUES ('needle-4711')")
        self.cluster.wait_applied(self.leader.status()["applied"])
        self.assertTrue(self.verify(f)["equal"])
        flip_row_bytes(self, f.db, b"needle-4711", b"NEEDLE")
        v = self.verify(f)
        self.assertFalse(v["equal"], v)
        self.assertEqual([d["table"] for d in v["differ"]], ["other"])
        self.assertEqual(v["stored"], f.status()["checksum"]["value"])
        # A process without the extension: no hook sees its write.
        other = self.followers[1]
        without_raftsql(other.db, "UPDATE kv SET v = 99 WHERE k = 'k3'")
        v = self.verify(other)
        self.assertFalse(v["equal"], v)
        self.assertEqual([d["table"] for d in v["differ"]], ["kv"])
        self.assertTrue(self.verify(self.leader)["equal"])


class ChecksumOffTest(ClusterCase):
    def test_checksum_off(self):
        """checksum=off: nothing is kept or sent, status says so, and
        raft_verify says there is nothing to compare with."""
        self.start(FAST + " checksum=off")
        self.exec(self.leader, "CREATE TABLE t(x)")
        st = self.leader.status()["checksum"]
        self.assertFalse(st["on"])
        self.assertEqual(st["why"], "off (checksum=off)")
        self.assertIsNone(st["value"])
        v = json.loads(self.leader.value("SELECT raft_verify()"))
        self.assertFalse(v["available"], v)


if __name__ == "__main__":
    unittest.main()
