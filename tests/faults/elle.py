"""Serializability of a list-append history, as Elle infers it (Kingsbury
and Alvaro, "Elle: inferring isolation anomalies from experimental
observations", VLDB 2020).

Each key holds a list; a transaction (history op f "txn") is a list of
micro-operations ["append", k, v] and ["r", k, list]. Appended values are
unique per key, so a value names the transaction that appended it, and
each read list is a prefix of the key's version order. From that:

  version order  the longest ok read of each key; every other read must be
                 a prefix of it (else "incompatible-order": two reads saw
                 the appends in different orders) and hold no value twice
                 ("duplicate-elements": an append applied twice)
  ww             T1 appended v_i, T2 appended v_(i+1) of the same key
  wr             T1 appended the last value of a list T2 read
  rw             T1 read a list whose next version T2 appended (T1's read
                 did not see T2's append): the anti-dependency

Ok transactions are committed; info ones are committed exactly when one
of their appends was read (their reads are unknown); fail ones must show
nowhere. The graph's strongly connected components (Tarjan) hold the
cycles; in each, a shortest cycle is found and named by its edges:

  G0        ww edges only (write cycle)
  G1c       ww and wr edges (circular information flow)
  G-single  exactly one rw edge (read skew, lost update)
  G2-item   two or more rw edges (write skew)

and, with no cycle needed: G1a (aborted read: a value a failed
transaction appended was read), G1b (intermediate read: a read ends at a
value its transaction appended to that key before another one of its
own), "internal" (a transaction's read disagrees with its own earlier
reads and appends), "garbage" (a read value nobody appended),
"duplicate-append" (a value appended twice), "lost-append" (a final read
taken after every operation ended misses an ok append).
"""

import os
import sys
from collections import deque

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))), "tools"))

from scc import components  # noqa: E402

REASONS = {"ww": "appended after", "wr": "read what it appended",
           "rw": "did not see what it appended"}


class Anomaly:
    """One anomaly: kind (a name above), text, and for a cycle the steps
    [(txn, edge kind, next txn, why)]."""

    def __init__(self, kind, text, cycle=None):
        self.kind = kind
        self.text = text
        self.cycle = cycle or []

    def __str__(self):
        if not self.cycle:
            return "%s: %s" % (self.kind, self.text)
        steps = ["T%s -%s-> T%s (%s)" % (a.id, k, b.id, why)
                 for a, k, b, why in self.cycle]
        return "%s: %s: %s; the transactions: %s" % (
            self.kind, self.text, ", ".join(steps),
            "; ".join(repr(a) for a, _, _, _ in self.cycle))


def txns(ops):
    """The list-append transactions among ops (history.Op)."""
    return [op for op in ops if op.f == "txn"]


def _reads(op):
    for mop in op.value:
        if mop[0] == "r" and mop[2] is not None:
            yield mop[1], mop[2]


def _appends(op):
    for mop in op.value:
        if mop[0] == "append":
            yield mop[1], mop[2]


def _internal(op, out):
    """Check op's reads against its own earlier reads and appends."""
    known = {}      # key -> (prefix read or None, own appends since)
    for mop in op.value:
        f, k, v = mop
        if f == "append":
            seen, mine = known.get(k, (None, []))
            known[k] = (seen, mine + [v])
        elif v is not None:
            seen, mine = known.get(k, (None, []))
            want = (seen + mine) if seen is not None else None
            if want is not None and v != want:
                out.append(Anomaly("internal", "%r read %r of key %r, its "
                                   "own earlier ops give %r" % (op, v, k,
                                                                want)))
            elif want is None and mine and v[-len(mine):] != mine:
                out.append(Anomaly("internal", "%r read %r of key %r, "
                                   "which does not end with its own "
                                   "appends %r" % (op, v, k, mine)))
            known[k] = (list(v), [])


def check(ops, final_reads=()):
    """The anomalies of the list-append transactions among ops (empty:
    serializable). final_reads: ops whose reads were taken after every
    other operation ended (each must hold every ok append of its keys)."""
    out = []
    all_txns = txns(ops)
    writer = {}         # (k, v) -> appending txn
    for op in all_txns:
        for k, v in _appends(op):
            if (k, v) in writer:
                out.append(Anomaly("duplicate-append", "value %r of key %r "
                                   "appended by %r and %r" % (
                                       v, k, writer[(k, v)], op)))
            writer[(k, v)] = op
    ok = [op for op in all_txns if op.type == "ok"]
    for op in ok:
        _internal(op, out)
    # Version orders, from the longest read of each key.
    longest = {}
    for op in ok:
        for k, v in _reads(op):
            if len(v) != len(set(v)):
                out.append(Anomaly("duplicate-elements", "%r read %r of "
                                   "key %r: a value twice" % (op, v, k)))
            if k not in longest or len(v) > len(longest[k][1]):
                longest[k] = (op, v)
    for op in ok:
        for k, v in _reads(op):
            lop, lv = longest[k]
            if lv[:len(v)] != v:
                out.append(Anomaly("incompatible-order", "key %r: %r read "
                                   "%r, %r read %r" % (k, op, v, lop, lv)))
    # Committed: ok, or info with an append that was read.
    read_values = {(k, x) for k, (_, lv) in longest.items() for x in lv}
    for (k, v), op in writer.items():
        if (k, v) not in read_values:
            continue
        if op.type == "fail":
            out.append(Anomaly("G1a", "%r read value %r of key %r, "
                               "appended by the failed %r" % (
                                   longest[k][0], v, k, op)))
    for op in ok:
        for k, v in _reads(op):
            for x in v:
                if (k, x) not in writer:
                    out.append(Anomaly("garbage", "%r read %r of key %r: "
                                       "nobody appended %r" % (op, v, k, x)))
            if not v:
                continue
            w = writer.get((k, v[-1]))
            if w is None or w is op:
                continue
            mine = [x for kk, x in _appends(w) if kk == k]
            if v[-1] in mine and v[-1] != mine[-1]:
                out.append(Anomaly("G1b", "%r read %r of key %r, ending at "
                                   "an intermediate append of %r" % (
                                       op, v, k, w)))
    for fin in final_reads:
        for k, v in _reads(fin):
            for (kk, x), w in writer.items():
                if kk == k and w.type == "ok" and x not in v:
                    out.append(Anomaly("lost-append", "the final read of "
                                       "key %r (%r) misses %r's append of "
                                       "%r" % (k, v, w, x)))
    committed = [op for op in all_txns if op.type == "ok" or (
        op.type == "info" and any((k, v) in read_values
                                  for k, v in _appends(op)))]
    graph = _graph(committed, ok, longest, writer)
    out += cycles(graph)
    return out


