#!/usr/bin/env bash
# Real single-node Apache Kafka 4.x (KRaft, broker+controller) on 127.0.0.1,
# for lagbridge's integration tests. Jars come from Maven Central via
# integration/kafka/pom.xml; no tarball, no Docker.
#
#   kafka.sh fetch            resolve the jars (idempotent; instant when cached)
#   kafka.sh start            format fresh storage, start the broker, wait until
#                             it answers, print KAFKA_BOOTSTRAP=127.0.0.1:PORT
#   kafka.sh stop             stop the broker, remove its data dir
#   kafka.sh status           print KAFKA_BOOTSTRAP=... and exit 0 if running, else exit 1
#   kafka.sh groups ARGS...   kafka-consumer-groups (ConsumerGroupCommand);
#                             --bootstrap-server defaults to the running broker
#   kafka.sh topics ARGS...   kafka-topics (TopicCommand), same defaulting
#   kafka.sh api-versions     kafka-broker-api-versions against the running broker
#   kafka.sh produce ARGS...  kafka-console-producer (lines on stdin), e.g. produce --topic t
#   kafka.sh consume ARGS...  kafka-console-consumer, e.g. consume --topic t --group g
#                             --from-beginning --max-messages 5
#   kafka.sh log              print the path of the broker log
#
# Environment (all optional):
#   KAFKA_VERSION              Kafka version to resolve (default 4.3.1); a 3.x
#                              (e.g. 3.9.1) runs Kafka 3's classic group
#                              coordinator, for manual checks (CI runs 4.x)
#   KAFKA_PORT                 PLAINTEXT port (default 39092; 0 = pick a free one)
#   KAFKA_CONTROLLER_PORT      controller port (default: a free one)
#   KAFKA_HEAP_OPTS            broker heap (default -Xms128m -Xmx512m)
#   KAFKA_START_TIMEOUT        seconds to wait for the broker (default 60)
#   KAFKA_LOG_LEVEL            broker root log level (default INFO; file only)
#   KAFKA_AUTO_CREATE_TOPICS   auto.create.topics.enable (default false)
#   KAFKA_EXTRA_CONFIG         extra server.properties lines, appended last
#   LAGBRIDGE_KAFKA_HOME       jar cache (default integration/kafka/.cache)
#   LAGBRIDGE_KAFKA_RUN        pid/port/log state dir (default $LAGBRIDGE_KAFKA_HOME/run)
#   LAGBRIDGE_KAFKA_MVN_ARGS   extra arguments for mvn (e.g. -o, -Dmaven.repo.local=...)
#
# Everything binds to and targets 127.0.0.1 only.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KAFKA_VERSION=${KAFKA_VERSION:-4.3.1}
CACHE_DIR=${LAGBRIDGE_KAFKA_HOME:-$SCRIPT_DIR/.cache}
RUN_DIR=${LAGBRIDGE_KAFKA_RUN:-$CACHE_DIR/run}
JARS_DIR=$CACHE_DIR/kafka-$KAFKA_VERSION/libs
STAMP=$CACHE_DIR/kafka-$KAFKA_VERSION/.fetched
CONF_DIR=$CACHE_DIR/kafka-$KAFKA_VERSION/config
PID_FILE=$RUN_DIR/broker.pid
PORT_FILE=$RUN_DIR/port
BOOTSTRAP_FILE=$RUN_DIR/bootstrap
DATA_FILE=$RUN_DIR/datadir
LOG_FILE=$RUN_DIR/broker.log
HOST=127.0.0.1

if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then JAVA=$JAVA_HOME/bin/java; else JAVA=java; fi
TOOL_JVM_OPTS=(-Xms32m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto -Djava.awt.headless=true)

die() { echo "kafka.sh: error: $*" >&2; exit 1; }
note() { echo "kafka.sh: $*" >&2; }

need() { command -v "$1" >/dev/null 2>&1 || die "'$1' not found on PATH; $2"; }

