"""Pods use claims: egpu-webhook (the real binary over HTTPS, as its
ServiceAccount egpu-webhook) against the real control plane (the `kube`
fixture) holding ElasticGPUClaims, which it lists and watches, and GETs when
its cache does not have one yet (the API server's audit log shows which it
asked for). The tests that need a fault run on the test API server
(tests/apiserver/server.py, `fault_api`), each saying which.

- /mutate turns a pod's annotation egpuc.elasticgpu.io/<container>: <claim>
  into that container's elasticgpu.io requests and limits: a Bound gpushare
  claim's capacity, a Bound TFLOPS claim's resolved percent, a Pending
  (WaitForFirstConsumer) core claim's requests. The patch, applied with
  python3-jsonpatch, gives exactly those, the scheduler's name, and passes
  /validate; a second pass patches nothing.
- A claim created right before the pod, while the webhook's watch of claims
  is held back, is found by a live GET and the pod admitted.
- Denied, with the exact message: a claim missing, Lost, in another
  namespace, Pending with gpu-tflops, a container that asks a GPU itself, an
  unknown container, and (fail closed) a claim the API server cannot be
  asked about. On UPDATE, /validate refuses a changed claim annotation.
- /readyz waits for the claims to be listed.

curl and openssl: missing, a test fails under CI=true and is skipped otherwise.
"""
import base64
import json
import time
import urllib.parse

import jsonpatch

from test_webhook import UID, api, cert, gpus, pod, review, webhook  # noqa: F401 (fixtures)

G = "/apis/elasticgpu.io/v1alpha1"
ANN = "egpuc.elasticgpu.io/train"
CORE, MEM = "elasticgpu.io/gpu-core", "elasticgpu.io/gpu-memory"
WEBHOOK_USER = "system:serviceaccount:elastic-gpu-system:egpu-webhook"


def requests_during(api, fn):  # noqa: F811
    """fn()'s result, and the requests the webhook made of api meanwhile, as
    [{"method", "path"}]: the test API server's request log, or the real API
    server's audit log (its events of the webhook's ServiceAccount), read once a
    request of ours made after fn() is in it."""
    if not api.real:
        api.control("requests", method="DELETE")
        out = fn()
        _, reqs = api.control("requests", method="GET")
        return out, [{"method": r["method"], "path": r["path"]} for r in reqs]
    before = len(api.cluster.audit())
    out = fn()
    mark = f"/api/v1/namespaces/ml/configmaps/audit-mark-{time.monotonic_ns()}"
    api.call("GET", mark)
    deadline = time.time() + 30
    while True:
        events = api.cluster.audit()[before:]
        if any(e.get("requestURI") == mark for e in events):
            break
        assert time.time() < deadline, f"{mark} never in the audit log"
        time.sleep(0.05)
    methods = {"get": "GET", "list": "GET", "watch": "GET", "create": "POST",
               "update": "PUT", "patch": "PATCH", "delete": "DELETE"}
    return out, [{"method": methods.get(e["verb"], e["verb"]),
                  "path": urllib.parse.urlsplit(e["requestURI"]).path}
                 for e in events if e["user"]["username"] == WEBHOOK_USER]


