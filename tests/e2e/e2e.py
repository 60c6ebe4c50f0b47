"""Shared pieces of the end-to-end tests: where the binaries are, a Python
connection with raftsql loaded, a bounded wait, and a test case running a
fresh cluster of raftsql-testhost processes on 127.0.0.1.
"""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

from raftsql_cluster import (Cluster, Node, NodeError, free_ports,  # noqa: E402
                             remove_node_files)

NODE = os.environ.get("RAFTSQL_TESTHOST",
                      os.path.join(ROOT, "build", "raftsql-testhost"))
DAEMON = os.environ.get("RAFTSQL_DAEMON",
                        os.path.join(ROOT, "build", "san", "raftsql-node"))
SO = os.environ.get("RAFTSQL_SO", os.path.join(ROOT, "build", "raftsql.so"))


def wait_for(what, predicate, timeout=20.0):
    """Poll predicate() until it returns a true value; return it. Past
    @timeout s, raise TimeoutError naming @what and the last value seen."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError("%s (not within %.0f s; last saw %r)"
                               % (what, timeout, value))
        time.sleep(0.05)


def connect(path, **kw):
    """A connection of this process to path with raftsql loaded (@kw: more
    arguments of sqlite3.connect, such as cached_statements)."""
    con = sqlite3.connect(path, timeout=10, check_same_thread=False,
                          isolation_level=None, **kw)
    con.enable_load_extension(True)
    con.load_extension(os.path.splitext(SO)[0])
    con.enable_load_extension(False)
    return con


def without_raftsql(db, sql, timeout=30):
    """Run @sql on @db in the stock sqlite3 shell, a process that never
    loaded raftsql (once this process loaded it, every connection it opens
    has raftsql's guard); return its output lines. Raises AssertionError
    on an error."""
    out = subprocess.run(["sqlite3", "-init", "/dev/null", "-batch", "-bail",
                          "-cmd", ".timeout 10000", db, sql],
                         capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise AssertionError("sqlite3 %s: %s" % (db, out.stderr))
    return out.stdout.splitlines()


def start_peers(workdir, members, extra, ids=(2, 3)):
    """raftsql-testhost processes for the members @ids of the cluster string
    @members, started with raft_start and @extra keys; returns them. On a
    failed start, the ones started are killed and the error raised."""
    peers = []
    for i in ids:
        n = Node(NODE, i, os.path.join(workdir, "node%d.db" % i),
                 os.path.join(workdir, "node%d.log" % i))
        peers.append(n)
        try:
            n.sql("SELECT raft_start(?)", "id=%d cluster=%s %s" % (
                i, members, extra))
        except NodeError:
            for p in peers:
                p.kill()
            raise
    return peers


class PythonHostCase(unittest.TestCase):
    """A 3-node cluster whose node HOST_ID runs in this process (raft_start
    on self.con, a connection of ours to self.db, as a Python host does),
    the others raftsql-testhost processes (self.peers), all started with
    the keys TIMING."""

    HOST_ID = 1
    TIMING = ""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-py-")
        self.db = os.path.join(self.dir, "node%d.db" % self.HOST_ID)
        # A port found free can be taken by another process before the
        # node binds it (another run, a demo): start again on new ones.
        for attempt in range(5):
            ports = free_ports(3)
            self.members = ",".join("%d@127.0.0.1:%d" % (i + 1, p)
                                    for i, p in enumerate(ports))
            self.con = connect(self.db)
            self.peers = []
            try:
                self.con.execute("SELECT raft_start(?)", (
                    "id=%d cluster=%s %s" % (self.HOST_ID, self.members,
                                             self.TIMING),))
                self.peers = start_peers(self.dir, self.members, self.TIMING,
                                         ids=[i for i in (1, 2, 3)
                                              if i != self.HOST_ID])
                return
            except (sqlite3.Error, NodeError) as e:
                if "address already in use" not in str(e) or attempt == 4:
                    raise
                try:
                    self.con.execute("SELECT raft_stop()")
                except sqlite3.Error:
                    pass  # it did not start
                self.con.close()
                for i in (1, 2, 3):
                    remove_node_files(self.dir, i)

    def tearDown(self):
        self.con.execute("SELECT raft_stop()")
        self.con.close()
        codes = [n.stop() for n in self.peers]
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertEqual(codes, [0, 0])


def fill(mnt, leave=0):
    """Fill the filesystem at @mnt with a file but @leave bytes; return
    its path."""
    filler = os.path.join(mnt, "filler")
    with open(filler, "wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * (64 * 1024))
                out.flush()
        except OSError:
            pass
    if leave > 0:
        os.truncate(filler, max(0, os.path.getsize(filler) - leave))
    return filler


def stop_cluster(cluster):
    """Stop every node of @cluster; print the log tail of each that exited
    with an error (a sanitizer report); return the exit codes."""
    codes = cluster.stop()
    for n, code in zip(cluster.nodes, codes):
        if code not in (0, None):
            with open(n.log_path, errors="replace") as f:
                sys.stderr.write(f.read()[-4000:])
    return codes


class ClusterCase(unittest.TestCase):
    """A test case with a fresh 3-node cluster: call start(extra) first;
    tearDown stops every node and fails on a non-zero exit (a sanitizer
    report, printed from the node's log)."""

    cluster = None

    def start(self, extra, prefix="raftsql-e2e-", env=None):
        """Start the cluster with the keys @extra; @env maps a node id to
        variables of its process's environment (Cluster)."""
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.cluster = Cluster(NODE, self.dir, 3, extra, env=env)
        self.leader = self.cluster.wait_leader()
        self.followers = [n for n in self.cluster.nodes
                          if n.id != self.leader.id]
        # The first leader proposes the cluster id in an entry of its own
        # once its term's first entry committed: wait until every node
        # applied it, so tests that count log indexes from here do not
        # race with that entry.
        deadline = time.monotonic() + 30
        while any(n.status()["cluster_id"] is None
                  for n in self.cluster.nodes):
            self.assertLess(time.monotonic(), deadline,
                            "no cluster id on every node within 30 s")
            time.sleep(0.02)
        self.cluster.wait_applied(self.leader.status()["applied"])

    def start_kv(self, extra):
        """start(@extra), then table kv(k TEXT PRIMARY KEY, v) holding
        ('a', 1), applied on every node."""
        self.start(extra)
        self.exec(self.leader, "CREATE TABLE kv(k TEXT PRIMARY KEY, v)")
        self.exec(self.leader, "INSERT INTO kv VALUES('a', 1)")
        self.cluster.wait_all_applied()

    def tearDown(self):
        if self.cluster is None:
            return
        codes = stop_cluster(self.cluster)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertEqual(codes, [0, 0, 0], "a node exited with an error "
                         "(sanitizer report in its log)")

    def rows_everywhere(self, sql, expected, timeout=20.0):
        """Wait until @sql answers @expected on every node. An error from
        a node (a table a lagging node has not applied yet) is waited
        past like a wrong answer, and shown if it is what it last said."""
        got = []

        def answer(node):
            try:
                return node.sql(sql)
            except NodeError as e:
                return "error: %s" % e

        def same():
            got[:] = [answer(n) for n in self.cluster.nodes]
            return all(g == expected for g in got)
        try:
            wait_for(sql, same, timeout)
        except TimeoutError:
            self.fail("%s: %r on the nodes, wanted %r" % (sql, got, expected))

    def assert_verified(self):
        """Every node applied the same index, and its raft_verify() finds
        its file equal to its running checksum, the same on every node;
        none took a writer's commit for a foreign one (no divergence, no
        repair)."""
        self.cluster.wait_all_applied()
        seen = []
        for n in self.cluster.nodes:
            v = json.loads(n.value("SELECT raft_verify()"))
            self.assertTrue(v["equal"], "node %d: %r" % (n.id, v))
            seen.append((v["index"], v["stored"]))
            st = n.status()
            self.assertEqual((st["diverged"], st["repairs"]), (None, 0),
                             "node %d" % n.id)
        self.assertEqual(len(set(seen)), 1, "the nodes differ: %r" % seen)

    def exec(self, node, sql, *params):
        """raft_exec(sql, params...) on node; returns rows changed."""
        return node.value("SELECT raft_exec(?%s)" % (", ?" * len(params)),
                          sql, *params)


class HostedCase(unittest.TestCase):
    """A test case whose node 1 runs in this very process (Python's
    sqlite3 module as the host, on self.con), beside nodes 2 and 3 in
    raftsql-testhost processes (self.peers), with table kv(k TEXT PRIMARY
    KEY, v) holding ('a', 1) on every node. The class attribute @lead
    True makes node 1 the leader (raft_transfer), so that plain writes in
    this process are served; False makes it a follower; None leaves the
    election's outcome."""

    lead = True
    timing = ("election_timeout_ms=1000 heartbeat_ms=50 "
              "exec_timeout_ms=10000")

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-hosted-")
        ports = free_ports(3)
        self.members = ",".join("%d@127.0.0.1:%d" % (i + 1, p)
                                for i, p in enumerate(ports))
        self.db = os.path.join(self.dir, "node1.db")
        self.con = connect(self.db)
        self.start_node()
        self.peers = start_peers(self.dir, self.members, self.timing)
        self.leader_id = wait_for("a leader", self.leader, 30)
        if self.lead and self.leader_id != 1:
            self.peer(self.leader_id).sql("SELECT raft_transfer(1)")
            self.leader_id = wait_for("node 1 leads",
                                      lambda: self.leader() == 1 and 1, 30)
        elif self.lead is False and self.leader_id == 1:
            self.con.execute("SELECT raft_transfer(2)")
            self.leader_id = wait_for("node 2 leads",
                                      lambda: self.leader() == 2 and 2, 30)
        self.con.execute("SELECT raft_exec('CREATE TABLE kv(k TEXT PRIMARY "
                         "KEY, v)')")
        self.con.execute("SELECT raft_exec('INSERT INTO kv VALUES(''a'', "
                         "1)')")
        self.wait_all_applied()

    def tearDown(self):
        try:
            self.con.execute("SELECT raft_stop()")
        except sqlite3.Error:
            pass  # stopped by the test
        self.con.close()
        codes = [n.stop() for n in self.peers]
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertEqual([c for c in codes if c not in (0, None)], [],
                         "a peer exited with an error (sanitizer report "
                         "in its log)")

    def start_node(self):
        """raft_start node 1 in this process."""
        self.con.execute("SELECT raft_start(?)", ("id=1 cluster=%s %s" % (
            self.members, self.timing),))

    def leader(self):
        """The leader node 1 knows, or None."""
        return self.con.execute("SELECT raft_leader()").fetchone()[0]

    def peer(self, node_id):
        """The raftsql-testhost process of node @node_id."""
        return [n for n in self.peers if n.id == node_id][0]

    def status(self):
        """Node 1's raft_status()."""
        return json.loads(self.con.execute(
            "SELECT raft_status()").fetchone()[0])

    def wait_all_applied(self, timeout=30):
        """Wait until every node applied the highest commit index any
        node knows (a write through a peer, the leader, commits there
        before node 1 hears of it)."""
        target = max([self.status()["commit"]] +
                     [n.status()["commit"] for n in self.peers])
        wait_for("node 1 applied %d" % target,
                 lambda: self.status()["applied"] >= target, timeout)
        for n in self.peers:
            wait_for("node %d applied %d" % (n.id, target),
                     lambda: n.status()["applied"] >= target, timeout)

    def assert_replicas_agree(self, timeout=30):
        """Every node reaches the same applied index, and raft_verify()
        finds each file equal to its running checksum, the same on every
        node (asked again until they agree, or @timeout s: the last
        answers are then shown)."""
        self.wait_all_applied()
        deadline = time.monotonic() + timeout
        while True:
            got = [json.loads(self.con.execute(
                "SELECT raft_verify()").fetchone()[0])]
            got += [json.loads(n.value("SELECT raft_verify()"))
                    for n in self.peers]
            if (all(v["equal"] for v in got) and
                    len({(v["index"], v["scanned"]) for v in got}) == 1):
                return
            if time.monotonic() > deadline:
                self.fail("the replicas do not agree: %r" % got)
            time.sleep(0.05)
