"""ElasticGPUClaims count against their namespace's ResourceQuota and GPUBudget:
a reviewer's attack, replayed.

A tenant whose namespace has a quota of requests.elasticgpu.io/gpu-core 100
and a budget bound claims of 99%: the quota counted none of them and the
budget metered nothing, with no pod or with one. Now:

Both against the real control plane (the `kube` fixture: kube-apiserver's own quota
admission counts the pods), each component with its ServiceAccount's token (its RBAC in
deploy/).

- egpu-webhook (the real binary, over HTTPS, against the API server's
  ResourceQuota, claims, pods and ElasticGPUs) refuses the second claim of
  99 with the quota plugin's figures; a pod asking 30 of its own is refused
  the same way (the claim counts for pods too); a pod that uses the first
  claim is counted once (with its claim, not again through the quota's
  status.used), so a claim of 1 still fits; a Released (Retain) ElasticGPU
  of the namespace, its claim gone, counts until it is deleted.
- egpu-controller meters a bound claim with no pod at all into the budget's
  status.metering.coreSeconds, exactly 99 per second from its ElasticGPU's
  creation; after the claim is deleted its Retain ElasticGPU keeps being
  charged, and once an operator deletes it (held by the finalizer
  elasticgpu.io/metering until metered) the charge stops at its
  deletionTimestamp, to the percent-second.
"""
import base64
import json
import time

import jsonpatch

from test_budget import api, budget, ctl, mkbudget, ts  # noqa: F401 (fixtures)
from test_controller import G, V, claim, cluster, egpu, mkclass, mkclaim, wait, \
    wait_phase  # noqa: F401
from test_quota import mkquota, webhook  # noqa: F401 (webhook: with its ServiceAccount)
from test_webhook import UID, cert, review  # noqa: F401
from test_webhook_claims import claimed_pod

CORE, MEM = "elasticgpu.io/gpu-core", "elasticgpu.io/gpu-memory"
FIN = "elasticgpu.io/metering"


def claim_obj(name, core, ns="ml", mem=None):
    req = {CORE: core} if mem is None else {CORE: core, MEM: mem}
    return {"apiVersion": V, "kind": "ElasticGPUClaim",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"resources": {"requests": req}}}


def claim_review(obj, op="CREATE", old=None):
    rv = review(obj, op=op, old=old)
    rv["request"].update({
        "kind": {"group": "elasticgpu.io", "version": "v1alpha1", "kind": "ElasticGPUClaim"},
        "resource": {"group": "elasticgpu.io", "version": "v1alpha1",
                     "resource": "elasticgpuclaims"},
        "name": obj["metadata"]["name"], "namespace": obj["metadata"]["namespace"]})
    return rv


def admit_claim(w, api, obj):
    """/validate's answer for creating claim obj; created when allowed."""
    resp = w.review("/validate", claim_review(obj))
    assert resp["uid"] == UID
    if resp["allowed"]:
        st, out = api.call("POST", f"{G}/namespaces/{obj['metadata']['namespace']}"
                           "/elasticgpuclaims", obj)
        assert st == 201, out
    return resp


