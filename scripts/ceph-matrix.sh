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
# admin must (README, "Ceph releases"), and TestKeyTypes checks the answer
# to an AES256K key.
#
#   ceph-matrix.sh [CELL...]      (default: all four)
#
# Each cluster listens on 127.0.0.1 only. Whatever a chroot starts ends with
# it (private mount and PID namespaces); the work directory goes on exit.
# Environment: MATRIX_RUN='TestCreate' picks tests (go test -run) in every
# suite; MATRIX_VERBOSE=1 runs them with -test.v; MATRIX_KEEP=1 keeps the
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

# The test script: every suite against the cluster in the environment,
# each from its package directory (as go test runs it). First probes of
# rbd-fuse, the only mapper this host's kernel serves: the rbd-fuse of
# Debian 13 and 14 (Ceph 18.2.7, 20.2.4, libfuse 3.17+) crashes when given
# a pool (-p) and, the probe finds out, a namespace. The plugin's fuse mapper
# passes no pool for pool rbd, as the first probe does; what cannot run is
# named in the log and the summary.
# shellcheck disable=SC2016 # expanded by the inner shell
readonly RUN_SUITES='set -u; src=$1 bin=$2; shift 2; rc=0
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
			echo "broken: exited with $frc before mounting"
		fi
		rmdir "$m"
	}
	fuse=$(fuse_probe) fuse_pool=$(fuse_probe -p "$CEPH_POOL") fuse_ns=$(fuse_probe --namespace=rbdcsi-fuse-probe)
	rbd -c "$CEPH_CONF" rm --pool "$CEPH_POOL" --namespace rbdcsi-fuse-probe rbdcsi-fuse-probe >/dev/null 2>&1
	rbd -c "$CEPH_CONF" namespace remove --pool "$CEPH_POOL" --namespace rbdcsi-fuse-probe
	rbd -c "$CEPH_CONF" rm "$CEPH_POOL/rbdcsi-fuse-probe" >/dev/null 2>&1
	echo "=== rbd-fuse $(rbd-fuse --version 2>/dev/null | head -1 | cut -d" " -f3): image $fuse; with -p: $fuse_pool; with --namespace: $fuse_ns"
	for s in "$@"; do
		args=() skip=()
		if [ "$fuse" != ok ]; then
			case $s in
			node) echo "=== suite e2e/node NOT RUN: rbd-fuse $fuse"; continue ;;
			controller) echo "=== suite e2e/controller without TestNodeStageIsFenced (it stages)"; skip+=(TestNodeStageIsFenced) ;;
			sanity) echo "=== suite e2e/sanity without its Node specs"; args=(-ginkgo.skip="Node Service") ;;
			esac
		elif [ "$s" = node ] && [ "$fuse_ns" != ok ]; then
			echo "=== suite e2e/node without TestRadosNamespace (rbd-fuse --namespace $fuse_ns)"
			skip+=(TestRadosNamespace)
		fi
		# The daemons of a cluster in another chroot live in a PID
		# namespace these tests cannot see, so they cannot pause them.
		if [ -n "${MATRIX_FOREIGN_MON:-}" ]; then
			case $s in
			contract) echo "=== suite e2e/contract without TestCloseWaitsForCallsInFlight (the OSDs run in another chroot)"; skip+=(TestCloseWaitsForCallsInFlight) ;;
			controller) echo "=== suite e2e/controller without TestMonitorOutage (the monitor runs in another chroot)"; skip+=(TestMonitorOutage) ;;
			node) echo "=== suite e2e/node without TestNodeStageMonitorOutage (the monitor runs in another chroot)"; skip+=(TestNodeStageMonitorOutage) ;;
			esac
		fi
		if [ ${#skip[@]} -gt 0 ]; then
			args+=(-test.skip="^($(IFS="|"; echo "${skip[*]}"))\$")
		fi
		echo "=== suite e2e/$s"; t=$SECONDS
		(cd "$src/e2e/$s" && RBDPLUGIN=$bin/rbdplugin "$bin/$s.test" -test.count=1 -test.timeout=30m "${args[@]}" \
			${MATRIX_RUN:+-test.run="$MATRIX_RUN"} ${MATRIX_VERBOSE:+-test.v}) || { echo "--- FAIL: suite e2e/$s"; rc=1; }
		echo "=== suite e2e/$s took $((SECONDS - t)) s"
	done
	exit $rc'

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
	local name=$1 suite client aes256k t=$SECONDS rc=0 env=() line bin
	read -r suite client aes256k < <(cell_spec "$name")
	bin=$work/bin-$client
	log "$name: $suite cluster, plugin and tests built on $client"
	if [[ $client == "$suite" ]]; then
		# All in one chroot; with-cluster.sh tears the cluster down.
		SUITE_BINDS=$work SUITE_ENV="RBDCSI_E2E_AES256K_CLIENT=$aes256k ${MATRIX_RUN:+MATRIX_RUN=$MATRIX_RUN} ${MATRIX_VERBOSE:+MATRIX_VERBOSE=1}" \
			"$ROOT/scripts/suite.sh" run "$suite" /src/scripts/with-cluster.sh \
			/bin/bash -c "$RUN_SUITES" run /src "$bin" "${SUITES[@]}" >"$work/$name.log" 2>&1 || rc=$?
	else
		# The cluster in its chroot, the tests in the client's; old
		# clients know AES keys only.
		hold "$suite" CEPH_KEY_TYPE=aes
		env=(RBDCSI_E2E_AES256K_CLIENT="$aes256k" CEPH_CLUSTER_DIR="$work/hold/cluster")
		while IFS= read -r line; do
			[[ $line =~ ^export\ (CEPH_[A-Z_]+)=(.*)$ ]] && env+=("${BASH_REMATCH[1]}=${BASH_REMATCH[2]}")
		done <"$work/hold/cluster/env"
		[[ -z ${MATRIX_RUN:-} ]] || env+=("MATRIX_RUN=$MATRIX_RUN")
		[[ -z ${MATRIX_VERBOSE:-} ]] || env+=("MATRIX_VERBOSE=1")
		if [[ $client == host ]]; then
			env "${env[@]}" /bin/bash -c "$RUN_SUITES" run "$ROOT" "$bin" "${SUITES[@]}" >"$work/$name.log" 2>&1 || rc=$?
		else
			SUITE_BINDS=$work SUITE_ENV="${env[*]} MATRIX_FOREIGN_MON=1" "$ROOT/scripts/suite.sh" run "$client" \
				/bin/bash -c "$RUN_SUITES" run /src "$bin" "${SUITES[@]}" >"$work/$name.log" 2>&1 || rc=$?
		fi
		release_hold
	fi
	# On failure the log's end first, then the summary, so the last lines
	# (what a CI report shows) say which suites and tests failed.
	((rc == 0)) || tail -40 "$work/$name.log" >&2
	grep -E '^(PASS|FAIL|--- FAIL|=== suite .* (took|NOT RUN|without)|=== rbd-fuse|panic:)' "$work/$name.log" |
		sed "s/^/$name: /" >&2 || true
	# Then the failed subtests and the tests' own words (file.go:N:).
	grep -E '^ +(--- FAIL|[a-z0-9_]+\.go:[0-9]+: )' "$work/$name.log" | head -n 40 | sed "s/^/$name: /" >&2 || true
	((rc == 0)) || die "$name failed after $((SECONDS - t)) s (log: $work/$name.log; MATRIX_KEEP=1 keeps it)"
	log "$name passed in $((SECONDS - t)) s"
}

t0=$SECONDS
declare -A built=()
for c in "${cells[@]}"; do
	read -r _ client _ < <(cell_spec "$c")
	if [[ -z ${built[$client]:-} ]]; then
		t=$SECONDS
		"$ROOT/scripts/suite.sh" build "$client" "$work/bin-$client" "${SUITES[@]}" >"$work/build-$client.log" 2>&1 ||
			{ tail -30 "$work/build-$client.log" >&2; die "building on $client failed"; }
		log "built on $client in $((SECONDS - t)) s: $(head -1 "$work/build-$client.log")"
		built[$client]=1
	fi
	cell "$c"
done
log "all cells passed in $((SECONDS - t0)) s"
