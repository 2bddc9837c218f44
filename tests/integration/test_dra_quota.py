"""DRA mode's ResourceClaims and ResourceClaimTemplates (resource.k8s.io/v1) held to the
namespace's ResourceQuota of requests.elasticgpu.io/gpu-core and gpu-memory and to its
GPUBudget (src/webhook/dra_quota.c, docs/budgets.md "DRA mode"): the quota of cores and
memory Kubernetes' own ResourceQuota lacks (it counts devices, not shares of one); and
egpu-controller metering an allocated claim into the budget's status as it meters pods
(src/controller/dra_metering.c): from what its status says it consumes, never its spec.

egpu-webhook (the real binary, over HTTPS, with its ServiceAccount's token and RBAC from
deploy/) answers /validate for claims and templates; a claim it admits is then created in
the API server, so the next one is judged against it. Run on the test API server and on
the real control plane (the same assertions).
"""
import time

import pytest

from test_budget import ts
from test_controller import G, V, ctl, wait  # noqa: F401 (ctl: a fixture, on this module's api)
from test_quota import api, mkquota, webhook  # noqa: F401 (fixtures)
from test_webhook import UID, cert  # noqa: F401

CORE, MEM = "elasticgpu.io/gpu-core", "elasticgpu.io/gpu-memory"
DRA = "/apis/resource.k8s.io/v1"
SHARE, WHOLE = "gpu-share.elasticgpu.io", "gpu.elasticgpu.io"


@pytest.fixture(autouse=True)
def no_claims(api):  # noqa: F811
    """The real control plane lives for the session and its cleanup between tests knows no
    ResourceClaims: each test starts and ends with none in namespace ml."""
    def clean():
        st, out = api.call("GET", f"{DRA}/namespaces/ml/resourceclaims")
        assert st == 200, out
        for o in out.get("items") or []:
            st, _ = api.call("DELETE", f"{DRA}/namespaces/ml/resourceclaims/"
                             f"{o['metadata']['name']}")
            assert st in (200, 202, 404)
        wait(lambda: not (api.call("GET", f"{DRA}/namespaces/ml/resourceclaims")[1]
                          .get("items")), "no ResourceClaims left in ml")
    clean()
    yield
    clean()


def spec(cores=None, mem=None, cls=SHARE, count=1):
    ex = {"deviceClassName": cls, "count": count}
    req = {}
    if cores is not None:
        req["cores"] = str(cores)
    if mem is not None:
        req["memory"] = mem
    if req:
        ex["capacity"] = {"requests": req}
    return {"devices": {"requests": [{"name": "gpu", "exactly": ex}]}}


def claim(name, s, ns="ml"):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns}, "spec": s}


def template(name, s, ns="ml"):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": ns}, "spec": {"spec": s}}


def dra_review(obj):
    kind = obj["kind"]
    res = "resourceclaims" if kind == "ResourceClaim" else "resourceclaimtemplates"
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": UID,
                        "kind": {"group": "resource.k8s.io", "version": "v1", "kind": kind},
                        "resource": {"group": "resource.k8s.io", "version": "v1",
                                     "resource": res},
                        "name": obj["metadata"].get("name", ""),
                        "namespace": obj["metadata"]["namespace"], "operation": "CREATE",
                        "userInfo": {"username": "alice"}, "object": obj, "oldObject": None,
                        "dryRun": False}}


def admit(w, api, obj):
    """/validate's answer for creating obj; a claim is created in the API server when
    allowed (a template holds nothing, so it is only judged)."""
    resp = w.review("/validate", dra_review(obj))
    assert resp["uid"] == UID
    if resp["allowed"] and obj["kind"] == "ResourceClaim":
        st, out = api.call("POST", f"{DRA}/namespaces/{obj['metadata']['namespace']}"
                           "/resourceclaims", obj)
        assert st == 201, out
    return resp


def denied(resp):
    assert resp["allowed"] is False and resp["status"]["code"] == 403, resp
    return resp["status"]["message"]


