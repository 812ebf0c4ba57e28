#!/usr/bin/env bash
# Scale curve of issue 10: bytes per remembered entity and entities/s for Solus
# and Redis (one key per entity) at 1 M, 10 M and 100 M remembered entities.
# Each size is one `solus compare` run (see docs/benchmarks.md for what it
# measures): the keys are ../shared/data/pypi-names.txt (when present), then
# generated keys (key:<12 digits>) past them up to the size.
#
#   bench/scale.sh                                       # 1 M, 10 M, 100 M; 10 s per throughput figure
#   bench/scale.sh --sizes "100000 1000000" --duration 3  # a quick try
#   bench/scale.sh -- --checkpoint-interval-ms 5000      # flags after -- go to every `solus compare`
#
# Redis runs only while it fits in half of this machine's memory: before each
# size, its need is estimated from the previous size's Redis RSS growth per
# entity (120 B before the first), plus 20%; past half of MemTotal, Redis is
# left out from that size on and the table says where it stopped.
# One Markdown table, also written to target/scale-results.md.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

sizes="1000000 10000000 100000000" duration=10
while [ $# -gt 0 ]; do
    case "$1" in
    --sizes) sizes=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --) shift; break ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "unknown flag $1 (see --help; compare flags go after --)" >&2; exit 2 ;;
    esac
done

ensure_redis
cargo build --release --locked -p solus
keys=../shared/data/pypi-names.txt
input=()
if [ -f "$keys" ]; then
    input=(--input "$keys" --extend-input)
fi
mkdir -p target
half_mem=$(awk '/^MemTotal:/ { printf "%.0f\n", $2 * 1024 / 2 }' /proc/meminfo)
redis_per_entity=120 redis_stopped= rows=()
for size in $sizes; do
    no_redis=()
    if [ -z "$redis_stopped" ]; then
        need=$(awk -v n="$size" -v b="$redis_per_entity" 'BEGIN { printf "%.0f", n * b * 1.2 }')
        if awk -v need="$need" -v half="$half_mem" 'BEGIN { exit !(need > half) }'; then
            redis_stopped="Redis stopped before $size entities: about $((need / 1000000)) MB needed ($redis_per_entity B of RSS per entity + 20%), more than half of this machine's memory ($((${half_mem%.*} / 1000000)) MB)."
        fi
    fi
    [ -n "$redis_stopped" ] && no_redis=(--no-redis)
    echo "=== $size remembered entities ${no_redis[*]} ===" >&2
    json=target/scale-$size.json
    target/release/solus compare "${input[@]}" --key-space "$size" --duration "$duration" "${no_redis[@]}" \
        --markdown "target/scale-$size.md" --json "$json" "$@" >&2
    if [ -z "$redis_stopped" ]; then
        redis_per_entity=$(jq '(.redis.rss / .entities) | ceil' "$json")
    fi
    rows+=("$(jq -r '
        def per(b): (b / .entities * 10 | round / 10);
        def f(x): if x == null then "-" else (x.entities_per_second | round | tostring) end;
        def row(name): (.rows[] | select(.operation == name));
        (row("load (Add, each key once)")) as $load | (row("Check")) as $check | (row("AddIfAbsent")) as $aia |
        [ (.entities | tostring),
          "\(per(.solus.memory + .solus.disk_allocated)) (RSS \(per(.solus.memory)) + disk \(per(.solus.disk_allocated)); \(per(.solus.disk_apparent)) apparent)",
          (if .redis == null then "-" else "\(per(.redis.memory)) (RSS \(per(.redis.rss)))" end),
          (if .redis == null then "-" else "\((.solus.memory + .solus.disk_allocated) / .redis.memory * 100 | round / 100)x" end),
          "\(f($load.solus)) / \(f($load.redis_client))",
          "\(f($check.solus)) / \(f($check.redis_client)) / \(f($check.redis_benchmark))",
          "\(f($aia.solus)) / \(f($aia.redis_client)) / \(f($aia.redis_benchmark))",
          (if .disk_stable then "\(.durable_wait_seconds | round) s" else "\(.durable_wait_seconds | round) s, still changing" end)
        ] | "| " + join(" | ") + " |"' "$json")")
done

out=target/scale-results.md
{
    echo "| remembered entities | Solus bytes/entity | Redis bytes/entity (used_memory) | Solus/Redis | load entities/s, Solus / Redis | Check entities/s, Solus / Redis (our client) / Redis (redis-benchmark) | AddIfAbsent entities/s, Solus / Redis (our client) / Redis (redis-benchmark) | Solus disk read after |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${rows[@]}"
    echo
    echo "One \`solus compare\` per size ($duration s per throughput figure, batch and concurrency as its defaults unless given after --); keys: ${input[1]:-generated} then generated; Solus deduper n = the size, p = 0.01. Per-size tables: target/scale-<size>.md."
    if [ -n "$redis_stopped" ]; then echo "$redis_stopped"; fi
} >"$out"
cat "$out"
