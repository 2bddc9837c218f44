"""egpu-scheduler --dra over HTTP, its cache built by list+watch from the test API server
(fault_api, which serves resource.k8s.io/v1 ResourceClaims and checks no RBAC; on the real
control plane the same runs in the DRA cluster tests, with the RBAC deploy/ gives the
extender for ResourceClaims): two DRA pods, as egpu-webhook --mode dra makes them (the
marker elasticgpu.io/dra on their container, their GPU in a ResourceClaim), placed one after
the other as kube-scheduler would (filter, prioritize, its allocator's PreBind writing the
claim's status.allocation, then bind). The second is scored with the first's allocation:
with binpack the node the first claim's share fills is the only one filter passes and the
one prioritize gives 10, at once after the first bind (bind read the claim back), before any
watch event is waited for. bind writes no elasticgpu.io/assigned; a pod whose claim the
cache does not know yet is refused at filter so kube-scheduler retries it. A claim status
the decoder refuses is logged and counted, and the version before stays held."""
from test_scheduler import ASSIGNED, api, args, cluster, sched  # noqa: F401 (fixtures)

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"


def claim(api, name, cores=30, memory="4Gi"):
    st, obj = api.call("POST", CLAIMS, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu-share.elasticgpu.io", "allocationMode": "ExactCount",
            "count": 1, "capacity": {"requests": {"cores": str(cores), "memory": memory}}}}]}}})
    assert st == 201, obj
    return obj


