"""egpu-scheduler's choice survives kube-scheduler: kube-scheduler sees
extender scores 0..10 only, adds score x weight x 10 to each node's total and breaks ties
at random. The node the placement policy ranks first must be the one kube-scheduler's rule
picks, whatever its random tie-break draws: filter passes only the nodes tied for the best
exact score (the others get a reason naming the better node), and prioritize gives 10 to
the replay's choice alone. On the code before, two nodes whose policy scores differ by a
little both scored 10 and kube-scheduler picked either."""
import random

from test_scheduler import api, args, assigned, cluster, sched  # noqa: F401 (fixtures)

NODES = ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]


def kube_scheduler_pick(s, api, pod, nodes, seed, weight=1):
    """filter, prioritize, then schedule_one.go's selectHost over the nodes that passed:
    total = score x weight x 10 (0 for a node not listed), the best total wins, ties by
    reservoir sampling with random.Random(seed). Returns (pick, filter reply, the set of
    nodes with the best total)."""
    st, fr = s.post("filter", args(pod, nodes))
    assert st == 200 and not fr.get("Error"), fr
    passed = fr["NodeNames"] or []
    st, plist = s.post("prioritize", args(pod, passed))
    assert st == 200, plist
    total = {n: 0 for n in passed}
    for e in plist:
        total[e["Host"]] += e["Score"] * weight * 10
    rnd, best, count = random.Random(seed), None, 0
    for n in passed:
        if best is None or total[n] > total[best]:
            best, count = n, 1
        elif total[n] == total[best]:
            count += 1
            if rnd.randrange(count) == 0:
                best = n
    top = {n for n in passed if total[n] == total[best]}
    return best, fr, top


def place(s, api, name, core, node):
    api.pod(name, core)
    s.wait_until(lambda: s.post("bind", {"PodName": name, "PodNamespace": "default",
                                         "PodUID": "", "Node": node})[1].get("Error") == "")
    s.wait_until(lambda: assigned(api, name) is not None)


def test_best_node_by_policy_is_kube_schedulers_pick(api, sched):
    """binpack: gpu-3 (52% used) is fuller than gpu-2 (50%), so a 10% pod belongs on
    gpu-3. Before, both scored 10 (the map 0..10 rounds 9.6 up) and kube-scheduler's
    random tie-break sent the pod to gpu-2 for some seeds."""
    cluster(api, nodes=NODES, gpus=1)
    s = sched(extra=("--node-policy", "binpack", "--card-policy", "binpack"))
    s.wait_ready()
    place(s, api, "u2", 50, "gpu-2")
    place(s, api, "u3", 52, "gpu-3")
    p = api.pod("p", 10)
    for seed in range(20):
        pick, fr, top = kube_scheduler_pick(s, api, p, NODES, seed)
        assert top == {"gpu-3"}, (seed, fr)
        assert pick == "gpu-3"
    # The others fit but are refused with the reason naming the better node.
    assert fr["NodeNames"] == ["gpu-3"]
    for n in ("gpu-1", "gpu-2", "gpu-4"):
        assert fr["FailedNodes"][n] == (
            "node gpu-3 fits this pod better (node policy binpack); filter passes only the "
            "nodes tied for the best score")
    # Bound where kube-scheduler's rule sent it.
    st, out = s.post("bind", {"PodName": "p", "PodNamespace": "default", "PodUID": "",
                              "Node": pick})
    assert out["Error"] == ""
    s.wait_until(lambda: (assigned(api, "p") or {}).get("node") == "gpu-3")


def test_exact_ties_go_to_the_replays_choice(api, sched):
    """Four empty nodes tie exactly for every policy: filter passes all four, and
    prioritize gives 10 to one only (the replay's tie rule: the lowest hash of the node
    name with --seed), 9 to the others, so kube-scheduler's pick does not depend on its
    random draw. Before, all four scored 10 and the pick followed the draw."""
    cluster(api, nodes=NODES, gpus=1)
    s = sched(extra=("--node-policy", "binpack", "--card-policy", "binpack", "--seed", "7"))
    s.wait_ready()
    p = api.pod("p", 30)
    picks = set()
    for seed in range(20):
        pick, fr, top = kube_scheduler_pick(s, api, p, NODES, seed)
        assert sorted(fr["NodeNames"]) == NODES, fr  # exact ties all pass
        assert len(top) == 1, (seed, top)
        picks.add(pick)
    assert len(picks) == 1
    st, plist = s.post("prioritize", args(p, NODES))
    assert sorted(e["Score"] for e in plist) == [9, 9, 9, 10]
    # A pod asking the same elsewhere in the order gets the same node: it is the placer's.
    assert {e["Host"] for e in plist if e["Score"] == 10} == picks
