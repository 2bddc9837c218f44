#!/bin/sh
# scripts/deps.sh - install the Debian 12 packages Elastic GPU needs to build,
# test and run its demo. As root it runs apt-get; otherwise it prints the exact
# command to run and fails, so `make` never half-builds. Then the one npm
# package the tests use (tests/cel: a CEL evaluator for deploy/'s admission
# policies), pinned by tests/cel/package-lock.json.
set -eu
cd "$(dirname "$0")/.."

# Build and test dependencies, one package a line in docs order.
PKGS="build-essential cmake pkg-config clang-format clang-14 libclang-rt-14-dev libcmocka-dev libcsv-dev libcurl4-openssl-dev libjansson-dev libyajl-dev libmicrohttpd-dev libgnutls28-dev libyaml-dev libgrpc-dev libprotobuf-c-dev libglib2.0-dev tzdata protobuf-c-compiler protobuf-compiler gnuplot-nox python3 python3-pytest python3-yaml python3-kubernetes python3-prometheus-client python3-grpcio python3-protobuf python3-jsonpatch curl ca-certificates openssl valgrind"

# Node.js and npm for tests/cel, from Debian unless the machine has them.
command -v node >/dev/null 2>&1 || PKGS="$PKGS nodejs"
command -v npm >/dev/null 2>&1 || PKGS="$PKGS npm"

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

if [ -n "$missing" ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "deps: missing Debian packages:$missing" >&2
        echo "deps: run as root:  apt-get update && apt-get install -y$missing" >&2
        exit 1
    fi
    echo "deps: installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    # shellcheck disable=SC2086
    apt-get install -y -q --no-install-recommends $missing
fi

# tests/cel/node_modules, again whenever the lock file is newer than it.
if [ ! -f tests/cel/node_modules/.package-lock.json ] ||
    [ tests/cel/package-lock.json -nt tests/cel/node_modules/.package-lock.json ]; then
    echo "deps: npm ci in tests/cel"
    (cd tests/cel && npm ci --no-audit --no-fund --loglevel=error)
fi
