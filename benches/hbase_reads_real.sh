#!/usr/bin/env bash
# Issue 20's read benchmark on a real HBase: a Solus server (every HBase
# setting at its default but the address, plus any SOLUS__* you export) and
# `solus bench` driving AddIfAbsent, CheckAbsence and Add on a fresh deduper
# (n = 10^6, p = 0.01: k = 7, 10 shards), random keys over 10^7, batch
# BATCH, concurrency 4, SECONDS s each. Prints one JSON summary per run.
#
#   benches/hbase_reads_real.sh SOLUS_BIN THRIFT_ADDR DEDUPER [BATCH] [SECONDS]
#
# OPS="check" runs only those ops (default "add-if-absent check add"); an
# existing DEDUPER is used as it is (e.g. filled by an earlier run).
#
# Start HBase first, e.g.
#   SOLUS_HBASE_HEAP=2g SOLUS_HBASE_THRIFT_HEAP=1g deploy/hbase/standalone.sh start /tmp/hb 9090
# and use a new DEDUPER name per run (an empty filter each time).
set -euo pipefail
bin="$1" thrift="$2" deduper="$3" batch="${4:-1000}" seconds="${5:-20}"
port=$((20000 + RANDOM % 20000))
export SOLUS__STORAGE__BACKEND=hbase SOLUS__STORAGE__HBASE__ADDRESSES="$thrift"
export SOLUS__SERVER__LISTEN="127.0.0.1:$port" SOLUS__METRICS__LISTEN=""
log="$(mktemp /tmp/solus-bench-server.XXXXXX.log)"
"$bin" serve >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 1 240); do
  (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.5
done
sleep 2
for op in ${OPS:-add-if-absent check add}; do
  echo "== $op batch $batch ($deduper)"
  "$bin" bench --addr "127.0.0.1:$port" --op "$op" --batch "$batch" --concurrency 4 \
    --key-space 10000000 --expected-insertions 1000000 --false-positive-rate 0.01 \
    --deduper "$deduper" --duration "$seconds" --json --quiet || echo "bench failed"
done
