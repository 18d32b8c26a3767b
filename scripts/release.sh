#!/usr/bin/env bash
# release.sh VERSION (make release VERSION=vX.Y.Z): what a user takes to
# install a release, in dist/ ($RELEASE_DIR):
#
#   rbdplugin-VERSION-trixie.tar   the image (Ceph 18.2 Reef clients), OCI archive,
#                                  docker.io/rbdcsi/rbdplugin:VERSION
#   rbdplugin-VERSION-forky.tar    the image with Ceph 20.2 Tentacle clients,
#                                  docker.io/rbdcsi/rbdplugin:VERSION-forky
#   rbdcsi-X.Y.Z.tgz               the Helm chart (chart version and appVersion
#                                  are the release's; the plugin's tag defaults
#                                  to appVersion)
#   rbdcsi.yaml                    the install manifest: deploy/kubernetes
#                                  rendered with the release's image
#   rbdcsi-site-VERSION.tar.gz     rbdcsi-site-VERSION/ holding site/ (deploy/site,
#                                  the overlay a user fills in, its image the
#                                  release's) over kubernetes/ (rbdcsi.yaml),
#                                  beside snapshotclass/, topology/,
#                                  snapshot-metadata/ and csi-addons/: the
#                                  layout of deploy/, so the overlay's paths
#                                  hold in both (docs/install.md)
#   SHA256SUMS
#
# The images come from build/Dockerfile (scripts/image.sh); an image archive
# of this VERSION already in the directory is kept when the image built now
# is the same one (make e2e releases every run into its cache). The chart is
# packaged by helm (built from its Go module, scripts/k8s-build.sh helm).
set -euo pipefail

