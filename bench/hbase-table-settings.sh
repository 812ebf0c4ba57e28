#!/usr/bin/env bash
# Family S's settings and the row width on a real standalone HBase, measured
# with HBase's own client (bench/hbase-client, the anchor of
# bench/hbase-vs-client.sh) on full rows. Figures: docs/hbase.md "Table settings".
#
#   bash bench/hbase-table-settings.sh                 # starts (and stops) its own HBase
#   HBASE_DIR=/tmp/hbase bash bench/hbase-table-settings.sh
#
# Settings: one table, filled once (FILL_SECONDS of adds over FILL_KEYS keys
# into a deduper of n = 10^6, p = 0.01: 10 shards of 959,442 bits, k = 7, the
# geometry Solus gives it), then per setting: alter family S (every attribute
# given, so settings do not accumulate), flush, major compaction (the HFiles
# are rewritten with it), then CheckAbsence and AddIfAbsent of random keys
# over 10^7 for BENCH_SECONDS each (after a warm-up request per thread), and
# the table's size on disk. Geometry:
# the same n with 10, 40 and 100 shards, each in a fresh table with the base
# settings, filled and measured the same way.
#
# Environment: BENCH_SECONDS (20), FILL_SECONDS (60), FILL_KEYS (1000000),
# BATCH (1000), CONCURRENCY (4), SETTINGS (names, default all below),
# SHARD_COUNTS ("10 40 100"; empty skips). Needs Java 11+, Maven, Python 3.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
seconds="${BENCH_SECONDS:-20}"
fill_seconds="${FILL_SECONDS:-60}"
fill_keys="${FILL_KEYS:-1000000}"
batch="${BATCH:-1000}"
concurrency="${CONCURRENCY:-4}"
shard_counts="${SHARD_COUNTS-10 40 100}"
vectors="$repo/../shared/test-vectors.json"
java="${JAVA_HOME:+$JAVA_HOME/bin/}java"
javac="${JAVA_HOME:+$JAVA_HOME/bin/}javac"
die() { echo "bench/hbase-table-settings.sh: $*" >&2; exit 1; }
[[ -f "$vectors" ]] || die "$vectors is missing (../shared beside the repository)"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# name|family attributes besides NAME and VERSIONS. base = what Solus creates.
all_settings=(
    "base|COMPRESSION => 'GZ', BLOOMFILTER => 'ROWCOL', DATA_BLOCK_ENCODING => 'NONE', BLOCKSIZE => '65536'"
    "fast_diff|COMPRESSION => 'GZ', BLOOMFILTER => 'ROWCOL', DATA_BLOCK_ENCODING => 'FAST_DIFF', BLOCKSIZE => '65536'"
    "row_index_v1|COMPRESSION => 'GZ', BLOOMFILTER => 'ROWCOL', DATA_BLOCK_ENCODING => 'ROW_INDEX_V1', BLOCKSIZE => '65536'"
    "block_16k|COMPRESSION => 'GZ', BLOOMFILTER => 'ROWCOL', DATA_BLOCK_ENCODING => 'NONE', BLOCKSIZE => '16384'"
    "bloom_row|COMPRESSION => 'GZ', BLOOMFILTER => 'ROW', DATA_BLOCK_ENCODING => 'NONE', BLOCKSIZE => '65536'"
    "bloom_none|COMPRESSION => 'GZ', BLOOMFILTER => 'NONE', DATA_BLOCK_ENCODING => 'NONE', BLOCKSIZE => '65536'"
    "compression_none|COMPRESSION => 'NONE', BLOOMFILTER => 'ROWCOL', DATA_BLOCK_ENCODING => 'NONE', BLOCKSIZE => '65536'"
    "snappy|COMPRESSION => 'SNAPPY', BLOOMFILTER => 'ROWCOL', DATA_BLOCK_ENCODING => 'NONE', BLOCKSIZE => '65536'"
    "lz4|COMPRESSION => 'LZ4', BLOOMFILTER => 'ROWCOL', DATA_BLOCK_ENCODING => 'NONE', BLOCKSIZE => '65536'"
    "zstd|COMPRESSION => 'ZSTD', BLOOMFILTER => 'ROWCOL', DATA_BLOCK_ENCODING => 'NONE', BLOCKSIZE => '65536'"
)
wanted="${SETTINGS:-$(printf '%s\n' "${all_settings[@]}" | cut -d'|' -f1 | tr '\n' ' ')}"

