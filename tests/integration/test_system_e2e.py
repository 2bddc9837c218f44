"""The whole system, end to end (issue 16), every part the real binary: the
test API server, egpu-webhook over TLS, egpu-scheduler driven as
kube-scheduler drives it (filter, prioritize, bind to the best), egpu-controller
(claims, GPU status, budget metering), and two egpu-agents, each over the
mock NVML of its own simulated machine with a fake kubelet.

The test API server calls no admission webhooks, so every pod CREATE goes
through admission here as a kube-apiserver would send it: its Priority plugin
sets spec.priority, then the AdmissionReview goes to egpu-webhook's /mutate
over TLS, the returned JSON Patch is applied, then /validate; a denial ends
it, else the pod is created. Pods bound by the scheduler are admitted by
their node's fake kubelet (GetPreferredAllocation, Allocate,
PreStartContainer) as the kubelet does.

The story, in order:

0. Claim "train" (class share, nodeSelector pool=claims) is made before
   any workload: egpu-controller binds it to an ElasticGPU, a slice of a
   node-b card.
1. lab-1 (namespace lab, GPUBudget of 0.001 GPU-hours) asks a whole card:
   the webhook gives it the in-budget PriorityClass and the metering
   finalizer, the scheduler a card, the agent that card without the
   interposer.
2. vcuda-pod asks with gpu-manager's names (tencent.com/vcuda-core 30,
   tencent.com/vcuda-memory 16): rewritten to 30% and 4096 MiB with a
   warning per name, placed, allocated (vcuda.conf for its card), and a
   process of it under libegpu-vcuda.so over its node's mock driver gets
   exactly 4096 MiB and is refused beyond.
3. trainer names claim "train": the webhook fills its requests from the
   claim, and it lands on exactly the claim's card.
4. bad-pod asks 150% of a card: denied, the message naming the container,
   the field, the value and the allowed values; nothing is created.
5. lab-2: by now egpu-controller has metered lab-1 past the lab budget
   (OverBudget), so the webhook gives it the over-budget PriorityClass, its
   negative priority and preemptionPolicy Never.
6. egpu-scheduler is SIGKILLed with lab-2 bound but not yet admitted.
7. Meanwhile lab-2's kubelet admits it, and the kubelet of the node that
   still has empty cards restarts: its agent registers again.
8. egpu-scheduler starts again: its cache rebuilds the same allocations
   (per-node gauges equal to before the kill), and whole-pod (a whole card)
   passes filter only on a node with an empty card, lands on an empty card,
   and the restarted kubelet admits it.
9. `kubectl egpu inspect` against the same server shows each card with the
   pods on it (from the GPU objects' status.allocated that egpu-controller
   keeps), the claim named.

A short timeline (seconds since start, pod, event) is printed at the end,
and attached to the message when an assertion fails."""
import base64
import copy
import json
import os
import pathlib
import signal
import subprocess
import time

import jsonpatch

from conftest import find_tool
from test_agent import ALLOCATED, RES, agent_bin, card_set, mounts, vcuda_conf_of  # noqa: F401
from test_claims_e2e import admit, mock_node
from test_controller import G, claim, ctl, egpu, mkclass, mkclaim, wait, wait_phase  # noqa: F401
from test_kubectl_egpu import plugin  # noqa: F401
from test_scheduler import ASSIGNED, api, sched  # noqa: F401
from test_scheduler_claims import schedule
from test_vcuda import CTX_MIB, MIB, OOM, Probe, log_lines, paths  # noqa: F401
from test_webhook import Webhook, cert, need  # noqa: F401
from test_webhook_budgets import priority_class

NODES = ["node-a", "node-b"]
# node-b's simulated machine: two A100 80GB with UUIDs of its own.
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


def gpu_pod(name, resources, ns="default", annotations=None, container="main"):
    """A pod as its owner writes it (default scheduler, no priority)."""
    meta = {"name": name, "namespace": ns}
    if annotations:
        meta["annotations"] = dict(annotations)
    c = {"name": container, "image": "trainer:1"}
    if resources:
        c["resources"] = {"requests": dict(resources), "limits": dict(resources)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": "default-scheduler", "containers": [c]}}


def through_admission(api, w, pod, create=True):  # noqa: F811
    """A pod CREATE as kube-apiserver handles it with deploy/webhook's two
    webhooks: the Priority plugin (no class named: priority 0), /mutate and
    its JSON Patch, /validate, then the create. Returns (the pod, as created
    when create, the warnings, the denial's status or None)."""
    pod = copy.deepcopy(pod)
    pod["spec"].setdefault("priority", 0)
    pod["spec"].setdefault("preemptionPolicy", "PreemptLowerPriority")
    warnings = []
    for route in ("/mutate", "/validate"):
        resp = admit(w, route, pod)
        warnings += resp.get("warnings") or []
        if not resp["allowed"]:
            return None, warnings, resp["status"]
        if "patch" in resp:
            assert route == "/mutate" and resp["patchType"] == "JSONPatch", resp
            pod = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(resp["patch"])))
    if create:
        ns = pod["metadata"]["namespace"]
        st, pod = api.call("POST", f"/api/v1/namespaces/{ns}/pods", pod)
        assert st == 201, pod
    return pod, warnings, None


