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
