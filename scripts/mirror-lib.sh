# shellcheck shell=bash
# mirror-lib.sh: two scripts/ceph-cluster.sh clusters peered for RBD
# snapshot mirroring, each with its rbd-mirror daemon; shared by
# scripts/dr-cluster.sh (make dr-test) and scripts/k8s-e2e.sh (the
# replication scenario). Source it after lib.sh; it defines functions only.
# Each function takes a cluster's directory (its ceph.conf, log/, run/).
#
# rbd-mirror is stopped by the PID recorded in DIR/rbd-mirror.pid, checked
# against its command line (which names the cluster's ceph.conf): never by
# name.

# mirror_rbd DIR ARGS...: rbd as the cluster's admin, bounded.
mirror_rbd() {
	local d=$1
	shift
	timeout 30 rbd -c "$d/ceph.conf" --client_mount_timeout 15 "$@"
}

# mirror_pid DIR: the PID of the cluster's rbd-mirror if it runs, else nothing.
mirror_pid() {
	local d=$1 pid cmdline
	[[ -r $d/rbd-mirror.pid ]] || return 0
	pid=$(<"$d/rbd-mirror.pid")
	[[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 0
	cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 0
	[[ $cmdline == "rbd-mirror -c $d/ceph.conf "* ]] && echo "$pid"
	return 0
}

# start_mirror DIR INTERVAL [SOURCE_ADDR SHIM]: start the cluster's
# rbd-mirror unless it runs. It takes its own cluster's configuration from
# CEPH_CONF and the working directory (Pacific's does not read -c for that
# connection); -c in its command line names the cluster for mirror_pid. It
# looks for new images and peers, and reports on each image, every
# INTERVAL seconds (Ceph's own is 30): the tests wait for those reports.
# With SOURCE_ADDR and SHIM (mirror_build_shim) it reaches both clusters
# from SOURCE_ADDR, as an rbd-mirror on a host of its site would: else
# every client on this machine comes from one address, and the peer's
# rbd-mirror, which watches a primary image it replays, looks like the
# node plugin to a detach's fence, which tells them apart by address
# (internal/controller/fence.go).
start_mirror() {
	local d=$1 interval=$2 addr=${3:-} shim=${4:-} pid="" i
	[[ -n $(mirror_pid "$d") ]] && return 0
	(
		cd "$d" || exit
		if [[ -n $addr ]]; then
			export LD_PRELOAD=$shim RBDCSI_SOURCE_ADDR=$addr
		fi
		CEPH_CONF=$d/ceph.conf exec setsid rbd-mirror -c "$d/ceph.conf" --id admin -f \
			--log-file "$d/log/rbd-mirror.log" --admin-socket "$d/run/rbd-mirror.asok" \
			--rbd_mirror_image_state_check_interval "$interval" \
			--rbd_mirror_pool_replayers_refresh_interval "$interval" \
			</dev/null >>"$d/log/rbd-mirror.out" 2>&1
	) &
	echo $! >"$d/rbd-mirror.pid"
	for ((i = 0; i < 50; i++)); do
		pid=$(mirror_pid "$d")
		[[ -n $pid ]] && break
		sleep 0.1
	done
	[[ -n $pid ]] || {
		tail -n 20 "$d/log/rbd-mirror.out" "$d/log/rbd-mirror.log" >&2 || true
		die "the rbd-mirror of $d did not start"
	}
}

# mirror_build_shim OUTDIR: OUTDIR/sourceaddr.so, scripts/sourceaddr.c
# built, unless it is there: built once and moved in whole, since a
# running rbd-mirror of an earlier start maps it.
mirror_build_shim() {
	local out=$1 src
	src=$(dirname "${BASH_SOURCE[0]}")/sourceaddr.c
	[[ -e $out/sourceaddr.so ]] && return 0
	# runs: gcc
	gcc -shared -fPIC -O2 -Wall -o "$out/sourceaddr.so.tmp" "$src" -ldl
	mv "$out/sourceaddr.so.tmp" "$out/sourceaddr.so"
}

# stop_mirror DIR: SIGTERM, then SIGKILL after 10 s.
stop_mirror() {
	local d=$1 pid i
	pid=$(mirror_pid "$d")
	[[ -n $pid ]] || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		if [[ -z $(mirror_pid "$d") ]]; then
			# Reap it when this shell started it, so no zombie stays
			# behind until this script ends.
			wait "$pid" 2>/dev/null || true
			return 0
		fi
		sleep 0.1
	done
	log "SIGKILL rbd-mirror $pid of $d (alive 10 s after SIGTERM)"
	kill -KILL "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		[[ -n $(mirror_pid "$d") ]] || return 0
		sleep 0.1
	done
	die "rbd-mirror $pid of $d still alive after SIGKILL"
}

# mirror_peered DIR POOL: the cluster's pool has a mirror peer (a non-empty
# "peers" list; each peer has a "uuid").
mirror_peered() {
	mirror_rbd "$1" mirror pool info "$2" --format json | grep -q '"peers":\[{"uuid"'
}

# mirror_wait_schedules DIR POOL: wait (up to 3 min) until the cluster's
# mgr answers for mirror snapshot schedules: it loads its rbd_support
# module some time after it is available (Reef's takes longest), and a
# schedule set before then is refused.
mirror_wait_schedules() {
	local d=$1 pool=$2 i
	for ((i = 0; i < 180; i++)); do
		# --recursive: without it a pool with no schedule of its own
		# answers ENOENT (exit 2) once the module is loaded, too.
		mirror_rbd "$d" mirror snapshot schedule ls --pool "$pool" --recursive >/dev/null 2>&1 && return 0
		sleep 1
	done
	die "the mgr of $d does not answer for mirror snapshot schedules after 3 min (rbd_support not loaded)"
}

# mirror_peer POOL DIR_A SITE_A DIR_B SITE_B: POOL mirrors image by image
# on both clusters, which are peers both ways (a bootstrap token from A,
# imported on B, rx-tx); nothing is done where that is so already. The
# token is a key of A's: it lives in DIR_A for the moment of the import.
mirror_peer() {
	local pool=$1 a=$2 site_a=$3 b=$4 site_b=$5
	mirror_rbd "$a" mirror pool enable "$pool" image --site-name "$site_a" >/dev/null
	mirror_rbd "$b" mirror pool enable "$pool" image --site-name "$site_b" >/dev/null
	if mirror_peered "$a" "$pool" && mirror_peered "$b" "$pool"; then return 0; fi
	(
		umask 077
		mirror_rbd "$a" mirror pool peer bootstrap create --site-name "$site_a" "$pool" >"$a/mirror-token"
	)
	# Pacific prints a warning about the token's direction on stderr.
	mirror_rbd "$b" mirror pool peer bootstrap import --site-name "$site_b" --direction rx-tx "$pool" "$a/mirror-token" \
		2>>"$b/log/mirror-peer.log" >/dev/null
	rm -f "$a/mirror-token"
	if ! mirror_peered "$a" "$pool" || ! mirror_peered "$b" "$pool"; then die "the pools $pool of $a and $b did not peer"; fi
}
