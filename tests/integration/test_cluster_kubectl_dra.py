"""kubectl egpu inspect on a DRA-mode node of the real control plane (kube-apiserver,
kube-scheduler and kube-controller-manager v1.36 from tools/bin, deploy/ installed).

The node's ResourceSlice is published by src/agent/dra_slice.c for two fake H100 cards
(tests/tools/egpu-dra-slice, with egpu-agent's ServiceAccount token), three ResourceClaims
are allocated by the real kube-scheduler's allocator for three pods (no kubelet: they stay
bound and Pending, their claims allocated and reserved), so what kubectl-egpu reads is what
the API server stores and the scheduler writes (canonical quantities such as "4Gi",
shareIDs, reservedFor):

- two shares (30 % + 4096 MiB, 20 % + 8 GiB) land on the first card the allocator tries
  (gpu-0) and a claim that names no capacity takes a card whole (gpu-1: it consumes the
  slice's defaults, 100 and all of the memory, shown as numbers); inspect shows the
  node in DRA mode with exactly those rows, and -o json the shareIDs the scheduler chose;
- a user bound to docs/kubectl.md's elastic-gpu-viewer ClusterRole sees the same; a user who
  may list GPU objects but nothing of resource.k8s.io gets the device-plugin view and one
  warning naming the 403."""
import json
import os
import subprocess
import threading
import time

import pytest

from conftest import cluster_module  # noqa: F401  (tests/cluster on sys.path)
from cluster import wait_until as wait  # noqa: E402
from test_cluster_dra_slice import Publisher, make_node

NS = "kctl-dra"
NODE = "kctl-dra-1"
DRIVER = "gpu.elasticgpu.io"
CLASS = "kctl-dra.gpu-share"  # a DeviceClass of this test's own, on the driver
R = "/apis/resource.k8s.io/v1"


