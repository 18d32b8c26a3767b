#!/usr/bin/env bash
# ceph-matrix.sh (make ceph-matrix): the integration suites (e2e/contract,
# e2e/controller, e2e/node with the fuse mapper, e2e/sanity) against the
# Ceph releases users run. Each cluster runs in a chroot of its Debian
# suite's cached root (scripts/suite.sh run); the plugin and the test
# binaries are built against a suite's librbd (scripts/suite.sh build):
#
#   reef                 Reef 18.2 cluster (trixie), plugin built on trixie
#   tentacle             Tentacle 20.2 cluster (forky), plugin built on forky,
#                        with the AES256K keys such a cluster makes
#   reef-on-tentacle     the default image's client (trixie) on Tentacle
#   pacific-on-tentacle  this machine's Pacific-built plugin and tests on
#                        Tentacle, as when a cluster is upgraded under a
#                        running driver
#
# Clients older than Tentacle cannot read AES256K keys: their cells run the
# cluster with AES keys (scripts/ceph-cluster.sh CEPH_KEY_TYPE=aes), as an
# admin must (docs/reference.md, "Ceph releases"), and TestKeyTypes checks the answer
# to an AES256K key.
#
#   ceph-matrix.sh [CELL...]      (default: all four)
#
# Each cluster listens on 127.0.0.1 only. Whatever a chroot starts ends with
# it (private mount and PID namespaces); the work directory goes on exit.
# Environment: MATRIX_RUN='TestCreate' picks tests (go test -run) in every
# suite (and reports without the list); MATRIX_KEEP=1 keeps the
# work directory (logs).
set -euo pipefail

readonly PROG=${0##*/}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
readonly ROOT
readonly SUITES=(contract controller node sanity)
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"

[[ $(id -u) == 0 ]] || die "run as root (chroots, mounts, loop devices)"
cells=("$@")
((${#cells[@]})) || cells=(reef tentacle reef-on-tentacle pacific-on-tentacle)

# cell NAME: the cluster's suite, the client's suite (host: this machine)
# and whether that client can use AES256K keys.
cell_spec() {
	case $1 in
	reef) echo "trixie trixie 0" ;;
	tentacle) echo "forky forky 1" ;;
	reef-on-tentacle) echo "forky trixie 0" ;;
	pacific-on-tentacle) echo "forky host 0" ;;
	*) return 1 ;;
	esac
}
for c in "${cells[@]}"; do cell_spec "$c" >/dev/null || die "unknown cell $c"; done

work=$(mktemp -d /tmp/rbdcsi-matrix.XXXXXX)
holder=
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	[[ -z $holder ]] || release_hold
	remove_work "$work" "${MATRIX_KEEP:-0}"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Which suites each cell runs, and which of their tests, is the cell's
# sections of scripts/ceph-matrix.tests ("reef/node": e2e/node in the reef
# cell); each test left out says why there. The suites report as go test
# -json does (test2json, Go's own converter, built static), and
# scripts/testreport holds every suite to its section: a listed test that
# skips or does not run fails the cell, naming it.
readonly LIST=$ROOT/scripts/ceph-matrix.tests

