#!/usr/bin/env bash
# k8s-e2e.sh: the end-to-end test on a real Kubernetes on this machine
# (`make e2e`). Builds or reuses Kubernetes, the sidecars and the images
# (scripts/k8s-build.sh), boots a throwaway Ceph cluster
# (scripts/ceph-cluster.sh) and a single-node Kubernetes
# (scripts/k8s-node.sh), `kubectl apply -k` the deploy/e2e overlay of
# deploy/kubernetes, runs the scenarios of e2e/k8s, then removes the driver
# and installs it again with `helm install` (deploy/helm/rbdcsi) for the
# Helm pass: the volume scenarios, an upgrade and a rollback under a mounted
# volume, and an uninstall that leaves nothing. Last, the group snapshot
# pass: a Tentacle cluster in a chroot of forky's cached root
# (scripts/suite.sh cluster) and the plugin image built on forky
# (scripts/k8s-build.sh plugin-image forky: Tentacle's librbd, the one that
# serves VolumeGroupSnapshots), deployed with deploy/e2e plus its groupsnap
# component, for TestGroupSnapshotRestoresEachMember and the cleanup check.
# It always tears everything down, also on failure or interrupt.
#
#   scripts/k8s-e2e.sh [go test flags, e.g. -run TestSnapshot]
#
# E2E_PASSES: "kustomize helm groupsnap" (the default), or some of them; each
# pass runs only if the ones before passed. Each pass runs the tests its
# section of scripts/k8s-e2e.tests lists and is held to that list; go test
# flags given replace the lists in every pass (and the run is then reported,
# not judged by them).
#
# Environment: RBDCSI_E2E_CACHE (build cache, default /var/cache/rbdcsi-e2e),
# E2E_ARTIFACTS (where logs go on failure, default /tmp/rbdcsi-e2e-artifacts),
# E2E_KEEP=1 (leave everything up after the tests, for a look; then run
# `scripts/k8s-e2e.sh down WORKDIR`).
set -euo pipefail

