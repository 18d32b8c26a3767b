#!/usr/bin/env bash
# kernel-test.sh (make kernel-test): the node suite (e2e/node) on a real
# kernel, once with krbd and once with nbd, in QEMU guests running Debian's
# kernel (scripts/kernel-vm.sh), against a real Ceph cluster.
#
# Network rule: everything lives in a network namespace made here
# (scripts/vm-lib.sh): a bridge holds the clusters' address (198.18.0.1/24)
# and one tap device per guest; the guests take 198.18.0.2 and up. Each
# guest has a cluster of its own (another monitor port on the same
# address): the suites create volumes by fixed names, and two guests
# sharing a pool would map each other's volumes. Everything (guests,
# cluster, namespace, work directory) is torn down on exit, failure or
# interrupt.
#
# With both mappers, a joint phase ends the run, once both guests are
# done with their suites: the controller suite's
# TestForceDetachAcrossGuests on two machines, node-a on the krbd guest
# (A), the controller and node-b on the nbd guest (B), both on krbd's
# cluster. A serves an agent (e2e/harness/agent.go) on its bridge address,
# through which the test on B drives node-a; this script, which alone
# reaches the namespace, takes A's link down and up when the test asks (a
# file in $work/joint, which both guests share).
#
#   kernel-test.sh [MAPPER...]    (default: krbd nbd)
#
# Environment: KERNEL_TEST_RUN='TestBlock|TestFilesystem' picks tests (go
# test -run) for every mapper, and the joint test if its name matches
# (bash's =~, which reads a plain test pattern as go test does);
# KERNEL_TEST_FULL=1 runs the whole suite with nbd too (below);
# KERNEL_TEST_KEEP=1 keeps the work directory (logs); RBDCSI_E2E_TIMING=1
# logs each CSI call's time (e2e/harness).
# KERNEL_TEST_USERLAND=SUITE|host is the guests' userland (default: trixie,
# the plugin image's suite): its Ceph tools (rbd map, rbd-nbd) and the
# plugin and node suite built against its librbd (scripts/suite.sh build),
# with the /usr and /etc of the suite's cached roots (runtime and the test
# layer, which has iproute2) merged read-only; host is this machine's own.
# KERNEL_TEST_CLUSTERS='krbd=forky nbd=host' picks each mapper's cluster
# (default: krbd=forky nbd=host): host is this machine's Ceph, a Debian
# suite runs that suite's release in a chroot of its cached root
# (scripts/suite.sh cluster), with AES keys, which the guest's kernel
# (Linux 6.1) and older tools need. VM_CPUS: each guest's vCPUs (default:
# the host's CPUs shared among the guests).
set -euo pipefail

