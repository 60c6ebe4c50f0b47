#!/bin/sh
# bench/scale.sh: raftsql's costs against the database size (bench/README.md
# "Scaling curves"; bench/scale.py says what each column is). Never part of
# `make test`, but for a smoke run on a tiny database (tests/bench).
#
#   bench/scale.sh                          # SIZES="0.1 1 4 16" GB
#   SIZES="0.1 1" DURATION=10 bench/scale.sh
#   SIZES=0.005 DURATION=1 PLOT=0 OUT=/tmp/x bench/scale.sh   # the smoke run
#
# It builds build/raftsql.so and build/raftsql-testhost, installs
# python3-matplotlib for the plots when PLOT is not 0 (scripts/deps.sh
# python3-matplotlib, which checks dpkg-query first: `make deps` and
# make test never need it), caches the source files in build/scale/
# (CACHE=), and writes the table and the plot to bench/results/ (OUT=).
set -e
cd "$(dirname "$0")/.."
make -s build/raftsql.so build/raftsql-testhost
if [ "${PLOT:-1}" != 0 ]; then
    scripts/deps.sh python3-matplotlib ||
        echo "scale.sh: no python3-matplotlib: the table only" >&2
fi
exec /usr/bin/python3 bench/scale.py
