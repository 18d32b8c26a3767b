#!/usr/bin/env bash
# rootfs.sh: Debian root filesystems, built once with debootstrap and cached
# outside the repository, and a way to run a command chrooted into one
# without leaving anything behind.
#
#   rootfs.sh deps            install what building a root needs (debootstrap)
#   rootfs.sh base SUITE      print the path of SUITE's untouched minbase root
#                             (debootstrap on first use; e.g. bookworm)
#   rootfs.sh runtime SUITE   print the path of SUITE's plugin root: the root
#                             of build/Dockerfile's runtime stage, built by
#                             scripts/image.sh (e.g. trixie, forky)
#   rootfs.sh dev SUITE       print the path of SUITE's test layer: what builds
#                             the plugin and runs a test cluster (DEV_PACKAGES),
#                             an overlay layer to stack over the runtime root
#   rootfs.sh bench SUITE     print the path of SUITE's bench layer: the load
#                             make bench-data runs in the kernel VM
#                             (BENCH_PACKAGES), a layer over the runtime root
#   rootfs.sh run ROOT CMD... run CMD as root chrooted into ROOT, in private
#                             mount and PID namespaces (see _inner below)
#   rootfs.sh apart KEEP CMD...
#                             run CMD in a private mount namespace holding
#                             only /, /proc, /sys, /dev and the mounts of the
#                             colon-separated paths KEEP (see apart below)
#
# The cache ($RBDCSI_ROOTFS_CACHE, default /var/cache/rbdcsi-rootfs) holds
# each suite once: what debootstrap made, and the test layer built over it.
# Callers that need more install it in a throwaway overlay, so a cached root
# never carries a project's packages by accident.
#
# run's environment:
#   ROOTFS_BINDS   space-separated SRC:DST[:ro] bind mounts into ROOT
#   ROOTFS_ENV     space-separated NAME=VALUE for CMD (its whole environment
#                  besides PATH, HOME, LANG)
#   ROOTFS_OVERLAY a directory: ROOT is mounted read-only as the lower layer
#                  of an overlay whose upper layer lives there, so ROOT itself
#                  is never written
#   ROOTFS_LAYERS  colon-separated read-only layers (uppermost first, such as
#                  `rootfs.sh dev SUITE`) stacked over ROOT; needs ROOTFS_OVERLAY
set -euo pipefail

readonly PROG=${0##*/}
HERE=$(cd "$(dirname "$0")" && pwd)
readonly HERE
readonly CACHE=${RBDCSI_ROOTFS_CACHE:-/var/cache/rbdcsi-rootfs}

# shellcheck source=scripts/lib.sh
source "$HERE/lib.sh"

# Packages this script needs on the host.
readonly ROOTFS_PACKAGES=(debootstrap)
# The test layer over a suite's runtime root: the Ceph daemons of
# scripts/ceph-cluster.sh and the tools it runs, librbd/librados headers
# with a C toolchain for go-ceph (Go itself is bound in from the host), and
# PyKMIP's server, which the kernel-test guests' node suite runs
# (TestEncryptedWithKMIP, through internal/kms/kmip/kmiptest).
readonly DEV_PACKAGES=(ceph-mon ceph-osd ceph-mgr ceph-base librbd-dev librados-dev gcc libc6-dev pkg-config
	iproute2 procps uuid-runtime python3-pykmip)
# The bench layer: fio, the load make bench-data puts on each data path in
# the kernel VM (scripts/bench-data.sh). A layer of its own, so that the
# test layer's key, and the roots other runs use, stay as they are.
readonly BENCH_PACKAGES=(fio)
# apt's options for a mirror that serves a snapshot of the archive, whose
# Release files are past their Valid-Until date (as on this machine).
# Retries: a mirror or resolver sometimes fails one fetch and answers the next.
readonly APT_OPTS=(-o Acquire::Check-Valid-Until=false -o Acquire::Check-Date=false -o Acquire::Retries=3)

# The Debian mirror apt already uses on this machine (DEBIAN_MIRROR wins).
debian_mirror() {
	local m=${DEBIAN_MIRROR:-}
	if [[ -z $m ]]; then
		m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
			awk '$1 == "deb" || $1 == "URIs:" {for (i = 2; i <= NF; i++) if ($i ~ /^https?:\/\/.*\/debian\/?$/) {print $i; exit}}') || true
	fi
	[[ -n $m ]] || die "no Debian mirror found in apt's sources; set DEBIAN_MIRROR"
	echo "$m"
}

# lock NAME: hold $CACHE/NAME.lock until this script exits, so that two
# callers (CI's background build and a test step, say) build a root once.
lock() {
	mkdir -p "$CACHE"
	exec {lockfd}>"$CACHE/$1.lock"
	flock -w 1800 "$lockfd" || die "could not take $CACHE/$1.lock"
}

