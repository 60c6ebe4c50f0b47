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


def settled(db, sql, timeout=30.0):
    """The value of @sql on @db once it is no NULL and raises no error
    (a leader known, a change not refused while another is pending);
    after an "outcome unknown" an error counts as done (a retried
    change that the first try made). Raises TimeoutError naming the last
    answer."""
    last = [None]

    def value():
        try:
            last[0] = call(db, sql)
            return last[0] is not None
        except sqlite3.Error as e:
            done = last[0] is not None and "outcome unknown" in str(last[0])
            last[0] = str(e)
            return done
    try:
        wait_for(sql, value, timeout)
    except TimeoutError:
        raise TimeoutError("%s on %s: %r after %.0f s" % (sql, db, last[0],
                                                           timeout))
    return last[0]


def write_through(test, d, sql, *params, timeout=30.0):
    """raft_exec(@sql, @params) through daemon @d (test_daemon.Daemon),
    retried while it starts or has no leader yet; fails @test at once,
    with the daemon's log, once it exited."""
    last = []

    def done():
        if d.proc.poll() is not None:
            test.fail("daemon %d exited %d:\n%s" % (
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
        test.fail("no write through daemon %d within %.0f s: %s\n%s" % (
            d.id, timeout, last, d.log()[-3000:]))


def wait_voters(d, ids):
    """Wait until daemon @d serves a configuration of the voters @ids
    alone (learners and other servers make it wait); raises TimeoutError
    naming what it saw last."""
    seen = [None]

    def members():
        try:
            con = connect(d.db)
            try:
                seen[0] = dict(con.execute(
                    "SELECT id, role FROM raft_members"))
            finally:
                con.close()
        except sqlite3.Error as e:
            seen[0] = str(e)
        return seen[0] == {i: "voter" for i in ids}
    try:
        wait_for("voters %s on daemon %d" % (ids, d.id), members, 30)
    except TimeoutError:
        raise TimeoutError("daemon %d: voters %s wanted, saw %r" % (
            d.id, list(ids), seen[0]))


def restart_daemon(test, d, kill=False):
    """Stop daemon @d (SIGTERM as `systemctl restart` sends it, SIGKILL
    when @kill) and start it again with its unchanged file; a write
    through it must then succeed (fails @test otherwise). Returns the log
    lines of the new start."""
    before = len(d.log())
    if kill:
        d.signal(signal.SIGKILL)
        d.wait(20)
    else:
        test.assertEqual(d.stop(), 0, d.log()[-3000:])
    d.start()
    write_through(test, d, "INSERT INTO t VALUES (?)",
                  "after restart %d" % d.id)
    return d.log()[before:]


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
        write_through(self, d, sql, *params, timeout=timeout)

    def restart(self, d, kill=False):
        return restart_daemon(self, d, kill)

    def assert_replicas_equal(self, daemons):
        """Every daemon of @daemons holds the same rows of t, once caught
        up (each write was acknowledged once applied on the daemon it
        went through, so equal rows hold every one)."""
        seen = {}

        def agree():
            for d in daemons:
                seen[d.id] = read_rows(d.db, "SELECT v FROM t ORDER BY rowid")
            return len({tuple(v) for v in seen.values()}) == 1
        try:
            wait_for("equal replicas", agree, 30)
        except TimeoutError:
            self.fail("the replicas differ after 30 s: %r" % seen)

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
        wait_voters(self.daemons[1], (1, 2, 3, 4))
        self.write(d4, "INSERT INTO t VALUES ('joined')")
        stored = "%s,4@%s" % (self.members, self.address(4))
        for i in (1, 2, 3):
            lines = self.restart(self.daemons[i])
            warns = [x for x in lines.splitlines() if "cluster= ignored" in x]
            self.assertEqual(len(warns), 1, lines)
            self.assertIn("WARN", warns[0])
            self.assertIn("it says %s;" % self.members, warns[0])
            self.assertIn("says %s:" % stored, warns[0])
        lead = settled(self.daemons[1].db, "SELECT raft_leader()")
        self.assertIn(lead, (1, 2, 3, 4))
        self.restart(self.daemons[lead], kill=True)
        lines = self.restart(d4)
        self.assertIn("join=%s ignored: server 4 is a voter" %
                      self.address(1), lines)
        self.assertNotIn("WARN", "".join(
            x for x in lines.splitlines() if "join=" in x))
        wait_voters(self.daemons[1], (1, 2, 3, 4))
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
        wait_voters(d1, (1, 2))
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
        join=), having started nothing and leaving no log directory. The
        replacement the message names brings it back."""
        self.founders()
        self.write(self.daemons[1], "INSERT INTO t VALUES ('before')")
        d3 = self.daemons[3]
        self.assert_replicas_equal([self.daemons[1], d3])
        cluster_id = settled(d3.db, "SELECT raft_cluster_id()")
        self.assertEqual(d3.stop(), 0)
        shutil.rmtree(d3.db + "-raft")
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
        self.assertNotIn("node 3 started", out)
        self.assertFalse(os.path.exists(d3.db + "-raft"))
        # The replacement, as docs/deploy.md says.
        settled(self.daemons[1].db, "SELECT raft_remove(3)")
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
        wait_voters(self.daemons[1], (1, 2, 3))
        self.write(d3, "INSERT INTO t VALUES ('replaced')")
        self.assert_replicas_equal(list(self.daemons.values()))


if __name__ == "__main__":
    unittest.main()
