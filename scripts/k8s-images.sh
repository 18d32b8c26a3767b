# shellcheck shell=bash
# k8s-images.sh: packing OCI images without a Docker engine or a registry,
# for scripts/k8s-build.sh, which sources it (it needs BIN, CACHE, die and
# log): crane and a throwaway in-memory registry, images of one layer or of
# one static binary, a busybox root.

crane() { "$BIN/crane" "$@"; }

# crane's append and mutate read their base image from a registry, never
# from a tarball: a throwaway in-memory registry (`crane registry serve`) on
# 127.0.0.1 holds the intermediate images while this script runs. It is
# started on first use and stopped on exit.
REGISTRY=""
REGISTRY_PID=""
start_registry() {
	[[ -z $REGISTRY ]] || return 0
	local i port=""
	mkdir -p "$CACHE/tmp"
	: >"$CACHE/tmp/registry.log"
	"$BIN/crane" registry serve --address 127.0.0.1:0 >"$CACHE/tmp/registry.log" 2>&1 &
	REGISTRY_PID=$!
	trap stop_registry EXIT
	for ((i = 0; i < 100; i++)); do
		port=$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "$CACHE/tmp/registry.log")
		[[ -n $port ]] && break
		sleep 0.1
	done
	[[ -n $port ]] || die "crane registry did not start: $(cat "$CACHE/tmp/registry.log")"
	REGISTRY=127.0.0.1:$port
}
stop_registry() {
	if [[ -n $REGISTRY_PID ]]; then
		kill "$REGISTRY_PID" 2>/dev/null || true
		wait "$REGISTRY_PID" 2>/dev/null || true
		REGISTRY_PID=""
	fi
}

# pack_image REF OUT.tar ENTRYPOINT ENV LAYER.tar...: an image of the given
# layers (no base), for linux/amd64, saved as a tarball named REF that
# `ctr images import` reads. PACK_USER, when set, is the image's user
# (uid:gid).
pack_image() {
	local ref=$1 out=$2 ep=$3 env=$4 tmp args=()
	shift 4
	start_registry
	tmp="$REGISTRY/rbdcsi-e2e/tmp:$(basename "$out" .tar)"
	for l in "$@"; do args+=(--new_layer "$l"); done
	crane append --oci-empty-base "${args[@]}" --new_tag "$tmp" >/dev/null 2>>"$CACHE/tmp/registry.log" ||
		die "crane append for $ref failed: $(tail -n 3 "$CACHE/tmp/registry.log")"
	args=(--set-platform linux/amd64 --entrypoint "$ep")
	[[ -z $env ]] || args+=(--env "$env")
	[[ -z ${PACK_USER:-} ]] || args+=(--user "$PACK_USER")
	crane mutate "${args[@]}" --tag "$ref" --output "$out.tmp" "$tmp" >/dev/null 2>>"$CACHE/tmp/registry.log" ||
		die "crane mutate for $ref failed: $(tail -n 3 "$CACHE/tmp/registry.log")"
	mv "$out.tmp" "$out"
}

# image_from_dir REF DIR OUT.tar ENTRYPOINT: an image of one layer, the
# content of DIR owned by root.
image_from_dir() {
	local ref=$1 dir=$2 out=$3 ep=$4
	tar --numeric-owner --owner=0 --group=0 -C "$dir" -cf "$dir.layer.tar" .
	pack_image "$ref" "$out" "$ep" "" "$dir.layer.tar"
	rm -f "$dir.layer.tar"
}

# static_image NAME REF BINARY [PATH [USER]]: an image of one static
# binary at PATH (default /NAME), its entrypoint, run as USER (uid:gid;
# default: the image names none, root).
static_image() {
	local name=$1 ref=$2 src=$3 path=${4:-/$1} user=${5:-} key dir
	key="$ref $(sha256sum "$src" | cut -c1-16) $path $user"
	# (The key of an image at /NAME as root is what it was before PATH and
	# USER were added: those images stay cached.)
	[[ $path != "/$name" || -n $user ]] || key="$ref $(sha256sum "$src" | cut -c1-16)"
	fresh "image-$name" "$key" "$IMAGES/$name.tar" && return
	dir=$(mktemp -d)
	install -D -m 0755 "$src" "$dir$path"
	PACK_USER=$user image_from_dir "$ref" "$dir" "$IMAGES/$name.tar" "$path"
	rm -rf "$dir"
	stamp "image-$name" "$key"
}

# busybox_root DIR: Debian's busybox-static with its applet links, and a
# root user, in DIR.
busybox_root() {
	local dir=$1 c
	[[ -x /bin/busybox ]] || die "busybox-static is not installed"
	mkdir -p "$dir/bin" "$dir/tmp" "$dir/etc"
	cp /bin/busybox "$dir/bin/busybox"
	for c in $(/bin/busybox --list); do [[ $c == busybox ]] || ln -s busybox "$dir/bin/$c"; done
	echo 'root:x:0:0:root:/root:/bin/sh' >"$dir/etc/passwd"
	echo 'root:x:0:' >"$dir/etc/group"
}
