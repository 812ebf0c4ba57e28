#!/usr/bin/env bash
# Issue 18's Kafka Streams pipeline, end to end: a real Apache Kafka broker (KRaft,
# deploy/kafka/standalone.sh), a real `solus serve` (embedded store, a temporary data directory)
# and a Kafka Streams application with processing.guarantee = exactly_once_v2 that reads
# 1,000,000 records (30% repeats, ids drawn from ../shared/data/npm-downloads.tsv by download
# count) from a 4-partition topic through SolusDedupProcessor into an output topic. While it
# runs the application is killed with -9 twice (restarted each time) and a second instance is
# started (a rebalance). Then the output is read read_committed and counted: every distinct id
# exactly once, lost ids only at the false-positive rate the deduper was sized for. Prints the
# figures and `N passed, N failed`; exits non-zero on a failure; stops what it started.
#
#   clients/java/pipelines/kafka-streams/run.sh [Run options, e.g. --records 200000]
#
# Needs Java 17+ and Maven (without them: one `skipped:` line, exit 0), the Solus binary
# (SOLUS_BIN, else target/release/solus, else target/debug/solus) and ../shared/data beside the
# clone (without it: skipped, or a failure when SOLUS_REQUIRE_SHARED_DATA=1, as CI sets).
# Environment: SOLUS_KAFKA_PIPELINE_KEEP=1 keeps the work directory (logs of the broker, the
# server and each application instance) for a look afterwards.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../../.." && pwd)"
names="$repo/../shared/data/npm-downloads.tsv"

if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
    echo "skipped: the Kafka Streams pipeline needs java (17+) and mvn on the PATH"
    exit 0
fi
if [ ! -f "$names" ]; then
    if [ "${SOLUS_REQUIRE_SHARED_DATA:-}" = 1 ]; then
        echo "kafka pipeline: $names is missing (SOLUS_REQUIRE_SHARED_DATA=1)" >&2
        exit 1
    fi
    echo "skipped: the Kafka Streams pipeline needs $names (../shared/data beside the clone)"
    exit 0
fi
solus="${SOLUS_BIN:-}"
if [ -z "$solus" ]; then
    for c in "$repo/target/release/solus" "$repo/target/debug/solus"; do
        if [ -x "$c" ]; then solus="$c"; break; fi
    done
fi
if [ -z "$solus" ] || [ ! -x "$solus" ]; then
    echo "kafka pipeline: no Solus binary: run \`cargo build --release\` at $repo or set SOLUS_BIN" >&2
    exit 1
fi

t_start=$(date +%s)
work="$(mktemp -d /tmp/solus-kafka-pipeline.XXXXXX)"
solus_pid=""
run_pid=""
cleanup() {
    # The orchestrator first (its instances are listed in children.pids), then each instance.
    if [ -n "$run_pid" ]; then kill "$run_pid" 2>/dev/null || true; wait "$run_pid" 2>/dev/null || true; fi
    if [ -f "$work/children.pids" ]; then
        while read -r pid; do kill -9 "$pid" 2>/dev/null || true; done <"$work/children.pids"
    fi
    if [ -n "$solus_pid" ]; then kill "$solus_pid" 2>/dev/null || true; wait "$solus_pid" 2>/dev/null || true; fi
    "$repo/deploy/kafka/standalone.sh" stop "$work/kafka" >/dev/null 2>&1 || true
    if [ "${SOLUS_KAFKA_PIPELINE_KEEP:-}" = 1 ]; then echo "kafka pipeline: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# One reactor: this checkout's client and adapter, not whatever another checkout last put in
# ~/.m2 under the same SNAPSHOT version (a concurrent install there once swapped the adapter's
# jar under a running instance).
echo "kafka pipeline: building the Java client, the Kafka Streams adapter and the pipeline (Maven)"
(cd "$repo/clients/java" && mvn -B -q -P pipelines -pl pipelines/kafka-streams -am package dependency:build-classpath \
    -DskipTests -Dmdep.outputFile="$work/classpath" >/dev/null)

kafka_port="$(free_port)"
"$repo/deploy/kafka/standalone.sh" start "$work/kafka" "$kafka_port"

port="$(free_port)"
addr="127.0.0.1:$port"
SOLUS__SERVER__LISTEN="$addr" SOLUS__METRICS__LISTEN= SOLUS__STORAGE__EMBEDDED__PATH="$work/data" NO_COLOR=1 \
    "$solus" serve >>"$work/solus.log" 2>&1 &
solus_pid=$!
for _ in $(seq 1 300); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
    if ! kill -0 "$solus_pid" 2>/dev/null; then
        echo "kafka pipeline: solus serve exited during start-up; its log:" >&2
        tail -30 "$work/solus.log" >&2
        exit 1
    fi
    sleep 0.1
done
echo "kafka pipeline: $("$solus" --version) at $addr; Kafka on 127.0.0.1:$kafka_port"

set +e
java -Xmx512m -XX:+UseSerialGC -cp "$here/target/classes:$(cat "$work/classpath")" dev.solus.pipelines.kafka.Run \
    --bootstrap "127.0.0.1:$kafka_port" --solus "$addr" --names "$names" --work "$work" "$@" &
run_pid=$!
wait "$run_pid"
rc=$?
set -e
run_pid=""
echo "kafka pipeline: whole run (build, broker, server, pipeline) $(($(date +%s) - t_start)) s"
if [ "$rc" -ne 0 ]; then
    for f in "$work"/*.log; do
        [ -f "$f" ] || continue
        echo "---- last lines of $f" >&2
        tail -n 15 "$f" >&2
    done
fi
exit "$rc"
