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

from raftsql_cluster import Cluster, Node, free_ports  # noqa: E402

NODE = os.environ.get("RAFTSQL_TESTHOST",
                      os.path.join(ROOT, "build", "raftsql-testhost"))
DAEMON = os.environ.get("RAFTSQL_DAEMON",
                        os.path.join(ROOT, "build", "san", "raftsql-node"))
SO = os.environ.get("RAFTSQL_SO", os.path.join(ROOT, "build", "raftsql.so"))


def wait_for(what, predicate, timeout=20.0):
    """Poll predicate() until it returns a true value; return it."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def connect(path):
    """A connection of this process to path with raftsql loaded."""
    con = sqlite3.connect(path, timeout=10, check_same_thread=False,
                          isolation_level=None)
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
    @members, started with raft_start and @extra keys; returns them."""
    peers = []
    for i in ids:
        n = Node(NODE, i, os.path.join(workdir, "node%d.db" % i),
                 os.path.join(workdir, "node%d.log" % i))
        n.sql("SELECT raft_start(?)", "id=%d cluster=%s %s" % (
            i, members, extra))
        peers.append(n)
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
        ports = free_ports(3)
        self.members = ",".join("%d@127.0.0.1:%d" % (i + 1, p)
                                for i, p in enumerate(ports))
        self.db = os.path.join(self.dir, "node%d.db" % self.HOST_ID)
        self.con = connect(self.db)
        self.con.execute("SELECT raft_start(?)", ("id=%d cluster=%s %s" % (
            self.HOST_ID, self.members, self.TIMING),))
        self.peers = start_peers(self.dir, self.members, self.TIMING,
                                 ids=[i for i in (1, 2, 3)
                                      if i != self.HOST_ID])

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
        """Wait until @sql answers @expected on every node."""
        got = []

        def same():
            got[:] = [n.sql(sql) for n in self.cluster.nodes]
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
