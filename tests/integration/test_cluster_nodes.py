"""GPU nodes of the real control plane: the fake kubelet of
tests/kubelet with the kubelet's identity (system:node:<name>, group system:nodes) and
egpu-agent as deploy/agent/daemonset.yaml runs it with ServiceAccount egpu-agent's token
(tests/cluster/node.py says what each does and what differs from deploy/).

- The node registers its Node with the device plugin's elasticgpu.io/gpu-core in capacity
  and allocatable (100 IDs per card), the agent publishes a GPU object per card, and the
  node lifecycle controller keeps the node Ready and untainted while the Lease is renewed
  (for longer than its grace period, 10 s here); once renewals stop it is NotReady and
  tainted unreachable, as the real controller does.
- The Node authorizer and NodeRestriction hold the node to itself: it may not change
  another node's status, and the agent's ServiceAccount may not change a Node at all.
- A pod bound to the node runs: admitted through the device plugin (the agent's
  GetPreferredAllocation, Allocate, PreStartContainer), then Running; a pod with a GPU
  share but no elasticgpu.io/assigned (bound around the extender) is refused by the agent's
  PreStartContainer, its container waiting with CreateContainerError and the agent's message;
  a deleted pod frees its devices.
- Every request egpu-agent made was allowed by the RBAC deploy/agent grants it.
- A node stopped (Node.stop, DRANode.stop) takes its Node, Lease, GPU objects and
  ResourceSlices out of the cluster, so a later test of the same cluster sees none of them."""
import time

import pytest

from conftest import cluster_module  # noqa: F401  (tests/cluster on sys.path)
import dra_node  # tests/cluster/dra_node.py
import node as nodes  # tests/cluster/node.py
from cluster import wait_until as wait  # noqa: E402

NS = "elastic-gpu-system"
TENANT = "node-tenant"


@pytest.fixture(scope="module")
def gpu_node(cluster, deployed, build_dir):
    n = nodes.Node(cluster, "gpu-node-1", build_dir, labels={"pool": "nodes-test"}).start()
    yield n
    n.stop()


def node_obj(cluster, name):
    st, n = cluster.call("GET", f"/api/v1/nodes/{name}")
    assert st == 200, n
    return n


def ready(n):
    return {c["type"]: c["status"] for c in n["status"].get("conditions", [])}.get("Ready")


def test_node_registers_with_its_gpus_and_stays_ready(cluster, gpu_node):
    n = node_obj(cluster, "gpu-node-1")
    assert n["status"]["allocatable"]["elasticgpu.io/gpu-core"] == "200", n["status"]
    assert n["status"]["capacity"]["elasticgpu.io/gpu-core"] == "200"

    def gpus():
        st, lst = cluster.call("GET", "/apis/elasticgpu.io/v1alpha1/gpus")
        return [g for g in lst.get("items", []) if g["spec"]["nodeName"] == "gpu-node-1"] \
            if st == 200 else []
    found = wait(lambda: len(gpus()) == 2 and gpus(), "the agent's GPU objects")
    assert {g["spec"]["index"] for g in found} == {0, 1}
    # past the node monitor's grace period (10 s), still Ready and not tainted
    time.sleep(12)
    n = node_obj(cluster, "gpu-node-1")
    assert ready(n) == "True", n["status"]["conditions"]
    assert not n["spec"].get("taints"), n["spec"]
    assert not gpu_node.errors, gpu_node.errors


def test_node_restriction_holds_the_node_to_itself(cluster, gpu_node):
    st, _ = cluster.call("POST", "/api/v1/nodes", {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "other-node"}})
    assert st == 201
    st, err = gpu_node.call("PATCH", "/api/v1/nodes/other-node/status",
                            {"status": {"allocatable": {"elasticgpu.io/gpu-core": "800"}}},
                            ctype="application/strategic-merge-patch+json")
    assert st == 403, (st, err)
    st, err = cluster.call("PATCH", "/api/v1/nodes/gpu-node-1/status",
                           {"status": {"allocatable": {"elasticgpu.io/gpu-core": "800"}}},
                           ctype="application/strategic-merge-patch+json",
                           token=cluster.token(NS, "egpu-agent"))
    assert st == 403, (st, err)
    cluster.call("DELETE", "/api/v1/nodes/other-node")


@pytest.fixture(scope="module")
def tenant(cluster, deployed):
    cluster.kubectl("create", "namespace", TENANT)
    return TENANT


def bound_pod(name, core=None, node="gpu-node-1"):
    c = {"name": "main", "image": "busybox:1"}
    if core:
        res = {"elasticgpu.io/gpu-core": str(core), "elasticgpu.io/gpu-memory": "1024"}
        c["resources"] = {"requests": res, "limits": res}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": TENANT},
            "spec": {"nodeName": node, "containers": [c]}}


