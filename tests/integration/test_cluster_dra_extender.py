"""DRA mode with the extender, on the real control plane (issue 26: "FGD picks the node of a
DRA pod"): tests/cluster/cluster.py's etcd, kube-apiserver, kube-controller-manager, and

- egpu-webhook --mode dra as deploy/ runs it (test_cluster_dra_webhook.py's dra_webhook
  fixture: deploy/'s webhook configurations pointed at it over TLS): a GPU pod's
  elasticgpu.io request becomes a ResourceClaimTemplate and the pod's resourceClaims, its
  container gets the marker elasticgpu.io/dra "1", the pod schedulerName
  elastic-gpu-scheduler;
- egpu-controller --mode dra as deploy/ runs it (components.controller): it creates the
  templates the pods' annotation elasticgpu.io/dra-claims lists, and the real
  kube-controller-manager makes each pod's ResourceClaim from them;
- two DRA nodes (tests/cluster/dra_node.py: egpu-agent --mode dra publishing a
  ResourceSlice of one H100-80GB card, the fake kubelet's DRA manager preparing claims);
- the scheduler pod of deploy/scheduler (components.SchedulerPair): egpu-scheduler as its
  Deployment runs it, with --dra (as deploy/dra adds it), --node-policy fgd and a pinned
  --target-workload (TARGET: shares
  of 30% and 70%), and a kube-scheduler with deploy/scheduler/scheduler-config.yaml, the
  profile elastic-gpu-scheduler whose extender lists elasticgpu.io/dra in managedResources
  (ignoredByScheduler), so that it calls egpu-scheduler for a DRA pod;
- a kube-scheduler of that configuration without its extender, profile dra-alone
  (components.kube_scheduler_alone_config): kube-scheduler alone.

The case: node A's card holds an earlier claim of 70 cores and 40960 MiB, and its pod asks 16
CPUs and 64 GiB (a quarter of the node), node B is empty. A pod asking 30 cores and 4096 MiB,
1 CPU and 4 GiB (in both nodes' balance), may go to either (nodeSelector: the two nodes). Alone,
kube-scheduler's NodeResourcesFit (LeastAllocated) scores B higher and its allocator has a
card there: the pod lands on B. With the extender, FGD scores A (the share fills A's card, so
A's last 30%, which the 70% half of the target workload cannot use, is no longer a fragment;
on B it would leave 70%, which both halves can use, and A's 30% stranded) with weight 5
against kube-scheduler's plugins: the pod is bound by egpu-scheduler to A, its claim allocated
on A's card, whose two claims then consume 100 cores and 45056 MiB. So the second test fails wherever the extender does not place DRA pods.
Without the control plane binaries the tests skip, except under CI=true, where they fail."""
import json

import pytest

import components  # noqa: E402  (tests/cluster/components.py)
import dra_node  # noqa: E402  (tests/cluster/dra_node.py)
from cluster import wait_until as wait  # noqa: E402
from test_cluster_dra_webhook import dra_webhook  # noqa: F401  (a fixture)

NS = "dra-ext"
NODE_A, NODE_B = "dra-ext-a", "dra-ext-b"
POOL = "elasticgpu.io/test-pool"  # a label of this module's two nodes only
RES = "/apis/resource.k8s.io/v1"
DRIVER = "gpu.elasticgpu.io"
ALONE = "dra-alone"  # the profile of kube-scheduler alone
SCHED_USER = "system:serviceaccount:elastic-gpu-system:egpu-scheduler"
MARKER = "elasticgpu.io/dra"
TARGET = {"apiVersion": "elasticgpu.io/v1alpha1", "kind": "TargetWorkload",
          "typicalPods": [{"cpuMilli": 1000, "gpuMilli": 300, "gpus": 1, "weight": 0.5},
                          {"cpuMilli": 1000, "gpuMilli": 700, "gpus": 1, "weight": 0.5}]}
UNITS = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 * 1024}


def mib(q):
    """A memory quantity of the API server's canonical form ("40Gi", "4096Mi") in MiB."""
    for suffix, f in UNITS.items():
        if q.endswith(suffix):
            return int(q[:-len(suffix)]) * f
    return int(q) / (1 << 20)


def get(cluster, path):
    st, obj = cluster.call("GET", path)
    assert st == 200, (path, obj)
    return obj


