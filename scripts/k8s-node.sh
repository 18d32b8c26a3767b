#!/usr/bin/env bash
# k8s-node.sh: a throwaway single-node Kubernetes v1.37.1 as plain processes
# (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd
# + runc, kubelet, kube-proxy) plus the VolumeSnapshot CRDs and the
# snapshot-controller, for the end-to-end test. Binaries come from
# scripts/k8s-build.sh's cache.
#
#   k8s-node.sh up   DIR   boot; write DIR/env (KUBECONFIG, KUBECTL, ...)
#   k8s-node.sh down DIR   stop what DIR/pids records, undo every change to the
#                          host (mounts, cgroups, iptables, sysctls, links), remove DIR
#   k8s-node.sh env  DIR   print DIR/env
#
# Network: nothing leaves the machine. etcd, the controller-manager, the
# scheduler and every health/metrics port listen on 127.0.0.1. kubelet
# rejects a loopback node IP, so the node's address is on an interface this
# script creates ($E2E_IFACE, $E2E_NODE_IP/24: a dummy interface, or an empty
# bridge where the kernel has no dummy driver); the apiserver listens on that
# address, and the Service range is inside the same /24, so a Service address
# without kube-proxy's rules goes to that interface (which has nowhere to send
# it), never to a default route. Pods get addresses on a bridge this
# script creates ($E2E_POD_BRIDGE, the host's address .1 of $E2E_POD_CIDR),
# no masquerading, no default route and no forwarding: their one route
# leads to the node's /24, whose only address in use is the node's own,
# so a pod reaches the apiserver (its Service), kubelet and what a test
# binds to the node's address (its Ceph cluster), and nothing else.
#
# Host changes, all undone by `down`: the node's interface; /var/lib/kubelet
# (kubelet's default root, which the manifests name), bind-mounted onto
# itself as a shared mount for Bidirectional mount propagation; the sysctls
# kubelet sets; kube-proxy's iptables rules; the kubepods cgroups;
# /var/log/containers if it did not exist.
set -euo pipefail

