#!/bin/sh
# deb-build.sh - build the Debian binary packages from the working tree
# with dpkg-buildpackage -us -uc -b, putting the .deb, .buildinfo and
# .changes files in OUTDIR instead of the tree's parent directory; the
# objects go to debian/build (debian/rules), never to build/. Lists each
# package's files (dpkg -c) on stdout; a failure goes to stderr.
# DEB_BUILD_OPTIONS is passed on, with parallel=<cores> added when it
# names none.
# Usage: scripts/deb-build.sh OUTDIR   (from the top of the tree; exit
# status of dpkg-buildpackage, its log in OUTDIR/build.log)
set -u
out=${1:?usage: scripts/deb-build.sh OUTDIR}
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 1
rm -f "$out"/*.deb "$out"/*.buildinfo "$out"/*.changes
opts=${DEB_BUILD_OPTIONS:-}
case " $opts " in
*" parallel="*) ;;
*) opts="$opts parallel=$(nproc)" ;;
esac
DEB_BUILD_OPTIONS=${opts# }
RAFTSQL_DEB_DIR=$out
export DEB_BUILD_OPTIONS RAFTSQL_DEB_DIR
ver=$(dpkg-parsechangelog -S Version)
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
echo "deb-build: dpkg-buildpackage -us -uc -b (DEB_BUILD_OPTIONS=$opts)"
if ! dpkg-buildpackage -us -uc -b \
    --buildinfo-option=-u"$out" --changes-option=-u"$out" \
    --buildinfo-file="$out/raftsql_${ver}_$arch.buildinfo" \
    --changes-file="$out/raftsql_${ver}_$arch.changes" \
    >"$out/build.log" 2>&1; then
    tail -n 40 "$out/build.log" >&2
    echo "deb-build: dpkg-buildpackage failed (log: $out/build.log)" >&2
    exit 1
fi
for deb in "$out"/*.deb; do
    echo "deb-build: $deb"
    dpkg -c "$deb" |
        awk '{print "    " $1 " " $2 " " $6 ($7 ? " " $7 " " $8 : "")}'
done
