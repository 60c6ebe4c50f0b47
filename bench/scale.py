#!/usr/bin/python3
"""bench/scale.py (run through bench/scale.sh): raftsql's costs against the
size of the database.

For each size (GB, SIZES) whose seven copies fit in the free space of the
build directory (three replicas, a snapshot copy, a received copy, a
joining node and the source), it builds once, and caches under
build/scale/, a source file of that size: table kv(k TEXT PRIMARY KEY, v
BLOB, n INTEGER) with an index on n, 1000-byte random values. Then, on
127.0.0.1, with build/raftsql-testhost node processes:

- found: node 1 founds a cluster alone from the file (bootstrap_from=);
- join_s: node 2 joins with an empty database and no write load, until it
  applied node 1's index and is a voter (snapshot create, send, install),
  beside cp_fsync_s, a cp of the same file and its fsync on the same disk
  (join_vs_cp = cp_fsync_s / join_s; the target is >= 0.7); node 3 joins;
- w1, w64: raft_exec writes (INSERT OR REPLACE of a fresh key, the table
  grows) from 1 and 64 client threads of this process, each with its own
  connection with raftsql loaded on node 1's file (so through node 1's
  attach socket): writes/s and p99 ms;
- pw1, pw64: the same rows written as plain autocommit INSERT OR REPLACE
  statements (each a transaction under the write lease, issue 24);
- point_rps, range_rps: reads from this process on node 1's file with
  raftsql loaded (its guard runs): point selects by primary key, and
  100-row range selects through the index, one connection, statements
  reused;
- restart: node 2 killed with SIGKILL and started again: seconds from the
  kill to its first served read (read_s) and to its first raft_exec
  answered (write_s), and how long the start's background verification
  of the file took (scan_s, raft_status() start_verify);
- snap: one client writes while node 4 joins (a snapshot is created and
  sent): p99 ms in that window (snap_p99_ms) beside w1's (w1_p99_ms),
  each measured once the joins before are on the disk (the page cache's
  dirty and writeback pages under 64 MB, no snapshot file still being
  removed; at most 120 s);
  the log shows that window's writes per 5 s ("join +N s": writes, p99,
  max, and what the leader's raft_status() showed of node 4: making the
  snapshot, the share of the transfer sent, sent while node 4
  installs, or its catch-up of the log, entries behind the commit; the
  leader is node 1 at the start, and a window names it when another
  node took over);
- rss_mb, anon_mb: the largest VmRSS and RssAnon of the node processes
  at the end.

One row per size goes to a table (TSV) in OUT (default bench/results/,
scale-<date>.tsv, with the load average and the commands) and, with
python3-matplotlib, to scale-<date>.png (log-log where it helps).

SETTLE_S= bounds each wait for the disk to settle (default 120 s).
LOG_LEVEL= sets the nodes' log_level (default warn); with LOGS=<dir>
their logs are copied there before the run's files are removed.
"""

import math
import os
import random
import shutil
import signal
import sqlite3
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))

from e2e import connect  # noqa: E402  (raftsql loaded: RAFTSQL_SO)
from raftsql_cluster import Node, NodeError, free_ports  # noqa: E402

NODE = os.environ.get("RAFTSQL_TESTHOST",
                      os.path.join(ROOT, "build", "raftsql-testhost"))
EXTRA = ("election_timeout_ms=1000 heartbeat_ms=50 exec_timeout_ms=60000 "
         "log_level=%s" % os.environ.get("LOG_LEVEL", "warn"))
VALUE_LEN = 1000
ROW_BYTES = 1120  # a row, its key's index entry and the n index, on disk

