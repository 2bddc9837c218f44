"""Quotas on GPU: a ResourceQuota on requests.elasticgpu.io/gpu-core
and gpu-memory holds a namespace to a total, and a pod written with another
system's names is counted under ours once egpu-webhook has rewritten it
(the quota is checked after the mutating webhooks).

Each test runs on the real control plane (the `kube` fixture: kube-apiserver's ResourceQuota
admission plugin and kube-controller-manager's quota controller) and, with the same
assertions, on the test API server, whose emulation of both (tests/apiserver/server.py) the
tests on fault_api rely on: the plugin's 403 message, requests of unfinished pods, a limit
standing for a missing request. Where the real one is asynchronous the tests wait for it: a
new quota's status is filled by the controller (until then the plugin refuses every pod it
would count: "status unknown for quota"), and a pod that finishes or is deleted is taken off
status.used by the controller, not by the plugin."""
import base64
import json

import jsonpatch
import pytest

from test_controller import wait
from test_webhook import UID, Webhook, cert, need, review  # noqa: F401

CORE, MEM = "elasticgpu.io/gpu-core", "elasticgpu.io/gpu-memory"


@pytest.fixture(params=["real", "emulated"])
def api(request):
    """The real control plane (apis.RealApi), and the test API server: the same assertions
    on both are the check that the test API server's emulation of the quota plugin and
    controller (which the tests on fault_api rely on) is the real one's."""
    return request.getfixturevalue("kube_api" if request.param == "real" else "fault_api")


@pytest.fixture
def webhook(build_dir, api, cert, tmp_path):  # noqa: F811
    """test_webhook's fixture, but egpu-webhook runs with the token of its ServiceAccount
    (deploy/webhook/rbac.yaml), not the admin's."""
    need("curl")
    started = []

    def start(extra=()):
        w = Webhook(build_dir, api.component_kubeconfig("egpu-webhook"), cert, tmp_path, extra)
        started.append(w)
        return w
    yield start
    for w in started:
        w.stop(9)


def mkquota(api, hard, ns="ml", name="gpu-quota"):
    """ResourceQuota ns/name of spec.hard hard, once its status says so: on a real control
    plane the quota controller fills status.hard and status.used a moment after the create,
    and until then the admission plugin refuses the pods it would count."""
    st, out = api.call("POST", f"/api/v1/namespaces/{ns}/resourcequotas", {
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name, "namespace": ns},
        "spec": {"hard": hard}})
    assert st == 201, out
    wait(lambda: set((quota(api, ns, name).get("status") or {}).get("used") or {}) == set(hard),
         f"quota {ns}/{name}'s status filled by the quota controller", timeout=60)


def quota(api, ns="ml", name="gpu-quota"):
    st, out = api.call("GET", f"/api/v1/namespaces/{ns}/resourcequotas/{name}")
    assert st == 200
    return out


def pod(name, res, ns="ml", requests=True):
    r = {"limits": dict(res)}
    if requests:
        r["requests"] = dict(res)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"containers": [{"name": "main", "image": "x", "resources": r}]}}


def test_quota_holds_the_namespace(api):  # noqa: F811
    """Quota 100 cores and 16 Ki memory: a pod of 60 is counted in status.used, one of 50
    (its limit standing for its request) refused with the plugin's message; once the first
    has finished (and the quota controller has taken it off), the 50 fits; another
    namespace is not held."""
    mkquota(api, {"requests." + CORE: "100", "requests." + MEM: "16Ki"})
    st, out = api.call("POST", "/api/v1/namespaces/ml/pods", pod("a", {CORE: "60", MEM: "8192"}))
    assert st == 201, out
    assert quota(api)["status"]["used"] == {"requests." + CORE: "60", "requests." + MEM: "8192"}
    st, out = api.call("POST", "/api/v1/namespaces/ml/pods", pod("b", {CORE: "50"},
                                                                   requests=False))
    assert st == 403 and out["reason"] == "Forbidden"
    assert out["message"] == (
        'pods "b" is forbidden: exceeded quota: gpu-quota, requested: '
        "requests.elasticgpu.io/gpu-core=50, used: requests.elasticgpu.io/gpu-core=60, "
        "limited: requests.elasticgpu.io/gpu-core=100")
    # A finished pod holds nothing.
    st, a = api.call("GET", "/api/v1/namespaces/ml/pods/a")
    a["status"]["phase"] = "Succeeded"
    st, out = api.call("PUT", "/api/v1/namespaces/ml/pods/a/status", a)
    assert st == 200, out
    wait(lambda: quota(api)["status"]["used"]["requests." + CORE] == "0",
         "the finished pod taken off status.used (the quota controller)", timeout=60)
    st, out = api.call("POST", "/api/v1/namespaces/ml/pods", pod("b", {CORE: "50"}))
    assert st == 201, out
    # Another namespace is not held.
    st, out = api.call("POST", "/api/v1/namespaces/other/pods",
                       pod("c", {CORE: "500"}, ns="other"))
    assert st == 201, out


