"""The checks of a fault run, Jepsen-style, over what every node holds once
the cluster has converged and over what was recorded during the run.

Each check returns (name, problems): an empty list when it holds.
"""

import hashlib
import json
import os
import re
import sqlite3

import elle
import linearizable
import local_reads
import monotonic
import staleness
from workload import ACCOUNTS, BALANCE, TOTAL

USER_TABLES = ("SELECT name FROM sqlite_master WHERE type = 'table' "
               "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' "
               "AND name NOT LIKE 'raftsql\\_%' ESCAPE '\\' ORDER BY name")

# What a sanitizer or a crash leaves in a node's log.
CRASH = re.compile(r"(AddressSanitizer|LeakSanitizer|UndefinedBehavior"
                   r"Sanitizer|runtime error:|Assertion .* failed|"
                   r"SUMMARY: )")


# Where each kind of write leaves its key.
TABLE = {"insert": "ops", "transfer": "transfers", "bulk": "bulk"}


def quote(name):
    return '"' + name.replace('"', '""') + '"'


def table_hashes(db):
    """{table: "<rows> rows <sha256 prefix>"} of every user table of the
    database file db, rows in rowid order (read with Python's own SQLite,
    read-only, in this process)."""
    con = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
    try:
        out = {}
        for (table,) in con.execute(USER_TABLES).fetchall():
            h = hashlib.sha256()
            n = 0
            for row in con.execute("SELECT rowid, * FROM %s ORDER BY rowid"
                                   % quote(table)):
                h.update(repr(row).encode())
                n += 1
            out[table] = "%d rows %s" % (n, h.hexdigest()[:16])
        return out
    finally:
        con.close()


def snapshot(slot, db, timeout):
    """What node slot holds: key counts, accounts, transfers and a hash of
    every user table's rows in rowid order."""
    q = lambda text: slot.request(text, timeout=timeout)  # noqa: E731
    snap = {
        "ops": dict(q("SELECT k, count(*) FROM ops GROUP BY k")),
        "transfers": dict(q("SELECT k, count(*) FROM transfers "
                            "GROUP BY k")),
        "bulk": dict(q("SELECT k, count(*) FROM bulk GROUP BY k")),
        "ledger": q("SELECT k, src, dst, amount, src_was, dst_was "
                    "FROM transfers ORDER BY rowid"),
        "accounts": dict(q("SELECT id, balance FROM accounts")),
        "hashes": table_hashes(db),
        "status": json.loads(q("SELECT raft_status()")[0][0]),
    }
    return snap


def limit(problems, n=8):
    if len(problems) > n:
        return problems[:n] + ["... and %d more" % (len(problems) - n)]
    return problems


def check_writes(writes, snaps):
    """Acknowledged writes exactly once on every node, definite failures
    nowhere, unknown ones at most once, nothing never written."""
    acked, failed, unknown = [], [], []
    tried = set()
    for w in writes:
        tried.add(w.key)
        table = TABLE[w.kind]
        for node, s in snaps.items():
            n = s[table].get(w.key, 0)
            if w.outcome == "ok" and n != 1:
                acked.append("%s (via %d) on node %d: %d copies" %
                             (w.key, w.via, node, n))
            elif w.outcome == "failed" and n != 0:
                failed.append("%s (via %d, %s) on node %d: %d copies" %
                              (w.key, w.via, w.error, node, n))
            elif w.outcome == "unknown" and n > 1:
                unknown.append("%s (via %d) on node %d: %d copies" %
                               (w.key, w.via, node, n))
    stray = []
    for node, s in snaps.items():
        for table in TABLE.values():
            for k in s[table]:
                if k not in tried:
                    stray.append("%s.%s on node %d" % (table, k, node))
    return [("acknowledged writes present once", limit(acked)),
            ("failed writes absent", limit(failed)),
            ("unknown writes at most once", limit(unknown)),
            ("no write never made", limit(stray))]


