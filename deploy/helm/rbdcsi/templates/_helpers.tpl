{{/* Labels of every object: the name the manifests share, plus Helm's. */}}
{{- define "rbdcsi.labels" -}}
app.kubernetes.io/name: rbdcsi
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of a component's pods (immutable once deployed). */}}
{{- define "rbdcsi.selector" -}}
app.kubernetes.io/name: rbdcsi
app.kubernetes.io/component: {{ . }}
{{- end -}}

{{/* An image reference from images.<name>: the digest when set, else the tag. */}}
{{- define "rbdcsi.image" -}}
{{- if .digest -}}{{ .repository }}@{{ .digest }}{{- else -}}{{ .repository }}:{{ .tag }}{{- end -}}
{{- end -}}

{{/* The node plugin reads its Node object (topology or CRUSH location). */}}
{{- define "rbdcsi.nodeReadsNode" -}}
{{- if or .Values.node.domainLabels .Values.node.crushLocationLabels }}true{{ end -}}
{{- end -}}

{{/* The plugin's socket directory on the host. */}}
{{- define "rbdcsi.pluginDir" -}}
{{ .Values.node.kubeletDir }}/plugins/{{ .Values.driverName }}
{{- end -}}

{{/* Refuses settings the schema cannot express. */}}
{{- define "rbdcsi.validate" -}}
{{- if and (gt (int .Values.controller.replicas) 1) (not .Values.controller.leaderElection.enabled) -}}
{{- fail "controller.replicas > 1 needs controller.leaderElection.enabled: two replicas without leader election would both act on every request" -}}
{{- end -}}
{{- $ids := list -}}
{{- range .Values.clusters -}}
{{- if has .clusterID $ids -}}{{- fail (printf "clusters: clusterID %q is listed twice" .clusterID) -}}{{- end -}}
{{- $ids = append $ids .clusterID -}}
{{- end -}}
{{- $reg := splitList "/" .Values.nodeRegistry -}}
{{- if not (has (first $reg) $ids) -}}
{{- fail (printf "nodeRegistry %q: cluster %q is not in clusters" .Values.nodeRegistry (first $reg)) -}}
{{- end -}}
{{- range .Values.storageClasses -}}
{{- if and .clusterID (not (has .clusterID $ids)) -}}
{{- fail (printf "storageClasses %s: clusterID %q is not in clusters" .name .clusterID) -}}
{{- end -}}
{{- if not (or .pool (and .parameters .parameters.topologyConstrainedPools)) -}}
{{- fail (printf "storageClasses %s: needs pool, or parameters.topologyConstrainedPools" .name) -}}
{{- end -}}
{{- end -}}
{{- range $name, $img := .Values.images -}}
{{- if and (kindIs "map" $img) (eq (toString $img.tag) "latest") (not $img.digest) -}}
{{- fail (printf "images.%s.tag: \"latest\" is not a pinned version (nodes would run whatever it points to when they pull); give a release tag or a digest" $name) -}}
{{- end -}}
{{- end -}}
{{- $s := .Values.secrets -}}
{{- range $who, $sec := $s -}}
{{- if and $sec.create (not (and $sec.userID $sec.userKey)) -}}
{{- fail (printf "secrets.%s: create is true, so userID and userKey are needed (or set create: false and name an existing Secret)" $who) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The cluster map as the plugin reads it (--cluster-config). */}}
{{- define "rbdcsi.clusterMap" -}}
{{- $out := list -}}
{{- range .Values.clusters -}}
{{- $out = append $out (dict "clusterID" .clusterID "monitors" .monitors) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}
