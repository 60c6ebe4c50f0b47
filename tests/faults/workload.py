"""The client workload and the status monitors of a fault run.

Clients write through random nodes: inserts of unique keys into `ops`
(no unique constraint, so a write applied twice shows as two rows) and
bank transfers (two UPDATEs of `accounts`, whose CHECK(balance >= 0)
refuses overdrafts, and a row in `transfers`, all in one raft_exec).
Every write's outcome is recorded: ok, failed (definite: an SQL error or
"not applied") or unknown ("outcome unknown", the node died under it, or
no answer in time), as history.py decides, and every write goes into the
run's history (process "bank-<client>") too.

Some of the writes are plain SQL (README "Plain SQL writes"), through
the node's own connection (its request pipe, held from BEGIN to COMMIT)
or through its attached writer (another process, the node's socket):
autocommit inserts into `ops`, and read-modify-write transfers: BEGIN
IMMEDIATE (or a deferred BEGIN), read both balances, decide the amount
in the client (at most what the source holds), write the new balances
as values, record the transfer with the balances it read, COMMIT.

One monitor per node polls raft_status() and the bank's total while the
run goes on: the (term, leader) pairs every node reports, and every read
of the total.
"""

import json
import random
import re
import threading
import time

import paths
from clients import Clients
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
    "amount INTEGER, src_was INTEGER, dst_was INTEGER); "
    "CREATE TABLE bulk(k TEXT NOT NULL, pad BLOB); "
    "WITH RECURSIVE a(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM a "
    "WHERE i < %d) INSERT INTO accounts SELECT i, %d FROM a" %
    (ACCOUNTS, BALANCE))

INSERT = "INSERT INTO ops VALUES(?1, ?2, ?3, ?4)"
TRANSFER = ("UPDATE accounts SET balance = balance - ?3 WHERE id = ?1; "
            "UPDATE accounts SET balance = balance + ?3 WHERE id = ?2; "
            "INSERT INTO transfers(k, src, dst, amount) "
            "VALUES(?4, ?1, ?2, ?3)")
# Large entries, written while a log disk is full so that the log must grow.
BULK = "INSERT INTO bulk VALUES(?1, ?2)"
# The plain writes' statements, each one request.
READ = "SELECT id, balance FROM accounts WHERE id IN (?1, ?2)"
SET = "UPDATE accounts SET balance = ?2 WHERE id = ?1"
RECORD = "INSERT INTO transfers VALUES(?1, ?2, ?3, ?4, ?5, ?6)"
# The busy timeout of an attached writer's connection (the node's own
# has raftsql-testhost's 5 s).
BUSY_S = 5.0
POLL = ("SELECT raft_status(), (SELECT sum(balance) FROM accounts), "
        "(SELECT count(*) FROM accounts)")
# A write's outcome, in this module's words, from a history completion's.
OUTCOME = {"ok": "ok", "fail": "failed", "info": "unknown"}


class Write:
    """One attempted write."""

    __slots__ = ("key", "kind", "via", "outcome", "error", "args", "t0",
                 "t1", "plain")

    def __init__(self, key, kind, via, args, plain=None):
        self.key = key
        self.kind = kind       # "insert", "transfer" or "bulk"
        self.via = via         # node id it went through
        self.args = args       # transfer: (src, dst, amount, src_was,
        #                        dst_was), the last two of a plain one
        self.plain = plain     # None (raft_exec), "host" or "attached"
        self.outcome = None
        self.error = None
        self.t0 = time.monotonic()
        self.t1 = None


