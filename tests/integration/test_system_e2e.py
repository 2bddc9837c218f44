"""The whole system, end to end, on a real Kubernetes control plane: etcd,
kube-apiserver, kube-controller-manager and kube-scheduler v1.36 (tests/cluster/cluster.py),
deploy/ installed with `kubectl apply --server-side -k deploy/` as the README says, and every
part of Elastic GPU the real binary, as deploy/ runs it, with its own ServiceAccount
(tests/cluster/components.py): egpu-webhook, called by the API server over TLS with the
configuration's caBundle (a certificate the cluster's CA signed, as cert-manager leaves one);
egpu-scheduler beside the kube-scheduler that deploy/scheduler configures to call it
(SchedulerPair); egpu-controller (claims, GPU status, budget metering, --meter-seconds 1
instead of deploy/'s period, so the story's tiny budget is spent in seconds); and two GPU
nodes (tests/cluster/node.py), each a fake kubelet with the kubelet's identity and
egpu-agent as its device plugin over the mock NVML of a simulated machine of its own. Pods
are made through the API server, so its admission chain (the Priority plugin, the
webhooks, the ValidatingAdmissionPolicy, ResourceQuota) decides what is stored; nothing
here drives filter, prioritize or bind by hand.

Changed from deploy/ for the test: the webhook configurations point at 127.0.0.1 (no
kube-proxy here routes their Service; components.point_webhooks), and --meter-seconds.

The story, in order:

0. Claim "train" (class share, nodeSelector pool=claims) is made before any workload:
   egpu-controller binds it to an ElasticGPU, a slice of a node-b card.
1. lab-1 (namespace lab, GPUBudget of 0.001 GPU-hours) asks a whole card: the webhook gives
   it the in-budget PriorityClass (priority 1000 in the stored pod) and the metering
   finalizer, kube-scheduler through the extender a card, the agent that card without the
   interposer.
2. vcuda-pod asks with gpu-manager's names (tencent.com/vcuda-core 30, vcuda-memory 16):
   the API server's reply carries the webhook's two warnings, the stored pod asks 30% and
   4096 MiB; placed and allocated (vcuda.conf for its card), and a process of it under
   libegpu-vcuda.so over its node's mock driver gets exactly 4096 MiB and is refused beyond.
3. trainer names claim "train": the webhook fills its requests from the claim, and it lands
   on exactly the claim's card.
4. bad-pod asks 150% of a card: the API server refuses it with the webhook's message naming
   the container, the field, the value and the allowed values; nothing is stored.
5. lab-2: by now egpu-controller has metered lab-1 past the lab budget (OverBudget), so the
   webhook gives it the over-budget PriorityClass, its negative priority and preemptionPolicy
   Never, with a warning the client sees.
6. egpu-scheduler is SIGKILLed: the per-node gauges before the kill are kept.
7. While it is down, the kubelet of a node with empty cards restarts (its agent registers
   again), and whole-pod (a whole card) is created: kube-scheduler cannot reach its extender,
   so the pod stays Pending, unbound.
8. egpu-scheduler starts again on the same port: its cache rebuilds the same allocations
   from the API server (per-node gauges equal to before the kill), its filter passes
   whole-pod only on a node with an empty card, and kube-scheduler's retry binds whole-pod
   to an empty card, which the restarted kubelet admits.
9. `kubectl egpu inspect` shows each card with the pods on it (from the GPU objects'
   status.allocated that egpu-controller keeps), the claim named.

A short timeline (seconds since start, pod, event) is printed at the end, and attached to
the message when an assertion fails."""
import json
import os
import pathlib
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from conftest import cluster_module as cl, install_deploy, need_control_plane
from test_agent import ALLOCATED, RES, card_set, mounts, vcuda_conf_of
from test_controller import mkclaim, mkclass
from test_kubectl_egpu import plugin  # noqa: F401 (fixture)
from test_vcuda import CTX_MIB, MIB, OOM, Probe, log_lines, paths  # noqa: F401 (paths: fixture)
import components  # tests/cluster/components.py
import node as nodes  # tests/cluster/node.py

G = "/apis/elasticgpu.io/v1alpha1"
ASSIGNED = "elasticgpu.io/assigned"
NODES = ["node-a", "node-b"]
# node-b's simulated machine: two A100 80GB with UUIDs of their own (node-a: default_cards).
NODE_B_CARDS = ",".join(f"NVIDIA A100-SXM4-80GB:81920:GPU-6d0c1c3e-0000-4000-8000-0000000000b{i}"
                        for i in range(2))
