"""What tells a foreign write from no write, and what catches the ones
nothing refused (nu13 findings 1, 3, 5, 6): a moved PRAGMA data_version is
confirmed by the schema cookie and a full checksum scan before the replica
is called diverged (another process's wal_checkpoint(TRUNCATE) writes
nothing); a start after the file changed while no node ran verifies it
against the stored running checksum; a raft_verify() that finds the file
differs marks the replica diverged, so it is repaired; and a lone node's
recovery from a backup."""

import json
import os
import shutil
import sqlite3
import tempfile
import time
import unittest

from e2e import NODE, ClusterCase, wait_for
from raftsql_cluster import Cluster, NodeError
from test_foreign import FAST, diverged, foreign_write, log_text


def truncate_checkpoint(db):
    """PRAGMA wal_checkpoint(TRUNCATE) from a plain connection of this
    process (no raftsql): it copies the WAL into the file and commits
    nothing, yet moves the node's PRAGMA data_version."""
    plain = sqlite3.connect(db, isolation_level=None, timeout=10)
    try:
        plain.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        plain.close()


def flip_row_bytes(test, db, needle, replacement):
    """Overwrite the first bytes of @needle in @db's file with
    @replacement, after a TRUNCATE checkpoint put every row in the main
    file: a change no commit made (bit rot)."""
    truncate_checkpoint(db)
    with open(db, "r+b") as fh:
        at = fh.read().find(needle)
        test.assertGreater(at, 0)
        fh.seek(at)
        fh.write(replacement)


