"""The raftsql-node daemon: a node configured from a file,
stopped by SIGTERM (a leader hands its leadership on first), SIGHUP
reloads TLS, bad configurations exit 2 naming the line.

The cluster is two daemons (nodes 1 and 2, the sanitizer build:
RAFTSQL_DAEMON) and one raftsql-testhost (node 3), through which the
writes go; each daemon's database is read with a plain read-only sqlite3
connection of this process.
"""

import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import time
import unittest

from certs import CA
from e2e import DAEMON, NODE, wait_for
from raftsql_cluster import Node, free_ports

FAST = {"election_timeout_ms": "300", "heartbeat_ms": "30",
        "exec_timeout_ms": "10000"}


def read_rows(db, sql):
    """Rows of @sql on the database file @db, opened read-only without
    raftsql; [] while the table does not exist yet."""
    con = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=10)
    try:
        return con.execute(sql).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        con.close()


def read_text(path):
    with open(path, errors="replace") as f:
        return f.read()


class Daemon:
    """One raftsql-node process, configured by a file in @workdir."""

    def __init__(self, workdir, node_id, lines, env=None):
        self.id = node_id
        self.env = env  # the process's environment, None for this one's
        self.db = os.path.join(workdir, "node%d.db" % node_id)
        self.conf = os.path.join(workdir, "node%d.conf" % node_id)
        self.log_path = os.path.join(workdir, "node%d.log" % node_id)
        with open(self.conf, "w") as f:
            f.write("# node %d of the daemon test\n" % node_id)
            f.write("database = %s\n\n" % self.db)
            for line in lines:
                f.write(line + "\n")
        self.proc = None
        self.start()

    def start(self):
        # A SIGTERM sent by signal(): the stop runs; stop() waits for it
        # rather than send a second one, which exits at once with 1.
        self.sigterm_sent = False
        self.proc = self.launch()

    def launch(self):
        """Start the daemon process; return its Popen."""
        with open(self.log_path, "ab") as log:
            return subprocess.Popen([DAEMON, "--config", self.conf],
                                    stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=log, env=self.env)

    def log(self):
        return read_text(self.log_path)

    def signal(self, sig):
        self.proc.send_signal(sig)
        self.sigterm_sent = self.sigterm_sent or sig == signal.SIGTERM

    def wait(self, timeout):
        """Wait for the exit within @timeout s; return the exit status."""
        return self.proc.wait(timeout)

    def stop(self, timeout=20):
        """SIGTERM (unless signal() sent one: that stop runs already) and
        wait; SIGKILL after @timeout s. Returns the exit status."""
        if self.proc.poll() is None:
            if not self.sigterm_sent:
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def end_process(p):
    """SIGKILL @p if it still runs, and reap it."""
    if p.poll() is None:
        p.kill()
        p.wait()


def run_daemon(*args, timeout=20):
    """Run raftsql-node with @args to its end; return (status, stderr)."""
    p = subprocess.run([DAEMON, *args], stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=timeout)
    return p.returncode, p.stderr.decode(errors="replace")


class DaemonCluster(unittest.TestCase):
    """Nodes 1 and 2 are daemons, node 3 a testhost, with the timing keys
    of self.timing."""

    timing = FAST

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-e2e-daemon-")
        ports = free_ports(3)
        self.members = ",".join("%d@127.0.0.1:%d" % (i + 1, p)
                                for i, p in enumerate(ports))
        keys = ["%s = %s" % kv for kv in self.timing.items()]
        self.daemons = {}
        for i in (1, 2):
            self.daemons[i] = Daemon(self.dir, i, [
                "id=%d" % i, "cluster = %s   # the first start" %
                self.members] + keys)
        self.host = Node(NODE, 3, os.path.join(self.dir, "node3.db"),
                         os.path.join(self.dir, "node3.log"))
        self.host.sql("SELECT raft_start(?)", "id=3 cluster=%s %s" % (
            self.members,
            " ".join("%s=%s" % kv for kv in self.timing.items())))
        self.host.sql("SELECT raft_exec(?)",
                      "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")

    def tearDown(self):
        codes = [d.stop() for d in self.daemons.values()]
        codes.append(self.host.stop())
        if codes != [0, 0, 0]:
            for d in self.daemons.values():
                print(d.log()[-4000:])
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertEqual(codes, [0, 0, 0], "a node exited with an error "
                         "(sanitizer report in its log)")

    def leader(self):
        return self.host.value("SELECT raft_leader()")

    def write(self, v):
        self.assertEqual(self.host.value(
            "SELECT raft_exec('INSERT INTO t(v) VALUES(?)', ?)", v), 1)

    def wait_rows(self, daemon, rows, timeout=30):
        wait_for("node %d holds %r" % (daemon.id, rows),
                 lambda: read_rows(daemon.db, "SELECT v FROM t ORDER BY id")
                 == rows, timeout)

    def daemon_leader(self):
        """Make a daemon lead; return it."""
        leader = wait_for("a leader", self.leader)
        if leader == 3:
            self.host.value("SELECT raft_transfer(1)")
            wait_for("node 1 leads", lambda: self.leader() == 1)
            leader = 1
        return self.daemons[leader]