# The table's columns, in order: name, what (for --help and the docs).
COLUMNS = [
    ("size_gb", "the size asked for"),
    ("file_mb", "node 1's database file after founding"),
    ("rows", "rows of kv in the source"),
    ("found_s", "node 1's raft_start with bootstrap_from="),
    ("join_s", "node 2 joins, no write load, until caught up and a voter"),
    ("cp_fsync_s", "cp of the source and fsync, same disk"),
    ("join_vs_cp", "cp_fsync_s / join_s (target >= 0.7)"),
    ("w1_wps", "writes/s, 1 client"),
    ("w1_p99_ms", "its p99"),
    ("w64_wps", "writes/s, 64 clients"),
    ("w64_p99_ms", "its p99"),
    ("pw1_wps", "plain INSERTs (autocommit) per second, 1 client"),
    ("pw1_p99_ms", "its p99"),
    ("pw64_wps", "plain INSERTs per second, 64 clients"),
    ("pw64_p99_ms", "its p99"),
    ("point_rps", "point selects by primary key per second"),
    ("range_rps", "100-row range selects per second"),
    ("read_s", "kill -9 of a follower to its first served read"),
    ("write_s", "kill -9 to its first raft_exec answered"),
    ("scan_s", "the start's background verification"),
    ("snap_p99_ms", "1-client write p99 while a snapshot is made and sent"),
    ("snap_s", "node 4's join under that load, until caught up"),
    ("snap_done", "1 when node 4 caught up within SNAP_TIMEOUT, else 0"),
    ("rss_mb", "largest VmRSS of a node process"),
    ("anon_mb", "largest RssAnon of a node process"),
]


def log(msg):
    print("scale: " + msg, flush=True)


def key(i):
    return "k%031d" % i


def build_source(path, size_gb):
    """Builds the source file of @size_gb at @path once (a cached one is
    kept: written to path.tmp and renamed when complete); returns its
    rows."""
    if os.path.exists(path):
        con = sqlite3.connect(path)
        rows = con.execute("SELECT max(n) FROM kv").fetchone()[0]
        con.close()
        log("source %s cached (%d rows, %.0f MB)" %
            (path, rows, os.path.getsize(path) / 1e6))
        return rows
    target = int(size_gb * 1e9)
    rows = max(1000, target // ROW_BYTES)
    tmp = path + ".tmp"
    if os.path.exists(tmp):
        os.remove(tmp)
    began = time.monotonic()
    con = sqlite3.connect(tmp, isolation_level=None)
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    con.execute("PRAGMA cache_size=-262144")
    con.execute("CREATE TABLE kv(k TEXT PRIMARY KEY, v BLOB, n INTEGER)")
    con.execute("CREATE INDEX kv_n ON kv(n)")
    chunk = 200000
    for lo in range(1, rows + 1, chunk):
        hi = min(rows, lo + chunk - 1)
        con.execute("BEGIN")
        con.execute(
            "WITH RECURSIVE c(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM c "
            "WHERE i < ?) INSERT INTO kv SELECT printf('k%031d', i), "
            "randomblob(?), i FROM c", (lo, hi, VALUE_LEN))
        con.execute("COMMIT")
    con.execute("PRAGMA journal_mode=DELETE")
    con.close()
    os.fsync(os.open(tmp, os.O_RDONLY))
    os.rename(tmp, path)
    log("source %s built: %d rows, %.0f MB in %.1f s" %
        (path, rows, os.path.getsize(path) / 1e6, time.monotonic() - began))
    return rows


def cp_fsync(src, dst):
    """Seconds to copy @src to @dst and fsync it."""
    began = time.monotonic()
    shutil.copyfile(src, dst)
    fd = os.open(dst, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    took = time.monotonic() - began
    os.remove(dst)
    return took


def wait_until(what, pred, timeout):
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError("%s: not within %.0f s" % (what, timeout))
        time.sleep(0.02)


def pct(samples, p):
    if not samples:
        return float("nan")
    s = sorted(samples)
    return s[min(len(s) - 1, int(math.ceil(p / 100.0 * len(s))) - 1)]


class Load:
    """@clients threads writing through connections on @db until stop();
    each keeps its latencies (s). @plain: plain autocommit INSERTs (each a
    transaction through the write lease) instead of raft_exec."""

    def __init__(self, db, clients, first, plain=False):
        self.plain = plain
        self.cons = [connect(db) for _ in range(clients)]
        self.lat = [[] for _ in range(clients)]
        self.at = [[] for _ in range(clients)]  # each write's start
        self.errors = []
        self.n = first
        self.mu = threading.Lock()
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(i,),
                                         daemon=True)
                        for i in range(clients)]

    def next_n(self):
        with self.mu:
            self.n += 1
            return self.n

    def run(self, i):
        con, lat = self.cons[i], self.lat[i]
        while not self.done.is_set():
            n = self.next_n()
            t = time.monotonic()
            try:
                if self.plain:
                    con.execute("INSERT OR REPLACE INTO kv(k, v, n) "
                                "VALUES(?, ?, ?)",
                                (key(n), os.urandom(VALUE_LEN), n))
                else:
                    con.execute("SELECT raft_exec('INSERT OR REPLACE INTO "
                                "kv(k, v, n) VALUES(?, ?, ?)', ?, ?, ?)",
                                (key(n), os.urandom(VALUE_LEN), n)).fetchall()
            except sqlite3.Error as e:
                self.errors.append(str(e))
                if len(self.errors) > 100:
                    return
                continue
            lat.append(time.monotonic() - t)
            self.at[i].append(t)

    def start(self):
        self.began = time.monotonic()
        for t in self.threads:
            t.start()

    def stop(self):
        self.done.set()
        for t in self.threads:
            t.join(120)
        self.took = time.monotonic() - self.began
        for c in self.cons:
            c.close()
        if self.errors:
            log("%d write errors, first: %s" % (len(self.errors),
                                                 self.errors[0]))
        return [x for lat in self.lat for x in lat]


