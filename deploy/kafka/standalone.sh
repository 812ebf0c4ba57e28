#!/usr/bin/env bash
# A real Apache Kafka broker on this machine, for development and CI: KRaft
# mode, one JVM that is both broker and controller, data on the local
# filesystem, all from Maven Central jars (deploy/kafka/standalone/pom.xml,
# org.apache.kafka:kafka_2.13 at the Java clients' kafka.version). Needs
# Java 17+ and Maven.
#
#   deploy/kafka/standalone.sh start DIR PORT
#       Formats DIR/data (the first time) and starts the broker with its
#       data, config, log and pid file under DIR: clients on
#       127.0.0.1:PORT (PLAINTEXT), the controller on a free port kept in
#       DIR/controller.port. Single-node settings: offsets and transaction
#       state logs with replication factor 1 and min.insync.replicas 1, so
#       exactly-once (transactional) clients work. Returns 0 once the broker
#       answers describeCluster with a controller; otherwise, after
#       SOLUS_KAFKA_START_TIMEOUT seconds (default 120), prints the log's
#       tail, stops the broker and returns 1. A broker already running for
#       DIR is left running.
#   deploy/kafka/standalone.sh stop DIR
#       Stops what `start` started (by pid: SIGTERM, SIGKILL after 60 s).
#   deploy/kafka/standalone.sh status DIR
#       Prints whether the broker runs; exit 0 when it does.
#
# Environment:
#   SOLUS_KAFKA_CACHE          jar classpath cache (default ~/.cache/solus-kafka);
#                              the jars themselves live in Maven's local repository
#   SOLUS_KAFKA_HEAP           broker heap (default 512m)
#   SOLUS_KAFKA_START_TIMEOUT  seconds to wait for readiness (default 120)
#   JAVA_HOME                  Java to use (default: java on the PATH)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
project="$here/standalone"
cache="${SOLUS_KAFKA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/solus-kafka}"
heap="${SOLUS_KAFKA_HEAP:-512m}"
timeout_s="${SOLUS_KAFKA_START_TIMEOUT:-120}"
java="${JAVA_HOME:+$JAVA_HOME/bin/}java"

