#!/usr/bin/env bash
# Runs a command against a fresh single-node Ceph cluster and always tears the
# cluster down afterwards, whatever the command's outcome.
# Usage: scripts/with-cluster.sh COMMAND [ARGS...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/rbdcsi-cluster.XXXXXX)
cleanup() { "$here/ceph-cluster.sh" down "$dir" >/dev/null 2>&1 || true; }
trap cleanup EXIT INT TERM
# The mgr serves pool statistics (GetCapacity); RBD itself does not need it.
CEPH_WITH_MGR=${CEPH_WITH_MGR:-1} "$here/ceph-cluster.sh" up "$dir"
set -a
# shellcheck disable=SC1091
source "$dir/env"
set +a
export CEPH_CLUSTER_DIR="$dir"
"$@"
