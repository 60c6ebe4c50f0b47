"""End-to-end: a plain SQL write's COMMIT across crashes (issue #24,
"Exactly once, across every crash"). A transaction whose process died
during COMMIT is on every replica or on none, the writer's own file
included; one whose COMMIT returned is on every replica once.

The three windows, each at a point injected in the writer's process
(RAFTSQL_TEST_PLAIN_FAULT, ext/surface/plain_fault.h; test builds):
- the quorum committed the entry, the local commit has not happened: the
  writer's node is killed there (on a follower, and on the leader); it
  restarts and its applier replays the entry (the file shows the state
  before it);
- the local commit is done, the applier has not recorded the entry: the
  writer's node stops itself (SIGSTOP) as its connection lets the write
  lock go, and is killed; it restarts and its applier finds the entry in
  the file (the state after it) and only records it;
- the local commit fails after the quorum (SQLITE_FULL on its WAL
  write): COMMIT answers SQLITE_FULL, and the node's applier applies the
  committed entry itself.
A commit by a process without raftsql (the stock sqlite3 shell) that
lands in the second window, between the writer's local commit and its
release (the writer stopped there: its node's own process, or another
process writing through the node's attach socket), is caught when the
applier records the entry: the node repairs, and the foreign row is
gone from every replica.
The rows go into a table without a key, so an entry applied twice would
show as a duplicate row; every test ends with raft_verify() on every
node.
"""

import json
import os
import signal
import threading
import time
import unittest

from e2e import NODE, ClusterCase, wait_for, without_raftsql
from raftsql_cluster import Node, NodeError

EXTRA = "election_timeout_ms=1000 heartbeat_ms=50 exec_timeout_ms=10000"


