#!/usr/bin/env bash
# AddIfAbsent and CheckAbsence throughput of Solus (release build) on a
# Kerberized HBase's Thrift servers, one per qop (authentication, integrity,
# privacy), beside a plain (non-SASL) HBase: `solus bench`, batch 1000,
# concurrency 4. Prints one JSON line per (mode, op); figures go to docs/hbase.md,
# "Kerberos: Solus settings, errors and throughput".
#
#   bash bench/kerberos.sh      # needs the variables .ci/run exports:
#     SOLUS_KERBEROS_KDC_DIR, SOLUS_KERBEROS_THRIFT="privacy=H:P,integrity=H:P,authentication=H:P"
#   and PLAIN_THRIFT=host:port, a plain HBase Thrift1 server
#   (deploy/hbase/standalone.sh start DIR PORT); without it, no plain line.
#
# Environment: BENCH_SECONDS (10), MODES ("plain authentication integrity privacy"),
# SOLUS_BIN (a release binary to use instead of building one).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${BENCH_SECONDS:-10}"
modes="${MODES:-plain authentication integrity privacy}"
: "${SOLUS_KERBEROS_KDC_DIR:?set it (deploy/kerberos/kdc.sh start DIR)}"
: "${SOLUS_KERBEROS_THRIFT:?set it (privacy=H:P,integrity=H:P,authentication=H:P)}"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

if [[ -n "${SOLUS_BIN:-}" ]]; then
    solus="$SOLUS_BIN"
else
    cargo build --release --quiet
    solus="${CARGO_TARGET_DIR:-target}/release/solus"
fi
work="$(mktemp -d /tmp/solus-kerberos-bench.XXXXXX)"
pid=""
cleanup() {
    [[ -z "$pid" ]] || kill "$pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

thrift_of() { # QOP: its address from SOLUS_KERBEROS_THRIFT
    tr ',' '\n' <<<"$SOLUS_KERBEROS_THRIFT" | sed -n "s/^$1=//p"
}

serve() { # MODE: starts a server for MODE; sets addr
    local port mode="$1" address
    [[ -z "$pid" ]] || { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
    port="$(free_port)"
    local env=(SOLUS__SERVER__LISTEN="127.0.0.1:$port" SOLUS__METRICS__LISTEN="" SOLUS__STORAGE__BACKEND=hbase
        SOLUS__STORAGE__TABLE="solus_bench_$mode")
    if [[ "$mode" == plain ]]; then
        address="$PLAIN_THRIFT"
    else
        address="$(thrift_of "$mode")"
        env+=(SOLUS__STORAGE__HBASE__KERBEROS__ENABLED=true SOLUS__STORAGE__HBASE__KERBEROS__MIN_QOP="$mode"
            SOLUS__STORAGE__HBASE__KERBEROS__KEYTAB="$SOLUS_KERBEROS_KDC_DIR/solus.keytab"
            SOLUS__STORAGE__HBASE__KERBEROS__KRB5_CONFIG="$SOLUS_KERBEROS_KDC_DIR/krb5.conf"
            SOLUS__STORAGE__HBASE__KERBEROS__SERVER_HOST=localhost)
    fi
    env "${env[@]}" SOLUS__STORAGE__HBASE__ADDRESSES="$address" RUST_LOG=warn "$solus" serve >"$work/serve-$mode.log" 2>&1 &
    pid=$!
    addr="127.0.0.1:$port"
    for _ in $(seq 1 150); do
        "$solus" deduper list --addr "$addr" --client probe >/dev/null 2>&1 && return
        sleep 0.2
    done
    echo "bench/kerberos.sh: solus serve ($mode) did not start (log: $work/serve-$mode.log)" >&2
    cat "$work/serve-$mode.log" >&2
    exit 1
}

run="$(date +%s)"
for mode in $modes; do
    if [[ "$mode" == plain && -z "${PLAIN_THRIFT:-}" ]]; then
        echo "bench/kerberos.sh: no PLAIN_THRIFT: no plain line" >&2
        continue
    fi
    serve "$mode"
    for op in add-if-absent check; do
        printf '%s %s ' "$mode" "$op"
        "$solus" bench --addr "$addr" --op "$op" --deduper "bench-$mode-$run" --batch 1000 --concurrency 4 \
            --duration "$seconds" --json --quiet | tail -n 1
    done
done
