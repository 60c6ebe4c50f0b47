"""Bounded-stale local reads, for the staleness checker (staleness.py),
on the one node of the episode started with max_staleness_ms
(docs/reads.md, "Bounded staleness"): one writer keeps a register (the
row of table fresh, history key "fresh") changing, with raft_exec
upserts of unique values through the other nodes (so that it does not
wait on the node whose reads are checked: a write through a cut-off node
would wait exec_timeout_ms, and nothing would change meanwhile), and
readers read it with a plain local SELECT, no barrier, through the
node's own connection ("local-host") or its attached writer, another
process ("local-attached"). A read the node refuses as stale
(SQLITE_AUTH) fails: it returned no state.

The bound a read is held to (bound_s) is max_staleness_ms plus what
docs/reads.md allows beyond it:
  - every read: a follower in contact lags by up to follower_apply_ms
    (20) plus a heartbeat (heartbeat_ms, 30 in the fault runs), and the
    node judges its staleness at its loop's ticks (10 ms);
  - a read in another process: the node may freeze (SIGSTOP) while
    fresh; the other processes take it as serving until its bound
    marker's mtime is EXT_BOUND_SILENCE_MS (the bound, at least 100 ms)
    old, beaten every EXT_BOUND_BEAT_MS (a quarter of the bound, at least
    20 ms), and their refusal watch acts within 10 ms, after a 2 ms
    memo (ext/runtime/staleness.h).
"""

from clients import Clients
from workload import BUSY_S

SCHEMA = "CREATE TABLE fresh(k INTEGER PRIMARY KEY, v INTEGER NOT NULL); "
UPSERT = ("INSERT INTO fresh(k, v) VALUES(1, ?1) "
          "ON CONFLICT(k) DO UPDATE SET v = excluded.v")
GET = "SELECT v FROM fresh WHERE k = 1"
KEY = "fresh"

MAX_STALENESS_MS = 500
FOLLOWER_APPLY_MS = 20   # the default (docs/configuration.md)
HEARTBEAT_MS = 30        # the fault runs' (run.py node_config)
TICK_MS = 10
WATCH_MS = 10 + 2


def bound_s(read, max_ms=MAX_STALENESS_MS):
    """The bound in seconds that local read (a history.Op) is held to."""
    ms = max_ms + FOLLOWER_APPLY_MS + HEARTBEAT_MS + TICK_MS
    if read.via == "local-attached":
        ms += max(max_ms, 100) + max(max_ms // 4, 20) + WATCH_MS
    return ms / 1000.0


class LocalReads(Clients):
    """The writer (process "local-1") and the readers (the others) of
    the fresh register; node_id, the node whose reads are checked, is
    set before start."""

    name = "local"
    node_id = None

    def __init__(self, *args):
        super().__init__(*args)
        self.n = 0

    def operation(self, process, slot, rng):
        if process == "local-1":
            self.write(process, rng)
            return
        slot = self.cluster.slots[self.node_id]
        channel = rng.choice(("host", "attached"))
        op = self.history.invoke(process, slot.id, "local-read", None,
                                 "local-" + channel, KEY)

        def steps(conn):
            rows = conn(GET)
            return rows[0][0] if rows else None
        out = self.plain(op, slot, channel, steps, BUSY_S)
        # Refused as stale, or the node is down: do not spin.
        self.stopping.wait(0.02 if out.type == "ok" else 0.05)

    def write(self, process, rng):
        """One upsert of the next value through a node other than
        node_id."""
        slot = self.cluster.slots[rng.choice(
            [i for i in self.cluster.ids if i != self.node_id])]
        self.n += 1
        value = self.n
        op = self.history.invoke(process, slot.id, "write", value, "exec",
                                 KEY)
        self.request(op, slot, "SELECT raft_exec(?1, ?2)", UPSERT, value,
                     result=lambda rows: value)
        self.stopping.wait(rng.uniform(0.01, 0.05))
