"""egpu-scheduler and pods that use claims, against the real
control plane (kube_api; egpu-scheduler with its ServiceAccount's token),
driven as kube-scheduler drives an extender: filter over every node,
prioritize over those that passed, bind to the best.

A pod whose container uses a bound claim (egpuc.elasticgpu.io/<container>,
its requests already set to the claim's by the webhook) goes exactly to its
ElasticGPU's node and card, although other nodes have room, and is counted
inside the ElasticGPU, not beside it; other pods never land in the reserved
slice; a second pod of the claim is refused naming the first. A pod of a
WaitForFirstConsumer claim goes to a node its class allows, and the claim is
annotated with that node and card before the pod is bound; the ElasticGPU
the controller then provisions there takes the pod inside. An Immediate
claim not bound yet is refused until it is."""
import json
import re
import time

import pytest

from test_scheduler import cluster, sched  # noqa: F401 (fixtures)


@pytest.fixture
def api(kube_api):
    """The real control plane (conftest.py's kube_api): every test here; sched starts
    egpu-scheduler with its ServiceAccount's token."""
    return kube_api

G = "/apis/elasticgpu.io/v1alpha1"
V = "elasticgpu.io/v1alpha1"
NODES = ["gpu-1", "gpu-2"]


def node(api, name, pool):
    st, out = api.call("POST", "/api/v1/nodes", {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"pool": pool}},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi"}}})
    assert st == 201, out


def mkclass(api, name, mode, params=None):
    obj = {"apiVersion": V, "kind": "ElasticGPUClass", "metadata": {"name": name},
           "provisioner": "gpushare.provisioner.elasticgpu.io", "reclaimPolicy": "Delete",
           "bindingMode": mode}
    if params:
        obj["parameters"] = params
    st, out = api.call("POST", f"{G}/elasticgpuclasses", obj)
    assert st == 201, out


def mkclaim(api, name, core, mem, cls):
    st, out = api.call("POST", f"{G}/namespaces/default/elasticgpuclaims", {
        "apiVersion": V, "kind": "ElasticGPUClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"resources": {"requests": {"elasticgpu.io/gpu-core": core,
                                            "elasticgpu.io/gpu-memory": mem}},
                 "elasticGPUClassName": cls}})
    assert st == 201, out
    return out


def claim(api, name):
    st, out = api.call("GET", f"{G}/namespaces/default/elasticgpuclaims/{name}")
    assert st == 200, out
    return out


def mkegpu(api, name, node, gpu, core, mem, cl, cls):
    """An ElasticGPU bound to claim cl (as egpu-controller binds): claimRef,
    phase Bound, then the claim's status."""
    st, out = api.call("POST", f"{G}/elasticgpus", {
        "apiVersion": V, "kind": "ElasticGPU", "metadata": {"name": name},
        "spec": {"capacity": {"elasticgpu.io/gpu-core": core, "elasticgpu.io/gpu-memory": mem},
                 "nodeName": node, "gpuShare": {"gpuName": gpu}, "elasticGPUClassName": cls,
                 "claimRef": {"namespace": "default", "name": cl["metadata"]["name"],
                              "uid": cl["metadata"]["uid"]}}})
    assert st == 201, out
    st, out = api.call("PATCH", f"{G}/elasticgpus/{name}/status", {"status": {"phase": "Bound"}},
                       ctype="application/merge-patch+json")
    assert st == 200, out
    st, out = api.call("PATCH", f"{G}/namespaces/default/elasticgpuclaims/"
                       f"{cl['metadata']['name']}/status",
                       {"status": {"phase": "Bound", "elasticGPUName": name}},
                       ctype="application/merge-patch+json")
    assert st == 200, out


def pod(api, name, core, mem=0, uses=None):
    """A pod of one container "main" asking core and mem; uses: the claim
    it uses (the webhook has set its requests to the claim's)."""
    return api.pod(name, core, mem, annotations={"egpuc.elasticgpu.io/main": uses} if uses
                   else None)


# Filter's refusal of a node where a pod bound before is not marked
# allocated in the scheduler's cache yet (DESIGN.md 2.3).
NOT_YET_ALLOCATED = re.compile(r"^pod \S+ placed on node \S+ is not yet allocated .*"
                               r"\(retry shortly\)$")


