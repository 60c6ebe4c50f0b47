"""dial=: a node dials a member at an address of its own choosing (NAT, a
proxy) while the configuration keeps the member's real address."""

import os
import shutil
import sys
import tempfile
import time
import unittest

from e2e import NODE, ROOT
from raftsql_cluster import Cluster, Node, NodeError, free_ports

sys.path.insert(0, os.path.join(ROOT, "tests", "faults"))
from net import Net  # noqa: E402

FAST = ("election_timeout_ms=300 heartbeat_ms=30 exec_timeout_ms=2000 "
        "log_level=info")


class DialTest(unittest.TestCase):
    """Three nodes with one cluster= string (their real addresses) that
    reach each other only through proxies named by dial=."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-e2e-dial-")
        self.ports = free_ports(3)
        self.net = Net(dict(zip((1, 2, 3), self.ports)))
        self.net.start()
        self.cluster = None

    def tearDown(self):
        codes = self.cluster.stop() if self.cluster else []
        self.net.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertTrue(all(c == 0 for c in codes), codes)

    def dial(self, i):
        return ",".join("%d@127.0.0.1:%d" % (j, self.net.port(i, j))
                        for j in (1, 2, 3) if j != i)

    def test_nodes_reach_each_other_through_dial(self):
        self.cluster = Cluster(NODE, self.dir, 3, FAST, ports=self.ports,
                               dial=self.dial)
        leader = self.cluster.wait_leader()
        leader.sql("SELECT raft_exec('CREATE TABLE t(x)')")
        leader.sql("SELECT raft_exec('INSERT INTO t VALUES (1), (2)')")
        self.cluster.wait_applied(leader.status()["applied"])
        for n in self.cluster.nodes:
            self.assertEqual(n.value("SELECT count(*) FROM t"), 2)
            # Status shows the member's address and where it is dialled.
            for p in n.status()["peers"]:
                self.assertEqual(p["address"], "127.0.0.1:%d" %
                                 self.ports[p["id"] - 1])
                self.assertEqual(p["dial"], "127.0.0.1:%d" %
                                 self.net.port(n.id, p["id"]))
        # Every byte between the nodes went through the proxies: with
        # the leader's outgoing links cut, nothing reaches the followers.
        links = self.net.state()
        for (a, b) in self.net.links:
            self.assertGreater(self.net.links[(a, b)].bytes_passed, 0,
                               (a, b, links))
        others = [j for j in (1, 2, 3) if j != leader.id]
        self.net.set([(leader.id, j) for j in others], "cut")
        with self.assertRaises(NodeError):
            leader.sql("SELECT raft_exec('INSERT INTO t VALUES (3)')")
        self.net.heal()
        deadline = time.monotonic() + 20
        while True:
            try:
                self.cluster.wait_leader().sql(
                    "SELECT raft_exec('INSERT INTO t VALUES (4)')")
                break
            except (NodeError, TimeoutError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def test_bad_dial_is_refused_naming_it(self):
        node = Node(NODE, 1, os.path.join(self.dir, "a.db"),
                    os.path.join(self.dir, "a.log"))
        c = "id=1 cluster=1@127.0.0.1:%d,2@127.0.0.1:%d" % tuple(
            self.ports[:2])
        try:
            for dial, want in (
                    ("9@127.0.0.1:1", "dial: server 9 is not in cluster"),
                    ("1@127.0.0.1:1", "dial: server 1 is this server"),
                    ("2@127.0.0.1:1,2@127.0.0.1:2",
                     "dial: server id 2 appears twice"),
                    ("2@no_where:1", "dial: 'no_where:1' is not host:port"),
                    ("2@nowhere:1", "dial: server 2: 'nowhere:1' is off "
                     "loopback"),
                    ("2", "dial: '2' is not id@host:port"),
                    ("", "dial: no members given")):
                with self.assertRaises(NodeError) as cm:
                    node.sql("SELECT raft_start(?)", "%s dial=%s" % (c, dial))
                self.assertIn(want, str(cm.exception))
        finally:
            self.assertEqual(node.stop(), 0)


if __name__ == "__main__":
    unittest.main()
