#!/usr/bin/env bash
# k8s-e2e.sh: the end-to-end test on a real Kubernetes on this machine
# (`make e2e`), installing a release as a user does. Builds or reuses
# Kubernetes, the sidecars and their images (scripts/k8s-build.sh), makes a
# release of this checkout (scripts/release.sh, version
# v0.0.0-e2e-<commit>: both plugin images from build/Dockerfile, the chart
# package, the site tarball) and imports its image archives into the node's
# containerd, boots a single-node Kubernetes (scripts/k8s-node.sh) and a
# throwaway Ceph cluster on the node's address (scripts/ceph-cluster.sh),
# then runs three passes:
#
#   kustomize  docs/install.md's kustomize path, run as written
#              (TestAAInstallGuide), the scenarios of e2e/k8s on that
#              install, then the guide's uninstall (TestZZZUninstallLeavesNothing)
#   helm       the guide's Helm path (the release's chart package), the
#              examples, an upgrade and a rollback under a mounted volume,
#              the guide's uninstall
#   groupsnap  a Tentacle cluster in a chroot of forky's cached root
#              (scripts/suite.sh cluster), the guide's kustomize path with
#              the release's -forky image (Tentacle's librbd, which serves
#              VolumeGroupSnapshots), the group snapshot scenarios
#
# The guide's values (its step 1) are this run's: the release directory,
# the cluster's monitors, and its two options pointed at what this machine
# forces (deploy/e2e: a kustomize component and a Helm values file; its
# comments say what and why). It always tears everything down, also on
# failure or interrupt.
#
#   scripts/k8s-e2e.sh [go test flags, e.g. -run TestSnapshot]
#
# E2E_PASSES: "kustomize helm groupsnap" (the default), or some of them; each
# pass runs only if the ones before passed. Each pass runs the tests its
# section of scripts/k8s-e2e.tests lists and is held to that list; go test
# flags given replace the lists in every pass (and the run is then reported,
# not judged by them; give -run '^TestAAInstallGuide$|...' to install).
#
# Environment: RBDCSI_E2E_CACHE (build cache, default /var/cache/rbdcsi-e2e;
# the release goes to its release/), E2E_ARTIFACTS (where logs go on
# failure, default /tmp/rbdcsi-e2e-artifacts), E2E_KEEP=1 (leave everything
# up after the tests, for a look; then run `scripts/k8s-e2e.sh down WORKDIR`),
# E2E_PARALLEL (how many scenarios run at once, default 3; 1: one at a time).
set -euo pipefail

