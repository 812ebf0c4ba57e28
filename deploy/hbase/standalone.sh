#!/usr/bin/env bash
# A real Apache HBase on this machine, for development and CI: standalone mode
# (master, region server and ZooKeeper in one JVM, data on the local
# filesystem, no HDFS) plus HBase's Thrift1 server, all from Maven Central
# jars (deploy/hbase/standalone/pom.xml). Needs Java 11+ (17 tested) and Maven.
#
#   deploy/hbase/standalone.sh start DIR THRIFT_PORT [FRAMED_PORT]
#       Starts HBase with its data, logs and pid files under DIR, and the
#       Thrift1 server on 127.0.0.1:THRIFT_PORT speaking what Solus's defaults
#       speak (buffered transport, binary protocol). With FRAMED_PORT, a second
#       Thrift1 server on 127.0.0.1:FRAMED_PORT uses the framed transport
#       (2 MiB frame limit, HBase's default). Returns 0 once the Thrift port
#       answers getTableNames and a scan of hbase:meta; otherwise, after
#       SOLUS_HBASE_START_TIMEOUT seconds (default 240), prints the logs' tail,
#       stops what it started and returns 1. Whatever is already running for
#       DIR is left running, so `start` after a kill restarts only what died,
#       on the same data and ports.
#   deploy/hbase/standalone.sh stop DIR
#       Stops what `start` started (by pid: SIGTERM, SIGKILL after 60 s).
#   deploy/hbase/standalone.sh status DIR
#       Prints which processes run; exit 0 when all do.
#   deploy/hbase/standalone.sh shell DIR [FILE [ARGS...]]
#       The HBase shell (JRuby, from the hbase-shell artifact) against that
#       HBase: interactive, or running FILE (e.g. deploy/hbase/create-tables.hbase).
#       Kerberized: as the principal in KRB5CCNAME (default: the KDC's
#       DIR/krb5cc_UID, where its krb5.conf makes kinit put tickets).
#
# Kerberized mode (SOLUS_HBASE_KERBEROS=KDC_DIR, a realm deploy/kerberos/kdc.sh
# started): `start` runs HBase in secure mode (core-site.xml with
# hadoop.security.authentication=kerberos, hbase-site.xml with Kerberos
# authentication, authorization by the AccessController and the principal
# hbase/localhost@SOLUS.TEST from KDC_DIR/hbase.keytab) and its Thrift1 server
# (buffered, binary; SASL GSSAPI, service principal hbase/localhost) requiring
# SOLUS_HBASE_THRIFT_QOP. FRAMED_PORT is refused (HBase's Thrift server has no
# SASL on the framed transport). Once ready, grants SOLUS_HBASE_GRANTS.
#   deploy/hbase/standalone.sh thrift DIR PORT QOP
#       One more Kerberized Thrift1 server on 127.0.0.1:PORT requiring QOP
#       (authentication, integrity or privacy) on the Kerberized HBase already
#       started in DIR; returns 0 once it answers. `stop DIR` stops it too.
# Files under DIR: logs/master.log (master, region server, ZooKeeper; the
# AccessController's audit lines name the caller, e.g. "Client=solus//127.0.0.1
# create ..."), logs/thrift.log (the Thrift server of `start`; "Effective user:
# solus" per SASL connection), logs/thrift-framed.log, logs/thrift-PORT.log
# (those of `thrift`), *.pid, *.port, conf/ (hbase-site.xml, core-site.xml),
# kerberos.kdc (the KDC_DIR of a Kerberized HBase).
#
# Environment:
#   SOLUS_HBASE_CACHE          jar classpath cache (default ~/.cache/solus-hbase);
#                              the jars themselves live in Maven's local repository
#   SOLUS_HBASE_HEAP           master/region-server heap (default 2g)
#   SOLUS_HBASE_THRIFT_HEAP    each Thrift server's heap (default 1g)
#   SOLUS_HBASE_START_TIMEOUT  seconds to wait for readiness (default 240)
#   SOLUS_HBASE_THRIFT_INFO_PORT  web UI port of the (buffered) Thrift server,
#                              whose /jmx counts calls per Thrift method (default off)
#   JAVA_HOME                  Java to use (default: java on the PATH)
#   SOLUS_HBASE_KERBEROS       KDC_DIR of deploy/kerberos/kdc.sh: Kerberized mode (`start`)
#   SOLUS_HBASE_THRIFT_QOP     qop of the Thrift server of `start` in Kerberized
#                              mode: privacy (default), integrity or authentication
#   SOLUS_HBASE_GRANTS         Kerberized mode: space-separated USER:ACTIONS[:SCOPE]
#                              granted once ready (ACTIONS letters of RWXCA, SCOPE
#                              @namespace or a table; none: global), default
#                              "solus:RWC:@default solus-short:RWC:@default" (what
#                              Solus needs, with or without create_tables; see
#                              docs/hbase.md); "none" grants nothing. stranger: nothing
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
project="$here/standalone"
cache="${SOLUS_HBASE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/solus-hbase}"
heap="${SOLUS_HBASE_HEAP:-2g}"
thrift_heap="${SOLUS_HBASE_THRIFT_HEAP:-1g}"
timeout_s="${SOLUS_HBASE_START_TIMEOUT:-240}"
java="${JAVA_HOME:+$JAVA_HOME/bin/}java"