die() { echo "standalone.sh: $*" >&2; exit 1; }
# Prints the reason, then the header comment of this file as usage; exit 2.
usage() {
  [[ -z "${1:-}" ]] || echo "standalone.sh: $1" >&2
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

need_tools() {
  command -v "$java" >/dev/null 2>&1 || die "java not found (install a JDK 17+, e.g. apt-get install openjdk-17-jdk-headless, or set JAVA_HOME)"
  local v
  v="$("$java" -version 2>&1 | awk -F'"' '/version/ {print $2}' | cut -d. -f1)"
  [[ "$v" =~ ^[0-9]+$ && "$v" -ge 17 ]] || die "Java 17 or newer needed (Kafka 4 brokers), found '$v' ($java)"
  command -v mvn >/dev/null 2>&1 || die "mvn not found (install Maven, e.g. apt-get install maven)"
}

# The classpath of the pom's pinned artifacts, resolved once per pom version.
classpath() {
  local key cp_file
  key="$(sha256sum "$project/pom.xml" | cut -c1-16)"
  cp_file="$cache/classpath-$key.txt"
  if [[ ! -s "$cp_file" ]]; then
    mkdir -p "$cache"
    echo "standalone.sh: resolving jars of $project/pom.xml with Maven (once; cached in $cache and ~/.m2)" >&2
    local log="$cache/resolve-$key.log"
    if ! (cd "$project" && mvn -B -q dependency:build-classpath \
          -Dmdep.outputFile="$cp_file.tmp" >"$log" 2>&1); then
      tail -n 30 "$log" >&2
      die "Maven could not resolve the jars of $project/pom.xml (log: $log)"
    fi
    mv "$cp_file.tmp" "$cp_file"
  fi
  cat "$cp_file"
}

# A pid runs when it exists and is not a zombie (a broker this shell started
# and that died stays a zombie until the shell exits).
running() { kill -0 "$1" 2>/dev/null && [[ "$(ps -o stat= -p "$1" 2>/dev/null)" != Z* ]]; }
alive() { [[ -f "$1" ]] && running "$(cat "$1")"; }

valid_port() { [[ "$1" =~ ^[0-9]+$ ]] && ((10#$1 >= 1 && 10#$1 <= 65535)); }

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 30000))
    if port_free "$p"; then echo "$p"; return; fi
  done
  die "no free port found"
}

write_conf() { # DIR PORT CONTROLLER_PORT
  local dir="$1" port="$2" cport="$3"
  mkdir -p "$dir/conf" "$dir/logs" "$dir/data" "$dir/tmp"
  cat >"$dir/conf/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/data
# One node: every internal topic has one replica, and transactions
# (exactly-once clients) need their state log writable with one replica.
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
default.replication.factor=1
min.insync.replicas=1
# Small machine: fewer internal partitions and threads than production.
offsets.topic.num.partitions=8
transaction.state.log.num.partitions=8
num.network.threads=2
num.io.threads=4
log.cleaner.threads=1
num.partitions=1
# Clients create their topics; a typo must not create one silently.
auto.create.topics.enable=false
# A consumer group forms at once instead of after 3 s (tests restart apps often).
group.initial.rebalance.delay.ms=0
EOF
  cat >"$dir/conf/log4j2.properties" <<'EOF'
status = warn
appender.file.type = Console
appender.file.name = console
appender.file.target = SYSTEM_OUT
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger = INFO,console
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.apache.name = org.apache.kafka
logger.apache.level = INFO
logger.coord.name = org.apache.kafka.coordinator
logger.coord.level = WARN
EOF
  # The readiness probe reports its own error: its admin client stays quiet.
  printf '%s\n' 'status = warn' 'rootLogger.level = off' >"$dir/conf/log4j2-quiet.properties"
}

# The JVM of the broker or one of its tools: the pom's classpath, small heap.
run_kafka() { # DIR HEAP CLASS ARGS...
  local dir="$1" h="$2"; shift 2
  "$java" -Xms64m -Xmx"$h" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:OnOutOfMemoryError="kill -9 %p" \
    -Dlog4j2.configurationFile="$dir/conf/log4j2.properties" \
    -Djava.io.tmpdir="$dir/tmp" -Dkafka.logs.dir="$dir/logs" \
    -cp "$(classpath)" "$@"
}

cmd_start() {
  [[ $# -eq 2 ]] || usage "start takes DIR PORT"
  local dir port="$2" cport
  valid_port "$port" || die "PORT must be a port number from 1 to 65535, got '$port'"
  mkdir -p "$1"
  dir="$(cd "$1" && pwd)"
  if alive "$dir/kafka.pid"; then
    echo "standalone.sh: Kafka already running for $dir (pid $(cat "$dir/kafka.pid")), left as is" >&2
    return 0
  fi
  port_free "$port" || die "port $port is taken; pick another PORT"
  need_tools
  classpath >/dev/null
  # The controller port is chosen free once, then kept with the data (the
  # formatted quorum names it).
  if [[ -f "$dir/controller.port" ]]; then
    cport="$(cat "$dir/controller.port")"
  else
    cport="$(free_port)"
    echo "$cport" >"$dir/controller.port"
  fi
  port_free "$cport" || die "controller port $cport (from $dir/controller.port) is taken; stop what uses it or remove $dir"
  write_conf "$dir" "$port" "$cport"
  echo "$port" >"$dir/kafka.port"
  if [[ ! -f "$dir/data/meta.properties" ]]; then
    local id
    id="$(run_kafka "$dir" 128m kafka.tools.StorageTool random-uuid 2>"$dir/logs/format.log")" ||
      { tail -n 30 "$dir/logs/format.log" >&2; die "kafka-storage random-uuid failed"; }
    run_kafka "$dir" 128m kafka.tools.StorageTool format --cluster-id "$id" \
      --config "$dir/conf/server.properties" >>"$dir/logs/format.log" 2>&1 ||
      { tail -n 30 "$dir/logs/format.log" >&2; die "formatting $dir/data failed (log: $dir/logs/format.log)"; }
  fi
  echo "standalone.sh: starting Kafka $(kafka_version) (KRaft, broker+controller) on 127.0.0.1:$port, data in $dir/data" >&2
  nohup "$java" -Xms64m -Xmx"$heap" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:OnOutOfMemoryError="kill -9 %p" \
    -Dlog4j2.configurationFile="$dir/conf/log4j2.properties" \
    -Djava.io.tmpdir="$dir/tmp" -Dkafka.logs.dir="$dir/logs" \
    -cp "$(classpath)" kafka.Kafka "$dir/conf/server.properties" \
    >>"$dir/logs/server.log" 2>&1 </dev/null &
  echo $! >"$dir/kafka.pid"
  if ! wait_ready "$dir" "$port"; then
    echo "---- last lines of $dir/logs/server.log" >&2
    tail -n 40 "$dir/logs/server.log" >&2
    cmd_stop "$dir" >&2 || true
    die "Kafka did not become ready (log: $dir/logs/server.log)"
  fi
  echo "standalone.sh: Kafka ready on 127.0.0.1:$port (pid $(cat "$dir/kafka.pid"))" >&2
}

kafka_version() { tr ':' '\n' <<<"$(classpath)" | sed -n 's|.*/kafka_2.13-\(.*\)\.jar$|\1|p' | head -n 1; }

wait_ready() { # DIR PORT: the probe runs while the broker is watched
  local dir="$1" port="$2" probe
  "$java" -Xmx128m -cp "$(classpath)" -Dlog4j2.configurationFile="$dir/conf/log4j2-quiet.properties" \
    "$project/WaitReady.java" "127.0.0.1:$port" "$timeout_s" >&2 &
  probe=$!
  while kill -0 "$probe" 2>/dev/null; do
    if ! alive "$dir/kafka.pid"; then
      kill "$probe" 2>/dev/null || true
      wait "$probe" 2>/dev/null || true
      echo "standalone.sh: the Kafka process exited during start-up" >&2
      return 1
    fi
    sleep 1
  done
  wait "$probe"
}

cmd_stop() {
  [[ $# -eq 1 ]] || usage "stop takes DIR"
  [[ -d "$1" ]] || die "no such directory: $1"
  local dir pid
  dir="$(cd "$1" && pwd)"
  if ! alive "$dir/kafka.pid"; then
    [[ -f "$dir/kafka.pid" ]] || echo "standalone.sh: nothing was started in $dir" >&2
    rm -f "$dir/kafka.pid"
    return 0
  fi
  pid="$(cat "$dir/kafka.pid")"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 60); do
    if ! running "$pid"; then
      rm -f "$dir/kafka.pid"
      echo "standalone.sh: stopped Kafka (pid $pid)" >&2
      return 0
    fi
    sleep 1
  done
  kill -KILL "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do running "$pid" || break; sleep 0.2; done
  rm -f "$dir/kafka.pid"
  echo "standalone.sh: killed Kafka (pid $pid) after 60 s" >&2
}

cmd_status() {
  [[ $# -eq 1 ]] || usage "status takes DIR"
  if alive "$1/kafka.pid"; then
    echo "kafka: running (pid $(cat "$1/kafka.pid"), port $(cat "$1/kafka.port" 2>/dev/null))"
  else
    echo "kafka: not running"
    return 1
  fi
}

case "${1:-}" in
  start) shift; cmd_start "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  status) shift; cmd_status "$@" ;;
  "") usage "no command given" ;;
  *) usage "unknown command '$1'" ;;
esac