OVER_MSG = ("namespace lab is over its GPU budget (GPUBudget lab); the pod gets PriorityClass "
            "gpu-over-budget and may be preempted by pods of namespaces within budget")


class Timeline:
    """One line per event: seconds since the start, the pod, what happened."""

    def __init__(self):
        self.t0 = time.monotonic()
        self.lines = []

    def __call__(self, pod, what):
        self.lines.append(f"{time.monotonic() - self.t0:6.2f}s  {pod:<11} {what}")

    def text(self):
        return "\n".join(self.lines)


def wait(pred, what, timeout=60):
    return cl.wait_until(pred, what, timeout, every=0.2)


@pytest.fixture(scope="module")
def system(build_dir, tmp_path_factory):
    """The control plane with deploy/ applied, egpu-webhook (configurations pointed at it,
    its CA as caBundle), egpu-controller and the scheduler pair running, each with its
    ServiceAccount. Yields {cluster, dir, webhook, controller, pair}."""
    need_control_plane()
    d = tmp_path_factory.mktemp("system")
    c = cl.Cluster(d / "cluster", controller_manager_args=cl.FAST_NODE_MONITOR).start()
    started = []
    try:
        install_deploy(c)
        w = components.served_webhook(c, build_dir, d)
        started.append(w)
        ctl = components.controller(c, build_dir, d, extra=("--meter-seconds", "1"))
        started.append(ctl)
        pair = components.SchedulerPair(c, build_dir, d, "system")
        started.append(pair)
        yield {"cluster": c, "dir": d, "webhook": w, "controller": ctl, "pair": pair}
    finally:
        for x in reversed(started):
            x.stop()
        c.stop()


def create(c, pod, dry_run=False):
    """POST pod through the API server's admission chain as its owner's client would:
    (HTTP status, the stored (or dry-run) pod or the refusal's Status, the warnings of the
    reply's Warning headers, RFC 7234 299 texts unquoted)."""
    ns = pod["metadata"]["namespace"]
    url = f"{c.url}/api/v1/namespaces/{ns}/pods" + ("?dryRun=All" if dry_run else "")
    req = urllib.request.Request(url, data=json.dumps(pod).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    ctx = c.ssl_context((c.dir / "pki/admin.crt", c.dir / "pki/admin.key"))
    try:
        with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
            status, body, headers = r.status, json.loads(r.read()), r.headers
    except urllib.error.HTTPError as e:
        status, body, headers = e.code, json.loads(e.read()), e.headers
    warnings = []
    for h in headers.get_all("Warning") or []:
        code, _, text = h.split(" ", 2)
        assert code == "299", h
        warnings.append(json.loads(text))  # '- "text"': the agent, then a quoted string
    return status, body, warnings


def gpu_pod(name, resources, ns="default", annotations=None, container="main"):
    """A pod as its owner writes it (the default scheduler, no priority)."""
    meta = {"name": name, "namespace": ns}
    if annotations:
        meta["annotations"] = dict(annotations)
    c = {"name": container, "image": "trainer:1"}
    if resources:
        c["resources"] = {"requests": dict(resources), "limits": dict(resources)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [c]}}


def get(c, path):
    st, obj = c.call("GET", path)
    return obj if st == 200 else None


def get_pod(c, name, ns="default"):
    return get(c, f"/api/v1/namespaces/{ns}/pods/{name}")


def running(world, name, tl, ns="default"):
    """Wait until pod ns/name runs on one of the nodes; (node name, its assigned
    annotation, the kubelet's Admission of container main)."""
    c = world["cluster"]

    def on_node():
        p = get_pod(c, name, ns)
        return p and p["spec"].get("nodeName") and p
    p = wait(on_node, f"{ns}/{name} bound")
    node = p["spec"]["nodeName"]
    p = world["nodes"][node].pod(ns, name)
    a = json.loads(p["metadata"]["annotations"][ASSIGNED])
    assert a["node"] == node, a
    adm = world["nodes"][node].admitted[f"{ns}/{name}"]["main"]
    assert adm.calls == ["GetPreferredAllocation", "Allocate", "PreStartContainer"], adm.calls

    def allocated():
        text = (get_pod(c, name, ns)["metadata"].get("annotations") or {}).get(ALLOCATED)
        return text and json.loads(text)
    alloc = wait(allocated, f"{ns}/{name}'s {ALLOCATED}")
    tl(name, f"bound to {node} by kube-scheduler through the extender; the kubelet admitted it "
             f"({sorted(card_set(adm.devices))}), Running, {ALLOCATED} written")
    return node, a, adm, alloc


