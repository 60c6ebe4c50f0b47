"""End-to-end: faults that used to stop a node or the whole cluster for
good, each with the test that reproduced it.

Real raftsql-testhost processes on 127.0.0.1, a fresh cluster per test.
"""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import socket
import sqlite3
import struct
import threading
import time
import unittest

from codes import CODES  # noqa: E402
from e2e import NODE, ClusterCase, fill  # noqa: E402
from raftsql_cluster import Node, NodeError, free_ports  # noqa: E402

FAST = "election_timeout_ms=300 heartbeat_ms=30"

class WedgeTest(ClusterCase):

    def start(self, extra, env=None):
        super().start(FAST + " " + extra, prefix="raftsql-wedge-", env=env)

    def test_vacuum_on_a_replica_refused(self):
        """A plain VACUUM on a node's own connection is refused: it
        renumbered the rowids of a table without an INTEGER PRIMARY KEY on
        that node only, and a later DELETE by rowid then removed different
        rows on different nodes. VACUUM INTO still makes a copy."""
        self.start("exec_timeout_ms=10000")
        f1 = self.followers[0]
        self.exec(f1, "CREATE TABLE t(v)")
        for v in range(1, 7):
            self.exec(f1, "INSERT INTO t VALUES(?)", v)
        self.exec(f1, "DELETE FROM t WHERE v IN (2, 3)")
        with self.assertRaises(NodeError) as cm:
            f1.sql("VACUUM")
        self.assertIn("not authorized", str(cm.exception))
        copy = os.path.join(self.dir, "copy.db")
        f1.sql("VACUUM INTO ?", copy)
        self.assertTrue(os.path.exists(copy))
        self.exec(self.leader, "DELETE FROM t WHERE rowid = 4")
        self.cluster.wait_applied(self.leader.status()["applied"])
        rows = [n.sql("SELECT rowid, v FROM t ORDER BY rowid")
                for n in self.cluster.nodes]
        self.assertEqual(rows[0], [[1, 1], [5, 5], [6, 6]])
        self.assertEqual(rows[0], rows[1])
        self.assertEqual(rows[0], rows[2])
        with open(f1.log_path) as f:
            self.assertIn("VACUUM refused", f.read())

    def test_apply_resumes_after_a_foreign_lock(self):
        """Another process holds BEGIN IMMEDIATE on a follower's database
        longer than the apply connection's 5 s busy timeout: the follower
        shows the condition in raft_status() and, once the lock is
        released, applies everything by itself (before, it stopped
        applying until restarted and stayed stale)."""
        self.start("exec_timeout_ms=10000")
        f1 = self.followers[0]
        self.exec(self.leader, "CREATE TABLE t(x)")
        self.cluster.wait_applied(self.leader.status()["applied"])
        holder = sqlite3.connect(f1.db, isolation_level=None, timeout=1)
        holder.execute("BEGIN IMMEDIATE")
        try:
            for v in range(5):
                self.exec(self.leader, "INSERT INTO t VALUES(?)", v)
            deadline = time.monotonic() + 20
            while True:
                st = f1.status()
                if not st["applying"]:
                    break
                self.assertLess(time.monotonic(), deadline,
                                "the lock never made applying fail")
                time.sleep(0.1)
            self.assertIn("database is locked", st["apply_error"])
            self.assertIn("retrying", st["apply_error"])
        finally:
            holder.execute("COMMIT")
            holder.close()
        self.cluster.wait_applied(self.leader.status()["applied"], [f1],
                                  timeout=20)
        st = f1.status()
        self.assertTrue(st["applying"])
        self.assertIsNone(st["apply_error"])
        self.assertEqual(f1.value("SELECT count(*) FROM t"), 5)
        with open(f1.log_path) as f:
            self.assertIn("applying resumed", f.read())

    def test_status_numbers_are_rounded(self):
        """Means in raft_status() print as people read them (0.92, not
        0.92000000000000004)."""
        self.start("exec_timeout_ms=10000")
        self.exec(self.leader, "CREATE TABLE t(x)")
        for v in range(7):
            self.exec(self.leader, "INSERT INTO t VALUES(?)", v)
        text = self.leader.value("SELECT raft_status()")
        self.assertIsNone(re.search(r"[0-9]\.[0-9]{7,}", text), text)

    def test_requests_that_cannot_succeed_never_enter_the_log(self):
        """A syntax error, a wrong number of values and transaction control
        are refused before replication ("not applied", no log index
        taken), on a follower and on the leader (before, each took an
        index and failed on every node). Errors that may depend on the
        schema stay results of their entry."""
        self.start("exec_timeout_ms=10000")
        f1 = self.followers[0]
        self.exec(f1, "CREATE TABLE t(x)")
        last = self.leader.status()["last_index"]
        cases = [
            (("INSRT INTO t VALUES(1)",), 'near "INSRT": syntax error'),
            (("INSERT INTO t VALUES(1); INSERT INTO t VALUES(",),
             "incomplete input"),
            (("INSERT INTO t VALUES(?)", 1, 2),
             "2 values given but the SQL has only 1 parameter"),
            (("INSERT INTO t VALUES(?); INSERT INTO t VALUES(?2)", 1),
             "missing value for parameter 2 (?2)"),
            (("BEGIN",), "BEGIN cannot be used in raft_exec"),
            (("INSERT INTO t VALUES(1); COMMIT",),
             "COMMIT cannot be used in raft_exec"),
        ]
        for node in (f1, self.leader):
            for args, want in cases:
                with self.assertRaises(NodeError) as cm:
                    self.exec(node, *args)
                self.assertIn("raft_exec: not applied: " + want,
                              str(cm.exception))
        self.assertEqual(self.leader.status()["last_index"], last)
        # Schema-dependent: the table is created by the request itself.
        self.assertEqual(self.exec(f1, "CREATE TABLE u(a); "
                                       "INSERT INTO u VALUES(?)", 5), 1)
        with self.assertRaises(NodeError) as cm:
            self.exec(f1, "INSERT INTO nowhere VALUES(1)")
        self.assertIn("no such table: nowhere", str(cm.exception))
        self.assertNotIn("not applied", str(cm.exception))
        self.assertEqual(self.leader.status()["last_index"], last + 2)
        # The same good request again (checked once per connection).
        for v in range(3):
            self.assertEqual(self.exec(f1, "INSERT INTO t VALUES(?)", v), 1)

    def test_surplus_values_over_several_statements_explain_binding(self):
        """Too many values for SQL of several statements: the message says
        that each statement binds from the first value on and points to
        ?NNN, whether the caller's check (before the log) or the apply
        connection (the SQL creates its own table) finds it; the ?NNN form
        then binds as the caller meant."""
        self.start("exec_timeout_ms=10000")
        f1 = self.followers[0]
        self.exec(f1, "CREATE TABLE p(a, b)")
        hint = ("3 values given but no statement of the SQL has more than "
                "2 parameters: each statement binds the values from the "
                "first one on; write ?NNN (?1 to ?3)")
        for sql in ("INSERT INTO p VALUES('p1',?); INSERT INTO p VALUES(?,?)",
                    "CREATE TABLE q(a, b); INSERT INTO q VALUES('p1',?); "
                    "INSERT INTO q VALUES(?,?)"):
            with self.assertRaises(NodeError) as cm:
                self.exec(f1, sql, "A", "p2", "B")
            self.assertIn(hint, str(cm.exception))
        self.assertEqual(self.exec(f1, "INSERT INTO p VALUES('p1',?1); "
                                       "INSERT INTO p VALUES(?2,?3)",
                                   "A", "p2", "B"), 2)
        self.assertEqual(f1.value("SELECT group_concat(a || b, ' ') FROM p"),
                         "p1A p2B")

    def test_stalled_connections_are_closed(self):
        """Connections that stall are not held: a handshake never sent or
        cut short is closed within 5 s, a frame that announces 60 MB and
        sends 1 KiB within 10 s, and past 64 connections in their
        handshake new ones are closed at once; the node keeps serving
        (before, 300 such connections stayed open)."""
        self.start("exec_timeout_ms=10000")
        port = int(self.cluster.members.split(",")[self.leader.id - 1]
                   .rsplit(":", 1)[1])
        peer = self.followers[0].id
        partial = socket.create_connection(("127.0.0.1", port))
        partial.sendall(b"RFTSQL\x04")  # 7 of the 35+ handshake bytes
        stalled = socket.create_connection(("127.0.0.1", port))
        # Handshake version 4, wire versions 1 to 1, no cluster id, the
        # id, no build id, no listen address.
        stalled.sendall(b"RFTSQL\x04\x01\x01" + bytes(16) +
                        struct.pack("<Q", peer) + b"\x00\x00" +
                        struct.pack("<I", 60_000_000) + b"x" * 1024)
        time.sleep(0.2)
        idle = [socket.create_connection(("127.0.0.1", port))
                for _ in range(300)]

        def closed(sock, wait):
            sock.settimeout(wait)
            try:
                while sock.recv(4096):
                    pass  # the answer to a handshake
                return True
            except socket.timeout:
                return False
            except ConnectionResetError:
                return True

        try:
            time.sleep(1.0)
            refused = sum(closed(s, 0.01) for s in idle)
            self.assertGreaterEqual(refused, 300 - 63)
            self.assertEqual(self.exec(self.leader, "CREATE TABLE t(x)"), 0)
            self.assertTrue(closed(partial, 8.0), "partial handshake held")
            deadline = time.monotonic() + 15
            open_ = list(idle)
            while open_ and time.monotonic() < deadline:
                open_ = [s for s in open_ if not closed(s, 0.01)]
                time.sleep(0.1)
            self.assertEqual(len(open_), 0, "idle connections held")
            self.assertTrue(closed(stalled, 12.0), "stalled frame held")
            self.assertEqual(self.exec(self.leader,
                                       "INSERT INTO t VALUES(1)"), 1)
        finally:
            for s in idle + [partial, stalled]:
                s.close()
        with open(self.leader.log_path) as f:
            log = f.read()
        self.assertIn("connections with no handshake within 5000 ms", log)
        self.assertIn("frame stalled for 10000 ms (1024 of 60000000", log)
        self.assertIn("are still in their handshake", log)
        self.assertLess(log.count("\n"), 40, "one line per event burst")

    def test_late_node_is_dialled_as_soon_as_it_connects(self):
        """A node that starts late is dialled back by the leader as soon as
        its own connection arrives, not when the leader's reconnect
        backoff (up to 2 s) next fires; its status says it is catching up
        until it has applied what the leader committed."""
        self.start("exec_timeout_ms=10000 log_level=debug")
        late = self.followers[0]
        late.kill()
        self.exec(self.leader, "CREATE TABLE kv(k PRIMARY KEY, v)")
        self.exec(self.leader, "INSERT INTO kv VALUES('a', 1)")
        time.sleep(4)  # the leader's backoff to it reaches its 2 s cap
        late = self.cluster.spawn(late.id)
        self.cluster.nodes[late.id - 1] = late
        t0 = time.monotonic()
        target = self.leader.status()["commit"]
        self.cluster.wait_applied(target, [late], timeout=10)
        took = time.monotonic() - t0
        st = late.status()
        self.assertFalse(st["catching_up"])
        self.assertEqual(st["lag"], 0)
        self.assertIsNotNone(st["leader_contact_ms"])
        self.assertEqual(late.value("SELECT v FROM kv WHERE k = 'a'"), 1)
        with open(self.leader.log_path) as f:
            self.assertIn("connected to us: dialling it now", f.read())
        self.assertLess(took, 2.0)

    def test_logs_say_what_happened(self):
        """At log_level=info every node logs its elections and leader
        changes (before, nothing at any level), and a second process
        running with a member's id is named by the nodes it connects to
        (before, it sat at term 0 without a line anywhere)."""
        self.start("exec_timeout_ms=10000 log_level=info")
        lead = self.leader
        with open(lead.log_path) as f:
            self.assertIn("became leader of term", f.read())
        for n in self.followers:
            with open(n.log_path) as f:
                self.assertIn("follows leader %d in term" % lead.id,
                              f.read())
        twin_id = self.followers[0].id
        port = free_ports(1)[0]
        members = ",".join(
            m if not m.startswith("%d@" % twin_id)
            else "%d@127.0.0.1:%d" % (twin_id, port)
            for m in self.cluster.members.split(","))
        twin = Node(NODE, twin_id, os.path.join(self.dir, "twin.db"),
                    os.path.join(self.dir, "twin.log"))
        try:
            twin.sql("SELECT raft_start(?)", "id=%d cluster=%s %s" % (
                twin_id, members, FAST + " log_level=info"))
            deadline = time.monotonic() + 10
            while True:
                with open(lead.log_path) as f:
                    if "a second connection claims this server id" in \
                            f.read():
                        break
                self.assertLess(time.monotonic(), deadline,
                                "nobody named the twin")
                time.sleep(0.1)
        finally:
            self.assertEqual(twin.stop(), 0)

    def test_large_requests_do_not_fill_the_log(self):
        """Requests of 1.5 MB in a log of 8 MB: compaction runs by bytes as
        well as by count, so writes go on (before, every node's log was
        full after 13 writes, for good, with no leader)."""
        self.start("exec_timeout_ms=20000 log_max_mb=8")
        self.exec(self.leader, "CREATE TABLE big(k INTEGER PRIMARY KEY, v)")
        blob = "x" * (1536 * 1024)
        for k in range(30):
            node = self.cluster.nodes[k % 3]
            try:
                self.assertEqual(self.exec(
                    node, "INSERT INTO big VALUES(?, ?)", k, blob), 1)
            except NodeError as e:
                self.fail("write %d: %s; status %s" % (k, e, node.status()))
        # The last write returned once applied on its node, maybe ahead of
        # the leader's apply thread.
        self.cluster.wait_applied(max(n.status()["applied"]
                                      for n in self.cluster.nodes))
        for n in self.cluster.nodes:
            st = n.status()
            self.assertFalse(st["log_full"])
            self.assertGreater(st["compactions"], 0)
            self.assertEqual(n.value("SELECT count(*) FROM big"), 30)

    def test_full_disk_heals_by_itself(self):
        """A follower whose log sits on a filesystem that fills reports
        "disk full" (not an I/O error) in raft_status(), the others go on,
        and once space is freed it takes writes again and catches up
        without a restart (before: "Input/output error", writes hung, and
        only a restart of every node helped)."""
        mnt = tempfile.mkdtemp(prefix="raftsql-tmpfs-")
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs",
                           mnt], capture_output=True).returncode != 0:
            os.rmdir(mnt)
            self.skipTest("mount -t tmpfs is not permitted here")
        try:
            self.start("exec_timeout_ms=10000")
            f = self.followers[0]
            f.kill()
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(f.db + suffix):
                    os.remove(f.db + suffix)
            shutil.rmtree(f.db + "-raft", ignore_errors=True)
            f = Node(NODE, f.id, f.db, f.log_path + ".2")
            f.sql("SELECT raft_start(?)", "id=%d cluster=%s %s dir=%s/log" % (
                f.id, self.cluster.members, FAST + " exec_timeout_ms=10000",
                mnt))
            self.cluster.nodes[f.id - 1] = f
            self.exec(self.leader, "CREATE TABLE t(k INTEGER PRIMARY KEY, v)")
            self.cluster.wait_applied(self.leader.status()["applied"])
            # Fill the filesystem but a little.
            filler = fill(mnt)
            for k in range(20):
                self.exec(self.leader, "INSERT INTO t VALUES(?, ?)", k,
                          "x" * 100_000)
            deadline = time.monotonic() + 20
            while True:
                st = f.status()
                if st["log_full"]:
                    break
                self.assertLess(time.monotonic(), deadline,
                                "the full disk never showed")
                time.sleep(0.1)
            self.assertIn("disk full", st["log_full_reason"])
            # Writes are refused once it has been full for an election
            # timeout (300 ms); until then they queue.
            time.sleep(1)
            with self.assertRaises(NodeError) as cm:
                self.exec(f, "INSERT INTO t VALUES(100, 'x')")
            self.assertIn("not applied: disk full", str(cm.exception))
            self.assertEqual(cm.exception.code, CODES["RAFTSQL_FULL"])
            os.remove(filler)
            self.cluster.wait_applied(self.leader.status()["applied"], [f],
                                      timeout=30)
            self.assertEqual(f.value("SELECT count(*) FROM t"), 20)
            self.assertFalse(f.status()["log_full"])
            self.assertEqual(self.exec(f, "INSERT INTO t VALUES(101, 'y')"),
                             1)
            # last_error stays as history, with its age.
            st = f.status()
            self.assertIn("room", st["last_error"])
            time.sleep(0.2)
            self.assertGreaterEqual(f.status()["last_error_age_ms"],
                                    st["last_error_age_ms"] + 200)
            with open(f.log_path) as log:
                text = log.read()
            self.assertIn("disk full", text)
            self.assertIn("the log takes writes again", text)
        finally:
            if self.cluster is not None:
                codes = self.cluster.stop()
                self.cluster = None
                shutil.rmtree(self.dir, ignore_errors=True)
            subprocess.run(["umount", mnt], capture_output=True)
            os.rmdir(mnt)
        self.assertEqual(codes, [0, 0, 0])

    def test_small_log_with_large_requests_keeps_going(self):
        """Requests of 250 KB in a log of 1 MB, through the leader and a
        follower by turns: every node keeps taking writes (found by a
        new-user pass: a node, the leader too, stayed "log full" until
        restarted, its retried write grown past what the log can take)."""
        self.start("exec_timeout_ms=20000 log_max_mb=1")
        self.exec(self.leader, "CREATE TABLE t(i INTEGER PRIMARY KEY, b)")
        nodes = [self.leader, self.followers[0]]
        for i in range(20):
            self.assertEqual(self.exec(nodes[i % 2],
                                       "INSERT INTO t VALUES(?, ?)", i,
                                       {"blob": os.urandom(250_000).hex()}),
                             1)
        self.cluster.wait_applied(max(n.status()["applied"]
                                      for n in self.cluster.nodes))
        for n in self.cluster.nodes:
            self.assertEqual(n.value("SELECT count(*) FROM t"), 20)
            self.assertFalse(n.status()["log_full"])
        # And the leader still takes a write itself.
        self.assertEqual(self.exec(self.leader, "INSERT INTO t VALUES(99, 1)"),
                         1)


