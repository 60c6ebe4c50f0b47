"""End-to-end: a raft_start that fails leaves nothing it created (so that
a corrected raft_start begins afresh): no <db>-raft directory (nor a
dir= directory it made) after a port in use, a bad key or bad TLS files;
and the failed restart of an existing node keeps its data. The node runs
in this process (build/raftsql.so).
"""

import grp
import os
import shutil
import socket
import sqlite3
import tempfile
import time
import unittest

import threading

from e2e import NODE, connect  # noqa: E402
from raftsql_cluster import Node, NodeError  # noqa: E402

TIMING = "election_timeout_ms=300 heartbeat_ms=30"


def occupy():
    """A listening socket on a free loopback port; returns it and the
    port."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s, s.getsockname()[1]


class FailedStartTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-start-")
        self.db = os.path.join(self.dir, "node1.db")
        self.con = connect(self.db)
        self.blocker, self.port = occupy()

    def tearDown(self):
        self.blocker.close()
        try:
            self.con.execute("SELECT raft_stop()")
        except sqlite3.Error:
            pass
        self.con.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, extra=""):
        self.con.execute("SELECT raft_start(?)", ("id=1 cluster=1@127.0.0.1:"
                                                  "%d %s %s" % (
                                                      self.port, TIMING,
                                                      extra),))

    def start_fails(self, extra, message):
        with self.assertRaises(sqlite3.OperationalError) as e:
            self.start(extra)
        self.assertIn(message, str(e.exception))

    def leader(self):
        deadline = time.monotonic() + 10
        while self.con.execute("SELECT raft_leader()").fetchone()[0] != 1:
            self.assertLess(time.monotonic(), deadline, "no leader")
            time.sleep(0.05)

    def test_port_in_use_leaves_no_log_directory(self):
        self.start_fails("", "address already in use")
        # The database keeps its WAL (the start switched it, and the
        # test's connection holds it open): nothing else stays.
        self.assertEqual(sorted(f for f in os.listdir(self.dir)
                                if not f.endswith(("-wal", "-shm"))),
                         ["node1.db"])
        # The next start, with the port free, is a first start as any.
        self.blocker.close()
        self.start()
        self.leader()
        self.con.execute("SELECT raft_exec('CREATE TABLE t(x)')")
        self.assertTrue(os.path.isdir(self.db + "-raft"))

    def test_port_in_use_leaves_a_plain_database(self):
        """The start made the empty database a replica (its raftsql_*
        tables) before the port refused it: they go too, so the file is
        a plain database again, which this process (raftsql loaded)
        writes as any, not a replica that no node serves."""
        self.start_fails("", "address already in use")
        names = [r[0] for r in self.con.execute(
            "SELECT name FROM sqlite_master")]
        self.assertEqual(names, [], "left by the failed start")
        self.con.execute("CREATE TABLE t(x)")
        self.con.execute("INSERT INTO t VALUES (1)")
        self.con.commit()
        self.assertEqual(self.con.execute(
            "SELECT count(*) FROM t").fetchone()[0], 1)

    def test_port_in_use_keeps_a_replica_a_replica(self):
        """A replica's failed restart drops nothing (its tables were
        there before it)."""
        self.blocker.close()
        self.start()
        self.leader()
        self.con.execute("SELECT raft_exec('CREATE TABLE t(x)')")
        self.con.execute("SELECT raft_stop()")
        self.blocker, _ = occupy_port(self.port)
        self.start_fails("", "address already in use")
        names = {r[0] for r in self.con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        self.assertIn("raftsql_applied", names)
        self.assertIn("t", names)

    def test_two_starts_on_one_file_leave_one_node(self):
        """Two processes start a node on one fresh file at once (a web
        app's workers each calling raft_start): one runs, the other is
        refused, and the file stays the running node's replica. The first
        start is held after it opened the database (a test build's
        delay): the second one's failed start dropped the raftsql_*
        tables the first had made and was using (new-user trial: the
        running node then called itself diverged, for good); now a start
        takes the log directory's lock before it opens the database."""
        self.blocker.close()
        config = "id=1 cluster=1@127.0.0.1:%d %s" % (self.port, TIMING)
        first = Node(NODE, 1, self.db, os.path.join(self.dir, "first.log"),
                     env={"RAFTSQL_TEST_START_OPEN_DELAY_MS": "1500"})
        second = Node(NODE, 1, self.db, os.path.join(self.dir, "second.log"))
        self.addCleanup(second.stop)
        self.addCleanup(first.stop)
        outcome = {}

        def start_first():
            try:
                outcome["first"] = first.value("SELECT raft_start(?)", config)
            except NodeError as e:
                outcome["first"] = e

        t = threading.Thread(target=start_first)
        t.start()

        def made():
            try:
                return self.con.execute(
                    "SELECT count(*) FROM sqlite_master WHERE name = "
                    "'raftsql_applied'").fetchone()[0] == 1
            except sqlite3.Error:
                return False
        deadline = time.monotonic() + 10
        while not made():
            self.assertLess(time.monotonic(), deadline,
                            "the first start made no raftsql_applied")
            time.sleep(0.01)
        try:
            outcome["second"] = second.value("SELECT raft_start(?)", config)
        except NodeError as e:
            outcome["second"] = e
        t.join(30)
        self.assertFalse(t.is_alive(), "the first start did not return")
        ok = [k for k, v in outcome.items() if not isinstance(v, Exception)]
        self.assertEqual(len(ok), 1, outcome)
        failed = outcome["second" if ok == ["first"] else "first"]
        self.assertIn("another process runs a node", str(failed))
        node = first if ok == ["first"] else second
        deadline = time.monotonic() + 10
        while node.value("SELECT raft_leader()") != 1:
            self.assertLess(time.monotonic(), deadline, "no leader")
            time.sleep(0.05)
        node.value("SELECT raft_exec('CREATE TABLE t(x)')")
        node.value("SELECT raft_exec('INSERT INTO t VALUES (1)')")
        st = node.status()
        self.assertFalse(st.get("diverged"), st)
        self.assertEqual(node.value("SELECT count(*) FROM t"), 1)

    def test_port_in_use_leaves_no_dir_it_made(self):
        made = os.path.join(self.dir, "log")
        self.start_fails("dir=" + made, "address already in use")
        self.assertFalse(os.path.exists(made))
        self.assertFalse(os.path.exists(self.db + "-raft"))

    def test_port_in_use_keeps_a_dir_that_existed(self):
        given = os.path.join(self.dir, "log")
        os.mkdir(given)
        with open(os.path.join(given, "mine"), "w") as f:
            f.write("the operator's")
        self.start_fails("dir=" + given, "address already in use")
        with open(os.path.join(given, "mine")) as f:
            self.assertEqual(f.read(), "the operator's")

    def test_bad_key_or_tls_files_leave_nothing(self):
        self.start_fails("bogus=1", "unknown key 'bogus'")
        missing = os.path.join(self.dir, "missing.pem")
        self.start_fails("tls_cert=%s tls_key=%s tls_ca=%s" % (
            missing, missing, missing), "tls_cert")
        self.assertEqual(sorted(os.listdir(self.dir)), ["node1.db"])

    def test_socket_directory_not_ours_leaves_nothing(self):
        """A socket directory of the wrong mode and group refuses the
        start, naming what it found and what it wants, and the start
        leaves no log directory (nor a dir= one it made) behind."""
        group = grp.getgrnam("games").gr_gid  # a group no other test uses
        sock_dir = "/tmp/raftsql-%d-g%d" % (os.geteuid(), group)
        shutil.rmtree(sock_dir, ignore_errors=True)
        os.mkdir(sock_dir)
        os.chmod(sock_dir, 0o777)
        self.addCleanup(shutil.rmtree, sock_dir, True)
        self.blocker.close()
        self.start_fails(
            "socket_group=games",
            "socket directory %s is not ours: found a directory of uid %d, "
            "group %d, mode 0777; wanted a directory of uid %d, mode 0750, "
            "group %d (socket_group): remove it" % (
                sock_dir, os.geteuid(), os.getegid(), os.geteuid(), group))
        # The database keeps the WAL its start switched it to (this
        # connection holds it open); nothing else stays.
        def left():
            return sorted(f for f in os.listdir(self.dir)
                          if not f.endswith(("-wal", "-shm")))
        self.assertEqual(left(), ["node1.db"])
        made = os.path.join(self.dir, "log")
        self.start_fails("socket_group=games dir=" + made, "is not ours")
        self.assertEqual(left(), ["node1.db"])

    def test_failed_restart_keeps_the_data(self):
        self.blocker.close()
        self.start()
        self.leader()
        self.con.execute("SELECT raft_exec('CREATE TABLE t(x)')")
        self.con.execute("SELECT raft_exec('INSERT INTO t VALUES(7)')")
        self.con.execute("SELECT raft_stop()")
        log = sorted(os.listdir(self.db + "-raft"))
        self.blocker, _ = occupy_port(self.port)
        self.start_fails("", "address already in use")
        self.assertEqual(sorted(os.listdir(self.db + "-raft")), log)
        self.blocker.close()
        self.start()
        self.leader()
        self.con.execute("SELECT raft_exec('INSERT INTO t VALUES(8)')")
        self.assertEqual(self.con.execute(
            "SELECT x FROM t ORDER BY x").fetchall(), [(7,), (8,)])


def occupy_port(port):
    """A listening socket on loopback @port (just freed by a node)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen()
    return s, port


if __name__ == "__main__":
    unittest.main()
