#!/bin/sh
# deb-deps.sh - install what building the Debian packages needs, only
# what is missing: dpkg-dev (dpkg-buildpackage), debhelper, the packages
# named as arguments (lintian for `make deb`), and the Build-Depends of
# debian/control (apt-get build-dep). A quick no-op when everything is
# present.
# Usage: scripts/deb-deps.sh [PACKAGE...]   (from the top of the tree;
# exit 1, saying what is missing, when apt-get cannot install it)
set -u
missing=""
for p in dpkg-dev debhelper "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
        grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
if [ -z "$missing" ] && dpkg-checkbuilddeps >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    sudo=sudo
else
    sudo=
fi
export DEBIAN_FRONTEND=noninteractive
apt="$sudo apt-get -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300"
echo "deb-deps: installing:${missing:- (none)} and the Build-Depends of" \
    "debian/control"
$sudo apt-get update -qq -o DPkg::Lock::Timeout=300 || true
if [ -n "$missing" ]; then
    # shellcheck disable=SC2086
    $apt install $missing || {
        echo "deb-deps: apt-get could not install:$missing"
        exit 1
    }
fi
$apt build-dep ./ || {
    echo "deb-deps: apt-get build-dep ./ failed:" \
        "$(dpkg-checkbuilddeps 2>&1)"
    exit 1
}