class Phases(threading.Thread):
    """Samples the leader's raft_status() every 0.5 s during the join of
    server @joiner, to tell the write latencies of the snapshot's
    creation (the joiner in state snapshot, no transfer yet), its
    transfer (bytes moving), the new node's install (every byte sent,
    unanswered) and its catch-up of the log (state replicate, its match
    index behind the commit index) apart: report() logs them per 5 s
    window."""

    def __init__(self, nodes, began, joiner=4):
        super().__init__(daemon=True)
        self.nodes, self.began = nodes, began
        # Each node's request pipe is shared with the main thread from now
        # on: each request under one lock per node.
        self.plain_sql = {}
        for i, node in nodes.items():
            self.plain_sql[i] = node.sql
            node.sql = self.locked(node.sql)
        self.joiner = joiner
        # (t, bytes or None, total or None, joiner's state or None, its
        # match index, the commit index, raft_status()'s failure or None,
        # the id of the node sampled: the leader node 1 knows)
        self.samples = []
        self.leaders = set()
        self.halt = threading.Event()

    @staticmethod
    def locked(sql):
        lock = threading.Lock()

        def call(*args, **kwargs):
            with lock:
                return sql(*args, **kwargs)
        return call

    def run(self):
        while not self.halt.is_set():
            t = time.monotonic()
            at = 1
            try:
                status = self.nodes[1].status()
                # The join is the leader's: sample it when node 1 is not.
                if status.get("role") != "leader" and \
                        status.get("leader") in self.plain_sql:
                    at = status["leader"]
                    status = self.nodes[at].status()
            except (NodeError, ValueError, OSError) as e:
                status = {"error": "%s: %s" % (type(e).__name__, e)}
            if status.get("role") == "leader":
                self.leaders.add(at)
            st = status.get("snapshot_transfer")
            peer = [p for p in status.get("peers") or []
                    if p.get("id") == self.joiner]
            peer = peer[0] if peer else {}
            self.samples.append((t, st and st.get("bytes"),
                                 st and st.get("total"), peer.get("state"),
                                 peer.get("match"), status.get("commit"),
                                 status.get("error"), at))
            self.halt.wait(0.5)

    def finish(self):
        self.halt.set()
        self.join(10)
        for i, node in self.nodes.items():
            if i in self.plain_sql:
                node.sql = self.plain_sql[i]

    def phase(self, t):
        """What the leader's transfer showed at time @t."""
        last = None
        for s in self.samples:
            if s[0] > t:
                break
            last = s
        if last is None:
            return "no sample"
        if last[6] is not None:
            return "raft_status() failed: %.80s" % last[6]
        by = "" if last[7] == 1 else ", leader node %d" % last[7]
        if last[1] is not None:
            if last[1] >= last[2] * 0.999:
                return "sent, installing" + by
            return "transfer %d%%%s" % (100 * last[1] // max(1, last[2]),
                                        by)
        if last[3] is None:
            return "node %d not in the configuration yet%s" % (
                self.joiner, by)
        if last[3] == "snapshot":
            return "making the snapshot" + by
        if last[3] == "replicate" and last[4] is not None and \
                last[5] is not None and last[4] < last[5]:
            return "catch-up, %d entries behind%s" % (last[5] - last[4], by)
        return last[3] + by

    def report(self, starts, lats):
        """Logs writes, p99 and max per 5 s window of @starts/@lats."""
        if not starts:
            return
        w0 = self.began
        end = starts[-1]
        while w0 <= end:
            win = [lat for t, lat in zip(starts, lats) if w0 <= t < w0 + 5]
            if win:
                log("  join +%4.0f s: %4d writes, p99 %6.1f ms, max %7.1f "
                    "ms (%s)" % (w0 - self.began, len(win),
                                 pct(win, 99) * 1000, max(win) * 1000,
                                 self.phase(w0 + 2.5)))
            w0 += 5


