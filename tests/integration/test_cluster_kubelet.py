"""A GPU node with the REAL kubelet: kubelet v1.36.3, containerd and
runc run a GPU pod that egpu-scheduler placed, through egpu-agent's device plugin, against
the session's real control plane with deploy/ installed and egpu-webhook running
(tests/cluster/kubelet.py says what the node is and what differs from a real one).

- The kubelet registers the Node Ready with elasticgpu.io/gpu-core 200 from the agent's
  device plugin (its own PodResources GetAllocatableResources names the same 200 IDs), and
  the agent publishes a GPU object per card.
- A GPU pod (gpu-core 30, gpu-memory 4096) is placed by kube-scheduler with egpu-scheduler
  as its extender, as deploy/scheduler runs the pair; the real kubelet calls the agent's
  GetPreferredAllocation, Allocate and PreStartContainer, the pod runs, the agent writes
  elasticgpu.io/allocated, and inside the container the agent's vcuda.conf is mounted with
  the limits (EGPU_VCUDA_MEMORY_MIB=4096, EGPU_VCUDA_CORE=30), /etc/ld.so.preload names the
  interposer and egpu-webhook's seccomp profile filters the process.
- Deleting the pod frees its devices: the kubelet's PodResources no longer holds them, the
  agent removes the allocation dir, and the pod is gone.
- No request of the kubelet (system:node:<name>) or of egpu-agent was refused: the Node
  authorizer, NodeRestriction and deploy/agent's RBAC allow what they do on a real node.

Changed from deploy/ for the test: egpu-agent's cleanup interval is 2 s instead of 60
(EGPU_CLEANUP_INTERVAL), so the allocation dir's removal is seen within seconds.

Needs root, tools/bin/kubelet (`make k8s`) and containerd, runc and the CNI plugins
(scripts/deps.sh): without them the module skips (a failure under CI=true)."""
import json
import os
import re
import time

import pytest

from conftest import MACHINE_CANNOT, cluster_module  # noqa: F401  (tests/cluster on sys.path)
import components  # tests/cluster/components.py
import kubelet as real  # tests/cluster/kubelet.py
from cluster import wait_until as wait  # noqa: E402

NS = "elastic-gpu-system"
TENANT = "kubelet-tenant"
NODE = "real-gpu-node"
GPU_CORE = "elasticgpu.io/gpu-core"
CLEANUP_S = 2  # the agent's --cleanup-interval here (EGPU_CLEANUP_INTERVAL; deploy/: 60)


@pytest.fixture(scope="module")
def real_node(cluster, deployed, webhook, build_dir, tmp_path_factory):
    cannot = real.machine_cannot()
    if cannot:  # the one skip CI=true keeps (conftest.py): the kernel, not the install
        pytest.skip(f"{MACHINE_CANNOT}{cannot}")
    lacking = real.missing()
    if lacking:
        pytest.skip(f"a real kubelet node needs {', '.join(lacking)} (scripts/deps.sh, "
                    "`make k8s`)")
    n = real.RealNode(cluster, NODE, build_dir,
                      agent_env={"EGPU_CLEANUP_INTERVAL": str(CLEANUP_S)},
                      log_dir=tmp_path_factory.mktemp("real-node-logs")).start()
    print(f"real node started: {n.timings}")
    yield n
    n.stop()


@pytest.fixture(scope="module")
def pair(cluster, deployed, tmp_path_factory, build_dir):
    """egpu-scheduler and its kube-scheduler, as deploy/scheduler's pod runs them
    (components.scheduler; kube-scheduler with deploy/'s scheduler-config.yaml, the
    extender on egpu-scheduler's port, ServiceAccount elastic-gpu-kube-scheduler)."""
    p = components.SchedulerPair(cluster, build_dir, tmp_path_factory.mktemp("kubelet-pair"),
                                 "scheduler-kubelet")
    try:
        p.ext.ready()
        yield p.ext
    finally:
        p.stop()


def gpus_of(cluster, node):
    st, lst = cluster.call("GET", "/apis/elasticgpu.io/v1alpha1/gpus")
    return [g for g in lst.get("items", []) if g["spec"]["nodeName"] == node] \
        if st == 200 else []