def test_pods_bound_to_the_node_run_and_go(cluster, gpu_node, tenant, webhook):
    st, p = cluster.call("POST", f"/api/v1/namespaces/{TENANT}/pods", bound_pod("plain"))
    assert st == 201, p
    p = gpu_node.pod(TENANT, "plain")
    assert p["status"]["containerStatuses"][0]["ready"] is True

    # a share bound around the extender: no elasticgpu.io/assigned, the agent refuses it
    st, p = cluster.call("POST", f"/api/v1/namespaces/{TENANT}/pods", bound_pod("stray", 30))
    assert st == 201, p

    def waiting():
        st, p = cluster.call("GET", f"/api/v1/namespaces/{TENANT}/pods/stray")
        cs = p.get("status", {}).get("containerStatuses") or [{}]
        return cs[0].get("state", {}).get("waiting")
    w = wait(waiting, "stray's container waiting")
    assert w["reason"] == "CreateContainerError", w
    assert "stray" in w["message"] and "elasticgpu.io/assigned" in w["message"], w
    adm = gpu_node.admitted[f"{TENANT}/stray"]["main"]
    assert adm.calls[-1] == "PreStartContainer", adm.calls
    held = gpu_node.kubelet.devices_in_use("elasticgpu.io/gpu-core")
    assert len(held) == 30

    for name in ("plain", "stray"):
        st, _ = cluster.call("DELETE", f"/api/v1/namespaces/{TENANT}/pods/{name}")
        assert st == 200
    wait(lambda: cluster.call("GET", f"/api/v1/namespaces/{TENANT}/pods/stray")[0] == 404,
         "stray deleted by its node")
    assert not gpu_node.kubelet.devices_in_use("elasticgpu.io/gpu-core")
    assert not gpu_node.errors, gpu_node.errors


def test_agent_calls_are_allowed_by_its_rbac(cluster, gpu_node):
    user = f"system:serviceaccount:{NS}:egpu-agent"
    events = [e for e in cluster.audit(user) if "objectRef" in e]
    assert events, f"no request of {user} in the audit log"
    denied = [(e["verb"], e["requestURI"], e["responseStatus"]["code"]) for e in events
              if e.get("responseStatus", {}).get("code") in (401, 403)
              and not e["requestURI"].startswith("/api/v1/nodes/gpu-node-1/status")]
    assert not denied, denied
    assert {"gpus"} <= {e["objectRef"]["resource"] for e in events if e["verb"] == "create"}


def test_node_whose_lease_stops_goes_not_ready(cluster, deployed, build_dir):
    n = nodes.Node(cluster, "gpu-node-2", build_dir).start()
    try:
        wait(lambda: ready(node_obj(cluster, "gpu-node-2")) == "True", "gpu-node-2 Ready")
    finally:
        n.stop(forget=False)  # a machine that died: its Node stays
    try:
        t = wait(lambda: any(t["key"] == "node.kubernetes.io/unreachable" for t in
                             node_obj(cluster, "gpu-node-2")["spec"].get("taints") or []),
                 "gpu-node-2 tainted unreachable", timeout=60)
        assert ready(node_obj(cluster, "gpu-node-2")) == "Unknown"
    finally:
        assert nodes.forget_node(cluster, "gpu-node-2") == []


def objects_of(cluster, name):
    """What of node name the cluster has: {kind: [names]} of those there."""
    got = {}
    for kind, path in (("Node", f"/api/v1/nodes/{name}"),
                       ("Lease", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/"
                                 f"leases/{name}")):
        st, obj = cluster.call("GET", path)
        assert st in (200, 404), (path, st, obj)
        if st == 200:
            got[kind] = [name]
    st, lst = cluster.call("GET", "/apis/elasticgpu.io/v1alpha1/gpus")
    assert st == 200, lst
    gpus = [g["metadata"]["name"] for g in lst["items"] if g["spec"].get("nodeName") == name]
    st, lst = cluster.call("GET", "/apis/resource.k8s.io/v1/resourceslices"
                           f"?fieldSelector=spec.nodeName%3D{name}")
    assert st == 200, lst
    slices = [x["metadata"]["name"] for x in lst["items"]]
    for kind, names in (("GPU", gpus), ("ResourceSlice", slices)):
        if names:
            got[kind] = names
    return got


@pytest.mark.parametrize("mode", ["device-plugin", "dra"])
def test_a_stopped_node_leaves_nothing_behind(cluster, deployed, build_dir, mode):
    name = f"gone-{mode}"
    make = dra_node.DRANode if mode == "dra" else nodes.Node
    n = make(cluster, name, build_dir).start()
    try:
        want = {"Node", "Lease", "GPU"} | ({"ResourceSlice"} if mode == "dra" else set())
        wait(lambda: set(objects_of(cluster, name)) == want, f"{name}'s objects: {want}")
        assert len(objects_of(cluster, name)["GPU"]) == 2
    finally:
        n.stop()
    assert objects_of(cluster, name) == {}
    assert n.errors == [], n.errors
