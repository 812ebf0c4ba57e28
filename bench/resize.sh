#!/usr/bin/env bash
# The "Done when" run of issue 22 (online resize), on the embedded store or
# real HBase: n = 100,000, p = 0.01, expiry 60 s, 500,000 distinct names of
# ../shared/data/pypi-names.txt over three expiry windows (100,000; then
# 400,000 new and the first 100,000 again; then none); one deduper never
# resized, one resized by hand to 1,000,000 at load 1.0, one by the automatic policy.
# Prints a table over time (FPR of never-added probes, false negatives among
# names within their TTL, generations) and fails on any false negative.
# About 4 minutes plus a release build; runs at nice 19 (the machine is shared).
#
#   bench/resize.sh                          # defaults (embedded store)
#   RESIZE_BENCH_EXPIRY_S=30 bench/resize.sh # shorter windows
#   RESIZE_BENCH_BACKEND=hbase bench/resize.sh
#       # on real HBase: the one SOLUS_REAL_HBASE_DIR names (a DIR that
#       # deploy/hbase/standalone.sh started), else one this script starts
#       # in a temporary directory and stops at the end
#
# Knobs: RESIZE_BENCH_BACKEND (embedded | hbase), RESIZE_BENCH_NAMES (default ../shared/data/pypi-names.txt),
# RESIZE_BENCH_N, RESIZE_BENCH_EXPIRY_S, RESIZE_BENCH_RESIZE_TO,
# RESIZE_BENCH_PROBES, RESIZE_BENCH_SAMPLE_S (see tests/resize_bench.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${RESIZE_BENCH_BACKEND:-embedded}" == hbase && -z "${SOLUS_REAL_HBASE_DIR:-}" ]]; then
    own_hbase="$(mktemp -d /tmp/solus-resize-bench-hbase.XXXXXX)"
    trap 'deploy/hbase/standalone.sh stop "$own_hbase/hbase" >/dev/null 2>&1 || true; rm -rf "$own_hbase"' EXIT
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    deploy/hbase/standalone.sh start "$own_hbase/hbase" "$port"
    export SOLUS_REAL_HBASE_DIR="$own_hbase/hbase"
fi
nice -n 19 cargo test --release --test resize_bench -- --ignored --nocapture --test-threads 1