class PlainCrashTest(ClusterCase):

    def start_with(self, fault, extra=""):
        """A cluster whose nodes all carry the fault (it fires at the
        first plain COMMIT, the test's), and table log(x) with no key;
        @extra: more keys."""
        env = {i: {"RAFTSQL_TEST_PLAIN_FAULT": fault} for i in (1, 2, 3)}
        self.start(EXTRA + " " + extra, env=env)
        self.exec(self.leader, "CREATE TABLE log(x)")
        self.cluster.wait_all_applied()

    def restart(self, node):
        """Restart @node (dead) without the fault."""
        node.proc.wait(timeout=30)
        self.cluster.env = {}
        fresh = self.cluster.spawn(node.id)
        self.cluster.nodes[node.id - 1] = fresh
        return fresh

    def once_everywhere(self, x, victim_id=None):
        """Wait until every node holds row @x exactly once (an entry
        applied twice would hold it twice), then check every replica
        against its checksum at the same applied index."""
        def counts():
            out = []
            for n in self.cluster.nodes:
                try:
                    out.append(n.value("SELECT count(*) FROM log WHERE x = ?",
                                       x))
                except NodeError as e:
                    out.append(str(e))
            return out
        try:
            wait_for("row %s once on every node" % x,
                     lambda: counts() == [1, 1, 1], timeout=60)
        except TimeoutError:
            self.fail("row %s: counts %r" % (x, counts()))
        # A write through the leader commits the current term's entries.
        self.exec(self.cluster.wait_leader(30), "SELECT 1")
        self.cluster.wait_all_applied(timeout=60)
        for n in self.cluster.nodes:
            n.value("SELECT raft_verify()")
            # Decided from the file, not by repairing the replica.
            st = n.status()
            if (st["repairs"], st["diverged"]) != (0, None):
                with open(n.log_path, errors="replace") as f:
                    tail = f.read()[-3000:]
                self.fail("node %d repaired or diverged (the victim: node "
                          "%s): status %r; its log ends:\n%s" % (
                              n.id, victim_id, st, tail))
        self.assertEqual(counts(), [1, 1, 1])

    def write_until_stopped(self, writer, x):
        """@writer (a process whose fault is stop-after-local-commit)
        inserts row @x in a thread; returns once its process stopped
        itself after its local commit: the thread and the list of the
        errors it met."""
        errors = []

        def write():
            try:
                writer.sql("INSERT INTO log VALUES(?)", x)
            except NodeError as e:
                errors.append(e)

        t = threading.Thread(target=write)
        t.start()
        pid = writer.proc.pid

        def stopped():
            with open("/proc/%d/stat" % pid) as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "T"
        wait_for("process %d stopped after its local commit" % pid, stopped,
                 timeout=60)
        return t, errors

    def killed_after_quorum(self, victim):
        with self.assertRaises(NodeError) as cm:
            victim.sql("INSERT INTO log VALUES('w1')")
        self.assertIn("exited", str(cm.exception))
        self.restart(victim)
        self.once_everywhere("w1", victim.id)

    def test_killed_after_quorum_on_a_follower(self):
        """Window 1 on a follower: the entry committed, the writer's node
        died before its local commit; its restart replays the entry."""
        self.start_with("kill-after-quorum")
        self.killed_after_quorum(self.followers[0])

    def test_killed_after_quorum_on_the_leader(self):
        """Window 1 on the leader: a new leader is elected, the entry is
        applied everywhere, the old leader replays it at its restart."""
        self.start_with("kill-after-quorum")
        self.killed_after_quorum(self.leader)

    def test_stopped_after_local_commit(self):
        """Window 2: the writer's node stops after its local commit,
        before its applier records the entry, and is killed; at its
        restart the row is there once, on every node."""
        self.start_with("stop-after-local-commit")
        victim = self.followers[0]
        t, errors = self.write_until_stopped(victim, "w2")
        os.kill(victim.proc.pid, signal.SIGKILL)
        t.join(timeout=60)
        self.assertEqual(len(errors), 1, errors)
        self.restart(victim)
        self.once_everywhere("w2", victim.id)

    def foreign_while_stopped(self, victim, writer, x):
        """@writer (a process writing plain SQL to @victim's file, with the
        fault stop-after-local-commit) inserts row @x and stops itself
        after its local commit, before its release; a commit by the
        stock sqlite3 shell lands then; @writer goes on. @victim catches
        that commit, repairs, and every replica ends equal: row @x once,
        the shell's row nowhere."""
        t, errors = self.write_until_stopped(writer, x)
        without_raftsql(victim.db, "INSERT INTO log VALUES('foreign')")
        os.kill(writer.proc.pid, signal.SIGCONT)
        t.join(timeout=60)
        self.assertFalse(t.is_alive())
        self.assertEqual(errors, [])
        wait_for("node %d caught the foreign commit and repaired" %
                 victim.id,
                 lambda: victim.status()["repairs"] >= 1 and
                 victim.status()["diverged"] is None, timeout=60)
        with open(victim.log_path, errors="replace") as f:
            self.assertIn("diverged replica: a write the node did not make",
                          f.read())
        self.exec(self.cluster.wait_leader(30), "SELECT 1")
        self.cluster.wait_all_applied(timeout=90)
        for n in self.cluster.nodes:
            self.assertEqual(n.sql("SELECT x, count(*) FROM log GROUP BY x "
                                   "ORDER BY x"), [[x, 1]], "node %d" % n.id)
            n.value("SELECT raft_verify()")
            if n is not victim:
                self.assertEqual(n.status()["repairs"], 0, "node %d" % n.id)

    def test_foreign_commit_while_writer_stopped(self):
        """Window 2 with a foreign commit in it: the writer (a follower's
        own process) stops after its local commit; the shell commits a
        row to its file; the writer goes on. Its applier sees that the
        file moved around the writer's commit, compares the file with
        the running checksum once it counted the writer's entry, and
        repairs."""
        self.start_with("stop-after-local-commit")
        victim = self.followers[0]
        self.foreign_while_stopped(victim, victim, "w6")

    def foreign_before_lock(self, victim, writer):
        """A commit of the stock shell to @victim's file, then at once a
        plain write by @writer (a process writing to that file) that
        reads the row the shell changed: the writer read a state no other
        replica has, so its COMMIT is refused, nothing is sent, and only
        @victim diverges and is repaired; the write then goes."""
        self.exec(self.leader, "INSERT INTO log VALUES('base')")
        self.cluster.wait_all_applied()
        without_raftsql(victim.db,
                        "UPDATE log SET x = 'foreign' WHERE x = 'base'")
        with self.assertRaises(NodeError) as cm:
            writer.sql("UPDATE log SET x = x || '+plain'")
        self.assertEqual(cm.exception.code, 531, cm.exception)
        why = writer.value("SELECT raft_last_error()")
        self.assertIn("another connection committed to this node's file "
                      "before the transaction took its write lock", why)
        for n in self.cluster.nodes:
            if n is not victim:
                st = n.status()
                self.assertEqual((st["diverged"], st["repairs"]), (None, 0),
                                 "node %d" % n.id)
        # The next batch on the victim meets the foreign commit (the idle
        # check is off here) and repairs it.
        self.exec(self.leader, "INSERT INTO log VALUES('next')")
        wait_for("node %d caught the foreign commit and repaired" %
                 victim.id,
                 lambda: victim.status()["repairs"] >= 1 and
                 victim.status()["diverged"] is None, timeout=60)
        try:
            writer.sql("UPDATE log SET x = x || '+plain' WHERE x = 'base'")
        except NodeError as e:
            self.fail("the write after the repair: %s: %s" % (
                e, writer.value("SELECT raft_last_error()")))
        self.exec(self.cluster.wait_leader(30), "SELECT 1")
        self.cluster.wait_all_applied(timeout=90)
        for n in self.cluster.nodes:
            self.assertEqual(n.sql("SELECT x FROM log ORDER BY x"),
                             [["base+plain"], ["next"]], "node %d" % n.id)
            n.value("SELECT raft_verify()")
            if n is not victim:
                self.assertEqual(n.status()["repairs"], 0, "node %d" % n.id)

    def test_foreign_commit_before_the_lock(self):
        """A foreign commit just before a plain write on the same file,
        by the follower's own process: before, the write's changeset
        carried the foreign row as its old image, every other replica
        refused the entry, and every node ended diverged with no healthy
        peer to repair from."""
        env = {i: {"RAFTSQL_TEST_NO_IDLE_CHECK": "1"} for i in (1, 2, 3)}
        self.start(EXTRA, env=env)
        self.exec(self.leader, "CREATE TABLE log(x)")
        victim = self.followers[0]
        self.foreign_before_lock(victim, victim)

    def test_foreign_commit_before_the_lock_attach(self):
        """The same with the writer in another process (the attach
        socket: the reading travels with LEASE_COMMIT)."""
        env = {i: {"RAFTSQL_TEST_NO_IDLE_CHECK": "1"} for i in (1, 2, 3)}
        self.start(EXTRA, env=env)
        self.exec(self.leader, "CREATE TABLE log(x)")
        victim = self.followers[0]
        writer = Node(NODE, 9, victim.db, victim.log_path + ".writer")
        try:
            self.foreign_before_lock(victim, writer)
        finally:
            writer.stop()

    def test_foreign_commit_while_attach_writer_stopped(self):
        """The same through the attach socket: the writer is another
        process (a raftsql-testhost running no node) writing to a
        follower's file; its release carries what it saw of the file."""
        self.start_with("none")
        victim = self.followers[0]
        writer = Node(NODE, 9, victim.db, victim.log_path + ".writer",
                      env={"RAFTSQL_TEST_PLAIN_FAULT":
                           "stop-after-local-commit"})
        try:
            self.foreign_while_stopped(victim, writer, "w7")
        finally:
            if writer.proc.poll() is None:
                os.kill(writer.proc.pid, signal.SIGCONT)
            writer.stop()

    def in_window(self, victim, x, sql, *params):
        """Run @sql on node @victim while a writer (another process
        writing through @victim's node) is stopped after its local commit
        of row @x, before its release: the call waits until the node
        recorded the writer's entry (the node logs that it waits), the
        writer goes on, and the call's answer is returned."""
        writer = Node(NODE, 9, victim.db, victim.log_path + ".writer",
                      env={"RAFTSQL_TEST_PLAIN_FAULT":
                           "stop-after-local-commit"})
        answers = []
        with open(victim.log_path, errors="replace") as f:
            seen = f.read().count("copy of the database: waits until")

        def call():
            try:
                answers.append(victim.value(sql, *params))
            except NodeError as e:
                answers.append(e)
        try:
            t, errors = self.write_until_stopped(writer, x)
            c = threading.Thread(target=call)
            c.start()

            def waiting_or_done():
                with open(victim.log_path, errors="replace") as f:
                    return f.read().count("copy of the database: waits "
                                          "until") > seen or not c.is_alive()
            wait_for("the call waits for the writer's entry, or ends",
                     waiting_or_done, timeout=30)
            os.kill(writer.proc.pid, signal.SIGCONT)
            t.join(timeout=60)
            c.join(timeout=60)
            self.assertEqual(errors, [])
            self.assertEqual(len(answers), 1)
            if isinstance(answers[0], NodeError):
                with open(victim.log_path, errors="replace") as f:
                    tail = f.read()[-3000:]
                self.fail("%s: %s; node %d's log ends:\n%s" % (
                    sql, answers[0], victim.id, tail))
            st = victim.status()
            self.assertEqual((st["diverged"], st["repairs"]), (None, 0),
                             answers)
            self.once_everywhere(x)
        finally:
            if writer.proc.poll() is None:
                os.kill(writer.proc.pid, signal.SIGCONT)
            # Not writer.stop(): its raft_stop() would go through the
            # socket to the victim's node.
            writer.proc.kill()
            writer.proc.wait(timeout=30)
        return answers[0]

    def test_copy_while_attach_writer_stopped(self):
        """A copy of the file made in window 2 (the writer, another
        process writing through the follower's node, stopped after its
        local commit, before its release): raft_backup() on that node
        waits until the node recorded the writer's entry, then copies;
        raft_verify() waits alike, then finds the file equal. Before,
        the copy (the scan) held the writer's row under the index before
        its entry, differed from the running checksum, and the node took
        that for a foreign write: raft_backup failed, raft_verify said
        "equal": false, and the replica was marked diverged and repaired
        (a snapshot made so did the same: a make jepsen episode, seed
        450806)."""
        self.start_with("none", "log_level=info")
        victim = self.followers[0]
        backup = os.path.join(self.dir, "copy.db")
        self.in_window(victim, "w9", "SELECT raft_backup(?)", backup)
        self.assertIn("w9", str(without_raftsql(backup, "SELECT x FROM log")))
        v = json.loads(self.in_window(victim, "w10", "SELECT raft_verify()"))
        self.assertTrue(v["equal"], v)

    def test_local_commit_fails_after_quorum(self):
        """Window 3: the local commit fails with SQLITE_FULL after the
        quorum committed the entry; COMMIT says so, and the node's own
        applier applies the entry: the row is there once, everywhere, and
        the next plain write goes."""
        self.start_with("full-at-local-commit")
        victim = self.followers[0]
        with self.assertRaises(NodeError) as cm:
            victim.sql("INSERT INTO log VALUES('w3')")
        self.assertEqual(cm.exception.code & 0xff, 13, cm.exception)
        self.once_everywhere("w3")
        victim.sql("INSERT INTO log VALUES('w4')")
        self.once_everywhere("w4")

    def test_holder_node_killed_frees_the_lease(self):
        """A follower's connection holds the write lease (BEGIN IMMEDIATE
        open) when its node is killed: the leader ends that lease as soon
        as the holder's server is no longer connected, and the leader's
        next plain write goes within seconds, not lease_timeout_ms
        (30 s) later. The killed transaction is nowhere."""
        self.start_with("none")
        victim = self.followers[0]
        victim.sql("BEGIN IMMEDIATE")
        victim.sql("INSERT INTO log VALUES('lost')")
        wait_for("the lease held by node %d" % victim.id,
                 lambda: (self.leader.status()["lease"] or {}).get(
                     "server") == victim.id)
        victim.proc.kill()
        t0 = time.monotonic()
        self.leader.sql("INSERT INTO log VALUES('w5')")
        self.assertLess(time.monotonic() - t0, 10.0)
        self.restart(victim)
        self.once_everywhere("w5")
        for n in self.cluster.nodes:
            self.assertEqual(n.value("SELECT count(*) FROM log WHERE x = "
                                     "'lost'"), 0)


if __name__ == "__main__":
    unittest.main()
