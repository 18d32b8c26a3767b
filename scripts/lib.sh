# shellcheck shell=bash
# lib.sh: what the scripts share. Source it after setting PROG:
#   source "$(dirname "$0")/lib.sh"
# It defines functions only; nothing runs when it is sourced.

log() { echo "$PROG: $*" >&2; }
die() {
	log "$*"
	exit 1
}

# need_packages PKG...: install (as root, from Debian's archive) those of
# PKG that dpkg does not list as installed. Each script names what it needs
# in a NAME_PACKAGES array, which `go run ./scripts/programs` reads.
need_packages() {
	local p missing=()
	for p in "$@"; do
		dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
	done
	((${#missing[@]})) || return 0
	[[ $(id -u) == 0 ]] || die "missing packages (${missing[*]}); run as root"
	log "installing: ${missing[*]}"
	apt-get update -qq -o Acquire::Retries=3
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o Acquire::Retries=3 --no-install-recommends "${missing[@]}" >/dev/null
}

# remove_work DIR KEEP: the end of a test's work directory. A directory
# that still holds a mount is left where it is (removing it would reach
# through the mount into what it shows); KEEP=1 keeps it for its logs.
remove_work() {
	local dir=$1 keep=$2
	if grep -q " ${dir}[/ ]" /proc/mounts; then
		log "mounts left under $dir; not removing it"
	elif [[ $keep == 1 ]]; then
		log "kept $dir"
	else
		rm -rf "$dir"
	fi
}

# wait_cluster DIR PID WHAT: wait until the test cluster that PID (a
# `scripts/suite.sh cluster ... DIR` in the background) brings up at DIR
# is up; if PID ends first or the boot takes two minutes, print its log and
# die. The boot starts when its log appears: before, the cluster waits for
# its suite's roots, which a cold machine may still be building
# (scripts/rootfs.sh, under its lock), for up to 30 minutes.
wait_cluster() {
	local dir=$1 pid=$2 what=$3 i=0
	while [[ ! -e $dir.log ]] && kill -0 "$pid" 2>/dev/null && ((i < 3600)); do
		sleep 0.5
		i=$((i + 1))
	done
	for ((i = 0; i < 240; i++)); do
		[[ -e $dir.up ]] && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.5
	done
	cat "$dir.log" >&2 || true
	die "$what did not come up"
}

# stop_cluster DIR PID: ask the cluster at DIR to go down, wait for PID,
# and remove the signal files, so that a next cluster at DIR starts clean.
stop_cluster() {
	touch "$1.stop"
	wait "$2" 2>/dev/null || true
	rm -f "$1.up" "$1.stop"
}