readonly PROG=${0##*/}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
readonly ROOT
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"

(($# == 1)) || die "usage: $PROG VERSION (vX.Y.Z, or vX.Y.Z-PRERELEASE)"
VERSION=$1
export VERSION
# SemVer 2.0's own rule: no numeric identifier with a leading zero
# (helm refuses such a chart version).
readonly NUM='(0|[1-9][0-9]*)' PRE='(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)'
[[ $VERSION =~ ^v$NUM\.$NUM\.$NUM(-$PRE(\.$PRE)*)?$ ]] ||
	die "VERSION must be a SemVer tag such as v0.3.0 (helm's chart version is it without the v): $VERSION"
readonly CHART_VERSION=${VERSION#v}
readonly REPO=docker.io/rbdcsi/rbdplugin
readonly DIST=${RELEASE_DIR:-$ROOT/dist}
t0=$SECONDS

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Empty the directory but for this version's image archives.
mkdir -p "$DIST"
find "$DIST" -mindepth 1 -maxdepth 1 ! -name "rbdplugin-$VERSION-trixie.tar" ! -name "rbdplugin-$VERSION-forky.tar" \
	-exec rm -rf {} +

# archive_id TAR: the ID of the image in an OCI archive (its config's
# digest, what buildah calls the image ID), for image.sh's check.
archive_id() {
	local manifest
	manifest=$(tar -xOf "$1" index.json | sed -n 's/.*"digest":"sha256:\([0-9a-f]*\)".*/\1/p')
	[[ -n $manifest ]] || return 1
	tar -xOf "$1" "blobs/sha256/$manifest" | sed -n 's/.*"config":{[^}]*"digest":"sha256:\([0-9a-f]*\)".*/\1/p'
}

# The images, both suites; the commit they come from goes into --version.
for suite in trixie forky; do
	ref=$REPO:$VERSION
	[[ $suite == trixie ]] || ref+=-$suite
	out=$DIST/rbdplugin-$VERSION-$suite.tar
	if [[ -f $out ]]; then
		archive_id "$out" >"$out.id" || rm -f "$out" "$out.id"
	fi
	IMAGE_LOG=$work/image-$suite.log "$ROOT/scripts/image.sh" build "$suite" "$out" "$ref"
	rm -f "$out.id"
done

# The chart: appVersion, the plugin image's default tag, is the release.
"$ROOT/scripts/k8s-build.sh" helm >/dev/null
helm=${RBDCSI_HELM:-${RBDCSI_E2E_CACHE:-/var/cache/rbdcsi-e2e}/bin/helm}
"$helm" package "$ROOT/deploy/helm/rbdcsi" --version "$CHART_VERSION" --app-version "$VERSION" -d "$DIST" >/dev/null ||
	die "helm package failed"

# The manifest: the base with the release's image (kustomize takes no
# absolute path to a kustomization).
mkdir -p "$work/render"
cat >"$work/render/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $(realpath --relative-to="$work/render" "$ROOT/deploy/kubernetes")
images:
  - name: rbdcsi/rbdplugin
    newName: $REPO
    newTag: $VERSION
EOF
(cd "$ROOT" && go run ./scripts/kustomize "$work/render") >"$DIST/rbdcsi.yaml" || die "rendering deploy/kubernetes failed"
# Every plugin container runs the release's image, none the base's.
if (($(grep -c "image: $REPO:$VERSION\$" "$DIST/rbdcsi.yaml") != 2)) || grep -q 'image: rbdcsi/rbdplugin' "$DIST/rbdcsi.yaml"; then
	die "rbdcsi.yaml does not name $REPO:$VERSION for the controller and the node plugin"
fi

# The site tarball: deploy/'s layout, with the base as rbdcsi.yaml.
top=rbdcsi-site-$VERSION
mkdir -p "$work/$top/kubernetes"
cp "$DIST/rbdcsi.yaml" "$work/$top/kubernetes/"
cat >"$work/$top/kubernetes/kustomization.yaml" <<EOF
# The base of release $VERSION: deploy/kubernetes rendered with the
# release's image. Not applied on its own: site/ is the overlay to fill in.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - rbdcsi.yaml
EOF
cp -r "$ROOT/deploy/site" "$ROOT/deploy/snapshotclass" "$ROOT/deploy/topology" "$ROOT/deploy/snapshot-metadata" \
	"$ROOT/deploy/csi-addons" "$work/$top/"
rm -f "$work/$top/site/"{userID,userKey,nodeUserID,nodeUserKey} "$work/$top/snapshot-metadata/"{tls.crt,tls.key,ca.crt,ca.crt.base64}
sed -i "s#^pluginImage=.*#pluginImage=$REPO:$VERSION#" "$work/$top/site/settings.env"
grep -qx "pluginImage=$REPO:$VERSION" "$work/$top/site/settings.env" || die "deploy/site/settings.env sets no pluginImage"
# The tarball renders, and to the release's image (test files stand in
# for the user's).
mkdir -p "$work/check"
cp -r "$work/$top/." "$work/check/"
for f in userID userKey nodeUserID nodeUserKey; do printf 'x' >"$work/check/site/$f"; done
(cd "$ROOT" && go run ./scripts/kustomize "$work/check/site") >"$work/check.yaml" || die "the site overlay of the tarball does not build"
(($(grep -c "image: $REPO:$VERSION\$" "$work/check.yaml") == 2)) || die "the site overlay of the tarball does not run $REPO:$VERSION"
# And with the changed-block tracking component, as docs/backup.md adds it.
printf 'components:\n  - ../snapshot-metadata\n' >>"$work/check/site/kustomization.yaml"
for f in tls.crt tls.key ca.crt; do printf 'x' >"$work/check/snapshot-metadata/$f"; done
printf 'eA==' >"$work/check/snapshot-metadata/ca.crt.base64"
(cd "$ROOT" && go run ./scripts/kustomize "$work/check/site") >"$work/check.yaml" ||
	die "the site overlay of the tarball does not build with the snapshot-metadata component"
grep -qx 'kind: SnapshotMetadataService' "$work/check.yaml" || die "the snapshot-metadata component adds no SnapshotMetadataService"
# And with the csi-addons component too, as docs/csi-addons.md adds it.
echo '  - ../csi-addons' >>"$work/check/site/kustomization.yaml"
(cd "$ROOT" && go run ./scripts/kustomize "$work/check/site") >"$work/check.yaml" ||
	die "the site overlay of the tarball does not build with the csi-addons component"
grep -q 'image: quay.io/csiaddons/k8s-sidecar:' "$work/check.yaml" || die "the csi-addons component adds no csi-addons sidecar"
tar --owner=0 --group=0 --numeric-owner --sort=name -C "$work" -czf "$DIST/rbdcsi-site-$VERSION.tar.gz" "$top"

(cd "$DIST" && sha256sum -- * >SHA256SUMS)
log "release $VERSION in $DIST after $((SECONDS - t0)) s:"
(cd "$DIST" && ls -l) >&2