def test_pod_held_by_a_finalizer_once_deleted_holds_nothing(api):  # noqa: F811
    """A pod deleted with a grace period of 0 but held by a finalizer (the webhook's
    elasticgpu.io/metering, until egpu-controller has metered it) no longer counts: its
    deletion's grace period is over (the quota evaluator's QuotaV1Pod), so the next pod
    fits."""
    mkquota(api, {"requests." + CORE: "100"})
    held = pod("held", {CORE: "80"})
    held["metadata"]["finalizers"] = ["elasticgpu.io/metering"]
    st, out = api.call("POST", "/api/v1/namespaces/ml/pods", held)
    assert st == 201, out
    st, out = api.call("POST", "/api/v1/namespaces/ml/pods", pod("next", {CORE: "80"}))
    assert st == 403, out
    st, out = api.call("DELETE", "/api/v1/namespaces/ml/pods/held",
                       {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
    assert st == 200 and out["metadata"]["finalizers"] == ["elasticgpu.io/metering"], out
    wait(lambda: quota(api)["status"]["used"]["requests." + CORE] == "0",
         "the deleted pod taken off status.used", timeout=60)
    st, out = api.call("POST", "/api/v1/namespaces/ml/pods", pod("next", {CORE: "80"}))
    assert st == 201, out
    st, out = api.call("PATCH", "/api/v1/namespaces/ml/pods/held",
                       {"metadata": {"finalizers": None}}, "application/merge-patch+json")
    assert st == 200, out


def test_rewritten_pods_count_under_our_names(api, webhook):  # noqa: F811
    """A pod asking tencent.com/vcuda-core 30 and vcuda-memory 16 (4 GiB) is
    rewritten by the webhook; admitted, it counts 30 and 4096 under
    requests.elasticgpu.io/*, and the next one past the quota is refused in
    our names."""
    need("curl")
    mkquota(api, {"requests." + CORE: "50", "requests." + MEM: "8192"})
    w = webhook()
    w.wait_ready()
    for name, want in (("train-1", 201), ("train-2", 403)):
        obj = pod(name, {"tencent.com/vcuda-core": "30", "tencent.com/vcuda-memory": "16"})
        rv = review(obj)
        rv["request"]["name"] = name
        resp = w.review("/mutate", rv)
        assert resp["uid"] == UID and resp["allowed"] is True
        patched = jsonpatch.apply_patch(obj, json.loads(base64.b64decode(resp["patch"])))
        assert patched["spec"]["containers"][0]["resources"]["requests"] == {
            CORE: "30", MEM: "4096"}
        st, out = api.call("POST", "/api/v1/namespaces/ml/pods", patched)
        assert st == want, out
    assert quota(api)["status"]["used"] == {"requests." + CORE: "30", "requests." + MEM: "4096"}
    assert out["message"] == (
        'pods "train-2" is forbidden: exceeded quota: gpu-quota, requested: '
        "requests.elasticgpu.io/gpu-core=30, used: requests.elasticgpu.io/gpu-core=30, "
        "limited: requests.elasticgpu.io/gpu-core=50")
