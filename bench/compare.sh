#!/usr/bin/env bash
# bench/compare.sh - raftsql beside dqlite, etcd and plain SQLite, one after
# another on this machine, all on 127.0.0.1.
#
# Usage: bench/compare.sh            (DURATION=20 seconds per run)
#        DURATION=10 bench/compare.sh
#        RUNS="raftsql-64-leader etcd-64" bench/compare.sh   (a subset)
#        ROUNDS=5 RUNS="..." bench/compare.sh   (5 interleaved rounds)
#        RATIOS="raftsql-1-leader/etcd-1 ..." bench/compare.sh (ratio lines)
#        bench/report.py --show bench/results/compare-<date>.txt  (again)
#
# Runs, each for DURATION seconds: raftsql (1 and 64 client threads in node
# 1's process, node 1 leader and node 1 follower, through raft_exec and as
# plain autocommit INSERTs, those also from a process of their own beside
# node 1 (-proc); and node 1 leader with TLS between the
# peers), dqlite-benchmark (3
# nodes, kvwrite, 1 and 64 workers), etcd 3.4 (3 members; 1 KiB puts via
# wrk on the v3 JSON gateway, 1 and 64 connections), local SQLite (WAL,
# synchronous=FULL, 1 and 64 rows per transaction). Every run also
# reports the CPU seconds and disk bytes per write of all its system's
# processes in its window (build/proc-cost, bench/proc_cost.c). ROUNDS
# (default 1; use 3 or more for figures to compare) repeats the whole
# sequence, each run once per round, so that the ratios are taken within
# each round (the machine drifts between rounds) and each figure is
# reported as its median and min-max over the rounds; a round whose
# local-1 p50 is over 1.5 x the median is flagged. Prints the tables and
# ratios (bench/report.py) and writes them, with the RESULT lines, to
# bench/results/compare-<date>.txt, with the charts in compare-<date>.png.
# Installs the packages it needs (apt-get) when missing. Every process it
# starts is killed at exit; all data lives in a mktemp directory removed
# at exit. See bench/README.md.

set -uo pipefail

DURATION=${DURATION:-20}
ROUNDS=${ROUNDS:-1}
ROUND=1
# DURATION (seconds) and ROUNDS: whole numbers > 0.
for v in DURATION ROUNDS; do
    case ${!v} in
        '' | *[!0-9]* | 0)
            echo "compare.sh: $v must be a whole number > 0" >&2
            exit 2
            ;;
    esac
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
B=$ROOT/build
OUT_DIR=$ROOT/bench/results
STAMP=$(date +%Y-%m-%d-%H%M%S)
T=$(mktemp -d /tmp/raftsql-compare-XXXXXX)
RES=$T/results.txt
: >"$RES"
PIDS=()
FAILED=0
# A run longer than this is stuck: it is stopped and marked FAILED.
RUN_LIMIT=$((DURATION + 120))

log() { printf '== %s\n' "$*" >&2; }

# forget PID...: drop reaped children from PIDS (their ids may be reused by
# someone else's process, which cleanup must never signal).
forget() {
    local keep=() p q drop
    for p in "${PIDS[@]}"; do
        drop=0
        for q in "$@"; do [ "$p" = "$q" ] && drop=1; done
        [ "$drop" = 0 ] && keep+=("$p")
    done
    PIDS=("${keep[@]}")
}

# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
    trap - EXIT INT TERM HUP
    # raftsql-bench stops its own node processes on TERM; give everyone
    # up to 15 s before KILL.
    [ ${#PIDS[@]} -gt 0 ] && STOP_GRACE=150 stop_pids "${PIDS[@]}"
    rm -rf "$T"
}
trap cleanup EXIT
trap 'echo "compare.sh: interrupted" >&2; exit 130' INT TERM HUP

# stop_pids PID... : TERM, then KILL what is left after STOP_GRACE tenths
# of a second (default 50).
stop_pids() {
    local p i alive
    for p in "$@"; do kill -TERM "$p" 2>/dev/null; done
    for i in $(seq "${STOP_GRACE:-50}"); do
        alive=0
        for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 0.1
    done
    for p in "$@"; do kill -KILL "$p" 2>/dev/null; done
    for p in "$@"; do wait "$p" 2>/dev/null; done
    forget "$@"
}

# run_logged OUT CMD...: run CMD (stopped after RUN_LIMIT s) in the
# background with its output in OUT and wait for it, so that a signal to
# this script is handled at once (the EXIT trap stops CMD). Returns CMD's
# status.
run_logged() {
    local out=$1 pid rc
    shift
    timeout -s TERM -k 30 "$RUN_LIMIT" "$@" >"$out" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    wait "$pid"
    rc=$?
    forget "$pid"
    return "$rc"
}

# free_ports N: N distinct free TCP ports on 127.0.0.1, one per line.
free_ports() {
    python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print("\n".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# record NAME LOG [STATUS]: keep the run's RESULT line (with the round's
# number), or mark it FAILED when there is none or STATUS (the run's exit
# status, default 0) is not 0. The reason shown: the run's own FAILED
# line (raftsql-bench's), else the last lines of its output.
record() {
    local name=$1 out=$2 status=${3:-0} line why
    line=$(grep '^RESULT ' "$out" | tail -1)
    if [ -n "$line" ] && [ "$status" = 0 ]; then
        echo "$line round=$ROUND" >>"$RES"
        echo "$line round=$ROUND" >&2
    else
        why=$(grep 'FAILED: ' "$out" | tail -1)
        [ -n "$why" ] || why="log: $(tail -3 "$out" | tr '\n' ' ')"
        echo "FAILED name=$name round=$ROUND (exit status $status; $why)" \
            >>"$RES"
        echo "compare.sh: $name failed; last lines of its output:" >&2
        tail -15 "$out" >&2
        FAILED=1
    fi
}

# ---- packages and build ---------------------------------------------------

install_missing() {
    local need=() p
    for p in "$@"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
            grep -q 'install ok installed'; then
            need+=("$p")
        fi
    done
    [ ${#need[@]} -eq 0 ] && return 0
    log "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq &&
        apt-get install -y -qq --no-install-recommends "${need[@]}"
}

scripts/deps.sh || exit 1
install_missing go-dqlite etcd-server etcd-client wrk gnuplot-nox || {
    echo "compare.sh: cannot install the peers' packages" >&2
    exit 1
}
# Relative targets: the Makefile's rules are written for build/..., and an
# absolute path would match no rule (a stale binary would be reported as
# up to date).
make --no-print-directory build/raftsql-testhost build/raftsql-bench \
    build/local-sqlite-bench build/delay-proxy build/proc-cost \
    build/rtt-probe >&2 || exit 1
mkdir -p "$OUT_DIR"

# ---- raftsql ----------------------------------------------------------------

# delay_note RTT: the log's words for a run's network delay ("" for none).
delay_note() {
    [ "$1" != 0 ] && echo "; $1 ms round trip on every peer link"
}

# tls_config: the raft_start keys of TLS between the peers, with a CA and
# one certificate naming 127.0.0.1 (every node's host here) made with the
# openssl command line in $T/tls the first time.
tls_config() {
    local d=$T/tls
    if [ ! -f "$d/node.pem" ]; then
        mkdir -p "$d"
        printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=%s\n' \
            serverAuth,clientAuth >"$d/node.ext"
        {
            openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
                -nodes -keyout "$d/ca.key" -out "$d/ca.pem" -days 2 \
                -subj /CN=raftsql-bench-ca &&
                openssl req -new -newkey ec -pkeyopt \
                    ec_paramgen_curve:P-256 -nodes -keyout "$d/node.key" \
                    -out "$d/node.csr" -subj /CN=node &&
                openssl x509 -req -in "$d/node.csr" -CA "$d/ca.pem" \
                    -CAkey "$d/ca.key" -CAcreateserial -days 2 \
                    -extfile "$d/node.ext" -out "$d/node.pem"
        } >"$d/openssl.log" 2>&1 || cat "$d/openssl.log" >&2
    fi
    echo "tls_cert=$d/node.pem tls_key=$d/node.key tls_ca=$d/ca.pem"
}

# run_raftsql CLIENTS ROLE [RTT [tls|plain|plainproc]]: one raftsql-bench
# run, with RTT ms of delay on every peer link, and with TLS between the
# peers or with plain autocommit INSERTs instead of raft_exec (plainproc:
# from a process of their own, not node 1's).
run_raftsql() {
    local clients=$1 role=$2 rtt=${3:-0} how=${4:-} name="raftsql-$1-$2" out
    local config="" plain=() rc what="raft_exec" note=""
    [ "$rtt" != 0 ] && name+="-rtt$rtt"
    [ "$how" = tls ] && name+="-tls" && config=$(tls_config) &&
        note="; TLS 1.3 between the peers"
    local where="in node 1's process"
    [ "$how" = plain ] && name="raftsql-plain-$1-$2" && plain=(--plain) &&
        what="plain autocommit INSERTs (busy timeout 5000 ms)"
    [ "$how" = plainproc ] && name="raftsql-plain-$1-$2-proc" &&
        plain=(--plain --process) &&
        what="plain autocommit INSERTs (busy timeout 5000 ms)" &&
        where="in a process of their own on node 1's machine"
    out=$T/$name.out
    log "$name: $clients client threads $where, $what," \
        "node 1 $role$(delay_note "$rtt")$note"
    run_logged "$out" "$B/raftsql-bench" --clients "$clients" \
        --role "$role" --duration "$DURATION" --name "$name" \
        --node "$B/raftsql-testhost" --dir "$T/$name" --rtt-ms "$rtt" \
        --proxy "$B/delay-proxy" --config "$config" "${plain[@]}"
    rc=$?
    grep -v '^RESULT ' "$out" | tail -5 >&2
    record "$name" "$out" "$rc"
    rm -rf "${T:?}/$name"
}

# ---- dqlite -----------------------------------------------------------------

run_dqlite() {
    local workers=$1 name="dqlite-$1" d=$T/dqlite-$1 ports p1 p2 p3 pids
    local driver rc watch
    mkdir -p "$d/1" "$d/2" "$d/3"
    mapfile -t ports < <(free_ports 3)
    p1=127.0.0.1:${ports[0]} p2=127.0.0.1:${ports[1]} p3=127.0.0.1:${ports[2]}
    log "$name: dqlite-benchmark kvwrite, 3 nodes, $workers workers on" \
        "the leader (node 1)"
    # Node 1 self-elects and runs the workload (--driver); 2 and 3 join.
    timeout -s TERM -k 30 "$RUN_LIMIT" dqlite-benchmark --db "$p1" -D "$d/1" \
        --driver --cluster "$p1,$p2,$p3" --duration "$DURATION" \
        --workers "$workers" --workload kvwrite >"$d/node1.log" 2>&1 &
    driver=$!
    PIDS+=("$driver")
    sleep 0.5
    dqlite-benchmark --db "$p2" -D "$d/2" --join "$p1" >"$d/node2.log" 2>&1 &
    pids=($!)
    PIDS+=($!)
    dqlite-benchmark --db "$p3" -D "$d/3" --join "$p1" >"$d/node3.log" 2>&1 &
    pids+=($!)
    PIDS+=($!)
    # The three nodes' cost, every 0.25 s (the window is known only
    # afterwards, from the requests' timestamps).
    "$B/proc-cost" --watch 0.25 "$driver" "${pids[@]}" >"$d/cost.txt" 2>&1 &
    watch=$!
    PIDS+=("$watch")
    wait "$driver"
    rc=$?
    forget "$driver"
    stop_pids "$watch"
    stop_pids "${pids[@]}"
    if [ "$rc" -ne 0 ]; then
        echo "dqlite-benchmark exited with $rc" >>"$d/node1.log"
        cp "$d/node1.log" "$T/$name.out"
        record "$name" "$T/$name.out"
        return
    fi
    # Results: one file per worker, `n`, `n_err`, then one line per
    # successful request: "<timestamp ns> <latency ms>".
    python3 - "$name" "$DURATION" "$d/1/$p1/results" "$d/cost.txt" \
        >"$T/$name.out" 2>&1 <<'EOF'
import glob, os, sys
name, duration, rdir, cost = sys.argv[1], float(sys.argv[2]), sys.argv[3], \
    sys.argv[4]
n = n_err = 0
lat = []
spans = []  # (start s, end s) of every successful request
for path in glob.glob(os.path.join(rdir, "*")):
    section = None
    with open(path) as f:
        for line in f:
            w = line.split()
            if not w:
                continue
            if w[0] == "n" and len(w) == 2:
                n += int(w[1])
            elif w[0] == "n_err":
                n_err += int(w[1])
            elif w[0] == "measurements":
                section = "m"
            elif w[0] == "errors":
                section = "e"
            elif section == "m" and len(w) == 2:
                lat.append(float(w[1]))
                t0 = int(w[0]) / 1e9
                spans.append((t0, t0 + float(w[1]) / 1000))
lat.sort()
def pct(p):
    if not lat:
        return 0.0
    i = max(1, min(len(lat), int(p * len(lat) + 0.999999)))
    return lat[i - 1]
if n == 0:
    sys.exit("no successful request in %s" % rdir)
# The cost: between the first sample at or after the first request's
# start and the last sample at or before the last request's end, over the
# requests that started and ended between those two samples.
samples = []
for line in open(cost):
    if line.startswith("COST "):
        kv = dict(x.split("=", 1) for x in line.split()[1:])
        samples.append((float(kv["t"]), float(kv["cpu_s"]),
                        int(kv["write_bytes"])))
first = min(a for a, _ in spans)
last = max(b for _, b in spans)
inside = [s for s in samples if first <= s[0] <= last]
costs = "cpu_s=n/a cpu_s_per_write=n/a write_bytes=n/a bytes_per_write=n/a"
if len(inside) >= 2:
    a, b = inside[0], inside[-1]
    k = sum(1 for x, y in spans if x >= a[0] and y <= b[0])
    if k > 0:
        costs = ("cpu_s=%.2f cpu_s_per_write=%.7f write_bytes=%d "
                 "bytes_per_write=%.0f cost_window_s=%.2f" %
                 (b[1] - a[1], (b[1] - a[1]) / k, b[2] - a[2],
                  (b[2] - a[2]) / k, b[0] - a[0]))
print("%s: %.0f writes/s (%d ok, %d errors in %.0f s)" %
      (name, n / duration, n, n_err, duration))
print("RESULT name=%s writes_per_s=%.1f p50_ms=%.3f p99_ms=%.3f "
      "p999_ms=%.3f writes=%d errors=%d seconds=%.0f %s" %
      (name, n / duration, pct(0.5), pct(0.99), pct(0.999), n, n_err,
       duration, costs))
EOF
    grep -v '^RESULT ' "$T/$name.out" >&2
    record "$name" "$T/$name.out"
    rm -rf "$d"
}

# ---- etcd -------------------------------------------------------------------

run_etcd() {
    local conns=$1 rtt=${2:-0} name="etcd-$1" ports ic="" eps="" i
    local threads=1 leader_url pids=() maps=() members=() d out cost0 cost1
    [ "$rtt" != 0 ] && name+="-rtt$rtt"
    d=$T/$name out=$T/$name.out
    [ "$conns" -gt 1 ] && threads=2
    mkdir -p "$d"
    # Per member: client port, peer port, and the delay proxy's port in
    # front of the peer port (advertised, so every peer message to the
    # member crosses it; unused without a delay).
    mapfile -t ports < <(free_ports 9)
    for i in 0 1 2; do
        local adv=${ports[$((3 * i + 1))]}
        [ "$rtt" != 0 ] && adv=${ports[$((3 * i + 2))]} &&
            maps+=("${ports[$((3 * i + 2))]}:${ports[$((3 * i + 1))]}")
        ic+="${ic:+,}m$((i + 1))=http://127.0.0.1:$adv"
        eps+="${eps:+,}http://127.0.0.1:${ports[$((3 * i))]}"
    done
    log "$name: etcd $(etcd --version | head -1 | awk '{print $3}'), 3" \
        "members; wrk, $conns connections, PUT 1 KiB via /v3/kv/put" \
        "$(delay_note "$rtt")"
    if [ "$rtt" != 0 ]; then
        "$B/delay-proxy" --rtt-ms "$rtt" "${maps[@]}" >"$d/proxy.out" 2>&1 &
        pids+=($!)
        PIDS+=($!)
        for i in $(seq 50); do
            grep -q ready "$d/proxy.out" && break
            sleep 0.1
        done
    fi
    for i in 0 1 2; do
        local c=${ports[$((3 * i))]} p=${ports[$((3 * i + 1))]}
        local adv=${ports[$((3 * i + 1))]}
        [ "$rtt" != 0 ] && adv=${ports[$((3 * i + 2))]}
        etcd --name "m$((i + 1))" --data-dir "$d/m$((i + 1))" \
            --listen-client-urls "http://127.0.0.1:$c" \
            --advertise-client-urls "http://127.0.0.1:$c" \
            --listen-peer-urls "http://127.0.0.1:$p" \
            --initial-advertise-peer-urls "http://127.0.0.1:$adv" \
            --initial-cluster "$ic" --initial-cluster-token raftsql-bench \
            --initial-cluster-state new --logger zap --log-outputs stderr \
            >"$d/m$((i + 1)).log" 2>&1 &
        pids+=($!)
        members+=($!)
        PIDS+=($!)
    done
    # Wait for a leader; send the load to it.
    leader_url=""
    for i in $(seq 100); do
        leader_url=$(ETCDCTL_API=3 timeout 5 etcdctl --endpoints="$eps" \
            endpoint status -w json 2>/dev/null | python3 -c '
import json, sys
try:
    st = json.load(sys.stdin)
except ValueError:
    sys.exit(0)
for e in st:
    s = e["Status"]
    if s.get("leader") and s["leader"] == s["header"]["member_id"]:
        print(e["Endpoint"])
')
        [ -n "$leader_url" ] && break
        sleep 0.2
    done
    if [ -z "$leader_url" ]; then
        echo "no etcd leader; member 1 log:" >"$out"
        tail -5 "$d/m1.log" >>"$out"
        stop_pids "${pids[@]}"
        record "$name" "$out"
        return
    fi
    # One second of unmeasured load, as raftsql-bench's --warmup.
    run_logged "$d/warmup.out" wrk -t "$threads" -c "$conns" -d 1s \
        -s "$ROOT/bench/etcd_put.lua" "$leader_url"
    # The members' cost (not the delay proxies') from just before wrk to
    # just after it; wrk's own CPU from this shell's reaped children
    # (`times`, before and after: wrk is the only child reaped between).
    cost0=$("$B/proc-cost" "${members[@]}")
    times >"$d/times0"
    run_logged "$d/wrk.out" wrk -t "$threads" -c "$conns" \
        -d "${DURATION}s" --latency -s "$ROOT/bench/etcd_put.lua" \
        "$leader_url"
    times >"$d/times1"
    cost1=$("$B/proc-cost" "${members[@]}")
    stop_pids "${pids[@]}"
    python3 - "$name" "$d/wrk.out" "$cost0" "$cost1" "$d/times0" \
        "$d/times1" >"$out" 2>&1 <<'EOF'
import re, sys
name, path = sys.argv[1], sys.argv[2]


def cost(line):
    kv = dict(w.split("=", 1) for w in line.split()[1:])
    return float(kv["cpu_s"]), int(kv["write_bytes"])


def children_cpu_s(path):
    """user + system of the shell's reaped children: `times`' 2nd line."""
    lines = open(path).read().split("\n")
    return sum(int(m) * 60 + float(s) for m, s in
               re.findall(r"(\d+)m([\d.]+)s", lines[1]))


kv = None
for line in open(path):
    if line.startswith("WRK "):
        kv = dict(w.split("=", 1) for w in line.split()[1:])
if kv is None:
    sys.exit("no WRK line from wrk:\n" + open(path).read())
secs = int(kv["duration_us"]) / 1e6
ok = int(kv["requests"]) - int(kv["status_errors"])
errors = int(kv["status_errors"]) + int(kv["other_errors"])
costs = "cpu_s=n/a cpu_s_per_write=n/a write_bytes=n/a bytes_per_write=n/a"
if sys.argv[3] and sys.argv[4] and ok > 0:
    (c0, w0), (c1, w1) = cost(sys.argv[3]), cost(sys.argv[4])
    wrk = children_cpu_s(sys.argv[6]) - children_cpu_s(sys.argv[5])
    costs = ("cpu_s=%.2f cpu_s_per_write=%.7f write_bytes=%d "
             "bytes_per_write=%.0f wrk_cpu_s_per_write=%.7f" %
             (c1 - c0, (c1 - c0) / ok, w1 - w0, (w1 - w0) / ok, wrk / ok))
print("%s: %.0f puts/s (%d ok, %d errors in %.1f s)" %
      (name, ok / secs, ok, errors, secs))
print("RESULT name=%s writes_per_s=%.1f p50_ms=%.3f p99_ms=%.3f "
      "p999_ms=%.3f writes=%d errors=%d seconds=%.2f %s" %
      (name, ok / secs, float(kv["p50_us"]) / 1000,
       float(kv["p99_us"]) / 1000, float(kv["p999_us"]) / 1000, ok, errors,
       secs, costs))
EOF
    grep -v '^RESULT ' "$out" >&2
    record "$name" "$out"
    rm -rf "$d"
}

# ---- local SQLite ----------------------------------------------------------

run_local() {
    local rows=$1 name="local-$1" out=$T/local-$1.out
    log "$name: one SQLite file, WAL, synchronous=FULL, $rows rows per" \
        "transaction"
    mkdir -p "$T/$name"
    run_logged "$out" "$B/local-sqlite-bench" --rows-per-txn "$rows" \
        --duration "$DURATION" --name "$name" --dir "$T/$name"
    grep -v '^RESULT ' "$out" >&2
    record "$name" "$out"
    rm -rf "${T:?}/$name"
}

# ---- the loopback round trip -------------------------------------------------

# run_rtt: this machine's loopback TCP round trip (build/rtt-probe, about
# 0.2 s), which with local-1's p50 (one fsync) gives the report's
# one-client floor, floor-1 (bench/README.md "The floor").
run_rtt() {
    local out=$T/rtt.out
    log "rtt-loopback: loopback TCP round trips of 1200 bytes and a 32-byte" \
        "answer, between two processes"
    local rc=0
    run_logged "$out" "$B/rtt-probe" --count 5000 --name rtt-loopback ||
        rc=$?
    record rtt-loopback "$out" "$rc"
}

# ---- the runs --------------------------------------------------------------

# want NAME: whether RUNS (space-separated run names, default all) has it.
want() {
    [ -z "${RUNS:-}" ] && return 0
    case " $RUNS " in *" $1 "*) return 0 ;; esac
    return 1
}

# The runs of a round are listed first (step), then run in that order in
# odd rounds and in the reverse order in even ones: a run late in a round
# meets a disk that the runs before it loaded (each writes 1-2 GB), and
# the drift within a round would otherwise always favour the pairs' first
# run (raftsql-plain-1 before raftsql-plain-64, raft_exec before plain).
STEPS=()

# step CMD...: add one run (a command line of words) to the round.
step() { STEPS+=("$*"); }

# run_step WORDS: run one listed step (named so that each run function
# is called by name here).
run_step() {
    local -a w
    read -ra w <<<"$1"
    case ${w[0]} in
        run_raftsql) run_raftsql "${w[@]:1}" ;;
        run_dqlite) run_dqlite "${w[@]:1}" ;;
        run_etcd) run_etcd "${w[@]:1}" ;;
        run_local) run_local "${w[@]:1}" ;;
        run_rtt) run_rtt ;;
        *) echo "compare.sh: no such step: $1" >&2; exit 1 ;;
    esac
}

