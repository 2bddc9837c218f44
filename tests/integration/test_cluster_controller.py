"""egpu-controller against the real control plane: run as
deploy/controller/deployment.yaml runs it, with ServiceAccount egpu-controller's token
(tests/cluster/components.py), over a GPU node of tests/cluster/node.py (the fake kubelet
and egpu-agent, which publishes the GPU objects).

- An Immediate class's claim is provisioned an ElasticGPU named egpu-<claim uid> on a card of
  the node (one of the GPU objects the agent published) with the claim's capacity, and bound
  (claimRef, then the claim's status: Bound); deleting the claim (the real API server's finalizers and
  deletionTimestamp) releases and deletes the ElasticGPU under reclaimPolicy Delete.
- Leader election over the real Lease API (coordination.k8s.io/v1): of two controllers only
  the Lease holder reconciles, and when it is killed the other takes the Lease and binds the
  next claim.
- Every request the controller made was allowed by the RBAC deploy/controller grants it, and
  one outside its grants is forbidden."""
import signal
import time

import pytest

import components  # noqa: E402  (tests/cluster/components.py, on conftest's sys.path)
import node as nodes
from test_controller import G, claim, egpu, mkclaim, mkclass, phase, wait, wait_phase  # noqa: F401

NS = "elastic-gpu-system"
TENANT = "claims-tenant"
LEASE = "elastic-gpu-controller"


def lease_holder(cluster):
    st, lease = cluster.call("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{LEASE}")
    return lease["spec"].get("holderIdentity") if st == 200 else None


def leader_metric(c):
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{c.ports[0]}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("egpu_controller_leader "):
                return float(line.split()[-1])
    return None


@pytest.fixture(scope="module")
def claims_world(cluster, deployed, webhook, build_dir, tmp_path_factory):
    """A GPU node labelled pool=claims-test with the mock's two A100 80GB cards, the class
    share (Immediate, Delete, on that pool), and namespace claims-tenant."""
    n = nodes.Node(cluster, "claims-node", build_dir, labels={"pool": "claims-test"}).start()
    try:
        cluster.kubectl("create", "namespace", TENANT)
        mkclass(cluster, "share-real", params={"nodeSelector": "pool=claims-test"})
        yield n
    finally:
        n.stop()


def test_claim_is_provisioned_bound_and_reclaimed(cluster, claims_world, tmp_path):
    c = components.controller(cluster, claims_world.build, tmp_path,
                              extra=("--resync-seconds", "2"))
    try:
        out = mkclaim(cluster, "train", core=30, mem=4096, cls="share-real", ns=TENANT)
        uid = out["metadata"]["uid"]
        got = wait_phase(cluster, lambda a, n: claim(a, n, ns=TENANT), "train", "Bound",
                         timeout=60)
        e = egpu(cluster, f"egpu-{uid}")
        assert e and phase(e) == "Bound", e
        assert e["spec"]["nodeName"] == "claims-node", e["spec"]
        assert e["spec"]["claimRef"]["uid"] == uid, e["spec"]
        assert got["status"].get("elasticGPUName", got["spec"].get("elasticGPUName")) == \
            f"egpu-{uid}", got
        assert {k: str(v) for k, v in e["spec"]["capacity"].items()} == {
            "elasticgpu.io/gpu-core": "30", "elasticgpu.io/gpu-memory": "4096"}, e["spec"]
        gpus = {g["metadata"]["name"] for g in cluster.call("GET", f"{G}/gpus")[1]["items"]
                if g["spec"]["nodeName"] == "claims-node"}
        assert e["spec"]["gpuShare"]["gpuName"] in gpus, (e["spec"], gpus)

        st, _ = cluster.call("DELETE", f"{G}/namespaces/{TENANT}/elasticgpuclaims/train")
        assert st == 200
        wait(lambda: egpu(cluster, f"egpu-{uid}") is None, "the ElasticGPU deleted", timeout=60)
        wait(lambda: claim(cluster, "train", ns=TENANT) is None, "the claim gone", timeout=60)
    finally:
        c.stop()
    user = f"system:serviceaccount:{NS}:egpu-controller"
    events = [e for e in cluster.audit(user) if "objectRef" in e]
    assert events, f"no request of {user} in the audit log"
    denied = [(e["verb"], e["requestURI"], e["responseStatus"]["code"]) for e in events
              if e.get("responseStatus", {}).get("code") in (401, 403)]
    assert not denied, denied
    st, err = cluster.call("DELETE", "/api/v1/namespaces/kube-system",
                           token=cluster.token(NS, "egpu-controller"))
    assert st == 403, err


def test_only_the_lease_holder_reconciles(cluster, claims_world, tmp_path):
    fast = ("--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "1")
    a = components.controller(cluster, claims_world.build, tmp_path, "ctl-a", fast)
    b = None
    try:
        wait(lambda: leader_metric(a) == 1, "ctl-a leads", timeout=30)
        b = components.controller(cluster, claims_world.build, tmp_path, "ctl-b", fast)
        time.sleep(3)
        assert leader_metric(b) == 0
        holder = lease_holder(cluster)
        assert holder, "no Lease holder"
        a.stop(signal.SIGKILL)
        wait(lambda: leader_metric(b) == 1, "ctl-b takes over", timeout=30)
        assert lease_holder(cluster) not in (None, holder)
        mkclaim(cluster, "after-failover", core=20, mem=2048, cls="share-real", ns=TENANT)
        wait_phase(cluster, lambda x, n: claim(x, n, ns=TENANT), "after-failover", "Bound",
                   timeout=60)
    finally:
        a.stop(signal.SIGKILL)
        if b:
            b.stop()
