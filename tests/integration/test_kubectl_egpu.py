"""kubectl-egpu, the kubectl plugin, against the test API server
(tests/apiserver/server.py), every object made through its API.

- inspect: the exact table for two nodes (a shared card with two containers,
  one through a claim; an idle Unhealthy card; a whole card), NODE keeping
  one node, -o wide (used memory, utilization, UUID), -o json (the document
  of docs/kubectl.md); an unknown node is exit 1, no GPU at all a note; an
  object src/api refuses is left out with a warning, the rest shown; C1
  controls (CSI U+009B, OSC U+009D, ST U+009C) and BiDi controls in
  objects' text are '?' in tables, the original in -o json.
- inspect on DRA-mode nodes: cards from the node's ResourceSlice (the pool's newest
  generation, this driver's only), shares from the allocated ResourceClaims of every
  namespace (several pods, a card held whole), the exact table beside device-plugin nodes,
  NODE, -o wide, -o json; a DRA node's GPU object gives health and use; a bad slice or
  claim is left out with a warning; no resource.k8s.io/v1 (404) is no DRA node, a 403 a
  warning, another error exit 1.
- claims: -n, the kubeconfig context's namespace when none is given, -A,
  -o wide, -o json; the ElasticGPU's node and card.
- budget: metered in budget, over budget, not metered yet; -n, -A, -o wide,
  -o json.
- Kubeconfig and context as kubectl resolves them: --kubeconfig, $KUBECONFIG,
  ~/.kube/config ($HOME), --context.
- Errors: the server unreachable and a 403 are exit 1 with one line naming
  the server and the HTTP status; an unknown command, an unknown flag, a bad
  -o and an extra argument are exit 2 with the usage text.
- The real kubectl (tools/bin's 1.35 from `make deps`, else PATH's) runs it as
  a plugin: `kubectl egpu inspect --kubeconfig`
  with the built kubectl-egpu on PATH prints what the binary prints. Under
  CI=true a missing kubectl fails that test instead of skipping it.
"""
import json
import os
import re
import subprocess

import pytest

from conftest import tool
from test_scheduler import api  # noqa: F401 (the test API server fixture)

G = "/apis/elasticgpu.io/v1alpha1"
V = "elasticgpu.io/v1alpha1"
MERGE = "application/merge-patch+json"


@pytest.fixture
def plugin(build_dir):
    exe = build_dir / "src/kubectl/kubectl-egpu"
    if not exe.exists():
        pytest.fail(f"{exe} not built: run `make build` first")
    return exe


def run(exe, *args, env=None):
    e = dict(os.environ)
    e.pop("KUBECONFIG", None)
    e.update(env or {})
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=30, env=e)


def ok(r):
    assert r.returncode == 0, r.stderr
    return r.stdout


def created(api, path, obj):
    st, body = api.call("POST", path, obj)
    assert st == 201, body
    return body


def status(api, path, st_obj):
    st, body = api.call("PATCH", path + "/status", {"status": st_obj}, ctype=MERGE)
    assert st == 200, body


def gpu(api, node, index, model, memory, st=None):
    name = f"{node}-gpu{index}"
    created(api, f"{G}/gpus", {
        "apiVersion": V, "kind": "GPU", "metadata": {"name": name},
        "spec": {"nodeName": node, "index": index, "uuid": f"GPU-{name}", "model": model,
                 "memory": memory}})
    if st:
        status(api, f"{G}/gpus/{name}", st)


def cluster(api):
    """n1: a shared A100 (two containers, one through claim c1) and an idle
    Unhealthy one; n2: an H100 held whole. Made in an order that is not the
    printed one."""
    gpu(api, "n2", 0, "H100", 81920, {
        "health": "Healthy", "capacity": {"core": 100, "memory": 81920},
        "allocated": [{"namespace": "ml", "pod": "big", "container": "main", "core": 100,
                       "memory": 0}]})
    gpu(api, "n1", 1, "A100", 40960, {"health": "Unhealthy",
                                      "used": {"memory": 0, "utilization": 0}})
    gpu(api, "n1", 0, "A100", 40960, {
        "health": "Healthy", "capacity": {"core": 100, "memory": 40960},
        "allocated": [
            {"namespace": "default", "pod": "infer", "container": "srv", "core": 20,
             "memory": 8192},
            {"namespace": "team-a", "pod": "train-0", "container": "main", "core": 30,
             "memory": 4096, "claim": "c1"}],
        "used": {"memory": 5000, "utilization": 41, "updateTime": "2026-07-24T09:31:03Z"}})


INSPECT = """\
NODE   GPU     MODEL   HEALTH      CORE             MEMORY(MiB)          POD              CONTAINER   CLAIM
n1     0       A100    Healthy     50/100           12288/40960
                                   20               8192                 default/infer    srv         <none>
                                   30               4096                 team-a/train-0   main        c1
n1     1       A100    Unhealthy   0/100            0/40960
n1     total                       50/200 (25%)     12288/81920 (15%)
n2     0       H100    Healthy     100/100          81920/81920
                                   100              all                  ml/big           main        <none>
n2     total                       100/100 (100%)   81920/81920 (100%)

Cluster: 2 nodes, 3 GPUs, core 150/300 (50%), memory 94208/163840 MiB (57%)
"""

INSPECT_N2_WIDE = """\
NODE   MODE            GPU     MODEL   HEALTH    CORE             MEMORY(MiB)          USED(MiB)   UTIL(%)   UUID          POD      CONTAINER   CLAIM
n2     device-plugin   0       H100    Healthy   100/100          81920/81920          <none>      <none>    GPU-n2-gpu0
                                                 100              all                                                      ml/big   main        <none>
n2                     total                     100/100 (100%)   81920/81920 (100%)

Cluster: 1 node, 1 GPU, core 100/100 (100%), memory 81920/81920 MiB (100%)
"""


