#!/bin/sh
# run-tests.sh - run test binaries one after another and sum up.
# Usage: scripts/run-tests.sh BINARY...
# Each binary is a cmocka program (exit 0 when all its tests pass). Prints
# every binary's output and a closing "N passed, N failed" line (counting
# binaries); exits 1 if any failed.
set -u
passed=0
failed=0
failures=""
for t in "$@"; do
    echo "== $t"
    if ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 "$t"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        failures="$failures $t"
    fi
done
[ -n "$failures" ] && echo "failed:$failures"
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
