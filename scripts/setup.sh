#!/usr/bin/env bash
# Installs everything kafkatw needs on a fresh Debian 12 machine: ZooKeeper, kcat, Java (for
# ZooKeeper and Spark), chromium and chromedriver (the console's browser tests), iproute2 and
# nftables (the network-fault tests), Node.js with KafkaJS (the interop suite's KafkaJS
# group member, tests/interop/node), a C compiler and
# Python's headers (the record codec's compiled accelerator, kafkatw/protocol/_speedups.c, which
# pip builds with kafkatw), MIT Kerberos (krb5-kdc, krb5-admin-server, krb5-user, libkrb5-dev,
# libsasl2-modules-gssapi-mit: the SASL/GSSAPI tests), and a virtual environment at .venv with
# kafkatw and its test and spark extras.
# Safe to run again: it skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
need_apt=()
[ -f /usr/share/java/zookeeper.jar ] || need_apt+=(zookeeper)
command -v kcat >/dev/null 2>&1 || need_apt+=(kcat)
command -v java >/dev/null 2>&1 || need_apt+=(default-jre-headless)
# the web console's browser tests (tests/integration/test_console.py)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
# the network-fault tests (tests/integration/test_network_faults.py, docs/fault-testing.md): network
# namespaces and veth pairs (iproute2) and nftables rules inside them (in /usr/sbin, off a user's PATH)
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || need_apt+=(iproute2)
command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || need_apt+=(nftables)
# KafkaJS, a member of the mixed consumer groups in tests/interop/test_group_members.py
command -v npm >/dev/null 2>&1 || need_apt+=(nodejs npm)
# SASL/GSSAPI (docs/security.md, tests/interop/test_sasl_gssapi.py): MIT Kerberos' KDC and tools for a
# realm of the tests' own, libkrb5-dev for pip to build python-gssapi, and Cyrus SASL's GSSAPI module for
# kcat's librdkafka
[ -x /usr/sbin/krb5kdc ] || need_apt+=(krb5-kdc)
[ -x /usr/sbin/kadmin.local ] || need_apt+=(krb5-admin-server)
command -v kinit >/dev/null 2>&1 || need_apt+=(krb5-user)
[ -f /usr/include/gssapi/gssapi.h ] || need_apt+=(libkrb5-dev)
ls /usr/lib/*/sasl2/libgssapiv2.so* >/dev/null 2>&1 || need_apt+=(libsasl2-modules-gssapi-mit)
PYTHON=${PYTHON:-python3}
# the record codec's compiled accelerator (docs/design.md, "Compiled accelerator"): a C compiler,
# and Python.h for the Python the venv is made from (a non-Debian build may ship its own)
command -v cc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
base_python=.venv/bin/python
[ -x "$base_python" ] || base_python=$PYTHON
if ! "$base_python" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null; then
  need_apt+=(python3-dev)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/pip install -q --upgrade pip >/dev/null
.venv/bin/pip install -q -e ".[test,spark${KAFKATW_EXTRAS:+,$KAFKATW_EXTRAS}]"
# the versions pinned in tests/interop/node/package-lock.json
[ -d tests/interop/node/node_modules/kafkajs ] || npm ci --prefix tests/interop/node --no-audit --no-fund --silent
echo "kafkatw set up: $(.venv/bin/python -c 'import kafkatw; print(kafkatw.__version__)') in .venv," \
  "compiled record codec: $(.venv/bin/python -c 'from kafkatw.protocol import records; print("yes" if records.SPEEDUPS else "no (pure Python)")')"