def test_claims_and_templates_held_to_the_quota(webhook, api):  # noqa: F811
    """Quota 100 cores and 16 GiB: a claim of 60 cores and 4 GiB fits, one of 50 is refused
    with the quota plugin's figures (the first counted under ResourceClaims), one of 40
    fits; a template of 10 is refused the same way (its claim would not fit) and one
    asking nothing of this driver passes; a whole card (no capacity: 100 cores) too."""
    mkquota(api, {"requests." + CORE: "100", "requests." + MEM: "16384"})
    w = webhook()
    w.wait_ready()
    assert admit(w, api, claim("a", spec(60, "4Gi")))["allowed"] is True
    assert denied(admit(w, api, claim("b", spec(50, "2Gi")))) == (
        'ResourceClaim "b" is forbidden: exceeded quota: gpu-quota, requested: '
        "requests.elasticgpu.io/gpu-core=50, used: requests.elasticgpu.io/gpu-core=60, "
        "limited: requests.elasticgpu.io/gpu-core=100 (used: ElasticGPUClaims gpu-core 0 "
        "gpu-memory 0, Released ElasticGPUs gpu-core 0 gpu-memory 0, pods without claims "
        "gpu-core 0 gpu-memory 0, ResourceClaims gpu-core 60 gpu-memory 4096)")
    # memory alone past the quota: 4096 + 13 GiB > 16384
    msg = denied(admit(w, api, claim("m", spec(10, "13Gi"))))
    assert "requested: requests.elasticgpu.io/gpu-memory=13312, used: " \
        "requests.elasticgpu.io/gpu-memory=4096, limited: requests.elasticgpu.io/gpu-memory=16384" \
        in msg, msg
    assert admit(w, api, claim("c", spec(40, "4Gi")))["allowed"] is True
    msg = denied(admit(w, api, template("t", spec(10))))
    assert msg.startswith('ResourceClaimTemplate "t" is forbidden: exceeded quota: gpu-quota, '
                          "requested: requests.elasticgpu.io/gpu-core=10, used: "
                          "requests.elasticgpu.io/gpu-core=100,"), msg
    assert "ResourceClaims gpu-core 100 gpu-memory 8192" in msg, msg
    assert denied(admit(w, api, claim("whole", spec(cls=WHOLE)))).startswith(
        'ResourceClaim "whole" is forbidden: exceeded quota: gpu-quota, requested: '
        "requests.elasticgpu.io/gpu-core=100,")
    assert admit(w, api, template("other", spec(cls="gpu.nvidia.com")))["allowed"] is True
    # a claim deleted frees what it held
    st, out = api.call("DELETE", f"{DRA}/namespaces/ml/resourceclaims/c")
    assert st == 200, out
    assert admit(w, api, template("t", spec(40, "4Gi")))["allowed"] is True


def test_an_elasticgpuclaims_resourceclaim_is_counted_once(webhook, api):  # noqa: F811
    """DRA mode makes an ElasticGPUClaim's ResourceClaim elasticgpu-<claim>, controlled by
    the claim: the two are one holding. Quota 100 and a claim of 60: its ResourceClaim of
    60 is admitted (not 120); another claim of 50 is still refused, with the pair counted
    once; a ResourceClaim naming the claim as its owner but asking 90 counts its excess."""
    from test_claim_quota import claim_obj
    mkquota(api, {"requests." + CORE: "100"})
    st, e = api.call("POST", f"{G}/namespaces/ml/elasticgpuclaims", claim_obj("e", 60))
    assert st == 201, e
    w = webhook()
    w.wait_ready()
    own = claim("elasticgpu-e", spec(60))
    own["metadata"]["ownerReferences"] = [{"apiVersion": V, "kind": "ElasticGPUClaim",
                                           "name": "e", "uid": e["metadata"]["uid"],
                                           "controller": True}]
    assert admit(w, api, own)["allowed"] is True
    msg = denied(admit(w, api, claim("b", spec(50))))
    assert "used: requests.elasticgpu.io/gpu-core=60," in msg and \
        "(used: ElasticGPUClaims gpu-core 60 " in msg and \
        "ResourceClaims gpu-core 0 gpu-memory 0)" in msg, msg
    # naming the claim as owner buys nothing: the pair counts the larger, 90
    forged = claim("forged", spec(90))
    forged["metadata"]["ownerReferences"] = own["metadata"]["ownerReferences"]
    assert admit(w, api, forged)["allowed"] is True
    msg = denied(admit(w, api, claim("c", spec(20))))
    assert "requested: requests.elasticgpu.io/gpu-core=20, used: " \
        "requests.elasticgpu.io/gpu-core=90," in msg and \
        "ResourceClaims gpu-core 30 gpu-memory 0)" in msg, msg