def schedule(s, p, nodes=NODES):
    """One kube-scheduler cycle: filter, prioritize, bind to the best.
    Returns (node bound or None, filter's FailedNodes, bind's Error).

    The scheduler's cache follows the API server through its watch, so it
    may not have seen the test's last writes yet; each verb is asked again
    (as kube-scheduler retries) while it refuses for that reason alone, up
    to 15 s: filter while a node fails because a pod the test bound and
    started is not allocated in the cache yet, bind while the pod just
    created is not in the cache. Any other answer is the answer."""
    deadline = time.monotonic() + 15
    while True:
        st, out = s.post("filter", {"Pod": p, "Nodes": None, "NodeNames": nodes})
        assert st == 200, out
        passed, failed = out["NodeNames"] or [], out["FailedNodes"] or {}
        if (not any(NOT_YET_ALLOCATED.match(why) for why in failed.values())
                or time.monotonic() > deadline):
            break
        time.sleep(0.05)
    if not passed:
        return None, failed, None
    st, scores = s.post("prioritize", {"Pod": p, "Nodes": None, "NodeNames": passed})
    assert st == 200, scores
    best = max(passed, key=lambda n: next((h["Score"] for h in scores if h["Host"] == n), -1))
    body = {"PodName": p["metadata"]["name"],
            "PodNamespace": p["metadata"].get("namespace", "default"),
            "PodUID": p["metadata"]["uid"], "Node": best}
    unseen = f"pod {body['PodNamespace']}/{body['PodName']} is not in the elastic-gpu cache"
    deadline = time.monotonic() + 15
    while True:
        st, out = s.post("bind", body)
        if st != 200 or out.get("Error") != unseen or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert st == 200, out
    return (best if out["Error"] == "" else None), failed, out["Error"]


def started(api, name):
    """What egpu-agent writes once the kubelet allocated the pod's devices."""
    st, out = api.call("PATCH", f"/api/v1/namespaces/default/pods/{name}",
                       {"metadata": {"annotations": {"elasticgpu.io/allocated": "true"}}},
                       ctype="application/merge-patch+json")
    assert st == 200, out


def assigned(api, name):
    st, p = api.call("GET", f"/api/v1/namespaces/default/pods/{name}")
    assert st == 200, p
    ann = p["metadata"].get("annotations", {})
    return p["spec"].get("nodeName"), json.loads(ann["elasticgpu.io/assigned"])


def test_bound_claim_goes_exactly_into_its_elasticgpu(api, sched):
    """A pod of a bound claim goes to its ElasticGPU's node and card, though the other
    node is empty, and is counted inside it (the node holds 50%, not 100%); other pods
    fill the node but never the reserved half; a second pod of the claim is refused
    naming the first, and takes the same slice once the first is deleted."""
    cluster(api, nodes=NODES, gpus=2)
    mkclass(api, "share", "Immediate")
    cl = mkclaim(api, "train", 50, 8192, "share")
    mkegpu(api, "e-train", "gpu-2", "gpu-2-gpu1", 50, 8192, cl, "share")
    s = sched()
    s.wait_ready()
    s.wait_until(lambda: s.metric("egpu_scheduler_reservations", '{state="applied"}') == 1)
    s.wait_until(lambda: s.metric("egpu_scheduler_cache_claims") == 1)
    trainer = pod(api, "trainer", 50, 8192, uses="train")
    # gpu-1 is empty and binpack would take either node: only gpu-2 passes.
    bound, failed, err = schedule(s, trainer)
    assert (bound, err) == ("gpu-2", "")
    assert failed == {"gpu-1": "claim train is bound to ElasticGPU e-train on node gpu-2"}
    n, a = assigned(api, "trainer")
    assert n == "gpu-2"
    started(api, "trainer")
    assert a == {"node": "gpu-2", "containers": [{"name": "main", "core": 50, "memory": 8192,
                                                  "gpus": ["GPU-gpu-2-1"]}]}
    # Counted inside the reservation: the node holds 50%, not 100%.
    s.wait_until(lambda: s.metric("egpu_scheduler_claimed_containers_inside") == 1)
    assert s.metric("egpu_scheduler_allocated_core_percent", '{node="gpu-2"}') == 50
    assert s.metric("egpu_scheduler_allocated_memory_mib", '{node="gpu-2"}') == 8192
    assert s.metric("egpu_scheduler_reservations", '{state="overfill"}') == 0

    # Other pods fill gpu-2 but never the reserved half: three halves fit
    # (two on card 0, one on card 1), the fourth is refused.
    placed = []
    for i in range(4):
        p = pod(api, f"fill-{i}", 50, 1024)
        bound, failed, err = schedule(s, p, ["gpu-2"])
        if bound is None:
            assert "50% core" in (failed.get("gpu-2") or err), (failed, err)
            break
        placed.append(assigned(api, p["metadata"]["name"])[1]["containers"][0]["gpus"][0])
        started(api, p["metadata"]["name"])
    assert sorted(placed) == ["GPU-gpu-2-0", "GPU-gpu-2-0", "GPU-gpu-2-1"]
    s.wait_until(lambda: s.metric("egpu_scheduler_allocated_core_percent",
                                  '{node="gpu-2"}') == 200)

    # A second pod of the claim: refused on its node, naming the first.
    second = pod(api, "trainer-2", 50, 8192, uses="train")
    bound, failed, err = schedule(s, second)
    assert bound is None
    assert failed["gpu-2"] == ("claim train is in use by pod default/trainer on node gpu-2; "
                               "a claim serves one running pod at a time")
    # The first finishes: the second goes into the same slice.
    st, _ = api.call("DELETE", "/api/v1/namespaces/default/pods/trainer",
                     {"gracePeriodSeconds": 0})  # no kubelet here to finish a graceful one
    assert st == 200
    s.wait_until(lambda: schedule(s, second)[0] == "gpu-2")
    assert assigned(api, "trainer-2")[1]["containers"][0]["gpus"] == ["GPU-gpu-2-1"]
    s.wait_until(lambda: s.metric("egpu_scheduler_claimed_containers_inside") == 1)
    assert s.metric("egpu_scheduler_allocated_core_percent", '{node="gpu-2"}') == 200