readonly PROG=${0##*/}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
readonly ROOT
readonly ARTIFACTS=${E2E_ARTIFACTS:-/tmp/rbdcsi-e2e-artifacts}
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
# shellcheck source=scripts/mirror-lib.sh
source "$ROOT/scripts/mirror-lib.sh"

# lib.sh's log, with the time of day.
log() { echo "$PROG: $(date +%T) $*" >&2; }

readonly CACHE=${RBDCSI_E2E_CACHE:-/var/cache/rbdcsi-e2e}
# Where release.sh writes (RELEASE_DIR) and the guide reads the release.
readonly RELEASE_DIR=$CACHE/release
export RELEASE_DIR
readonly PLUGIN_REPOSITORY=docker.io/rbdcsi/rbdplugin

# teardown WORK: the test volumes and the installed driver, the node, the
# Ceph clusters, WORK.
teardown() {
	local work=$1
	[[ -d $work ]] || return 0
	# Volumes first (through the driver, while it still runs), then the
	# driver; only while this run's apiserver lives (its address is on an
	# interface of this run: never send a request toward a missing one).
	if [[ -f $work/node/env ]] && pgrep -f "kube-apiserver .*$work/node/" >/dev/null; then
		local k=$work/bin/kubectl
		if [[ -x $k ]]; then
			"$k" delete namespace -l rbdcsi-e2e=test --wait=true --timeout=180s >/dev/null 2>&1 || true
			"$k" delete namespace rbdcsi-try --ignore-not-found --wait=true --timeout=180s >/dev/null 2>&1 || true
			"$k" delete volumeattachments --all --wait=true --timeout=60s >/dev/null 2>&1 || true
			"$k" wait --for=delete pv --all --timeout=120s >/dev/null 2>&1 || true
			remove_install "$work" >/dev/null 2>&1 || true
		fi
	fi
	site_b_down "$work" || log "the second site's teardown reported an error"
	"$ROOT/scripts/k8s-node.sh" down "$work/node" || log "node teardown reported an error"
	"$ROOT/scripts/ceph-cluster.sh" down "$work/ceph" || log "Ceph teardown reported an error"
	stop_tentacle "$work"
	rm -rf --one-file-system "$work"
}

# remove_install WORK: whatever install of the driver is left (the guide's
# uninstall did not run: a failed pass, or go test flags that left it out):
# the Helm release, or the guide's kustomize site, and the namespace.
remove_install() {
	local work=$1 k=$1/bin/kubectl site
	if "$work/bin/helm" status rbdcsi --namespace rbdcsi >/dev/null 2>&1; then
		"$work/bin/helm" uninstall rbdcsi --namespace rbdcsi --wait --timeout 120s || return 1
	fi
	for site in "$work"/guide-*/rbdcsi-install/rbdcsi-site-*/site; do
		[[ -d $site ]] || continue
		"$k" delete -k "$site" --ignore-not-found --wait=true --timeout=120s || return 1
		"$k" delete -k "${site%/site}/snapshotclass" --ignore-not-found --wait=true --timeout=60s || true
	done
	"$k" delete namespace rbdcsi --ignore-not-found --wait=true --timeout=120s
}

# stop_tentacle WORK: asks the group snapshot pass's Tentacle cluster
# (scripts/suite.sh cluster, in its own PID namespace: whatever it started
# ends with it) to go down, and waits for it: this run's by its PID, one that
# a killed run left by its command line.
TENTACLE_PID=""
stop_tentacle() {
	local dir=$1/tentacle/cluster i
	[[ -d $1/tentacle ]] || return 0
	if [[ -n $TENTACLE_PID ]]; then
		stop_cluster "$dir" "$TENTACLE_PID"
		TENTACLE_PID=""
		return 0
	fi
	touch "$dir.stop"
	for ((i = 0; i < 240; i++)); do
		pgrep -f "suite.sh cluster forky $dir " >/dev/null || return 0
		sleep 0.5
	done
	log "the Tentacle cluster at $dir did not go down within 120 s"
}

collect_artifacts() {
	local work=$1 k=$1/bin/kubectl
	rm -rf "$ARTIFACTS"
	mkdir -p "$ARTIFACTS"
	[[ -d $work/node/log ]] && cp -r "$work/node/log" "$ARTIFACTS/node-logs"
	[[ -d $work/node.logs ]] && cp -r "$work/node.logs" "$ARTIFACTS/node-logs"
	[[ -d $work/ceph/log ]] && cp -r "$work/ceph/log" "$ARTIFACTS/ceph-logs"
	[[ -d $work/ceph-b/log ]] && cp -r "$work/ceph-b/log" "$ARTIFACTS/ceph-b-logs"
	[[ -d $work/tentacle/cluster/log ]] && cp -r "$work/tentacle/cluster/log" "$ARTIFACTS/tentacle-logs"
	[[ -f $work/tentacle/cluster.log ]] && cp "$work/tentacle/cluster.log" "$ARTIFACTS/tentacle-logs.up.log"
	# The guide's scripts as they ran (no keys: those are in files beside
	# them), and the driver's logs TestZZZUninstallLeavesNothing kept.
	local g
	for g in "$work"/guide-*/.guide-*.sh "$work"/driver-logs-*; do
		[[ -e $g ]] || continue
		if [[ -d $g ]]; then cp -r "$g" "$ARTIFACTS/"; else cp "$g" "$ARTIFACTS/$(basename "$(dirname "$g")")$(basename "$g")"; fi
	done
	# The pod network as it is now: addresses, neighbours, the bridge's
	# forwarding table and the pod addresses host-local IPAM holds (file
	# name: address, first line: sandbox ID).
	{
		ip -br addr
		ip neigh
		bridge fdb show br "${E2E_POD_BRIDGE:-rbdcsie2ebr0}"
		local f
		for f in "$work"/node/cni/ipam/*/*; do
			if [[ -f $f ]]; then printf '%s %s\n' "${f##*/}" "$(head -1 "$f")"; fi
		done
	} >"$ARTIFACTS/net.txt" 2>&1 || true
	if [[ -x $k ]]; then
		"$k" get all,pvc,pv,volumeattachments,csinodes,volumesnapshots,volumesnapshotcontents -A -o wide >"$ARTIFACTS/objects.txt" 2>&1 || true
		"$k" get volumegroupsnapshots,volumegroupsnapshotcontents,volumegroupsnapshotclasses -A -o wide >>"$ARTIFACTS/objects.txt" 2>&1 || true
		"$k" get csiaddonsnodes,reclaimspacejobs,networkfences,networkfenceclasses,volumereplications,volumereplicationclasses -A -o yaml >"$ARTIFACTS/csi-addons.yaml" 2>&1 || true
		"$k" get events -A --sort-by=.lastTimestamp >"$ARTIFACTS/events.txt" 2>&1 || true
		local ns p c
		for ns in rbdcsi csi-addons-system; do
			for p in $("$k" -n "$ns" get pods -o name 2>/dev/null); do
				for c in $("$k" -n "$ns" get "$p" -o jsonpath='{.spec.containers[*].name}' 2>/dev/null); do
					"$k" -n "$ns" logs "$p" -c "$c" >"$ARTIFACTS/${p#pod/}.$c.log" 2>&1 || true
				done
			done
		done
	fi
	log "logs and objects: $ARTIFACTS"
}

