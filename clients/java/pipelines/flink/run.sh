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
label="flink pipeline"
title="the Flink pipeline"
source "$here/../lib.sh"
pipeline_prerequisites

work="$(mktemp -d /tmp/solus-flink-pipeline.XXXXXX)"
solus_pid=""
job_pid=""
cleanup() {
    if [ -n "$job_pid" ]; then kill "$job_pid" 2>/dev/null || true; wait "$job_pid" 2>/dev/null || true; fi
    if [ -n "$solus_pid" ]; then kill -9 "$solus_pid" 2>/dev/null || true; wait "$solus_pid" 2>/dev/null || true; fi
    if [ "${SOLUS_FLINK_KEEP:-}" = 1 ]; then echo "flink pipeline: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

echo "flink pipeline: building the Java client, the Flink adapter and the pipeline (Maven)"
pipeline_build flink "$work/classpath"

addr="127.0.0.1:$(free_port)"
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
        # Down longer than the client's retry budget (8 x (2 s + 1 s) = 24 s), so the kill fails
        # the job for certain: a restart of ~2 s alone is ridden out by the client's retries.
        sleep "${SOLUS_DOWN_SECONDS:-27}"
        start_solus
        touch "$work/solus-restart.done"
        restarted=1
        echo "flink pipeline: solus killed with -9, kept down ${SOLUS_DOWN_SECONDS:-27} s, restarted on the same data and port, answering again after $(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $t0 }") s"
    fi
    sleep 0.2
done
set +e
wait "$job_pid"
rc=$?
set -e
job_pid=""
exit "$rc"
