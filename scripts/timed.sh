#!/bin/sh
# timed.sh - run a step of `make test` and say how long it took.
# Usage: scripts/timed.sh NAME COMMAND...
# Runs COMMAND, then prints "make test: NAME: N s" (wall seconds), and
# exits with COMMAND's status, so the steps' times stand in the log of
# every run (the target is about 15 minutes in all).
name=$1
shift
start=$(date +%s)
"$@"
rc=$?
echo "make test: $name: $(($(date +%s) - start)) s (exit $rc)"
exit $rc