# e2e_version: the release version of this checkout, SemVer (release.sh
# checks it): v0.0.0-e2e-<commit>, -dirty with uncommitted changes.
e2e_version() {
	local v
	v=v0.0.0-e2e-$(git -C "$ROOT" rev-parse --short=10 HEAD)
	[[ -z $(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null) ]] || v+=-dirty
	echo "$v"
}

main() {
	if [[ ${1:-} == down ]]; then
		[[ -n ${2:-} ]] || die "usage: $PROG down WORKDIR"
		teardown "$2"
		return
	fi
	[[ $(id -u) == 0 ]] || die "run as root (mounts, loop devices, containerd)"
	local t0=$SECONDS rc=0 work
	# The scenario that plays a second node runs the plugin on the host.
	[[ -x $ROOT/bin/rbdplugin ]] || die "bin/rbdplugin is missing: make build"

	# One run at a time (one /var/lib/kubelet, one node address); what an
	# earlier run left (killed before its teardown) is torn down first.
	exec {lockfd}>/var/tmp/rbdcsi-e2e.lock
	flock -n "$lockfd" || die "another e2e run holds /var/tmp/rbdcsi-e2e.lock"
	local old
	for old in /var/tmp/rbdcsi-e2e.*/; do
		[[ -d $old ]] || continue
		log "tearing down what an earlier run left: $old"
		teardown "${old%/}"
	done

	local passes=${E2E_PASSES:-kustomize helm groupsnap} p
	for p in $passes; do
		[[ $p == kustomize || $p == helm || $p == groupsnap ]] || die "unknown pass $p in E2E_PASSES (kustomize, helm, groupsnap)"
	done
	"$ROOT/scripts/k8s-build.sh" all
	# The backup tool of the changed-block tracking scenario, among the
	# images the node imports at boot.
	E2E_BACKUPTOOL_IMAGE=$("$ROOT/scripts/k8s-build.sh" backuptool) || die "building the backup tool failed"
	export E2E_BACKUPTOOL_IMAGE
	log "Kubernetes, the sidecars and the backup tool ready after $((SECONDS - t0)) s"
	VERSION=$(e2e_version)
	"$ROOT/scripts/release.sh" "$VERSION" || die "make release $VERSION failed"
	log "release $VERSION ready after $((SECONDS - t0)) s"

	work=$(mktemp -d /var/tmp/rbdcsi-e2e.XXXXXX)
	# shellcheck disable=SC2064
	trap "rc=\$?; trap - EXIT INT TERM; finish '$work' \$rc" EXIT
	trap 'exit 130' INT TERM

	"$ROOT/scripts/k8s-node.sh" up "$work/node"
	set -a
	# shellcheck disable=SC1091
	source "$work/node/env"
	set +a
	# kubectl and helm for this cluster, by those names: the guide's PATH.
	mkdir -p "$work/bin"
	printf '#!/bin/sh\nexec %q --kubeconfig %q "$@"\n' "$KUBECTL" "$KUBECONFIG" >"$work/bin/kubectl"
	printf '#!/bin/sh\nexec %q --kubeconfig %q "$@"\n' "$CACHE/bin/helm" "$KUBECONFIG" >"$work/bin/helm"
	chmod +x "$work/bin/kubectl" "$work/bin/helm"
	import_release
	install_csi_addons "$work"
	log "Kubernetes up, release imported after $((SECONDS - t0)) s (kubectl: $work/bin/kubectl)"

	export RBDCSI_E2E_K8S=1 E2E_CLUSTER_CONFIG=$work/cluster-config.json E2E_GUIDE_PATH=$work/bin
	export E2E_RBDPLUGIN=$ROOT/bin/rbdplugin E2E_WORK=$work E2E_TOOLS=$work/tools
	mkdir -p "$E2E_TOOLS"
	(cd "$ROOT" && go build -o "$E2E_TOOLS/testreport" ./scripts/testreport) || die "building scripts/testreport failed"
	if [[ $passes == *kustomize* || $passes == *helm* ]]; then
		# Ceph on the node's address, which the pods reach over the node's
		# pod bridge (scripts/k8s-node.sh); with a mgr, which the snapshot
		# schedules of replication need. The kustomize pass's second site
		# boots meanwhile.
		local pb=""
		if [[ $passes == *kustomize* ]]; then
			site_b_boot "$work" &
			pb=$!
		fi
		CEPH_ADDR=$E2E_NODE_IP CEPH_WITH_MGR=1 "$ROOT/scripts/ceph-cluster.sh" up "$work/ceph"
		set -a
		# shellcheck disable=SC1091
		source "$work/ceph/env"
		set +a
		log "Ceph up after $((SECONDS - t0)) s"
		if [[ -n $pb ]]; then
			wait "$pb" || die "the second site did not come up (its log: $work/ceph-b.up.log)"
			site_b_peer "$work"
			log "the second site up and peered after $((SECONDS - t0)) s"
		fi
	fi

	if [[ $passes == *kustomize* ]]; then
		guide_vars "$work" "$VERSION"
		export RBDCSI_E2E_INSTALL=kustomize
		(cd "$ROOT" && go_test kustomize "$@") || rc=$?
		log "kustomize pass finished (exit $rc) after $((SECONDS - t0)) s"
		# Only the kustomize pass replicates; the group snapshot pass's
		# cluster takes the first one's address, which A's rbd-mirror must
		# not reach for.
		if ((rc == 0)); then site_b_down "$work" || rc=1; fi
	fi
	if [[ $passes == *helm* ]] && ((rc == 0)); then
		local th=$SECONDS
		helm_pass "$work" "$@" || rc=$?
		log "Helm pass finished (exit $rc) in $((SECONDS - th)) s, after $((SECONDS - t0)) s"
	fi
	if [[ $passes == *groupsnap* ]] && ((rc == 0)); then
		local tg=$SECONDS
		groupsnap_pass "$work" "$@" || rc=$?
		log "group snapshot pass finished (exit $rc) in $((SECONDS - tg)) s, after $((SECONDS - t0)) s"
	fi
	return "$rc"
}

