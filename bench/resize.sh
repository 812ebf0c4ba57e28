#!/usr/bin/env bash
# The "Done when" run of issue 22 (online resize), on the embedded store:
# n = 100,000, p = 0.01, expiry 60 s, 500,000 distinct names of
# ../shared/data/pypi-names.txt over three expiry windows (100,000; then
# 400,000 new and the first 100,000 again; then none); one deduper never
# resized, one resized by hand to 1,000,000 at load 1.0, one by the automatic policy.
# Prints a table over time (FPR of never-added probes, false negatives among
# names within their TTL, generations) and fails on any false negative.
# About 4 minutes plus a release build; runs at nice 19 (the machine is shared).
#
#   bench/resize.sh                          # defaults
#   RESIZE_BENCH_EXPIRY_S=30 bench/resize.sh # shorter windows
#
# Knobs: RESIZE_BENCH_NAMES (default ../shared/data/pypi-names.txt), RESIZE_BENCH_N, RESIZE_BENCH_EXPIRY_S, RESIZE_BENCH_RESIZE_TO,
# RESIZE_BENCH_PROBES, RESIZE_BENCH_SAMPLE_S (see tests/resize_bench.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
exec nice -n 19 cargo test --release --test resize_bench -- --ignored --nocapture --test-threads 1
