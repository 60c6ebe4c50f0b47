#!/bin/sh
# bench/reads.sh: plain reads with raftsql loaded beside the same SQLite
# without it (bench/README.md "Reads"). Starts a 3-node cluster on
# 127.0.0.1: nodes 2 and 3 as build/raftsql-node daemons (node 3 leads,
# node 2 follows), node 1 run by build/reads-bench itself in the loaded
# runs of the node's own process (raft_start on node1.db: a follower that
# catches up, then reads), and as a daemon while stock reads its file. Fills kv with ROWS rows through node 2, then
# runs ROUNDS interleaved rounds; in each, for each case (statements
# reused or prepared per query; in the node's process on node1.db or in
# another process on node2.db, which daemon 2 serves), the runs stock,
# loaded and loaded+wrote (the reading connection wrote one row first:
# its plain-write hooks are installed), in that order in odd rounds and
# reversed in even ones. Before each run on node 2's file a row is
# written through it (reads-bench --touch), so that stock reads the same
# WAL state as the run that wrote. Prints each round's reads/s and the ratios to
# stock of the same round, then the medians, and keeps the output in
# bench/results/reads-<date>.txt.
#
# ROUNDS (default 3), ROWS (100000), QUERIES (500000), CASES (default
# "other-reuse other-prepare node-reuse node-prepare"), CONFIG (extra
# raft_start keys for every node, e.g. 'max_staleness_ms=1000'),
# OUT (the results file; "-" for none).
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
ROUNDS=${ROUNDS:-3}
ROWS=${ROWS:-100000}
QUERIES=${QUERIES:-500000}
CASES=${CASES:-"other-reuse other-prepare node-reuse node-prepare"}
CONFIG=${CONFIG:-}
OUT=${OUT:-bench/results/reads-$(date +%Y-%m-%d).txt}

make -s build/raftsql.so build/raftsql-node build/reads-bench >&2

dir=$(mktemp -d /tmp/raftsql-reads.XXXXXX)
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    for p in $pids; do wait "$p" 2>/dev/null || true; done
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ports=$(python3 -c 'import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')
set -- $ports
cluster="1@127.0.0.1:$1,2@127.0.0.1:$2,3@127.0.0.1:$3"
p1=$1

# daemon ID ELECTION_MS: starts node ID as a raftsql-node process.
daemon() {
    port=$(echo "$cluster" | tr ',' '\n' | sed -n "s/^$1@127.0.0.1://p")
    {
        echo "database = $dir/node$1.db"
        echo "id = $1"
        echo "listen = 127.0.0.1:$port"
        echo "cluster = $cluster"
        echo "election_timeout_ms = $2"
        for kv in $CONFIG; do echo "$kv"; done
    } > "$dir/node$1.conf"
    build/raftsql-node --config "$dir/node$1.conf" 2> "$dir/node$1.log" &
    pids="$pids $!"
}
daemon 3 1000
daemon 2 3000
node1="id=1 listen=127.0.0.1:$p1 cluster=$cluster election_timeout_ms=3000 $CONFIG"

# Node 1 joins once so that its file exists and holds the rows.
sleep 1
build/reads-bench --db "$dir/node2.db" --load build/raftsql --setup \
    --rows "$ROWS"
build/reads-bench --db "$dir/node1.db" --load build/raftsql --start "$node1" \
    --rows "$ROWS" --queries 1000 --name warm > /dev/null

# one CASE VARIANT ROUND: one run, its RESULT line on stdout.
one() {
    where=${1%-*}
    how=${1#*-}
    args="--rows $ROWS --queries $QUERIES"
    [ "$how" = prepare ] && args="$args --prepare"
    if [ "$where" = node ]; then db=$dir/node1.db; else db=$dir/node2.db; fi
    [ "$2" = stock ] || args="$args --load build/raftsql"
    [ "$2" = wrote ] && args="$args --wrote"
    start=""
    [ "$2" != stock ] && [ "$where" = node ] && start=$node1
    # Stock reads node 1's file while node 1 runs (as a daemon): the same
    # file, WAL and checkpoints as the loaded runs read.
    d1=""
    if [ "$2" = stock ] && [ "$where" = node ]; then
        daemon 1 3000
        d1=$!
        sleep 1
    fi
    if [ "$where" = other ]; then
        # Every run reads a WAL that holds a commit not yet checkpointed,
        # as the run that wrote does (reads.c, --touch).
        build/reads-bench --db "$db" --load build/raftsql --touch \
            2>> "$dir/bench.log"
    fi
    build/reads-bench --db "$db" $args --name "$1/$2/$3" \
        ${start:+--start "$start"} 2>> "$dir/bench.log" | grep '^RESULT' ||
        echo "RESULT name=$1/$2/$3 reads_per_s=FAILED"
    if [ -n "$d1" ]; then
        kill "$d1"
        wait "$d1" || true
    fi
}

results=$dir/results.txt
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then order="stock loaded wrote"
    else order="wrote loaded stock"; fi
    for c in $CASES; do
        for v in $order; do
            one "$c" "$v" "$r" | tee -a "$results" >&2
        done
    done
done

report=$(python3 - "$results" "$ROUNDS" "$CASES" <<'EOF'
import re, statistics, sys
path, rounds, cases = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
runs = {}
for line in open(path):
    m = re.search(r"name=(\S+)/(\S+)/(\d+) reads_per_s=(\S+)", line)
    c = re.search(r"cpu_ns_per_read=(\S+)", line)
    if m:
        v = float(m.group(4)) if m.group(4) != "FAILED" else None
        runs[(m.group(1), m.group(2), int(m.group(3)))] = (
            v, float(c.group(1)) if c else None)
print("case            round   stock/s  loaded/s   wrote/s  loaded/stock"
      "  wrote/stock  (cpu ns/read: stock loaded wrote)")
med = {}
for case in cases:
    for r in range(1, rounds + 1):
        s, l, w = (runs.get((case, v, r), (None, None))
                   for v in ("stock", "loaded", "wrote"))
        def ratio(a):
            return a[0] / s[0] if a[0] and s[0] else None
        rl, rw = ratio(l), ratio(w)
        med.setdefault(case, ([], []))
        if rl: med[case][0].append(rl)
        if rw: med[case][1].append(rw)
        f = lambda x: "%9.0f" % x if x else "   FAILED"
        g = lambda x: "%12.3f" % x if x else "         n/a"
        print("%-15s %5d %s %s %s %s %s  (%s %s %s)" % (
            case, r, f(s[0]), f(l[0]), f(w[0]), g(rl), g(rw),
            *("%.0f" % x[1] if x[1] else "-" for x in (s, l, w))))
print()
print("case            median loaded/stock  median wrote/stock  target")
for case in cases:
    rl, rw = med[case]
    target = 0.9 if case.endswith("prepare") else 0.95
    m = lambda x: "%.3f" % statistics.median(x) if x else "n/a"
    print("%-15s %20s %19s  >= %.2f" % (case, m(rl), m(rw), target))
EOF
)
echo "$report"
if [ "$OUT" != "-" ]; then
    {
        echo "# bench/reads.sh $(date -Iseconds) ROUNDS=$ROUNDS ROWS=$ROWS" \
            "QUERIES=$QUERIES CONFIG='$CONFIG'"
        echo "# $(git rev-parse --short HEAD 2>/dev/null || echo '?')," \
            "SQLite $(sqlite3 --version 2>/dev/null | cut -d' ' -f1)," \
            "load $(cut -d' ' -f1-3 /proc/loadavg)"
        echo "$report"
    } > "$OUT"
    echo "(written to $OUT)" >&2
fi
