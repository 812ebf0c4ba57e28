#!/usr/bin/env bash
# Issue 45, class 1, from outside: REQUESTS AddIfAbsent calls of 10,000 new
# entities each sent at once to one deduper (expiry 4 s) so they queue in its
# lanes, the deduper resized while they wait (by hand, or by resize.auto on an
# overfilled deduper), then every entity of every call checked after the older
# generation retired, while its TTL (counted from the call's answer) still runs.
# Before the fix, the calls served past the older generation's last write time
# wrote it, and their entities read absent once it retired.
#
#   bench/resize-queued-writes.sh [embedded|hbase] [RUNS] [manual|auto]
#       hbase: the HBase Thrift server at SOLUS_HBASE_ADDRESS (host:port), e.g.
#       one deploy/hbase/standalone.sh started
#
# Prints per run: calls, entities checked, entities read absent (must be 0).
# Knobs: SOLUS_BIN (default target/release/solus), REQUESTS (default 40),
# N (the deduper's n for a manual resize, default 10,000,000), EXPIRY_S (the
# deduper's expiry, default 4 as the issue's; longer where checks are slow:
# a check counts only when it ended within the calls' TTL, less 1 s).
set -euo pipefail
cd "$(dirname "$0")/.."
backend="${1:-embedded}" runs="${2:-1}" how="${3:-manual}"
bin="${SOLUS_BIN:-target/release/solus}" requests="${REQUESTS:-40}" n="${N:-10000000}" expiry="${EXPIRY_S:-4}"
work="$(mktemp -d /tmp/solus-resize-queued.XXXXXX)"
server=""
trap '[[ -n "$server" ]] && kill "$server" 2>/dev/null; rm -rf "$work"' EXIT
env=(SOLUS__SERVER__LISTEN=127.0.0.1:0 SOLUS__METRICS__LISTEN= SOLUS__STORAGE__EMBEDDED__PATH="$work/data")
if [[ "$backend" == hbase ]]; then
    env+=(SOLUS__STORAGE__BACKEND=hbase SOLUS__STORAGE__HBASE__ADDRESSES="${SOLUS_HBASE_ADDRESS:?set SOLUS_HBASE_ADDRESS}")
fi
if [[ "$how" == auto ]]; then
    # The policy resizes a busy deduper: n is small so the calls overfill it.
    n=100000
    env+=(SOLUS__RESIZE__AUTO=true SOLUS__RESIZE__PASSES=1 SOLUS__STATS__REFRESH_INTERVAL_MS=300)
fi
env "${env[@]}" "$bin" serve > "$work/server.log" 2>&1 &
server=$!
for _ in $(seq 100); do
    addr="$(grep -o 'solus listening addr=[0-9.:]*' "$work/server.log" | head -1 | cut -d= -f2 || true)"
    [[ -n "$addr" ]] && break
    sleep 0.2
done
[[ -n "$addr" ]] || { echo "solus serve did not start:"; tail "$work/server.log"; exit 1; }
export SOLUS_ADDR="$addr"
until "$bin" health >/dev/null 2>&1; do sleep 0.2; done
now_ms() { date +%s%3N; }
failed=0
client="rq$(date +%s)"
for run in $(seq "$runs"); do
    d="q$run"
    "$bin" deduper create --client "$client" --name "$d" -n "$n" -p 0.001 --expiry-seconds "$expiry" >/dev/null
    for r in $(seq "$requests"); do seq -f "r$run.$r.%g" 10000 > "$work/$r.in"; done
    for r in $(seq "$requests"); do
        ( "$bin" add-if-absent --client "$client" --deduper "$d" --batch 10000 < "$work/$r.in" > "$work/$r.out" \
            && now_ms > "$work/$r.acked" ) &
    done
    # The older generation's retirement, as soon as a resize records it.
    ( while :; do
        r="$("$bin" deduper get --client "$client" --name "$d" 2>/dev/null | python3 -c \
            'import json,sys; g=json.load(sys.stdin).get("generations",[]); print(min([x["retire_at_ms"] for x in g if x.get("retire_at_ms")] or [0]))' || echo 0)"
        if [[ "$r" != 0 ]]; then echo "$r" > "$work/retire"; break; fi
        sleep 0.2
      done ) &
    poller=$!
    resized=$(now_ms)
    if [[ "$how" == manual ]]; then
        sleep 0.05
        resized=$(now_ms)
        "$bin" deduper update --client "$client" --name "$d" --expected-insertions $((n * 2)) >/dev/null
    fi
    for job in $(jobs -p); do
        [[ "$job" == "$server" || "$job" == "$poller" ]] || wait "$job" || true
    done
    for _ in $(seq 150); do [[ -s "$work/retire" ]] && break; sleep 0.2; done
    kill "$poller" 2>/dev/null || true
    if [[ ! -s "$work/retire" ]]; then echo "run $run: no resize happened"; failed=1; continue; fi
    retire="$(cat "$work/retire")"; rm -f "$work/retire"
    # Past the retirement (and a pass of the retirement loop).
    while (( $(now_ms) < retire + 1500 )); do sleep 0.1; done
    checked=0 lost=0 answered=0
    for r in $(seq "$requests"); do
        [[ -s "$work/$r.acked" ]] || continue
        answered=$((answered + 1))
        # Only calls whose TTL (from their answer) still ran when the check
        # ended, less 1 s for the server's clock read before the answer.
        acked="$(cat "$work/$r.acked")"
        (( acked + expiry * 1000 > $(now_ms) + 1000 )) || continue
        absent="$("$bin" check --client "$client" --deduper "$d" --batch 10000 < "$work/$r.in" | grep -c '^absent' || true)"
        (( $(now_ms) < acked + expiry * 1000 - 1000 )) || continue
        checked=$((checked + 10000)) lost=$((lost + absent))
    done
    last=$(cat "$work"/*.acked | sort -n | tail -1)
    echo "run $run ($backend, $how resize): $answered of $requests calls answered, the last $((last - resized)) ms after the resize; $checked entities checked within their TTL after the older generation retired; $lost read absent"
    (( lost == 0 )) || failed=1
done
exit "$failed"
