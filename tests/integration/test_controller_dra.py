"""egpu-controller --mode dra: the ResourceClaimTemplates a pod's elasticgpu.io/dra-claims
annotation names (src/controller/dra.c; docs/claims.md, "DRA mode").

Each test runs twice: on the project's test API server (fault_api, tests/apiserver/server.py:
it stores what it is given, so the templates compared are the controller's bytes) and on the
real control plane (kube_api: kube-apiserver 1.36 defaults and canonicalizes the stored
template, kube-controller-manager makes the pod's claims from it, and the controller runs
with its ServiceAccount's token, so every call is one deploy/controller/rbac.yaml grants).

- A pod whose annotation names the template its own request makes (the name the hash of
  that spec, spec.resourceClaims naming it) gets it, in its namespace, ownerless, labelled
  app.kubernetes.io/managed-by=egpu-controller, with a Normal event; on the real control
  plane the pod's ResourceClaim follows from it.
- An entry whose name is not the hash of the spec the pod's request makes, or whose spec is
  not that spec, or that spec.resourceClaims does not name, makes nothing: one Warning event
  on the pod naming the template, however many resyncs pass.
- A template of that name that exists with another spec is left as it is, with a Warning.
- No annotation, or the controller in device-plugin mode (the default): no template.
- Templates of ours no pod names are deleted after --dra-template-gc-seconds; one a pod
  still names, and one without our label, stay.
- Each ElasticGPUClass gets its DeviceClass elasticgpu-<class> (the driver, the class's
  models), owned by the class; one of that name it does not own is left with a Warning on
  the class; device-plugin mode makes none.
- Each ElasticGPUClaim gets its ResourceClaim elasticgpu-<claim> (no ElasticGPU): Pending
  until allocated, then Bound with the consumed capacity, device and node; one that cannot
  be (a share in a whole-card class, a foreign ResourceClaim of that name) is Pending with
  ProvisioningFailed.
"""
import hashlib
import json
import time

import pytest

from test_controller import Controller, wait

RES = "/apis/resource.k8s.io/v1"
MANAGED = ("app.kubernetes.io/managed-by", "egpu-controller")
NS = "dra"


@pytest.fixture(params=["test-api-server", "real"])
def api(request):
    """The test API server, or the real control plane (skipped without its binaries,
    failed under CI=true), emptied of resource.k8s.io objects."""
    if request.param == "real":
        a = request.getfixturevalue("kube_api")
        for kind in ("resourceclaims", "resourceclaimtemplates"):
            a._delete_all(f"{RES}/{kind}", True)
        return a
    return request.getfixturevalue("fault_api")


@pytest.fixture
def ctl(build_dir, api, tmp_path):
    started = []

    def start(extra=("--mode", "dra"), name="c1"):
        c = Controller(build_dir, api, tmp_path, name, ("--leader-elect", "false", *extra))
        started.append(c)
        return c
    yield start
    for c in started:
        c.stop()


def share_spec(core, mem=None):
    """The ResourceClaimSpec egpu_api_dra_claim_spec makes for a share of one card
    (include/egpu/api.h)."""
    ex = {"deviceClassName": "gpu-share.elasticgpu.io", "allocationMode": "ExactCount",
          "count": 1, "capacity": {"requests": {"cores": str(core),
                                                **({"memory": f"{mem}Mi"} if mem else {})}}}
    return {"devices": {"requests": [{"name": "gpu", "exactly": ex}]}}


