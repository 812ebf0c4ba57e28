#!/usr/bin/env bash
# Solus on a real Apache HBase (standalone, deploy/hbase/standalone.sh), release
# build: the 500,000-event replay of ../shared/data/npm-downloads.tsv (false
# negatives, false-positive rate, events/s), Thrift calls per request counted
# by HBase's own Thrift server (/jmx), and AddIfAbsent throughput with the
# cross-replica guard on and off. Prints a summary; figures go to docs/hbase.md.
#
#   bash bench/real-hbase.sh                # starts (and stops) its own HBase
#   HBASE_DIR=/tmp/hbase bash bench/real-hbase.sh   # or uses one started with
#     SOLUS_HBASE_THRIFT_INFO_PORT=P deploy/hbase/standalone.sh start /tmp/hbase PORT
#
# Environment: EVENTS (500000), N (22000: the replay's distinct keys, so the
# false-positive rate is measured near design load), P (0.01), BENCH_SECONDS (10).
set -euo pipefail
cd "$(dirname "$0")/.."

events="${EVENTS:-500000}"
n="${N:-22000}"
p="${P:-0.01}"
seconds="${BENCH_SECONDS:-10}"
data=../shared/data/npm-downloads.tsv
[[ -f "$data" ]] || { echo "bench/real-hbase.sh: $data is missing (../shared beside the repository)" >&2; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

cargo build --release --quiet
solus=target/release/solus
work="$(mktemp -d /tmp/solus-real-hbase-bench.XXXXXX)"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    [[ -n "${own_hbase:-}" ]] && deploy/hbase/standalone.sh stop "$own_hbase" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

if [[ -n "${HBASE_DIR:-}" ]]; then
    dir="$HBASE_DIR"
else
    dir="$work/hbase"
    own_hbase="$dir"
    SOLUS_HBASE_THRIFT_INFO_PORT="$(free_port)" deploy/hbase/standalone.sh start "$dir" "$(free_port)"
fi
thrift_port="$(cat "$dir/thrift.port")"
info_port="$(tr ' ' '\n' <"/proc/$(cat "$dir/thrift.pid")/cmdline" 2>/dev/null | tr '\0' '\n' | grep -A1 -- '--infoport' | tail -n 1 || true)"

# Thrift calls per method so far, from the Thrift server's metrics (JMX is
# refreshed every 10 s, hence the waits around each phase).
thrift_calls() {
    [[ -n "$info_port" ]] || { echo "{}"; return; }
    curl -s "http://127.0.0.1:$info_port/jmx?qry=Hadoop:service=HBase,name=Thrift,sub=ThriftOne" |
        python3 -c 'import json,sys; b=json.load(sys.stdin)["beans"][0]; print(json.dumps({k[:-8]: v for k, v in b.items() if k.endswith("_num_ops") and not k.startswith(("PauseTime", "TimeInQueue", "BatchGet", "BatchMutate", "ThriftCall", "SlowThriftCall"))}))'
}

serve() { # GUARD: starts a server (in this shell, so cleanup can stop it); sets addr
    local port guard="$1" pid
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done # one server at a time
    port="$(free_port)"
    SOLUS__SERVER__LISTEN="127.0.0.1:$port" SOLUS__METRICS__LISTEN="" SOLUS__STORAGE__BACKEND=hbase \
        SOLUS__STORAGE__HBASE__ADDRESSES="127.0.0.1:$thrift_port" SOLUS__STORAGE__HBASE__ADD_IF_ABSENT_GUARD="$guard" \
        RUST_LOG=warn "$solus" serve >"$work/serve-$guard.log" 2>&1 &
    pids+=($!)
    addr="127.0.0.1:$port"
    for _ in $(seq 1 100); do
        "$solus" deduper list --addr "$addr" --client probe >/dev/null 2>&1 && return
        sleep 0.2
    done
    echo "bench/real-hbase.sh: solus serve did not start (log: $work/serve-$guard.log)" >&2
    exit 1
}

serve true
sleep 11; before="$(thrift_calls)"
run="$(date +%s)" # fresh dedupers: a reused one would already hold an earlier run's entities
"$solus" replay --addr "$addr" --input "$data" --events "$events" --deduper "replay-$run" --expected-insertions "$n" \
    --false-positive-rate "$p" --json >"$work/replay.json"
sleep 11; after="$(thrift_calls)"
echo "== replay of $events events, n = $n, p = $p (release, guard on):"
cat "$work/replay.json"; echo
echo "== Thrift calls during the replay (HBase Thrift server metrics):"
python3 -c 'import json,sys; a=json.loads(sys.argv[1]); b=json.loads(sys.argv[2]); print({k: b[k]-a.get(k,0) for k in b if b[k]-a.get(k,0)})' "$before" "$after"

for guard in true false; do
    serve "$guard"
    echo "== solus bench AddIfAbsent, guard $guard (batch 1000, concurrency 4, ${seconds} s):"
    "$solus" bench --addr "$addr" --op add-if-absent --deduper "bench-$guard-$run" --batch 1000 --concurrency 4 \
        --duration "$seconds" --json | tail -n 1
done
serve true
echo "== solus bench CheckAbsence (batch 1000, concurrency 4, ${seconds} s):"
"$solus" bench --addr "$addr" --op check --deduper "bench-true-$run" --batch 1000 --concurrency 4 \
    --duration "$seconds" --json | tail -n 1
