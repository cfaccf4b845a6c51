#!/usr/bin/env bash
# Runs the whole test suite (unit, integration with real ZooKeeper and brokers, interop with
# kcat, confluent-kafka, kafka-python and aiokafka).  Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@" tests
