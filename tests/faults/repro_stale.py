"""Reproductions of two findings of the bounded-staleness checker of
`make faults` (not part of make test; each exits 1 when it reproduces its
finding). Every node runs with max_staleness_ms=500; a writer upserts
increasing values into a one-row table through the leader, and a reader
reads it locally on a follower F, on F's own connection. A read is too
stale when the write that replaced the value it returned had completed
more than 560 ms (the bound, follower_apply_ms, a heartbeat and a tick:
tests/faults/local_reads.py) before the read began.

pause: F is stopped (SIGSTOP) for 2 s, then continued (seed 312641 of
`make faults-short`). For a few hundred ms after SIGCONT, F serves the
state it had when it was stopped, in its own process and in others: its
staleness counts from the last contact with the leader, and the first
AppendEntries it reads after SIGCONT makes it fresh while it has seconds
of committed entries still to apply.

fulldisk: F's log disk is filled (seed 312875 of `make faults-short`).
F keeps hearing the leader, so it stays fresh, but it stores and applies
nothing: its reads return the state of the moment the disk filled for as
long as it stays full. Needs root (a tmpfs per node).

Usage: /usr/bin/python3 tests/faults/repro_stale.py pause|fulldisk
(RAFTSQL_TESTHOST, default build/san/raftsql-testhost).
"""

import os
import shutil
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from local_reads import FOLLOWER_APPLY_MS, HEARTBEAT_MS, TICK_MS  # noqa
from nodes import FaultCluster, NodeError  # noqa: E402
from repro_plain import EXTRA, leader_of  # noqa: E402
from run import NODE  # noqa: E402

MAX_MS = 500
BOUND_S = (MAX_MS + FOLLOWER_APPLY_MS + HEARTBEAT_MS + TICK_MS) / 1000.0
UPSERT = ("INSERT INTO r(k, v) VALUES(1, ?1) "
          "ON CONFLICT(k) DO UPDATE SET v = excluded.v")


class Writer(threading.Thread):
    """Upserts 1, 2, ... through node lead, noting when each completed."""

    def __init__(self, c, lead):
        super().__init__(daemon=True)
        self.c, self.lead = c, lead
        self.done = {}      # value -> monotonic time its write completed
        self.stopping = threading.Event()

    def run(self):
        n = 0
        while not self.stopping.is_set():
            n += 1
            try:
                self.c.slots[self.lead].request(
                    "SELECT raft_exec(?, ?)", UPSERT, n, timeout=30)
                self.done[n] = time.monotonic()
            except NodeError:
                pass
            time.sleep(0.01)


def read_for(c, f, w, seconds, since):
    """Read on follower f for seconds; return (reads, refused, worst):
    worst is (how stale, value, ms after since) of the stalest read."""
    end = time.monotonic() + seconds
    reads = refused = 0
    worst = (0.0, None, 0)
    while time.monotonic() < end:
        t0 = time.monotonic()
        try:
            rows = c.slots[f].request("SELECT v FROM r WHERE k = 1",
                                      timeout=30)
        except NodeError:
            refused += 1
            time.sleep(0.01)
            continue
        reads += 1
        v = rows[0][0] if rows else 0
        replaced = w.done.get(v + 1)
        if replaced is not None and t0 - replaced > worst[0]:
            worst = (t0 - replaced, v, (t0 - since) * 1000)
        time.sleep(0.01)
    return reads, refused, worst


def main():
    case = sys.argv[1] if len(sys.argv) > 1 else ""
    if case not in ("pause", "fulldisk"):
        sys.exit(__doc__)
    work = tempfile.mkdtemp(prefix="raftsql-repro-")
    c = FaultCluster(NODE, work, 3, EXTRA, 1,
                     64 if case == "fulldisk" else 0)
    for i in c.ids:
        c.node_extra[i] = "max_staleness_ms=%d" % MAX_MS
    found = False
    w = None
    try:
        for i in c.ids:
            c.start(i)
        lead = leader_of(c)
        c.slots[lead].request("SELECT raft_exec('CREATE TABLE r(k INTEGER "
                              "PRIMARY KEY, v INTEGER)')", timeout=20)
        f = [i for i in c.ids if i != lead][0]
        w = Writer(c, lead)
        w.start()
        reads, refused, worst = read_for(c, f, w, 1.0, time.monotonic())
        print("before: %d reads on follower %d, %d refused, stalest %.3f s"
              % (reads, f, refused, worst[0]), flush=True)
        if case == "pause":
            c.pause(f)
            time.sleep(2.0)
            since = time.monotonic()
            c.resume(f)
            what = "after SIGCONT"
            seconds = 1.0
        else:
            c.disks[f].fill()
            for n in range(6):  # entries the full node cannot store
                c.slots[lead].request(
                    "SELECT raft_exec('CREATE TABLE IF NOT EXISTS b(p); "
                    "INSERT INTO b VALUES(?)', ?)",
                    {"blob": os.urandom(65536).hex()}, timeout=30)
            since = time.monotonic()
            what = "with its log disk full"
            seconds = 3.0
        reads, refused, worst = read_for(c, f, w, seconds, since)
        found = worst[0] > BOUND_S
        print("%s: %d reads on follower %d in %.0f s, %d refused; the "
              "stalest returned %s, replaced %.3f s before the read began "
              "(%.0f ms %s), bound %.3f s%s" % (
                  what, reads, f, seconds, refused, worst[1], worst[0],
                  worst[2], what, BOUND_S,
                  "  <-- REPRODUCED" if found else ""), flush=True)
    finally:
        if w is not None:
            w.stopping.set()
            w.join(40)
        for d in c.disks.values():
            d.free()
        c.close()
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
