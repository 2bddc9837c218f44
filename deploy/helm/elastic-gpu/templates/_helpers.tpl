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
"@<digest>" for an image's digest value (list "<value's name>" <digest>): ""
when the digest is empty; "sha256:" and 64 lowercase hex digits otherwise,
anything else fails the rendering (a digest that does not parse would make
every pod of the component fail to pull).
*/}}
{{- define "elastic-gpu.digest" -}}
{{- $name := index . 0 -}}
{{- $d := toString (default "" (index . 1)) -}}
{{- if $d -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" $d) -}}
{{- fail (printf "%s is %q: expected sha256: and 64 lowercase hex digits, e.g. sha256:%s (docker buildx imagetools inspect <image> prints it)" $name $d (repeat 64 "0")) -}}
{{- end -}}
{{- printf "@%s" $d -}}
{{- end -}}
{{- end -}}

{{/*
A component's Elastic GPU image: image.registry/<component>.image.repository:image.tag,
the tag defaulting to appVersion, then "@<component>.image.digest" when that is
set (the runtime then pulls that digest, whatever the tag now names).
Called with (list . "scheduler").
*/}}
{{- define "elastic-gpu.image" -}}
{{- $root := index . 0 -}}
{{- $i := $root.Values.image -}}
{{- $c := (index $root.Values (index . 1)).image -}}
{{- $digest := include "elastic-gpu.digest" (list (printf "%s.image.digest" (index . 1)) $c.digest) -}}
{{- printf "%s/%s:%s%s" $i.registry $c.repository (default $root.Chart.AppVersion $i.tag) $digest -}}
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
"true" when mode is dra (egpu-webhook and egpu-controller --mode dra and
egpu-scheduler --dra, as the Component deploy/dra), "" when it is
device-plugin, the default, which renders no flag; anything else fails, as
the binaries would refuse it.
*/}}
{{- define "elastic-gpu.draMode" -}}
{{- $m := toString .Values.mode -}}
{{- if not (has $m (list "device-plugin" "dra")) -}}
{{- fail (printf "mode is %q: expected device-plugin or dra (egpu-webhook and egpu-controller --mode)" $m) -}}
{{- end -}}
{{- if eq $m "dra" }}true{{ end -}}
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
{{- if and (eq $m "main") (include "elastic-gpu.placePodsWithoutGpu" .) -}}
{{- fail "scheduler.podsWithoutGpu is \"place\" with scheduler.mode main: the main kube-scheduler would call egpu-scheduler for every pod of the cluster, its own included, and wait on it (ignorable: false); use mode second, where pods opt in with schedulerName elastic-gpu-scheduler" -}}
{{- end -}}
{{- if eq $m "main" }}true{{ end -}}
{{- end -}}

{{/*
"true" when scheduler.podsWithoutGpu is place (egpu-scheduler
--pods-without-gpu place; kube-scheduler's configuration then has no
managedResources), "" when it is pass, the default, which renders no flag;
anything else fails, as egpu-scheduler would refuse it.
*/}}
{{- define "elastic-gpu.placePodsWithoutGpu" -}}
{{- $v := toString .Values.scheduler.podsWithoutGpu -}}
{{- if not (has $v (list "pass" "place")) -}}
{{- fail (printf "scheduler.podsWithoutGpu is %q: expected pass or place (egpu-scheduler --pods-without-gpu)" $v) -}}
{{- end -}}
{{- if eq $v "place" }}true{{ end -}}
{{- end -}}