# settle: before each run, write back what the run before it left dirty
# (its files are removed, but the file system's journal and the disk's
# own cache are not), so that it does not land in this run's window.
settle() { sync; }

# one_round: every wanted run once: the forward order in odd rounds, the
# reverse in even ones.
one_round() {
    local clients role n rtt i
    STEPS=()
    for clients in 1 64; do
        for role in leader follower; do
            want "raftsql-$clients-$role" && step run_raftsql "$clients" "$role"
            # With TLS 1.3 between the peers (certificates), next to the
            # same run without.
            [ "$role" = leader ] && want "raftsql-$clients-leader-tls" &&
                step run_raftsql "$clients" leader 0 tls
            # The same writes as plain SQL, next to raft_exec's.
            want "raftsql-plain-$clients-$role" &&
                step run_raftsql "$clients" "$role" 0 plain
            # And from another process (an application beside node 1).
            want "raftsql-plain-$clients-$role-proc" &&
                step run_raftsql "$clients" "$role" 0 plainproc
        done
    done
    for n in 1 64; do want "dqlite-$n" && step run_dqlite "$n"; done
    for n in 1 64; do want "etcd-$n" && step run_etcd "$n"; done
    for n in 1 64; do want "local-$n" && step run_local "$n"; done
    # With local-1 (one fsync), the round trip that makes the floor.
    want local-1 && step run_rtt
    # The same peer links with network delay (RTTS: round trips in ms),
    # through build/delay-proxy for both: what pipelining buys when the
    # network is not free.
    for rtt in ${RTTS-1 10}; do
        for n in 1 64; do
            want "raftsql-$n-leader-rtt$rtt" &&
                step run_raftsql "$n" leader "$rtt"
            want "etcd-$n-rtt$rtt" && step run_etcd "$n" "$rtt"
        done
    done
    if [ $((ROUND % 2)) = 1 ]; then
        for ((i = 0; i < ${#STEPS[@]}; i++)); do
            settle
            run_step "${STEPS[$i]}"
        done
    else
        for ((i = ${#STEPS[@]} - 1; i >= 0; i--)); do
            settle
            run_step "${STEPS[$i]}"
        done
    fi
}

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
log "DURATION=$DURATION s per run, ROUNDS=$ROUNDS, $(nproc) CPUs," \
    "$(uname -r), load average $LOAD_START"
for ROUND in $(seq "$ROUNDS"); do
    [ "$ROUNDS" -gt 1 ] && log "round $ROUND of $ROUNDS"
    one_round
done

TITLE="raftsql vs dqlite, etcd, local SQLite: ${DURATION} s per run, \
$( [ "$ROUNDS" -gt 1 ] && echo "$ROUNDS rounds, ")$(nproc) CPUs, \
$(date '+%Y-%m-%d %H:%M')"
python3 "$ROOT/bench/report.py" "$RES" "$OUT_DIR/compare-$STAMP.txt" \
    "$OUT_DIR/compare-$STAMP.png" "$TITLE" \
    "load average (1/5/15 min) at start $LOAD_START, at end \
$(cut -d' ' -f1-3 /proc/loadavg); other processes share the machine" ||
    FAILED=1
echo "table: $OUT_DIR/compare-$STAMP.txt"
echo "chart: $OUT_DIR/compare-$STAMP.png"
exit "$FAILED"
