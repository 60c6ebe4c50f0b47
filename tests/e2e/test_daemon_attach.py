"""Other processes write through raftsql-node daemons (the shell, Python
and the C example, writing through one daemon), and a
daemon exits by itself once its node stopped without a signal or failed.

The cluster is three raftsql-node daemons (the sanitizer build:
RAFTSQL_DAEMON), configured by files. No test process runs a node: every
write comes from a writer process that loaded raftsql on a daemon's
database file (no raft_start) and goes through that daemon's Unix
socket: the sqlite3 shell, /usr/bin/python3's sqlite3 module and
build/examples/write_through. At the end of each test every replica
holds the same rows (tools/fingerprint.py).
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

from e2e import NODE, SO, wait_for
from fingerprint import fingerprint
from raftsql_cluster import Node, NodeError, free_ports
from attach_writers import (EXAMPLE, PYTHON, SO_BASE, shell, write_at_once,
                            writer)
from test_daemon import Daemon, read_rows

TIMING = ["election_timeout_ms = 300", "heartbeat_ms = 30"]
FAIL_FSYNC = os.path.join(os.path.dirname(os.path.abspath(SO)), "tests",
                          "host", "fail-fsync.so")

# A writer that keeps writing: rows ('<tag>-<i>', i) into log(k, n),
# first through the database file argv[1] until a call fails with no
# node to reach there (or 60 s pass), then argv[4] more through argv[2].
# One JSON line per call: the key, the file, the answer or the error, and
# how long the call took (s).
SWITCHING_WRITER = r"""
import json, sqlite3, sys, time
first, second, tag, more = sys.argv[1], sys.argv[2], sys.argv[3], \
    int(sys.argv[4])
def connect(db):
    con = sqlite3.connect(db, isolation_level=None, timeout=10)
    con.enable_load_extension(True)
    con.load_extension(sys.argv[5])
    return con
def call(con, db, i):
    k = "%s-%d" % (tag, i)
    t0 = time.monotonic()
    out = {"k": k, "db": db}
    try:
        out["rows"] = con.execute(
            "SELECT raft_exec('INSERT INTO log VALUES(?, ?)', ?, ?)",
            (k, i)).fetchone()[0]
    except sqlite3.Error as e:
        out["error"] = str(e)
    out["s"] = time.monotonic() - t0
    print(json.dumps(out), flush=True)
    return out
con, i, deadline = connect(first), 0, time.monotonic() + 60
while time.monotonic() < deadline:
    out = call(con, first, i)
    i += 1
    if "no raftsql node runs" in out.get("error", ""):
        break
con.close()
con = connect(second)
for _ in range(more):
    call(con, second, i)
    i += 1
