"""Three (and five) hosts with TLS: raftsql nodes in network namespaces
joined by a bridge (netns.py), each listening on 0.0.0.0 inside its own
and known to the others by hostname (n1, n2, ... in
/etc/netns/<ns>/hosts), with a certificate naming that hostname alone
(DNS:nI, certs.py) or a pre-shared secret.

- The Chinook replication of `make demo`, its fingerprints checked on
  every node (a generated script of the same shape when
  ../shared/data/chinook is absent, and then against stock SQLite only).
- Rogues in a host of their own, refused with one line on the victim
  (and on the rogue when it is a raftsql node), none of whose traffic
  reaches the core (the members' term, commit and configuration stay, it
  gets no leader, its write applies nowhere): a node without TLS, a
  TLS client without certificate (openssl s_client), a certificate of
  another CA, a certificate naming another host than the member it
  claims, another secret in a cluster of one. (Another cluster's id is
  refused in test_tls_netns.py.)
- A proxy in a host of its own (flip_proxy.py) flips a byte of a TLS
  record on one link: the connection closes, the nodes keep serving, the
  link comes back once the proxy stops.
- An expired certificate: a clear raft_start error.
- Five hosts: two of five nodes killed, the leader among them, and writes
  still commit.

Skips, saying why, without root or ip(8).
"""

import json
import os
import subprocess
import sys
import time
import unittest

from e2e import NODE, wait_for  # first: puts tools/ on the path
import certs  # noqa: E402
import demo  # noqa: E402
import fingerprint  # noqa: E402
from netns import close_hosts, open_hosts  # noqa: E402
from raftsql_cluster import Node, NodeError  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PORT = 7001
PROXY_PORT = 7002
FAST = "election_timeout_ms=500 heartbeat_ms=50 log_level=info"
ROGUE = 4  # the host of rogues and of the proxy


def members(ids):
    """The cluster= string of servers @ids, each n<id>:PORT."""
    return ",".join("%d@n%d:%d" % (i, i, PORT) for i in ids)


class Hosts(unittest.TestCase):
    """HOSTS namespaces, a CA (self.ca), the members in them (self.nodes,
    by id) and anything else started (self.others: nodes that are no
    member; self.procs: other processes)."""

    HOSTS = 3    # namespaces, hosts 1..HOSTS
    MEMBERS = 3  # founders of the cluster: servers 1..MEMBERS

    def setUp(self):
        self.dir, self.net = open_hosts(self, self.HOSTS,
                                        "raftsql-e2e-nstls-")
        self.ca = certs.CA(self.dir)
        self.nodes = {}
        self.others = []
        self.procs = []
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
        if any(c != 0 for c in codes):
            for n in list(self.nodes.values()) + self.others:
                sys.stderr.write("---- %s\n%s" % (n.log_path,
                                                  self.log(n)[-3000:]))
        close_hosts(self.net, self.dir)
        self.assertTrue(all(c == 0 for c in codes), codes)

    # ---- helpers ----------------------------------------------------

    def start(self, i, auth=None, extra="", host=None, name=None,
              member=True, exec_ms=20000):
        """Start server @i in host @host (default i) as a founder of
        servers 1..MEMBERS (and @i): listening on every interface there,
        advertising n<i>, authenticated by @auth (default a certificate
        naming n<i>), raft_exec waiting up to @exec_ms. Returns the
        node."""
        name = name or "node%d" % i
        n = Node(NODE, i, os.path.join(self.dir, name + ".db"),
                 os.path.join(self.dir, name + ".log"),
                 prefix=self.net.prefix(host or i))
        if member:
            self.nodes[i] = n
        else:
            self.others.append(n)
        if auth is None:
            auth = self.ca.tls_keys(name, ["n%d" % i])
        n.value("SELECT raft_start(?)",
                "id=%d listen=0.0.0.0:%d advertise=n%d:%d cluster=%s %s "
                "%s exec_timeout_ms=%d %s" % (
                    i, PORT, i, PORT,
                    members(sorted(set(range(1, self.MEMBERS + 1)) | {i})),
                    auth, FAST, exec_ms, extra))
        return n

    def start_all(self, auth=None, extra=lambda i: "", table=True):
        """Start the members (@auth(i), default certificates) and make
        table t unless not @table; returns the leader."""
        for i in range(1, self.MEMBERS + 1):
            self.start(i, auth and auth(i), extra(i))
        leader = self.leader()
        if table:
            leader.sql("SELECT raft_exec('CREATE TABLE t(x)')")
        return leader

    def wait(self, pred, what, timeout=30.0):
        return wait_for(what, pred, timeout)

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
        self.wait_applied(node.status()["applied"])
        for n in self.nodes.values():
            self.assertEqual(
                n.value("SELECT count(*) FROM t WHERE x = ?", value), 1)

    def wait_applied(self, index):
        for n in self.nodes.values():
            self.wait(lambda: n.status()["applied"] >= index,
                      "node %d to apply %d" % (n.id, index))

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


