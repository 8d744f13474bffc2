#!/usr/bin/env bash
# Single-node Apache Kafka broker (KRaft, combined broker+controller) for the
# stream-dedupe integration tests. No Docker: the broker jars come from Maven
# Central (tools/kafka/pom.xml) and are cached; the broker listens on 127.0.0.1.
#
#   kafka.sh start      download jars once, format fresh storage, start, wait until ready
#   kafka.sh stop       SIGTERM the broker by its pid file (SIGKILL after a bounded wait)
#   kafka.sh restart    stop + start (always a fresh, empty broker)
#   kafka.sh status     exit 0 if the broker of this run dir is running
#   kafka.sh bootstrap  print 127.0.0.1:<port>
#   kafka.sh fetch      only download the jars into the cache
#
# `start` while the broker of this run dir is already running prints
# "already running" plus the bootstrap address and exits 0 (data is kept);
# use `restart` for a clean broker. See tools/kafka/README.md.
#
# KAFKA_SASL=1: the client listener on KAFKA_PORT is SASL_PLAINTEXT (SCRAM-SHA-512 and
# SCRAM-SHA-256; users created at format time); KAFKA_SSL_PORT adds a SASL_SSL listener with a
# CA, server and client certificates generated at start into $KAFKA_RUN_DIR/tls (mutual TLS).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
POM="$SCRIPT_DIR/pom.xml"

KAFKA_VERSION="${KAFKA_VERSION:-3.9.1}"
CACHE_ROOT="${STREAM_DEDUPE_CACHE:-$HOME/.cache/stream-dedupe}"
CACHE_DIR="$CACHE_ROOT/kafka/$KAFKA_VERSION"
LIB_DIR="$CACHE_DIR/lib"
LIB_MARKER="$CACHE_DIR/.lib-complete"

RUN_DIR="${KAFKA_RUN_DIR:-/tmp/stream-dedupe-kafka}"
HOST=127.0.0.1
PORT="${KAFKA_PORT:-19092}"
CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-19093}"
START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-20}"
HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx512m -Xms128m}"

# SASL/SCRAM (off by default). The admin user is the broker's own (inter-broker) identity.
SASL="${KAFKA_SASL:-0}"
SSL_PORT="${KAFKA_SSL_PORT:-}"
SASL_ADMIN_USER="${KAFKA_SASL_ADMIN_USER:-admin}"
SASL_ADMIN_PASSWORD="${KAFKA_SASL_ADMIN_PASSWORD:-admin-secret}"
SASL_USER="${KAFKA_SASL_USER:-stream-dedupe}"
SASL_PASSWORD="${KAFKA_SASL_PASSWORD:-stream-dedupe-secret}"
SCRAM_MECHANISMS=(SCRAM-SHA-512 SCRAM-SHA-256)

PID_FILE="$RUN_DIR/kafka.pid"
LOG_FILE="$RUN_DIR/kafka.log"
OUT_FILE="$RUN_DIR/kafka.out"
DATA_DIR="$RUN_DIR/data"
SERVER_PROPS="$RUN_DIR/server.properties"
LOG4J_PROPS="$RUN_DIR/log4j.properties"
TLS_DIR="$RUN_DIR/tls"