def name_of(spec):
    """egpu_api_dra_template_name: egpu- and the first 128 bits of the SHA-256 of the
    compact JSON with sorted keys."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return "egpu-" + hashlib.sha256(text.encode()).hexdigest()[:32]


def mkpod(api, name, core=30, mem=4096, entries=None, claims=None):
    """Pod NS/name, one container asking core % and mem MiB; annotation dra-claims =
    entries (dict; None: no annotation); spec.resourceClaims naming the templates claims
    (default: entries' names)."""
    res = {"elasticgpu.io/gpu-core": str(core), "elasticgpu.io/gpu-memory": str(mem)}
    meta = {"name": name, "namespace": NS}
    if entries is not None:
        meta["annotations"] = {"elasticgpu.io/dra-claims": json.dumps(entries)}
    if claims is None:
        claims = list(entries or {})
    spec = {"containers": [{"name": "main", "image": "busybox",
                            "resources": {"requests": res, "limits": res}}]}
    if claims:
        spec["resourceClaims"] = [{"name": f"egpu-{i}", "resourceClaimTemplateName": t}
                                  for i, t in enumerate(claims)]
    st, obj = api.call("POST", f"/api/v1/namespaces/{NS}/pods",
                       {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
    assert st == 201, obj
    return obj


def delete_pod(api, name):
    st, out = api.call("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}",
                       {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
    assert st in (200, 202), out


def template(api, name):
    st, out = api.call("GET", f"{RES}/namespaces/{NS}/resourceclaimtemplates/{name}")
    return out if st == 200 else None


def templates(api):
    st, out = api.call("GET", f"{RES}/namespaces/{NS}/resourceclaimtemplates")
    assert st == 200, out
    return {t["metadata"]["name"]: t for t in out["items"]}


def events(api, pod):
    st, out = api.call("GET", f"/api/v1/namespaces/{NS}/events")
    assert st == 200, out
    return [e for e in out["items"] if e["involvedObject"]["name"] == pod]


def mktemplate(api, name, spec, labels=None):
    meta = {"name": name, "namespace": NS, **({"labels": labels} if labels else {})}
    st, out = api.call("POST", f"{RES}/namespaces/{NS}/resourceclaimtemplates",
                       {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                        "metadata": meta, "spec": {"spec": spec}})
    assert st == 201, out
    return out


def same_request(got, want):
    """The stored claim spec asks what want asks (the real API server writes "4096Mi" as
    "4Gi")."""
    g = got["devices"]["requests"][0]["exactly"]
    w = want["devices"]["requests"][0]["exactly"]
    mib = {"4096Mi": "4Gi"}
    return (g["deviceClassName"] == w["deviceClassName"] and g.get("count", 1) == w["count"]
            and g["capacity"]["requests"]["cores"] == w["capacity"]["requests"]["cores"]
            and g["capacity"]["requests"].get("memory") in
            (w["capacity"]["requests"].get("memory"),
             mib.get(w["capacity"]["requests"].get("memory"))))


def test_template_created(api, ctl):
    spec = share_spec(30, 4096)
    name = name_of(spec)
    pod = mkpod(api, "p1", entries={name: spec})
    ctl()
    t = wait(lambda: template(api, name), f"template {name}")
    assert t["metadata"]["labels"][MANAGED[0]] == MANAGED[1]
    assert not t["metadata"].get("ownerReferences")
    assert same_request(t["spec"]["spec"], spec), t["spec"]
    ev = wait(lambda: [e for e in events(api, "p1")
                       if e["reason"] == "ResourceClaimTemplateCreated"], "the Normal event")
    assert ev[0]["type"] == "Normal" and name in ev[0]["message"]
    assert ev[0]["involvedObject"]["uid"] == pod["metadata"]["uid"]
    assert ev[0]["involvedObject"]["kind"] == "Pod"
    assert ev[0]["involvedObject"]["apiVersion"] == "v1"
    # A second pod of the same ask shares the template: nothing more is made.
    mkpod(api, "p2", entries={name: spec})
    time.sleep(2)
    assert list(templates(api)) == [name]
    # The stored template (defaulted and canonical on the real API server) is taken for
    # the one the pods ask: no Warning of the controller's (kube-controller-manager's
    # FailedResourceClaimCreation, the template missing until then, may precede it).
    for pod in ("p1", "p2"):
        assert not [e for e in events(api, pod) if e["type"] == "Warning" and
                    e["source"].get("component") == "egpu-controller"], \
            [(e["reason"], e["message"]) for e in events(api, pod)]
    if api.real:
        # kube-controller-manager makes each pod's claim from the template.
        def claim_of_p1():
            st, out = api.call("GET", f"{RES}/namespaces/{NS}/resourceclaims")
            assert st == 200, out
            return [c for c in out["items"]
                    if any(o.get("name") == "p1" for o in c["metadata"].get("ownerReferences", []))]
        cl = wait(claim_of_p1, "p1's ResourceClaim", timeout=60)
        assert same_request(cl[0]["spec"], spec), cl[0]["spec"]


def whole_spec(k):
    ex = {"deviceClassName": "gpu.elasticgpu.io", "allocationMode": "ExactCount", "count": k}
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": ex}]}}
    if k > 1:
        spec["devices"]["constraints"] = [{"requests": ["gpu"],
                                           "distinctAttribute": "gpu.elasticgpu.io/uuid"}]
    return spec


def mkrewritten(api, name, entries):
    """Pod NS/name as egpu-webhook --mode dra leaves it (docs/webhook.md): no elasticgpu.io
    resource left, container i's resources.claims egpu-<i>, the annotation entries."""
    cs = [{"name": f"c{i}", "image": "busybox",
           "resources": {"claims": [{"name": f"egpu-{i}", "request": "gpu"}]}}
          for i in range(len(entries))]
    st, obj = api.call("POST", f"/api/v1/namespaces/{NS}/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS,
                     "annotations": {"elasticgpu.io/dra-claims": json.dumps(entries)}},
        "spec": {"containers": cs,
                 "resourceClaims": [{"name": f"egpu-{i}", "resourceClaimTemplateName": t}
                                    for i, t in enumerate(entries)]}})
    assert st == 201, obj
    return obj


def test_rewritten_pod_gets_canonical_templates_only(api, ctl):
    """A pod the webhook rewrote has no elasticgpu.io request left: each entry's spec is made
    again from the ask it says. A share and two whole cards are made; a spec the webhook
    never makes (adminAccess, here with its own hash as name) is refused."""
    share, whole = share_spec(40, 2048), whole_spec(2)
    mkrewritten(api, "ok", {name_of(share): share, name_of(whole): whole})
    admin = whole_spec(1)
    admin["devices"]["requests"][0]["exactly"]["adminAccess"] = True
    mkrewritten(api, "admin", {name_of(admin): admin})
    ctl()
    wait(lambda: template(api, name_of(share)) and template(api, name_of(whole)),
         "both templates")
    assert template(api, name_of(whole))["spec"]["spec"]["devices"]["requests"][0][
        "exactly"]["count"] == 2
    ev = wait(lambda: [e for e in events(api, "admin")
                       if e["reason"] == "ResourceClaimTemplateRefused"], "the Warning")
    assert name_of(admin) in ev[0]["message"]
    assert template(api, name_of(admin)) is None


def test_mismatches_refused_with_one_event(api, ctl):
    spec = share_spec(30, 4096)
    other = share_spec(50, 4096)
    forged = "egpu-" + "0" * 32
    mkpod(api, "wrong-name", entries={forged: spec})           # name is no hash of it
    mkpod(api, "other-ask", entries={name_of(other): other})   # asks 30, names 50's
    mkpod(api, "wrong-spec", entries={name_of(spec): other})   # 30's name, 50's body
    mkpod(api, "unnamed", entries={name_of(spec): spec}, claims=[name_of(other)])
    mkpod(api, "garbage", entries=None, claims=[name_of(spec)])
    st, out = api.call("PATCH", f"/api/v1/namespaces/{NS}/pods/garbage",
                       {"metadata": {"annotations": {"elasticgpu.io/dra-claims": "[1, 2"}}},
                       "application/merge-patch+json")
    assert st == 200, out
    ctl(("--mode", "dra", "--resync-seconds", "1"))
    for pod, tmpl, why in (("wrong-name", forged, "not the name of a spec"),
                           ("other-ask", name_of(other), "not the name of a spec"),
                           ("wrong-spec", name_of(spec), "its spec is not the one"),
                           ("unnamed", name_of(spec), "spec.resourceClaims does not name it"),
                           ("garbage", "elasticgpu.io/dra-claims", "not a JSON object")):
        ev = wait(lambda: [e for e in events(api, pod)
                           if e["reason"] == "ResourceClaimTemplateRefused"],
                  f"the Warning on {pod}")
        assert ev[0]["type"] == "Warning" and tmpl in ev[0]["message"] and \
            why in ev[0]["message"], ev[0]["message"]
    time.sleep(3)  # three resyncs
    assert templates(api) == {}
    for pod in ("wrong-name", "other-ask", "wrong-spec", "unnamed", "garbage"):
        n = [e for e in events(api, pod) if e["reason"] == "ResourceClaimTemplateRefused"]
        assert len(n) == 1 and n[0].get("count", 1) == 1, n


def test_existing_template_with_another_spec_left(api, ctl):
    spec = share_spec(30, 4096)
    name = name_of(spec)
    mine = mktemplate(api, name, share_spec(90))
    mkpod(api, "p", entries={name: spec})
    ctl()
    ev = wait(lambda: [e for e in events(api, "p")
                       if e["reason"] == "ResourceClaimTemplateConflict"], "the Warning")
    assert ev[0]["type"] == "Warning" and name in ev[0]["message"]
    t = template(api, name)
    assert t["metadata"]["resourceVersion"] == mine["metadata"]["resourceVersion"]
    assert t["spec"] == mine["spec"]


def test_no_annotation_or_device_plugin_mode_no_template(api, ctl):
    spec = share_spec(30, 4096)
    mkpod(api, "plain", entries=None, claims=[name_of(spec)])
    ctl(())  # device-plugin mode: a pod with the annotation is not its business
    mkpod(api, "annotated", entries={name_of(spec): spec})
    time.sleep(3)
    assert templates(api) == {}
    assert not [e for e in events(api, "annotated") if "ResourceClaimTemplate" in e["reason"]]


def test_unused_templates_collected(api, ctl):
    spec, kept_spec = share_spec(30, 4096), share_spec(20, 1024)
    name, kept = name_of(spec), name_of(kept_spec)
    mkpod(api, "goes", entries={name: spec})
    mkpod(api, "stays", core=20, mem=1024, entries={kept: kept_spec})
    foreign = share_spec(10, 512)
    mktemplate(api, "users-own", foreign)                  # no label: never ours
    mktemplate(api, "orphan", foreign, dict([MANAGED]))    # ours, no pod ever names it
    ctl(("--mode", "dra", "--resync-seconds", "1", "--dra-template-gc-seconds", "3"))
    wait(lambda: template(api, name) and template(api, kept), "both templates")
    t0 = time.time()
    delete_pod(api, "goes")
    wait(lambda: template(api, name) is None, f"{name} collected", timeout=30)
    assert time.time() - t0 >= 2.5, "collected before --dra-template-gc-seconds"
    wait(lambda: template(api, "orphan") is None, "orphan collected", timeout=30)
    time.sleep(2)
    assert set(templates(api)) == {kept, "users-own"}


# --- an ElasticGPUClass's DeviceClass ---------------------------------------------------

G = "/apis/elasticgpu.io/v1alpha1"


def mkclass(api, name, models=None):
    obj = {"apiVersion": "elasticgpu.io/v1alpha1", "kind": "ElasticGPUClass",
           "metadata": {"name": name}, "provisioner": "gpushare.provisioner.elasticgpu.io"}
    if models:
        obj["parameters"] = {"models": models}
    st, out = api.call("POST", f"{G}/elasticgpuclasses", obj)
    assert st == 201, out
    return out


def device_class(api, name):
    st, out = api.call("GET", f"{RES}/deviceclasses/{name}")
    return out if st == 200 else None


def exprs(dc):
    return [s["cel"]["expression"] for s in dc["spec"]["selectors"]]


@pytest.fixture
def no_device_classes(api):
    """The DeviceClasses the tests below make, gone before and after (cluster-scoped: the
    real control plane's reset leaves them)."""
    def clean():
        st, out = api.call("GET", f"{RES}/deviceclasses")
        assert st == 200, out
        for d in out["items"]:
            if d["metadata"]["name"].startswith("elasticgpu-"):
                api.call("DELETE", f"{RES}/deviceclasses/{d['metadata']['name']}")
        wait(lambda: not [d for d in api.call("GET", f"{RES}/deviceclasses")[1]["items"]
                          if d["metadata"]["name"].startswith("elasticgpu-")],
             "DeviceClasses gone")
    clean()
    yield
    clean()


def test_class_gets_its_device_class(api, no_device_classes, ctl):
    """ElasticGPUClass -> DeviceClass elasticgpu-<class>: the driver, the class's models as
    it matches them (with and without "NVIDIA "), owned by the class; one edited by hand
    is put back. On the real control plane the API server compiles the CEL (a bad
    expression is a 422) and its garbage collector deletes it with the class."""
    cls = mkclass(api, "a100", models="A100-SXM4-80GB|NVIDIA H100")
    mkclass(api, "any")
    ctl()
    dc = wait(lambda: device_class(api, "elasticgpu-a100"), "elasticgpu-a100")
    assert exprs(dc) == [
        'device.driver == "gpu.elasticgpu.io"',
        'has(device.attributes["gpu.elasticgpu.io"].productName) && '
        'device.attributes["gpu.elasticgpu.io"].productName in '
        '["A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", "NVIDIA H100"]']
    ref, = dc["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == \
        ("ElasticGPUClass", "a100", cls["metadata"]["uid"], True)
    assert dc["metadata"]["labels"][MANAGED[0]] == MANAGED[1]
    anydc = wait(lambda: device_class(api, "elasticgpu-any"), "elasticgpu-any")
    assert exprs(anydc) == ['device.driver == "gpu.elasticgpu.io"']
    # Edited by hand: put back.
    dc["spec"]["selectors"] = [{"cel": {"expression": "true"}}]
    st, out = api.call("PUT", f"{RES}/deviceclasses/elasticgpu-a100", dc)
    assert st == 200, out
    wait(lambda: len(exprs(device_class(api, "elasticgpu-a100"))) == 2, "selectors restored")
    if api.real:
        st, out = api.call("DELETE", f"{G}/elasticgpuclasses/a100")
        assert st == 200, out
        wait(lambda: device_class(api, "elasticgpu-a100") is None,
             "the garbage collector deleting elasticgpu-a100", timeout=60)


def test_foreign_device_class_left(api, no_device_classes, ctl):
    st, mine = api.call("POST", f"{RES}/deviceclasses", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "elasticgpu-taken"},
        "spec": {"selectors": [{"cel": {"expression": "true"}}]}})
    assert st == 201, mine
    mkclass(api, "taken")
    ctl(("--mode", "dra", "--resync-seconds", "1"))

    def warned():
        st, out = api.call("GET", "/api/v1/namespaces/default/events")
        assert st == 200
        return [e for e in out["items"] if e["involvedObject"]["name"] == "taken"
                and e["reason"] == "DeviceClassConflict"]
    ev = wait(warned, "the Warning on the class")
    assert ev[0]["type"] == "Warning" and "elasticgpu-taken" in ev[0]["message"]
    time.sleep(3)
    assert len(warned()) == 1 and warned()[0].get("count", 1) == 1
    got = device_class(api, "elasticgpu-taken")
    assert got["metadata"]["resourceVersion"] == mine["metadata"]["resourceVersion"]


def test_device_plugin_mode_makes_no_device_class(api, no_device_classes, ctl):
    mkclass(api, "quiet")
    c = ctl(())
    wait(lambda: c.get("/readyz")[0] == 200, "ready")
    time.sleep(2)
    assert device_class(api, "elasticgpu-quiet") is None


# --- an ElasticGPUClaim's ResourceClaim --------------------------------------------------

def mkclaim(api, name, core, mem=None, cls="share"):
    req = {"elasticgpu.io/gpu-core": core, **({"elasticgpu.io/gpu-memory": mem} if mem else {})}
    st, out = api.call("POST", f"{G}/namespaces/{NS}/elasticgpuclaims", {
        "apiVersion": "elasticgpu.io/v1alpha1", "kind": "ElasticGPUClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"resources": {"requests": req}, "elasticGPUClassName": cls}})
    assert st == 201, out
    return out


def egpu_claim(api, name):
    st, out = api.call("GET", f"{G}/namespaces/{NS}/elasticgpuclaims/{name}")
    return out if st == 200 else None


def resource_claim(api, name):
    st, out = api.call("GET", f"{RES}/namespaces/{NS}/resourceclaims/{name}")
    return out if st == 200 else None


def bound_cond(obj):
    return next((c for c in (obj or {}).get("status", {}).get("conditions", [])
                 if c["type"] == "Bound"), None)


def test_claim_gets_its_resource_claim(api, no_device_classes, ctl):
    """--mode dra: an ElasticGPUClaim becomes ResourceClaim elasticgpu-<claim> (its
    gpu-core and gpu-memory as capacity requests, its class's DeviceClass), owned by it; no
    ElasticGPU is made; it stays Pending (WaitForFirstConsumer) until the ResourceClaim is
    allocated, then Bound with the consumed capacity and the device and node. Here the
    allocation is written by hand as kube-scheduler writes it (status.allocation)."""
    st, out = api.call("POST", f"{G}/elasticgpuclasses", {
        "apiVersion": "elasticgpu.io/v1alpha1", "kind": "ElasticGPUClass",
        "metadata": {"name": "share"}, "provisioner": "gpushare.provisioner.elasticgpu.io"})
    assert st == 201, out
    cl = mkclaim(api, "train", 30, 4096)
    ctl(("--mode", "dra", "--resync-seconds", "1"))
    rc = wait(lambda: resource_claim(api, "elasticgpu-train"), "the ResourceClaim")
    ex = rc["spec"]["devices"]["requests"][0]["exactly"]
    assert ex["deviceClassName"] == "elasticgpu-share"
    assert ex["capacity"]["requests"]["cores"] == "30"
    assert ex["capacity"]["requests"]["memory"] in ("4096Mi", "4Gi")
    ref, = rc["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["uid"]) == \
        ("ElasticGPUClaim", "train", cl["metadata"]["uid"])
    c = wait(lambda: (o := egpu_claim(api, "train")) and bound_cond(o) and o, "a condition")
    assert c["status"]["phase"] == "Pending"
    assert bound_cond(c)["reason"] == "WaitForFirstConsumer"
    assert "elasticgpu-train" in bound_cond(c)["message"]
    st, out = api.call("GET", f"{G}/elasticgpus")
    assert st == 200 and out["items"] == [], out
    alloc = {"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": "gpu.elasticgpu.io",
                                 "pool": "n1", "device": "gpu-0",
                                 "shareID": "0b8c4b9e-6f6c-4c36-9d55-2b8f3f0c8a11",
                                 "consumedCapacity": {"cores": "30", "memory": "4Gi"}}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}
    path = f"{RES}/namespaces/{NS}/resourceclaims/elasticgpu-train"
    st, out = api.call("PATCH", path + ("/status" if api.real else ""), {"status": alloc},
                       "application/merge-patch+json")
    assert st == 200, out
    c = wait(lambda: (o := egpu_claim(api, "train")) and o["status"].get("phase") == "Bound"
             and o, "Bound")
    assert c["status"]["capacity"] == {"elasticgpu.io/gpu-core": 30,
                                       "elasticgpu.io/gpu-memory": 4096}
    assert bound_cond(c)["status"] == "True"
    assert "device n1/gpu-0 on node n1" in bound_cond(c)["message"]


def test_claim_that_cannot_be_a_resource_claim(api, no_device_classes, ctl):
    """A share claim in a whole-card class, and a ResourceClaim of that name the claim does
    not own: Pending with ProvisioningFailed saying why; the foreign one left."""
    st, out = api.call("POST", f"{G}/elasticgpuclasses", {
        "apiVersion": "elasticgpu.io/v1alpha1", "kind": "ElasticGPUClass",
        "metadata": {"name": "whole"}, "provisioner": "physical.provisioner.elasticgpu.io"})
    assert st == 201, out
    st, out = api.call("POST", f"{G}/elasticgpuclasses", {
        "apiVersion": "elasticgpu.io/v1alpha1", "kind": "ElasticGPUClass",
        "metadata": {"name": "share"}, "provisioner": "gpushare.provisioner.elasticgpu.io"})
    assert st == 201, out
    mkclaim(api, "half", 50, cls="whole")
    st, foreign = api.call("POST", f"{RES}/namespaces/{NS}/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "elasticgpu-taken", "namespace": NS},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.elasticgpu.io"}}]}}})
    assert st == 201, foreign
    mkclaim(api, "taken", 30, 1024)
    ctl()
    for name, why in (("half", "class whole provisions whole cards"),
                      ("taken", "ResourceClaim elasticgpu-taken exists and is not this claim's")):
        c = wait(lambda: (o := egpu_claim(api, name)) and bound_cond(o) and o, name)
        assert bound_cond(c)["reason"] == "ProvisioningFailed" and \
            why in bound_cond(c)["message"], bound_cond(c)
    assert resource_claim(api, "elasticgpu-half") is None
    assert resource_claim(api, "elasticgpu-taken")["metadata"]["resourceVersion"] == \
        foreign["metadata"]["resourceVersion"]