"""


def example(db, key, value):
    """build/examples/write_through on @db: (status, stdout, stderr)."""
    out = subprocess.run([EXAMPLE, db, key, value], capture_output=True,
                         text=True, timeout=60)
    return out.returncode, out.stdout, out.stderr


class DaemonAttachCase(unittest.TestCase):
    """Three daemons, nodes 1 to 3, and a table kv(k PRIMARY KEY, v) and
    log(k, n) (no key: a write applied twice would show) created through
    one of them."""

    # Each caller's longest wait (exec_timeout_ms).
    exec_timeout_s = 5

    def daemon_env(self, node_id):
        """The environment of daemon @node_id, None for this process's."""
        return None

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-e2e-dattach-")
        ports = free_ports(3)
        members = ",".join("%d@127.0.0.1:%d" % (i + 1, p)
                           for i, p in enumerate(ports))
        self.daemons = {}
        for i in (1, 2, 3):
            self.daemons[i] = Daemon(self.dir, i, [
                "id = %d" % i, "cluster = %s" % members] + TIMING +
                ["exec_timeout_ms = %d" % (self.exec_timeout_s * 1000)],
                env=self.daemon_env(i))
        for d in self.daemons.values():
            wait_for("daemon %d serves its socket" % d.id,
                     lambda d=d: os.path.exists(d.db + "-raftsql"), 30)
        lead = self.leader()
        self.assertEqual(self.through(lead, [
            ["SELECT raft_exec('CREATE TABLE kv(k TEXT PRIMARY KEY, v); "
             "CREATE TABLE log(k TEXT, n INTEGER)')"]]), [{"rows": [[0]]}])

    def tearDown(self):
        codes = [d.stop() for d in self.daemons.values()]
        if codes != [0, 0, 0]:
            for d in self.daemons.values():
                print("--- daemon %d\n%s" % (d.id, d.log()[-4000:]))
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertEqual(codes, [0, 0, 0], "a daemon exited with an error "
                         "(sanitizer report in its log)")

    def through(self, d, statements):
        """Run @statements in a Python writer process on daemon @d's
        file."""
        return writer(d.db, statements)

    def leader(self, among=None):
        """The leader daemon, as a writer on each daemon of @among (all
        by default) sees it: every one must agree."""
        among = among or list(self.daemons.values())

        def agreed():
            ids = set()
            for d in among:
                got = self.through(d, [["SELECT raft_leader()"]])[0]
                ids.add(got.get("rows", [[None]])[0][0])
            return ids.pop() if len(ids) == 1 and None not in ids else None
        return self.daemons[wait_for("one leader", agreed, 30)]

    def followers(self, lead):
        return [d for d in self.daemons.values() if d is not lead]

    def assert_replicas_equal(self, daemons=None):
        """Every daemon of @daemons (all by default) holds the same
        content (tools/fingerprint.py), within 30 s."""
        daemons = daemons or list(self.daemons.values())

        def equal():
            prints = [fingerprint(d.db) for d in daemons]
            return all(p == prints[0] for p in prints) and prints[0]
        return wait_for("every replica equal", equal, 30)


    def switching(self, first, second, tag, more):
        """A SWITCHING_WRITER process tagged @tag, writing through daemon
        @first, then @more times through @second; killed at cleanup."""
        p = subprocess.Popen(
            [PYTHON, "-c", SWITCHING_WRITER, first.db, second.db, tag,
             str(more), SO_BASE], stdout=subprocess.PIPE, text=True)
        self.addCleanup(lambda: p.poll() is None and (p.kill(), p.wait()))
        return p

    def finish(self, lead, procs, answers):
        """Once @lead, sent SIGTERM, exited 0, add the answers of every
        writer of @procs to @answers, and check each call ended within a
        bound, acknowledged or with a clear error."""
        self.assertEqual(lead.wait(20), 0, lead.log())
        self.assertIn("SIGTERM: stopping the node", lead.log())
        for p in procs:
            # The rest from p.stdout itself: communicate() would read the
            # pipe's descriptor, past what readline() and iteration
            # already buffered (a line cut in two, lines lost).
            got = []
            reader = threading.Thread(target=lambda: got.append(
                p.stdout.read()))
            reader.start()
            reader.join(120)
            self.assertFalse(reader.is_alive(), "a writer still writes "
                             "120 s after the stop: %r" % answers)
            p.stdout.close()
            p.wait(10)
            rest = got[0]
            for x in rest.splitlines():
                try:
                    answers.append(json.loads(x))
                except ValueError:
                    self.fail("a writer printed a line that is not JSON: "
                              "%r; all it printed after the stop: %r"
                              % (x, rest))
            self.assertEqual(p.returncode, 0)
        for a in answers:
            # No call waits past exec_timeout_ms for long.
            self.assertLess(a["s"], self.exec_timeout_s + 3, a)
            if "error" in a:
                self.assertTrue(any(m in a["error"] for m in (
                    "outcome unknown", "not applied",
                    "no raftsql node runs")), a)

    def assert_present_once(self, lead, other, answers):
        """Restart @lead; once every replica is equal, each write of
        @answers acknowledged is in @other's log once, each refused (not
        applied, no node) is not, each of unknown outcome at most once."""
        lead.start()
        self.assert_replicas_equal()
        counts = dict(read_rows(other.db,
                                "SELECT k, count(*) FROM log GROUP BY k"))
        for a in answers:
            if a.get("rows") == 1:
                self.assertEqual(counts.get(a["k"]), 1, a)
            elif "not applied" in a["error"] or \
                    "no raftsql node" in a["error"]:
                self.assertIsNone(counts.get(a["k"]), a)
            else:
                self.assertIn(counts.get(a["k"]), (None, 1), a)

    def status(self, d):
        """raft_status() of daemon @d, as a writer on its file sees it."""
        return json.loads(self.through(d, [["SELECT raft_status()"]])[0]
                          ["rows"][0][0])

    def sigterm_waiting_writers(self, after_step_down, answer):
        """Hold both followers (SIGSTOP) so that no write commits; two
        writers write through the leader's daemon (once it stepped down,
        when @after_step_down); once both wait there, SIGTERM it. Checks
        finish(), that the SIGTERM answered each writer @answer ("not
        applied", "outcome unknown") naming the stop (stop_answers), and
        that each answer holds (assert_present_once)."""
        lead = self.leader()
        others = self.followers(lead)
        for d in others:
            d.signal(signal.SIGSTOP)
        try:
            if after_step_down:
                wait_for("daemon %d stepped down" % lead.id,
                         lambda: self.status(lead)["role"] != "leader", 30)
            procs = [self.switching(lead, others[0], "u%d" % w, 5)
                     for w in range(2)]
            wait_for("both writers wait in the daemon",
                     lambda: self.status(lead)["waiters"] == 2, 30)
            lead.signal(signal.SIGTERM)
            # The followers stay held until the stop answered each writer
            # (or it found no node to reach any more).
            answers = []
            for p in procs:
                for line in p.stdout:
                    answers.append(json.loads(line))
                    if any(m in answers[-1].get("error", "") for m in (
                            "the node is shutting down",
                            "no raftsql node runs")):
                        break
        finally:
            for d in others:
                d.signal(signal.SIGCONT)
        self.finish(lead, procs, answers)
        on_other = [a for a in answers if a["db"] == others[0].db]
        self.assertEqual([a.get("rows") for a in on_other], [1] * 10,
                         on_other)
        for a in self.stop_answers(lead, answers):
            self.assertTrue(a["error"].startswith(
                "raft_exec: %s: the node is shutting down" % answer), a)
        self.assert_present_once(lead, others[0], answers)

    def stop_answers(self, lead, answers):
        """The answers the SIGTERM of @lead gave to the writers waiting
        there: each writer's first that names the stop. Calls made after
        it, while the daemon stopped, may find the stop begun ("not
        applied") or the connection closing ("outcome unknown"), as
        assert_present_once checks."""
        got = {}
        for a in answers:
            if a["db"] == lead.db and "the node is shutting down " \
                    "(raft_stop)" in a.get("error", ""):
                got.setdefault(a["k"].split("-")[0], a)
        self.assertEqual(sorted(got), ["u0", "u1"], answers)
        return list(got.values())


