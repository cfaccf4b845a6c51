#!/usr/bin/env bash
# The main job: the log-processing pipeline of the Kafka paper, on this machine's real logs.
#
#   1. starts one kafkatw broker on 127.0.0.1:9092 with its own embedded ZooKeeper (127.0.0.1:2181),
#   2. ships the machine's logs to topic `logs` (default: the readable files under /var/log;
#      LOGS="path ..." picks others),
#   3. runs the Spark job (examples/log_pipeline/job.py) with availableNow: per-source, per-minute
#      counts by level / HTTP status into data/pipeline/output (parquet), a summary printed per batch,
#   4. stops everything cleanly.
#
# Flags:
#   --follow              keep running: the shipper follows the logs and the job runs every 5 s (Ctrl-C stops)
#   --broker-only         just run the broker in the foreground (Ctrl-C stops)
#   --port N              the broker's port on 127.0.0.1 (default 9092; or KAFKATW_PORT=N)
#   --zookeeper-port N    the embedded ZooKeeper's port on 127.0.0.1 (default 2181; or KAFKATW_ZOOKEEPER_PORT=N)
# Extra arguments after `--` go to twistd's kafkatw plugin (e.g. -- --override num.partitions=6).
#
# Both ports are checked before anything starts: a port in use stops the script at once, naming it.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: $0 [--follow | --broker-only] [--port N] [--zookeeper-port N] [-- twistd kafkatw options]" >&2
  exit 2
}

MODE=once
PORT=${KAFKATW_PORT:-9092}
ZOOKEEPER_PORT=${KAFKATW_ZOOKEEPER_PORT:-2181}
while [ $# -gt 0 ]; do
  case "$1" in
    --follow) MODE=follow; shift ;;
    --broker-only) MODE=broker; shift ;;
    --port) [ $# -ge 2 ] || usage; PORT=$2; shift 2 ;;
    --port=*) PORT=${1#*=}; shift ;;
    --zookeeper-port) [ $# -ge 2 ] || usage; ZOOKEEPER_PORT=$2; shift 2 ;;
    --zookeeper-port=*) ZOOKEEPER_PORT=${1#*=}; shift ;;
    --) shift; break ;;
    *) usage ;;
  esac
done
for value in "$PORT" "$ZOOKEEPER_PORT"; do
  case "$value" in
    ''|*[!0-9]*) echo "$0: not a port number: '$value'" >&2; exit 2 ;;
  esac
done
if [ "$PORT" = "$ZOOKEEPER_PORT" ]; then
  echo "$0: the broker and ZooKeeper cannot both use port $PORT" >&2
  exit 2
fi

# A port is free when we can bind it on 127.0.0.1 (as the broker and ZooKeeper will).
port_free() {
  .venv/bin/python - "$1" <<'PY'
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
PY
}
port_free "$PORT" || {
  echo "$0: port $PORT on 127.0.0.1 (the broker) is in use; pick another with --port N or KAFKATW_PORT=N" >&2
  exit 1
}
port_free "$ZOOKEEPER_PORT" || {
  echo "$0: port $ZOOKEEPER_PORT on 127.0.0.1 (the embedded ZooKeeper) is in use;" \
       "pick another with --zookeeper-port N or KAFKATW_ZOOKEEPER_PORT=N" >&2
  exit 1
}

BOOTSTRAP=127.0.0.1:$PORT
DATA=data
mkdir -p "$DATA"
# The broker reads the embedded ZooKeeper's port from this variable.
export KAFKATW_EMBEDDED_ZOOKEEPER_PORT=$ZOOKEEPER_PORT
BROKER=(kafkatw --broker-id 0 --listeners "tcp:$PORT:interface=127.0.0.1"
        --log-dirs "$DATA/kafka-logs" --zookeeper embedded "$@")

if [ "$MODE" = broker ]; then
  echo "== broker on $BOOTSTRAP, embedded ZooKeeper on 127.0.0.1:$ZOOKEEPER_PORT (Ctrl-C stops)" >&2
  exec .venv/bin/twistd -n --pidfile= "${BROKER[@]}"
fi

PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Why the broker stopped: what it printed (twistd's own usage errors), else the last error it
# logged (with the last line of its traceback), else the last line of its log.
broker_failed() {
  local reason
  reason=$(grep -v '^[[:space:]]*$' "$DATA/broker.out" 2>/dev/null | tail -n 1 || true)
  [ -n "$reason" ] || reason=$(awk '
    /^[0-9].*#(critical|error)\]/ { event = $0; last = ""; inside = 1; next }
    /^[0-9]/ { inside = 0; next }
    inside && /[^[:space:]]/ { sub(/^[[:space:]]+/, ""); last = $0 }
    END { if (event != "") { print event; if (last != "") print "  " last } }' "$DATA/broker.log" 2>/dev/null)
  [ -n "$reason" ] || reason=$(grep -v '^[[:space:]]*$' "$DATA/broker.log" 2>/dev/null | tail -n 1 || true)
  echo "$0: $1 (broker on $BOOTSTRAP, ZooKeeper on 127.0.0.1:$ZOOKEEPER_PORT):" >&2
  echo "$reason" | sed 's/^/  /' >&2
  echo "(full log: $DATA/broker.log)" >&2
  exit 1
}

echo "== starting the broker on $BOOTSTRAP, ZooKeeper on 127.0.0.1:$ZOOKEEPER_PORT (log: $DATA/broker.log)"
rm -f "$DATA/broker.log" "$DATA/broker.out"
.venv/bin/twistd -n --pidfile= --logfile "$DATA/broker.log" "${BROKER[@]}" >"$DATA/broker.out" 2>&1 &
BROKER_PID=$!
PIDS+=("$BROKER_PID")
for _ in $(seq 300); do
  grep -q "broker 0 started" "$DATA/broker.log" 2>/dev/null && break
  kill -0 "$BROKER_PID" 2>/dev/null || broker_failed "the broker exited"
  sleep 0.1
done
grep -q "broker 0 started" "$DATA/broker.log" || broker_failed "the broker did not start within 30 s"

.venv/bin/kafkatw topics --bootstrap-server "$BOOTSTRAP" --create --if-not-exists --topic logs \
  --partitions 3 --replication-factor 1

if [ -n "${LOGS:-}" ]; then
  read -r -a SOURCES <<< "$LOGS"
else
  SOURCES=(/var/log)
fi
export PYSPARK_PYTHON="$PWD/.venv/bin/python" SPARK_LOCAL_IP=127.0.0.1
JOB=(.venv/bin/python examples/log_pipeline/job.py --bootstrap-server "$BOOTSTRAP" --topic logs
     --output "$DATA/pipeline/output" --checkpoint "$DATA/pipeline/checkpoint")

if [ "$MODE" = once ]; then
  echo "== shipping ${SOURCES[*]} to topic logs"
  .venv/bin/kafkatw ship --bootstrap-server "$BOOTSTRAP" --topic logs --once --recursive --skip-binary \
    --state-file "$DATA/ship-state.json" "${SOURCES[@]}"
  echo "== running the Spark job (availableNow)"
  "${JOB[@]}" --available-now
  echo "== done: counts in $DATA/pipeline/output"
else
  echo "== following ${SOURCES[*]}; the job runs every 5 s (Ctrl-C stops)"
  .venv/bin/kafkatw ship --bootstrap-server "$BOOTSTRAP" --topic logs --recursive --skip-binary \
    --state-file "$DATA/ship-state.json" "${SOURCES[@]}" &
  PIDS+=("$!")
  "${JOB[@]}" --trigger-seconds 5
fi