readonly PROG=${0##*/}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
readonly ROOT
readonly ARTIFACTS=${E2E_ARTIFACTS:-/tmp/rbdcsi-e2e-artifacts}
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"

# lib.sh's log, with the time of day.
log() { echo "$PROG: $(date +%T) $*" >&2; }

# teardown WORK: the overlay's objects, the node, the Ceph cluster, WORK.
teardown() {
	local work=$1
	[[ -d $work ]] || return 0
	# Volumes first (through the driver, while it still runs), then the
	# driver; only while this run's apiserver lives (its address is on an
	# interface of this run: never send a request toward a missing one).
	if [[ -f $work/node/env ]] && pgrep -f "kube-apiserver .*$work/node/" >/dev/null; then
		local k=$work/kubectl.sh
		if [[ -x $k ]]; then
			"$k" delete namespace -l rbdcsi-e2e=test --wait=true --timeout=180s >/dev/null 2>&1 || true
			"$k" delete volumeattachments --all --wait=true --timeout=60s >/dev/null 2>&1 || true
			"$k" wait --for=delete pv --all --timeout=120s >/dev/null 2>&1 || true
			"$k" delete -k "$work/deploy/e2e" --wait=true --timeout=120s >/dev/null 2>&1 || true
			if [[ -x $work/helm.sh ]]; then
				"$work/helm.sh" uninstall rbdcsi --namespace rbdcsi --wait --timeout 120s >/dev/null 2>&1 || true
				"$k" delete namespace rbdcsi --wait=true --timeout=120s >/dev/null 2>&1 || true
			fi
		fi
	fi
	"$ROOT/scripts/k8s-node.sh" down "$work/node" || log "node teardown reported an error"
	"$ROOT/scripts/ceph-cluster.sh" down "$work/ceph" || log "Ceph teardown reported an error"
	stop_tentacle "$work"
	rm -rf --one-file-system "$work"
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
	local work=$1 k=$1/kubectl.sh
	rm -rf "$ARTIFACTS"
	mkdir -p "$ARTIFACTS"
	[[ -d $work/node/log ]] && cp -r "$work/node/log" "$ARTIFACTS/node-logs"
	[[ -d $work/node.logs ]] && cp -r "$work/node.logs" "$ARTIFACTS/node-logs"
	[[ -d $work/ceph/log ]] && cp -r "$work/ceph/log" "$ARTIFACTS/ceph-logs"
	[[ -d $work/tentacle/cluster/log ]] && cp -r "$work/tentacle/cluster/log" "$ARTIFACTS/tentacle-logs"
	[[ -f $work/tentacle/cluster.log ]] && cp "$work/tentacle/cluster.log" "$ARTIFACTS/tentacle-logs.up.log"
	if [[ -x $k ]]; then
		"$k" get all,pvc,pv,volumeattachments,csinodes,volumesnapshots,volumesnapshotcontents -A -o wide >"$ARTIFACTS/objects.txt" 2>&1 || true
		"$k" get volumegroupsnapshots,volumegroupsnapshotcontents,volumegroupsnapshotclasses -A -o wide >>"$ARTIFACTS/objects.txt" 2>&1 || true
		"$k" get events -A --sort-by=.lastTimestamp >"$ARTIFACTS/events.txt" 2>&1 || true
		local ns p c
		for ns in rbdcsi rbdcsi-node; do
			for p in $("$k" -n "$ns" get pods -o name 2>/dev/null); do
				for c in $("$k" -n "$ns" get "$p" -o jsonpath='{.spec.containers[*].name}' 2>/dev/null); do
					"$k" -n "$ns" logs "$p" -c "$c" >"$ARTIFACTS/${p#pod/}.$c.log" 2>&1 || true
				done
			done
		done
	fi
	log "logs and objects: $ARTIFACTS"
}

main() {
	if [[ ${1:-} == down ]]; then
		[[ -n ${2:-} ]] || die "usage: $PROG down WORKDIR"
		teardown "$2"
		return
	fi
	[[ $(id -u) == 0 ]] || die "run as root (mounts, loop devices, containerd)"
	local t0=$SECONDS rc=0 work
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
	if [[ $passes == *groupsnap* ]]; then
		"$ROOT/scripts/k8s-build.sh" plugin-image forky
	fi
	log "builds ready after $((SECONDS - t0)) s"

	work=$(mktemp -d /var/tmp/rbdcsi-e2e.XXXXXX)
	# shellcheck disable=SC2064
	trap "rc=\$?; trap - EXIT INT TERM; finish '$work' \$rc" EXIT
	trap 'exit 130' INT TERM

	local default=no
	[[ $passes == *kustomize* || $passes == *helm* ]] && default=yes
	if [[ $default == yes ]]; then
		"$ROOT/scripts/ceph-cluster.sh" up "$work/ceph"
		set -a
		# shellcheck disable=SC1091
		source "$work/ceph/env"
		set +a
	fi
	"$ROOT/scripts/k8s-node.sh" up "$work/node"
	set -a
	# shellcheck disable=SC1091
	source "$work/node/env"
	set +a
	printf '#!/bin/sh\nexec %q --kubeconfig %q "$@"\n' "$KUBECTL" "$KUBECONFIG" >"$work/kubectl.sh"
	chmod +x "$work/kubectl.sh"
	log "Ceph and Kubernetes up after $((SECONDS - t0)) s (kubectl: $work/kubectl.sh)"

	# The overlay, with the local cluster's map and key beside it.
	mkdir -p "$work/deploy"
	cp -r "$ROOT/deploy/kubernetes" "$ROOT/deploy/site" "$ROOT/deploy/snapshotclass" "$ROOT/deploy/e2e" \
		"$ROOT/deploy/topology" "$work/deploy/"
	rm -f "$work/deploy/site/"{userID,userKey,nodeUserID,nodeUserKey}
	export RBDCSI_E2E_K8S=1 E2E_CLUSTER_CONFIG=$work/deploy/site/cluster-config.json
	export E2E_RBDPLUGIN=$ROOT/bin/rbdplugin E2E_WORK=$work E2E_TOOLS=$work/tools
	mkdir -p "$E2E_TOOLS"
	(cd "$ROOT" && go build -o "$E2E_TOOLS/testreport" ./scripts/testreport) || die "building scripts/testreport failed"
	if [[ $default == yes ]]; then
		write_local "$work"
		deploy "$work/deploy/e2e" "the driver"
		log "driver deployed after $((SECONDS - t0)) s"
	fi

	if [[ $passes == *kustomize* ]]; then
		(cd "$ROOT" && go_test kustomize "$@") || rc=$?
		log "kustomize pass finished (exit $rc) after $((SECONDS - t0)) s"
	fi
	if [[ $passes == *helm* ]] && ((rc == 0)); then
		helm_pass "$work" "$@" || rc=$?
		log "Helm pass finished (exit $rc) after $((SECONDS - t0)) s"
	fi
	if [[ $passes == *groupsnap* ]] && ((rc == 0)); then
		local tg=$SECONDS
		groupsnap_pass "$work" "$@" || rc=$?
		log "group snapshot pass finished (exit $rc) in $((SECONDS - tg)) s, after $((SECONDS - t0)) s"
	fi
	return "$rc"
}

# write_local WORK: the local cluster's map and users (the cluster in the
# environment: CEPH_CONF, CEPH_MON_HOST, ...) in WORK/deploy/site, the copy
# of the overlay users fill in, where its generators read them.
write_local() {
	local dir=$1/deploy/site
	(
		umask 077
		printf '[{"clusterID": "ceph1", "monitors": ["%s"]}]\n' "$CEPH_MON_HOST" >"$dir/cluster-config.json"
		printf '%s' "$CEPH_CSI_USER" >"$dir/userID"
		printf '%s' "$CEPH_CSI_KEY" >"$dir/userKey"
		# The node plugins' user, as docs/install.md (step 3) says to make it.
		printf 'rbdcsi-node' >"$dir/nodeUserID"
		ceph -c "$CEPH_CONF" auth get-or-create client.rbdcsi-node \
			mon 'allow r, allow command "osd blocklist" with blocklistop=rm' \
			osd "allow rwx pool=$CEPH_POOL object_prefix rbdcsi.nodes" >/dev/null
		ceph -c "$CEPH_CONF" auth print-key client.rbdcsi-node >"$dir/nodeUserKey"
	)
}

# deploy DIR WHAT: kubectl apply -k DIR, then waits until the controller
# and the node plugin rolled out and kubelet lists the driver.
deploy() {
	"$KUBECTL" apply -k "$1" || die "kubectl apply -k $1 failed"
	"$KUBECTL" -n rbdcsi rollout status deployment/rbdcsi-controller --timeout=180s || die "$2's controller did not roll out"
	"$KUBECTL" -n rbdcsi-node rollout status daemonset/rbdcsi-node --timeout=180s || die "$2's node plugin did not roll out"
	wait_registered yes || die "$2's node plugin did not register with kubelet within 120 s"
}

# wait_registered yes|no: waits up to 120 s until the node's CSINode lists
# the driver (yes) or no longer does (no); fails after that.
wait_registered() {
	local want=$1 i listed
	for ((i = 0; i < 120; i++)); do
		listed=no
		[[ $("$KUBECTL" get csinode "$E2E_NODE_NAME" -o jsonpath='{.spec.drivers[*].name}' 2>/dev/null) == *rbd.csi.rbdcsi.dev* ]] && listed=yes
		[[ $listed == "$want" ]] && return 0
		sleep 1
	done
	return 1
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
		mapfile -t args < <("$E2E_TOOLS/testreport" args -list "$ROOT/scripts/k8s-e2e.tests" "$pass") ||
			die "no tests for the $pass pass in scripts/k8s-e2e.tests"
	fi
	local rc=0
	go test -tags="$("$ROOT/build/ceph-tags.sh"),e2e_k8s" -json -count=1 -timeout 45m ./e2e/k8s/ "${args[@]}" "$@" |
		"$E2E_TOOLS/testreport" pipe -o "$events" || rc=$?
	if (($# == 0)); then
		"$E2E_TOOLS/testreport" check -step "e2e $pass" -list "$ROOT/scripts/k8s-e2e.tests" -v "$pass=$events" || rc=1
	else
		"$E2E_TOOLS/testreport" summary -step "e2e $pass" -v "$pass=$events" || rc=1
	fi
	return "$rc"
}

# helm_pass WORK [go test flags] (called in an || list, where set -e is
# off: every step dies on its own failure): replaces the kustomize install by a Helm
# release of deploy/helm/rbdcsi with deploy/e2e/helm-values.yaml, and runs
# the volume scenarios, the upgrade and the uninstall on it.
helm_pass() {
	local work=$1 t0=$SECONDS
	shift
	local cache=${RBDCSI_E2E_CACHE:-/var/cache/rbdcsi-e2e}
	printf '#!/bin/sh\nexec %q --kubeconfig %q "$@"\n' "$cache/bin/helm" "$KUBECONFIG" >"$work/helm.sh"
	chmod +x "$work/helm.sh"
	"$KUBECTL" delete -k "$work/deploy/e2e" --wait=true --timeout=180s || die "deleting the kustomize install failed"
	wait_registered no || die "kubelet still lists the driver 120 s after the kustomize install was deleted"
	log "kustomize install removed after $((SECONDS - t0)) s"

	# What the admin makes before `helm install` (README): the release
	# namespace, here "privileged" for the controller's host network, and
	# the provisioner's Secret (the chart names it: create: false).
	"$KUBECTL" create namespace rbdcsi || die "creating namespace rbdcsi failed"
	"$KUBECTL" label namespace rbdcsi pod-security.kubernetes.io/enforce=privileged || die "labelling namespace rbdcsi failed"
	"$KUBECTL" --namespace rbdcsi create secret generic rbdcsi-secret \
		--from-file=userID="$work/deploy/site/userID" --from-file=userKey="$work/deploy/site/userKey" || die "creating Secret rbdcsi-secret failed"
	# The local cluster's map and the node user's key, as values.
	(
		umask 077
		printf 'clusters:\n  - clusterID: ceph1\n    monitors: ["%s"]\n' "$CEPH_MON_HOST"
		printf 'secrets:\n  node:\n    userID: %s\n    userKey: %s\n' \
			"$(<"$work/deploy/site/nodeUserID")" "$(<"$work/deploy/site/nodeUserKey")"
	) >"$work/helm-local.yaml" || die "writing $work/helm-local.yaml failed"
	"$work/helm.sh" install rbdcsi "$ROOT/deploy/helm/rbdcsi" --namespace rbdcsi \
		-f "$ROOT/deploy/e2e/helm-values.yaml" -f "$work/helm-local.yaml" --wait --timeout 5m || die "helm install failed"
	wait_registered yes || die "the Helm-installed node plugin did not register with kubelet within 120 s"
	log "helm install done after $((SECONDS - t0)) s"

	export RBDCSI_E2E_INSTALL=helm E2E_HELM=$work/helm.sh E2E_HELM_CHART=$ROOT/deploy/helm/rbdcsi
	(cd "$ROOT" && go_test helm "$@")
}

# groupsnap_pass WORK [go test flags] (called in an || list, where set -e is
# off: every step dies on its own failure): the group snapshot scenario on
# the plugin image built on forky against a Tentacle cluster. The install of
# the passes before (if any is left) goes first; the node stays.
groupsnap_pass() {
	local work=$1 t0=$SECONDS
	shift
	local cache=${RBDCSI_E2E_CACHE:-/var/cache/rbdcsi-e2e} dir=$work/tentacle/cluster
	if "$KUBECTL" -n rbdcsi get deployment rbdcsi-controller >/dev/null 2>&1; then
		"$KUBECTL" delete -k "$work/deploy/e2e" --wait=true --timeout=180s || die "deleting the kustomize install failed"
	fi
	wait_registered no || die "kubelet still lists the driver 120 s after the earlier install was deleted"

	# Tentacle on 127.0.0.1, in a chroot of forky's cached root. With AES
	# keys: the scenario's checks run this machine's Pacific rbd and rados,
	# which cannot read the AES256K keys Tentacle makes by default (the forky
	# plugin could). One OSD: no erasure-coded pool is needed here.
	mkdir -p "$work/tentacle"
	"$ROOT/scripts/suite.sh" cluster forky "$dir" CEPH_KEY_TYPE=aes CEPH_EC_POOL=0 >"$work/tentacle/suite.log" 2>&1 &
	TENTACLE_PID=$!
	wait_cluster "$dir" "$TENTACLE_PID" "the Tentacle cluster (more in $work/tentacle/suite.log)"
	set -a
	# shellcheck disable=SC1091
	source "$dir/env"
	set +a
	log "Tentacle cluster up after $((SECONDS - t0)) s: $(ceph -c "$CEPH_CONF" version 2>&1)"
	write_local "$work" || die "writing the Tentacle cluster's map and keys failed"

	# The forky-built plugin image (outside the images the node imported at
	# boot), and deploy/e2e with the groupsnap component.
	ctr --address "$CONTAINERD_ADDRESS" -n k8s.io images import "$cache/plugin-images/rbdplugin-forky.tar" >/dev/null ||
		die "importing the forky plugin image failed"
	mkdir -p "$work/deploy/e2e-groupsnap"
	printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../e2e]\ncomponents: [../e2e/groupsnap]\n' \
		>"$work/deploy/e2e-groupsnap/kustomization.yaml"
	deploy "$work/deploy/e2e-groupsnap" "the forky driver"
	log "forky driver deployed on Tentacle after $((SECONDS - t0)) s"

	unset RBDCSI_E2E_INSTALL E2E_HELM E2E_HELM_CHART
	export RBDCSI_E2E_GROUPSNAP=1
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
