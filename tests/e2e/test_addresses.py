"""Real addresses on this machine's loopback: a cluster on IPv6 [::1], a
cluster whose members are known by the hostname localhost (resolved
before each dial). The loopback gate and insecure=on are tested with the
other raft_start checks (test_cluster.py, StartTest); clusters on other
hostnames and wildcard listens run in network namespaces
(test_netns.py)."""

import shutil
import socket
import tempfile
import unittest

from e2e import NODE
from raftsql_cluster import Cluster, Node, free_ports

FAST = ("election_timeout_ms=300 heartbeat_ms=30 exec_timeout_ms=3000 "
        "log_level=info")


def ipv6_loopback():
    """Whether this machine can listen on ::1."""
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


class AddressClusterTest(unittest.TestCase):
    """Three nodes whose addresses are IPv6 literals or hostnames."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-e2e-addr-")
        self.cluster = None

    def tearDown(self):
        codes = self.cluster.stop() if self.cluster else []
        if any(c != 0 for c in codes):
            for n in self.cluster.nodes:
                with open(n.log_path, errors="replace") as f:
                    print(f.read()[-3000:])
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertTrue(all(c == 0 for c in codes), codes)

    def replicate(self, host):
        """Start a cluster whose members are at host, write through the
        leader and a follower, and check every node has the rows and
        shows the peers' addresses as given."""
        ports = free_ports(3)
        self.cluster = Cluster(NODE, self.dir, 3, FAST, ports=ports,
                               host=host)
        leader = self.cluster.wait_leader()
        follower = [n for n in self.cluster.nodes if n is not leader][0]
        leader.sql("SELECT raft_exec('CREATE TABLE t(x)')")
        leader.sql("SELECT raft_exec('INSERT INTO t VALUES (1)')")
        follower.sql("SELECT raft_exec('INSERT INTO t VALUES (2)')")
        # The follower's write is applied there when its raft_exec
        # returns, perhaps before the leader's apply thread gets to it.
        self.cluster.wait_all_applied()
        for n in self.cluster.nodes:
            self.assertEqual(n.value("SELECT count(*) FROM t"), 2)
            for p in n.status()["peers"]:
                self.assertEqual(p["address"],
                                 "%s:%d" % (host, ports[p["id"] - 1]))
        return leader

    def test_ipv6_loopback_cluster(self):
        if not ipv6_loopback():
            self.skipTest("::1 is not available on this machine")
        self.replicate("[::1]")

    def test_cluster_by_hostname_localhost(self):
        leader = self.replicate("localhost")
        with open(leader.log_path, errors="replace") as f:
            log = f.read()
        # The transport dialled the peers by name, and each resolved.
        others = [n.id for n in self.cluster.nodes if n is not leader]
        for i in others:
            self.assertRegex(log, r"peer %d \(localhost:\d+\): connected" % i)
        self.assertNotIn("cannot resolve", log)

    def test_restart_wildcard_listen_takes_stored_address(self):
        """A node whose stored address is a hostname (localhost:port)
        restarts with listen=0.0.0.0:port only (no advertise=, no
        cluster=): it advertises its stored address and catches up."""
        self.replicate("localhost")
        node3 = self.cluster.node(3)
        self.assertEqual(node3.stop(), 0)
        port = int(self.cluster.members.split(",")[2].rsplit(":", 1)[1])
        node3 = Node(NODE, 3, node3.db, node3.log_path)
        self.cluster.nodes[2] = node3
        node3.sql("SELECT raft_start(?)", "id=3 listen=0.0.0.0:%d "
                  "insecure=on %s" % (port, FAST))
        leader = self.cluster.wait_leader()
        leader.sql("SELECT raft_exec('INSERT INTO t VALUES (3)')")
        self.cluster.wait_applied(leader.status()["applied"], [node3])
        self.assertEqual(node3.value("SELECT count(*) FROM t"), 3)
        with open(node3.log_path, errors="replace") as f:
            log = f.read()
        self.assertNotIn("differs", log)


if __name__ == "__main__":
    unittest.main()
