#!/usr/bin/env bash
# k8s-build.sh: builds (or reuses from the cache) everything the Kubernetes
# end-to-end test needs, from Go modules and Debian packages only (no
# container registry, no Docker engine):
#
#   - Kubernetes v1.37.1: kube-apiserver, kube-controller-manager,
#     kube-scheduler, kubelet, kube-proxy, kubectl (a scratch module, since
#     k8s.io/kubernetes cannot be `go install`ed: it replaces its staging repos)
#   - the kubernetes-csi sidecars: csi-provisioner v6.3.0, csi-attacher
#     v4.13.0, csi-resizer v2.3.0, csi-snapshotter and snapshot-controller
#     v8.7.0, csi-snapshot-metadata v1.1.0 (all but the provisioner and
#     csi-snapshot-metadata in one Go workspace with Kubernetes, so what
#     they share compiles once); the
#     VolumeSnapshot CRDs of external-snapshotter's client module and the
#     SnapshotMetadataService CRD of external-snapshot-metadata's
#   - the csi-addons controller (csi-addons-manager) and sidecar
#     (csi-addons-sidecar) of kubernetes-csi-addons v0.13.0, and that
#     release's install files (CRDs, RBAC, the controller's Deployment)
#   - crane (go-containerregistry) to pack OCI images
#   - helm v4.3.1 (helm.sh/helm/v4), for the chart's tests and the Helm e2e
#   - OCI image tarballs that the node imports at boot: pause (sandbox),
#     busybox (test pods, Debian's busybox-static), one per sidecar and the
#     csi-addons controller (static binary, no base). Not the plugin's: the
#     e2e runs the images of a release it makes (scripts/release.sh:
#     build/Dockerfile, both suites).
#
#   k8s-build.sh [all|cache|deps|kube|sidecars|csi-addons|tools|helm|images|backuptool]
#                (default: all; cache is all: nothing there depends on the
#                commit; backuptool, the e2e's backup tool, does)
#
# Everything lands in $RBDCSI_E2E_CACHE (default /var/cache/rbdcsi-e2e),
# outside the repository; a second run finds it all cached. Each artefact
# has a stamp recording what it was built from.
set -euo pipefail

