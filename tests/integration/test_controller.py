"""egpu-controller against the real control plane (conftest.py's kube_api:
kube-apiserver, etcd and kube-controller-manager, deploy/'s CRDs and RBAC), running
with the token of its ServiceAccount egpu-controller, so every request it makes is
one deploy/controller/rbac.yaml grants. A refused write is made there by taking the
right away from that ClusterRole for the while (403). The one test that needs faults
the real API server cannot be made to show (a cluster-wide pod list that fails while
the watches are cut) takes the test API server (fault_api, tests/apiserver/server.py)
and says so.

- Immediate classes provision an ElasticGPU named egpu-<claim uid> on a card
  the placement core chose, bind it (claimRef first, then the claim's
  status), and reclaim it when the claim goes: Delete deletes it, Retain
  keeps it Released; an administrator who clears a Released one's claimRef
  makes it Available to bind again. WaitForFirstConsumer claims stay
  Pending with a condition saying why until the scheduler's selected-node
  and selected-gpus annotations say where: provisioned exactly there, or,
  when the class forbids it or the card is full, refused with a condition,
  an event and the annotations removed; a kill between the annotation and
  the binding provisions nothing twice.
- The inventory the controller keeps across claims follows ElasticGPUs
  made and deleted by hand or by itself, and nodes that join.
- Claims bind to the ElasticGPU they name when it fits, else to the best
  Available one of their class; a missing or unfit named one leaves the
  claim Pending with the reason.
- The protection finalizer holds a deleted claim while a running pod in its
  namespace names it, and goes once the pod has finished.
- A Bound claim whose ElasticGPU is deleted by hand becomes Lost; an
  ElasticGPU whose node left (no Node, no GPU objects) becomes Failed.
- Restart safety: the controller is SIGKILLed with a binding half done (the
  API server refusing the next write: 403, the right taken away from its
  ClusterRole for the while), restarted, and finishes it: one ElasticGPU,
  created once.
- Two controllers: only the Lease holder reconciles; killing it hands over.
"""
import json
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest


@pytest.fixture
def api(kube_api):
    """The real control plane (conftest.py's kube_api), emptied before each test; its audit
    log read from here on (posts_of_egpus)."""
    kube_api.audit_start = kube_api.cluster.audit_log.stat().st_size
    return kube_api

G = "/apis/elasticgpu.io/v1alpha1"
V = "elasticgpu.io/v1alpha1"
SHARE = "gpushare.provisioner.elasticgpu.io"
PHYS = "physical.provisioner.elasticgpu.io"


class Controller:
    def __init__(self, build_dir, api, tmp_path, name="c1", extra=()):
        exe = build_dir / "src/controller/egpu-controller"
        if not exe.exists():
            pytest.fail(f"{exe} not built: run `make build` first")
        self.log = tmp_path / f"{name}.log"
        self.proc = subprocess.Popen(
            [str(exe), "--kubeconfig", api.component_kubeconfig("egpu-controller"), "--listen", "127.0.0.1", "--port", "0",
             "--resync-seconds", "1", *extra],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))
        deadline = time.time() + 15
        self.url = None
        while time.time() < deadline and self.url is None:
            m = re.search(r"egpu-controller: serving addr=\S+ port=(\d+)", self.log.read_text())
            if m:
                self.url = f"http://127.0.0.1:{m.group(1)}"
            else:
                assert self.proc.poll() is None, self.log.read_text()
                time.sleep(0.05)
        assert self.url, self.log.read_text()

    def get(self, path):
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def metric(self, name, labels=""):
        _, text = self.get("/metrics")
        for line in text.splitlines():
            if line.startswith(name + labels + " "):
                return float(line.split()[-1])
        return None

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=15)
        return self.proc.returncode


@pytest.fixture
def ctl(build_dir, request, tmp_path):
    """start(name, extra): an egpu-controller against the test's API server, with its
    ServiceAccount's token (component_kubeconfig): fault_api when the test asks for it (a
    test that needs a fault), else the module's `api` fixture. Killed at the end."""
    api = request.getfixturevalue("fault_api" if "fault_api" in request.fixturenames
                                  else "api")
    started = []

    def start(name="c1", extra=("--leader-elect", "false")):
        c = Controller(build_dir, api, tmp_path, name, extra)
        started.append(c)
        return c
    yield start
    for c in started:
        c.stop(signal.SIGKILL)