def get_pod(api, name, ns="default"):  # noqa: F811
    st, p = api.call("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
    return p if st == 200 else None


def place(s, pod, tl, timeout=20):
    """kube-scheduler's cycle (filter, prioritize, bind to the best), again
    while bind says retry, as kube-scheduler retries; the node bound."""
    name = pod["metadata"]["name"]
    deadline = time.time() + timeout
    while True:
        node, failed, err = schedule(s, pod, NODES)
        if node:
            break
        assert time.time() < deadline, f"{name} not bound: failed={failed} error={err}\n" \
            + s.log.read_text()[-3000:]
        time.sleep(0.2)
    tl(name, f"bound to {node} (filter passed {sorted(set(NODES) - set(failed))})")
    return node


def assigned_of(api, name, ns="default"):  # noqa: F811
    p = get_pod(api, name, ns)
    return p["spec"].get("nodeName"), json.loads(p["metadata"]["annotations"][ASSIGNED])


def kubelet_admit(api, node, pod, core, tl):  # noqa: F811
    """The node's kubelet admits the pod's container; the agent's answer and
    the elasticgpu.io/allocated it writes back."""
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    adm = node["kubelet"].admit(RES, core, namespace=ns, pod=name, container="main", check=True)
    assert adm.calls == ["GetPreferredAllocation", "Allocate", "PreStartContainer"], adm.calls

    def allocated():
        p = get_pod(api, name, ns)
        text = p["metadata"].get("annotations", {}).get(ALLOCATED)
        return text and json.loads(text)
    alloc = wait(allocated, f"{ns}/{name}'s {ALLOCATED}")
    tl(name, f"kubelet admitted: {core} IDs on {sorted(card_set(adm.devices))}, "
             f"{ALLOCATED} written")
    return adm, alloc


def scheduler_figures(s):
    return {(m, n): s.metric(f"egpu_scheduler_{m}", f'{{node="{n}"}}')
            for m in ("allocated_core_percent", "allocated_memory_mib") for n in NODES}


def inspect(plugin_exe, api, *args):  # noqa: F811
    """`kubectl egpu inspect ARGS` with the plugin on PATH (kubectl from
    tools/bin or PATH), or kubectl-egpu itself when there is no kubectl."""
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    kubectl = find_tool("kubectl")
    if kubectl:
        bindir = pathlib.Path(api.kubeconfig).parent / "bin"
        bindir.mkdir(exist_ok=True)
        if not (bindir / "kubectl-egpu").exists():
            (bindir / "kubectl-egpu").symlink_to(plugin_exe)
        env["PATH"] = f"{bindir}:{env.get('PATH', '')}"
        cmd = [kubectl, "egpu", "inspect", "--kubeconfig", api.kubeconfig, *args]
    else:
        cmd = [str(plugin_exe), "inspect", "--kubeconfig", api.kubeconfig, *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, (cmd, r.stderr)
    return r.stdout


def test_system_end_to_end(api, ctl, sched, cert, build_dir, agent_bin, paths, plugin,  # noqa: F811
                           tmp_path):
    need("curl")
    tl = Timeline()
    try:
        story(api, ctl, sched, cert, build_dir, agent_bin, paths, plugin, tmp_path, tl)
    except AssertionError as e:
        raise AssertionError(f"{e}\n\ntimeline:\n{tl.text()}") from e
    finally:
        print("\ntimeline:\n" + tl.text())


def story(api, ctl, sched, cert, build_dir, agent_bin, paths, plugin, tmp_path, tl):  # noqa: F811
    # The cluster: the PriorityClasses and budget of deploy/, the claim class,
    # egpu-controller, two GPU nodes, egpu-webhook and egpu-scheduler.
    priority_class(api, "gpu-in-budget", 1000)
    priority_class(api, "gpu-over-budget", -10, "Never")
    st, out = api.call("POST", f"{G}/namespaces/lab/gpubudgets", {
        "apiVersion": "elasticgpu.io/v1alpha1", "kind": "GPUBudget",
        "metadata": {"name": "lab", "namespace": "lab"},
        "spec": {"gpuHours": 0.001, "period": "Daily",  # 3.6 s of one whole card
                 "inBudgetPriorityClassName": "gpu-in-budget",
                 "overBudgetPriorityClassName": "gpu-over-budget"}})
    assert st == 201, out
    mkclass(api, "share", params={"nodeSelector": "pool=claims"})
    ctl("c1", ("--leader-elect", "false", "--meter-seconds", "1"))
    with mock_node(api, agent_bin, paths, "node-a", {"pool": "shared"}) as node_a, \
            mock_node(api, agent_bin, paths, "node-b", {"pool": "claims"},
                      cards=NODE_B_CARDS) as node_b:
        nodes = {"node-a": node_a, "node-b": node_b}
        gpus = {g["spec"]["uuid"]: (name, g) for n in nodes.values()
                for name, g in n["gpus"].items()}
        tl("-", "two agents registered with their kubelets, 4 GPU objects published")
        w = Webhook(build_dir, api.kubeconfig, cert, tmp_path)
        try:
            w.wait_ready()
            s = sched("s1")
            s.wait_ready()
            tl("-", "webhook (TLS), scheduler and controller ready")
            # A claim made before the workloads: egpu-controller binds it to
            # a slice of a node-b card (the class selects pool=claims).
            mkclaim(api, "train", core=30, mem=4096)
            ename = wait_phase(api, claim, "train", "Bound")["status"]["elasticGPUName"]
            e = egpu(api, ename)
            assert e["spec"]["nodeName"] == "node-b", e
            tl("trainer", f"claim train Bound to {ename[:14]}... on node-b "
                          f"{e['spec']['gpuShare']['gpuName']}")
            run_story(api, ctl, sched, w, s, nodes, gpus, paths, plugin, tl, e)
            assert w.stop() == 0, w.log.read_text()
        finally:
            w.stop()


def run_story(api, ctl, sched, w, s, nodes, gpus, paths, plugin, tl, e):  # noqa: F811
    # 1. lab-1: a whole card, within the lab budget.
    lab1, warns, denied = through_admission(api, w, gpu_pod(
        "lab-1", {"elasticgpu.io/gpu-core": "100"}, ns="lab"))
    assert denied is None, denied
    spec = lab1["spec"]
    assert (spec["schedulerName"], spec["priorityClassName"], spec["priority"]) == \
        ("elastic-gpu-scheduler", "gpu-in-budget", 1000), spec
    assert "elasticgpu.io/metering" in lab1["metadata"]["finalizers"]
    tl("lab-1", "admitted: PriorityClass gpu-in-budget (1000), metering finalizer")
    node = place(s, lab1, tl)
    _, a = assigned_of(api, "lab-1", "lab")
    assert a["node"] == node and len(a["containers"]) == 1, a
    (whole_uuid,) = a["containers"][0]["gpus"]
    assert a["containers"][0]["core"] == 100
    adm, alloc = kubelet_admit(api, nodes[node], lab1, 100, tl)
    assert card_set(adm.devices) == {whole_uuid}
    assert adm.envs["NVIDIA_VISIBLE_DEVICES"] == whole_uuid
    assert set(mounts(adm.container_response)) == {"/etc/elastic-gpu"}  # no interposer
    assert alloc["containers"]["main"]["gpus"] == [whole_uuid]

    # 2. vcuda-pod, in gpu-manager's names: rewritten, placed, allocated, and
    # its process held to 4096 MiB under the interposer over the mock driver.
    vpod, warns, denied = through_admission(api, w, gpu_pod(
        "vcuda-pod", {"tencent.com/vcuda-core": "30", "tencent.com/vcuda-memory": "16"}))
    assert denied is None, denied
    assert warns == [
        'container "main": tencent.com/vcuda-core rewritten to elasticgpu.io/gpu-core 30 '
        '(percent of a card)',
        'container "main": tencent.com/vcuda-memory 16 (1 = 256 MiB) rewritten to '
        'elasticgpu.io/gpu-memory 4096 (MiB)'], warns
    want = {"elasticgpu.io/gpu-core": "30", "elasticgpu.io/gpu-memory": "4096"}
    assert vpod["spec"]["containers"][0]["resources"] == {"requests": want, "limits": want}
    assert vpod["spec"]["schedulerName"] == "elastic-gpu-scheduler"
    tl("vcuda-pod", "admitted: tencent.com/vcuda-core 30, vcuda-memory 16 -> "
                    "gpu-core 30, gpu-memory 4096 (2 warnings)")
    vnode = place(s, vpod, tl)
    _, a = assigned_of(api, "vcuda-pod")
    (vuuid,) = a["containers"][0]["gpus"]
    assert vuuid != whole_uuid and gpus[vuuid][1]["spec"]["nodeName"] == vnode
    assert a["containers"][0] == {"name": "main", "core": 30, "memory": 4096, "gpus": [vuuid]}
    adm, alloc = kubelet_admit(api, nodes[vnode], vpod, 30, tl)
    assert card_set(adm.devices) == {vuuid}
    assert alloc == {"containers": {"main": {"gpus": [vuuid], "core": 30, "memory": 4096}}}
    conf, _ = vcuda_conf_of(adm)
    assert conf == {"EGPU_VCUDA_GPUS": vuuid, "EGPU_VCUDA_MEMORY_MIB": "4096",
                    "EGPU_VCUDA_CORE": "30", "EGPU_VCUDA_CORE_LIMIT": "30"}
    index = gpus[vuuid][1]["spec"]["index"]
    world = {"state": nodes[vnode]["state"], "paths": paths,
             "dir": pathlib.Path(mounts(adm.container_response)["/etc/elastic-gpu"].host_path)}
    probe = Probe(world, conf={"EGPU_MOCK_NVML_GPUS": nodes[vnode]["cards"]}
                  if nodes[vnode]["cards"] else None)
    assert probe.rc("init") == 0 and probe.rc(f"ctx {index} primary") == 0
    fits = (4096 - CTX_MIB) // 100
    assert probe("fill mem %d" % (100 * MIB)) == ["fill", str(fits), str(OOM)], probe.stderr()
    assert probe(f"totalmem {index}") == ["totalmem", "0", str(4096 * MIB)]
    assert probe.close() == 0
    assert log_lines(probe.stderr()) == []
    tl("vcuda-pod", f"process under libegpu-vcuda.so: context {CTX_MIB} MiB + {fits} x 100 MiB, "
                    "the next refused (CUDA_ERROR_OUT_OF_MEMORY); cuDeviceTotalMem 4096 MiB")

    # 3. trainer uses claim "train", which the controller bound on node-b.
    cuuid = nodes["node-b"]["gpus"][e["spec"]["gpuShare"]["gpuName"]]["spec"]["uuid"]
    tpod, warns, denied = through_admission(api, w, gpu_pod(
        "trainer", None, annotations={"egpuc.elasticgpu.io/main": "train"}))
    assert denied is None, denied
    assert tpod["spec"]["containers"][0]["resources"] == {"requests": want, "limits": want}
    tl("trainer", "admitted: requests filled from claim train (30%, 4096 MiB)")
    assert place(s, tpod, tl) == "node-b"
    _, a = assigned_of(api, "trainer")
    assert a["containers"] == [{"name": "main", "core": 30, "memory": 4096, "gpus": [cuuid]}]
    adm, _ = kubelet_admit(api, nodes["node-b"], tpod, 30, tl)
    assert card_set(adm.devices) == {cuuid}

    # 4. A bad pod: a clear denial, nothing created.
    bad, warns, denied = through_admission(api, w, gpu_pod(
        "bad-pod", {"elasticgpu.io/gpu-core": "150"}, container="cuda"))
    assert bad is None
    assert denied == {"metadata": {}, "status": "Failure", "reason": "Forbidden", "code": 403,
                      "message": 'container "cuda": elasticgpu.io/gpu-core is 150; allowed: '
                                 '1..99 to share one card, or a multiple of 100 for whole '
                                 'cards'}, denied
    assert get_pod(api, "bad-pod") is None
    tl("bad-pod", "denied: " + denied["message"])

    # 5. lab-2: the controller has metered lab-1 past the budget.
    def over():
        st, b = api.call("GET", f"{G}/namespaces/lab/gpubudgets/lab")
        return st == 200 and (b.get("status") or {}).get("state") == "OverBudget" and b
    b = wait(over, "GPUBudget lab OverBudget", timeout=30)
    tl("lab-2", f"GPUBudget lab OverBudget (used {b['status']['used']} of 0.001 GPU-hours)")
    lab2 = gpu_pod("lab-2", {"elasticgpu.io/gpu-core": "20", "elasticgpu.io/gpu-memory": "2048"},
                   ns="lab")
    # The webhook's watch brings the budget's state: until then a dry run
    # (nothing created) gets the in-budget class.
    wait(lambda: through_admission(api, w, lab2, create=False)[1][:1] == [OVER_MSG],
         "the webhook sees the budget over")
    lab2, warns, denied = through_admission(api, w, lab2)
    assert denied is None and warns[0] == OVER_MSG, (denied, warns)
    spec = lab2["spec"]
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == \
        ("gpu-over-budget", -10, "Never"), spec
    tl("lab-2", "admitted: over budget -> PriorityClass gpu-over-budget (-10, Never)")
    n2 = place(s, lab2, tl)
    _, a = assigned_of(api, "lab-2", "lab")
    (l2uuid,) = a["containers"][0]["gpus"]
    assert a["containers"][0]["core"] == 20 and gpus[l2uuid][1]["spec"]["nodeName"] == n2

    # 6. egpu-scheduler SIGKILLed mid-way: lab-2 is bound, its kubelet has
    # not admitted it yet. The gauges follow the cache about once a second:
    # lab-1 100, the claim's reservation 30 (trainer inside it), vcuda-pod
    # 30, lab-2 20.
    s.wait_until(lambda: sum(v or 0 for (m, _), v in scheduler_figures(s).items()
                             if m == "allocated_core_percent") == 180)
    before = scheduler_figures(s)
    s.stop(signal.SIGKILL)
    tl("-", "egpu-scheduler SIGKILLed")

    # 7. While it is down: the kubelet admits lab-2 (no scheduler needed),
    # and the kubelet of the node with empty cards (where whole-pod must go)
    # restarts; its agent registers again.
    kubelet_admit(api, nodes[n2], lab2, 20, tl)
    used = {whole_uuid, vuuid, cuuid, l2uuid}
    empty = set(gpus) - used
    target = sorted({gpus[u][1]["spec"]["nodeName"] for u in empty})
    assert empty and target, (empty, used)
    kb = nodes[target[0]]["kubelet"]
    kb.restart()
    reg = kb.wait_for_registration(2, timeout=15)
    assert reg.ok, reg.error
    kb.wait_for_devices(RES, lambda d: len(d) == 200, timeout=15)
    tl("-", f"{target[0]}'s kubelet restarted; its agent registered again (200 IDs)")

    # 8. egpu-scheduler started again: its cache rebuilds the same
    # allocations from the API server, and whole-pod goes only to a card
    # with nothing on it.
    s = sched("s2")
    s.wait_ready(timeout=30)
    s.wait_until(lambda: scheduler_figures(s) == before, timeout=15)
    tl("-", "egpu-scheduler restarted, cache rebuilt: core per node " + ", ".join(
        f"{n} {before[('allocated_core_percent', n)]:.0f}%" for n in NODES) + ", as before")
    wpod, _, denied = through_admission(api, w, gpu_pod("whole-pod",
                                                        {"elasticgpu.io/gpu-core": "100"}))
    assert denied is None, denied
    st, out = s.post("filter", {"Pod": wpod, "Nodes": None, "NodeNames": NODES})
    assert st == 200 and set(out["NodeNames"]) <= set(target), out
    for n in set(NODES) - set(target):
        assert "whole free cards" in out["FailedNodes"][n], out
    wnode = place(s, wpod, tl)
    _, a = assigned_of(api, "whole-pod")
    (wuuid,) = a["containers"][0]["gpus"]
    assert wuuid in empty, (a, empty)
    adm, alloc = kubelet_admit(api, nodes[wnode], wpod, 100, tl)
    assert card_set(adm.devices) == {wuuid}

    # 9. kubectl egpu inspect shows each card with its pods.
    want_cards = {u: set() for u in gpus}
    for u, pod in ((whole_uuid, "lab/lab-1"), (vuuid, "default/vcuda-pod"),
                   (cuuid, "default/trainer"), (l2uuid, "lab/lab-2"),
                   (wuuid, "default/whole-pod")):
        want_cards[u].add(pod)
    want_cards = {gpus[u][0]: v for u, v in want_cards.items()}

    def shown():
        doc = json.loads(inspect(plugin, api, "-o", "json"))
        got = {g["name"]: {f"{p['namespace']}/{p['pod']}" for p in g["pods"]}
               for n in doc["nodes"] for g in n["gpus"]}
        return got == want_cards and doc
    doc = wait(shown, f"kubectl egpu inspect shows {want_cards}")
    claims = {p["claim"] for n in doc["nodes"] for g in n["gpus"] for p in g["pods"]}
    assert claims == {None, "train"}
    table = inspect(plugin, api)
    tl("-", "kubectl egpu inspect:\n" + table.rstrip())
