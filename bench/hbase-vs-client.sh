#!/usr/bin/env bash
# Solus on a real Apache HBase against HBase's own Java client doing the same
# logical work (bench/hbase-client: one Table.get(List<Get>) of each touched
# shard row's <bit>#ttl qualifiers, then one Table.put(List<Put>) with setTTL,
# as the original Java Solus does). Each drives its own deduper (both created
# through Solus at the start: n = N, p = P, same geometry; DEDUPERS=shared: one
# for both, the method before 2026-12-05 19:30, where the second run of a pair
# reads rows the first one filled), same kind of random keys, one run each
# ALTERNATELY per work (add-if-absent, check, add), at BATCH and at BIG_BATCH.
# Prints a table: entities/s, p99 request latency, failed requests, and HBase's
# CPU seconds per 1,000 entities (region-server JVM + Thrift JVM, from
# /proc/PID/stat) for each, and the ratio Solus / anchor. Figures: docs/hbase.md.
#
#   bash bench/hbase-vs-client.sh                 # starts (and stops) its own HBase
#   HBASE_DIR=/tmp/hbase bash bench/hbase-vs-client.sh   # or uses one started with
#       deploy/hbase/standalone.sh start /tmp/hbase PORT
#   SOLUS_BIN=/path/to/solus bash bench/hbase-vs-client.sh   # another build of Solus
#
# Environment: BENCH_SECONDS (20 per run), BATCH (1000), BIG_BATCH (10000; empty
# skips), CONCURRENCY (4), KEY_SPACE (10000000), N (1000000), P (0.01),
# WORKS ("add-if-absent check add"), ROUNDS (1: anchor, Solus; a second round
# runs Solus first), MAX_BITS_PER_SHARD (Solus's limits.max_bits_per_shard when
# creating the deduper: 1048576 gives 10 shards for the defaults, 240000 40,
# 96000 100), DEDUPER (default: a fresh name per run; with own dedupers the
# names are DEDUPER-anchor and DEDUPER-solus), DEDUPERS (own | shared), TABLE (solus_deduper),
# SOLUS_READ_LEGACY_MARKERS (passed to the server when set), FILL (0: entities
# added through Solus before the first run, key:0 up, so every run reads rows
# already that full; 600000 fills the default deduper to ~35%; then SETTLE_SECONDS,
# 60, of rest for HBase's flushes and compactions), SETTLE_MAX_SECONDS (300:
# before every run the anchor flushes the table and waits, at most this long,
# until no compaction runs (asking the region servers to flush again every 30 s
# while the memstore stays over 1 MiB: HBase 2.6.1 can lose a table flush), then until the HBase JVM idles (under 0.1 core over
# 2 s, twice), so no run pays for the one before it; 0 skips), SETTLE_COMPACT (1:
# the settle also major-compacts the table, so every run starts from one store
# file per store; 0: flush only, the method of figures before 2026-12-03 18:00), RAW_OUT (a file
# that gets every run's JSON line), KEEP_LOGS (0: logs are kept only when the
# script fails; 1: always, HBase's too, in a /tmp/solus-hbase-vs-client-logs.* directory). SOLUS_HBASE_HEAP / SOLUS_HBASE_THRIFT_HEAP
# as deploy/hbase/standalone.sh. Needs Java 11+, Maven, Python 3; cargo unless
# SOLUS_BIN is set. Takes 10-15 minutes by default (12 runs of BENCH_SECONDS, each after HBase idles;
# a batch-10,000 request can run past it; HBase start-up; the cross-check).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

seconds="${BENCH_SECONDS:-20}"
batch="${BATCH:-1000}"
big_batch="${BIG_BATCH-10000}"
concurrency="${CONCURRENCY:-4}"
key_space="${KEY_SPACE:-10000000}"
n="${N:-1000000}"
p="${P:-0.01}"
works="${WORKS:-add-if-absent check add}"
rounds="${ROUNDS:-1}"
table="${TABLE:-solus_deduper}"
client=bench
deduper="${DEDUPER:-vs-client-$(date +%s)}"
dedupers="${DEDUPERS:-own}"
[[ "$dedupers" == own || "$dedupers" == shared ]] || die_early="DEDUPERS must be own or shared, got '$dedupers'"
# deduper_of SYSTEM: the deduper SYSTEM (anchor | solus) drives.
deduper_of() { if [[ "$dedupers" == shared ]]; then echo "$deduper"; else echo "$deduper-$1"; fi; }
vectors="$repo/../shared/test-vectors.json"
java="${JAVA_HOME:+$JAVA_HOME/bin/}java"
javac="${JAVA_HOME:+$JAVA_HOME/bin/}javac"

