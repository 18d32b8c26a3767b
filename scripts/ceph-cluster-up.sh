# shellcheck shell=bash
# ceph-cluster-up.sh: `ceph-cluster.sh up` (the configuration, the keys, the
# daemons in order, the pool). Sourced by scripts/ceph-cluster.sh, whose
# variables and helpers it uses; not run on its own.

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
# RBD overwrites objects of its erasure-coded data pool in place; Ceph allows
# that only on BlueStore OSDs unless this is set. memstore handles it.
mon_debug_no_require_bluestore_for_ec_overwrites = true
$insecure_key

[osd]
osd_data = $DIR/osd/\$cluster-\$id
keyring = \$osd_data/keyring
memstore_device_bytes = ${CEPH_MEMSTORE_BYTES:-8589934592}
# If the mon is already gone (crashed, killed), don't wait 5 s for it on shutdown.
osd_mon_shutdown_timeout = 1
# memstore reports itself rotational, so the OSD paces the trimming of removed
# snapshots and the removal of deleted pools' PGs as for a disk: 5 s between
# steps. In RAM nothing needs pacing, and tests that check what a deletion
# leaves in RADOS would otherwise wait minutes for it.
osd_snap_trim_sleep_hdd = 0
osd_delete_sleep_hdd = 0

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

# wait_pgs_clean OSDS: wait until every PG of every pool is active+clean.
# Without a mgr, `ceph pg stat`/`pg ls` never answer (PG stats live in the mgr), so
# ask each OSD (ids 0 to OSDS-1) for the state of the PGs it is primary of, over
# the network (`tell`, not the admin socket, whose path may be too long for a
# unix socket).
wait_pgs_clean() {
	local osds=$1 deadline want have=0 out="" id
	deadline=$(($(date +%s) + ${CEPH_PG_TIMEOUT:-60}))
	# Plain-text "pool 1 'rbd' replicated size 1 ... pg_num 8 ..." lines: sum pg_num.
	want=$(cephc osd pool ls detail | awk '{for (i = 1; i < NF; i++) if ($i == "pg_num") n += $(i + 1)} END {print n + 0}') ||
		fail_up "cannot list pools"
	while :; do
		out=""
		for ((id = 0; id < osds; id++)); do
			out+=$(timeout 10 ceph -c "$CONF" --connect-timeout 5 tell "osd.$id" dump_pgstate_history -f json-pretty 2>&1)$'\n' || true
		done
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
		pid_running "$(<"$PIDS/mgr.x.pid")" || fail_up "ceph-mgr exited"
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

# add_osd: create and start the next memstore OSD. `osd new` with a
# pre-generated cephx secret creates the id and its auth entry in one mon
# round trip.
add_osd() {
	local osd_uuid osd_key osd_id
	osd_uuid=$(uuidgen)
	osd_key=$(ceph-authtool --gen-print-key "${KEY_TYPE_ARGS[@]}")
	osd_id=$(printf '{"cephx_secret": "%s"}' "$osd_key" | cephc osd new "$osd_uuid" -i - 2>>"$DIR/log/cli.log") || fail_up "ceph osd new (exit $?, 124 = timed out)"
	mkdir -p "$DIR/osd/ceph-$osd_id"
	(umask 077 && ceph-authtool --create-keyring "$DIR/osd/ceph-$osd_id/keyring" -n "osd.$osd_id" --add-key "$osd_key" >/dev/null)
	ceph-osd -c "$CONF" -i "$osd_id" --mkfs --osd-uuid "$osd_uuid" >"$DIR/log/osd.$osd_id.mkfs" 2>&1 ||
		fail_up "ceph-osd --mkfs"
	start_daemon "osd.$osd_id" ceph-osd -c "$CONF" -f -i "$osd_id"
	trace "osd.$osd_id started"
}

cmd_up() {
	local t0 fsid port mon_pid osds admin_key csi_key i lockfile caps
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
	# so two concurrent `up`s cannot pick the same free port. /run/rbdcsi is the
	# host's in every chroot too (scripts/rootfs.sh run), so a cluster up in a
	# chroot and one up beside it on the host take the same lock.
	mkdir -p /run/rbdcsi
	lockfile=/run/rbdcsi/ceph-port.lock
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
		pid_running "$mon_pid" || fail_up "ceph-mon exited"
		sleep 0.05
	done
	((i < 200)) || fail_up "ceph-mon not listening on $ADDR:$port after 10s"
	exec {lockfd}>&-
	unset lockfd
	trace "mon listening on $port"

	# One OSD holds the replicated pool; an erasure-coded data pool (k=2, m=1,
	# one chunk per OSD) needs three.
	osds=1
	[[ ${CEPH_EC_POOL:-1} == 0 ]] || osds=3
	for ((i = 0; i < osds; i++)); do add_osd; done

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
	caps='profile rbd pool=rbd'
	if ((osds == 3)); then
		# RBD writes into an EC pool in place, which Ceph allows only on
		# BlueStore unless told (write_conf sets that for memstore).
		cephc osd erasure-code-profile set ec21 k=2 m=1 crush-failure-domain=osd >>"$DIR/log/cli.log" 2>&1 ||
			fail_up "ceph osd erasure-code-profile set (exit $?)"
		cephc osd pool create rbd-ec 8 8 erasure ec21 >>"$DIR/log/cli.log" 2>&1 || fail_up "ceph osd pool create rbd-ec (exit $?)"
		cephc osd pool set rbd-ec allow_ec_overwrites true >>"$DIR/log/cli.log" 2>&1 || fail_up "allow_ec_overwrites on rbd-ec (exit $?)"
		cephc osd pool application enable rbd-ec rbd >>"$DIR/log/cli.log" 2>&1 || fail_up "rbd application on rbd-ec (exit $?)"
		caps+=', profile rbd pool=rbd-ec'
		trace "EC data pool created"
	fi
	(umask 077 && cephc auth get-or-create client.csi-rbd \
		mon 'profile rbd' osd "$caps" mgr 'profile rbd pool=rbd' \
		-o "$DIR/ceph.client.csi-rbd.keyring" 2>>"$DIR/log/cli.log") || fail_up "creating client.csi-rbd (exit $?, 124 = timed out)"

	trace "csi user created"
	wait_pgs_clean "$osds"
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
			((osds == 3)) && printf 'export CEPH_DATA_POOL=rbd-ec\n'
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

