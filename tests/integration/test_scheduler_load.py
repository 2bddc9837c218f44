"""egpu-scheduler --load-aware against the test API server: among
placements the node policy scores exactly alike, the one whose cards the agents report
less loaded (GPU status.used: utilization, memory in use, updateTime) is chosen, before
the seeded hash of the node name. Two empty identical nodes; the seed is one whose hash
picks node-b, and node-b's card reports 90% utilization, node-a's 5%. With --load-aware
the pod goes to node-a and filter says why node-b fails; without it, node-b as before; a
report older than --load-max-age counts as unknown, never as idle."""
import time

from test_scheduler import api, args, sched  # noqa: F401 (fixtures)

G = "/apis/elasticgpu.io/v1alpha1"
M64 = (1 << 64) - 1


def egpu_hash_str(s, seed):
    """src/core/rng.c's egpu_hash_str: FNV-1a, xor seed, then splitmix64."""
    h = 0xcbf29ce484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001b3) & M64
    z = ((h ^ seed) + 0x9e3779b97f4a7c15) & M64
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return z ^ (z >> 31)


# The first seed whose hash ranks node-b first: without load, node-b is the choice.
SEED = next(s for s in range(1000) if egpu_hash_str("node-b", s) < egpu_hash_str("node-a", s))


def stamp(age_s):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - age_s))


def report(api, node, util, age_s=5, memory=512):
    """What egpu-agent writes from NVML: a merge patch of status.used."""
    st, out = api.call("PATCH", f"{G}/gpus/{node}-gpu0/status",
                       {"status": {"used": {"memory": memory, "utilization": util,
                                            "updateTime": stamp(age_s)}}},
                       ctype="application/merge-patch+json")
    assert st == 200, out


def two_nodes(api, util_a, util_b, age_a=5):
    for n in ("node-a", "node-b"):
        api.node(n)
        api.gpu(n, 0)
    report(api, "node-a", util_a, age_a)
    report(api, "node-b", util_b)


def choose(s, api, name="p"):
    """filter, prioritize and bind as kube-scheduler would: the node prioritize gives 10
    among those filter passed. Returns (that node, filter's reply)."""
    pod = api.pod(name, 30)
    nodes = ["node-a", "node-b"]
    st, fr = s.post("filter", args(pod, nodes))
    assert st == 200 and not fr.get("Error"), fr
    st, plist = s.post("prioritize", args(pod, fr["NodeNames"]))
    assert st == 200
    ten = [e["Host"] for e in plist if e["Score"] == 10]
    assert len(ten) == 1, plist
    return ten[0], fr


def wait_load_seen(s, api, want):
    """The reports reach the cache by watch: retry a throwaway filter until node want
    alone passes (load-aware), at most 10 s."""
    deadline = time.time() + 10
    while time.time() < deadline:
        st, fr = s.post("filter", args(api.get_pod("probe"), ["node-a", "node-b"]))
        if fr.get("NodeNames") == [want]:
            return
        time.sleep(0.1)
    raise AssertionError(f"filter never passed {want} alone: {fr}")


def test_hash_alone_picks_node_b():
    assert egpu_hash_str("node-b", SEED) < egpu_hash_str("node-a", SEED)


def test_load_aware_prefers_the_less_loaded_node(api, sched):
    two_nodes(api, 5, 90)
    api.pod("probe", 30)
    s = sched(extra=["--seed", str(SEED), "--load-aware"])
    s.wait_ready()
    wait_load_seen(s, api, "node-a")
    node, fr = choose(s, api)
    assert node == "node-a"
    assert fr["NodeNames"] == ["node-a"]
    assert fr["FailedNodes"]["node-b"] == (
        "node node-a fits this pod as well and its cards are less loaded (load 5% against "
        "90%: the higher of GPU utilization and memory in use); filter passes only the least "
        "loaded of the nodes tied for the best score")
    s.wait_until(lambda: (s.metric("egpu_scheduler_load_decided_total") or 0) >= 1)
    st, out = s.post("bind", {"PodName": "p", "PodNamespace": "default",
                              "PodUID": api.get_pod("p")["metadata"]["uid"], "Node": node})
    assert st == 200 and out.get("Error") == "", out
    assert api.get_pod("p")["spec"]["nodeName"] == "node-a"
    # The loads turn: node-b's card is now the idle one, and the next pod follows.
    report(api, "node-a", 95)
    report(api, "node-b", 2)
    st, out = api.call("DELETE", "/api/v1/namespaces/default/pods/p")
    assert st == 200 and out["metadata"]["deletionTimestamp"], out
    # the pod is bound: it is gone once its kubelet (none runs here) has stopped it
    st, out = api.call("DELETE", "/api/v1/namespaces/default/pods/p",
                       {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
    assert st == 200
    assert api.call("GET", "/api/v1/namespaces/default/pods/p")[0] == 404
    wait_load_seen(s, api, "node-b")


def test_without_the_flag_the_choice_is_unchanged(api, sched):
    two_nodes(api, 5, 90)
    s = sched(extra=["--seed", str(SEED)])
    s.wait_ready()
    time.sleep(0.5)  # the reports have come, and change nothing
    node, fr = choose(s, api)
    assert node == "node-b"
    assert sorted(fr["NodeNames"]) == ["node-a", "node-b"]
    assert s.metric("egpu_scheduler_load_decided_total") == 0


def test_a_stale_report_is_not_used(api, sched):
    # node-a's 5% was written 10 minutes ago: unknown, never idle, so node-b's fresh 90%
    # is the better known load.
    two_nodes(api, 5, 90, age_a=600)
    api.pod("probe", 30)
    s = sched(extra=["--seed", str(SEED), "--load-aware"])
    s.wait_ready()
    wait_load_seen(s, api, "node-b")
    node, fr = choose(s, api)
    assert node == "node-b"
    assert "(load 90% against unknown (no fresh report)" in fr["FailedNodes"]["node-a"]
    # A fresh report from node-a's agent is used at once.
    report(api, "node-a", 5)
    wait_load_seen(s, api, "node-a")
