#!/usr/bin/env bash
# Restart time of the embedded store after kill -9, for a deduper of about
# 10^8 bits (n = 10,400,000 at p = 1%), loaded once with every key:
#
#   bench/restart.sh [key space]        default 10400000
#   bench/restart.sh 1000000            # a quick try
#
# Builds Solus in release mode, starts `solus serve` on a free port with a
# temporary data directory, loads the keys with `solus bench --sequential`,
# kills the server with SIGKILL in the middle of a further stream of adds,
# restarts it, and prints how long it took until it answered again (the
# server listens only once the store has loaded its page files and replayed
# its journal), with the data directory's size at the kill. tests/crash.rs
# checks that no acknowledged add is lost; this measures the time.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
'' | *[!0-9]*) [ -z "${1:-}" ] || { echo "usage: bench/restart.sh [key space, a whole number] (see --help)" >&2; exit 2; } ;;
esac
keys="${1:-10400000}"
cargo build --release --locked -p solus >&2
bin=target/release/solus
dir="$(mktemp -d /tmp/solus-restart.XXXXXX)"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
addr="127.0.0.1:$port"
serve() {
    SOLUS__SERVER__LISTEN="$addr" SOLUS__STORAGE__EMBEDDED__PATH="$dir/data" \
        SOLUS__METRICS__LISTEN="" SOLUS__SERVER__HEALTH_LISTEN="" SOLUS__LOG__LEVEL=info \
        "$bin" serve >>"$dir/server.log" 2>&1 &
    echo $!
}
cleanup() {
    kill -9 "${pid:-0}" 2>/dev/null || true
    kill "${load:-0}" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT
wait_up() { # wait_up <start> <server pid>: seconds from start until it answers
    local start=$1 server=$2
    until "$bin" deduper list --addr "$addr" --client bench >/dev/null 2>&1; do
        if ! kill -0 "$server" 2>/dev/null; then
            echo "solus serve exited before answering; its log ends:" >&2
            tail -5 "$dir/server.log" >&2
            exit 1
        fi
        sleep 0.02
    done
    python3 -c "import time; print(f'{time.time() - $start:.2f}')"
}
pid=$(serve)
wait_up "$(date +%s.%N)" "$pid" >/dev/null
echo "loading $keys keys (one Add each) ..." >&2
"$bin" bench --addr "$addr" --client bench --deduper restart --op add --sequential \
    --key-space "$keys" --batch 1000 --concurrency 4 --quiet --json >"$dir/load.json"
echo "adding more in the background, then kill -9 ..." >&2
"$bin" bench --addr "$addr" --client bench --deduper restart --op add --duration 30 \
    --key-space "$keys" --seed 7 --batch 1000 --concurrency 4 --quiet >/dev/null 2>&1 &
load=$!
sleep 3
kill -9 "$pid"
# Not our child (started in a subshell): poll until the kernel has torn it
# down and its port is free, as a restarted pod would find it.
for _ in $(seq 500); do kill -0 "$pid" 2>/dev/null || break; sleep 0.02; done
du_alloc=$(du -sk "$dir/data" | cut -f1)
du_apparent=$(du -sk --apparent-size "$dir/data" | cut -f1)
start=$(date +%s.%N)
pid=$(serve)
secs=$(wait_up "$start" "$pid")
recovered=$(grep -o 'embedded store recovered.*' "$dir/server.log" | tail -1)
echo "| keys | data directory after kill -9 (allocated / apparent) | restart until the first answer | recovery log |"
echo "|---:|---|---:|---|"
echo "| $keys | $((du_alloc / 1024)) MiB / $((du_apparent / 1024)) MiB | $secs s | ${recovered} |"