def test_wait_for_first_consumer_claim_is_placed_and_annotated(api, sched):
    """An Immediate claim not bound yet is refused until it is; a WaitForFirstConsumer
    claim's pod goes to a node its class's nodeSelector allows, the claim is annotated
    with that node and card, and the ElasticGPU provisioned there takes the pod inside."""
    node(api, "gpu-1", "cpu")
    node(api, "gpu-2", "gpu")
    for n in NODES:
        for i in range(2):
            api.gpu(n, i)
    mkclass(api, "late", "WaitForFirstConsumer", {"nodeSelector": "pool=gpu"})
    mkclass(api, "now", "Immediate")
    cl = mkclaim(api, "nb", 30, 2048, "late")
    mkclaim(api, "waiting", 20, 1024, "now")
    s = sched()
    s.wait_ready()
    s.wait_until(lambda: s.metric("egpu_scheduler_cache_classes") == 2)
    # An Immediate claim not bound yet: kube-scheduler is to retry.
    bound, failed, _ = schedule(s, pod(api, "early", 20, 1024, uses="waiting"))
    assert bound is None
    assert failed["gpu-2"] == "claim waiting is not bound yet (class now, bindingMode Immediate)"
    # WaitForFirstConsumer: placed by its own request on the class's nodes.
    nb = pod(api, "notebook", 30, 2048, uses="nb")
    bound, failed, err = schedule(s, nb)
    assert (bound, err) == ("gpu-2", "")
    assert failed == {"gpu-1": "claim nb: node gpu-1 is not one of class late's nodes "
                               "(nodeSelector pool=gpu)"}
    n, a = assigned(api, "notebook")
    card = a["containers"][0]["gpus"][0]
    assert n == "gpu-2" and card in ("GPU-gpu-2-0", "GPU-gpu-2-1")
    gpu_name = "gpu-2-gpu" + card[-1]
    ann = claim(api, "nb")["metadata"]["annotations"]
    assert ann["elasticgpu.io/selected-node"] == "gpu-2"
    assert ann["elasticgpu.io/selected-gpus"] == gpu_name
    s.wait_until(lambda: s.metric("egpu_scheduler_allocated_core_percent",
                                  '{node="gpu-2"}') == 30)
    assert s.metric("egpu_scheduler_claimed_containers_inside") == 0
    # The controller provisions it there: the pod is counted inside it.
    mkegpu(api, "egpu-" + cl["metadata"]["uid"], "gpu-2", gpu_name, 30, 2048, cl, "late")
    s.wait_until(lambda: s.metric("egpu_scheduler_claimed_containers_inside") == 1)
    assert s.metric("egpu_scheduler_allocated_core_percent", '{node="gpu-2"}') == 30
    assert s.metric("egpu_scheduler_reservations", '{state="applied"}') == 1
    assert "claim marked for provisioning claim=default/nb pod=default/notebook node=gpu-2" in \
        s.log.read_text()