def allocate(api, name, node, index, cores=30, memory="4Gi"):
    """What kube-scheduler's DynamicResources PreBind writes: the claim's allocation on
    device gpu-<index> of the node's pool, with its consumed capacity."""
    st, obj = api.call("GET", f"{CLAIMS}/{name}")
    assert st == 200, obj
    obj["status"] = {"allocation": {"devices": {"results": [{
        "request": "gpu", "driver": "gpu.elasticgpu.io", "pool": node,
        "device": f"gpu-{index}", "shareID": "9c3e6f0a-51d7-4b2e-8f4a-0d6c2b7e1a95",
        "consumedCapacity": {"cores": str(cores), "memory": memory}}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}
    st, obj = api.call("PUT", f"{CLAIMS}/{name}", obj)
    assert st == 200, obj


def dra_pod(api, name, claim_name):
    """A pod as egpu-webhook --mode dra leaves it: schedulerName elastic-gpu-scheduler, the
    marker elasticgpu.io/dra: 1 on its GPU container, the claim in spec.resourceClaims."""
    st, obj = api.call("POST", "/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulerName": "elastic-gpu-scheduler",
                 "resourceClaims": [{"name": "egpu-0", "resourceClaimName": claim_name}],
                 "containers": [{"name": "main", "image": "busybox", "resources": {
                     "requests": {"cpu": "1", "elasticgpu.io/dra": "1"},
                     "limits": {"elasticgpu.io/dra": "1"},
                     "claims": [{"name": "egpu-0"}]}}]}})
    assert st == 201, obj
    return obj


def place(s, pod, nodes):
    """filter then prioritize as kube-scheduler calls them: (filter's reply, the scores)."""
    st, fr = s.post("filter", args(pod, nodes))
    assert st == 200 and fr["Error"] == "", fr
    st, plist = s.post("prioritize", args(pod, fr["NodeNames"]))
    assert st == 200, plist
    return fr, {h["Host"]: h["Score"] for h in plist}


def test_second_dra_pod_scored_with_the_first_allocation(api, sched):
    cluster(api, nodes=("gpu-1", "gpu-2"), gpus=2)
    s = sched(extra=("--dra", "--node-policy", "binpack", "--card-policy", "binpack"))
    s.wait_ready()
    nodes = ["gpu-1", "gpu-2"]
    # A pod whose claim is not there yet: refused, kube-scheduler retries it.
    p0 = dra_pod(api, "p0", "nowhere")
    st, out = s.post("filter", args(p0, nodes))
    assert st == 200 and "ResourceClaim default/nowhere of pod default/p0 is not in the " \
        "elastic-gpu cache yet" in out["Error"], out
    # The first pod: two empty nodes tie, both pass; prioritize's 10 is the choice.
    claim(api, "c1")
    p1 = dra_pod(api, "p1", "c1")
    s.wait_until(lambda: s.metric("egpu_scheduler_dra_claims", '{state="off"}') == 1)
    fr, scores = place(s, p1, nodes)
    assert sorted(fr["NodeNames"]) == nodes
    first = max(scores, key=scores.get)
    assert scores[first] == 10
    other = "gpu-2" if first == "gpu-1" else "gpu-1"
    allocate(api, "c1", first, 0)
    bind = {"PodName": "p1", "PodNamespace": "default", "PodUID": p1["metadata"]["uid"],
            "Node": first}
    s.wait_until(lambda: s.post("bind", bind)[1].get("Error") == "")  # p1 in the cache
    got = api.get_pod("p1")
    assert got["spec"]["nodeName"] == first
    assert ASSIGNED not in got["metadata"].get("annotations", {})
    # At once (bind read c1 back): the second pod is scored with c1's 30% on first.
    claim(api, "c2")
    p2 = dra_pod(api, "p2", "c2")
    s.wait_until(lambda: s.metric("egpu_scheduler_dra_claims", '{state="off"}') == 1)
    fr, scores = place(s, p2, nodes)
    assert fr["NodeNames"] == [first], fr
    assert "fits this pod better (node policy binpack)" in fr["FailedNodes"][other]
    assert scores == {first: 10}, scores
    st, plist = s.post("prioritize", args(p2, nodes))
    assert st == 200
    ranked = {h["Host"]: h["Score"] for h in plist}
    assert ranked[first] == 10 and ranked.get(other, 0) < 10, ranked
    allocate(api, "c2", first, 0)
    bind = {"PodName": "p2", "PodNamespace": "default", "PodUID": p2["metadata"]["uid"],
            "Node": first}
    s.wait_until(lambda: s.post("bind", bind)[1].get("Error") == "")
    s.wait_until(lambda: s.metric("egpu_scheduler_allocated_core_percent",
                                  f'{{node="{first}"}}') == 60)
    assert s.metric("egpu_scheduler_allocated_memory_mib", f'{{node="{first}"}}') == 8192
    assert s.metric("egpu_scheduler_dra_claims", '{state="applied"}') == 2
    assert s.metric("egpu_scheduler_binds_total") == 2
    # The claims go (their pods ended): the cards are free again.
    for name in ("c1", "c2"):
        st, _ = api.call("DELETE", f"{CLAIMS}/{name}")
        assert st == 200
    s.wait_until(lambda: s.metric("egpu_scheduler_allocated_core_percent",
                                  f'{{node="{first}"}}') == 0)
    assert s.metric("egpu_scheduler_dra_claims", '{state="applied"}') == 0


def test_hostile_claim_status_is_skipped_and_counted(api, sched):
    """A ResourceClaim whose status the decoder refuses (cores past 100 on a card; the test
    API server keeps what it is sent, as an API server without DRA's validation would): the
    extender logs it, counts it in egpu_scheduler_objects_skipped_total{kind="ResourceClaim"}
    and holds nothing for it; the version before (allocated 30%) stays held, and once the
    claim is deleted nothing is."""
    cluster(api, nodes=("gpu-1",), gpus=1)
    s = sched(extra=("--dra",))
    s.wait_ready()
    claim(api, "c1")
    allocate(api, "c1", "gpu-1", 0)
    s.wait_until(lambda: s.metric("egpu_scheduler_allocated_core_percent",
                                  '{node="gpu-1"}') == 30)
    allocate(api, "c1", "gpu-1", 0, cores=150)
    s.wait_until(lambda: s.metric("egpu_scheduler_objects_skipped_total",
                                  '{kind="ResourceClaim"}') == 1)
    assert "ignored malformed ResourceClaim name=c1" in s.log.read_text()
    assert "consumedCapacity.cores" in s.log.read_text()
    assert s.metric("egpu_scheduler_allocated_core_percent", '{node="gpu-1"}') == 30
    assert s.metric("egpu_scheduler_dra_claims", '{state="applied"}') == 1
    st, _ = api.call("DELETE", f"{CLAIMS}/c1")
    assert st == 200
    s.wait_until(lambda: s.metric("egpu_scheduler_allocated_core_percent",
                                  '{node="gpu-1"}') == 0)