class ThreeHostsTest(Hosts):
    """Three members; host 4 for rogues and the proxy."""

    HOSTS = 4

    def test_chinook_replicates(self):
        """The script of `make demo`, statement by statement through
        raft_exec on the leader: each node's database has the fingerprint
        stock SQLite gives the script (and Chinook's expected one)."""
        leader = self.start_all(table=False)
        path, expected, what = demo.pick_script(self.dir)
        with open(path, encoding="utf-8") as f:
            stmts = demo.split_statements(f.read())
        for stmt in stmts:
            leader.value("SELECT raft_exec(?)", stmt)
        self.wait_applied(leader.status()["applied"])
        for n in self.nodes.values():
            s = n.status()
            self.assertEqual(s["tls"], "certificates")
            for p in s["peers"]:
                self.assertEqual(p["address"], "n%d:%d" % (p["id"], PORT))
                self.assertIn("peer %d (n%d:%d): connected (TLSv1.3" % (
                    p["id"], p["id"], PORT), self.log(n))
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

    def refused(self, rogue_id, auth, victim_line, rogue_line):
        """Start a rogue raftsql node @rogue_id in host ROGUE with @auth,
        a founder of a cluster of the members and itself; check that each
        member it dials logs @victim_line once and it logs @rogue_line
        once for each, that it gets no leader nor connection, and that
        nothing of it reaches the members' core (check_untouched)."""
        before = self.positions()
        self.n_rogues = getattr(self, "n_rogues", 0) + 1
        rogue = self.start(rogue_id, auth, host=ROGUE, member=False,
                           name="rogue%d" % self.n_rogues, exec_ms=500)
        dialled = [n for i, n in self.nodes.items() if i != rogue_id]
        for n in dialled:
            self.wait_log(n, victim_line)
            self.wait_log(rogue, "peer %d (n%d:%d): " % (n.id, n.id, PORT))
        self.wait_log(rogue, rogue_line)
        time.sleep(2)  # several re-dials and election timeouts
        self.check_untouched(before)
        lines = [line for line in self.log(rogue).splitlines()
                 if rogue_line in line]
        self.assertEqual(len(lines), len(dialled), lines)
        for n in dialled:
            self.assertEqual(self.log(n).count(victim_line), 1, victim_line)
            self.assertEqual(len([line for line in lines if "peer %d (n%d:"
                                  % (n.id, n.id) in line]), 1, lines)
        self.assertIsNone(rogue.value("SELECT raft_leader()"))
        self.assertFalse(any(p["connected"]
                             for p in rogue.status()["peers"]))
        with self.assertRaises(NodeError):
            rogue.sql("SELECT raft_exec('INSERT INTO t VALUES (666)')")
        self.assertEqual(rogue.stop(), 0)
        self.others.remove(rogue)

    def check_untouched(self, before):
        """The members' term (so no vote was granted in another),
        commit and configuration are @before, no second connection
        claimed a member, no write of a rogue applied."""
        self.assertEqual(self.positions(), before)
        for n in self.nodes.values():
            self.assertEqual(
                n.value("SELECT count(*) FROM t WHERE x = 666"), 0)
            self.assertNotIn("a second connection claims", self.log(n))

    def test_rogues_refused(self):
        """Rogues in host 4 against a cluster with certificates: a node
        without TLS (insecure=on lets it listen on 0.0.0.0), a TLS client
        without certificate (openssl s_client), a certificate of another
        CA, and one of this CA naming n4 for a node that claims member
        3."""
        self.start_all()
        self.write(1)
        self.refused(4, "insecure=on", "TLS handshake failed (closing): a "
                     "raftsql handshake in the clear: the peer runs without "
                     "TLS", "refused us: it takes peers over TLS only "
                     "(tls_cert= or secret_file=), we run without")
        before = self.positions()
        for n in self.nodes.values():
            subprocess.run(
                self.net.prefix(ROGUE) + [
                    "openssl", "s_client", "-connect", "n%d:%d" % (n.id, PORT),
                    "-CAfile", self.ca.cert],
                input=b"RFTSQL and more bytes\n", capture_output=True,
                timeout=20)
            self.wait_log(n, "TLS handshake failed (closing): peer did not "
                          "return a certificate")
        self.check_untouched(before)
        other = certs.CA(self.dir, "other")
        self.refused(4, other.tls_keys("stranger", ["n4"]),
                     "TLS handshake failed (closing): tlsv1 alert unknown ca",
                     "TLS handshake failed (closing): certificate verify "
                     "failed: self-signed certificate in certificate chain")
        self.refused(3, self.ca.tls_keys("impostor", ["n4"]),
                     "refused: server 3's certificate does not name n3, the "
                     "host of its address in the configuration; it holds: "
                     "DNS:n4", "refused us: its certificate does not name n3")
        self.write(2)

    def test_wrong_secret_refused(self):
        """A rogue with another secret file against a cluster of one
        pre-shared secret."""
        secret = certs.secret(self.dir)
        self.start_all(lambda i: "secret_file=" + secret)
        self.write(1)
        self.assertEqual(self.leader().status()["tls"], "psk")
        wrong = certs.secret(self.dir, "wrong")
        self.refused(4, "secret_file=" + wrong,
                     "TLS handshake failed (closing): binder does not verify",
                     "TLS handshake failed (closing): sslv3 alert illegal "
                     "parameter: the server did not take our pre-shared key "
                     "(another secret_file?)")
        self.write(2)

    def test_expired_certificate(self):
        """raft_start refuses it, naming the file and the date."""
        auth = self.ca.tls_keys("expired", ["n1"], start=-10 * certs.DAY,
                                end=-certs.DAY)
        day = certs.not_after(os.path.join(self.dir, "expired.pem"))[:10]
        with self.assertRaises(NodeError) as cm:
            self.start(1, auth)
        self.assertIn("raft_start: tls_cert: %s/expired.pem: expired on %s"
                      % (self.dir, day), str(cm.exception))

    def test_flipped_byte_closes_the_connection(self):
        """Node 1 reaches node 2, the leader, through a proxy in host 4
        (dial=). While the proxy flips a byte of a TLS record after the
        handshakes, node 2 closes each of those connections (one line)
        and keeps serving reads and writes with node 3; node 1, which
        still hears node 2, serves reads. Once the proxy stops flipping,
        the link comes back and node 1 writes again."""
        proxy = subprocess.Popen(
            self.net.prefix(ROGUE) + [
                sys.executable, os.path.join(HERE, "flip_proxy.py"),
                str(PROXY_PORT), "%s:%d" % (self.net.ip(2), PORT)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.procs.append(proxy)
        self.assertIn("listening", proxy.stdout.readline())

        def command(word):
            proxy.stdin.write(word + "\n")
            proxy.stdin.flush()
            return json.loads(proxy.stdout.readline())
        via = "%s:%d" % (self.net.ip(ROGUE), PROXY_PORT)
        leader = self.start_all(
            extra=lambda i: "dial=2@%s" % via if i == 1 else "")
        if leader.id != 2:
            leader.sql("SELECT raft_transfer(2)")
            self.wait(lambda: self.leader().id == 2, "leader 2")
        n1, n2 = self.nodes[1], self.nodes[2]
        self.write(1, via=n1)
        connected = "peer 2 (%s): connected (TLSv1.3" % via
        self.assertEqual(self.log(n1).count(connected), 1, self.log(n1))
        failed = "TLS failed (closing): decryption failed or bad record mac"
        command("on")
        self.wait_log(n2, failed)
        self.wait(lambda: command("stats")["flipped"] >= 3,
                  "the proxy to flip a record of a third connection")
        self.write(2, via=n2)
        self.assertEqual(n1.value("SELECT count(*) FROM t"), 2)
        self.assertEqual(self.log(n2).count(failed), 1)
        command("off")
        flipped = command("stats")["flipped"]
        self.wait(lambda: self.log(n1).count(connected) >= flipped + 1,
                  "node 1 to reconnect to node 2")
        time.sleep(1)  # many heartbeats over the link: it holds
        self.assertEqual(command("stats")["flipped"], flipped)
        self.write(3, via=n1)
        self.assertEqual(self.log(n2).count(failed), 1)
        for n in self.nodes.values():
            self.assertIsNone(n.proc.poll())


class FiveHostsTest(Hosts):

    HOSTS = 5
    MEMBERS = 5

    def test_two_of_five_lost(self):
        """Five nodes with certificates; the leader and a follower
        killed: the other three elect a leader among them and writes
        commit on all three."""
        leader = self.start_all()
        self.write(1)
        follower = next(i for i in self.nodes if i != leader.id)
        for i in (leader.id, follower):
            self.nodes.pop(i).kill()
        self.assertNotEqual(self.leader().id, leader.id)
        self.write(2)
        self.write(3, via=next(iter(self.nodes.values())))
        for n in self.nodes.values():
            self.assertEqual(n.value("SELECT count(*) FROM t"), 3)
            self.assertEqual(n.status()["tls"], "certificates")


if __name__ == "__main__":
    unittest.main()
