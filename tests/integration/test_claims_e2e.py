"""A claim end to end, every part the real binary:

  ElasticGPUClaim --egpu-controller--> ElasticGPU on a card of node-a
  pod with egpuc.elasticgpu.io/main --egpu-webhook--> the claim's requests
  --egpu-scheduler (filter, bind as kube-scheduler drives it)--> that node
  and card (and egpu-controller lists the container, with its claim, in the
  card's GPU.status.allocated) --egpu-agent with the fake kubelet-->
  vcuda.conf for the card
  --libegpu-vcuda.so over the mock driver--> the process holds the claim's
  memory and core.

The agent reads its cards from the mock NVML (tests/mock) through the same
state file the process under the interposer later uses, so the GPU objects
it publishes, the card the controller reserves, the UUID the scheduler
assigns and the card the interposer limits are one card. node-b has room
too: the pod must still go where its claim is.

On the real control plane (kube_api: deploy/'s CRDs and RBAC), each component with its
ServiceAccount's token (egpu-controller, egpu-webhook, egpu-scheduler, egpu-agent), so
each call it makes is one its Role grants. The `kube` control plane has no webhook
configuration: the test sends the AdmissionReview itself and applies the patch the
webhook answers, as the API server would."""
import base64
import contextlib
import json
import os
import pathlib
import shutil
import tempfile
import time

import jsonpatch
import pytest

from test_agent import RES, Agent, agent_bin, card_set, mounts, vcuda_conf_of  # noqa: F401
from test_agent import FakeKubelet
from test_controller import G, claim, ctl, egpu, mkclass, mkclaim, wait, wait_phase  # noqa: F401
from test_scheduler import sched  # noqa: F401
from test_vcuda import CTX_MIB, MIB, OOM, Probe, card_share, log_lines, paths  # noqa: F401
from test_webhook import UID, Webhook, cert, need  # noqa: F401


KERNEL_NS = "k=1000000"  # each launch: one 1 ms block of kernel "k"


@pytest.fixture
def api(kube_api):
    """The real control plane (conftest.py's kube_api), for this module's test and the
    components it starts (ctl, sched)."""
    return kube_api


def review(obj, op="CREATE"):
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": UID, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "name": obj["metadata"]["name"],
                        "namespace": obj["metadata"].get("namespace", "default"),
                        "operation": op, "userInfo": {"username": "alice"}, "object": obj,
                        "oldObject": None, "dryRun": False}}


def admit(w, route, obj):
    return w.review(route, review(obj))


@contextlib.contextmanager
def mock_node(api, agent_bin, paths, name, labels, cards=None):  # noqa: F811
    """A GPU node: a Node object with labels, its egpu-agent over the mock
    NVML (tests/mock) of its own simulated machine (a state file the node's
    processes under the interposer share; cards: EGPU_MOCK_NVML_GPUS, default
    the mock's two A100 80GB), publishing its GPU objects, and a fake kubelet.
    Yields {"base", "state", "kubelet", "agent", "gpus" (name: GPU object)}."""
    base = tempfile.mkdtemp(prefix="egpu-e2e-")  # short: unix socket paths
    state = os.path.join(base, "mock.state")
    st, out = api.call("POST", "/api/v1/nodes", {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels)},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi"}}})
    assert st == 201, out
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EGPU_", "LD_"))}
    env["EGPU_MOCK_CUDA_STATE"] = state
    if cards:
        env["EGPU_MOCK_NVML_GPUS"] = cards
    kubelet = FakeKubelet(os.path.join(base, "device-plugins")).start()
    agent = None
    try:
        agent = Agent(agent_bin, base, api=api.component_kubeconfig("egpu-agent"), env=env,
                      gpus=("--nvml-library", str(paths["mock"] / "libnvidia-ml.so.1")),
                      extra=("--node-name", name))  # the last --node-name wins
        kubelet.wait_for_devices(RES, lambda d: len(d) == 200, timeout=15)

        def gpus():
            st, out = api.call("GET", f"{G}/gpus")
            return {g["metadata"]["name"]: g for g in out["items"]
                    if g["spec"]["nodeName"] == name} if st == 200 else {}
        found = wait(lambda: len(gpus()) == 2 and gpus(), f"{name}'s GPU objects")
        yield {"base": base, "state": state, "kubelet": kubelet, "agent": agent,
               "gpus": found, "cards": cards}
        assert agent.stop() == 0, agent.text()
    finally:
        if agent is not None:
            agent.stop()
        kubelet.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def node_a(build_dir, api, agent_bin, paths):  # noqa: F811
    """node-a: a Node labelled pool=e2e, its agent over the mock's two A100
    80GB cards (published as GPU objects), and a fake kubelet."""
    with mock_node(api, agent_bin, paths, "node-a", {"pool": "e2e"}) as node:
        yield node