# import_release: the release's image archives into the node's containerd,
# as docs/install.md ("The release") shows for a node without a registry;
# the manifests' imagePullPolicy IfNotPresent then finds them.
import_release() {
	local suite ref images
	for suite in trixie forky; do
		ctr --address "$CONTAINERD_ADDRESS" -n k8s.io images import "$RELEASE_DIR/rbdplugin-$VERSION-$suite.tar" >/dev/null ||
			die "importing rbdplugin-$VERSION-$suite.tar failed"
	done
	images=$(ctr --address "$CONTAINERD_ADDRESS" -n k8s.io images ls -q) || die "listing containerd's images failed"
	for ref in "$PLUGIN_REPOSITORY:$VERSION" "$PLUGIN_REPOSITORY:$VERSION-forky"; do
		grep -qxF "$ref" <<<"$images" || die "$ref is not among containerd's images after the import"
	done
}

# install_csi_addons WORK: the csi-addons CRDs and controller, once for
# every pass, as a cluster's admin installs them before docs/csi-addons.md:
# the files of its release (k8s-build.sh copies them from its module into
# the cache's csi-addons/), in that page's order; the controller's image is
# among those the node imported at boot. docs/csi-addons.md's check waits
# for it to roll out.
install_csi_addons() {
	local f
	for f in crds setup-controller rbac; do
		"$1/bin/kubectl" create -f "$CACHE/csi-addons/$f.yaml" >/dev/null ||
			die "installing the csi-addons controller: kubectl create -f $CACHE/csi-addons/$f.yaml failed"
	done
}