def make_claim(api, name, requests, status=None, ns="ml"):  # noqa: F811
    """Create ElasticGPUClaim ns/name, then write its status as the
    controller does (PUT .../status)."""
    st, obj = api.call("POST", f"{G}/namespaces/{ns}/elasticgpuclaims", {
        "apiVersion": "elasticgpu.io/v1alpha1", "kind": "ElasticGPUClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"resources": {"requests": requests}}})
    assert st == 201, obj
    if status is not None:
        obj["status"] = status
        st, obj = api.call("PUT", f"{G}/namespaces/{ns}/elasticgpuclaims/{name}/status", obj)
        assert st == 200, obj
    return obj


def bound(egpu, core, mem=None):
    cap = {CORE: core}
    if mem is not None:
        cap[MEM] = mem
    return {"phase": "Bound", "elasticGPUName": egpu, "capacity": cap}


def claimed_pod(claim, resources=None, container="train"):
    """A pod of one container "train" (no GPU of its own unless resources)
    whose container `container` uses claim."""
    return pod(resources or {"cpu": "1"}, {"team": "ml", f"egpuc.elasticgpu.io/{container}": claim})


def patched(w, obj):
    """/mutate's patch for obj, applied; it must pass /validate and a second
    /mutate must patch nothing."""
    resp = w.review("/mutate", review(obj))
    assert resp["allowed"] is True and resp["patchType"] == "JSONPatch", resp
    ops = json.loads(base64.b64decode(resp["patch"]))
    out = jsonpatch.apply_patch(obj, ops)
    assert w.review("/validate", review(out)) == {"uid": UID, "allowed": True}
    assert w.review("/mutate", review(out)) == {"uid": UID, "allowed": True}
    return out, resp["warnings"]


def denied(w, obj, route="/mutate", **kw):
    resp = w.review(route, review(obj, **kw))
    assert resp["allowed"] is False, resp
    assert resp["status"]["code"] == 403 and resp["status"]["reason"] == "Forbidden"
    assert "patch" not in resp
    return resp["status"]["message"]


def want_resources(obj, res):
    ctr = obj["spec"]["containers"][0]
    assert ctr["resources"]["requests"] == {"cpu": "1", **res}, ctr
    assert ctr["resources"]["limits"] == {"cpu": "1", **res}, ctr
    assert obj["spec"]["schedulerName"] == "elastic-gpu-scheduler"


def claim_cached(w, api, name, ns="ml"):  # noqa: F811
    """Wait until the webhook's watch has brought claim ns/name (a pod using
    it is then admitted without asking the API server)."""
    deadline = time.time() + 10
    path = f"{G}/namespaces/{ns}/elasticgpuclaims/{name}"
    while True:
        resp, reqs = requests_during(api, lambda: w.review("/mutate", review(claimed_pod(name))))
        if resp["allowed"] and not any(r["path"] == path for r in reqs):
            return
        assert time.time() < deadline, (resp, reqs)
        time.sleep(0.1)


def test_claims_resolved(webhook, api):  # noqa: F811
    """Bound gpushare, TFLOPS and whole-card claims and a Pending core claim give the
    container their requests and limits (with a warning naming the claim), from the cache;
    a Pending claim is checked with the API server (a live GET) before its requests are
    taken; Bound since, it gives its capacity."""
    gpus(api, 40960, 81920)
    make_claim(api, "notebook", {CORE: 30, MEM: 8192}, bound("egpu-nb", 30, 8192))
    make_claim(api, "inference", {"elasticgpu.io/gpu-tflops": 100, MEM: 16384},
               bound("egpu-inf", 33, 16384))
    make_claim(api, "trainer", {CORE: 200}, bound("egpu-tr", 200))
    make_claim(api, "later", {CORE: 40, MEM: 4096}, {"phase": "Pending"})
    w = webhook()
    w.wait_ready()
    claim_cached(w, api, "notebook")

    out, warnings = patched(w, claimed_pod("notebook"))
    want_resources(out, {CORE: "30", MEM: "8192"})
    assert warnings == ['container "train": elasticgpu.io/gpu-core 30 and '
                        'elasticgpu.io/gpu-memory 8192 from ElasticGPUClaim ml/notebook (Bound '
                        'to ElasticGPU egpu-nb)']
    assert out["metadata"]["annotations"] == {"team": "ml", ANN: "notebook"}

    out, warnings = patched(w, claimed_pod("inference"))
    want_resources(out, {CORE: "33", MEM: "16384"})
    out, _ = patched(w, claimed_pod("ml/trainer"))
    want_resources(out, {CORE: "200"})

    # WaitForFirstConsumer: Pending until the pod is placed, its requests go; the cache's
    # Pending is checked with the API server first (a live GET, which its RBAC allows)
    (out, warnings), reqs = requests_during(api, lambda: patched(w, claimed_pod("later")))
    assert {"method": "GET", "path": f"{G}/namespaces/ml/elasticgpuclaims/later"} in reqs, reqs
    want_resources(out, {CORE: "40", MEM: "4096"})
    assert warnings == ['container "train": elasticgpu.io/gpu-core 40 and '
                        'elasticgpu.io/gpu-memory 4096 from ElasticGPUClaim ml/later (Pending: '
                        'its requests)']
    # bound since (to a bigger ElasticGPU): the API server's word, not the cache's
    st, obj = api.call("GET", f"{G}/namespaces/ml/elasticgpuclaims/later")
    obj["status"] = bound("egpu-later", 50, 4096)
    assert api.call("PUT", f"{G}/namespaces/ml/elasticgpuclaims/later/status", obj)[0] == 200
    out, _ = patched(w, claimed_pod("later"))
    want_resources(out, {CORE: "50", MEM: "4096"})


def test_claim_created_right_before_the_pod(webhook, fault_api):  # noqa: F811
    """A claim the webhook's cache has not got yet is found by a live GET and the pod
    admitted. On the test API server (fault_api): the webhook's watch of claims is dropped
    and its next list held back 4 s (drop-watches, a delayed fault), which a real one
    cannot be made to do, so the claim is surely not in the cache."""
    api = fault_api
    gpus(api, 40960)
    w = webhook(kubeconfig=api.kubeconfig)
    w.wait_ready()
    # the webhook's watch of claims is cut and its next watch held back for
    # 4 s: a claim created now is in the API server but not in its cache
    api.control("fault", {"method": "GET", "path": r"^/apis/elasticgpu\.io/v1alpha1/"
                          r"elasticgpuclaims$", "code": 0, "delay_ms": 4000, "count": 2})
    api.control("drop-watches")
    make_claim(api, "fresh", {CORE: 20, MEM: 2048}, bound("egpu-fresh", 20, 2048))
    api.control("requests", method="DELETE")
    out, _ = patched(w, claimed_pod("fresh"))
    want_resources(out, {CORE: "20", MEM: "2048"})
    _, reqs = api.control("requests", method="GET")
    assert any(r["method"] == "GET" and r["path"] == f"{G}/namespaces/ml/elasticgpuclaims/fresh"
               for r in reqs), reqs
    api.control("fault", method="DELETE")


def test_claims_denied(webhook, api):  # noqa: F811
    """Denied with the exact message: a claim missing, Lost, in another namespace, Pending
    with gpu-tflops, a container using a claim that asks a GPU itself, a claim for an
    unknown container; on UPDATE a changed claim annotation (other changes pass)."""
    gpus(api, 40960)
    make_claim(api, "notebook", {CORE: 30, MEM: 8192}, bound("egpu-nb", 30, 8192))
    make_claim(api, "gone", {CORE: 30}, {"phase": "Lost", "elasticGPUName": "egpu-gone"})
    make_claim(api, "fast", {"elasticgpu.io/gpu-tflops": 100}, {"phase": "Pending"})
    make_claim(api, "theirs", {CORE: 30}, bound("egpu-theirs", 30), ns="prod")
    w = webhook()
    w.wait_ready()
    claim_cached(w, api, "notebook")

    assert denied(w, claimed_pod("nothing")) == \
        f"annotation {ANN}: ElasticGPUClaim ml/nothing not found"
    assert denied(w, claimed_pod("gone")) == (
        f"annotation {ANN}: ElasticGPUClaim ml/gone is Lost: its ElasticGPU egpu-gone is gone; "
        "allowed: a Bound claim, or a Pending one (create the claim again)")
    assert denied(w, claimed_pod("prod/theirs")) == (
        f'annotation {ANN}: claim "prod/theirs" is in another namespace; allowed: the name of an '
        "ElasticGPUClaim in the pod's own namespace ml")
    assert denied(w, claimed_pod("fast")) == (
        f"annotation {ANN}: ElasticGPUClaim ml/fast is Pending and asks elasticgpu.io/gpu-tflops; "
        "its gpu-core percent is known only once it is Bound (it depends on the card it lands "
        "on); allowed: a Bound claim, or a Pending one asking elasticgpu.io/gpu-core")
    assert denied(w, claimed_pod("notebook", {CORE: "50"})) == (
        f'container "train" uses claim notebook (annotation {ANN}) and also requests '
        "elasticgpu.io/gpu-core; remove one")
    assert denied(w, claimed_pod("notebook", {"tencent.com/vcuda-core": "30"})) == (
        f'container "train" uses claim notebook (annotation {ANN}) and also requests '
        "tencent.com/vcuda-core; remove one")
    assert denied(w, claimed_pod("notebook", container="trainer")) == (
        'annotation egpuc.elasticgpu.io/trainer: the pod has no container "trainer"; allowed: '
        "one of its containers: train")

    # UPDATE: the claim annotation is fixed at creation
    old = claimed_pod("notebook", {CORE: "30", MEM: "8192"})
    new = claimed_pod("gone", {CORE: "30", MEM: "8192"})
    assert denied(w, new, route="/validate", op="UPDATE", old=old) == (
        f'annotation {ANN} cannot change after the pod is created (was "notebook", now "gone"; '
        "the scheduler and the controller rely on the claims a pod was created with); create a "
        "new pod")
    relabelled = json.loads(json.dumps(old))
    relabelled["metadata"]["labels"]["app"] = "y"
    assert w.review("/validate", review(relabelled, op="UPDATE", old=old)) == {
        "uid": UID, "allowed": True}

    assert w.metric("egpu_webhook_admission_requests_total",
                    '{route="mutate",result="denied"}') == 7
    assert w.metric("egpu_webhook_admission_requests_total",
                    '{route="validate",result="denied"}') == 1


def test_claim_lookup_fails_closed(webhook, fault_api):  # noqa: F811
    """The API server does not answer: a claim not in the cache is refused (fail closed),
    saying why, one in the cache still resolves. On the test API server (fault_api), which
    can be made to stop answering (down)."""
    api = fault_api
    gpus(api, 40960)
    make_claim(api, "notebook", {CORE: 30, MEM: 8192}, bound("egpu-nb", 30, 8192))
    w = webhook(kubeconfig=api.kubeconfig)
    w.wait_ready()
    claim_cached(w, api, "notebook")
    api.control("down", {"down": True})
    msg = denied(w, claimed_pod("unseen"))
    assert msg.startswith(f"annotation {ANN}: cannot look up ElasticGPUClaim ml/unseen (GET "), msg
    assert msg.endswith("); the pod is refused rather than admitted without its claim's GPU "
                        "limit, try again"), msg
    out, _ = patched(w, claimed_pod("notebook"))
    want_resources(out, {CORE: "30", MEM: "8192"})
    api.control("down", {"down": False})
    assert w.metric("egpu_webhook_admission_requests_total",
                    '{route="mutate",result="denied"}') == 1


def test_readyz_waits_for_claims(webhook, fault_api):  # noqa: F811
    """/readyz says 503, naming the claims, until they are listed, then ok. On the test API
    server (fault_api): it answers the list of claims 503 on demand, which a real one does
    not."""
    api = fault_api
    gpus(api, 40960)
    # the first list of claims is held back: not ready, saying why
    api.control("fault", {"method": "GET", "path": r"^/apis/elasticgpu\.io/v1alpha1/"
                          r"elasticgpuclaims$", "code": 503, "count": -1})
    w = webhook(kubeconfig=api.kubeconfig)
    deadline = time.time() + 15
    while True:
        st, _, body = w.curl(w.health + "/readyz")
        assert st == 503, body
        if b"not ready: ElasticGPUClaims not listed yet" in body:
            break
        assert time.time() < deadline, body
        time.sleep(0.1)
    api.control("fault", method="DELETE")
    assert w.wait_ready(200, timeout=40).strip() == "ok"


def test_lookup_gives_up_before_the_api_server_does(webhook, fault_api):  # noqa: F811
    """A GET of a claim that hangs is given up after 3 s, below the API
    server's 5 s timeoutSeconds for the webhook: the user reads why, and the
    pod is refused (fail closed). On the test API server (fault_api): it holds
    that GET 8 s on demand (a delayed fault), a slow server a real one is not."""
    api = fault_api
    gpus(api, 40960)
    w = webhook(kubeconfig=api.kubeconfig)
    w.wait_ready()
    api.control("fault", {"method": "GET", "path": r"/namespaces/ml/elasticgpuclaims/late$",
                          "code": 0, "delay_ms": 8000, "count": 1})
    t0 = time.monotonic()
    msg = denied(w, claimed_pod("late"))
    took = time.monotonic() - t0
    assert msg.startswith(f"annotation {ANN}: cannot look up ElasticGPUClaim ml/late (GET "), msg
    assert 2.5 < took < 4.5, took
    api.control("fault", method="DELETE")
