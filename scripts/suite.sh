#!/usr/bin/env bash
# suite.sh: the plugin on another Debian suite's Ceph (trixie: Reef 18.2,
# forky: Tentacle 20.2), in a chroot of the suite's cached root
# (scripts/rootfs.sh runtime + dev), with this machine's Go toolchain and
# module cache bound in read-only. Used by the Ceph matrix
# (scripts/ceph-matrix.sh) and the kernel test (scripts/kernel-test.sh).
#
#   suite.sh run SUITE CMD...            CMD in a throwaway overlay over the
#                                        suite's roots
#   suite.sh build SUITE|host OUT [PKG...]
#                                        OUT/rbdplugin and OUT/PKG.test for each
#                                        e2e package PKG (OUT/NAME for a
#                                        command ./PATH/NAME), built against
#                                        the suite's librbd (host: this
#                                        machine's)
#   suite.sh cluster SUITE DIR [NAME=VALUE...]
#                                        a test cluster of the suite's release at
#                                        DIR (scripts/ceph-cluster.sh, with the
#                                        environment given), up from when DIR.up
#                                        appears until DIR.stop does; run it in
#                                        the background
#
# run binds the repository at /src (read-only), Go at /usr/local/go and
# $SUITE_BINDS (space-separated DIR, bound at its own path). Go's build
# cache per suite is the one the image build of that suite keeps
# (scripts/image.sh gocache): with the same flags (-trimpath), the plugin's
# packages compile once for the image and the tests. $SUITE_ENV adds
# NAME=VALUE words to CMD's environment. Whatever CMD starts ends with it
# (rootfs.sh run).
set -euo pipefail

readonly PROG=${0##*/}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
readonly ROOT
die() {
	echo "$PROG: $*" >&2
	exit 1
}

run() {
	local suite=$1 runtime dev ov binds d rc=0 gocache
	shift
	[[ $suite =~ ^[a-z]+$ ]] || die "bad suite name: $suite"
	runtime=$("$ROOT/scripts/rootfs.sh" runtime "$suite")
	dev=$("$ROOT/scripts/rootfs.sh" dev "$suite")
	gocache=$("$ROOT/scripts/image.sh" gocache "$suite")
	ov=$(mktemp -d "${TMPDIR:-/tmp}/rbdcsi-suite-$suite.XXXXXX")
	binds="$ROOT:/src:ro $(go env GOROOT):/usr/local/go:ro $(go env GOMODCACHE):/gomod:ro $gocache:/gocache"
	for d in ${SUITE_BINDS:-}; do binds+=" $d:$d"; done
	ROOTFS_OVERLAY=$ov ROOTFS_LAYERS=$dev ROOTFS_BINDS=$binds \
		ROOTFS_ENV="PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin GOMODCACHE=/gomod GOCACHE=/gocache GOPROXY=off GOTOOLCHAIN=local GOFLAGS=-buildvcs=false ${SUITE_ENV:-}" \
		"$ROOT/scripts/rootfs.sh" run "$runtime" "$@" || rc=$?
	rm -rf "$ov"
	return "$rc"
}

# The build, with the go-ceph tag of the librbd it finds (build/ceph-tags.sh).
# shellcheck disable=SC2016 # expanded by the inner shell
readonly BUILD='set -e; cd "$1"; out=$2; shift 2
	tags=$(build/ceph-tags.sh)
	echo "librbd $(dpkg-query -W -f="\${Version}" librbd-dev), go-ceph tag ${tags:-none (the newest)}"
	version=$(cat "$out/.version" 2>/dev/null || echo dev)
	commit=$(cat "$out/.commit" 2>/dev/null || echo unknown)
	go build -tags "${tags:+$tags,}faultinject" -trimpath -o "$out/rbdplugin" \
		-ldflags "-X main.version=$version -X main.commit=$commit -X main.librbd=$(dpkg-query -W -f="\${Version}" librbd-dev)" ./cmd/rbdplugin
	for p in "$@"; do
		case $p in
		./*) go build -tags "$tags" -trimpath -o "$out/${p##*/}" "$p" ;;
		*) go test -tags "$tags" -trimpath -c -o "$out/$p.test" "./e2e/$p" ;;
		esac
	done'

build() {
	local suite=$1 out=$2
	shift 2
	mkdir -p "$out"
	out=$(realpath "$out")
	git -C "$ROOT" describe --tags --always --dirty >"$out/.version" 2>/dev/null || echo dev >"$out/.version"
	git -C "$ROOT" rev-parse HEAD >"$out/.commit" 2>/dev/null || echo unknown >"$out/.commit"
	if [[ $suite == host ]]; then
		bash -c "$BUILD" build "$ROOT" "$out" "$@"
	else
		SUITE_BINDS="${SUITE_BINDS:-} $out" run "$suite" /bin/bash -c "$BUILD" build /src "$out" "$@"
	fi
}

cluster() {
	local suite=$1 dir=$2
	shift 2
	[[ $dir == /* ]] || die "the cluster directory must be absolute: $dir"
	# Removing them here would race with a caller that stops the cluster
	# before this runs; stop_cluster (scripts/lib.sh) removes them.
	[[ ! -e $dir.up && ! -e $dir.stop ]] || die "$dir.up or $dir.stop is left from an earlier cluster: remove it first"
	# shellcheck disable=SC2016 # expanded by the inner shell
	SUITE_BINDS="${SUITE_BINDS:-} $(dirname "$dir")" SUITE_ENV="${SUITE_ENV:-} $*" run "$suite" /bin/bash -c '
		/src/scripts/ceph-cluster.sh up "$1" >"$1.log" 2>&1 || exit 1
		touch "$1.up"
		until [ -e "$1.stop" ]; do sleep 0.5; done
		/src/scripts/ceph-cluster.sh down "$1" >/dev/null 2>&1' cluster "$dir"
}

case ${1:-} in
cluster)
	(($# >= 3)) || die "usage: $PROG cluster SUITE DIR [NAME=VALUE...]"
	shift
	cluster "$@"
	;;
run)
	(($# >= 3)) || die "usage: $PROG run SUITE CMD..."
	shift
	run "$@"
	;;
build)
	(($# >= 3)) || die "usage: $PROG build SUITE|host OUT [PKG...]"
	shift
	build "$@"
	;;
*) die "usage: $PROG run SUITE CMD... | build SUITE|host OUT [PKG...] | cluster SUITE DIR [NAME=VALUE...]" ;;
esac