readonly PROG=${0##*/}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
readonly ROOT
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
# shellcheck source=scripts/vm-lib.sh
source "$ROOT/scripts/vm-lib.sh"

[[ $(id -u) == 0 ]] || die "run as root (network namespace, tap devices, QEMU)"
mappers=("$@")
((${#mappers[@]})) || mappers=(krbd nbd)
for m in "${mappers[@]}"; do [[ $m == krbd || $m == nbd ]] || die "unknown mapper $m (krbd or nbd)"; done
userland=${KERNEL_TEST_USERLAND:-trixie}
[[ $userland == host || $userland =~ ^[a-z]+$ ]] || die "bad KERNEL_TEST_USERLAND: $userland"
[[ $userland != host || -x $ROOT/bin/rbdplugin ]] || die "no bin/rbdplugin: run make build (make kernel-test does)"

t0=$SECONDS
kdir=$("$ROOT/scripts/kernel-vm.sh" kernel)
# Under /tmp: the guests mount it at the same path (scripts/vm-init.sh).
work=$(mktemp -d /tmp/rbdcsi-kt.XXXXXX)
ns=rbdcsi-kt-$$
guests=()
joint_pid=
declare -A suite_clusters=()
cleanup() {
	local rc=$? pid
	trap - EXIT INT TERM
	((rc != 130 && rc != 143)) || log "interrupted: tearing down"
	[[ -z $joint_pid ]] || kill -TERM "$joint_pid" 2>/dev/null || true
	# Each guest leads its own process group: QEMU goes with its script.
	for pid in "${guests[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
	for pid in "${guests[@]}"; do wait "$pid" 2>/dev/null || true; done
	for m in "${mappers[@]}"; do vm_cluster_down "$work/cluster-$m" "${suite_clusters[$m]:-}"; done
	ip netns del "$ns" 2>/dev/null || true
	vm_userland_down "$work/userland"
	remove_work "$work" "${KERNEL_TEST_KEEP:-0}"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$ROOT/scripts/kernel-vm.sh" initramfs "$work/initrd.gz"
mkdir -p "$work/bin"
if [[ $userland == host ]]; then
	cp "$ROOT/bin/rbdplugin" "$work/bin/"
	for p in node controller; do
		(cd "$ROOT" && go test -c -o "$work/bin/$p.test" "./e2e/$p") || die "building the $p suite failed"
	done
	vm_userland=/
else
	"$ROOT/scripts/suite.sh" build "$userland" "$work/bin" node controller >"$work/build.log" 2>&1 ||
		{ tail -30 "$work/build.log" >&2; die "building on $userland failed"; }
	log "built on $userland: $(grep -m1 "^librbd" "$work/build.log")"
	# The runtime root and its test layer, shared with the guests.
	vm_userland=$work/userland
	vm_userland_up "$userland" "$vm_userland" dev
fi

# The guests report their tests as `go test -json` does (test2json: Go's own
# converter, built static), and scripts/testreport holds each part of the
# run to its list (scripts/kernel-test.tests): a listed test that skips or
# does not run fails the step, naming it.
readonly LIST=$ROOT/scripts/kernel-test.tests
(cd "$ROOT" && CGO_ENABLED=0 go build -o "$work/bin/test2json" cmd/test2json && go build -o "$work/testreport" ./scripts/testreport) ||
	die "building test2json and scripts/testreport failed"

# cluster_of MAPPER: the Debian suite whose Ceph serves MAPPER's guest, or host.
cluster_of() {
	local kv
	for kv in ${KERNEL_TEST_CLUSTERS:-krbd=forky nbd=host}; do
		[[ ${kv%%=*} == "$1" ]] && { echo "${kv#*=}"; return; }
	done
	echo host
}
# The clusters' Debian roots are made (or found) here, before the network
# namespace, which has no route out: a root whose package list changed is
# built anew, and its apt needs the mirror.
for m in "${mappers[@]}"; do
	c=$(cluster_of "$m")
	[[ $c == host ]] || "$ROOT/scripts/rootfs.sh" dev "$c" >/dev/null || die "building the $c root failed"
done

vm_netns "$ns"
for m in "${mappers[@]}"; do
	c=$(cluster_of "$m")
	if [[ $c == host ]]; then
		vm_cluster "$ns" "$work/cluster-$m" host CEPH_WITH_MGR=0
		continue
	fi
	vm_cluster "$ns" "$work/cluster-$m" "$c" CEPH_WITH_MGR=0 CEPH_KEY_TYPE=aes
	suite_clusters[$m]=$vm_cluster_pid
	wait_cluster "$work/cluster-$m" "${suite_clusters[$m]}" "the $c cluster for $m"
done
log "clusters up on $VM_NET.1 in network namespace $ns ($((SECONDS - t0)) s so far): $(for m in "${mappers[@]}"; do echo -n "$m: $(cluster_of "$m") "; done)userland: $userland"

# Which tests each guest runs is its section of scripts/kernel-test.tests,
# which says why for each one left to the other guest or to the host.
# KERNEL_TEST_RUN picks tests instead (no list then), KERNEL_TEST_FULL=1
# runs the whole suite with both mappers.
partial=0
[[ -z ${KERNEL_TEST_RUN:-} && ${KERNEL_TEST_FULL:-0} != 1 ]] || partial=1
# tests MAPPER: go test's -run and -skip arguments, one per line.
tests() {
	if [[ -n ${KERNEL_TEST_RUN:-} ]]; then
		echo "-test.run=$KERNEL_TEST_RUN"
	elif [[ ${KERNEL_TEST_FULL:-0} == 1 ]]; then
		echo "-test.run=."
	else
		"$work/testreport" args -list "$LIST" "$1"
	fi
}

# The controller suite's force detach, with node-a mapping through the
# guest's kernel: the fence of a krbd or nbd client (blocklisted, its
# writes failing, its unmap leaving nothing, the fence lifted). With the
# joint phase, krbd's is left to it: node-a maps with krbd there too, cut
# off when fenced; a reachable node's fence runs with nbd here and with
# fuse in make integration.
# The joint phase's test, and the port of guest A's agent; node-a's plugin
# serves CSI and metrics on the next two.
readonly JOINT_TEST=TestForceDetachAcrossGuests JOINT_PORT=7070
joint=0
if [[ " ${mappers[*]} " == *" krbd "* && " ${mappers[*]} " == *" nbd "* ]] &&
	[[ -z ${KERNEL_TEST_RUN:-} || $JOINT_TEST =~ $KERNEL_TEST_RUN ]]; then
	joint=1
fi
# fence_tests MAPPER: go test's arguments for the guest's controller suite
# run, one per line; none, no run.
fence_tests() {
	if [[ -n ${KERNEL_TEST_RUN:-} ]]; then
		echo "-test.run=$KERNEL_TEST_RUN"
		echo "-test.skip=^$JOINT_TEST\$" # it runs on two guests or not at all
	elif [[ $1 != krbd || $joint == 0 ]]; then
		"$work/testreport" args -list "$LIST" fence
	fi
}

# The host's CPUs shared among the guests, at least one each. Emulated
# vCPUs beyond the host's cores make each guest several times slower, not
# faster: a vCPU that holds a lock in the guest's kernel is descheduled on
# the host while the others spin for it.
vm_cpus=${VM_CPUS:-$(($(nproc) / ${#mappers[@]}))}
((vm_cpus >= 1)) || vm_cpus=1

# Each guest's address and tap device, in the order of the mappers.
declare -A num_of=() addr_of=() tap_of=()
n=1
for m in "${mappers[@]}"; do
	n=$((n + 1))
	num_of[$m]=$n
	addr_of[$m]=$VM_NET.$n
	tap_of[$m]=tap$n
done

# quote_lines TEXT: each non-empty line of TEXT in single quotes, on one
# line (arguments for run.sh; none holds a quote).
quote_lines() {
	local l out=""
	while IFS= read -r l; do [[ -z $l ]] || out+="'$l' "; done <<<"$1"
	echo "$out"
}

# job MAPPER: a guest's run.sh, which runs the node suite with MAPPER
# against the cluster of that name, then the force detach, then its part
# in the joint phase. Its status is its suites'; the joint phase's goes to
# files. The guest's Ceph clients get a tmpfs for their admin sockets: a
# unix socket cannot live on 9p.
job() {
	local dir=$work/$1 cluster=$work/cluster-$1 fence node
	mkdir -p "$dir"
	node=$(tests "$1") || die "no tests for $1 (scripts/kernel-test.tests)"
	node=$(quote_lines "$node")
	fence=$(fence_tests "$1") || die "no fence tests (scripts/kernel-test.tests)"
	fence=$(quote_lines "$fence")
	[[ -z $fence ]] || touch "$dir/fence.ran"
	{
		cat <<EOF
set -a
. '$cluster/env'
set +a
mount -t tmpfs tmpfs '$cluster/run'
export RBDPLUGIN='$work/bin/rbdplugin' RBDCSI_E2E_MOUNTER='$1' RBDCSI_E2E_LINK=eth0 RBDCSI_E2E_SLOWDOWN=4 RBDCSI_E2E_TIMING='${RBDCSI_E2E_TIMING:-}'
cd '$dir'
'$work/bin/test2json' -t -p e2e/node '$work/bin/node.test' -test.v=test2json -test.count=1 -test.timeout=40m $node>'$dir/node.json' 2>'$dir/test2json.log'
node=\$?
fence=0
EOF
		[[ -z $fence ]] || echo "'$work/bin/test2json' -t -p e2e/controller '$work/bin/controller.test' -test.v=test2json -test.count=1 -test.timeout=10m $fence>'$dir/fence.json' 2>>'$dir/test2json.log' || fence=\$?"
		if ((joint)); then
			echo "j='$work/joint' bin='$work/bin' agent='${addr_of[krbd]}:$JOINT_PORT' cluster='$work/cluster-krbd' test='$JOINT_TEST'"
			case $1 in
			krbd) joint_a ;;
			nbd) joint_b ;;
			esac
		fi
		# shellcheck disable=SC2016 # run.sh's variables
		echo '[ $node = 0 ] && [ $fence = 0 ]'
	} >"$dir/run.sh"
}

# joint_a: guest A's part in the joint phase. It serves the agent (the
# controller suite's binary) until B's test is over, then stops it, which
# stops node-a's plugin, and checks that nothing is left here of the
# phase: mappings, their mounts, the test's directories. Status in a.rc.
joint_a() {
	cat <<'EOF'
RBDCSI_E2E_AGENT_LISTEN=$agent RBDCSI_E2E_AGENT_READY=$j/a.ready "$bin/controller.test" >"$j/agent.log" 2>&1 &
pid=$!
while [ ! -e "$j/over" ] && kill -0 $pid 2>/dev/null; do sleep 1; done
kill -TERM $pid 2>/dev/null
wait $pid
rc=$?
left=$(ls /sys/bus/rbd/devices; ls -d /sys/block/nbd*/pid /tmp/rbdcsi-force-detach-* /tmp/rbdcsi-node-a-state-* /tmp/rbdcsi-node-secret-* 2>/dev/null
	grep -E '^/dev/(rbd|nbd|mapper/rbdcsi)' /proc/mounts)
if [ -n "$left" ]; then
	echo "left on guest A after the joint phase: $left" >>"$j/agent.log"
	rc=1
fi
echo $rc >"$j/a.rc"
EOF
}

# joint_b: guest B's part in the joint phase. Once A serves its agent, it
# runs the joint test against krbd's cluster (without the nbd cluster's
# environment: set -a sets only what the file names), status in rc; then
# the phase is over.
joint_b() {
	cat <<'EOF'
while [ ! -e "$j/a.ready" ] && [ ! -e "$j/abort" ]; do sleep 1; done
if [ -e "$j/a.ready" ]; then
	touch "$j/b.start"
	(
		unset $(env | sed -n 's/^\(CEPH_[A-Za-z0-9_]*\)=.*/\1/p')
		set -a
		. "$cluster/env"
		set +a
		mount -t tmpfs tmpfs "$cluster/run"
		RBDCSI_E2E_JOINT_AGENT=$agent RBDCSI_E2E_JOINT_DIR=$j RBDCSI_E2E_JOINT_MOUNTER=krbd \
			"$bin/test2json" -t -p e2e/controller "$bin/controller.test" -test.v=test2json -test.count=1 -test.timeout=15m "-test.run=^$test\$" >"$j/joint.json" 2>"$j/test2json.log"
	)
	echo $? >"$j/rc"
else
	echo "guest A ended before it served the joint phase's agent" >"$j/test2json.log"
	echo 1 >"$j/rc"
fi
touch "$j/over"
EOF
}

# running PID: whether PID still runs (one that ended stays a zombie
# until this script waits for it).
running() {
	local st
	st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	st=${st##*) }
	[[ ${st:0:1} != Z ]]
}

# joint_serve A B: the host's part in the joint phase, in the background
# while the guests run (A and B: their PIDs). It sets A's link as the test
# on B asks (link-a holds "down" or "up"; once set, link-a.done says the
# same), says that A will not serve if A's guest ended first (abort), and
# that the phase is over if B's guest ended without saying so. Then A's
# link is up, and it logs the phase's times.
joint_serve() {
	local a=$1 b=$2 j=$work/joint state ready='' began=''
	while [[ ! -e $j/over ]]; do
		if [[ -e $j/link-a ]]; then
			state=$(cat "$j/link-a" 2>/dev/null) || true
			rm -f "$j/link-a"
			if [[ $state == up || $state == down ]] && ip -n "$ns" link set "${tap_of[krbd]}" "$state"; then
				printf %s "$state" >"$j/link-a.done.tmp"
				mv "$j/link-a.done.tmp" "$j/link-a.done"
			else
				log "joint: could not set guest A's link to '$state'"
			fi
		fi
		[[ -n $ready || ! -e $j/a.ready ]] || ready=$SECONDS
		[[ -n $began || ! -e $j/b.start ]] || began=$SECONDS
		running "$a" || [[ -e $j/a.ready ]] || touch "$j/abort"
		running "$b" || touch "$j/over"
		sleep 0.2
	done
	ip -n "$ns" link set "${tap_of[krbd]}" up || true
	[[ -z $began ]] || log "joint phase: guest A ready at $((ready - t0)) s, the test began at $((began - t0)) s and took $((SECONDS - began)) s"
}

((joint == 0)) || mkdir -p "$work/joint"
declare -A guest_of=()
for m in "${mappers[@]}"; do
	job "$m"
	shares=("$work/$m" "$work/bin" "$work/cluster-$m")
	if ((joint)); then
		shares+=("$work/joint")
		[[ $m == krbd ]] || shares+=("$work/cluster-krbd")
	fi
	log "booting a guest for the node suite with $m ($vm_cpus vCPUs)"
	vm_boot "$ns" "${num_of[$m]}" "$kdir" "$work/initrd.gz" "$vm_userland" "$vm_cpus" "${shares[@]}"
	guests+=("$vm_guest_pid")
	guest_of[$m]=$vm_guest_pid
done
if ((joint)); then
	joint_serve "${guest_of[krbd]}" "${guest_of[nbd]}" &
	joint_pid=$!
fi

failed=0
parts=()
for m in "${mappers[@]}"; do
	if ! wait "${guest_of[$m]}"; then
		failed=1
		if [[ ! -s $work/$m/node.json ]]; then
			log "the guest with $m ran no test; the end of its console:"
			tail -n 30 "$work/$m/console" >&2
		fi
	fi
	parts+=("$m=$work/$m/node.json")
	# The list's [fence] is one guest's part (nbd's, with the joint phase);
	# a partial run may run it in both, told apart by name.
	if [[ -e $work/$m/fence.ran ]]; then
		if ((partial)); then parts+=("fence-$m=$work/$m/fence.json"); else parts+=("fence=$work/$m/fence.json"); fi
	fi
done
guests=()
if ((joint)); then
	wait "$joint_pid" || true
	joint_pid=
	parts+=("joint=$work/joint/joint.json")
	if [[ $(cat "$work/joint/rc" 2>/dev/null) != 0 || $(cat "$work/joint/a.rc" 2>/dev/null) != 0 ]]; then
		log "the joint phase failed; guest A's agent said:"
		cat "$work/joint/test2json.log" >&2 2>/dev/null || true
		tail -n 20 "$work/joint/agent.log" >&2 2>/dev/null || true
		failed=1
	fi
fi
# One line per test and part, every problem by name, and the step's line:
# ran N, expected skips M, unexpected skips 0. A partial run (KERNEL_TEST_RUN,
# KERNEL_TEST_FULL) has no list to meet: it reports what ran.
if ((partial)); then
	"$work/testreport" summary -step kernel-test -v "${parts[@]}" || failed=1
else
	"$work/testreport" check -step kernel-test -list "$LIST" -v "${parts[@]}" || failed=1
fi
((failed == 0)) || die "failed after $((SECONDS - t0)) s"
log "passed in $((SECONDS - t0)) s"