def scheduler_figures(pair):
    return {(m, n): pair.metric(f"egpu_scheduler_{m}", n)
            for m in ("allocated_core_percent", "allocated_memory_mib") for n in NODES}


def inspect(plugin_exe, c, d, *args):
    """`kubectl egpu inspect ARGS` as the admin, the plugin on PATH for tools/bin/kubectl."""
    bindir = d / "bin"
    bindir.mkdir(exist_ok=True)
    if not (bindir / "kubectl-egpu").exists():
        (bindir / "kubectl-egpu").symlink_to(plugin_exe)
    env = {**cl.clean_env(), "KUBECONFIG": c.kubeconfig,
           "PATH": f"{bindir}:{os.environ.get('PATH', '')}"}
    r = subprocess.run([str(cl.BIN / "kubectl"), "egpu", "inspect", *args],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_system_end_to_end(system, build_dir, paths, plugin):  # noqa: F811
    """The story of the module's docstring, every step through the real API server."""
    tl = Timeline()
    try:
        story(system, build_dir, paths, plugin, tl)
    except (AssertionError, TimeoutError) as e:
        raise AssertionError(f"{e}\n\ntimeline:\n{tl.text()}") from e
    finally:
        print("\ntimeline:\n" + tl.text())


def story(world, build_dir, paths, plugin, tl):  # noqa: F811
    c = world["cluster"]
    # The budget, the claim class and two GPU nodes.
    c.namespace("lab")
    st, out = c.call("POST", f"{G}/namespaces/lab/gpubudgets", {
        "apiVersion": "elasticgpu.io/v1alpha1", "kind": "GPUBudget",
        "metadata": {"name": "lab", "namespace": "lab"},
        "spec": {"gpuHours": 0.001, "period": "Daily",  # 3.6 s of one whole card
                 "inBudgetPriorityClassName": "gpu-in-budget",
                 "overBudgetPriorityClassName": "gpu-over-budget"}})
    assert st == 201, out
    mkclass(c, "share", params={"nodeSelector": "pool=claims"})
    world["nodes"] = {}
    try:
        for name, labels, cards in (("node-a", {"pool": "shared"}, None),
                                    ("node-b", {"pool": "claims"}, NODE_B_CARDS)):
            world["nodes"][name] = nodes.Node(c, name, build_dir, labels=labels,
                                              cards=cards).start()
        run_story(world, paths, plugin, tl)
        for n in world["nodes"].values():
            assert n.errors == [], n.errors
    finally:
        for n in world["nodes"].values():
            n.stop()


def run_story(world, paths, plugin, tl):  # noqa: F811
    c, pair = world["cluster"], world["pair"]

    def gpu_objects():
        lst = (get(c, f"{G}/gpus") or {}).get("items", [])
        return len(lst) == 4 and all((g.get("status") or {}).get("health") == "Healthy"
                                     for g in lst) and lst
    gpus = {g["spec"]["uuid"]: (g["metadata"]["name"], g)
            for g in wait(gpu_objects, "the two agents' 4 GPU objects, Healthy")}
    # TaintNodesByCondition gives a new node the not-ready taint until the node lifecycle
    # controller has seen it Ready
    wait(lambda: all(not get(c, f"/api/v1/nodes/{n}")["spec"].get("taints") for n in NODES),
         "nodes Ready and untainted", timeout=90)
    wait(pair.ready, "egpu-scheduler ready (its kube-scheduler leads)")
    tl("-", "two nodes Ready, their agents' 4 GPU objects published, the scheduler pair ready")

    # 0. A claim made before the workloads: egpu-controller binds it to a slice of a node-b
    # card (the class selects pool=claims).
    mkclaim(c, "train", core=30, mem=4096)

    def bound():
        cl_ = get(c, f"{G}/namespaces/default/elasticgpuclaims/train")
        return (cl_.get("status") or {}).get("phase") == "Bound" and cl_
    ename = wait(bound, "claim train Bound")["status"]["elasticGPUName"]
    e = get(c, f"{G}/elasticgpus/{ename}")
    assert e["spec"]["nodeName"] == "node-b", e
    tl("trainer", f"claim train Bound to {ename[:14]}... on node-b "
                  f"{e['spec']['gpuShare']['gpuName']}")
    wait(lambda: ((get(c, f"{G}/namespaces/lab/gpubudgets/lab") or {}).get("status") or {})
         .get("state") == "InBudget", "GPUBudget lab InBudget")

    # 1. lab-1: a whole card, within the lab budget.
    st, lab1, warns = create(c, gpu_pod("lab-1", {"elasticgpu.io/gpu-core": "100"}, ns="lab"))
    assert st == 201, lab1
    spec = lab1["spec"]
    assert (spec["schedulerName"], spec["priorityClassName"], spec["priority"]) == \
        ("elastic-gpu-scheduler", "gpu-in-budget", 1000), spec
    assert "elasticgpu.io/metering" in lab1["metadata"]["finalizers"]
    tl("lab-1", "admitted: PriorityClass gpu-in-budget (1000), metering finalizer")
    node, a, adm, alloc = running(world, "lab-1", tl, ns="lab")
    assert len(a["containers"]) == 1 and a["containers"][0]["core"] == 100, a
    (whole_uuid,) = a["containers"][0]["gpus"]
    assert gpus[whole_uuid][1]["spec"]["nodeName"] == node
    assert card_set(adm.devices) == {whole_uuid}
    assert adm.envs["NVIDIA_VISIBLE_DEVICES"] == whole_uuid
    assert set(mounts(adm.container_response)) == {"/etc/elastic-gpu"}  # no interposer
    assert alloc["containers"]["main"]["gpus"] == [whole_uuid]

    # 2. vcuda-pod, in gpu-manager's names: rewritten, placed, allocated, and its process
    # held to 4096 MiB under the interposer over the mock driver.
    st, vpod, warns = create(c, gpu_pod(
        "vcuda-pod", {"tencent.com/vcuda-core": "30", "tencent.com/vcuda-memory": "16"}))
    assert st == 201, vpod
    assert warns == [
        'container "main": tencent.com/vcuda-core rewritten to elasticgpu.io/gpu-core 30 '
        '(percent of a card)',
        'container "main": tencent.com/vcuda-memory 16 (1 = 256 MiB) rewritten to '
        'elasticgpu.io/gpu-memory 4096 (MiB)'], warns
    want = {"elasticgpu.io/gpu-core": "30", "elasticgpu.io/gpu-memory": "4096"}
    assert vpod["spec"]["containers"][0]["resources"] == {"requests": want, "limits": want}
    assert vpod["spec"]["schedulerName"] == "elastic-gpu-scheduler"
    tl("vcuda-pod", "admitted: tencent.com/vcuda-core 30, vcuda-memory 16 -> "
                    "gpu-core 30, gpu-memory 4096 (2 warnings in the reply)")
    vnode, a, adm, alloc = running(world, "vcuda-pod", tl)
    (vuuid,) = a["containers"][0]["gpus"]
    assert vuuid != whole_uuid and gpus[vuuid][1]["spec"]["nodeName"] == vnode
    assert a["containers"][0] == {"name": "main", "core": 30, "memory": 4096, "gpus": [vuuid]}
    assert card_set(adm.devices) == {vuuid}
    assert alloc == {"containers": {"main": {"gpus": [vuuid], "core": 30, "memory": 4096}}}
    conf, _ = vcuda_conf_of(adm)
    assert conf == {"EGPU_VCUDA_GPUS": vuuid, "EGPU_VCUDA_MEMORY_MIB": "4096",
                    "EGPU_VCUDA_CORE": "30", "EGPU_VCUDA_CORE_LIMIT": "30"}
    index = gpus[vuuid][1]["spec"]["index"]
    n = world["nodes"][vnode]
    probe = Probe({"state": n.state, "paths": paths,
                   "dir": pathlib.Path(mounts(adm.container_response)["/etc/elastic-gpu"]
                                       .host_path)},
                  conf={"EGPU_MOCK_NVML_GPUS": n.cards or nodes.default_cards(vnode)})
    assert probe.rc("init") == 0 and probe.rc(f"ctx {index} primary") == 0
    fits = (4096 - CTX_MIB) // 100
    assert probe("fill mem %d" % (100 * MIB)) == ["fill", str(fits), str(OOM)], probe.stderr()
    assert probe(f"totalmem {index}") == ["totalmem", "0", str(4096 * MIB)]
    assert probe.close() == 0
    assert log_lines(probe.stderr()) == []
    tl("vcuda-pod", f"process under libegpu-vcuda.so: context {CTX_MIB} MiB + {fits} x 100 MiB, "
                    "the next refused (CUDA_ERROR_OUT_OF_MEMORY); cuDeviceTotalMem 4096 MiB")

    # 3. trainer uses claim "train", which the controller bound on node-b.
    by_name = {name: g for name, g in gpus.values()}
    cuuid = by_name[e["spec"]["gpuShare"]["gpuName"]]["spec"]["uuid"]
    st, tpod, warns = create(c, gpu_pod("trainer", None,
                                        annotations={"egpuc.elasticgpu.io/main": "train"}))
    assert st == 201, tpod
    assert tpod["spec"]["containers"][0]["resources"] == {"requests": want, "limits": want}
    tl("trainer", "admitted: requests filled from claim train (30%, 4096 MiB)")
    tnode, a, adm, _ = running(world, "trainer", tl)
    assert tnode == "node-b"
    assert a["containers"] == [{"name": "main", "core": 30, "memory": 4096, "gpus": [cuuid]}]
    assert card_set(adm.devices) == {cuuid}

    # 4. A bad pod: the API server refuses it with the webhook's message; nothing stored.
    st, denied, _ = create(c, gpu_pod("bad-pod", {"elasticgpu.io/gpu-core": "150"},
                                      container="cuda"))
    assert st == 403 and denied["reason"] == "Forbidden", denied
    assert denied["message"].startswith("admission webhook \"validate.webhook.elasticgpu.io\" "
                                        "denied the request: "), denied
    assert denied["message"].endswith(
        'container "cuda": elasticgpu.io/gpu-core is 150; allowed: 1..99 to share one card, '
        'or a multiple of 100 for whole cards'), denied
    assert get_pod(c, "bad-pod") is None
    tl("bad-pod", "refused: " + denied["message"])

    # 5. lab-2: the controller has metered lab-1 past the budget.
    def over():
        b = get(c, f"{G}/namespaces/lab/gpubudgets/lab")
        return b and (b.get("status") or {}).get("state") == "OverBudget" and b
    b = wait(over, "GPUBudget lab OverBudget", timeout=60)
    tl("lab-2", f"GPUBudget lab OverBudget (used {b['status']['used']} of 0.001 GPU-hours)")
    lab2 = gpu_pod("lab-2", {"elasticgpu.io/gpu-core": "20", "elasticgpu.io/gpu-memory": "2048"},
                   ns="lab")
    # The webhook's watch brings the budget's state: until then a dry run (nothing
    # stored; the webhooks have sideEffects None) gets the in-budget class.
    wait(lambda: create(c, lab2, dry_run=True)[2][:1] == [OVER_MSG],
         "the webhook sees the budget over")
    st, lab2, warns = create(c, lab2)
    assert st == 201 and warns[:1] == [OVER_MSG], (lab2, warns)
    spec = lab2["spec"]
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == \
        ("gpu-over-budget", -1000, "Never"), spec
    tl("lab-2", "admitted: over budget -> PriorityClass gpu-over-budget (-1000, Never)")
    n2, a, _, _ = running(world, "lab-2", tl, ns="lab")
    (l2uuid,) = a["containers"][0]["gpus"]
    assert a["containers"][0]["core"] == 20 and gpus[l2uuid][1]["spec"]["nodeName"] == n2

    # 6. egpu-scheduler SIGKILLed. The gauges follow the cache about once a second: lab-1
    # 100, the claim's reservation 30 (trainer inside it), vcuda-pod 30, lab-2 20.
    wait(lambda: sum(v or 0 for (m, _), v in scheduler_figures(pair).items()
                     if m == "allocated_core_percent") == 180, "the gauges at 180% in all")
    before = scheduler_figures(pair)
    port = pair.ext.ports[0]
    pair.kill_extender(signal.SIGKILL)
    tl("-", "egpu-scheduler SIGKILLed")

    # 7. While it is down: the kubelet of a node with empty cards (where whole-pod must go)
    # restarts and its agent registers again; whole-pod cannot be placed.
    used = {whole_uuid, vuuid, cuuid, l2uuid}
    empty = set(gpus) - used
    target = sorted({gpus[u][1]["spec"]["nodeName"] for u in empty})
    assert empty and target, (empty, used)
    kb = world["nodes"][target[0]].kubelet
    kb.restart()
    reg = kb.wait_for_registration(2, timeout=30)
    assert reg.ok, reg.error
    kb.wait_for_devices(RES, lambda d: len(d) == 200, timeout=30)
    wait(lambda: get(c, f"/api/v1/nodes/{target[0]}")["status"]["allocatable"].get(RES)
         == "200", f"{target[0]}'s allocatable {RES} 200 again")
    tl("-", f"{target[0]}'s kubelet restarted; its agent registered again (200 IDs)")
    st, wpod, _ = create(c, gpu_pod("whole-pod", {"elasticgpu.io/gpu-core": "100"}))
    assert st == 201, wpod

    def failed_scheduling():
        st, evs = c.call("GET", "/api/v1/namespaces/default/events"
                         "?fieldSelector=involvedObject.name%3Dwhole-pod")
        return st == 200 and [e for e in evs["items"] if e["reason"] == "FailedScheduling"]
    ev = wait(failed_scheduling, "whole-pod's FailedScheduling while the extender is down")
    assert not get_pod(c, "whole-pod")["spec"].get("nodeName")
    tl("whole-pod", "Pending, extender down: " + ev[0]["message"][:120])

    # 8. egpu-scheduler started again on the same port: its cache rebuilds the same
    # allocations from the API server, and whole-pod goes only to a card with nothing on it.
    pair.start_extender()
    wait(pair.ready, "egpu-scheduler ready again")
    def rebuilt():
        # before the kill, plus whole-pod once kube-scheduler's retry has bound it (it may
        # be bound before the gauges are first read: a whole card, the card's memory)
        want = dict(before)
        p = get_pod(c, "whole-pod")
        text = (p["metadata"].get("annotations") or {}).get(ASSIGNED)
        if text:
            a = json.loads(text)
            (u,) = a["containers"][0]["gpus"]
            for k, v in ((("allocated_core_percent", a["node"]), 100),
                         (("allocated_memory_mib", a["node"]), gpus[u][1]["spec"]["memory"])):
                want[k] = (want[k] or 0) + v
        return scheduler_figures(pair) == want
    wait(rebuilt, "the cache rebuilt as before the kill (and whole-pod)", timeout=30)
    tl("-", "egpu-scheduler restarted, cache rebuilt: core per node " + ", ".join(
        f"{n} {before[('allocated_core_percent', n)]:.0f}%" for n in NODES) + ", as before")
    wnode, a, adm, _ = running(world, "whole-pod", tl)
    assert wnode in target, (wnode, target)
    (wuuid,) = a["containers"][0]["gpus"]
    assert wuuid in empty, (a, empty)
    assert card_set(adm.devices) == {wuuid}
    # what its filter says of a second whole-card pod now, as kube-scheduler asks it
    st, probe_pod, _ = create(c, gpu_pod("whole-2", {"elasticgpu.io/gpu-core": "100"}),
                              dry_run=True)
    assert st == 201, probe_pod
    out = post(port, "filter", {"Pod": probe_pod, "Nodes": None, "NodeNames": NODES})
    free = {gpus[u][1]["spec"]["nodeName"] for u in empty - {wuuid}}
    assert set(out["NodeNames"]) == free, (out, free)
    for n in set(NODES) - free:
        assert "whole free cards" in out["FailedNodes"][n], out

    # 9. kubectl egpu inspect shows each card with its pods.
    want_cards = {u: set() for u in gpus}
    for u, pod in ((whole_uuid, "lab/lab-1"), (vuuid, "default/vcuda-pod"),
                   (cuuid, "default/trainer"), (l2uuid, "lab/lab-2"),
                   (wuuid, "default/whole-pod")):
        want_cards[u].add(pod)
    want_cards = {gpus[u][0]: v for u, v in want_cards.items()}

    def shown():
        doc = json.loads(inspect(plugin, c, world["dir"], "-o", "json"))
        got = {g["name"]: {f"{p['namespace']}/{p['pod']}" for p in g["pods"]}
               for n in doc["nodes"] for g in n["gpus"]}
        return got == want_cards and doc
    doc = wait(shown, f"kubectl egpu inspect shows {want_cards}")
    claims = {p["claim"] for n in doc["nodes"] for g in n["gpus"] for p in g["pods"]}
    assert claims == {None, "train"}
    tl("-", "kubectl egpu inspect:\n" + inspect(plugin, c, world["dir"]).rstrip())


def post(port, verb, body):
    """POST body to egpu-scheduler's extender verb, as kube-scheduler does: the reply."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/{verb}",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())
