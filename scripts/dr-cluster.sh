#!/usr/bin/env bash
# dr-cluster.sh: two throwaway Ceph clusters on one machine, peered for RBD
# snapshot mirroring, each with its rbd-mirror daemon, for the
# disaster-recovery tests (make dr-test). Site a listens on DR_ADDR_A, site b
# on DR_ADDR_B (both loopback); each is a scripts/ceph-cluster.sh cluster
# (one OSD, a mgr for the snapshot schedules) in DIR/a and DIR/b.
#
#   dr-cluster.sh up   DIR        boot both (idempotent), peer pool rbd both ways
#                                 in image mode, start rbd-mirror on each; write DIR/env
#   dr-cluster.sh down DIR        stop exactly the daemons it started, remove DIR (idempotent)
#   dr-cluster.sh status DIR      each site's mirroring, peers and daemons
#   dr-cluster.sh run CMD [ARG..] up in a temporary DIR, run CMD with DIR/env
#                                 exported, always down afterwards
#   dr-cluster.sh suite SUITE [ARG..]
#                                 e2e/dr on SUITE's Ceph (forky: Tentacle), as
#                                 the Ceph matrix's same-release cells run: the
#                                 plugin and the suite built against its librbd,
#                                 both clusters, their rbd-mirror and the tests
#                                 in a chroot of its cached root
#                                 (scripts/suite.sh); ARGs go to the test
#                                 binary (-test.run=...)
#
# Environment: DR_ADDR_A (default 127.0.0.2), DR_ADDR_B (default 127.0.0.3),
# DR_MIRROR_INTERVAL (seconds between rbd-mirror's looks and reports,
# default 5; Ceph's own is 30).
# rbd-mirror is stopped by the PID recorded in DIR/<site>/rbd-mirror.pid
# (scripts/mirror-lib.sh, which scripts/k8s-e2e.sh shares): never by name.
set -euo pipefail

readonly PROG=${0##*/}
here=$(cd "$(dirname "$0")" && pwd)
readonly here
# shellcheck source=scripts/lib.sh
source "$here/lib.sh"
# shellcheck source=scripts/mirror-lib.sh
source "$here/mirror-lib.sh"
unset CEPH_ARGS

readonly ADDR_A=${DR_ADDR_A:-127.0.0.2} ADDR_B=${DR_ADDR_B:-127.0.0.3}
readonly POOL=rbd
readonly MARKER=.dr-cluster-sh
readonly MIRROR_INTERVAL=${DR_MIRROR_INTERVAL:-5}

usage() {
	echo "usage: $PROG up|down|status DIR, $PROG run CMD [ARGS...], or $PROG suite SUITE [TEST ARGS...]" >&2
	exit 2
}

# site_dir SITE: the cluster directory of site a or b.
site_dir() { echo "$DIR/$1"; }

# site_addr SITE: the address site a or b listens on.
site_addr() {
	case $1 in
	a) echo "$ADDR_A" ;;
	b) echo "$ADDR_B" ;;
	*) die "no site $1" ;;
	esac
}

# start_site_mirror SITE: the site's rbd-mirror, reaching both clusters
# from the site's address (mirror-lib.sh, start_mirror).
start_site_mirror() {
	start_mirror "$(site_dir "$1")" "$MIRROR_INTERVAL" "$(site_addr "$1")" "$DIR/sourceaddr.so"
}

rbd_at() {
	local site=$1
	shift
	mirror_rbd "$(site_dir "$site")" "$@"
}

cmd_up() {
	local t0=$SECONDS
	if [[ -e $DIR && ! -e $DIR/$MARKER && -n $(ls -A "$DIR") ]]; then
		die "$DIR exists, is not empty and is not a $PROG directory"
	fi
	mkdir -p "$DIR"
	touch "$DIR/$MARKER"
	# Both clusters at once: each takes the port lock only to start its mon.
	# The daemons start in /: Debian forky's Tentacle OSD looks for its
	# object classes (cls_rbd) under a relative path,
	# lib/x86_64-linux-gnu/rados-classes, and answers every rbd call with
	# EOPNOTSUPP when started elsewhere (as from e2e/dr, where the tests run).
	(cd / && CEPH_ADDR=$ADDR_A CEPH_WITH_MGR=1 CEPH_EC_POOL=0 exec "$here/ceph-cluster.sh" up "$(site_dir a)") >"$DIR/a.up.log" 2>&1 &
	local pa=$!
	(cd / && CEPH_ADDR=$ADDR_B CEPH_WITH_MGR=1 CEPH_EC_POOL=0 exec "$here/ceph-cluster.sh" up "$(site_dir b)") >"$DIR/b.up.log" 2>&1 &
	local pb=$! ok=1
	wait "$pa" || ok=0
	wait "$pb" || ok=0
	cat "$DIR/a.up.log" "$DIR/b.up.log" >&2
	((ok)) || die "a cluster did not come up"
	mirror_peer "$POOL" "$(site_dir a)" site-a "$(site_dir b)" site-b
	mirror_wait_schedules "$(site_dir a)" "$POOL"
	mirror_wait_schedules "$(site_dir b)" "$POOL"
	mirror_build_shim "$DIR"
	start_site_mirror a
	start_site_mirror b
	{
		printf 'export DR_A_DIR=%q\n' "$(site_dir a)"
		printf 'export DR_B_DIR=%q\n' "$(site_dir b)"
	} >"$DIR/env.tmp"
	mv "$DIR/env.tmp" "$DIR/env"
	echo "up: $DIR sites a ($ADDR_A) and b ($ADDR_B) peered, rbd-mirror on each, in $((SECONDS - t0)) s"
}

