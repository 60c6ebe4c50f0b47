"""The configuration at start: cluster= bootstraps a new cluster once,
after which the stored configuration is in force (a disagreeing cluster=
is ignored with a WARN line, so a node restarted with a string of its own
cannot split the cluster), a restart needs no cluster=, and
force_new_cluster=1 recovers a survivor of a lost quorum.
"""

import shutil
import time
import unittest

from e2e import NODE, ClusterCase  # noqa: E402
from raftsql_cluster import Node, NodeError, free_ports  # noqa: E402

FAST = "election_timeout_ms=300 heartbeat_ms=30 exec_timeout_ms=3000"


class BootstrapTest(ClusterCase):
    """A fresh 3-node cluster per test."""

    def setUp(self):
        self.start(FAST)

    def restart(self, node, config):
        """Stop @node and start it again with raft_start(@config); returns
        the new Node (also put in the cluster's list), raft_start's text in
        its started attribute."""
        self.assertEqual(node.stop(), 0)
        n = Node(NODE, node.id, node.db, node.log_path)
        self.cluster.nodes[node.id - 1] = n
        n.started = n.value("SELECT raft_start(?)", config)
        return n

    def port(self, node_id):
        return self.cluster.members.split(",")[node_id - 1].split(":")[-1]

    def test_status_shows_the_bootstrapped_configuration(self):
        """Every founder stores the bootstrap entry 1 and shows the
        configuration in force."""
        for n in self.cluster.nodes:
            st = n.status()
            conf = st["configuration"]
            self.assertEqual(conf["index"], 1, st)
            self.assertEqual([m["id"] for m in conf["members"]], [1, 2, 3])
            self.assertEqual({m["role"] for m in conf["members"]}, {"voter"})
            self.assertEqual(st["member"], "voter")

    def test_alone_cluster_string_is_ignored_no_split_brain(self):
        """Restarting node 3 with cluster= naming itself alone: the string
        is ignored, with one WARN line naming both configurations; node 3
        keeps the stored configuration of three, so it neither leads alone
        nor splits the cluster: every node names one leader, which takes
        writes that node 3 applies."""
        self.exec(self.leader, "CREATE TABLE t(x)")
        alone = "3@127.0.0.1:%s" % self.port(3)
        n = self.restart(self.cluster.node(3),
                         "id=3 cluster=%s %s" % (alone, FAST))
        with open(n.log_path, errors="replace") as f:
            lines = [line for line in f if "cluster= ignored" in line]
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("WARN", lines[0])
        self.assertIn("it says %s;" % alone, lines[0])
        self.assertIn("says %s:" % self.cluster.members, lines[0])
        st = n.status()
        self.assertEqual(len(st["configuration"]["members"]), 3, st)
        self.assertEqual(st["member"], "voter")
        deadline = time.monotonic() + 10
        while True:
            leaders = {o.value("SELECT raft_leader()")
                       for o in self.cluster.nodes}
            if len(leaders) == 1 and None not in leaders:
                break
            self.assertLess(time.monotonic(), deadline, leaders)
            time.sleep(0.05)
        leader = self.cluster.node(leaders.pop())
        self.assertEqual(self.exec(leader, "INSERT INTO t VALUES(111)"), 1)
        self.cluster.wait_applied(leader.status()["applied"], [n])
        self.assertEqual(n.sql("SELECT x FROM t"), [[111]])

    def test_restart_without_cluster_uses_the_stored_configuration(self):
        """A restarted node may omit cluster= (and listen=): it takes both
        from its stored configuration."""
        f = self.followers[0]
        self.exec(self.leader, "CREATE TABLE r(x)")
        f = self.restart(f, "id=%d %s" % (f.id, FAST))
        self.assertEqual(self.exec(f, "INSERT INTO r VALUES(1)"), 1)
        st = f.status()
        self.assertEqual(len(st["configuration"]["members"]), 3)
        self.assertEqual(len(st["peers"]), 2)

    def test_listen_that_differs_is_warned_about(self):
        """A listen= that differs from this node's stored address is
        taken (NAT, containers) but warned about: a WARN line and a
        raft_status() warning naming both; raft_start says where the node
        listens in effect, also when listen= comes from the stored
        configuration."""
        f = self.followers[0]
        stored = "127.0.0.1:%s" % self.port(f.id)
        other = "127.0.0.1:%d" % free_ports(1)[0]
        f = self.restart(f, "id=%d listen=%s %s" % (f.id, other, FAST))
        self.assertIn("listening on %s," % other, f.started)
        differs = ("advertised address %s (advertise=, else listen=) "
                   "differs" % other)
        warnings = [w for w in f.status()["warnings"] if "listen=" in w]
        self.assertEqual(len(warnings), 1, warnings)
        self.assertIn(differs, warnings[0])
        self.assertIn("address %s" % stored, warnings[0])
        with open(f.log_path, errors="replace") as log:
            lines = [line for line in log if differs in line]
        self.assertEqual(len(lines), 1)
        self.assertIn("WARN", lines[0])
        self.assertIn(stored, lines[0])
        f = self.restart(f, "id=%d %s" % (f.id, FAST))
        self.assertIn("listening on %s," % stored, f.started)
        self.assertEqual([w for w in f.status()["warnings"] if "listen=" in w],
                         [])

    def test_join_beside_cluster_is_refused(self):
        n = self.followers[0]
        self.assertEqual(n.stop(), 0)
        other = Node(NODE, n.id, n.db, n.log_path)
        self.cluster.nodes[n.id - 1] = other
        with self.assertRaises(NodeError) as cm:
            other.sql("SELECT raft_start(?)", "id=%d cluster=%s join=%s %s" % (
                n.id, self.cluster.members, "127.0.0.1:1", FAST))
        self.assertIn("join: cannot be given with cluster=", str(cm.exception))
        other.sql("SELECT raft_start(?)", "id=%d cluster=%s %s" % (
            n.id, self.cluster.members, FAST))

    def test_force_new_cluster_recovers_a_survivor(self):
        """3 nodes, 2 killed: the survivor refuses writes; restarted with
        force_new_cluster=1 it leads alone, takes writes and keeps what was
        committed; its status and log say what was forced."""
        self.exec(self.leader, "CREATE TABLE k(x)")
        self.exec(self.leader, "INSERT INTO k VALUES(1)")
        survivor = self.followers[0]
        self.cluster.wait_applied(self.leader.status()["applied"], [survivor])
        for n in self.cluster.nodes:
            if n is not survivor:
                n.kill()
        with self.assertRaises(NodeError) as cm:
            self.exec(survivor, "INSERT INTO k VALUES(2)")
        self.assertIn("not applied", str(cm.exception))
        term = survivor.status()["term"]
        survivor = self.restart(survivor, "id=%d force_new_cluster=1 %s" % (
            survivor.id, FAST))
        deadline = time.monotonic() + 10
        while survivor.status()["role"] != "leader":
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        self.assertEqual(self.exec(survivor, "INSERT INTO k VALUES(3)"), 1)
        self.assertEqual(survivor.sql("SELECT x FROM k ORDER BY x"),
                         [[1], [3]])
        st = survivor.status()
        self.assertEqual([m["id"] for m in st["configuration"]["members"]],
                         [survivor.id])
        self.assertTrue(st["configuration"]["forced"])
        self.assertGreater(st["term"], term)
        with open(survivor.log_path, errors="replace") as f:
            self.assertIn("force_new_cluster=1: FORCED", f.read())
        # Restarted with the flag still given, nothing more is forced.
        survivor = self.restart(survivor, "id=%d force_new_cluster=1 %s" % (
            survivor.id, FAST))
        self.assertFalse(survivor.status()["configuration"]["forced"])
        for n in self.cluster.nodes:
            if n is not survivor:
                n.stop()
        # The killed nodes exit by SIGKILL: only the survivor's code counts.
        code = survivor.stop()
        self.cluster = None
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertEqual(code, 0)


if __name__ == "__main__":
    unittest.main()
