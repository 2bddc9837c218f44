"""ElasticGPUClaims in DRA mode on the real control plane (tests/cluster/cluster.py: etcd,
kube-apiserver, kube-controller-manager, kube-scheduler), end to end.

egpu-webhook --mode dra (test_cluster_dra_webhook.py's dra_webhook fixture: deploy/'s webhook
configurations pointed at it over TLS), egpu-controller --mode dra (as deploy/ runs it,
components.controller) and one DRA node (tests/cluster/dra_node.py: egpu-agent --mode dra
publishing its ResourceSlice, the fake kubelet's DRA manager preparing the claims).

The gpushare example of the README's ElasticGPUClaim model, written as in device-plugin
mode (deploy/examples/claim.yaml's shape): an ElasticGPUClass of the gpushare provisioner,
two ElasticGPUClaims of 30% + 4096 MiB, and two pods each naming one claim by the
annotation egpuc.elasticgpu.io/<container>. Unchanged, in DRA mode:

- each pod is admitted with spec.resourceClaims {egpu-0: resourceClaimName
  elasticgpu-<claim>} and its container's resources.claims {egpu-0, request gpu}, no
  elasticgpu.io request left but the marker elasticgpu.io/dra, schedulerName
  elastic-gpu-scheduler, and no elasticgpu.io/dra-claims annotation;
- the controller makes the DeviceClass elasticgpu-<class> and the ResourceClaims
  elasticgpu-<claim>; a real kube-scheduler with elastic-gpu-scheduler's profile
  (deploy/scheduler's configuration without the extender:
  components.kube_scheduler_alone_config; test_cluster_dra_extender.py runs the extender)
  allocates both on the DRA node's first card
  (30 cores and 4Gi each), the node prepares them and the pods run;
- both ElasticGPUClaims become Bound, with the consumed capacity in status.capacity;
- a pod naming an ElasticGPUClaim that does not exist in its namespace is refused, naming
  the claim.
Without the control plane binaries the tests skip, except under CI=true, where they fail."""
import json

import pytest

import components  # noqa: E402  (tests/cluster/components.py)
import dra_node  # noqa: E402  (tests/cluster/dra_node.py)
from cluster import wait_until as wait  # noqa: E402
from test_cluster_dra_webhook import dra_webhook  # noqa: F401  (a fixture)

NS = "dra-egpuc"
NODE = "dra-egpuc-gpu-1"
CLASS = "dra-egpuc-share"
SCHED = "kube-dra-egpuc"
EGPU = "/apis/elasticgpu.io/v1alpha1"
RES = "/apis/resource.k8s.io/v1"


def example_objects():
    """The class, the two claims and the two pods, as a user writes them for device-plugin
    mode."""
    cls = {"apiVersion": "elasticgpu.io/v1alpha1", "kind": "ElasticGPUClass",
           "metadata": {"name": CLASS}, "provisioner": "gpushare.provisioner.elasticgpu.io",
           "parameters": {"policy": "binpack"}, "reclaimPolicy": "Delete",
           "bindingMode": "Immediate"}
    claims = [{"apiVersion": "elasticgpu.io/v1alpha1", "kind": "ElasticGPUClaim",
               "metadata": {"name": f"gpushare-claim-{x}", "namespace": NS},
               "spec": {"elasticGPUClassName": CLASS, "resources": {"requests": {
                   "elasticgpu.io/gpu-core": 30, "elasticgpu.io/gpu-memory": 4096}}}}
              for x in ("a", "b")]
    pods = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"gpushare-pod-{x}", "namespace": NS,
                          "annotations": {"egpuc.elasticgpu.io/cuda": f"gpushare-claim-{x}"}},
             "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                      "containers": [{"name": "cuda", "image": "nvidia/cuda:12.4.1-base",
                                      "command": ["sh", "-c", "nvidia-smi && sleep 3600"],
                                      "resources": {"requests": {"cpu": "100m"}}}]}}
            for x in ("a", "b")]
    return cls, claims, pods


