"""End-to-end: full disks under a node's log or database.

Each node of a fresh 3-node cluster keeps its log or its database on a
small tmpfs of its own, which a test fills; the node must say so, the
cluster must go on, and the node must resume by itself once space is
freed. Needs `mount -t tmpfs` (root); skipped otherwise.
"""

import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
import unittest

from codes import CODES, other_process  # noqa: E402
from e2e import NODE, fill  # noqa: E402
from raftsql_cluster import Node, NodeError, free_ports  # noqa: E402

FAST = "election_timeout_ms=300 heartbeat_ms=30"


class DiskTest(unittest.TestCase):
    """A cluster whose nodes each have a small filesystem of their own:
    call start(on_tmpfs, extra), where on_tmpfs is "log" (dir= there) or
    "db" (the database there, the log beside the test's other files)."""

    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="raftsql-disk-")
        self.mnts, self.nodes = [], []
        self.addCleanup(self.cleanup)

    def cleanup(self):
        codes = [n.stop() if n.proc.poll() is None else n.proc.returncode
                 for n in self.nodes]
        for mnt in self.mnts:
            subprocess.run(["umount", mnt], capture_output=True)
            os.rmdir(mnt)
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.assertEqual(codes, [0] * len(codes))

    def spawn(self, i, on_tmpfs, extra):
        """Start node @i (1-based) of self.members."""
        mnt = self.mnts[i - 1]
        if on_tmpfs == "log":
            db = os.path.join(self.workdir, "n%d.db" % i)
            where = "dir=%s/log" % mnt
        else:
            db = os.path.join(mnt, "n%d.db" % i)
            where = "dir=%s/n%d-log" % (self.workdir, i)
        n = Node(NODE, i, db, os.path.join(self.workdir, "n%d.log" % i))
        n.sql("SELECT raft_start(?)", "id=%d cluster=%s %s %s %s" % (
            i, self.members, FAST, where, extra))
        return n

    def tmpfs(self, size):
        """A tmpfs of @size (mount's size=) on a new directory, unmounted
        at cleanup; skips the test where mounting is not permitted."""
        mnt = tempfile.mkdtemp(prefix="raftsql-tmpfs-")
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + size,
                           "tmpfs", mnt], capture_output=True).returncode:
            os.rmdir(mnt)
            self.skipTest("mount -t tmpfs is not permitted here")
        self.mnts.append(mnt)
        return mnt

    def start(self, on_tmpfs, extra="exec_timeout_ms=10000"):
        """Start the cluster; return its leader."""
        for _ in range(3):
            self.tmpfs("12m")
        self.members = ",".join("%d@127.0.0.1:%d" % (i + 1, p)
                                for i, p in enumerate(free_ports(3)))
        self.extra = extra
        for i in range(1, 4):
            self.nodes.append(self.spawn(i, on_tmpfs, extra))
        return self.wait_leader(self.nodes)

    def wait_leader(self, nodes, timeout=20):
        """The leader all of @nodes agree on."""
        deadline = time.monotonic() + timeout
        while True:
            leaders = {n.value("SELECT raft_leader()") for n in nodes}
            if len(leaders) == 1 and None not in leaders:
                return self.nodes[leaders.pop() - 1]
            self.assertLess(time.monotonic(), deadline, "no leader")
            time.sleep(0.05)

    def exec(self, node, sql, *params):
        return node.value("SELECT raft_exec(?%s)" % (", ?" * len(params)),
                          sql, *params)

    def wait_caught_up(self, node, source, timeout=30):
        """Wait until @node applied what @source applied."""
        target = source.status()["applied"]
        deadline = time.monotonic() + timeout
        while node.status()["applied"] < target:
            self.assertLess(time.monotonic(), deadline,
                            "node %d did not catch up" % node.id)
            time.sleep(0.05)

    def assert_same_rows(self):
        """Once every node applied what the most advanced one did, they
        hold the same rows."""
        ahead = max(self.nodes, key=lambda n: n.status()["applied"])
        for n in self.nodes:
            self.wait_caught_up(n, ahead)
        counts = {n.value("SELECT count(*) FROM t") for n in self.nodes}
        self.assertEqual(len(counts), 1, counts)

    def test_leader_whose_log_disk_fills_steps_down(self):
        """A leader whose log disk fills stops leading within about an
        election timeout, a node that can write takes over, writes go on,
        and once space is freed the old leader catches up by itself
        (before: it stayed leader for good, its followers heard its
        heartbeats and never elected another, and writes on it hung)."""
        old = self.start("log")
        others = [n for n in self.nodes if n is not old]
        old_term = old.status()["term"]
        self.assertEqual(self.exec(others[0], "CREATE TABLE t(k, v)"), 0)
        filler = fill(self.mnts[old.id - 1])
        # Writes through a follower: the old leader cannot persist
        # them, the followers can.
        k = 0
        deadline = time.monotonic() + 20
        while True:
            try:
                self.exec(others[k % 2], "INSERT INTO t VALUES(?, ?)", k,
                          "x" * 50_000)
            except NodeError:
                pass
            k += 1
            st = old.status()
            new = [n for n in others if n.status()["role"] == "leader"]
            if st["role"] != "leader" and new:
                break
            self.assertLess(time.monotonic(), deadline,
                            "the leader whose disk is full never "
                            "stepped down (role %s)" % st["role"])
        self.assertGreater(new[0].status()["term"], old_term)
        # The cluster goes on without it.
        for j in range(5):
            self.assertEqual(self.exec(others[j % 2],
                                       "INSERT INTO t VALUES(?, 'y')",
                                       1000 + j), 1)
        os.remove(filler)
        self.wait_caught_up(old, new[0])
        self.assertEqual(self.exec(old, "INSERT INTO t VALUES(-1, 'z')"), 1)
        self.assert_same_rows()
        with open(old.log_path) as log:
            self.assertIn("steps down", log.read())

    def test_leader_whose_database_disk_fills_resumes(self):
        """A leader whose database disk fills keeps its log and the
        cluster going, shows the condition in raft_status() (applying
        false, apply_error naming the full disk), and applies again by
        itself once space is freed, with no restart (before: "outcome
        unknown" until restarted)."""
        leader = self.start("db")
        others = [n for n in self.nodes if n is not leader]
        self.assertEqual(self.exec(leader, "CREATE TABLE t(k, v)"), 0)
        filler = fill(self.mnts[leader.id - 1])
        # Writes through the followers commit (the leader's log takes
        # them) and apply there; the leader cannot apply them.
        for k in range(40):
            self.assertEqual(self.exec(others[k % 2],
                                       "INSERT INTO t VALUES(?, ?)", k,
                                       "x" * 50_000), 1)
        deadline = time.monotonic() + 20
        while leader.status()["applying"]:
            self.assertLess(time.monotonic(), deadline,
                            "the full database disk never showed")
            time.sleep(0.05)
        st = leader.status()
        self.assertIn("full", st["apply_error"])
        with self.assertRaises(NodeError) as cm:
            self.exec(leader, "INSERT INTO t VALUES(-1, 'z')")
        self.assertIn("outcome unknown", str(cm.exception))
        os.remove(filler)
        self.wait_caught_up(leader, others[0])
        st = leader.status()
        self.assertTrue(st["applying"])
        self.assertIsNone(st["apply_error"])
        # A failed batch resets the connection's cache, which moves PRAGMA
        # data_version as a foreign commit would: not a divergence.
        self.assertIsNone(st["diverged"])
        self.assertEqual(self.exec(leader, "INSERT INTO t VALUES(-2, 'w')"),
                         1)
        self.assert_same_rows()
        # The write that timed out was applied once, like the others.
        self.assertEqual(leader.value("SELECT count(*) FROM t WHERE k = -1"),
                         1)

    def test_database_disk_full_during_snapshot_install(self):
        """A follower that must install a snapshot while its database disk
        is full leaves everything as it was (the leader sends the snapshot
        again), and installs it once space is freed (before: the node
        stopped until restarted)."""
        extra = ("exec_timeout_ms=10000 snapshot_threshold=20 "
                 "trailing_entries=0")
        leader = self.start("db", extra)
        self.assertEqual(self.exec(leader, "CREATE TABLE t(k, v)"), 0)
        f = next(n for n in self.nodes if n is not leader)
        # Stopped with nothing in its log left to apply (else it applies
        # that on the full disk, and the apply's error comes first), and
        # restarted once the leader compacted past the entry it needs
        # next: its last index, not its applied one, says which.
        self.wait_caught_up(f, leader)
        stopped_at = f.status()["last_index"]
        self.assertEqual(f.stop(), 0)
        for k in range(60):
            self.exec(leader, "INSERT INTO t VALUES(?, ?)", k, "x" * 20_000)
        deadline = time.monotonic() + 20
        while leader.status()["first_index"] <= stopped_at + 1:
            self.assertLess(time.monotonic(), deadline, "no compaction")
            time.sleep(0.05)
        # Room to open the database, not to install the snapshot.
        filler = fill(self.mnts[f.id - 1], leave=256 * 1024)
        g = self.spawn(f.id, "db", extra)
        self.nodes[f.id - 1] = g
        deadline = time.monotonic() + 20
        while True:
            with open(g.log_path) as log:
                if "snapshot not installed" in log.read():
                    break
            self.assertLess(time.monotonic(), deadline,
                            "no install was tried on the full disk")
            time.sleep(0.1)
        self.assertTrue(g.proc.poll() is None)
        deadline = time.monotonic() + 10
        while g.status()["install_error"] is None:
            self.assertLess(time.monotonic(), deadline,
                            "raft_status() does not show the failed install")
            time.sleep(0.05)
        self.assertIn("full", g.status()["install_error"])
        os.remove(filler)
        self.wait_caught_up(g, leader)
        # The count moves when the driver takes the install in, a tick
        # after the database has it (and the applied index with it).
        deadline = time.monotonic() + 10
        while g.status()["snapshots_installed"] == 0:
            self.assertLess(time.monotonic(), deadline, "no install counted")
            time.sleep(0.05)
        self.assertIsNone(g.status()["install_error"])
        self.assertEqual(self.exec(g, "INSERT INTO t VALUES(-1, 'z')"), 1)
        self.assert_same_rows()

    def test_backup_to_a_full_disk_leaves_nothing(self):
        """A raft_backup that fails on a full disk (a 32 KiB tmpfs)
        removes the copy and its -journal (the journal was left)."""
        mnt = self.tmpfs("32k")
        (port,) = free_ports(1)
        n = Node(NODE, 1, os.path.join(self.workdir, "n1.db"),
                 os.path.join(self.workdir, "n1.log"))
        self.nodes.append(n)
        n.sql("SELECT raft_start(?)", "id=1 cluster=1@127.0.0.1:%d %s" % (
            port, FAST))
        self.wait_leader([n])
        self.exec(n, "CREATE TABLE t(x)")
        for _ in range(2):
            # 2 MB: the copy's page cache spills, so it has a journal.
            self.exec(n, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL "
                      "SELECT i + 1 FROM c WHERE i < 1000) INSERT INTO t "
                      "SELECT randomblob(1000) FROM c")
        with self.assertRaises(NodeError) as e:
            n.value("SELECT raft_backup(?)", os.path.join(mnt, "b.db"))
        self.assertIn("full", str(e.exception))
        self.assertEqual(os.listdir(mnt), [])

    def test_start_on_a_full_database_disk_heals(self):
        """A node restarted while its database's file system is full
        starts (before: raft_start failed writing <db>-raftsql); other
        processes find no node meanwhile (RAFTSQL_NO_NODE); once space
        frees, the pointer file appears and another process writes
        through it, and the bound marker names the node again (before: a
        beat refreshed the marker the last stop left, which says that no
        node serves the file, and reads stayed refused)."""
        mnt = self.tmpfs("4m")
        (port,) = free_ports(1)
        db = os.path.join(mnt, "n1.db")
        cfg = "id=1 cluster=1@127.0.0.1:%d dir=%s/log %s %s" % (
            port, self.workdir, FAST,
            "exec_timeout_ms=10000 max_staleness_ms=2000 log_level=info")
        n = Node(NODE, 1, db, os.path.join(self.workdir, "n1.log"))
        self.nodes.append(n)
        n.sql("SELECT raft_start(?)", cfg)
        self.wait_leader([n])
        self.exec(n, "CREATE TABLE t(x)")
        # A connection of this process keeps the database's -shm (its
        # pages taken): the restart needs no new page but the pointer
        # file's and the bound marker's.
        holder = sqlite3.connect(db)
        self.addCleanup(holder.close)
        holder.execute("SELECT count(*) FROM t").fetchall()
        self.assertEqual(n.stop(), 0)
        filler = fill(mnt)
        n = Node(NODE, 1, db, os.path.join(self.workdir, "n1b.log"))
        self.nodes = [n]
        n.sql("SELECT raft_start(?)", cfg)
        self.assertFalse(os.path.exists(db + "-raftsql"))
        got = other_process(db, [["SELECT raft_exec('INSERT INTO t "
                                  "VALUES(0)')"]])
        self.assertEqual(got[0].get("code"), CODES["RAFTSQL_NO_NODE"], got)
        os.remove(filler)
        def bound_names_node():
            try:
                with open(db + "-raftsql-bound") as f:
                    return "pid=%d\n" % n.proc.pid in f.read()
            except OSError:
                return False
        # The accept thread retries the pointer file, the beats the
        # marker (every max_staleness_ms / 4).
        deadline = time.monotonic() + 20
        while not (os.path.exists(db + "-raftsql") and bound_names_node()):
            self.assertLess(time.monotonic(), deadline,
                            "no pointer file or bound marker once space "
                            "freed: %s" % os.listdir(mnt))
            time.sleep(0.05)
        # The node's apply failed for want of space too: it resumes by
        # itself, and the write waits for it.
        got = other_process(db, [
            ["SELECT raft_exec('INSERT INTO t VALUES(1)')"]])
        self.assertEqual(got, [{"rows": [[1]]}])
        # Reads there are served again (before, they stayed refused). The
        # node, just started, may still be stale as the write returns
        # (a single node elects itself and commits within a tick: the
        # verdict follows at its next tick), so the read is asked until
        # it answers.
        deadline = time.monotonic() + 20
        while True:
            got = other_process(db, [["SELECT count(*) FROM t"]])
            if got == [{"rows": [[1]]}]:
                break
            self.assertLess(time.monotonic(), deadline,
                            "reads in another process refused: %r" % got)
            time.sleep(0.05)
        with open(n.log_path) as f:
            text = f.read()
        self.assertIn("attach: cannot write the pointer file", text)
        self.assertIn("RAFTSQL_NO_NODE", text)
        self.assertIn("attach: pointer file written", text)


if __name__ == "__main__":
    unittest.main()