class Workload(Clients):
    """The bank's clients and the monitors over cluster (a FaultCluster
    whose schema is in place), recording into history (a
    history.History). start(), then stop() to join every thread."""

    name = "bank"

    def __init__(self, cluster, seed, n_clients, request_timeout, history):
        super().__init__(cluster, seed, n_clients, request_timeout, history)
        self.writes = []          # every Write, appended under lock
        self.leaders = {}         # term -> {leader ids reported}
        self.reporters = {}       # (term, leader) -> {reporting nodes}
        self.view = {}            # node id -> (time, term, role, leader)
        self.reads = 0            # bank totals read during the run
        self.bad_reads = []       # (node, sum, count) that broke the total
        self.skipped = 0          # writes not tried: the node was down
        self.declined = 0         # plain transfers from an empty account

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

    def leader(self):
        """The node most recently seen leading the highest term, or None."""
        best = None
        for i, (_, term, role, _) in list(self.view.items()):
            if role == "leader" and (best is None or term > best[0]):
                best = (term, i)
        return best[1] if best else None

    def reasons(self):
        """{(outcome, reason): count} of the writes that did not succeed,
        reasons with paths and digits folded, a plain write's with its
        channel in front."""
        out = {}
        for w in self.writes:
            if w.outcome == "ok":
                continue
            why = re.sub(r" \(see [^)]*\)", "", w.error or "")
            why = re.sub(r"/[^ :]*", "<file>", why)
            why = re.sub(r"[0-9]+", "N", why)
            why = why.replace("raft_exec: ", "")
            if w.plain:
                why = "plain %s: %s" % (w.plain, why[:200])
            else:
                why = why[:70]
            out[(w.outcome, why)] = out.get((w.outcome, why), 0) + 1
        return out

    def counts(self, plain=False):
        """{outcome: count} of every write, or with plain of the plain
        ones only."""
        out = {"ok": 0, "failed": 0, "unknown": 0}
        for w in self.writes:
            if w.plain or not plain:
                out[w.outcome] += 1
        return out

    def plain_counts(self):
        """{"<kind> <channel> <outcome>": count} of the plain writes."""
        out = {}
        for w in self.writes:
            if w.plain:
                what = "%s %s %s" % (w.kind, w.plain, w.outcome)
                out[what] = out.get(what, 0) + 1
        return out

    # ---- Threads ---------------------------------------------------------

    def attempt(self, slot, key, kind, args, sql, params, cid=0):
        """Write through slot and record the outcome; False when it was
        never sent (the node was down)."""
        w = Write(key, kind, slot.id, args)
        op = self.history.invoke("bank-%d" % cid, slot.id, kind,
                                 self.history_value(w), "exec")
        try:
            out = paths.request(slot, self.request_timeout,
                                "SELECT raft_exec(?%s)" % (
                                    ", ?" * len(params)), sql, *params)
        except paths.NotSent as e:
            self.history.complete(op, "fail", error=str(e))
            with self.lock:
                self.skipped += 1
            return False
        self.record(w, op, out)
        return True

    def record(self, w, op, out):
        """Record w, whose history op ended with paths.Outcome out."""
        w.outcome = OUTCOME[out.type]
        w.error = out.error
        w.t1 = time.monotonic()
        self.history.complete(op, out.type, None if out.type != "ok" else
                              self.history_value(w), out.error)
        with self.lock:
            if out.timed_out:
                self.stuck.append(out.error)
            self.writes.append(w)

    @staticmethod
    def history_value(w):
        return [w.key] + list(w.args or ())

    def plain(self, slot, channel, key, kind, args, steps, cid=0):
        """Run a plain write on node slot's own connection (channel
        "host") or on its attached writer ("attached"), and record its
        outcome (paths.plain); False when it was never sent (the node was
        down).

        steps(w, conn) runs the write's statements with conn(text,
        *params, commit=False), the last one with commit=True, and may
        set w.args; it returns False for a transaction it rolled back
        itself (no write: a definite failure in the history)."""
        w = Write(key, kind, slot.id, args, channel)
        op = self.history.invoke("bank-%d" % cid, slot.id, kind,
                                 self.history_value(w), "plain-" + channel)
        try:
            out = paths.plain(self.cluster, slot, channel,
                              self.request_timeout, BUSY_S,
                              lambda conn: steps(w, conn))
        except paths.NotSent as e:
            self.history.complete(op, "fail", error=str(e))
            with self.lock:
                self.skipped += 1
            return False
        if out.type == "ok" and out.value is False:
            self.history.complete(op, "fail", error="declined: the source "
                                  "account is empty")
            with self.lock:
                self.declined += 1
            return True
        self.record(w, op, out)
        return True

    def plain_insert(self, slot, channel, key, cid, n):
        """An autocommit INSERT of key into ops."""
        def steps(w, conn):
            conn(INSERT, key, cid, n, slot.id, commit=True)
            return True
        return self.plain(slot, channel, key, "insert", None, steps, cid)

    def plain_transfer(self, slot, channel, key, src, dst, want, begin,
                       cid=0):
        """A read-modify-write transfer of at most want from src to dst in
        a transaction opened with begin: the amount and the new balances
        are the client's, from the balances it read in the transaction;
        the transfer's row records them."""
        def steps(w, conn):
            conn(begin)
            held = dict(conn(READ, src, dst))
            amount = min(want, held[src])
            if amount == 0:
                conn("ROLLBACK")
                return False
            w.args = (src, dst, amount, held[src], held[dst])
            conn(SET, src, held[src] - amount)
            conn(SET, dst, held[dst] + amount)
            conn(RECORD, key, *w.args)
            conn("COMMIT", commit=True)
            return True
        return self.plain(slot, channel, key, "transfer",
                          (src, dst, None, None, None), steps, cid)

    def _client(self, cid, rng):
        """Writes through random nodes: 15 % plain inserts, 15 % plain
        transfers (each half through the node's own connection, half
        through its attached writer), 25 % raft_exec transfers, 45 %
        raft_exec inserts. An attached writer writes also while its node
        is down (it must be refused: a failed write)."""
        n = 0
        ids = self.cluster.ids
        while not self.stopping.is_set():
            slot = self.cluster.slots[rng.choice(ids)]
            src, dst = rng.sample(range(1, ACCOUNTS + 1), 2)
            amount = rng.randint(1, 60)
            channel = rng.choice(("host", "attached"))
            p = rng.random()
            node = slot.node
            if (p >= 0.3 or channel == "host") and (node is None or
                                                    node.desync):
                with self.lock:
                    self.skipped += 1
                time.sleep(0.02)
                continue
            n += 1
            key = "c%d-%d" % (cid, n)
            if p < 0.15:
                self.plain_insert(slot, channel, key, cid, n)
            elif p < 0.3:
                begin = "BEGIN IMMEDIATE" if rng.random() < 0.7 else "BEGIN"
                self.plain_transfer(slot, channel, key, src, dst, amount,
                                    begin, cid)
            elif p < 0.55:
                self.attempt(slot, key, "transfer",
                             (src, dst, amount, None, None), TRANSFER,
                             (src, dst, amount, key), cid)
            else:
                self.attempt(slot, key, "insert", None, INSERT,
                             (key, cid, n, slot.id), cid)
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
