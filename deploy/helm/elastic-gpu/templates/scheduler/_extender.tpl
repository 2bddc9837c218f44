{{/*
The extenders: stanza of deploy/scheduler/main-scheduler/extender-config.yaml
(scheduler.mode=main), the namespace from values.yaml.
*/}}
{{- define "elastic-gpu.mainSchedulerExtenders" -}}
# Add to the top level of the KubeSchedulerConfiguration
# (kubescheduler.config.k8s.io/v1) that the cluster's kube-scheduler reads
# (--config). GPU pods keep schedulerName default-scheduler; kube-scheduler
# calls this extender only for pods that ask for a managed resource, so no
# other pod depends on it. Also recommended there:
# percentageOfNodesToScore: 100, so every feasible node reaches the extender.
extenders:
  # egpu-scheduler's Service. A kube-scheduler on the host network (a
  # kubeadm static pod) resolves names with the host's resolver: if it
  # cannot resolve this name, put the Service's ClusterIP in its place
  # (kubectl -n {{ include "elastic-gpu.namespace" . }} get service egpu-scheduler
  # -o jsonpath='{.spec.clusterIP}'); serverName keeps the certificate
  # check on the name.
  - urlPrefix: https://egpu-scheduler.{{ include "elastic-gpu.namespace" . }}.svc:8888
    filterVerb: filter
    prioritizeVerb: prioritize
    bindVerb: bind                          # egpu-scheduler annotates the pod, then creates the Binding
    weight: 5
    nodeCacheCapable: true
    httpTimeout: 5s
    enableHTTPS: true
    tlsConfig:
      serverName: egpu-scheduler.{{ include "elastic-gpu.namespace" . }}.svc
      caFile: /etc/kubernetes/elastic-gpu/ca.crt    # the CA of the Secret egpu-scheduler-tls
      # kube-scheduler's client certificate, signed for client use by the CA
      # of the Secret egpu-scheduler-client-ca: egpu-scheduler refuses a
      # caller without it (--tls-client-ca).
      certFile: /etc/kubernetes/elastic-gpu/client.crt
      keyFile: /etc/kubernetes/elastic-gpu/client.key
    managedResources:
      - name: elasticgpu.io/gpu-core
        ignoredByScheduler: false           # advertised by the node agent's device plugin
      - name: elasticgpu.io/gpu-memory
        ignoredByScheduler: true            # not advertised by nodes; only the extender counts it
      - name: elasticgpu.io/dra
        ignoredByScheduler: true            # DRA mode's marker (egpu-webhook --mode dra): the pod's GPU is a ResourceClaim
    ignorable: false
{{ end -}}