# site_b_boot WORK: the replication scenario's second Ceph cluster (site
# B; the first is site A), on a second address of the node's interface,
# in the node's /24, which the pods reach as they reach A; with a mgr for
# the snapshot schedules, one OSD. Its log is WORK/ceph-b.up.log.
site_b_boot() {
	local work=$1 addr=${E2E_NODE_IP%.*}.2
	ip addr add "$addr/32" dev "$E2E_IFACE" || die "adding $addr to $E2E_IFACE failed"
	echo "$addr $E2E_IFACE" >"$work/site-b.addr"
	CEPH_ADDR=$addr CEPH_WITH_MGR=1 CEPH_EC_POOL=0 "$ROOT/scripts/ceph-cluster.sh" up "$work/ceph-b" \
		>"$work/ceph-b.up.log" 2>&1
}

# site_b_peer WORK: pool rbd of A and B peered both ways in image mode
# (scripts/mirror-lib.sh, as make dr-test does), an rbd-mirror on each
# (looking and reporting every 5 s, as there), and B's monitors and admin
# configuration for the scenario (E2E_SITE_B_*). Each rbd-mirror reaches
# both clusters from its own site's address, which the node plugin, whose
# source address towards a cluster on this host is that cluster's own,
# never uses towards the peer: a detach's fence tells them apart by it.
site_b_peer() {
	local work=$1 addr_b
	read -r addr_b _ <"$work/site-b.addr"
	mirror_peer rbd "$work/ceph" site-a "$work/ceph-b" site-b
	mirror_wait_schedules "$work/ceph" rbd
	mirror_wait_schedules "$work/ceph-b" rbd
	mirror_build_shim "$work"
	start_mirror "$work/ceph" 5 "$E2E_NODE_IP" "$work/sourceaddr.so"
	start_mirror "$work/ceph-b" 5 "$addr_b" "$work/sourceaddr.so"
	E2E_SITE_B_CONF=$work/ceph-b/ceph.conf
	E2E_SITE_B_MON_HOST=$(sed -n 's/^export CEPH_MON_HOST=//p' "$work/ceph-b/env")
	export E2E_SITE_B_CONF E2E_SITE_B_MON_HOST
}

