"""A history of client operations, Jepsen-style: every operation is an
invocation and, later, a completion, each an event.

An event is a dict, one JSON line in a history file:
  index    its place in the history (0, 1, ...)
  id       the operation's number, shared by its invocation and completion
  type     "invoke", or the completion's: "ok" (applied, and its result
           is the value), "fail" (definitely not applied: no effect
           anywhere) or "info" (outcome unknown: it may take effect at any
           time after its invocation, or never)
  process  the client (thread) that ran it: one operation at a time
  node     the node id it went through
  f        what it does: "write", "read", "cas" (a register), "txn" (a
           list-append transaction), "insert", "transfer" (the bank's)
  key      the register's key (register operations only)
  value    the invocation's argument, the completion's result: a write's
           value, a read's value (None in the invocation), a cas's
           [old, new]; a txn's micro-operations, ["append", k, v] and
           ["r", k, list or None], their reads filled in by an ok one
  via      the path it took: "exec", "query", "barrier", "plain-host",
           "plain-attached", "final"
  wall     time.time() at the event, seconds
  mono     time.monotonic() at the event, seconds: the order checkers use
  error    a completion's error text (fail and info)

An operation whose completion never came (its thread stopped, the run
ended) counts as info. The outcome of an error is decided once, here
(exec_outcome, commit_outcome), from docs/errors.md, "What happens on
errors".
"""

import json
import math
import threading
import time

# raftsql's codes that say "not applied" (docs/errors.md, "What happens on
# errors"):
# RAFTSQL_NOT_APPLIED, _BUSY, _STALE, _DIVERGED, _FULL, _TOOBIG,
# _INTERRUPTED, _INVALID, _NO_NODE, _REMOVED, _REFUSED.
NOT_APPLIED_CODES = frozenset((25861, 26117, 26373, 26629, 26893, 27154,
                               27657, 28161, 28430, 28673, 28951))
# RAFTSQL_UNKNOWN and RAFTSQL_INTERRUPTED_UNKNOWN: outcome unknown.
UNKNOWN_CODES = frozenset((27393, 27913))
# SQLite's own extended codes stop below this (raftsql's n starts at 101).
SQLITE_OWN_LIMIT = 101 << 8
SQLITE_BUSY = 5
SQLITE_AUTH = 23
SQLITE_CONSTRAINT_COMMITHOOK = 531


def exec_outcome(code, message):
    """The outcome, "fail" or "info", of a raft_exec / raft_query /
    raft_barrier call that answered the error message with code (SQLite's
    extended code; -1 when the process is gone, -2 when it did not answer
    in time). Info: "outcome unknown" (its codes or its words), a process
    that died or did not answer, a code this table does not know. Fail: a
    "not applied" code, a request never sent, and SQLite's own codes (a SQL
    error of the entry, rolled back on every node)."""
    if "outcome unknown" in message or code in UNKNOWN_CODES:
        return "info"
    if code == -1 and "(not sent)" in message:
        return "fail"
    if code in NOT_APPLIED_CODES:
        return "fail"
    if code is not None and 0 < code < SQLITE_OWN_LIMIT:
        return "fail"
    return "info"


def commit_outcome(code, message, reason):
    """The outcome, "fail" or "info", of a plain write whose committing
    statement (COMMIT, or an autocommit write) answered message with code;
    reason is what raft_last_error() then said on that connection (None
    when it could not be asked). Fail: a vetoed COMMIT whose reason is not
    "outcome unknown" (the veto rolled it back), SQLITE_BUSY (the write
    lease or lock not taken: nothing written), SQLITE_AUTH (the guard
    refused the statement before it ran), a statement never sent. Info:
    "outcome unknown", the process died or did not answer, any other
    error (a local commit that fails after the quorum, SQLITE_FULL, is
    applied by the node's applier)."""
    if code == -1 and "(not sent)" in message:
        return "fail"
    if code == SQLITE_CONSTRAINT_COMMITHOOK and reason is not None:
        return "info" if "outcome unknown" in reason else "fail"
    if code is not None and code >= 0 and \
            code & 0xff in (SQLITE_BUSY, SQLITE_AUTH):
        return "fail"
    return "info"


def invocation(index, op, process, node, f, value, via, key, wall, mono):
    """The invocation event (a dict, see the module's docstring)."""
    ev = {"index": index, "id": op, "type": "invoke", "process": process,
          "node": node, "f": f, "value": value, "via": via, "wall": wall,
          "mono": mono}
    if key is not None:
        ev["key"] = key
    return ev


