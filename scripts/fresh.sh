#!/usr/bin/env bash
# fresh.sh (make fresh): proves that `make demo` works on a Debian 12 machine
# that has nothing installed but Go and make, as a new user would try it.
#
# A clean `git clone` of the current commit goes into a throwaway overlay on
# Debian 12's untouched minbase root (scripts/rootfs.sh base bookworm, cached
# outside the repository); only the Go toolchain is bind-mounted from the
# host. There, as root in a chroot inside private mount and PID namespaces,
# it installs make (the one thing `make` cannot install itself) and runs
# `make demo`. Whatever `make deps` installs lives in the overlay and is
# thrown away, so a package missing from DEB_PACKAGES fails every time.
# Everything is torn down, also on failure or interrupt.
#
# Environment: FRESH_KEEP=1 keeps the work directory (its log and overlay).
set -euo pipefail

readonly PROG=${0##*/}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
readonly ROOT
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"

[[ $(id -u) == 0 ]] || die "run as root (debootstrap, namespaces, chroot)"
commit=$(git -C "$ROOT" rev-parse HEAD)
[[ -z $(git -C "$ROOT" status --porcelain --untracked-files=no) ]] ||
	log "note: uncommitted changes are not part of this check; it runs commit ${commit:0:12}"
goroot=$(go env GOROOT)

t0=$SECONDS
base=$("$ROOT/scripts/rootfs.sh" base bookworm)

# On disk, not in /tmp: the overlay's upper layer holds the packages, the Go
# module cache and the build cache (about 2 GB).
work=$(mktemp -d /var/tmp/rbdcsi-fresh.XXXXXX)
pid=
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	((rc != 130 && rc != 143)) || log "interrupted: tearing down"
	if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
		# unshare ignores INT and TERM; killing it sends TERM to PID 1 of the
		# namespace (--kill-child), which ends what the demo left and exits.
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	# The namespace's init may outlive unshare for its cleanup: wait for it.
	for _ in {1..60}; do
		pgrep -f "rootfs.sh _inner $base" >/dev/null || break
		sleep 0.5
	done
	remove_work "$work" "${FRESH_KEEP:-0}"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

upper=$work/overlay/upper
mkdir -p "$upper/root" "$upper/etc/apt/sources.list.d" "$upper/etc/apt/apt.conf.d"
git clone -q --no-hardlinks "$ROOT" "$upper/root/rbdcsi"
git -C "$upper/root/rbdcsi" checkout -q --detach "$commit"
# What this machine is, not what we installed: its DNS, its Debian archive
# (not third-party sources) and apt's settings for it (a snapshot archive
# needs Check-Valid-Until off).
cp /etc/resolv.conf "$upper/etc/resolv.conf"
copied=0
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*; do
	if [[ -f $f ]] && grep -qE '^[^#]*https?://[^ ]*/debian(-security)?/?( |$)' "$f"; then
		cp "$f" "$upper$f"
	else
		continue
	fi
	copied=1
done
# The machine's sources replace the one line debootstrap wrote.
((copied == 0)) || [[ -f $upper/etc/apt/sources.list ]] ||
	echo "# see sources.list.d (the machine's own sources)" >"$upper/etc/apt/sources.list"
# Trust anchors of this machine's own (an egress proxy's CA, say): the
# ca-certificates package, once `make deps` installs it, adds them.
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
	mkdir -p "$upper/usr/local/share/ca-certificates"
	cp /usr/local/share/ca-certificates/*.crt "$upper/usr/local/share/ca-certificates/"
fi
for f in /etc/apt/apt.conf.d/*; do
	grep -q '^Acquire::' "$f" 2>/dev/null && cp "$f" "$upper$f"
done

log "make demo in a fresh Debian 12 root (commit ${commit:0:12}; log: $work/fresh.log)"
# shellcheck disable=SC2016 # the script expands its variables in the chroot
ROOTFS_OVERLAY=$work/overlay ROOTFS_BINDS="$goroot:/usr/local/go:ro" \
	ROOTFS_ENV="PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
	"$ROOT/scripts/rootfs.sh" run "$base" /bin/bash -c '
		set -e
		cd /root/rbdcsi
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends make >/dev/null
		rc=0
		make demo || rc=$?
		# Every program of scripts/programs.txt that make deps installs is
		# there; run after a failed demo too, to name what is missing.
		go run ./scripts/programs installed deps || rc=1
		exit $rc
	' >"$work/fresh.log" 2>&1 &
pid=$!
rc=0
wait "$pid" || rc=$?
pid=
if ((rc != 0)); then
	tail -15 "$work/fresh.log" >&2
	log "what went wrong, from the log:"
	grep -E '^[a-z0-9-]+\.sh: |missing in a fresh root|command not found|executable file not found' "$work/fresh.log" |
		sort -u | head -20 >&2 || true
	die "make demo failed on a fresh Debian 12 root after $((SECONDS - t0)) s: a fresh machine lacks something that \`make deps\` (DEB_PACKAGES in the Makefile) should install"
fi
log "make demo passed on a fresh Debian 12 root in $((SECONDS - t0)) s"
