# What flink/run.sh and kafka-streams/run.sh share; sourced (not run) after `set -euo pipefail`,
# with `label` (the prefix of the script's messages, e.g. "flink pipeline") and `title` (e.g.
# "the Flink pipeline") set. Defines repo, names (the names file) and the functions below.

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
names="$repo/../shared/data/npm-downloads.tsv"

# Exits 0 with one `skipped:` line without java and mvn or without the names file (exit 1 for the
# latter when SOLUS_REQUIRE_SHARED_DATA=1); exits 1 without a Solus binary. Sets solus: SOLUS_BIN,
# else release, else debug under $CARGO_TARGET_DIR (default target/).
pipeline_prerequisites() {
    if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
        echo "skipped: $title needs java (17+) and mvn on the PATH"
        exit 0
    fi
    if [ ! -f "$names" ]; then
        if [ "${SOLUS_REQUIRE_SHARED_DATA:-}" = 1 ]; then
            echo "$label: $names is missing (SOLUS_REQUIRE_SHARED_DATA=1)" >&2
            exit 1
        fi
        echo "skipped: $title needs $names (../shared/data beside the clone)"
        exit 0
    fi
    solus="${SOLUS_BIN:-}"
    local target="${CARGO_TARGET_DIR:-$repo/target}"
    if [ -z "$solus" ]; then
        for c in "$target/release/solus" "$target/debug/solus"; do
            if [ -x "$c" ]; then solus="$c"; break; fi
        done
    fi
    if [ -z "$solus" ] || [ ! -x "$solus" ]; then
        echo "$label: no Solus binary in $target: run \`cargo build\` (or \`cargo build --release\`) at $repo, or set SOLUS_BIN" >&2
        exit 1
    fi
}

# pipeline_build MODULE CLASSPATH_FILE: builds pipelines/MODULE in one reactor with the modules
# it uses (this checkout's client and adapter, not whatever another checkout last put in ~/.m2
# under the same SNAPSHOT version: a concurrent install there once swapped a jar under a running
# job) and writes its runtime classpath to CLASSPATH_FILE.
pipeline_build() {
    (cd "$repo/clients/java" && mvn -B -q -P pipelines -pl "pipelines/$1" -am package dependency:build-classpath \
        -DskipTests -Dmdep.outputFile="$2" >/dev/null)
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start_solus: `solus serve` on $addr with the embedded store in $work/data, its log appended to
# $work/solus.log; sets solus_pid. Returns when it answers a real RPC: after a kill -9 the port
# can accept connections while the store is still recovering (a minute with ~400,000 remembered
# record ids on a loaded machine). Each probe is bounded (timeout 10 s), so a server that
# accepts and never answers fails the run instead of hanging it. The scripts' own SOLUS_*
# variables are not passed to the server (it warns about them).
start_solus() {
    env -u SOLUS_BIN -u SOLUS_REQUIRE_SHARED_DATA -u SOLUS_FLINK_KEEP -u SOLUS_FLINK_HEAP -u SOLUS_DOWN_SECONDS -u SOLUS_KAFKA_PIPELINE_KEEP \
        SOLUS__SERVER__LISTEN="$addr" SOLUS__METRICS__LISTEN= SOLUS__STORAGE__EMBEDDED__PATH="$work/data" NO_COLOR=1 \
        "$solus" serve >>"$work/solus.log" 2>&1 &
    solus_pid=$!
    for _ in $(seq 1 300); do
        if timeout 10 "$solus" deduper list --addr "$addr" --client pipeline >/dev/null 2>&1; then return 0; fi
        if ! kill -0 "$solus_pid" 2>/dev/null; then break; fi
        sleep 0.5
    done
    echo "$label: solus serve did not answer on $addr; its log:" >&2
    tail -30 "$work/solus.log" >&2
    return 1
}
