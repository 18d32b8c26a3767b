#!/usr/bin/env bash
# ceph-cluster.sh: a throwaway single-node Ceph cluster (1 mon + 3 memstore OSDs,
# optional mgr) living entirely under one directory, on loopback only, for
# integration tests of the RBD CSI driver.
#
#   ceph-cluster.sh up     DIR   boot (idempotent), write DIR/env and DIR/cluster-config.json
#   ceph-cluster.sh down   DIR   stop exactly the daemons in DIR/pids, remove DIR (idempotent)
#   ceph-cluster.sh status DIR   print `ceph -s`; non-zero exit if the cluster is not up
#   ceph-cluster.sh env    DIR   print DIR/env (for eval/source)
#
# Environment:
#   CEPH_ADDR           IPv4 address the daemons bind to and advertise (default 127.0.0.1;
#                       the kernel-VM test uses a bridge address its guests reach)
#   CEPH_MON_PORT       mon port (default: first free port from 3300 upward)
#   CEPH_MEMSTORE_BYTES OSD capacity in bytes (default 8 GiB; memstore allocates on write)
#   CEPH_WITH_MGR=1     also start a mgr (not needed for RBD; costs ~300 MB RSS)
#   CEPH_PG_TIMEOUT     seconds to wait for PGs to become active+clean (default 60)
#   CEPH_EC_POOL=0      no erasure-coded data pool: one OSD instead of three (by
#                       default two more OSDs hold rbd-ec, k=2 m=1, with overwrites;
#                       DIR/env names it in CEPH_DATA_POOL)
#   CEPH_KEY_TYPE=aes   on releases whose keys default to AES256K (Tentacle; Squid from
#                       19.2.6): AES keys, which the clients of older releases and Linux
#                       krbd before 7.0 can use, and a monitor that allows and prefers
#                       them (docs/reference.md, "Ceph releases")
#
# Several clusters may run side by side (different DIRs): daemons are only ever
# stopped by the PIDs recorded in their own DIR, never by name.
set -euo pipefail