class LoneNodeChecksTest(unittest.TestCase):
    """One node (nobody to repair from)."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-e2e-divchk-")
        self.cluster = Cluster(NODE, self.dir, 1, FAST)
        self.n = self.cluster.wait_leader()
        self.n.value("SELECT raft_exec('CREATE TABLE kv(k PRIMARY KEY, v)')")
        self.n.value("SELECT raft_exec('INSERT INTO kv VALUES(''a'', 1)')")

    def tearDown(self):
        codes = self.cluster.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertEqual(codes, [0])

    def test_truncate_checkpoint_is_no_foreign_write(self):
        """Finding 1: a TRUNCATE checkpoint by another process is seen
        (data_version moved), confirmed to be none (one INFO line), and
        writes go on; a real foreign INSERT afterwards is still caught."""
        for i in range(3):
            self.n.value("SELECT raft_exec('INSERT INTO kv VALUES(?, 2)', ?)",
                         "b%d" % i)
            truncate_checkpoint(self.n.db)
        wait_for("the INFO line", lambda: "no foreign write" in
                 log_text(self.n), 5)
        time.sleep(1.5)  # an idle check more
        self.assertIsNone(diverged(self.n))
        self.assertEqual(
            self.n.value("SELECT raft_exec('INSERT INTO kv VALUES(''c'', 3)')"),
            1)
        self.assertNotIn("diverged", log_text(self.n))
        foreign_write(self.n.db, "INSERT INTO kv VALUES('z', 9)")
        d = wait_for("diverged", lambda: diverged(self.n), 5)
        self.assertIn("content of kv differs from the running checksum",
                      d["reason"])

    def test_foreign_schema_change_caught(self):
        """An empty table created by another process changes no row sum:
        the schema cookie catches it."""
        foreign_write(self.n.db, "CREATE TABLE sneaky(x)")
        d = wait_for("diverged", lambda: diverged(self.n), 5)
        self.assertIn("and the schema", d["reason"])

    def test_restore_from_backup(self):
        """Finding 6, as docs/operations.md says: stop the node, put the
        backup in place, remove <dir>/diverged, start: the start verifies
        the restored file against its own running checksum, finds it
        equal, and the node is not diverged."""
        backup = os.path.join(self.dir, "backup.db")
        src = sqlite3.connect(self.n.db, timeout=10)
        dst = sqlite3.connect(backup)
        src.backup(dst)
        dst.close()
        src.close()
        foreign_write(self.n.db, "DELETE FROM kv")
        wait_for("diverged", lambda: diverged(self.n), 5)
        self.assertEqual(self.n.stop(), 0)
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(self.n.db + suffix):
                os.remove(self.n.db + suffix)
        shutil.copy(backup, self.n.db)
        os.remove(self.n.db + "-raft/diverged")
        self.n = self.cluster.nodes[0] = self.cluster.spawn(1)
        # The start verifies the file in the background (start_verify).
        wait_for("the start's verification",
                 lambda: "verified against the running checksum, equal" in
                 log_text(self.n), 20)
        self.assertEqual(self.n.status()["start_verify"]["state"], "equal")
        self.assertIsNone(diverged(self.n))
        self.assertEqual(self.n.sql("SELECT k, v FROM kv"), [["a", 1]])
        self.assertEqual(
            self.n.value("SELECT raft_exec('INSERT INTO kv VALUES(''c'', 3)')"),
            1)


class ClusterChecksTest(ClusterCase):

    def setUp(self):
        self.start(FAST)
        self.exec(self.leader, "CREATE TABLE kv(k TEXT PRIMARY KEY, v)")
        for i in range(5):
            self.exec(self.leader, "INSERT INTO kv VALUES(?, ?)", "k%d" % i, i)
        self.cluster.wait_applied(self.leader.status()["applied"])

    def assert_equal_replicas(self):
        index = self.cluster.wait_leader().status()["applied"]
        self.cluster.wait_applied(index)
        rows = [n.sql("SELECT k, v FROM kv ORDER BY k")
                for n in self.cluster.nodes]
        self.assertEqual(rows[0], rows[1])
        self.assertEqual(rows[0], rows[2])

    def wait_repaired(self, node, repairs=1, timeout=30):
        wait_for("node %d repaired" % node.id,
                 lambda: node.status()["repairs"] >= repairs and
                 diverged(node) is None, timeout)

    def test_truncate_checkpoints_cost_no_repair(self):
        """Finding 1 on three nodes: TRUNCATE checkpoints on every node,
        between writes: nobody diverges or repairs; a foreign INSERT on a
        follower is still caught and repaired."""
        for i in range(3):
            self.exec(self.leader, "INSERT INTO kv VALUES(?, 1)", "t%d" % i)
            for n in self.cluster.nodes:
                truncate_checkpoint(n.db)
        time.sleep(1.5)
        self.exec(self.followers[0], "INSERT INTO kv VALUES('after', 1)")
        for n in self.cluster.nodes:
            self.assertIsNone(diverged(n))
            self.assertEqual(n.status()["repairs"], 0)
        f = self.followers[1]
        foreign_write(f.db, "INSERT INTO kv VALUES('z', 50)")
        self.wait_repaired(f)
        self.assert_equal_replicas()

    def test_write_while_stopped_caught_at_start(self):
        """Finding 3: an INSERT with the plain sqlite3 shell while a
        follower is stopped makes its start diverged (the reason says
        so), it is repaired, and the replicas end equal."""
        f = self.followers[0]
        self.assertEqual(f.stop(), 0)
        foreign_write(f.db, "INSERT INTO kv VALUES('offline', 1)")
        f = self.cluster.nodes[f.id - 1] = self.cluster.spawn(f.id)
        wait_for("the start's verification",
                 lambda: "the database changed while the node was stopped: "
                 "the content of kv differs" in log_text(f), 20)
        self.wait_repaired(f)
        self.assertEqual(f.sql("SELECT count(*) FROM kv WHERE k = 'offline'"),
                         [[0]])
        self.assert_equal_replicas()

    def test_clean_restart_is_not_diverged(self):
        """Finding 3: a stop and start with nothing in between is not
        diverged, and the start does not scan the file."""
        f = self.followers[1]
        self.assertEqual(f.stop(), 0)
        self.assertTrue(os.path.exists(f.db + "-raft/stopped"))
        f = self.cluster.nodes[f.id - 1] = self.cluster.spawn(f.id)
        self.exec(self.leader, "INSERT INTO kv VALUES('more', 1)")
        self.assert_equal_replicas()
        self.assertIsNone(diverged(f))
        self.assertEqual(f.status()["repairs"], 0)
        self.assertNotIn("verified against the running checksum",
                         log_text(f))
        self.assertIsNone(f.status()["start_verify"])

    def test_bit_rot_found_by_raft_verify_is_repaired(self):
        """Finding 5: a byte of a row changed in the file of a running
        follower (no commit: data_version stays): raft_verify(), called
        from another process, finds it,
        the replica is marked diverged (ERROR line naming raft_verify and
        the table), repaired from the leader, and raft_verify is equal
        again."""
        f = self.followers[0]
        self.exec(self.leader, "INSERT INTO kv VALUES('needle-4711', 1)")
        self.cluster.wait_applied(self.leader.status()["applied"])
        flip_row_bytes(self, f.db, b"needle-4711", b"NEEDLE")
        # From another process that loaded raftsql: the call goes to the
        # node's process, which marks its replica.
        from test_attach import writer
        got = writer(f.db, [["SELECT raft_verify()"]])
        v = json.loads(got[0]["rows"][0][0])
        self.assertFalse(v["equal"], v)
        self.assertRegex(log_text(f), r"ERROR: diverged replica: raft_verify "
                         r"found the database file differs from the running "
                         r"checksum in kv")
        self.wait_repaired(f)
        self.assert_equal_replicas()
        self.assertTrue(json.loads(f.value("SELECT raft_verify()"))["equal"])


if __name__ == "__main__":
    unittest.main()