{{/*
scheduler.targetWorkload as the JSON document egpu-scheduler --target-workload
reads, or "" when it is empty (no flag). Its shape is checked here: a map of
apiVersion elasticgpu.io/v1alpha1, kind TargetWorkload and a non-empty list
of typicalPods, each a map, and no other key (src/api/workload.c refuses
them too); the typical pods' fields are egpu-scheduler's to check, at start.
*/}}
{{- define "elastic-gpu.targetWorkload" -}}
{{- $w := .Values.scheduler.targetWorkload -}}
{{- if not (kindIs "map" $w) -}}
{{- fail (printf "scheduler.targetWorkload is a %s: expected a TargetWorkload document (a map), or {} for none" (kindOf $w)) -}}
{{- end -}}
{{- if $w -}}
{{- range $k, $_ := $w -}}
{{- if not (has $k (list "apiVersion" "kind" "typicalPods")) -}}
{{- fail (printf "scheduler.targetWorkload.%s: unknown key; expected apiVersion, kind and typicalPods" $k) -}}
{{- end -}}
{{- end -}}
{{- $api := toString (default "" $w.apiVersion) -}}
{{- if ne $api "elasticgpu.io/v1alpha1" -}}
{{- fail (printf "scheduler.targetWorkload.apiVersion is %q: expected elasticgpu.io/v1alpha1" $api) -}}
{{- end -}}
{{- $kind := toString (default "" $w.kind) -}}
{{- if ne $kind "TargetWorkload" -}}
{{- fail (printf "scheduler.targetWorkload.kind is %q: expected TargetWorkload" $kind) -}}
{{- end -}}
{{- if or (not (kindIs "slice" $w.typicalPods)) (not $w.typicalPods) -}}
{{- fail "scheduler.targetWorkload.typicalPods: expected a non-empty list of typical pods" -}}
{{- end -}}
{{- range $i, $p := $w.typicalPods -}}
{{- if not (kindIs "map" $p) -}}
{{- fail (printf "scheduler.targetWorkload.typicalPods[%d]: expected a map (cpuMilli, gpuMilli, gpus, models, weight)" $i) -}}
{{- end -}}
{{- end -}}
{{- toPrettyJson $w -}}
{{- end -}}
{{- end -}}

{{- define "elastic-gpu.kubeSchedulerImage" -}}
{{- $i := .Values.scheduler.kubeScheduler.image -}}
{{- $digest := include "elastic-gpu.digest" (list "scheduler.kubeScheduler.image.digest" $i.digest) -}}
{{- printf "%s/%s:%s%s" $i.registry $i.repository $i.tag $digest -}}
{{- end -}}

{{/*
webhook.defaultMemoryPerCore as egpu-webhook --default-memory-per-core takes
it, MiB per gpu-core percent in 0..65536; anything else fails the rendering.
*/}}
{{- define "elastic-gpu.defaultMemoryPerCore" -}}
{{- $v := toString .Values.webhook.defaultMemoryPerCore -}}
{{- if or (not (regexMatch "^[0-9]{1,5}$" $v)) (gt (atoi $v) 65536) -}}
{{- fail (printf "webhook.defaultMemoryPerCore is %q: expected MiB per gpu-core percent, a whole number in 0..65536 (egpu-webhook --default-memory-per-core)" $v) -}}
{{- end -}}
{{- atoi $v -}}
{{- end -}}

{{/*
A ConfigMap's name as kustomize's configMapGenerator makes it: the name, a
dash and a hash of the data (sha256 of the JSON of kind, an empty name and
data; its first 10 hex digits with 0, 1, 3, a, e spelled g, h, k, m, t), so
a change of the data rolls the pods that mount it. Called with
(list "<name>" <data dict>).
*/}}
{{- define "elastic-gpu.hashedName" -}}
{{- $hash := toJson (dict "data" (index . 1) "kind" "ConfigMap" "name" "") | sha256sum | trunc 10 -}}
{{ index . 0 }}-{{ $hash | replace "0" "g" | replace "1" "h" | replace "3" "k" | replace "a" "m" | replace "e" "t" }}
{{- end -}}

{{/*
The scheduler ConfigMap's name: elastic-gpu-scheduler-config and the hash
kustomize's configMapGenerator gives it, so both installs name it alike.
*/}}
{{- define "elastic-gpu.schedulerConfigName" -}}
{{- include "elastic-gpu.hashedName" (list "elastic-gpu-scheduler-config" (dict "scheduler-config.yaml" (include "elastic-gpu.schedulerConfig" .))) -}}
{{- end -}}

{{/*
The name of the target workload's ConfigMap (scheduler.targetWorkload),
elastic-gpu-target-workload and the hash of its document, so that a new
document rolls the scheduler pods (egpu-scheduler reads it once, at start).
*/}}
{{- define "elastic-gpu.targetWorkloadName" -}}
{{- include "elastic-gpu.hashedName" (list "elastic-gpu-target-workload" (dict "target_workload.json" (include "elastic-gpu.targetWorkload" .))) -}}
{{- end -}}

{{/*
The peer a NetworkPolicy admits to a metrics port: the pods
.Values.networkPolicy.prometheus selects (a list of one NetworkPolicyPeer).
*/}}
{{- define "elastic-gpu.prometheusPeer" -}}
- namespaceSelector: {{ .Values.networkPolicy.prometheus.namespaceSelector | toJson }}
  podSelector: {{ .Values.networkPolicy.prometheus.podSelector | toJson }}
{{- end }}