log() { echo "kafka.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

java_bin() {
  if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
    echo "$JAVA_HOME/bin/java"
  elif command -v java >/dev/null 2>&1; then
    command -v java
  else
    die "java not found (install a JDK >= 11 or set JAVA_HOME)"
  fi
}

# ---------------------------------------------------------------- jars -----
fetch_jars() {
  [[ -f "$LIB_MARKER" ]] && return 0
  mkdir -p "$CACHE_DIR"
  exec 8>"$CACHE_DIR/.fetch.lock"
  flock -w 900 8 || die "timed out waiting for another download (lock $CACHE_DIR/.fetch.lock)"
  if [[ -f "$LIB_MARKER" ]]; then exec 8>&-; return 0; fi
  command -v mvn >/dev/null 2>&1 || die "mvn not found; needed once to download Kafka $KAFKA_VERSION jars"
  log "downloading Kafka $KAFKA_VERSION jars with Maven into $LIB_DIR (one-time)"
  rm -rf "$LIB_DIR"             # a previous half-finished download is redone
  local t0=$SECONDS
  if ! mvn -B -f "$POM" -Dkafka.version="$KAFKA_VERSION" \
        dependency:copy-dependencies -DoutputDirectory="$LIB_DIR" -DincludeScope=runtime \
        > "$CACHE_DIR/mvn.log" 2>&1; then
    tail -n 40 "$CACHE_DIR/mvn.log" >&2
    rm -rf "$LIB_DIR"
    die "maven download of Kafka $KAFKA_VERSION failed (full log: $CACHE_DIR/mvn.log)"
  fi
  [[ -f "$LIB_DIR/kafka_2.13-$KAFKA_VERSION.jar" ]] || { rm -rf "$LIB_DIR"; die "kafka_2.13-$KAFKA_VERSION.jar missing after download"; }
  ls "$LIB_DIR" > "$LIB_MARKER.tmp" && mv "$LIB_MARKER.tmp" "$LIB_MARKER"   # marker = download complete
  log "downloaded $(wc -l < "$LIB_MARKER") jars in $((SECONDS - t0))s"
  exec 8>&-
}

# --------------------------------------------------------------- process ---
lock_run_dir() {  # serialises start/stop of the same run dir (fd 9, released on exit)
  mkdir -p "$RUN_DIR"
  exec 9>"$RUN_DIR/.lock"
  flock -w 180 9 || die "timed out waiting for lock $RUN_DIR/.lock (another kafka.sh start/stop?)"
}

# Prints the pid if the pid file names a live broker of *this* run dir.
running_pid() {
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid="$(cat "$PID_FILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # Guard against a recycled pid: it must be our java running our server.properties.
  if [[ -r "/proc/$pid/cmdline" ]]; then
    tr '\0' ' ' < "/proc/$pid/cmdline" | grep -qF -- "$SERVER_PROPS" || return 1
  fi
  echo "$pid"
}

port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

dump_logs() {
  log "---- last lines of $LOG_FILE ----"
  tail -n "${1:-60}" "$LOG_FILE" >&2 2>/dev/null || true
  if [[ -s "$OUT_FILE" ]]; then
    log "---- last lines of $OUT_FILE (stdout/stderr) ----"
    tail -n 30 "$OUT_FILE" >&2 || true
  fi
}

kill_pid() {  # pid -> SIGTERM, bounded wait, SIGKILL
  local pid=$1 waited=0
  kill -TERM "$pid" 2>/dev/null || return 0
  while kill -0 "$pid" 2>/dev/null; do
    if (( waited >= STOP_TIMEOUT * 10 )); then
      log "broker pid $pid did not exit within ${STOP_TIMEOUT}s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.2
      break
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
}

check_sasl_env() {
  case "$SASL" in
    0|"") [[ -z "$SSL_PORT" ]] || die "KAFKA_SSL_PORT needs KAFKA_SASL=1 (the TLS listener is SASL_SSL)"; return 0 ;;
    1) ;;
    *) die "KAFKA_SASL must be 0 or 1, got '$SASL'" ;;
  esac
  local v
  for v in "$SASL_ADMIN_USER" "$SASL_ADMIN_PASSWORD" "$SASL_USER" "$SASL_PASSWORD"; do
    [[ -n "$v" && "$v" =~ ^[A-Za-z0-9._@-]+$ ]] \
      || die "KAFKA_SASL_* users and passwords must be non-empty [A-Za-z0-9._@-] (they go into JAAS and --add-scram)"
  done
}