def test_claim_naming_an_elastic_gpu_keeps_to_it(api, no_device_classes, ctl):
    """A claim that names an ElasticGPU stays on the ElasticGPU path in DRA mode (here:
    Pending, ElasticGPUNotFound) and gets no ResourceClaim."""
    st, out = api.call("POST", f"{G}/elasticgpuclasses", {
        "apiVersion": "elasticgpu.io/v1alpha1", "kind": "ElasticGPUClass",
        "metadata": {"name": "share"}, "provisioner": "gpushare.provisioner.elasticgpu.io"})
    assert st == 201, out
    st, out = api.call("POST", f"{G}/namespaces/{NS}/elasticgpuclaims", {
        "apiVersion": "elasticgpu.io/v1alpha1", "kind": "ElasticGPUClaim",
        "metadata": {"name": "pinned", "namespace": NS},
        "spec": {"resources": {"requests": {"elasticgpu.io/gpu-core": 30}},
                 "elasticGPUClassName": "share", "elasticGPUName": "eg-1"}})
    assert st == 201, out
    mkclaim(api, "free", 30, 1024)
    ctl()
    c = wait(lambda: (o := egpu_claim(api, "pinned")) and bound_cond(o) and o, "a condition")
    assert bound_cond(c)["reason"] == "ElasticGPUNotFound", bound_cond(c)
    wait(lambda: resource_claim(api, "elasticgpu-free"), "the free claim's ResourceClaim")
    assert resource_claim(api, "elasticgpu-pinned") is None