def test_bad_spec_is_refused_naming_the_field(webhook, api):  # noqa: F811
    """A share asking 150 cores is refused naming the field and the allowed values, with
    no quota or budget at all."""
    w = webhook()
    w.wait_ready()
    assert denied(admit(w, api, template("bad", spec(150)))) == (
        'ResourceClaimTemplate "bad": spec.spec.devices.requests[0].exactly.capacity.requests'
        '.cores is "150"; allowed: a whole number 0..100 (percent of one card)')
    assert admit(w, api, claim("ok", spec(30, "1Gi")))["allowed"] is True


def test_over_budget_refuses_new_claims(webhook, api):  # noqa: F811
    """A namespace whose GPUBudget is OverBudget (as the controller wrote it): a new claim
    or template on this driver is refused naming the budget and its figures; one on
    another driver passes; back InBudget, it is admitted."""
    obj = {"apiVersion": V, "kind": "GPUBudget", "metadata": {"name": "team", "namespace": "ml"},
           "spec": {"gpuHours": 1, "overBudgetPriorityClassName": "gpu-over-budget"}}
    st, out = api.call("POST", f"{G}/namespaces/ml/gpubudgets", obj)
    assert st == 201, out
    out["status"] = {"state": "OverBudget", "used": 2, "remaining": 0,
                     "metering": {"until": "2026-01-01T00:00:00Z", "coreSeconds": 720000,
                                  "memorySeconds": 0}}
    st, out = api.call("PUT", f"{G}/namespaces/ml/gpubudgets/team/status", out)
    assert st == 200, out
    w = webhook()
    w.wait_ready()
    want = ('ResourceClaim "x" is forbidden: namespace ml is over its GPU budget: GPUBudget '
            "team used 2.000 of 1.000 GPU-hours this period; in DRA mode no new claim on "
            "gpu.elasticgpu.io is admitted until the period resets or spec.gpuHours grows")
    # the webhook's budget cache follows the API server: wait for it to see the state
    wait(lambda: not w.review("/validate", dra_review(claim("x", spec(10))))["allowed"],
         "the webhook sees the budget OverBudget", timeout=30)
    assert denied(admit(w, api, claim("x", spec(10)))) == want
    msg = denied(admit(w, api, template("y", spec(cls=WHOLE))))
    assert "GPUBudget team used 2.000 of 1.000" in msg, msg
    assert admit(w, api, claim("nv", spec(cls="gpu.nvidia.com")))["allowed"] is True
    # a claim kube-controller-manager makes of a pod's template has only a generateName
    gen = claim("", spec(10))
    gen["metadata"] = {"generateName": "train-gpu-", "namespace": "ml"}
    resp = w.review("/validate", dra_review(gen))
    assert denied(resp).startswith(
        'ResourceClaim "train-gpu-<generated>" is forbidden: namespace ml is over its GPU '
        "budget"), resp
    st, cur = api.call("GET", f"{G}/namespaces/ml/gpubudgets/team")
    cur["status"]["state"] = "InBudget"
    st, out = api.call("PUT", f"{G}/namespaces/ml/gpubudgets/team/status", cur)
    assert st == 200, out
    wait(lambda: w.review("/validate", dra_review(claim("x", spec(10))))["allowed"],
         "the webhook sees the budget InBudget", timeout=30)
    assert admit(w, api, claim("x", spec(10)))["allowed"] is True


