{{/*
Helpers of the elastic-gpu chart. The templates are deploy/'s manifests
with these in place of what values.yaml sets.
*/}}

{{/* The namespace of every namespaced object. */}}
{{- define "elastic-gpu.namespace" -}}
{{- .Values.namespace.name -}}
{{- end -}}

{{/*
Labels of every object: the one the kustomize base adds
(app.kubernetes.io/part-of) and Helm's standard ones.
*/}}
{{- define "elastic-gpu.labels" -}}
app.kubernetes.io/part-of: elastic-gpu
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Labels added to pod templates (never to selectors). */}}
{{- define "elastic-gpu.podLabels" -}}
app.kubernetes.io/part-of: elastic-gpu
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
A component's Elastic GPU image: image.registry/<component>.image.repository:image.tag,
the tag defaulting to appVersion. Called with (list . "scheduler").
*/}}
{{- define "elastic-gpu.image" -}}
{{- $root := index . 0 -}}
{{- $i := $root.Values.image -}}
{{- $repo := (index $root.Values (index . 1)).image.repository -}}
{{- printf "%s/%s:%s" $i.registry $repo (default $root.Chart.AppVersion $i.tag) -}}
{{- end -}}

{{/*
agent.contextExtraMib as egpu-agent --context-extra-mib takes it, a whole
number of MiB in 0..65536; anything else fails the rendering, as the flag
would fail the agent, instead of becoming a default.
*/}}
{{- define "elastic-gpu.contextExtraMib" -}}
{{- $v := toString .Values.agent.contextExtraMib -}}
{{- if or (not (regexMatch "^[0-9]{1,5}$" $v)) (gt (atoi $v) 65536) -}}
{{- fail (printf "agent.contextExtraMib is %q: expected MiB, a whole number in 0..65536 (egpu-agent --context-extra-mib)" $v) -}}
{{- end -}}
{{- atoi $v -}}
{{- end -}}

{{/*
"true" when scheduler.mode is main (the extender in the cluster's own
kube-scheduler, as the Component deploy/scheduler/main-scheduler), "" when
it is second (deploy/'s second scheduler); any other mode fails.
*/}}
{{- define "elastic-gpu.mainScheduler" -}}
{{- $m := .Values.scheduler.mode -}}
{{- if not (has $m (list "second" "main")) -}}
{{- fail (printf "scheduler.mode is %q: expected second or main" $m) -}}
{{- end -}}
{{- if eq $m "main" }}true{{ end -}}
{{- end -}}

{{- define "elastic-gpu.kubeSchedulerImage" -}}
{{- $i := .Values.scheduler.kubeScheduler.image -}}
{{- printf "%s/%s:%s" $i.registry $i.repository $i.tag -}}
{{- end -}}

{{/*
The scheduler ConfigMap's name: elastic-gpu-scheduler-config and the hash
kustomize's configMapGenerator gives it (sha256 of the JSON of kind, an
empty name and data; its first 10 hex digits with 0, 1, 3, a, e spelled
g, h, k, m, t), so both installs name it alike and a change of the
configuration rolls the pods.
*/}}
{{- define "elastic-gpu.schedulerConfigName" -}}
{{- $data := dict "scheduler-config.yaml" (include "elastic-gpu.schedulerConfig" .) -}}
{{- $hash := toJson (dict "data" $data "kind" "ConfigMap" "name" "") | sha256sum | trunc 10 -}}
elastic-gpu-scheduler-config-{{ $hash | replace "0" "g" | replace "1" "h" | replace "3" "k" | replace "a" "m" | replace "e" "t" }}
{{- end -}}