def settle(nodes, limit_mb=64):
    """Waits until what the joins before wrote is on the disk: the page
    cache's dirty and writeback pages under @limit_mb, and no snapshot
    file of @nodes still being removed (raft/uv_remove.c); at most
    SETTLE_S s (default 120), then logs what it saw and goes on."""
    timeout = float(os.environ.get("SETTLE_S", "120"))
    def pending():
        kb = 0
        with open("/proc/meminfo") as f:
            for line in f:
                k, v = line.split(":", 1)
                if k in ("Dirty", "Writeback"):
                    kb += int(v.split()[0])
        removing = 0
        for n in nodes:
            d = n.db + "-raft/snapshots"
            if os.path.isdir(d):
                removing += sum(1 for f in os.listdir(d)
                                if f.startswith("removing-"))
        return kb / 1024.0, removing
    deadline = time.monotonic() + timeout
    while True:
        mb, removing = pending()
        if mb < limit_mb and removing == 0:
            return
        if time.monotonic() > deadline:
            log("not settled after %.0f s: %.0f MB dirty or under writeback, "
                "%d snapshot files being removed; measuring anyway" %
                (timeout, mb, removing))
            return
        time.sleep(0.5)


def writes(db, clients, duration, first, plain=False):
    """(writes/s, p99 ms, last n) of @clients writing for @duration s
    (@plain: plain INSERTs, else raft_exec)."""
    load = Load(db, clients, first, plain)
    load.start()
    time.sleep(duration)
    lat = load.stop()
    return len(lat) / load.took, pct(lat, 99) * 1000, load.n


def reads(db, rows, duration):
    """(point selects/s, range selects/s) from one connection."""
    con = connect(db)
    rnd = random.Random(7)
    out = []
    for sql, arg in (("SELECT v FROM kv WHERE k = ?",
                      lambda: (key(rnd.randint(1, rows)),)),
                     ("SELECT count(*), sum(length(v)) FROM kv WHERE n "
                      "BETWEEN ?1 AND ?1 + 99",
                      lambda: (rnd.randint(1, max(1, rows - 100)),))):
        n = 0
        began = time.monotonic()
        while time.monotonic() - began < duration:
            for _ in range(100):
                con.execute(sql, arg()).fetchall()
            n += 100
        out.append(n / (time.monotonic() - began))
    con.close()
    return out