# The test script: every suite of the cell against the cluster in the
# environment, each from its package directory (as go test runs it), with
# the arguments written for it in $work/args. First it probes rbd-fuse, the
# only mapper this host's kernel serves: the rbd-fuse of Debian 13 and 14
# (Ceph 18.2.7, 20.2.4, libfuse 3.17+) crashes when given a pool (-p) and a
# namespace. The plugin's fuse mapper passes no pool for pool rbd, as the
# first probe does. The probe's findings go to $work/CELL.fuse, where the
# list's exclusions are checked against them.
# shellcheck disable=SC2016 # expanded by the inner shell
readonly RUN_SUITES='set -u; src=$1 bin=$2 work=$3 cell=$4; shift 4; rc=0
	rbd -c "$CEPH_CONF" create --size 4M "$CEPH_POOL/rbdcsi-fuse-probe"
	rbd -c "$CEPH_CONF" namespace create --pool "$CEPH_POOL" --namespace rbdcsi-fuse-probe
	rbd -c "$CEPH_CONF" create --size 4M --pool "$CEPH_POOL" --namespace rbdcsi-fuse-probe rbdcsi-fuse-probe
	# fuse_probe ARGS...: "ok" or how rbd-fuse ended before it mounted.
	fuse_probe() {
		local m fpid frc
		m=$(mktemp -d)
		rbd-fuse -c "$CEPH_CONF" "$@" -r rbdcsi-fuse-probe "$m" -f >/dev/null 2>&1 &
		fpid=$!
		for _ in $(seq 40); do
			grep -q " $m fuse" /proc/mounts && break
			kill -0 $fpid 2>/dev/null || break
			sleep 0.25
		done
		if grep -q " $m fuse" /proc/mounts; then
			fusermount3 -u "$m" 2>/dev/null || fusermount -u "$m"
			wait $fpid
			echo ok
		else
			wait $fpid; frc=$?
			echo "broken(exit-$frc)"
		fi
		rmdir "$m"
	}
	fuse=$(fuse_probe) fuse_pool=$(fuse_probe -p "$CEPH_POOL") fuse_ns=$(fuse_probe --namespace=rbdcsi-fuse-probe)
	rbd -c "$CEPH_CONF" rm --pool "$CEPH_POOL" --namespace rbdcsi-fuse-probe rbdcsi-fuse-probe >/dev/null 2>&1
	rbd -c "$CEPH_CONF" namespace remove --pool "$CEPH_POOL" --namespace rbdcsi-fuse-probe
	rbd -c "$CEPH_CONF" rm "$CEPH_POOL/rbdcsi-fuse-probe" >/dev/null 2>&1
	echo "$fuse $fuse_pool $fuse_ns" >"$work/$cell.fuse"
	echo "=== rbd-fuse $(rbd-fuse --version 2>/dev/null | head -1 | cut -d" " -f3): image $fuse; with -p: $fuse_pool; with --namespace: $fuse_ns"
	for s in "$@"; do
		mapfile -t args <"$work/args/$cell.$s"
		echo "=== suite e2e/$s"; t=$SECONDS
		(cd "$src/e2e/$s" && RBDPLUGIN=$bin/rbdplugin "$work/tools/test2json" -t -p "e2e/$s" "$bin/$s.test" \
			-test.v=test2json -test.count=1 -test.timeout=30m "${args[@]}") >"$work/$cell.$s.json" 2>"$work/$cell.$s.err" ||
			{ echo "--- FAIL: suite e2e/$s"; rc=1; }
		echo "=== suite e2e/$s took $((SECONDS - t)) s"
	done
	exit $rc'

# suites_of CELL: the suites CELL runs (its sections in the list).
suites_of() {
	local s
	for s in "${SUITES[@]}"; do
		grep -q "^\[$1/$s\]\$" "$LIST" && echo "$s"
	done
	return 0
}

# write_args CELL SUITE...: each suite's go test arguments, one per line,
# in $work/args/CELL.SUITE: its list's, or MATRIX_RUN's tests alone.
write_args() {
	local cell=$1 s
	shift
	mkdir -p "$work/args"
	for s in "$@"; do
		if [[ -n ${MATRIX_RUN:-} ]]; then
			echo "-test.run=$MATRIX_RUN" >"$work/args/$cell.$s"
		else
			"$work/tools/testreport" args -list "$LIST" "$cell/$s" >"$work/args/$cell.$s" || die "no arguments for $cell/$s"
		fi
	done
}

# report CELL SUITE...: every suite's run judged by its section (or, with
# MATRIX_RUN, just reported); fails if a run does not meet its list.
report() {
	local cell=$1 s parts=()
	shift
	for s in "$@"; do parts+=("$cell/$s=$work/$cell.$s.json"); done
	if [[ -n ${MATRIX_RUN:-} ]]; then
		"$work/tools/testreport" summary -step ceph-matrix -v "${parts[@]}"
	else
		"$work/tools/testreport" check -step ceph-matrix -list "$LIST" -v "${parts[@]}"
	fi
}

# fuse_agrees CELL: a test the list leaves out because rbd-fuse crashes with
# a namespace must not be left out where the probe found it working: the
# list would hide a test that could run.
fuse_agrees() {
	local ns
	read -r _ _ ns <"$work/$1.fuse" || return 0
	if [[ $ns == ok ]] && grep -q TestRadosNamespace "$work/args/$1.node" 2>/dev/null; then
		log "$1: rbd-fuse works with --namespace here, yet scripts/ceph-matrix.tests leaves TestRadosNamespace out: update the list"
		return 1
	fi
}

# hold SUITE [NAME=VALUE...]: a cluster of SUITE's release at
# $work/hold/cluster, up until release_hold (scripts/suite.sh cluster, in
# the background).
hold() {
	local suite=$1 dir=$work/hold
	shift
	mkdir -p "$dir"
	"$ROOT/scripts/suite.sh" cluster "$suite" "$dir/cluster" CEPH_WITH_MGR=1 "$@" &
	holder=$!
	wait_cluster "$dir/cluster" "$holder" "the $suite cluster"
}

release_hold() {
	stop_cluster "$work/hold/cluster" "$holder"
	holder=
}

