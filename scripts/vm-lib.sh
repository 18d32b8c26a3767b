# shellcheck shell=bash
# vm-lib.sh: the steps every run of QEMU guests on Debian's kernel takes
# (scripts/kernel-test.sh, scripts/bench-data.sh): the network namespace,
# the guests' clusters and userland, and the guests themselves. Source it
# after scripts/lib.sh, with ROOT set; it defines functions only.
#
# Network rule: everything lives in a network namespace the caller names
# and removes. Inside it, a bridge holds the clusters' address
# ($VM_NET.1/$VM_LEN, a range reserved for testing) and one tap device per
# guest; guest N takes $VM_NET.N (N >= 2). No traffic leaves the namespace.
# Processes enter it with `nsenter --net` only: `ip netns exec` would also
# give them a mount namespace holding copies of every mount on the host at
# that moment, and so pin other tests' mounts and loop devices.

readonly VM_NET=198.18.0 VM_LEN=24

# vm_netns NS: the namespace, with the bridge br0 holding $VM_NET.1.
vm_netns() {
	local ns=$1
	ip netns add "$ns"
	ip -n "$ns" link set lo up
	# A fixed MAC address: a bridge without one takes the lowest of its
	# ports', which changes when a guest's tap joins, and the other guest's
	# ARP entry for the host goes stale.
	ip -n "$ns" link add br0 address 02:72:62:64:6b:01 type bridge
	ip -n "$ns" addr add "$VM_NET.1/$VM_LEN" dev br0
	ip -n "$ns" link set br0 up
}

# vm_userland_up SUITE DIR LAYER...: DIR becomes one read-only view of SUITE's
# runtime root (the plugin image's) with its cached LAYERs over it
# (scripts/rootfs.sh dev, bench: uppermost first): the /usr and /etc the
# guests share by 9p (scripts/kernel-vm.sh boot's VM_USERLAND). The roots
# are made, or found, first; vm_userland_down DIR unmounts it.
vm_userland_up() {
	local suite=$1 dir=$2 lower="" layer runtime
	shift 2
	for layer in "$@"; do
		layer=$("$ROOT/scripts/rootfs.sh" "$layer" "$suite") || die "building the $layer layer of $suite failed"
		lower+=$layer:
	done
	runtime=$("$ROOT/scripts/rootfs.sh" runtime "$suite") || die "building the runtime root of $suite failed"
	mkdir -p "$dir"
	mount -t overlay overlay -o "ro,lowerdir=$lower$runtime" "$dir"
}

vm_userland_down() {
	! grep -q " $1 " /proc/mounts || umount "$1" || log "could not unmount $1"
}

# vm_cluster NS DIR WHERE [NAME=VALUE...]: a test cluster at DIR on the
# bridge's address, its daemons in NS, with the environment given
# (scripts/ceph-cluster.sh's). WHERE host is this machine's Ceph, up when
# this returns; a Debian suite runs that suite's release in a chroot of its
# cached root (scripts/suite.sh cluster) in the background: its PID is in
# vm_cluster_pid (empty for host), for the caller to record before it
# waits (wait_cluster) and, at the end, for vm_cluster_down. Make a suite's
# roots (scripts/rootfs.sh dev) before the namespace, which has no route
# to Debian's mirror.
vm_cluster() {
	local ns=$1 dir=$2 where=$3
	shift 3
	# shellcheck disable=SC2034 # the caller's
	vm_cluster_pid=
	if [[ $where == host ]]; then
		env CEPH_ADDR="$VM_NET.1" "$@" nsenter --net="/run/netns/$ns" "$ROOT/scripts/ceph-cluster.sh" up "$dir" >/dev/null
		return
	fi
	nsenter --net="/run/netns/$ns" "$ROOT/scripts/suite.sh" cluster "$where" "$dir" CEPH_ADDR="$VM_NET.1" "$@" &
	# shellcheck disable=SC2034 # the caller's
	vm_cluster_pid=$!
}

# vm_cluster_down DIR [PID]: the cluster at DIR down, whichever way
# vm_cluster started it (PID: its vm_cluster_pid).
vm_cluster_down() {
	if [[ -n ${2:-} ]]; then
		stop_cluster "$1" "$2"
	else
		"$ROOT/scripts/ceph-cluster.sh" down "$1" >/dev/null 2>&1 || true
	fi
}

# vm_boot NS N KDIR INITRD USERLAND CPUS JOBDIR [HOSTDIR...]: guest N, at
# $VM_NET.N on tap device tapN of the bridge, with CPUS vCPUs and the
# userland's /usr and /etc, runs JOBDIR/run.sh with JOBDIR and each HOSTDIR
# shared (scripts/kernel-vm.sh boot), in the background; its console goes
# to JOBDIR/console. It leads a session of its own, so `kill -- -PID` ends
# QEMU with it; the PID is in vm_guest_pid.
vm_boot() {
	local ns=$1 n=$2 kdir=$3 initrd=$4 userland=$5 cpus=$6
	shift 6
	ip -n "$ns" tuntap add "tap$n" mode tap
	ip -n "$ns" link set "tap$n" master br0
	ip -n "$ns" link set "tap$n" up
	VM_CPUS=$cpus VM_USERLAND=$userland setsid nsenter --net="/run/netns/$ns" "$ROOT/scripts/kernel-vm.sh" boot "$kdir" "$initrd" \
		"$VM_NET.$n/$VM_LEN" "tap$n" "$@" >"$1/console" 2>&1 &
	# shellcheck disable=SC2034 # the caller's
	vm_guest_pid=$!
}
