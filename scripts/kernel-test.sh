#!/usr/bin/env bash
# kernel-test.sh (make kernel-test): the node suite (e2e/node) on a real
# kernel, once with krbd and once with nbd, in QEMU guests running Debian's
# kernel (scripts/kernel-vm.sh), against a real Ceph cluster.
#
# Network rule: everything lives in a network namespace made here. Inside
# it, a bridge holds the cluster's address (198.18.0.1/24, a range reserved
# for testing) and one tap device per guest; the guests take 198.18.0.2
# and up. Each guest has a cluster of its own (another monitor port on the
# same address): the suites create volumes by fixed names, and two guests
# sharing a pool would map each other's volumes. No traffic leaves the
# namespace. Processes enter it with `nsenter --net` only: `ip netns exec`
# would also give them a mount namespace holding copies of every mount on
# the host at that moment, and so pin other tests' mounts and loop devices. Everything (guests, cluster,
# namespace, work directory) is torn down on exit, failure or interrupt.
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
# (Linux 6.1) and older tools need.
set -euo pipefail

readonly PROG=${0##*/}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
readonly ROOT
readonly NET=198.18.0 LEN=24
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"

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
	for m in "${mappers[@]}"; do
		if [[ -n ${suite_clusters[$m]:-} ]]; then
			stop_cluster "$work/cluster-$m" "${suite_clusters[$m]}"
		else
			"$ROOT/scripts/ceph-cluster.sh" down "$work/cluster-$m" >/dev/null 2>&1 || true
		fi
	done
	ip netns del "$ns" 2>/dev/null || true
	! grep -q " $work/userland " /proc/mounts || umount "$work/userland" || log "could not unmount $work/userland"
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
	log "built on $userland: $(head -1 "$work/build.log")"
	# One read-only view of the runtime root and its test layer, shared
	# with the guests by 9p.
	vm_userland=$work/userland
	mkdir -p "$vm_userland"
	mount -t overlay overlay -o "ro,lowerdir=$("$ROOT/scripts/rootfs.sh" dev "$userland"):$("$ROOT/scripts/rootfs.sh" runtime "$userland")" "$vm_userland"
fi

ip netns add "$ns"
ip -n "$ns" link set lo up
ip -n "$ns" link add br0 type bridge
ip -n "$ns" addr add "$NET.1/$LEN" dev br0
ip -n "$ns" link set br0 up
# cluster_of MAPPER: the Debian suite whose Ceph serves MAPPER's guest, or host.
cluster_of() {
	local kv
	for kv in ${KERNEL_TEST_CLUSTERS:-krbd=forky nbd=host}; do
		[[ ${kv%%=*} == "$1" ]] && { echo "${kv#*=}"; return; }
	done
	echo host
}
for m in "${mappers[@]}"; do
	c=$(cluster_of "$m")
	if [[ $c == host ]]; then
		CEPH_ADDR=$NET.1 CEPH_WITH_MGR=0 nsenter --net="/run/netns/$ns" "$ROOT/scripts/ceph-cluster.sh" up "$work/cluster-$m" >/dev/null
		continue
	fi
	nsenter --net="/run/netns/$ns" "$ROOT/scripts/suite.sh" cluster "$c" "$work/cluster-$m" \
		CEPH_ADDR="$NET.1" CEPH_WITH_MGR=0 CEPH_KEY_TYPE=aes &
	suite_clusters[$m]=$!
	wait_cluster "$work/cluster-$m" "${suite_clusters[$m]}" "the $c cluster for $m"
done
log "clusters up on $NET.1 in network namespace $ns ($((SECONDS - t0)) s so far): $(for m in "${mappers[@]}"; do echo -n "$m: $(cluster_of "$m") "; done)userland: $userland"

# The whole suite takes 25-40 minutes per mapper under TCG on two busy
# cores, more than CI can give both. krbd, the default mapper, runs all of
# it but 16 parallel stages and the user without access (the host's fuse
# run has them); nbd runs what its user-space daemon makes different
# (mapping, data, growth, a killed plugin, a lost mapping, options, read
# affinity (config, not options, to rbd-nbd), bad input, the object map it
# keeps, journaling, the re-attach of a dead daemon; krbd has no daemon to
# lose). Its xfs runs in the online growth (stage, mkfs, grow, unstage):
# TestFilesystem's xfs case differs from ext4's only in mkfs, which krbd's
# run has. Of the encrypted volumes, nbd runs the data path (ext4 and
# block; xfs likewise) and the fuse mapper's, to even out the two guests;
# what happens before the map or above the device (key refusals, crash
# states, stale dm devices, KEK rotation, restores and clones, the discard
# flag) is the same on every mapper and runs with krbd only. KERNEL_TEST_FULL=1 runs
# everything with both.
readonly NBD_TESTS='TestBlock|TestReadAffinity|TestFilesystem|TestFstrimGivesSpaceBack|TestQoSInThePodCgroup|TestLibrbdQoSReachesAMappedVolume|TestOnlineGrowthUnderWrites|TestKilledBetweenStageAndUnstage|TestStagedVolumeLostOnReboot|TestMapOptions|TestBadInput|TestDefaultFeaturesMapAndTrackWrites|TestJournalingByMapper|TestNBDReattachAfterDaemonDied|TestEncryptedVolumes|TestEncryptedWithFuseMapper'
readonly NBD_SKIP='(TestEncryptedVolumes|TestFilesystem)$/^xfs'
readonly KRBD_SKIP='TestSixteenVolumesStagedInParallel|TestStageWithUserWithoutAccess|TestNBDReattachAfterDaemonDied|TestEncryptedWithFuseMapper'
# tests MAPPER: go test's -run and -skip arguments, one per line.
tests() {
	if [[ -n ${KERNEL_TEST_RUN:-} ]]; then
		echo "-test.run=$KERNEL_TEST_RUN"
	elif [[ ${KERNEL_TEST_FULL:-0} == 1 ]]; then
		echo "-test.run=."
	elif [[ $1 == nbd ]]; then
		echo "-test.run=^($NBD_TESTS)\$"
		echo "-test.skip=^$NBD_SKIP\$" # a "/" inside a group would not split levels
	else
		echo "-test.skip=^($KRBD_SKIP)\$"
	fi
}

# The controller suite's force detach, with node-a mapping through the
# guest's kernel: the fence of a krbd or nbd client (blocklisted, its
# writes failing, its unmap leaving nothing, the fence lifted). With the
# joint phase, krbd's is left to it: node-a maps with krbd there too, cut
# off when fenced; a reachable node's fence runs with nbd here and with
# fuse in make integration.
readonly FENCE_TESTS='TestForceDetachFencesTheOldNode'
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
		echo "-test.run=^($FENCE_TESTS)\$"
	fi
}