check_java() {
  command -v "$JAVA" >/dev/null 2>&1 || die "java not found (need a JDK/JRE 17+; e.g. apt-get install -y openjdk-17-jre-headless)"
  local v major
  v=$("$JAVA" -version 2>&1 | head -n1)
  major=$(sed -E 's/.*version "([0-9]+)(\.[0-9]+)*.*".*/\1/' <<<"$v")
  [[ "$major" =~ ^[0-9]+$ ]] || die "cannot parse java version from: $v"
  (( major >= 17 )) || die "Kafka 4.x needs Java 17+, found: $v"
}

# A hash of what decides the jar set, so a pom change triggers a re-fetch.
fetch_key() { { echo "$KAFKA_VERSION"; cat "$SCRIPT_DIR/pom.xml"; } | cksum | cut -d' ' -f1; }

write_configs() {
  mkdir -p "$CONF_DIR"
  # Broker: everything to stdout, which start redirects to $LOG_FILE.
  cat >"$CONF_DIR/broker-log4j2.properties" <<'EOF'
status = error
name = lagbridge-kafka-broker
appender.out.type = Console
appender.out.name = OUT
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = ${sys:lagbridge.log.level:-INFO}
rootLogger.appenderRef.out.ref = OUT
# start waits for KafkaRaftServer's "Kafka Server started" line: keep it at INFO.
logger.raftserver.name = kafka.server.KafkaRaftServer
logger.raftserver.level = INFO
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
logger.metadata.name = org.apache.kafka.image.loader
logger.metadata.level = WARN
EOF
  # Kafka 3.x's broker logs through reload4j (log4j 1.x): the same, in its format.
  cat >"$CONF_DIR/broker-log4j.properties" <<'EOF'
log4j.rootLogger=${lagbridge.log.level}, out
log4j.logger.kafka.server.KafkaRaftServer=INFO
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.org.apache.kafka.clients=WARN
log4j.logger.org.apache.kafka.image.loader=WARN
EOF
  # Tools: warnings and errors only, to stderr (stdout is the tool's output).
  cat >"$CONF_DIR/tools-log4j2.properties" <<'EOF'
status = error
name = lagbridge-kafka-tools
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = ERR
EOF
}

cmd_fetch() {
  local key
  key=$(fetch_key)
  if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$key" && -f "$JARS_DIR/kafka_2.13-$KAFKA_VERSION.jar" ]]; then
    write_configs
    return 0
  fi
  need mvn "install Maven 3.8+ (e.g. apt-get install -y maven)"
  check_java
  mkdir -p "$CACHE_DIR"
  local lock="$CACHE_DIR/.fetch.lock"
  # Serialise concurrent fetches (flock is in util-linux; skip the lock without it).
  if command -v flock >/dev/null 2>&1 && [[ -z "${_KAFKA_SH_LOCKED:-}" ]]; then
    _KAFKA_SH_LOCKED=1 flock "$lock" "$0" fetch
    return $?
  fi
  # Re-check: another process may have finished while we waited on the lock.
  if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$key" && -f "$JARS_DIR/kafka_2.13-$KAFKA_VERSION.jar" ]]; then
    write_configs
    return 0
  fi
  note "resolving Kafka $KAFKA_VERSION jars with Maven (a fresh machine downloads ~80 MB: 54 MB of jars, the rest Maven's own plugins)..."
  local tmp
  tmp=$(mktemp -d "$CACHE_DIR/.libs.XXXXXX")
  # shellcheck disable=SC2086
  if ! mvn -B -q -f "$SCRIPT_DIR/pom.xml" ${LAGBRIDGE_KAFKA_MVN_ARGS:-} \
      -Dkafka.version="$KAFKA_VERSION" \
      dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp" >"$tmp.mvn.log" 2>&1; then
    cat "$tmp.mvn.log" >&2
    rm -rf "$tmp" "$tmp.mvn.log"
    die "Maven could not resolve org.apache.kafka:kafka_2.13:$KAFKA_VERSION (see above)"
  fi
  rm -f "$tmp.mvn.log"
  [[ -f "$tmp/kafka_2.13-$KAFKA_VERSION.jar" ]] || { rm -rf "$tmp"; die "Maven ran but kafka_2.13-$KAFKA_VERSION.jar is missing"; }
  rm -rf "$JARS_DIR"
  mkdir -p "$(dirname "$JARS_DIR")"
  mv "$tmp" "$JARS_DIR"
  write_configs
  echo "$key" >"$STAMP"
  note "jars in $JARS_DIR ($(find "$JARS_DIR" -name '*.jar' | wc -l) jars)"
}

