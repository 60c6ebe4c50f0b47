"""Linearizability of a key-value register history: the Wing-Gong search
with Lowe's memoisation, split by key (P-compositionality), as Knossos
and Porcupine check.

Each key is a register, initially None (no row). Operations:
  write  value v                     the register becomes v
  read   value v (the completion's)  the register holds v
  cas    value [old, new]            if it holds old it becomes new; an
                                     ok cas applied, a fail one did not
Fail operations took no effect and are left out. An info write or cas may
take effect at any time after its invocation, or never: its return is at
infinity. An info read tells nothing and is left out; so is an info
write or cas whose new value no ok read returned and no cas expected
(taking effect could only make a read's value harder to explain, so
leaving it out changes no verdict).

The search (Lowe, "Testing for linearizability", 2017, section 4; the
shape of Porcupine's checkSingle): the calls and returns of one key in
time order in a doubly linked list; repeatedly linearize the first call
whose operation is legal in the current state and whose (linearized set,
state) was not seen before, lifting it and its return out of the list;
meeting a return means its operation was not linearized in time, so
backtrack. The memo makes each (set, state) visited once.
"""

import math

INF = math.inf


class Entry:
    """A call or return in the linked list."""

    __slots__ = ("op", "n", "call", "match", "prev", "next", "t")

    def __init__(self, op, n, call, t):
        self.op = op
        self.n = n          # the operation's bit in the linearized set
        self.call = call
        self.t = t
        self.match = None   # a call's return
        self.prev = None
        self.next = None


def step(state, op):
    """(legal, state after) of op applied to the register state."""
    if op.f == "write":
        return True, op.value
    if op.f == "read":
        return op.value == state, state
    if op.f == "cas":
        old, new = op.value
        if op.type == "fail":
            return False, state
        return state == old, new
    raise ValueError("op %s: unknown register operation %r" % (op.id, op.f))


def relevant(ops):
    """The ops the search needs (see the module's docstring)."""
    read_values = {(op.key, _hashable(op.value)) for op in ops
                   if op.f == "read" and op.type == "ok"}
    read_values |= {(op.key, _hashable(op.value[0])) for op in ops
                    if op.f == "cas" and op.type != "fail"}
    out = []
    for op in ops:
        if op.type == "fail":
            continue
        if op.type == "info":
            if op.f == "read":
                continue
            new = op.value if op.f == "write" else op.value[1]
            if (op.key, _hashable(new)) not in read_values:
                continue
        out.append(op)
    return out


def _hashable(v):
    return tuple(v) if isinstance(v, list) else v


def _entries(ops):
    """The head of the linked list of ops' calls and returns, in time
    order (a call before a return at the same time: such ops overlap)."""
    events = []
    for n, op in enumerate(ops):
        call = Entry(op, n, True, op.t0)
        ret = Entry(op, n, False, op.t1)
        call.match = ret
        events.append((op.t0, 0, n, call))
        events.append((op.t1, 1, n, ret))
    events.sort(key=lambda e: e[:3])
    head = Entry(None, -1, False, -INF)
    prev = head
    for _, _, _, e in events:
        prev.next = e
        e.prev = prev
        prev = e
    return head


def _lift(e):
    e.prev.next = e.next
    if e.next is not None:
        e.next.prev = e.prev
    m = e.match
    m.prev.next = m.next
    if m.next is not None:
        m.next.prev = m.prev


def _unlift(e):
    m = e.match
    m.prev.next = m
    if m.next is not None:
        m.next.prev = m
    e.prev.next = e
    if e.next is not None:
        e.next.prev = e


class Failure:
    """Why one key's history is not linearizable: at the deepest point
    the search reached (linearized operations, the register's value then),
    op had to be linearized and no order allowed it."""

    def __init__(self, key, op, state, linearized, concurrent):
        self.key = key
        self.op = op
        self.state = state
        self.linearized = linearized    # the ops in the order found
        self.concurrent = concurrent    # ops open around op's return

    def __str__(self):
        last = self.linearized[-3:]
        return ("key %r: %r cannot be linearized: after %d ops (last: %s) "
                "the register holds %r; ops open then: %s" % (
                    self.key, self.op, len(self.linearized),
                    "; ".join(map(repr, last)) or "none", self.state,
                    "; ".join(map(repr, self.concurrent[:6])) or "none"))


def check_key(key, ops, init=None, budget=None):
    """Search one key's ops; return None when linearizable, else a
    Failure. budget bounds the search steps (None: no bound); past it
    raises RuntimeError naming the key."""
    ops = relevant(ops)
    head = _entries(ops)
    state = init
    linearized = 0
    seen = set()
    calls = []          # (entry, state before) linearized, in order
    entry = head.next
    deepest = (-1, None, None, None)
    steps = 0
    while head.next is not None:
        steps += 1
        if budget is not None and steps > budget:
            raise RuntimeError("key %r: search over %d steps" % (key, budget))
        if entry.call:
            legal, after = step(state, entry.op)
            if legal:
                lin = linearized | (1 << entry.n)
                memo = (lin, _hashable(after))
                if memo not in seen:
                    seen.add(memo)
                    calls.append((entry, state))
                    state, linearized = after, lin
                    _lift(entry)
                    entry = head.next
                    continue
            entry = entry.next
        else:
            if len(calls) > deepest[0]:
                deepest = (len(calls), entry.op, state,
                           [c.op for c, _ in calls])
            if not calls:
                break
            entry, state = calls.pop()
            linearized &= ~(1 << entry.n)
            _unlift(entry)
            entry = entry.next
    if head.next is None:
        return None
    _, op, st, order = deepest
    t = op.t1
    concurrent = [o for o in ops if o is not op and o.t0 <= t <= o.t1]
    return Failure(key, op, st, order, concurrent)


def by_key(ops, fs=("write", "read", "cas")):
    """{key: [ops]} of the register operations among ops."""
    out = {}
    for op in ops:
        if op.f in fs:
            out.setdefault(op.key, []).append(op)
    return out


def check(ops, init=None, budget=None):
    """Check the register ops among ops (history.Op), key by key; return
    the Failures (empty: linearizable)."""
    failures = []
    for key, kops in sorted(by_key(ops).items(), key=lambda kv: repr(kv[0])):
        f = check_key(key, kops, init, budget)
        if f is not None:
            failures.append(f)
    return failures