def test_quota_refuses_the_second_claim(webhook, api):  # noqa: F811
    """Quota 100, claims of 99: the second is refused naming the figures; a
    pod of its own 30 too; a pod using the first claim is not counted
    again; a Released ElasticGPU of the namespace counts until deleted."""
    mkquota(api, {"requests." + CORE: "100"})
    w = webhook()
    w.wait_ready()
    # claim a names its memory: a pod using it is a share, which must name it
    assert admit_claim(w, api, claim_obj("a", 99, mem=4096))["allowed"] is True
    resp = admit_claim(w, api, claim_obj("b", 99))
    assert resp["allowed"] is False and resp["status"]["code"] == 403
    assert resp["status"]["message"] == (
        'ElasticGPUClaim "b" is forbidden: exceeded quota: gpu-quota, requested: '
        "requests.elasticgpu.io/gpu-core=99, used: requests.elasticgpu.io/gpu-core=99, "
        "limited: requests.elasticgpu.io/gpu-core=100 (used: ElasticGPUClaims gpu-core 99 "
        "gpu-memory 4096, Released ElasticGPUs gpu-core 0 gpu-memory 0, pods without claims "
        "gpu-core 0 gpu-memory 0, ResourceClaims gpu-core 0 gpu-memory 0)")
    # A pod asking 30 of its own: the API server's quota sees 0 used, the
    # webhook sees the claim.
    own = claimed_pod("a")
    own["metadata"]["annotations"] = {}
    own["spec"]["containers"][0]["resources"] = {"requests": {CORE: "30", MEM: "4096"},
                                                 "limits": {CORE: "30", MEM: "4096"}}
    resp = w.review("/validate", review(own))
    assert resp["allowed"] is False
    assert resp["status"]["message"].startswith(
        'pod "train" is forbidden: exceeded quota: gpu-quota, requested: '
        "requests.elasticgpu.io/gpu-core=30, used: requests.elasticgpu.io/gpu-core=99, "
        "limited: requests.elasticgpu.io/gpu-core=100")
    # A pod that uses claim a gets its 99 and is counted by the quota; the
    # claim and the pod are one holding, so a claim of 1 still fits.
    resp = w.review("/mutate", review(claimed_pod("a")))
    assert resp["allowed"] is True, resp
    p = jsonpatch.apply_patch(claimed_pod("a"), json.loads(base64.b64decode(resp["patch"])))
    assert w.review("/validate", review(p)) == {"uid": UID, "allowed": True}
    st, out = api.call("POST", "/api/v1/namespaces/ml/pods", p)
    assert st == 201, out
    st, q = api.call("GET", "/api/v1/namespaces/ml/resourcequotas/gpu-quota")
    assert q["status"]["used"]["requests." + CORE] == "99"  # the API server counts the pod
    assert admit_claim(w, api, claim_obj("c", 1))["allowed"] is True
    assert admit_claim(w, api, claim_obj("d", 1))["allowed"] is False
    # An update that does not raise what a claim holds is never refused.
    c = claim_obj("c", 1)
    assert w.review("/validate", claim_review(c, op="UPDATE", old=c))["allowed"] is True
    up = claim_obj("c", 2)
    assert w.review("/validate", claim_review(up, op="UPDATE", old=c))["allowed"] is False
    # Claims a and c gone, the pod finished: a Released ElasticGPU (Retain,
    # its claim gone) of namespace ml still holds 60.
    for name in ("a", "c"):
        st, _ = api.call("DELETE", f"{G}/namespaces/ml/elasticgpuclaims/{name}")
        assert st in (200, 202)
    st, out = api.call("DELETE", "/api/v1/namespaces/ml/pods/train")
    assert st in (200, 202)
    st, out = api.call("POST", f"{G}/elasticgpus", {
        "apiVersion": V, "kind": "ElasticGPU", "metadata": {"name": "egpu-kept"},
        "spec": {"capacity": {CORE: 60}, "nodeName": "n1", "gpuShare": {"gpuName": "n1-gpu0"},
                 "claimRef": {"namespace": "ml", "name": "a", "uid": "uid-of-a-gone"},
                 "reclaimPolicy": "Retain"}})
    assert st == 201, out
    out["status"] = {"phase": "Released"}
    st, out = api.call("PUT", f"{G}/elasticgpus/egpu-kept/status", out)
    assert st == 200, out

    def refused_41():
        return w.review("/validate", claim_review(claim_obj("e", 41)))["allowed"] is False
    wait(refused_41, "the Released ElasticGPU counted (the webhook's watch)")
    assert admit_claim(w, api, claim_obj("e", 40))["allowed"] is True
    st, _ = api.call("DELETE", f"{G}/elasticgpus/egpu-kept")
    assert st in (200, 202)
    wait(lambda: w.review("/validate", claim_review(claim_obj("f", 60)))["allowed"],
         "the deleted ElasticGPU no longer counted")