def check_replicas(snaps):
    ids = sorted(snaps)
    problems = []
    base = snaps[ids[0]]
    for i in ids[1:]:
        if snaps[i]["hashes"] != base["hashes"]:
            problems.append("node %d %s vs node %d %s" % (
                ids[0], base["hashes"], i, snaps[i]["hashes"]))
        if snaps[i]["status"]["applied"] != base["status"]["applied"]:
            problems.append("applied: node %d %d, node %d %d" % (
                ids[0], base["status"]["applied"], i,
                snaps[i]["status"]["applied"]))
    return ("replicas identical", problems)


def check_leaders(wl):
    problems = ["term %d: leaders %s (reported by %s)" % (
        t, sorted(ls), {l: sorted(wl.reporters[(t, l)]) for l in ls})
        for t, ls in sorted(wl.leaders.items()) if len(ls) > 1]
    return ("at most one leader per term", problems)


def check_bank(wl, writes, snaps):
    problems = []
    for node, total, count in wl.bad_reads[:8]:
        problems.append("read on node %d during the run: total %s over %s "
                        "accounts, want %d over %d" %
                        (node, total, count, TOTAL, ACCOUNTS))
    args = {w.key: w.args for w in writes if w.kind == "transfer"}
    for node, s in snaps.items():
        acc = s["accounts"]
        if sum(acc.values()) != TOTAL or len(acc) != ACCOUNTS:
            problems.append("node %d at the end: total %d over %d accounts" %
                            (node, sum(acc.values()), len(acc)))
        want = {i: BALANCE for i in range(1, ACCOUNTS + 1)}
        for k, src, dst, amount, src_was, dst_was in s["ledger"]:
            row = (src, dst, amount, src_was, dst_was)
            if args.get(k) != row:
                problems.append("node %d: transfer %s recorded as %s, "
                                "made as %s" % (node, k, row, args.get(k)))
            want[src] -= amount
            want[dst] += amount
        if want != acc:
            problems.append("node %d: balances %s, the transfers recorded "
                            "give %s" % (node, acc, want))
        if any(v < 0 for v in acc.values()):
            problems.append("node %d: negative balance %s" % (node, acc))
    return ("bank total constant (%d reads during the run)" % wl.reads,
            limit(problems))


def check_plain_reads(writes, snaps):
    """No lost update: a plain transfer wrote balances it computed from
    the balances it read inside its transaction, and its entry must
    follow the state it read. Replaying each node's transfers in rowid
    (log) order from the initial balances, the balances before each plain
    transfer are the ones it recorded having read. It fails too when no
    plain transfer succeeded through either channel (nothing checked)."""
    problems = []
    for channel in ("host", "attached"):
        if not any(w.plain == channel and w.kind == "transfer" and
                   w.outcome == "ok" for w in writes):
            problems.append("no plain transfer through the %s channel "
                            "succeeded" % channel)
    n_plain = 0
    for node, s in sorted(snaps.items()):
        held = {i: BALANCE for i in range(1, ACCOUNTS + 1)}
        for k, src, dst, amount, src_was, dst_was in s["ledger"]:
            if src_was is not None:
                n_plain += 1
                if (held.get(src), held.get(dst)) != (src_was, dst_was):
                    problems.append(
                        "node %d: plain transfer %s read %d=%s %d=%s, the "
                        "transfers before it leave %s %s" % (
                            node, k, src, src_was, dst, dst_was,
                            held.get(src), held.get(dst)))
            held[src] = held.get(src, 0) - amount
            held[dst] = held.get(dst, 0) + amount
    return ("plain transfers read the state they follow (%d on all nodes)"
            % n_plain, limit(problems))


# Search steps per key past which the linearizability check gives up
# (undecided, a failure): far beyond what a valid history takes.
LIN_BUDGET = 50000000
# The paths each workload's ops must have taken, ok, at least once.
REGISTER_PATHS = {"write": ("exec", "plain-host", "plain-attached"),
                  "read": ("barrier-host", "barrier-attached", "query")}
APPEND_PATHS = {"txn": (("exec", "query"), "plain-host", "plain-attached")}


