#!/usr/bin/env bash
# Solus (embedded store, release build) against Redis (one key per entity,
# pipelined SET NX PX) on this machine, loopback only, bounded in time.
#
#   bench/compare.sh [extra `solus compare` flags]     e.g. --duration 5 --key-space 500000
#
# Installs Debian's redis-server when missing (needs root and the Debian
# registry), builds Solus in release mode, then runs `solus compare`, which
# starts both servers on free 127.0.0.1 ports, drives them with the same keys,
# batch size and concurrency, prints one table, and stops both.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
    echo "redis-server not found: installing Debian's redis-server" >&2
    if [ "$(id -u)" -ne 0 ]; then
        echo "run as root, or install redis-server yourself (apt-get install redis-server)" >&2
        exit 1
    fi
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
    # The package starts a system service on port 6379; compare starts its own.
    (systemctl stop redis-server 2>/dev/null || service redis-server stop 2>/dev/null || true) >/dev/null
fi

cargo build --release --locked -p solus
keys=../shared/data/pypi-names.txt
input=()
if [ -f "$keys" ]; then
    input=(--input "$keys")
fi
exec target/release/solus compare "${input[@]}" --markdown target/compare-results.md "$@"