readonly PROG=${0##*/}
readonly CEPH_TIMEOUT=30   # hard bound for every ceph/rbd CLI call
readonly CONNECT_TIMEOUT=15
# A caller's CEPH_ARGS (say --id csi-rbd) would silently change who our admin calls
# run as; CEPH_CONF is harmless (-c wins).
unset CEPH_ARGS
ADDR=${CEPH_ADDR:-127.0.0.1}
[[ $ADDR =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]] || { echo "${0##*/}: CEPH_ADDR must be an IPv4 address, not $ADDR" >&2; exit 2; }
readonly ADDR

usage() {
	echo "usage: $PROG up|down|status|env DIR" >&2
	exit 2
}

die() {
	echo "$PROG: $*" >&2
	exit 1
}

log() {
	echo "$PROG: $*" >&2
}

now() { echo "${EPOCHREALTIME/,/.}"; }

# CEPH_CLUSTER_TRACE=1 prints per-step timings of `up` to stderr.
trace() {
	[[ ${CEPH_CLUSTER_TRACE:-0} == 1 ]] || return 0
	log "$(awk -v a="$t0" -v b="$(now)" 'BEGIN{printf "%6.2f", b-a}')s $*"
}

# --- paths ------------------------------------------------------------------

set_paths() {
	# Absolute and canonical (no ./, .., symlinks; DIR need not exist yet): daemons
	# are recognised by the exact conf path in their command line, so every spelling
	# of DIR must map to the same string.
	DIR=$(realpath -m -- "$1")
	[[ -n $DIR && $DIR != / ]] || die "refusing to use / as cluster directory"
	# ceph.conf values cannot carry whitespace or these metacharacters safely.
	[[ $DIR =~ ^[A-Za-z0-9._/+:@-]+$ ]] || die "unsupported characters in directory name: $DIR"
	CONF=$DIR/ceph.conf
	PIDS=$DIR/pids
	MARKER=$DIR/.ceph-cluster-sh
}

# --- bounded CLI wrappers ------------------------------------------------------

# ceph CLI; --connect-timeout makes it give up instead of hunting for a dead mon forever.
cephc() {
	timeout "$CEPH_TIMEOUT" ceph -c "$CONF" --connect-timeout "$CONNECT_TIMEOUT" "$@"
}

# rbd has no --connect-timeout; client_mount_timeout is the librados equivalent.
rbdc() {
	timeout "$CEPH_TIMEOUT" rbd -c "$CONF" --client_mount_timeout "$CONNECT_TIMEOUT" "$@"
}

# --- process helpers -------------------------------------------------------------

# pid_alive PID: true if PID is a live (non-zombie) process started with our ceph.conf.
# The cmdline check guards against PID reuse after a crash: we never signal a stranger.
pid_alive() {
	local pid=$1 state cmdline
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	[[ -r /proc/$pid/stat ]] || return 1
	# Field 3 of /proc/PID/stat is the state; the comm field (2) may contain spaces,
	# so strip everything up to the last ')'.
	state=$(sed -e 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) || return 1
	[[ $state != Z && $state != X ]] || return 1
	cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
	[[ $cmdline == *" -c $CONF "* ]]
}

# pid_running PID: true while PID, a daemon this script just started, has
# not exited. Not pid_alive: until the forked shell has exec'd the daemon
# (a moment, longer on a loaded machine) its command line is still this
# script's, and pid_alive would take the starting daemon for a dead one.
pid_running() {
	local state
	[[ $1 =~ ^[0-9]+$ && -r /proc/$1/stat ]] || return 1
	state=$(sed -e 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
	[[ -n $state && $state != Z && $state != X ]]
}

# live_pids [GLOB]: print the PIDs from DIR/pids/GLOB.pid (default: all) that are
# still alive.
live_pids() {
	local f pid
	[[ -d $PIDS ]] || return 0
	for f in "$PIDS"/${1:-*}.pid; do
		[[ -e $f ]] || continue
		pid=$(<"$f")
		if pid_alive "$pid"; then echo "$pid"; fi
	done
}

# True if a completed `up` (DIR/env is written last) left a cluster whose recorded
# daemons are all alive and whose mon answers quickly.
cluster_running() {
	local f n=0
	[[ -f $CONF && -f $DIR/env && -d $PIDS ]] || return 1
	for f in "$PIDS"/*.pid; do
		[[ -e $f ]] || return 1
		pid_alive "$(<"$f")" || return 1
		n=$((n + 1))
	done
	((n >= 2)) || return 1 # at least mon + osd
	timeout 10 ceph -c "$CONF" --connect-timeout 5 -s >/dev/null 2>&1
}

# start_daemon NAME CMD...: start a daemon in the foreground (-f) as a background
# job in its own session, so it survives this script and ignores the caller's
# terminal/signals, and record its PID. Its stdio goes to a file so a caller
# reading our stdout through a pipe (e.g. Go's exec.Cmd) is not held open.
start_daemon() {
	local name=$1
	shift
	# setsid execs in place (we are not a process-group leader here), so $! is the daemon.
	# The {lockfd} redirection closes the port lock in the child: otherwise the mon
	# would inherit it and hold the lock for its whole life.
	if [[ -n ${lockfd:-} ]]; then
		setsid "$@" </dev/null >>"$DIR/log/$name.out" 2>&1 {lockfd}>&- &
	else
		setsid "$@" </dev/null >>"$DIR/log/$name.out" 2>&1 &
	fi
	echo $! >"$PIDS/$name.pid"
}

dump_logs() {
	local f
	for f in "$DIR"/log/*; do
		[[ -s $f ]] || continue
		echo "===== tail $f =====" >&2
		tail -n 30 "$f" >&2 || true
	done
}

# On failure: show why, stop what we started, keep DIR (logs) for a post-mortem.
# A later `up` finds the dead cluster and starts afresh; `down` removes it.
fail_up() {
	log "up failed: $*"
	dump_logs
	stop_daemons || true
	exit 1
}

# --- port selection -----------------------------------------------------------------

port_in_use() {
	[[ -n $(ss -Htln "sport = :$1" 2>/dev/null) ]]
}

pick_port() {
	local p
	if [[ -n ${CEPH_MON_PORT:-} ]]; then
		[[ $CEPH_MON_PORT =~ ^[0-9]+$ ]] || die "CEPH_MON_PORT must be a number"
		port_in_use "$CEPH_MON_PORT" && die "CEPH_MON_PORT $CEPH_MON_PORT is already in use"
		echo "$CEPH_MON_PORT"
		return
	fi
	# 3300 is the msgr2 default; stay well below the OSD range (6800-7300).
	for ((p = 3300; p < 6000; p++)); do
		if ! port_in_use "$p"; then
			echo "$p"
			return
		fi
	done
	die "no free port in 3300-5999"
}

# --- down ---------------------------------------------------------------------------

# wait_gone GLOB TENTHS: wait up to TENTHS/10 s for the daemons DIR/pids/GLOB.pid
# to exit; the still-live PIDs are left in the caller's array `pids`.
wait_gone() {
	local i
	for ((i = 0; i < $2; i++)); do
		mapfile -t pids < <(live_pids "$1")
		((${#pids[@]})) || return 0
		sleep 0.1
	done
	mapfile -t pids < <(live_pids "$1")
	((${#pids[@]} == 0))
}

# stop_set GLOB: SIGTERM the daemons DIR/pids/GLOB.pid, SIGKILL whatever is left
# after ~10 s, and return once all are gone.
stop_set() {
	local pids=()
	mapfile -t pids < <(live_pids "$1")
	((${#pids[@]})) || return 0
	kill -TERM "${pids[@]}" 2>/dev/null || true
	wait_gone "$1" 100 && return 0
	log "SIGKILL ${pids[*]} (still alive 10 s after SIGTERM)"
	kill -KILL "${pids[@]}" 2>/dev/null || true
	wait_gone "$1" 50 || die "daemons still alive after SIGKILL: ${pids[*]}"
}

# stop_daemons: OSD and mgr first, the mon last. A stopping OSD tells the mon and
# waits for its ack (osd_mon_shutdown_timeout): with the mon gone first, every
# OSD shutdown would stall for that timeout.
stop_daemons() {
	stop_set 'osd.*'
	stop_set 'mgr.*'
	stop_set '*' # the mon, and anything else recorded
}

cmd_down() {
	[[ -e $DIR ]] || return 0
	[[ -d $DIR ]] || die "$DIR is not a directory"
	# Never rm -rf a directory we did not create (e.g. a mistyped $HOME).
	if [[ ! -e $MARKER && -n $(ls -A "$DIR") ]]; then
		die "$DIR does not look like a ceph-cluster.sh directory (no $MARKER); not touching it"
	fi
	stop_daemons
	# --one-file-system: if something (e.g. rbd-fuse) is still mounted inside DIR, fail
	# loudly instead of deleting through the mount.
	rm -rf --one-file-system "$DIR"
}

# --- up: scripts/ceph-cluster-up.sh ---------------------------------------------------

# shellcheck source-path=SCRIPTDIR source=ceph-cluster-up.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/ceph-cluster-up.sh"

# --- status / env ---------------------------------------------------------------------

cmd_status() {
	local f rc=0
	[[ -f $CONF ]] || die "no cluster in $DIR"
	[[ -f $DIR/env ]] || {
		log "$DIR: \`up\` did not complete"
		rc=1
	}
	for f in "$PIDS"/*.pid; do
		[[ -e $f ]] || continue
		if ! pid_alive "$(<"$f")"; then
			log "$(basename "$f" .pid) (pid $(<"$f")) is not running"
			rc=1
		fi
	done
	# With the mon dead, `ceph -s` would only wait out its connect timeout.
	if [[ -e $PIDS/mon.a.pid ]] && pid_alive "$(<"$PIDS/mon.a.pid")"; then
		cephc -s || rc=1
	else
		rc=1
	fi
	return "$rc"
}

cmd_env() {
	[[ -f $DIR/env ]] || die "no env file in $DIR (is the cluster up?)"
	cat "$DIR/env"
}

main() {
	(($# == 2)) || usage
	[[ -n $2 ]] || usage
	set_paths "$2"
	case $1 in
	up) cmd_up ;;
	down) cmd_down ;;
	status) cmd_status ;;
	env) cmd_env ;;
	*) usage ;;
	esac
}

main "$@"
