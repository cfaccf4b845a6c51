#!/usr/bin/env bash
# Runs the whole test suite (unit, integration with real ZooKeeper and brokers, interop with
# kcat, confluent-kafka, kafka-python and aiokafka).  Extra arguments go to pytest.
# The codec tests run with both record loops, the pure-Python and the compiled one; the compiled
# one must be built (scripts/setup.sh does it): KAFKATW_REQUIRE_SPEEDUPS=1 makes its absence a
# test failure instead of a skip (set it to 0 to run without it).  Likewise KAFKATW_REQUIRE_KERBEROS=1
# for the SASL/GSSAPI tests' MIT Kerberos (scripts/setup.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
export KAFKATW_REQUIRE_SPEEDUPS=${KAFKATW_REQUIRE_SPEEDUPS:-1}
export KAFKATW_REQUIRE_KERBEROS=${KAFKATW_REQUIRE_KERBEROS:-1}
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@" tests
