"""egpu-webhook --mode dra and egpu-controller --mode dra together on the real control plane
(tests/cluster/cluster.py: etcd, kube-apiserver, kube-controller-manager, kube-scheduler).

The webhook runs as test_cluster_dra_webhook.py runs it (its dra_webhook fixture: deploy/'s
webhook configurations pointed at it over TLS) and the controller as deploy/ runs it
(tests/cluster/components.py, its ServiceAccount's token: deploy/controller/rbac.yaml's
rights only), with --mode dra:

- a pod asking elasticgpu.io/gpu-core 30 and gpu-memory 4096 is admitted rewritten (no
  elasticgpu.io request left, the annotation elasticgpu.io/dra-claims naming its template);
  the controller creates that template in the pod's namespace, labelled
  app.kubernetes.io/managed-by=egpu-controller, with no Warning on the pod, and the real
  kube-controller-manager makes the pod's ResourceClaim from it, owned by the pod, asking
  30 cores and 4Gi;
- a second pod of the same ask shares the template: one template, two claims.
Without the control plane binaries the tests skip, except under CI=true, where they fail."""
import json

import pytest

import components  # noqa: E402  (tests/cluster/components.py)
from cluster import wait_until as wait  # noqa: E402
from test_cluster_dra_webhook import dra_webhook, gpu_pod  # noqa: F401  (a fixture)

NS = "dra-ctl"
RES = "/apis/resource.k8s.io/v1/namespaces"


@pytest.fixture
def dra_controller(cluster, dra_webhook, build_dir, tmp_path):  # noqa: F811
    st, obj = cluster.call("POST", "/api/v1/namespaces",
                           {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    assert st in (201, 409), obj
    c = components.controller(cluster, build_dir, tmp_path,
                              extra=("--mode", "dra", "--leader-elect", "false",
                                     "--resync-seconds", "2"))
    yield c
    c.stop()


def items(cluster, plural):
    st, lst = cluster.call("GET", f"{RES}/{NS}/{plural}")
    assert st == 200, lst
    return lst["items"]


def claims_of(cluster, pod):
    return [c for c in items(cluster, "resourceclaims")
            if any(o["kind"] == "Pod" and o["name"] == pod
                   for o in c["metadata"].get("ownerReferences") or [])]


def test_admitted_pod_gets_its_template_and_claim(cluster, dra_controller):
    st, got = cluster.call("POST", f"/api/v1/namespaces/{NS}/pods", gpu_pod("train-0"))
    assert st == 201, got
    assert "elasticgpu.io/gpu-core" not in json.dumps(got["spec"]["containers"])
    [pc] = got["spec"]["resourceClaims"]
    tmpl = pc["resourceClaimTemplateName"]
    assert list(json.loads(got["metadata"]["annotations"]["elasticgpu.io/dra-claims"])) == \
        [tmpl]

    t = wait(lambda: next((x for x in items(cluster, "resourceclaimtemplates")
                           if x["metadata"]["name"] == tmpl), None),
             "egpu-controller to create the pod's template", timeout=60)
    assert t["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "egpu-controller"
    assert not t["metadata"].get("ownerReferences")
    claim = wait(lambda: (c := claims_of(cluster, "train-0")) and c[0],
                 "kube-controller-manager to make the pod's ResourceClaim", timeout=90)
    ex = claim["spec"]["devices"]["requests"][0]["exactly"]
    assert ex["deviceClassName"] == "gpu-share.elasticgpu.io"
    assert ex["capacity"]["requests"] == {"cores": "30", "memory": "4Gi"}

    st, got2 = cluster.call("POST", f"/api/v1/namespaces/{NS}/pods", gpu_pod("train-1"))
    assert st == 201, got2
    assert got2["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == tmpl
    wait(lambda: claims_of(cluster, "train-1"), "the second pod's claim", timeout=90)
    assert [x["metadata"]["name"] for x in items(cluster, "resourceclaimtemplates")] == [tmpl]

    st, evs = cluster.call("GET", f"/api/v1/namespaces/{NS}/events")
    assert st == 200, evs
    ours = [(e["reason"], e["message"]) for e in evs["items"]
            if e.get("source", {}).get("component") == "egpu-controller"]
    assert ("ResourceClaimTemplateCreated",
            f"ResourceClaimTemplate {tmpl} created from the pod's elasticgpu.io request") in ours
    assert not [e for e in evs["items"] if e["type"] == "Warning" and
                e.get("source", {}).get("component") == "egpu-controller"], ours
    for pod in ("train-0", "train-1"):
        cluster.call("DELETE", f"/api/v1/namespaces/{NS}/pods/{pod}",
                     {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
