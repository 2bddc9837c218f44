"""The agent's ResourceSlice on the real control plane (kube-apiserver v1.36.3 from tools/bin).

src/agent/dra_slice.c builds this node's resource.k8s.io/v1 ResourceSlice from the card
inventory and publishes it; tests/tools/egpu-dra-slice drives that code for fake cards
(the agent's fake backend) with the agent's ServiceAccount token, so the RBAC deploy/
grants egpu-agent is what is checked:

- the API server accepts the slice as built, and stores what DRA's consumable capacity
  needs (gate DRAConsumableCapacity, beta and on in 1.36): allowMultipleAllocations, the
  cores and memory capacities with their requestPolicy, the attributes, and the owner
  reference to the Node; nothing was dropped;
- a rerun writes nothing; an unhealthy card (XID) leaves the slice and the pool's
  generation goes up; a slice the kubelet deletes (DeleteCollection by spec.nodeName, as
  at its start) is created again, its generation above the last; a duplicate is deleted;
- the slice is owned by its Node: the garbage collector deletes it with the Node, and a Node
  registered again (a new uid) gets a slice of its own;
- with the gate off on kube-apiserver (as on 1.34 and 1.35 by default) the dropped fields
  are found by reading back what was written, logged at warning level naming the field
  and the gate, and do not make every later publish write again;
- the optional attributes the agent fills from its inventory (egpu__dra_slice_attributes:
  driverVersion, cudaDriverVersion, cudaComputeCapability, architecture, pciBusID,
  numaNode) are accepted and stored; with taint_unhealthy an unhealthy card stays, tainted
  gpu.elasticgpu.io/unhealthy=XID-79:NoSchedule (gate DRADeviceTaints, beta and on in 1.36),
  and with DRADeviceTaints off the server drops the taint, so the card leaves the slice and
  a warning names the gate;
- every request the publisher made as egpu-agent was allowed."""
import json
import subprocess

import pytest

from conftest import cluster_module  # noqa: F401  (tests/cluster on sys.path)
from conftest import need_control_plane
from cluster import wait_until as wait  # noqa: E402

NS = "elastic-gpu-system"
NODE = "dra-node-1"
DRIVER = "gpu.elasticgpu.io"
FAKE = "2xH100-80GB"  # the fake backend's cards: 81920 MiB each, stored as "80Gi"


def helper(build_dir):
    exe = build_dir / "tests" / "tools" / "egpu-dra-slice"
    if not exe.exists():
        pytest.fail(f"{exe} not built: run `make build` first")
    return str(exe)


