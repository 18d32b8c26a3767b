{{/* The name the objects share as app.kubernetes.io/name. */}}
{{- define "rbdcsi.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* The prefix of the objects' names: the release name, with the chart's
     name after it unless it holds it already (release rbdcsi: rbdcsi-...).
     At most 40 characters, so the longest suffix keeps names within 63. */}}
{{- define "rbdcsi.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "rbdcsi.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object: the name the manifests share, plus Helm's. */}}
{{- define "rbdcsi.labels" -}}
app.kubernetes.io/name: {{ include "rbdcsi.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of a component's pods (immutable once deployed), from
     (dict "root" $ "component" "controller"). */}}
{{- define "rbdcsi.selector" -}}
app.kubernetes.io/name: {{ include "rbdcsi.name" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* An image reference from images.<name>: the digest when set, else the tag. */}}
{{- define "rbdcsi.image" -}}
{{- if .digest -}}{{ .repository }}@{{ .digest }}{{- else -}}{{ .repository }}:{{ .tag }}{{- end -}}
{{- end -}}

{{/* The plugin's image reference: images.plugin, an empty tag meaning the
     chart's appVersion (a release's chart runs that release's image). */}}
{{- define "rbdcsi.pluginImage" -}}
{{- $img := .Values.images.plugin -}}
{{- include "rbdcsi.image" (dict "repository" $img.repository "digest" $img.digest "tag" ($img.tag | default .Chart.AppVersion)) -}}
{{- end -}}

{{/* The node plugin reads its Node object (topology or CRUSH location). */}}
{{- define "rbdcsi.nodeReadsNode" -}}
{{- if or .Values.node.domainLabels .Values.node.crushLocationLabels }}true{{ end -}}
{{- end -}}

{{/* The plugin's socket directory on the host. */}}
{{- define "rbdcsi.pluginDir" -}}
{{ .Values.node.kubeletDir }}/plugins/{{ .Values.driverName }}
{{- end -}}

{{/* clusterID/pool of the node registry: nodeRegistry, or the first
     cluster and the default pool. */}}
{{- define "rbdcsi.nodeRegistry" -}}
{{- if .Values.nodeRegistry -}}
{{- .Values.nodeRegistry -}}
{{- else if and .Values.clusters .Values.pool -}}
{{- printf "%s/%s" (first .Values.clusters).clusterID .Values.pool -}}
{{- end -}}
{{- end -}}

{{/* The pool of a StorageClass entry: its own; else, unless
     topologyConstrainedPools places its volumes, the default pool. */}}
{{- define "rbdcsi.classPool" -}}
{{- if .class.pool -}}
{{- .class.pool -}}
{{- else if not (and .class.parameters .class.parameters.topologyConstrainedPools) -}}
{{- .root.Values.pool | default "" -}}
{{- end -}}
{{- end -}}

{{/* The KEK Secret the controller mounts: secrets.keks.name, or its default
     when the values lack it (an upgrade with --reuse-values keeps the
     values of a chart that had none). */}}
{{- define "rbdcsi.keksName" -}}
{{- (.Values.secrets.keks | default dict).name | default "rbdcsi-keks" -}}
{{- end -}}

{{/* The KEK Secrets in use, as a YAML flow list: secrets.keks (the one the
     controller mounts for the KEK rotation) and every class's keySecret,
     each once. The Role that lets the sidecars get the Secrets the classes
     name lists exactly these; never empty (rbdcsi.keksName never is), so
     the Role stays valid. */}}
{{- define "rbdcsi.kekSecrets" -}}
{{- $names := list (include "rbdcsi.keksName" .) -}}
{{- range .Values.storageClasses -}}
{{- with .keySecret -}}{{- $names = append $names . -}}{{- end -}}
{{- end -}}
{{- $quoted := list -}}
{{- range $names | compact | uniq -}}{{- $quoted = append $quoted (quote .) -}}{{- end -}}
[{{ join ", " $quoted }}]
{{- end -}}

{{/* Refuses settings the schema cannot express, and an install into a
     cluster that lacks the kinds the values ask for (helm template and
     helm install --dry-run=client know a cluster's kinds only from
     --api-versions). helm lint renders neither as install nor upgrade. */}}
{{- define "rbdcsi.validate" -}}
{{- if hasKey .Values "nodeNamespace" -}}
{{- fail "nodeNamespace is gone: the node plugin runs in the release namespace, beside the controller (the csi-addons controller finds the leading controller sidecar only when all of the driver's pods share one namespace). Label the release namespace pod-security.kubernetes.io/enforce=privileged, make the node user's Secret in it, and upgrade with --set nodeNamespace=null (docs/operations.md, upgrades)" -}}
{{- end -}}
{{- if and (gt (int .Values.controller.replicas) 1) (not .Values.controller.leaderElection.enabled) -}}
{{- fail "controller.replicas > 1 needs controller.leaderElection.enabled: two replicas without leader election would both act on every request" -}}
{{- end -}}
{{- $ids := list -}}
{{- range .Values.clusters -}}
{{- if has .clusterID $ids -}}{{- fail (printf "clusters: clusterID %q is listed twice" .clusterID) -}}{{- end -}}
{{- $ids = append $ids .clusterID -}}
{{- end -}}
{{- $registry := include "rbdcsi.nodeRegistry" . -}}
{{- if not $registry -}}
{{- fail "nodeRegistry is empty and so is pool: set pool, or nodeRegistry: <clusterID>/<pool>" -}}
{{- end -}}
{{- $reg := splitList "/" $registry -}}
{{- if not (has (first $reg) $ids) -}}
{{- fail (printf "nodeRegistry %q: cluster %q is not in clusters" $registry (first $reg)) -}}
{{- end -}}
{{- range .Values.storageClasses -}}
{{- if and .clusterID (not (has .clusterID $ids)) -}}
{{- fail (printf "storageClasses %s: clusterID %q is not in clusters" .name .clusterID) -}}
{{- end -}}
{{- if not (or (include "rbdcsi.classPool" (dict "root" $ "class" .)) (and .parameters .parameters.topologyConstrainedPools)) -}}
{{- fail (printf "storageClasses %s: needs pool (or the top-level pool), or parameters.topologyConstrainedPools" .name) -}}
{{- end -}}
{{- $encrypted := and .parameters (eq (toString .parameters.encrypted) "true") -}}
{{- if and $encrypted (not .keySecret) -}}
{{- fail (printf "storageClasses %s: encrypted classes need keySecret, the Secret of their KMS's keys (KEKs, or KMIP client credentials) in the release namespace: the class's provisioner and node-stage secret, the only Secret it names (docs/encryption.md)" .name) -}}
{{- end -}}
{{- if and .keySecret (not $encrypted) -}}
{{- fail (printf "storageClasses %s: keySecret is for encrypted classes (parameters.encrypted: \"true\"); a class names no other Secret, the plugins reach Ceph as their own users" .name) -}}
{{- end -}}
{{- if and .keySecret (eq .keySecret $.Values.secrets.controller.name) -}}
{{- fail (printf "storageClasses %s: keySecret %q is secrets.controller.name, the Secret of the controller's Ceph key; keep KEKs in a Secret of their own (the driver refuses a Secret with both)" .name .keySecret) -}}
{{- end -}}
{{- end -}}
{{- range $name, $img := .Values.images -}}
{{- if and (kindIs "map" $img) (eq (toString $img.tag) "latest") (not $img.digest) -}}
{{- fail (printf "images.%s.tag: \"latest\" is not a pinned version (nodes would run whatever it points to when they pull); give a release tag or a digest" $name) -}}
{{- end -}}
{{- end -}}
{{- with .Values.snapshotMetadata.tls -}}
{{- if and .existingSecret (not .caCert) -}}
{{- fail "snapshotMetadata.tls.existingSecret needs snapshotMetadata.tls.caCert: the PEM of the CA that signed its certificate, for the SnapshotMetadataService object (the chart cannot read the Secret at helm template)" -}}
{{- end -}}
{{- if and .caCert (not .existingSecret) -}}
{{- fail "snapshotMetadata.tls.caCert is only for snapshotMetadata.tls.existingSecret: without one, the chart makes the CA and the certificate itself" -}}
{{- end -}}
{{- end -}}
{{- $s := .Values.secrets -}}
{{- $keks := include "rbdcsi.keksName" . -}}
{{- if eq $keks $s.controller.name -}}
{{- fail (printf "secrets.keks.name %q is secrets.controller.name, the Secret of the controller's Ceph key; keep KEKs in a Secret of their own (the driver refuses a Secret with both)" $keks) -}}
{{- end -}}
{{- range $who, $sec := $s -}}
{{- if and $sec.create (not (and $sec.userID $sec.userKey)) -}}
{{- fail (printf "secrets.%s: create is true, so userID and userKey are needed (or set create: false and name an existing Secret)" $who) -}}
{{- end -}}
{{- end -}}
{{- if or .Release.IsInstall .Release.IsUpgrade -}}
{{- if and .Values.volumeSnapshotClasses (not (.Capabilities.APIVersions.Has "snapshot.storage.k8s.io/v1/VolumeSnapshotClass")) -}}
{{- fail "the VolumeSnapshot CRDs are not installed in this cluster (no snapshot.storage.k8s.io/v1 VolumeSnapshotClass): install them and the snapshot-controller first (docs/install.md, step 5), or set volumeSnapshotClasses: [] to install without snapshots. helm template: --api-versions snapshot.storage.k8s.io/v1/VolumeSnapshotClass" -}}
{{- end -}}
{{- if and .Values.snapshotMetadata.enabled (not (.Capabilities.APIVersions.Has "cbt.storage.k8s.io/v1beta1/SnapshotMetadataService")) -}}
{{- fail "snapshotMetadata.enabled: the SnapshotMetadataService CRD is not installed in this cluster (no cbt.storage.k8s.io/v1beta1 SnapshotMetadataService): install it from the external-snapshot-metadata project (docs/backup.md), or set snapshotMetadata.enabled: false. helm template: --api-versions cbt.storage.k8s.io/v1beta1/SnapshotMetadataService" -}}
{{- end -}}
{{- if and .Values.csiAddons.enabled (not (.Capabilities.APIVersions.Has "csiaddons.openshift.io/v1alpha1/CSIAddonsNode")) -}}
{{- fail "csiAddons.enabled: the csi-addons CRDs are not installed in this cluster (no csiaddons.openshift.io/v1alpha1 CSIAddonsNode): install them and the csi-addons controller first (docs/csi-addons.md), or set csiAddons.enabled: false. helm template: --api-versions csiaddons.openshift.io/v1alpha1/CSIAddonsNode" -}}
{{- end -}}
{{- if and .Values.metrics.enabled .Values.metrics.serviceMonitor.enabled (not (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor")) -}}
{{- fail "metrics.serviceMonitor.enabled: the Prometheus Operator's CRDs are not installed in this cluster (no monitoring.coreos.com/v1 ServiceMonitor): install them, or set metrics.serviceMonitor.enabled: false. helm template: --api-versions monitoring.coreos.com/v1/ServiceMonitor" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The cluster map as the plugin reads it (--cluster-config). */}}
{{- define "rbdcsi.clusterMap" -}}
{{- $out := list -}}
{{- range .Values.clusters -}}
{{- $c := dict "clusterID" .clusterID "monitors" .monitors -}}
{{- if .radosNamespace -}}
{{- $_ := set $c "rbd" (dict "radosNamespace" .radosNamespace) -}}
{{- end -}}
{{- $out = append $out $c -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The Secret of the snapshot-metadata sidecar's certificate: the one the
     values name, or the one the chart makes. */}}
{{- define "rbdcsi.snapshotMetadataSecret" -}}
{{- .Values.snapshotMetadata.tls.existingSecret | default (printf "%s-snapshot-metadata-tls" (include "rbdcsi.fullname" .)) -}}
{{- end -}}
