"""The SQLite build in the peer handshake (where builds differ, a request
near max_request_steps may fail on some nodes only): a node whose
build differs (RAFTSQL_TEST_BUILD_ID, a hook for tests only) is logged and
shown in raft_status() as a warning on both sides, and replication goes
on."""

import os
import shutil
import tempfile
import time
import unittest

from e2e import NODE
from raftsql_cluster import Node, free_ports

OTHER = "2099-01-01 00:00:00 test-build-of-node-3"
FAST = "election_timeout_ms=300 heartbeat_ms=30 log_level=info"


class BuildIdTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-e2e-build-")
        ports = free_ports(3)
        members = ",".join("%d@127.0.0.1:%d" % (i + 1, p)
                           for i, p in enumerate(ports))
        self.nodes = []
        for i in (1, 2, 3):
            n = Node(NODE, i, os.path.join(self.dir, "node%d.db" % i),
                     os.path.join(self.dir, "node%d.log" % i),
                     env={"RAFTSQL_TEST_BUILD_ID": OTHER} if i == 3 else None)
            n.sql("SELECT raft_start(?)",
                  "id=%d cluster=%s %s" % (i, members, FAST))
            self.nodes.append(n)

    def tearDown(self):
        codes = [n.stop() for n in self.nodes]
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertEqual(codes, [0, 0, 0])

    def wait(self, pred, what, timeout=15.0):
        deadline = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > deadline:
                self.fail("timed out waiting for " + what)
            time.sleep(0.05)

    def peers(self, n):
        return {p["id"]: p for p in n.status()["peers"]}

    def test_other_build_is_a_warning_and_replication_goes_on(self):
        n1, n2, n3 = self.nodes
        source_id = n1.value("SELECT sqlite_source_id()")
        # Every node has heard every other's handshake.
        self.wait(lambda: all(p["build_id"] is not None
                              for n in self.nodes
                              for p in self.peers(n).values()),
                  "every handshake")
        s1, s3 = n1.status(), n3.status()
        self.assertEqual(s1["build_id"], source_id)
        self.assertEqual(s3["build_id"], OTHER)
        self.assertEqual(self.peers(n1)[3]["build_id"], OTHER)
        self.assertEqual(self.peers(n1)[2]["build_id"], source_id)
        self.assertEqual(self.peers(n3)[1]["build_id"], source_id)
        # The warning names the peer and both builds, on each side.
        self.assertEqual(len(s1["warnings"]), 1, s1["warnings"])
        self.assertIn("peer 3 runs another SQLite build", s1["warnings"][0])
        self.assertIn(OTHER, s1["warnings"][0])
        self.assertIn(source_id, s1["warnings"][0])
        self.assertEqual(len(s3["warnings"]), 2, s3["warnings"])
        w2 = n2.status()["warnings"]
        self.assertEqual(len(w2), 1, w2)
        self.assertIn("peer 3 runs another SQLite build", w2[0])
        with open(n1.log_path) as f:
            log = f.read()
        self.assertIn("its build differs from this server's: build id '%s' "
                      "there, '%s' here" % (OTHER, source_id), log)
        # Replication is not affected.
        self.wait(lambda: n1.value("SELECT raft_leader()") is not None,
                  "a leader")
        leader = self.nodes[n1.value("SELECT raft_leader()") - 1]
        leader.sql("SELECT raft_exec('CREATE TABLE t(x)')")
        leader.sql("SELECT raft_exec('INSERT INTO t VALUES (1), (2)')")
        applied = leader.status()["applied"]
        self.wait(lambda: all(n.status()["applied"] >= applied
                              for n in self.nodes), "every node applied")
        for n in self.nodes:
            self.assertEqual(n.value("SELECT count(*) FROM t"), 2)


if __name__ == "__main__":
    unittest.main()
