"""TLS between peers: three nodes on 127.0.0.1, .2 and .3,
each with a certificate naming its own address (certs.py, the openssl
command line) or one pre-shared secret. Writes replicate; a rogue node
with no certificate, an untrusted one, another member's, or the wrong
secret is refused with a log line and moves neither term nor commit; an
expired certificate is a clear raft_start error; renewed certificates are
picked up by raft_tls_reload() and by the file check; a proxy that flips a
byte of a TLS record closes that connection and the cluster keeps
serving."""

import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import certs
from e2e import NODE
from raftsql_cluster import Node, NodeError, free_ports

FAST = ("election_timeout_ms=500 heartbeat_ms=50 exec_timeout_ms=5000 "
        "log_level=info")


def host(i):
    return "127.0.0.%d" % i


class FlipProxy:
    """A TCP proxy on 127.0.0.1 to @target_port that, once flip() is
    called, flips one byte inside the next chunk from the dialler."""

    def __init__(self, target):
        self.target = target
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.flipping = False
        self.flipped = 0
        self.socks = []
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def flip(self):
        self.flipping = True

    def accept(self):
        while True:
            try:
                a, _ = self.listener.accept()
            except OSError:
                return
            try:
                b = socket.create_connection(self.target, timeout=2)
            except OSError:
                a.close()
                continue
            with self.lock:
                self.socks += [a, b]
            threading.Thread(target=self.pump, args=(a, b, True),
                             daemon=True).start()
            threading.Thread(target=self.pump, args=(b, a, False),
                             daemon=True).start()

    def pump(self, src, dst, from_dialler):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if from_dialler and self.flipping and len(data) > 16:
                    data = bytearray(data)
                    data[-5] ^= 0x20  # inside a record's ciphertext
                    self.flipping = False
                    self.flipped += 1
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.listener.close()
        with self.lock:
            for s in self.socks:
                s.close()


class TLSTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-e2e-tls-")
        self.ca = certs.CA(self.dir)
        self.ports = free_ports(5)
        self.members = ",".join("%d@%s:%d" % (i, host(i), self.ports[i - 1])
                                for i in (1, 2, 3))
        self.nodes = {}
        self.others = []
        self.proxy = None

    def tearDown(self):
        codes = [n.stop() for n in self.nodes.values()]
        codes += [n.stop() for n in self.others]
        if self.proxy is not None:
            self.proxy.close()
        if any(c != 0 for c in codes):
            for n in list(self.nodes.values()) + self.others:
                with open(n.log_path, errors="replace") as f:
                    print(f.read()[-3000:])
        if os.environ.get("KEEP_E2E") is None:
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            print("kept", self.dir)
        self.assertTrue(all(c == 0 for c in codes), codes)

    # ---- helpers ----------------------------------------------------

    def certificates(self, i, name=None, ca=None, hosts=None, **kw):
        """The tls_ keys of node @i: a certificate for its own address."""
        return (ca or self.ca).tls_keys(name or "node%d" % i,
                                        hosts or [host(i)], **kw)

    def node(self, i, name=None):
        name = name or "node%d" % i
        return Node(NODE, i, os.path.join(self.dir, name + ".db"),
                    os.path.join(self.dir, name + ".log"))

    def start(self, i, auth, extra=""):
        n = self.node(i)
        n.sql("SELECT raft_start(?)", "id=%d cluster=%s %s %s %s" % (
            i, self.members, auth, FAST, extra))
        self.nodes[i] = n
        return n

    def start_all(self, auth=None, extra=None):
        for i in (1, 2, 3):
            self.start(i, auth(i) if auth else self.certificates(i),
                       extra(i) if extra else "")
        return self.leader()

    def wait(self, pred, what, timeout=20.0):
        deadline = time.monotonic() + timeout
        while True:
            v = pred()
            if v:
                return v
            if time.monotonic() > deadline:
                self.fail("timed out waiting for " + what)
            time.sleep(0.05)

    def leader(self):
        def agreed():
            ids = {n.value("SELECT raft_leader()")
                   for n in self.nodes.values()}
            return len(ids) == 1 and None not in ids and ids.pop()
        return self.nodes[self.wait(agreed, "a leader")]

    def write(self, node, value):
        """Insert @value through @node (retried while leadership moves)
        and wait until every node applied it."""
        deadline = time.monotonic() + 20
        while True:
            try:
                node.sql("SELECT raft_exec('INSERT INTO t VALUES (?)', ?)",
                         value)
                break
            except NodeError:
                if time.monotonic() > deadline:
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

    def wait_log(self, n, text, timeout=20.0):
        self.wait(lambda: text in self.log(n),
                  "'%s' in node %d's log" % (text, n.id), timeout)

    def positions(self):
        """(term, commit) of every member."""
        return {i: (s["term"], s["commit"]) for i, s in
                ((i, n.status()) for i, n in self.nodes.items())}

    def refused(self, rogue_id, auth, victim_line, address=None,
                handshake=False):
        """Start a rogue server @rogue_id with @auth, of a cluster of the
        three members and itself at @address; check that it is refused
        with @victim_line in a member's log, that it reaches none of them
        and that neither term nor commit moves. @handshake: its TLS
        handshakes succeed (the members' certificates are good), and the
        members refuse its connections once their handshake names it."""
        address = address or "%s:%d" % (host(5), self.ports[4])
        before = self.positions()
        rogue = self.node(rogue_id, "rogue%d" % len(self.others))
        self.others.append(rogue)
        members = ",".join(m for m in self.members.split(",")
                           if not m.startswith("%d@" % rogue_id))
        rogue.sql("SELECT raft_start(?)", "id=%d cluster=%s,%d@%s %s %s" % (
            rogue_id, members, rogue_id, address, auth, FAST))
        self.wait(lambda: any(victim_line in self.log(n)
                              for n in self.nodes.values()),
                  "'%s' in a member's log" % victim_line)
        time.sleep(2)  # several election timeouts of the rogue
        self.assertEqual(self.positions(), before)
        self.assertIsNone(rogue.value("SELECT raft_leader()"))
        if not handshake:
            self.assertFalse(any(p["connected"]
                                 for p in rogue.status()["peers"]))
        with self.assertRaises(NodeError):
            rogue.sql("SELECT raft_exec('INSERT INTO t VALUES (666)')")
        for n in self.nodes.values():
            self.assertEqual(
                n.value("SELECT count(*) FROM t WHERE x = 666"), 0)
            # Never taken for a peer, nor for a second copy of one.
            self.assertNotIn("not a peer yet", self.log(n))
            self.assertNotIn("a second connection claims", self.log(n))
        rogue.stop()

    def served_not_after(self, i, client):
        """The notAfter of the certificate node @i serves to a TLS client
        with @client's certificate ("node3": its files), by openssl
        s_client."""
        p = subprocess.run(
            ["openssl", "s_client", "-connect",
             "%s:%d" % (host(i), self.ports[i - 1]), "-cert",
             os.path.join(self.dir, client + ".pem"), "-key",
             os.path.join(self.dir, client + ".key"), "-CAfile",
             self.ca.cert], input="", capture_output=True, text=True,
            timeout=20)
        pem = re.search(r"-----BEGIN CERTIFICATE-----.*?"
                        r"-----END CERTIFICATE-----", p.stdout, re.S)
        self.assertIsNotNone(pem, p.stdout + p.stderr)
        return certs.not_after(pem.group(0))

    # ---- tests ------------------------------------------------------

    def test_certificates_replicate_and_rogues_are_refused(self):
        leader = self.start_all()
        leader.sql("SELECT raft_exec('CREATE TABLE t(x)')")
        self.write(leader, 1)
        for i, n in self.nodes.items():
            s = n.status()
            self.assertEqual(s["tls"], "certificates")
            self.assertEqual(s["tls_cert_expires"], certs.not_after(
                os.path.join(self.dir, "node%d.pem" % i)))
            self.assertTrue(all(p["connected"] for p in s["peers"]), s)
            self.assertIn("connected (TLSv1.3", self.log(n))
        # No certificate at all.
        self.refused(4, "", "a raftsql handshake in the clear")
        # A certificate from another CA.
        other = certs.CA(self.dir, "other")
        self.refused(4, self.certificates(4, "stranger", ca=other,
                                          hosts=[host(5)]),
                     "alert unknown ca")
        # A good certificate of this CA, claiming another member's id.
        self.refused(3, self.certificates(3, "impostor", hosts=[host(5)]),
                     "server 3's certificate does not name 127.0.0.3",
                     handshake=True)
        self.write(self.leader(), 2)

    def test_join_with_certificates(self):
        """A joining server is checked against the listen address its
        handshake gives (it is no member yet): a certificate that does not
        name it is refused; one that does joins, and is dialled back."""
        leader = self.start_all()
        leader.sql("SELECT raft_exec('CREATE TABLE t(x)')")
        self.write(leader, 1)
        where = "listen=%s:%d join=%s:%d" % (host(4), self.ports[3], host(1),
                                             self.ports[0])
        bad = self.node(4, "badjoiner")
        self.others.append(bad)
        bad.sql("SELECT raft_start(?)", "id=4 %s %s %s" % (
            where, self.certificates(4, "badjoiner", hosts=[host(5)]), FAST))
        self.wait_log(self.nodes[1], "server 4's certificate does not name "
                      "127.0.0.4, the host of its address in its handshake; "
                      "it holds: IP:127.0.0.5")
        self.assertNotIn("not a peer yet", self.log(self.nodes[1]))
        self.assertEqual(bad.stop(), 0)
        self.others.remove(bad)
        self.nodes[4] = n4 = self.node(4)
        n4.sql("SELECT raft_start(?)", "id=4 %s %s %s" % (
            where, self.certificates(4), FAST))

        def voter():
            rows = self.leader().sql("SELECT id, role FROM raft_members")
            return (4, "voter") in [tuple(r) for r in rows]
        self.wait(voter, "server 4 to join as a voter", timeout=40)
        self.write(self.leader(), 2)
        self.assertEqual(n4.status()["tls"], "certificates")

    def test_pre_shared_secret(self):
        secret = certs.secret(self.dir)
        leader = self.start_all(lambda i: "secret_file=" + secret)
        leader.sql("SELECT raft_exec('CREATE TABLE t(x)')")
        self.write(leader, 1)
        s = leader.status()
        self.assertEqual(s["tls"], "psk")
        self.assertIsNone(s["tls_cert_expires"])
        self.assertIn("pre-shared key", self.log(leader))
        wrong = certs.secret(self.dir, "wrong")
        self.refused(4, "secret_file=" + wrong, "binder does not verify")
        self.write(self.leader(), 2)

    def test_start_errors(self):
        n = self.node(1)
        self.others.append(n)
        good = self.certificates(1)
        expired = self.certificates(1, "expired", start=-10 * certs.DAY,
                                    end=-certs.DAY)
        future = self.certificates(1, "future", start=certs.DAY,
                                   end=10 * certs.DAY)
        short = os.path.join(self.dir, "short")
        with open(short, "w") as f:
            f.write("too short")
        os.chmod(short, 0o600)
        shared = certs.secret(self.dir, "shared", mode=0o644)
        cert = os.path.join(self.dir, "node1.pem")
        other = certs.CA(self.dir, "other")
        foreign, foreign_key = other.issue("foreign", [host(1)])
        for auth, want in (
                ("tls_cert=%s tls_key=%s tls_ca=%s" % (
                    foreign, foreign_key, self.ca.cert),
                 "tls_cert: %s: not signed by tls_ca %s (" % (
                     foreign, self.ca.cert)),
                ("tls_cert=%s tls_key=%s tls_ca=%s" % (
                    self.ca.cert, self.ca.key, self.ca.cert),
                 "tls_cert: %s: a CA certificate (basicConstraints "
                 "CA:TRUE), not this node's own" % self.ca.cert),
                (expired, "raft_start: tls_cert: %s/expired.pem: expired "
                 "on 20" % self.dir),
                (future, "future.pem: not valid before 20"),
                ("tls_cert=%s tls_ca=%s" % (cert, self.ca.cert),
                 "tls_key: missing (tls_cert, tls_key and tls_ca go "
                 "together)"),
                (good + " secret_file=" + short,
                 "secret_file: cannot be given with tls_cert"),
                ("secret_file=" + short,
                 "short: 9 bytes, want at least 32, e.g. `openssl rand "
                 "-hex 32 > "),
                ("secret_file=" + shared,
                 "shared: mode 0644, want 0600 or stricter"),
                ("tls_cert=", "tls_cert: empty or too long")):
            with self.assertRaises(NodeError) as cm:
                n.sql("SELECT raft_start(?)", "id=1 cluster=%s %s" % (
                    self.members, auth))
            self.assertIn(want, str(cm.exception))
        # Nothing was left behind: a good start works.
        n.sql("SELECT raft_start(?)", "id=1 cluster=%s %s" % (
            self.members, good))
        self.assertIn("loaded tls_cert", n.value("SELECT raft_tls_reload()"))
        self.assertNotIn("does not name this node's advertised host",
                         self.log(n))

    def test_certificate_for_another_host_is_a_warning(self):
        """A certificate that does not name this node's advertised host
        starts (a first start may not know its final address), with a
        WARN naming the file, the host and what it holds."""
        n = self.start(1, self.certificates(1, hosts=["db9.example"]))
        self.wait_log(n, "tls_cert: %s/node1.pem does not name this node's "
                      "advertised host %s in its subjectAltName (it holds: "
                      "DNS:db9.example)" % (self.dir, host(1)))

    def test_renewed_certificates_are_picked_up(self):
        leader = self.start_all(lambda i: self.certificates(
            i, end=2 * certs.DAY))
        leader.sql("SELECT raft_exec('CREATE TABLE t(x)')")
        self.write(leader, 1)
        n1, n2 = self.nodes[1], self.nodes[2]
        old = n1.status()["tls_cert_expires"]
        self.assertEqual(self.served_not_after(1, "node3"), old)
        # raft_tls_reload() picks up renewed files at once...
        self.certificates(1, end=20 * certs.DAY)
        new = certs.not_after(os.path.join(self.dir, "node1.pem"))
        self.assertNotEqual(new, old)
        text = n1.value("SELECT raft_tls_reload()")
        self.assertIn("loaded tls_cert %s/node1.pem (expires %s)" % (
            self.dir, new), text)
        self.assertEqual(n1.status()["tls_cert_expires"], new)
        self.assertEqual(self.served_not_after(1, "node3"), new)
        # ...and the file check within about 5 s, without a call.
        self.certificates(2, end=30 * certs.DAY)
        new2 = certs.not_after(os.path.join(self.dir, "node2.pem"))
        self.wait(lambda: n2.status()["tls_cert_expires"] == new2,
                  "node 2 to reload its certificate", timeout=15)
        self.wait_log(n2, "tls: the certificate files changed: loaded")
        self.assertEqual(self.served_not_after(2, "node3"), new2)
        # A bad file keeps the certificate in use, and says why.
        with open(os.path.join(self.dir, "node1.key"), "w") as f:
            f.write("garbage\n")
        with self.assertRaises(NodeError) as cm:
            n1.value("SELECT raft_tls_reload()")
        self.assertIn("tls_key: %s/node1.key: no PEM private key read" %
                      self.dir, str(cm.exception))
        self.assertEqual(n1.status()["tls_cert_expires"], new)
        # Connections made after all this still work.
        self.nodes[3].stop()
        self.nodes[3] = self.node(3)
        self.nodes[3].sql("SELECT raft_start(?)", "id=3 %s %s" % (
            self.certificates(3), FAST))
        self.write(self.leader(), 2)

    def test_flipped_byte_closes_only_that_connection(self):
        # Node 1 reaches node 2 through the proxy (dial=): its check of
        # node 2's certificate still uses node 2's configured address.
        self.proxy = FlipProxy((host(2), self.ports[1]))
        leader = self.start_all(extra=lambda i: "dial=2@127.0.0.1:%d" %
                                self.proxy.port if i == 1 else "")
        leader.sql("SELECT raft_exec('CREATE TABLE t(x)')")
        self.write(leader, 1)
        if leader.id not in (1, 2):
            # Node 1 must send to node 2: make one of them lead.
            leader.sql("SELECT raft_transfer(1)")
            self.wait(lambda: self.leader().id in (1, 2), "leader 1 or 2")
        n1, n2 = self.nodes[1], self.nodes[2]
        self.proxy.flip()
        self.wait_log(n2, "decryption failed or bad record mac")
        self.assertEqual(self.proxy.flipped, 1)
        # The connection closed, node 1 dialled again, everyone serves.
        self.wait(lambda: self.log(n1).count("peer 2 (127.0.0.1:%d): "
                                            "connected (TLSv1.3" %
                                            self.proxy.port) >= 2,
                  "node 1 to reconnect to node 2")
        for v in (2, 3, 4):
            self.write(self.leader(), v)
        for n in self.nodes.values():
            self.assertIsNone(n.proc.poll())
            self.assertEqual(n.value("SELECT count(*) FROM t"), 4)


if __name__ == "__main__":
    unittest.main()
