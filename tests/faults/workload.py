"""The client workload and the status monitors of a fault run.

Clients write through random nodes: inserts of unique keys into `ops`
(no unique constraint, so a write applied twice shows as two rows) and
bank transfers (two UPDATEs of `accounts`, whose CHECK(balance >= 0)
refuses overdrafts, and a row in `transfers`, all in one raft_exec).
Every write's outcome is recorded: ok, failed (definite: an SQL error or
"not applied") or unknown ("outcome unknown", the node died under it, or
no answer in time).

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
# SQLite's codes (the primary code is the low byte of an extended one).
SQLITE_BUSY = 5
SQLITE_AUTH = 23
SQLITE_CONSTRAINT_COMMITHOOK = 531
# The names of the codes a plain write meets, shown with its reason.
CODE_NAMES = {5: "SQLITE_BUSY", 517: "SQLITE_BUSY_SNAPSHOT",
              23: "SQLITE_AUTH", 531: "SQLITE_CONSTRAINT_COMMITHOOK",
              275: "SQLITE_CONSTRAINT_CHECK", 13: "SQLITE_FULL"}
# The busy timeout of an attached writer's connection (the node's own
# has raftsql-testhost's 5 s).
BUSY_S = 5.0
POLL = ("SELECT raft_status(), (SELECT sum(balance) FROM accounts), "
        "(SELECT count(*) FROM accounts)")


def classify(err):
    """The outcome of a raft_exec that raised NodeError err."""
    msg = str(err)
    if "outcome unknown" in msg or err.code in (-1, -2):
        return "unknown"
    return "failed"  # "not applied", or an SQL error of the entry


def classify_commit(err, reason):
    """The outcome of a plain write whose committing statement (COMMIT, or
    an autocommit INSERT) raised NodeError err; reason is what
    raft_last_error() then said on that connection (None when it could
    not be asked). Failed: a vetoed COMMIT whose reason is not "outcome
    unknown" (the veto rolled it back), SQLITE_BUSY (the write lease or
    the write lock not taken: nothing written), SQLITE_AUTH (the guard
    refused the statement when it was prepared: it never ran). Unknown:
    "outcome unknown", the process died or did not answer, any other
    error (a local commit that fails after the quorum, e.g. SQLITE_FULL,
    is applied by the node's applier)."""
    if err.code == SQLITE_CONSTRAINT_COMMITHOOK and reason is not None:
        return "unknown" if "outcome unknown" in reason else "failed"
    if err.code is not None and err.code >= 0 and \
            err.code & 0xff in (SQLITE_BUSY, SQLITE_AUTH):
        return "failed"
    return "unknown"


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

    def plain(self, slot, channel, key, kind, args, steps):
        """Run a plain write on node slot's own connection (channel
        "host", under the slot's lock from the first statement to the
        last) or on its attached writer ("attached"), and record its
        outcome; False when it was never sent (the node was down).

        steps(w, conn) runs the write's statements with conn(text,
        *params, commit=False), the last one with commit=True, and may
        set w.args; it returns False for a transaction it rolled back
        itself (no write). An error before the committing statement is a
        definite failure (nothing was committed: the transaction is
        rolled back), as is a statement that never reached the process;
        one of the committing statement is classified by
        classify_commit."""
        w = Write(key, kind, slot.id, args, channel)
        with (slot.lock if channel == "host" else slot.attach_lock):
            if channel == "host":
                pipe = slot.node
                if pipe is None or pipe.desync:
                    with self.lock:
                        self.skipped += 1
                    return False
            else:
                pipe = self.cluster.attached(slot.id, BUSY_S)
            committing = [False]

            def conn(text, *params, commit=False):
                committing[0] = commit
                return pipe.sql(text, *params, timeout=self.request_timeout)

            try:
                if not steps(w, conn):
                    with self.lock:
                        self.declined += 1
                    return True
                w.outcome = "ok"
            except NodeError as e:
                w.error = str(e)
                if e.code is not None and e.code > 0:
                    w.error += " [%s]" % CODE_NAMES.get(e.code, e.code)
                if isinstance(e, Timeout):
                    with self.lock:
                        self.stuck.append(str(e))
                if not committing[0] or "(not sent)" in w.error:
                    w.outcome = "failed"
                else:
                    reason = None
                    if e.code in (SQLITE_CONSTRAINT_COMMITHOOK,
                                  SQLITE_AUTH):
                        reason = self.last_error(pipe)
                        w.error += ": raft_last_error: %s" % reason
                    w.outcome = classify_commit(e, reason)
                self.rollback(pipe)
        w.t1 = time.monotonic()
        with self.lock:
            self.writes.append(w)
        return True

    def rollback(self, pipe):
        """End whatever transaction is open on pipe (there may be none)."""
        if pipe.desync:
            return
        try:
            pipe.sql("ROLLBACK", timeout=self.request_timeout)
        except NodeError:
            pass

    def last_error(self, pipe):
        """raft_last_error() on pipe's connection, None when it fails."""
        try:
            return pipe.sql("SELECT raft_last_error()",
                            timeout=self.request_timeout)[0][0] or ""
        except NodeError:
            return None

    def plain_insert(self, slot, channel, key, cid, n):
        """An autocommit INSERT of key into ops."""
        def steps(w, conn):
            conn(INSERT, key, cid, n, slot.id, commit=True)
            return True
        return self.plain(slot, channel, key, "insert", None, steps)

    def plain_transfer(self, slot, channel, key, src, dst, want, begin):
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
                          (src, dst, None, None, None), steps)

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
                                    begin)
            elif p < 0.55:
                self.attempt(slot, key, "transfer",
                             (src, dst, amount, None, None), TRANSFER,
                             (src, dst, amount, key))
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
