"""egpu-webhook --mode dra on the real control plane (tests/cluster/cluster.py: etcd,
kube-apiserver, kube-controller-manager and kube-scheduler from tools/bin).

egpu-webhook runs as deploy/ runs it, with --mode dra added, called by the API server over
TLS (deploy/'s webhook configurations pointed at it, as tests/cluster/components.py does):

- a pod asking elasticgpu.io/gpu-core 30 and gpu-memory 4096, with a hostile
  elasticgpu.io/gpu-model, is admitted with its GPU names gone, resources.claims
  egpu-0 (request gpu), spec.resourceClaims naming template egpu-<hash>, and the
  annotation elasticgpu.io/dra-claims giving that template's spec, the marker
  elasticgpu.io/dra "1" in requests and limits and schedulerName elastic-gpu-scheduler (so
  that the extender scores its nodes: test_cluster_dra_extender.py); the webhook created
  no object;
- the real API server accepts that spec as a ResourceClaimTemplate (its validation and
  its CEL compiler judge the escaped selector), and once it exists (created here from the
  annotation, as egpu-controller will), the real kube-controller-manager's ResourceClaim
  controller makes the pod's claim from it, owned by the pod, with the same request;
- a pod that a later admission step denies (a ResourceQuota on pods), and a pod the
  webhook itself denies (gpu-core 150, with the API server's message), leave no
  template and no claim;
- the annotation cannot be changed afterwards: deploy/admission's policy refuses it
  inside the API server, for the admin too.
Without the control plane binaries the tests skip, except under CI=true, where they fail."""
import hashlib
import json

import pytest

from conftest import cluster_module as cl  # noqa: F401  (tests/cluster on sys.path)
from cluster import wait_until as wait  # noqa: E402
import components  # noqa: E402  (tests/cluster/components.py)

NS = "dra-web"
DENIED_NS = "dra-web-quota"
DRA_ANN = "elasticgpu.io/dra-claims"
# A hostile gpu-model: one model name, quoted. The webhook checks a gpu-model against the
# models of the cluster's GPU objects once there are any (facts.c); this module runs no node,
# and the nodes of earlier modules took theirs with them (node.py's stop), so it reaches the
# claim's CEL selector.
MODEL = 'NVIDIA H100"] + [true] + ["'
RESOURCE = "/apis/resource.k8s.io/v1/namespaces"


@pytest.fixture(scope="module")
def dra_webhook(cluster, deployed, webhook, build_dir, tmp_path_factory):
    """A second egpu-webhook, --mode dra, and deploy/'s configurations pointed at it for
    this module; back at the session's webhook afterwards."""
    crt, key = cluster.pki.cert("egpu-webhook-dra", "egpu-webhook.elastic-gpu-system.svc",
                                sans=("IP:127.0.0.1",), server=True)
    w = components.webhook(cluster, build_dir, tmp_path_factory.mktemp("dra-webhook"), crt, key,
                           extra=("--mode", "dra"))
    try:
        w.ready()
        components.point_webhooks(cluster, w.ports[0], ca_bundle=cluster.pki.ca.read_bytes())
        for ns in (NS, DENIED_NS):
            st, obj = cluster.call("POST", "/api/v1/namespaces",
                                   {"apiVersion": "v1", "kind": "Namespace",
                                    "metadata": {"name": ns}})
            assert st in (201, 409), obj
        yield w
    finally:
        components.point_webhooks(cluster, webhook.ports[0],
                                  ca_bundle=cluster.pki.ca.read_bytes())
        w.stop()


def gpu_pod(name, core="30", memory="4096", annotations=None):
    limits = {"elasticgpu.io/gpu-core": core, "cpu": "100m"}
    if memory is not None:
        limits["elasticgpu.io/gpu-memory"] = memory
    meta = {"name": name, "annotations": annotations or {}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "train", "image": "busybox:1",
                                     "resources": {"limits": limits}}],
                     "restartPolicy": "Never"}}


def items(cluster, ns, plural):
    st, lst = cluster.call("GET", f"{RESOURCE}/{ns}/{plural}")
    assert st == 200, lst
    return lst["items"]


