#!/usr/bin/env bash
# Throughput during a resize transition beside the steady state (issue 22),
# embedded store, with `solus bench`.
#
#   bench/resize-throughput.sh               # n = 10^7, 10 s per run, 2 rounds
#   bench/resize-throughput.sh --n 1000000 --duration 5 --rounds 1   # a quick try
#
# 1. One release server, default settings, embedded store in a temporary
#    directory. Two dedupers sized n, p = 0.01 (created by `solus bench`,
#    expiry 86,400 s): `steady` is never resized; `moving` is resized to 2n
#    (`solus deduper update --expected-insertions 2n`) after both are filled
#    with the same n/2 keys (`--sequential`), so every run on it reads two
#    live generations (the older retires a day later) and writes the newer.
# 2. Alternately, --rounds times: AddIfAbsent on steady, on moving, then
#    CheckAbsence on steady, on moving: `solus bench --batch 1000
#    --concurrency 4 --duration D --key-space 2n` (random keys, half of them
#    added during the fill).
# 3. One table: entities/s and p99 of each run, and moving/steady.
#
# Flags: --n N (10000000), --duration S (10), --rounds R (2), --no-build.
# SOLUS_BIN=path runs that binary. About 2 minutes plus a release build.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

n=10000000 duration=10 rounds=2 build=1
while [ $# -gt 0 ]; do
    case "$1" in
    --n) n=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --no-build) build=; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "unknown flag $1 (see --help)" >&2; exit 2 ;;
    esac
done
command -v jq >/dev/null 2>&1 || ensure_redis # jq comes with the Redis tools' install
target=${CARGO_TARGET_DIR:-target}
solus=${SOLUS_BIN:-$target/release/solus}
if [ -n "$build" ] && [ -z "${SOLUS_BIN:-}" ]; then cargo build --release --locked -p solus; fi
work=$(mktemp -d)
spid=
cleanup() {
    [ -n "$spid" ] && kill "$spid" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

port=$(free_port)
echo "starting solus (release, embedded store in $work/solus) on 127.0.0.1:$port" >&2
SOLUS__SERVER__LISTEN=127.0.0.1:$port SOLUS__STORAGE__EMBEDDED__PATH=$work/solus \
    SOLUS__METRICS__LISTEN= SOLUS__LOG__LEVEL=warn "$solus" serve >"$work/solus.log" 2>&1 &
spid=$!
wait_port "$port"
key_space=$((2 * n))
bench() { # bench <deduper> <op> <json name> [flags]
    local d=$1 op=$2 name=$3
    shift 3
    "$solus" bench --addr "127.0.0.1:$port" --client resize --deduper "$d" --expected-insertions "$n" \
        --key-space "$key_space" --batch 1000 --concurrency 4 --op "$op" --json --quiet "$@" >"$work/$name.json"
}
for d in steady moving; do
    echo "filling $d with $((n / 2)) keys (n = $n)..." >&2
    "$solus" bench --addr "127.0.0.1:$port" --client resize --deduper "$d" --expected-insertions "$n" \
        --key-space $((n / 2)) --sequential --batch 1000 --concurrency 4 --op add --json --quiet >"$work/fill-$d.json"
done
echo "resizing moving to $((2 * n))..." >&2
"$solus" deduper update --addr "127.0.0.1:$port" --client resize --name moving --expected-insertions $((2 * n)) >&2
sleep 2 # past writes_from (1 s on the embedded store)
for r in $(seq "$rounds"); do
    for op in add-if-absent check; do
        for d in steady moving; do
            echo "round $r: $op on $d, ${duration} s..." >&2
            bench "$d" "$op" "$r-$op-$d" --duration "$duration" --seed "$r"
        done
    done
done
gens=$("$solus" deduper get --addr "127.0.0.1:$port" --client resize --name moving | jq '.generations | length')

j() { jq -r "$1" "$work/$2.json"; }
echo
echo "| round | operation | steady entities/s | steady p99 ms | in transition entities/s | in transition p99 ms | transition/steady |"
echo "|---|---|---:|---:|---:|---:|---:|"
for r in $(seq "$rounds"); do
    for op in add-if-absent check; do
        s=$(j .entities_per_second "$r-$op-steady") m=$(j .entities_per_second "$r-$op-moving")
        printf '| %s | %s | %.0f | %.1f | %.0f | %.1f | %.2fx |\n' "$r" "$op" "$s" "$(j .latency_p99_ms "$r-$op-steady")" \
            "$m" "$(j .latency_p99_ms "$r-$op-moving")" "$(awk -v a="$m" -v b="$s" 'BEGIN { print a / b }')"
    done
done
echo
echo "n = $n, p = 0.01, keys over $key_space, batch 1000, concurrency 4, ${duration} s per run; moving resized to $((2 * n)), live generations at the end: $gens."
errors=$(cat "$work"/*-*-*.json | jq -s '[.[].errors | to_entries[] | .value] | add // 0')
echo "failed requests: $errors"
[ "$errors" -eq 0 ]