def wait(pred, what, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def cluster(api, nodes=("n1", "n2"), gpus=2, model="A100"):
    for n in nodes:
        api.node(n)
        for i in range(gpus):
            api.gpu(n, i, model=model)


def mkclass(api, name, provisioner=SHARE, reclaim="Delete", mode="Immediate", params=None,
            default=False):
    obj = {"apiVersion": V, "kind": "ElasticGPUClass",
           "metadata": {"name": name}, "provisioner": provisioner, "reclaimPolicy": reclaim,
           "bindingMode": mode}
    if params:
        obj["parameters"] = params
    if default:
        obj["metadata"]["annotations"] = {"elasticgpu.io/is-default-class": "true"}
    st, out = api.call("POST", f"{G}/elasticgpuclasses", obj)
    assert st == 201, out


def mkclaim(api, name, core=None, mem=None, tflops=None, cls="share", egpu=None, ns="default"):
    req = {}
    if core is not None:
        req["elasticgpu.io/gpu-core"] = core
    if mem is not None:
        req["elasticgpu.io/gpu-memory"] = mem
    if tflops is not None:
        req["elasticgpu.io/gpu-tflops"] = tflops
    spec = {"resources": {"requests": req}}
    if cls:
        spec["elasticGPUClassName"] = cls
    if egpu:
        spec["elasticGPUName"] = egpu
    st, out = api.call("POST", f"{G}/namespaces/{ns}/elasticgpuclaims",
                       {"apiVersion": V, "kind": "ElasticGPUClaim",
                        "metadata": {"name": name, "namespace": ns}, "spec": spec})
    assert st == 201, out
    return out


def mkegpu(api, name, core, node="n1", gpu="n1-gpu0", mem=None, cls="share", reclaim=None):
    cap = {"elasticgpu.io/gpu-core": core}
    if mem:
        cap["elasticgpu.io/gpu-memory"] = mem
    spec = {"capacity": cap, "nodeName": node, "gpuShare": {"gpuName": gpu},
            "elasticGPUClassName": cls}
    if reclaim:
        spec["reclaimPolicy"] = reclaim
    st, out = api.call("POST", f"{G}/elasticgpus", {"apiVersion": V, "kind": "ElasticGPU",
                                                    "metadata": {"name": name}, "spec": spec})
    assert st == 201, out


def claim(api, name, ns="default"):
    st, out = api.call("GET", f"{G}/namespaces/{ns}/elasticgpuclaims/{name}")
    return out if st == 200 else None


def egpu(api, name):
    st, out = api.call("GET", f"{G}/elasticgpus/{name}")
    return out if st == 200 else None


def egpus(api):
    st, out = api.call("GET", f"{G}/elasticgpus")
    assert st == 200
    return out["items"]


def phase(obj):
    return (obj or {}).get("status", {}).get("phase")


def cond(obj):
    for c in (obj or {}).get("status", {}).get("conditions", []):
        if c["type"] == "Bound":
            return c
    return None


def reasons(api, name, ns="default", want=()):
    """The reasons of the events about name, once they include want (an
    event is posted just after the write it tells of)."""
    def get():
        st, out = api.call("GET", f"/api/v1/namespaces/{ns}/events")
        assert st == 200
        return [e["reason"] for e in out["items"] if e["involvedObject"]["name"] == name]
    wait(lambda: set(want) <= set(get()), f"events {want} about {name}")
    return get()


def wait_phase(api, get, name, want, timeout=30):
    return wait(lambda: (o := get(api, name)) and phase(o) == want and o,
                f"{name} {want}: now {phase(get(api, name))}", timeout)


def delete_claim(api, name, ns="default"):
    st, out = api.call("DELETE", f"{G}/namespaces/{ns}/elasticgpuclaims/{name}")
    assert st == 200, out


CONTROLLER_ROLE = "/apis/rbac.authorization.k8s.io/v1/clusterroles/elastic-gpu-controller"
CONTROLLER_SA = ("system:serviceaccount:elastic-gpu-system:egpu-controller",
                 ["system:serviceaccounts", "system:serviceaccounts:elastic-gpu-system",
                  "system:authenticated"])


def may(api, resource, verb):
    """Whether egpu-controller's ServiceAccount may verb resource ("elasticgpus/status")
    of elasticgpu.io now, by a SubjectAccessReview (the API server's own authorizer)."""
    res, _, sub = resource.partition("/")
    st, out = api.call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": CONTROLLER_SA[0], "groups": CONTROLLER_SA[1],
                 "resourceAttributes": {"group": "elasticgpu.io", "resource": res,
                                        "subresource": sub, "verb": verb, "name": "x",
                                        "namespace": "default"}}})
    assert st == 201, out
    return bool(out["status"].get("allowed"))


@pytest.fixture
def revoke(api):
    """revoke((resource, verb), ...): takes those rights away from egpu-controller's
    ClusterRole (deploy/controller/rbac.yaml) on the real control plane, until the API
    server's authorizer refuses them (403), so a write of the controller is refused as
    any real API server refuses it after a bad RBAC change; revoke.restore() gives them
    back (so does the end of the test)."""
    saved = []

    def put_rules(rules):
        def put():
            st, role = api.call("GET", CONTROLLER_ROLE)
            assert st == 200, role
            role["rules"] = rules
            st, out = api.call("PUT", CONTROLLER_ROLE, role)
            assert st in (200, 409), out
            return st == 200
        wait(put, "the ClusterRole written")

    def take(*rights):
        st, role = api.call("GET", CONTROLLER_ROLE)
        assert st == 200, role
        assert not saved, "revoke once per test"
        saved.append((role["rules"], rights))
        rules = []
        for rule in role["rules"]:
            for res in rule["resources"]:
                verbs = [v for v in rule["verbs"] if (res, v) not in rights]
                if verbs:
                    rules.append({**rule, "resources": [res], "verbs": verbs})
        put_rules(rules)
        wait(lambda: not any(may(api, r, v) for r, v in rights), f"{rights} refused")

    def restore():
        if saved:
            rules, rights = saved.pop()
            put_rules(rules)
            wait(lambda: all(may(api, r, v) for r, v in rights), f"{rights} allowed again")
    take.restore = restore
    yield take
    restore()


def refused_writes(api, resource):
    """The controller's writes of resource ("elasticgpus/status") the real API server
    answered 403 since the test began (its audit log)."""
    res, _, sub = resource.partition("/")
    return [e for e in audit_since(api) if e["user"]["username"] == CONTROLLER_SA[0]
            and (e.get("responseStatus") or {}).get("code") == 403
            and (e.get("objectRef") or {}).get("resource") == res
            and (e["objectRef"].get("subresource") or "") == sub]


def posts_of_egpus(api):
    """The ElasticGPU creations the API server accepted (201) since the test began. A POST
    answered 409 made nothing: the controller sends one when an ElasticGPU it made before a
    crash is not in its cache yet, and takes the stored one (claim.c). On the real control
    plane, from its audit log (from where the `api` fixture found it); on the test API
    server, from its request log."""
    if api.real:
        return [e for e in audit_since(api) if e.get("verb") == "create"
                and (e.get("objectRef") or {}).get("apiGroup") == "elasticgpu.io"
                and e["objectRef"].get("resource") == "elasticgpus"
                and not e["objectRef"].get("subresource")
                and (e.get("responseStatus") or {}).get("code") == 201]
    _, reqs = api.control("requests", method="GET")
    return [r for r in reqs if r["method"] == "POST" and r["path"] == f"{G}/elasticgpus"
            and r.get("code") == 201]


def audit_since(api):
    """The real control plane's audit events (ResponseComplete) since api was made (the
    kube_api fixture makes one per test, after emptying the cluster)."""
    log = api.cluster.audit_log
    start = getattr(api, "audit_start", None)
    if start is None:
        raise AssertionError("audit_since: api.audit_start not set (the `api` fixture sets it)")
    out = []
    with open(log, "rb") as f:
        f.seek(start)
        for line in f.read().splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("stage") == "ResponseComplete":
                out.append(ev)
    return out


