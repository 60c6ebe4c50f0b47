"""The bounded-staleness checker: a local read served by a node with
max_staleness_ms returns a state that was current no more than that bound
(plus the allowance docs/reads.md, "Bounded staleness", documents for its
path) before the read began.

Input: the history's register operations (history.Op): writes ("write",
value v) and compare-and-sets ("cas", value [old, new]) of the register
workload, and the local reads ("local-read", via "local-host" or
"local-attached", their value the register's value, None for no row).

Which states were current when, from the writes alone: the value v of a
write w (unique per key) is current from when w took effect until the
next write took effect. w took effect by its completion w.t1 (an info
write: at any time after its invocation, or never). A write w' invoked
after w completed (w.t1 < w'.t0) took effect after w, so once such a w'
completed, v is current no more, for good (values never come back). So
a read r of v is too stale when such a w' completed before r.t0 - bound:
the state it returned was already gone then. A read of no row is too
stale when any write completed before r.t0 - bound. This needs no
linearization (the register checker checks that); it only takes what the
real-time order of the writes proves, so it never blames a read that
some order of the writes would allow.

Other anomalies: a value no write wrote (garbage), the value of a failed
write (definitely not applied), a value whose write was invoked after
the read completed (read from the future).
"""

# The kinds of anomaly, in the order they are reported.
KINDS = ("garbage", "failed-write-read", "future-read", "stale-read")


class Anomaly:
    """One anomalous read: kind (one of KINDS), the read (a history.Op),
    the write it read (None for garbage and for no row), the write that
    had replaced it (a stale read's), how late (seconds past the bound)
    and the bound (seconds) it was held to."""

    def __init__(self, kind, read, wrote=None, replaced=None, late=0.0,
                 bound=0.0):
        self.kind = kind
        self.read = read
        self.wrote = wrote
        self.replaced = replaced
        self.late = late
        self.bound = bound

    def __str__(self):
        r = self.read
        text = "%s: key %r: %r" % (self.kind, r.key, r)
        if self.kind == "stale-read":
            text += (" returned %s, replaced by %r, which completed %.3f s "
                     "before the read began: %.3f s past its bound of "
                     "%.3f s" % ("no row" if self.wrote is None else
                                 "the value of %r" % self.wrote,
                                 self.replaced, self.late + self.bound,
                                 self.late, self.bound))
        elif self.wrote is not None:
            text += " read %r" % self.wrote
        return text


def written(op):
    """The value write or cas op leaves in its register."""
    return op.value[1] if op.f == "cas" else op.value


def check(ops, bound_s):
    """The anomalies (Anomaly, in history order) of the local reads among
    ops (history.Op). bound_s(read) is the bound in seconds a read is
    held to (max_staleness_ms and its path's allowance)."""
    writers = {}    # (key, value) -> the write or cas that wrote it
    done = {}       # key -> its ok writes and cases, by completion time
    for op in ops:
        if op.f not in ("write", "cas"):
            continue
        writers.setdefault((op.key, written(op)), op)
        if op.type == "ok":
            done.setdefault(op.key, []).append(op)
    for ws in done.values():
        ws.sort(key=lambda w: w.t1)
    out = []
    for r in ops:
        if r.f != "local-read" or r.type != "ok":
            continue
        bound = bound_s(r)
        edge = r.t0 - bound
        w = None
        if r.value is not None:
            w = writers.get((r.key, r.value))
            if w is None:
                out.append(Anomaly("garbage", r, bound=bound))
                continue
            if w.type == "fail":
                out.append(Anomaly("failed-write-read", r, w, bound=bound))
                continue
            if w.t0 > r.t1:
                out.append(Anomaly("future-read", r, w, bound=bound))
                continue
        # The first ok write completed before the edge that surely
        # followed w (any write, for a read of no row).
        for w2 in done.get(r.key, ()):
            if w2.t1 >= edge:
                break
            if w2 is not w and (w is None or w.t1 < w2.t0):
                out.append(Anomaly("stale-read", r, w, w2, edge - w2.t1,
                                   bound))
                break
    return sorted(out, key=lambda a: (KINDS.index(a.kind), a.read.t0))