def test_budget_meters_claims_without_pods(api, ctl):  # noqa: F811
    """A bound claim with no pod is charged 99 per second from its
    ElasticGPU's creation; its Retain ElasticGPU after the claim is gone,
    until an operator deletes it."""
    cluster(api, nodes=("n1",), gpus=1)
    mkclass(api, "keep", reclaim="Retain")
    mkbudget(api, "b", 1)
    c = ctl(extra=("--leader-elect", "false", "--meter-seconds", "1"))
    wait(lambda: (b := budget(api, "b")) and b.get("status", {}).get("metering"),
         "metering started")
    start = ts(budget(api, "b")["status"]["metering"]["until"])
    uid = mkclaim(api, "a", core=99, cls="keep")["metadata"]["uid"]
    wait_phase(api, claim, "a", "Bound")
    name = f"egpu-{uid}"
    created = ts(egpu(api, name)["metadata"]["creationTimestamp"])

    def charged(after):
        m = budget(api, "b")["status"]["metering"]
        return ts(m["until"]) >= after and m
    m = wait(lambda: charged(created + 3), "three seconds metered", timeout=20)
    assert m["coreSeconds"] == 99 * (ts(m["until"]) - max(created, start)) > 0
    assert FIN in egpu(api, name)["metadata"].get("finalizers", [])
    # The claim goes; the Retain ElasticGPU stays Released and is charged.
    st, _ = api.call("DELETE", f"{G}/namespaces/default/elasticgpuclaims/a")
    assert st in (200, 202)
    wait(lambda: claim(api, "a") is None, "claim gone")
    wait_phase(api, egpu, name, "Released")
    gone = time.time()
    m = wait(lambda: charged(int(gone) + 2), "metered past the claim", timeout=20)
    assert m["coreSeconds"] == 99 * (ts(m["until"]) - max(created, start))
    # The operator deletes it: the finalizer keeps it until metered to its
    # deletion, then the charge stops there.
    st, out = api.call("DELETE", f"{G}/elasticgpus/{name}")
    assert st in (200, 202), out
    wait(lambda: egpu(api, name) is None, "the ElasticGPU released by the controller")
    deleted = ts(out["metadata"]["deletionTimestamp"])
    m = wait(lambda: charged(deleted + 2), "metered past the deletion", timeout=20)
    assert m["coreSeconds"] == 99 * (deleted - max(created, start))
    c.stop()


def test_pod_held_after_its_deletion_no_longer_counts(webhook, api):  # noqa: F811
    """A bound pod force-deleted (grace period 0: its node's kubelet is gone, say) but held
    by the finalizer elasticgpu.io/metering until egpu-controller has metered it holds
    nothing against the quota, for the API server's quota plugin (QuotaV1Pod: its grace
    period is over, though its phase is still Pending) and so for the webhook: a claim its
    80 left no room for fits once it is deleted, while it is still there. (Bound, so that
    kube-controller-manager's pod GC, which marks an unbound terminating pod Failed, leaves
    its phase alone.)"""
    mkquota(api, {"requests." + CORE: "100"})
    api.node("n1")
    w = webhook()
    w.wait_ready()
    held = claimed_pod("none")
    held["metadata"].update(name="held", annotations={}, finalizers=[FIN])
    held["spec"]["containers"][0]["resources"] = {"requests": {CORE: "80", MEM: "4096"},
                                                  "limits": {CORE: "80", MEM: "4096"}}
    st, out = api.call("POST", "/api/v1/namespaces/ml/pods", held)
    assert st == 201, out
    st, out = api.call("POST", "/api/v1/namespaces/ml/pods/held/binding", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "held", "namespace": "ml"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}})
    assert st == 201, out
    resp = w.review("/validate", claim_review(claim_obj("x", 30)))
    assert resp["allowed"] is False and "pods without claims gpu-core 80" in \
        resp["status"]["message"], resp
    st, out = api.call("DELETE", "/api/v1/namespaces/ml/pods/held",
                       {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
    assert st == 200 and out["metadata"]["finalizers"] == [FIN], out
    wait(lambda: api.call("GET", "/api/v1/namespaces/ml/resourcequotas/gpu-quota")[1]
         ["status"]["used"]["requests." + CORE] == "0",
         "the quota controller takes the held pod off status.used", timeout=60)
    wait(lambda: admit_claim(w, api, claim_obj("x", 30))["allowed"],
         "the webhook no longer counts the held pod (past its grace period)", timeout=20)
    st, out = api.call("GET", "/api/v1/namespaces/ml/pods/held")
    assert st == 200 and out["metadata"]["deletionTimestamp"], out  # still there, held
    assert out["status"]["phase"] == "Pending", out  # not finished: counted before the fix
    st, out = api.call("PATCH", "/api/v1/namespaces/ml/pods/held",
                       {"metadata": {"finalizers": None}}, "application/merge-patch+json")
    assert st == 200, out
