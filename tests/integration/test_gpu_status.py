"""GPU status: GPU.status.allocated, written by egpu-controller
from the pods' elasticgpu.io/assigned annotations, and GPU.status.used,
written by egpu-agent from NVML (here the mock libnvidia-ml.so.1).

- Pods bound to n1 with assigned shares on its two cards: each GPU's
  status.allocated is exactly the sorted list of (namespace, pod, podUID,
  container, core, memory, claim) the annotations give, the claim from the
  pod's egpuc.elasticgpu.io/<container> annotation.
- A pod that finishes, and one that is deleted, leave the list; a pod not
  bound yet, one whose annotation names another node, and one whose
  annotation does not decode are never listed (the last two logged).
- No write storms: a change to a pod that leaves its entries as they were
  writes nothing; a hand edit of status.allocated is put back; a GPU object
  that comes after its pods gets their entries when it is added.
- The agent writes status.used (memory MiB and utilization percent) of its
  own GPU objects from NVML, with updateTime, and nothing more while they
  stay the same; memory from nvmlDeviceGetMemoryInfo_v2 (the driver's
  reservation apart) or, where v2 is missing or not supported, v1, and
  memorySource and the agent's metric say which.

All on the real control plane (conftest.py's kube_api), egpu-controller and
egpu-agent each with its ServiceAccount's token, so their writes of GPU status are
the ones deploy/'s RBAC grants.

Trust: the controller believes elasticgpu.io/assigned because only
egpu-scheduler can write it (deploy/admission/system-annotations.yaml
refuses anyone else setting or changing it, test_deploy checks the policy);
the kube_api control plane has no admission policy installed (test_deploy and
the cluster tests show it), so a test cannot show an owner's edit refused
here. What the controller does check is what a stale or broken annotation
could get wrong: it must decode and name the node the pod is bound to.
"""
import json
import time

import pytest

from test_controller import ctl, wait, cluster  # noqa: F401 (fixtures and helpers)

G = "/apis/elasticgpu.io/v1alpha1"
ASSIGNED = "elasticgpu.io/assigned"
NOW = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}


@pytest.fixture
def api(kube_api):
    """The real control plane (conftest.py's kube_api), emptied before each test."""
    return kube_api