def test_inspect(api, plugin):  # noqa: F811
    cluster(api)
    kc = ("--kubeconfig", api.kubeconfig)
    assert ok(run(plugin, "inspect", *kc)) == INSPECT
    # Flags before the command, as kubectl may pass them.
    assert ok(run(plugin, *kc, "inspect")) == INSPECT
    assert ok(run(plugin, "inspect", "n2", "-o", "wide", *kc)) == INSPECT_N2_WIDE
    wide = ok(run(plugin, "inspect", "-owide", *kc)).splitlines()
    assert wide[0].split() == ["NODE", "MODE", "GPU", "MODEL", "HEALTH", "CORE", "MEMORY(MiB)",
                               "USED(MiB)", "UTIL(%)", "UUID", "POD", "CONTAINER", "CLAIM"]
    assert wide[1].split() == ["n1", "device-plugin", "0", "A100", "Healthy", "50/100",
                               "12288/40960", "5000", "41", "GPU-n1-gpu0"]
    assert wide[4].split() == ["n1", "device-plugin", "1", "A100", "Unhealthy", "0/100",
                               "0/40960", "0", "0", "GPU-n1-gpu1"]


def test_inspect_json(api, plugin):  # noqa: F811
    cluster(api)
    doc = json.loads(ok(run(plugin, "inspect", "n1", "--output=json", "--kubeconfig",
                            api.kubeconfig)))
    card0 = {"name": "n1-gpu0", "device": None, "index": 0, "uuid": "GPU-n1-gpu0", "model": "A100",
             "health": "Healthy", "coreAllocated": 50, "coreTotal": 100,
             "memoryAllocated": 12288, "memoryTotal": 40960,
             "used": {"memory": 5000, "utilization": 41, "updateTime": "2026-07-24T09:31:03Z"},
             "pods": [{"namespace": "default", "pod": "infer", "container": "srv", "core": 20,
                       "memory": 8192, "claim": None, "shareID": None, "reservedFor": ["infer"]},
                      {"namespace": "team-a", "pod": "train-0", "container": "main",
                       "core": 30, "memory": 4096, "claim": "c1", "shareID": None,
                       "reservedFor": ["train-0"]}]}
    card1 = {"name": "n1-gpu1", "device": None, "index": 1, "uuid": "GPU-n1-gpu1", "model": "A100",
             "health": "Unhealthy", "coreAllocated": 0, "coreTotal": 100,
             "memoryAllocated": 0, "memoryTotal": 40960,
             "used": {"memory": 0, "utilization": 0, "updateTime": None}, "pods": []}
    totals = {"coreAllocated": 50, "coreTotal": 200, "memoryAllocated": 12288,
              "memoryTotal": 81920}
    assert doc == {"apiVersion": "egpu.kubectl/v1", "kind": "Inspect",
                   "nodes": [{"name": "n1", "mode": "device-plugin", "gpus": [card0, card1],
                              **totals}], **totals}
    whole = json.loads(ok(run(plugin, "inspect", "-o", "json", "--kubeconfig", api.kubeconfig)))
    assert [n["name"] for n in whole["nodes"]] == ["n1", "n2"]
    assert (whole["coreAllocated"], whole["coreTotal"], whole["memoryAllocated"],
            whole["memoryTotal"]) == (150, 300, 94208, 163840)
    assert whole["nodes"][1]["gpus"][0]["pods"] == [
        {"namespace": "ml", "pod": "big", "container": "main", "core": 100, "memory": 0,
         "claim": None, "shareID": None, "reservedFor": ["big"]}]


def test_inspect_nothing(api, plugin):  # noqa: F811
    r = run(plugin, "inspect", "--kubeconfig", api.kubeconfig)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "No GPU objects found.\n")
    cluster(api)
    r = run(plugin, "inspect", "n9", "--kubeconfig", api.kubeconfig)
    assert (r.returncode, r.stdout, r.stderr) == (
        1, "", 'kubectl-egpu: no GPU objects on node "n9"\n')


def test_bad_objects_are_left_out(api, plugin):  # noqa: F811
    """An object src/api refuses is left out with a warning naming it and the
    field; the others are shown and the exit status is 0. (The test API
    server does not apply the CRDs' schemas, as a cluster without them
    would not.)"""
    cluster(api)
    created(api, f"{G}/gpus", {
        "apiVersion": V, "kind": "GPU", "metadata": {"name": "n1-gpu9"},
        "spec": {"nodeName": "n1", "index": 5000, "uuid": "GPU-9", "memory": 1}})
    r = run(plugin, "inspect", "--kubeconfig", api.kubeconfig)
    assert (r.returncode, r.stdout) == (0, INSPECT)
    assert r.stderr == ("kubectl-egpu: warning: GPU n1-gpu9 left out: spec.index is 5000; "
                        "allowed: a whole number 0..1023\n")
    claims_setup(api)
    created(api, f"{G}/namespaces/team-a/elasticgpuclaims", {
        "apiVersion": V, "kind": "ElasticGPUClaim",
        "metadata": {"name": "odd", "namespace": "team-a"},
        "spec": {"resources": {"requests": {"elasticgpu.io/gpu-core": 150}}}})
    r = run(plugin, "claims", "-n", "team-a", "--kubeconfig", api.kubeconfig)
    assert r.returncode == 0 and ages(r.stdout) == CLAIMS_A
    assert r.stderr == ("kubectl-egpu: warning: ElasticGPUClaim team-a/odd left out: "
                        "spec.resources.requests.elasticgpu.io/gpu-core is 150; allowed: 1..99 "
                        "to share one card, or a multiple of 100 for whole cards\n")


