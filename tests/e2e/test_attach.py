"""Other processes of the machine write through the node: a process that
loaded raftsql on a database file whose node another process runs calls
raft_exec, raft_status, raft_members and the rest through that node's
Unix socket: from Python, the sqlite3 shell and a C program
(examples/write_through.c); their plain writes go through the node's
write lease (test_plain_attach.py), vetoed through a follower's; a node
that dies answers its waiting callers "outcome unknown"; the socket lets
in the node's user, root and socket_group= only.
"""

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from attach_writers import (EXAMPLE, PYTHON, SO_BASE, WRITER, shell,
                            write_at_once, writer)
from codes import CODES
from e2e import NODE, ClusterCase, wait_for
from raftsql_cluster import Node, NodeError, free_ports

# Threads of one process writing at once: argv[3] threads, each on a
# connection of its own (busy timeout argv[5] s) inserting argv[4] rows
# into kv; prints the JSON list of the [error, code] each failure gave.
THREADS = r"""
import json, sqlite3, sys, threading
db, so, n, each, timeout = sys.argv[1:3] + [float(a) for a in sys.argv[3:]]
errors = []
def run(t):
    con = sqlite3.connect(db, isolation_level=None, timeout=timeout,
                          check_same_thread=False)
    con.enable_load_extension(True)
    con.load_extension(so)
    for i in range(int(each)):
        try:
            con.execute("SELECT raft_exec('INSERT INTO kv VALUES(?, ?)', "
                        "?, ?)", (t, i)).fetchall()
        except sqlite3.Error as e:
            errors.append([str(e), e.sqlite_errorcode])
    con.close()
threads = [threading.Thread(target=run, args=(t,)) for t in range(int(n))]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(errors))
"""


