#!/usr/bin/env bash
# image.sh (make image): builds build/Dockerfile with buildah, without a
# Docker engine or a registry, into an OCI archive.
#
#   image.sh deps                     install buildah
#   image.sh bases SUITE              the base images build/Dockerfile names, made here
#   image.sh runtime SUITE            build the Dockerfile's runtime stage; print its image ID
#   image.sh build SUITE OUT.tar REF  build the whole image, tagged REF, into the OCI archive OUT.tar
#   image.sh gocache SUITE            print (and make) the Go build cache the Dockerfile's
#                                     build stage keeps for SUITE (scripts/suite.sh shares it)
#
# No registry is reachable from our machines, so the images the Dockerfile
# starts FROM are made locally and given to buildah under the names the
# Dockerfile uses: debian:SUITE and debian:SUITE-slim are Debian's minbase
# root of SUITE (scripts/rootfs.sh base, debootstrap from Debian's archive;
# one image under both names), and golang:GO-SUITE holds this machine's Go
# toolchain at /usr/local/go, the only thing the Dockerfile takes from it.
# The Dockerfile itself stays an ordinary one: `docker build` builds it on
# any machine that reaches Docker Hub.
#
# buildah keeps its images and layer cache in /var/lib/containers/storage,
# and the Dockerfile's cache mounts (the Go module and build caches) under
# /var/tmp/buildah-cache, one directory per mount id; unchanged steps are not
# run again (--layers).
# Environment: VERSION and COMMIT (build arguments, default: git describe
# and the commit), IMAGE_LOG (build output, default: a file beside OUT).
set -euo pipefail