class DaemonClusterTest(DaemonCluster):

    def test_sigterm_hands_leadership_over_and_restart_catches_up(self):
        """SIGTERM on the leader daemon: it hands the leadership to
        another voter, exits 0 within the bound, says so in its log; its
        restart from the same file catches up on what it missed."""
        self.write("a")
        old = self.daemon_leader()
        self.wait_rows(old, [("a",)])
        old.signal(signal.SIGTERM)
        self.assertEqual(old.wait(15), 0, old.log())
        log = old.log()
        self.assertIn("SIGTERM: stopping the node", log)
        handed = re.search(r"stopping: leadership handed to server (\d+)",
                           log)
        self.assertIsNotNone(handed, log)
        self.assertNotEqual(int(handed.group(1)), old.id)
        self.assertIn("raftsql-node: stopped; exiting", log)
        wait_for("a new leader",
                 lambda: self.leader() not in (None, old.id), 10)
        self.write("b")
        self.write("c")
        old.start()
        self.wait_rows(old, [("a",), ("b",), ("c",)])
        other = self.daemons[3 - old.id]
        self.wait_rows(other, [("a",), ("b",), ("c",)])

    def test_sighup_reloads_tls_and_keeps_running(self):
        """SIGHUP runs raft_tls_reload() (here: TLS is off, which it says)
        and the daemon keeps its node: it still applies writes."""
        d = self.daemons[2]
        d.signal(signal.SIGHUP)
        wait_for("the reload line", lambda: "SIGHUP: raft_tls_reload()"
                 in d.log(), 10)
        self.assertIn("TLS is off", d.log())
        self.write("after-hup")
        self.wait_rows(d, [("after-hup",)])
        self.assertIsNone(d.proc.poll())


class DaemonSlowStopTest(DaemonCluster):
    """A stop that waits for a transfer nobody answers."""

    timing = {"election_timeout_ms": "3000", "heartbeat_ms": "100",
              "exec_timeout_ms": "10000"}

    def test_second_sigterm_exits_at_once(self):
        """A second SIGTERM while the leader waits for its transfer exits
        1 at once, saying so; the node restarts from its log and
        database and catches up."""
        self.write("a")
        old = self.daemon_leader()
        self.wait_rows(old, [("a",)])
        others = [d.proc for d in self.daemons.values() if d is not old]
        others.append(self.host.proc)
        for p in others:
            p.send_signal(signal.SIGSTOP)
        try:
            old.signal(signal.SIGTERM)
            wait_for("the stop begins",
                     lambda: "SIGTERM: stopping the node" in old.log(), 10)
            time.sleep(0.2)
            self.assertIsNone(old.proc.poll(), "the stop did not wait for "
                              "the transfer: " + old.log())
            t0 = time.monotonic()
            old.signal(signal.SIGTERM)
            self.assertEqual(old.wait(2), 1, old.log())
            self.assertLess(time.monotonic() - t0, 2)
        finally:
            for p in others:
                p.send_signal(signal.SIGCONT)
        self.assertIn("SIGTERM again during the stop: exiting at once",
                      old.log())
        self.write("b")
        old.start()
        self.wait_rows(old, [("a",), ("b",)])