readonly PROG=${0##*/}
CACHE=${RBDCSI_E2E_CACHE:-/var/cache/rbdcsi-e2e}
readonly CACHE BIN=${RBDCSI_E2E_CACHE:-/var/cache/rbdcsi-e2e}/bin
readonly NODE_NAME=${E2E_NODE_NAME:-rbdcsi-e2e-node}
readonly IFACE=${E2E_IFACE:-rbdcsie2e0}
readonly NODE_IP=${E2E_NODE_IP:-198.18.77.1}
readonly NET24=${NODE_IP%.*}
readonly SERVICE_CIDR=$NET24.128/25 SERVICE_IP=$NET24.129
readonly POD_CIDR=${E2E_POD_CIDR:-198.18.76.0/24}
POD_GW=${POD_CIDR%/*}
readonly POD_GW=${POD_GW%.*}.1
readonly POD_BRIDGE=${E2E_POD_BRIDGE:-rbdcsie2ebr0}
readonly ETCD_PORT=${E2E_ETCD_PORT:-23790} ETCD_PEER_PORT=${E2E_ETCD_PEER_PORT:-23800}
readonly APISERVER_PORT=${E2E_APISERVER_PORT:-6443}
readonly KUBELET_ROOT=/var/lib/kubelet
readonly PAUSE_IMAGE=localhost/rbdcsi-e2e/pause:3.10
# What kubelet changes at start (with protectKernelDefaults off).
# Host paths the driver's DaemonSet, containerd 1.6 (runc state, shim
# sockets, pod network namespaces) and the CNI library (result cache) create
# outside DIR: removed by `down` if they did not exist before `up`.
readonly HOST_PATHS=(/var/lib/rbdcsi /run/mount /run/containerd /run/netns /var/lib/cni)
readonly SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source-path=SCRIPTDIR source=k8s-node-files.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/k8s-node-files.sh"

usage() {
	echo "usage: $PROG up|down|env DIR" >&2
	exit 2
}

set_paths() {
	DIR=$(realpath -m -- "$1")
	[[ -n $DIR && $DIR != / ]] || die "refusing to use / as node directory"
	PIDS=$DIR/pids
	MARKER=$DIR/.k8s-node-sh
	SOCK=$DIR/containerd/containerd.sock
}

# --- processes -------------------------------------------------------------------

# pid_ours PID: alive, not a zombie, and started with DIR on its command line
# (every daemon here gets a path under DIR), so a reused PID is never signalled.
pid_ours() {
	local pid=$1 state
	[[ $pid =~ ^[0-9]+$ && -r /proc/$pid/stat ]] || return 1
	state=$(sed -e 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) || return 1
	[[ $state != Z && $state != X ]] || return 1
	# Read whole before matching: under pipefail, grep -q quitting early
	# would fail the writer with SIGPIPE and so the test.
	local cmdline
	cmdline=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
	[[ $cmdline == *"$DIR/"* ]]
}

# pid_running PID: true while PID, a daemon start_daemon just started, has
# not exited. Not pid_ours: until the forked shell has exec'd the daemon (a
# moment, longer on a loaded machine) its command line is this script's.
pid_running() {
	local state
	[[ $1 =~ ^[0-9]+$ && -r /proc/$1/stat ]] || return 1
	state=$(sed -e 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
	[[ -n $state && $state != Z && $state != X ]]
}

start_daemon() {
	local name=$1
	shift
	setsid "$@" </dev/null >>"$DIR/log/$name.log" 2>&1 &
	echo $! >"$PIDS/$name.pid"
}

stop_daemon() {
	local name=$1 pid i
	[[ -f $PIDS/$name.pid ]] || return 0
	pid=$(<"$PIDS/$name.pid")
	if pid_ours "$pid"; then
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 150; i++)); do
			pid_ours "$pid" || break
			sleep 0.1
		done
		if pid_ours "$pid"; then
			log "SIGKILL $name ($pid)"
			kill -KILL "$pid" 2>/dev/null || true
			sleep 0.5
		fi
	fi
	rm -f "$PIDS/$name.pid"
}

wait_until() {
	local what=$1 secs=$2 name=$3 i
	shift 3
	for ((i = 0; i < secs * 5; i++)); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		if [[ -n $name ]] && ! pid_running "$(<"$PIDS/$name.pid")"; then
			tail -n 40 "$DIR/log/$name.log" >&2 || true
			die "$name exited while waiting for $what"
		fi
		sleep 0.2
	done
	[[ -z $name ]] || tail -n 40 "$DIR/log/$name.log" >&2 || true
	die "timed out after ${secs}s waiting for $what"
}

kubectl() { "$BIN/kubectl" --kubeconfig "$DIR/kubeconfig" "$@"; }
ctr() { command ctr --address "$SOCK" "$@"; }

# --- host set-up and undo --------------------------------------------------------

setup_network() {
	if ip link show "$IFACE" >/dev/null 2>&1; then
		die "interface $IFACE already exists (another run? \`$PROG down\` its directory)"
	fi
	# A dummy interface where the kernel has one; this VM's kernel has no
	# dummy driver (and cannot load modules): an empty bridge (no ports) is
	# just as closed.
	if ! ip link add "$IFACE" type dummy 2>/dev/null; then
		ip link add "$IFACE" type bridge || die "cannot create interface $IFACE (neither dummy nor bridge)"
	fi
	echo "$IFACE" >"$DIR/state/iface"
	ip addr add "$NODE_IP/24" dev "$IFACE"
	ip link set "$IFACE" up
	# The pods' bridge, with the host's address on it: the pods' route to
	# the node's /24 goes through it (the CNI bridge plugin uses a bridge
	# that exists, and adds no address of its own: isGateway false).
	if ip link show "$POD_BRIDGE" >/dev/null 2>&1; then
		die "interface $POD_BRIDGE already exists (another run? \`$PROG down\` its directory)"
	fi
	# A fixed MAC address: a bridge without one takes the lowest of its
	# ports', which changes as pods come and go, and every pod's ARP entry
	# for the gateway goes stale with it (its traffic to the node, and the
	# kubelet's probes of it, then vanish for up to a minute).
	ip link add "$POD_BRIDGE" address 02:72:62:64:65:01 type bridge || die "cannot create bridge $POD_BRIDGE"
	touch "$DIR/state/pod-bridge"
	ip addr add "$POD_GW/${POD_CIDR#*/}" dev "$POD_BRIDGE"
	ip link set "$POD_BRIDGE" up
}