# site_b_down WORK: both rbd-mirror daemons, cluster B and its address;
# what is not there is skipped.
site_b_down() {
	local work=$1 rc=0 addr iface
	[[ -d $work/ceph ]] && stop_mirror "$work/ceph"
	[[ -d $work/ceph-b ]] && stop_mirror "$work/ceph-b"
	"$ROOT/scripts/ceph-cluster.sh" down "$work/ceph-b" || rc=1
	if [[ -f $work/site-b.addr ]]; then
		read -r addr iface <"$work/site-b.addr"
		if ip link show "$iface" >/dev/null 2>&1; then ip addr del "$addr/32" dev "$iface" 2>/dev/null || true; fi
		rm -f "$work/site-b.addr"
	fi
	unset E2E_SITE_B_CONF E2E_SITE_B_MON_HOST
	return "$rc"
}

# guide_vars WORK TAG: the values of docs/install.md's step 1 for the Ceph
# cluster of the environment (CEPH_MON_HOST, CEPH_POOL), the plugin image
# TAG, and this machine's options: the release's topology component and
# deploy/e2e (paths from the guide's site/ directory: the guide extracts
# the site tarball under e2e/k8s's directory for the path,
# WORK/guide-kustomize/rbdcsi-install), deploy/e2e/helm-values.yaml; and the
# same cluster map for the scenarios that read it (E2E_CLUSTER_CONFIG).
guide_vars() {
	local work=$1 tag=$2 site
	site=$work/guide-kustomize/rbdcsi-install/rbdcsi-site-$VERSION/site
	{
		echo "RBDCSI_VERSION=$VERSION"
		echo "RELEASE_DIR=$RELEASE_DIR"
		echo "PLUGIN_REPOSITORY=$PLUGIN_REPOSITORY"
		echo "PLUGIN_TAG=$tag"
		echo "CLUSTER_ID=ceph1"
		echo "MONITORS=[\"$CEPH_MON_HOST\"]"
		echo "POOL=$CEPH_POOL"
		echo "CSI_USER=kubernetes"
		echo "NODE_USER=rbdcsi-node"
		echo "KUSTOMIZE_COMPONENTS=../topology $(realpath -m --relative-to="$site" "$ROOT/deploy/e2e")"
		echo "HELM_VALUES=$ROOT/deploy/e2e/helm-values.yaml"
	} >"$work/guide-vars.env"
	printf '[{"clusterID": "ceph1", "monitors": ["%s"]}]\n' "$CEPH_MON_HOST" >"$E2E_CLUSTER_CONFIG"
	export E2E_GUIDE_VARS=$work/guide-vars.env
}

# installed: whether a namespace of the driver exists (an install the
# guide's uninstall did not remove).
installed() {
	[[ -n $("$KUBECTL" get namespace rbdcsi --ignore-not-found -o name) ]]
}