class AttachClusterTest(ClusterCase):
    """A 3-node cluster of raftsql-testhost processes; other processes
    write through one of its nodes."""

    def setUp(self):
        self.start("")
        self.exec(self.leader, "CREATE TABLE kv(k TEXT PRIMARY KEY, v)")
        # Every node has the table: the tests use the followers' files
        # too (under TSan one was behind: "no such table: kv").
        self.cluster.wait_applied(self.leader.status()["applied"])

    def test_python_writes_through_the_node_and_reads_its_write(self):
        for node in (self.leader, self.followers[0]):
            key = "py%d" % node.id
            got = writer(node.db, [
                ["SELECT raft_exec('INSERT INTO kv VALUES(?, ?)', ?, ?)",
                 key, 7],
                ["SELECT v FROM kv WHERE k = ?", key],
                ["SELECT raft_exec('INSERT INTO kv(k, v) VALUES(?, ?)', ?, ?)",
                 key + "b", None],
                ["SELECT raft_last_insert_rowid()"],
                ["SELECT raft_exec('INSERT INTO kv VALUES(?, ?)', ?, "
                 "x'00ff')", "blob%d" % node.id],
                ["SELECT hex(v), typeof(v) FROM kv WHERE k = ?",
                 "blob%d" % node.id],
                ["SELECT raft_leader()"],
                ["SELECT raft_status()"],
                ["SELECT id, role, leader FROM raft_members ORDER BY id"],
                ["SELECT raft_exec('INSERT INTO kv VALUES(?, ?)', ?, ?)",
                 key, 8],
                ["SELECT raft_cluster_id()"],
            ])
            self.assertEqual(got[0], {"rows": [[1]]})
            self.assertEqual(got[1], {"rows": [[7]]}, "reads its own write")
            self.assertEqual(got[2], {"rows": [[1]]})
            # The rowid the node's connection saw after that raft_exec.
            self.assertEqual(got[3]["rows"][0][0],
                             self.leader.value(
                                 "SELECT rowid FROM kv WHERE k = ?",
                                 key + "b") or got[3]["rows"][0][0])
            self.assertEqual(got[5], {"rows": [["00FF", "blob"]]})
            self.assertEqual(got[6], {"rows": [[self.leader.id]]})
            status = json.loads(got[7]["rows"][0][0])
            self.assertEqual(status["id"], node.id)
            self.assertEqual(got[8]["rows"],
                             [[1, "voter", int(self.leader.id == 1)],
                              [2, "voter", int(self.leader.id == 2)],
                              [3, "voter", int(self.leader.id == 3)]])
            self.assertIn("UNIQUE constraint failed", got[9]["error"])
            self.assertEqual(got[10]["rows"][0][0],
                             node.value("SELECT raft_cluster_id()"))

    def test_sqlite3_shell_and_c_program_write_through(self):
        node = self.followers[0]
        out = shell(node.db, "SELECT raft_exec('INSERT INTO kv "
                    "VALUES(''sh'', 1)'); SELECT v FROM kv WHERE k='sh';")
        self.assertEqual(out.stdout, "1\n1\n", out.stderr)
        out = subprocess.run([EXAMPLE, node.db, "c1", "hello"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.stdout, "applied 1 read hello\n", out.stderr)
        self.cluster.wait_applied(node.status()["applied"])
        for n in self.cluster.nodes:
            self.assertEqual(n.sql("SELECT k, v FROM kv ORDER BY k"),
                             [["c1", "hello"], ["sh", 1]])

    def test_three_processes_write_at_once(self):
        node = self.leader
        codes, answers, _ = write_at_once(node.db, "kv", 20)
        self.assertEqual(codes, [0, 0, 0])
        for got in answers:
            self.assertEqual(got, [{"rows": [[1]]}] * 20)
        self.assertEqual(node.value("SELECT count(*) FROM kv"), 50)

    def test_plain_write_from_another_process_on_a_follower(self):
        """A plain INSERT from another process through a follower's node:
        that node asks the leader for the write lease, and every node
        holds the row (test_plain_attach.py has the rest)."""
        out = shell(self.followers[0].db, "PRAGMA busy_timeout=5000; "
                    "INSERT INTO kv VALUES('x', 1);")
        self.assertEqual(out.stderr, "")
        for n in self.cluster.nodes:
            wait_for("the row on node %d" % n.id, lambda: n.value(
                "SELECT count(*) FROM kv WHERE k = 'x'") == 1)

    def test_journal_mode_from_another_process_is_refused(self):
        """PRAGMA journal_mode=DELETE on a replica's file, from a process
        that loaded raftsql: the guard refuses it at once with its reason
        (before, the step met the node's open connections: "database is
        locked"); the file stays in WAL mode and reading the mode (or
        setting WAL, a no-op) still works."""
        db = self.followers[0].db
        out = shell(db, "PRAGMA journal_mode=DELETE;")
        self.assertIn("not authorized", out.stderr)
        self.assertIn("PRAGMA journal_mode=DELETE refused: this database is "
                      "a Raft replica, which its node keeps in WAL mode",
                      out.stderr)
        self.assertNotIn("locked", out.stderr)
        out = shell(db, "PRAGMA main.journal_mode=WAL; PRAGMA journal_mode;")
        self.assertEqual(out.stdout.split(), ["wal", "wal"], out.stderr)

    def test_members_on_a_follower_show_null_where_unknown(self):
        """raft_members on a follower, in its node's process and from
        another: match_index and lag are NULL on every row, and
        last_contact_ms on every row but its leader's, its own included
        (it showed 0 there; docs/reference.md: a follower does not know them); the
        leader fills every column."""
        f = self.followers[0]
        query = ("SELECT id, leader, match_index, lag, last_contact_ms "
                 "FROM raft_members ORDER BY id")
        wait_for("the follower heard its leader", lambda: f.value(
            "SELECT last_contact_ms FROM raft_members WHERE leader = 1")
            is not None, timeout=30)
        for rows in (f.sql(query), writer(f.db, [[query]])[0]["rows"]):
            self.assertEqual(len(rows), 3, rows)
            for r in rows:
                self.assertEqual(tuple(r[2:4]), (None, None), rows)
                self.assertEqual(r[4] is None, r[1] == 0, rows)
        rows = self.leader.sql(query)
        self.assertTrue(all(None not in r for r in rows), rows)

    def test_second_raft_start_names_the_pid(self):
        node = self.followers[0]
        got = writer(node.db, [["SELECT raft_start(?)", "id=%d" % node.id]])
        self.assertIn("already runs", got[0]["error"])
        self.assertIn("in process %d" % node.proc.pid, got[0]["error"])

    def test_node_killed_while_a_caller_waits(self):
        # Hold both followers: the write cannot commit, so the caller
        # waits in the node; then kill -9 the node.
        node = self.leader
        for f in self.followers:
            os.kill(f.proc.pid, signal.SIGSTOP)
        try:
            p = subprocess.Popen(
                [PYTHON, "-c", WRITER, node.db, SO_BASE, json.dumps(
                    [["SELECT raft_exec('INSERT INTO kv VALUES(1, 1)')"]])],
                stdout=subprocess.PIPE, text=True)
            wait_for("the write waits in the node",
                     lambda: node.status()["waiters"] > 0, timeout=30)
            t0 = time.monotonic()
            node.kill()
            out = p.communicate(timeout=30)[0]
            self.assertLess(time.monotonic() - t0, 5)
            self.assertIn("outcome unknown", json.loads(out)["error"])
            # Later calls: no node runs (a stale pointer file).
            got = writer(node.db, [["SELECT raft_status()"]])
            self.assertIn("no raftsql node runs", got[0]["error"])
        finally:
            for f in self.followers:
                os.kill(f.proc.pid, signal.SIGCONT)
        self.assertTrue(os.path.exists(node.db + "-raftsql"), "stale")
        i = self.cluster.nodes.index(node)
        self.cluster.nodes[i] = self.cluster.spawn(node.id)
        with open(node.db + "-raftsql") as f:
            self.assertIn("pid=%d\n" % self.cluster.nodes[i].proc.pid,
                          f.read(), "a new start replaces a stale file")
        got = writer(node.db, [["SELECT raft_status()"]])
        self.assertEqual(json.loads(got[0]["rows"][0][0])["id"], node.id)


    def test_interrupt_ends_the_wait(self):
        node = self.leader
        script = r"""
import sqlite3, sys, threading, time
con = sqlite3.connect(sys.argv[1], isolation_level=None,
                      check_same_thread=False)
con.enable_load_extension(True)
con.load_extension(sys.argv[2])
threading.Timer(1.0, con.interrupt).start()
t0 = time.monotonic()
try:
    con.execute("SELECT raft_exec('INSERT INTO kv VALUES(2, 2)')")
    print("applied")
except sqlite3.Error as e:
    print("%.1f %s" % (time.monotonic() - t0, e))
"""
        for f in self.followers:
            os.kill(f.proc.pid, signal.SIGSTOP)
        try:
            out = subprocess.run([PYTHON, "-c", script, node.db, SO_BASE],
                                 capture_output=True, text=True, timeout=60)
        finally:
            for f in self.followers:
                os.kill(f.proc.pid, signal.SIGCONT)
        took, _, msg = out.stdout.strip().partition(" ")
        self.assertIn("interrupted: outcome unknown", msg, out.stderr)
        self.assertLess(float(took), 3.0)

    def test_transfer_and_members_from_another_process(self):
        old = self.leader.id
        got = writer(self.leader.db, [["SELECT raft_transfer()"]])
        self.assertIn("rows", got[0], got[0])
        new = wait_for("another leader", lambda: (
            self.cluster.node(old).value("SELECT raft_leader()") or old)
            != old and self.cluster.node(old).value("SELECT raft_leader()"))
        got = writer(self.cluster.node(old).db, [
            ["SELECT id FROM raft_members WHERE leader = 1"]])
        self.assertEqual(got[0], {"rows": [[new]]})


class AttachSingleTest(unittest.TestCase):
    """One node in a directory every user may enter, for clients of
    another uid and for a long dir=."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-e2e-attach-")
        os.chmod(self.dir, 0o777)
        self.db = os.path.join(self.dir, "n.db")
        with open(self.db, "wb"):
            pass
        os.chmod(self.db, 0o666)
        self.node = None

    def tearDown(self):
        code = self.node.stop() if self.node is not None else 0
        if code != 0:
            with open(self.node.log_path, errors="replace") as f:
                sys.stderr.write(f.read()[-4000:])
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertEqual(code, 0, "the node exited with an error")

    def start(self, extra):
        port = free_ports(1)[0]
        self.node = Node(NODE, 1, self.db, os.path.join(self.dir, "n.log"))
        self.node.sql("SELECT raft_start(?)",
                      "id=1 cluster=1@127.0.0.1:%d %s" % (port, extra))
        wait_for("leader", lambda: self.node.value("SELECT raft_leader()"))
        self.node.sql("SELECT raft_exec('CREATE TABLE kv(k, v)')")

    def pointer(self):
        with open(self.db + "-raftsql") as f:
            return dict(line.strip().split("=", 1) for line in f
                        if "=" in line)

    def as_nobody(self, groups="-"):
        return ["setpriv", "--reuid=nobody", "--regid=nogroup",
                "--groups=" + groups if groups != "-" else "--clear-groups"]

    def test_owner_only_by_default(self):
        self.start("")
        sock = self.pointer()["socket"]
        self.assertEqual(os.stat(sock).st_mode & 0o777, 0o600)
        got = writer(self.db, [["SELECT raft_status()"]],
                     prefix=self.as_nobody())
        self.assertIn("cannot reach", got[0]["error"])
        self.assertIn("Permission denied", got[0]["error"])
        self.assertEqual(got[0]["code"], CODES["RAFTSQL_NO_NODE"])

    def test_socket_group_lets_the_group_in(self):
        self.start("socket_group=nogroup")
        sock = self.pointer()["socket"]
        st = os.stat(sock)
        self.assertEqual((st.st_mode & 0o777, st.st_gid), (0o660, 65534))
        got = writer(self.db, [
            ["SELECT raft_exec('INSERT INTO kv VALUES(1, 2)')"],
            ["SELECT v FROM kv"]], prefix=self.as_nobody())
        self.assertEqual(got, [{"rows": [[1]]}, {"rows": [[2]]}])

    def test_peer_credentials_refuse_another_user(self):
        # nobody reaches the socket through a supplementary group it
        # claims (daemon), but is no member of it: SO_PEERCRED refuses.
        self.start("socket_group=daemon")
        got = writer(self.db, [["SELECT raft_exec('INSERT INTO kv "
                                "VALUES(1, 2)')"]],
                     prefix=self.as_nobody("daemon"))
        self.assertIn("raft_exec: not applied: refused: the node of",
                      got[0]["error"])
        self.assertIn("uid 65534", got[0]["error"])
        self.assertEqual(got[0]["code"], CODES["RAFTSQL_NO_NODE"])
        self.assertEqual(self.node.value("SELECT count(*) FROM kv"), 0)
        with open(self.node.log_path, errors="replace") as f:
            self.assertIn("attach: refused a connection of uid 65534",
                          f.read())

    def test_long_dir_puts_the_socket_in_a_short_directory(self):
        long_dir = os.path.join(self.dir, "d" * 60, "e" * 60)
        os.makedirs(os.path.dirname(long_dir))
        self.start("dir=" + long_dir)
        sock = self.pointer()["socket"]
        self.assertTrue(sock.startswith("/tmp/raftsql-%d/" % os.geteuid()),
                        sock)
        self.assertEqual(os.stat(os.path.dirname(sock)).st_mode & 0o777,
                         0o700)
        got = writer(self.db, [
            ["SELECT raft_exec('INSERT INTO kv VALUES(1, 2)')"],
            ["SELECT v FROM kv"]])
        self.assertEqual(got, [{"rows": [[1]]}, {"rows": [[2]]}])
        self.node.sql("SELECT raft_stop()")
        self.assertFalse(os.path.exists(sock))
        self.assertFalse(os.path.exists(self.db + "-raftsql"))

    def test_raft_stop_from_another_process(self):
        self.start("")
        sock = self.pointer()["socket"]
        got = writer(self.db, [["SELECT raft_stop()"], ["SELECT raft_status()"]])
        self.assertEqual(got[0], {"rows": [["stopped"]]})
        self.assertIn("no raftsql node runs", got[1]["error"])
        self.assertFalse(os.path.exists(sock))
        self.assertFalse(os.path.exists(self.db + "-raftsql"))
        with self.assertRaises(NodeError):
            self.node.value("SELECT raft_status()")
        self.assertIsNone(self.node.proc.poll(), "the node's process lives")

    def test_malformed_frames_close_that_connection_only(self):
        self.start("")
        sock = self.pointer()["socket"]
        def frame(body):
            return struct.pack("<I", len(body)) + body
        for junk in (frame(b"hello"), b"\xff\xff\xff\xff",
                     frame(b'{"fn": 1}'),
                     frame(b'{"fn": "sqlite_version", "args": []}')):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
                c.settimeout(20)
                c.connect(sock)
                c.sendall(junk)
                try:
                    self.assertEqual(c.recv(100), b"", junk)
                except ConnectionResetError:
                    pass  # closed with bytes unread: also closed
        got = writer(self.db, [["SELECT raft_exec('INSERT INTO kv "
                                "VALUES(1, 2)')"]])
        self.assertEqual(got, [{"rows": [[1]]}])
        with open(self.node.log_path, errors="replace") as f:
            log = f.read()
        self.assertIn("attach: a malformed call", log)
        self.assertIn("sqlite_version is no raftsql function", log)

    def hold(self, n):
        """@n connections to the node's socket that send nothing: each
        holds one of its socket_max_clients until closed (or idle 10 s)."""
        held = []
        for _ in range(n):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            held.append(c)
            c.connect(self.pointer()["socket"])
        return held

    def refusals(self):
        """How many connections the node refused as over its limit (its
        DEBUG lines)."""
        with open(self.node.log_path, errors="replace") as f:
            return f.read().count("attach: busy: refused a connection")

    def test_callers_over_the_limit_wait_for_their_turn(self):
        """12 threads of another process writing at once through a node
        that serves socket_max_clients=4, while its 4 places are taken:
        each waits (its connection's busy timeout, 10 s) and every write
        succeeds, as SQLite's own writers wait for a lock."""
        self.start("socket_max_clients=4 log_level=debug")
        held = self.hold(4)
        proc = subprocess.Popen([PYTHON, "-c", THREADS, self.db, SO_BASE,
                                 "12", "5", "10"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            # Every place stays taken until the node refused callers a
            # dozen times (or the writers ended: today's main refuses at
            # once, and the errors below say so).
            wait_for("the node refuses callers over its limit", lambda:
                     self.refusals() >= 12 or proc.poll() is not None,
                     timeout=30)
        finally:
            for c in held:
                c.close()
        out, err = proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, 0, err)
        self.assertEqual(json.loads(out), [], "writes that failed")
        self.assertEqual(self.node.value("SELECT count(*) FROM kv"), 60)

    def test_a_caller_waits_no_longer_than_its_busy_timeout(self):
        """A caller over socket_max_clients waits its connection's busy
        timeout (Python's timeout=0.3), at most the node's
        exec_timeout_ms (1000 for timeout=10), then fails: busy, not
        applied, naming the limit and the wait; a read likewise."""
        self.start("socket_max_clients=4 exec_timeout_ms=1000")
        held = self.hold(4)
        try:
            t0 = time.monotonic()
            short = writer(self.db, [["SELECT raft_exec('INSERT INTO kv "
                                      "VALUES(1, 2)')"]], timeout_s=0.3)[0]
            t1 = time.monotonic()
            long_, read = writer(self.db, [
                ["SELECT raft_exec('INSERT INTO kv VALUES(1, 2)')"],
                ["SELECT raft_barrier()"]])
            t2 = time.monotonic()
        finally:
            for c in held:
                c.close()
        self.assertEqual(short["code"], CODES["RAFTSQL_BUSY"], short)
        self.assertEqual(short["code"] & 0xff, 5)  # SQLITE_BUSY
        self.assertRegex(short["error"], r"^raft_exec: not applied: busy: "
                         r"the node serves as many connections of other "
                         r"processes as it takes \(socket_max_clients=4\); "
                         r"none came free within 3\d\d ms \(this "
                         r"connection's busy timeout, at most the node's "
                         r"exec_timeout_ms=1000\); retry later$")
        self.assertGreaterEqual(t1 - t0, 0.3)
        for got in (long_, read):
            self.assertEqual(got["code"], CODES["RAFTSQL_BUSY"], got)
            self.assertIn("none came free within 1", got["error"])
        self.assertIn("raft_barrier: busy: the node serves", read["error"])
        self.assertGreaterEqual(t2 - t1, 2.0)
        self.assertEqual(self.node.value("SELECT count(*) FROM kv"), 0)

    def test_no_answer_to_a_read_is_no_outcome_unknown(self):
        """A read of a stopped node's state says no answer came within
        the wait; a write keeps "outcome unknown"."""
        self.start("exec_timeout_ms=1000")
        os.kill(self.node.proc.pid, signal.SIGSTOP)
        barrier = []
        try:
            # raft_barrier meanwhile: a read not made fresh, RAFTSQL_STALE.
            t = threading.Thread(target=lambda: barrier.extend(writer(
                self.db, [["SELECT raft_barrier()"]])))
            t.start()
            got = writer(self.db, [["SELECT raft_leader()"],
                                   ["SELECT raft_exec('INSERT INTO kv "
                                    "VALUES(1, 2)')"]])
            t.join(60)
        finally:
            os.kill(self.node.proc.pid, signal.SIGCONT)
        self.assertIn("raft_barrier: no answer from the raftsql node of %s "
                      "(pid %d) within 11 s" % (self.db, self.node.proc.pid),
                      barrier[0]["error"])
        self.assertEqual(barrier[0]["code"], CODES["RAFTSQL_STALE"])
        self.assertEqual(got[1]["code"], CODES["RAFTSQL_UNKNOWN"])
        self.assertIn("raft_leader: no answer from the raftsql node of %s "
                      "(pid %d) within 11 s" % (self.db, self.node.proc.pid),
                      got[0]["error"])
        self.assertNotIn("outcome unknown", got[0]["error"])
        self.assertIn("raft_exec: outcome unknown: no answer in time",
                      got[1]["error"])

    def test_socket_off(self):
        self.start("socket=off")
        self.assertFalse(os.path.exists(self.db + "-raftsql"))
        got = writer(self.db, [["SELECT raft_status()"]])
        self.assertIn("no raftsql node runs", got[0]["error"])


if __name__ == "__main__":
    unittest.main()