def test_pod_gets_claims_and_kcm_makes_them(cluster, dra_webhook):
    pod = gpu_pod("train-0", annotations={"elasticgpu.io/gpu-model": MODEL})
    st, got = cluster.call("POST", f"/api/v1/namespaces/{NS}/pods", pod)
    assert st == 201, got
    spec = got["spec"]
    ctr = spec["containers"][0]
    # The marker that makes kube-scheduler call the extender (deploy/scheduler's
    # managedResources), in requests and limits.
    assert ctr["resources"]["limits"] == {"cpu": "100m", "elasticgpu.io/dra": "1"}, \
        ctr["resources"]
    assert ctr["resources"]["requests"] == {"cpu": "100m", "elasticgpu.io/dra": "1"}, \
        ctr["resources"]
    assert ctr["resources"]["claims"] == [{"name": "egpu-0", "request": "gpu"}]
    [pc] = spec["resourceClaims"]
    tmpl = pc["resourceClaimTemplateName"]
    assert pc["name"] == "egpu-0" and tmpl.startswith("egpu-") and len(tmpl) == 37, pc
    assert spec.get("schedulerName") == "elastic-gpu-scheduler"  # its extender scores nodes
    claims = json.loads(got["metadata"]["annotations"][DRA_ANN])
    assert list(claims) == [tmpl]
    claim_spec = claims[tmpl]
    text = json.dumps(claim_spec, sort_keys=True, separators=(",", ":"))
    assert tmpl == "egpu-" + hashlib.sha256(text.encode()).hexdigest()[:32]
    ex = claim_spec["devices"]["requests"][0]["exactly"]
    assert ex["deviceClassName"] == "gpu-share.elasticgpu.io" and ex["count"] == 1
    assert ex["capacity"] == {"requests": {"cores": "30", "memory": "4096Mi"}}
    # The webhook created nothing: no template, and the pod's claim cannot be made yet.
    assert items(cluster, NS, "resourceclaimtemplates") == []

    # What egpu-controller will do: the template from the annotation. The API server's
    # validation (and CEL compiler, on the escaped selector) takes the spec as it is.
    st, t = cluster.call("POST", f"{RESOURCE}/{NS}/resourceclaimtemplates",
                         {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                          "metadata": {"name": tmpl}, "spec": {"spec": claim_spec}})
    assert st == 201, t
    stored = t["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert stored["selectors"] == ex["selectors"]
    assert stored["capacity"]["requests"] == {"cores": "30", "memory": "4Gi"}  # canonical

    def pod_claim():
        for c in items(cluster, NS, "resourceclaims"):
            owners = c["metadata"].get("ownerReferences") or []
            if any(o["kind"] == "Pod" and o["name"] == "train-0" for o in owners):
                return c
        return None

    claim = wait(pod_claim, "kube-controller-manager to make the pod's ResourceClaim",
                 timeout=90)
    assert claim["metadata"]["annotations"].get("resource.kubernetes.io/pod-claim-name") == \
        "egpu-0", claim["metadata"]
    assert claim["spec"] == t["spec"]["spec"]

    def status():
        st, p = cluster.call("GET", f"/api/v1/namespaces/{NS}/pods/train-0")
        return st == 200 and p.get("status", {}).get("resourceClaimStatuses")

    assert wait(status, "the pod's resourceClaimStatuses") == [
        {"name": "egpu-0", "resourceClaimName": claim["metadata"]["name"]}]

    # Fixed from now on, for the admin too (deploy/admission's policy, in the API server).
    st, err = cluster.call("PATCH", f"/api/v1/namespaces/{NS}/pods/train-0",
                           {"metadata": {"annotations": {DRA_ANN: "{}"}}},
                           ctype="application/merge-patch+json")
    assert st == 403, err
    assert "dra-claims" in err["message"], err


def test_denied_pods_leave_nothing(cluster, dra_webhook):
    st, q = cluster.call("POST", f"/api/v1/namespaces/{DENIED_NS}/resourcequotas",
                         {"apiVersion": "v1", "kind": "ResourceQuota",
                          "metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}})
    assert st == 201, q

    def quota_counted():
        st, q2 = cluster.call("GET", f"/api/v1/namespaces/{DENIED_NS}/resourcequotas/no-pods")
        return st == 200 and q2.get("status", {}).get("hard")

    wait(quota_counted, "the quota controller to count the namespace")
    # Mutated by the webhook, then refused by the quota plugin, which runs after it.
    st, err = cluster.call("POST", f"/api/v1/namespaces/{DENIED_NS}/pods", gpu_pod("q"))
    assert st == 403 and "exceeded quota: no-pods" in err["message"], (st, err)
    # Refused by the webhook itself.
    st, err = cluster.call("POST", f"/api/v1/namespaces/{NS}/pods", gpu_pod("bad", core="150"))
    assert st == 403, err
    assert 'admission webhook "mutate.webhook.elasticgpu.io" denied the request: container ' \
        '"train": elasticgpu.io/gpu-core is 150' in err["message"], err
    # A server-side dry run is answered and stores nothing.
    st, dry = cluster.call("POST", f"/api/v1/namespaces/{NS}/pods?dryRun=All", gpu_pod("dry"))
    assert st == 201 and dry["spec"]["resourceClaims"][0]["name"] == "egpu-0", dry
    for ns in (DENIED_NS, NS):
        names = [t["metadata"]["name"] for t in items(cluster, ns, "resourceclaimtemplates")]
        claims = [c["metadata"]["name"] for c in items(cluster, ns, "resourceclaims")]
        owners = [o["name"] for c in items(cluster, ns, "resourceclaims")
                  for o in c["metadata"].get("ownerReferences") or []]
        if ns == DENIED_NS:
            assert names == [] and claims == [], (names, claims)
        else:  # only what the first test made, for its pod
            assert set(owners) <= {"train-0"}, owners
    assert cluster.call("GET", f"/api/v1/namespaces/{NS}/pods/dry")[0] == 404