# go_test PASS [go test flags]: the scenarios of PASS, its section of
# scripts/k8s-e2e.tests (or, with flags given, the tests they pick), shown
# as go test -v shows them; then the run is judged by the list (a listed
# test that skips or does not run fails the pass, naming it) or, with flags
# given, reported.
go_test() {
	local pass=$1 events args=()
	shift
	events=$E2E_WORK/e2e-$pass.json
	if (($# == 0)); then
		# Not mapfile < <(...): a process substitution's failure is lost,
		# and the pass would run every test.
		local out
		out=$("$E2E_TOOLS/testreport" args -list "$ROOT/scripts/k8s-e2e.tests" "$pass") ||
			die "no tests for the $pass pass in scripts/k8s-e2e.tests"
		mapfile -t args <<<"$out"
	fi
	local rc=0
	# -parallel: the scenarios run side by side (e2e/k8s/order_test.go),
	# E2E_PARALLEL of them, plus the two final checks waiting for them.
	go test -tags="$("$ROOT/build/ceph-tags.sh"),e2e_k8s" -json -count=1 -timeout 45m -parallel $((${E2E_PARALLEL:-3} + 2)) \
		./e2e/k8s/ "${args[@]}" "$@" |
		"$E2E_TOOLS/testreport" pipe -o "$events" || rc=$?
	if (($# == 0)); then
		"$E2E_TOOLS/testreport" check -step "e2e $pass" -list "$ROOT/scripts/k8s-e2e.tests" -v "$pass=$events" || rc=1
	else
		"$E2E_TOOLS/testreport" summary -step "e2e $pass" -v "$pass=$events" || rc=1
	fi
	return "$rc"
}

# helm_pass WORK [go test flags] (called in an || list, where set -e is
# off): the guide's Helm path, with the release's chart package, and the
# Helm section's scenarios on it. Whatever install the kustomize pass left
# (its uninstall did not run) goes first.
helm_pass() {
	local work=$1
	shift
	if installed; then
		remove_install "$work" || die "removing the kustomize install failed"
	fi
	guide_vars "$work" "$VERSION"
	export RBDCSI_E2E_INSTALL=helm E2E_HELM=$work/bin/helm E2E_HELM_CHART=$RELEASE_DIR/rbdcsi-${VERSION#v}.tgz
	(cd "$ROOT" && go_test helm "$@")
}

# groupsnap_pass WORK [go test flags] (called in an || list, where set -e is
# off: every step dies on its own failure): the group snapshot scenarios on
# the release's forky image against a Tentacle cluster, installed by the
# guide's kustomize path. The Ceph cluster of the passes before goes first
# (the Tentacle one takes the node's address), with any install left on it;
# the node stays.
groupsnap_pass() {
	local work=$1 t0=$SECONDS
	shift
	local dir=$work/tentacle/cluster
	if installed; then
		remove_install "$work" || die "removing the earlier install failed"
	fi
	"$ROOT/scripts/ceph-cluster.sh" down "$work/ceph" || die "stopping the first Ceph cluster failed"

	# Tentacle on the node's address, in a chroot of forky's cached root.
	# With AES keys: the scenario's checks and the guide run this machine's
	# Pacific ceph, rbd and rados, which cannot read the AES256K keys
	# Tentacle makes by default (the forky plugin could). One OSD: no
	# erasure-coded pool is needed here.
	mkdir -p "$work/tentacle"
	"$ROOT/scripts/suite.sh" cluster forky "$dir" CEPH_ADDR="$E2E_NODE_IP" CEPH_KEY_TYPE=aes CEPH_EC_POOL=0 \
		>"$work/tentacle/suite.log" 2>&1 &
	TENTACLE_PID=$!
	wait_cluster "$dir" "$TENTACLE_PID" "the Tentacle cluster (more in $work/tentacle/suite.log)"
	set -a
	# shellcheck disable=SC1091
	source "$dir/env"
	set +a
	log "Tentacle cluster up after $((SECONDS - t0)) s: $(ceph -c "$CEPH_CONF" version 2>&1)"

	guide_vars "$work" "$VERSION-forky"
	unset E2E_HELM E2E_HELM_CHART
	export RBDCSI_E2E_INSTALL=kustomize RBDCSI_E2E_GROUPSNAP=1
	(cd "$ROOT" && go_test groupsnap "$@")
}

finish() {
	local work=$1 rc=$2
	if ((rc != 0)); then collect_artifacts "$work"; fi
	if [[ ${E2E_KEEP:-0} == 1 ]]; then
		log "E2E_KEEP=1: left up; tear down with: $0 down $work"
		exit "$rc"
	fi
	log "tearing down"
	teardown "$work"
	log "torn down"
	exit "$rc"
}

main "$@"