R = "/apis/resource.k8s.io/v1"
DRIVER = "gpu.elasticgpu.io"


def dra_device(index, uuid, model, memory, **extra):
    """A device as egpu-agent --mode dra publishes it (src/agent/dra_slice_int.h)."""
    pol = {"cores": {"default": "100", "validRange": {"min": "1", "max": "100", "step": "1"}},
           "memory": {"default": memory, "validRange": {"min": "1Mi", "max": memory,
                                                         "step": "1Mi"}}}
    return {"name": f"gpu-{index}",
            "attributes": {"type": {"string": "gpu"}, "uuid": {"string": uuid},
                           "index": {"int": index}, "minor": {"int": index},
                           "productName": {"string": model}},
            "capacity": {"cores": {"value": "100", "requestPolicy": pol["cores"]},
                         "memory": {"value": memory, "requestPolicy": pol["memory"]}},
            "allowMultipleAllocations": True, **extra}


def dra_slice(api, node, devices, generation=1, driver=DRIVER, name=None):
    created(api, f"{R}/resourceslices", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": name or f"0-{driver}-{node}-x{generation}"},
        "spec": {"driver": driver, "nodeName": node,
                 "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
                 "devices": devices}})


def dra_claim(api, ns, name, results, pods=(), driver=DRIVER):
    """A ResourceClaim as kube-scheduler leaves it allocated and reserved (the fixture
    resourceclaim_allocated.json of ../shared/k8s-wire/dra)."""
    res = []
    for pool, device, share, cap in results:
        r = {"request": "gpu", "driver": driver, "pool": pool, "device": device}
        if share:
            r["shareID"] = share
        if cap is not None:
            r["consumedCapacity"] = cap
        res.append(r)
    created(api, f"{R}/namespaces/{ns}/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu-share.elasticgpu.io", "allocationMode": "ExactCount",
            "count": 1}}]}},
        "status": {"allocation": {"devices": {"results": res}, "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                    "values": [results[0][0]]}]}]}},
                   "reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{p}"}
                                   for p in pods]}})


def dra_cluster(api):
    """cluster()'s two device-plugin nodes, and n3 in DRA mode: gpu-0 holds two shares
    (one claim used by two pods), gpu-1 a card not shared, given whole. Beside them: an
    older generation of n3's pool, another driver's slice and claim, a claim not allocated."""
    cluster(api)
    claims_setup(api)  # the namespaces
    dra_slice(api, "n3", [dra_device(0, "GPU-n3-0", "NVIDIA L4", "23034Mi"),
                          dra_device(1, "GPU-n3-1", "NVIDIA L4", "22Gi")], generation=3)
    dra_slice(api, "n3", [dra_device(7, "GPU-old", "old", "1Gi")], generation=2)
    dra_slice(api, "n3", [dra_device(0, "GPU-nv", "NVIDIA L4", "23034Mi")],
              driver="gpu.nvidia.com")
    dra_claim(api, "ml", "train", [("n3", "gpu-0", "9c3e6f0a-51d7-4b2e-8f4a-0d6c2b7e1a95",
                                    {"cores": "30", "memory": "4Gi"})], ["train-0"])
    dra_claim(api, "team-a", "infer", [("n3", "gpu-0", "1b7e0c2a-4d3f-4e5a-9b6c-7d8e9f0a1b2c",
                                        {"cores": "20", "memory": "2048Mi"})],
              ["infer-a", "infer-b"])
    dra_claim(api, "ml", "whole", [("n3", "gpu-1", None, None)], ["big-1"])
    dra_claim(api, "ml", "nvidia", [("n3", "gpu-0", "x", None)], ["p"], driver="gpu.nvidia.com")
    created(api, f"{R}/namespaces/ml/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "pending", "namespace": "ml"}, "spec": {"devices": {"requests": []}}})


INSPECT_DRA = """\
NODE   MODE            GPU     MODEL       HEALTH      CORE             MEMORY(MiB)          POD                   CONTAINER   CLAIM
n1     device-plugin   0       A100        Healthy     50/100           12288/40960
                                                       20               8192                 default/infer         srv         <none>
                                                       30               4096                 team-a/train-0        main        c1
n1     device-plugin   1       A100        Unhealthy   0/100            0/40960
n1                     total                           50/200 (25%)     12288/81920 (15%)
n2     device-plugin   0       H100        Healthy     100/100          81920/81920
                                                       100              all                  ml/big                main        <none>
n2                     total                           100/100 (100%)   81920/81920 (100%)
n3     dra             0       NVIDIA L4   Healthy     50/100           6144/23034
                                                       30               4096                 ml/train-0            <none>      train
                                                       20               2048                 team-a/infer-a (+1)   <none>      infer
n3     dra             1       NVIDIA L4   Healthy     100/100          22528/22528
                                                       100              all                  ml/big-1              <none>      whole
n3                     total                           150/200 (75%)    28672/45562 (62%)

Cluster: 3 nodes, 5 GPUs, core 300/500 (60%), memory 122880/209402 MiB (58%)
"""


def test_inspect_dra(api, plugin):  # noqa: F811
    """DRA-mode cards come from the node's ResourceSlice (the pool's newest generation, this
    driver's only) and their shares from the allocated ResourceClaims of every namespace,
    beside the device-plugin nodes' GPU objects."""
    dra_cluster(api)
    kc = ("--kubeconfig", api.kubeconfig)
    api.call("DELETE", "/_control/requests", token=None)
    r = run(plugin, "inspect", *kc)
    assert (r.returncode, r.stdout, r.stderr) == (0, INSPECT_DRA, "")
    st, reqs = api.call("GET", "/_control/requests", token=None)
    lists = [(q["path"], q["query"]) for q in reqs]
    assert [p for p, _ in lists] == [f"{G}/gpus", f"{R}/resourceslices", f"{R}/resourceclaims"]
    assert "fieldSelector=spec.driver%3Dgpu.elasticgpu.io" in lists[1][1], lists
    # NODE: the slices of that node only.
    api.call("DELETE", "/_control/requests", token=None)
    r = run(plugin, "inspect", "n3", "-o", "wide", *kc)
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines()]
    assert rows[0] == ["NODE", "MODE", "GPU", "MODEL", "HEALTH", "CORE", "MEMORY(MiB)",
                       "USED(MiB)", "UTIL(%)", "UUID", "POD", "CONTAINER", "CLAIM"]
    assert rows[1] == ["n3", "dra", "0", "NVIDIA", "L4", "Healthy", "50/100", "6144/23034",
                       "<none>", "<none>", "GPU-n3-0"]
    assert rows[-1] == ["Cluster:", "1", "node,", "2", "GPUs,", "core", "150/200", "(75%),",
                        "memory", "28672/45562", "MiB", "(62%)"]
    st, reqs = api.call("GET", "/_control/requests", token=None)
    q = [x["query"] for x in reqs if x["path"] == f"{R}/resourceslices"]
    assert len(q) == 1 and "spec.nodeName%3Dn3" in q[0] and "spec.driver" in q[0], q
    doc = json.loads(ok(run(plugin, "inspect", "n3", "-o", "json", *kc)))
    assert doc == {
        "apiVersion": "egpu.kubectl/v1", "kind": "Inspect",
        "nodes": [{"name": "n3", "mode": "dra", "gpus": [
            {"name": "gpu-0", "device": "gpu-0", "index": 0, "uuid": "GPU-n3-0",
             "model": "NVIDIA L4", "health": "Healthy", "coreAllocated": 50, "coreTotal": 100,
             "memoryAllocated": 6144, "memoryTotal": 23034,
             "used": {"memory": None, "utilization": None, "updateTime": None},
             "pods": [{"namespace": "ml", "pod": "train-0", "container": None, "core": 30,
                       "memory": 4096, "claim": "train",
                       "shareID": "9c3e6f0a-51d7-4b2e-8f4a-0d6c2b7e1a95",
                       "reservedFor": ["train-0"]},
                      {"namespace": "team-a", "pod": "infer-a", "container": None, "core": 20,
                       "memory": 2048, "claim": "infer",
                       "shareID": "1b7e0c2a-4d3f-4e5a-9b6c-7d8e9f0a1b2c",
                       "reservedFor": ["infer-a", "infer-b"]}]},
            {"name": "gpu-1", "device": "gpu-1", "index": 1, "uuid": "GPU-n3-1",
             "model": "NVIDIA L4", "health": "Healthy", "coreAllocated": 100,
             "coreTotal": 100, "memoryAllocated": 22528, "memoryTotal": 22528,
             "used": {"memory": None, "utilization": None, "updateTime": None},
             "pods": [{"namespace": "ml", "pod": "big-1", "container": None, "core": 100,
                       "memory": 0, "claim": "whole", "shareID": None,
                       "reservedFor": ["big-1"]}]}],
            "coreAllocated": 150, "coreTotal": 200, "memoryAllocated": 28672,
            "memoryTotal": 45562}],
        "coreAllocated": 150, "coreTotal": 200, "memoryAllocated": 28672, "memoryTotal": 45562}