die() { echo "bench/hbase-vs-client.sh: $*" >&2; exit 1; }
[[ -z "${die_early:-}" ]] || die "$die_early"
[[ -f "$vectors" ]] || die "$vectors is missing (../shared beside the repository): the anchor checks the contract against it"
for tool in "$java" "$javac" mvn python3; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found (needs Java 11+, Maven, Python 3)"
done
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

if [[ -n "${SOLUS_BIN:-}" ]]; then
    solus="$SOLUS_BIN"
else
    cargo build --release --quiet
    solus="${CARGO_TARGET_DIR:-target}/release/solus"
fi
[[ -x "$solus" ]] || die "no Solus binary at $solus"

work="$(mktemp -d /tmp/solus-hbase-vs-client.XXXXXX)"
server_pid=""
own_hbase=""
cleanup() {
    local rc=$?
    [[ -z "$server_pid" ]] || kill "$server_pid" 2>/dev/null || true
    if { ((rc != 0)) || [[ "${KEEP_LOGS:-0}" == 1 ]]; } && [[ -d "$work" ]]; then # keep the logs, drop the data
        keep="$(mktemp -d /tmp/solus-hbase-vs-client-logs.XXXXXX)"
        cp "$work"/*.log "$keep"/ 2>/dev/null || true
        [[ -z "$own_hbase" ]] || cp -r "$own_hbase/logs" "$keep/hbase-logs" 2>/dev/null || true
        echo "bench/hbase-vs-client.sh: $( ((rc != 0)) && echo failed || echo done); logs kept in $keep" >&2
    fi
    [[ -z "$own_hbase" ]] || deploy/hbase/standalone.sh stop "$own_hbase" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The anchor: its jars from Maven (cached per pom, like standalone.sh), compiled once into $work.
anchor_dir="$repo/bench/hbase-client"
cache="${SOLUS_HBASE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/solus-hbase}"
cp_file="$cache/anchor-classpath-$(sha256sum "$anchor_dir/pom.xml" | cut -c1-16).txt"
if [[ ! -s "$cp_file" ]]; then
    mkdir -p "$cache"
    echo "resolving the anchor's jars with Maven (once; cached in $cache and ~/.m2)" >&2
    (cd "$anchor_dir" && mvn -B -q dependency:build-classpath -Dmdep.outputFile="$cp_file.tmp" >"$work/mvn.log" 2>&1) ||
        { tail -n 30 "$work/mvn.log" >&2; die "Maven could not resolve bench/hbase-client/pom.xml"; }
    mv "$cp_file.tmp" "$cp_file"
fi
anchor_cp="$(cat "$cp_file")"
"$javac" -nowarn -d "$work/classes" -cp "$anchor_cp" "$anchor_dir/src/main/java/solus/bench/HBaseClientBench.java" ||
    die "the anchor does not compile"
printf '%s\n' 'status = warn' 'appender.c.type = Console' 'appender.c.name = c' 'appender.c.target = SYSTEM_ERR' \
    'appender.c.layout.type = PatternLayout' 'appender.c.layout.pattern = %d{ISO8601} %-5p %c{2}: %m%n' \
    'rootLogger = WARN,c' 'logger.zk.name = org.apache.zookeeper' 'logger.zk.level = ERROR' >"$work/log4j2.properties"

if [[ -n "${HBASE_DIR:-}" ]]; then
    dir="$(cd "$HBASE_DIR" && pwd)"
else
    dir="$work/hbase"
    own_hbase="$dir"
    deploy/hbase/standalone.sh start "$dir" "$(free_port)" || die "HBase did not start"
fi
thrift_port="$(cat "$dir/thrift.port")"
zk_port="$(cut -d' ' -f1 "$dir/hbase.ports")"
master_pid="$(cat "$dir/master.pid")"
thrift_pid="$(cat "$dir/thrift.pid")"
hbase_alive() {
    local name
    for name in master thrift; do
        if ! kill -0 "$(cat "$dir/$name.pid")" 2>/dev/null; then
            grep -h -m 3 -E 'OutOfMemoryError|Killed|FATAL' "$dir/logs/$name.log" >&2 || true
            die "the HBase $name JVM died during the last run"
        fi
    done
}

# CPU seconds (user + system) of a process so far.
tck="$(getconf CLK_TCK)"
cpu_s() { awk -v t="$tck" '{ sub(/^.*\) /, ""); print ($12 + $13) / t }' "/proc/$1/stat"; }

port="$(free_port)"
env SOLUS__SERVER__LISTEN="127.0.0.1:$port" SOLUS__METRICS__LISTEN="" SOLUS__STORAGE__BACKEND=hbase \
    SOLUS__STORAGE__TABLE="$table" SOLUS__STORAGE__HBASE__ADDRESSES="127.0.0.1:$thrift_port" \
    ${MAX_BITS_PER_SHARD:+SOLUS__LIMITS__MAX_BITS_PER_SHARD="$MAX_BITS_PER_SHARD"} \
    ${SOLUS_READ_LEGACY_MARKERS:+SOLUS__STORAGE__HBASE__READ_LEGACY_MARKERS="$SOLUS_READ_LEGACY_MARKERS"} \
    RUST_LOG=warn "$solus" serve >"$work/serve.log" 2>&1 &
server_pid=$!
addr="127.0.0.1:$port"
for _ in $(seq 1 150); do
    "$solus" deduper list --addr "$addr" --client "$client" >/dev/null 2>&1 && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/serve.log" >&2; die "solus serve exited"; }
    sleep 0.2
done
"$solus" deduper list --addr "$addr" --client "$client" >/dev/null 2>&1 ||
    { cat "$work/serve.log" >&2; die "solus serve did not answer within 30 s"; }
# The dedupers, created through Solus (one tiny request each); the anchor reads its geometry from the meta row.
for system in anchor solus; do
    "$solus" bench --addr "$addr" --client "$client" --deduper "$(deduper_of "$system")" --op check --batch 1 \
        --concurrency 1 --requests 1 --key-space "$key_space" --expected-insertions "$n" --false-positive-rate "$p" \
        --json --quiet >/dev/null ||
        die "creating deduper $client/$(deduper_of "$system") through Solus failed (log: $work/serve.log)"
done

# anchor ARGS...: runs HBase's own client on this HBase; prints its JSON line.
anchor() {
    if ! "$java" -Xmx1g -XX:+UseG1GC --add-opens java.base/java.nio=ALL-UNNAMED \
        --add-opens java.base/java.lang=ALL-UNNAMED --add-opens java.base/sun.nio.ch=ALL-UNNAMED \
        -Dorg.apache.hbase.thirdparty.io.netty.tryReflectionSetAccessible=true \
        -Dlog4j.configurationFile="$work/log4j2.properties" -cp "$work/classes:$anchor_cp" solus.bench.HBaseClientBench \
        --vectors "$vectors" --zk-port "$zk_port" --table "$table" --client "$client" "$@" >"$work/anchor.out" 2>>"$work/anchor.log"; then
        tail -n 20 "$work/anchor.log" >&2
        die "the anchor failed (log above)"
    fi
    tail -n 1 "$work/anchor.out"
}

# Cross-check that both touch the same cells: the anchor adds key:0..49 of a
# separate deduper, Solus adds key:50..99; Solus must find 0..49 present and
# the anchor (checking 0..99) none absent.
xd="$deduper-xcheck"
"$solus" bench --addr "$addr" --client "$client" --deduper "$xd" --op check --batch 1 --concurrency 1 --requests 1 \
    --key-space 100 --expected-insertions "$n" --false-positive-rate "$p" --json --quiet >/dev/null
anchor --deduper "$xd" --op add --batch 500 --concurrency 1 --key-space 50 --duration 1 >/dev/null
keys() { for i in $(seq "$1" "$2"); do printf 'key:%012d\n' "$i"; done; }
keys 50 99 | "$solus" add --addr "$addr" --client "$client" --deduper "$xd" >/dev/null
present="$(keys 0 49 | "$solus" check --addr "$addr" --client "$client" --deduper "$xd" | grep -c -w present || true)"
[[ "$present" == 50 ]] || die "cross-check: Solus finds $present of the 50 keys the anchor added (want 50)"
absent="$(anchor --deduper "$xd" --op check --batch 500 --concurrency 1 --key-space 100 --duration 1 |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["absent"])')"
[[ "$absent" == 0 ]] || die "cross-check: the anchor finds $absent absent among keys Solus and it added (want 0)"
echo "cross-check passed: Solus and the anchor see each other's adds" >&2

# Waits until the HBase JVM uses under 0.1 core over 2 s, twice in a row (a
# compaction takes about one), at most SETTLE_MAX_SECONDS; prints the seconds
# waited, or "over $settle_max" when capped.
quiet() {
    local start=$SECONDS calm=0 a b
    while ((SECONDS - start < settle_max)); do
        a="$(cpu_s "$master_pid")"; sleep 2; b="$(cpu_s "$master_pid")"
        if awk -v a="$a" -v b="$b" 'BEGIN { exit !((b - a) / 2 < 0.1) }'; then
            calm=$((calm + 1))
            ((calm < 2)) || { echo "$((SECONDS - start))"; return; }
        else
            calm=0
        fi
    done
    echo "over $settle_max"
}

# run SYSTEM OP BATCH: one run; writes "eps p99 failed rs_cpu_per_1k thrift_cpu_per_1k" to $work/last
# and appends the JSON line to $work/raw. Not run in a $(...): its failures must end the script.
run() {
    local system="$1" op="$2" b="$3" out m0 t0 m1 t1
    if [[ "$settle_max" != 0 ]]; then
        # Fair order: the run before this one leaves memstores to flush and
        # store files to compact; without this the later run pays for them
        # (measured: Add at batch 10,000 0.83x with the anchor first, 0.52x with Solus first).
        # With SETTLE_COMPACT=1 a major compaction too: each run starts from one store file per
        # store, so which run's flush crosses the minor-compaction threshold no longer depends on
        # how many files the runs before it left.
        out="$(anchor --deduper "$(deduper_of anchor)" --op settle --duration "$settle_max" \
            --major-compact "$([[ "$settle_compact" == 1 ]] && echo true || echo false)")"
        # A compaction HBase starts only after the flush would still land in
        # this run: wait until its JVM is idle too.
        echo "   settled: $out; HBase idle after $(quiet) s" >&2
    fi
    # A seed of its own per run: a run replaying an earlier run's keys would
    # find them all present (the anchor then writes nothing in add-if-absent).
    seed=$((seed + 1))
    m0="$(cpu_s "$master_pid")"; t0="$(cpu_s "$thrift_pid")"
    if [[ "$system" == anchor ]]; then
        out="$(anchor --deduper "$(deduper_of anchor)" --op "$op" --batch "$b" --concurrency "$concurrency" \
            --key-space "$key_space" --duration "$seconds" --seed "$seed")"
    else
        out="$("$solus" bench --addr "$addr" --client "$client" --deduper "$(deduper_of solus)" --op "$op" --batch "$b" \
            --concurrency "$concurrency" --key-space "$key_space" --duration "$seconds" --seed "$seed" \
            --json --quiet | tail -n 1)" ||
            die "solus bench failed (server log: $work/serve.log)"
    fi
    hbase_alive
    m1="$(cpu_s "$master_pid")"; t1="$(cpu_s "$thrift_pid")"
    echo "$out" >>"$work/raw"
    python3 - "$out" "$m0" "$m1" "$t0" "$t1" >"$work/last" <<'EOF'
import json, sys
r = json.loads(sys.argv[1])
m0, m1, t0, t1 = map(float, sys.argv[2:6])
failed = r.get("failed_requests", sum(r.get("errors", {}).values()))
k = r["entities"] / 1000 or float("nan")  # no entity answered: no CPU per entity
print(f'{r["entities_per_second"]:.0f} {r["latency_p99_ms"]:.1f} {failed} {(m1 - m0) / k:.4f} {(t1 - t0) / k:.4f}')
EOF
}

settle_max="${SETTLE_MAX_SECONDS:-300}"
settle_compact="${SETTLE_COMPACT:-1}"
[[ "$settle_compact" == 0 || "$settle_compact" == 1 ]] || die "SETTLE_COMPACT must be 0 or 1, got '$settle_compact'"
seed=100  # run seeds: 101, 102, ...
fill="${FILL:-0}"
if ((fill > 0)); then
    for d in $(deduper_of anchor) $(deduper_of solus); do
        [[ "$d" != "${filled:-}" ]] || continue
        filled="$d"
        echo "filling $client/$d with $fill adds (key:0 to key:$((fill - 1)))" >&2
        "$solus" bench --addr "$addr" --client "$client" --deduper "$d" --op add --batch 5000 --concurrency 2 \
            --sequential --key-space "$fill" --json --quiet >/dev/null || die "filling $d failed (log: $work/serve.log)"
    done
    # The fill's memstore flushes and compactions would otherwise land in the first runs.
    echo "letting HBase flush and compact for ${SETTLE_SECONDS:-60} s" >&2
    sleep "${SETTLE_SECONDS:-60}"
fi

rows=()
for b in $batch $big_batch; do
    for op in $works; do
        for round in $(seq 1 "$rounds"); do
            order="anchor solus"
            ((round % 2 == 1)) || order="solus anchor"
            for system in $order; do
                echo "== $system $op, batch $b, concurrency $concurrency, ${seconds} s (round $round)" >&2
                run "$system" "$op" "$b"
                read -r eps p99 failed cpu_rs cpu_th <"$work/last"
                echo "   $eps entities/s, p99 $p99 ms, failed $failed, HBase CPU s / 1k entities: region server $cpu_rs, Thrift $cpu_th" >&2
                rows+=("$op $b $round $system $eps $p99 $failed $cpu_rs $cpu_th")
                if [[ "$system" == solus && "$failed" != 0 ]]; then
                    echo "   last failure in the server log: $(grep 'request failed' "$work/serve.log" | tail -n 1 | cut -c1-400)" >&2
                fi
            done
        done
    done
done

[[ -z "${RAW_OUT:-}" ]] || cp "$work/raw" "$RAW_OUT"
geometry="$(grep -h -m 1 '"system":"hbase-client"' "$work/raw" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read() or "{}")
print("shards %s, bits per shard %s, k %s" % (r.get("shards"), r.get("bits_per_shard"), r.get("hash_functions")))')"
echo
echo "Solus ($solus) vs HBase's own client; $([[ "$dedupers" == shared ]] && echo "one deduper for both" || echo "a deduper each"), n = $n, p = $p ($geometry), concurrency $concurrency,"
echo "random keys over ${key_space}, ${fill} entities added first, ${seconds} s per run; CPU = HBase region-server + Thrift JVM CPU seconds per 1,000 entities"
printf '%s\n' "${rows[@]}" | python3 -c '
import sys
from math import floor  # ratios rounded down: 1.00x never hides a miss of the 1.0x bar
runs = {}
for line in sys.stdin:
    op, b, rnd, system, eps, p99, failed, rs, th = line.split()
    runs.setdefault((op, int(b), int(rnd)), {})[system] = (float(eps), float(p99), int(failed), float(rs), float(th))
# The columns and work names of the tables in docs/hbase.md, so a run pastes in as it is;
# "failed" is anchor / Solus, "round" only when ROUNDS > 1.
works = {"add-if-absent": "AddIfAbsent", "check": "CheckAbsence", "add": "Add"}
rounds = max(rnd for (_, _, rnd) in runs) > 1
hdr = (["work", "batch"] + (["round"] if rounds else []) + ["anchor entities/s", "p99 ms", "CPU/1k",
       "Solus entities/s", "p99 ms", "failed", "CPU/1k (HBase+Thrift)", "Solus / anchor"])
print("| " + " | ".join(hdr) + " |")
print("|" + "|".join("---" if i == 0 else "---:" for i in range(len(hdr))) + "|")
for (op, b, rnd), s in runs.items():
    a, o = s["anchor"], s["solus"]
    print(f"| {works.get(op, op)} | {b:,} | " + (f"{rnd} | " if rounds else "")
          + f"{a[0]:,.0f} | {a[1]:,.0f} | {a[3] + a[4]:.3f} | {o[0]:,.0f} | {o[1]:,.0f} | {a[2]} / {o[2]} | "
          f"{o[3] + o[4]:.3f} ({o[3]:.3f}+{o[4]:.3f}) | {floor(o[0] / max(a[0], 1e-9) * 100) / 100:.2f}x |")
'