def test_claim_to_interposer(api, ctl, sched, node_a, cert, build_dir, tmp_path, paths):  # noqa: F811
    """A claim bound by egpu-controller to a slice of a node-a card; a pod naming it
    admitted by egpu-webhook (its requests set to the claim's); egpu-scheduler binds it to
    that node and card though node-b has room, and the controller lists the container on
    the card; the agent, through the fake kubelet, hands it that card's vcuda.conf; and a
    process under the interposer over the mock driver holds the claim's memory and no
    more, and about the claim's 30% of the card."""
    need("curl")
    # node-b: as much room, no claim there.
    api.node("node-b")
    for i in range(2):
        api.gpu("node-b", i, model="NVIDIA A100-SXM4-80GB", memory=81920)

    # 1. The claim, bound by the controller to a slice of a node-a card.
    mkclass(api, "share", params={"nodeSelector": "pool=e2e"})
    ctl()
    mkclaim(api, "train", core=30, mem=4096)
    name = wait_phase(api, claim, "train", "Bound")["status"]["elasticGPUName"]
    e = egpu(api, name)
    assert e["spec"]["nodeName"] == "node-a"
    card = node_a["gpus"][e["spec"]["gpuShare"]["gpuName"]]
    uuid, index = card["spec"]["uuid"], card["spec"]["index"]

    # 2. The pod names the claim and asks nothing itself: the webhook fills
    # its container's requests from the claim, as the API server would apply.
    w = Webhook(build_dir, api.component_kubeconfig("egpu-webhook"), cert, tmp_path)
    try:
        w.wait_ready()
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "trainer", "namespace": "default",
                            "annotations": {"egpuc.elasticgpu.io/main": "train"}},
               "spec": {"schedulerName": "default-scheduler",
                        "containers": [{"name": "main", "image": "trainer:1"}]}}
        resp = admit(w, "/mutate", pod)
        assert resp["allowed"] is True, resp
        pod = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(resp["patch"])))
        assert pod["spec"]["schedulerName"] == "elastic-gpu-scheduler"
        want = {"elasticgpu.io/gpu-core": "30", "elasticgpu.io/gpu-memory": "4096"}
        assert pod["spec"]["containers"][0]["resources"] == {"requests": want, "limits": want}
        assert admit(w, "/validate", pod)["allowed"] is True
    finally:
        w.stop()
    st, pod = api.call("POST", "/api/v1/namespaces/default/pods", pod)
    assert st == 201, pod

    # 3. The scheduler, driven as kube-scheduler drives it: only node-a
    # passes, and bind gives the container the claim's card.
    s = sched()
    s.wait_ready()
    st, out = s.post("filter", {"Pod": pod, "Nodes": None, "NodeNames": ["node-a", "node-b"]})
    assert st == 200 and out["NodeNames"] == ["node-a"], out
    assert name in out["FailedNodes"]["node-b"], out
    s.wait_until(lambda: s.post("bind", {"PodName": "trainer", "PodNamespace": "default",
                                         "PodUID": pod["metadata"]["uid"],
                                         "Node": "node-a"})[1].get("Error") == "")
    bound = api.get_pod("trainer")
    assert bound["spec"]["nodeName"] == "node-a"
    assigned = json.loads(bound["metadata"]["annotations"]["elasticgpu.io/assigned"])
    assert assigned["containers"] == [{"name": "main", "core": 30, "memory": 4096,
                                       "gpus": [uuid]}]
    # The controller lists the container on the card, with its claim.
    gpu_name = e["spec"]["gpuShare"]["gpuName"]

    def allocated():
        st, g = api.call("GET", f"{G}/gpus/{gpu_name}")
        return st == 200 and g.get("status", {}).get("allocated")
    assert wait(allocated, "GPU.status.allocated") == [{
        "namespace": "default", "pod": "trainer", "podUID": pod["metadata"]["uid"],
        "container": "main", "core": 30, "memory": 4096, "claim": "train"}]

    # 4. The kubelet admits the container; the agent hands it that card.
    adm = node_a["kubelet"].admit(RES, 30, pod="trainer", container="main", check=True)
    assert card_set(adm.devices) == {uuid}
    conf, _ = vcuda_conf_of(adm)
    assert conf == {"EGPU_VCUDA_GPUS": uuid, "EGPU_VCUDA_MEMORY_MIB": "4096",
                    "EGPU_VCUDA_CORE": "30", "EGPU_VCUDA_CORE_LIMIT": "30"}

    # 5. A process of the container, under the interposer over the mock
    # driver (the same simulated machine): the claim's memory and no more,
    # the claim's share of the card and no more.
    world = {"state": node_a["state"], "paths": paths,
             "dir": pathlib.Path(mounts(adm.container_response)["/etc/elastic-gpu"].host_path)}
    probe = Probe(world, conf={"EGPU_MOCK_CUDA_KERNEL_NS": KERNEL_NS})
    assert probe.rc("init") == 0 and probe.rc(f"ctx {index} primary") == 0
    fits = (4096 - CTX_MIB) // 100
    assert probe("fill mem %d" % (100 * MIB)) == ["fill", str(fits), str(OOM)]
    assert probe(f"totalmem {index}") == ["totalmem", "0", str(4096 * MIB)]
    assert probe("spin launch k 1") == ["spin", "0"]
    time.sleep(0.5)  # past learning the kernel's cost
    share = card_share(world, 1.5, card=index)
    stop = probe("stop")
    assert stop[2] == "0" and int(stop[1]) > 100, (stop, probe.stderr())
    assert 20 <= share <= 40, f"the claim's container got {share:.1f}% of a 30% share"
    assert probe.close() == 0
    assert log_lines(probe.stderr()) == []