class History:
    """A thread-safe recorder: invoke() when an operation starts,
    complete() when it ends; events() gives them in order."""

    def __init__(self):
        self._lock = threading.Lock()
        self._events = []
        self._open = {}     # op id -> its invocation, until completed
        self._next_id = 0

    def invoke(self, process, node, f, value, via, key=None):
        """Record the invocation of an operation; return its id."""
        with self._lock:
            op = self._next_id
            self._next_id += 1
            ev = invocation(len(self._events), op, process, node, f, value,
                            via, key, time.time(), time.monotonic())
            self._events.append(ev)
            self._open[op] = ev
            return op

    def complete(self, op, type_, value=None, error=None):
        """Record the completion of operation op: type_ is "ok", "fail" or
        "info"; value the result (an ok read's value, a txn with its reads
        filled in); error the error text. Raises ValueError for an unknown
        or already completed op, or another type_."""
        if type_ not in ("ok", "fail", "info"):
            raise ValueError("completion type %r: want ok, fail or info" %
                             (type_,))
        with self._lock:
            inv = self._open.pop(op, None)
            if inv is None:
                raise ValueError("operation %r is not open" % (op,))
            ev = dict(inv, index=len(self._events), type=type_,
                      value=value, wall=time.time(), mono=time.monotonic())
            if error is not None:
                ev["error"] = error
            self._events.append(ev)

    def events(self):
        """A copy of the events so far, in order."""
        with self._lock:
            return list(self._events)

    def write(self, path):
        """Write the events as JSON lines to path; return how many."""
        evs = self.events()
        with open(path, "w") as f:
            for ev in evs:
                f.write(json.dumps(ev, sort_keys=True) + "\n")
        return len(evs)


def load(path):
    """The events of the history file at path. Raises ValueError naming
    the line that is not a JSON object."""
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                ev = json.loads(line)
            except ValueError as e:
                raise ValueError("%s:%d: not JSON: %s" % (path, n, e))
            if not isinstance(ev, dict):
                raise ValueError("%s:%d: not a JSON object" % (path, n))
            out.append(ev)
    return out


class Op:
    """One operation: its invocation and completion paired. type is the
    completion's ("info" when none came); t0 and t1 are monotonic times,
    t1 infinite for an info operation (it may take effect any time after
    t0); value is the completion's value for ok, else the invocation's."""

    __slots__ = ("id", "process", "node", "f", "key", "via", "type",
                 "value", "t0", "t1", "error", "invoke")

    def __init__(self, inv, comp):
        self.id = inv["id"]
        self.process = inv.get("process")
        self.node = inv.get("node")
        self.f = inv["f"]
        self.key = inv.get("key")
        self.via = inv.get("via")
        self.invoke = inv
        self.t0 = inv["mono"]
        if comp is None:
            self.type, self.t1, self.error = "info", math.inf, "no completion"
            self.value = inv.get("value")
        else:
            self.type = comp["type"]
            self.error = comp.get("error")
            self.t1 = comp["mono"] if self.type != "info" else math.inf
            self.value = comp.get("value") if self.type == "ok" else \
                inv.get("value")

    def __repr__(self):
        return "op %s (process %s, node %s, %s) %s key=%r %r%s" % (
            self.id, self.process, self.node, self.via, self.type,
            self.key, self.value,
            " [%s]" % self.error if self.error else "")


def pair(events):
    """The Ops of events (in invocation order). Raises ValueError for a
    completion without its invocation, a second invocation of an id, or a
    process that invokes while its previous operation is still open."""
    invs, comps, order = {}, {}, []
    busy = {}
    for ev in events:
        op, kind = ev["id"], ev["type"]
        if kind == "invoke":
            if op in invs:
                raise ValueError("operation %r invoked twice" % (op,))
            p = ev.get("process")
            if busy.get(p) is not None:
                raise ValueError("process %r invokes op %r while op %r is "
                                 "open" % (p, op, busy[p]))
            busy[p] = op
            invs[op] = ev
            order.append(op)
        else:
            if op not in invs or op in comps:
                raise ValueError("completion of op %r without an open "
                                 "invocation" % (op,))
            comps[op] = ev
            busy[invs[op].get("process")] = None
    return [Op(invs[op], comps.get(op)) for op in order]


def counts(ops):
    """{"<f> <type>": count} of ops."""
    out = {}
    for op in ops:
        k = "%s %s" % (op.f, op.type)
        out[k] = out.get(k, 0) + 1
    return out


class Script:
    """A hand-written history, for tests: each call adds one event at the
    next tick (its mono and wall times are its index)."""

    def __init__(self):
        self.events = []
        self._open = {}     # process -> its open op id

    def invoke(self, process, f, value=None, key=None, node=1, via="exec"):
        """Process starts an operation; return its id."""
        op = len(self.events)
        ev = invocation(op, op, process, node, f, value, via, key,
                        float(op), float(op))
        self.events.append(ev)
        self._open[process] = ev
        return op

    def complete(self, process, type_, value=None, error=None):
        """Process's open operation ends as type_ with value (None: the
        invocation's)."""
        inv = self._open.pop(process)
        n = len(self.events)
        ev = dict(inv, index=n, type=type_, wall=float(n), mono=float(n),
                  value=inv["value"] if value is None else value)
        if error is not None:
            ev["error"] = error
        self.events.append(ev)

    def op(self, process, f, value=None, type_="ok", result=None, key=None):
        """An operation invoked and completed at once (no overlap)."""
        self.invoke(process, f, value, key)
        self.complete(process, type_, result)

    def ops(self):
        return pair(self.events)