class DaemonAttachTest(DaemonAttachCase):

    def test_shell_python_and_c_write_through_leader_and_follower(self):
        """Through the leader's daemon and a follower's: the sqlite3
        shell, a Python process and the C example each write and read
        their own write at once; status, leader and members from a
        writer; every replica equal."""
        lead = self.leader()
        for d in (lead, self.followers(lead)[0]):
            out = shell(d.db, "SELECT raft_exec('INSERT INTO kv "
                        "VALUES(''sh%d'', %d)'); SELECT v FROM kv WHERE "
                        "k = 'sh%d';" % (d.id, d.id, d.id))
            self.assertEqual((out.stdout, out.stderr),
                             ("1\n%d\n" % d.id, ""))
            got = self.through(d, [
                ["SELECT raft_exec('INSERT INTO kv VALUES(?, ?)', ?, ?)",
                 "py%d" % d.id, d.id],
                ["SELECT v FROM kv WHERE k = ?", "py%d" % d.id],
                ["SELECT raft_leader()"],
                ["SELECT raft_status()"],
                ["SELECT id, role, leader FROM raft_members ORDER BY id"],
            ])
            self.assertEqual(got[:3], [{"rows": [[1]]}, {"rows": [[d.id]]},
                                       {"rows": [[lead.id]]}])
            status = json.loads(got[3]["rows"][0][0])
            self.assertEqual((status["id"], status["leader"],
                              status["log_failed"]), (d.id, lead.id, None))
            self.assertEqual(got[4]["rows"],
                             [[i, "voter", int(i == lead.id)]
                              for i in (1, 2, 3)])
            self.assertEqual(example(d.db, "c%d" % d.id, "v%d" % d.id),
                             (0, "applied 1 read v%d\n" % d.id, ""))
        fp = self.assert_replicas_equal()
        self.assertIn(("kv", 6), [row[:2] for row in fp])
        self.assertEqual(
            read_rows(lead.db, "SELECT k FROM kv ORDER BY k"),
            [(k,) for k in sorted(
                "%s%d" % (p, d.id)
                for d in (lead, self.followers(lead)[0])
                for p in ("c", "py", "sh"))])

    def test_three_processes_write_at_once_through_one_follower(self):
        """Two Python writers and a run of C examples at once on one
        follower's daemon: every write acknowledged, present once, on
        every replica."""
        lead = self.leader()
        d = self.followers(lead)[0]
        codes, answers, printed = write_at_once(d.db, "log", 25)
        self.assertEqual(codes, [0, 0, 0])
        for got in answers:
            self.assertEqual(got, [{"rows": [[1]]}] * 25)
        self.assertEqual(printed,
                         ["applied 1 read v%d" % i for i in range(10)])
        self.assert_replicas_equal()
        for other in self.daemons.values():
            self.assertEqual(read_rows(
                other.db, "SELECT count(*), count(DISTINCT k) FROM log"),
                [(50, 50)])
            self.assertEqual(read_rows(other.db, "SELECT count(*) FROM kv"),
                             [(10,)])

    def test_sigterm_on_the_leader_while_writers_write_through_it(self):
        """SIGTERM the leader's daemon while three writers write through
        it: every call ends within a bound, acknowledged or with a clear
        error; each writer goes on through another daemon; every write
        acknowledged is present once, on every replica."""
        lead = self.leader()
        other = self.followers(lead)[0]
        procs = [self.switching(lead, other, "t%d" % w, 10)
                 for w in range(3)]
        answers = []
        for p in procs:
            for _ in range(20):
                line = p.stdout.readline()
                self.assertTrue(line, "a writer ended early: %r" % answers)
                answers.append(json.loads(line))
        lead.signal(signal.SIGTERM)
        self.finish(lead, procs, answers)
        for w in range(3):
            mine = [a for a in answers if a["k"].startswith("t%d-" % w)]
            on_lead = [a for a in mine if a["db"] == lead.db]
            on_other = [a for a in mine if a["db"] == other.db]
            self.assertIn("no raftsql node runs for %s, in this process "
                          "or another of this machine" % lead.db,
                          on_lead[-1]["error"])
            self.assertEqual([a.get("rows") for a in on_other], [1] * 10,
                             on_other)
        self.assert_present_once(lead, other, answers)

    def test_sigterm_answers_writers_waiting_for_a_leader(self):
        """Writers wait in the daemon of a leader that stepped down (both
        followers held with SIGSTOP: no quorum heard for an election
        timeout), which a loaded machine may let happen before they
        come: their writes never left the daemon's node, and SIGTERM
        answers each "not applied" at once (not after exec_timeout_ms);
        none is on any replica. Each writer goes on through another
        daemon."""
        self.sigterm_waiting_writers(True, "not applied")