# bootstrap NAME SUITE [PACKAGES]: debootstrap --variant=minbase (with the
# comma-separated PACKAGES) once into $CACHE/NAME; later calls reuse it while
# its recorded key matches. The root is made under a temporary name and
# renamed when complete, so an interrupted build is never mistaken for a
# finished one.
bootstrap() {
	local name=$1 suite=$2 pkgs=${3:-} dir script=() include=() mirror t0 key
	[[ $suite =~ ^[a-z]+$ ]] || die "bad suite name: $suite"
	dir=$CACHE/$name
	key="$suite minbase${pkgs:+ with $pkgs}"
	lock "$name"
	if [[ -f $dir/.rootfs-complete && $(head -1 "$dir/.rootfs-complete") == "$key" ]]; then
		echo "$dir"
		return
	fi
	need_packages "${ROOTFS_PACKAGES[@]}"
	mirror=$(debian_mirror)
	# debootstrap may lack a script for the newest suites: testing's is sid's.
	[[ -e /usr/share/debootstrap/scripts/$suite ]] || script=(/usr/share/debootstrap/scripts/sid)
	[[ -z $pkgs ]] || include=(--include="$pkgs")
	mkdir -p "$CACHE"
	rm -rf "$dir" "$dir.tmp"
	t0=$SECONDS
	log "debootstrap --variant=minbase $suite ($mirror)${pkgs:+ with $pkgs} into $dir"
	# Twice: a mirror sometimes fails one fetch ("Failed getting release
	# file") and answers the next.
	local try
	for try in 1 2; do
		debootstrap --variant=minbase "${include[@]}" "$suite" "$dir.tmp" "$mirror" "${script[@]}" >"$CACHE/$name-debootstrap.log" 2>&1 && break
		tail -5 "$CACHE/$name-debootstrap.log" >&2
		rm -rf "$dir.tmp"
		((try == 1)) || die "debootstrap $suite failed twice: see $CACHE/$name-debootstrap.log"
		log "debootstrap $suite failed; once more in 10 s"
		sleep 10
	done
	printf '%s\nfrom %s, %s\n' "$key" "$mirror" "$(date -u +%FT%TZ)" >"$dir.tmp/.rootfs-complete"
	mv "$dir.tmp" "$dir"
	log "$name built in $((SECONDS - t0)) s"
	echo "$dir"
}

# base SUITE: the untouched minbase root.
base() {
	bootstrap "$1-minbase" "$1"
}

# runtime SUITE: the root of build/Dockerfile's runtime stage, the image
# users run but for the plugin binary (scripts/image.sh runtime builds it
# with buildah), exported once per image: the kernel test's guests, the Ceph
# matrix and the test layer below run on what the image carries.
runtime() {
	local suite=$1 id dir key c mnt
	[[ $suite =~ ^[a-z]+$ ]] || die "bad suite name: $suite"
	id=$("$HERE/image.sh" runtime "$suite") || die "building the runtime stage of $suite failed"
	dir=$CACHE/$suite-runtime
	key="$suite image $id"
	lock "$suite-runtime"
	if [[ -f $dir/.rootfs-complete && $(head -1 "$dir/.rootfs-complete") == "$key" ]]; then
		echo "$dir"
		return
	fi
	rm -rf "$dir" "$dir.tmp"
	mkdir -p "$dir.tmp"
	c=$(buildah from --pull=never "localhost/rbdcsi/runtime:$suite")
	mnt=$(buildah mount "$c")
	cp -a "$mnt/." "$dir.tmp/"
	buildah umount "$c" >/dev/null
	buildah rm "$c" >/dev/null
	printf '%s\n%s\n' "$key" "$(date -u +%FT%TZ)" >"$dir.tmp/.rootfs-complete"
	mv "$dir.tmp" "$dir"
	log "$suite-runtime exported from image $id"
	echo "$dir"
}

