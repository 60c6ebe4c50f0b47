#!/bin/sh
# deps.sh - install the Debian packages raftsql needs, only those missing.
# Usage: scripts/deps.sh [PACKAGE...]   (a quick no-op when everything is
# present; PACKAGEs are wanted beside the project's own: a benchmark's
# extras, as bench/scale.sh's python3-matplotlib, never make test's)
set -eu

pkgs="gcc g++ make pkg-config sqlite3 libsqlite3-dev libuv1-dev liblmdb-dev \
libcmocka-dev libxxhash-dev libjansson-dev libssl-dev openssl python3 \
clang-format tmux clang libclang-rt-14-dev iproute2 \
python3-django python3-sqlalchemy \
python3-venv python3-setuptools-whl python3-wheel-whl \
libmicrohttpd-dev python3-prometheus-client $*"

missing=""
for p in $pkgs; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
        grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0

echo "deps: installing:$missing"
if [ "$(id -u)" -ne 0 ]; then
    sudo=sudo
else
    sudo=
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# shellcheck disable=SC2086
$sudo apt-get install -y -qq --no-install-recommends $missing
