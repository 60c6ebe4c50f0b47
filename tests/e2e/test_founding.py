"""The founding keys of raftsql-node daemons: cluster=, join= and
bootstrap_from= found or enter a cluster at a node's first start, and are
ignored (a WARN line naming the difference) once the node has a log, so
that a daemon restarted with its unchanged file after any membership
change comes back and serves. A founder whose log was wiped while its
database holds the cluster's data founds nothing: it refuses, saying how
to replace the member, and the replacement it names (raft_remove, then
join= with an empty database) works.

Every node is a raftsql-node daemon (the sanitizer build: RAFTSQL_DAEMON)
on 127.0.0.1, configured by a file; this process reads and writes through
each daemon's Unix socket (a connection with raftsql loaded, no
raft_start).
"""

import os
import shutil
import signal
import sqlite3
import tempfile
import time
import unittest

from e2e import connect, wait_for
from raftsql_cluster import free_ports
from test_daemon import Daemon, read_rows

TIMING = ["election_timeout_ms = 300", "heartbeat_ms = 30",
          "exec_timeout_ms = 5000", "log_level = info"]


def call(db, sql, *params):
    """Run @sql on a new connection to @db (raftsql loaded); return the
    first column of the first row."""
    con = connect(db)
    try:
        return con.execute(sql, params).fetchone()[0]
    finally:
        con.close()


class FoundingTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-e2e-founding-")
        self.ports = free_ports(4)
        self.members = ",".join("%d@127.0.0.1:%d" % (i + 1, p)
                                for i, p in enumerate(self.ports[:3]))
        self.daemons = {}

    def tearDown(self):
        codes = {i: d.stop() for i, d in self.daemons.items()}
        bad = {i: c for i, c in codes.items() if c != 0}
        for i in bad:
            print("--- daemon %d\n%s" % (i, self.daemons[i].log()[-4000:]))
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertEqual(bad, {}, "a daemon exited with an error "
                         "(sanitizer report in its log)")

    # ---- helpers ------------------------------------------------------

    def address(self, i):
        return "127.0.0.1:%d" % self.ports[i - 1]

    def daemon(self, i, lines):
        d = Daemon(self.dir, i, ["id = %d" % i] + lines + TIMING)
        self.daemons[i] = d
        return d

    def founders(self):
        for i in (1, 2, 3):
            self.daemon(i, ["cluster = %s" % self.members])
        self.write(self.daemons[1], "CREATE TABLE t(v TEXT)")

    def write(self, d, sql, *params, timeout=30.0):
        """raft_exec(@sql, @params) through daemon @d, retried while it
        starts or has no leader yet; fails at once, with its log, once
        the daemon exited."""
        last = []

        def done():
            if d.proc.poll() is not None:
                self.fail("daemon %d exited %d:\n%s" % (
                    d.id, d.proc.returncode, d.log()[-3000:]))
            try:
                call(d.db, "SELECT raft_exec(?%s)" % (", ?" * len(params)),
                     sql, *params)
                return True
            except sqlite3.Error as e:
                last[:] = [str(e)]
                return False
        try:
            wait_for("a write through daemon %d" % d.id, done, timeout)
        except TimeoutError:
            self.fail("no write through daemon %d within %.0f s: %s\n%s" % (
                d.id, timeout, last, d.log()[-3000:]))

    def members_of(self, d):
        """{id: role} of the configuration daemon @d serves."""
        con = connect(d.db)
        try:
            return dict(con.execute("SELECT id, role FROM raft_members"))
        finally:
            con.close()

    def wait_voters(self, d, ids):
        def seen():
            try:
                return self.members_of(d) == {i: "voter" for i in ids}
            except sqlite3.Error:
                return False
        wait_for("voters %s on daemon %d" % (ids, d.id), seen, 30)

    def restart(self, d, kill=False):
        """Stop daemon @d (SIGTERM, or SIGKILL when @kill) and start it
        again with its unchanged file; a write through it must then
        succeed. Returns the log lines of the new start."""
        before = len(d.log())
        if kill:
            d.signal(signal.SIGKILL)
            d.wait(20)
        else:
            self.assertEqual(d.stop(), 0, d.log()[-3000:])
        d.start()
        self.write(d, "INSERT INTO t VALUES (?)", "after restart %d" % d.id)
        return d.log()[before:]

    def assert_replicas_equal(self, daemons):
        """Every daemon of @daemons holds the rows of t the first holds,
        once caught up."""
        want = read_rows(daemons[0].db, "SELECT v FROM t ORDER BY rowid")
        for d in daemons[1:]:
            wait_for("daemon %d holds %d rows" % (d.id, len(want)),
                     lambda d=d: read_rows(
                         d.db, "SELECT v FROM t ORDER BY rowid") == want,
                     30)

    # ---- tests --------------------------------------------------------

    def test_founders_restart_after_a_join(self):
        """Three founders (cluster=) and a fourth that joined (join=):
        each founder restarted with its unchanged file (SIGTERM, and
        kill -9 of the leader) comes back and serves, with one WARN line
        naming both configurations; the joiner restarts too (join=
        ignored, at INFO). They exited 1 ("the stored one wins; drop
        cluster=")."""
        self.founders()
        d4 = self.daemon(4, ["join = %s" % self.address(1),
                             "listen = %s" % self.address(4)])
        self.wait_voters(self.daemons[1], (1, 2, 3, 4))
        self.write(d4, "INSERT INTO t VALUES ('joined')")
        stored = "%s,4@%s" % (self.members, self.address(4))
        for i in (1, 2, 3):
            lines = self.restart(self.daemons[i])
            warns = [x for x in lines.splitlines() if "cluster= ignored" in x]
            self.assertEqual(len(warns), 1, lines)
            self.assertIn("WARN", warns[0])
            self.assertIn("it says %s;" % self.members, warns[0])
            self.assertIn("says %s:" % stored, warns[0])
        lead = call(self.daemons[1].db, "SELECT raft_leader()")
        self.assertIn(lead, (1, 2, 3, 4))
        self.restart(self.daemons[lead], kill=True)
        lines = self.restart(d4)
        self.assertIn("join=%s ignored: server 4 is a voter" %
                      self.address(1), lines)
        self.assertNotIn("WARN", "".join(
            x for x in lines.splitlines() if "join=" in x))
        self.wait_voters(self.daemons[1], (1, 2, 3, 4))
        self.assert_replicas_equal(list(self.daemons.values()))

    def test_bootstrap_from_founder_restarts(self):
        """A founder that started from a file (bootstrap_from=, cluster=
        of itself) and a node that joined it: the founder restarted with
        its unchanged file ignores both founding keys (a WARN line each)
        and serves; it exited 1 (bootstrap_from=, then cluster=)."""
        src = os.path.join(self.dir, "source.db")
        con = sqlite3.connect(src)
        con.executescript("CREATE TABLE t(v TEXT); "
                          "INSERT INTO t VALUES ('from the file');")
        con.close()
        d1 = self.daemon(1, ["cluster = 1@%s" % self.address(1),
                             "bootstrap_from = %s" % src])
        self.write(d1, "INSERT INTO t VALUES ('founded')")
        d2 = self.daemon(2, ["join = %s" % self.address(1),
                             "listen = %s" % self.address(2)])
        self.wait_voters(d1, (1, 2))
        lines = self.restart(d1)
        self.assertIn("bootstrap_from=%s ignored: this node has a log" % src,
                      lines)
        self.assertIn("cluster= ignored: it says 1@%s;" % self.address(1),
                      lines)
        self.restart(d2)
        self.restart(d1)
        self.assertEqual(read_rows(d1.db, "SELECT v FROM t ORDER BY rowid")
                         [:2], [("from the file",), ("founded",)])
        self.assert_replicas_equal([d1, d2])

    def test_wiped_log_refuses_and_is_replaced_with_join(self):
        """A founder whose log directory was wiped, its database kept,
        restarted with its unchanged file: it founds nothing and exits 1
        naming the cluster id and the replacement (raft_remove, then
        join=), leaving no log directory; the others keep their term.
        The replacement the message names brings it back."""
        self.founders()
        self.write(self.daemons[1], "INSERT INTO t VALUES ('before')")
        d3 = self.daemons[3]
        self.assert_replicas_equal([self.daemons[1], d3])
        cluster_id = call(d3.db, "SELECT raft_cluster_id()")
        self.assertEqual(d3.stop(), 0)
        shutil.rmtree(d3.db + "-raft")
        term = call(self.daemons[1].db,
                    "SELECT json_extract(raft_status(), '$.term')")
        before = len(d3.log())
        d3.start()
        self.assertEqual(d3.wait(30), 1, d3.log()[before:])
        out = d3.log()[before:]
        self.assertIn("holds a cluster's data (cluster id %s" % cluster_id,
                      out)
        self.assertIn("founds no cluster", out)
        self.assertIn("raft_remove(3) on a member", out)
        self.assertIn("start it with join=HOST:PORT", out)
        self.assertNotIn("bootstrapped", out)
        self.assertFalse(os.path.exists(d3.db + "-raft"))
        self.assertEqual(call(self.daemons[1].db,
                              "SELECT json_extract(raft_status(), '$.term')"),
                         term)
        # The replacement, as docs/deploy.md says.
        call(self.daemons[1].db, "SELECT raft_remove(3)")
        for name in os.listdir(self.dir):
            if name.startswith("node3.db"):
                path = os.path.join(self.dir, name)
                if os.path.isdir(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
        del self.daemons[3]
        d3 = self.daemon(3, ["join = %s" % self.address(1),
                             "listen = %s" % self.address(3)])
        self.wait_voters(self.daemons[1], (1, 2, 3))
        self.write(d3, "INSERT INTO t VALUES ('replaced')")
        self.assert_replicas_equal(list(self.daemons.values()))


if __name__ == "__main__":
    unittest.main()
