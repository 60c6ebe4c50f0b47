#!/bin/sh
# check-install.sh - the installed package works for a program outside the
# tree: `make install` into a temporary PREFIX puts every
# file in place; the static library exports only the public API; the
# public header compiles alone in C and C++ (-Wall -Wextra -Werror
# -pedantic); examples/embedded.c, copied to a temporary directory outside
# the tree, builds with only `cc app.c $(pkg-config --cflags --libs
# raftsql)` and runs (a one-node cluster: write, read back, error codes);
# a DESTDIR install stages the same files under DESTDIR with the .pc
# naming PREFIX; `make uninstall` removes every file. The temporary
# directories are removed at the end, also on failure.
# Usage: scripts/check-install.sh (from the top of the tree; `make
# check-install` runs it with MAKE and PYTHON set).
set -u
MAKE=${MAKE:-make}
PYTHON=${PYTHON:-/usr/bin/python3}
top=$(pwd)
tmp=$(mktemp -d /tmp/raftsql-check-install-XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
prefix=$tmp/prefix
fail() {
    echo "check-install: $*"
    exit 1
}

$MAKE -s --no-print-directory install PREFIX="$prefix" >"$tmp/install.log" \
    2>&1 || { cat "$tmp/install.log"; fail "make install failed"; }
for f in lib/libraftsql.a lib/raftsql.so include/raftsql.h \
    lib/pkgconfig/raftsql.pc bin/raftsql-node; do
    [ -f "$prefix/$f" ] || fail "make install did not install $f"
done

# Only sqlite3_raftsql_init and raftsql_* are global in the library.
extra=$(nm -g --defined-only "$prefix/lib/libraftsql.a" 2>/dev/null |
    awk 'NF == 3 {print $3}' |
    grep -vE '^(sqlite3_raftsql_init|raftsql_[a-z_0-9]+)$')
[ -z "$extra" ] || fail "libraftsql.a exports internal symbols:" $extra

# The header alone, in C and in C++.
mkdir -p "$tmp/hdr" && cd "$tmp/hdr" || exit 1
printf '#include <raftsql.h>\nint main(void) { return RAFTSQL_IS_OWN_CODE(RAFTSQL_NOT_APPLIED) ? 0 : 1; }\n' >h.c
cp h.c h.cc
cc -std=c99 -Wall -Wextra -Werror -pedantic -I"$prefix/include" -c h.c ||
    fail "raftsql.h does not compile alone as C"
c++ -std=c++11 -Wall -Wextra -Werror -pedantic -I"$prefix/include" \
    -c h.cc || fail "raftsql.h does not compile alone as C++"

# The example, outside the tree, with pkg-config only.
mkdir -p "$tmp/app" && cp "$top/examples/embedded.c" "$tmp/app/app.c" &&
    cd "$tmp/app" || exit 1
PKG_CONFIG_PATH=$prefix/lib/pkgconfig
export PKG_CONFIG_PATH
flags=$(pkg-config --cflags --libs raftsql) || fail "pkg-config raftsql"
# shellcheck disable=SC2086
cc app.c $flags -o app || fail "cc app.c $flags failed"
port=$($PYTHON -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
if ! ./app "$tmp/app/app.db" "$port" >run.log 2>&1; then
    cat run.log
    fail "the example exited with an error"
fi
grep -qx ok run.log || { cat run.log; fail "the example did not say ok"; }
unset PKG_CONFIG_PATH
cd "$top" || exit 1

# DESTDIR stages under it; the .pc names PREFIX.
$MAKE -s --no-print-directory install PREFIX=/opt/raftsql \
    DESTDIR="$tmp/stage" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log"; fail "make install DESTDIR= failed"; }
[ -f "$tmp/stage/opt/raftsql/lib/libraftsql.a" ] ||
    fail "DESTDIR: no $tmp/stage/opt/raftsql/lib/libraftsql.a"
grep -qx 'prefix=/opt/raftsql' "$tmp/stage/opt/raftsql/lib/pkgconfig/raftsql.pc" ||
    fail "DESTDIR: the .pc does not name prefix=/opt/raftsql"

$MAKE -s --no-print-directory uninstall PREFIX="$prefix" ||
    fail "make uninstall failed"
left=$(find "$prefix" -type f)
[ -z "$left" ] || fail "make uninstall left" $left
echo "check-install: ok (installed, header alone in C and C++, example" \
    "built with pkg-config outside the tree and run, DESTDIR, uninstall)"
