"""raft_metrics() and the daemon's metrics endpoint (metrics_listen=):
the same Prometheus text, read with a real parser (python3-prometheus-
client's text_string_to_metric_families), the families docs/reference.md
lists with their types, counters that move after writes, and the endpoint's
rules: GET /metrics only, a malformed or oversized request closes its
connection and the node goes on serving, an address off loopback refused
without TLS or insecure=on (a pre-shared secret does not open it), HTTPS
with the node's certificate. Also docs/grafana-dashboard.json parses and
names only metrics that exist.

The cluster is two daemons (nodes 1 and 2, the sanitizer build:
RAFTSQL_DAEMON) serving metrics on 127.0.0.1, and one raftsql-testhost
(node 3), which leads; a TLS endpoint is a one-node daemon of its own.
"""

import http.client
import json
import os
import re
import shutil
import socket
import sqlite3
import ssl
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from certs import CA
from e2e import NODE, ROOT, connect, wait_for
from raftsql_cluster import Node, free_ports
from test_daemon import Daemon, run_daemon

TIMING = {"election_timeout_ms": "300", "heartbeat_ms": "30",
          "exec_timeout_ms": "10000", "max_request_bytes": "4096"}

# Every family docs/reference.md's "Metrics" section requires, with its
# type (the parser names a counter's family without its _total).
REQUIRED = {
    "raftsql_term": "gauge",
    "raftsql_role": "gauge",
    "raftsql_leader_id": "gauge",
    "raftsql_commit_index": "gauge",
    "raftsql_applied_index": "gauge",
    "raftsql_apply_lag_entries": "gauge",
    "raftsql_peer_lag_entries": "gauge",
    "raftsql_peer_connected": "gauge",
    "raftsql_log_entries_appended": "counter",
    "raftsql_log_bytes_appended": "counter",
    "raftsql_log_writes": "counter",
    "raftsql_log_fsync_seconds": "histogram",
    "raftsql_log_write_batch_entries": "histogram",
    "raftsql_apply_seconds": "histogram",
    "raftsql_apply_batch_entries": "histogram",
    "raftsql_snapshots_sent": "counter",
    "raftsql_snapshot_sent_bytes": "counter",
    "raftsql_snapshots_installed": "counter",
    "raftsql_snapshot_installed_bytes": "counter",
    "raftsql_diverged": "gauge",
    "raftsql_repairs": "counter",
    "raftsql_checksum_enabled": "gauge",
    "raftsql_checksum_mismatch": "gauge",
    "raftsql_requests_refused": "counter",
    "raftsql_requests_timed_out": "counter",
    "raftsql_requests_forwarded": "counter",
    "raftsql_lease_holds": "counter",
    "raftsql_lease_waits": "counter",
    "raftsql_lease_busy": "counter",
    "raftsql_lease_hold_seconds": "histogram",
}

DASHBOARD = os.path.join(ROOT, "docs", "grafana-dashboard.json")
REFERENCE = os.path.join(ROOT, "docs", "reference.md")


def parse(text):
    """The families of Prometheus text @text, by name."""
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(families, sample, **labels):
    """The value of sample @sample (full name) with @labels in @families;
    fails when there is none."""
    for fam in families.values():
        for s in fam.samples:
            if s.name == sample and all(s.labels.get(k) == v
                                        for k, v in labels.items()):
                return s.value
    raise AssertionError("no sample %s%r among %d families" % (
        sample, labels, len(families)))


def http_get(url, method="GET", context=None):
    """(status, headers, body) of one request to @url."""
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def read_to_close(sock, timeout=10.0):
    """Read @sock until the server closes it, at most @timeout s; return
    (what was read, whether it closed)."""
    got = b""
    deadline = time.monotonic() + timeout
    sock.settimeout(1.0)
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(4096)
        except socket.timeout:
            continue
        except ConnectionResetError:
            return got, True
        if not chunk:
            return got, True
        got += chunk
    return got, False


