#!/usr/bin/env bash
# The main job: one broker on 127.0.0.1:9092 with its own embedded ZooKeeper (127.0.0.1:2181),
# logs under ./data.  Extra arguments go to twistd's kafkatw plugin (e.g. --override key=value).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p data
exec .venv/bin/twistd -n --pidfile= kafkatw --broker-id 0 --listeners tcp:9092:interface=127.0.0.1 \
  --log-dirs data/kafka-logs --zookeeper embedded "$@"
