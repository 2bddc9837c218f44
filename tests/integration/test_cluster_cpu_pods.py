"""Pods that ask no GPU, left to kube-scheduler (issue 23 point 2), on the real kube-scheduler
v1.36: the setting docs/operator-guide.md gives for keeping the default (`pass`) on GPU nodes
that also run CPU pods, a KubeSchedulerConfiguration whose default-scheduler profile scores
NodeResourcesFit MostAllocated on elasticgpu.io/gpu-core, is taken by the real kube-scheduler
as the guide prints it, and does what the guide says: CPU pods go to the node whose cards are
spent, where kube-scheduler's default profile (LeastAllocated) sends them to the other one,
whose cards they would strand.

A control plane of this module's own, no kube-scheduler until each test starts one; two GPU
nodes of tests/cluster/node.py (the fake kubelet and egpu-agent: elasticgpu.io/gpu-core 200
each); on gpu-node-a a pod holding a whole card (bound by spec.nodeName: the placement is not
what is tested here, kube-scheduler's cache counts its requests all the same)."""
import re
import time

import pytest
import yaml

from conftest import ROOT, cluster_module as cl
import node as nodes  # tests/cluster/node.py

TENANT = "cpu-tenant"


def guide_config():
    """The KubeSchedulerConfiguration of docs/operator-guide.md's "Keeping the default"
    item (the yaml block that sets MostAllocated on elasticgpu.io/gpu-core), as a dict."""
    text = (ROOT / "docs/operator-guide.md").read_text()
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S)
              if "MostAllocated" in b and "elasticgpu.io/gpu-core" in b]
    assert len(blocks) == 1, blocks
    return yaml.safe_load(re.sub(r"^ {2}", "", blocks[0], flags=re.M))


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
        deadline = time.monotonic() + 90
        while any(c.call("GET", f"/api/v1/nodes/{n}")[1]["spec"].get("taints")
                  for n in ("gpu-node-a", "gpu-node-b")):  # not-ready until Ready is seen
            assert time.monotonic() < deadline, "nodes still tainted"
            time.sleep(0.5)
        whole = {"elasticgpu.io/gpu-core": "100"}
        st, out = c.call("POST", f"/api/v1/namespaces/{TENANT}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer"},
            "spec": {"nodeName": "gpu-node-a", "containers": [{
                "name": "main", "image": "trainer:1",
                "resources": {"requests": {"cpu": "2", **whole}, "limits": whole}}]}})
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
    deadline = time.monotonic() + 60
    while True:
        node = c.call("GET", f"/api/v1/namespaces/{TENANT}/pods/{name}")[1]["spec"].get("nodeName")
        if node:
            return node
        assert time.monotonic() < deadline, f"{name} not bound"
        time.sleep(0.2)


def test_default_profile_sends_cpu_pods_to_the_free_cards(world):
    world.start_scheduler(name="default-profile")
    try:
        assert {place(world, f"default-{i}") for i in range(3)} == {"gpu-node-b"}
    finally:
        world.stop_process("default-profile")


def test_guide_setting_sends_cpu_pods_where_the_cards_are_spent(world):
    cfg = guide_config()
    assert cfg["profiles"][0]["schedulerName"] == "default-scheduler"
    world.start_scheduler(cfg, name="guide-profile")
    try:
        assert {place(world, f"guide-{i}") for i in range(3)} == {"gpu-node-a"}
    finally:
        world.stop_process("guide-profile")
