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
#   --follow        keep running: the shipper follows the logs and the job runs every 5 s (Ctrl-C stops)
#   --broker-only   just run the broker in the foreground (Ctrl-C stops)
# Extra arguments after `--` go to twistd's kafkatw plugin (e.g. -- --override num.partitions=6).
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=once
while [ $# -gt 0 ]; do
  case "$1" in
    --follow) MODE=follow; shift ;;
    --broker-only) MODE=broker; shift ;;
    --) shift; break ;;
    *) echo "usage: $0 [--follow | --broker-only] [-- twistd kafkatw options]" >&2; exit 2 ;;
  esac
done

BOOTSTRAP=127.0.0.1:9092
DATA=data
mkdir -p "$DATA"
BROKER=(kafkatw --broker-id 0 --listeners tcp:9092:interface=127.0.0.1
        --log-dirs "$DATA/kafka-logs" --zookeeper embedded "$@")

if [ "$MODE" = broker ]; then
  exec .venv/bin/twistd -n --pidfile= "${BROKER[@]}"
fi

PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== starting the broker (log: $DATA/broker.log)"
rm -f "$DATA/broker.log"
.venv/bin/twistd -n --pidfile= --logfile "$DATA/broker.log" "${BROKER[@]}" 2>/dev/null &
BROKER_PID=$!
PIDS+=("$BROKER_PID")
for _ in $(seq 300); do
  grep -q "broker 0 started" "$DATA/broker.log" 2>/dev/null && break
  kill -0 "$BROKER_PID" 2>/dev/null || { echo "the broker exited; see $DATA/broker.log" >&2; exit 1; }
  sleep 0.1
done
grep -q "broker 0 started" "$DATA/broker.log" || { echo "the broker did not start; see $DATA/broker.log" >&2; exit 1; }

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
