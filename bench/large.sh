#!/usr/bin/env bash
# The large-deduper run of issue 10, one run, every system on the same key space:
# Solus (release build, embedded store) against Redis `SET NX PX` / `EXISTS` and
# RedisBloom `BF.ADD` / `BF.EXISTS`, both driven by redis-benchmark (pipeline =
# batch, connections = concurrency, random keys key:__rand_int__ over the key space).
#
#   bench/large.sh                                   # n = 5x10^7, keys over 10^8, 10 s per figure
#   bench/large.sh --n 1000000 --duration 3          # a quick try
#
# Flags: --n N (deduper n and RedisBloom capacity, 50000000), --key-space K
# (2 n, so 100000000 by default: a quick try with a smaller --n keeps its deduper
# within its sizing), --batch B (1000), --concurrency C (4), --duration S (10),
# --half-duration S (half-peak runs; default max(S, 2 checkpoint intervals + 1 s),
# so a checkpoint runs inside them), --p P (0.01), --no-redisbloom.
# Checkpoint interval: $SOLUS__STORAGE__EMBEDDED__CHECKPOINT_INTERVAL_MS when set
# (passed to the server), else Solus's default (30000 ms).
#
# Solus figures (`solus bench`): AddIfAbsent and CheckAbsence at full speed,
# then each paced to half of its peak requests/s (p99 and max there).
# Disk bytes written per entity added: /proc/<solus pid>/io write_bytes before
# the full-speed AddIfAbsent run and after it plus one checkpoint interval,
# divided by the entities sent in that run. A checkpoint runs only once the
# journal holds a fifth of the dirty pages' bytes, so the pages dirtied last
# stay covered by the journal (already counted) until later traffic meets that
# rule; their write is bounded by it (at most 5 page bytes per journal byte). Prints one Markdown table, also written to target/large-results.md.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

n=50000000 key_space= batch=1000 concurrency=4 duration=10 half_duration= p=0.01 bloom_wanted=1
while [ $# -gt 0 ]; do
    case "$1" in
    --n) n=$2; shift 2 ;;
    --key-space) key_space=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --half-duration) half_duration=$2; shift 2 ;;
    --p) p=$2; shift 2 ;;
    --no-redisbloom) bloom_wanted=; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "unknown flag $1 (see --help)" >&2; exit 2 ;;
    esac
done
key_space=${key_space:-$((2 * n))}
interval_ms=${SOLUS__STORAGE__EMBEDDED__CHECKPOINT_INTERVAL_MS:-30000}
if [ -z "$half_duration" ]; then
    half_duration=$(awk -v d="$duration" -v i="$interval_ms" 'BEGIN { h = 2 * i / 1000 + 1; print (d > h ? d : h) }')
fi

ensure_redis
cargo build --release --locked -p solus
bloom=
if [ -n "$bloom_wanted" ]; then
    bloom=$(find_redisbloom)
