{{/*
deploy/scheduler/scheduler-config.yaml, the namespace from values.yaml.
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
    managedResources:
      - name: elasticgpu.io/gpu-core
        ignoredByScheduler: false             # advertised by the node agent's device plugin
      - name: elasticgpu.io/gpu-memory
        ignoredByScheduler: true              # not advertised by nodes; only the extender counts it
    ignorable: false
{{ end -}}