def memory(nodes):
    """(largest VmRSS MB, largest RssAnon MB) of the live node processes."""
    rss = anon = 0
    for n in nodes:
        try:
            with open("/proc/%d/status" % n.proc.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss = max(rss, int(line.split()[1]))
                    elif line.startswith("RssAnon:"):
                        anon = max(anon, int(line.split()[1]))
        except OSError:
            pass
    return rss / 1024.0, anon / 1024.0


class Cluster:
    """The nodes of one size's run in @work."""

    def __init__(self, work):
        self.work = work
        self.ports = free_ports(4)
        self.nodes = {}
        self.configs = {}

    def spawn(self, i, where):
        db = os.path.join(self.work, "node%d.db" % i)
        n = Node(NODE, i, db, os.path.join(self.work, "node%d.log" % i))
        self.configs[i] = "id=%d %s %s" % (i, where, EXTRA)
        self.nodes[i] = n
        n.sql("SELECT raft_start(?)", self.configs[i])
        return n

    def join(self, i):
        return self.spawn(i, "listen=127.0.0.1:%d join=127.0.0.1:%d" % (
            self.ports[i - 1], self.ports[0]))

    def caught_up(self, i, index):
        """Node @i is a voter on node 1 and applied @index (node 1's
        commit index when it joined: a snapshot covers it; under write
        load a follower's applied index trails the commit index)."""
        st1 = self.nodes[1].status()
        voters = [m["id"] for m in st1["configuration"]["members"]
                  if m["role"] == "voter"]
        return i in voters and self.nodes[i].status()["applied"] >= index

    def join_wait(self, i, timeout=3600):
        """Node @i joins; returns once caught_up (TimeoutError past
        @timeout s)."""
        index = self.nodes[1].status()["commit"]
        self.join(i)
        wait_until("node %d caught up" % i, lambda: self.caught_up(i, index),
                   timeout)

    def stop(self):
        for n in self.nodes.values():
            n.kill()


def run_size(size_gb, cache, work, duration, snap_timeout):
    row = {"size_gb": size_gb}
    src = os.path.join(cache, "kv-%sgb.db" % size_gb)
    rows = build_source(src, size_gb)
    row["rows"] = rows
    c = Cluster(work)
    try:
        began = time.monotonic()
        c.spawn(1, "cluster=1@127.0.0.1:%d bootstrap_from=%s" % (
            c.ports[0], src))
        row["found_s"] = time.monotonic() - began
        wait_until("node 1 leads",
                   lambda: c.nodes[1].value("SELECT raft_leader()") == 1, 60)
        row["file_mb"] = os.path.getsize(c.nodes[1].db) / 1e6

        began = time.monotonic()
        c.join_wait(2)
        row["join_s"] = time.monotonic() - began
        row["cp_fsync_s"] = cp_fsync(src, os.path.join(work, "cp.db"))
        row["join_vs_cp"] = row["cp_fsync_s"] / row["join_s"]
        c.join_wait(3)
        log("%s GB: founded in %.2f s, node 2 joined in %.2f s (cp + fsync "
            "%.2f s)" % (size_gb, row["found_s"], row["join_s"],
                         row["cp_fsync_s"]))

        db1 = c.nodes[1].db
        n = rows
        settle(c.nodes.values())
        row["w1_wps"], row["w1_p99_ms"], n = writes(db1, 1, duration, n)
        row["w64_wps"], row["w64_p99_ms"], n = writes(db1, 64, duration, n)
        row["pw1_wps"], row["pw1_p99_ms"], n = writes(db1, 1, duration, n,
                                                     plain=True)
        row["pw64_wps"], row["pw64_p99_ms"], n = writes(db1, 64, duration,
                                                       n, plain=True)
        row["point_rps"], row["range_rps"] = reads(db1, rows, duration)
        log("%s GB: w1 %.0f/s p99 %.1f ms, w64 %.0f/s p99 %.1f ms, reads "
            "%.0f/s point, %.0f/s range" % (
                size_gb, row["w1_wps"], row["w1_p99_ms"], row["w64_wps"],
                row["w64_p99_ms"], row["point_rps"], row["range_rps"]))
        log("%s GB: plain INSERTs: 1 client %.0f/s p99 %.1f ms, 64 clients "
            "%.0f/s p99 %.1f ms" % (size_gb, row["pw1_wps"],
                                     row["pw1_p99_ms"], row["pw64_wps"],
                                     row["pw64_p99_ms"]))

        # kill -9 of follower 2, and its restart.
        c.nodes[2].kill()
        killed = time.monotonic()
        n2 = Node(NODE, 2, c.nodes[2].db, c.nodes[2].log_path + ".2")
        c.nodes[2] = n2
        n2.sql("SELECT raft_start(?)", c.configs[2])
        wait_until("a read on node 2", lambda: n2.sql(
            "SELECT count(*) FROM kv WHERE k = ?", key(1)) == [[1]], 60)
        row["read_s"] = time.monotonic() - killed

        def wrote():
            try:
                n2.value("SELECT raft_exec('INSERT OR REPLACE INTO kv(k, v, "
                         "n) VALUES(?, ?, ?)', ?, zeroblob(10), ?)",
                         key(n + 1), n + 1)
                return True
            except NodeError:
                return False
        wait_until("a write through node 2", wrote, 120)
        row["write_s"] = time.monotonic() - killed
        n += 1

        def scanned():
            sv = n2.status()["start_verify"]
            return sv is None or sv["state"] not in ("running", "waiting")
        wait_until("node 2's start scan", scanned, 3600)
        sv = n2.status()["start_verify"]
        row["scan_s"] = sv["elapsed_ms"] / 1000.0 if sv else 0.0
        log("%s GB: restart: read %.2f s, write %.2f s, scan %.2f s (%s)" % (
            size_gb, row["read_s"], row["write_s"], row["scan_s"],
            sv["state"] if sv else "none"))

        # One client writes while node 4 joins (snapshot made and sent),
        # through node 1 as the leader: the restart above may have moved
        # the leadership (a heartbeat late behind the disk's write-back).
        if c.nodes[1].value("SELECT raft_leader()") != 1:
            log("%s GB: leadership moved to node %s; handed back to node 1" %
                (size_gb, c.nodes[1].value("SELECT raft_leader()")))
            leader = c.nodes[1].value("SELECT raft_leader()")
            if leader in c.nodes:
                c.nodes[leader].sql("SELECT raft_transfer(1)")
            wait_until("node 1 leads", lambda: c.nodes[1].value(
                "SELECT raft_leader()") == 1, 60)
        settle(c.nodes.values())
        load = Load(db1, 1, n)
        load.start()
        time.sleep(min(1.0, duration / 2))
        mark = len(load.lat[0])
        began = time.monotonic()
        sampler = Phases(c.nodes, began)
        sampler.start()
        try:
            c.join_wait(4, snap_timeout)
            row["snap_done"] = 1
        except TimeoutError:
            log("%s GB: node 4 did not catch up within %.0f s under load" %
                (size_gb, snap_timeout))
            row["snap_done"] = 0
        row["snap_s"] = time.monotonic() - began
        sampler.finish()
        during = load.lat[0][mark:]
        load.stop()
        sampler.report(load.at[0][mark:], during)
        if sampler.leaders - {1}:
            log("%s GB: the leadership moved during the join (leaders seen: "
                "%s)" % (size_gb, sorted(sampler.leaders)))
        row["snap_p99_ms"] = pct(during, 99) * 1000
        row["rss_mb"], row["anon_mb"] = memory(c.nodes.values())
        log("%s GB: write p99 during a snapshot %.1f ms (%d writes); rss "
            "%.0f MB, anon %.0f MB" % (size_gb, row["snap_p99_ms"],
                                        len(during), row["rss_mb"],
                                        row["anon_mb"]))
    finally:
        c.stop()
    return row


def fmt(v):
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return "%.3g" % v if abs(v) < 100 else "%.0f" % v
    return str(v)


def plot(rows, png):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("no plot: python3-matplotlib is not installed (bench/scale.sh "
            "installs it)")
        return False
    sizes = [r["size_gb"] for r in rows]
    panels = [
        ("writes/s", [("w1_wps", "1 client"), ("w64_wps", "64 clients"),
                      ("pw1_wps", "plain, 1 client"),
                      ("pw64_wps", "plain, 64 clients")], True),
        ("write p99 (ms)", [("w1_p99_ms", "1 client"),
                            ("w64_p99_ms", "64 clients"),
                            ("pw1_p99_ms", "plain, 1 client"),
                            ("pw64_p99_ms", "plain, 64 clients"),
                            ("snap_p99_ms", "1 client, during a snapshot")],
         True),
        ("reads/s", [("point_rps", "point"), ("range_rps", "100-row range")],
         True),
        ("seconds", [("read_s", "kill -9 to a read"),
                     ("write_s", "kill -9 to a write"),
                     ("scan_s", "background start scan"),
                     ("join_s", "join + catch-up"),
                     ("snap_s", "join + catch-up under load"),
                     ("cp_fsync_s", "cp + fsync")], True),
        ("MB", [("rss_mb", "max RSS"), ("anon_mb", "max anonymous")], True),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    axes = axes.flatten()
    axes[-1].axis("off")
    for ax, (title, series, loglog) in zip(axes, panels):
        for col, label in series:
            ax.plot(sizes, [max(r[col], 1e-3) for r in rows], marker="o",
                    label=label)
        ax.set_xscale("log")
        if loglog:
            ax.set_yscale("log")
        ax.set_xlabel("database size (GB)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=80)
    log("plot: %s" % png)
    return True


def main():
    sizes = [float(s) if "." in s else int(s)
             for s in os.environ.get("SIZES", "0.1 1 4 16").split()]
    duration = float(os.environ.get("DURATION", "10"))
    snap_timeout = float(os.environ.get("SNAP_TIMEOUT", "600"))
    out = os.environ.get("OUT", os.path.join(ROOT, "bench", "results"))
    cache = os.environ.get("CACHE", os.path.join(ROOT, "build", "scale"))
    os.makedirs(out, exist_ok=True)
    os.makedirs(cache, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d-%H%M%S")
    tsv = os.path.join(out, "scale-%s.tsv" % stamp)
    load0 = os.getloadavg()
    rows = []
    for size in sizes:
        src = os.path.join(cache, "kv-%sgb.db" % size)
        need = 7 * (os.path.getsize(src) if os.path.exists(src)
                    else size * 1e9)
        free = shutil.disk_usage(cache).free
        if need > free:
            log("skip %s GB: seven copies need %.1f GB, %s has %.1f GB free"
                % (size, need / 1e9, cache, free / 1e9))
            continue
        work = os.path.join(cache, "run-%s" % os.getpid())
        os.makedirs(work)
        try:
            rows.append(run_size(size, cache, work, duration, snap_timeout))
        finally:
            if os.environ.get("LOGS"):
                keep = os.path.join(os.environ["LOGS"], "%s-%sgb" % (
                    stamp, size))
                os.makedirs(keep, exist_ok=True)
                for name in os.listdir(work):
                    if ".log" in name:
                        shutil.copy(os.path.join(work, name), keep)
                log("node logs: %s" % keep)
            shutil.rmtree(work, ignore_errors=True)
    load1 = os.getloadavg()
    with open(tsv, "w") as f:
        f.write("# bench/scale.sh SIZES='%s' DURATION=%s SNAP_TIMEOUT=%s; "
                "load average %.2f at the start, %.2f at the end; %d "
                "cores\n" % (" ".join(str(s) for s in sizes), duration,
                             snap_timeout, load0[0], load1[0],
                             os.cpu_count()))
        f.write("\t".join(c for c, _ in COLUMNS) + "\n")
        for r in rows:
            f.write("\t".join(fmt(r[c]) for c, _ in COLUMNS) + "\n")
    with open(tsv) as f:
        sys.stdout.write(f.read())
    log("table: %s" % tsv)
    if rows and os.environ.get("PLOT", "1") == "1":
        plot(rows, tsv[:-4] + ".png")
    return 0 if rows or not sizes else 1


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
    sys.exit(main())