def _graph(committed, ok, longest, writer):
    """{txn: {next txn: [(kind, why)]}} of the dependencies."""
    ids = {id(op) for op in committed}
    graph = {op: {} for op in committed}

    def edge(a, b, kind, why):
        if a is b or id(a) not in ids or id(b) not in ids:
            return
        graph[a].setdefault(b, []).append((kind, why))

    for k, (_, order) in longest.items():
        for i in range(len(order) - 1):
            a = writer.get((k, order[i]))
            b = writer.get((k, order[i + 1]))
            if a is not None and b is not None:
                edge(a, b, "ww", "key %r: %r then %r" % (
                    k, order[i], order[i + 1]))
    for op in ok:
        for k, v in _reads(op):
            if v:
                w = writer.get((k, v[-1]))
                if w is not None:
                    edge(w, op, "wr", "key %r: read %r" % (k, v))
            order = longest[k][1]
            if len(v) < len(order):
                w = writer.get((k, order[len(v)]))
                # A read between two appends of one transaction is G1b,
                # reported as such: no rw edge back to that transaction.
                if w is not None and (not v or
                                      writer.get((k, v[-1])) is not w):
                    edge(op, w, "rw", "key %r: read %r, next %r" % (
                        k, v, order[len(v)]))
    return graph


def scc(graph):
    """The strongly connected components of graph ({node: {next: ...}},
    nodes history.Ops) of two or more nodes (tools/scc.py)."""
    return [c for c in components(graph, key=_order) if len(c) > 1]


def _order(node):
    return getattr(node, "id", node)


def _path(graph, nodes, src, dst, kinds):
    """A shortest path src -> dst inside nodes using edges of kinds, as
    [(a, kind, b, why)], or None (breadth-first)."""
    prev = {src: None}
    queue = deque([src])
    while queue:
        a = queue.popleft()
        for b, labels in graph[a].items():
            if b not in nodes or b in prev:
                continue
            lab = [(k, w) for k, w in labels if k in kinds]
            if not lab:
                continue
            prev[b] = (a, lab[0])
            if b is dst:
                path = []
                while prev[b] is not None:
                    a, (k, w) = prev[b]
                    path.append((a, k, b, w))
                    b = a
                return path[::-1]
            queue.append(b)
    return None


# Edges tried as a cycle's first one, per component and class: the
# shortest cycle through the first edges found is short enough to read.
TRIES = 200


def _cycle(graph, nodes, kinds):
    """A short cycle inside nodes using only edges of kinds, or None."""
    best = None
    tries = 0
    for a in sorted(nodes, key=_order):
        for b, labels in graph[a].items():
            lab = [(k, w) for k, w in labels if k in kinds]
            if b not in nodes or not lab:
                continue
            tries += 1
            back = _path(graph, nodes, b, a, kinds) if b is not a else []
            if back is not None:
                c = [(a, lab[0][0], b, lab[0][1])] + back
                if best is None or len(c) < len(best):
                    best = c
        if best is not None and (len(best) == 2 or tries > TRIES):
            break
    return best


def _single(graph, nodes):
    """A cycle inside nodes with exactly one rw edge, or None."""
    for a in sorted(nodes, key=_order):
        for b, labels in graph[a].items():
            rw = [w for k, w in labels if k == "rw"]
            if b not in nodes or not rw:
                continue
            back = _path(graph, nodes, b, a, ("ww", "wr"))
            if back is not None:
                return [(a, "rw", b, rw[0])] + back
    return None


def cycles(graph):
    """The cycle anomalies of graph, one per strongly connected component,
    named by the weakest class of cycle it holds."""
    out = []
    for comp in scc(graph):
        nodes = set(comp)
        c = _cycle(graph, nodes, ("ww",))
        if c is not None:
            out.append(Anomaly("G0", "a cycle of appends", c))
            continue
        c = _cycle(graph, nodes, ("ww", "wr"))
        if c is not None:
            out.append(Anomaly("G1c", "a cycle of appends and reads", c))
            continue
        c = _single(graph, nodes)
        if c is not None:
            out.append(Anomaly("G-single", "a cycle with one "
                               "anti-dependency", c))
            continue
        c = _cycle(graph, nodes, ("ww", "wr", "rw"))
        out.append(Anomaly("G2-item", "a cycle with anti-dependencies", c))
    return out