def test_inspect_dra_merges_the_gpu_object(api, plugin):  # noqa: F811
    """A DRA node's GPU object of the same UUID gives the card its health and use; one whose
    card left the slice (unhealthy) is shown under the node's mode."""
    dra_slice(api, "n4", [dra_device(0, "GPU-n4-gpu0", "A100", "40Gi")])
    gpu(api, "n4", 0, "A100", 40960, {"health": "Healthy", "used": {"memory": 700,
                                                                   "utilization": 9}})
    gpu(api, "n4", 1, "A100", 40960, {"health": "Unhealthy"})
    rows = [line.split() for line in
            ok(run(plugin, "inspect", "-o", "wide", "--kubeconfig", api.kubeconfig)).splitlines()]
    assert rows[1] == ["n4", "dra", "0", "A100", "Healthy", "0/100", "0/40960", "700", "9",
                       "GPU-n4-gpu0"]
    assert rows[2] == ["n4", "dra", "1", "A100", "Unhealthy", "0/100", "0/40960", "<none>",
                       "<none>", "GPU-n4-gpu1"]
    doc = json.loads(ok(run(plugin, "inspect", "-o", "json", "--kubeconfig", api.kubeconfig)))
    assert [(g["name"], g["device"]) for g in doc["nodes"][0]["gpus"]] == [
        ("n4-gpu0", "gpu-0"), ("n4-gpu1", None)]


