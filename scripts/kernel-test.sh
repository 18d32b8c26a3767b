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
#   kernel-test.sh [MAPPER...]    (default: krbd nbd)
#
# Environment: KERNEL_TEST_RUN='TestBlock|TestFilesystem' picks tests (go
# test -run) for every mapper; KERNEL_TEST_FULL=1 runs the whole suite with
# nbd too (below); KERNEL_TEST_KEEP=1 keeps the work directory (logs);
# RBDCSI_E2E_TIMING=1 logs each CSI call's time (e2e/harness).
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
declare -A suite_clusters=()
cleanup() {
	local rc=$? pid
	trap - EXIT INT TERM
	((rc != 130 && rc != 143)) || log "interrupted: tearing down"
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
# writes failing, its unmap leaving nothing, the fence lifted).
readonly FENCE_TESTS='TestForceDetachFencesTheOldNode'
fence_tests() {
	echo "-test.run=${KERNEL_TEST_RUN:-^($FENCE_TESTS)\$}"
}

# job MAPPER: a guest's run.sh, which runs the node suite with MAPPER
# against the cluster of that name, then the force detach. The guest's Ceph
# clients get a tmpfs for their admin sockets: a unix socket cannot live
# on 9p.
job() {
	local dir=$work/$1 cluster=$work/cluster-$1
	mkdir -p "$dir"
	cat >"$dir/run.sh" <<EOF
set -a
. '$cluster/env'
set +a
mount -t tmpfs tmpfs '$cluster/run'
export RBDPLUGIN='$work/bin/rbdplugin' RBDCSI_E2E_MOUNTER='$1' RBDCSI_E2E_LINK=eth0 RBDCSI_E2E_SLOWDOWN=4 RBDCSI_E2E_TIMING='${RBDCSI_E2E_TIMING:-}'
cd '$dir'
'$work/bin/node.test' -test.v -test.count=1 -test.timeout=40m $(tests "$1" | sed "s/.*/'&'/" | tr '\n' ' ')>'$dir/out' 2>&1
node=\$?
'$work/bin/controller.test' -test.v -test.count=1 -test.timeout=10m '$(fence_tests)' >>'$dir/out' 2>&1
fence=\$?
[ \$node = 0 ] && [ \$fence = 0 ]
EOF
}

# report NAME: one line per top-level test from go test's verbose output.
report() {
	awk -v name="$1" '/^--- (PASS|FAIL|SKIP): Test/ {
		r = $2 == "PASS:" ? "ok" : ($2 == "FAIL:" ? "FAIL" : "skipped")
		printf "kernel-test: %-5s %-40s %-7s %s\n", name, $3, r, $4
	}' "$work/$1/out"
}

n=1
for m in "${mappers[@]}"; do
	n=$((n + 1))
	ip -n "$ns" tuntap add "tap$n" mode tap
	ip -n "$ns" link set "tap$n" master br0
	ip -n "$ns" link set "tap$n" up
	job "$m"
	log "booting a guest for the node suite with $m"
	VM_USERLAND=$vm_userland setsid nsenter --net="/run/netns/$ns" "$ROOT/scripts/kernel-vm.sh" boot "$kdir" "$work/initrd.gz" "$NET.$n/$LEN" "tap$n" \
		"$work/$m" "$work/bin" "$work/cluster-$m" >"$work/$m/console" 2>&1 &
	guests+=($!)
done

failed=0
i=0
for m in "${mappers[@]}"; do
	if wait "${guests[$i]}"; then
		report "$m"
	else
		report "$m"
		log "the node suite with $m failed; its output:"
		tail -n 60 "$work/$m/out" >&2 2>/dev/null || tail -n 30 "$work/$m/console" >&2
		failed=1
	fi
	i=$((i + 1))
done
guests=()
((failed == 0)) || die "failed after $((SECONDS - t0)) s"
log "passed in $((SECONDS - t0)) s"
