#!/usr/bin/env bash
# The outsider's method (issue 20): what a newcomer runs to weigh Solus's
# embedded store against Redis and RedisBloom, one run, one table.
#
#   bench/outsider.sh                  # n = 5x10^7, p = 0.01, keys over 10^8, 15 s per Solus figure
#   bench/outsider.sh --duration 5 --n 1000000 --key-space 2000000 --requests 1000000   # a quick try
#
# 1. Solus, release build, embedded store in a temporary directory, default
#    settings (metrics on, on a free port): the deduper is created with
#    n = --n and p = 0.01, then `solus bench --batch 1000 --concurrency 4
#    --duration 15 --key-space 100000000` runs AddIfAbsent, then CheckAbsence
#    on the same deduper (random keys key:<12 digits>).
# 2. One redis-server (no persistence; RedisBloom's module loaded when found)
#    driven by `redis-benchmark -P 1000 -c 4 -r 100000000 -n 3000000`:
#    `SET key:__rand_int__ v NX PX 60000`, `EXISTS key:__rand_int__`, then
#    after `BF.RESERVE bf 0.01 50000000 NONSCALING`, `BF.ADD bf key:__rand_int__`
#    and `BF.EXISTS bf key:__rand_int__`.
# 3. One table: entities/s, the ratios, and the bars (2x Redis, 1.5x RedisBloom);
#    also CPU seconds per million entities of the Solus server and of the load
#    generator (utime + stime), steadier than rates on shared cores; and how
#    much of the server's memory sat in transparent huge pages (a filter
#    outside them runs slower).
#
# Flags: --n N (50000000; also BF.RESERVE's capacity), --key-space K (100000000),
# --duration S (15), --requests R (redis-benchmark -n, 3000000), --batch B (1000),
# --concurrency C (4), --no-build. SOLUS_BIN=path runs that solus binary (no build). SOLUS_REDISBLOOM=/path/redisbloom.so picks the
# module, SOLUS_REDISBLOOM=none leaves RedisBloom out. Installs Debian's
# redis-server/redis-tools/jq when missing (root). Takes about 2 minutes.
# The table is also written to ${CARGO_TARGET_DIR:-target}/outsider-results.md.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

n=50000000 key_space=100000000 duration=15 requests=3000000 batch=1000 concurrency=4 build=1 p=0.01
while [ $# -gt 0 ]; do
    case "$1" in
    --n) n=$2; shift 2 ;;
    --key-space) key_space=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --no-build) build=; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "unknown flag $1 (see --help)" >&2; exit 2 ;;
    esac
done