readonly PROG=${0##*/}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
readonly ROOT
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"

readonly BUILD_PACKAGES=(buildah)
readonly DOCKERFILE=$ROOT/build/Dockerfile
# Where buildah (Debian 12's, 1.28) keeps the cache mounts.
readonly BUILDAH_CACHE=/var/tmp/buildah-cache
GO_TAG=$(sed -n 's/^ARG GO_VERSION=//p' "$DOCKERFILE")
readonly GO_TAG

suite_ok() { [[ $1 =~ ^[a-z]+$ ]] || die "bad suite name: $1"; }

# import_dir REF DIR: an image of one layer, DIR's content, named REF.
import_dir() {
	local ref=$1 dir=$2 c layer
	layer=$(mktemp "${TMPDIR:-/tmp}/rbdcsi-image-layer.XXXXXX.tar")
	tar --numeric-owner -C "$dir" --exclude=./.rootfs-complete -cf "$layer" .
	c=$(buildah from scratch)
	buildah add --quiet "$c" "$layer" / >/dev/null
	rm -f "$layer"
	buildah config --os linux --arch amd64 "$c"
	buildah commit --quiet --rm "$c" "$ref" >/dev/null
}

# stamped REF KEY: whether image REF exists and was made from KEY.
stamped() {
	[[ $(buildah inspect --type image --format '{{index .ImageAnnotations "dev.rbdcsi.source"}}' "$1" 2>/dev/null) == "$2" ]]
}

# bases SUITE: debian:SUITE, debian:SUITE-slim and golang:GO-SUITE.
bases() {
	local suite=$1 root key dir c
	suite_ok "$suite"
	root=$("$ROOT/scripts/rootfs.sh" base "$suite")
	key="$(head -1 "$root/.rootfs-complete") $(sed -n 2p "$root/.rootfs-complete") valid-until-off"
	if ! stamped "docker.io/library/debian:$suite" "$key"; then
		log "debian:$suite from $root"
		import_dir "docker.io/library/debian:$suite" "$root"
		c=$(buildah from --pull=never "docker.io/library/debian:$suite")
		# The mirror here serves a snapshot of the archive: testing's
		# Release files are past their Valid-Until, which the Dockerfile's
		# apt-get update refuses. The local base accepts them, as
		# scripts/rootfs.sh does; the live archive needs no such setting.
		apart buildah run --isolation chroot "$c" -- sh -c \
			'echo "Acquire::Check-Valid-Until \"false\";" >/etc/apt/apt.conf.d/99rbdcsi-snapshot-mirror'
		buildah config --annotation "dev.rbdcsi.source=$key" --cmd /bin/bash "$c"
		buildah commit --quiet --rm "$c" "docker.io/library/debian:$suite" >/dev/null
	fi
	buildah tag "docker.io/library/debian:$suite" "docker.io/library/debian:$suite-slim"
	key="$(go env GOROOT) $(go env GOVERSION)"
	if ! stamped "docker.io/library/golang:$GO_TAG-$suite" "$key"; then
		log "golang:$GO_TAG-$suite from $(go env GOROOT) ($(go env GOVERSION))"
		dir=$(mktemp -d)
		mkdir -p "$dir/usr/local"
		cp -a "$(go env GOROOT)" "$dir/usr/local/go"
		import_dir "docker.io/library/golang:$GO_TAG-$suite" "$dir"
		rm -rf "$dir"
		c=$(buildah from --pull=never "docker.io/library/golang:$GO_TAG-$suite")
		buildah config --annotation "dev.rbdcsi.source=$key" --env PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$c"
		buildah commit --quiet --rm "$c" "docker.io/library/golang:$GO_TAG-$suite" >/dev/null
	fi
}

# apart CMD...: CMD without the host's other mounts (scripts/rootfs.sh
# apart): buildah's RUN steps then hold no test's filesystem while they
# run. What buildah needs stays: its storage, its run root, the build's
# cache mounts, the context and the temporary files.
apart() {
	"$ROOT/scripts/rootfs.sh" apart "/var/lib/containers:/run:/var/tmp:/tmp:$ROOT:$BUILDAH_CACHE" "$@"
}

# bud SUITE ARGS...: buildah bud of the Dockerfile for SUITE, offline.
bud() {
	local suite=$1 ca=()
	shift
	# This machine's CA bundle, for the Go module download (the Dockerfile
	# says why): it may hold a TLS-intercepting proxy's CA.
	[[ ! -s /etc/ssl/certs/ca-certificates.crt ]] || ca=(--secret "id=ca-certificates,src=/etc/ssl/certs/ca-certificates.crt")
	# Twice: apt inside a step fails whole when the resolver here stops
	# answering for a while, which a later try outlives; finished steps are
	# not run again (--layers).
	local try
	for try in 1 2; do
		apart buildah bud --isolation chroot --pull=never --layers --format oci "${ca[@]}" \
			--build-arg "DEBIAN_SUITE=$suite" -f "$DOCKERFILE" "$@" "$ROOT" && return 0
		((try == 2)) || { echo "image.sh: the build failed; once more in 30 s" && sleep 30; }
	done
	return 1
}

# runtime SUITE: the runtime stage alone (the base of the kernel test's and
# the Ceph matrix's roots); prints its image ID.
runtime() {
	local suite=$1 log
	suite_ok "$suite"
	bases "$suite"
	log=$(mktemp)
	if ! bud "$suite" --target runtime -t "localhost/rbdcsi/runtime:$suite" >"$log" 2>&1; then
		tail -20 "$log" >&2
		rm -f "$log"
		die "building the runtime stage for $suite failed"
	fi
	rm -f "$log"
	buildah inspect --type image --format '{{.FromImageID}}' "localhost/rbdcsi/runtime:$suite"
}

# build SUITE OUT REF: the image, tagged REF, as an OCI archive at OUT
# (written again only when the image changed).
build() {
	local suite=$1 out=$2 ref=$3 version commit id log t0=$SECONDS
	suite_ok "$suite"
	bases "$suite"
	version=${VERSION:-$(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo dev)}
	commit=${COMMIT:-$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)}
	log=${IMAGE_LOG:-$out.log}
	mkdir -p "$(dirname "$out")"
	if ! bud "$suite" --build-arg "VERSION=$version" --build-arg "COMMIT=$commit" -t "$ref" >"$log" 2>&1; then
		tail -30 "$log" >&2
		die "building $ref failed (log: $log)"
	fi
	id=$(buildah inspect --type image --format '{{.FromImageID}}' "$ref")
	if [[ -f $out && $(cat "$out.id" 2>/dev/null) == "$id" ]]; then
		log "$ref: unchanged ($id), $out kept"
		return
	fi
	rm -f "$out" "$out.id"
	buildah push --quiet "$ref" "oci-archive:$out.tmp:$ref" >/dev/null
	mv "$out.tmp" "$out"
	echo "$id" >"$out.id"
	log "$ref ($suite, $version) in $out, $((SECONDS - t0)) s"
}

# gocache SUITE: the directory of the Dockerfile's cache mount
# rbdcsi-gobuild-SUITE.
gocache() {
	suite_ok "$1"
	mkdir -p "$BUILDAH_CACHE/rbdcsi-gobuild-$1"
	echo "$BUILDAH_CACHE/rbdcsi-gobuild-$1"
}

case ${1:-} in
deps) need_packages "${BUILD_PACKAGES[@]}" ;;
gocache)
	(($# == 2)) || die "usage: $PROG gocache SUITE"
	gocache "$2"
	;;
bases)
	(($# == 2)) || die "usage: $PROG bases SUITE"
	need_packages "${BUILD_PACKAGES[@]}"
	bases "$2"
	;;
runtime)
	(($# == 2)) || die "usage: $PROG runtime SUITE"
	need_packages "${BUILD_PACKAGES[@]}"
	runtime "$2"
	;;
build)
	(($# == 4)) || die "usage: $PROG build SUITE OUT.tar REF"
	need_packages "${BUILD_PACKAGES[@]}"
	build "$2" "$3" "$4"
	;;
*) die "usage: $PROG deps | bases SUITE | runtime SUITE | build SUITE OUT.tar REF | gocache SUITE" ;;
esac
