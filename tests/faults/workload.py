"""The client workload and the status monitors of a fault run.

Clients write through random nodes: inserts of unique keys into `ops`
(no unique constraint, so a write applied twice shows as two rows) and
bank transfers (two UPDATEs of `accounts`, whose CHECK(balance >= 0)
refuses overdrafts, and a row in `transfers`, all in one raft_exec).
Every write's outcome is recorded: ok, failed (definite: an SQL error or
"not applied") or unknown ("outcome unknown", the node died under it, or
no answer in time).

One monitor per node polls raft_status() and the bank's total while the
run goes on: the (term, leader) pairs every node reports, and every read
of the total.
"""

import json
import random
import re
import threading
import time

from nodes import NodeError, Timeout

ACCOUNTS = 8
BALANCE = 100
TOTAL = ACCOUNTS * BALANCE

SCHEMA = (
    "CREATE TABLE ops(k TEXT NOT NULL, client INTEGER, n INTEGER, "
    "via INTEGER); "
    "CREATE TABLE accounts(id INTEGER PRIMARY KEY, balance INTEGER NOT NULL "
    "CHECK(balance >= 0)); "
    "CREATE TABLE transfers(k TEXT NOT NULL, src INTEGER, dst INTEGER, "
    "amount INTEGER); "
    "CREATE TABLE bulk(k TEXT NOT NULL, pad BLOB); "
    "WITH RECURSIVE a(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM a "
    "WHERE i < %d) INSERT INTO accounts SELECT i, %d FROM a" %
    (ACCOUNTS, BALANCE))

INSERT = "INSERT INTO ops VALUES(?1, ?2, ?3, ?4)"
TRANSFER = ("UPDATE accounts SET balance = balance - ?3 WHERE id = ?1; "
            "UPDATE accounts SET balance = balance + ?3 WHERE id = ?2; "
            "INSERT INTO transfers VALUES(?4, ?1, ?2, ?3)")
# Large entries, written while a log disk is full so that the log must grow.
BULK = "INSERT INTO bulk VALUES(?1, ?2)"
POLL = ("SELECT raft_status(), (SELECT sum(balance) FROM accounts), "
        "(SELECT count(*) FROM accounts)")


def classify(err):
    """The outcome of a raft_exec that raised NodeError err."""
    msg = str(err)
    if "outcome unknown" in msg or err.code in (-1, -2):
        return "unknown"
    return "failed"  # "not applied", or an SQL error of the entry


class Write:
    """One attempted write."""

    __slots__ = ("key", "kind", "via", "outcome", "error", "args", "t0",
                 "t1")

    def __init__(self, key, kind, via, args):
        self.key = key
        self.kind = kind       # "insert", "transfer" or "bulk"
        self.via = via         # node id it went through
        self.args = args       # transfer: (src, dst, amount)
        self.outcome = None
        self.error = None
        self.t0 = time.monotonic()
        self.t1 = None


