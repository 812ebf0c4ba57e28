#!/usr/bin/env bash
# A throwaway MIT Kerberos KDC for development and CI: realm SOLUS.TEST on
# 127.0.0.1 (one free port, UDP and TCP), with a private configuration only:
# nothing under /etc is read or written (clients use DIR/krb5.conf through
# KRB5_CONFIG, Java through -Djava.security.krb5.conf, Solus through
# storage.hbase.kerberos.krb5_config). Installs Debian's krb5-kdc, krb5-user
# and krb5-admin-server (kadmin.local) when missing (needs root and apt-get).
#
#   deploy/kerberos/kdc.sh start DIR
#       Creates the realm under DIR the first time and starts the KDC; returns
#       0 once it answers (kinit -kt works). Writes:
#         DIR/krb5.conf         client configuration (KRB5_CONFIG=DIR/krb5.conf)
#         DIR/kdc.conf          KDC configuration (KRB5_KDC_PROFILE)
#         DIR/kdc.pid           the krb5kdc process, DIR/kdc.port its port
#         DIR/kdc.log           the KDC's log (every AS/TGS request)
#         DIR/hbase.keytab      hbase/localhost@SOLUS.TEST: HBase's server principal
#                               (master, region server and Thrift servers)
#         DIR/solus.keytab      solus/localhost@SOLUS.TEST: Solus's client principal
#         DIR/short.keytab      solus-short/localhost@SOLUS.TEST: tickets live 20 s
#                               (ticket renewal tests)
#         DIR/stranger.keytab   stranger/localhost@SOLUS.TEST: a principal HBase
#                               grants nothing (authorization tests)
#       Already running: left as is. Stopped: restarted on the same realm, port
#       and keytabs (keytabs are exported once; re-exporting would change keys).
#   deploy/kerberos/kdc.sh stop DIR
#       Stops the KDC (SIGTERM, SIGKILL after 10 s). DIR is kept.
#   deploy/kerberos/kdc.sh status DIR
#       Prints whether the KDC runs; exit 0 when it does.
#
# Try it:  KRB5_CONFIG=DIR/krb5.conf KRB5CCNAME=FILE:DIR/cc kinit -kt DIR/solus.keytab solus/localhost
#          KRB5_CONFIG=DIR/krb5.conf KRB5CCNAME=FILE:DIR/cc klist
set -euo pipefail

realm=SOLUS.TEST
die() { echo "kdc.sh: $*" >&2; exit 1; }
usage() {
  [[ -z "${1:-}" ]] || echo "kdc.sh: $1" >&2
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 30000))
    if port_free "$p"; then echo "$p"; return; fi
  done
  die "no free port found"
}