def mkpod(api, name, containers, node="n1", ns="default", claims=None, assigned_node=None,
          assigned=None):
    """A pod bound to node whose elasticgpu.io/assigned lists containers:
    (name, core, memory, [card indices on node])."""
    ann = {}
    if assigned is None:
        assigned = json.dumps({"node": assigned_node or node, "containers": [
            {"name": c, "core": core, "memory": mem,
             "gpus": [f"GPU-{node}-{i}" for i in idx]} for c, core, mem, idx in containers]})
    ann[ASSIGNED] = assigned
    for cont, claim in (claims or {}).items():
        ann[f"egpuc.elasticgpu.io/{cont}"] = claim
    spec = {"containers": [{"name": c[0], "image": "busybox"} for c in containers]}
    if node:
        spec["nodeName"] = node
    st, obj = api.call("POST", f"/api/v1/namespaces/{ns}/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "annotations": ann}, "spec": spec})
    assert st == 201, obj
    return obj


def allocated(api, gpu):
    st, obj = api.call("GET", f"{G}/gpus/{gpu}")
    assert st == 200, obj
    return obj.get("status", {}).get("allocated")


def entry(pod, container, core, memory, claim=None, ns="default"):
    e = {"namespace": ns, "pod": pod["metadata"]["name"], "podUID": pod["metadata"]["uid"],
         "container": container, "core": core, "memory": memory}
    if claim:
        e["claim"] = claim
    return e


def settle(api, gpu, want, what):
    wait(lambda: allocated(api, gpu) == want, f"{gpu} {what}: now {allocated(api, gpu)}")


def set_phase(api, name, phase, ns="default"):
    pod = api.get_pod(name, ns)
    pod.setdefault("status", {})["phase"] = phase
    st, out = api.call("PUT", f"/api/v1/namespaces/{ns}/pods/{name}/status", pod)
    assert st == 200, out


def test_allocated_from_assigned_pods(api, ctl):  # noqa: F811
    """Each GPU's status.allocated is exactly the sorted entries of the pods bound to
    its node whose elasticgpu.io/assigned names it; unbound, misplaced and garbled
    annotations are left out (the last two logged); a change that leaves the entries
    as they were writes nothing; finished pods leave, and deleted ones once the
    deletion is final (gracePeriodSeconds 0, as a kubelet ends it: none runs here),
    not while they are only terminating."""
    cluster(api, nodes=("n1",))
    c = ctl()
    p1 = mkpod(api, "train", [("main", 30, 4096, [0])], claims={"main": "team-a"})
    p2 = mkpod(api, "serve", [("web", 20, 1024, [1]), ("side", 50, 2048, [0])])
    p3 = mkpod(api, "whole", [("big", 100, 0, [0, 1])], ns="other")
    mkpod(api, "pending", [("main", 10, 0, [0])], node=None, assigned_node="n1")
    mkpod(api, "elsewhere", [("main", 10, 0, [0])], assigned_node="n2")
    mkpod(api, "garbled", [("main", 10, 0, [0])], assigned='{"node":"n1","containers":[{}]}')
    # Sorted by namespace, pod, container.
    gpu0 = [entry(p2, "side", 50, 2048), entry(p1, "main", 30, 4096, claim="team-a"),
            entry(p3, "big", 100, 0, ns="other")]
    gpu1 = [entry(p2, "web", 20, 1024), entry(p3, "big", 100, 0, ns="other")]
    settle(api, "n1-gpu0", gpu0, "three containers")
    settle(api, "n1-gpu1", gpu1, "two containers")
    log = c.log.read_text()
    assert "pod=default/elsewhere" in log and "but the pod is bound to node" in log, log
    assert "pod=default/garbled" in log and "containers[0].name: missing" in log, log
    time.sleep(0.5)  # the counter moves just after the API server answered
    writes = c.metric("egpu_controller_gpu_status_writes_total")
    assert writes is not None and writes >= 2
    assert c.metric("egpu_controller_gpu_status_errors_total") == 0

    # A change that leaves the entries as they were (the pod starts
    # running, a label) writes nothing, through several resyncs.
    set_phase(api, "train", "Running")
    pod = api.get_pod("serve")
    pod["metadata"].setdefault("labels", {})["x"] = "y"
    st, out = api.call("PUT", "/api/v1/namespaces/default/pods/serve", pod)
    assert st == 200, out
    time.sleep(2.5)
    assert c.metric("egpu_controller_gpu_status_writes_total") == writes
    assert allocated(api, "n1-gpu0") == gpu0

    # A finished pod and a deleted one leave; the card they shared empties.
    set_phase(api, "train", "Succeeded")
    settle(api, "n1-gpu0", [gpu0[0], gpu0[2]], "without the finished pod")
    assert allocated(api, "n1-gpu1") == gpu1
    # A bound pod deleted with its grace period is only terminating until its kubelet
    # finishes it (none runs here): its cards are still in use, its entries stay.
    st, out = api.call("DELETE", "/api/v1/namespaces/other/pods/whole")
    assert st == 200 and out["metadata"].get("deletionTimestamp"), out
    time.sleep(1.5)  # resyncs
    assert allocated(api, "n1-gpu0") == [gpu0[0], gpu0[2]]
    assert allocated(api, "n1-gpu1") == gpu1
    # The kubelet's final deletion (gracePeriodSeconds 0): they leave.
    st, out = api.call("DELETE", "/api/v1/namespaces/other/pods/whole", NOW)
    assert st == 200, out
    settle(api, "n1-gpu0", [entry(p2, "side", 50, 2048)], "without the deleted pod")
    settle(api, "n1-gpu1", [entry(p2, "web", 20, 1024)], "without the deleted pod")
    st, out = api.call("DELETE", "/api/v1/namespaces/default/pods/serve", NOW)
    assert st == 200, out
    settle(api, "n1-gpu0", [], "empty")
    settle(api, "n1-gpu1", [], "empty")


def test_hand_edit_repaired_and_late_gpu(api, ctl):  # noqa: F811
    """A hand edit of status.allocated is put back, and a GPU object published after
    its pods gets their entries when it comes."""
    api.node("n1")
    api.gpu("n1", 0)
    c = ctl()
    p = mkpod(api, "p", [("main", 40, 512, [0])], claims={"main": "c"})
    mkpod(api, "q", [("main", 25, 0, [1])])  # its card has no GPU object yet
    want0 = [entry(p, "main", 40, 512, claim="c")]
    settle(api, "n1-gpu0", want0, "the pod")
    # Someone edits status.allocated: the controller puts it back.
    st, out = api.call("PATCH", f"{G}/gpus/n1-gpu0/status",
                       {"status": {"allocated": [{"namespace": "x", "pod": "y",
                                                  "container": "z", "core": 99}]}},
                       ctype="application/merge-patch+json")
    assert st == 200, out
    settle(api, "n1-gpu0", want0, "repaired")
    # The GPU object of q's card is published late: it gets q's entry.
    api.gpu("n1", 1)
    q = api.get_pod("q")
    settle(api, "n1-gpu1", [entry(q, "main", 25, 0)], "the late card")
    assert c.metric("egpu_controller_gpu_status_errors_total") == 0


def test_only_leader_writes(api, ctl):  # noqa: F811
    """Of two controllers sharing the Lease, only the leader writes GPU status."""
    cluster(api, nodes=("n1",))
    lease = ("--leader-elect", "true", "--lease-duration", "3", "--renew-deadline", "2",
             "--retry-period", "1")
    a = ctl("a", lease)
    wait(lambda: a.metric("egpu_controller_leader") == 1, "a leads")
    b = ctl("b", lease)
    p = mkpod(api, "p", [("main", 40, 512, [0])])
    settle(api, "n1-gpu0", [entry(p, "main", 40, 512)], "the pod")
    time.sleep(1)
    assert b.metric("egpu_controller_gpu_status_writes_total") == 0
    assert a.metric("egpu_controller_gpu_status_writes_total") >= 1


USED_CASES = {
    # mock variant, EGPU_MOCK_NVML_FAIL, source, used MiB of the A100
    # (1/16 of it in use, 480 MiB reserved by the driver), reservedMemory
    "v2": ("nvml-mock", None, "nvmlDeviceGetMemoryInfo_v2", 81920 // 16, 480),
    "v2-missing": ("nvml-mock-noopt", None, "nvmlDeviceGetMemoryInfo", 81920 // 16 + 480, None),
    "v2-not-supported": ("nvml-mock", "nvmlDeviceGetMemoryInfo_v2@*=3",
                         "nvmlDeviceGetMemoryInfo", 81920 // 16 + 480, None),
}


@pytest.mark.parametrize("case", list(USED_CASES))
def test_agent_writes_used_from_nvml(api, build_dir, tmp_path, case):  # noqa: F811
    """egpu-agent over the mock libnvidia-ml.so.1 (1/16 of each card in
    use, 480 MiB reserved by the driver, utilization 0%) writes status.used
    of its GPU objects once, with updateTime, and leaves status.allocated to
    the controller. memory comes from nvmlDeviceGetMemoryInfo_v2 (the
    reservation apart, in reservedMemory) where the library has it and
    answers, else from nvmlDeviceGetMemoryInfo (the reservation counted as
    used); memorySource and the metric's source label say which. The real
    API server keeps the fields (the CRD's schema has them)."""
    import os
    from test_agent import Agent, scrape
    variant, fail, source, used0, reserved = USED_CASES[case]
    mock = build_dir / f"src/agent/{variant}/libnvidia-ml.so.1"
    assert mock.exists(), f"{mock} not built"
    env = dict(os.environ, EGPU_MOCK_NVML_GPUS="NVIDIA A100-SXM4-80GB:81920,Tesla T4:15360",
               EGPU_MOCK_NVML_RESERVED_MIB="480")
    if fail:
        env["EGPU_MOCK_NVML_FAIL"] = fail
    base = str(tmp_path)
    agent = Agent(str(build_dir / "src/agent/egpu-agent"), base,
                  api=api.component_kubeconfig("egpu-agent"),
                  gpus=("--nvml-library", str(mock)), env=env)
    try:
        def used(name):
            st, obj = api.call("GET", f"{G}/gpus/{name}")
            return obj.get("status", {}).get("used") if st == 200 else None
        wait(lambda: used("node-a-gpu0") and used("node-a-gpu1"), "status.used")
        u0, u1 = used("node-a-gpu0"), used("node-a-gpu1")
        assert (u0["memory"], u0["utilization"]) == (used0, 0), u0
        assert u1["memory"] == used0 - 81920 // 16 + 15360 // 16, u1
        assert u0["memorySource"] == u1["memorySource"] == source, (u0, u1)
        assert u0.get("reservedMemory") == reserved, u0
        assert time.strptime(u0["updateTime"], "%Y-%m-%dT%H:%M:%SZ")
        want = {"memory", "memorySource", "utilization", "updateTime"}
        assert set(u0) == want | ({"reservedMemory"} if reserved is not None else set()), u0
        st, obj = api.call("GET", f"{G}/gpus/node-a-gpu0")
        assert obj["status"]["health"] == "Healthy" and "allocated" not in obj["status"]
        uuid = obj["spec"]["uuid"]

        def metric():
            m = scrape(agent)
            return [(dict(k[1]), v) for k, v in m.items()
                    if k[0] == "egpu_agent_gpu_used_memory_mib" and dict(k[1])["gpu"] == uuid]
        wait(lambda: metric(), "egpu_agent_gpu_used_memory_mib")
        assert metric() == [({"gpu": uuid, "source": source}, used0)], metric()
        got = scrape(agent)[("egpu_agent_gpu_reserved_memory_mib", (("gpu", uuid),))]
        assert got == (reserved or 0), got
    finally:
        assert agent.stop() == 0, agent.text()