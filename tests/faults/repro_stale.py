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

restart: F is killed (kill -9) for 1.5 s, then started again on its
files, while another process (an attached writer of F's file, the
reader here) keeps reading (seed 26003 of `make jepsen`, 5 nodes: a
read 1.6 s stale, 0.4 s past its bound of 1.2 s). Reads in the other
process are refused while F is down, but as F starts they are let
through for a moment before F caught up, and return the state F had
when it was killed; F's own connection refuses them. The marker named
the new, live process before its pointer file was out, and until then
other processes ignore its stale notice. Fixed: they refuse reads while
the marker's process has no pointer file out ("is starting"), and the
notice is written before the marker.

pauseother: F is stopped (SIGSTOP) for 2 s, then continued, while
another process (F's attached writer) reads (seed 335615 of `make
jepsen`: a read 2.3 s stale). While F was stopped its bound marker aged
and other processes refused reads; F's first tick after SIGCONT renewed
the marker before it judged itself stale and wrote its notice, so in
between other processes read F's old state. Here every node runs with
RAFTSQL_TEST_STALL_HOLD_MS=300 (test builds: a tick after a held loop
waits 300 ms between those two steps), which makes that window wide.
Fixed: the verdict and its notice come first, the beat after.

slowlink: the link from the leader to F is 1.2 s slow, one way only
(F's answers to the leader are quick), for 4 s (a new-user trial of
issue 26: reads up to 1.15 s old with a bound of 300 ms, and F's
raft_status() said stale false). F hears the leader's every heartbeat,
1.2 s late: its staleness counted from when an AppendEntries arrived,
not from when it was sent, so the transit time was never counted.

lateacks: the leader L is cut off alone (every link from it, and from
the other follower B to it, a black hole), while the answers of the
follower A to L come 2.5 s late, one way (a new-user trial of issue 26:
an old leader and its follower read on 1.2-1.6 s after the majority's
first commit). The writer writes through B; the reader reads on L. The
late answers told L that A heard it now, so L counted itself in contact
with a quorum for 2.5 s after the cut, while A and B elected a new
leader and committed.

Usage: /usr/bin/python3 tests/faults/repro_stale.py
pause|pauseother|fulldisk|restart|slowlink|lateacks [N] (RAFTSQL_TESTHOST, default build/san/raftsql-testhost; RAFTSQL_SO,
default build/raftsql.so, for restart's reader): N rounds (restart,
default 5).
"""

import os
import shutil
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from local_reads import (FOLLOWER_APPLY_MS, HEARTBEAT_MS, TICK_MS,  # noqa
                         WATCH_MS)
from nodes import FaultCluster, NodeError  # noqa: E402
from repro_plain import EXTRA, leader_of  # noqa: E402
from run import NODE, SO  # noqa: E402

MAX_MS = 500
BOUND_S = (MAX_MS + FOLLOWER_APPLY_MS + HEARTBEAT_MS + TICK_MS) / 1000.0
# In another process the bound marker's silence, beat and the refusal
# watch come on top (local_reads.bound_s): 1.072 s.
BOUND_OTHER_S = BOUND_S + (max(MAX_MS, 100) + max(MAX_MS // 4, 20) +
                           WATCH_MS) / 1000.0
# The lateacks case's delay on the link from A to the leader, seconds.
LATE_S = 2.5
# The slowlink case's delay on the link from the leader to F, seconds.
SLOW_S = 1.2
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


def read_for(c, f, w, seconds, since, attached=False):
    """Read on follower f (its own connection, or with attached its
    attached writer, another process) for seconds; return (reads,
    refused, worst): worst is (how stale, value, ms after since) of the
    stalest read."""
    end = time.monotonic() + seconds
    reads = refused = 0
    worst = (0.0, None, 0)
    while time.monotonic() < end:
        t0 = time.monotonic()
        try:
            if attached:
                rows = c.attached(f, 5.0).sql("SELECT v FROM r WHERE k = 1",
                                              timeout=30)
            else:
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
        time.sleep(0.002 if attached else 0.01)
    return reads, refused, worst


def read_beside(c, f, w, seconds, action):
    """Read f's file from its attached writer (another process) for
    seconds while action() runs (from its start); return read_for's
    (reads, refused, worst)."""
    since = time.monotonic()
    box = []
    reader = threading.Thread(target=lambda: box.append(read_for(
        c, f, w, seconds, since, attached=True)))
    reader.start()
    action()
    reader.join(60)
    return box[0] if box else (0, 0, (0.0, None, 0))


def restart_rounds(c, f, w, rounds):
    """The restart case: rounds of kill -9 f, 1.5 s down, start f while
    its attached writer reads; returns whether a read was too stale."""
    found = False
    for r in range(rounds):
        c.kill(f)
        time.sleep(1.5)
        reads, refused, worst = read_beside(c, f, w, 3.0,
                                            lambda: c.start(f))
        bad = worst[0] > BOUND_OTHER_S
        found = found or bad
        print("round %d: restart of follower %d: %d reads in another "
              "process in 3 s from the start, %d refused; the stalest "
              "returned %s, replaced %.3f s before the read began (%.0f ms "
              "after the start began), bound %.3f s%s" % (
                  r, f, reads, refused, worst[1], worst[0], worst[2],
                  BOUND_OTHER_S, "  <-- REPRODUCED" if bad else ""),
              flush=True)
    return found


def pause_other(c, f, w):
    """The pauseother case; returns whether a read was too stale."""
    c.pause(f)
    time.sleep(2.0)
    reads, refused, worst = read_beside(c, f, w, 1.5, lambda: c.resume(f))
    found = worst[0] > BOUND_OTHER_S
    print("after SIGCONT: %d reads of follower %d's file in another process "
          "in 1.5 s, %d refused; the stalest returned %s, replaced %.3f s "
          "before the read began (%.0f ms after SIGCONT), bound %.3f s%s" % (
              reads, f, refused, worst[1], worst[0], worst[2],
              BOUND_OTHER_S, "  <-- REPRODUCED" if found else ""),
          flush=True)
    return found


def one_fault(c, lead, f, w, case):
    """The pause, fulldisk or slowlink case on follower f, or the
    lateacks case on the leader (f is lead then); returns whether a
    read was too stale."""
    if case == "pause":
        c.pause(f)
        time.sleep(2.0)
        since = time.monotonic()
        c.resume(f)
        what = "after SIGCONT"
        seconds = 1.0
    elif case == "lateacks":
        a, b = [i for i in c.ids if i != lead]
        c.net.set([(a, lead)], "up", LATE_S)
        time.sleep(LATE_S + 0.5)  # A's answers in flight, 2.5 s of them
        since = time.monotonic()
        c.net.set([(lead, a), (lead, b), (b, lead)], "drop")
        what = "cut off, its follower's answers %.1f s late" % LATE_S
        seconds = 4.0
    elif case == "slowlink":
        since = time.monotonic()
        c.net.set([(lead, f)], "up", SLOW_S)
        what = "with the link from the leader %.1f s slow" % SLOW_S
        seconds = 4.0
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
    if case in ("slowlink", "lateacks"):
        c.net.heal()
    found = worst[0] > BOUND_S
    print("%s: %d reads on node %d in %.0f s, %d refused; the "
          "stalest returned %s, replaced %.3f s before the read began "
          "(%.0f ms %s), bound %.3f s%s" % (
              what, reads, f, seconds, refused, worst[1], worst[0],
              worst[2], what, BOUND_S,
              "  <-- REPRODUCED" if found else ""), flush=True)
    return found


def main():
    case = sys.argv[1] if len(sys.argv) > 1 else ""
    if case not in ("pause", "pauseother", "fulldisk", "restart",
                    "slowlink", "lateacks"):
        sys.exit(__doc__)
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    if case == "pauseother":
        os.environ["RAFTSQL_TEST_STALL_HOLD_MS"] = "300"
    work = tempfile.mkdtemp(prefix="raftsql-repro-")
    c = FaultCluster(NODE, work, 3, EXTRA, 1,
                     64 if case == "fulldisk" else 0,
                     os.path.splitext(os.path.abspath(SO))[0])
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
        # lateacks reads on the leader, and writes through a follower
        # that stays with the majority.
        w = Writer(c, lead if case != "lateacks" else
                   [i for i in c.ids if i != lead][1])
        if case == "lateacks":
            f = lead
        w.start()
        reads, refused, worst = read_for(c, f, w, 1.0, time.monotonic())
        print("before: %d reads on follower %d, %d refused, stalest %.3f s"
              % (reads, f, refused, worst[0]), flush=True)
        if case == "restart":
            found = restart_rounds(c, f, w, rounds)
        elif case == "pauseother":
            found = any([pause_other(c, f, w) for _ in range(rounds)])
        else:
            found = one_fault(c, lead, f, w, case)
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