# cell NAME: one cell, its output in $work/NAME.log.
cell() {
	local name=$1 suite client aes256k t=$SECONDS rc=0 env=() line bin suites
	read -r suite client aes256k < <(cell_spec "$name")
	mapfile -t suites < <(suites_of "$name")
	((${#suites[@]})) || die "scripts/ceph-matrix.tests has no section for cell $name"
	write_args "$name" "${suites[@]}"
	bin=$work/bin-$client
	log "$name: $suite cluster, plugin and tests built on $client: ${suites[*]}"
	if [[ $client == "$suite" ]]; then
		# All in one chroot; with-cluster.sh tears the cluster down.
		SUITE_BINDS=$work SUITE_ENV="RBDCSI_E2E_AES256K_CLIENT=$aes256k" \
			"$ROOT/scripts/suite.sh" run "$suite" /src/scripts/with-cluster.sh \
			/bin/bash -c "$RUN_SUITES" run /src "$bin" "$work" "$name" "${suites[@]}" >"$work/$name.log" 2>&1 || rc=$?
	else
		# The cluster in its chroot, the tests in the client's; old
		# clients know AES keys only.
		hold "$suite" CEPH_KEY_TYPE=aes
		env=(RBDCSI_E2E_AES256K_CLIENT="$aes256k" CEPH_CLUSTER_DIR="$work/hold/cluster")
		while IFS= read -r line; do
			[[ $line =~ ^export\ (CEPH_[A-Z_]+)=(.*)$ ]] && env+=("${BASH_REMATCH[1]}=${BASH_REMATCH[2]}")
		done <"$work/hold/cluster/env"
		if [[ $client == host ]]; then
			env "${env[@]}" /bin/bash -c "$RUN_SUITES" run "$ROOT" "$bin" "$work" "$name" "${suites[@]}" >"$work/$name.log" 2>&1 || rc=$?
		else
			SUITE_BINDS=$work SUITE_ENV="${env[*]}" "$ROOT/scripts/suite.sh" run "$client" \
				/bin/bash -c "$RUN_SUITES" run /src "$bin" "$work" "$name" "${suites[@]}" >"$work/$name.log" 2>&1 || rc=$?
		fi
		release_hold
	fi
	# The probe and each suite's time, then the verdict by the list: one
	# line per test, every problem by name, the cell's count.
	grep -E '^(=== suite .* took|=== rbd-fuse|--- FAIL: suite)' "$work/$name.log" | sed "s/^/$name: /" >&2 || true
	report "$name" "${suites[@]}" || rc=1
	[[ -n ${MATRIX_RUN:-} ]] || fuse_agrees "$name" || rc=1
	if ((rc != 0)); then
		tail -20 "$work/$name.log" >&2
		die "$name failed after $((SECONDS - t)) s (log: $work/$name.log; MATRIX_KEEP=1 keeps it)"
	fi
	log "$name passed in $((SECONDS - t)) s"
}

t0=$SECONDS
mkdir -p "$work/tools"
(cd "$ROOT" && CGO_ENABLED=0 go build -o "$work/tools/test2json" cmd/test2json && go build -o "$work/tools/testreport" ./scripts/testreport) ||
	die "building test2json and scripts/testreport failed"
declare -A built=()
done_cells=()
# needed_by CLIENT: the suites the chosen cells built on CLIENT run.
needed_by() {
	local c cl
	for c in "${cells[@]}"; do
		read -r _ cl _ < <(cell_spec "$c")
		[[ $cl != "$1" ]] || suites_of "$c"
	done | sort -u
}
for c in "${cells[@]}"; do
	read -r _ client _ < <(cell_spec "$c")
	if [[ -z ${built[$client]:-} ]]; then
		t=$SECONDS
		mapfile -t need < <(needed_by "$client")
		"$ROOT/scripts/suite.sh" build "$client" "$work/bin-$client" "${need[@]}" >"$work/build-$client.log" 2>&1 ||
			{ tail -30 "$work/build-$client.log" >&2; die "building on $client failed"; }
		log "built on $client in $((SECONDS - t)) s: $(grep -m1 "^librbd" "$work/build-$client.log")"
		built[$client]=1
	fi
	cell "$c"
	done_cells+=("$c")
done
# The step's line: every suite of every cell, counted together.
if [[ -z ${MATRIX_RUN:-} ]]; then
	parts=()
	for c in "${done_cells[@]}"; do
		while read -r s; do parts+=("$c/$s=$work/$c.$s.json"); done < <(suites_of "$c")
	done
	"$work/tools/testreport" check -step ceph-matrix -list "$LIST" -q "${parts[@]}"
fi
log "all cells passed in $((SECONDS - t0)) s"
