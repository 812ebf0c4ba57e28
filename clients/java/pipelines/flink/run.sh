#!/usr/bin/env bash
# Issue 18's Flink pipeline, end to end: a real `solus serve` (embedded store, a temporary data
# directory) and a checkpointed Flink job on Flink's own MiniCluster that reads 1,000,000 records
# (30% repeats, ids drawn from ../shared/data/npm-downloads.tsv by download count) through
# SolusDedupFunction into an exactly-once file sink. The job fails twice while it runs: an
# injected exception at one record, and Solus killed with -9 and started again on the same data
# directory and port (this script does it when the job asks, through a file). Then the committed
# output is counted: every distinct id exactly once, lost ids only at the false-positive rate
# the deduper was sized for. Prints the figures and `N passed, N failed`; exits non-zero on a
# failure; stops what it started.
#
#   clients/java/pipelines/flink/run.sh [FlinkPipeline options, e.g. --records 200000]
#
# Needs Java 17+ and Maven (without them: one `skipped:` line, exit 0), the Solus binary
# (SOLUS_BIN, else target/release/solus, else target/debug/solus) and ../shared/data beside the
# clone (without it: skipped, or a failure when SOLUS_REQUIRE_SHARED_DATA=1, as CI sets).
# Environment: SOLUS_FLINK_HEAP (the job's JVM heap, default 1g), SOLUS_FLINK_KEEP=1 keeps the
# work directory (server log, committed output) for a look afterwards.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../../.." && pwd)"
names="$repo/../shared/data/npm-downloads.tsv"

if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
    echo "skipped: the Flink pipeline needs java (17+) and mvn on the PATH"
    exit 0
fi
if [ ! -f "$names" ]; then
    if [ "${SOLUS_REQUIRE_SHARED_DATA:-}" = 1 ]; then
        echo "flink pipeline: $names is missing (SOLUS_REQUIRE_SHARED_DATA=1)" >&2
        exit 1
    fi
    echo "skipped: the Flink pipeline needs $names (../shared/data beside the clone)"
    exit 0
fi
solus="${SOLUS_BIN:-}"
if [ -z "$solus" ]; then
    for c in "$repo/target/release/solus" "$repo/target/debug/solus"; do
        if [ -x "$c" ]; then solus="$c"; break; fi
    done
fi
if [ -z "$solus" ] || [ ! -x "$solus" ]; then
    echo "flink pipeline: no Solus binary: run \`cargo build --release\` at $repo or set SOLUS_BIN" >&2
    exit 1
fi

work="$(mktemp -d /tmp/solus-flink-pipeline.XXXXXX)"
solus_pid=""
job_pid=""
cleanup() {
    if [ -n "$job_pid" ]; then kill "$job_pid" 2>/dev/null || true; wait "$job_pid" 2>/dev/null || true; fi
    if [ -n "$solus_pid" ]; then kill -9 "$solus_pid" 2>/dev/null || true; wait "$solus_pid" 2>/dev/null || true; fi
    if [ "${SOLUS_FLINK_KEEP:-}" = 1 ]; then echo "flink pipeline: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# One reactor: this checkout's client and adapter, not whatever another checkout last put in
# ~/.m2 (a concurrent install there once swapped the client jar under a running job).
echo "flink pipeline: building the Java client, the Flink adapter and the pipeline (Maven)"
(cd "$repo/clients/java" && mvn -B -q -P pipelines -pl pipelines/flink -am package dependency:build-classpath \
    -DskipTests -Dmdep.outputFile="$work/classpath" >/dev/null)

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
addr="127.0.0.1:$port"
# Ready = it answers a real RPC: after a kill -9 the port can accept connections while the
# store is still recovering (a minute with ~400,000 remembered record ids on a loaded machine).
start_solus() {
    env -u SOLUS_BIN -u SOLUS_FLINK_KEEP -u SOLUS_FLINK_HEAP -u SOLUS_REQUIRE_SHARED_DATA \
        SOLUS__SERVER__LISTEN="$addr" SOLUS__METRICS__LISTEN= SOLUS__STORAGE__EMBEDDED__PATH="$work/data" NO_COLOR=1 \
        "$solus" serve >>"$work/solus.log" 2>&1 &
    solus_pid=$!
    for _ in $(seq 1 300); do
        if timeout 10 "$solus" deduper list --addr "$addr" --client pipeline >/dev/null 2>&1; then return 0; fi
        if ! kill -0 "$solus_pid" 2>/dev/null; then break; fi
        sleep 0.5
    done
    echo "flink pipeline: solus serve did not answer on $addr; its log:" >&2
    tail -30 "$work/solus.log" >&2
    return 1
}
start_solus
"$solus" deduper create --addr "$addr" --client pipeline --name flink -n 1000000 -p 0.001 --expiry-seconds 3600 >/dev/null
echo "flink pipeline: $("$solus" --version) at $addr; deduper pipeline/flink, n = 1,000,000, p = 0.001"

# The Flink job, in the background, so this script can restart Solus when the job asks.
java -Xmx"${SOLUS_FLINK_HEAP:-1g}" -XX:+UseParallelGC -XX:ParallelGCThreads=2 \
    --add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.lang=ALL-UNNAMED \
    -cp "$here/target/classes:$(cat "$work/classpath")" dev.solus.pipelines.flink.FlinkPipeline \
    --addr "$addr" --names "$names" --work "$work" "$@" &
job_pid=$!

restarted=""
while kill -0 "$job_pid" 2>/dev/null; do
    if [ -z "$restarted" ] && [ -f "$work/solus-restart.request" ]; then
        t0=$(date +%s.%N)
        kill -9 "$solus_pid"
        wait "$solus_pid" 2>/dev/null || true
        start_solus
        touch "$work/solus-restart.done"
        restarted=1
        echo "flink pipeline: solus killed with -9, restarted on the same data and port, answering again after $(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $t0 }") s"
    fi
    sleep 0.2
done
set +e
wait "$job_pid"
rc=$?
set -e
job_pid=""
exit "$rc"