def now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Heartbeat:
    """Keeps NODE Ready as a kubelet would (status heartbeat and Lease every 2 s), so the
    node lifecycle controller (10 s here) neither taints it nor evicts."""

    def __init__(self, c):
        self.c, self.stop = c, threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)

    def beat(self):
        hb = now()
        alloc = {"cpu": "64", "memory": "256Gi", "pods": "110"}
        self.c.call("PATCH", f"/api/v1/nodes/{NODE}/status", {"status": {
            "capacity": alloc, "allocatable": alloc,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "ready", "lastHeartbeatTime": hb,
                            "lastTransitionTime": hb}]}},
            ctype="application/strategic-merge-patch+json")
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}"
        t = time.time()
        spec = {"holderIdentity": NODE, "leaseDurationSeconds": 40,
                "renewTime": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))
                + f".{int(t % 1 * 1e6):06d}Z"}
        st, _ = self.c.call("PATCH", path, {"spec": spec}, ctype="application/merge-patch+json")
        if st == 404:
            self.c.call("POST", path.rsplit("/", 1)[0], {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": NODE, "namespace": "kube-node-lease"}, "spec": spec})

    def run(self):
        while not self.stop.wait(2):
            self.beat()

    def __enter__(self):
        self.beat()
        self.t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.t.join(10)


def claim(c, name, requests):
    exactly = {"deviceClassName": CLASS, "allocationMode": "ExactCount", "count": 1}
    if requests:
        exactly["capacity"] = {"requests": requests}
    st, obj = c.call("POST", f"{R}/namespaces/{NS}/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}})
    assert st == 201, obj


def pod(c, name, claim_name):
    st, obj = c.call("POST", f"/api/v1/namespaces/{NS}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}],
                 "containers": [{"name": "main", "image": "busybox",
                                 "resources": {"claims": [{"name": "gpu"}]}}]}})
    assert st == 201, obj


def allocated(c, name):
    st, obj = c.call("GET", f"{R}/namespaces/{NS}/resourceclaims/{name}")
    assert st == 200, obj
    s = obj.get("status") or {}
    return s if s.get("allocation") and s.get("reservedFor") else None


def inspect(build_dir, kubeconfig, *args):
    exe = build_dir / "src/kubectl/kubectl-egpu"
    if not exe.exists():
        pytest.fail(f"{exe} not built: run `make build` first")
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    return subprocess.run([str(exe), "inspect", *args, "--kubeconfig", kubeconfig],
                          capture_output=True, text=True, timeout=60, env=env)


def user(c, name, rules):
    """A ServiceAccount of NS bound to a ClusterRole of rules: its kubeconfig."""
    for path, body in [
            (f"/api/v1/namespaces/{NS}/serviceaccounts",
             {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}),
            ("/apis/rbac.authorization.k8s.io/v1/clusterroles",
             {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
              "metadata": {"name": f"{NS}-{name}"}, "rules": rules}),
            ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
             {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
              "metadata": {"name": f"{NS}-{name}"},
              "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                          "name": f"{NS}-{name}"},
              "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NS}]})]:
        st, obj = c.call("POST", path, body)
        assert st in (201, 409), obj
    return c.sa_kubeconfig(NS, name)


# docs/kubectl.md, "Who may run it"
VIEWER = [{"apiGroups": ["elasticgpu.io"],
           "resources": ["gpus", "elasticgpus", "elasticgpuclaims", "gpubudgets"],
           "verbs": ["get", "list"]},
          {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices", "resourceclaims"],
           "verbs": ["get", "list"]}]


def test_inspect_a_dra_node(cluster, deployed, build_dir):
    assert cluster.version.startswith("v1.36"), cluster.version
    cluster.namespace(NS)
    node = make_node(cluster, NODE)
    st, obj = cluster.call("POST", f"{R}/deviceclasses", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": CLASS},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}})
    assert st in (201, 409), obj
    try:
        with Heartbeat(cluster):
            p = Publisher(build_dir, cluster.sa_kubeconfig("elastic-gpu-system", "egpu-agent"),
                          NODE, ["publish"])
            out = p.next()
            p.finish()
            assert out["rc"] == 0 and out["devices"] == 2, out
            claim(cluster, "train", {"cores": "30", "memory": "4096Mi"})
            claim(cluster, "infer", {"cores": "20", "memory": "8Gi"})
            claim(cluster, "whole", None)
            for name in ("train", "infer", "whole"):
                pod(cluster, f"{name}-0", name)
                try:
                    wait(lambda n=name: allocated(cluster, n), f"claim {name} allocated", 60)
                except TimeoutError:
                    st, o = cluster.call("GET", f"/api/v1/namespaces/{NS}/pods/{name}-0")
                    st, ev = cluster.call("GET", f"/api/v1/namespaces/{NS}/events")
                    st, nd = cluster.call("GET", f"/api/v1/nodes/{NODE}")
                    raise AssertionError(json.dumps([o.get("status"), [
                        e.get("message") for e in ev.get("items", [])], nd.get("spec"),
                        nd["status"].get("conditions")], indent=1))
            shares = {n: allocated(cluster, n)["allocation"]["devices"]["results"][0]
                      for n in ("train", "infer", "whole")}
            assert [shares[n]["device"] for n in ("train", "infer", "whole")] == [
                "gpu-0", "gpu-0", "gpu-1"], shares
            assert shares["train"]["consumedCapacity"] == {"cores": "30", "memory": "4Gi"}

            r = inspect(build_dir, str(cluster.kubeconfig), NODE)
            assert (r.returncode, r.stderr) == (0, ""), r.stderr
            rows = [line.split() for line in r.stdout.splitlines()]
            assert rows[0][:3] == ["NODE", "MODE", "GPU"], r.stdout
            assert rows[1][:3] == [NODE, "dra", "0"] and rows[1][-3:] == [
                "Healthy", "50/100", "12288/81920"], r.stdout
            assert sorted(rows[2:4]) == sorted([
                ["20", "8192", f"{NS}/infer-0", "<none>", "infer"],
                ["30", "4096", f"{NS}/train-0", "<none>", "train"]]), r.stdout
            assert rows[4][:3] == [NODE, "dra", "1"] and rows[4][-2:] == [
                "100/100", "81920/81920"], r.stdout
            # A claim naming no capacity consumes the slice's defaults: the whole card.
            assert rows[5] == ["100", "81920", f"{NS}/whole-0", "<none>", "whole"], r.stdout
            assert rows[6] == [NODE, "total", "150/200", "(75%)", "94208/163840", "(57%)"]
            assert rows[1][3] == "H100-80GB", rows[1]  # the fake backend's model

            doc = json.loads(inspect(build_dir, str(cluster.kubeconfig), NODE, "-o",
                                     "json").stdout)
            (n,) = doc["nodes"]
            assert n["name"] == NODE and n["mode"] == "dra"
            pods = {p["claim"]: p for g in n["gpus"] for p in g["pods"]}
            assert pods["train"] == {
                "namespace": NS, "pod": "train-0", "container": None, "core": 30,
                "memory": 4096, "claim": "train", "shareID": shares["train"]["shareID"],
                "reservedFor": ["train-0"]}
            assert pods["whole"]["shareID"] == shares["whole"].get("shareID")

            # docs/kubectl.md's ClusterRole suffices; without resource.k8s.io, a warning.
            viewer = user(cluster, "viewer", VIEWER)
            r2 = inspect(build_dir, viewer, NODE)
            assert (r2.returncode, r2.stdout, r2.stderr) == (0, r.stdout, "")
            blind = user(cluster, "blind", VIEWER[:1])
            r3 = inspect(build_dir, blind)
            assert r3.returncode == 0, r3.stderr
            first = r3.stderr.splitlines()[0]
            assert first.startswith("kubectl-egpu: warning: listing resourceslices."
                                    "resource.k8s.io from https://"), r3.stderr
            assert first.endswith(": HTTP 403 Forbidden; DRA-mode cards and shares are not "
                                  "shown"), r3.stderr
            assert NODE not in r3.stdout
    finally:
        # Nothing left for later tests of the session: no pod, no claim allocated on a pool
        # that is gone (kubectl-egpu would warn about it), no class, node or slice (the
        # slice goes with its Node).
        for name in ("train", "infer", "whole"):
            cluster.call("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}-0?gracePeriodSeconds=0")
            cluster.call("DELETE", f"{R}/namespaces/{NS}/resourceclaims/{name}")
        cluster.call("DELETE", f"{R}/deviceclasses/{CLASS}")
        cluster.call("DELETE", f"/api/v1/nodes/{NODE}")
        wait(lambda: cluster.call("GET", f"{R}/namespaces/{NS}/resourceclaims")[1].get(
            "items") == [], "the test's claims gone", 60)
    assert node["metadata"]["name"] == NODE
