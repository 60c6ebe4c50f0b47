"""How long the cluster took to take writes again after each fault.

A fault's recovery is the time from its heal (the nemesis set the links
up again, resumed or restarted the nodes, freed the disk, made the
change) to the first completion ok of a write invoked at or after the
heal, through any node and any path: the time a client that started
writing as the fault ended waited for its first acknowledgement. Reads
do not count (a local read needs no leader), nor do the final reads.
"""

import bisect
import math

# The operations of the history (history.py) that write through the log.
WRITES = frozenset(("write", "cas", "txn", "insert", "transfer", "stamp"))


def times(ops, heals):
    """The recovery of each fault: ops are history.Op (any order), heals
    [(kind, heal time)] in monotonic seconds of the same clock. Returns
    [(kind, seconds)] in the order of heals; seconds is math.inf when no
    write invoked after that heal completed ok."""
    acks = sorted((op.t0, op.t1) for op in ops
                  if op.type == "ok" and op.f in WRITES and
                  op.via != "final")
    starts = [t0 for t0, _ in acks]
    # first_done[k]: the earliest completion among acks[k:].
    first_done = [math.inf] * (len(acks) + 1)
    for k in range(len(acks) - 1, -1, -1):
        first_done[k] = min(acks[k][1], first_done[k + 1])
    return [(kind, first_done[bisect.bisect_left(starts, healed)] - healed)
            for kind, healed in heals]

