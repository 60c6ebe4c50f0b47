#!/bin/sh
# check-so.sh - the loadable extension lives beside its host's SQLite: it
# needs no libsqlite3 and calls no sqlite3_* routine directly (only through
# the host's API table), so a process holds one SQLite; and it exports only
# sqlite3_raftsql_init and the raftsql_* C API.
# Usage: scripts/check-so.sh build/raftsql.so...
set -u
bad=0
for so in "$@"; do
    if readelf -d "$so" | grep -E 'NEEDED.*libsqlite3'; then
        echo "check-so: $so links libsqlite3 (a second SQLite in the host)"
        bad=1
    fi
    if nm -D --undefined-only "$so" | grep -E ' sqlite3_'; then
        echo "check-so: $so calls these sqlite3_* routines directly, not" \
            "through the host's API table (sqlite3ext.h, INIT3)"
        bad=1
    fi
    if nm -D --defined-only "$so" | awk '$2 ~ /^[TDBVW]$/ {print $3}' |
        grep -vE '^(sqlite3_raftsql_init|raftsql_[a-z_0-9]+)$'; then
        echo "check-so: $so exports symbols beside sqlite3_raftsql_init" \
            "and raftsql_*"
        bad=1
    fi
done
[ "$bad" -eq 0 ] && echo "check-so: ok"
exit "$bad"
