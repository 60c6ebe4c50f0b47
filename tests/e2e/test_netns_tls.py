"""Three (and five) hosts: raftsql nodes in network namespaces joined by
a bridge (netns.py), each listening on 0.0.0.0 inside its own and known
to the others by hostname (n1, n2, ... in /etc/netns/<ns>/hosts).

- The Chinook replication of `make demo`, its fingerprints checked on
  every node (a generated script of the same shape when
  ../shared/data/chinook is absent, and then against stock SQLite only).
- A node of another cluster pointed at one with dial= is refused, and
  nothing it sends reaches the core.
- A proxy in a host of its own (flip_proxy.py) flips a byte of a record
  on one link: the connection closes, the nodes keep serving, the link
  comes back once the proxy stops.
- Five hosts: two of five nodes killed, the leader among them, and writes
  still commit.

Skips, saying why, without root or ip(8).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from e2e import NODE  # first: puts tools/ on the path
import demo  # noqa: E402
import fingerprint  # noqa: E402
from netns import Netns  # noqa: E402
from raftsql_cluster import Node, NodeError  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PORT = 7001
PROXY_PORT = 7002
FAST = ("election_timeout_ms=500 heartbeat_ms=50 exec_timeout_ms=20000 "
        "log_level=info insecure=on")


def members(ids):
    """The cluster= string of servers @ids, each n<id>:PORT."""
    return ",".join("%d@n%d:%d" % (i, i, PORT) for i in ids)


class Hosts(unittest.TestCase):
    """HOSTS namespaces, nodes in them (self.nodes, by id) and anything
    else started (self.others: nodes that are no member, processes)."""

    HOSTS = 3    # namespaces, hosts 1..HOSTS
    MEMBERS = 3  # founders of the cluster: servers 1..MEMBERS

    def setUp(self):
        why = Netns.unavailable()
        if why is not None:
            self.skipTest(why)
        self.dir = tempfile.mkdtemp(prefix="raftsql-e2e-nstls-")
        self.nodes = {}
        self.others = []
        self.procs = []
        self.net = Netns(self.HOSTS)
        try:
            self.net.start()
        except Exception:
            self.net.close()
            raise
        self.net.hosts({"n%d" % i: i for i in range(1, self.HOSTS + 1)})

    def tearDown(self):
        codes = [n.stop() for n in self.nodes.values()]
        codes += [n.stop() for n in self.others]
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            for f in (p.stdin, p.stdout):
                if f is not None:
                    f.close()
        self.net.close()
        if any(c != 0 for c in codes):
            for n in list(self.nodes.values()) + self.others:
                sys.stderr.write("---- %s\n%s" % (n.log_path,
                                                  self.log(n)[-3000:]))
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertTrue(all(c == 0 for c in codes), codes)

    # ---- helpers ----------------------------------------------------

    def node(self, i, name, host):
        """A node process of id @i in host @host, its files <name>.*."""
        return Node(NODE, i, os.path.join(self.dir, name + ".db"),
                    os.path.join(self.dir, name + ".log"),
                    prefix=self.net.prefix(host))

    def start(self, i, ids=None, extra="", host=None, name=None,
              member=True):
        """Start server @i in host @host (default i) as a founder of
        @ids (default 1..MEMBERS): listening on every interface there and
        advertising n<i>. Returns the node."""
        n = self.node(i, name or "node%d" % i, host or i)
        (self.nodes.__setitem__(i, n) if member else self.others.append(n))
        n.started = n.value(
            "SELECT raft_start(?)",
            "id=%d listen=0.0.0.0:%d advertise=n%d:%d cluster=%s %s %s" % (
                i, PORT, i, PORT,
                members(ids or range(1, self.MEMBERS + 1)), FAST, extra))
        return n

    def wait(self, pred, what, timeout=30.0):
        deadline = time.monotonic() + timeout
        while True:
            v = pred()
            if v:
                return v
            if time.monotonic() > deadline:
                self.fail("timed out waiting for " + what)
            time.sleep(0.05)

    def leader(self):
        """The member every member names leader (a live one)."""
        def agreed():
            ids = {n.value("SELECT raft_leader()")
                   for n in self.nodes.values()}
            return self.nodes.get(ids.pop()) if len(ids) == 1 else None
        return self.wait(agreed, "a leader")

    def write(self, value, via=None):
        """Insert @value into t through @via (default the leader; retried
        while leadership moves) and wait until every member applied it."""
        node = via or self.leader()
        deadline = time.monotonic() + 30
        while True:
            try:
                node.sql("SELECT raft_exec('INSERT INTO t VALUES (?)', ?)",
                         value)
                break
            except NodeError:
                if time.monotonic() > deadline or via is not None:
                    raise
                time.sleep(0.2)
                node = self.leader()
        index = node.status()["applied"]
        for n in self.nodes.values():
            self.wait(lambda: n.status()["applied"] >= index,
                      "node %d to apply %d" % (n.id, index))
            self.assertEqual(
                n.value("SELECT count(*) FROM t WHERE x = ?", value), 1)

    def log(self, n):
        with open(n.log_path, errors="replace") as f:
            return f.read()

    def wait_log(self, n, text, timeout=30.0):
        self.wait(lambda: text in self.log(n),
                  "'%s' in %s" % (text, n.log_path), timeout)

    def positions(self):
        """Term, commit and configuration of every member."""
        out = {}
        for i, n in self.nodes.items():
            s = n.status()
            out[i] = (s["term"], s["commit"],
                      json.dumps(s["configuration"]["members"]))
        return out

    def cluster_id(self, nodes):
        def same():
            ids = {n.status()["cluster_id"] for n in nodes}
            return len(ids) == 1 and None not in ids and ids.pop()
        return self.wait(same, "one cluster id")


class ThreeHostsTest(Hosts):
    """Three members; host 4 for a proxy."""

    HOSTS = 4

    def test_chinook_replicates(self):
        """The script of `make demo`, statement by statement through
        raft_exec on the leader: each node's database has the fingerprint
        stock SQLite gives the script (and Chinook's expected one)."""
        for i in (1, 2, 3):
            self.start(i)
        path, expected, what = demo.pick_script(self.dir)
        with open(path, encoding="utf-8") as f:
            stmts = demo.split_statements(f.read())
        leader = self.leader()
        for stmt in stmts:
            leader.value("SELECT raft_exec(?)", stmt)
        index = leader.status()["applied"]
        for n in self.nodes.values():
            self.wait(lambda: n.status()["applied"] >= index,
                      "node %d to apply %d" % (n.id, index))
            for p in n.status()["peers"]:
                self.assertEqual(p["address"], "n%d:%d" % (p["id"], PORT))
        codes = [n.stop() for n in self.nodes.values()]
        self.assertEqual(codes, [0, 0, 0])
        ref = os.path.join(self.dir, "reference.db")
        with open(path, "rb") as f:
            subprocess.run(["sqlite3", ref], stdin=f, check=True)
        want = fingerprint.render(fingerprint.fingerprint(ref))
        if expected is not None:
            self.assertEqual(want, expected, what)
        else:
            sys.stderr.write("(%s) " % what)
        for n in self.nodes.values():
            self.assertEqual(fingerprint.render(
                fingerprint.fingerprint(n.db)), want, "node %d" % n.id)

    @unittest.skip("needs TLS between peers (not merged yet)")
    def test_flipped_byte_closes_the_connection(self):
        """Node 1 reaches node 2 through a proxy in host 4 (dial=); once
        it flips a byte of a record after the handshakes, node 2 closes
        that connection; node 1 re-dials and each new connection fails
        alike while the cluster serves through node 3; once the proxy
        stops flipping, the link comes back."""
        proxy = subprocess.Popen(
            self.net.prefix(4) + [sys.executable,
                                  os.path.join(HERE, "flip_proxy.py"),
                                  str(PROXY_PORT), "%s:%d" % (
                                      self.net.ip(2), PORT)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.procs.append(proxy)
        self.assertIn("listening", proxy.stdout.readline())

        def command(word):
            proxy.stdin.write(word + "\n")
            proxy.stdin.flush()
            return json.loads(proxy.stdout.readline())
        via = "%s:%d" % (self.net.ip(4), PROXY_PORT)
        for i in (1, 2, 3):
            self.start(i, extra="dial=2@%s" % via if i == 1 else "")
        leader = self.leader()
        leader.sql("SELECT raft_exec('CREATE TABLE t(x)')")
        if leader.id == 3:
            # Node 1 sends to node 2 only when one of them leads.
            leader.sql("SELECT raft_transfer(1)")
            self.wait(lambda: self.leader().id in (1, 2), "leader 1 or 2")
        n1, n2 = self.nodes[1], self.nodes[2]
        self.write(1)
        connected = "peer 2 (n2:%d): connected" % PORT
        self.assertEqual(self.log(n1).count(connected), 1)
        command("on")
        self.wait_log(n2, FLIP_LINE)
        self.wait(lambda: command("stats")["flipped"] >= 2,
                  "the proxy to flip a record of a second connection")
        # Both ends of the broken link serve reads and writes.
        self.write(2, via=n2)
        self.write(3, via=n1)
        self.assertEqual(n2.value("SELECT count(*) FROM t"), 3)
        command("off")
        flipped = command("stats")["flipped"]
        self.wait(lambda: self.log(n1).count(connected) >= flipped + 1,
                  "node 1 to reconnect to node 2")
        self.wait(lambda: [p["connected"] for p in n1.status()["peers"]
                           if p["id"] == 2] == [True], "peer 2 connected")
        time.sleep(1)  # several heartbeats over the link: it holds
        self.assertEqual(command("stats")["flipped"], flipped)
        self.write(4)
        for n in self.nodes.values():
            self.assertIsNone(n.proc.poll())


FLIP_LINE = "malformed frame"


class OtherClusterTest(Hosts):
    """Cluster a in hosts 1-3, cluster b in hosts 4 and 5, where n1 and n2
    name hosts 4 and 5 (their own hosts files)."""

    HOSTS = 5

    def test_other_cluster_refused(self):
        """Node 1 of b, restarted with dial= pointing at a's node 2, is
        refused there with one line on each side however often it
        retries; a's term, commit and configuration do not move."""
        self.net.hosts({"n1": 4, "n2": 5}, only=[4, 5])
        for i in (1, 2, 3):
            self.start(i)
        b = {i: self.start(i, ids=[1, 2], host=3 + i, name="b%d" % i,
                           member=False) for i in (1, 2)}
        aid = self.cluster_id(self.nodes.values())
        bid = self.cluster_id(b.values())
        self.assertNotEqual(aid, bid)
        self.leader()
        before = self.positions()
        self.assertEqual(b[1].stop(), 0)
        self.others.remove(b[1])
        b[1] = self.start(1, ids=[1, 2], host=4, name="b1", member=False,
                          extra="dial=2@%s:%d" % (self.net.ip(2), PORT))
        here = ("refused server 1: its cluster id %s is not this "
                "cluster's %s" % (bid, aid))
        there = "refused us: cluster id %s is not its cluster %s" % (bid, aid)
        self.wait_log(self.nodes[2], here)
        time.sleep(3)  # several re-dials (backoff up to 2 s)
        self.assertEqual(self.log(self.nodes[2]).count(here), 1, here)
        self.assertEqual(self.log(b[1]).count(there), 1, there)
        self.assertEqual(self.positions(), before)
        self.assertEqual(self.cluster_id(self.nodes.values()), aid)


class FiveHostsTest(Hosts):

    HOSTS = 5
    MEMBERS = 5

    def test_two_of_five_lost(self):
        """Five nodes; the leader and a follower killed: the other three
        elect a leader among them and writes commit on all three."""
        for i in range(1, 6):
            self.start(i)
        leader = self.leader()
        leader.sql("SELECT raft_exec('CREATE TABLE t(x)')")
        self.write(1)
        follower = next(i for i in self.nodes if i != leader.id)
        for i in (leader.id, follower):
            self.nodes.pop(i).kill()
        self.assertNotEqual(self.leader().id, leader.id)
        self.write(2)
        self.write(3, via=next(iter(self.nodes.values())))
        for n in self.nodes.values():
            self.assertEqual(n.value("SELECT count(*) FROM t"), 3)


if __name__ == "__main__":
    unittest.main()