class Workload:
    """Clients and monitors over cluster (a FaultCluster whose schema is
    in place). start(), then stop() to join every thread."""

    def __init__(self, cluster, seed, n_clients, request_timeout):
        self.cluster = cluster
        self.seed = seed
        self.n_clients = n_clients
        self.request_timeout = request_timeout
        self.stopping = threading.Event()
        self.threads = []
        self.writes = []          # every Write, appended under lock
        self.lock = threading.Lock()
        self.leaders = {}         # term -> {leader ids reported}
        self.reporters = {}       # (term, leader) -> {reporting nodes}
        self.view = {}            # node id -> (time, term, role, leader)
        self.reads = 0            # bank totals read during the run
        self.bad_reads = []       # (node, sum, count) that broke the total
        self.stuck = []           # lines: requests that never returned
        self.skipped = 0          # writes not tried: the node was down

    def start(self):
        for c in range(self.n_clients):
            rng = random.Random("%d-client-%d" % (self.seed, c))
            self.threads.append(threading.Thread(
                target=self._client, args=(c + 1, rng), daemon=True))
        for i in self.cluster.ids:
            self.threads.append(threading.Thread(
                target=self._monitor, args=(i,), daemon=True))
        for t in self.threads:
            t.start()

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(self.request_timeout + 30)
        alive = [t.name for t in self.threads if t.is_alive()]
        if alive:
            self.stuck.append("threads still running: %s" % alive)

    def leader(self):
        """The node most recently seen leading the highest term, or None."""
        best = None
        for i, (_, term, role, _) in list(self.view.items()):
            if role == "leader" and (best is None or term > best[0]):
                best = (term, i)
        return best[1] if best else None

    def reasons(self):
        """{(outcome, reason): count} of the writes that did not succeed,
        reasons with digits folded."""
        out = {}
        for w in self.writes:
            if w.outcome == "ok":
                continue
            why = re.sub(r" \(see [^)]*\)", "", w.error or "")
            why = re.sub(r"[0-9]+", "N", why)
            why = why.replace("raft_exec: ", "")[:70]
            out[(w.outcome, why)] = out.get((w.outcome, why), 0) + 1
        return out

    def counts(self):
        out = {"ok": 0, "failed": 0, "unknown": 0}
        for w in self.writes:
            out[w.outcome] += 1
        return out

    # ---- Threads ---------------------------------------------------------

    def attempt(self, slot, key, kind, args, sql, params):
        """Write through slot and record the outcome; False when it was
        never sent (the node was down)."""
        w = Write(key, kind, slot.id, args)
        try:
            slot.request("SELECT raft_exec(?%s)" % (", ?" * len(params)),
                         sql, *params, timeout=self.request_timeout)
            w.outcome = "ok"
        except NodeError as e:
            if e.code == -1 and "(not sent)" in str(e):
                with self.lock:
                    self.skipped += 1
                return False
            w.outcome = classify(e)
            w.error = str(e)
            if isinstance(e, Timeout):
                with self.lock:
                    self.stuck.append(str(e))
        w.t1 = time.monotonic()
        with self.lock:
            self.writes.append(w)
        return True

    def _client(self, cid, rng):
        n = 0
        ids = self.cluster.ids
        while not self.stopping.is_set():
            slot = self.cluster.slots[rng.choice(ids)]
            node = slot.node
            if node is None or node.desync:
                with self.lock:
                    self.skipped += 1
                time.sleep(0.02)
                continue
            n += 1
            key = "c%d-%d" % (cid, n)
            if rng.random() < 0.35:
                src, dst = rng.sample(range(1, ACCOUNTS + 1), 2)
                amount = rng.randint(1, 60)
                self.attempt(slot, key, "transfer", (src, dst, amount),
                             TRANSFER, (src, dst, amount, key))
            else:
                self.attempt(slot, key, "insert", None, INSERT,
                             (key, cid, n, slot.id))
            time.sleep(rng.uniform(0, 0.01))

    def _monitor(self, i):
        slot = self.cluster.slots[i]
        while not self.stopping.is_set():
            time.sleep(0.05)
            node = slot.node
            if node is None or slot.paused or node.desync:
                continue
            if not slot.lock.acquire(timeout=0.05):
                continue
            try:
                node = slot.node
                if node is None or node.desync:
                    continue
                row = node.sql(POLL, timeout=self.request_timeout)[0]
            except Timeout as e:
                with self.lock:
                    self.stuck.append(str(e))
                continue
            except NodeError:
                continue
            finally:
                slot.lock.release()
            self._record(i, row)

    def _record(self, i, row):
        st = json.loads(row[0])
        term, role, leader = st["term"], st["role"], st["leader"]
        with self.lock:
            self.view[i] = (time.monotonic(), term, role, leader)
            if role == "leader":
                leader = i
            if leader is not None:
                self.leaders.setdefault(term, set()).add(leader)
                self.reporters.setdefault((term, leader), set()).add(i)
            self.reads += 1
            if row[1] != TOTAL or row[2] != ACCOUNTS:
                self.bad_reads.append((i, row[1], row[2]))
