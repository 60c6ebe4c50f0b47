#!/bin/sh
# fuzz.sh - run libFuzzer targets, one per core (FUZZ_JOBS), each for a
# while.
# Usage: scripts/fuzz.sh SECONDS BINARY...   (make fuzz FUZZ_S=SECONDS)
# Each BINARY (build/fuzz/fuzz_<name>) runs SECONDS seconds on a fresh
# temporary working corpus, reading the seeds of tests/fuzz/corpus/<name>/
# and never writing there. A crash, leak, sanitizer report or failed
# check fails the target: its input is kept as
# build/fuzz/artifacts/<name>/crash-* (or leak-*, timeout-*, oom-*) and the
# command that reproduces it is printed. Prints a line per target
# (seconds, executions, coverage, corpus size, crashes) and a total; exits 1
# if any target failed.
set -u
if [ "${1:-}" = "--one" ]; then
    # One target (the parallel runs below call the script so): its
    # lines, printed whole under a lock, and "runs seconds failed" in
    # SUMS/<name>.
    secs=$2 bin=$3 sums=$4
    out=$(mktemp "${TMPDIR:-/tmp}/raftsql-fuzz-out.XXXXXX")
    (
        name=$(basename "$bin")
        name=${name#fuzz_}
        seeds=tests/fuzz/corpus/$name
        art=$(dirname "$bin")/artifacts/$name
        if [ ! -d "$seeds" ]; then
            echo "fuzz: $name: no seed corpus $seeds" >&2
            echo "0 0 1" >"$sums/$name"
            exit 1
        fi
        mkdir -p "$art"
        work=$(mktemp -d "${TMPDIR:-/tmp}/raftsql-fuzz-$name.XXXXXX")
        mkdir "$work/corpus"
        start=$(date +%s)
        # New inputs go to the first corpus directory (the temporary one).
        ASAN_OPTIONS=detect_leaks=1 \
            UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
            "$bin" -max_total_time="$secs" -timeout=25 -print_final_stats=1 \
            -artifact_prefix="$art/" "$work/corpus" "$seeds" \
            >"$work/log" 2>&1
        rc=$?
        took=$(($(date +%s) - start))
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" |
            tail -n 1)
        runs=${runs:-0}
        last=$(grep -E '^#[0-9]+' "$work/log" | tail -n 1)
        cov=$(echo "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
        corp=$(echo "$last" | sed -n 's/.* corp: \([0-9]*\).*/\1/p')
        if [ "$rc" -eq 0 ]; then
            echo "$runs $took 0" >"$sums/$name"
            echo "fuzz: $name: $took s, $runs executions, cov ${cov:-?}," \
                "corpus ${corp:-?}, 0 crashes"
            rm -rf "$work"
            exit 0
        fi
        echo "$runs $took 1" >"$sums/$name"
        input=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$work/log" |
            tail -n 1)
        echo "fuzz: $name: FAILED (exit $rc) after $took s, $runs executions"
        sed -n '/^==[0-9]*==/,$p; /check failed/p; /runtime error/p' \
            "$work/log" | head -n 60
        cp "$work/log" "$art/log"
        if [ -n "$input" ]; then
            echo "fuzz: $name: reproducing input: $input"
            echo "fuzz: $name: reproduce with: $bin $input"
        else
            echo "fuzz: $name: no input was written; the log is $art/log"
        fi
        rm -rf "$work"
        exit 1
    ) >"$out" 2>&1
    rc=$?
    flock "$sums" cat "$out"
    rm -f "$out"
    exit "$rc"
fi
if [ "$#" -lt 2 ]; then
    echo "usage: scripts/fuzz.sh SECONDS BINARY..." >&2
    exit 2
fi
secs=$1
shift
case "$secs" in
    '' | *[!0-9]* | 0)
        echo "fuzz: FUZZ_S must be a positive number of seconds" >&2
        exit 2
        ;;
esac
sums=$(mktemp -d "${TMPDIR:-/tmp}/raftsql-fuzz-sums.XXXXXX") || exit 1
trap 'rm -rf "$sums"' EXIT INT TERM
printf '%s\n' "$@" |
    xargs -P "${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}" -I '{}' \
        sh "$0" --one "$secs" '{}' "$sums" || true
total_runs=0
total_secs=0
failed=0
for bin in "$@"; do
    name=$(basename "$bin")
    name=${name#fuzz_}
    read -r runs took bad <"$sums/$name" 2>/dev/null || {
        runs=0 took=0 bad=1
        echo "fuzz: $name: no result (the run died)"
    }
    total_runs=$((total_runs + runs))
    total_secs=$((total_secs + took))
    failed=$((failed + bad))
done
echo "fuzz: $# targets, $total_secs s, $total_runs executions," \
    "$failed failed"
[ "$failed" -eq 0 ]