readonly PROG=${0##*/}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
readonly ROOT
CACHE=${RBDCSI_E2E_CACHE:-/var/cache/rbdcsi-e2e}
readonly CACHE
readonly BIN=$CACHE/bin IMAGES=$CACHE/images SRC=$CACHE/src

readonly KUBE_VERSION=v1.37.1
readonly STAGING_VERSION=v0.37.1
readonly PROVISIONER_VERSION=v6.3.0
readonly ATTACHER_VERSION=v4.13.0
readonly RESIZER_VERSION=v2.3.0
readonly SNAPSHOTTER_VERSION=v8.7.0
readonly SNAPSHOT_METADATA_VERSION=v1.1.0
# The SnapshotMetadataService API of that release: its own module (the
# release's go.mod takes it from the repository), of which the proxy
# serves v1.0.0 and v0.1.0.
readonly SNAPSHOT_METADATA_CLIENT_VERSION=v1.0.0
# The csi-addons controller and sidecar (kubernetes-csi-addons), and its
# CRDs: ReclaimSpaceJob, NetworkFence, VolumeReplication, CSIAddonsNode, ...
readonly CSI_ADDONS_VERSION=v0.13.0
readonly CSI_ADDONS_MODULE=github.com/csi-addons/kubernetes-csi-addons
readonly CRANE_VERSION=v0.22.1
readonly HELM_VERSION=v4.3.1
# Image references. The sidecars and busybox carry the names deploy/,
# the chart, deploy/examples and docs/install.md use, so that what a user
# applies runs here unchanged (imagePullPolicy IfNotPresent finds them
# imported): each sidecar is built from that release's source; busybox is
# Debian's busybox-static, all the examples' and the guide's pods need
# (sh, sleep, cat, grep, sync). The sandbox image is containerd's own
# setting (scripts/k8s-node-files.sh).
readonly PAUSE_IMAGE=localhost/rbdcsi-e2e/pause:3.10
readonly BUSYBOX_IMAGE=registry.k8s.io/e2e-test-images/busybox:1.36.1-1

# The Go builds here are not the plugin's: no pacific tag, static binaries.
export GOFLAGS="-buildvcs=false -trimpath" CGO_ENABLED=0 GOTOOLCHAIN=local

# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
now() { date +%s; }

# stamp NAME KEY: true if $BIN/.NAME.stamp records KEY (and the outputs exist).
fresh() {
	local f
	[[ -f $CACHE/stamps/$1 && $(<"$CACHE/stamps/$1") == "$2" ]] || return 1
	shift 2
	for f in "$@"; do [[ -e $f ]] || return 1; done
}
stamp() {
	mkdir -p "$CACHE/stamps"
	echo "$2" >"$CACHE/stamps/$1"
}

# moddir MOD@VER: the module's directory in the module cache (downloads it).
moddir() {
	local out
	out=$(cd "$CACHE" && go mod download -json "$1") || die "go mod download $1 failed: $out"
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$out"
}

# --- host packages ---------------------------------------------------------------

# What the node needs beyond `make deps`: etcd, containerd + runc, CNI
# plugins, iptables/conntrack (kube-proxy), busybox-static (the test pods'
# image), openssl and curl, binutils (strip).
readonly E2E_PACKAGES=(etcd-server containerd runc containernetworking-plugins iptables conntrack
	busybox-static openssl curl binutils)

# --- Kubernetes and the sidecars ----------------------------------------------

readonly KUBE_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

# The sidecars built in the workspace below: NAME MODULE VERSION CMD...
readonly WS_SIDECARS=(
	"external-attacher github.com/kubernetes-csi/external-attacher/v4 $ATTACHER_VERSION csi-attacher"
	"external-resizer github.com/kubernetes-csi/external-resizer/v2 $RESIZER_VERSION csi-resizer"
	"external-snapshotter github.com/kubernetes-csi/external-snapshotter/v8 $SNAPSHOTTER_VERSION csi-snapshotter snapshot-controller"
)

# workspace: Kubernetes' scratch module (k8s.io/kubernetes cannot be `go
# install`ed: it replaces its staging repositories) and the sidecars'
# modules side by side in one Go workspace (go.work), so that they have one
# build list and the packages they share (k8s.io/api, client-go,
# apimachinery, grpc, ...) compile once, not once per tool. The staging
# modules are those of Kubernetes' own release, which the sidecars here were
# released against or one patch below. The provisioner's release needs
# client-go v0.36 (its informers do not build with v0.37): it builds in its
# own module (build_sidecar). Made once per set of versions, under a lock:
# the background build and a test step may both want it.
workspace() {
	local key ws=$SRC/ws kdir spec name mod version lock
	key="workspace kubernetes $KUBE_VERSION ${WS_SIDECARS[*]} $(go env GOVERSION)"
	mkdir -p "$CACHE"
	exec {lock}>"$CACHE/.workspace.lock"
	flock "$lock"
	if [[ -f $ws/.key && $(<"$ws/.key") == "$key" ]]; then
		exec {lock}>&-
		return
	fi
	rm -rf "$ws"
	mkdir -p "$ws/kubernetes"
	kdir=$(moddir "k8s.io/kubernetes@$KUBE_VERSION")
	{
		echo "module rbdcsi.local/kubernetes-build"
		echo
		echo "go $(sed -n 's/^go //p' "$kdir/go.mod")"
		echo
		echo "require k8s.io/kubernetes $KUBE_VERSION"
		echo
		# Each of k8s.io/kubernetes' ./staging replaces, pointed at the
		# published staging module of the same release.
		sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#replace \1 => \1 '"$STAGING_VERSION"'#p' "$kdir/go.mod"
	} >"$ws/kubernetes/go.mod"
	(($(grep -c '^replace' "$ws/kubernetes/go.mod") >= 30)) || die "found too few staging replaces in $kdir/go.mod"
	{
		echo "//go:build tools"
		echo
		echo "package tools"
		echo
		echo "import ("
		for c in "${KUBE_CMDS[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/$c\""; done
		echo ")"
	} >"$ws/kubernetes/tools.go"
	(cd "$ws/kubernetes" && GOWORK=off go mod tidy) || die "go mod tidy of the Kubernetes scratch module failed"
	{
		echo "go $(go env GOVERSION | sed 's/^go//')"
		echo
		echo "use ./kubernetes"
		for spec in "${WS_SIDECARS[@]}"; do
			read -r name mod version _ <<<"$spec"
			# Out of the module cache (read-only there) into the workspace.
			cp -r "$(moddir "$mod@$version")" "$ws/$name"
			chmod -R u+w "$ws/$name"
			echo "use ./$name"
		done
		echo
		# The staging modules of the release, for every member; and the
		# snapshotter's client, which its go.mod takes from the repository.
		grep '^replace' "$ws/kubernetes/go.mod"
		echo "replace github.com/kubernetes-csi/external-snapshotter/client/v8 => github.com/kubernetes-csi/external-snapshotter/client/v8 $SNAPSHOTTER_VERSION"
	} >"$ws/go.work"
	(cd "$ws" && go work sync) || die "go work sync in $ws failed"
	echo "$key" >"$ws/.key"
	exec {lock}>&-
}

# ws_build OUT PKG LDFLAGS: one command of the workspace.
ws_build() {
	rm -f "$1.tmp"
	(cd "$SRC/ws" && go build -ldflags "$3" -o "$1.tmp" "$2") || die "building $2 failed"
	mv "$1.tmp" "$1"
}

build_kube() {
	local key t0 c outs=()
	# What it is built from, not how: binaries of the same release and Go
	# built before the workspace are kept.
	key="kubernetes $KUBE_VERSION $(go env GOVERSION)"
	for c in "${KUBE_CMDS[@]}"; do outs+=("$BIN/$c"); done
	if fresh kubernetes "$key" "${outs[@]}"; then
		log "Kubernetes $KUBE_VERSION: cached"
		return
	fi
	t0=$(now)
	workspace
	mkdir -p "$BIN"
	local ver="k8s.io/component-base/version" ld
	ld="-s -w -X $ver.gitVersion=$KUBE_VERSION -X $ver.gitMajor=1 -X $ver.gitMinor=37 -X $ver.gitTreeState=clean"
	ld+=" -X $ver.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
	ld+=" -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION"
	for c in "${KUBE_CMDS[@]}"; do
		log "building $c $KUBE_VERSION"
		ws_build "$BIN/$c" "k8s.io/kubernetes/cmd/$c" "$ld"
	done
	stamp kubernetes "$key"
	log "Kubernetes $KUBE_VERSION built in $(($(now) - t0)) s"
}

# build_ws_sidecar NAME MOD VERSION CMD...: a sidecar of the workspace.
build_ws_sidecar() {
	local name=$1 mod=$2 version=$3 key t0 c outs=()
	shift 3
	key="$mod@$version $(go env GOVERSION)"
	for c in "$@"; do outs+=("$BIN/$c"); done
	if fresh "$name" "$key" "${outs[@]}"; then
		log "$name $version: cached"
		return
	fi
	t0=$(now)
	workspace
	mkdir -p "$BIN"
	for c in "$@"; do
		log "building $c $version"
		ws_build "$BIN/$c" "$mod/cmd/$c" "-s -w -X main.version=$version"
	done
	stamp "$name" "$key"
	log "$name $version built in $(($(now) - t0)) s"
}

# build_sidecar NAME MOD VERSION CMD...: a sidecar in a module of its own:
# copy the module out of the module cache (its replace directives rule out
# `go install`) and build its cmds. SIDECAR_REPLACE, when set, is one more
# `go mod edit -replace` of the copy.
build_sidecar() {
	local name=$1 mod=$2 version=$3 t0 dir c outs=() ld
	shift 3
	for c in "$@"; do outs+=("$BIN/$c"); done
	if fresh "$name" "$mod@$version $(go env GOVERSION)" "${outs[@]}"; then
		log "$name $version: cached"
		return
	fi
	t0=$(now)
	dir=$SRC/$name
	rm -rf "$dir"
	mkdir -p "$SRC" "$BIN"
	cp -r "$(moddir "$mod@$version")" "$dir"
	chmod -R u+w "$dir"
	if [[ -n ${SIDECAR_REPLACE:-} ]]; then
		(cd "$dir" && GOWORK=off go mod edit -replace "$SIDECAR_REPLACE") || die "go mod edit -replace $SIDECAR_REPLACE failed"
	fi
	ld="-s -w -X main.version=$version"
	for c in "$@"; do
		log "building $c $version"
		rm -f "$BIN/$c.tmp"
		(cd "$dir" && GOWORK=off go build -mod=mod -ldflags "$ld" -o "$BIN/$c.tmp" "./cmd/$c") || die "building $c failed"
		mv "$BIN/$c.tmp" "$BIN/$c"
	done
	rm -rf "$dir"
	stamp "$name" "$mod@$version $(go env GOVERSION)"
	log "$name $version built in $(($(now) - t0)) s"
}

build_sidecars() {
	local spec name mod version cmds
	build_sidecar external-provisioner github.com/kubernetes-csi/external-provisioner/v6 "$PROVISIONER_VERSION" csi-provisioner
	# Its own module too: built beside the workspace's newer csi-test, its
	# runtime package (a test harness outside _test files) does not compile.
	# Its go.mod takes the API module from the repository (./client, which
	# the module's zip leaves out): the proxy's release of it instead.
	SIDECAR_REPLACE=github.com/kubernetes-csi/external-snapshot-metadata/client=github.com/kubernetes-csi/external-snapshot-metadata/client@$SNAPSHOT_METADATA_CLIENT_VERSION \
		build_sidecar external-snapshot-metadata github.com/kubernetes-csi/external-snapshot-metadata "$SNAPSHOT_METADATA_VERSION" csi-snapshot-metadata
	for spec in "${WS_SIDECARS[@]}"; do
		read -r name mod version cmds <<<"$spec"
		# shellcheck disable=SC2086 # cmds is a list of words
		build_ws_sidecar "$name" "$mod" "$version" $cmds
	done
	# The VolumeSnapshot CRDs (and their kustomization) from the client module.
	local crd
	crd=$(moddir "github.com/kubernetes-csi/external-snapshotter/client/v8@$SNAPSHOTTER_VERSION")/config/crd
	rm -rf "$CACHE/crds"
	mkdir -p "$CACHE/crds"
	cp "$crd"/*.yaml "$CACHE/crds/"
	chmod -R u+w "$CACHE/crds"
	# The SnapshotMetadataService CRD, which changed-block tracking needs.
	crd=$(moddir "github.com/kubernetes-csi/external-snapshot-metadata/client@$SNAPSHOT_METADATA_CLIENT_VERSION")/config/crd
	rm -rf "$CACHE/crds-cbt"
	mkdir -p "$CACHE/crds-cbt"
	cp "$crd"/cbt.storage.k8s.io_snapshotmetadataservices.yaml "$CACHE/crds-cbt/"
	chmod -R u+w "$CACHE/crds-cbt"
}

# build_csi_addons: the csi-addons manager (the controller) and sidecar
# from their module (no replace directives, but neither is under a path
# `go install` names as the release does), as the release's Makefile builds
# them; and the release's install files from the module's deploy/controller
# (crds.yaml, rbac.yaml, setup-controller.yaml, csi-addons-config.yaml: what
# its release page publishes, and what docs/install.md applies) into
# $CACHE/csi-addons.
build_csi_addons() {
	local key t0 dir ld c
	key="$CSI_ADDONS_MODULE@$CSI_ADDONS_VERSION $(go env GOVERSION)"
	dir=$(moddir "$CSI_ADDONS_MODULE@$CSI_ADDONS_VERSION")
	rm -rf "$CACHE/csi-addons"
	mkdir -p "$CACHE/csi-addons"
	cp "$dir"/deploy/controller/*.yaml "$CACHE/csi-addons/"
	chmod -R u+w "$CACHE/csi-addons"
	if fresh csi-addons "$key" "$BIN/csi-addons-manager" "$BIN/csi-addons-sidecar"; then
		log "csi-addons $CSI_ADDONS_VERSION: cached"
		return
	fi
	t0=$(now)
	mkdir -p "$BIN"
	ld="-s -w -X $CSI_ADDONS_MODULE/internal/version.Version=$CSI_ADDONS_VERSION"
	for c in csi-addons-manager=./cmd/manager csi-addons-sidecar=./sidecar; do
		log "building ${c%%=*} $CSI_ADDONS_VERSION"
		rm -f "$BIN/${c%%=*}.tmp"
		(cd "$dir" && GOWORK=off go build -ldflags "$ld" -o "$BIN/${c%%=*}.tmp" "${c#*=}") ||
			die "building ${c%%=*} failed"
		mv "$BIN/${c%%=*}.tmp" "$BIN/${c%%=*}"
	done
	stamp csi-addons "$key"
	log "csi-addons $CSI_ADDONS_VERSION built in $(($(now) - t0)) s"
}

# build_helm: `make helm-test` may run it while CI's background build does,
# so one builds at a time and the other finds it cached.
build_helm() {
	local lock
	mkdir -p "$BIN"
	exec {lock}>"$CACHE/.helm.lock"
	flock "$lock"
	if ! fresh helm "helm $HELM_VERSION $(go env GOVERSION)" "$BIN/helm"; then
		log "building helm $HELM_VERSION"
		GOBIN=$BIN go install -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
			"helm.sh/helm/v4/cmd/helm@$HELM_VERSION" || die "building helm failed"
		stamp helm "helm $HELM_VERSION $(go env GOVERSION)"
	fi
	exec {lock}>&-
}

build_tools() {
	build_helm
	if ! fresh crane "crane $CRANE_VERSION" "$BIN/crane"; then
		log "building crane $CRANE_VERSION"
		mkdir -p "$BIN"
		GOBIN=$BIN go install "github.com/google/go-containerregistry/cmd/crane@$CRANE_VERSION"
		stamp crane "crane $CRANE_VERSION"
	fi
	# The sandbox image's binary: Kubernetes' own pause.c, linked statically.
	local kdir
	kdir=$(moddir "k8s.io/kubernetes@$KUBE_VERSION")
	if ! fresh pause "pause $KUBE_VERSION" "$BIN/pause"; then
		gcc -Os -static -DVERSION=rbdcsi-e2e -o "$BIN/pause" "$kdir/build/pause/linux/pause.c" || die "building pause failed"
		strip "$BIN/pause"
		stamp pause "pause $KUBE_VERSION"
	fi
}

# --- images ---------------------------------------------------------------------

# shellcheck source=scripts/k8s-images.sh
source "$ROOT/scripts/k8s-images.sh"

build_static_images() {
	local dir key
	mkdir -p "$IMAGES"
	static_image pause "$PAUSE_IMAGE" "$BIN/pause"
	# (snapshot-controller runs as a plain process, like the control plane.)
	static_image csi-provisioner "registry.k8s.io/sig-storage/csi-provisioner:$PROVISIONER_VERSION" "$BIN/csi-provisioner"
	static_image csi-attacher "registry.k8s.io/sig-storage/csi-attacher:$ATTACHER_VERSION" "$BIN/csi-attacher"
	static_image csi-resizer "registry.k8s.io/sig-storage/csi-resizer:$RESIZER_VERSION" "$BIN/csi-resizer"
	static_image csi-snapshotter "registry.k8s.io/sig-storage/csi-snapshotter:$SNAPSHOTTER_VERSION" "$BIN/csi-snapshotter"
	static_image csi-snapshot-metadata "registry.k8s.io/sig-storage/csi-snapshot-metadata:$SNAPSHOT_METADATA_VERSION" "$BIN/csi-snapshot-metadata"
	# The csi-addons images, laid out as the release's: the controller at
	# /csi-addons-manager (the release's Deployment names that command) as
	# user 65532 (its pod runs as non-root and names no user), the sidecar
	# at /usr/sbin/csi-addons-sidecar (its entrypoint: manifests give args
	# only).
	static_image csi-addons-controller "quay.io/csiaddons/k8s-controller:$CSI_ADDONS_VERSION" "$BIN/csi-addons-manager" \
		/csi-addons-manager 65532:65532
	static_image csi-addons-sidecar "quay.io/csiaddons/k8s-sidecar:$CSI_ADDONS_VERSION" "$BIN/csi-addons-sidecar" \
		/usr/sbin/csi-addons-sidecar
	# The plugin image an earlier version of this script made here: the
	# node imports every archive of this directory.
	rm -f "$IMAGES/rbdplugin.tar"
	# busybox for test pods: Debian's busybox-static with its applet links.
	[[ -x /bin/busybox ]] || die "busybox-static is not installed"
	key="$BUSYBOX_IMAGE $(sha256sum /bin/busybox | cut -c1-16)"
	if ! fresh image-busybox "$key" "$IMAGES/busybox.tar"; then
		dir=$(mktemp -d)
		busybox_root "$dir"
		image_from_dir "$BUSYBOX_IMAGE" "$dir" "$IMAGES/busybox.tar" /bin/sh
		rm -rf "$dir"
		stamp image-busybox "$key"
	fi
}

# build_backuptool: the e2e's backup tool (e2e/k8s/backuptool, a module of
# its own on external-snapshot-metadata's client library) in an image over
# the busybox image's files, so that a pod can run it in a shell. It
# depends on the checkout: not part of the cache, rebuilt when its source
# changes. Prints the image's name.
build_backuptool() {
	local src=$ROOT/e2e/k8s/backuptool key ref dir
	key=$(cd "$src" && cat go.mod go.sum ./*.go | sha256sum | cut -c1-16)
	ref=localhost/rbdcsi-e2e/backuptool:$key
	if ! fresh image-backuptool "$ref" "$IMAGES/backuptool.tar"; then
		build_tools
		dir=$(mktemp -d)
		(cd "$src" && GOWORK=off go build -ldflags "-s -w" -o "$dir/backuptool" .) || die "building the backup tool failed"
		mkdir -p "$IMAGES"
		busybox_root "$dir/root"
		install -m 0755 "$dir/backuptool" "$dir/root/bin/backuptool"
		image_from_dir "$ref" "$dir/root" "$IMAGES/backuptool.tar" /bin/sh
		rm -rf "$dir"
		stamp image-backuptool "$ref"
	fi
	echo "$ref"
}

main() {
	local what=${1:-all} t0
	t0=$(now)
	mkdir -p "$CACHE"
	case $what in
	kube) build_kube ;;
	sidecars) build_sidecars ;;
	csi-addons) build_csi_addons ;;
	tools) build_tools ;;
	helm) build_helm ;;
	images)
		build_tools
		build_static_images
		;;
	all | cache)
		# CI runs it in the background while the tests run.
		need_packages "${E2E_PACKAGES[@]}"
		build_tools
		build_kube
		build_sidecars
		build_csi_addons
		build_static_images
		;;
	deps) need_packages "${E2E_PACKAGES[@]}" ;;
	backuptool) build_backuptool ;;
	*)
		echo "usage: $PROG [all|cache|deps|kube|sidecars|csi-addons|tools|helm|images|backuptool]" >&2
		exit 2
		;;
	esac
	log "$what done in $(($(now) - t0)) s (cache: $CACHE)"
}

main "$@"