ensure_redis
target=${CARGO_TARGET_DIR:-target}
solus=${SOLUS_BIN:-$target/release/solus}
if [ -n "$build" ] && [ -z "${SOLUS_BIN:-}" ]; then cargo build --release --locked -p solus; fi
bloom=
[ "${SOLUS_REDISBLOOM:-}" != none ] && bloom=$(find_redisbloom)
work=$(mktemp -d)
pids=()
cleanup() {
    local pid
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
ticks=$(getconf CLK_TCK)
cpu_s() { awk -v t="$ticks" '{ sub(/^.*\) /, ""); print ($12 + $13) / t }' "/proc/$1/stat"; }

# --- Solus ---
port=$(free_port)
mport=$(free_port)
echo "starting solus (release, embedded store in $work/solus) on 127.0.0.1:$port" >&2
SOLUS__SERVER__LISTEN=127.0.0.1:$port SOLUS__STORAGE__EMBEDDED__PATH=$work/solus \
    SOLUS__METRICS__LISTEN=127.0.0.1:$mport SOLUS__LOG__LEVEL=warn "$solus" serve >"$work/solus.log" 2>&1 &
spid=$!
pids+=("$spid")
wait_port "$port"
bench() { # bench <op> <name> [flags]: one `solus bench` run; JSON in $work/<name>.json, its CPU in <name>.cpu
    local op=$1 name=$2
    shift 2
    local TIMEFORMAT='%U %S'
    { time "$solus" bench --addr "127.0.0.1:$port" --client outsider --deduper outsider \
        --expected-insertions "$n" --false-positive-rate "$p" --key-space "$key_space" \
        --batch "$batch" --concurrency "$concurrency" --op "$op" --json --quiet "$@" >"$work/$name.json"; } \
        2>"$work/$name.time"
    awk '{ print $1 + $2 }' "$work/$name.time" >"$work/$name.cpu"
}
echo "creating the deduper (n = $n, p = $p)..." >&2
bench check create --requests 1
for op in add-if-absent check; do
    echo "solus bench --op $op --batch $batch --concurrency $concurrency --duration $duration --key-space $key_space..." >&2
    s0=$(cpu_s "$spid")
    bench "$op" "$op" --duration "$duration"
    awk -v a="$s0" -v b="$(cpu_s "$spid")" 'BEGIN { print b - a }' >"$work/$op.server-cpu"
done
# The filter's stamps are meant to sit in 2 MiB pages (src/storage/embedded/region.rs):
# when the kernel could not give them, every access misses the TLB and the
# run is slower for it.
mem_note=$(awk '/^Rss:/ { r = $2 } /^AnonHugePages:/ { h = $2 } END { if (r) printf "RSS %d MiB, %d MiB of it in transparent huge pages", r / 1024, h / 1024 }' \
    "/proc/$spid/smaps_rollup" 2>/dev/null || true)
kill "$spid"
wait "$spid" 2>/dev/null || true

# --- Redis and RedisBloom ---
rport=$(free_port)
module=()
[ -n "$bloom" ] && module=(--loadmodule "$bloom")
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --daemonize no --loglevel warning \
    "${module[@]}" >"$work/redis.log" 2>&1 &
rpid=$!
pids+=("$rpid")
wait_port "$rport"
rb() { # rb <command...>: "<requests/s> <p99 ms>"
    rb_csv "$(redis-benchmark -h 127.0.0.1 -p "$rport" -P "$batch" -c "$concurrency" -r "$key_space" \
        -n "$requests" --csv "$@")"
}
echo "redis-benchmark -P $batch -c $concurrency -r $key_space -n $requests: SET NX PX, EXISTS..." >&2
read -r set_rps set_p99 < <(rb SET key:__rand_int__ v NX PX 60000)
read -r exists_rps exists_p99 < <(rb EXISTS key:__rand_int__)
bf_add=- bf_add_p99=- bf_exists=- bf_exists_p99=- bloom_note="RedisBloom left out (SOLUS_REDISBLOOM=none or not found)."
if [ -n "$bloom" ]; then
    if redis-cli -p "$rport" BF.RESERVE bf "$p" "$n" NONSCALING | grep -q OK; then
        echo "BF.RESERVE bf $p $n NONSCALING; BF.ADD, BF.EXISTS..." >&2
        read -r bf_add bf_add_p99 < <(rb BF.ADD bf key:__rand_int__)
        read -r bf_exists bf_exists_p99 < <(rb BF.EXISTS bf key:__rand_int__)
        bloom_note="RedisBloom $(redis-cli -p "$rport" MODULE LIST | awk 'f { print "version " $0; exit } /^ver$/ { f = 1 }') ($bloom), loaded into the same redis-server."
    else
        bloom_note="RedisBloom left out: BF.RESERVE failed ($(tail -n 2 "$work/redis.log" | tr '\n' ' '))."
    fi
fi
# `redis-server --version` prints "Redis server v=7.0.15 sha=...": keep the number.
redis_version=$(redis-server --version | awk '{ sub(/^v=/, "", $3); print $3 }')

# --- The table ---
j() { jq -r "$1" "$work/$2.json"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == "-" || b + 0 == 0) print "-"; else printf "%.2fx", a / b }'; }
pass() { # pass <solus> <other> <bar>
    awk -v a="$1" -v b="$2" -v bar="$3" 'BEGIN { if (b == "-" || b + 0 == 0) print "-"; else print (a / b >= bar ? "yes" : "no") }'
}
fmt() { awk -v a="$1" 'BEGIN { if (a == "-") print "-"; else printf "%.0f", a }'; }
per_m() { awk -v c="$1" -v e="$2" 'BEGIN { printf "%.2f", c / (e > 0 ? e : 1) * 1e6 }'; }
add=$(j .entities_per_second add-if-absent)
check=$(j .entities_per_second check)
out=$target/outsider-results.md
mkdir -p "$target"
{
    echo "| operation | Solus entities/s | Solus p99 ms | Redis entities/s | Solus/Redis (bar 2x) | RedisBloom entities/s | Solus/RedisBloom (bar 1.5x) | Solus server CPU s per M | load generator CPU s per M |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    row() { # row <label> <solus op> <solus eps> <redis> <bloom>
        local e
        e=$(j .entities "$2")
        echo "| $1 | $(fmt "$3") | $(printf %.2f "$(j .latency_p99_ms "$2")") | $(fmt "$4") | $(ratio "$3" "$4") ($(pass "$3" "$4" 2)) | $(fmt "$5") | $(ratio "$3" "$5") ($(pass "$3" "$5" 1.5)) | $(per_m "$(cat "$work/$2.server-cpu")" "$e") | $(per_m "$(cat "$work/$2.cpu")" "$e") |"
    }
    row "AddIfAbsent / SET NX PX / BF.ADD" add-if-absent "$add" "$set_rps" "$bf_add"
    row "CheckAbsence / EXISTS / BF.EXISTS" check "$check" "$exists_rps" "$bf_exists"
    echo
    echo "Solus: release, embedded store (temporary directory, default settings), deduper n = $n, p = $p; \`solus bench --batch $batch --concurrency $concurrency --duration $duration --key-space $key_space\`, AddIfAbsent then CheckAbsence on the same deduper; errors: $(jq -s 'map(.errors | add // 0) | add' "$work/add-if-absent.json" "$work/check.json"); the server at the end: ${mem_note:-memory not read}."
    echo "Redis $redis_version, no persistence: \`redis-benchmark -P $batch -c $concurrency -r $key_space -n $requests\` (SET NX PX p99 $set_p99 ms, EXISTS p99 $exists_p99 ms, BF.ADD p99 $bf_add_p99 ms, BF.EXISTS p99 $bf_exists_p99 ms); BF.RESERVE bf $p $n NONSCALING. $bloom_note"
    echo "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end."
} | tee "$out"
