#!/bin/sh
# scripts/deps.sh - install the Debian 12 packages Elastic GPU needs to build,
# test and run its demo. As root it runs apt-get; otherwise it prints the exact
# command to run and fails, so `make` never half-builds.
set -eu

# Build and test dependencies, one package a line in docs order.
PKGS="build-essential cmake pkg-config clang-format clang-14 libclang-rt-14-dev libcmocka-dev libcsv-dev libcurl4-openssl-dev libjansson-dev libyajl-dev libmicrohttpd-dev libyaml-dev libgrpc-dev libprotobuf-c-dev protobuf-c-compiler protobuf-compiler gnuplot-nox python3 python3-pytest python3-yaml python3-kubernetes python3-prometheus-client python3-grpcio python3-protobuf curl ca-certificates openssl valgrind"

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

[ -z "$missing" ] && exit 0

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
