"""A restart after kill -9 serves at once: the start verifies the database
file against its running checksum in the background (start_verify in
raft_status(), ext/runtime/start_scan.c). The scan is held at its
snapshot by a test-build gate (RAFTSQL_TEST_START_SCAN_GATE: it waits
until the file exists), so the test sees the node serve while it runs, not
by timing luck; then a row written by the stock sqlite3 shell while the
node was down is still found by the scan, and the node is repaired."""

import json
import os
import sqlite3
import threading
import time
import unittest

from e2e import ClusterCase, connect, wait_for
from raftsql_cluster import NodeError
from test_foreign import FAST, diverged, foreign_write, log_text


class StartScanTest(ClusterCase):

    def setUp(self):
        self.start(FAST)
        self.exec(self.leader, "CREATE TABLE kv(k TEXT PRIMARY KEY, v)")
        self.exec(self.leader, "CREATE TABLE other(x INTEGER PRIMARY KEY)")
        for i in range(20):
            self.exec(self.leader, "INSERT INTO kv VALUES(?, ?)", "k%d" % i, i)
        self.cluster.wait_all_applied()

    def test_serves_before_the_scan_ends_and_it_finds_a_foreign_write(self):
        f = self.followers[0]
        gate = os.path.join(self.cluster.workdir, "scan-gate")
        f.kill()
        foreign_write(f.db, "INSERT INTO kv VALUES('offline', 1)")
        self.cluster.env = {f.id: {"RAFTSQL_TEST_START_SCAN_GATE": gate}}
        began = time.monotonic()
        f = self.cluster.nodes[f.id - 1] = self.cluster.spawn(f.id)
        started_s = time.monotonic() - began

        st = f.status()
        self.assertEqual(st["start_verify"]["state"], "running", st)
        self.assertIn("no record of a clean stop", st["start_verify"]["why"])
        self.assertIsNone(st["diverged"])
        # Reads are served, the write made while no node ran included
        # (docs/operations.md says so).
        self.assertEqual(f.sql("SELECT count(*) FROM kv"), [[21]])
        # raft_exec through it is taken and applied here. (One whose
        # effect depends on the foreign row, as an insert into kv whose
        # rowid follows it, gives this replica another checksum than the
        # others': their comparison then repairs it before the scan ends;
        # this one does not, so the scan is what finds the row.)
        self.assertEqual(self.exec(f, "INSERT INTO other VALUES(7)"), 1)
        self.assertEqual(f.sql("SELECT x FROM other"), [[7]])
        # Its plain writes wait for the scan (SQLITE_BUSY after the busy
        # timeout).
        f.sql("PRAGMA busy_timeout = 200")
        with self.assertRaises(NodeError) as cm:
            f.sql("INSERT INTO kv VALUES('plain', 1)")
        self.assertIn("database is locked", str(cm.exception))
        # raft_last_error() names the scan (it was NULL: a new-user trial).
        self.assertIn("verifies its database against the running checksum",
                      f.value("SELECT raft_last_error()") or "")
        # Another process's writer with a busy timeout of 500 ms meets
        # SQLITE_BUSY near it: each busy handler's retry waits 20 ms for
        # the scan, not 250 (SQLite's busy timeout counts only its own
        # sleeps, some 12 retries here: it took 4.6 s).
        con = connect(f.db)
        try:
            con.execute("PRAGMA busy_timeout = 500")
            began = time.monotonic()
            with self.assertRaises(sqlite3.OperationalError) as cm:
                con.execute("INSERT INTO kv VALUES('plain', 1)")
            took = time.monotonic() - began
            self.assertIn("database is locked", str(cm.exception))
            self.assertIn("verifies its database",
                          con.execute("SELECT raft_last_error()").fetchone()[0]
                          or "")
        finally:
            con.close()
        self.assertLess(took, 2.5, "SQLITE_BUSY after %.2f s with a busy "
                        "timeout of 500 ms" % took)
        st = f.status()
        self.assertEqual(st["start_verify"]["state"], "running", st)
        self.assertIsNone(st["diverged"])
        print("restart to serving: %.2f s (raft_start returned); the scan "
              "held at index %s" % (started_s, st["start_verify"]["index"]))

        with open(gate, "w"):
            pass
        seen = []

        def verdict():
            seen[:] = [f.status()["start_verify"]]
            return seen[0]["state"] not in ("running", "waiting")
        try:
            wait_for("the scan's verdict", verdict, 20)
        except TimeoutError:
            self.fail("no verdict: start_verify %r; log:\n%s" % (
                seen, log_text(f)[-3000:]))
        self.assertEqual(seen[0]["state"], "differs", "%r; log:\n%s" % (
            seen, log_text(f)[-4000:]))
        text = log_text(f)
        self.assertIn("the database changed while the node was stopped: the "
                      "content of kv differs", text)
        wait_for("node %d repaired" % f.id,
                 lambda: f.status()["repairs"] >= 1 and diverged(f) is None,
                 30)
        self.assertEqual(
            f.sql("SELECT count(*) FROM kv WHERE k = 'offline'"), [[0]])
        self.assertEqual(f.sql("SELECT x FROM other"), [[7]])
        # After the repair its plain writes go through.
        f.sql("PRAGMA busy_timeout = 5000")
        f.sql("INSERT INTO kv VALUES('plain', 1)")
        self.cluster.wait_all_applied()
        rows = [n.sql("SELECT k, v FROM kv ORDER BY k")
                for n in self.cluster.nodes]
        self.assertEqual(rows[0], rows[1])
        self.assertEqual(rows[0], rows[2])
        for n in self.cluster.nodes:
            v = json.loads(n.value("SELECT raft_verify()"))
            self.assertTrue(v["equal"], "node %d: %r" % (n.id, v))
        # Repaired, its clean stop is recorded: the next start does not
        # scan again (it did, "no record of a clean stop", when the scan
        # had ended differs: a new-user trial).
        self.assertEqual(f.stop(), 0)
        self.cluster.env = {}
        f = self.cluster.nodes[f.id - 1] = self.cluster.spawn(f.id)
        self.assertIsNone(f.status()["start_verify"], log_text(f)[-2000:])

    def test_plain_write_waiting_for_the_scan_sends_no_foreign_row(self):
        """A plain UPDATE through a node whose start scan then finds a row
        changed while no node ran is refused, or goes out after the
        repair: the scan marks the replica diverged before it ends, and
        the writer, waiting for the scan, checks after its wait. Before, the write went out as the replica
        was being marked: its changeset carried the foreign row as its old
        image, every other replica refused the entry, and the whole
        cluster stood diverged with no healthy peer to repair from (a
        new-user trial; the scan is held by the gate until the writer
        waits)."""
        f = self.followers[0]
        gate = os.path.join(self.cluster.workdir, "scan-gate")
        f.kill()
        foreign_write(f.db, "UPDATE kv SET v = 'foreign' WHERE k = 'k1'")
        self.cluster.env = {f.id: {"RAFTSQL_TEST_START_SCAN_GATE": gate}}
        f = self.cluster.nodes[f.id - 1] = self.cluster.spawn(f.id)
        self.assertEqual(f.status()["start_verify"]["state"], "running")
        outcome = []

        def plain_update():
            con = connect(f.db)
            try:
                con.execute("PRAGMA busy_timeout = 30000")
                con.execute("UPDATE kv SET v = v || '+plain' WHERE k = 'k1'")
                outcome.append("committed")
            except sqlite3.Error as e:
                outcome.append("%s: %s (last error: %s)" % (
                    type(e).__name__, e, con.execute(
                        "SELECT raft_last_error()").fetchone()[0]))
            finally:
                con.close()
        t = threading.Thread(target=plain_update, daemon=True)
        t.start()
        with open(gate, "w"):
            pass
        t.join(60)
        self.assertFalse(t.is_alive(), "the plain UPDATE did not end")
        self.assertEqual(len(outcome), 1)
        # Refused while the replica stood marked diverged (by the write
        # path, or by the guard as the retried statement's read began:
        # the diverged notice's own words); or, when the writer's busy
        # handler slept through that mark (it lasts until the repair),
        # committed after the repair, over the repaired row. Never over
        # the foreign one ('foreign+plain').
        if outcome[0] != "committed":
            self.assertTrue(
                "diverged replica" in outcome[0] or
                "read of kv refused: the database changed while the node "
                "was stopped" in outcome[0], outcome[0])
        # Only the node whose file changed is diverged, and it is repaired
        # from a healthy peer.
        for n in self.cluster.nodes:
            if n is not f:
                self.assertIsNone(diverged(n), "node %d" % n.id)
        wait_for("node %d repaired" % f.id,
                 lambda: f.status()["repairs"] >= 1 and diverged(f) is None,
                 30)
        self.cluster.wait_all_applied()
        want = [["1+plain"]] if outcome[0] == "committed" else [[1]]
        for n in self.cluster.nodes:
            self.assertEqual(n.sql("SELECT v FROM kv WHERE k = 'k1'"), want,
                             "node %d (%s)" % (n.id, outcome[0]))
            self.assertIsNone(diverged(n), "node %d" % n.id)

    def verdict_of(self, f):
        """Wait for node @f's start scan to end; return its start_verify."""
        seen = []

        def verdict():
            seen[:] = [f.status()["start_verify"]]
            return seen[0] is None or seen[0]["state"] not in ("running",
                                                              "waiting")
        try:
            wait_for("the scan's verdict", verdict, 60)
        except TimeoutError:
            self.fail("no verdict: start_verify %r; log:\n%s" % (
                seen, log_text(f)[-3000:]))
        return seen[0]

    def test_schema_changed_while_stopped_is_found(self):
        """An index, a trigger or a user_version written by a process
        without raftsql while no node ran leave every row as it was: the
        scan compared rows only, so the change stayed on this replica (a
        trigger so added ran here only, and its plain writes carried its
        effect to every node: a new-user trial). The schema sum stored
        with the applied index (raftsql_applied.schema_sum) finds each,
        and the replica is repaired from a healthy one."""
        fid = self.followers[0].id
        for change, gone in (
                ("CREATE INDEX kv_v ON kv(v)",
                 "SELECT count(*) FROM sqlite_schema WHERE name = 'kv_v'"),
                ("CREATE TRIGGER kv_t AFTER INSERT ON kv BEGIN "
                 "INSERT INTO other VALUES(NULL); END",
                 "SELECT count(*) FROM sqlite_schema WHERE name = 'kv_t'"),
                ("PRAGMA user_version = 42",
                 "SELECT user_version = 42 FROM pragma_user_version")):
            f = self.cluster.nodes[fid - 1]
            f.kill()
            foreign_write(f.db, change)
            f = self.cluster.nodes[f.id - 1] = self.cluster.spawn(f.id)
            v = self.verdict_of(f)
            self.assertIsNotNone(v, change)
            self.assertEqual(v["state"], "differs", "%s: %r; log:\n%s" % (
                change, v, log_text(f)[-3000:]))
            self.assertIn("the schema (a table, index, trigger or view, "
                          "user_version or application_id) differs",
                          log_text(f))
            wait_for("node %d repaired" % f.id,
                     lambda: f.status()["repairs"] >= 1 and
                     diverged(f) is None, 30)
            self.assertEqual(f.sql(gone), [[0]], change)
            for n in self.cluster.nodes:
                v = json.loads(n.value("SELECT raft_verify()"))
                self.assertTrue(v["equal"], "node %d: %r" % (n.id, v))
            # The next test starts from a clean stop of every node.
            self.assertEqual(f.stop(), 0)
            f = self.cluster.nodes[f.id - 1] = self.cluster.spawn(f.id)
            self.assertIsNone(f.status()["start_verify"])

    def test_own_schema_changes_before_a_kill_are_not_found(self):
        """Schema changes the cluster made (raft_exec DDL, a user_version
        PRAGMA, a plain CREATE INDEX from another process, a plain
        ALTER TABLE on the node's own connection) move the stored schema
        sum with them: after kill -9 the scan finds the file equal."""
        f = self.followers[0]
        self.exec(self.leader, "CREATE TABLE t2(a, b)")
        self.exec(self.leader, "CREATE TRIGGER t2_t AFTER INSERT ON t2 "
                  "BEGIN INSERT INTO other VALUES(NULL); END")
        self.exec(self.leader, "PRAGMA user_version = 7")
        con = connect(f.db)
        try:
            con.execute("PRAGMA busy_timeout = 10000")
            con.execute("CREATE INDEX kv_v ON kv(v)")
            con.execute("INSERT INTO t2 VALUES(1, 2)")
        finally:
            con.close()
        f.sql("PRAGMA busy_timeout = 10000")
        f.sql("ALTER TABLE t2 ADD COLUMN c")
        self.cluster.wait_all_applied()
        for n in self.cluster.nodes:
            n.kill()
        for n in list(self.cluster.nodes):
            self.cluster.nodes[n.id - 1] = self.cluster.spawn(n.id)
        for n in self.cluster.nodes:
            v = self.verdict_of(n)
            self.assertIsNotNone(v, "node %d" % n.id)
            self.assertEqual(v["state"], "equal", "node %d: %r; log:\n%s" % (
                n.id, v, log_text(n)[-3000:]))

    def test_scan_with_max_staleness_is_not_aborted(self):
        """The start's scan on a node bound by max_staleness_ms ends with
        a verdict: its read connection is raftsql's own, so the guard's
        expiry of statements when the node's staleness verdict changes
        (every guarded connection of the process) must not abort it. It
        did: "verify: scan: abort due to ROLLBACK (query aborted)", the
        state failed, and a row changed while no node ran was served and
        never repaired (a new-user trial)."""
        self.exec(self.leader, "CREATE TABLE big(i INTEGER PRIMARY KEY, b)")
        self.exec(self.leader,
                  "WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 "
                  "FROM s WHERE n < 20000) INSERT INTO big(b) "
                  "SELECT randomblob(1000) FROM s")
        self.cluster.wait_all_applied()
        f = self.followers[0]
        f.kill()
        foreign_write(f.db, "UPDATE kv SET v = 'foreign' WHERE k = 'k1'")
        self.cluster.extra += " max_staleness_ms=500"
        f = self.cluster.nodes[f.id - 1] = self.cluster.spawn(f.id)
        seen = []

        def verdict():
            seen[:] = [f.status()["start_verify"]]
            return seen[0]["state"] not in ("running", "waiting")
        wait_for("the scan's verdict", verdict, 60)
        self.assertEqual(seen[0]["state"], "differs", "%r; log:\n%s" % (
            seen, log_text(f)[-3000:]))
        wait_for("node %d repaired" % f.id,
                 lambda: f.status()["repairs"] >= 1 and diverged(f) is None,
                 30)
        # A read within max_staleness_ms (500 ms): refused while the node
        # is stale (a loaded machine, or a TSan build, can be at a given
        # moment: "access to kv.v is prohibited"), so taken once it is
        # served.
        got = []

        def served():
            try:
                got[:] = [f.sql("SELECT v FROM kv WHERE k = 'k1'")]
            except NodeError as e:
                got[:] = [str(e)]
                return False
            return True
        try:
            wait_for("node %d serving reads of kv" % f.id, served, 30)
        except TimeoutError as e:
            self.fail("%s; the last read: %r" % (e, got))
        self.assertEqual(got[0], [[1]])


if __name__ == "__main__":
    unittest.main()