def coverage(ops, want):
    """Problems: a path of want ({f: (via or (via, ...), ...)}) that no ok
    op of ops took."""
    took = {(op.f, op.via) for op in ops if op.type == "ok"}
    problems = []
    for f, vias in want.items():
        for via in vias:
            alts = via if isinstance(via, tuple) else (via,)
            if not any((f, v) in took for v in alts):
                problems.append("no ok %s through %s" % (f, "/".join(alts)))
    return problems


def check_registers(ops):
    """The register ops of the history (history.Op) are linearizable, key
    by key, and every path was taken."""
    regs = [op for op in ops if op.f in ("write", "read", "cas") and
            op.key != local_reads.KEY]
    try:
        problems = [str(f) for f in linearizable.check(regs,
                                                       budget=LIN_BUDGET)]
    except RuntimeError as e:
        problems = ["undecided: %s" % e]
    keys = {op.key for op in regs}
    return ("register history linearizable (%d ops on %d keys)" % (
        len(regs), len(keys)), limit(problems + coverage(regs,
                                                         REGISTER_PATHS)))


def check_appends(ops, final):
    """The list-append transactions of the history are serializable (no
    anomaly Elle's way, final the reads taken after every other op), and
    every path was taken."""
    txns = elle.txns(ops)
    problems = [str(a) for a in elle.check(txns, final)]
    return ("list-append history serializable (%d transactions)" %
            len(txns), limit(problems + coverage(txns, APPEND_PATHS)))


LOCAL_PATHS = {"local-read": ("local-host", "local-attached")}


def check_staleness(ops, max_ms):
    """The bounded-stale local reads of the history returned states
    current no more than their bound (local_reads.bound_s, from max_ms)
    before they began, and both paths served one."""
    reads = [op for op in ops if op.f == "local-read"]
    problems = [str(a) for a in staleness.check(
        ops, lambda r: local_reads.bound_s(r, max_ms))]
    n_ok = sum(1 for op in reads if op.type == "ok")
    return ("local reads within max_staleness_ms=%d (%d of %d served)" % (
        max_ms, n_ok, len(reads)), limit(problems + coverage(reads,
                                                             LOCAL_PATHS)))


def check_clock(ops):
    """The "now" of the raft_exec stamps never runs backwards in log
    order, and every ok stamp is in the table once (monotonic.py)."""
    stamps = [op for op in ops if op.f == "stamp"]
    n_ok = sum(1 for op in stamps if op.type == "ok")
    problems = [str(a) for a in monotonic.check(ops)]
    if n_ok == 0:
        problems.append("no ok stamp: nothing checked")
    return ("raft_exec's \"now\" never runs backwards (%d stamps ok of "
            "%d)" % (n_ok, len(stamps)), limit(problems))


def log_lines(cluster):
    """(node id, line) of every incarnation's log of every node."""
    for i in cluster.ids:
        path = cluster.log_path(i)
        if os.path.exists(path):
            with open(path, errors="replace") as f:
                for line in f:
                    yield i, line


def check_logs(cluster, codes):
    """Clean exits at the end, and no sanitizer report or assertion in any
    incarnation's log."""
    problems = ["node %d exited with %s" % (i, code)
                for i, code in sorted(codes.items()) if code != 0]
    crashed = set()
    for i, line in log_lines(cluster):
        if i not in crashed and CRASH.search(line):
            crashed.add(i)
            problems.append("node %d log: %s" % (i, line.strip()))
    return ("clean exits, no sanitizer report", problems)


def log_errors(cluster):
    """The distinct ERROR lines of every node's log (digits folded), with
    their counts: not a check, shown with the figures."""
    seen = {}
    for i, line in log_lines(cluster):
        if " ERROR: " in line:
            text = re.sub(r"[0-9]+", "N", line.split(" ERROR: ", 1)[1])
            key = "node %d: %s" % (i, text.strip()[:200])
            seen[key] = seen.get(key, 0) + 1
    return seen
