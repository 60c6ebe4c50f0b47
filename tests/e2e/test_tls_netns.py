"""TLS across hosts by hostname, and two TLS clusters of one CA told apart
by their cluster id: cluster a runs in three network
namespaces (tests/e2e/netns.py), each node listening on 0.0.0.0 without
insecure=on and advertising its hostname n1, n2 or n3, which the others
resolve through /etc/netns/<ns>/hosts; every certificate names its node
by hostname alone (DNS:nI, certs.py). Cluster b, of the same CA and the
same names (its hosts file maps them to a fourth namespace), is a cluster
of its own: once one of its nodes is pointed at a node of a (dial=), the
TLS handshakes pass both ways (the certificates are good for those names)
and the cluster id is what refuses it, with one line on each side. Skips,
saying why, without root or ip(8)."""

import os
import shutil
import tempfile
import time
import unittest

import certs
from e2e import NODE, wait_for
from netns import Netns
from raftsql_cluster import Node

FAST = ("election_timeout_ms=300 heartbeat_ms=30 exec_timeout_ms=3000 "
        "log_level=info")
A_PORT = 7001
B_PORTS = {1: 7101, 2: 7102, 3: 7103}
A_MEMBERS = ",".join("%d@n%d:%d" % (i, i, A_PORT) for i in (1, 2, 3))
B_MEMBERS = ",".join("%d@n%d:%d" % (i, i, B_PORTS[i]) for i in (1, 2, 3))


class TLSNetnsTest(unittest.TestCase):

    def setUp(self):
        why = Netns.unavailable()
        if why is not None:
            self.skipTest(why)
        self.dir = tempfile.mkdtemp(prefix="raftsql-e2e-tlsns-")
        self.ca = certs.CA(self.dir)
        self.auth = {}
        for i in (1, 2, 3):
            self.auth[i] = self.ca.tls_keys("n%d" % i, ["n%d" % i])
        self.net = Netns(4)
        self.nodes = {}
        try:
            self.net.start()
        except Exception:
            self.net.close()
            raise
        names = {"n%d" % i: i for i in (1, 2, 3)}
        self.net.hosts(names, only=[1, 2, 3])
        self.net.hosts({"n%d" % i: 4 for i in (1, 2, 3)}, only=[4])

    def tearDown(self):
        codes = [n.stop() for n in self.nodes.values()]
        self.net.close()
        if any(c != 0 for c in codes):
            for n in self.nodes.values():
                with open(n.log_path, errors="replace") as f:
                    print(f.read()[-3000:])
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertTrue(all(c == 0 for c in codes), codes)

    def start(self, cluster, i, extra=""):
        """Start node i of cluster "a" (in host i) or "b" (in host 4)."""
        host, port, members = ((i, A_PORT, A_MEMBERS) if cluster == "a"
                               else (4, B_PORTS[i], B_MEMBERS))
        name = "%s%d" % (cluster, i)
        n = Node(NODE, i, os.path.join(self.dir, name + ".db"),
                 os.path.join(self.dir, name + ".log"),
                 prefix=self.net.prefix(host))
        self.nodes[name] = n
        n.sql("SELECT raft_start(?)",
              "id=%d listen=0.0.0.0:%d advertise=n%d:%d cluster=%s %s %s %s"
              % (i, port, i, port, members, self.auth[i], FAST, extra))
        return n

    def group(self, cluster):
        return [n for name, n in self.nodes.items() if name[0] == cluster]

    def cluster_id(self, cluster):
        """The cluster id once every node of @cluster shows the same."""
        def same():
            ids = {n.status()["cluster_id"] for n in self.group(cluster)}
            return ids.pop() if len(ids) == 1 and None not in ids else None
        return wait_for("one cluster id on " + cluster, same)

    def positions(self, cluster):
        return {n.id: (n.status()["term"], n.status()["commit"])
                for n in self.group(cluster)}

    def log(self, name):
        with open(self.nodes[name].log_path, errors="replace") as f:
            return f.read()

    def test_hostnames_and_cluster_ids(self):
        for i in (1, 2, 3):
            self.start("a", i)
        for i in (1, 2, 3):
            self.start("b", i)
        aid, bid = self.cluster_id("a"), self.cluster_id("b")
        self.assertNotEqual(aid, bid)
        # Cluster a: TLS by hostname, no insecure=on, writes replicate.
        leader = wait_for("a leader", lambda: [
            n for n in self.group("a") if n.status()["role"] == "leader"])
        leader[0].sql("SELECT raft_exec('CREATE TABLE t(x)')")
        leader[0].sql("SELECT raft_exec('INSERT INTO t VALUES (1)')")
        index = leader[0].status()["applied"]
        for n in self.group("a"):
            wait_for("node %d to apply %d" % (n.id, index),
                     lambda: n.status()["applied"] >= index)
            self.assertEqual(n.value("SELECT count(*) FROM t"), 1)
            self.assertEqual(n.status()["tls"], "certificates")
        for i in (1, 2, 3):
            for j in (1, 2, 3):
                if i != j:
                    self.assertIn("peer %d (n%d:%d): connected (TLSv1.3" %
                                  (j, j, A_PORT), self.log("a%d" % i))
        # Node 1 of b dials its peer 2 at a's node 2: the certificates
        # pass (both name n2, n1), the cluster id does not.
        self.nodes.pop("b1").stop()
        before = self.positions("a")
        self.start("b", 1, "dial=2@%s:%d" % (self.net.ip(2), A_PORT))
        here = ("refused server 1: its cluster id %s is not this "
                "cluster's %s" % (bid, aid))
        there = "refused us: cluster id %s is not its cluster %s" % (bid, aid)
        wait_for("the refusal on both sides",
                 lambda: here in self.log("a2") and there in self.log("b1"))
        time.sleep(3)  # several re-dials (backoff up to 2 s)
        self.assertEqual(self.log("a2").count(here), 1)
        self.assertEqual(self.log("b1").count(there), 1)
        self.assertNotIn("certificate does not name", self.log("a2"))
        self.assertNotIn("TLS handshake failed", self.log("a2"))
        self.assertEqual(self.positions("a"), before)
        self.assertEqual(self.cluster_id("a"), aid)
        self.assertEqual(self.cluster_id("b"), bid)


if __name__ == "__main__":
    unittest.main()