die() { echo "standalone.sh: $*" >&2; exit 1; }
# Prints the reason, then the header comment of this file as usage; exit 2.
usage() {
  [[ -z "${1:-}" ]] || echo "standalone.sh: $1" >&2
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# JVM flags HBase's own launcher (bin/hbase, 2.5+) sets on JDK 17.
jdk17_flags=(
  -XX:+UseG1GC
  # GZ (the S family's compression) deflates inside JNI critical regions;
  # JDK 17's G1 fails an allocation with OutOfMemoryError after 2 waits for
  # them ("Retried waiting for GCLocker too often", JDK-8192647) with the heap
  # far from full: it killed the region server under bench/hbase-vs-client.sh.
  -XX:+UnlockDiagnosticVMOptions -XX:GCLockerRetryAllocationCount=100
  -Dorg.apache.hbase.thirdparty.io.netty.tryReflectionSetAccessible=true
  --add-modules jdk.unsupported
  --add-opens java.base/java.nio=ALL-UNNAMED
  --add-opens java.base/sun.nio.ch=ALL-UNNAMED
  --add-opens java.base/java.lang=ALL-UNNAMED
  --add-opens java.base/jdk.internal.ref=ALL-UNNAMED
  --add-opens java.base/java.lang.reflect=ALL-UNNAMED
  --add-exports java.base/jdk.internal.misc=ALL-UNNAMED
  --add-exports java.security.jgss/sun.security.krb5=ALL-UNNAMED
  --add-exports java.base/sun.net.dns=ALL-UNNAMED
  --add-exports java.base/sun.net.util=ALL-UNNAMED
)

need_tools() {
  command -v "$java" >/dev/null 2>&1 || die "java not found (install a JDK 11+, e.g. apt-get install openjdk-17-jdk-headless, or set JAVA_HOME)"
  local v
  v="$("$java" -version 2>&1 | awk -F'"' '/version/ {print $2}' | cut -d. -f1)"
  [[ "$v" =~ ^[0-9]+$ && "$v" -ge 11 ]] || die "Java 11 or newer needed, found '$v' ($java)"
  command -v mvn >/dev/null 2>&1 || die "mvn not found (install Maven, e.g. apt-get install maven)"
}

# The classpath of a Maven project's pinned artifacts (default: the server's),
# resolved once per pom version.
classpath() {
  local pom_dir="${1:-$project}" key cp_file
  key="$(sha256sum "$pom_dir/pom.xml" | cut -c1-16)"
  cp_file="$cache/classpath-$key.txt"
  if [[ ! -s "$cp_file" ]]; then
    mkdir -p "$cache"
    echo "standalone.sh: resolving jars of $pom_dir/pom.xml with Maven (once; cached in $cache and ~/.m2)" >&2
    local log="$cache/resolve-$key.log"
    if ! (cd "$pom_dir" && mvn -B -q dependency:build-classpath \
          -Dmdep.outputFile="$cp_file.tmp" >"$log" 2>&1); then
      tail -n 30 "$log" >&2
      die "Maven could not resolve the jars of $pom_dir/pom.xml (log: $log)"
    fi
    mv "$cp_file.tmp" "$cp_file"
  fi
  cat "$cp_file"
}

alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

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

write_conf() {
  local dir="$1" zk_port="$2" master_port="$3" rs_port="$4"
  mkdir -p "$dir/conf" "$dir/logs" "$dir/hbase" "$dir/zk" "$dir/tmp"
  cat >"$dir/conf/hbase-site.xml" <<EOF
<?xml version="1.0"?>
<configuration>
  <property><name>hbase.cluster.distributed</name><value>false</value></property>
  <property><name>hbase.rootdir</name><value>file://$dir/hbase</value></property>
  <property><name>hbase.tmp.dir</name><value>$dir/tmp</value></property>
  <property><name>hbase.zookeeper.quorum</name><value>127.0.0.1</value></property>
  <property><name>hbase.zookeeper.property.clientPort</name><value>$zk_port</value></property>
  <property><name>hbase.zookeeper.property.dataDir</name><value>$dir/zk</value></property>
  <!-- The local filesystem has no hflush/hsync: HBase refuses to write its WAL there unless told. -->
  <property><name>hbase.unsafe.stream.capability.enforce</name><value>false</value></property>
  <property><name>hbase.master.port</name><value>$master_port</value></property>
  <property><name>hbase.regionserver.port</name><value>$rs_port</value></property>
  <property><name>hbase.master.ipc.address</name><value>127.0.0.1</value></property>
  <property><name>hbase.regionserver.ipc.address</name><value>127.0.0.1</value></property>
  <property><name>hbase.master.info.port</name><value>-1</value></property>
  <property><name>hbase.regionserver.info.port</name><value>-1</value></property>
  <property><name>hbase.thrift.info.port</name><value>-1</value></property>
  <!-- Small machine: fewer handler threads than a production region server. -->
  <property><name>hbase.regionserver.handler.count</name><value>16</value></property>
</configuration>
EOF
  cat >"$dir/conf/log4j2.properties" <<'EOF'
status = warn
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{ISO8601} %-5p [%t] %c{2}: %.1000m%n
rootLogger = INFO,console
logger.zookeeper.name = org.apache.zookeeper
logger.zookeeper.level = WARN
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = WARN
logger.hbase.name = org.apache.hadoop.hbase
logger.hbase.level = INFO
EOF
}

run_java() { # DIR HEAP PIDFILE LOG CLASS ARGS...
  local dir="$1" h="$2" pidfile="$3" log="$4"; shift 4
  nohup "$java" -Xms64m -Xmx"$h" -XX:OnOutOfMemoryError="kill -9 %p" "${jdk17_flags[@]}" \
    -Djava.util.logging.config.class=org.apache.hadoop.hbase.logging.JulToSlf4jInitializer \
    -Dlog4j.configurationFile="$dir/conf/log4j2.properties" \
    -Dhbase.log.dir="$dir/logs" -Djava.io.tmpdir="$dir/tmp" "${krb_flags[@]}" \
    -cp "${conf_first:+$conf_first:}$dir/conf:$(classpath)" "$@" >>"$log" 2>&1 </dev/null &
  echo $! >"$pidfile"
}

tail_logs() {
  local dir="$1" f
  for f in "$dir"/logs/*.log; do
    [[ -f "$f" ]] || continue
    echo "---- last lines of $f" >&2
    tail -n 40 "$f" >&2
  done
}

cmd_start() {
  [[ $# -ge 2 && $# -le 3 ]] || usage "start takes DIR THRIFT_PORT [FRAMED_PORT]"
  local dir thrift_port="$2" framed_port="${3:-}"
  valid_port "$thrift_port" || die "THRIFT_PORT must be a port number from 1 to 65535, got '$thrift_port'"
  [[ -z "$framed_port" ]] || valid_port "$framed_port" ||
    die "FRAMED_PORT must be a port number from 1 to 65535, got '$framed_port'"
  [[ "$thrift_port" != "$framed_port" ]] || die "THRIFT_PORT and FRAMED_PORT must differ"
  mkdir -p "$1"
  dir="$(cd "$1" && pwd)"
  kerberos_start_mode "$dir" "$framed_port"
  # Thrift ports first: nothing is started when one is taken by something else.
  alive "$dir/thrift.pid" || port_free "$thrift_port" || die "Thrift port $thrift_port is taken; pick another THRIFT_PORT"
  [[ -z "$framed_port" ]] || alive "$dir/thrift-framed.pid" || port_free "$framed_port" ||
    die "framed Thrift port $framed_port is taken; pick another FRAMED_PORT"
  need_tools
  classpath >/dev/null
  classpath "$project/shell" >/dev/null

  if ! alive "$dir/master.pid"; then
    # ZooKeeper, master and region server ports: chosen free the first time,
    # then kept, so a restart on the same DIR finds its data and its clients
    # (the Thrift servers) find it again. Two HBases can run side by side.
    local zk_port master_port rs_port
    if [[ -f "$dir/hbase.ports" ]]; then
      read -r zk_port master_port rs_port <"$dir/hbase.ports"
    else
      zk_port="$(free_port)"; master_port="$(free_port)"; rs_port="$(free_port)"
      echo "$zk_port $master_port $rs_port" >"$dir/hbase.ports"
    fi
    local p
    for p in "$zk_port" "$master_port" "$rs_port"; do
      port_free "$p" || die "port $p (from $dir/hbase.ports) is taken; stop what uses it or remove $dir/hbase.ports"
    done
    write_conf "$dir" "$zk_port" "$master_port" "$rs_port"
    kerberos_conf "$dir"
    echo "standalone.sh: starting HBase master + region server + ZooKeeper (127.0.0.1:$zk_port), data in $dir/hbase" >&2
    run_java "$dir" "$heap" "$dir/master.pid" "$dir/logs/master.log" \
      -Dproc_master org.apache.hadoop.hbase.master.HMaster start
  else
    echo "standalone.sh: HBase master already running (pid $(cat "$dir/master.pid")), left as is" >&2
  fi
  start_thrift "$dir" "$thrift_port" thrift buffered "$thrift_qop"
  [[ -z "$framed_port" ]] || start_thrift "$dir" "$framed_port" thrift-framed framed

  local ready_args=("$thrift_port" buffered "$thrift_qop")
  if ! wait_ready "$dir" "${ready_args[@]}" || { [[ -n "$framed_port" ]] && ! wait_ready "$dir" "$framed_port" framed; }; then
    tail_logs "$dir"
    cmd_stop "$dir" >&2 || true
    die "HBase did not become ready (logs in $dir/logs)"
  fi
  [[ -z "$kdc_dir" ]] || kerberos_grants "$dir"
}

start_thrift() { # DIR PORT NAME buffered|framed [QOP]
  local dir="$1" port="$2" name="$3" transport="$4" qop="${5:-}"
  if alive "$dir/$name.pid"; then
    echo "standalone.sh: $name server already running (pid $(cat "$dir/$name.pid")), left as is" >&2
    return 0
  fi
  port_free "$port" || die "Thrift port $port is taken; pick another THRIFT_PORT"
  echo "$port" >"$dir/$name.port"
  local flags=(-p "$port" --bind 127.0.0.1)
  # Kerberized: each server's qop in its own hbase-site.xml (first on its
  # classpath), so one HBase serves several qops.
  local conf_first=""
  [[ -z "$qop" ]] || conf_first="$(kerberos_thrift_conf "$dir" "$name" "$qop")"
  [[ "$transport" == framed ]] && flags+=(-f)
  # Optional web UI of the buffered server: /jmx has its per-call counters.
  if [[ "$transport" == buffered && -n "${SOLUS_HBASE_THRIFT_INFO_PORT:-}" ]]; then
    flags+=(--infoport "$SOLUS_HBASE_THRIFT_INFO_PORT")
  fi
  echo "standalone.sh: starting HBase Thrift1 server on 127.0.0.1:$port ($transport transport, binary protocol${qop:+, SASL GSSAPI qop $qop})" >&2
  run_java "$dir" "$thrift_heap" "$dir/$name.pid" "$dir/logs/$name.log" \
    -Dproc_thrift org.apache.hadoop.hbase.thrift.ThriftServer "${flags[@]}" start
}

wait_ready() { # DIR PORT TRANSPORT [QOP]: the probe runs while the started processes are watched
  local dir="$1" port="$2" transport="$3" qop="${4:-}" probe name
  if [[ -n "$qop" ]]; then
    kerberos_java "$dir" ready 127.0.0.1 "$port" "$qop" "$timeout_s" "hbase/localhost@SOLUS.TEST" "$kdc_dir/hbase.keytab" &
  else
    "$java" -cp "$dir/conf:$(classpath)" -Dlog4j.configurationFile="$dir/conf/log4j2.properties" \
      -Dlog4j2.level=WARN "$project/WaitReady.java" 127.0.0.1 "$port" "$transport" "$timeout_s" \
      2> >(grep -v -E '^[0-9-]+ [0-9:,]+ (INFO|WARN) ' >&2) &
  fi
  probe=$!
  while kill -0 "$probe" 2>/dev/null; do
    for name in master thrift thrift-framed $(extra_thrift_names "$dir"); do
      if [[ -f "$dir/$name.pid" ]] && ! alive "$dir/$name.pid"; then
        kill "$probe" 2>/dev/null || true
        wait "$probe" 2>/dev/null || true
        echo "standalone.sh: the $name process exited during start-up" >&2
        return 1
      fi
    done
    sleep 1
  done
  wait "$probe"
}

stop_pid() { # PIDFILE NAME
  local pidfile="$1" name="$2" pid
  alive "$pidfile" || { rm -f "$pidfile"; return 0; }
  pid="$(cat "$pidfile")"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 60); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; echo "standalone.sh: stopped $name (pid $pid)" >&2; return 0; }
    sleep 1
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$pidfile"
  echo "standalone.sh: killed $name (pid $pid) after 60 s" >&2
}

cmd_stop() {
  [[ $# -eq 1 ]] || usage "stop takes DIR"
  [[ -d "$1" ]] || die "no such directory: $1"
  local dir
  dir="$(cd "$1" && pwd)"
  ls "$dir"/*.pid >/dev/null 2>&1 || echo "standalone.sh: nothing was started in $dir" >&2
  local name
  for name in $(extra_thrift_names "$dir"); do
    stop_pid "$dir/$name.pid" "Thrift1 server ($name)"
  done
  stop_pid "$dir/thrift-framed.pid" "Thrift1 server (framed)"
  stop_pid "$dir/thrift.pid" "Thrift1 server"
  stop_pid "$dir/master.pid" "HBase master"
}

cmd_status() {
  [[ $# -eq 1 ]] || usage "status takes DIR"
  local dir="$1" ok=0 name
  for name in master thrift thrift-framed $(extra_thrift_names "$dir"); do
    if alive "$dir/$name.pid"; then
      echo "$name: running (pid $(cat "$dir/$name.pid"))"
    elif [[ "$name" != thrift-framed || -f "$dir/thrift-framed.port" ]]; then
      echo "$name: not running"; ok=1
    fi
  done
  return $ok
}

cmd_shell() {
  [[ $# -ge 1 ]] || usage "shell takes DIR [FILE [ARGS...]]"
  [[ -d "$1" ]] || die "no such directory: $1"
  local dir
  dir="$(cd "$1" && pwd)"; shift
  [[ -f "$dir/conf/hbase-site.xml" ]] || die "$dir has no HBase started by this script (run start first)"
  alive "$dir/master.pid" || die "the HBase in $dir is not running (run: $0 start $dir THRIFT_PORT)"
  need_tools
  kerberos_client_mode "$dir"
  # The shell runs on its own 2.4.17 classpath (see standalone/shell/pom.xml),
  # JRuby first as bin/hbase puts it. HBase 2.4 logs through log4j 1.
  local cp jruby
  cp="$(classpath "$project/shell")"
  jruby="$(tr ':' '\n' <<<"$cp" | grep '/jruby-complete-[^/]*\.jar$' | head -n 1)"
  [[ -n "$jruby" ]] || die "jruby-complete is missing from the shell's classpath"
  printf '%s\n' 'log4j.rootLogger=WARN,console' 'log4j.appender.console=org.apache.log4j.ConsoleAppender' \
    'log4j.appender.console.target=System.err' 'log4j.appender.console.layout=org.apache.log4j.PatternLayout' \
    'log4j.appender.console.layout.ConversionPattern=%d{ISO8601} %-5p %c{2}: %m%n' \
    'log4j.logger.org.apache.zookeeper=ERROR' 'log4j.logger.org.apache.hadoop=ERROR' >"$dir/conf/log4j-shell.properties"
  # The shell's entry point in the hbase-shell jar (bin/hbase shell runs the same).
  "$java" -Xmx256m "${jdk17_flags[@]}" "${krb_flags[@]}" --add-opens java.base/java.io=ALL-UNNAMED \
    -Dlog4j.configuration="file:$dir/conf/log4j-shell.properties" \
    -cp "$jruby:$dir/conf:$cp" org.jruby.JarBootstrapMain "$@"
}

# ---- Kerberized mode (SOLUS_HBASE_KERBEROS); nothing here runs in plain mode.
kdc_dir=""      # the KDC_DIR of a Kerberized HBase, empty in plain mode
krb_flags=()    # the JVMs' Kerberos flags (-Djava.security.krb5.conf)
thrift_qop=""   # qop of the Thrift server of `start`, empty in plain mode

valid_qop() { [[ "$1" == privacy || "$1" == integrity || "$1" == authentication ]]; }

use_kdc() { # KDC_DIR
  [[ -d "$1" ]] || die "no such KDC directory: $1 (start one: deploy/kerberos/kdc.sh start $1)"
  kdc_dir="$(cd "$1" && pwd)"
  local f
  for f in krb5.conf hbase.keytab; do
    [[ -f "$kdc_dir/$f" ]] || die "$kdc_dir/$f is missing: is $kdc_dir a realm of deploy/kerberos/kdc.sh?"
  done
  krb_flags=(-Djava.security.krb5.conf="$kdc_dir/krb5.conf")
}

# `start`: Kerberized or plain, as the environment says; an HBase already
# running on DIR must be in that same mode.
kerberos_start_mode() { # DIR FRAMED_PORT
  local dir="$1" framed_port="$2" was=""
  [[ -f "$dir/kerberos.kdc" ]] && was="$(cat "$dir/kerberos.kdc")"
  if [[ -n "${SOLUS_HBASE_KERBEROS:-}" ]]; then
    use_kdc "$SOLUS_HBASE_KERBEROS"
    thrift_qop="${SOLUS_HBASE_THRIFT_QOP:-privacy}"
    valid_qop "$thrift_qop" ||
      die "SOLUS_HBASE_THRIFT_QOP must be privacy, integrity or authentication, got '$thrift_qop'"
    [[ -z "$framed_port" ]] ||
      die "FRAMED_PORT with SOLUS_HBASE_KERBEROS: HBase's Thrift server supports SASL on the buffered transport only"
    if alive "$dir/master.pid" && [[ "$was" != "$kdc_dir" ]]; then
      die "the HBase running in $dir is not Kerberized with $kdc_dir; stop it first"
    fi
  else
    if alive "$dir/master.pid" && [[ -n "$was" ]]; then
      die "the HBase running in $dir is Kerberized (KDC $was); set SOLUS_HBASE_KERBEROS=$was or stop it first"
    fi
  fi
}

# Commands on a started HBase (`thrift`, `shell`): its mode from DIR.
kerberos_client_mode() { # DIR
  [[ -f "$1/kerberos.kdc" ]] || return 0
  use_kdc "$(cat "$1/kerberos.kdc")"
  # The KDC's krb5.conf sends kinit's tickets there; Java reads KRB5CCNAME.
  export KRB5CCNAME="${KRB5CCNAME:-FILE:$kdc_dir/krb5cc_$(id -u)}"
}

prop() { printf '  <property><name>%s</name><value>%s</value></property>\n' "$1" "$2"; }

# After write_conf: the secure settings (or, in plain mode, none left over).
kerberos_conf() { # DIR
  local dir="$1" site="$1/conf/hbase-site.xml"
  if [[ -z "$kdc_dir" ]]; then
    rm -f "$dir/conf/core-site.xml" "$dir/kerberos.kdc"
    return 0
  fi
  local principal="hbase/localhost@SOLUS.TEST" keytab="$kdc_dir/hbase.keytab"
  local ac=org.apache.hadoop.hbase.security.access.AccessController
  # Hadoop reads this from core-site.xml only: in hbase-site.xml alone HBase
  # runs as root (auth:SIMPLE) and the Thrift server refuses the qop.
  {
    echo '<?xml version="1.0"?>'
    echo '<configuration>'
    prop hadoop.security.authentication kerberos
    # The Thrift servers (hbase) act for their SASL callers.
    prop hadoop.proxyuser.hbase.hosts '*'
    prop hadoop.proxyuser.hbase.groups '*'
    echo '</configuration>'
  } >"$dir/conf/core-site.xml"
  local extra
  extra="$(
    echo '  <!-- Kerberized mode (SOLUS_HBASE_KERBEROS). -->'
    prop hbase.security.authentication kerberos
    prop hbase.security.authorization true
    prop hbase.coprocessor.master.classes "$ac"
    prop hbase.coprocessor.region.classes "$ac"
    prop hbase.coprocessor.regionserver.classes "$ac"
    prop hbase.master.kerberos.principal "$principal"
    prop hbase.master.keytab.file "$keytab"
    prop hbase.regionserver.kerberos.principal "$principal"
    prop hbase.regionserver.keytab.file "$keytab"
    prop hbase.thrift.kerberos.principal "$principal"
    prop hbase.thrift.keytab.file "$keytab"
    # Without a qop a Kerberized Thrift server lets anyone in, as itself.
    prop hbase.thrift.security.qop "$thrift_qop"
  )"
  # Before write_conf's closing tag.
  sed -i '/^<\/configuration>$/d' "$site"
  printf '%s\n</configuration>\n' "$extra" >>"$site"
  quiet_log_conf "$dir"
  echo "$kdc_dir" >"$dir/kerberos.kdc"
}

quiet_log_conf() { printf '%s\n' 'status = error' 'rootLogger.level = off' >"$1/conf/log4j2-quiet.properties"; }

kerberos_java() { # DIR ARGS...: KerberosProbe.java on HBase's classpath
  local dir="$1"; shift
  # The libraries' own logging off: the probe prints its last error itself.
  [[ -f "$dir/conf/log4j2-quiet.properties" ]] || quiet_log_conf "$dir"
  "$java" "${jdk17_flags[@]}" -cp "$dir/conf:$(classpath)" \
    -Dlog4j.configurationFile="$dir/conf/log4j2-quiet.properties" \
    "${krb_flags[@]}" "$project/KerberosProbe.java" "$@"
}

kerberos_grants() { # DIR
  local dir="$1" g
  local grants="${SOLUS_HBASE_GRANTS-solus:RWC:@default solus-short:RWC:@default}"
  [[ "$grants" != none ]] || return 0
  for g in $grants; do
    [[ "$g" =~ ^[^:]+:[RWXCA]+(:.+)?$ ]] ||
      die "SOLUS_HBASE_GRANTS entries are USER:ACTIONS[:SCOPE] with ACTIONS letters of RWXCA, got '$g'"
  done
  # shellcheck disable=SC2086 # one argument per grant
  kerberos_java "$dir" grant "$timeout_s" "hbase/localhost@SOLUS.TEST" "$kdc_dir/hbase.keytab" $grants >&2 ||
    die "granting '$grants' failed (logs in $dir/logs)"
}

# A copy of hbase-site.xml requiring QOP, in DIR/conf-NAME; prints that directory.
kerberos_thrift_conf() { # DIR NAME QOP
  local out="$1/conf-$2"
  mkdir -p "$out"
  sed -E "s|(<name>hbase.thrift.security.qop</name><value>)[a-z]*(</value>)|\1$3\2|" \
    "$1/conf/hbase-site.xml" >"$out/hbase-site.xml"
  grep -q "<value>$3</value>" "$out/hbase-site.xml" || die "could not set the qop in $out/hbase-site.xml"
  echo "$out"
}

# Names of the pid files of `thrift` servers (thrift-PORT).
extra_thrift_names() { # DIR
  local f
  for f in "$1"/thrift-[0-9]*.pid; do
    [[ -f "$f" ]] && basename "$f" .pid
  done
  return 0
}

cmd_thrift() {
  [[ $# -eq 3 ]] || usage "thrift takes DIR PORT QOP"
  [[ -d "$1" ]] || die "no such directory: $1"
  local dir port="$2" qop="$3"
  dir="$(cd "$1" && pwd)"
  valid_port "$port" || die "PORT must be a port number from 1 to 65535, got '$port'"
  valid_qop "$qop" || die "QOP must be privacy, integrity or authentication, got '$qop'"
  [[ -f "$dir/kerberos.kdc" ]] || die "$dir has no Kerberized HBase (start one with SOLUS_HBASE_KERBEROS=KDC_DIR)"
  alive "$dir/master.pid" || die "the HBase in $dir is not running"
  need_tools
  kerberos_client_mode "$dir"
  start_thrift "$dir" "$port" "thrift-$port" buffered "$qop"
  if ! wait_ready "$dir" "$port" buffered "$qop"; then
    tail -n 40 "$dir/logs/thrift-$port.log" >&2 || true
    stop_pid "$dir/thrift-$port.pid" "Thrift1 server (thrift-$port)"
    die "the Thrift1 server on port $port did not become ready (log: $dir/logs/thrift-$port.log)"
  fi
}

case "${1:-}" in
  start) shift; cmd_start "$@" ;;
  thrift) shift; cmd_thrift "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  status) shift; cmd_status "$@" ;;
  shell) shift; cmd_shell "$@" ;;
  "") usage "no command given" ;;
  *) usage "unknown command '$1'" ;;
esac
