{{/*
deploy/scheduler/scheduler-config.yaml, the namespace from values.yaml. With
scheduler.podsWithoutGpu place the extender entry lists no
managedResources (kube-scheduler calls an extender that lists them only
for pods that ask one of them), and the profile's NodeResourcesFit ignores
elasticgpu.io/gpu-memory and elasticgpu.io/dra (DRA mode's marker)
instead, as ignoredByScheduler did: no node advertises them.
*/}}
{{- define "elastic-gpu.schedulerConfig" -}}
# kube-scheduler --config: a second scheduler, elastic-gpu-scheduler, whose
# extender is egpu-scheduler. Pods opt in with spec.schedulerName:
# elastic-gpu-scheduler (the admission webhook sets it for GPU pods).
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  leaseDuration: 15s
  renewDeadline: 10s
  retryPeriod: 2s
  resourceLock: leases
  resourceName: elastic-gpu-kube-scheduler    # not kube-scheduler: that is the main scheduler's
  resourceNamespace: {{ include "elastic-gpu.namespace" . }}
# Every feasible node goes to the extender, so the GPU placement policy
# (binpack, FGD...) chooses among all of them. kube-scheduler's default
# stops looking after a share of the nodes that shrinks as the cluster
# grows (10% at 5,000 nodes).
percentageOfNodesToScore: 100
profiles:
  - schedulerName: elastic-gpu-scheduler
{{- if include "elastic-gpu.placePodsWithoutGpu" . }}
    # scheduler.podsWithoutGpu place: the extender's entry below has no
    # managedResources, so this says what its ignoredByScheduler said.
    pluginConfig:
      - name: NodeResourcesFit
        args:
          ignoredResources:
            - elasticgpu.io/gpu-memory        # not advertised by nodes; only the extender counts it
            - elasticgpu.io/dra               # DRA mode's marker: not advertised by nodes either
{{- end }}
# The extender is egpu-scheduler in the same pod, on loopback: nothing
# outside the pod reaches its verbs (it listens on 127.0.0.1 only), and the
# leading kube-scheduler calls its own pod's extender, which binds only while
# this kube-scheduler holds the Lease above (--follow-lease).
extenders:
  - urlPrefix: http://127.0.0.1:8888
    filterVerb: filter
    prioritizeVerb: prioritize
    bindVerb: bind                            # egpu-scheduler annotates the pod, then creates the Binding
    weight: 5
    nodeCacheCapable: true
    httpTimeout: 5s
    enableHTTPS: false
{{- if include "elastic-gpu.placePodsWithoutGpu" . }}
    # no managedResources: every pod of this scheduler reaches the extender
    # (egpu-scheduler --pods-without-gpu place)
{{- else }}
    managedResources:
      - name: elasticgpu.io/gpu-core
        ignoredByScheduler: false             # advertised by the node agent's device plugin
      - name: elasticgpu.io/gpu-memory
        ignoredByScheduler: true              # not advertised by nodes; only the extender counts it
      - name: elasticgpu.io/dra
        ignoredByScheduler: true              # DRA mode's marker (egpu-webhook --mode dra): the pod's GPU is a ResourceClaim
{{- end }}
    ignorable: false
{{ end -}}
