"""End-to-end: plain SQL writes on a node's own connection, the leader's
or a follower's (issue #24): an INSERT, UPDATE, DELETE or schema
statement the application runs itself, not through raft_exec, becomes one
Raft log entry (its changeset) under the write lease, and every replica
applies it.

- Autocommit statements on the leader's connection: each commit is one
  entry, applied on every node, replicas equal (raft_verify()).
- BEGIN ... SELECT ... UPDATE ... COMMIT across calls: one entry at
  COMMIT; ROLLBACK sends nothing (the log does not move).
- While the leader's connection holds the lease (BEGIN IMMEDIATE open), a
  raft_exec from a follower waits and applies after the COMMIT, after
  the transaction's entry.
- On a follower the same: its node asks the leader for the lease (LEASE
  frames); autocommit statements and a transaction across calls.
- No lost update: a counter incremented concurrently on the leader and a
  follower ends exact, with BEGIN IMMEDIATE, and with a deferred BEGIN
  retried on SQLITE_BUSY_SNAPSHOT / SQLITE_BUSY.

Before, every plain write on a replica was refused at prepare time ("not
authorized").
"""

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import threading
import time
import unittest

from attach_writers import PYTHON, SO_BASE

from e2e import ClusterCase, connect, wait_for
from raftsql_cluster import NodeError, free_ports

# A raft_exec from another process on the leader's file (argv[2]): it goes
# through the leader's node (the attach socket) and waits there.
EXEC = r"""
import json, sqlite3, sys
con = sqlite3.connect(sys.argv[2], isolation_level=None, timeout=10)
con.enable_load_extension(True)
con.load_extension(sys.argv[1])
try:
    out = {"rows": con.execute("SELECT raft_exec(?)", (sys.argv[3],))
           .fetchall()}
except sqlite3.Error as e:
    out = {"error": str(e)}
print(json.dumps(out))
"""

EXTRA = "election_timeout_ms=1000 heartbeat_ms=50 exec_timeout_ms=10000"