work="$(mktemp -d /tmp/solus-hbase-table-settings.XXXXXX)"
own_hbase=""
cleanup() {
    [[ -z "$own_hbase" ]] || deploy/hbase/standalone.sh stop "$own_hbase" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

anchor_dir="$repo/bench/hbase-client"
cache="${SOLUS_HBASE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/solus-hbase}"
cp_file="$cache/anchor-classpath-$(sha256sum "$anchor_dir/pom.xml" | cut -c1-16).txt"
if [[ ! -s "$cp_file" ]]; then
    mkdir -p "$cache"
    (cd "$anchor_dir" && mvn -B -q dependency:build-classpath -Dmdep.outputFile="$cp_file.tmp" >"$work/mvn.log" 2>&1) ||
        { tail -n 30 "$work/mvn.log" >&2; die "Maven could not resolve bench/hbase-client/pom.xml"; }
    mv "$cp_file.tmp" "$cp_file"
fi
anchor_cp="$(cat "$cp_file")"
"$javac" -nowarn -d "$work/classes" -cp "$anchor_cp" "$anchor_dir/src/main/java/solus/bench/HBaseClientBench.java"
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
zk_port="$(cut -d' ' -f1 "$dir/hbase.ports")"

shell() { # RUBY: runs it in HBase's shell
    printf '%s\nexit\n' "$1" >"$work/step.rb"
    deploy/hbase/standalone.sh shell "$dir" -n "$work/step.rb" >>"$work/shell.log" 2>&1 ||
        { tail -n 20 "$work/shell.log" >&2; return 1; }
}

anchor() { # TABLE SHARDS OP SECONDS KEYS: prints "entities/s p99_ms failed"
    local t="$1" shards="$2" op="$3" s="$4" keys="$5" bps
    bps=$(( (9594420 + shards - 1) / shards ))
    "$java" -Xmx1g --add-opens java.base/java.nio=ALL-UNNAMED --add-opens java.base/java.lang=ALL-UNNAMED \
        -Dorg.apache.hbase.thirdparty.io.netty.tryReflectionSetAccessible=true \
        -Dlog4j.configurationFile="$work/log4j2.properties" -cp "$work/classes:$anchor_cp" solus.bench.HBaseClientBench \
        --vectors "$vectors" --zk-port "$zk_port" --table "$t" --client bench --deduper settings \
        --shards "$shards" --bits-per-shard "$bps" --hash-functions 7 --expiry-seconds 86400 \
        --op "$op" --batch "$batch" --concurrency "$concurrency" --key-space "$keys" --duration "$s" \
        2>>"$work/anchor.log" | tail -n 1 |
        python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.0f %.0f %d" % (r["entities_per_second"], r["latency_p99_ms"], r["failed_requests"]))'
}

# compact TABLE: Ruby that flushes, major-compacts and waits for the compaction to end.
compact() {
    printf '%s\n' "flush '$1'" "major_compact '$1'" "sleep 3" \
        "150.times { break if compaction_state('$1').to_s == 'NONE'; sleep 2 }"
}

measure() { # LABEL TABLE SHARDS
    local size r w
    size="$(du -sm "$dir/hbase/data/default/$2" | cut -f1)"
    # Warm-up: one request per thread loads the compacted HFiles' blocks (the
    # first read of full rows takes ~17 s here), so the runs measure a warm cache.
    anchor "$2" "$3" check 1 10000000 >/dev/null
    r="$(anchor "$2" "$3" check "$seconds" 10000000)"
    w="$(anchor "$2" "$3" add-if-absent "$seconds" 10000000)"
    echo "$1 $3 $size $r $w" | tee -a "$work/results" >&2
}

family() { echo "{NAME => 'S', VERSIONS => 1, BLOCKCACHE => true, $1}"; }

base="$(printf '%s\n' "${all_settings[@]}" | grep '^base|' | cut -d'|' -f2)"
echo "== filling table settings (10 shards, ${fill_seconds} s of adds over $fill_keys keys)" >&2
shell "create 'solus_settings', $(family "$base")"
anchor solus_settings 10 add "$fill_seconds" "$fill_keys" >/dev/null
for name in $wanted; do
    line="$(printf '%s\n' "${all_settings[@]}" | grep "^$name|")" || die "unknown setting $name"
    echo "== $name: ${line#*|}" >&2
    if ! shell "alter 'solus_settings', $(family "${line#*|}")
$(compact solus_settings)"; then
        echo "$name - - refused by HBase (see above) - - - - - -" | tee -a "$work/results" >&2
        continue
    fi
    measure "$name" solus_settings 10
done
for shards in $shard_counts; do
    t="solus_width_$shards"
    echo "== $shards shards: fresh table $t, filled ${fill_seconds} s" >&2
    shell "create '$t', $(family "$base")"
    anchor "$t" "$shards" add "$fill_seconds" "$fill_keys" >/dev/null
    shell "$(compact "$t")"
    measure "shards_$shards" "$t" "$shards"
    shell "disable '$t'
drop '$t'"
done

echo
echo "HBase's own client, batch $batch, concurrency $concurrency, ${seconds} s per run, random keys over 10^7 on rows filled"
echo "with ${fill_seconds} s of adds over $fill_keys keys; size = the table on disk after a major compaction"
echo "| setting | shards | MB on disk | CheckAbsence e/s | p99 ms | failed | AddIfAbsent e/s | p99 ms | failed |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
awk '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9 }' "$work/results"