def test_inspect_dra_bad_objects(api, plugin):  # noqa: F811
    """A slice or claim that does not decode is left out with a warning naming it and the
    field; a claim's result on a device no slice has is left out alone; the rest is shown."""
    dra_cluster(api)
    dra_slice(api, "n5", [{"name": "gpu-0", "capacity": {"cores": {"value": "150"}}}])
    dra_claim(api, "ml", "huge", [("n3", "gpu-0", "2c4e6a8b-0000-4000-8000-000000000001",
                                   {"cores": "101"})], ["p"])
    dra_claim(api, "ml", "stale",
              [("n3", "gpu-7", "2c4e6a8b-0000-4000-8000-000000000002",
                {"cores": "5", "memory": "1Gi"}),
               ("n3", "gpu-1", "2c4e6a8b-0000-4000-8000-000000000003",
                {"cores": "5", "memory": "1Gi"})], ["q"])
    r = run(plugin, "inspect", "n3", "--kubeconfig", api.kubeconfig)
    assert r.returncode == 0, r.stderr
    assert r.stderr == (
        "kubectl-egpu: warning: ResourceClaim ml/huge left out: status.allocation.devices."
        'results[0].consumedCapacity.cores is "101"; allowed: a whole number 0..100 (percent '
        "of one card)\n"
        "kubectl-egpu: warning: ResourceClaim ml/stale: 1 result left out: status.allocation."
        "devices.results: device gpu-7 of pool n3 is in no ResourceSlice of "
        "gpu.elasticgpu.io\n")
    assert "ml/q " in r.stdout and "ml/p " not in r.stdout
    r = run(plugin, "inspect", "--kubeconfig", api.kubeconfig)
    assert r.returncode == 0 and "n5" not in r.stdout
    assert r.stderr.splitlines()[0] == (
        "kubectl-egpu: warning: ResourceSlice 0-gpu.elasticgpu.io-n5-x1 left out: "
        'spec.devices[0].capacity.cores.value is "150"; allowed: a whole number 1..100 '
        "(percent of the card)")


def test_inspect_dra_api_errors(api, plugin):  # noqa: F811
    """No resource.k8s.io/v1 (404: before 1.34) is no DRA node; a user who may not list
    slices or claims (403) still sees the GPU objects, with a warning; any other error is
    exit 1 as for GPU objects. Without a DRA card no claim is listed."""
    kc = ("--kubeconfig", api.kubeconfig)
    cluster(api)
    api.call("DELETE", "/_control/requests", token=None)
    assert ok(run(plugin, "inspect", *kc)) == INSPECT
    st, reqs = api.call("GET", "/_control/requests", token=None)
    assert [q["path"] for q in reqs] == [f"{G}/gpus", f"{R}/resourceslices"]
    api.control("fault", {"method": "GET", "path": "/resourceslices", "code": 404, "count": 1})
    r = run(plugin, "inspect", *kc)
    assert (r.returncode, r.stdout, r.stderr) == (0, INSPECT, "")
    api.control("fault", {"method": "GET", "path": "/resourceslices", "code": 403, "count": 1})
    r = run(plugin, "inspect", *kc)
    assert (r.returncode, r.stdout) == (0, INSPECT)
    assert r.stderr == (f"kubectl-egpu: warning: listing resourceslices.resource.k8s.io from "
                        f"{api.url}: HTTP 403 Forbidden; DRA-mode cards and shares are not "
                        "shown\n")
    api.control("fault", {"method": "GET", "path": "/resourceslices", "code": 500, "count": 1})
    r = run(plugin, "inspect", *kc)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == (f"kubectl-egpu: listing resourceslices.resource.k8s.io from {api.url}: "
                        "HTTP 500 InternalError: Internal error occurred: injected fault\n")
    # Claims forbidden: the cards without their shares.
    dra_slice(api, "n3", [dra_device(0, "GPU-n3-0", "NVIDIA L4", "23034Mi")])
    api.control("fault", {"method": "GET", "path": "/resourceclaims", "code": 403, "count": 1})
    r = run(plugin, "inspect", "n3", *kc)
    assert r.returncode == 0 and r.stdout.splitlines()[1].split()[:3] == ["n3", "dra", "0"]
    assert "resourceclaims.resource.k8s.io" in r.stderr and "403" in r.stderr
    # A DRA node with its slice only is a node with GPUs.
    api.call("DELETE", f"{G}/gpus/n1-gpu0")
    r = run(plugin, "inspect", "n3", *kc)
    assert r.returncode == 0 and r.stderr == ""


# Each C1 and BiDi control docs/kubectl.md names (U+2028/U+2029 add a line).
C1_BIDI = [chr(c) for c in range(0x80, 0xa0)] + [
    "\u061c", "\u200e", "\u200f", "\u2028", "\u2029", "\u202a", "\u202b", "\u202c",
    "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"]


def test_c1_and_bidi_are_escaped(api, plugin):  # noqa: F811
    """A tenant's text (a pod, a container, a claim, a model) that holds C1
    controls or BiDi overrides reaches the terminal as '?' (the warnings and
    the API server's messages go through the same egpu__kubectl_text_clean: unit test
    test_text_clean); -o json keeps it."""
    gpu(api, "n1", 0, "A100\u009b2J\u202egpj.exe", 40960, {
        "health": "Healthy\u009d0;pwned\u009c",
        "allocated": [{"namespace": "ml", "pod": "p\u2066x\u2069", "container": "c\u200f",
                       "core": 10, "memory": 1024, "claim": "k\u061c\u0085"}]})
    r = subprocess.run([str(plugin), "inspect", "--kubeconfig", api.kubeconfig],
                       capture_output=True, timeout=30)
    out, err = r.stdout.decode("utf-8"), r.stderr.decode("utf-8")
    assert r.returncode == 0, err
    for c in C1_BIDI:
        assert c not in out and c not in err, (hex(ord(c)), out, err)
    assert b"\x9b" not in r.stdout and b"\x9b" not in r.stderr
    rows = [line.split() for line in out.splitlines()]
    assert rows[1] == ["n1", "0", "A100?2J?gpj.exe", "Healthy?0;pwned?", "10/100",
                       "1024/40960"]
    assert rows[2] == ["10", "1024", "ml/p?x?", "c?", "k??"]
    assert err == ""
    doc = json.loads(ok(run(plugin, "inspect", "-o", "json", "--kubeconfig", api.kubeconfig)))
    card = doc["nodes"][0]["gpus"][0]
    assert card["model"] == "A100\u009b2J\u202egpj.exe"
    assert card["pods"][0]["claim"] == "k\u061c\u0085"