class PlainWritesTest(ClusterCase):

    def setUp(self):
        self.start_kv(EXTRA)

    def ok(self, node, sql, *params):
        """Run @sql on @node's connection; it must succeed: its rows."""
        try:
            return node.sql(sql, *params)
        except NodeError as e:
            self.fail("%s on node %d: %s (%s)" % (sql, node.id, e, e.code))

    def rows_everywhere(self, sql, expected, timeout=20.0):
        """Wait until @sql answers @expected on every node."""
        deadline = time.monotonic() + timeout
        while True:
            got = []
            for n in self.cluster.nodes:
                try:
                    got.append(n.sql(sql))
                except NodeError as e:  # not applied there yet
                    got.append(str(e))
            if all(g == expected for g in got):
                return
            if time.monotonic() > deadline:
                self.fail("%s: %r on the nodes, wanted %r"
                          % (sql, got, expected))
            time.sleep(0.02)

    def assert_verified(self):
        """Every node's raft_verify() finds its file equal to its
        checksum, and the checksums agree at the same applied index."""
        self.cluster.wait_all_applied()
        for n in self.cluster.nodes:
            self.ok(n, "SELECT raft_verify()")

    def test_autoincrement_insert_of_no_rows(self):
        """An INSERT of no rows into an AUTOINCREMENT table leaves every
        replica's sqlite_sequence and checksum the same."""
        self.ok(self.leader, "CREATE TABLE a(id INTEGER PRIMARY KEY "
                "AUTOINCREMENT, v)")
        self.ok(self.leader, "CREATE TABLE b(id INTEGER PRIMARY KEY "
                "AUTOINCREMENT, v)")
        self.ok(self.leader, "INSERT INTO b SELECT * FROM a")
        self.cluster.wait_all_applied()
        seqs, sums = [], []
        for n in self.cluster.nodes:
            seqs.append(n.sql("SELECT name, seq FROM sqlite_sequence "
                              "ORDER BY name"))
            sums.append(n.status()["checksum"]["value"])
        self.assertEqual(len(set(map(repr, seqs))), 1, seqs)
        self.assertEqual(len(set(sums)), 1, sums)
        # The writer's node takes its own commit as its own at the next
        # entry too: no divergence, no repair.
        self.ok(self.leader, "INSERT INTO b(v) VALUES(1)")
        self.cluster.wait_all_applied()
        self.assertEqual([(n.id, n.status()["diverged"], n.status()["repairs"])
                          for n in self.cluster.nodes],
                         [(n.id, None, 0) for n in self.cluster.nodes])
        self.rows_everywhere("SELECT name, seq FROM sqlite_sequence "
                             "ORDER BY name", [["b", 1]])

    def test_autoincrement_insert_and_delete_in_one_transaction(self):
        """A row inserted and deleted in one transaction on an
        AUTOINCREMENT table: the writer's node takes its own commit as
        its own (no divergence, no repair)."""
        self.ok(self.leader, "CREATE TABLE a(id INTEGER PRIMARY KEY "
                "AUTOINCREMENT, v)")
        self.ok(self.leader, "INSERT INTO a(v) VALUES(1)")
        self.ok(self.leader, "BEGIN")
        self.ok(self.leader, "INSERT INTO a(v) VALUES(2)")
        self.ok(self.leader, "DELETE FROM a WHERE v = 2")
        try:
            self.leader.sql("COMMIT")
        except NodeError as e:  # judged below, with what the nodes say
            print("COMMIT: %s" % e)
        target = self.leader.status()["last_index"]
        seen = []

        def settled():
            seen[:] = [n.status() for n in self.cluster.nodes]
            return all(s["applied"] >= target or s["diverged"] is not None
                       or s["repairs"] > 0 for s in seen)
        try:
            wait_for("the transaction applied everywhere", settled, 20)
        except TimeoutError:
            pass  # judged below on what was seen last
        self.assertEqual([(s["id"], s["diverged"], s["repairs"])
                          for s in seen],
                         [(s["id"], None, 0) for s in seen])
        self.rows_everywhere("SELECT seq FROM sqlite_sequence "
                             "WHERE name = 'a'", [[2]])

    def test_autocommit_on_the_leader(self):
        """Each autocommit statement on the leader's own connection is
        replicated: every node holds the same rows."""
        before = self.leader.status()["last_index"]
        self.ok(self.leader, "INSERT INTO kv VALUES('b', 2)")
        self.ok(self.leader, "UPDATE kv SET v = v + 10 WHERE k = 'a'")
        self.ok(self.leader, "INSERT INTO kv VALUES('c', 3), ('d', 4)")
        self.ok(self.leader, "DELETE FROM kv WHERE k = 'c'")
        self.ok(self.leader, "CREATE TABLE t2(x INTEGER PRIMARY KEY, y)")
        self.ok(self.leader, "INSERT INTO t2(y) VALUES('z')")
        self.assertGreaterEqual(self.leader.status()["last_index"],
                                before + 6)
        self.rows_everywhere("SELECT k, v FROM kv ORDER BY k",
                             [["a", 11], ["b", 2], ["d", 4]])
        self.rows_everywhere("SELECT x, y FROM t2", [[1, "z"]])
        self.assert_verified()
        # The node's checkpointer backfills the WAL: a connection that
        # writes plain SQL runs no automatic checkpoint of its own after
        # each commit (an fsync of the file each, past 1,000 frames).
        self.assertEqual(self.ok(self.leader, "PRAGMA wal_autocheckpoint"),
                         [[0]])

    def test_one_member_down_since_the_leader_started(self):
        """A three-node cluster takes plain writes with one node down,
        also once its leader restarted and has not reached that node
        since (its wire version unknown): on the leader and on the
        follower. Before, every plain write was refused then ("server 3
        has not been reached since this node started"), raft_exec
        alone going on. The node comes back and holds every row."""
        down = self.cluster.nodes[2]
        self.assertEqual(down.stop(), 0)
        for i in (0, 1):
            self.assertEqual(self.cluster.nodes[i].stop(), 0)
        for i in (0, 1):
            self.cluster.nodes[i] = self.cluster.spawn(i + 1)
        live = self.cluster.nodes[:2]
        wait_for("a leader of the two", lambda: any(
            n.status()["role"] == "leader" for n in live), 30)
        leader = next(n for n in live if n.status()["role"] == "leader")
        follower = next(n for n in live if n is not leader)
        self.ok(leader, "INSERT INTO kv VALUES('down1', 1)")
        self.ok(follower, "INSERT INTO kv VALUES('down2', 2)")
        self.cluster.nodes[2] = self.cluster.spawn(3)
        self.rows_everywhere("SELECT k, v FROM kv WHERE k LIKE 'down%' "
                             "ORDER BY k", [["down1", 1], ["down2", 2]], 60)

    def test_transaction_across_a_leader_change(self):
        """A follower's deferred transaction that read before a leader
        change writes and commits after it: the new leader's no-op entry,
        which the follower applies before its lease, changes nothing in
        the file, so the transaction's snapshot is still the latest (as
        on a file nobody else wrote). Before, its first write failed with
        SQLITE_BUSY_SNAPSHOT ("database is locked"), a retry-free
        application (an ORM session) failing at COMMIT."""
        f, other = self.followers
        self.ok(f, "BEGIN")
        v = self.ok(f, "SELECT v FROM kv WHERE k = 'a'")[0][0]
        before = f.status()["applied"]
        self.ok(self.leader, "SELECT raft_transfer(%d)" % other.id)
        wait_for("server %d leads" % other.id,
                 lambda: other.status()["role"] == "leader", 30)
        seen = {}

        def applied_noop():
            seen.update(f=f.status(), other=other.status())
            return seen["f"]["applied"] > before and \
                seen["f"]["applied"] >= seen["other"]["commit"]
        wait_for("node %d applied the new leader's first entry (saw %r)"
                 % (f.id, seen), applied_noop, 30)
        self.ok(f, "UPDATE kv SET v = ? WHERE k = 'a'", v + 1)
        self.ok(f, "COMMIT")
        self.rows_everywhere("SELECT v FROM kv WHERE k = 'a'", [[v + 1]])
        self.assert_verified()

    @contextlib.contextmanager
    def leader_stopped(self):
        """SIGSTOP the leader's process and wait until every thread of it
        stopped (a thread still running answers what reaches it first);
        SIGCONT on leaving (before tearDown, which stops every node and
        wants each to exit cleanly)."""
        pid = self.leader.proc.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            self.wait_stopped(pid)
            yield
        finally:
            os.kill(pid, signal.SIGCONT)

    def wait_stopped(self, pid):
        """Wait until every thread of process @pid is stopped."""

        deadline = time.monotonic() + 10
        while True:
            states = []
            for t in os.listdir("/proc/%d/task" % pid):
                with open("/proc/%d/task/%s/stat" % (pid, t)) as fh:
                    states.append(fh.read().rsplit(")", 1)[1].split()[0])
            if all(s in "tT" for s in states):
                return
            if time.monotonic() > deadline:
                self.fail("process %d not stopped within 10 s: its threads' "
                          "states %r" % (pid, states))
            time.sleep(0.001)

    def test_transaction_that_read_waits_for_an_election(self):
        """A follower's deferred transaction that read, its leader gone
        (stopped) before its first write: no leader, so nobody commits
        and its snapshot stays the latest; its write waits for the
        election and commits, as on a file nobody else wrote. SQLite
        gives such a write one try at the lock (no busy handler), and
        before, that try answered SQLITE_BUSY ("database is locked")
        after 250 ms without a leader: a retry-free application (an ORM
        session, the CI's test_sqlalchemy under load) lost its
        transaction to an election."""
        f, _ = self.followers
        self.ok(f, "BEGIN")
        v = self.ok(f, "SELECT v FROM kv WHERE k = 'a'")[0][0]
        with self.leader_stopped():
            self.ok(f, "UPDATE kv SET v = ? WHERE k = 'a'", v + 1)
            self.ok(f, "COMMIT")
            self.assertNotEqual(f.status()["leader"], self.leader.id)
        self.assertEqual(self.ok(f, "SELECT v FROM kv WHERE k = 'a'"),
                         [[v + 1]])

    def test_leader_transaction_that_read_waits_for_an_election(self):
        """The same on the leader that lost its quorum (both followers
        stopped: it steps down) between the transaction's read and its
        first write: the write waits while nobody leads, and commits once
        the followers are back and elect a leader (the CI's
        SqlAlchemyOnLeaderTest failure under load: "database is locked"
        at an ORM session's COMMIT)."""
        pids = [n.proc.pid for n in self.followers]
        self.ok(self.leader, "BEGIN")
        v = self.ok(self.leader, "SELECT v FROM kv WHERE k = 'a'")[0][0]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        result, t = {}, None
        try:
            for pid in pids:
                self.wait_stopped(pid)
            wait_for("the leader steps down without its quorum",
                     lambda: self.leader.status()["role"] != "leader", 30)

            def write():
                try:
                    self.leader.sql("UPDATE kv SET v = ? WHERE k = 'a'",
                                    v + 1)
                    self.leader.sql("COMMIT")
                    result["ok"] = True
                except NodeError as e:
                    result["error"] = "%s (%s)" % (e, e.code)
            t = threading.Thread(target=write)
            t.start()
            # Past the 250 ms a writer waited in its queue before: while
            # both followers are stopped nobody can lead.
            t.join(0.5)
            self.assertEqual(result, {}, "the write ended while no leader "
                             "could be elected")
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        t.join(60)
        self.assertFalse(t.is_alive(), "the write did not end in 60 s")
        self.assertEqual(result, {"ok": True})
        self.rows_everywhere("SELECT v FROM kv WHERE k = 'a'", [[v + 1]])

    def test_transaction_that_read_waits_for_an_election_elsewhere(self):
        """The same from another process (its lease through the
        follower's attach socket: the one-try flag travels with the
        acquire, attach version 4)."""
        f, other = self.followers
        con = connect(f.db)
        self.addCleanup(con.close)
        con.execute("BEGIN")
        v = con.execute("SELECT v FROM kv WHERE k = 'a'").fetchone()[0]
        with self.leader_stopped():
            try:
                con.execute("UPDATE kv SET v = ? WHERE k = 'a'", (v + 1,))
                con.execute("COMMIT")
            except sqlite3.Error as e:
                self.fail("the write after the leader stopped: %s (%s)"
                          % (e, getattr(e, "sqlite_errorcode", None)))
        wait_for("node %d applied the commit" % other.id,
                 lambda: other.sql("SELECT v FROM kv WHERE k = 'a'") ==
                 [[v + 1]], 20)

    def test_transaction_across_calls(self):
        """A read-modify-write over several calls commits as one entry;
        a ROLLBACK sends nothing."""
        self.ok(self.leader, "BEGIN")
        v = self.ok(self.leader, "SELECT v FROM kv WHERE k = 'a'")[0][0]
        self.ok(self.leader, "UPDATE kv SET v = ? WHERE k = 'a'", v + 1)
        self.ok(self.leader, "INSERT INTO kv VALUES('t', ?)", v)
        before = self.leader.status()["last_index"]
        self.ok(self.leader, "COMMIT")
        self.assertEqual(self.leader.status()["last_index"], before + 1)
        self.rows_everywhere("SELECT k, v FROM kv ORDER BY k",
                             [["a", 2], ["t", 1]])
        self.ok(self.leader, "BEGIN")
        self.ok(self.leader, "DELETE FROM kv")
        before = self.leader.status()["last_index"]
        self.ok(self.leader, "ROLLBACK")
        self.assertEqual(self.leader.status()["last_index"], before)
        self.rows_everywhere("SELECT count(*) FROM kv", [[2]])
        self.assert_verified()

    def test_raft_exec_waits_behind_the_lease(self):
        """While the leader's connection holds the lease, a raft_exec on
        the leader's node (from another process) waits; it applies after
        the transaction's entry."""
        self.ok(self.leader, "BEGIN IMMEDIATE")
        self.ok(self.leader, "UPDATE kv SET v = 100 WHERE k = 'a'")
        proc = subprocess.Popen(
            [PYTHON, "-c", EXEC, SO_BASE, self.leader.db,
             "UPDATE kv SET v = v * 2 WHERE k = 'a'"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(proc.kill)
        deadline = time.monotonic() + 20
        while True:
            lease = self.leader.status()["lease"]
            if lease is not None and lease["waiting"] >= 1:
                break
            if proc.poll() is not None:
                self.fail(("raft_exec did not wait", proc.communicate()))
            self.assertLess(time.monotonic(), deadline,
                            ("no raft_exec waiting behind the lease", lease))
            time.sleep(0.02)
        self.ok(self.leader, "COMMIT")
        out, err = proc.communicate(timeout=30)
        self.assertEqual(json.loads(out), {"rows": [[1]]}, err)
        self.rows_everywhere("SELECT v FROM kv WHERE k = 'a'", [[200]])
        self.assert_verified()

    def test_autocommit_on_a_follower(self):
        """A follower's own connection writes plain SQL: its node asks
        the leader for the lease, the leader appends the changeset, and
        every node holds the rows (the follower's own commit is the
        entry's)."""
        follower = self.followers[0]
        before = self.leader.status()["last_index"]
        self.ok(follower, "INSERT INTO kv VALUES('f', 1)")
        # Applied on the follower when its COMMIT returns.
        self.assertEqual(self.ok(follower, "SELECT v FROM kv WHERE k = 'f'"),
                         [[1]])
        self.ok(follower, "UPDATE kv SET v = v + 5 WHERE k = 'a'")
        self.ok(follower, "CREATE TABLE t3(x INTEGER PRIMARY KEY, y)")
        self.ok(follower, "INSERT INTO t3(y) VALUES('q'), ('r')")
        self.assertGreaterEqual(self.leader.status()["last_index"],
                                before + 4)
        self.rows_everywhere("SELECT k, v FROM kv ORDER BY k",
                             [["a", 6], ["f", 1]])
        self.rows_everywhere("SELECT x, y FROM t3", [[1, "q"], [2, "r"]])
        self.assert_verified()

    def test_transaction_on_a_follower(self):
        """BEGIN ... SELECT ... UPDATE ... COMMIT across calls on a
        follower: one entry; a ROLLBACK there sends nothing; writes on
        the leader and the follower then alternate."""
        follower = self.followers[0]
        self.ok(follower, "BEGIN")
        v = self.ok(follower, "SELECT v FROM kv WHERE k = 'a'")[0][0]
        self.ok(follower, "UPDATE kv SET v = ? WHERE k = 'a'", v + 1)
        self.ok(follower, "INSERT INTO kv VALUES('t', ?)", v)
        before = self.leader.status()["last_index"]
        self.ok(follower, "COMMIT")
        self.assertEqual(self.leader.status()["last_index"], before + 1)
        self.ok(follower, "BEGIN IMMEDIATE")
        self.ok(follower, "DELETE FROM kv")
        self.ok(follower, "ROLLBACK")
        self.assertEqual(self.leader.status()["last_index"], before + 1)
        self.ok(self.leader, "INSERT INTO kv VALUES('l', 7)")
        self.ok(follower, "UPDATE kv SET v = v * 3 WHERE k = 'l'")
        self.ok(self.leader, "UPDATE kv SET v = v + 1 WHERE k = 'l'")
        self.rows_everywhere("SELECT k, v FROM kv ORDER BY k",
                             [["a", 2], ["l", 22], ["t", 1]])
        self.assert_verified()

    def increment(self, node, n, immediate, tally):
        """Increment kv['a'] @n times on @node, each a read-modify-write
        transaction: BEGIN IMMEDIATE (the lease first, then the read), or
        a deferred BEGIN whose write meets SQLITE_BUSY_SNAPSHOT (517) or
        SQLITE_BUSY (5) when another writer went first: rolled back and
        run again. @tally counts the retries by code."""
        done = 0
        deadline = time.monotonic() + 120
        while done < n:
            self.assertLess(time.monotonic(), deadline,
                            ("node %d: %d of %d increments" %
                             (node.id, done, n), tally))
            try:
                node.sql("BEGIN IMMEDIATE" if immediate else "BEGIN")
                v = node.sql("SELECT v FROM kv WHERE k = 'a'")[0][0]
                node.sql("UPDATE kv SET v = ? WHERE k = 'a'", v + 1)
                node.sql("COMMIT")
                done += 1
            except NodeError as e:
                tally[e.code] = tally.get(e.code, 0) + 1
                if e.code not in (5, 517):
                    raise
                try:
                    node.sql("ROLLBACK")
                except NodeError:
                    pass  # none open: BEGIN IMMEDIATE itself was busy

    def run_counter(self, immediate):
        """Two writers, the leader's connection and a follower's,
        increment one counter concurrently; it ends exact everywhere."""
        import threading
        n = 20
        tallies, errors = [{}, {}], []
        nodes = [self.leader, self.followers[0]]

        def run(i):
            try:
                self.increment(nodes[i], n, immediate, tallies[i])
            except BaseException as e:  # reported below
                errors.append((nodes[i].id, e))

        threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [], tallies)
        self.rows_everywhere("SELECT v FROM kv WHERE k = 'a'", [[1 + 2 * n]])
        self.assert_verified()
        return tallies

    def test_no_lost_update_begin_immediate(self):
        """The lost-update counter with BEGIN IMMEDIATE on the leader and
        a follower: every increment counts."""
        self.run_counter(True)

    def test_no_lost_update_deferred(self):
        """The lost-update counter with deferred BEGIN, retried on
        SQLITE_BUSY_SNAPSHOT and SQLITE_BUSY: every increment counts."""
        self.run_counter(False)


if __name__ == "__main__":
    unittest.main()


# A Python program that runs its own node (a single voter on port
# argv[3], file argv[2]) and writes with plain SQL on a second connection:
# `with conn:`, executemany, lastrowid.
PYTHON_APP = r"""
import json, sqlite3, sys, time
SO, path, port = sys.argv[1], sys.argv[2], sys.argv[3]
first = sqlite3.connect(path, isolation_level=None, timeout=10)
first.enable_load_extension(True)
first.load_extension(SO)
first.execute("SELECT raft_start(?)",
              ("id=1 cluster=1@127.0.0.1:%s election_timeout_ms=300 "
               "heartbeat_ms=30 exec_timeout_ms=10000" % port,))
deadline = time.monotonic() + 20
while first.execute("SELECT raft_leader()").fetchone()[0] != 1:
    if time.monotonic() > deadline:
        sys.exit("no leader")
    time.sleep(0.05)
out = {}
conn = sqlite3.connect(path, timeout=10)
with conn:
    conn.execute("CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT, "
                 "qty INTEGER)")
with conn:
    cur = conn.execute("INSERT INTO items(name, qty) VALUES('a', 1)")
    out["lastrowid"] = cur.lastrowid
    conn.executemany("INSERT INTO items(name, qty) VALUES(?, ?)",
                     [("b", 2), ("c", 3), ("d", 4)])
try:
    with conn:
        conn.execute("UPDATE items SET qty = qty + 100")
        raise RuntimeError("abandon")
except RuntimeError:
    pass
out["rows"] = conn.execute("SELECT id, name, qty FROM items "
                           "ORDER BY id").fetchall()
status = json.loads(first.execute("SELECT raft_status()").fetchone()[0])
out["applied"] = status["applied"]
out["last_index"] = status["last_index"]
out["verify"] = first.execute("SELECT raft_verify()").fetchone()[0]
conn.close()
first.execute("SELECT raft_stop()")
print(json.dumps(out))
"""


class PythonAppTest(unittest.TestCase):

    def test_with_conn_executemany_lastrowid(self):
        """A Python program running its node writes through Python's
        sqlite3 module unchanged: `with conn:` blocks commit as entries,
        executemany inside one, lastrowid as SQLite gives it; an
        abandoned block rolls back and sends nothing."""
        d = tempfile.mkdtemp(prefix="raftsql-plain-")
        self.addCleanup(shutil.rmtree, d, True)
        port = free_ports(1)[0]
        out = subprocess.run(
            [PYTHON, "-c", PYTHON_APP, SO_BASE, os.path.join(d, "app.db"),
             str(port)], capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        got = json.loads(out.stdout)
        self.assertEqual(got["lastrowid"], 1)
        self.assertEqual(got["rows"], [[1, "a", 1], [2, "b", 2],
                                       [3, "c", 3], [4, "d", 4]])
        self.assertEqual(got["applied"], got["last_index"])
        self.assertIsNotNone(got["verify"])