cmd_down() {
	[[ -e $DIR ]] || return 0
	# Never remove a directory this script did not make.
	[[ -e $DIR/$MARKER || -z $(ls -A "$DIR") ]] || die "$DIR is not a $PROG directory (no $MARKER); not touching it"
	local s
	for s in a b; do
		[[ -d $(site_dir "$s") ]] && stop_mirror "$(site_dir "$s")"
	done
	for s in a b; do
		"$here/ceph-cluster.sh" down "$(site_dir "$s")"
	done
	rm -rf --one-file-system "$DIR"
}

cmd_status() {
	local s rc=0
	for s in a b; do
		echo "== site $s: rbd-mirror pid $(mirror_pid "$(site_dir "$s")")"
		"$here/ceph-cluster.sh" status "$(site_dir "$s")" || rc=1
		rbd_at "$s" mirror pool info "$POOL" || rc=1
		[[ -n $(mirror_pid "$(site_dir "$s")") ]] || {
			log "rbd-mirror of site $s is not running"
			rc=1
		}
	done
	return "$rc"
}

cmd_run() {
	DIR=$(mktemp -d /tmp/rbdcsi-dr.XXXXXX)
	trap 'cmd_down >/dev/null 2>&1 || true' EXIT INT TERM
	cmd_up
	set -a
	# shellcheck disable=SC1091
	source "$DIR/env"
	set +a
	"$@"
}

# cmd_suite SUITE [ARG...]: e2e/dr in a chroot of SUITE's cached root.
# rbd-mirror is in no cached root: it is installed into the run's
# throwaway overlay (scripts/rootfs.sh keeps the cached roots free of
# anything a project adds). The chroot shares this machine's network, so
# the sites listen on the same loopback addresses.
cmd_suite() {
	local suite=$1 work rc=0
	shift
	[[ $suite =~ ^[a-z]+$ ]] || die "bad suite name: $suite"
	work=$(mktemp -d /tmp/rbdcsi-dr-suite.XXXXXX)
	# shellcheck disable=SC2064 # expanded now: the directory of this run
	trap "rm -rf --one-file-system '$work'" EXIT
	if ! "$here/suite.sh" build "$suite" "$work/bin" dr >"$work/build.log" 2>&1; then
		tail -n 30 "$work/build.log" >&2
		die "building on $suite failed"
	fi
	head -n 1 "$work/build.log"
	# shellcheck disable=SC2016 # expanded by the inner shell
	SUITE_BINDS=$work SUITE_ENV="DR_ADDR_A=$ADDR_A DR_ADDR_B=$ADDR_B DR_MIRROR_INTERVAL=$MIRROR_INTERVAL" \
		"$here/suite.sh" run "$suite" /bin/bash -c 'set -e; bin=$1; shift
		apt-get update -qq -o Acquire::Retries=3
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o Acquire::Retries=3 --no-install-recommends rbd-mirror >/dev/null
		echo "rbd-mirror $(dpkg-query -W -f="\${Version}" rbd-mirror)"
		cd /src/e2e/dr
		RBDPLUGIN=$bin/rbdplugin exec /src/scripts/dr-cluster.sh run "$bin/dr.test" -test.v -test.count=1 -test.timeout=30m "$@"' \
		suite "$work/bin" "$@" || rc=$?
	return "$rc"
}

main() {
	(($# >= 1)) || usage
	local cmd=$1
	shift
	if [[ $cmd == run ]]; then
		(($# >= 1)) || usage
		cmd_run "$@"
		return
	fi
	if [[ $cmd == suite ]]; then
		(($# >= 1)) || usage
		cmd_suite "$@"
		return
	fi
	if (($# != 1)) || [[ -z $1 ]]; then usage; fi
	DIR=$(realpath -m -- "$1")
	[[ $DIR != / ]] || die "refusing to use / as the directory"
	case $cmd in
	up) cmd_up ;;
	down) cmd_down ;;
	status) cmd_status ;;
	*) usage ;;
	esac
}

main "$@"
