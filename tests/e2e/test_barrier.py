"""raft_barrier() (ReadIndex): linearizable reads.

One 3-node cluster whose nodes dial each other through the fault
network's proxies (tests/faults/net.py), so that a test can cut a node
off from both others: the old leader's barrier fails within
election_timeout_ms with the clear error and never answers (nor when
interrupted); a barrier on the majority side succeeds and a SELECT after
it sees every acknowledged write; a barrier on a follower, from another
process through the attach socket and from C (examples/read_barrier.c);
refused inside a transaction. A follower whose leader speaks wire
version 2 (build/raftsql-testhost-prev, `make next`) fails its barrier
with a clear error, and nothing it cannot decode is sent. In a cluster
mixing that release and this one, raft_query, raft_exec_id and
raft_query_id (request format 3) are refused with RAFTSQL_NOT_APPLIED,
nothing applied anywhere, while raft_exec works; a member not reached
yet makes them wait; an old node that meets a format 3 entry anyway
stops applying at it and resumes on this release.
"""

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from codes import CODES
from e2e import ROOT, SO, NODE, connect, wait_for
from test_cluster_id import Group
from raftsql_cluster import Cluster, NodeError, free_ports

sys.path.insert(0, os.path.join(ROOT, "tests", "faults"))
from net import Net  # noqa: E402

PYTHON = "/usr/bin/python3"
EXAMPLE = os.path.join(ROOT, "build", "examples", "read_barrier")
PREV = os.environ.get("RAFTSQL_TESTHOST_PREV",
                      os.path.join(ROOT, "build", "raftsql-testhost-prev"))
SO_BASE = os.path.splitext(os.path.abspath(SO))[0]
ELECTION_MS = 600
EXTRA = "election_timeout_ms=%d heartbeat_ms=50" % ELECTION_MS
# What a barrier may take beyond election_timeout_ms to fail: the
# runtime's own slack (300 ms) and this busy machine's.
SLACK_S = 1.2

# Another process: raft_barrier() then a count, on a connection that
# loaded raftsql but started no node (its calls go through the socket).
OTHER = r"""
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
con.enable_load_extension(True)
con.load_extension(sys.argv[2])
print(con.execute("SELECT raft_barrier()").fetchone()[0])
print(con.execute("SELECT count(*) FROM t").fetchone()[0])
"""


class BarrierTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="raftsql-e2e-barrier-")
        ports = free_ports(3)
        cls.net = Net({i: ports[i - 1] for i in (1, 2, 3)})
        cls.net.start()

        def dial(i):
            return ",".join("%d@127.0.0.1:%d" % (j, cls.net.port(i, j))
                            for j in (1, 2, 3) if j != i)
        cls.cluster = Cluster(NODE, cls.dir, 3, EXTRA, ports=ports,
                              dial=dial)
        leader = cls.cluster.wait_leader()
        leader.value("SELECT raft_exec('CREATE TABLE t(x)')")

    @classmethod
    def tearDownClass(cls):
        codes = cls.cluster.stop()
        cls.net.close()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert codes == [0, 0, 0], codes

    def leader(self):
        return self.cluster.wait_leader(timeout=30)

    def write(self, node, x):
        return node.value("SELECT raft_exec('INSERT INTO t VALUES (?)', ?)",
                          x)

    def isolate(self, i, cut=True):
        self.net.set([(a, b) for a in (1, 2, 3) for b in (1, 2, 3)
                      if a != b and i in (a, b)], "cut" if cut else "up")

    def check_interrupt(self, node):
        """A barrier that cannot succeed now, from a connection of this
        process (through the attach socket), interrupted after 50 ms:
        "interrupted" with SQLITE_INTERRUPT, before it would fail.

        Its premise is waited for first: @node, cut off, knows no leader
        (it stepped down), so its barrier waits election_timeout_ms and
        the runtime's 300 ms for one; a barrier started while it still
        led would fail as soon as it steps down, which a loaded machine
        may let come first. Should the interrupt still come after that
        wait ("no leader (none reachable ...)", the barrier's own
        failure), it is tried again, a bounded number of times."""
        wait_for("node %d knows no leader" % node.id,
                 lambda: node.value("SELECT raft_leader()") is None, 30)
        seen = []
        for _ in range(10):
            con = connect(node.db)
            try:
                timer = threading.Timer(0.05, con.interrupt)
                timer.start()
                with self.assertRaises(sqlite3.OperationalError) as cm:
                    con.execute("SELECT raft_barrier()").fetchone()
                timer.join()
            finally:
                con.close()
            text = str(cm.exception)
            seen.append(text)
            if "raft_barrier: no leader (none reachable" in text:
                continue  # it failed by itself before the interrupt came
            # "raft_barrier: interrupted before the raftsql node (pid N)
            # answered" (SQLite's own "interrupted" if the interrupt came
            # before the call even started).
            self.assertIn("interrupted", text)
            self.assertIn(cm.exception.sqlite_errorcode,
                          (CODES["RAFTSQL_INTERRUPTED"],
                           sqlite3.SQLITE_INTERRUPT))
            return
        self.fail("no barrier on node %d was interrupted: %r" %
                  (node.id, seen))

    def test_1_barrier_on_leader_and_follower(self):
        leader = self.leader()
        follower = next(n for n in self.cluster.nodes if n is not leader)
        self.write(leader, 1)
        # Inside a transaction its reads would keep their snapshot.
        follower.sql("BEGIN")
        try:
            with self.assertRaises(NodeError) as cm:
                follower.value("SELECT raft_barrier()")
            self.assertIn("raft_barrier: this connection is inside a "
                          "transaction (BEGIN)", str(cm.exception))
            self.assertEqual(cm.exception.code, CODES["RAFTSQL_INVALID"])
        finally:
            follower.sql("ROLLBACK")
        applied = leader.status()["applied"]  # the write's index at least
        index = leader.value("SELECT raft_barrier()")
        self.assertIsInstance(index, int)
        self.assertGreaterEqual(index, applied)
        self.assertLessEqual(index, leader.status()["commit"])
        # Written on the leader, read at once on a follower: the barrier
        # makes the follower apply what the leader had committed.
        for x in range(2, 12):
            self.write(leader, x)
            got = follower.value("SELECT raft_barrier()")
            self.assertGreaterEqual(follower.status()["applied"], got)
            self.assertEqual(follower.value(
                "SELECT count(*) FROM t WHERE x = ?", x), 1)

    def test_2_barrier_from_another_process(self):
        leader = self.leader()
        follower = next(n for n in self.cluster.nodes if n is not leader)
        self.write(leader, 100)
        want = leader.value("SELECT count(*) FROM t")
        for node in (leader, follower):
            out = subprocess.run([PYTHON, "-c", OTHER, node.db, SO_BASE],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 0, out.stderr)
            index, count = (int(v) for v in out.stdout.split())
            self.assertGreater(index, 0)
            self.assertEqual(count, want)

    def test_2_c_program_raftsql_barrier(self):
        """raftsql_barrier() from C (examples/read_barrier.c), through
        the attach socket of a follower's node."""
        leader = self.leader()
        follower = next(n for n in self.cluster.nodes if n is not leader)
        self.write(leader, 200)
        want = leader.value("SELECT count(*) FROM t")
        out = subprocess.run([EXAMPLE, follower.db, "t"], capture_output=True,
                             text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertRegex(out.stdout, r"^barrier [1-9][0-9]* rows %d\n$" % want)

    def test_3_isolated_leader_fails_majority_succeeds(self):
        old = self.leader()
        others = [n for n in self.cluster.nodes if n is not old]
        before = old.value("SELECT count(*) FROM t")
        self.isolate(old.id)
        try:
            # At once: it still believes it leads.
            t0 = time.monotonic()
            with self.assertRaises(NodeError) as cm:
                old.value("SELECT raft_barrier()")
            took = time.monotonic() - t0
            self.assertIn("raft_barrier: no quorum confirmed this node "
                          "still leads", str(cm.exception))
            self.assertEqual(cm.exception.code, CODES["RAFTSQL_STALE"])
            self.assertLess(took, ELECTION_MS / 1000 + SLACK_S)
            self.check_interrupt(old)
            # The majority elects another leader and takes writes.
            new = wait_for("a leader on the majority side",
                           lambda: next((n for n in others if n.value(
                               "SELECT raft_leader()") == n.id), None),
                           timeout=30)
            acked = 0
            for x in range(1000, 1020):
                self.write(new if x % 2 else others[x % 2], x)
                acked += 1
            for node in others:
                node.value("SELECT raft_barrier()")
                self.assertEqual(node.value(
                    "SELECT count(*) FROM t WHERE x >= 1000"), acked)
            # The old leader's local reads are stale, and its barrier
            # still never answers.
            self.assertEqual(old.value("SELECT count(*) FROM t"), before)
            t0 = time.monotonic()
            with self.assertRaises(NodeError) as cm:
                old.value("SELECT raft_barrier()")
            self.assertLess(time.monotonic() - t0,
                            ELECTION_MS / 1000 + SLACK_S)
            self.assertRegex(str(cm.exception),
                             "raft_barrier: (no leader|no quorum confirmed)")
        finally:
            self.isolate(old.id, cut=False)
        # Healed, it catches up through its barrier.
        wait_for("the old leader back", lambda: old.value(
            "SELECT raft_leader()") not in (None, old.id) or
            old.value("SELECT raft_leader()") == old.id, timeout=30)

        def barrier_sees_all():
            try:
                old.value("SELECT raft_barrier()")
            except NodeError:
                return False
            return old.value("SELECT count(*) FROM t WHERE x >= 1000") == 20
        wait_for("the old leader's barrier after healing", barrier_sees_all,
                 timeout=30)

    def test_4_unfinished_statement_keeps_its_snapshot(self):
        """A cursor left open on a connection (Python, autocommit) holds
        a read transaction: raft_barrier() refuses (its reads would keep
        that snapshot), as it does a statement that itself reads a
        table; raft_exec is not refused (for row in cursor:
        raft_exec(...)), and its write shows once the cursor finished."""
        leader = self.leader()
        follower = next(n for n in self.cluster.nodes if n is not leader)
        self.write(leader, 300)
        self.write(leader, 301)
        con = connect(follower.db)
        try:
            con.execute("SELECT raft_barrier()")
            cur = con.execute("SELECT x FROM t")
            cur.fetchone()  # more rows left: the statement is unfinished
            self.write(leader, 302)
            with self.assertRaises(sqlite3.OperationalError) as cm:
                con.execute("SELECT raft_barrier()").fetchone()
            self.assertIn("raft_barrier: an unfinished statement on this "
                          "connection holds a read transaction",
                          str(cm.exception))
            self.assertEqual(cm.exception.sqlite_errorcode,
                             CODES["RAFTSQL_INVALID"])
            self.assertEqual(con.execute(
                "SELECT raft_exec('INSERT INTO t VALUES (303)')").fetchone(),
                (1,))
            # The open cursor's snapshot: neither write is seen yet.
            self.assertEqual(con.execute(
                "SELECT count(*) FROM t WHERE x IN (302, 303)").fetchone(),
                (0,))
            cur.close()
            self.assertIsInstance(con.execute(
                "SELECT raft_barrier()").fetchone()[0], int)
            self.assertEqual(con.execute(
                "SELECT count(*) FROM t WHERE x IN (302, 303)").fetchone(),
                (2,))
            # A statement reading a table took its snapshot before the
            # barrier ran.
            with self.assertRaises(sqlite3.OperationalError) as cm:
                con.execute("SELECT raft_barrier(), count(*) FROM t"
                            ).fetchone()
            self.assertIn("raft_barrier: this statement reads tables",
                          str(cm.exception))
            self.assertEqual(cm.exception.sqlite_errorcode,
                             CODES["RAFTSQL_INVALID"])
        finally:
            con.close()

    def test_5_no_statement_and_parameter_count(self):
        """SQL with no statement (only whitespace, semicolons, comments)
        is refused as empty, as '' is; too many values name the count in
        good grammar. Nothing enters the log."""
        leader = self.leader()
        last = leader.status()["last_index"]
        for fn in ("raft_exec", "raft_query"):
            for sql in ("", "  ;  ", " ; -- nothing\n /* at all */ ;"):
                with self.assertRaises(NodeError) as cm:
                    leader.value("SELECT %s(?)" % fn, sql)
                self.assertIn("%s: not applied: empty SQL" % fn,
                              str(cm.exception))
                self.assertEqual(cm.exception.code, CODES["RAFTSQL_INVALID"])
            with self.assertRaises(NodeError) as cm:
                leader.value("SELECT %s('SELECT ?', 1, 2)" % fn)
            self.assertIn("%s: not applied: 2 values given but the SQL has "
                          "only 1 parameter" % fn, str(cm.exception))
            self.assertNotIn("1 parameters", str(cm.exception))
        self.assertEqual(leader.status()["last_index"], last)


class FollowerPaceTest(unittest.TestCase):
    """A follower keeping follower_apply_ms=1000 between its batches
    under a steady writer: a barrier on it makes it apply at once (as a
    raft_exec waiting on it does), well within exec_timeout_ms=300
    (before, it waited for the batch, up to 1000 ms, and most failed)."""

    def test_barrier_on_a_paced_follower(self):
        workdir = tempfile.mkdtemp(prefix="raftsql-e2e-barrier-pace-")
        cluster = Cluster(NODE, workdir, 2, EXTRA + " follower_apply_ms=1000 "
                          "exec_timeout_ms=300")
        stop = threading.Event()
        try:
            leader = cluster.wait_leader()
            follower = next(n for n in cluster.nodes if n is not leader)
            leader.value("SELECT raft_exec('CREATE TABLE t(x)')")
            wrote = []

            def writer():
                x = 0
                while not stop.is_set():
                    try:
                        leader.value("SELECT raft_exec('INSERT INTO t "
                                     "VALUES (?)', ?)", x)
                        wrote.append(x)
                    except NodeError:
                        pass
                    x += 1
                    time.sleep(0.01)
            t = threading.Thread(target=writer)
            t.start()
            try:
                wait_for("writes", lambda: len(wrote) >= 5, timeout=30)
                for _ in range(10):
                    seen = len(wrote)
                    follower.value("SELECT raft_barrier()")
                    self.assertGreaterEqual(follower.value(
                        "SELECT count(*) FROM t"), seen)
                    time.sleep(0.05)
            finally:
                stop.set()
                t.join(30)
        finally:
            codes = cluster.stop()
            shutil.rmtree(workdir, ignore_errors=True)
        self.assertEqual(codes, [0, 0])


@unittest.skipUnless(os.path.exists(PREV),
                     "needs build/raftsql-testhost-prev (make next)")
class OldLeaderTest(unittest.TestCase):
    """A leader of the previous release (wire versions 1 to 2) and a
    learner of this one: the learner's barrier fails with the clear
    error; the old leader's own barrier works (it has the core)."""

    def test_leader_on_wire_2(self):
        workdir = tempfile.mkdtemp(prefix="raftsql-e2e-barrier-wire-")
        g = Group(workdir, "w", 1)
        try:
            leader = g.start(1, PREV)
            leader.value("SELECT raft_exec('CREATE TABLE t(x)')")
            node = g.join(2)
            wait_for("the table on node 2", lambda: node.value(
                "SELECT count(*) FROM sqlite_master WHERE name = 't'"))
            wait_for("node 2 connected in version 2", lambda: g.count(
                2, "connected (wire version 2") > 0)
            with self.assertRaises(NodeError) as cm:
                node.value("SELECT raft_barrier()")
            self.assertIn("raft_barrier: the leader (server 1) speaks wire "
                          "version 2, which has no READ_INDEX (wire version "
                          "3 and later): upgrade it first", str(cm.exception))
            self.assertEqual(cm.exception.code, CODES["RAFTSQL_STALE"])
            self.assertGreater(leader.value("SELECT raft_barrier()"), 0)
            # Nothing node 2 sent failed to decode on node 1.
            self.assertEqual(g.count(1, "message type 12"), 0)
        finally:
            codes = g.stop_all()
            shutil.rmtree(workdir, ignore_errors=True)
        self.assertEqual(codes, [0, 0])


@unittest.skipUnless(os.path.exists(PREV),
                     "needs build/raftsql-testhost-prev (make next)")
class MixedFormat3Test(unittest.TestCase):
    """A rolling upgrade half done: server 1 runs the previous release
    (wire versions 1 to 2, request formats 1 to 2), servers 2 and 3 this
    one. raft_query, raft_exec_id and raft_query_id write request format
    3, which server 1 cannot apply: refused with RAFTSQL_NOT_APPLIED,
    nothing applied anywhere, under the old leader (the followers refuse
    without sending) and under a new one (it refuses its own callers'
    and the forwarded ones); raft_exec works throughout."""

    REFUSED = ("SELECT raft_query('INSERT INTO t VALUES (100) RETURNING x')",
               "SELECT raft_exec_id('id-1', 'INSERT INTO t VALUES (101)')",
               "SELECT raft_query_id('id-2', 'INSERT INTO t VALUES (102) "
               "RETURNING x')")

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-e2e-barrier-mixed-")
        self.g = Group(self.dir, "m", 3)

    def tearDown(self):
        codes = self.g.stop_all()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertEqual(codes, [0] * len(codes))

    def lead(self, i):
        """Make server @i the leader, known as such by every server."""
        leader = self.g.leader()
        if leader.id != i:
            leader.value("SELECT raft_transfer(?)", i)
        wait_for("server %d leading" % i,
                 lambda: self.g.nodes[i].status()["role"] == "leader")
        wait_for("every server following %d" % i, lambda: all(
            n.status()["leader"] == i for n in self.g.nodes.values()))

    def refused(self, node, sql, why):
        with self.assertRaises(NodeError) as cm:
            node.value(sql)
        name = sql.split("(")[0].split()[-1]
        self.assertIn("%s: not applied: %s" % (name, why), str(cm.exception))
        self.assertEqual(cm.exception.code, CODES["RAFTSQL_NOT_APPLIED"])

    def rows_everywhere(self, n):
        for i in (1, 2, 3):
            wait_for("%d rows on server %d" % (n, i), lambda: self.g.nodes[
                i].value("SELECT count(*) FROM t") == n)
            self.assertEqual(self.g.nodes[i].value(
                "SELECT count(*) FROM t WHERE x >= 100"), 0)

    def test_format_3_refused_while_a_member_is_old(self):
        self.g.start(1, PREV)
        for i in (2, 3):
            self.g.start(i)
        self.g.leader().value("SELECT raft_exec('CREATE TABLE t(x)')")
        for i in (2, 3):
            wait_for("server %d connected to 1 in version 2" % i,
                     lambda: self.g.count(i, "connected (wire version 2") > 0)
        wait_for("server 1's peers known", lambda: self.g.count(
            1, "connected (wire version 2") >= 2)
        old = "speaks wire version 2, which cannot apply request format 3 "
        # The old leader: its followers refuse without sending.
        self.lead(1)
        for node in (self.g.nodes[2], self.g.nodes[3]):
            for sql in self.REFUSED:
                self.refused(node, sql, "the leader (server 1) " + old)
        self.assertEqual(self.g.nodes[2].value(
            "SELECT raft_exec('INSERT INTO t VALUES (1)')"), 1)
        # A new leader: its own callers and the forwarded requests.
        self.lead(2)
        for sql in self.REFUSED:
            self.refused(self.g.nodes[2], sql, "server 1 " + old)
            self.refused(self.g.nodes[3], sql,
                         "the leader (server 2) refused it: a member speaks "
                         "a wire version below 3")
            # The old server is refused by its own leader's wire.
            self.refused(self.g.nodes[1], sql, "the leader (server 2) " + old)
        # raft_load_sql's chunks carry ids (format 3): refused alike,
        # naming it, with no "run it again to resume" (it cannot resume
        # before the upgrade).
        script = os.path.join(self.dir, "load.sql")
        with open(script, "w") as f:
            f.write("INSERT INTO t VALUES (200);\n")
        for node in (self.g.nodes[2], self.g.nodes[3]):
            with self.assertRaises(NodeError) as cm:
                node.value("SELECT raft_load_sql(?)", script)
            err = str(cm.exception)
            self.assertIn("raft_load_sql: chunk 1 of 1 (", err)
            self.assertIn(": not applied: ", err)
            self.assertIn("raft_load_sql works once every member runs "
                          "this release", err)
            self.assertNotIn("again", err)
            self.assertEqual(cm.exception.code, CODES["RAFTSQL_NOT_APPLIED"])
        self.assertGreater(self.g.count(
            2, "a forwarded request of format 3 refused: server 1 " + old), 0)
        self.assertEqual(self.g.nodes[3].value(
            "SELECT raft_exec('INSERT INTO t VALUES (2)')"), 1)
        self.assertEqual(self.g.nodes[1].value(
            "SELECT raft_exec('INSERT INTO t VALUES (3)')"), 1)
        self.rows_everywhere(3)
        # Nothing failed to apply on the old server.
        self.assertEqual(self.g.count(1, "apply failed"), 0)

    def test_member_not_reached_yet(self):
        """A member not reached since the leader started is admitted: a
        request of format 3 goes at once (its retries are what a client
        needs while a member is down), from the leader and forwarded.
        Should that member come back on the previous release, it stops
        applying at the format 3 entry (never skips it), and the leader,
        now knowing its version, refuses format 3 from then on."""
        for i in (1, 2):
            self.g.start(i)
        leader = self.g.leader()
        follower = self.g.nodes[3 - leader.id]
        leader.value("SELECT raft_exec('CREATE TABLE t(x)')")
        started = time.monotonic()
        self.assertEqual(leader.value(
            "SELECT raft_exec_id('id-a', 'INSERT INTO t VALUES (1)')"), 1)
        self.assertIn('"rows":[[2]]', follower.value(
            "SELECT raft_query_id('id-b', 'INSERT INTO t VALUES (2) "
            "RETURNING x')"))
        self.assertLess(time.monotonic() - started, 3)  # exec_timeout_ms 4 s
        old = self.g.start(3, PREV)
        wait_for("server 3's apply error", lambda: (
            old.status()["apply_error"] or "").endswith(
                "request format version 3 is not supported (expected 1 "
                "or 2)"))
        wait_for("server 3 reached on wire 2", lambda: self.g.count(
            leader.id, "peer 3 (127.0.0.1:%d): connected (wire version 2"
            % self.g.ports[2]) > 0)
        self.refused(leader, self.REFUSED[0], "server 3 speaks wire version "
                     "2, which cannot apply request format 3 ")

    def test_old_member_meets_format_3(self):
        """What an old server does with a format 3 entry that reached it
        anyway (it went down on this release, so the leader knew it to
        speak wire 3, and came back on the previous one): it stops
        applying at that entry with the clear error, applies nothing of
        it and never skips it; the leader refuses format 3 from then on;
        back on this release, it applies everything."""
        for i in (1, 2, 3):
            self.g.start(i)
        self.lead(1)
        leader = self.g.nodes[1]
        leader.value("SELECT raft_exec('CREATE TABLE t(x)')")
        wait_for("the table on server 3", lambda: self.g.nodes[3].value(
            "SELECT count(*) FROM sqlite_master WHERE name = 't'") == 1)
        self.g.stop(3)
        self.assertEqual(leader.value(
            "SELECT raft_exec_id('id-3', 'INSERT INTO t VALUES (1)')"), 1)
        old = self.g.start(3, PREV)
        wait_for("server 3's apply error", lambda: (
            old.status()["apply_error"] or "").endswith(
                "request format version 3 is not supported (expected 1 "
                "or 2)"))
        self.assertEqual(old.value("SELECT count(*) FROM t"), 0)
        wait_for("server 3 reached on wire 2", lambda: self.g.count(
            1, "peer 3 (127.0.0.1:%d): connected (wire version 2"
            % self.g.ports[2]) > 0)
        self.refused(leader, self.REFUSED[0], "server 3 speaks wire version "
                     "2, which cannot apply request format 3 ")
        self.assertEqual(leader.value(
            "SELECT raft_exec('INSERT INTO t VALUES (2)')"), 1)
        self.assertEqual(old.value("SELECT count(*) FROM t"), 0)
        self.g.stop(3)
        self.g.start(3)
        self.rows_everywhere(2)


if __name__ == "__main__":
    unittest.main()
