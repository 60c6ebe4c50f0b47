#!/usr/bin/env bash
# bench/write_path.sh: where one raft_exec's time goes at one client.
#
# Puts uprobes (perf probe) on the functions each write passes through, in
# build/raftsql-bench (node 1: the client and the leader) and
# build/raftsql-testhost (nodes 2 and 3, the followers), records one
# `raftsql-bench --clients 1 --role leader` run with `perf record -a`, and
# prints bench/write_path.py's table: per write, the medians of each
# segment (client to loop, the network and the follower's disk thread,
# its LMDB commit, the answer, the commit, the apply, the client's wake).
# The probes cost a few µs each: compare the segments, not the total with
# a run without them.
#
# Usage: bench/write_path.sh [SECONDS]     (default 5; root: perf probe)
# Needs: perf (linux-perf). Leaves no probe behind (removed at exit).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
SECS=${1:-5}
case $SECS in '' | *[!0-9]*)
    echo "write_path.sh: SECONDS must be a whole number" >&2
    exit 1
    ;;
esac
command -v perf >/dev/null || {
    echo "write_path.sh: perf is missing (apt-get install linux-perf)" >&2
    exit 1
}
make --no-print-directory build/raftsql-bench build/raftsql-testhost >&2 ||
    exit 1
T=$(mktemp -d)
GROUP=raftsql_path
cleanup() {
    perf probe -q -d "$GROUP:*" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

FUNCS="exec_submit raft_uv_node_propose raft_persist_run disk_after_work
raft_uv_recv_consume raft_uv_transport_send applier_push sql_fsm_apply"
RETS="exec_submit raft_persist_run sql_fsm_apply"
perf probe -q -d "$GROUP:*" >/dev/null 2>&1
for bin in bench testhost; do
    p=${bin:0:1}
    for f in $FUNCS; do
        perf probe -q -x "build/raftsql-$bin" -a "$GROUP:${p}_$f=$f" ||
            exit 1
    done
    for f in $RETS; do
        perf probe -q -x "build/raftsql-$bin" -a "$GROUP:${p}_${f}_ret=$f%return" ||
            exit 1
    done
done
perf record -q -a -e "$GROUP:*" -o "$T/perf.data" -- \
    build/raftsql-bench --role leader --clients 1 --duration "$SECS" \
    >"$T/bench.out" 2>&1 || {
    echo "write_path.sh: the run failed:" >&2
    tail -20 "$T/bench.out" >&2
    exit 1
}
grep '^RESULT ' "$T/bench.out" | cut -d' ' -f1-6
perf script -i "$T/perf.data" -F pid,tid,time,event 2>/dev/null >"$T/events.txt"
python3 bench/write_path.py "$T/events.txt"
