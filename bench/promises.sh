#!/usr/bin/env bash
# The long run of issue 51: random histories of concurrent clients against a
# real server (tests/promises.rs) while a nemesis resizes, bursts, changes the
# expiry and (embedded) steps the clock, checked against the model of the
# promises (promises/, crate solus-promises). Seeds run one after another, a
# fresh server and store each, for the given minutes; prints each seed's
# figures, every violation with its shrunk history, and a summary; fails on
# any violation. Release build (about 5 minutes the first time).
#
#   bench/promises.sh [BACKEND] [MINUTES] [FIRST_SEED]
#       BACKEND: embedded (default), emulator, real-hbase (two replicas on the
#       HBase that SOLUS_REAL_HBASE_DIR names, a DIR deploy/hbase/standalone.sh
#       started; else one this script starts in a temporary directory and stops)
#       MINUTES: default 30; FIRST_SEED: default 1
#
# Knobs: PROMISES_SECONDS (per seed, default 60), PROMISES_CLOCK_STEP_MS.
set -euo pipefail
cd "$(dirname "$0")/.."
backend="${1:-embedded}" minutes="${2:-30}" seed="${3:-1}"
if [[ "$backend" == real-hbase && -z "${SOLUS_REAL_HBASE_DIR:-}" ]]; then
    own_hbase="$(mktemp -d /tmp/solus-promises-hbase.XXXXXX)"
    trap 'deploy/hbase/standalone.sh stop "$own_hbase/hbase" >/dev/null 2>&1 || true; rm -rf "$own_hbase"' EXIT
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    deploy/hbase/standalone.sh start "$own_hbase/hbase" "$port"
    export SOLUS_REAL_HBASE_DIR="$own_hbase/hbase"
fi
PROMISES_BACKEND="$backend" PROMISES_MINUTES="$minutes" PROMISES_SEEDS="$seed" \
    cargo test --release --test promises -- --nocapture
