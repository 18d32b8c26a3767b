#!/usr/bin/env bash
# bench-data.sh (make bench-data): the bench's P10, the data path, in a
# QEMU guest running Debian's kernel (scripts/kernel-vm.sh). In the guest,
# the plugin stages and publishes block volumes with krbd, rbd-nbd and
# LUKS2 on krbd, and fio's I/O through each is set against rbd bench's
# (librbd) on the same cluster, in the same guest and run
# (e2e/bench/p10.go). The results go where make bench's go:
# results/bench-data-<time>.json and .md, with the plugin's log.
#
# The guest's userland is the plugin image's root (BENCH_DATA_USERLAND,
# default trixie: its rbd, rbd-nbd and cryptsetup) with fio added
# (scripts/rootfs.sh bench); the plugin and the bench are built against its
# librbd (scripts/suite.sh build). The cluster is this machine's Ceph (one
# mon, three memstore OSDs and a mgr, as make bench's) on the bridge of a
# network namespace made here (scripts/vm-lib.sh), or a Debian suite's
# release with BENCH_DATA_CLUSTER=SUITE. The host's load average and CPU
# time reach the guest through a shared file, rewritten every second, so
# that every row says how busy the host was. Everything (guest, cluster,
# namespace, work directory) is torn down on exit, failure or interrupt.
#
#   bench-data.sh [BENCH FLAG...]     e.g. -data-rounds 1 (bin/rbdbench -h)
#
# Environment: BENCH_DATA_USERLAND, BENCH_DATA_CLUSTER (above);
# BENCH_DATA_OUT (default results/); BENCH_DATA_KEEP=1 keeps the work
# directory (the guest's console and the bench's log); VM_CPUS (default:
# the host's CPUs), VM_MEMORY (scripts/kernel-vm.sh).
set -euo pipefail

readonly PROG=${0##*/}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
readonly ROOT
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
# shellcheck source=scripts/vm-lib.sh
source "$ROOT/scripts/vm-lib.sh"

[[ $(id -u) == 0 ]] || die "run as root (network namespace, tap device, QEMU)"
userland=${BENCH_DATA_USERLAND:-trixie}
cluster=${BENCH_DATA_CLUSTER:-host}
out=${BENCH_DATA_OUT:-$ROOT/results}
[[ $userland =~ ^[a-z]+$ && $userland != host ]] || die "bad BENCH_DATA_USERLAND: $userland (a Debian suite)"
[[ $cluster =~ ^[a-z]+$ ]] || die "bad BENCH_DATA_CLUSTER: $cluster (host or a Debian suite)"
# run.sh (dash, in the guest) takes the flags in single quotes.
for a in "$@"; do [[ $a != *"'"* ]] || die "a bench flag with a quote: $a"; done

t0=$SECONDS
kdir=$("$ROOT/scripts/kernel-vm.sh" kernel)
# Under /tmp: the guest mounts the shares at the same paths (scripts/vm-init.sh).
work=$(mktemp -d /tmp/rbdcsi-bd.XXXXXX)
ns=rbdcsi-bd-$$
guest=
cluster_pid=
loads=
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	((rc != 130 && rc != 143)) || log "interrupted: tearing down"
	# The guest leads its own process group: QEMU goes with its script.
	if [[ -n $guest ]]; then
		kill -TERM -- "-$guest" 2>/dev/null || true
		wait "$guest" 2>/dev/null || true
	fi
	[[ -z $loads ]] || kill "$loads" 2>/dev/null || true
	vm_cluster_down "$work/cluster" "$cluster_pid"
	ip netns del "$ns" 2>/dev/null || true
	vm_userland_down "$work/userland"
	remove_work "$work" "${BENCH_DATA_KEEP:-0}"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$ROOT/scripts/kernel-vm.sh" initramfs "$work/initrd.gz"
"$ROOT/scripts/suite.sh" build "$userland" "$work/bin" ./e2e/bench >"$work/build.log" 2>&1 ||
	{ tail -30 "$work/build.log" >&2; die "building on $userland failed"; }
log "built on $userland: $(grep -m1 "^librbd" "$work/build.log")"
# The runtime root with fio, shared with the guest.
vm_userland_up "$userland" "$work/userland" bench
# A suite's cluster root is made (or found) before the namespace, which
# has no route to Debian's mirror.
[[ $cluster == host ]] || "$ROOT/scripts/rootfs.sh" dev "$cluster" >/dev/null || die "building the $cluster root failed"

vm_netns "$ns"
# The mgr answers the bench's check that the pool is empty (rbd tasks).
if [[ $cluster == host ]]; then
	vm_cluster "$ns" "$work/cluster" host CEPH_WITH_MGR=1
else
	# AES keys: the guest's kernel (Linux 6.1) takes no others.
	vm_cluster "$ns" "$work/cluster" "$cluster" CEPH_WITH_MGR=1 CEPH_KEY_TYPE=aes
	cluster_pid=$vm_cluster_pid
	wait_cluster "$work/cluster" "$cluster_pid" "the $cluster cluster"
fi
log "cluster ($cluster) up on $VM_NET.1 in network namespace $ns ($((SECONDS - t0)) s so far)"

# The host's load average (first line) and CPU time (second), for the
# guest to read, replaced whole every second.
job=$work/job
mkdir -p "$job/results"
(
	while :; do
		{ head -1 /proc/loadavg && head -1 /proc/stat; } >"$job/host-load.tmp" && mv "$job/host-load.tmp" "$job/host-load"
		sleep 1
	done
) &
loads=$!

cpus=${VM_CPUS:-$(nproc)}
guest_of="QEMU TCG (-cpu ${VM_CPU:-max}, $cpus vCPUs, ${VM_MEMORY:-1536} MiB), the Debian kernel $(<"$kdir/version"), the $userland userland, a $cluster cluster; host: $(nproc) CPUs, kernel $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg) at the boot; $(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo "no git")"
guest_of=${guest_of//\'/}
flags=""
for a in "$@"; do flags+=" '$a'"; done
# The guest's Ceph clients get a tmpfs for their admin sockets: a unix
# socket cannot live on 9p.
cat >"$job/run.sh" <<EOF
set -a
. '$work/cluster/env'
set +a
mount -t tmpfs tmpfs '$work/cluster/run'
cd '$job'
'$work/bin/bench' -scenarios P10 -plugin '$work/bin/rbdplugin' -out '$job/results' -load-file '$job/host-load' \
	-guest-of '$guest_of'$flags >'$job/bench.out' 2>'$job/bench.log'
EOF

log "booting the guest ($cpus vCPUs); the bench's progress: $job/bench.log"
vm_boot "$ns" 2 "$kdir" "$work/initrd.gz" "$work/userland" "$cpus" "$job" "$work/bin" "$work/cluster"
guest=$vm_guest_pid
rc=0
wait "$guest" || rc=$?
guest=
mkdir -p "$out"
cp "$job"/results/* "$out/" 2>/dev/null || true
cat "$job/bench.out" 2>/dev/null || true
if ((rc != 0)); then
	if [[ -s $job/bench.log ]]; then
		tail -n 30 "$job/bench.log" >&2
	else
		log "the guest ran no bench; the end of its console:"
		tail -n 30 "$job/console" >&2
	fi
	die "failed after $((SECONDS - t0)) s"
fi
log "done in $((SECONDS - t0)) s; results in $out"