class PeerTest(unittest.TestCase):
    """Nodes beside peers that are not raftsql nodes."""

    def test_peers_that_close_at_once_do_not_kill_a_node(self):
        """Two members of a 5-node cluster accept every connection and
        close it at once (a peer going down behind a proxy, or refusing
        the handshake). A node's next write on such a connection used to
        raise SIGPIPE, which ended the host process (found by
        tests/faults, seed 2005); now the write fails, the connection is
        re-dialled, and every node lives on. heartbeat_ms=1 makes the
        writes frequent: before the fix a node died within about 5 s (in 10 s:
        most runs; the fault suite finds it too)."""
        workdir = tempfile.mkdtemp(prefix="raftsql-wedge-")
        fakes, nodes = [], []

        def close_at_once(sock):
            while True:
                try:
                    conn, _ = sock.accept()
                except OSError:
                    return
                conn.close()

        try:
            for _ in range(2):
                s = socket.socket()
                s.bind(("127.0.0.1", 0))
                s.listen(64)
                fakes.append(s)
                threading.Thread(target=close_at_once, args=(s,),
                                 daemon=True).start()
            members = ",".join(
                ["%d@127.0.0.1:%d" % (i + 1, p)
                 for i, p in enumerate(free_ports(3))] +
                ["%d@127.0.0.1:%d" % (4 + k, s.getsockname()[1])
                 for k, s in enumerate(fakes)])
            for i in range(1, 4):
                n = Node(NODE, i, os.path.join(workdir, "n%d.db" % i),
                         os.path.join(workdir, "n%d.log" % i))
                nodes.append(n)
                n.sql("SELECT raft_start(?)", "id=%d cluster=%s "
                      "election_timeout_ms=300 heartbeat_ms=1" % (i, members))
            end = time.monotonic() + 10
            while time.monotonic() < end:
                for n in nodes:
                    code = n.proc.poll()
                    if code is not None:
                        self.fail("node %d died (%s)" % (n.id, signal.Signals(
                            -code).name if code < 0 else code))
                time.sleep(0.1)
            leader = {n.value("SELECT raft_leader()") for n in nodes}
            self.assertEqual(len(leader), 1)
            self.assertNotIn(None, leader)
        finally:
            for s in fakes:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            codes = [n.stop() if n.proc.poll() is None else n.kill()
                     for n in nodes]
            shutil.rmtree(workdir, ignore_errors=True)
        self.assertEqual(codes, [0, 0, 0])

if __name__ == "__main__":
    unittest.main()