# layer NAME SUITE PKG...: PKG installed by apt in an overlay over the
# runtime root; the overlay's upper directory, kept as $CACHE/SUITE-NAME,
# is the layer. It holds only what apt changed, so the suite is downloaded
# and unpacked once.
layer() {
	local name=$1 suite=$2 lower dir key t0
	shift 2
	lower=$(runtime "$suite")
	dir=$CACHE/$suite-$name
	key="over $(head -1 "$lower/.rootfs-complete"): $*"
	lock "$suite-$name"
	if [[ -f $dir/.rootfs-complete && $(head -1 "$dir/.rootfs-complete") == "$key" ]]; then
		echo "$dir"
		return
	fi
	rm -rf "$dir" "$dir.tmp"
	mkdir -p "$dir.tmp"
	t0=$SECONDS
	log "installing the $name layer of $suite into $dir: $*"
	# shellcheck disable=SC2016 # the inner shell expands them
	if ! ROOTFS_OVERLAY=$dir.tmp ROOTFS_ENV="DEBIAN_FRONTEND=noninteractive" "$HERE/rootfs.sh" run "$lower" /bin/sh -c '
		set -e
		# Three tries: the resolver here sometimes stops answering for a
		# while, and apt-get update then only warns.
		for try in 1 2 3; do
			if apt-get "$@" update -qq && apt-get "$@" install -y -qq --no-install-recommends '"$*"'; then
				break
			fi
			[ "$try" != 3 ] || exit 1
			echo "apt failed; once more in 30 s"
			sleep 30
		done
		apt-get clean
		rm -rf /var/lib/apt/lists/* /tmp/* /var/tmp/*
	' sh "${APT_OPTS[@]}" >"$CACHE/$suite-$name.log" 2>&1; then
		tail -5 "$CACHE/$suite-$name.log" >&2
		rm -rf "$dir.tmp"
		die "installing the $name layer of $suite failed: see $CACHE/$suite-$name.log"
	fi
	printf '%s\n%s\n' "$key" "$(date -u +%FT%TZ)" >"$dir.tmp/upper/.rootfs-complete"
	mv "$dir.tmp/upper" "$dir"
	rm -rf "$dir.tmp"
	log "$suite-$name built in $((SECONDS - t0)) s"
	echo "$dir"
}

# dev SUITE: the test layer (DEV_PACKAGES).
dev() { layer dev "$1" "${DEV_PACKAGES[@]}"; }

# bench SUITE: the bench layer (BENCH_PACKAGES).
bench() { layer bench "$1" "${BENCH_PACKAGES[@]}"; }

# run ROOT CMD...: the outer half. unshare gives CMD its own mount namespace
# (every mount below dies with it, never propagating to the host) and its own
# PID namespace (when CMD ends, the kernel kills whatever it left running).
run() {
	local root
	(($# >= 2)) || die "usage: $PROG run ROOT CMD..."
	root=$(realpath -e -- "$1") || die "no such root: $1"
	shift
	[[ $root != / ]] || die "refusing to chroot into /"
	[[ $(id -u) == 0 ]] || die "run needs root (namespaces, mounts, chroot)"
	# If unshare itself is killed, its child (PID 1 inside) gets SIGTERM and
	# cleans up; unshare ignores INT and TERM while it waits.
	exec unshare --mount --propagation private --pid --fork --kill-child=SIGTERM -- "$HERE/rootfs.sh" _inner "$root" "$@"
}

# _inner ROOT CMD...: PID 1 of the new PID namespace. Mounts what a Debian
# system expects, chroots and runs CMD. On the way out (CMD's end, or SIGTERM,
# which the outer run turns an interrupt into) it ends what CMD left: loop
# devices backed by files in the root (they are global: the kernel would keep
# them, and the files they hold open, after the namespace is gone), then every
# process. The mounts go with the namespace.
_inner() {
	local root=$1 b src dst mode rc=0
	shift
	TARGET=$root
	trap 'reap "$TARGET"' EXIT
	trap 'exit 143' TERM INT
	if [[ -n ${ROOTFS_LAYERS:-} && -z ${ROOTFS_OVERLAY:-} ]]; then
		die "ROOTFS_LAYERS needs ROOTFS_OVERLAY"
	fi
	local needed=("$root") layers=()
	[[ -z ${ROOTFS_OVERLAY:-} ]] || needed+=("$ROOTFS_OVERLAY")
	IFS=: read -ra layers <<<"${ROOTFS_LAYERS:-}"
	for b in ${ROOTFS_BINDS:-}; do needed+=("${b%%:*}"); done
	drop_inherited_mounts "${needed[@]}" "${layers[@]}"
	if [[ -n ${ROOTFS_OVERLAY:-} ]]; then
		mkdir -p "$ROOTFS_OVERLAY/upper" "$ROOTFS_OVERLAY/work" "$ROOTFS_OVERLAY/merged"
		mount -t overlay overlay -o "lowerdir=${ROOTFS_LAYERS:+$ROOTFS_LAYERS:}$root,upperdir=$ROOTFS_OVERLAY/upper,workdir=$ROOTFS_OVERLAY/work" \
			"$ROOTFS_OVERLAY/merged"
		TARGET=$ROOTFS_OVERLAY/merged
	fi
	mount -t proc proc "$TARGET/proc"
	mount --rbind /sys "$TARGET/sys"
	mount --rbind /dev "$TARGET/dev"
	mount -t tmpfs -o mode=0755 tmpfs "$TARGET/run"
	# Machine-wide locks of our scripts (the Ceph clusters' port choice).
	mkdir -p /run/rbdcsi "$TARGET/run/rbdcsi"
	mount --bind /run/rbdcsi "$TARGET/run/rbdcsi"
	for b in ${ROOTFS_BINDS:-}; do
		IFS=: read -r src dst mode <<<"$b"
		mkdir -p "$TARGET$dst"
		mount --bind "$src" "$TARGET$dst"
		[[ $mode != ro ]] || mount -o remount,bind,ro "$TARGET$dst"
	done
	# In the background and waited for, so a TERM reaches the trap at once.
	# shellcheck disable=SC2086 # ROOTFS_ENV is a list of NAME=VALUE words.
	env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 ${ROOTFS_ENV:-} \
		chroot "$TARGET" "$@" &
	wait $! || rc=$?
	return "$rc"
}

# drop_inherited_mounts PATH...: the new namespace began with a private copy
# of every mount the host had, and a copy keeps what it mounts busy: the
# FUSE mount or the loop device's filesystem of a run beside this one (make
# test, the e2e's node) would stay alive here after that run unmounts it,
# with its rbd-fuse and its loop device, until this chroot ends. Nothing
# here needs more than /, /proc, /sys, /dev and the mounts that hold the
# PATHs (the root, its layers and binds): every other mount is detached from
# this namespace (umount -l, which leaves the host's untouched).
#
# One umount for them all: until it has run, a run beside this one that
# unmounts a filesystem finds its device still held here (and a node's
# unstage answers "device busy"), so the window is kept to one exec.
drop_inherited_mounts() {
	local point p keep paths=() drop=()
	for p in "$@"; do paths+=("$(realpath -m -- "$p")"); done
	while read -r point; do
		point=$(printf '%b' "$point") # mountinfo escapes spaces as \040
		case $point in / | /proc | /proc/* | /sys | /sys/* | /dev | /dev/*) continue ;; esac
		keep=0
		for p in "${paths[@]}"; do
			[[ $p == "$point" || $p == "$point"/* ]] && keep=1 && break
		done
		((keep)) || drop+=("$point")
	done < <(awk '{print $5}' /proc/self/mountinfo | tac)
	((${#drop[@]} == 0)) || umount -l -- "${drop[@]}" 2>/dev/null || true
}

# reap ROOT: unmount the loop-device filesystems under ROOT and detach the
# loop devices whose backing file lies under ROOT (paths as this namespace
# sees them, so a host loop device is never touched), while the processes
# that serve those files (rbd-fuse) still run; then end every other process
# of this PID namespace.
reap() {
	local root=$1 dev back mnt
	while read -r dev mnt _; do
		[[ $dev == /dev/loop* && $mnt == "$root"/* ]] || continue
		log "unmounting $mnt ($dev), left inside the root"
		umount -l "$mnt" || true
	done < <(tac /proc/self/mounts)
	if command -v losetup >/dev/null; then
		while read -r dev back; do
			[[ $back == "$root"/* ]] || continue
			log "detaching $dev (backed by $back), left inside the root"
			losetup -d "$dev" || true
		done < <(losetup --list --noheadings --output NAME,BACK-FILE 2>/dev/null)
	fi
	kill -TERM -1 2>/dev/null || true
	# Give daemons a moment to stop cleanly; this shell is PID 1 here.
	local p others
	for _ in {1..10}; do
		others=0
		for p in "$root"/proc/[0-9]*; do [[ ${p##*/} == 1 ]] || others=1; done
		((others)) || break
		sleep 0.5
	done
	kill -KILL -1 2>/dev/null || true
}

