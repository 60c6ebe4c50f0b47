#!/bin/sh
# check-layering.sh - enforce the include rules of DESIGN.md:
#  - raft/ files other than uv_* include neither uv.h, lmdb.h nor sqlite3*.h;
#  - only lmdb_log/ files include lmdb.h (directly or through its private
#    txn.h), and lmdb_log/format.[ch] do not;
#  - only raft/uv_* files (and raft/uv.h) include uv.h;
#  - sql/ files include nothing from raft/, ext/ or lmdb_log/, nor lmdb.h
#    or uv.h: the state machine depends on SQLite and libc only;
#  - sql/ and ext/ use SQLite through the host's API table: they include
#    <sqlite3ext.h>, never <sqlite3.h> (but the public ext/raftsql.h), and
#    every .c file of theirs that calls SQLite says SQLITE_EXTENSION_INIT3
#    (ext/raftsql.c, which holds the table, INIT1);
#  - the consensus core (the raft/ files that include raft_internal.h)
#    includes neither frame.h nor message.h: it knows only its own four
#    messages, not the runtime's frames nor the wire;
#  - ext/runtime/lease_core.[ch] and staleness_rule.[ch], the write
#    lease's rules and the staleness rule that the simulation links beside
#    the core (Makefile SIM_SRC), include only raft/ headers and libc (the
#    staleness rule also node_log.h, for its time format): no SQLite,
#    libuv, LMDB, nor another ext/ or sql/ header;
#  - ext/'s two rooms (scripts/ext-rooms.py): no file of ext/runtime/
#    includes a header of ext/surface/, and no include circle over ext/
#    holds more than three modules (each circle of two or more is
#    printed).
set -u
bad=0
for f in raft/*.c raft/*.h; do
    case "$(basename "$f")" in uv_*|uv.h) continue ;; esac
    if grep -En '#include *<(uv|lmdb|sqlite3[a-z]*)\.h>' "$f"; then
        echo "layering: $f includes a foreign library the core must not see"
        bad=1
    fi
done
for f in $(grep -rlE '#include *<lmdb\.h>' raft lmdb_log sql ext tests tools 2>/dev/null); do
    case "$f" in
        lmdb_log/format.[ch]) ;;
        lmdb_log/*) continue ;;
    esac
    echo "layering: $f includes lmdb.h (only lmdb_log/ may, not format.[ch])"
    bad=1
done
for f in $(grep -rlE '#include *"(\.\./)*lmdb_log/txn\.h"' raft sql ext tests \
        tools 2>/dev/null) $(grep -lE '#include *"txn\.h"' lmdb_log/format.[ch]); do
    echo "layering: $f includes lmdb_log/txn.h, which includes lmdb.h"
    bad=1
done
for f in $(grep -rlE '#include *<uv\.h>' raft lmdb_log sql ext tools 2>/dev/null); do
    case "$f" in raft/uv_*|raft/uv.h) continue ;; esac
    echo "layering: $f includes uv.h (only raft/uv_* may)"
    bad=1
done
for f in $(grep -rlE '#include *<sqlite3[a-z]*\.h>' raft lmdb_log 2>/dev/null); do
    echo "layering: $f includes sqlite3.h"
    bad=1
done
for f in sql/*.c sql/*.h; do
    if grep -En '#include *([<"](\.\./)*(raft|ext|lmdb_log)/|<(lmdb|uv)\.h>)' \
        "$f"; then
        echo "layering: $f includes raft/, ext/, lmdb_log/, lmdb.h or uv.h" \
            "(sql/ may use SQLite and libc only)"
        bad=1
    fi
done
for f in sql/*.c sql/*.h ext/*.c ext/*.h ext/*/*.c ext/*/*.h; do
    [ "$f" = ext/raftsql.h ] && continue
    if grep -En '#include *<sqlite3\.h>' "$f"; then
        echo "layering: $f includes sqlite3.h: use <sqlite3ext.h> (the" \
            "loadable extension calls only its host's SQLite)"
        bad=1
    fi
done
for f in sql/*.c ext/*.c ext/*/*.c; do
    grep -qE '\bsqlite3_[a-z0-9_]+ *\(' "$f" || continue
    if ! grep -qE '^SQLITE_EXTENSION_INIT[13]$' "$f"; then
        echo "layering: $f calls SQLite without SQLITE_EXTENSION_INIT3"
        bad=1
    fi
done
for f in $(grep -lE '#include *"raft_internal\.h"' raft/*.c raft/*.h); do
    if grep -En '#include *"(frame|message)\.h"' "$f"; then
        echo "layering: $f is the core and includes the frames or the codec"
        bad=1
    fi
done
for f in ext/runtime/lease_core.c ext/runtime/lease_core.h \
    ext/runtime/staleness_rule.c ext/runtime/staleness_rule.h; do
    if grep -En '#include' "$f" | grep -vE \
        '#include *("(\.\./\.\./raft/[a-z_]+|lease_core|staleness_rule|node_log)\.h"|<(assert|inttypes|stdarg|stdbool|stddef|stdint|stdio|stdlib|string)\.h>)'; then
        echo "layering: $f includes more than raft/ headers and libc" \
            "(the simulation links it beside the core)"
        bad=1
    fi
done
if ! /usr/bin/python3 scripts/ext-rooms.py; then
    bad=1
fi
[ "$bad" -eq 0 ] && echo "layering: ok"
exit "$bad"