class SigtermLeaderTest(DaemonAttachCase):
    """The daemons' leader keeps leading while no follower answers (test
    fault RAFTSQL_TEST_NO_CHECK_QUORUM), however late the writers come,
    and their calls wait a minute (exec_timeout_ms) for the SIGTERM."""

    exec_timeout_s = 60

    def daemon_env(self, node_id):
        return dict(os.environ, RAFTSQL_TEST_NO_CHECK_QUORUM="1")

    def test_sigterm_answers_the_writers_waiting_in_the_daemon(self):
        """Writers wait in the leader's daemon for writes that cannot
        commit (both followers held with SIGSTOP); SIGTERM on it answers
        each "outcome unknown" at once (their writes are in its log, not
        after exec_timeout_ms); each is at most once on every replica
        once the others take writes. Each writer goes on through another
        daemon."""
        self.sigterm_waiting_writers(False, "outcome unknown")


class DaemonStopsByItselfTest(DaemonAttachCase):

    def test_raft_stop_through_the_socket_ends_the_daemon(self):
        """raft_stop() from another process, through a follower daemon's
        socket, after that follower's raft_remove: the daemon notices,
        says why and exits 0; the two others go on."""
        lead = self.leader()
        gone = self.followers(lead)[0]
        self.assertIn("rows", self.through(
            lead, [["SELECT raft_remove(?)", gone.id]])[0])
        got = self.through(gone, [["SELECT raft_stop()"]])
        self.assertEqual(got, [{"rows": [["stopped"]]}])
        self.assertEqual(gone.wait(10), 0, gone.log())
        log = gone.log()
        self.assertIn("the node was stopped without a signal", log)
        self.assertIn("raftsql-node: stopped; exiting 0", log)
        self.assertNotIn("SIGTERM", log)
        rest = self.followers(gone)
        self.assertEqual(self.through(self.leader(rest), [
            ["SELECT raft_exec('INSERT INTO kv VALUES(1, 2)')"]]),
            [{"rows": [[1]]}])
        self.assert_replicas_equal(rest)


@unittest.skipUnless(os.path.exists(FAIL_FSYNC),
                     "make build/tests/host/fail-fsync.so")
