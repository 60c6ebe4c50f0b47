"""The monotonic "now" checker: in raft_exec requests, "now" (the date and
time functions) is the leader's stamp of the entry (docs/functions.md,
"What raft_exec replicates"), and the stamps of successive entries never
run backwards in log order, across leader changes too.

Input: the history's "stamp" operations (the clock workload, clock.py:
each a raft_exec INSERT of strftime('%Y-%m-%d %H:%M:%f', 'now') into the
table clock, its value the writer's [client, n]), and the final read of
that table ("clock-read", its value the rows [rowid, stamp, client, n]
in rowid order, which is log order: each INSERT appends the next rowid
when its entry applies, and nothing deletes).

Anomalies:
  backwards   a row whose stamp is earlier than the row before it
  garbage     a row no stamp operation wrote
  duplicate   a write's row twice (applied twice)
  lost        an ok write's row missing
  failed      a failed write's row present
A history whose final read failed, or that has none, is an anomaly too
("unread"): nothing was checked.
"""

KINDS = ("unread", "backwards", "garbage", "duplicate", "lost", "failed")


class Anomaly:
    """kind (one of KINDS) and what shows it (text)."""

    def __init__(self, kind, text):
        self.kind = kind
        self.text = text

    def __str__(self):
        return "%s: %s" % (self.kind, self.text)


def check(ops):
    """The anomalies (Anomaly) of the stamp writes and the final clock
    read among ops (history.Op)."""
    writes = {tuple(op.value): op for op in ops if op.f == "stamp"}
    reads = [op for op in ops if op.f == "clock-read"]
    ok = [op for op in reads if op.type == "ok"]
    if not ok:
        return [Anomaly("unread", "no ok read of the clock table (%s)" % (
            "; ".join(repr(op) for op in reads) or "none made"))]
    rows = ok[-1].value
    out = []
    seen = {}
    for i, (rowid, stamp, client, n) in enumerate(rows):
        if i > 0 and stamp < rows[i - 1][1]:
            before = rows[i - 1]
            out.append(Anomaly("backwards", "row %d %s (%r) after row %d %s "
                               "(%r)" % (rowid, stamp, writes.get(
                                   (client, n)), before[0], before[1],
                                   writes.get((before[2], before[3])))))
        w = writes.get((client, n))
        if w is None:
            out.append(Anomaly("garbage", "row %d %s [%r, %r]: no write" % (
                rowid, stamp, client, n)))
            continue
        seen[(client, n)] = seen.get((client, n), 0) + 1
        if seen[(client, n)] == 2:
            out.append(Anomaly("duplicate", "row %d %s of %r" % (rowid,
                                                                stamp, w)))
        if w.type == "fail":
            out.append(Anomaly("failed", "row %d %s of %r" % (rowid, stamp,
                                                             w)))
    for key, w in sorted(writes.items()):
        if w.type == "ok" and key not in seen:
            out.append(Anomaly("lost", "%r" % w))
    return out