# A CA, a server certificate for 127.0.0.1/localhost and a client certificate (PEM, unencrypted
# PKCS#8 keys) in $TLS_DIR; regenerated on every start. The broker reads them as PEM stores.
make_tls() {
  command -v openssl >/dev/null 2>&1 || die "openssl not found (apt-get install -y openssl); needed for KAFKA_SSL_PORT"
  rm -rf "$TLS_DIR"
  mkdir -p "$TLS_DIR"
  local d="$TLS_DIR" days=3650
  {
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/ca.key" -out "$d/ca.crt" -days "$days" \
      -subj "/CN=stream-dedupe test CA" -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign"
    local name cn ext
    for name in server client; do
      if [[ $name == server ]]; then
        cn=127.0.0.1; ext="subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth"
      else
        cn=stream-dedupe-client; ext="extendedKeyUsage=clientAuth"
      fi
      openssl req -newkey rsa:2048 -nodes -keyout "$d/$name.key" -out "$d/$name.csr" -subj "/CN=$cn"
      openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
        -out "$d/$name.crt" -days "$days" -extfile <(printf '%b\n' "$ext")
    done
  } > "$d/openssl.out" 2>&1 || { cat "$d/openssl.out" >&2; die "openssl failed to generate the TLS files"; }
  cat "$d/server.key" "$d/server.crt" > "$d/server.keystore.pem"
  chmod 600 "$d"/*.key "$d/server.keystore.pem"
}

jaas() {  # the broker's own SCRAM login (inter-broker client)
  printf 'org.apache.kafka.common.security.scram.ScramLoginModule required username="%s" password="%s";' \
    "$SASL_ADMIN_USER" "$SASL_ADMIN_PASSWORD"
}

write_config() {
  mkdir -p "$RUN_DIR"
  local client=PLAINTEXT
  [[ "$SASL" == 1 ]] && client=SASL_PLAINTEXT
  local listeners="$client://$HOST:$PORT,CONTROLLER://$HOST:$CONTROLLER_PORT"
  local advertised="$client://$HOST:$PORT"
  local protocols="CONTROLLER:PLAINTEXT,$client:$client"
  if [[ -n "$SSL_PORT" ]]; then
    listeners+=",SASL_SSL://$HOST:$SSL_PORT"
    advertised+=",SASL_SSL://$HOST:$SSL_PORT"
    protocols+=",SASL_SSL:SASL_SSL"
  fi
  cat > "$SERVER_PROPS" <<EOF
# generated by tools/kafka/kafka.sh -- rewritten on every start
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$CONTROLLER_PORT
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=$client
listener.security.protocol.map=$protocols
log.dirs=$DATA_DIR

# single node: replication 1 everywhere
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=10

# test-friendly behaviour
num.partitions=1
auto.create.topics.enable=false
delete.topic.enable=true
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
log.flush.interval.messages=9223372036854775807
log.retention.hours=24
log.segment.bytes=67108864
log.cleaner.dedupe.buffer.size=16777216
log.cleaner.backoff.ms=1000
EOF
  if [[ "$SASL" == 1 ]]; then
    # SCRAM cannot authenticate KRaft controller connections (its credentials live in the metadata
    # log), so the controller listener stays PLAINTEXT on loopback.
    {
      printf '\n# KAFKA_SASL=1: SCRAM on the client listener(s), admin user for inter-broker\n'
      printf 'sasl.enabled.mechanisms=%s\n' "$(IFS=,; echo "${SCRAM_MECHANISMS[*]}")"
      printf 'sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512\n'
      local l m
      for l in sasl_plaintext ${SSL_PORT:+sasl_ssl}; do
        for m in "${SCRAM_MECHANISMS[@]}"; do
          printf 'listener.name.%s.%s.sasl.jaas.config=%s\n' "$l" "${m,,}" "$(jaas)"
        done
      done
      if [[ -n "$SSL_PORT" ]]; then
        printf 'ssl.keystore.type=PEM\nssl.keystore.location=%s\n' "$TLS_DIR/server.keystore.pem"
        printf 'ssl.truststore.type=PEM\nssl.truststore.location=%s\n' "$TLS_DIR/ca.crt"
        printf 'listener.name.sasl_ssl.ssl.client.auth=required\n'  # unprefixed, SASL_SSL ignores it
      fi
    } >> "$SERVER_PROPS"
  fi
  if [[ -n "${KAFKA_EXTRA_CONFIG:-}" ]]; then
    printf '\n# KAFKA_EXTRA_CONFIG\n%s\n' "$KAFKA_EXTRA_CONFIG" >> "$SERVER_PROPS"
  fi

  # StorageTool (format) only reports warnings, to format.out
  cat > "$RUN_DIR/log4j-tools.properties" <<EOF
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
EOF

  cat > "$LOG4J_PROPS" <<EOF
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=$LOG_FILE
log4j.appender.file.Append=true
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.kafka.clients=WARN
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.log.LogCleaner=INFO
log4j.logger.org.apache.zookeeper=WARN
EOF
}

new_cluster_id() {  # 16 random bytes, base64url without padding (Kafka Uuid format)
  head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n'
}

# -------------------------------------------------------------- commands ---
cmd_start() {
  mkdir -p "$RUN_DIR"
  lock_run_dir

  local pid
  if pid="$(running_pid)"; then
    log "already running (pid $pid, run dir $RUN_DIR); use 'restart' for a fresh broker"
    echo "$HOST:$PORT"
    return 0
  fi
  rm -f "$PID_FILE"

  check_sasl_env
  for p in "$PORT" "$CONTROLLER_PORT" $SSL_PORT; do
    port_open "$p" && die "port $HOST:$p is already in use by another process (set KAFKA_PORT / KAFKA_CONTROLLER_PORT / KAFKA_SSL_PORT)"
  done

  fetch_jars
  local java t0=$SECONDS
  java="$(java_bin)"
  write_config
  if [[ -n "$SSL_PORT" ]]; then make_tls; fi
  rm -rf "$DATA_DIR"
  : > "$LOG_FILE"
  : > "$OUT_FILE"

  local jvm_common=(-Djava.awt.headless=true -Djava.net.preferIPv4Stack=true
                    -Dkafka.logs.dir="$RUN_DIR" -XX:+UseSerialGC)
  local cluster_id scram=() m u
  cluster_id="$(new_cluster_id)"
  if [[ "$SASL" == 1 ]]; then  # SCRAM credentials written into the fresh metadata log
    for m in "${SCRAM_MECHANISMS[@]}"; do
      for u in "$SASL_ADMIN_USER:$SASL_ADMIN_PASSWORD" "$SASL_USER:$SASL_PASSWORD"; do
        scram+=(--add-scram "$m=[name=${u%%:*},password=${u#*:}]")
      done
    done
  fi
  # Short-lived tool JVM: C1 only starts faster.
  if ! "$java" -Xmx256m -XX:TieredStopAtLevel=1 "${jvm_common[@]}" \
        -Dlog4j.configuration="file:$RUN_DIR/log4j-tools.properties" -cp "$LIB_DIR/*" kafka.tools.StorageTool \
        format --cluster-id="$cluster_id" -c "$SERVER_PROPS" "${scram[@]}" > "$RUN_DIR/format.out" 2>&1; then
    cat "$RUN_DIR/format.out" >&2
    die "kafka.tools.StorageTool format failed"
  fi

  # shellcheck disable=SC2086  # HEAP_OPTS is a list of JVM flags
  setsid bash -c 'echo $$ > "$1"; shift; exec "$@"' _ "$PID_FILE" \
    "$java" $HEAP_OPTS "${jvm_common[@]}" -Dlog4j.configuration="file:$LOG4J_PROPS" \
    -cp "$LIB_DIR/*" kafka.Kafka "$SERVER_PROPS" \
    > "$OUT_FILE" 2>&1 < /dev/null 9>&- &   # 9>&-: the broker must not inherit the run-dir lock
  local launcher=$!

  # Ready = our process alive + "Kafka Server started" logged + PLAINTEXT port accepting.
  local deadline=$((SECONDS + START_TIMEOUT))
  while :; do
    pid="$(cat "$PID_FILE" 2>/dev/null || true)"
    if [[ -z "$pid" ]] || ! kill -0 "$pid" 2>/dev/null; then
      if [[ -z "$pid" ]] && kill -0 "$launcher" 2>/dev/null; then sleep 0.05; continue; fi
      dump_logs
      rm -f "$PID_FILE"
      die "broker process exited during startup"
    fi
    if grep -q "Kafka Server started" "$LOG_FILE" 2>/dev/null && port_open "$PORT"; then
      break
    fi
    if (( SECONDS >= deadline )); then
      dump_logs
      kill_pid "$pid"
      rm -f "$PID_FILE"
      die "broker not ready within ${START_TIMEOUT}s (killed pid $pid)"
    fi
    sleep 0.1
  done
  log "started (pid $pid) in $((SECONDS - t0))s; logs: $LOG_FILE"
  echo "$HOST:$PORT"
}

cmd_stop() {
  mkdir -p "$RUN_DIR"
  lock_run_dir
  local pid
  if pid="$(running_pid)"; then
    kill_pid "$pid"
    kill -0 "$pid" 2>/dev/null && die "broker pid $pid still alive after SIGKILL"
    log "stopped (pid $pid)"
  else
    log "not running"
  fi
  rm -f "$PID_FILE"
}

cmd_status() {
  local pid
  if pid="$(running_pid)"; then
    echo "running (pid $pid) at $HOST:$PORT"
    return 0
  fi
  echo "not running"
  return 1
}

case "${1:-}" in
  start)     cmd_start ;;
  stop)      cmd_stop ;;
  restart)   cmd_stop; cmd_start ;;
  status)    cmd_status ;;
  bootstrap) echo "$HOST:$PORT" ;;
  fetch)     fetch_jars; echo "$LIB_DIR" ;;
  *) echo "usage: $0 {start|stop|restart|status|bootstrap|fetch}" >&2; exit 2 ;;
esac