def test_real_kubelet_registers_the_node_with_the_agents_gpus(cluster, real_node):
    """The kubelet's Node is Ready, runs containerd, and its capacity and allocatable hold
    the 200 gpu-core IDs the agent's device plugin lists (two cards); the kubelet's own
    PodResources allocatable names the same IDs; the agent publishes both cards."""
    n = real_node.node()
    assert real_node.ready(), n["status"]["conditions"]
    assert n["status"]["allocatable"][GPU_CORE] == "200", n["status"]
    assert n["status"]["capacity"][GPU_CORE] == "200"
    info = n["status"]["nodeInfo"]
    assert info["kubeletVersion"] == cluster.version, info
    assert info["containerRuntimeVersion"].startswith("containerd://"), info
    alloc = real_node.allocatable_devices()
    assert len(alloc[GPU_CORE]) == 200, alloc
    gpus = wait(lambda: len(gpus_of(cluster, NODE)) == 2 and gpus_of(cluster, NODE),
                "the agent's GPU objects")
    uuids = {g["spec"]["uuid"] for g in gpus}
    assert {g["spec"]["index"] for g in gpus} == {0, 1}
    assert {i.rsplit("-", 1)[0] for i in alloc[GPU_CORE]} == uuids
    assert re.search(r"registered kubelet=/var/lib/kubelet/device-plugins/kubelet\.sock "
                     r"resource=elasticgpu\.io/gpu-core", real_node.log("egpu-agent"))


@pytest.fixture(scope="module")
def tenant(cluster, deployed):
    cluster.kubectl("create", "namespace", TENANT)
    return TENANT


SHOWN = ("/etc/elastic-gpu/vcuda.conf", "/etc/ld.so.preload", "/proc/self/status",
         "/proc/self/environ")


def gpu_pod(name):
    res = {GPU_CORE: "30", "elasticgpu.io/gpu-memory": "4096"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": TENANT},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": NODE},
                     "tolerations": [real.TOLERATION],
                     "terminationGracePeriodSeconds": 5,
                     "containers": [{"name": "main", "image": real.TEST_IMAGE,
                                     "imagePullPolicy": "Never", "args": list(SHOWN),
                                     "resources": {"requests": res, "limits": res}}]}}


def sections(text):
    """What the test image's program printed: {path: [lines]}."""
    out, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"==> (\S+) <==(.*)$", line)
        if m:
            cur = out.setdefault(m.group(1), [])
            if m.group(2):
                cur.append(m.group(2).strip())
        elif cur is not None:
            cur.append(line)
    return out


def get_pod(cluster, name):
    st, p = cluster.call("GET", f"/api/v1/namespaces/{TENANT}/pods/{name}")
    return p if st == 200 else None