def test_immediate_provision_bind_then_delete(api, ctl):
    """An Immediate claim gets an ElasticGPU egpu-<claim uid> provisioned on one of
    the cards and bound both ways (claimRef, then the claim's status, finalizer and
    condition), with its events and metrics; a second claim binpacks onto the same
    card; deleting a claim no pod uses releases and deletes its ElasticGPU
    (reclaimPolicy Delete). Two ElasticGPUs created, each once."""
    cluster(api)
    mkclass(api, "share")
    c = ctl()
    uid = mkclaim(api, "c1", core=30, mem=4096)["metadata"]["uid"]
    cl = wait_phase(api, claim, "c1", "Bound")
    name = f"egpu-{uid}"
    assert cl["status"]["elasticGPUName"] == name
    assert cl["status"]["capacity"] == {"elasticgpu.io/gpu-core": 30,
                                        "elasticgpu.io/gpu-memory": 4096}
    assert cl["metadata"]["finalizers"] == ["elasticgpu.io/claim-protection"]
    assert cond(cl)["status"] == "True" and cond(cl)["reason"] == "Bound"
    e = egpu(api, name)
    assert phase(e) == "Bound"
    assert e["spec"]["claimRef"] == {"namespace": "default", "name": "c1", "uid": uid}
    assert e["spec"]["capacity"] == {"elasticgpu.io/gpu-core": 30,
                                     "elasticgpu.io/gpu-memory": 4096}
    assert e["spec"]["gpuShare"]["gpuName"] in {"n1-gpu0", "n1-gpu1", "n2-gpu0", "n2-gpu1"}
    assert e["spec"]["nodeName"] == e["spec"]["gpuShare"]["gpuName"][:2]
    assert e["spec"]["reclaimPolicy"] == "Delete"
    assert e["metadata"]["annotations"]["elasticgpu.io/provisioned-by"] == SHARE
    reasons(api, "c1", want=["Bound"])
    reasons(api, name, want=["Provisioned", "Bound"])
    # A second claim binpacks onto the same card (30 + 50 <= 100).
    mkclaim(api, "c2", core=50)
    cl2 = wait_phase(api, claim, "c2", "Bound")
    e2 = egpu(api, cl2["status"]["elasticGPUName"])
    assert e2["spec"]["gpuShare"]["gpuName"] == e["spec"]["gpuShare"]["gpuName"]
    wait(lambda: c.metric("egpu_controller_claims", '{phase="Bound"}') == 2, "claims metric")
    assert c.metric("egpu_controller_elasticgpus", '{phase="Bound"}') == 2
    # Delete: no pod uses it, the finalizer goes, the ElasticGPU is
    # Released and then deleted (reclaimPolicy Delete).
    delete_claim(api, "c1")
    wait(lambda: claim(api, "c1") is None, "claim c1 gone")
    wait(lambda: egpu(api, name) is None, "ElasticGPU deleted")
    reasons(api, name, want=["Released", "Deleted"])
    assert len(posts_of_egpus(api)) == 2
    assert c.stop() == 0


def test_retain_keeps_released_and_whole_cards(api, ctl):
    """The physical provisioner gives a 200% claim two whole cards of one node; a
    claim for more cards than are left fails with a condition naming the lack; under
    reclaimPolicy Retain the deleted claim's ElasticGPU stays Released and keeps its
    cards."""
    cluster(api, nodes=("n1",), gpus=2)
    mkclass(api, "whole", provisioner=PHYS, reclaim="Retain")
    ctl()
    uid = mkclaim(api, "w", core=200, cls="whole")["metadata"]["uid"]
    wait_phase(api, claim, "w", "Bound")
    e = egpu(api, f"egpu-{uid}")
    assert e["spec"]["physicalGPU"]["gpuNames"] == ["n1-gpu0", "n1-gpu1"]
    assert "gpuShare" not in e["spec"]
    # No card left: a third whole card cannot be provisioned.
    mkclaim(api, "more", core=100, cls="whole")
    c = wait(lambda: (c := cond(claim(api, "more"))) and c["reason"] == "ProvisioningFailed" and c,
             "ProvisioningFailed")
    assert c["message"] == "no node has 1 whole free card(s) among the 2 cards class whole may use"
    assert phase(claim(api, "more")) == "Pending"
    delete_claim(api, "w")
    e = wait_phase(api, egpu, f"egpu-{uid}", "Released")
    time.sleep(1.5)  # a resync later, still kept
    assert phase(egpu(api, f"egpu-{uid}")) == "Released"
    # The released cards stay reserved: "more" still does not fit.
    assert phase(claim(api, "more")) == "Pending"


def test_wait_for_first_consumer_stays_pending(api, ctl):
    """A WaitForFirstConsumer claim no scheduler has placed stays Pending, with a
    condition and an event saying why, and nothing is provisioned."""
    cluster(api)
    mkclass(api, "late", mode="WaitForFirstConsumer")
    ctl()
    mkclaim(api, "c", core=10, cls="late")
    c = wait(lambda: cond(claim(api, "c")), "condition")
    assert c["status"] == "False" and c["reason"] == "WaitForFirstConsumer"
    assert "waiting for the first pod that uses this claim" in c["message"]
    time.sleep(1.5)
    assert phase(claim(api, "c")) == "Pending"
    assert egpus(api) == []
    reasons(api, "c", want=["WaitForFirstConsumer"])


def test_named_and_best_fit_binding(api, ctl):
    """A claim without a class takes the default class and binds the smallest
    Available ElasticGPU that holds it; a claim naming one binds that one; naming a
    missing or a taken one leaves the claim Pending with the reason. Nothing is
    provisioned."""
    cluster(api, nodes=("n1",))
    mkclass(api, "share", default=True)
    mkegpu(api, "small", 20)
    mkegpu(api, "big", 60, gpu="n1-gpu1")
    ctl()
    wait_phase(api, egpu, "small", "Available")
    wait_phase(api, egpu, "big", "Available")
    # No name, default class: the best fit is the smallest that holds 20.
    mkclaim(api, "a", core=20, cls=None)
    assert wait_phase(api, claim, "a", "Bound")["status"]["elasticGPUName"] == "small"
    # Named: binds to that one.
    mkclaim(api, "b", core=10, egpu="big")
    assert wait_phase(api, claim, "b", "Bound")["status"]["elasticGPUName"] == "big"
    assert egpu(api, "big")["spec"]["claimRef"]["name"] == "b"
    # Named but missing, or taken: Pending with the reason.
    mkclaim(api, "c", core=10, egpu="nope")
    c = wait(lambda: cond(claim(api, "c")), "condition")
    assert (c["reason"], c["message"]) == ("ElasticGPUNotFound", "ElasticGPU nope not found")
    mkclaim(api, "d", core=10, egpu="small")
    c = wait(lambda: cond(claim(api, "d")), "condition")
    assert (c["reason"], c["message"]) == ("ElasticGPUDoesNotFit",
                                           "ElasticGPU small does not fit the claim: taken")
    assert len(posts_of_egpus(api)) == 2  # only the test's own