# run_tool MAIN_CLASS ARGS... (foreground; stdout/stderr pass through)
run_tool() {
  local main=$1; shift
  exec "$JAVA" "${TOOL_JVM_OPTS[@]}" \
    -Dlog4j2.configurationFile="$CONF_DIR/tools-log4j2.properties" \
    -cp "$JARS_DIR/*" "$main" "$@"
}

is_loopback() {
  case "$1" in
    127.*|localhost|'[::1]'|::1) return 0 ;;
    *) return 1 ;;
  esac
}

# Fills TOOL_ARGS with "$@", adding --bootstrap-server of the running broker
# when absent, and refusing any non-loopback bootstrap server.
tool_args() {
  TOOL_ARGS=("$@")
  local have=0 i a servers
  for ((i = 0; i < ${#TOOL_ARGS[@]}; i++)); do
    a=${TOOL_ARGS[$i]}
    case "$a" in
      --bootstrap-server) have=1; servers=${TOOL_ARGS[$((i + 1))]:-} ;;
      --bootstrap-server=*) have=1; servers=${a#--bootstrap-server=} ;;
      *) continue ;;
    esac
    local s
    IFS=',' read -r -a _srv <<<"$servers"
    for s in "${_srv[@]}"; do
      is_loopback "${s%:*}" || die "refusing non-loopback bootstrap server '$s' (this harness only talks to 127.0.0.1)"
    done
  done
  if (( ! have )); then
    local b
    b=$(running_bootstrap) || die "no broker running (run: $0 start), and no --bootstrap-server given"
    TOOL_ARGS=(--bootstrap-server "$b" "${TOOL_ARGS[@]}")
  fi
}

running_pid() {
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid=$(cat "$PID_FILE")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # Guard against pid reuse: it must be our kafka.Kafka JVM.
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'kafka\.Kafka' || return 1
  echo "$pid"
}

running_bootstrap() {
  running_pid >/dev/null || return 1
  cat "$BOOTSTRAP_FILE"
}

port_in_use() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

pick_free_port() {
  local p i
  # Below the usual ephemeral range (32768-60999) to avoid clashing with client sockets.
  for ((i = 0; i < 200; i++)); do
    p=$((20000 + RANDOM % 12000))
    [[ "$p" == "${1:-}" ]] && continue
    port_in_use "$p" || { echo "$p"; return 0; }
  done
  die "could not find a free port on $HOST"
}

# Sends a Kafka ApiVersions v0 request (correlation id 7, client id "kafka.sh")
# over bash's /dev/tcp and checks the response header: correlation id 7, error 0.
# Avoids starting a JVM just to learn that the broker answers.
api_versions_probe() {
  local got
  got=$(
    exec 2>/dev/null 3<>"/dev/tcp/$HOST/$1" || exit 1
    # size=18: api_key 18 (ApiVersions), version 0, correlation id 7, client id (int16 len + 8 bytes)
    printf '\x00\x00\x00\x12\x00\x12\x00\x00\x00\x00\x00\x07\x00\x08kafka.sh' >&3
    timeout 5 head -c 10 <&3 | od -An -tx1 | tr -d ' \n'
  ) || return 1
  # 4 bytes size (any), then correlation id 00000007 and error code 0000.
  [[ ${#got} == 20 && ${got:8:12} == 000000070000 ]]
}

gen_cluster_id() {
  # Kafka Uuid: 16 random bytes, base64url without padding (22 chars); like
  # Uuid.randomUuid() avoid ids starting with '-' (they look like CLI flags).
  local id
  while :; do
    id=$(head -c16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
    [[ "$id" != -* && ${#id} == 22 ]] && { echo "$id"; return 0; }
  done
}

log_tail() {
  echo "---- last lines of $LOG_FILE ----" >&2
  tail -n "${1:-60}" "$LOG_FILE" >&2 2>/dev/null || true
  echo "----" >&2
}

cleanup_stale() {
  if [[ -f "$DATA_FILE" ]]; then
    local d
    d=$(cat "$DATA_FILE")
    [[ "$d" == */lagbridge-kafka.* && -d "$d" ]] && rm -rf "$d"
  fi
  rm -f "$PID_FILE" "$PORT_FILE" "$BOOTSTRAP_FILE" "$DATA_FILE"
}

cmd_start() {
  local pid
  if pid=$(running_pid); then
    note "already running (pid $pid)"
    echo "KAFKA_BOOTSTRAP=$(cat "$BOOTSTRAP_FILE")"
    return 0
  fi
  cmd_fetch
  check_java
  mkdir -p "$RUN_DIR"
  cleanup_stale

  local port=${KAFKA_PORT:-39092} cport=${KAFKA_CONTROLLER_PORT:-}
  [[ "$port" =~ ^[0-9]+$ ]] || die "KAFKA_PORT must be a number, got '$port'"
  if [[ "$port" == 0 ]]; then
    port=$(pick_free_port)
  elif port_in_use "$port"; then
    die "port $HOST:$port is already in use by another process (set KAFKA_PORT=0 for a free port, or KAFKA_PORT=N)"
  fi
  if [[ -z "$cport" || "$cport" == 0 ]]; then
    cport=$(pick_free_port "$port")
  elif port_in_use "$cport"; then
    die "controller port $HOST:$cport is already in use"
  fi

  local data cid
  data=$(mktemp -d "${TMPDIR:-/tmp}/lagbridge-kafka.XXXXXX")
  echo "$data" >"$DATA_FILE"
  cid=$(gen_cluster_id)
  local props=$data/server.properties
  cat >"$props" <<EOF
# lagbridge test broker: one KRaft node, broker+controller, loopback only.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$cport
listeners=PLAINTEXT://$HOST:$port,CONTROLLER://$HOST:$cport
advertised.listeners=PLAINTEXT://$HOST:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$data/logs

num.network.threads=2
num.io.threads=4
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=${KAFKA_AUTO_CREATE_TOPICS:-false}
delete.topic.enable=true

offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1

# KIP-848: the new consumer group protocol is on by default in 4.x
# (group.coordinator.rebalance.protocols=classic,consumer; that setting is
# deprecated from 4.3 on), so it is left alone; start checks the effective value.
group.initial.rebalance.delay.ms=0
# Faster failure detection than the defaults (45 s) for tests of dead consumers.
group.consumer.min.session.timeout.ms=6000
group.consumer.session.timeout.ms=10000
group.consumer.min.heartbeat.interval.ms=1000
group.consumer.heartbeat.interval.ms=2000

# Retention tests: check often, delete segments quickly.
log.retention.check.interval.ms=1000
log.segment.delete.delay.ms=1000
file.delete.delay.ms=1000
EOF
  if [[ -n "${KAFKA_EXTRA_CONFIG:-}" ]]; then
    printf '\n# KAFKA_EXTRA_CONFIG\n%s\n' "$KAFKA_EXTRA_CONFIG" >>"$props"
  fi

  : >"$LOG_FILE"
  local t0=$SECONDS
  if ! "$JAVA" "${TOOL_JVM_OPTS[@]}" -Dlog4j2.configurationFile="$CONF_DIR/tools-log4j2.properties" \
      -cp "$JARS_DIR/*" kafka.tools.StorageTool format -t "$cid" -c "$props" >>"$LOG_FILE" 2>&1; then
    log_tail 30
    die "formatting storage in $data failed"
  fi

  # setsid: own session, so a Ctrl-C or a test runner's process-group kill
  # does not take the broker down half-way; stop does that.
  # shellcheck disable=SC2086
  setsid "$JAVA" ${KAFKA_HEAP_OPTS:--Xms128m -Xmx512m} \
    -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
    -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$CONF_DIR/broker-log4j2.properties" \
    -Dlog4j.configuration="file:$CONF_DIR/broker-log4j.properties" \
    -Dlagbridge.log.level="${KAFKA_LOG_LEVEL:-INFO}" \
    -Dkafka.logs.dir="$data" \
    -cp "$JARS_DIR/*" kafka.Kafka "$props" </dev/null >>"$LOG_FILE" 2>&1 &
  pid=$!
  echo "$pid" >"$PID_FILE"
  echo "$port" >"$PORT_FILE"

  local timeout=${KAFKA_START_TIMEOUT:-60} deadline=$((SECONDS + ${KAFKA_START_TIMEOUT:-60}))
  while :; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log_tail
      cleanup_stale
      die "broker exited during startup (log: $LOG_FILE)"
    fi
    if grep -q 'Kafka Server started' "$LOG_FILE" && port_in_use "$port"; then
      break
    fi
    if (( SECONDS >= deadline )); then
      log_tail
      kill -9 "$pid" 2>/dev/null || true
      cleanup_stale
      die "broker did not start within ${timeout}s (log: $LOG_FILE)"
    fi
    sleep 0.2
  done
  # One real request/response round trip before declaring victory.
  if ! api_versions_probe "$port"; then
    log_tail
    die "broker started but does not answer ApiVersions on $HOST:$port"
  fi
  # KIP-848 must be on: check the effective value in the broker's config dump
  # (absent in future versions where the setting is gone and all protocols are on).
  # Kafka 3.x runs the classic coordinator alone by default: what it is run for.
  local protos
  protos=$(grep -m1 -E '^[[:space:]]*group\.coordinator\.rebalance\.protocols = ' "$LOG_FILE" || true)
  if [[ -n "$protos" && "$protos" != *consumer* && "$KAFKA_VERSION" != 3.* ]]; then
    kill -9 "$pid" 2>/dev/null || true
    cleanup_stale
    die "broker runs without the consumer group protocol (KIP-848): $protos"
  fi
  echo "$HOST:$port" >"$BOOTSTRAP_FILE"
  note "Kafka $KAFKA_VERSION up in $((SECONDS - t0))s: pid $pid, data $data, log $LOG_FILE"
  echo "KAFKA_BOOTSTRAP=$HOST:$port"
}

cmd_stop() {
  local pid
  if ! pid=$(running_pid); then
    cleanup_stale
    note "not running"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  local i
  for ((i = 0; i < 300; i++)); do  # 30 s for a clean shutdown
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    note "broker (pid $pid) ignored SIGTERM for 30s; killing"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  cleanup_stale
  note "stopped (pid $pid)"
}

cmd_status() {
  local pid
  if pid=$(running_pid); then
    echo "KAFKA_BOOTSTRAP=$(cat "$BOOTSTRAP_FILE" 2>/dev/null || echo "$HOST:$(cat "$PORT_FILE")")"
    note "running: pid $pid, log $LOG_FILE, data $(cat "$DATA_FILE" 2>/dev/null)"
    return 0
  fi
  note "not running"
  return 1
}

main() {
  local cmd=${1:-}
  [[ $# -gt 0 ]] && shift
  case "$cmd" in
    fetch) cmd_fetch ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    restart) cmd_stop; cmd_start ;;
    groups)
      cmd_fetch; check_java; tool_args "$@"
      run_tool org.apache.kafka.tools.consumer.group.ConsumerGroupCommand "${TOOL_ARGS[@]}" ;;
    topics)
      cmd_fetch; check_java; tool_args "$@"
      run_tool org.apache.kafka.tools.TopicCommand "${TOOL_ARGS[@]}" ;;
    api-versions)
      cmd_fetch; check_java; tool_args "$@"
      run_tool org.apache.kafka.tools.BrokerApiVersionsCommand "${TOOL_ARGS[@]}" ;;
    produce)
      cmd_fetch; check_java; tool_args "$@"
      run_tool org.apache.kafka.tools.ConsoleProducer "${TOOL_ARGS[@]}" ;;
    consume)
      cmd_fetch; check_java; tool_args "$@"
      run_tool org.apache.kafka.tools.consumer.ConsoleConsumer "${TOOL_ARGS[@]}" ;;
    log) echo "$LOG_FILE" ;;
    -h|--help|help|'') sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; [[ -n "$cmd" ]] ;;
    *) die "unknown command '$cmd' (try: $0 help)" ;;
  esac
}

main "$@"