def test_gpu_pod_runs_under_the_real_kubelet(cluster, real_node, pair, tenant, build_dir):
    """A pod asking gpu-core 30 and gpu-memory 4096, placed by the scheduler pair, runs
    on the real kubelet: the kubelet calls the agent's GetPreferredAllocation, Allocate and
    PreStartContainer for 30 IDs on the card egpu-scheduler assigned, the agent marks the
    pod allocated, and the container reads the agent's vcuda.conf with the limits, its
    /etc/ld.so.preload names the interposer, and it runs under a seccomp filter (the
    webhook's Localhost profile, found in the kubelet's seccomp dir)."""
    st, p = cluster.call("POST", f"/api/v1/namespaces/{TENANT}/pods", gpu_pod("share"))
    assert st == 201, p
    assert p["spec"]["schedulerName"] == "elastic-gpu-scheduler", p["spec"]  # the webhook
    sec = p["spec"]["containers"][0].get("securityContext", {}).get("seccompProfile")
    assert sec == {"type": "Localhost", "localhostProfile": "elastic-gpu/shared-gpu.json"}, sec

    def running():
        p = get_pod(cluster, "share")
        return p if p and p["status"].get("phase") == "Running" else None
    try:
        p = wait(running, "pod share Running", timeout=90)
    except TimeoutError:  # wait_until's: add what the kubelet and the agent said
        raise AssertionError(f"{json.dumps(get_pod(cluster, 'share'))[:3000]}\n--- kubelet\n"
                             f"{real_node.log('kubelet')[-4000:]}\n--- egpu-agent\n"
                             f"{real_node.log('egpu-agent')[-3000:]}")
    assert p["spec"]["nodeName"] == NODE
    ann = p["metadata"]["annotations"]
    assigned = json.loads(ann["elasticgpu.io/assigned"])
    (c,) = assigned["containers"]
    assert (c["name"], c["core"], c["memory"], len(c["gpus"])) == ("main", 30, 4096, 1), c
    uuid = c["gpus"][0]

    # the kubelet holds 30 IDs on the assigned card for the container
    held = real_node.pod_resources()[f"{TENANT}/share"]["main"][GPU_CORE]
    assert len(held) == 30 and all(i.startswith(uuid + "-") for i in held), held

    # the agent's side of the three calls, in the order the kubelet makes them
    log = real_node.log("egpu-agent")
    pref = re.search(rf"preferred pod={TENANT}/share container=main size=30 gpus=1 "
                     r"first=(\S+)", log)
    alloc = re.search(rf"allocated ids=30 gpus={re.escape(uuid)} shared=true dir=(\S+)", log)
    limits = re.search(rf"limits written pod={TENANT}/share container=main core=30 "
                       r"core_limit=30 memory=4096 gpus=1 dir=(\S+)", log)
    assert pref and alloc and limits, log[-3000:]
    assert pref.start() < alloc.start() < limits.start()
    assert alloc.group(1) == limits.group(1)
    assert pref.group(1) == uuid
    wait(lambda: (get_pod(cluster, "share") or {}).get("metadata", {}).get(
        "annotations", {}).get("elasticgpu.io/allocated"), "elasticgpu.io/allocated")
    allocated = json.loads(get_pod(cluster, "share")["metadata"]["annotations"]
                           ["elasticgpu.io/allocated"])
    assert allocated["containers"]["main"] == {"gpus": [uuid], "core": 30, "memory": 4096}, \
        allocated

    # inside the container (kubectl logs: the API server asks the kubelet)
    last = []

    def logs():
        r = cluster.kubectl("logs", "-n", TENANT, "share", check=False)
        last[:] = [r]
        return r.returncode == 0 and "<==" in r.stdout and r.stdout
    try:
        out = wait(logs, "the container's output", timeout=30)
    except TimeoutError:  # wait_until's: add what the kubelet and the agent said
        raise AssertionError(f"kubectl logs: rc {last[0].returncode}: {last[0].stdout[-1500:]}"
                             f"{last[0].stderr[-1500:]}\n--- kubelet\n"
                             f"{real_node.log('kubelet')[-3000:]}")
    s = sections(out)
    conf = set(s["/etc/elastic-gpu/vcuda.conf"])
    assert {f"EGPU_VCUDA_GPUS={uuid}", "EGPU_VCUDA_MEMORY_MIB=4096", "EGPU_VCUDA_CORE=30",
            "EGPU_VCUDA_CORE_LIMIT=30"} <= conf, out
    assert s["/etc/ld.so.preload"] == [str(build_dir / "src/vcuda/libegpu-vcuda.so")], out
    status = dict(line.split(":\t", 1) for line in s["/proc/self/status"] if ":\t" in line)
    assert status["Seccomp"] == "2", status  # SECCOMP_MODE_FILTER
    assert status["Uid"].split()[0] == "65535", status  # the image's user
    env = dict(line.split("=", 1) for line in s["/proc/self/environ"] if "=" in line)
    assert env.get("EGPU_ALLOC_DIR") == "/etc/elastic-gpu", env
    assert env.get("NVIDIA_VISIBLE_DEVICES") == uuid, env
    real_node.share_dir = alloc.group(1)


def test_deleting_the_pod_frees_its_devices(cluster, real_node, tenant):
    """Deleting the running pod: the kubelet stops it and the pod is gone, its IDs leave
    the kubelet's PodResources, and the agent removes the allocation dir no container
    holds any more."""
    d = getattr(real_node, "share_dir", None)
    assert d, "test_gpu_pod_runs_under_the_real_kubelet did not run the pod"
    st, out = cluster.call("DELETE", f"/api/v1/namespaces/{TENANT}/pods/share")
    assert st == 200, out
    wait(lambda: get_pod(cluster, "share") is None, "pod share gone", timeout=60)
    assert f"{TENANT}/share" not in real_node.pod_resources()
    wait(lambda: f"allocation dir removed dir={d}" in real_node.log("egpu-agent"),
         "the agent's cleanup of the allocation dir", timeout=30)
    assert not os.path.exists(d)


def test_no_request_of_the_kubelet_or_the_agent_was_refused(cluster, real_node):
    """Every request the real kubelet (system:node:<name>, Node authorizer and
    NodeRestriction) and egpu-agent (ServiceAccount egpu-agent, deploy/agent's RBAC) made
    against the API server was allowed: nothing answered 401 or 403."""
    users = (f"system:node:{NODE}", f"system:serviceaccount:{NS}:egpu-agent")
    events = [e for u in users for e in cluster.audit(u) if "objectRef" in e]
    assert {e["user"]["username"] for e in events} == set(users), "no requests audited"
    denied = [(e["user"]["username"], e["verb"], e["requestURI"],
               e["responseStatus"]["code"]) for e in events
              if e.get("responseStatus", {}).get("code") in (401, 403)]
    assert not denied, denied
    kinds = {(e["verb"], e["objectRef"]["resource"], e["objectRef"].get("subresource"))
             for e in events}
    assert {("create", "nodes", None), ("patch", "nodes", "status"),
            ("patch", "pods", "status"), ("create", "gpus", None),
            ("patch", "pods", None)} <= kinds, kinds