# Each guest's address and tap device, in the order of the mappers.
declare -A addr_of=() tap_of=()
n=1
for m in "${mappers[@]}"; do
	n=$((n + 1))
	addr_of[$m]=$NET.$n
	tap_of[$m]=tap$n
done

# job MAPPER: a guest's run.sh, which runs the node suite with MAPPER
# against the cluster of that name, then the force detach, then its part
# in the joint phase. Its status is its suites'; the joint phase's goes to
# files. The guest's Ceph clients get a tmpfs for their admin sockets: a
# unix socket cannot live on 9p.
job() {
	local dir=$work/$1 cluster=$work/cluster-$1 fence
	mkdir -p "$dir"
	fence=$(fence_tests "$1" | sed "s/.*/'&'/" | tr '\n' ' ')
	{
		cat <<EOF
set -a
. '$cluster/env'
set +a
mount -t tmpfs tmpfs '$cluster/run'
export RBDPLUGIN='$work/bin/rbdplugin' RBDCSI_E2E_MOUNTER='$1' RBDCSI_E2E_LINK=eth0 RBDCSI_E2E_SLOWDOWN=4 RBDCSI_E2E_TIMING='${RBDCSI_E2E_TIMING:-}'
cd '$dir'
'$work/bin/node.test' -test.v -test.count=1 -test.timeout=40m $(tests "$1" | sed "s/.*/'&'/" | tr '\n' ' ')>'$dir/out' 2>&1
node=\$?
fence=0
EOF
		[[ -z $fence ]] || echo "'$work/bin/controller.test' -test.v -test.count=1 -test.timeout=10m $fence>>'$dir/out' 2>&1 || fence=\$?"
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
			"$bin/controller.test" -test.v -test.count=1 -test.timeout=15m "-test.run=^$test\$" >"$j/out" 2>&1
	)
	echo $? >"$j/rc"
else
	echo "guest A ended before it served the joint phase's agent" >"$j/out"
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

# report NAME: one line per top-level test from go test's verbose output.
report() {
	[[ -e $work/$1/out ]] || {
		echo "kernel-test: $1: no output"
		return
	}
	awk -v name="$1" '/^--- (PASS|FAIL|SKIP): Test/ {
		r = $2 == "PASS:" ? "ok" : ($2 == "FAIL:" ? "FAIL" : "skipped")
		printf "kernel-test: %-5s %-40s %-7s %s\n", name, $3, r, $4
	}' "$work/$1/out"
}

((joint == 0)) || mkdir -p "$work/joint"
declare -A guest_of=()
for m in "${mappers[@]}"; do
	ip -n "$ns" tuntap add "${tap_of[$m]}" mode tap
	ip -n "$ns" link set "${tap_of[$m]}" master br0
	ip -n "$ns" link set "${tap_of[$m]}" up
	job "$m"
	shares=("$work/$m" "$work/bin" "$work/cluster-$m")
	if ((joint)); then
		shares+=("$work/joint")
		[[ $m == krbd ]] || shares+=("$work/cluster-krbd")
	fi
	log "booting a guest for the node suite with $m"
	VM_USERLAND=$vm_userland setsid nsenter --net="/run/netns/$ns" "$ROOT/scripts/kernel-vm.sh" boot "$kdir" "$work/initrd.gz" \
		"${addr_of[$m]}/$LEN" "${tap_of[$m]}" "${shares[@]}" >"$work/$m/console" 2>&1 &
	guests+=($!)
	guest_of[$m]=$!
done
if ((joint)); then
	joint_serve "${guest_of[krbd]}" "${guest_of[nbd]}" &
	joint_pid=$!
fi

failed=0
for m in "${mappers[@]}"; do
	if wait "${guest_of[$m]}"; then
		report "$m"
	else
		report "$m"
		log "the node suite with $m failed; its output:"
		tail -n 60 "$work/$m/out" >&2 2>/dev/null || tail -n 30 "$work/$m/console" >&2
		failed=1
	fi
done
guests=()
if ((joint)); then
	wait "$joint_pid" || true
	joint_pid=
	report joint
	if [[ $(cat "$work/joint/rc" 2>/dev/null) != 0 || $(cat "$work/joint/a.rc" 2>/dev/null) != 0 ]]; then
		log "the joint phase failed; the test's output, then guest A's agent's:"
		tail -n 60 "$work/joint/out" >&2 2>/dev/null || true
		tail -n 20 "$work/joint/agent.log" >&2 2>/dev/null || true
		failed=1
	fi
fi
((failed == 0)) || die "failed after $((SECONDS - t0)) s"
log "passed in $((SECONDS - t0)) s"
