#!/usr/bin/env bash
# The demo behind `make demo`: runs the plugin against the cluster that
# scripts/with-cluster.sh booted and walks volumes through their life over
# the plugin's real gRPC socket. Everything it starts it stops.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
: "${CEPH_DIR:?run me through scripts/with-cluster.sh}"
work=$(mktemp -d /tmp/rbdcsi-demo.XXXXXX)
plugin_pid=
cleanup() {
	if [ -n "$plugin_pid" ]; then kill "$plugin_pid" 2>/dev/null || true; wait "$plugin_pid" 2>/dev/null || true; fi
	# Never rm -rf over a live mount (rbd-fuse turns an unlink into an image
	# removal): a failed demo leaves its mounts for the operator to see.
	if grep -q " $work/" /proc/mounts; then
		echo "== mounts left under $work (the demo failed part-way):"; grep " $work/" /proc/mounts
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT INT TERM

install -d -m 0700 "$work/secret"
printf '%s' "$CEPH_CSI_USER" >"$work/secret/userID"
printf '%s' "$CEPH_CSI_KEY" >"$work/secret/userKey"
echo "== Starting the plugin (log: $work/plugin.log)"
# --mode all on one machine: controller and node; the fuse mapper because
# this kind of machine has no krbd; the node registry for attachments.
"$root/bin/rbdplugin" --mode all --nodeid demo-node --endpoint "unix://$work/csi.sock" \
	--cluster-config "$CEPH_DIR/cluster-config.json" --controller-secret-dir "$work/secret" \
	--node-registry "$CEPH_CLUSTER_ID/$CEPH_POOL" --node-secret-dir "$work/secret" \
	--default-mounter fuse --state-dir "$work/state" \
	--key-dir "$work/keys" --allow-key-dir-on-disk \
	>"$work/plugin.log" 2>&1 &
plugin_pid=$!
plugin_log() { echo "== plugin log:"; cat "$work/plugin.log"; }
for _ in $(seq 100); do [ -S "$work/csi.sock" ] && break; sleep 0.1; done
if [ ! -S "$work/csi.sock" ]; then
	echo "== the plugin did not open its socket within 10 s"; plugin_log; exit 1
fi
install -d -m 0750 "$work/mnt"
# The plugin's PID: its capabilities decide how the demo grows a volume.
go run "$root/e2e/demo" --socket "$work/csi.sock" --work "$work/mnt" --plugin-pid "$plugin_pid" || { plugin_log; exit 1; }
echo
# The last step deleted every volume: nothing may be left in the pool.
images=$(rbd -c "$CEPH_CONF" --id admin --key "$CEPH_ADMIN_KEY" ls -p "$CEPH_POOL")
if [ -n "$images" ]; then
	echo "== FAILED: images left in pool $CEPH_POOL:"; echo "$images"; exit 1
fi
echo "== No image left in pool $CEPH_POOL: the demo passed"