def claims_setup(api):
    for ns in ("team-a", "ml"):
        st, body = api.call("POST", "/api/v1/namespaces", {
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        assert st in (201, 409), body

    def claim(ns, name, requests, cls=None, st=None):
        spec = {"resources": {"requests": requests}}
        if cls:
            spec["elasticGPUClassName"] = cls
        created(api, f"{G}/namespaces/{ns}/elasticgpuclaims", {
            "apiVersion": V, "kind": "ElasticGPUClaim",
            "metadata": {"name": name, "namespace": ns}, "spec": spec})
        if st:
            status(api, f"{G}/namespaces/{ns}/elasticgpuclaims/{name}", st)

    def egpu(name, spec, st):
        created(api, f"{G}/elasticgpus", {"apiVersion": V, "kind": "ElasticGPU",
                                          "metadata": {"name": name}, "spec": spec})
        status(api, f"{G}/elasticgpus/{name}", st)

    egpu("egpu-c1", {"capacity": {"elasticgpu.io/gpu-core": 30, "elasticgpu.io/gpu-memory": 4096},
                     "nodeName": "n1", "gpuShare": {"gpuName": "n1-gpu0"},
                     "claimRef": {"namespace": "team-a", "name": "c1"}},
         {"phase": "Bound", "gpuName": "n1-gpu0", "model": "A100"})
    egpu("egpu-whole", {"capacity": {"elasticgpu.io/gpu-core": 200}, "nodeName": "n2",
                        "physicalGPU": {"gpuNames": ["n2-gpu0", "n2-gpu1"]},
                        "claimRef": {"namespace": "ml", "name": "whole"}},
         {"phase": "Bound"})
    claim("team-a", "c1", {"elasticgpu.io/gpu-core": 30, "elasticgpu.io/gpu-memory": 4096},
          "share", {"phase": "Bound", "elasticGPUName": "egpu-c1",
                    "capacity": {"elasticgpu.io/gpu-core": 30, "elasticgpu.io/gpu-memory": 4096}})
    claim("team-a", "fast", {"elasticgpu.io/gpu-tflops": 12.5})
    claim("ml", "whole", {"elasticgpu.io/gpu-core": 200}, "phys",
          {"phase": "Bound", "elasticGPUName": "egpu-whole",
           "capacity": {"elasticgpu.io/gpu-core": 200}})


AGE = re.compile(r"\b\d{1,2}s$", re.M)  # just made: a few seconds, as kubectl writes it


def ages(text):
    assert len(AGE.findall(text)) == text.count("\n") - 1, text
    return AGE.sub("<age>", text)


CLAIMS_A = """\
NAME   PHASE     REQUEST       MEMORY(MiB)   CLASS       ELASTICGPU   NODE     GPU       AGE
c1     Bound     30%           4096          share       egpu-c1      n1       n1-gpu0   <age>
fast   Pending   12.5 TFLOPS   <none>        <default>   <none>       <none>   <none>    <age>
"""

CLAIMS_ALL_WIDE = """\
NAMESPACE   NAME    PHASE     REQUEST       MEMORY(MiB)   CLASS       ELASTICGPU   NODE     GPU               CAPACITY      MODEL    AGE
ml          whole   Bound     200%          <none>        phys        egpu-whole   n2       n2-gpu0,n2-gpu1   200%          <none>   <age>
team-a      c1      Bound     30%           4096          share       egpu-c1      n1       n1-gpu0           30%/4096MiB   A100     <age>
team-a      fast    Pending   12.5 TFLOPS   <none>        <default>   <none>       <none>   <none>            <none>        <none>   <age>
"""


def test_claims(api, plugin):  # noqa: F811
    claims_setup(api)
    kc = ("--kubeconfig", api.kubeconfig)
    assert ages(ok(run(plugin, "claims", "-n", "team-a", *kc))) == CLAIMS_A
    assert ages(ok(run(plugin, "claims", "--namespace=team-a", *kc))) == CLAIMS_A
    assert ages(ok(run(plugin, "claims", "-A", "-o", "wide", *kc))) == CLAIMS_ALL_WIDE
    assert ages(ok(run(plugin, "claims", "--all-namespaces", *kc))).splitlines()[1].split() == [
        "ml", "whole", "Bound", "200%", "<none>", "phys", "egpu-whole", "n2", "n2-gpu0,n2-gpu1",
        "<age>"]
    # No -n: the context's namespace (elastic-gpu), which has none.
    r = run(plugin, "claims", *kc)
    assert (r.returncode, r.stdout, r.stderr) == (
        0, "", "No ElasticGPUClaims found in elastic-gpu namespace.\n")
    doc = json.loads(ok(run(plugin, "claims", "-n", "team-a", "-o", "json", *kc)))
    assert doc["apiVersion"] == "egpu.kubectl/v1" and doc["kind"] == "Claims"
    for c in doc["claims"]:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", c.pop("creationTimestamp"))
    assert doc["claims"] == [
        {"namespace": "team-a", "name": "c1", "phase": "Bound", "core": 30, "tflops": None,
         "memory": 4096, "class": "share", "elasticGPU": "egpu-c1",
         "capacity": {"core": 30, "memory": 4096}, "node": "n1", "gpus": ["n1-gpu0"],
         "model": "A100"},
        {"namespace": "team-a", "name": "fast", "phase": "Pending", "core": None, "tflops": 12.5,
         "memory": None, "class": "", "elasticGPU": None,
         "capacity": {"core": None, "memory": None}, "node": None, "gpus": [], "model": None}]


def budgets_setup(api):
    def budget(ns, name, spec, st=None):
        created(api, f"{G}/namespaces/{ns}/gpubudgets", {
            "apiVersion": V, "kind": "GPUBudget", "metadata": {"name": name, "namespace": ns},
            "spec": {"overBudgetPriorityClassName": "low", **spec}})
        if st:
            status(api, f"{G}/namespaces/{ns}/gpubudgets/{name}", st)

    # 0.3 GPU-hours of core plus 0.1 of memory (0.0125 per GiB-hour).
    budget("team-a", "monthly", {"gpuHours": 120, "memoryWeight": 0.0125},
           {"periodStart": "2026-09-01T00:00:00Z", "periodEnd": "2026-10-01T00:00:00Z",
            "metering": {"until": "2026-09-21T10:00:00Z", "coreSeconds": 108000,
                         "memorySeconds": 29491200},
            "state": "InBudget", "used": 0.4, "remaining": 119.6})
    budget("ml", "daily", {"gpuHours": 1.5, "period": "Daily", "timeZone": "Europe/Paris"},
           {"periodStart": "2026-09-20T22:00:00Z", "periodEnd": "2026-09-21T22:00:00Z",
            "metering": {"until": "2026-09-21T10:00:00Z", "coreSeconds": 720000},
            "state": "OverBudget"})
    budget("team-a", "new", {"gpuHours": 0.25, "period": "12h"})


BUDGETS_ALL = """\
NAMESPACE   NAME      GPU-HOURS   USED     REMAINING   STATE        PERIOD    START                  END
ml          daily     1.5         2        -0.5        OverBudget   Daily     2026-09-20T22:00:00Z   2026-09-21T22:00:00Z
team-a      monthly   120         0.4      119.6       InBudget     Monthly   2026-09-01T00:00:00Z   2026-10-01T00:00:00Z
team-a      new       0.25        <none>   <none>      <none>       12h       <none>                 <none>
"""

BUDGETS_A = """\
NAME      GPU-HOURS   USED     REMAINING   STATE      PERIOD    START                  END
monthly   120         0.4      119.6       InBudget   Monthly   2026-09-01T00:00:00Z   2026-10-01T00:00:00Z
new       0.25        <none>   <none>      <none>     12h       <none>                 <none>
"""

BUDGETS_ML_WIDE = """\
NAME    GPU-HOURS   USED   REMAINING   STATE        PERIOD   START                  END                    TIMEZONE       METERED-UNTIL
daily   1.5         2      -0.5        OverBudget   Daily    2026-09-20T22:00:00Z   2026-09-21T22:00:00Z   Europe/Paris   2026-09-21T10:00:00Z
"""


def test_budget(api, plugin):  # noqa: F811
    claims_setup(api)  # the namespaces
    budgets_setup(api)
    kc = ("--kubeconfig", api.kubeconfig)
    assert ok(run(plugin, "budget", "-A", *kc)) == BUDGETS_ALL
    assert ok(run(plugin, "budget", "-n", "ml", "-o", "wide", *kc)) == BUDGETS_ML_WIDE
    assert ok(run(plugin, "budget", "-n", "team-a", *kc)) == BUDGETS_A
    r = run(plugin, "budget", *kc)
    assert (r.returncode, r.stdout, r.stderr) == (
        0, "", "No GPUBudgets found in elastic-gpu namespace.\n")
    doc = json.loads(ok(run(plugin, "budget", "-A", "-o", "json", *kc)))
    assert doc == {"apiVersion": "egpu.kubectl/v1", "kind": "Budgets", "budgets": [
        {"namespace": "ml", "name": "daily", "gpuHours": 1.5, "used": 2, "remaining": -0.5,
         "state": "OverBudget", "period": "Daily", "timeZone": "Europe/Paris",
         "periodStart": "2026-09-20T22:00:00Z", "periodEnd": "2026-09-21T22:00:00Z",
         "meteredUntil": "2026-09-21T10:00:00Z"},
        {"namespace": "team-a", "name": "monthly", "gpuHours": 120, "used": 0.4,
         "remaining": 119.6, "state": "InBudget", "period": "Monthly", "timeZone": "UTC",
         "periodStart": "2026-09-01T00:00:00Z", "periodEnd": "2026-10-01T00:00:00Z",
         "meteredUntil": "2026-09-21T10:00:00Z"},
        {"namespace": "team-a", "name": "new", "gpuHours": 0.25, "used": None,
         "remaining": None, "state": None, "period": "12h", "timeZone": "UTC",
         "periodStart": None, "periodEnd": None, "meteredUntil": None}]}


def kubeconfig_two_contexts(api, path):
    """Contexts a (namespace team-a, current) and m (namespace ml)."""
    url = api.url
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: t, cluster: {{server: '{url}'}}}}]\n"
        "users: [{name: u, user: {token: sched-test-token}}]\n"
        "contexts: [{name: a, context: {cluster: t, user: u, namespace: team-a}},\n"
        "           {name: m, context: {cluster: t, user: u, namespace: ml}}]\n"
        "current-context: a\n")
    return str(path)


