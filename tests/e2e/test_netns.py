"""Three hosts, not three ports: nodes in three network namespaces joined
by a bridge (tests/e2e/netns.py), each listening on 0.0.0.0 inside its
namespace and advertising its hostname, which the others resolve through
/etc/netns/<ns>/hosts. insecure=on: without TLS the peers do not
authenticate each other (test_tls_netns.py runs such hosts with TLS).
Skips, saying why, without root or ip(8)."""

import os
import shutil
import tempfile
import time
import unittest

from e2e import NODE
from netns import Netns
from raftsql_cluster import Node, NodeError

FAST = ("election_timeout_ms=300 heartbeat_ms=30 exec_timeout_ms=3000 "
        "log_level=info insecure=on")
PORT = 7001
NAMES = {"n1": 1, "n2": 2, "n3": 3}
MEMBERS = ",".join("%d@n%d:%d" % (i, i, PORT) for i in (1, 2, 3))


def wait(cond, what, timeout=20.0):
    """Wait until cond() is true; fail naming what after timeout s."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for %s" % what)
        time.sleep(0.05)


class NetnsTest(unittest.TestCase):
    """A cluster of three hosts by hostname, on 10.77.0.0/24."""

    def setUp(self):
        why = Netns.unavailable()
        if why is not None:
            self.skipTest(why)
        self.dir = tempfile.mkdtemp(prefix="raftsql-e2e-netns-")
        self.net = Netns(3)
        self.nodes = []
        try:
            self.net.start()
        except Exception:
            self.net.close()
            raise

    def tearDown(self):
        codes = [n.stop() for n in self.nodes]
        self.net.close()
        if any(c != 0 for c in codes):
            for n in self.nodes:
                with open(n.log_path, errors="replace") as f:
                    print(f.read()[-3000:])
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertTrue(all(c == 0 for c in codes), codes)

    def start(self, i):
        """Start node i in host i: listen on every interface there,
        advertise its name."""
        n = Node(NODE, i, os.path.join(self.dir, "node%d.db" % i),
                 os.path.join(self.dir, "node%d.log" % i),
                 prefix=self.net.prefix(i))
        self.nodes.append(n)
        n.started = n.value(
            "SELECT raft_start(?)",
            "id=%d listen=0.0.0.0:%d advertise=n%d:%d cluster=%s %s" %
            (i, PORT, i, PORT, MEMBERS, FAST))
        return n

    def leader(self):
        """The node every node names leader, once they agree."""
        def agreed():
            ids = {n.value("SELECT raft_leader()") for n in self.nodes}
            return len(ids) == 1 and None not in ids
        wait(agreed, "a leader")
        return self.nodes[self.nodes[0].value("SELECT raft_leader()") - 1]

    def write_everywhere(self):
        """Write through the leader and a follower; every node gets it."""
        leader = self.leader()
        follower = [n for n in self.nodes if n is not leader][0]
        leader.sql("SELECT raft_exec('CREATE TABLE IF NOT EXISTS t(x)')")
        leader.sql("SELECT raft_exec('INSERT INTO t VALUES (1)')")
        follower.sql("SELECT raft_exec('INSERT INTO t VALUES (2)')")
        # The follower's write is applied on the follower when its
        # raft_exec returns, not yet on the leader perhaps (its apply
        # thread may lag its commit): wait for the highest index applied.
        applied = max(n.status()["applied"] for n in self.nodes)
        for n in self.nodes:
            wait(lambda: n.status()["applied"] >= applied,
                 "node %d to apply %d" % (n.id, applied))
            self.assertEqual(n.value("SELECT count(*) FROM t"), 2)

    def log(self, i):
        with open(self.nodes[i - 1].log_path, errors="replace") as f:
            return f.read()

    def test_writes_replicate_by_hostname(self):
        self.net.hosts(NAMES)
        for i in (1, 2, 3):
            self.start(i)
        self.write_everywhere()
        for n in self.nodes:
            for p in n.status()["peers"]:
                self.assertEqual(p["address"], "n%d:%d" % (p["id"], PORT))
                self.assertTrue(p["connected"], (n.id, p))
        # Each dialled the others at their namespace's address.
        for i in (1, 2, 3):
            for j in (1, 2, 3):
                if i != j:
                    self.assertIn("peer %d (n%d:%d): connected" %
                                  (j, j, PORT), self.log(i))
        self.assertIn("node 1 started, listening on 0.0.0.0:%d" % PORT,
                      self.nodes[0].started)
        # Without insecure=on the same addresses are refused.
        n = Node(NODE, 9, os.path.join(self.dir, "node9.db"),
                 os.path.join(self.dir, "node9.log"),
                 prefix=self.net.prefix(1))
        self.nodes.append(n)
        with self.assertRaises(NodeError) as cm:
            n.sql("SELECT raft_start(?)", "id=9 listen=0.0.0.0:7009 "
                  "advertise=n1:7009")
        self.assertIn("listen: '0.0.0.0:7009' is off loopback",
                      str(cm.exception))

    def test_name_that_resolves_later_is_followed(self):
        """Host 1 cannot resolve n3 at first: logged once, retried with
        the backoff; once its hosts file names n3, the next dial reaches
        it."""
        self.net.hosts(NAMES, only=[2, 3])
        self.net.hosts({"n1": 1, "n2": 2}, only=[1])
        for i in (1, 2, 3):
            self.start(i)
        # Several re-dials (100 ms doubling to 2 s) fail alike: one line.
        # (Node 3 may know no leader meanwhile: node 1 cannot send to it.)
        time.sleep(3)
        self.assertEqual(self.log(1).count("cannot resolve n3"), 1,
                         self.log(1)[-2000:])
        peer3 = [p for p in self.nodes[0].status()["peers"]
                 if p["id"] == 3][0]
        self.assertFalse(peer3["connected"])
        self.net.hosts(NAMES, only=[1])

        def connected():
            return [p["connected"] for p in self.nodes[0].status()["peers"]
                    if p["id"] == 3][0]
        wait(connected, "node 1 to reach n3", timeout=10)
        self.assertIn("n3 resolves again: %s:%d" % (self.net.ip(3), PORT),
                      self.log(1))
        self.write_everywhere()


if __name__ == "__main__":
    unittest.main()