save_host_state() {
	local s
	for s in "${SYSCTLS[@]}"; do echo "$s=$(sysctl -n "$s")"; done >"$DIR/state/sysctl"
	iptables-save >"$DIR/state/iptables.before" 2>/dev/null || true
	[[ -e /var/log/containers ]] || touch "$DIR/state/remove-var-log-containers"
	# Host paths the driver's DaemonSet creates (DirectoryOrCreate).
	local p
	for p in "${HOST_PATHS[@]}"; do
		[[ -e $p ]] || echo "$p"
	done >"$DIR/state/remove-host-paths"
	find /run/netns -maxdepth 1 -name 'cni-*' >"$DIR/state/netns.before" 2>/dev/null || true
}

# remove_netns: the pod network namespaces this run made (a pod whose
# sandbox kubelet did not stop leaves one, mounted under /run/netns).
remove_netns() {
	local ns
	[[ -d /run/netns ]] || return 0
	for ns in /run/netns/cni-*; do
		[[ -e $ns ]] || continue
		if [[ -f $DIR/state/netns.before ]] && grep -qxF "$ns" "$DIR/state/netns.before"; then continue; fi
		umount "$ns" 2>/dev/null || umount -l "$ns" 2>/dev/null || true
		rm -f "$ns"
	done
}

setup_kubelet_root() {
	if [[ -e $KUBELET_ROOT ]]; then
		[[ -e $KUBELET_ROOT/.rbdcsi-e2e ]] || die "$KUBELET_ROOT exists and is not ours: is a kubelet installed here?"
		die "$KUBELET_ROOT is left from an earlier run: \`$PROG down\` its directory first (or remove it)"
	fi
	mkdir -p "$KUBELET_ROOT"
	touch "$KUBELET_ROOT/.rbdcsi-e2e" "$DIR/state/kubelet-root"
	# / is a private mount here; Bidirectional propagation needs a shared one.
	mount --bind "$KUBELET_ROOT" "$KUBELET_ROOT"
	mount --make-rshared "$KUBELET_ROOT"
	mkdir -p "$KUBELET_ROOT/plugins_registry" "$KUBELET_ROOT/plugins"
}