class DaemonFailedLogTest(DaemonAttachCase):
    """Daemon 3 runs with tests/host/fail_fsync.c preloaded: once
    self.trigger exists, its log's syncs fail with EIO."""

    def daemon_env(self, node_id):
        if node_id != 3:
            return None
        self.trigger = os.path.join(self.dir, "fail-fsync")
        env = dict(os.environ)
        env["LD_PRELOAD"] = FAIL_FSYNC
        env["RAFTSQL_TEST_FAIL_FSYNC"] = self.trigger
        # The shim comes before the ASan runtime in the list of libraries.
        env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") +
                               ":verify_asan_link_order=0").lstrip(":")
        return env

    def test_a_failed_log_write_ends_the_daemon_with_1(self):
        """A log write of daemon 3 fails (EIO): the daemon notices, stops
        its node, names the error and exits 1; restarted on a good disk,
        it catches up."""
        d = self.daemons[3]
        lead = self.leader()
        if lead is d:
            self.assertIn("rows", self.through(
                d, [["SELECT raft_transfer(1)"]])[0])
            lead = wait_for("node 1 leads", lambda: (
                self.leader() is self.daemons[1] and self.daemons[1]), 30)
        with open(self.trigger, "w"):
            pass
        self.assertEqual(self.through(lead, [
            ["SELECT raft_exec('INSERT INTO kv VALUES(1, 2)')"]]),
            [{"rows": [[1]]}])
        self.assertEqual(d.wait(20), 1, d.log())
        log = d.log()
        self.assertIn("log write failed", log)
        self.assertIn("the node failed and cannot go on until restarted: ",
                      log)
        self.assertIn("Input/output error", log)
        self.assertIn("raftsql-node: stopped; exiting 1", log)
        os.unlink(self.trigger)
        d.start()
        self.assert_replicas_equal()


@unittest.skipUnless(os.path.exists(FAIL_FSYNC),
                     "make build/tests/host/fail-fsync.so")
class FailedLogStatusTest(unittest.TestCase):
    """What raftsql_node_state reads, as raft_status() shows it."""

    def test_log_failed_in_status(self):
        """A single node (a raftsql-testhost) whose log sync fails: the
        write is not acknowledged, raft_status()'s log_failed names the
        error (null before), the node stops cleanly."""
        tmp = tempfile.mkdtemp(prefix="raftsql-e2e-logfailed-")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        trigger = os.path.join(tmp, "fail-fsync")
        node = Node(NODE, 1, os.path.join(tmp, "n.db"),
                    os.path.join(tmp, "n.log"), env={
                        "LD_PRELOAD": FAIL_FSYNC,
                        "RAFTSQL_TEST_FAIL_FSYNC": trigger,
                        "ASAN_OPTIONS": "verify_asan_link_order=0"})
        self.addCleanup(node.stop)
        node.sql("SELECT raft_start(?)", "id=1 cluster=1@127.0.0.1:%d "
                 "exec_timeout_ms=3000 election_timeout_ms=300 "
                 "heartbeat_ms=30" % free_ports(1)[0])
        wait_for("leader", lambda: node.value("SELECT raft_leader()"))
        node.sql("SELECT raft_exec('CREATE TABLE t(x)')")
        # The first leader proposes the cluster id once its no-op is
        # applied, perhaps after the CREATE on a loaded machine: that
        # entry's sync would fail first, and the write below would never
        # leave the node ("not applied"). So every entry is applied and
        # persisted before syncs fail.
        def settled():
            st = node.status()
            return (st["cluster_id"] is not None and
                    st["applied"] == st["last_index"] == st["persisted"])
        wait_for("the cluster id applied, the log all persisted", settled)
        self.assertIsNone(node.status()["log_failed"])
        with open(trigger, "w"):
            pass
        with self.assertRaises(NodeError) as e:
            node.sql("SELECT raft_exec('INSERT INTO t VALUES(1)')")
        if "outcome unknown" not in str(e.exception):
            with open(node.log_path, errors="replace") as f:
                log = f.read()
            self.fail("the write that met the failed sync: %s; status: %s; "
                      "node log:\n%s" % (e.exception, node.status(),
                                          log[-6000:]))
        failed = wait_for("log_failed", lambda: node.status()["log_failed"],
                          10)
        self.assertIn("Input/output error", failed)
        node.sql("SELECT raft_stop()")
        self.assertEqual(node.stop(), 0)


if __name__ == "__main__":
    unittest.main()