def test_allocated_claim_is_metered(api, ctl):  # noqa: F811
    """A claim whose spec asks 99 cores but whose allocation (status, as kube-scheduler
    writes it) consumes 30 cores and 4 GiB is charged 30 percent-seconds and 4096
    MiB-seconds a second from its creation (no allocationTimestamp) back to the metering
    step before the one that saw it allocated; a claim not allocated and another driver's
    allocation cost nothing; once the claim is deleted the charge stops."""
    obj = {"apiVersion": V, "kind": "GPUBudget", "metadata": {"name": "b", "namespace": "ml"},
           "spec": {"gpuHours": 1, "overBudgetPriorityClassName": "gpu-over-budget"}}
    st, out = api.call("POST", f"{G}/namespaces/ml/gpubudgets", obj)
    assert st == 201, out
    ctl(extra=("--leader-elect", "false", "--meter-seconds", "1"))

    def budget():
        st, out = api.call("GET", f"{G}/namespaces/ml/gpubudgets/b")
        assert st == 200, out
        return out
    wait(lambda: budget().get("status", {}).get("metering"), "metering started")
    start = ts(budget()["status"]["metering"]["until"])
    for name, drv, cc in (("a", WHOLE, {"cores": "30", "memory": "4Gi"}),
                          ("nv", "gpu.nvidia.com", {"cores": "50"}), ("pending", None, None)):
        st, out = api.call("POST", f"{DRA}/namespaces/ml/resourceclaims",
                           claim(name, spec(99) if drv != "gpu.nvidia.com" else
                                 spec(cls="gpu.nvidia.com")))
        assert st == 201, out
        if drv is None:
            continue
        out["status"] = {"allocation": {
            "devices": {"results": [{"request": "gpu", "driver": drv, "pool": "n1",
                                     "device": "gpu-0",
                                     "shareID": "7e1c0a4e-1d1e-4c3a-9a38-3a4d2f6b9a10",
                                     "consumedCapacity": cc}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}
        path = f"{DRA}/namespaces/ml/resourceclaims/{name}"
        st, got = api.call("PUT", path + "/status", out)
        if st == 404:  # the test API server serves no status subresource of claims
            st, got = api.call("PUT", path, out)
        assert st == 200, got
        out = got
        if name == "a":
            created = ts(out["metadata"]["creationTimestamp"])
            allocated = int(time.time()) + 1  # the second after the status was written

    def charged(after):
        m = budget()["status"]["metering"]
        return ts(m["until"]) >= after and m
    m = wait(lambda: charged(created + 3), "three seconds metered", timeout=20)
    # charged 30 and 4096 a second from its creation, as far back as the first metering
    # step that saw it allocated reaches (one step before it was, at most)
    k, rem = divmod(m["coreSeconds"], 30)
    assert rem == 0 and m["memorySeconds"] == 4096 * k, m
    assert ts(m["until"]) - allocated - 1 <= k <= ts(m["until"]) - max(created, start), \
        (m, created, allocated)
    st, out = api.call("DELETE", f"{DRA}/namespaces/ml/resourceclaims/a")
    assert st == 200, out
    gone = time.time()
    m1 = wait(lambda: charged(int(gone) + 1), "metered past the deletion", timeout=20)
    m2 = wait(lambda: charged(ts(m1["until"]) + 2), "two seconds more", timeout=20)
    assert m2["coreSeconds"] == m1["coreSeconds"] >= m["coreSeconds"], (m, m1, m2)
    # charged up to a step at most past its last metering before the deletion
    assert m1["coreSeconds"] <= 30 * (int(gone) + 2 - max(created, start)), (m1, gone)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