# umount_under PATH: unmount everything mounted at or below PATH, deepest first.
umount_under() {
	local path=$1 m i
	for ((i = 0; i < 5; i++)); do
		mapfile -t mounts < <(awk -v p="$path" '$5 == p || index($5, p "/") == 1 {print $5}' /proc/self/mountinfo | sort -r)
		((${#mounts[@]})) || return 0
		for m in "${mounts[@]}"; do
			m=$(printf '%b' "$m") # mountinfo escapes spaces as \040
			umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
		done
	done
	awk -v p="$path" '$5 == p || index($5, p "/") == 1 {print "still mounted: " $5}' /proc/self/mountinfo >&2
}

# detach_loops: loop devices left over an rbd-fuse file of the node plugin
# (a plugin killed before it unstaged: its rbd-fuse died with it).
detach_loops() {
	local dev file
	while read -r dev file; do
		[[ $file == /var/lib/rbdcsi/* ]] || continue
		log "detaching $dev (over $file)"
		losetup -d "$dev" 2>/dev/null || true
	done < <(losetup -n -O NAME,BACK-FILE 2>/dev/null || true)
}

remove_kube_iptables() {
	local ipt table chains c
	for ipt in iptables ip6tables; do
		command -v "$ipt" >/dev/null || continue
		for table in filter nat mangle raw; do
			chains=$("$ipt" -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}') || continue
			[[ -n $chains ]] || continue
			# Drop the jumps from the built-in chains, then the chains.
			{ "$ipt" -t "$table" -S 2>/dev/null | grep -E '^-A [A-Z]+ .*-j KUBE-' || true; } | while read -r _ rest; do
				eval "\"$ipt\" -t \"$table\" -D $rest" 2>/dev/null || true
			done
			for c in $chains; do "$ipt" -t "$table" -F "$c" 2>/dev/null || true; done
			for c in $chains; do "$ipt" -t "$table" -X "$c" 2>/dev/null || true; done
		done
	done
}

remove_cgroups() {
	local d
	for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
		[[ -d $d ]] || continue
		find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
		[[ ! -d $d ]] || log "could not remove cgroup $d (processes still in it?)"
	done
}

restore_sysctls() {
	local kv
	[[ -f $DIR/state/sysctl ]] || return 0
	while read -r kv; do sysctl -q -w "$kv" >/dev/null 2>&1 || log "could not restore $kv"; done <"$DIR/state/sysctl"
}

# --- containerd, kubelet ---------------------------------------------------------

import_images() {
	local f
	for f in "$CACHE"/images/*.tar; do
		ctr -n k8s.io images import "$f" >/dev/null 2>"$DIR/log/import.err" ||
			die "importing $f failed: $(cat "$DIR/log/import.err")"
	done
	# The list is read whole first: ctr writes a line at a time, and grep -q
	# quitting at the first match made ctr die of SIGPIPE, which pipefail
	# turned into a failed check.
	local images
	images=$(ctr -n k8s.io images ls -q) || die "listing containerd's images failed"
	grep -qxF "$PAUSE_IMAGE" <<<"$images" || die "the pause image did not import"
}

cmd_up() {
	local t0=$SECONDS c
	for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl snapshot-controller; do
		[[ -x $BIN/$c ]] || die "$BIN/$c is missing: run scripts/k8s-build.sh"
	done
	[[ -d $CACHE/images ]] || die "no images in $CACHE/images: run scripts/k8s-build.sh"
	if [[ -e $DIR ]]; then
		[[ -e $MARKER ]] || die "$DIR exists and is not a $PROG directory"
		log "$DIR holds an earlier node; tearing it down"
		cmd_down
	fi
	mkdir -p "$DIR"/{log,state} "$PIDS"
	touch "$MARKER"
	chmod 0700 "$DIR"
	make_pki
	save_host_state
	setup_network
	setup_kubelet_root
	write_configs

	start_daemon etcd etcd --name rbdcsi-e2e --data-dir "$DIR/etcd" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster "rbdcsi-e2e=http://127.0.0.1:$ETCD_PEER_PORT" --log-level warn
	start_daemon containerd containerd --config "$DIR/containerd/config.toml"
	wait_until "etcd" 30 etcd curl -fsS "http://127.0.0.1:$ETCD_PORT/health"

	# CSIVolumeHealth: the pods' and CSINodes' health fields, which the
	# kubelet fills (kubelet.yaml).
	start_daemon kube-apiserver "$BIN/kube-apiserver" \
		--etcd-servers="http://127.0.0.1:$ETCD_PORT" \
		--bind-address="$NODE_IP" --advertise-address="$NODE_IP" --secure-port="$APISERVER_PORT" \
		--tls-cert-file="$DIR/pki/apiserver.crt" --tls-private-key-file="$DIR/pki/apiserver.key" \
		--client-ca-file="$DIR/pki/ca.crt" --token-auth-file="$DIR/pki/tokens.csv" \
		--kubelet-client-certificate="$DIR/pki/apiserver-kubelet-client.crt" \
		--kubelet-client-key="$DIR/pki/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types=InternalIP \
		--authorization-mode=Node,RBAC --allow-privileged=true \
		--service-cluster-ip-range="$SERVICE_CIDR" \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$DIR/pki/sa.pub" --service-account-signing-key-file="$DIR/pki/sa.key" \
		--feature-gates=CSIVolumeHealth=true --profiling=false --v=1
	wait_until "the apiserver" 90 kube-apiserver kubectl get --raw /readyz

	start_daemon kube-controller-manager "$BIN/kube-controller-manager" \
		--kubeconfig="$DIR/kubeconfig" --authentication-kubeconfig="$DIR/kubeconfig" --authorization-kubeconfig="$DIR/kubeconfig" \
		--bind-address=127.0.0.1 --secure-port=10257 --leader-elect=false \
		--service-account-private-key-file="$DIR/pki/sa.key" --root-ca-file="$DIR/pki/ca.crt" \
		--use-service-account-credentials=true --service-cluster-ip-range="$SERVICE_CIDR" \
		--allocate-node-cidrs=false --profiling=false --v=1
	start_daemon kube-scheduler "$BIN/kube-scheduler" \
		--kubeconfig="$DIR/kubeconfig" --authentication-kubeconfig="$DIR/kubeconfig" --authorization-kubeconfig="$DIR/kubeconfig" \
		--bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false --profiling=false --v=1

	# VolumeSnapshot CRDs and the snapshot-controller: cluster add-ons the
	# driver's deploy/ expects to be there (README, "Installing").
	kubectl apply -k "$CACHE/crds" >"$DIR/log/crds.log" 2>&1 || die "applying the VolumeSnapshot CRDs failed: $(cat "$DIR/log/crds.log")"
	# In a loop: kubectl wait fails at once, rather than waiting, on a CRD
	# whose status has no conditions yet ("<nil> is of the type <nil>").
	# And the SnapshotMetadataService CRD, which changed-block tracking needs.
	kubectl apply -f "$CACHE/crds-cbt" >>"$DIR/log/crds.log" 2>&1 || die "applying the SnapshotMetadataService CRD failed: $(cat "$DIR/log/crds.log")"
	wait_until "the VolumeSnapshot CRDs" 60 "" kubectl wait --for=condition=Established --timeout=2s \
		crd/volumesnapshots.snapshot.storage.k8s.io crd/volumesnapshotcontents.snapshot.storage.k8s.io \
		crd/volumesnapshotclasses.snapshot.storage.k8s.io crd/snapshotmetadataservices.cbt.storage.k8s.io
	start_daemon snapshot-controller "$BIN/snapshot-controller" --kubeconfig="$DIR/kubeconfig" \
		--leader-election=false --http-endpoint=127.0.0.1:8090 --v=2

	wait_until "containerd" 30 containerd ctr version
	import_images
	# The node is in zone-a, which the driver reports as its topology
	# (deploy/topology, e2e/k8s/topology_test.go).
	start_daemon kubelet "$BIN/kubelet" --config="$DIR/kubelet.yaml" --kubeconfig="$DIR/kubeconfig" \
		--hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --node-labels=topology.kubernetes.io/zone=zone-a --v=1
	start_daemon kube-proxy "$BIN/kube-proxy" --config="$DIR/kube-proxy.yaml" --v=1
	wait_until "node $NODE_NAME Ready" 120 kubelet kubectl wait --for=condition=Ready "node/$NODE_NAME" --timeout=2s
	wait_until "the default service account" 60 kube-controller-manager kubectl -n default get serviceaccount default

	(
		umask 077
		{
			printf 'export KUBECONFIG=%q\n' "$DIR/kubeconfig"
			printf 'export KUBECTL=%q\n' "$BIN/kubectl"
			printf 'export E2E_NODE_NAME=%q\n' "$NODE_NAME"
			printf 'export E2E_NODE_IP=%q\n' "$NODE_IP"
			printf 'export E2E_IFACE=%q\n' "$IFACE"
			printf 'export E2E_KUBE_DIR=%q\n' "$DIR"
			printf 'export CONTAINERD_ADDRESS=%q\n' "$SOCK"
		} >"$DIR/env"
	)
	log "up: node $NODE_NAME ($NODE_IP) in $((SECONDS - t0)) s; export KUBECONFIG=$DIR/kubeconfig"
}

# stop_containers: kill every container and pod sandbox containerd runs
# for us, then the shims (whose command line names our socket).
stop_containers() {
	local id pid
	[[ -S $SOCK ]] || return 0
	if ctr version >/dev/null 2>&1; then
		for id in $(ctr -n k8s.io tasks ls -q 2>/dev/null); do
			ctr -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
		done
		sleep 1
		for id in $(ctr -n k8s.io tasks ls -q 2>/dev/null); do
			ctr -n k8s.io tasks delete -f "$id" >/dev/null 2>&1 || true
		done
		for id in $(ctr -n k8s.io containers ls -q 2>/dev/null); do
			ctr -n k8s.io containers delete "$id" >/dev/null 2>&1 || true
		done
	fi
	for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $SOCK" || true); do
		if pid_ours "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
	done
}

cmd_down() {
	local p
	[[ -e $DIR ]] || return 0
	[[ -e $MARKER ]] || die "$DIR is not a $PROG directory; not touching it"
	stop_daemon kube-proxy
	# kube-proxy's own cleanup, then whatever KUBE-* chains are left (kubelet's canaries).
	if [[ -x $BIN/kube-proxy && -f $DIR/kube-proxy.yaml ]]; then
		"$BIN/kube-proxy" --config="$DIR/kube-proxy.yaml" --cleanup >"$DIR/log/kube-proxy-cleanup.log" 2>&1 || true
	fi
	stop_daemon kubelet
	stop_containers
	stop_daemon containerd
	stop_daemon snapshot-controller
	stop_daemon kube-scheduler
	stop_daemon kube-controller-manager
	stop_daemon kube-apiserver
	stop_daemon etcd
	remove_kube_iptables
	if [[ -f $DIR/state/kubelet-root ]]; then
		umount_under "$KUBELET_ROOT"
		rm -rf --one-file-system "$KUBELET_ROOT"
	fi
	umount_under "$DIR"
	remove_netns
	detach_loops
	if [[ -f $DIR/state/remove-host-paths ]]; then
		while read -r p; do
			[[ -n $p ]] || continue
			umount_under "$p"
			rm -rf --one-file-system "$p"
		done <"$DIR/state/remove-host-paths"
	fi
	remove_cgroups
	restore_sysctls
	if [[ -f $DIR/state/remove-var-log-containers && -d /var/log/containers ]]; then
		rm -rf /var/log/containers
	fi
	if [[ -f $DIR/state/pod-bridge ]]; then ip link del "$POD_BRIDGE" >/dev/null 2>&1 || true; fi
	if [[ -f $DIR/state/iface ]]; then ip link del "$(<"$DIR/state/iface")" >/dev/null 2>&1 || true; fi
	if [[ -f $DIR/state/iptables.before ]]; then
		# Rules only: iptables-nft leaves the (empty) tables it made.
		diff <(grep '^-A' "$DIR/state/iptables.before") <(iptables-save 2>/dev/null | grep '^-A') >&2 ||
			log "iptables rules differ from before the run (above)"
	fi
	rm -rf --one-file-system "$DIR"
}

up_failed() {
	log "up failed; logs kept in $DIR.logs; tearing down"
	rm -rf "$DIR.logs"
	cp -r "$DIR/log" "$DIR.logs" 2>/dev/null || true
	cmd_down
}

main() {
	if (($# != 2)) || [[ -z $2 ]]; then usage; fi
	set_paths "$2"
	case $1 in
	up)
		# A failed `up` leaves nothing behind but its logs, in DIR.logs.
		trap 'up_failed' EXIT
		cmd_up
		trap - EXIT
		;;
	down) cmd_down ;;
	env) cat "$DIR/env" ;;
	*) usage ;;
	esac
}

main "$@"
