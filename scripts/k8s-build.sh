#!/bin/sh
# Builds the real Kubernetes control plane the tests start into tools/bin:
# kube-apiserver, kube-scheduler, kube-controller-manager and etcd, and the kubelet of the
# one real node tests/cluster/kubelet.py runs, from the versions pinned
# in tools/go.mod and tools/go.sum (scripts/k8s-gomod.sh writes them). Go is a build tool
# here, never a product language: no Go code of ours is built.
#
#   sh scripts/k8s-build.sh          build what is missing or of another version, then check
#   sh scripts/k8s-build.sh --check  only check: exit 1 naming what is missing or wrong
#   sh scripts/k8s-build.sh --go     print the go it would build with (exit 1: none usable)
#
# Each binary is built once per pinned version: a binary whose --version says the pinned
# version is kept. Go's module cache and build cache ($GOMODCACHE, $GOCACHE) make a rebuild
# after a version change incremental. Needs go 1.26 or newer (a go too old, or none, is
# looked for in /usr/local/go and Debian's golang-1.23-go, whose go takes the toolchain
# go.mod names from the module proxy: GOTOOLCHAIN=auto).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/tools/bin
mod=$root/tools/go.mod
kver=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' "$mod")
ever=$(awk '$1 == "go.etcd.io/etcd/server/v3" && $2 ~ /^v/ { print $2; exit }' "$mod")
[ -n "$kver" ] && [ -n "$ever" ] || { echo "k8s-build.sh: tools/go.mod pins no kubernetes or etcd" >&2; exit 1; }

# The version a binary prints: kube-* and kubelet print "Kubernetes v1.36.3", etcd "etcd Version: 3.6.8".
version_of() {
	case $1 in
	etcd) "$bin/etcd" --version 2>/dev/null | sed -n 's/^etcd Version: \(.*\)$/v\1/p' ;;
	*) "$bin/$1" --version 2>/dev/null | sed -n 's/^Kubernetes \(v[^ ]*\)$/\1/p' ;;
	esac
}
want_of() { if [ "$1" = etcd ]; then echo "$ever"; else echo "$kver"; fi; }
pkg_of() { if [ "$1" = etcd ]; then echo go.etcd.io/etcd/server/v3; else echo "k8s.io/kubernetes/cmd/$1"; fi; }

# The go to build with: the first of PATH's, /usr/local/go's and Debian's golang-1.23-go
# that is 1.21 or newer (older ones cannot take the pinned toolchain: GOTOOLCHAIN).
gocmd=
for g in go /usr/local/go/bin/go /usr/lib/go-1.23/bin/go; do
	command -v "$g" >/dev/null 2>&1 || continue
	case "$("$g" env GOVERSION 2>/dev/null)" in
	go1.2[1-9]* | go1.[3-9][0-9]* | go[2-9]*) gocmd=$(command -v "$g") && break ;;
	esac
done
if [ "${1:-}" = --go ]; then
	[ -n "$gocmd" ] && echo "$gocmd"
	[ -n "$gocmd" ]
	exit
fi

names="kube-apiserver kube-scheduler kube-controller-manager kubelet etcd"
missing=
for n in $names; do
	[ "$(version_of "$n")" = "$(want_of "$n")" ] || missing="$missing $n"
done
if [ -z "$missing" ]; then
	echo "tools/bin: kube-apiserver, kube-scheduler, kube-controller-manager, kubelet $kver, etcd $ever"
	exit 0
fi
if [ "${1:-}" = --check ]; then
	for n in $missing; do
		echo "tools/bin/$n: want $(want_of "$n"), have '$(version_of "$n")' (sh scripts/k8s-build.sh)" >&2
	done
	exit 1
fi

[ -n "$gocmd" ] || { echo "k8s-build.sh: no go 1.21 or newer (scripts/deps.sh installs golang-1.23-go from bookworm-backports)" >&2; exit 1; }
mkdir -p "$bin"
start=$(date +%s)
for n in $missing; do
	pkg=$(pkg_of "$n")
	echo "== building $n $(want_of "$n") ($pkg)"
	# The version the binaries print: kubernetes sets it by -ldflags -X at release time; a
	# build from the module gets the same with the same flags.
	ld="-s -w"
	case $n in
	kube-* | kubelet)
		v=k8s.io/component-base/version
		ld="-s -w -X $v.gitVersion=$kver -X $v.gitMajor=1 -X $v.gitMinor=$(echo "$kver" | cut -d. -f2) -X $v.gitTreeState=clean"
		;;
	esac
	(cd "$root/tools" && GOTOOLCHAIN=${GOTOOLCHAIN:-auto} CGO_ENABLED=0 "$gocmd" build -trimpath \
		-ldflags "$ld" -o "$bin/$n" "$pkg")
done
for n in $missing; do
	got=$(version_of "$n")
	[ "$got" = "$(want_of "$n")" ] || { echo "k8s-build.sh: tools/bin/$n says '$got', want $(want_of "$n")" >&2; exit 1; }
done
echo "tools/bin: built$missing in $(($(date +%s) - start)) s (kubernetes $kver, etcd $ever)"