def make_node(c, name):
    st, obj = c.call("POST", "/api/v1/nodes",
                     {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    assert st in (201, 409), obj
    st, obj = c.call("GET", f"/api/v1/nodes/{name}")
    assert st == 200, obj
    return obj


def slices(c, node):
    st, lst = c.call("GET", "/apis/resource.k8s.io/v1/resourceslices"
                     f"?fieldSelector=spec.nodeName%3D{node}")
    assert st == 200, lst
    return lst["items"]


class Publisher:
    """egpu-dra-slice STEP... as a process: publish() runs one step "publish" and gives its
    JSON line; steps between go on its command line, so the run is prepared whole."""

    def __init__(self, build_dir, kubeconfig, node, steps, extra=()):
        self.proc = subprocess.Popen(
            [helper(build_dir), "--node", node, "--fake-gpus", FAKE,
             "--driver-version", "570.133.20", "--cuda-driver-version", "12080", *extra,
             "--kubeconfig", kubeconfig, *steps],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def next(self):
        line = self.proc.stdout.readline()
        assert line, f"egpu-dra-slice ended: {self.proc.stderr.read()[-3000:]}"
        return json.loads(line)

    def resume(self):
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def finish(self):
        self.proc.stdin.close()
        err = self.proc.stderr.read()
        assert self.proc.wait(timeout=30) == 0, err[-3000:]
        return err


@pytest.fixture(scope="module")
def node(cluster, deployed):
    n = make_node(cluster, NODE)
    yield n
    cluster.call("DELETE", f"/api/v1/nodes/{NODE}")


@pytest.fixture(scope="module")
def agent_kubeconfig(cluster, deployed):
    return cluster.sa_kubeconfig(NS, "egpu-agent")


def test_the_api_server_keeps_the_slice_as_built(cluster, node, build_dir, agent_kubeconfig):
    assert cluster.version.startswith("v1.36"), cluster.version
    printed = json.loads(subprocess.run(
        [helper(build_dir), "--node", NODE, "--fake-gpus", FAKE, "--driver-version",
         "570.133.20", "--cuda-driver-version", "12080", "--node-uid",
         node["metadata"]["uid"], "--print"],
        capture_output=True, text=True, check=True, timeout=30).stdout)

    p = Publisher(build_dir, agent_kubeconfig, NODE, ["publish"])
    out = p.next()
    p.finish()
    assert out["rc"] == 0, out
    assert out["created"] == 1 and out["devices"] == 2 and out["generation"] == 1, out
    assert out["dropped"] == "", out

    (s,) = slices(cluster, NODE)
    assert s["metadata"]["name"] == out["name"]
    assert s["metadata"]["name"].startswith(f"0-{DRIVER}-{NODE}-")
    assert s["metadata"]["ownerReferences"] == [{
        "apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node["metadata"]["uid"],
        "controller": True}]
    spec = s["spec"]
    assert spec["driver"] == DRIVER and spec["nodeName"] == NODE
    assert spec["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    # what was built is what is stored, field by field: the gate is on in 1.36
    assert spec == printed["spec"], json.dumps(spec, indent=1)
    for d in spec["devices"]:
        assert d["allowMultipleAllocations"] is True, d
        assert d["capacity"]["cores"] == {"value": "100", "requestPolicy": {
            "default": "100", "validRange": {"min": "1", "max": "100", "step": "1"}}}, d
        assert d["capacity"]["memory"] == {"value": "80Gi", "requestPolicy": {
            "default": "80Gi", "validRange": {"min": "1Mi", "max": "80Gi", "step": "1Mi"}}}, d
        assert d["attributes"]["type"] == {"string": "gpu"}
        assert d["attributes"]["uuid"]["string"].startswith("GPU-")
        assert d["attributes"]["driverVersion"] == {"version": "570.133.20"}
        assert d["attributes"]["cudaDriverVersion"] == {"version": "12.8.0"}
    assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1"]


def test_republished_on_change_and_after_deletion(cluster, node, build_dir, agent_kubeconfig):
    # from the previous test: the node's slice at generation 1 (or made here)
    p = Publisher(build_dir, agent_kubeconfig, NODE,
                  ["publish", "publish", "unhealthy:1", "publish", "publish", "pause", "publish",
                   "pause", "publish", "healthy:1", "publish"])
    first = p.next()
    assert first["rc"] == 0, first
    gen = first["generation"]
    again = p.next()
    assert again["unchanged"] == 1 and again["generation"] == gen, again

    sick = p.next()  # card 1 unhealthy: it leaves the slice, the generation goes up
    assert sick["updated"] == 1 and sick["devices"] == 1 and sick["generation"] == gen + 1, sick
    (s,) = slices(cluster, NODE)
    assert [d["name"] for d in s["spec"]["devices"]] == ["gpu-0"]
    assert s["spec"]["pool"]["generation"] == gen + 1
    assert p.next()["unchanged"] == 1

    # the kubelet at its start: DeleteCollection of the node's slices
    st, obj = cluster.call("DELETE", "/apis/resource.k8s.io/v1/resourceslices"
                           f"?fieldSelector=spec.nodeName%3D{NODE}")
    assert st == 200, obj
    assert not slices(cluster, NODE)
    p.resume()
    back = p.next()
    assert back["created"] == 1 and back["generation"] == gen + 2, back
    (s,) = slices(cluster, NODE)
    assert s["spec"]["pool"]["generation"] == gen + 2

    # a duplicate (a create whose reply was lost): deleted, the pool's slice kept
    dup = json.loads(json.dumps(s))
    dup["metadata"] = {"generateName": s["metadata"]["generateName"],
                       "ownerReferences": s["metadata"]["ownerReferences"]}
    dup["spec"]["pool"]["generation"] = 1
    st, obj = cluster.call("POST", "/apis/resource.k8s.io/v1/resourceslices", dup)
    assert st == 201, obj
    assert len(slices(cluster, NODE)) == 2
    p.resume()
    dedup = p.next()
    assert dedup["deleted"] == 1 and dedup["unchanged"] == 1, dedup
    assert [x["metadata"]["name"] for x in slices(cluster, NODE)] == [s["metadata"]["name"]]

    healed = p.next()
    assert healed["updated"] == 1 and healed["devices"] == 2, healed
    assert healed["generation"] == gen + 3, healed
    log = p.finish()
    assert "ResourceSlice field dropped" not in log, log


def test_the_slice_goes_with_its_node(cluster, node, build_dir, agent_kubeconfig):
    """The owner reference at work: the garbage collector deletes the slice with its Node;
    the Node registered again (a new uid) gets a new slice owned by it."""
    assert slices(cluster, NODE)
    st, obj = cluster.call("DELETE", f"/api/v1/nodes/{NODE}")
    assert st == 200, obj
    wait(lambda: not slices(cluster, NODE), "the garbage collector deleting the slice")
    again = make_node(cluster, NODE)
    assert again["metadata"]["uid"] != node["metadata"]["uid"]
    p = Publisher(build_dir, agent_kubeconfig, NODE, ["publish"])
    out = p.next()
    p.finish()
    assert out["created"] == 1, out
    (s,) = slices(cluster, NODE)
    assert [r["uid"] for r in s["metadata"]["ownerReferences"]] == [again["metadata"]["uid"]]


def test_attributes_and_taints_are_stored(cluster, deployed, build_dir, agent_kubeconfig):
    node = "dra-node-taints"
    make_node(cluster, node)
    try:
        p = Publisher(build_dir, agent_kubeconfig, node, ["publish", "unhealthy:1", "publish"],
                      extra=["--attributes", "--taint-unhealthy"])
        first, second = p.next(), p.next()
        log = p.finish()
        assert first["rc"] == 0 and first["devices"] == 2 and first["dropped"] == "", first
        assert second["rc"] == 0 and second["updated"] == 1 and second["devices"] == 2, second
        assert second["dropped"] == "" and second["generation"] == 2, second
        assert "DRADeviceTaints" not in log, log
        (s,) = slices(cluster, node)
        d0, d1 = s["spec"]["devices"]
        a = d0["attributes"]
        assert a["driverVersion"] == {"version": "570.133.20"}, a
        assert a["cudaDriverVersion"] == {"version": "12.8.0"}, a
        assert a["cudaComputeCapability"] == {"version": "9.0.0"}, a  # H100
        assert a["architecture"] == {"string": "Hopper"}, a
        assert a["pciBusID"] == {"string": "0000:18:00.0"}, a
        assert a["numaNode"] == {"int": 0}, a
        assert "taints" not in d0, d0
        assert d1["name"] == "gpu-1", d1
        (t,) = d1["taints"]
        assert (t["key"], t.get("value"), t["effect"]) == (
            f"{DRIVER}/unhealthy", "XID-79", "NoSchedule"), t
        assert t.get("timeAdded"), t  # set by the server
    finally:
        cluster.call("DELETE", f"/api/v1/nodes/{node}")


def test_publisher_calls_are_allowed_by_the_agent_rbac(cluster, node):
    user = f"system:serviceaccount:{NS}:egpu-agent"
    events = [e for e in cluster.audit(user) if e.get("objectRef", {}).get("resource") in
              ("resourceslices", "nodes")]
    assert events, f"no ResourceSlice request of {user} in the audit log"
    denied = [(e["verb"], e["requestURI"], e["responseStatus"]["code"]) for e in events
              if e.get("responseStatus", {}).get("code") in (401, 403)]
    assert not denied, denied
    verbs = {e["verb"] for e in events if e["objectRef"]["resource"] == "resourceslices"}
    assert {"list", "create", "update", "delete"} <= verbs, verbs


@pytest.fixture(scope="module")
def gate_off_cluster(tmp_path_factory):
    need_control_plane()
    c = cluster_module.Cluster(
        tmp_path_factory.mktemp("cluster-gate-off"), scheduler=False,
        apiserver_args=["--feature-gates=DRAConsumableCapacity=false,DRADeviceTaints=false"])
    c.start()
    yield c
    c.stop()


def test_dropped_fields_are_logged_once(gate_off_cluster, build_dir):
    c = gate_off_cluster
    make_node(c, NODE)
    p = Publisher(build_dir, c.kubeconfig, NODE, ["publish", "publish"])
    first, second = p.next(), p.next()
    log = p.finish()
    assert first["rc"] == 0 and first["created"] == 1, first
    assert first["dropped"].startswith("spec.devices[0]."), first
    assert first["dropped"].split(".")[-1] in ("allowMultipleAllocations", "requestPolicy"), first
    warns = [ln for ln in log.splitlines() if "ResourceSlice field dropped" in ln]
    assert len(warns) == 1 and warns[0].startswith("W"), log
    assert "DRAConsumableCapacity" in warns[0] and first["dropped"] in warns[0], warns
    # what the server kept is remembered: no write again, no second warning
    assert second["unchanged"] == 1 and second["generation"] == 1, second
    (s,) = slices(c, NODE)
    assert "allowMultipleAllocations" not in s["spec"]["devices"][0], s
    assert "requestPolicy" not in s["spec"]["devices"][0]["capacity"]["cores"], s


def test_unhealthy_card_leaves_when_taints_are_dropped(gate_off_cluster, build_dir):
    c = gate_off_cluster
    node = "dra-node-untainted"
    make_node(c, node)
    p = Publisher(build_dir, c.kubeconfig, node, ["publish", "unhealthy:1", "publish", "publish"],
                  extra=["--taint-unhealthy"])
    first, second, third = p.next(), p.next(), p.next()
    log = p.finish()
    assert first["rc"] == 0 and first["devices"] == 2, first
    # the taint was dropped: written again at once without the card
    assert second["rc"] == 0 and second["devices"] == 1, second
    warns = [ln for ln in log.splitlines() if "device taints dropped" in ln]
    assert len(warns) == 1 and warns[0].startswith("W") and "DRADeviceTaints" in warns[0], log
    (s,) = slices(c, node)
    assert [d["name"] for d in s["spec"]["devices"]] == ["gpu-0"], s
    # and it stays so, with nothing written again
    assert third["unchanged"] == 1 and third["devices"] == 1, third
