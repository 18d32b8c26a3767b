# shellcheck shell=bash
# k8s-node-files.sh: the files scripts/k8s-node.sh boots the node from
# (certificates, kubeconfigs, containerd/CNI/kubelet/kube-proxy configs),
# all under DIR. Sourced by k8s-node.sh, whose variables it uses; not run
# on its own.

# --- pki -------------------------------------------------------------------------

make_pki() {
	local p=$DIR/pki
	mkdir -p "$p"
	(
		umask 077
		cd "$p" || exit
		openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj "/CN=rbdcsi-e2e-ca" 2>/dev/null
		cert() { # cert NAME SUBJECT [SAN]
			openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
			if [[ -n ${3:-} ]]; then
				printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$3" >"$1.ext"
			else
				printf 'extendedKeyUsage=clientAuth\n' >"$1.ext"
			fi
			openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
			rm -f "$1.csr" "$1.ext"
		}
		cert apiserver "/CN=kube-apiserver" "IP:$NODE_IP,IP:127.0.0.1,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
		cert kubelet "/CN=$NODE_NAME" "IP:$NODE_IP,DNS:$NODE_NAME"
		cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
		openssl genrsa -out sa.key 2048 2>/dev/null
		openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
		# One admin identity (system:masters) for every component: this is a
		# throwaway test node, not a model of a production cluster's RBAC.
		openssl rand -hex 24 >admin.token
		printf '%s,admin,admin-uid,"system:masters"\n' "$(<admin.token)" >tokens.csv
	)
	cat >"$DIR/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://$NODE_IP:$APISERVER_PORT
    certificate-authority: $p/ca.crt
users:
- name: admin
  user:
    token: $(<"$p/admin.token")
contexts:
- name: e2e
  context: {cluster: e2e, user: admin}
current-context: e2e
EOF
	chmod 0600 "$DIR/kubeconfig"
}

# --- containerd, kubelet ---------------------------------------------------------

write_configs() {
	mkdir -p "$DIR/containerd" "$DIR/cni/net.d" "$DIR/cni/ipam" "$DIR/pod-logs" "$DIR/volume-plugins"
	cat >"$DIR/containerd/config.toml" <<EOF
version = 2
root = "$DIR/containerd/root"
state = "$DIR/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$DIR/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # Root here lacks CAP_SYS_RESOURCE: never lower a process's OOM score adj.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$DIR/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
EOF
	# The bridge k8s-node.sh made, without masquerading: pods have an
	# address and one route, to the node's /24 through the host's address
	# on the bridge (no default route).
	cat >"$DIR/cni/net.d/10-rbdcsi-e2e.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "rbdcsi-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$POD_BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": false,
      "ipam": {
        "type": "host-local",
        "dataDir": "$DIR/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$POD_GW"}]],
        "routes": [{"dst": "$NET24.0/24"}]
      }
    },
    {"type": "loopback"}
  ]
}
EOF
	cat >"$DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $DIR/pki/kubelet.crt
tlsPrivateKeyFile: $DIR/pki/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $DIR/pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$SOCK
# This VM: cgroup v1 (kubelet refuses it unless told), no systemd.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
podLogsDir: $DIR/pod-logs
volumePluginDir: $DIR/volume-plugins
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
registerNode: true
serializeImagePulls: false
rotateCertificates: false
serverTLSBootstrap: false
# A small VM with a test's disk use: no evictions or image GC mid-test.
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
syncFrequency: 10s
fileCheckFrequency: 10s
# The volume health manager (alpha; docs/operations.md, "Volume health")
# writes NodeGetVolumeHealth into pods' status and NodeGetStorageHealth into
# the CSINode's, probing every volumeStatsAggPeriod (default 1m): e2e/k8s's
# health tests wait less.
featureGates: {CSIVolumeHealth: true}
volumeStatsAggPeriod: 15s
EOF
	cat >"$DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $DIR/kubeconfig}
hostnameOverride: $NODE_NAME
mode: iptables
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clusterCIDR: $POD_CIDR
nodePortAddresses: ["$NODE_IP/32"]
# Leave the host's conntrack and route_localnet sysctls alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false}
EOF
}
