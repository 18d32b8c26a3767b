#!/usr/bin/env bash
# ceph-cluster.sh: a throwaway single-node Ceph cluster (1 mon + 1 memstore OSD,
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
#   CEPH_KEY_TYPE=aes   on releases whose keys default to AES256K (Tentacle; Squid from
#                       19.2.6): AES keys, which the clients of older releases and Linux
#                       krbd before 7.0 can use, and a monitor that allows and prefers
#                       them (README, "Ceph releases")
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

# --- up -------------------------------------------------------------------------------

write_conf() {
	local fsid=$1 port=$2 client_asok
	# Per-process client admin sockets, so concurrent clients (CSI driver, rbd, rbd-fuse)
	# do not fight over one path. A unix socket path must fit in 107 bytes, and every
	# client with a longer one prints an error on stderr: with a long DIR (deep test
	# temp dirs), disable client admin sockets instead. 48 = "/run/ceph-client." +
	# a name of up to 16 chars + ".<pid>.asok".
	client_asok="$DIR/run/\$cluster-\$name.\$pid.asok"
	((${#DIR} + 48 <= 107)) || client_asok=""
	# CEPH_KEY_TYPE=aes on a release that prefers AES256K (key_types).
	local insecure_key=""
	((${#MONMAP_CIPHER_ARGS[@]} == 0)) || insecure_key="mon_auth_allow_insecure_key = true"
	# Everything Ceph would put under /var/{lib,log,run}/ceph is redirected into DIR.
	cat >"$CONF" <<EOF
[global]
fsid = $fsid
mon_host = v2:$ADDR:$port
# One address (loopback unless CEPH_ADDR says otherwise), msgr2 only (no legacy v1 port at all).
public_addr = $ADDR
cluster_addr = $ADDR
ms_bind_msgr1 = false
ms_bind_msgr2 = true
ms_bind_ipv6 = false
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
# Every client here is new; also silences the AUTH_INSECURE_GLOBAL_ID_RECLAIM warning.
auth_allow_insecure_global_id_reclaim = false
run_dir = $DIR/run
crash_dir = $DIR/crash
keyring = $DIR/\$cluster.\$name.keyring
log_file = $DIR/log/\$cluster-\$name.log
mon_cluster_log_file = $DIR/log/\$cluster.\$channel.log
# Recent-log ring that is dumped into the log on a crash: keep such dumps short.
log_max_recent = 500
# Single OSD, single host: size 1, no host-level failure domain.
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_autoscale_mode = off
osd_crush_chooseleaf_type = 0
mon_allow_pool_size_one = true
mon_allow_pool_delete = true
mon_warn_on_pool_no_redundancy = false
# Don't let a fairly full CI disk stop the mon (default: crit at 5% free).
mon_data_avail_warn = 1
mon_data_avail_crit = 0
osd_objectstore = memstore

[mon]
mon_data = $DIR/mon/\$cluster-\$id
keyring = \$mon_data/keyring
# The mon batches map changes for 1 s by default; booting an OSD and a pool takes
# ~8 osdmap epochs, so this alone cuts "up" from ~7 s to ~2 s.
paxos_propose_interval = 0.1
$insecure_key

[osd]
osd_data = $DIR/osd/\$cluster-\$id
keyring = \$osd_data/keyring
memstore_device_bytes = ${CEPH_MEMSTORE_BYTES:-8589934592}
# If the mon is already gone (crashed, killed), don't wait 5 s for it on shutdown.
osd_mon_shutdown_timeout = 1

[mgr]
mgr_data = $DIR/mgr/\$cluster-\$id
keyring = \$mgr_data/keyring

[client]
admin_socket = $client_asok
# No client log files (a shared one would grow with every CLI call); errors still
# go to stderr.
log_file =
EOF
}

# wait_pgs_clean: wait until every PG of every pool is active+clean.
# Without a mgr, `ceph pg stat`/`pg ls` never answer (PG stats live in the mgr), so
# ask the (only) OSD for the state of the PGs it hosts, over the network (`tell`,
# not the admin socket, whose path may be too long for a unix socket).
wait_pgs_clean() {
	local osd_id=$1 deadline want have=0 out=""
	deadline=$(($(date +%s) + ${CEPH_PG_TIMEOUT:-60}))
	# Plain-text "pool 1 'rbd' replicated size 1 ... pg_num 8 ..." lines: sum pg_num.
	want=$(cephc osd pool ls detail | awk '{for (i = 1; i < NF; i++) if ($i == "pg_num") n += $(i + 1)} END {print n + 0}') ||
		fail_up "cannot list pools"
	while :; do
		out=$(timeout 10 ceph -c "$CONF" --connect-timeout 5 tell "osd.$osd_id" dump_pgstate_history -f json-pretty 2>&1) || true
		have=$(grep -c '"currently": "Started/Primary/Active/Clean"' <<<"$out") || true
		((have >= want)) && return 0
		if (($(date +%s) >= deadline)); then
			grep '"pg"\|"currently"' <<<"$out" >&2 || echo "$out" >&2
			fail_up "only $have of $want PGs active+clean after ${CEPH_PG_TIMEOUT:-60}s"
		fi
		sleep 0.2
	done
}

# wait_mgr: wait until a mgr is active (mgr-backed commands such as `ceph df`,
# `ceph pg stat` or `rbd task` hang until then).
wait_mgr() {
	local deadline stat
	deadline=$(($(date +%s) + ${CEPH_PG_TIMEOUT:-60}))
	until stat=$(cephc mgr stat 2>/dev/null) && [[ $stat == *'"available": true'* ]]; do
		pid_alive "$(<"$PIDS/mgr.x.pid")" || fail_up "ceph-mgr exited"
		(($(date +%s) < deadline)) || fail_up "mgr not available after ${CEPH_PG_TIMEOUT:-60}s"
		sleep 0.5
	done
}

# key_types: the arguments CEPH_KEY_TYPE needs on this release, in
# KEY_TYPE_ARGS (ceph-authtool) and MONMAP_CIPHER_ARGS (monmaptool); empty
# where the release knows one key type only.
key_types() {
	KEY_TYPE_ARGS=() MONMAP_CIPHER_ARGS=()
	local want=${CEPH_KEY_TYPE:-}
	[[ -n $want ]] || return 0
	[[ $want == aes || $want == aes256k ]] || die "CEPH_KEY_TYPE must be aes or aes256k, not $want"
	if [[ $(ceph-authtool --help 2>&1) != *--key-type* ]]; then
		[[ $want == aes ]] || die "this Ceph release ($(ceph --version | cut -d' ' -f3)) makes AES keys only"
		return 0
	fi
	KEY_TYPE_ARGS=(--key-type "$want")
	[[ $want == aes ]] || return 0
	# A monitor made by such a release allows AES256K only, and refuses to
	# create AES keys unless mon_auth_allow_insecure_key is set (write_conf).
	MONMAP_CIPHER_ARGS=(--auth-allowed-ciphers 'aes,aes256k' --auth-preferred-cipher aes)
}

cmd_up() {
	local t0 fsid port mon_pid osd_uuid osd_key osd_id admin_key csi_key i lockfile
	t0=$(now)

	if [[ -e $DIR ]]; then
		if cluster_running; then
			if [[ ${CEPH_WITH_MGR:-0} != 1 || -e $PIDS/mgr.x.pid ]]; then
				echo "already up: $DIR ($(grep -m1 '^mon_host' "$CONF" | cut -d' ' -f3))"
				return 0
			fi
			log "$DIR runs without a mgr but CEPH_WITH_MGR=1; restarting it with one"
		fi
		if [[ -e $MARKER ]]; then
			log "$DIR holds a dead or partial cluster; tearing it down"
			cmd_down
		elif [[ -n $(ls -A "$DIR") ]]; then
			die "$DIR exists, is not empty and is not a ceph-cluster.sh directory"
		fi
	fi

	[[ ${CEPH_MEMSTORE_BYTES:-0} =~ ^[0-9]+$ ]] || die "CEPH_MEMSTORE_BYTES must be a number of bytes"

	mkdir -p "$DIR"
	touch "$MARKER"
	mkdir -p "$DIR"/{run,log,crash,mon,osd,mgr} "$PIDS"
	chmod 0700 "$DIR"
	fsid=$(uuidgen)
	key_types

	# Keys: mon. and client.admin, the admin key imported into the mon's initial keyring.
	(
		umask 077
		ceph-authtool --create-keyring "$DIR/mon.keyring" --gen-key "${KEY_TYPE_ARGS[@]}" -n mon. --cap mon 'allow *' >/dev/null
		ceph-authtool --create-keyring "$DIR/ceph.client.admin.keyring" --gen-key "${KEY_TYPE_ARGS[@]}" -n client.admin \
			--cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' --cap mds 'allow *' >/dev/null
		ceph-authtool "$DIR/mon.keyring" --import-keyring "$DIR/ceph.client.admin.keyring" >/dev/null
	)

	# Port choice and mon start under a machine-wide lock, held until the mon listens,
	# so two concurrent `up`s cannot pick the same free port.
	lockfile=${TMPDIR:-/tmp}/ceph-cluster-sh.port.lock
	exec {lockfd}>"$lockfile"
	flock -w 120 "$lockfd" || die "could not take $lockfile"
	port=$(pick_port)
	write_conf "$fsid" "$port"
	monmaptool --create --addv a "[v2:$ADDR:$port]" --fsid "$fsid" "${MONMAP_CIPHER_ARGS[@]}" "$DIR/monmap" >/dev/null
	ceph-mon -c "$CONF" --mkfs -i a --monmap "$DIR/monmap" --keyring "$DIR/mon.keyring" >"$DIR/log/mon.a.mkfs" 2>&1 ||
		fail_up "ceph-mon --mkfs"
	rm -f "$DIR/monmap" "$DIR/mon.keyring"
	chmod 0600 "$DIR/mon/ceph-a/keyring"
	start_daemon mon.a ceph-mon -c "$CONF" -f -i a
	mon_pid=$(<"$PIDS/mon.a.pid")
	# Wait for *our* mon to listen (not just anyone on that port).
	for ((i = 0; i < 200; i++)); do
		[[ $(ss -Htlnp "sport = :$port" 2>/dev/null) == *"pid=$mon_pid,"* ]] && break
		pid_alive "$mon_pid" || fail_up "ceph-mon exited"
		sleep 0.05
	done
	((i < 200)) || fail_up "ceph-mon not listening on $ADDR:$port after 10s"
	exec {lockfd}>&-
	unset lockfd
	trace "mon listening on $port"

	# OSD: `osd new` with a pre-generated cephx secret creates the id and its auth
	# entry in one mon round trip.
	osd_uuid=$(uuidgen)
	osd_key=$(ceph-authtool --gen-print-key "${KEY_TYPE_ARGS[@]}")
	osd_id=$(printf '{"cephx_secret": "%s"}' "$osd_key" | cephc osd new "$osd_uuid" -i - 2>>"$DIR/log/cli.log") || fail_up "ceph osd new (exit $?, 124 = timed out)"
	mkdir -p "$DIR/osd/ceph-$osd_id"
	(umask 077 && ceph-authtool --create-keyring "$DIR/osd/ceph-$osd_id/keyring" -n "osd.$osd_id" --add-key "$osd_key" >/dev/null)
	ceph-osd -c "$CONF" -i "$osd_id" --mkfs --osd-uuid "$osd_uuid" >"$DIR/log/osd.$osd_id.mkfs" 2>&1 ||
		fail_up "ceph-osd --mkfs"
	start_daemon "osd.$osd_id" ceph-osd -c "$CONF" -f -i "$osd_id"
	trace "osd.$osd_id started"

	if [[ ${CEPH_WITH_MGR:-0} == 1 ]]; then
		mkdir -p "$DIR/mgr/ceph-x"
		cephc auth get-or-create mgr.x mon 'allow profile mgr' osd 'allow *' mds 'allow *' \
			-o "$DIR/mgr/ceph-x/keyring" 2>>"$DIR/log/cli.log" || fail_up "creating mgr.x key (exit $?, 124 = timed out)"
		chmod 0600 "$DIR/mgr/ceph-x/keyring"
		# Otherwise the devicehealth module creates a device_health_metrics pool a few
		# seconds after the mgr activates, racing the PG wait below. --force: the mon
		# only learns module options from a running mgr.
		cephc config set mgr mgr/devicehealth/enable_monitoring false --force 2>>"$DIR/log/cli.log" ||
			fail_up "disabling devicehealth (exit $?, 124 = timed out)"
		# Started early: loading its python modules takes ~7 s, overlapping the pool setup.
		start_daemon mgr.x ceph-mgr -c "$CONF" -f -i x
		trace "mgr.x started"
	fi

	# Pool and CSI user. The CSI user's keyring lands where `--id csi-rbd` finds it.
	cephc osd pool create rbd 8 8 >>"$DIR/log/cli.log" 2>&1 || fail_up "ceph osd pool create rbd (exit $?, 124 = timed out)"
	trace "pool created"
	rbdc pool init rbd 2>>"$DIR/log/cli.log" || fail_up "rbd pool init rbd (exit $?, 124 = timed out)"
	trace "pool initialized"
	(umask 077 && cephc auth get-or-create client.csi-rbd \
		mon 'profile rbd' osd 'profile rbd pool=rbd' mgr 'profile rbd pool=rbd' \
		-o "$DIR/ceph.client.csi-rbd.keyring" 2>>"$DIR/log/cli.log") || fail_up "creating client.csi-rbd (exit $?, 124 = timed out)"

	trace "csi user created"
	wait_pgs_clean "$osd_id"
	trace "PGs active+clean"
	if [[ ${CEPH_WITH_MGR:-0} == 1 ]]; then
		wait_mgr
		trace "mgr available"
	fi

	admin_key=$(ceph-authtool -p -n client.admin "$DIR/ceph.client.admin.keyring")
	csi_key=$(ceph-authtool -p -n client.csi-rbd "$DIR/ceph.client.csi-rbd.keyring")
	(
		umask 077
		{
			printf 'export CEPH_CONF=%q\n' "$CONF"
			printf 'export CEPH_MON_HOST=%q\n' "v2:$ADDR:$port"
			printf 'export CEPH_FSID=%q\n' "$fsid"
			printf 'export CEPH_POOL=rbd\n'
			printf 'export CEPH_ADMIN_KEY=%q\n' "$admin_key"
			printf 'export CEPH_CSI_USER=csi-rbd\n'
			printf 'export CEPH_CSI_KEY=%q\n' "$csi_key"
			printf 'export CEPH_CLUSTER_ID=%q\n' "$fsid"
			printf 'export CEPH_DIR=%q\n' "$DIR"
		} >"$DIR/env.tmp"
		mv "$DIR/env.tmp" "$DIR/env"
	)
	printf '[{"clusterID": "%s", "monitors": ["v2:%s:%s"]}]\n' "$fsid" "$ADDR" "$port" >"$DIR/cluster-config.json"
	chmod 0600 "$DIR"/*.keyring

	echo "up: $DIR mon=v2:$ADDR:$port fsid=$fsid in $(awk -v a="$t0" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}')s"
}

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