def test_kubeconfig_resolution(api, plugin, tmp_path):  # noqa: F811
    claims_setup(api)
    budgets_setup(api)
    kc = kubeconfig_two_contexts(api, tmp_path / "two")
    names = (lambda r: [line.split()[0] for line in ok(r).splitlines()[1:]])
    assert names(run(plugin, "budget", "--kubeconfig", kc)) == ["monthly", "new"]
    assert names(run(plugin, "budget", "--kubeconfig", kc, "--context", "m")) == ["daily"]
    assert names(run(plugin, "budget", "--context", "m", env={"KUBECONFIG": kc})) == ["daily"]
    assert names(run(plugin, "budget", env={"KUBECONFIG": f"{tmp_path}/missing:{kc}"})) == [
        "monthly", "new"]
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text((tmp_path / "two").read_text())
    assert names(run(plugin, "budget", env={"HOME": str(home)})) == ["monthly", "new"]
    # --kubeconfig wins over $KUBECONFIG, as in kubectl.
    assert names(run(plugin, "budget", "--kubeconfig", kc,
                     env={"KUBECONFIG": str(tmp_path / "none")})) == ["monthly", "new"]
    r = run(plugin, "budget", "--kubeconfig", kc, "--context", "nope")
    assert r.returncode == 1 and r.stdout == "" and r.stderr.startswith("kubectl-egpu: ")
    assert "nope" in r.stderr and r.stderr.count("\n") == 1


