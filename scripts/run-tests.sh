#!/bin/sh
# run-tests.sh - run test binaries, RUN_TESTS_JOBS at a time (default: one
# per core; most of them wait on fsyncs and timers more than they compute),
# and sum up.
# Usage: scripts/run-tests.sh BINARY...
# Each binary is a cmocka program (exit 0 when all its tests pass). Prints
# every binary's output whole as it ends (never interleaved) and a closing
# "N passed, N failed" line (counting binaries); exits 1 if any failed.
set -u
jobs=${RUN_TESTS_JOBS:-$(nproc 2>/dev/null || echo 1)}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/run-tests.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
n=$#
i=0
for t in "$@"; do
    i=$((i + 1))
    printf '%s %s\n' "$i" "$t"
done | xargs -P "$jobs" -L 1 sh -c '
    dir=$1 i=$2 t=$3
    if ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$t" >"$dir/$i.log" 2>&1; then
        echo "$t" >"$dir/$i.passed"
    else
        echo "$t" >"$dir/$i.failed"
    fi
    flock "$dir" sh -c "echo \"== \$1\"; cat \"\$2\"" sh "$t" "$dir/$i.log"
' sh "$tmp"
passed=$(find "$tmp" -name '*.passed' | wc -l)
failed=$((n - passed))
if [ "$failed" -gt 0 ]; then
    printf 'failed:'
    for i in $(seq 1 "$n"); do
        [ -e "$tmp/$i.passed" ] || printf ' %s' "$(eval "echo \${$i}")"
    done
    echo
fi
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