def test_finalizer_holds_claim_while_pod_runs(api, ctl):
    """The protection finalizer holds a deleted claim while a pod of its namespace
    that has not finished names it (the ElasticGPU stays Bound); the pod's
    Succeeded lets the claim go and its ElasticGPU be reclaimed."""
    cluster(api, nodes=("n1",))
    mkclass(api, "share")
    ctl()
    mkclaim(api, "c", core=30)
    name = wait_phase(api, claim, "c", "Bound")["status"]["elasticGPUName"]
    st, pod = api.call("POST", "/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "annotations": {"egpuc.elasticgpu.io/main": "c"}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]}})
    assert st == 201, pod
    delete_claim(api, "c")
    time.sleep(2)
    cl = claim(api, "c")
    assert cl is not None and cl["metadata"].get("deletionTimestamp")
    assert cl["metadata"]["finalizers"] == ["elasticgpu.io/claim-protection"]
    assert phase(egpu(api, name)) == "Bound"
    # The pod finishes: the claim goes, its ElasticGPU is reclaimed.
    pod = api.get_pod("p")
    pod["status"]["phase"] = "Succeeded"
    st, out = api.call("PUT", "/api/v1/namespaces/default/pods/p/status", pod)
    assert st == 200, out
    wait(lambda: claim(api, "c") is None, "claim gone")
    wait(lambda: egpu(api, name) is None, "ElasticGPU deleted")


def test_finalizer_asks_the_api_server_before_letting_go(fault_api, ctl):
    """The controller's pod watch lags (here: cut, and every new pod watch or
    cluster-wide list fails): a pod created just before the claim's
    deletion is not in its cache. It must ask the API server before it
    removes the finalizer, or the claim is deleted under that pod.

    On the test API server (fault_api): it needs two faults the real one cannot
    be made to show, every watch dropped and the cluster-wide pod list answering
    500 while a namespace's list still works."""
    api = fault_api
    cluster(api, nodes=("n1",))
    mkclass(api, "share")
    ctl()
    mkclaim(api, "c", core=30)
    wait_phase(api, claim, "c", "Bound")
    api.control("fault", {"method": "GET", "path": "^/api/v1/pods$", "code": 500,
                          "count": -1})
    api.control("drop-watches")
    st, pod = api.call("POST", "/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "annotations": {"egpuc.elasticgpu.io/main": "c"}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]}})
    assert st == 201, pod
    delete_claim(api, "c")
    time.sleep(2)
    cl = claim(api, "c")
    assert cl is not None and cl["metadata"]["finalizers"] == ["elasticgpu.io/claim-protection"]
    # The watch comes back and the pod goes: so does the claim.
    api.control("fault", None, "DELETE")
    st, out = api.call("DELETE", "/api/v1/namespaces/default/pods/p")
    assert st == 200, out
    wait(lambda: claim(api, "c") is None, "claim gone")


def test_lost_and_failed(api, ctl):
    """A Bound claim whose ElasticGPU is deleted by hand becomes Lost (condition,
    event); an ElasticGPU whose node has neither a Node nor GPU objects becomes
    Failed (NodeLost), not before the Node goes, and Available again when the node
    comes back."""
    cluster(api, nodes=("n1", "n2"), gpus=1)
    mkclass(api, "share", reclaim="Retain")
    mkegpu(api, "on-n2", 50, node="n2", gpu="n2-gpu0", reclaim="Retain")
    ctl()
    mkclaim(api, "c", core=30, egpu="on-n2")
    wait_phase(api, claim, "c", "Bound")
    # Deleted by hand: the claim is Lost.
    st, _ = api.call("DELETE", f"{G}/elasticgpus/on-n2")
    assert st == 200
    cl = wait_phase(api, claim, "c", "Lost")
    assert cond(cl)["reason"] == "ElasticGPULost"
    assert cond(cl)["message"] == "ElasticGPU on-n2 was deleted"
    reasons(api, "c", want=["ClaimLost"])
    # A node that leaves (Node and GPU objects gone) fails its ElasticGPUs.
    mkegpu(api, "orphan", 40, node="n2", gpu="n2-gpu0")
    wait_phase(api, egpu, "orphan", "Available")
    assert api.call("DELETE", f"{G}/gpus/n2-gpu0")[0] == 200
    time.sleep(1)
    assert phase(egpu(api, "orphan")) == "Available"  # the Node is still there
    assert api.call("DELETE", "/api/v1/nodes/n2")[0] == 200
    e = wait_phase(api, egpu, "orphan", "Failed")
    assert e["status"]["reason"] == "NodeLost"
    assert e["status"]["message"] == "node n2 has no Node object and no GPU objects"
    # It comes back: the resync repairs the phase.
    api.node("n2")
    wait_phase(api, egpu, "orphan", "Available")


@pytest.mark.parametrize("refused", ["claim-status", "egpu-status"])
def test_restart_between_steps(api, ctl, revoke, refused):
    """The API server refuses the binding's next write (claim status, or the
    ElasticGPU's phase right after its creation: 403, the right taken away from
    the controller's ClusterRole); the controller is killed with the binding
    half done, restarted with the right given back, and finishes it with the
    ElasticGPU it created: nothing lost, nothing done twice."""
    cluster(api, nodes=("n1",))
    mkclass(api, "share")
    right = ("elasticgpuclaims/status" if refused == "claim-status" else "elasticgpus/status",
             "update")
    revoke(right)
    c = ctl()
    uid = mkclaim(api, "c", core=40, mem=1024)["metadata"]["uid"]
    name = f"egpu-{uid}"
    e = wait(lambda: egpu(api, name), "ElasticGPU created")
    if refused == "claim-status":
        wait_phase(api, egpu, name, "Bound")
    wait(lambda: len(refused_writes(api, right[0])) >= 2, "a few refused retries")
    c.stop(signal.SIGKILL)
    assert phase(claim(api, "c")) in (None, "Pending")
    revoke.restore()
    ctl("c2")
    cl = wait_phase(api, claim, "c", "Bound")
    assert cl["status"]["elasticGPUName"] == name
    e = egpu(api, name)
    assert phase(e) == "Bound" and e["spec"]["claimRef"]["uid"] == uid
    assert [x["metadata"]["name"] for x in egpus(api)] == [name]
    assert len(posts_of_egpus(api)) == 1  # created once, before the kill


def tflops_cluster(api):
    """n1: two V100 (125 TFLOPS), n2: one A100 (312), and class fast with
    both peaks."""
    cluster(api, nodes=("n1",), model="V100")
    cluster(api, nodes=("n2",), gpus=1, model="A100")
    mkclass(api, "fast", params={"tflops.V100": "125", "tflops.A100": "312"})


def tflops_bound(api, name, gpus, model, pct):
    """Claim name is Bound to an ElasticGPU on one of gpus whose status gives
    the card, its model and the TFLOPS' percent (docs/claims.md); returns it."""
    cl = wait_phase(api, claim, name, "Bound")
    e = wait_phase(api, egpu, cl["status"]["elasticGPUName"], "Bound")
    assert e["spec"]["gpuShare"]["gpuName"] in gpus
    assert e["status"]["gpuName"] == e["spec"]["gpuShare"]["gpuName"], e["status"]
    assert e["status"]["model"] == model, e["status"]
    assert e["status"]["corePercent"] == pct, e["status"]
    assert cl["status"]["capacity"] == e["spec"]["capacity"]
    return e


@pytest.mark.parametrize("restart", [False, True])
def test_tflops_claim_provisioned_records_card_and_percent(api, ctl, revoke, restart):
    """A provisioned ElasticGPU of a gpu-tflops claim is Pending until its
    binding writes Bound: that write gives status.gpuName, model and
    corePercent, and the claim's capacity is that percent. With restart the
    API server refuses the Bound write (403: the right taken away from the
    controller's ClusterRole), the controller is killed with the ElasticGPU
    Pending, and the next one, the right given back, finishes the binding the
    same way."""
    tflops_cluster(api)
    if restart:
        revoke(("elasticgpus/status", "update"))
    c = ctl()
    uid = mkclaim(api, "v", tflops=100, cls="fast")["metadata"]["uid"]
    if restart:
        e = wait(lambda: egpu(api, f"egpu-{uid}"), "ElasticGPU created")
        assert phase(e) in (None, "Pending")
        wait(lambda: len(refused_writes(api, "elasticgpus/status")) >= 2, "refused retries")
        c.stop(signal.SIGKILL)
        assert phase(claim(api, "v")) in (None, "Pending")
        revoke.restore()
        ctl("c2")
    # 100 of a 125 V100 is 80% (the model needing the most percent first).
    e = tflops_bound(api, "v", {"n1-gpu0", "n1-gpu1"}, "V100", 80)
    assert e["metadata"]["name"] == f"egpu-{uid}"
    assert e["spec"]["capacity"] == {"elasticgpu.io/gpu-core": 80}
    # 200 needs 160% of a V100: the A100, 200/312 rounded up to 65%.
    mkclaim(api, "a", tflops=200, cls="fast")
    tflops_bound(api, "a", {"n2-gpu0"}, "A100", 65)
    assert claim(api, "a")["status"]["capacity"] == {"elasticgpu.io/gpu-core": 65}
    assert len(posts_of_egpus(api)) == 2


def test_tflops_claim_on_a_hand_made_elasticgpu(api, ctl):
    """An Available ElasticGPU made by hand: the TFLOPS claim binding to it
    (named, or the best fit) gets the card, model and percent too; the claim's
    capacity is the ElasticGPU's, as a PVC's is its PV's."""
    tflops_cluster(api)
    mkegpu(api, "hand", 90, gpu="n1-gpu1", cls="fast")
    mkegpu(api, "big", 70, node="n2", gpu="n2-gpu0", cls="fast")
    ctl()
    wait_phase(api, egpu, "hand", "Available")
    wait_phase(api, egpu, "big", "Available")
    mkclaim(api, "named", tflops=100, cls="fast", egpu="hand")
    tflops_bound(api, "named", {"n1-gpu1"}, "V100", 80)
    assert claim(api, "named")["status"]["capacity"] == {"elasticgpu.io/gpu-core": 90}
    mkclaim(api, "any", tflops=200, cls="fast")
    tflops_bound(api, "any", {"n2-gpu0"}, "A100", 65)
    assert len(posts_of_egpus(api)) == 2  # only the test's own


def test_only_the_leader_reconciles(api, ctl):
    """Two controllers with the same ServiceAccount: only the holder of the Lease
    elastic-gpu-controller (the only one its Role lets it read and renew) in its
    namespace reconciles and posts events; killing it hands the Lease and the work
    over to the other."""
    cluster(api, nodes=("n1",))
    mkclass(api, "share")
    lease = ("--leader-elect", "true", "--lease-duration", "3", "--renew-deadline", "2",
             "--retry-period", "1")
    a = ctl("a", lease)
    wait(lambda: a.metric("egpu_controller_leader") == 1, "a leads")
    ident = re.search(r"started leading identity=(\S+)", a.log.read_text()).group(1)
    holder = lambda: api.call("GET", "/apis/coordination.k8s.io/v1/namespaces/"  # noqa: E731
                              "elastic-gpu-system/leases/elastic-gpu-controller")[1]
    assert holder()["spec"]["holderIdentity"] == ident
    b = ctl("b", lease)
    mkclaim(api, "x", core=10)
    wait_phase(api, claim, "x", "Bound")
    time.sleep(1)
    assert b.metric("egpu_controller_leader") == 0
    assert "started leading" not in b.log.read_text()
    wait(lambda: "event kind=ElasticGPUClaim object=default/x reason=Bound" in a.log.read_text(),
         "a's event")
    a.stop(signal.SIGKILL)
    wait(lambda: b.metric("egpu_controller_leader") == 1, "b takes over", timeout=30)
    assert holder()["spec"]["holderIdentity"] != ident
    mkclaim(api, "y", core=10)
    wait_phase(api, claim, "y", "Bound")
    wait(lambda: "event kind=ElasticGPUClaim object=default/y reason=Bound" in b.log.read_text(),
         "b's event")


SEL_NODE = "elasticgpu.io/selected-node"
SEL_GPUS = "elasticgpu.io/selected-gpus"


def select(api, name, node, gpus, ns="default"):
    """Annotate the claim as the scheduler does when it places its first pod."""
    st, out = api.call("PATCH", f"{G}/namespaces/{ns}/elasticgpuclaims/{name}",
                       {"metadata": {"annotations": {SEL_NODE: node, SEL_GPUS: gpus}}},
                       ctype="application/merge-patch+json")
    assert st == 200, out


def annotations(obj):
    return (obj or {}).get("metadata", {}).get("annotations") or {}


def test_wait_for_first_consumer_provisions_where_selected(api, ctl):
    """A WaitForFirstConsumer claim is provisioned exactly on the node and cards the
    scheduler's selected-node and selected-gpus annotations name (a share on one
    card, or whole cards for the physical provisioner), and bound."""
    cluster(api)
    mkclass(api, "late", mode="WaitForFirstConsumer")
    mkclass(api, "late-whole", provisioner=PHYS, mode="WaitForFirstConsumer")
    ctl()
    uid = mkclaim(api, "c", core=30, mem=2048, cls="late")["metadata"]["uid"]
    wait(lambda: (k := cond(claim(api, "c"))) and k["reason"] == "WaitForFirstConsumer",
         "waiting")
    # The scheduler placed the first pod on n2's second card: provisioned
    # exactly there (the placement core alone would have chosen n1-gpu0 or
    # n2-gpu0 first under binpack's ties), and bound.
    select(api, "c", "n2", "n2-gpu1")
    cl = wait_phase(api, claim, "c", "Bound")
    name = f"egpu-{uid}"
    assert cl["status"]["elasticGPUName"] == name
    e = egpu(api, name)
    assert phase(e) == "Bound"
    assert e["spec"]["nodeName"] == "n2"
    assert e["spec"]["gpuShare"] == {"gpuName": "n2-gpu1"}
    assert e["spec"]["capacity"] == {"elasticgpu.io/gpu-core": 30,
                                     "elasticgpu.io/gpu-memory": 2048}
    assert e["spec"]["claimRef"]["uid"] == uid
    assert e["metadata"]["annotations"]["elasticgpu.io/provisioned-by"] == SHARE
    reasons(api, name, want=["Provisioned", "Bound"])
    # Whole cards: the physical provisioner takes the selected cards.
    uid2 = mkclaim(api, "w", core=200, cls="late-whole")["metadata"]["uid"]
    select(api, "w", "n1", "n1-gpu1,n1-gpu0")
    wait_phase(api, claim, "w", "Bound")
    e = egpu(api, f"egpu-{uid2}")
    assert e["spec"]["nodeName"] == "n1"
    assert e["spec"]["physicalGPU"] == {"gpuNames": ["n1-gpu1", "n1-gpu0"]}
    assert e["spec"]["capacity"] == {"elasticgpu.io/gpu-core": 200}
    assert len(posts_of_egpus(api)) == 2


def test_wait_for_first_consumer_refuses_a_bad_selection(api, ctl):
    """A selection the class forbids (a node its nodeSelector excludes, a card of
    such a node or one that does not exist, more cards than the claim asks) or a
    card without room is refused: a SelectionRejected condition and event, the
    annotations removed, nothing provisioned; the next good selection binds."""
    cluster(api, nodes=("n1",), gpus=2)
    api.node("n2")
    st, node = api.call("GET", "/api/v1/nodes/n2")
    assert st == 200
    for i in range(2):
        api.gpu("n2", i)
    # Only nodes labelled pool=gpu, and only n1 is.
    st, out = api.call("PATCH", "/api/v1/nodes/n1", {"metadata": {"labels": {"pool": "gpu"}}},
                       ctype="application/merge-patch+json")
    assert st == 200, out
    mkclass(api, "late", mode="WaitForFirstConsumer", params={"nodeSelector": "pool=gpu"})
    mkegpu(api, "held", 80, node="n1", gpu="n1-gpu0", cls="other")
    ctl()
    wait_phase(api, egpu, "held", "Available")
    mkclaim(api, "c", core=30, cls="late")
    wait(lambda: cond(claim(api, "c")), "condition")

    def refused(want):
        def get():
            cl = claim(api, "c")
            k = cond(cl)
            if k and k["reason"] == "SelectionRejected" and want in k["message"] and \
                    SEL_NODE not in annotations(cl) and SEL_GPUS not in annotations(cl):
                return k
        try:
            return wait(get, f"SelectionRejected: {want}")
        except AssertionError as e:
            raise AssertionError(f"{e}; the claim: {claim(api, 'c')}") from None

    # A node the class's nodeSelector excludes.
    select(api, "c", "n2", "n2-gpu0")
    k = refused("node n2 is not one class late may use")
    assert k["status"] == "False"
    assert k["message"] == (
        "the scheduler's selection (node n2, GPUs n2-gpu0) was refused: node n2 is not one "
        "class late may use (no Node object, not matched by its nodeSelector, or no healthy "
        "card of a model it allows); it is removed for the scheduler to choose again")
    assert phase(claim(api, "c")) == "Pending"
    reasons(api, "c", want=["SelectionRejected"])
    # A card that another ElasticGPU already fills (80 + 30 > 100).
    select(api, "c", "n1", "n1-gpu0")
    k = refused("no room on the selected node n1: card GPU-n1-0 has 200 milli-GPU")
    # A card of a node the class excludes, one that does not exist, and two
    # cards for a share of one.
    select(api, "c", "n1", "n2-gpu1")
    refused("GPU n2-gpu1 is not a card class late may use")
    select(api, "c", "n1", "n1-gpu7")
    refused("GPU n1-gpu7 is not a card class late may use")
    select(api, "c", "n1", "n1-gpu1,n1-gpu0")
    refused("elasticgpu.io/selected-gpus names more than the 1 card(s) the claim asks")
    assert egpus(api) == [egpu(api, "held")]
    assert posts_of_egpus(api) == posts_of_egpus(api)[:1]  # only the test's own
    # The scheduler chooses again, a card with room: provisioned there.
    select(api, "c", "n1", "n1-gpu1")
    cl = wait_phase(api, claim, "c", "Bound")
    assert egpu(api, cl["status"]["elasticGPUName"])["spec"]["gpuShare"] == {
        "gpuName": "n1-gpu1"}


def test_wait_for_first_consumer_restart_between_selection_and_binding(api, ctl, revoke):
    """The controller is SIGKILLed after it created the ElasticGPU for a
    selection and before the binding's writes went through (the API server
    refuses them: 403, the update of ElasticGPUs and of their status taken
    away from its ClusterRole); restarted, the rights given back, it binds
    that ElasticGPU: one, created once."""
    cluster(api, nodes=("n1",))
    mkclass(api, "late", mode="WaitForFirstConsumer")
    revoke(("elasticgpus", "update"), ("elasticgpus/status", "update"))
    c = ctl()
    uid = mkclaim(api, "c", core=40, cls="late")["metadata"]["uid"]
    name = f"egpu-{uid}"
    wait(lambda: cond(claim(api, "c")), "condition")
    select(api, "c", "n1", "n1-gpu1")
    wait(lambda: egpu(api, name), "ElasticGPU created")
    wait(lambda: len(refused_writes(api, "elasticgpus")) + len(refused_writes(
        api, "elasticgpus/status")) >= 2, "a few refused retries")
    c.stop(signal.SIGKILL)
    assert phase(claim(api, "c")) == "Pending"
    revoke.restore()
    ctl("c2")
    cl = wait_phase(api, claim, "c", "Bound")
    assert cl["status"]["elasticGPUName"] == name
    e = egpu(api, name)
    assert phase(e) == "Bound" and e["spec"]["claimRef"]["uid"] == uid
    assert e["spec"]["gpuShare"] == {"gpuName": "n1-gpu1"}
    assert [x["metadata"]["name"] for x in egpus(api)] == [name]
    assert len(posts_of_egpus(api)) == 1  # created once, before the kill


def test_retained_elasticgpu_freed_by_an_administrator_binds_again(api, ctl):
    """A Released ElasticGPU under Retain holds its card; once an administrator
    clears its spec.claimRef it is Available and the claim waiting for room binds
    to it instead of a new one being provisioned."""
    cluster(api, nodes=("n1",), gpus=1)
    mkclass(api, "keep", reclaim="Retain")
    ctl()
    uid = mkclaim(api, "first", core=60, cls="keep")["metadata"]["uid"]
    name = f"egpu-{uid}"
    wait_phase(api, claim, "first", "Bound")
    delete_claim(api, "first")
    e = wait_phase(api, egpu, name, "Released")
    # Released under Retain holds the card: a second 60% claim cannot be
    # provisioned beside it.
    mkclaim(api, "second", core=60, cls="keep")
    wait(lambda: (k := cond(claim(api, "second"))) and k["reason"] == "ProvisioningFailed",
         "ProvisioningFailed")
    # The administrator clears spec.claimRef: Available, and the waiting
    # claim binds to it instead of a new one being made.
    def free():
        e = egpu(api, name)
        del e["spec"]["claimRef"]
        st, out = api.call("PUT", f"{G}/elasticgpus/{name}", e)
        assert st in (200, 409), out  # 409: the controller wrote it since the GET
        return st == 200
    assert phase(e) == "Released"
    wait(free, "the administrator's PUT")
    cl = wait_phase(api, claim, "second", "Bound")
    assert cl["status"]["elasticGPUName"] == name
    e = egpu(api, name)
    assert phase(e) == "Bound"
    assert e["spec"]["claimRef"]["name"] == "second"
    assert e["spec"]["claimRef"]["uid"] == claim(api, "second")["metadata"]["uid"]
    reasons(api, name, want=["Released", "Available", "Bound"])
    assert len(posts_of_egpus(api)) == 1


def test_kept_inventory_follows_every_change(api, ctl):
    """The controller keeps its placement inventory across claims and
    updates it from events (docs/claims.md, Throughput): an ElasticGPU made
    or deleted by hand, one it deleted itself, and a node that joins later
    all count at once, without a restart."""
    cluster(api, nodes=("n1",), gpus=1)
    mkclass(api, "share")
    ctl()
    mkclaim(api, "a", core=50)
    ea = wait_phase(api, claim, "a", "Bound")["status"]["elasticGPUName"]
    # An ElasticGPU made by hand takes 40 of the 50 left: 20 does not fit.
    mkegpu(api, "by-hand", 40, cls="other")
    wait_phase(api, egpu, "by-hand", "Available")
    mkclaim(api, "b", core=20)
    k = wait(lambda: (k := cond(claim(api, "b"))) and k["reason"] == "ProvisioningFailed" and k,
             "ProvisioningFailed")
    assert k["message"] == ("no card has 20% of its compute free among the 1 cards class share "
                            "may use")
    # Deleted by hand: its room is free again, and b is provisioned there.
    assert api.call("DELETE", f"{G}/elasticgpus/by-hand")[0] == 200
    assert egpu(api, wait_phase(api, claim, "b", "Bound")["status"]["elasticGPUName"])[
        "spec"]["gpuShare"] == {"gpuName": "n1-gpu0"}
    # a goes (reclaimPolicy Delete): its 50 are free for c.
    mkclaim(api, "c", core=60)
    wait(lambda: (k := cond(claim(api, "c"))) and k["reason"] == "ProvisioningFailed", "c waits")
    delete_claim(api, "a")
    wait(lambda: egpu(api, ea) is None, "a's ElasticGPU deleted")
    assert egpu(api, wait_phase(api, claim, "c", "Bound")["status"]["elasticGPUName"])[
        "spec"]["nodeName"] == "n1"
    # A node that joins later is used as soon as its GPU objects come.
    mkclaim(api, "d", core=90)
    wait(lambda: (k := cond(claim(api, "d"))) and k["reason"] == "ProvisioningFailed", "d waits")
    cluster(api, nodes=("n2",), gpus=1)
    assert egpu(api, wait_phase(api, claim, "d", "Bound")["status"]["elasticGPUName"])[
        "spec"]["gpuShare"] == {"gpuName": "n2-gpu0"}
    assert len(posts_of_egpus(api)) == 4 + 1  # a, b, c, d and the one made by hand


def test_selection_wins_over_an_available_elasticgpu_elsewhere(api, ctl):
    """A WaitForFirstConsumer claim whose first pod is placed on n2 gets an
    ElasticGPU provisioned there, not the class's Available one on n1 (the pod and
    its GPU would be on two nodes); without a selection it binds the Available
    one at once."""
    # The claim's first pod is placed on n2: an Available ElasticGPU of the
    # class on n1 would leave the pod and its GPU on two nodes.
    cluster(api)
    mkclass(api, "late", mode="WaitForFirstConsumer")
    mkegpu(api, "avail", 50, node="n1", gpu="n1-gpu0", cls="late")
    ctl()
    wait_phase(api, egpu, "avail", "Available")
    st, out = api.call("POST", f"{G}/namespaces/default/elasticgpuclaims", {
        "apiVersion": V, "kind": "ElasticGPUClaim",
        "metadata": {"name": "c", "namespace": "default",
                     "annotations": {SEL_NODE: "n2", SEL_GPUS: "n2-gpu0"}},
        "spec": {"resources": {"requests": {"elasticgpu.io/gpu-core": 30}},
                 "elasticGPUClassName": "late"}})
    assert st == 201, out
    cl = wait_phase(api, claim, "c", "Bound")
    assert cl["status"]["elasticGPUName"] == f"egpu-{out['metadata']['uid']}"
    assert egpu(api, cl["status"]["elasticGPUName"])["spec"]["gpuShare"] == {"gpuName": "n2-gpu0"}
    assert phase(egpu(api, "avail")) == "Available"
    # Without a selection, a WaitForFirstConsumer claim still binds an
    # Available one of its class at once, as before.
    mkclaim(api, "d", core=40, cls="late")
    assert wait_phase(api, claim, "d", "Bound")["status"]["elasticGPUName"] == "avail"


def mkheld_pod(api, name, node, uuids, core=100, mem=40960, ns="default", claims=None):
    """A pod the scheduler bound: spec.nodeName and elasticgpu.io/assigned, Running (its
    status written through .../status, as a kubelet does: a real API server drops the
    status of a pod it creates)."""
    ann = {"elasticgpu.io/assigned": json.dumps({
        "node": node, "containers": [{"name": "main", "core": core, "memory": mem,
                                      "gpus": list(uuids)}]})}
    for ctr, cl in (claims or {}).items():
        ann[f"egpuc.elasticgpu.io/{ctr}"] = cl
    st, pod = api.call("POST", f"/api/v1/namespaces/{ns}/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "annotations": ann},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
        "status": {"phase": "Running"}})
    assert st == 201, pod
    if phase(pod) != "Running":
        pod["status"] = {"phase": "Running"}
        st, pod = api.call("PUT", f"/api/v1/namespaces/{ns}/pods/{name}/status", pod)
        assert st == 200, pod
    return pod


def finish_pod(api, name, ns="default"):
    pod = api.get_pod(name, ns)
    pod["status"]["phase"] = "Succeeded"
    st, out = api.call("PUT", f"/api/v1/namespaces/{ns}/pods/{name}/status", pod)
    assert st == 200, out


def test_immediate_claim_avoids_cards_pods_hold(api, ctl):
    """The inventory counts what pods hold (their elasticgpu.io/assigned):
    node-a's only card is full, so the claim goes to node-b's, never to
    node-a's, where the scheduler would refuse its reservation. The class
    spreads and node-b's card holds an ElasticGPU already, so without the
    pod counted node-a's card would be the one chosen."""
    cluster(api, nodes=("node-a", "node-b"), gpus=1)
    mkclass(api, "share", params={"policy": "spread"})
    mkegpu(api, "by-hand", 10, node="node-b", gpu="node-b-gpu0")
    mkheld_pod(api, "holder", "node-a", ["GPU-node-a-0"])
    ctl()
    for i in range(3):
        mkclaim(api, f"c{i}", core=20, mem=4096)
        cl = wait_phase(api, claim, f"c{i}", "Bound")
        e = egpu(api, cl["status"]["elasticGPUName"])
        assert e["spec"]["gpuShare"]["gpuName"] == "node-b-gpu0", e["spec"]


def test_immediate_claim_waits_for_a_pod_to_finish(api, ctl):
    """No other card: the claim stays Pending with the lack of room named;
    the pod finishing frees the card and the claim binds there. A claim
    pod running inside its ElasticGPU is not counted twice."""
    cluster(api, nodes=("node-a",), gpus=1)
    mkclass(api, "share")
    ctl()
    mkclaim(api, "mine", core=50, mem=8192)
    mine = wait_phase(api, claim, "mine", "Bound")["status"]["elasticGPUName"]
    # The claim's own pod inside it (50 %), and another pod beside (50 %).
    mkheld_pod(api, "user", "node-a", ["GPU-node-a-0"], core=50, mem=8192,
               claims={"main": "mine"})
    mkheld_pod(api, "holder", "node-a", ["GPU-node-a-0"], core=50, mem=8192)
    mkclaim(api, "c", core=30, mem=4096)

    def pending_for_room():
        cl = claim(api, "c")
        return phase(cl) == "Pending" and "30% of its compute" in (cond(cl) or {}).get(
            "message", "")
    wait(pending_for_room, "claim Pending for lack of room")
    time.sleep(1.5)  # resyncs: still no room
    assert phase(claim(api, "c")) == "Pending"
    assert [e["metadata"]["name"] for e in egpus(api)] == [mine]
    # The other pod finishes: 50 % free again (the claim pod, counted
    # inside its ElasticGPU, does not take a second 50 %).
    finish_pod(api, "holder")
    cl = wait_phase(api, claim, "c", "Bound")
    assert egpu(api, cl["status"]["elasticGPUName"])["spec"]["gpuShare"]["gpuName"] == \
        "node-a-gpu0"