# apart KEEP CMD...: CMD in a mount namespace of its own without the
# host's other mounts (drop_inherited_mounts). For what makes namespaces
# of its own and lives for minutes (buildah's chroot isolation runs each
# RUN step in a copy of its caller's mounts, kept for the step's length):
# started from here, they copy no test's filesystem, whose loop device a
# node's unstage would otherwise find busy until the step ends.
apart() {
	local keep=() p
	(($# >= 2)) || die "usage: $PROG apart KEEP CMD..."
	IFS=: read -ra keep <<<"$1"
	shift
	for p in "${keep[@]}"; do [[ $p == /* ]] || die "apart: $p is not an absolute path"; done
	exec unshare --mount --propagation private -- "$HERE/rootfs.sh" _apart "${keep[*]}" "$@"
}

case ${1:-} in
deps) need_packages "${ROOTFS_PACKAGES[@]}" ;;
apart)
	shift
	apart "$@"
	;;
_apart)
	# shellcheck disable=SC2086 # the kept paths, split again
	drop_inherited_mounts $2
	shift 2
	exec "$@"
	;;
base | runtime | dev | bench)
	(($# == 2)) || die "usage: $PROG $1 SUITE"
	"$1" "$2"
	;;
run)
	shift
	run "$@"
	;;
_inner)
	shift
	_inner "$@"
	;;
*)
	echo "usage: $PROG deps | base|runtime|dev|bench SUITE | run ROOT CMD... | apart KEEP CMD..." >&2
	exit 2
	;;
esac
