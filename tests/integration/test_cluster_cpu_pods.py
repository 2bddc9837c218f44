"""Pods that ask no GPU, left to kube-scheduler, on the real kube-scheduler
v1.36: what docs/operator-guide.md's item "Keeping the default (`pass`) where GPU nodes also
run CPU pods" says of kube-scheduler's settings holds on the real one.

- Its default profile (LeastAllocated) sends CPU pods to the GPU node whose cards are free,
  where they strand the cards.
- NodeResourcesFit MostAllocated on elasticgpu.io/gpu-core alone does the same: kube-scheduler
  leaves an extended resource a pod does not request out of the pod's score, so that setting
  cannot see what the cards carry (an earlier guide recommended it, from a bench model that
  scored it).
- The guide's setting, MostAllocated on CPU and memory (its yaml block, as printed), sends
  them to the node with the most CPU requested: here the one whose card a trainer holds.

A control plane of this module's own, no kube-scheduler until each test starts one; two GPU
nodes of tests/cluster/node.py (the fake kubelet and egpu-agent: elasticgpu.io/gpu-core 200
each, 64 CPUs, 256 GiB); on gpu-node-a a pod holding a whole card, 32 CPUs and 64 GiB (bound
by spec.nodeName: its placement is not what is tested, kube-scheduler's cache counts its
requests all the same). The scores each setting gives a CPU pod of 100m (NodeResourcesFit +
NodeResourcesBalancedAllocation, 0..100 each; no other plugin tells the nodes apart here):
LeastAllocated a 62 + 87, b 100 + 100; MostAllocated on CPU and memory a 37 + 87, b 0 + 100 (v1.36's BalancedAllocation may
score both alike: the first term decides); MostAllocated on gpu-core alone 0 on both (it
would be 50 on a if gpu-core were scored), which the test reads from kube-scheduler's own
per-plugin scores."""
import re

import pytest
import yaml

from conftest import ROOT, cluster_module as cl
import node as nodes  # tests/cluster/node.py

TENANT = "cpu-tenant"


def guide_config():
    """The KubeSchedulerConfiguration of docs/operator-guide.md's "Keeping the default" item
    (its one yaml block setting a MostAllocated scoringStrategy), as a dict."""
    text = (ROOT / "docs/operator-guide.md").read_text()
    item = text[text.index("- **Keeping the default (`pass`)"):]
    item = item[:item.index("\n- ", 1)]
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", item, re.S) if "MostAllocated" in b]
    assert len(blocks) == 1, blocks
    return yaml.safe_load(re.sub(r"^ {2}", "", blocks[0], flags=re.M))


GPU_CORE_ONLY = {"profiles": [{"schedulerName": "default-scheduler", "pluginConfig": [{
    "name": "NodeResourcesFit", "args": {"scoringStrategy": {
        "type": "MostAllocated", "resources": [{"name": "elasticgpu.io/gpu-core",
                                                "weight": 1}]}}}]}]}


@pytest.fixture(scope="module")
def world(tmp_path_factory, build_dir):
    if cl.missing_binaries():
        pytest.skip("tools/bin lacks the control plane (`make deps`)")
    c = cl.Cluster(tmp_path_factory.mktemp("cpu-pods"), scheduler=False).start()
    made = []
    try:
        c.kubectl("apply", "--server-side", "-k", str(ROOT / "deploy"))
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            c.call("DELETE", f"/apis/admissionregistration.k8s.io/v1/{kind}/elastic-gpu-webhook")
        for n in ("gpu-node-a", "gpu-node-b"):
            made.append(nodes.Node(c, n, build_dir).start())
        c.kubectl("create", "namespace", TENANT)
        cl.wait_until(lambda: not any(  # not-ready until the node controller sees Ready
            c.call("GET", f"/api/v1/nodes/{n}")[1]["spec"].get("taints")
            for n in ("gpu-node-a", "gpu-node-b")), "nodes untainted", 90, every=0.5)
        whole = {"elasticgpu.io/gpu-core": "100"}
        st, out = c.call("POST", f"/api/v1/namespaces/{TENANT}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer"},
            "spec": {"nodeName": "gpu-node-a", "containers": [{
                "name": "main", "image": "trainer:1",
                "resources": {"requests": {"cpu": "32", "memory": "64Gi", **whole},
                              "limits": whole}}]}})
        assert st == 201, out
        yield c
    finally:
        for n in made:
            n.stop()
        c.stop()


def place(c, name):
    """A CPU pod (cpu 100m, no GPU) for default-scheduler; the node it is bound to."""
    st, out = c.call("POST", f"/api/v1/namespaces/{TENANT}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "web:1",
                                 "resources": {"requests": {"cpu": "100m"}}}]}})
    assert st == 201, out
    return cl.wait_until(lambda: c.call("GET", f"/api/v1/namespaces/{TENANT}/pods/{name}")[1]
                         ["spec"].get("nodeName"), f"{name} bound")


def test_default_profile_sends_cpu_pods_to_the_free_cards(world):
    world.start_scheduler(name="default-profile")
    try:
        assert {place(world, f"default-{i}") for i in range(3)} == {"gpu-node-b"}
    finally:
        world.stop_process("default-profile")


def fit_scores(world, log, pod):
    """NodeResourcesFit's score of each node for pod, from kube-scheduler's --v=10 log."""
    text = (world.dir / log).read_text(errors="replace")
    return dict(re.findall(rf'"Plugin scored node for pod" pod="{TENANT}/{pod}" '
                           r'plugin="NodeResourcesFit" node="(\S+)" score=(\d+)', text))


def test_most_allocated_on_gpu_core_cannot_see_the_cards(world):
    """MostAllocated on gpu-core alone: NodeResourcesFit gives a CPU pod 0 on both nodes,
    gpu-node-a's spent card not counted (kube-scheduler's own per-plugin scores, --v=10),
    so the balance and the tie-breaking place it, not the cards."""
    world.start_scheduler(GPU_CORE_ONLY, name="gpu-core-profile", args=("--v=10",))
    try:
        place(world, "gpu-core-0")
        assert fit_scores(world, "gpu-core-profile.log", "gpu-core-0") == {
            "gpu-node-a": "0", "gpu-node-b": "0"}
        # the scorer saw no allocatable gpu-core at all: the resource was left out
        assert re.search(r'logger="Score.NodeResourcesFit" pod="cpu-tenant/gpu-core-0" '
                         r'node="gpu-node-a" resourceAllocationScorer="MostAllocated" '
                         r'allocatableResource=\[0\] requestedResource=\[0\] resourceScore=0',
                         (world.dir / "gpu-core-profile.log").read_text(errors="replace"))
    finally:
        world.stop_process("gpu-core-profile")


def test_guide_setting_sends_cpu_pods_where_the_cpu_is_taken(world):
    cfg = guide_config()
    assert cfg["profiles"][0]["schedulerName"] == "default-scheduler"
    assert {r["name"] for r in cfg["profiles"][0]["pluginConfig"][0]["args"]["scoringStrategy"]
            ["resources"]} == {"cpu", "memory"}
    world.start_scheduler(cfg, name="guide-profile")
    try:
        assert {place(world, f"guide-{i}") for i in range(3)} == {"gpu-node-a"}
    finally:
        world.stop_process("guide-profile")