USAGE_HEAD = "Usage: kubectl egpu COMMAND [OPTION]...\n"


def test_errors(api, plugin, tmp_path):  # noqa: F811
    kc = ("--kubeconfig", api.kubeconfig)
    # A 403 on the list: one line naming the server, the resource and the status.
    st, _ = api.control("fault", {"method": "GET", "path": "/gpus", "code": 403, "count": 1})
    assert st == 200
    r = run(plugin, "inspect", *kc)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == (f"kubectl-egpu: listing gpus.elasticgpu.io from {api.url}: HTTP 403 "
                        "Forbidden: forbidden: injected fault\n")
    st, _ = api.control("fault", {"method": "GET", "path": "/gpubudgets", "code": 403,
                                  "count": 1})
    r = run(plugin, "budget", "-A", *kc)
    assert (r.returncode, r.stderr) == (1, f"kubectl-egpu: listing gpubudgets.elasticgpu.io "
                                           f"from {api.url}: HTTP 403 Forbidden: forbidden: "
                                           "injected fault\n")
    # The ElasticGPUs of bound claims are read too, and their errors count.
    claims_setup(api)
    st, _ = api.control("fault", {"method": "GET", "path": "/elasticgpus$", "code": 500,
                                  "count": 1})
    r = run(plugin, "claims", "-A", *kc)
    assert (r.returncode, r.stderr) == (1, f"kubectl-egpu: listing elasticgpus.elasticgpu.io "
                                           f"from {api.url}: HTTP 500 InternalError: Internal "
                                           "error occurred: injected fault\n")
    # A server that is down answers 503 to everything.
    api.control("down", {"down": True})
    r = run(plugin, "claims", *kc)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith(f"kubectl-egpu: listing elasticgpuclaims.elasticgpu.io from "
                               f"{api.url}: HTTP 503 ServiceUnavailable: ")
    assert r.stderr.count("\n") == 1
    api.control("down", {"down": False})
    # Nothing listening at all.
    gone = tmp_path / "gone"
    gone.write_text("apiVersion: v1\nkind: Config\n"
                    "clusters: [{name: t, cluster: {server: 'http://127.0.0.1:9'}}]\n"
                    "users: [{name: u, user: {token: x}}]\n"
                    "contexts: [{name: t, context: {cluster: t, user: u}}]\n"
                    "current-context: t\n")
    r = run(plugin, "inspect", "--kubeconfig", str(gone))
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("kubectl-egpu: cannot reach http://127.0.0.1:9 to list "
                               "gpus.elasticgpu.io: "), r.stderr
    assert r.stderr.count("\n") == 1
    # Bad usage: exit 2, what was wrong, then the usage text; nothing asked of the server.
    api.call("DELETE", "/_control/requests", token=None)
    for args, first in [
            (("bogus",), 'kubectl-egpu: unknown command "bogus"; allowed: inspect, claims, budget'),
            ((), "kubectl-egpu: no command given; allowed: inspect, claims, budget"),
            (("inspect", "--bogus"), "kubectl-egpu: unknown flag --bogus"),
            (("claims", "-x"), "kubectl-egpu: unknown flag -x"),
            (("inspect", "-o", "yaml"), 'kubectl-egpu: unknown output format "yaml"; allowed: '
                                         "wide, json"),
            (("inspect", "-o"), "kubectl-egpu: flag -o needs a value"),
            (("inspect", "n1", "n2"), 'kubectl-egpu: unexpected argument "n2"'),
            (("claims", "n1"), 'kubectl-egpu: unexpected argument "n1"')]:
        r = run(plugin, *args, *kc) if args[-1:] != ("-o",) else run(plugin, *kc, *args)
        assert (r.returncode, r.stdout) == (2, ""), (args, r.stderr)
        assert r.stderr.startswith(first + "\n\n" + USAGE_HEAD), (args, r.stderr)
    st, reqs = api.call("GET", "/_control/requests", token=None)
    assert reqs == []
    r = run(plugin, "--help")
    assert (r.returncode, r.stderr) == (0, "") and r.stdout.startswith(USAGE_HEAD)


def test_kubectl_runs_the_plugin(api, plugin, tmp_path):  # noqa: F811
    kubectl = tool("kubectl")  # tools/bin's kubectl 1.35 (make deps), else PATH's
    cluster(api)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "kubectl-egpu").symlink_to(plugin)
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    env["PATH"] = f"{bindir}:{env.get('PATH', '')}"
    r = subprocess.run([kubectl, "egpu", "inspect", "--kubeconfig", api.kubeconfig],
                       capture_output=True, text=True, timeout=60, env=env)
    assert (r.returncode, r.stdout) == (0, INSPECT), r.stderr
    r = subprocess.run([kubectl, "plugin", "list"], capture_output=True, text=True, timeout=60,
                       env=env)
    assert str(bindir / "kubectl-egpu") in r.stdout, r.stdout + r.stderr
    r = subprocess.run([kubectl, "egpu", "nonsense"], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 2 and "unknown command" in r.stderr