fi
solus=target/release/solus
work=$(mktemp -d)
pids=()
cleanup() {
    local pid
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# --- Solus ---
port=$(free_port)
echo "starting solus on 127.0.0.1:$port (data in $work/solus-data, checkpoint every $interval_ms ms)" >&2
SOLUS__SERVER__LISTEN=127.0.0.1:$port SOLUS__STORAGE__EMBEDDED__PATH=$work/solus-data \
    SOLUS__STORAGE__EMBEDDED__CHECKPOINT_INTERVAL_MS=$interval_ms SOLUS__LOG__LEVEL=warn SOLUS__METRICS__LISTEN= \
    "$solus" serve >/dev/null &
spid=$!
pids+=("$spid")
wait_port "$port"
bench() { # bench <op> <json out> [extra flags]: one `solus bench` run against the large deduper
    local op=$1 out=$2
    shift 2
    "$solus" bench --addr "127.0.0.1:$port" --client large --deduper large --expected-insertions "$n" \
        --false-positive-rate "$p" --key-space "$key_space" --batch "$batch" --concurrency "$concurrency" \
        --op "$op" --json --quiet "$@" >"$out"
}
write_bytes() { awk '/^write_bytes:/ { print $2 }' "/proc/$spid/io"; }
echo "creating the deduper (n = $n, p = $p)..." >&2
bench check "$work/create.json" --requests 1
sleep "$(awk -v i="$interval_ms" 'BEGIN { print i / 1000 }')"
w0=$(write_bytes)
echo "solus AddIfAbsent, full speed, $duration s (random keys over $key_space)..." >&2
bench add-if-absent "$work/add.json" --duration "$duration"
w_run=$(write_bytes)
echo "waiting one checkpoint interval for the pages it dirtied to be written..." >&2
sleep "$(awk -v i="$interval_ms" 'BEGIN { print i / 1000 + 1 }')"
w1=$(write_bytes)
echo "solus CheckAbsence, full speed, $duration s..." >&2
bench check "$work/check.json" --duration "$duration"
half_add=$(jq '.requests_per_second / 2' "$work/add.json")
half_check=$(jq '.requests_per_second / 2' "$work/check.json")
echo "solus AddIfAbsent at $half_add requests/s (half of peak), $half_duration s..." >&2
bench add-if-absent "$work/add-half.json" --duration "$half_duration" --rate "$half_add"
echo "solus CheckAbsence at $half_check requests/s (half of peak), $half_duration s..." >&2
bench check "$work/check-half.json" --duration "$half_duration" --rate "$half_check"
rss=$(awk '/^VmRSS:/ { print $2 * 1024 }' "/proc/$spid/status")
disk_alloc=$(du -s -B1 "$work/solus-data" | cut -f1)
disk_apparent=$(du -s -b "$work/solus-data" | cut -f1)
kill "$spid"
wait "$spid" 2>/dev/null || true

# --- Redis, one key per entity ---
start_redis() { # start_redis [--loadmodule path]: sets redis_port and redis_pid
    redis_port=$(free_port)
    redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
        --loglevel warning "$@" >"$work/redis-$redis_port.log" 2>&1 &
    redis_pid=$!
    pids+=("$redis_pid")
}
start_redis
rport=$redis_port rpid=$redis_pid
wait_port "$rport"
echo "redis SET NX PX and EXISTS (redis-benchmark -P $batch -c $concurrency -r $key_space), $duration s each..." >&2
read -r redis_set redis_set_p99 < <(redis_bench "$rport" "$concurrency" "$batch" "$key_space" "$duration" \
    SET key:__rand_int__ 1 NX PX 3600000)
read -r redis_exists redis_exists_p99 < <(redis_bench "$rport" "$concurrency" "$batch" "$key_space" "$duration" \
    EXISTS key:__rand_int__)
kill "$rpid"

# --- RedisBloom ---
bf_add=- bf_add_p99=- bf_exists=- bf_exists_p99=- bloom_note=
if [ -z "$bloom_wanted" ]; then
    bloom_note="RedisBloom left out (--no-redisbloom)."
elif [ -z "$bloom" ]; then
    bloom_note="RedisBloom left out: redisbloom.so not found (see the line above; SOLUS_REDISBLOOM=path)."
else
    start_redis --loadmodule "$bloom"
    bport=$redis_port bpid=$redis_pid
    if ! wait_port "$bport" || ! redis-cli -p "$bport" BF.RESERVE large "$p" "$n" | grep -q OK; then
        bloom_note="RedisBloom left out: redis-server --loadmodule $bloom failed: $(tail -n 3 "$work/redis-$bport.log" | tr '\n' ' ')"
    else
        echo "RedisBloom BF.ADD and BF.EXISTS (capacity $n, p = $p), $duration s each..." >&2
        read -r bf_add bf_add_p99 < <(redis_bench "$bport" "$concurrency" "$batch" "$key_space" "$duration" \
            BF.ADD large key:__rand_int__)
        read -r bf_exists bf_exists_p99 < <(redis_bench "$bport" "$concurrency" "$batch" "$key_space" "$duration" \
            BF.EXISTS large key:__rand_int__)
        bloom_note="RedisBloom $(redis-cli -p "$bport" MODULE LIST | awk 'f { print "version " $0; exit } /^ver$/ { f = 1 }'), from $bloom, BF.RESERVE large $p $n (default expansion), no per-entity expiry."
    fi
    kill "$bpid" 2>/dev/null || true
fi

# --- The table ---
f() { jq -r "$1" "$2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == "-" || b + 0 == 0) print "-"; else printf "%.2fx", a / b }'; }
fmt() { awk -v a="$1" 'BEGIN { if (a == "-") print "-"; else printf "%.0f", a }'; }
add_eps=$(f .entities_per_second "$work/add.json")
check_eps=$(f .entities_per_second "$work/check.json")
add_entities=$(f .entities "$work/add.json")
per_entity=$(awk -v a="$w0" -v b="$w1" -v e="$add_entities" 'BEGIN { printf "%.2f", (b - a) / (e > 0 ? e : 1) }')
per_entity_run=$(awk -v a="$w0" -v b="$w_run" -v e="$add_entities" 'BEGIN { printf "%.2f", (b - a) / (e > 0 ? e : 1) }')
half_p99_ok() { awk -v x="$1" -v y="$2" 'BEGIN { print (x < 10 && y < 10) ? "yes" : "no" }'; }
v_add_half=$(f .latency_p99_ms "$work/add-half.json")
v_check_half=$(f .latency_p99_ms "$work/check-half.json")
out=$work/large-results.md
{
    echo "| operation | Solus entities/s | Solus p99 ms | Redis entities/s | Redis p99 ms | Solus/Redis | RedisBloom entities/s | RedisBloom p99 ms | Solus/RedisBloom |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    echo "| AddIfAbsent / SET NX PX / BF.ADD | $(fmt "$add_eps") | $(printf %.2f "$(f .latency_p99_ms "$work/add.json")") | $(fmt "$redis_set") | $redis_set_p99 | $(ratio "$add_eps" "$redis_set") | $(fmt "$bf_add") | $bf_add_p99 | $(ratio "$add_eps" "$bf_add") |"
    echo "| CheckAbsence / EXISTS / BF.EXISTS | $(fmt "$check_eps") | $(printf %.2f "$(f .latency_p99_ms "$work/check.json")") | $(fmt "$redis_exists") | $redis_exists_p99 | $(ratio "$check_eps" "$redis_exists") | $(fmt "$bf_exists") | $bf_exists_p99 | $(ratio "$check_eps" "$bf_exists") |"
    for run in add-half check-half; do
        j=$work/$run.json
        name=AddIfAbsent
        [ "$run" = check-half ] && name=CheckAbsence
        echo "| $name at $(jq '.requests_per_second | round' "$j") requests/s (half of Solus peak, $(jq '.seconds | round' "$j") s, checkpoint every $interval_ms ms; max $(f .latency_max_ms "$j") ms) | $(fmt "$(f .entities_per_second "$j")") | $(printf %.2f "$(f .latency_p99_ms "$j")") | - | - | - | - | - | - |"
    done
    echo
    echo "Solus: deduper n = $n, p = $p, random keys over $key_space (key:<12 digits>), batch $batch, concurrency $concurrency, $duration s per full-speed figure; errors: $(jq -s 'map(.errors | add // 0) | add' "$work"/add.json "$work"/check.json "$work"/add-half.json "$work"/check-half.json)."
    echo "Redis / RedisBloom: redis-benchmark $(redis-benchmark --version | awk '{ print $2 }') -P $batch -c $concurrency -r $key_space, about $duration s each (redis-server $(redis-server --version | awk '{ print $3 }' | cut -d= -f2), no persistence). $bloom_note"
    echo "Disk bytes written per entity added: $per_entity ($((w1 - w0)) B of /proc/<pid>/io write_bytes over $add_entities entities sent by the full-speed AddIfAbsent run, read again one checkpoint interval after it; $per_entity_run B during the run alone; pages dirtied last are written by a later checkpoint, at most 5 bytes per journal byte)."
    echo "Solus at the end: RSS $rss B, data directory $disk_alloc B allocated ($disk_apparent B apparent)."
    echo
    echo "Done-when (issue 10): AddIfAbsent $(ratio "$add_eps" "$redis_set") Redis (>= 2x), $(ratio "$add_eps" "$bf_add") RedisBloom (>= 1x); CheckAbsence $(ratio "$check_eps" "$redis_exists") Redis (>= 2x), $(ratio "$check_eps" "$bf_exists") RedisBloom (>= 1x); p99 at half of peak $(printf %.2f "$v_add_half") / $(printf %.2f "$v_check_half") ms (< 10 ms: $(half_p99_ok "$v_add_half" "$v_check_half")); disk bytes written per entity added $per_entity."
} >"$out"
mkdir -p target
cp "$out" target/large-results.md
cat "$out"