need_tools() {
  local missing=()
  command -v krb5kdc >/dev/null 2>&1 || missing+=(krb5-kdc)
  command -v kinit >/dev/null 2>&1 || missing+=(krb5-user)
  command -v kadmin.local >/dev/null 2>&1 || missing+=(krb5-admin-server)
  [[ ${#missing[@]} -eq 0 ]] && return 0
  command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and no apt-get to install them"
  [[ "$(id -u)" -eq 0 ]] || die "missing Debian packages ${missing[*]}: run as root or: sudo apt-get install ${missing[*]}"
  echo "kdc.sh: installing Debian packages ${missing[*]}" >&2
  apt-get update -qq
  # noninteractive: the packages' debconf questions (default realm) get their defaults;
  # their own /etc files are never used here. No daemon is started by the packages
  # in a container without an init system.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Private client and KDC configuration for every command below.
use_dir() {
  export KRB5_CONFIG="$1/krb5.conf" KRB5_KDC_PROFILE="$1/kdc.conf"
}

write_conf() { # DIR PORT
  local dir="$1" port="$2"
  cat >"$dir/krb5.conf" <<EOF
# Client configuration of the throwaway realm (deploy/kerberos/kdc.sh).
[libdefaults]
  default_realm = $realm
  dns_lookup_kdc = false
  dns_lookup_realm = false
  # Principals name "localhost" literally: no canonicalisation through DNS.
  dns_canonicalize_hostname = false
  rdns = false
  # TCP: the KDC's replies never hit UDP size limits.
  udp_preference_limit = 1
  ticket_lifetime = 24h
  renew_lifetime = 7d
  forwardable = true
  # The kinit examples' tickets stay in DIR, not in the user's /tmp/krb5cc_UID.
  default_ccache_name = FILE:$dir/krb5cc_%{uid}

[realms]
  $realm = {
    kdc = 127.0.0.1:$port
  }

[domain_realm]
  localhost = $realm
  .localhost = $realm
EOF
  cat >"$dir/kdc.conf" <<EOF
# KDC configuration of the throwaway realm (deploy/kerberos/kdc.sh).
[kdcdefaults]
  kdc_listen = 127.0.0.1:$port
  kdc_tcp_listen = 127.0.0.1:$port

[realms]
  $realm = {
    database_name = $dir/db/principal
    key_stash_file = $dir/db/stash
    acl_file = $dir/kadm5.acl
    kdc_listen = 127.0.0.1:$port
    kdc_tcp_listen = 127.0.0.1:$port
    max_life = 24h
    max_renewable_life = 7d
    # What Java 11+ and MIT both speak.
    supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
  }

[logging]
  kdc = FILE:$dir/kdc.log
  admin_server = FILE:$dir/kadmin.log
  default = FILE:$dir/kdc.log
EOF
  : >"$dir/kadm5.acl"
}

kadmin() { kadmin.local -r "$realm" -q "$1" >>"$2/kadmin.log" 2>&1 || die "kadmin.local '$1' failed (log: $2/kadmin.log)"; }

create_realm() { # DIR
  local dir="$1" name file
  mkdir -p "$dir/db"
  chmod 700 "$dir/db"
  # A random master password, used once: the stash file unlocks the database.
  kdb5_util create -s -r "$realm" -P "$(head -c 24 /dev/urandom | base64)" >>"$dir/kadmin.log" 2>&1 ||
    die "kdb5_util create failed (log: $dir/kadmin.log)"
  for name in hbase:hbase solus:solus solus-short:short stranger:stranger; do
    kadmin "addprinc -randkey ${name%%:*}/localhost@$realm" "$dir"
  done
  # Tickets of solus-short live 20 s (a TGT and every service ticket derived from it).
  kadmin 'modprinc -maxlife "20 seconds" solus-short/localhost@'"$realm" "$dir"
  for name in hbase:hbase solus:solus solus-short:short stranger:stranger; do
    file="$dir/${name#*:}.keytab"
    rm -f "$file"
    kadmin "ktadd -k $file ${name%%:*}/localhost@$realm" "$dir"
    chmod 600 "$file"
  done
}

# 0 once the KDC issues a ticket for solus (into a throwaway cache).
answers() { # DIR
  KRB5CCNAME="MEMORY:kdc-probe" kinit -kt "$1/solus.keytab" "solus/localhost@$realm" 2>/dev/null
}

cmd_start() {
  [[ $# -eq 1 ]] || usage "start takes DIR"
  mkdir -p "$1"
  local dir port
  dir="$(cd "$1" && pwd)"
  need_tools
  use_dir "$dir"
  if alive "$dir/kdc.pid"; then
    echo "kdc.sh: KDC already running (pid $(cat "$dir/kdc.pid"), port $(cat "$dir/kdc.port")), left as is" >&2
    answers "$dir" || die "the KDC in $dir runs but does not answer (log: $dir/kdc.log)"
    return 0
  fi
  if [[ -f "$dir/kdc.port" && -f "$dir/db/principal" ]]; then
    port="$(cat "$dir/kdc.port")"
    port_free "$port" || die "port $port (from $dir/kdc.port) is taken; stop what uses it or remove $dir"
  else
    rm -rf "$dir/db" "$dir"/*.keytab
    port="$(free_port)"
    echo "$port" >"$dir/kdc.port"
    write_conf "$dir" "$port"
    create_realm "$dir"
  fi
  # -n: foreground, so the pid is ours to stop; -P is not needed then.
  nohup krb5kdc -n -r "$realm" >>"$dir/kdc.out" 2>&1 </dev/null &
  echo $! >"$dir/kdc.pid"
  local i
  for i in $(seq 1 100); do
    if answers "$dir"; then
      echo "kdc.sh: KDC for $realm on 127.0.0.1:$port (pid $(cat "$dir/kdc.pid")); KRB5_CONFIG=$dir/krb5.conf" >&2
      return 0
    fi
    alive "$dir/kdc.pid" || break
    sleep 0.1
  done
  tail -n 20 "$dir/kdc.out" "$dir/kdc.log" >&2 2>/dev/null || true
  cmd_stop "$dir" || true
  die "the KDC did not answer (logs: $dir/kdc.log, $dir/kdc.out)"
}

cmd_stop() {
  [[ $# -eq 1 ]] || usage "stop takes DIR"
  [[ -d "$1" ]] || die "no such directory: $1"
  local pidfile="$1/kdc.pid" pid
  alive "$pidfile" || { rm -f "$pidfile"; echo "kdc.sh: no KDC running in $1" >&2; return 0; }
  pid="$(cat "$pidfile")"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; echo "kdc.sh: stopped the KDC (pid $pid)" >&2; return 0; }
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$pidfile"
  echo "kdc.sh: killed the KDC (pid $pid) after 10 s" >&2
}

cmd_status() {
  [[ $# -eq 1 ]] || usage "status takes DIR"
  if alive "$1/kdc.pid"; then
    echo "kdc: running (pid $(cat "$1/kdc.pid"), port $(cat "$1/kdc.port"))"
  else
    echo "kdc: not running"; return 1
  fi
}

case "${1:-}" in
  start) shift; cmd_start "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  status) shift; cmd_status "$@" ;;
  "") usage "no command given" ;;
  *) usage "unknown command '$1'" ;;
esac