class MetricsTest(unittest.TestCase):
    """One cluster for every test of the class (its start is most of the
    time): daemons 1 and 2 serve metrics on 127.0.0.1, node 3 leads."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="raftsql-e2e-metrics-")
        ports = free_ports(5)
        cls.members = ",".join("%d@127.0.0.1:%d" % (i + 1, p)
                               for i, p in enumerate(ports[:3]))
        keys = ["%s = %s" % kv for kv in TIMING.items()]
        cls.urls = {}
        cls.daemons = {}
        for i in (1, 2):
            cls.urls[i] = "http://127.0.0.1:%d/metrics" % ports[2 + i]
            cls.daemons[i] = Daemon(cls.dir, i, [
                "id=%d" % i, "cluster = %s" % cls.members,
                "metrics_listen = 127.0.0.1:%d" % ports[2 + i]] + keys)
        cls.host = Node(NODE, 3, os.path.join(cls.dir, "node3.db"),
                        os.path.join(cls.dir, "node3.log"))
        cls.host.sql("SELECT raft_start(?)", "id=3 cluster=%s %s" % (
            cls.members, " ".join("%s=%s" % kv for kv in TIMING.items())))
        leader = wait_for("a leader",
                          lambda: cls.host.value("SELECT raft_leader()"), 30)
        if leader != 3:
            cls.host.value("SELECT raft_transfer(3)")
            wait_for("node 3 leads",
                     lambda: cls.host.value("SELECT raft_leader()") == 3, 30)
        cls.host.sql("SELECT raft_exec(?)",
                     "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
        # Python's connection to daemon 1's file: its calls go to that
        # node through its socket.
        cls.con = connect(cls.daemons[1].db)

    @classmethod
    def tearDownClass(cls):
        cls.con.close()
        codes = [d.stop() for d in cls.daemons.values()]
        codes.append(cls.host.stop())
        logs = "".join(d.log()[-4000:] for d in cls.daemons.values())
        shutil.rmtree(cls.dir, ignore_errors=True)
        if codes != [0, 0, 0]:
            raise AssertionError("a node exited with an error %r (sanitizer "
                                 "report in its log):\n%s" % (codes, logs))

    def scrape(self, node_id=1):
        """The families the endpoint of daemon @node_id serves now."""
        status, headers, body = http_get(self.urls[node_id])
        self.assertEqual(status, 200, body)
        self.assertTrue(headers["Content-Type"].startswith(
            "text/plain; version=0.0.4"), headers)
        self.assertEqual(headers["Connection"], "close")
        self.assertEqual(int(headers["Content-Length"]),
                         len(body.encode()))
        return parse(body)

    def sql_metrics(self):
        """The families of raft_metrics() on daemon 1's node, asked from
        this process (through its socket)."""
        return parse(self.con.execute("SELECT raft_metrics()").fetchone()[0])

    def assert_shape(self, families, where):
        """Every REQUIRED family exists with its type; every histogram has
        cumulative buckets ending at +Inf equal to its count."""
        for name, kind in REQUIRED.items():
            self.assertIn(name, families, "%s: no family %s" % (where, name))
            self.assertEqual(families[name].type, kind, "%s: %s" % (
                where, name))
            if kind != "histogram":
                continue
            buckets = [s for s in families[name].samples
                       if s.name == name + "_bucket"]
            self.assertEqual(buckets[-1].labels["le"], "+Inf", name)
            counts = [s.value for s in buckets]
            self.assertEqual(counts, sorted(counts), "%s: %s" % (where, name))
            self.assertEqual(counts[-1], value(families, name + "_count"),
                             name)
        for reason in ("busy", "too_big", "log_full", "diverged"):
            value(families, "raftsql_requests_refused_total", reason=reason)
        for reason in ("no_leader", "lease", "unanswered"):
            value(families, "raftsql_requests_timed_out_total",
                  reason=reason)

    def test_sql_and_endpoint_expose_the_families(self):
        """raft_metrics() from another process, raft_metrics() in the
        leader's own host, and the daemon's endpoint all parse and hold
        every required family with its type; the same node's figures agree
        between its SQL and its HTTP answers."""
        self.assert_shape(self.sql_metrics(), "raft_metrics() of node 1")
        self.assert_shape(self.scrape(1), "endpoint of node 1")
        self.assert_shape(self.scrape(2), "endpoint of node 2")
        leader = parse(self.host.value("SELECT raft_metrics()"))
        self.assert_shape(leader, "raft_metrics() of node 3")
        self.assertEqual(value(leader, "raftsql_role", role="leader"), 1)
        for peer in ("1", "2"):
            self.assertGreaterEqual(
                value(leader, "raftsql_peer_lag_entries", peer=peer), 0)
            self.assertEqual(
                value(leader, "raftsql_peer_connected", peer=peer), 1)
        sql, http = self.sql_metrics(), self.scrape(1)
        self.assertEqual(value(sql, "raftsql_node_id"), 1)
        self.assertEqual(value(sql, "raftsql_term"),
                         value(http, "raftsql_term"))
        self.assertEqual(value(http, "raftsql_role", role="follower"), 1)

    def test_counters_move_after_writes(self):
        """Writes through node 1 (a follower: forwarded), a write too big
        for max_request_bytes (refused, too_big) and a plain SQL write (a
        write lease held and released) move node 1's counters and
        histograms; none goes back."""
        before = self.scrape(1)
        # Scrapes of both daemons go on meanwhile, on their metrics
        # threads, while the writes run (TSan sees both at once).
        scraped, stop = [], threading.Event()

        def scrape_loop():
            for _ in range(200):
                if stop.is_set():
                    return
                for i in (1, 2):
                    scraped.append(http_get(self.urls[i])[0])
        scraper = threading.Thread(target=scrape_loop)
        scraper.start()
        try:
            for i in range(5):
                self.con.execute("SELECT raft_exec('INSERT INTO t(v) "
                                 "VALUES(?)', ?)", ("v%d" % i,))
        finally:
            stop.set()
            scraper.join(60)
        self.assertFalse(scraper.is_alive(), "the scrapes did not end")
        self.assertTrue(scraped, "no scrape ran during the writes")
        self.assertEqual(set(scraped), {200}, scraped)
        with self.assertRaises(sqlite3.DataError):  # SQLITE_TOOBIG
            self.con.execute("SELECT raft_exec('INSERT INTO t(v) VALUES(?)',"
                             " ?)", ("x" * 5000,))
        self.con.execute("INSERT INTO t(v) VALUES('plain')")
        target = self.host.value("SELECT json_extract(raft_status(), "
                                 "'$.commit')")
        wait_for("node 1 applied %d" % target, lambda: value(
            self.scrape(1), "raftsql_applied_index") >= target, 30)
        after = self.scrape(1)
        grew = {
            "raftsql_log_entries_appended_total": 6,
            "raftsql_log_bytes_appended_total": 6 * 20,
            "raftsql_log_writes_total": 1,
            "raftsql_log_fsync_seconds_count": 1,
            "raftsql_log_write_batch_entries_sum": 6,
            "raftsql_apply_seconds_count": 1,
            "raftsql_apply_batch_entries_sum": 6,
            "raftsql_lease_holds_total": 1,
            "raftsql_lease_hold_seconds_count": 1,
        }
        for name, least in grew.items():
            self.assertGreaterEqual(
                value(after, name) - value(before, name), least,
                "%s: %r then %r" % (name, value(before, name),
                                    value(after, name)))
        self.assertGreaterEqual(
            value(after, "raftsql_requests_forwarded_total", reason="first") -
            value(before, "raftsql_requests_forwarded_total",
                  reason="first"), 5)
        self.assertEqual(
            value(after, "raftsql_requests_refused_total", reason="too_big") -
            value(before, "raftsql_requests_refused_total", reason="too_big"),
            1)
        self.assertGreater(value(after, "raftsql_applied_index"),
                           value(before, "raftsql_applied_index"))
        for fam in before.values():
            if fam.type != "counter":
                continue
            for s in fam.samples:
                self.assertGreaterEqual(
                    value(after, s.name, **s.labels), s.value,
                    "counter %s%r went back" % (s.name, s.labels))

    def test_only_get_metrics(self):
        """Another path is 404 and another method 405 (Allow: GET), each
        with Content-Length and Connection: close."""
        base = self.urls[1].rsplit("/", 1)[0]
        status, headers, _ = http_get(base + "/other")
        self.assertEqual((status, headers["Connection"]), (404, "close"))
        for method in ("POST", "PUT", "HEAD", "DELETE"):
            status, headers, _ = http_get(self.urls[1], method=method)
            self.assertEqual(status, 405, method)
            self.assertEqual(headers["Allow"], "GET", method)
            self.assertEqual(headers["Connection"], "close", method)

    def test_malformed_and_oversized_requests_close_the_connection(self):
        """A request that is not HTTP, one whose header is far over the
        bound, and one cut in the middle of its header each end with their
        connection closed by the daemon; it goes on serving and its node
        runs."""
        port = int(self.urls[1].split(":")[2].split("/")[0])
        requests = [
            b"\x16\x03\x01 not http at all\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " +
            b"a" * 64 * 1024 + b"\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-" + b"b" * 20000,
        ]
        for req in requests:
            with socket.create_connection(("127.0.0.1", port), 10) as s:
                try:
                    s.sendall(req)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # closed while the request was still going out
                got, closed = read_to_close(s)
                self.assertTrue(closed, "request %r...: still open after "
                                "10 s, read %r" % (req[:40], got[:200]))
                self.assertFalse(got.startswith(b"HTTP/1.1 200"), got[:200])
        self.assertIsNone(self.daemons[1].proc.poll(), self.daemons[1].log())
        self.assert_shape(self.scrape(1), "endpoint after bad requests")

    def test_reference_lists_every_metric(self):
        """docs/reference.md's "Metrics" table has one row per family the
        endpoint serves, and no row for one it does not."""
        with open(REFERENCE) as f:
            reference = f.read()
        section = reference.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
        rows = re.findall(r"^\| `(raftsql_[a-z_]+)` \| (\w+) \|", section,
                          re.M)
        status, _, body = http_get(self.urls[1])
        self.assertEqual(status, 200, body)
        served = re.findall(r"^# TYPE (\S+) (\S+)$", body, re.M)
        self.assertEqual(sorted(rows), sorted(served))

    def test_dashboard_names_existing_metrics(self):
        """docs/grafana-dashboard.json is JSON with panels, and every
        raftsql_ name its queries use is a family the node serves."""
        with open(DASHBOARD) as f:
            dash = json.load(f)
        families = self.scrape(1)
        exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
        self.assertGreater(len(exprs), 10)
        used = set()
        for e in exprs:
            used |= set(re.findall(r"raftsql_[a-z_]+", e))
        for name in sorted(used):
            base = re.sub(r"_(bucket|sum|count|total)$", "", name)
            self.assertIn(base, families, "the dashboard uses %s" % name)
        for name in REQUIRED:
            self.assertTrue(any(u.startswith(name) for u in used),
                            "no panel shows %s" % name)


class MetricsRulesTest(unittest.TestCase):
    """The configuration rules of metrics_listen, and HTTPS with the
    node's certificate."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="raftsql-e2e-metrics-tls-")
        self.daemon = None

    def tearDown(self):
        code = self.daemon.stop() if self.daemon is not None else 0
        log = self.daemon.log() if self.daemon is not None else ""
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertEqual(code, 0, log[-4000:])

    def write_conf(self, lines):
        path = os.path.join(self.dir, "check.conf")
        with open(path, "w") as f:
            f.write("database = %s\n" % os.path.join(self.dir, "c.db"))
            f.write("\n".join(lines) + "\n")
        return path

    def test_off_loopback_needs_tls_or_insecure(self):
        """An address off loopback is refused without the node's
        certificate or insecure=on, also with a pre-shared secret, and the
        error names the key and its line; insecure=on accepts it; no
        metrics_listen is fine (off by default); a hostname is refused."""
        secret = os.path.join(self.dir, "secret")
        with open(secret, "w") as f:
            f.write("ab" * 32 + "\n")
        os.chmod(secret, 0o600)
        base = ["id = 1", "listen = 127.0.0.1:7001",
                "cluster = 1@127.0.0.1:7001"]
        cases = [
            (["metrics_listen = 10.9.9.9:9101"], 2, "off loopback"),
            (["secret_file = %s" % secret,
              "metrics_listen = 10.9.9.9:9101"], 2, "off loopback"),
            (["metrics_listen = 0.0.0.0:9101"], 2, "off loopback"),
            (["metrics_listen = localhost:9101"], 2, "not a hostname"),
            (["metrics_listen = 127.0.0.1"], 2, "not host:port"),
            # The peers' own port: the start would fail to bind it.
            (["metrics_listen = 127.0.0.1:7001"], 2,
             "is the port the node listens on for its peers (listen "
             "127.0.0.1:7001): give the metrics another port (e.g. 7002)"),
            (["insecure = on", "metrics_listen = 0.0.0.0:7001"], 2,
             "is the port the node listens on"),
            (["metrics_listen = 127.0.0.2:7001"], 0, "good"),
            (["insecure = on", "metrics_listen = 10.9.9.9:9101"], 0, "good"),
            (["metrics_listen = 127.0.0.1:9101"], 0, "good"),
            ([], 0, "good"),
        ]
        for extra, want, words in cases:
            conf = self.write_conf(base + extra)
            code, err = run_daemon("--config", conf, "--check")
            self.assertEqual(code, want, "%r: %s" % (extra, err))
            self.assertIn(words, err, extra)
            if want != 0:
                line = len(base) + 1 + len(extra)
                self.assertIn("check.conf:%d: metrics_listen: " % line, err)
                if "off loopback" in words:
                    self.assertIn("tls_cert", err)
                    self.assertIn("insecure=on", err)

    def test_https_with_the_node_certificate(self):
        """A node with certificates serves its metrics over TLS with its
        own certificate (a client trusting the cluster's CA reads and
        parses them); plain HTTP to it gets no metrics."""
        ca = CA(self.dir)
        cert, key = ca.issue("node1", ["127.0.0.1"])
        ports = free_ports(2)
        self.daemon = Daemon(self.dir, 1, [
            "id = 1", "cluster = 1@127.0.0.1:%d" % ports[0],
            "tls_cert = %s" % cert, "tls_key = %s" % key,
            "tls_ca = %s" % ca.cert,
            "metrics_listen = 127.0.0.1:%d" % ports[1],
            "election_timeout_ms = 300", "heartbeat_ms = 30"])
        url = "https://127.0.0.1:%d/metrics" % ports[1]
        context = ssl.create_default_context(cafile=ca.cert)
        seen = []

        def leads():
            try:
                seen[:] = [http_get(url, context=context)]
            except (OSError, urllib.error.URLError) as e:
                seen[:] = [e]
                return False
            status, _, body = seen[0]
            return status == 200 and value(
                parse(body), "raftsql_role", role="leader") == 1
        try:
            wait_for("node 1 leads, as its HTTPS metrics say", leads, 30)
        except TimeoutError:
            self.fail("last answer: %r; log: %s" % (
                seen, self.daemon.log()[-3000:]))
        self.assertIn("serving raft_metrics() at https://",
                      self.daemon.log())
        try:
            status = http_get(url.replace("https:", "http:"))[0]
        except (OSError, urllib.error.URLError, http.client.HTTPException):
            status = None  # closed, or no HTTP answer
        self.assertNotEqual(status, 200, "metrics served without TLS")

    def test_taken_port_stops_the_daemon(self):
        """A metrics address already taken: the daemon says so naming
        metrics_listen and exits 1 before it starts its node, so that a
        first start does not leave the file a replica that no node serves
        (it started, bootstrapped and left raftsql_applied and the log
        directory behind: new-user trial)."""
        ports = free_ports(2)
        with socket.socket() as taken:
            taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            taken.bind(("127.0.0.1", ports[1]))
            taken.listen(1)
            self.daemon = Daemon(self.dir, 1, [
                "id = 1", "cluster = 1@127.0.0.1:%d" % ports[0],
                "metrics_listen = 127.0.0.1:%d" % ports[1]])
            self.assertEqual(self.daemon.wait(30), 1, self.daemon.log())
        log, db = self.daemon.log(), self.daemon.db
        self.daemon = None
        self.assertIn("metrics_listen: cannot serve on 127.0.0.1:%d" %
                      ports[1], log)
        self.assertIn("not starting the node", log)
        self.assertNotIn("raft_start", log)
        self.assertFalse(os.path.exists(db + "-raft"), log)
        if os.path.exists(db):
            con = sqlite3.connect(db)
            try:
                self.assertEqual(con.execute(
                    "SELECT count(*) FROM sqlite_master").fetchone()[0], 0)
            finally:
                con.close()

    def test_no_node_is_an_error(self):
        """raft_metrics() where no node runs fails as raft_status() does,
        naming itself."""
        con = connect(os.path.join(self.dir, "none.db"))
        try:
            errors = []
            for fn in ("raft_status", "raft_metrics"):
                with self.assertRaises(sqlite3.OperationalError) as cm:
                    con.execute("SELECT %s()" % fn)
                errors.append(str(cm.exception))
        finally:
            con.close()
        self.assertTrue(errors[1].startswith("raft_metrics: no raftsql node "
                                             "runs"), errors[1])
        self.assertEqual(errors[1].replace("raft_metrics", "raft_status"),
                         errors[0])


if __name__ == "__main__":
    unittest.main()