class DaemonConfigTest(unittest.TestCase):
    """Configuration files: errors exit 2 naming the file and line."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-e2e-daemon-conf-")
        self.db = os.path.join(self.dir, "app.db")
        self.port = free_ports(1)[0]
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)

    def conf(self, text):
        path = os.path.join(self.dir, "node.conf")
        with open(path, "w") as f:
            f.write(text)
        return path

    def good(self):
        return ("# a comment\n\ndatabase = %s\nid=1\n"
                "cluster = 1@127.0.0.1:%d  # trailing comment\n"
                % (self.db, self.port))

    def test_check_accepts_a_good_file_and_starts_nothing(self):
        """--check on a good file exits 0 and creates no database."""
        code, err = run_daemon("--config", self.conf(self.good()), "--check")
        self.assertEqual(code, 0, err)
        self.assertIn("good", err)
        self.assertFalse(os.path.exists(self.db))
        self.assertFalse(os.path.exists(self.db + "-raft"))

    def test_log_of_another_server_exits_2(self):
        """A node's files started again under another id (two
        configuration files swapped): --check and the start both exit 2
        naming both ids, before anything is written (a new user's
        --check said good, and the start then failed with exit 1, which
        systemd restarts every 2 s)."""
        path = self.conf(self.good())
        log = os.path.join(self.dir, "node.log")
        with open(log, "w") as out:
            p = subprocess.Popen([DAEMON, "--config", path],
                                 stdin=subprocess.DEVNULL, stderr=out)
        try:
            def started():
                with open(log) as f:
                    return "started" in f.read()
            wait_for("node 1 started", started)
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=20)
        path = self.conf("database = %s\nid = 2\ncluster = 2@127.0.0.1:%d\n"
                         % (self.db, self.port))
        for args in (["--check"], []):
            code, err = run_daemon("--config", path, *args)
            self.assertEqual(code, 2, err)
            self.assertIn("belongs to server 1 (it first started with id=1), "
                          "and this start gives id=2", err)
        code, err = run_daemon("--config", self.conf(self.good()), "--check")
        self.assertEqual(code, 0, err)

    def assert_bad(self, text, where, what):
        path = self.conf(text)
        for args in (["--check"], []):
            code, err = run_daemon("--config", path, *args)
            self.assertEqual(code, 2, err)
            self.assertIn("%s%s: " % (path, where), err)
            self.assertIn(what, err)
        self.assertFalse(os.path.exists(self.db))

    def test_tls_files_that_would_fail_the_start_exit_2(self):
        """A certificate its tls_ca did not sign, and a key that is not
        the certificate's: exit 2 naming the tls_cert (or tls_key) line,
        with --check and at the start (which exited 1 before, after
        creating nothing, and systemd restarted it every 2 s)."""
        ca, other = CA(os.path.join(self.dir, "a")), \
            CA(os.path.join(self.dir, "b"))
        cert, key = ca.issue("node1", ["127.0.0.1"])
        _, other_key = other.issue("node1", ["127.0.0.1"])
        good = self.good()
        self.assert_bad(good + "tls_cert = %s\ntls_key = %s\ntls_ca = %s\n"
                        % (cert, key, other.cert), ":6",
                        "tls_cert: %s: not signed by tls_ca %s" %
                        (cert, other.cert))
        self.assert_bad(good + "tls_cert = %s\ntls_key = %s\ntls_ca = %s\n"
                        % (cert, other_key, ca.cert), ":7",
                        "tls_key: %s: does not match tls_cert %s" %
                        (other_key, cert))

    def test_bad_files_exit_2_naming_the_line(self):
        """Each bad file: exit 2 (with and without --check), one line
        naming the file, the line when there is one, and what is wrong;
        nothing created."""
        good = self.good()
        cases = [
            (good + "\nelection_timeout = 3\n", ":7",
             "unknown key 'election_timeout'"),
            ("id=1\ncluster=1@127.0.0.1:%d\n" % self.port, "",
             "database: missing"),
            (good + "heartbeat_ms 30\n", ":6",
             "'heartbeat_ms 30' is not `key = value`"),
            (good + "heartbeat_ms = soon\n", ":6",
             "heartbeat_ms: 'soon' is not an integer"),
            (good + "id = 2\n", ":6", "id: given twice (first on line 4)"),
            (good + "dir = /tmp/a b\n", ":6",
             "dir: the value '/tmp/a b' holds a blank"),
            (good + 'dir = "/tmp/ab\n', ":6",
             'dir: the value "/tmp/ab opens a double quote but does not '
             'end with one'),
            (good + 'dir = ""\n', ":6", "dir: no value"),
        ]
        for text, where, what in cases:
            with self.subTest(what=what):
                self.assert_bad(text, where, what)

    def test_paths_the_start_needs(self):
        """A database in a directory that does not exist, or a log
        directory that cannot be created, is bad (exit 2, the line and
        the path named), as the start would find it; nothing is
        created."""
        cluster = "id=1\ncluster = 1@127.0.0.1:%d\n" % self.port
        self.assert_bad("database = /nonexistent/dir/x.db\n" + cluster, ":1",
                        "database: the directory /nonexistent/dir of "
                        "/nonexistent/dir/x.db does not exist")
        log = os.path.join(self.dir, "no", "log")
        self.assert_bad(self.good() + "dir = %s\n" % log, ":6",
                        "dir: the directory %s of the log directory %s "
                        "does not exist" % (os.path.dirname(log), log))
        self.assertFalse(os.path.exists(os.path.dirname(log)))

    def test_blank_inside_cluster_list(self):
        """A blank inside the cluster= list is named as such (not "rename
        the path"); tests/ext/test_config covers raft_start's string."""
        text = ("database = %s\nid=1\ncluster = 1@127.0.0.1:%d, "
                "2@127.0.0.1:%d\n" % (self.db, self.port, self.port + 1))
        self.assert_bad(text, ":3", "cluster: a blank inside the list "
                        "'1@127.0.0.1:%d, 2@127.0.0.1:%d': write its entries "
                        "separated by commas only" % (self.port, self.port + 1))
        code, err = run_daemon("--config", self.conf(text), "--check")
        self.assertNotIn("rename the path", err)

    def test_double_quotes_and_a_byte_order_mark(self):
        """A value in double quotes loses them, and a UTF-8 byte order
        mark at the start of the file is skipped: the node starts on the
        unquoted database path and log directory."""
        log_dir = os.path.join(self.dir, "log")
        text = ('\ufeffdatabase = "%s"\nid = 1\ncluster = '
                '"1@127.0.0.1:%d"\ndir = "%s"\n'
                % (self.db, self.port, log_dir))
        code, err = run_daemon("--config", self.conf(text), "--check")
        self.assertEqual(code, 0, err)
        p, _ = self.run_one(text)
        self.assertTrue(os.path.exists(self.db))
        self.assertTrue(os.path.isdir(log_dir))
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(20), 0)

    def test_usage_errors_exit_2(self):
        for args in ([], ["--config"], ["--bogus"]):
            code, err = run_daemon(*args)
            self.assertEqual(code, 2, (args, err))
            self.assertIn("usage:", err)
        code, err = run_daemon("--config",
                               os.path.join(self.dir, "missing.conf"))
        self.assertEqual(code, 2, err)
        self.assertIn("missing.conf: cannot open", err)

    def test_help_and_version(self):
        for arg in ("--help", "--version"):
            p = subprocess.run([DAEMON, arg], capture_output=True,
                               timeout=20)
            self.assertEqual(p.returncode, 0)
        self.assertIn(sqlite3.sqlite_version, p.stdout.decode())
        self.assertRegex(p.stdout.decode(), r"^raftsql-node \d+\.\d+\.\d+; ")

    def test_failed_start_exits_1(self):
        """A port taken by another process: exit 1 with the reason."""
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(1)
        try:
            code, err = run_daemon("--config", self.conf(self.good()))
        finally:
            s.close()
        self.assertEqual(code, 1, err)
        self.assertIn("cannot start: raft_start:", err)

    def run_one(self, text):
        """Start a daemon on @text (a file); return (process, log path)."""
        log_path = os.path.join(self.dir, "node.log")
        with open(log_path, "wb") as log:
            p = subprocess.Popen([DAEMON, "--config", self.conf(text)],
                                 stdin=subprocess.DEVNULL, stdout=log,
                                 stderr=log)
        self.addCleanup(end_process, p)
        wait_for("the node starts",
                 lambda: "node 1 started" in read_text(log_path), 20)
        return p, log_path

    def test_sighup_reloads_certificates(self):
        """With certificates, SIGHUP re-reads them: the daemon logs the
        file loaded and its expiry, and keeps running."""
        ca = CA(self.dir)
        cert, key = ca.issue("node1", ["127.0.0.1"])
        p, log_path = self.run_one(
            self.good() + "tls_cert = %s\ntls_key = %s\ntls_ca = %s\n"
            % (cert, key, ca.cert))
        p.send_signal(signal.SIGHUP)
        wait_for("the reload line", lambda: "SIGHUP: raft_tls_reload(): "
                 "loaded tls_cert %s" % cert in read_text(log_path), 10)
        self.assertIsNone(p.poll())
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(15), 0, read_text(log_path))

    def test_sigint_stops_a_single_node(self):
        """SIGINT (^C) stops as SIGTERM does: exit 0."""
        p, log_path = self.run_one(self.good() + "election_timeout_ms=300\n"
                                   "heartbeat_ms=30\n")
        p.send_signal(signal.SIGINT)
        self.assertEqual(p.wait(15), 0)
        text = read_text(log_path)
        self.assertIn("SIGINT: stopping the node", text)
        self.assertIn("raftsql[1] INFO: stopped", text)

if __name__ == "__main__":
    unittest.main()
