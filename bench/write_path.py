"""Where one raft_exec's time goes at one client: bench/write_path.sh's
events (perf script -F pid,tid,time,event of its uprobes) to a table.

Usage: write_path.py EVENTS_FILE

Each line is "PID/TID SECONDS: GROUP:EVENT:" with EVENT b_<function>
(build/raftsql-bench: node 1, the client and the leader) or t_<function>
(build/raftsql-testhost: a follower), <function>_ret__return at a
return. One client writes one request at a time, so every event between
a b_exec_submit and its b_exec_submit_ret__return belongs to that write
(the followers' apply of the write before it too, which this table
leaves out). Per write:

  client -> loop          exec_submit to the leader's proposal
  to follower's disk      the proposal to the first answering follower's
                          LMDB commit start: AppendEntries' send, loopback
                          TCP, its loop's wake and step, its disk thread's
                          wake
  follower LMDB commit    that commit (its pages, two syncs)
  follower disk -> send   the commit's end to its answer's send: the loop's
                          wake (libuv's after-work) and step
  answer -> commit        the answer's send to the leader's applier_push
                          (the commit index moved): loopback TCP, the
                          leader's step; or the leader's own log write, when
                          that ends later
  leader's LMDB commit    beside: the leader's own log write (in parallel
                          with the AppendEntries), and its start after the
                          proposal
  commit -> apply         applier_push to sql_fsm_apply (the apply
                          thread's wake)
  apply                   sql_fsm_apply (the entry in SQLite, the applied
                          index)
  apply -> client         its end to exec_submit's return (the result to
                          the client, its wake)

Prints each segment's median, mean and 90th percentile in µs over the
writes that have every event, and the writes counted.
"""

import statistics
import sys

SEGMENTS = [
    ("total", "one write: exec_submit to its return"),
    ("client_loop", "client -> loop"),
    ("to_follower_disk", "to follower's disk"),
    ("follower_commit", "follower LMDB commit"),
    ("follower_send", "follower disk -> send"),
    ("answer_commit", "answer -> commit"),
    ("leader_start", "leader's LMDB commit: its start"),
    ("leader_commit", "leader's LMDB commit"),
    ("commit_apply", "commit -> apply"),
    ("apply", "apply"),
    ("apply_client", "apply -> client"),
]


def parse(path):
    """[(µs, pid, event)] sorted by time."""
    out = []
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) < 3 or "/" not in p[0]:
                continue
            try:
                pid = int(p[0].split("/")[0])
                t = float(p[1].rstrip(":")) * 1e6
            except ValueError:
                continue
            parts = p[2].split(":")
            if len(parts) < 2:
                continue
            out.append((t, pid, parts[1]))
    out.sort()
    return out


def writes(events):
    """The events of each write: lists from b_exec_submit to its return."""
    out, cur = [], None
    for e in events:
        if e[2] == "b_exec_submit":
            cur = [e]
        elif cur is not None:
            cur.append(e)
            if e[2] == "b_exec_submit_ret__return":
                out.append(cur)
                cur = None
    return out


def first(w, name, after, pid=None):
    """The first event @name of write @w at or after @after (of @pid)."""
    for e in w:
        if e[0] >= after and e[2] == name and (pid is None or e[1] == pid):
            return e
    return None


def segments(w):
    """{segment: µs} of write @w, or None when an event is missing."""
    t0, end = w[0][0], w[-1][0]
    prop = first(w, "b_raft_uv_node_propose", t0)
    if prop is None:
        return None
    fret = first(w, "t_raft_persist_run_ret__return", prop[0])
    if fret is None:
        return None
    starts = [e for e in w if e[2] == "t_raft_persist_run" and
              e[1] == fret[1] and prop[0] <= e[0] <= fret[0]]
    fsend = first(w, "t_raft_uv_transport_send", fret[0], fret[1])
    push = first(w, "b_applier_push", fsend[0]) if fsend else None
    lstart = first(w, "b_raft_persist_run", prop[0])
    lret = first(w, "b_raft_persist_run_ret__return", prop[0])
    astart = first(w, "b_sql_fsm_apply", push[0]) if push else None
    aret = (first(w, "b_sql_fsm_apply_ret__return", astart[0])
            if astart else None)
    if not (starts and fsend and push and lstart and lret and astart and
            aret):
        return None
    fstart = starts[-1]
    return {
        "total": end - t0,
        "client_loop": prop[0] - t0,
        "to_follower_disk": fstart[0] - prop[0],
        "follower_commit": fret[0] - fstart[0],
        "follower_send": fsend[0] - fret[0],
        "answer_commit": push[0] - fsend[0],
        "leader_start": lstart[0] - prop[0],
        "leader_commit": lret[0] - lstart[0],
        "commit_apply": astart[0] - push[0],
        "apply": aret[0] - astart[0],
        "apply_client": end - aret[0],
    }


def main():
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    ws = writes(parse(sys.argv[1]))
    segs = [s for s in (segments(w) for w in ws) if s is not None]
    if not segs:
        sys.stderr.write("write_path.py: no write with every event among "
                         "%d writes (were the probes on both binaries?)\n"
                         % len(ws))
        return 1
    print("%d writes, %d with every event; µs per write" % (len(ws),
                                                            len(segs)))
    print("%-34s %8s %8s %8s" % ("segment", "median", "mean", "p90"))
    for key, label in SEGMENTS:
        v = sorted(s[key] for s in segs)
        print("%-34s %8.0f %8.0f %8.0f" % (
            label, statistics.median(v), statistics.mean(v),
            v[min(len(v) - 1, int(len(v) * 0.9))]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
