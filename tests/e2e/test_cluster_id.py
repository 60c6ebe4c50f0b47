"""The cluster id (ext/runtime/cluster_id.h): one id on every node of a
cluster, kept across restarts and carried to a joiner that installs a
snapshot; a node of another cluster pointed at one is refused on both
sides with one line each, and nothing it sends reaches the core; and the
wire versions of a rolling upgrade (this build speaks 1 to 7,
build/raftsql-testhost-next 1 to 8, build/raftsql-testhost-next-only 8
only)."""

import os
import re
import shutil
import tempfile
import time
import unittest

from e2e import NODE, ROOT, wait_for
from raftsql_cluster import Node, NodeError, free_ports

NEXT = os.environ.get("RAFTSQL_TESTHOST_NEXT",
                      os.path.join(ROOT, "build", "raftsql-testhost-next"))
NEXT_ONLY = os.environ.get(
    "RAFTSQL_TESTHOST_NEXT_ONLY",
    os.path.join(ROOT, "build", "raftsql-testhost-next-only"))

FAST = ("election_timeout_ms=300 heartbeat_ms=30 exec_timeout_ms=5000 "
        "log_level=info")


def count_rows(node):
    """Rows of table t on @node, -1 while it has no table t."""
    try:
        return node.value("SELECT count(*) FROM t")
    except NodeError:
        return -1


class Group:
    """Node processes of one cluster in a directory: ids 1..n founded it
    with cluster=; others join with listen= alone once raft_add named
    them."""

    def __init__(self, workdir, name, n, extra=""):
        self.dir = workdir
        self.name = name
        self.extra = extra
        self.ports = free_ports(n + 2)
        self.string = ",".join("%d@%s" % (i, self.address(i))
                               for i in range(1, n + 1))
        self.nodes = {}

    def address(self, i):
        return "127.0.0.1:%d" % self.ports[i - 1]

    def log(self, i):
        return os.path.join(self.dir, "%s%d.log" % (self.name, i))

    def start(self, i, binary=NODE, where=None, extra=""):
        """Start node i (cluster= unless @where says otherwise)."""
        node = Node(binary, i, os.path.join(self.dir, "%s%d.db" % (
            self.name, i)), self.log(i))
        where = where or "cluster=%s" % self.string
        node.sql("SELECT raft_start(?)", "id=%d %s %s %s %s" % (
            i, where, FAST, self.extra, extra))
        self.nodes[i] = node
        return node

    def join(self, i, binary=NODE):
        """Add node i through the leader and start it with listen=."""
        self.leader().value("SELECT raft_add(?, ?)", i, self.address(i))
        return self.start(i, binary, "listen=%s" % self.address(i))

    def leader(self):
        def find():
            for n in self.nodes.values():
                if n.proc.poll() is None and n.status()["role"] == "leader":
                    return n
            return None
        return wait_for("a leader of %s" % self.name, find)

    def cluster_id(self):
        """The id once every node shows the same one."""
        def same():
            ids = {n.status()["cluster_id"] for n in self.nodes.values()}
            return ids.pop() if len(ids) == 1 and None not in ids else None
        return wait_for("one cluster id on %s" % self.name, same)

    def count(self, i, text):
        with open(self.log(i), errors="replace") as f:
            return f.read().count(text)

    def stop(self, i):
        return self.nodes.pop(i).stop()

    def stop_all(self):
        return [self.stop(i) for i in list(self.nodes)]


class ClusterIdTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-e2e-cid-")
        self.groups = []

    def tearDown(self):
        codes = []
        for g in self.groups:
            codes += g.stop_all()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertTrue(all(c == 0 for c in codes), codes)

    def group(self, name, n=3, extra=""):
        g = Group(self.dir, name, n, extra)
        self.groups.append(g)
        for i in range(1, n + 1):
            g.start(i)
        return g

    def test_one_id_kept_across_restarts(self):
        """The first leader proposes the id; every node shows it, in
        raft_status() and raft_cluster_id(), and again right after a
        restart of all nodes (from the log directory)."""
        g = self.group("a")
        cid = g.cluster_id()
        self.assertTrue(re.fullmatch("[0-9a-f]{32}", cid), cid)
        for n in g.nodes.values():
            self.assertEqual(n.value("SELECT raft_cluster_id()"), cid)
        self.assertEqual(sum(g.count(i, "cluster id %s proposed" % cid)
                             for i in (1, 2, 3)), 1)
        g.stop_all()
        for i in (1, 2, 3):
            n = g.start(i)
            self.assertEqual(n.status()["cluster_id"], cid)
        g.leader().value("SELECT raft_exec('CREATE TABLE t(x)')")
        self.assertEqual(g.cluster_id(), cid)

    def test_joiner_by_snapshot(self):
        """A node added after the log was compacted installs a snapshot;
        it adopted the id from its leader's handshake before, and keeps
        it when restarted alone."""
        g = self.group("a", extra="snapshot_threshold=16 trailing_entries=0")
        cid = g.cluster_id()
        leader = g.leader()
        leader.value("SELECT raft_exec('CREATE TABLE t(x)')")
        for i in range(60):
            leader.value("SELECT raft_exec('INSERT INTO t VALUES (?)', ?)", i)
        wait_for("compaction", lambda: leader.status()["first_index"] > 20)
        joiner = g.join(4)
        self.assertEqual(g.cluster_id(), cid)
        wait_for("the joiner's snapshot",
                 lambda: joiner.status()["snapshots_installed"] >= 1)
        wait_for("the rows", lambda: count_rows(joiner) == 60)
        self.assertEqual(g.count(4, "cluster id %s, adopted from server" %
                                 cid), 1)
        for i in (1, 2, 3):
            g.stop(i)
        g.stop(4)
        n = g.start(4, where="listen=%s" % g.address(4))
        self.assertEqual(n.status()["cluster_id"], cid)

    def test_other_cluster_refused(self):
        """A node of cluster b whose dial= points at a node of cluster a
        is refused there, one line on each side however often it
        retries, and a's term and commit do not move."""
        a = self.group("a")
        b = self.group("b")
        aid, bid = a.cluster_id(), b.cluster_id()
        self.assertNotEqual(aid, bid)
        a.leader()
        before = {i: (n.status()["term"], n.status()["commit"])
                  for i, n in a.nodes.items()}
        b.stop(1)
        b.start(1, extra="dial=2@%s" % a.address(2))
        time.sleep(4)  # several re-dials (backoff up to 2 s)
        here = ("refused server 1: its cluster id %s is not this "
                "cluster's %s" % (bid, aid))
        there = "refused us: cluster id %s is not its cluster %s" % (bid, aid)
        self.assertEqual(a.count(2, here), 1, here)
        self.assertEqual(b.count(1, there), 1, there)
        after = {i: (n.status()["term"], n.status()["commit"])
                 for i, n in a.nodes.items()}
        self.assertEqual(before, after)
        self.assertEqual(a.cluster_id(), aid)


@unittest.skipUnless(os.path.exists(NEXT) and os.path.exists(NEXT_ONLY),
                     "needs build/raftsql-testhost-next and -next-only "
                     "(make next)")
class WireVersionTest(unittest.TestCase):
    """Rolling upgrades: a node of the next release (wire versions 1 to
    8) joins a cluster of this one (1 to 7) and speaks 7; a node of this
    release joins a cluster of the next and speaks 7 there while the
    others speak 8; a node of wire version 8 only is refused with one
    line each side."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-e2e-wire-")
        self.g = None

    def tearDown(self):
        codes = self.g.stop_all() if self.g else []
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertTrue(all(c == 0 for c in codes), codes)

    def start(self, binary):
        self.g = Group(self.dir, "n", 3)
        for i in (1, 2, 3):
            self.g.start(i, binary)
        leader = self.g.leader()
        leader.value("SELECT raft_exec('CREATE TABLE t(x)')")
        return leader

    def check_joined(self, binary):
        joiner = self.g.join(4, binary)
        self.g.leader().value("SELECT raft_exec('INSERT INTO t VALUES (1)')")
        wait_for("the row on node 4", lambda: count_rows(joiner) == 1)
        self.g.cluster_id()
        # Node 4 speaks version 7 to every peer, and they to it.
        self.assertGreater(self.g.count(4, "connected (wire version 7"), 0)
        self.assertEqual(self.g.count(4, "connected (wire version 8"), 0)
        self.assertEqual(self.g.count(4, "connected (wire version 1"), 0)
        for i in (1, 2, 3):
            with open(self.g.log(i), errors="replace") as f:
                text = f.read()
            self.assertIn("peer 4 (127.0.0.1:%d): connected (wire version 7"
                          % self.g.ports[3], text)

    def test_next_joins_this(self):
        self.start(NODE)
        self.check_joined(NEXT)
        # The start line names the wire versions each build speaks.
        self.assertEqual(self.g.count(1, ", wire versions 1-7, log "), 1)
        self.assertEqual(self.g.count(4, ", wire versions 1-8, log "), 1)

    def test_this_joins_next(self):
        self.start(NEXT)
        self.assertGreater(self.g.count(1, "connected (wire version 8"), 0)
        self.check_joined(NODE)

    def test_next_only_refused(self):
        leader = self.start(NODE)
        self.g.join(4, NEXT_ONLY)
        time.sleep(4)
        here = ("refused server %d: it speaks wire versions 1 to 7, this "
                "server 8 to 8: no version in common" % leader.id)
        there = ("): refused us: it speaks wire versions 8 to 8, we speak 1 "
                 "to 7: no version in common")
        self.assertEqual(self.g.count(4, here), 1, here)
        self.assertEqual(self.g.count(leader.id, there), 1, there)
        self.assertEqual(count_rows(self.g.nodes[4]), -1)


if __name__ == "__main__":
    unittest.main()