def make_pod(cluster, name, core, memory_mib, cpu, memory, selector, scheduler=None):
    """A pod of NS asking core percent and memory_mib MiB of one card (elasticgpu.io, as a
    user writes it; the webhook rewrites it), cpu and memory, on the nodes of selector;
    schedulerName scheduler when given (the webhook keeps a pod's own)."""
    limits = {"elasticgpu.io/gpu-core": str(core), "elasticgpu.io/gpu-memory": str(memory_mib),
              "cpu": cpu, "memory": memory}
    spec = {"containers": [{"name": "train", "image": "busybox:1",
                            "resources": {"limits": limits}}],
            "nodeSelector": selector, "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0}
    if scheduler:
        spec["schedulerName"] = scheduler
    st, got = cluster.call("POST", f"/api/v1/namespaces/{NS}/pods",
                           {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                            "spec": spec})
    assert st == 201, got
    ctr = got["spec"]["containers"][0]
    assert ctr["resources"]["limits"][MARKER] == "1", ctr
    assert ctr["resources"]["claims"] == [{"name": "egpu-0", "request": "gpu"}], ctr
    return got


def claim_of(cluster, pod):
    """The allocated ResourceClaim of pod (its pod claim egpu-0), once allocated."""
    def allocated():
        p = get(cluster, f"/api/v1/namespaces/{NS}/pods/{pod}")
        st = {s["name"]: s.get("resourceClaimName")
              for s in p.get("status", {}).get("resourceClaimStatuses") or []}
        if not st.get("egpu-0"):
            return None
        c = get(cluster, f"{RES}/namespaces/{NS}/resourceclaims/{st['egpu-0']}")
        return c if c.get("status", {}).get("allocation") else None
    return wait(allocated, f"the claim of {pod} allocated", timeout=120)


def result(claim):
    (r,) = claim["status"]["allocation"]["devices"]["results"]
    return r


def bound_node(cluster, pod, timeout=120):
    def node():
        return get(cluster, f"/api/v1/namespaces/{NS}/pods/{pod}")["spec"].get("nodeName")
    try:
        return wait(node, f"{pod} bound", timeout=timeout)
    except TimeoutError:
        p = get(cluster, f"/api/v1/namespaces/{NS}/pods/{pod}")
        st, evs = cluster.call("GET", f"/api/v1/namespaces/{NS}/events"
                               f"?fieldSelector=involvedObject.name%3D{pod}")
        raise AssertionError(f"{pod} not bound: {json.dumps(p.get('status'))[:1500]}; events "
                             f"{[e['message'] for e in evs.get('items', [])][-5:]}") from None


def binders(cluster, pod):
    """The users whose Binding of pod the API server created (the audit log)."""
    return {e["user"]["username"] for e in cluster.audit()
            if e.get("objectRef", {}).get("subresource") == "binding"
            and e["objectRef"].get("name") == pod and e["objectRef"].get("namespace") == NS
            and e.get("stage") == "ResponseComplete" and e["responseStatus"]["code"] == 201}


def delete_pod(cluster, name, claim):
    cluster.call("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}",
                 {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
    wait(lambda: cluster.call("GET", f"/api/v1/namespaces/{NS}/pods/{name}")[0] == 404,
         f"{name} gone", timeout=60)
    # kube-controller-manager deletes the pod's claim (it owns it): the card is free again.
    wait(lambda: cluster.call("GET", f"{RES}/namespaces/{NS}/resourceclaims/{claim}")[0] == 404,
         f"the claim {claim} of {name} gone", timeout=90)


@pytest.fixture(scope="module")
def env(cluster, deployed, dra_webhook, build_dir, tmp_path_factory):  # noqa: F811
    """The module's system (see its docstring), and the earlier pod on A, Running, with its
    claim of 70 cores and 40960 MiB allocated on A's card."""
    assert any(o["kind"] == "DeviceClass" and o["metadata"]["name"] == "gpu-share.elasticgpu.io"
               for o in deployed), "deploy/ has no DeviceClass gpu-share.elasticgpu.io"
    d = tmp_path_factory.mktemp("dra-ext")
    cluster.namespace(NS)
    target = d / "target_workload.json"
    target.write_text(json.dumps(TARGET))
    stop = []
    try:
        ctl = components.controller(cluster, build_dir, d,
                                    extra=("--mode", "dra", "--leader-elect", "false",
                                           "--resync-seconds", "2"))
        stop.append(ctl.stop)
        nodes = {}
        for n in (NODE_A, NODE_B):
            nodes[n] = dra_node.DRANode(cluster, n, build_dir, labels={POOL: "yes"},
                                        fake_gpus="1xH100-80GB").start()
            stop.append(nodes[n].stop)
        pair = components.SchedulerPair(cluster, build_dir, d, "dra-ext",
                                        extra=("--dra", "--node-policy", "fgd",
                                               "--target-workload", str(target)))
        stop.append(pair.stop)
        cluster.start_scheduler(components.kube_scheduler_alone_config(ALONE),
                                name="kube-dra-alone")
        stop.append(lambda: cluster.stop_process("kube-dra-alone"))
        wait(pair.ready, "egpu-scheduler ready (its kube-scheduler leads)", timeout=90)
        # A new node has the not-ready taint until the node lifecycle controller sees it Ready.
        wait(lambda: all(not get(cluster, f"/api/v1/nodes/{n}")["spec"].get("taints")
                         for n in nodes), "the nodes untainted", timeout=90)

        # The earlier claim, on A (placed by kube-scheduler alone: only its node matters).
        make_pod(cluster, "earlier", 70, 40960, "16", "64Gi",
                 {"kubernetes.io/hostname": NODE_A}, scheduler=ALONE)
        assert bound_node(cluster, "earlier") == NODE_A
        earlier = claim_of(cluster, "earlier")
        assert result(earlier)["pool"] == NODE_A and result(earlier)["device"] == "gpu-0"
        assert result(earlier)["consumedCapacity"] == {"cores": "70", "memory": "40Gi"}
        nodes[NODE_A].pod(NS, "earlier", timeout=90)
        yield {"nodes": nodes, "pair": pair, "earlier": earlier}
        for n in nodes.values():
            assert n.errors == [], n.errors
    finally:
        st, lst = cluster.call("GET", f"/api/v1/namespaces/{NS}/pods")
        for p in lst.get("items", []) if st == 200 else []:
            cluster.call("DELETE", f"/api/v1/namespaces/{NS}/pods/{p['metadata']['name']}",
                         {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
        try:
            wait(lambda: not cluster.call("GET", f"/api/v1/namespaces/{NS}/pods")[1]
                 .get("items"), "pods gone", 30)
        finally:
            for f in reversed(stop):
                f()
            cluster.call("DELETE", f"/api/v1/namespaces/{NS}")
            for n in (NODE_A, NODE_B):
                cluster.call("DELETE", f"/api/v1/nodes/{n}")


def test_kube_scheduler_alone_takes_the_emptier_node(cluster, env):
    """Without the extender (profile dra-alone), kube-scheduler places the 30-core pod on B,
    the node its LeastAllocated scores higher, and its allocator gives it B's card: what the
    default profile does with a DRA pod, GPU-blind."""
    make_pod(cluster, "alone", 30, 4096, "1", "4Gi", {POOL: "yes"}, scheduler=ALONE)
    assert bound_node(cluster, "alone") == NODE_B
    claim = claim_of(cluster, "alone")
    r = result(claim)
    assert (r["driver"], r["pool"], r["device"]) == (DRIVER, NODE_B, "gpu-0"), r
    assert r["consumedCapacity"] == {"cores": "30", "memory": "4Gi"}, r
    assert SCHED_USER not in binders(cluster, "alone")
    env["nodes"][NODE_B].pod(NS, "alone", timeout=90)
    delete_pod(cluster, "alone", claim["metadata"]["name"])


def test_extender_binds_the_dra_pod_to_fgds_node(cluster, env):
    """Through the webhook (schedulerName elastic-gpu-scheduler, the marker) kube-scheduler
    calls egpu-scheduler for the same pod: FGD's node A wins, egpu-scheduler's bind verb
    creates the Binding, kube-scheduler's allocator puts the claim on A's card beside the
    earlier one (another shareID), and the card's two claims consume 100 cores and
    45056 MiB."""
    got = make_pod(cluster, "fgd", 30, 4096, "1", "4Gi", {POOL: "yes"})
    assert got["spec"]["schedulerName"] == "elastic-gpu-scheduler", got["spec"]
    assert bound_node(cluster, "fgd") == NODE_A
    assert binders(cluster, "fgd") == {SCHED_USER}
    claim = claim_of(cluster, "fgd")
    r, e = result(claim), result(env["earlier"])
    assert (r["driver"], r["pool"], r["device"]) == (DRIVER, NODE_A, "gpu-0"), r
    assert r["consumedCapacity"] == {"cores": "30", "memory": "4Gi"}, r
    assert r["shareID"] and r["shareID"] != e["shareID"], (r, e)
    on_card = [c for c in get(cluster, f"{RES}/namespaces/{NS}/resourceclaims")["items"]
               if c.get("status", {}).get("allocation")
               and (result(c)["pool"], result(c)["device"]) == (NODE_A, "gpu-0")]
    assert sorted(c["metadata"]["name"] for c in on_card) == sorted(
        [claim["metadata"]["name"], env["earlier"]["metadata"]["name"]]), on_card
    assert sum(int(result(c)["consumedCapacity"]["cores"]) for c in on_card) == 100
    assert sum(mib(result(c)["consumedCapacity"]["memory"]) for c in on_card) == 45056
    env["nodes"][NODE_A].pod(NS, "fgd", timeout=90)
