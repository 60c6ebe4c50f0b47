"""A restart after kill -9 serves at once: the start verifies the database
file against its running checksum in the background (start_verify in
raft_status(), ext/runtime/start_scan.c). The scan is held at its
snapshot by a test-build gate (RAFTSQL_TEST_START_SCAN_GATE: it waits
until the file exists), so the test sees the node serve while it runs, not
by timing luck; then a row written by the stock sqlite3 shell while the
node was down is still found by the scan, and the node is repaired."""

import json
import os
import time
import unittest

from e2e import ClusterCase, wait_for
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


if __name__ == "__main__":
    unittest.main()