@pytest.fixture(scope="module")
def setup(cluster, deployed, dra_webhook, build_dir, tmp_path_factory):  # noqa: F811
    cluster.namespace(NS)
    ctl = components.controller(cluster, build_dir, tmp_path_factory.mktemp("egpuc-ctl"),
                                extra=("--mode", "dra", "--leader-elect", "false",
                                       "--resync-seconds", "2"))
    node = dra_node.DRANode(cluster, NODE, build_dir).start()
    # The pods' scheduler, elastic-gpu-scheduler (the webhook names it), here without its
    # extender: these pods' placement is test_cluster_dra_extender.py's.
    cluster.start_scheduler(components.kube_scheduler_alone_config(), name=SCHED)
    try:
        yield node
    finally:
        cluster.stop_process(SCHED)
        st, lst = cluster.call("GET", f"/api/v1/namespaces/{NS}/pods")
        for p in lst.get("items", []) if st == 200 else []:
            cluster.call("DELETE", f"/api/v1/namespaces/{NS}/pods/{p['metadata']['name']}",
                         {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
        try:
            wait(lambda: not cluster.call("GET", f"/api/v1/namespaces/{NS}/pods")[1]
                 .get("items"), "pods gone", 30)
        finally:
            node.stop()
            ctl.stop()
            cluster.call("DELETE", f"{EGPU}/elasticgpuclasses/{CLASS}")
            cluster.call("DELETE", f"/api/v1/namespaces/{NS}")


def get(cluster, path):
    st, obj = cluster.call("GET", path)
    assert st == 200, (path, obj)
    return obj


def test_gpushare_example_runs_in_dra_mode(cluster, setup):
    node = setup
    cls, claims, pods = example_objects()
    st, out = cluster.call("POST", f"{EGPU}/elasticgpuclasses", cls)
    assert st in (201, 409), out
    for c in claims:
        st, out = cluster.call("POST", f"{EGPU}/namespaces/{NS}/elasticgpuclaims", c)
        assert st == 201, out
    admitted = {}
    for p in pods:
        st, got = cluster.call("POST", f"/api/v1/namespaces/{NS}/pods", p)
        assert st == 201, got
        admitted[p["metadata"]["name"]] = got
    for x in ("a", "b"):
        got = admitted[f"gpushare-pod-{x}"]
        assert got["spec"]["resourceClaims"] == [
            {"name": "egpu-0", "resourceClaimName": f"elasticgpu-gpushare-claim-{x}"}], got
        ctr = got["spec"]["containers"][0]
        assert ctr["resources"]["claims"] == [{"name": "egpu-0", "request": "gpu"}], ctr
        for kind in ("requests", "limits"):
            assert [k for k in ctr["resources"][kind] if k.startswith("elasticgpu.io/")] == \
                ["elasticgpu.io/dra"], ctr
            assert ctr["resources"][kind]["elasticgpu.io/dra"] == "1", ctr
        assert "elasticgpu.io/dra-claims" not in got["metadata"]["annotations"], got
        assert got["spec"].get("schedulerName") == "elastic-gpu-scheduler", got["spec"]

    dc = wait(lambda: (lambda r: r[1] if r[0] == 200 else None)(
        cluster.call("GET", f"{RES}/deviceclasses/elasticgpu-{CLASS}")),
        "the class's DeviceClass", timeout=60)
    assert dc["metadata"]["ownerReferences"][0]["name"] == CLASS

    results = {}
    for x in ("a", "b"):
        name = f"elasticgpu-gpushare-claim-{x}"
        rc = wait(lambda: (lambda r: r[1] if r[0] == 200 and
                           r[1].get("status", {}).get("allocation") else None)(
            cluster.call("GET", f"{RES}/namespaces/{NS}/resourceclaims/{name}")),
            f"kube-scheduler to allocate {name}", timeout=90)
        (r,) = rc["status"]["allocation"]["devices"]["results"]
        assert r["driver"] == "gpu.elasticgpu.io" and r["pool"] == NODE, r
        assert r["consumedCapacity"] == {"cores": "30", "memory": "4Gi"}, r
        assert rc["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == \
            f"elasticgpu-{CLASS}", rc["spec"]
        assert [o["name"] for o in rc["status"]["reservedFor"]] == [f"gpushare-pod-{x}"], rc
        results[x] = r
        pod = node.pod(NS, f"gpushare-pod-{x}", timeout=90)
        assert pod["spec"]["nodeName"] == NODE
    # One card, shared: the allocator's first fit, each share its own.
    assert results["a"]["device"] == results["b"]["device"], results
    assert results["a"]["shareID"] != results["b"]["shareID"], results

    for x in ("a", "b"):
        c = wait(lambda: (lambda o: o if o.get("status", {}).get("phase") == "Bound" else None)(
            get(cluster, f"{EGPU}/namespaces/{NS}/elasticgpuclaims/gpushare-claim-{x}")),
            f"ElasticGPUClaim gpushare-claim-{x} Bound", timeout=60)
        cap = c["status"].get("capacity") or {}
        assert str(cap.get("elasticgpu.io/gpu-core")) == "30", c["status"]
        assert str(cap.get("elasticgpu.io/gpu-memory")) == "4096", c["status"]
    assert node.errors == []


def test_missing_claim_is_refused(cluster, setup):
    _, _, pods = example_objects()
    pod = pods[0]
    pod["metadata"]["name"] = "gpushare-pod-missing"
    pod["metadata"]["annotations"] = {"egpuc.elasticgpu.io/cuda": "no-such-claim"}
    st, out = cluster.call("POST", f"/api/v1/namespaces/{NS}/pods", pod)
    assert st == 403, out
    assert (f"annotation egpuc.elasticgpu.io/cuda: ElasticGPUClaim {NS}/no-such-claim not "
            "found") in out["message"], out
