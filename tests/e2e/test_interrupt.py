"""End-to-end: an interrupted caller stops waiting.

sqlite3_interrupt() on the caller's connection ends a waiting raft_exec
within EXT_EXEC_POLL_MS (50 ms), whatever exec_timeout_ms says: from
Python (Connection.interrupt()) and from the sqlite3 shell (^C, typed under
tmux). Node 1 runs in this process or in the shell; nodes 2 and 3 are
raftsql-testhost processes.
"""

import os
import shutil
import sqlite3
import subprocess
import tempfile
import threading
import time
import unittest

from e2e import SO, connect, start_peers  # noqa: E402
from raftsql_cluster import free_ports  # noqa: E402

# exec_timeout_ms is a minute: any return well before it is the interrupt.
TIMING = ("election_timeout_ms=300 heartbeat_ms=30 exec_timeout_ms=60000 "
          "max_request_steps=0")
RUNAWAY = ("INSERT INTO t SELECT x FROM (WITH RECURSIVE c(x) AS "
           "(SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT x FROM c)")
# Generous for sanitizer builds on a busy machine; the wait it ends would
# last exec_timeout_ms (60 s).
BOUND_S = 2.0


class InterruptTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-intr-")
        self.ports = free_ports(3)
        self.members = ",".join("%d@127.0.0.1:%d" % (i + 1, p)
                                for i, p in enumerate(self.ports))
        self.peers = []
        self.con = None

    def tearDown(self):
        if self.con is not None:
            self.con.execute("SELECT raft_stop()")
            self.con.close()
        codes = [n.stop() for n in self.peers]
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertEqual(codes, [0] * len(codes))

    def start_peers(self):
        self.peers = start_peers(self.dir, self.members, TIMING)

    def start_here(self):
        self.con = connect(os.path.join(self.dir, "node1.db"))
        self.con.execute("SELECT raft_start(?)", ("id=1 cluster=%s %s" % (
            self.members, TIMING),))

    def interrupted_exec(self, sql):
        """Run raft_exec(sql) on self.con, interrupting it after 0.5 s;
        return (the error text, seconds from the interrupt to return)."""
        fired = []

        def interrupt():
            time.sleep(0.5)
            fired.append(time.monotonic())
            self.con.interrupt()

        th = threading.Thread(target=interrupt)
        th.start()
        with self.assertRaises(sqlite3.OperationalError) as cm:
            self.con.execute("SELECT raft_exec(?)", (sql,))
        back = time.monotonic()
        th.join()
        return str(cm.exception), back - fired[0]

    def test_python_interrupt_outcome_unknown(self):
        """A write that entered the log but is not applied yet (a request
        without end, no budget): Connection.interrupt() ends the wait with
        'interrupted: outcome unknown'."""
        self.start_here()
        self.start_peers()
        deadline = time.monotonic() + 15
        while self.con.execute("SELECT raft_leader()").fetchone()[0] is None:
            self.assertLess(time.monotonic(), deadline, "no leader")
            time.sleep(0.05)
        self.con.execute("SELECT raft_exec('CREATE TABLE t(x)')")
        text, took = self.interrupted_exec(RUNAWAY)
        self.assertIn("interrupted: outcome unknown", text)
        self.assertLess(took, BOUND_S)
        # The connection works again afterwards.
        self.assertEqual(self.con.execute("SELECT 1").fetchone()[0], 1)

    def test_python_interrupt_not_applied(self):
        """No leader to be had (the other nodes never started): the
        interrupted write never left this node: 'interrupted: not
        applied'."""
        self.start_here()
        text, took = self.interrupted_exec("CREATE TABLE t(x)")
        self.assertIn("interrupted: not applied", text)
        self.assertLess(took, BOUND_S)

    def test_shell_ctrl_c(self):
        """^C in the sqlite3 shell ends a waiting raft_exec."""
        if shutil.which("tmux") is None or shutil.which("sqlite3") is None:
            self.skipTest("tmux and sqlite3 are needed (make deps)")
        sess = "raftsql-intr-%d" % os.getpid()
        db = os.path.join(self.dir, "shell.db")
        subprocess.run(["tmux", "new-session", "-d", "-s", sess, "-x", "200",
                        "-y", "50", "sqlite3", db], check=True)
        try:
            def keys(text=None, key="Enter"):
                # Text literally, then the key. An argument ending in ';'
                # would end the tmux command: a space follows it.
                if text is not None:
                    subprocess.run(["tmux", "send-keys", "-t", sess, "-l",
                                    text + " "], check=True)
                subprocess.run(["tmux", "send-keys", "-t", sess, key],
                               check=True)

            def screen():
                return subprocess.run(
                    ["tmux", "capture-pane", "-p", "-t", sess],
                    check=True, capture_output=True, text=True).stdout

            def wait_for(text, limit):
                end = time.monotonic() + limit
                while time.monotonic() < end:
                    if text in screen():
                        return True
                    time.sleep(0.05)
                return False

            keys(".load %s" % os.path.splitext(SO)[0])
            keys("SELECT raft_start('id=1 cluster=%s %s');" % (
                self.members, TIMING))
            self.assertTrue(wait_for("sqlite>", 10), screen())
            keys("SELECT raft_exec('CREATE TABLE t(x)');")
            time.sleep(0.5)
            t0 = time.monotonic()
            keys(key="C-c")
            self.assertTrue(wait_for("interrupted: not applied", 10),
                            screen())
            self.assertLess(time.monotonic() - t0, BOUND_S + 1)
            keys(".quit")
        finally:
            subprocess.run(["tmux", "kill-session", "-t", sess],
                           capture_output=True)


if __name__ == "__main__":
    unittest.main()
