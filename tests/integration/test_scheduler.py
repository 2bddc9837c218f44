"""egpu-scheduler as kube-scheduler would use it: filter, prioritize and bind over HTTP, the
cache built by list+watch, restarts, concurrent binds, the ambiguity rule, unhealthy cards,
NVLink pairs, bad input, leader election and following kube-scheduler's Lease.

Each test runs against the real control plane (conftest.py's kube_api: kube-apiserver and
etcd with deploy/'s CRDs and RBAC), egpu-scheduler with its ServiceAccount's token
(egpu-scheduler in elastic-gpu-system), so a verb its ClusterRole does not grant fails as
it would in a cluster; with its own leader election (every test but the one following
kube-scheduler's Lease) it has the Lease Role the Component deploy/scheduler/main-scheduler
gives it, the mode that election serves. Only the tests that need a fault no real API server
shows on demand use the test API server (fault_api), each saying which: dropped watches and
a 410 (test_dropped_watch_and_410_lose_nothing), an injected 409 and the request log
(test_conflict_on_annotation_is_retried), the server down (test_readyz_follows_api_server).

The `api` fixture stays the test API server for the modules that import it with sched,
args, assigned, cluster, Scheduler and ASSIGNED; sched starts egpu-scheduler against the
API server the test asks for (its module's `api`, or kube_api / fault_api)."""
import concurrent.futures
import json
import os
import pathlib
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from apis import SYSTEM_NAMESPACE, TOKEN, Api  # noqa: F401 (TOKEN, Api: re-exported)
from conftest import ROOT

ASSIGNED = "elasticgpu.io/assigned"
# egpu-scheduler's ServiceAccount (deploy/scheduler/serviceaccount.yaml).
SERVICE_ACCOUNT = "egpu-scheduler"
# The Role and RoleBinding of egpu-scheduler's own Lease (its leader election), which
# deploy/'s base does not have: its extender follows kube-scheduler's Lease instead.
LEASE_RBAC = ROOT / "deploy" / "scheduler" / "main-scheduler" / "rbac.yaml"


@pytest.fixture
def api(fault_api):
    """The test API server (conftest.py's fault_api), for the modules that import this
    fixture and have not moved to the real control plane; this module's tests name
    kube_api or fault_api themselves."""
    return fault_api


class Scheduler:
    def __init__(self, build_dir, api, tmp_path, name="s1", extra=()):
        self.log = tmp_path / f"{name}.log"
        self.proc = subprocess.Popen(
            [str(build_dir / "src/scheduler/egpu-scheduler"), "--kubeconfig",
             api.component_kubeconfig(SERVICE_ACCOUNT),
             "--listen", "127.0.0.1", "--port", "0", "--health-listen", "127.0.0.1",
             "--health-port", "0", "--lease-duration", "3",
             "--renew-deadline", "2", "--retry-period", "1", *extra],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))
        deadline = time.time() + 15
        self.url = None
        while time.time() < deadline and self.url is None:
            m = re.search(r"main\.c:\d+\] egpu-scheduler: serving addr=\S+ port=(\d+) "
                          r"health_addr=\S+ health_port=(\d+)", self.log.read_text())
            if m:
                self.url = f"http://127.0.0.1:{m.group(1)}"  # the extender verbs
                self.health_url = f"http://127.0.0.1:{m.group(2)}"  # /healthz, /readyz, /metrics
            else:
                assert self.proc.poll() is None, self.log.read_text()
                time.sleep(0.05)
        assert self.url, self.log.read_text()

    def post(self, verb, body, raw=None):
        data = raw if raw is not None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.url}/{verb}", data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            text = e.read()
            try:
                return e.code, json.loads(text)
            except ValueError:
                return e.code, text.decode(errors="replace")

    def get(self, path):
        try:
            with urllib.request.urlopen(self.health_url + path, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def wait_ready(self, timeout=15, want=200, reason=""):
        """Wait until /readyz answers want, with reason in its body (a 503
        says why: one reason may come before another, e.g. the cache not yet
        synced before the Lease)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            st, body = self.get("/readyz")
            if st == want and reason in body:
                return body
            time.sleep(0.1)
        raise AssertionError(f"readyz never {want}: {self.get('/readyz')}\n{self.log.read_text()}")

    def wait_until(self, pred, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if pred():
                return
            time.sleep(0.1)
        raise AssertionError("condition not met\n" + self.diagnosis())

    def diagnosis(self):
        """What a failed wait shows: the log, /readyz, the scheduler's own gauges and
        counters (the gauges come from its once-a-second tick: stale ones point at a
        stalled tick, which the log names as "slow tick"), and each thread's state and
        kernel wait channel."""
        out = [self.log.read_text()]
        try:
            out.append("readyz: %s %s" % self.get("/readyz"))
            _, text = self.get("/metrics")
            out += [ln for ln in text.splitlines()
                    if ln.startswith("egpu_scheduler_") and "_bucket" not in ln]
        except OSError as e:
            out.append(f"health port: {e}")
        for task in sorted(pathlib.Path(f"/proc/{self.proc.pid}/task").glob("*")):
            try:
                stat = (task / "stat").read_text()
                comm, state = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2]
                wchan = (task / "wchan").read_text()
            except (OSError, ValueError, IndexError):
                continue
            out.append(f"thread {task.name} ({comm}): {state} {wchan}")
        return "\n".join(out)

    def metric(self, name, labels=""):
        _, text = self.get("/metrics")
        for line in text.splitlines():
            if line.startswith(name + labels + " ") or line.startswith(name + labels + "{}"):
                return float(line.split()[-1])
        return None

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=15)
        return self.proc.returncode


def _api_of(request):
    """The API server the requesting test's egpu-scheduler talks to: its module's `api`
    when the test asks for it (the modules that import sched), else kube_api or fault_api,
    whichever the test names (this module's tests), else `api`."""
    for name in ("api", "kube_api", "fault_api"):
        if name in request.fixturenames:
            return request.getfixturevalue(name)
    return request.getfixturevalue("api")


def _elects(extra):
    """Whether egpu-scheduler started with flags extra runs its own leader election
    (--leader-elect defaults to true; --follow-lease turns it off)."""
    flags = list(extra)
    if "--follow-lease" in flags:
        return False
    return not any(f == "--leader-elect" and flags[i + 1] == "false"
                   for i, f in enumerate(flags[:-1]))


@pytest.fixture
def sched(build_dir, request, tmp_path):
    """start(name, extra) starts an egpu-scheduler (Scheduler) against the test's API
    server with its ServiceAccount's kubeconfig; each is killed at the end. On the real
    control plane, one that elects a leader gets deploy/scheduler/main-scheduler's Lease
    Role first (applied as the admin, deleted at the end)."""
    api = _api_of(request)
    started = []
    lease_rbac = []

    def start(name="s1", extra=()):
        if api.real and _elects(extra) and not lease_rbac:
            api.cluster.kubectl("apply", "-f", str(LEASE_RBAC))
            lease_rbac.append(LEASE_RBAC)
        s = Scheduler(build_dir, api, tmp_path, name, extra)
        started.append(s)
        return s
    yield start
    for s in started:
        s.stop(signal.SIGKILL)
    for path in lease_rbac:
        api.cluster.kubectl("delete", "--ignore-not-found", "-f", str(path))


def args(pod, nodes):
    return {"Pod": pod, "Nodes": None, "NodeNames": nodes}


def assigned(api, name):
    ann = api.get_pod(name)["metadata"].get("annotations", {})
    return json.loads(ann[ASSIGNED]) if ASSIGNED in ann else None


def cluster(api, nodes=("gpu-1", "gpu-2"), gpus=2):
    for n in nodes:
        api.node(n)
        for i in range(gpus):
            api.gpu(n, i)


def test_filter_prioritize_bind(kube_api, sched):
    """A GPU pod over two GPU nodes and one the cache does not know: filter passes the two
    and fails the unknown one, prioritize scores both within 0..10, bind writes the
    pods/binding (spec.nodeName, the PodScheduled condition) and the assigned annotation
    (node, container, core, memory, one card of that node), and /metrics counts the bind
    and the node's allocated core."""
    cluster(kube_api)
    pod = kube_api.pod("train", 30, 4096)
    s = sched()
    s.wait_ready()
    st, out = s.post("filter", args(pod, ["gpu-1", "gpu-2", "cpu-only"]))
    assert st == 200
    assert out["NodeNames"] == ["gpu-1", "gpu-2"]
    assert "unknown" in out["FailedNodes"]["cpu-only"]
    assert out["Error"] == ""
    st, out = s.post("prioritize", args(pod, ["gpu-1", "gpu-2"]))
    assert st == 200 and {h["Host"] for h in out} == {"gpu-1", "gpu-2"}
    assert all(0 <= h["Score"] <= 10 for h in out)
    s.wait_until(lambda: s.post("bind", {"PodName": "train", "PodNamespace": "default",
                                         "PodUID": pod["metadata"]["uid"],
                                         "Node": "gpu-1"})[1].get("Error") == "")
    p = kube_api.get_pod("train")
    assert p["spec"]["nodeName"] == "gpu-1"
    a = json.loads(p["metadata"]["annotations"][ASSIGNED])
    assert a["node"] == "gpu-1"
    assert a["containers"] == [{"name": "main", "core": 30, "memory": 4096,
                                "gpus": [a["containers"][0]["gpus"][0]]}]
    assert a["containers"][0]["gpus"][0] in ("GPU-gpu-1-0", "GPU-gpu-1-1")
    assert any(c["type"] == "PodScheduled" and c["status"] == "True"
               for c in p["status"]["conditions"])
    s.wait_until(lambda: s.metric("egpu_scheduler_allocated_core_percent", '{node="gpu-1"}') == 30)
    assert s.metric("egpu_scheduler_binds_total") == 1


def test_replies_made_from_the_last(kube_api, sched):
    """Pod after pod over the same nodes (the same list again, or the same
    nodes in another order), the extender's replies are the ones a fresh
    extender gives; prioritize's are made from the list it made before."""
    cluster(kube_api, nodes=("gpu-1", "gpu-2", "gpu-3"), gpus=2)
    a, b = kube_api.pod("a", 30, 4096), kube_api.pod("b", 30, 4096)
    s = sched()
    s.wait_ready()
    names = ["gpu-1", "gpu-2", "gpu-3", "cpu-only"]
    st, first = s.post("filter", args(a, names))
    assert st == 200 and first["NodeNames"] == ["gpu-1", "gpu-2", "gpu-3"]
    st, again = s.post("filter", args(b, names))
    assert st == 200 and again == first
    st, turned = s.post("filter", args(b, names[::-1]))
    assert st == 200 and turned["NodeNames"] == ["gpu-3", "gpu-2", "gpu-1"]
    assert turned["FailedNodes"] == first["FailedNodes"]
    st, p1 = s.post("prioritize", args(b, ["gpu-3", "gpu-2", "gpu-1"]))
    st2, p2 = s.post("prioritize", args(b, ["gpu-1", "gpu-2", "gpu-3"]))
    assert st == st2 == 200
    assert {h["Host"]: h["Score"] for h in p1} == {h["Host"]: h["Score"] for h in p2}
    hosts = [h["Host"] for h in p2]  # in the order asked
    assert hosts == sorted(hosts)
    s.wait_until(lambda: (s.metric("egpu_scheduler_prioritize_reused_total") or 0) >= 1)
    # A fresh extender (restarted) gives the same answers.
    s.stop()
    s2 = sched()
    s2.wait_ready()
    assert s2.post("filter", args(b, names[::-1]))[1] == turned
    st, fresh = s2.post("prioritize", args(b, ["gpu-1", "gpu-2", "gpu-3"]))
    assert fresh == p2


def test_deleted_node_leaves_metrics(kube_api, sched):
    """A node that leaves the cluster leaves /metrics: its per-node series
    of allocated core and memory go, the others stay."""
    cluster(kube_api, nodes=("gpu-1", "gpu-2"))
    s = sched()
    s.wait_ready()
    s.wait_until(lambda: s.metric("egpu_scheduler_allocated_core_percent",
                                  '{node="gpu-2"}') == 0)
    st, _ = kube_api.call("DELETE", "/api/v1/nodes/gpu-2")
    assert st == 200
    s.wait_until(lambda: s.metric("egpu_scheduler_cache_nodes") == 1)
    s.wait_until(lambda: s.metric("egpu_scheduler_allocated_core_percent",
                                  '{node="gpu-2"}') is None)
    assert s.metric("egpu_scheduler_allocated_memory_mib", '{node="gpu-2"}') is None
    assert s.metric("egpu_scheduler_allocated_core_percent", '{node="gpu-1"}') == 0


def test_restart_rebuilds_allocations(kube_api, sched):
    """Two pods bound to one card (50% and 40%); a new egpu-scheduler rebuilds the card's
    90% from the pods' assigned annotations (list+watch), so a 20% pod no longer fits."""
    cluster(kube_api, nodes=("gpu-1",), gpus=1)
    s = sched()
    s.wait_ready()
    for name, core in (("a", 50), ("b", 40)):
        kube_api.pod(name, core)
        s.wait_until(lambda n=name: s.post("bind", {"PodName": n, "PodNamespace": "default",
                                                    "PodUID": "", "Node": "gpu-1"})[1]
                     .get("Error") == "" or assigned(kube_api, n) is not None)
        s.post("bind", {"PodName": name, "PodNamespace": "default", "PodUID": "",
                        "Node": "gpu-1"})
    assert assigned(kube_api, "a") and assigned(kube_api, "b")
    s.stop()
    s2 = sched("s2")
    s2.wait_ready()
    s2.wait_until(lambda: s2.metric("egpu_scheduler_allocated_core_percent",
                                    '{node="gpu-1"}') == 90)
    # 20% no longer fits on the card that holds 90%.
    pod = kube_api.pod("c", 20)
    st, out = s2.post("filter", args(pod, ["gpu-1"]))
    assert out["NodeNames"] == [] and "20% core" in out["FailedNodes"]["gpu-1"]


def test_dropped_watch_and_410_lose_nothing(fault_api, sched):
    """Needs the test API server (fault_api): its watches dropped twice and a compaction
    between (the next watch from the old resourceVersion gets 410 Gone), on demand, which
    no real API server does. Nodes and cards created meanwhile all reach the cache (it
    relists), and filter knows every node."""
    cluster(fault_api, nodes=("gpu-1",), gpus=1)
    s = sched()
    s.wait_ready()
    fault_api.control("drop-watches")
    cluster(fault_api, nodes=("gpu-2",), gpus=2)
    fault_api.control("compact")
    fault_api.control("drop-watches")
    cluster(fault_api, nodes=("gpu-3",), gpus=1)
    s.wait_until(lambda: s.metric("egpu_scheduler_cache_gpus") == 4)
    assert s.metric("egpu_scheduler_cache_nodes") == 3
    pod = fault_api.pod("p", 50)
    st, out = s.post("filter", args(pod, ["gpu-1", "gpu-2", "gpu-3"]))
    # Every node is known and fits: it passes, or fails only because another is better
    # (filter passes the nodes tied for the best score; gpu-2 has two cards).
    better = {n for n, why in (out["FailedNodes"] or {}).items() if "fits this pod better" in why}
    assert out["NodeNames"]
    assert sorted(set(out["NodeNames"]) | better) == ["gpu-1", "gpu-2", "gpu-3"]


def test_gpu_moved_and_deleted_while_away(fault_api, sched):
    """Needs the test API server (fault_api): a 503 on the GPU objects' list and watch, a
    dropped watch and a compaction, so the deletion is found by a relist. The informer
    stores only a GPU object's name and node (store_field): a card whose object moves to
    another node leaves the old one (old_obj's spec.nodeName), and the deletion a relist
    finds takes it out of the cache from the stored name and node."""
    cluster(fault_api, nodes=("gpu-1", "gpu-2"), gpus=1)
    s = sched()
    s.wait_ready()
    s.wait_until(lambda: s.metric("egpu_scheduler_cache_gpus") == 2)
    st, obj = fault_api.call("PATCH", "/apis/elasticgpu.io/v1alpha1/gpus/gpu-1-gpu0",
                             {"spec": {"nodeName": "gpu-2", "index": 1}},
                             ctype="application/merge-patch+json")
    assert st == 200, obj
    pod = fault_api.pod("p", 60)
    s.wait_until(lambda: s.post("filter", args(pod, ["gpu-1", "gpu-2"]))[1]["NodeNames"]
                 == ["gpu-2"])
    assert s.metric("egpu_scheduler_cache_gpus") == 2
    fault_api.control("fault", {"method": "GET", "path": "^/apis/elasticgpu.io/v1alpha1/gpus$",
                                "code": 503, "count": -1})
    fault_api.control("drop-watches")
    st, _ = fault_api.call("DELETE", "/apis/elasticgpu.io/v1alpha1/gpus/gpu-1-gpu0")
    assert st == 200
    fault_api.control("compact")
    time.sleep(0.5)
    fault_api.control("fault", method="DELETE")
    s.wait_until(lambda: s.metric("egpu_scheduler_cache_gpus") == 1)
    st, out = s.post("filter", args(pod, ["gpu-1", "gpu-2"]))
    assert st == 200 and out["NodeNames"] == ["gpu-2"]
    assert "ignored malformed GPU" not in s.log.read_text()


def test_conflict_on_annotation_is_retried(fault_api, sched):
    """Needs the test API server (fault_api): a 409 Conflict injected into the first PATCH
    of the pod's assigned annotation, and its request log to count the PATCHes. bind
    retries the patch once and binds."""
    cluster(fault_api, nodes=("gpu-1",), gpus=1)
    s = sched()
    s.wait_ready()
    fault_api.pod("p", 30)
    s.wait_until(lambda: s.metric("egpu_scheduler_cache_pods") == 1)
    fault_api.control("requests", method="DELETE")
    fault_api.control("fault", {"method": "PATCH", "path": "/pods/p$", "code": 409, "count": 1})
    st, out = s.post("bind", {"PodName": "p", "PodNamespace": "default", "PodUID": "",
                              "Node": "gpu-1"})
    assert st == 200 and out["Error"] == "", out
    _, log = fault_api.control("requests", method="GET")
    patches = [r for r in log if r["method"] == "PATCH"]
    assert len(patches) == 2
    assert assigned(fault_api, "p")["node"] == "gpu-1"
    assert fault_api.get_pod("p")["spec"]["nodeName"] == "gpu-1"


def test_readyz_follows_api_server(fault_api, sched):
    """Needs the test API server (fault_api): the API server down and up again on demand
    (the shared real control plane cannot be stopped under one test). /readyz turns 503
    "API server unreachable" while it is down, 200 once it is back."""
    s = sched()
    s.wait_ready()
    fault_api.control("down", {"down": True})
    body = s.wait_ready(want=503)
    assert "API server unreachable" in body
    fault_api.control("down", {"down": False})
    s.wait_ready()


def test_concurrent_binds_never_overcommit(kube_api, sched):
    """16 binds of 40% pods at once to a node of two cards: at most four succeed (two per
    card), exactly the pods whose bind succeeded carry an assigned annotation, and no card
    holds more than 100%."""
    cluster(kube_api, nodes=("gpu-1",), gpus=2)
    s = sched()
    s.wait_ready()
    for i in range(16):
        kube_api.pod(f"r{i}", 40)
    s.wait_until(lambda: s.metric("egpu_scheduler_cache_pods") == 16)

    def bind(i):
        return s.post("bind", {"PodName": f"r{i}", "PodNamespace": "default", "PodUID": "",
                               "Node": "gpu-1"})[1]["Error"]
    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        errors = list(ex.map(bind, range(16)))
    ok = [i for i, e in enumerate(errors) if e == ""]
    assert 1 <= len(ok) <= 4
    used = {}
    for i in range(16):
        a = assigned(kube_api, f"r{i}")
        assert (a is not None) == (i in ok)
        if a:
            card = a["containers"][0]["gpus"][0]
            used[card] = used.get(card, 0) + a["containers"][0]["core"]
    assert all(v <= 100 for v in used.values()), used


def test_ambiguity_rule(kube_api, sched):
    """Two pods of the same core and other memory on one node of two cards (spread): while
    the first is bound and not yet allocated, bind of the second is refused ("same
    gpu-core": the kubelet's device request could not tell them apart), left unassigned,
    and counted as an ambiguous bind failure."""
    cluster(kube_api, nodes=("gpu-1",), gpus=2)
    s = sched(extra=("--card-policy", "spread"))
    s.wait_ready()
    kube_api.pod("a", 30, 1024)
    kube_api.pod("b", 30, 2048)
    s.wait_until(lambda: s.metric("egpu_scheduler_cache_pods") == 2)
    st, out = s.post("bind", {"PodName": "a", "PodNamespace": "default", "PodUID": "",
                              "Node": "gpu-1"})
    assert out["Error"] == ""
    s.wait_until(lambda: assigned(kube_api, "a") is not None)
    st, out = s.post("bind", {"PodName": "b", "PodNamespace": "default", "PodUID": "",
                              "Node": "gpu-1"})
    assert "same gpu-core" in out["Error"]
    assert assigned(kube_api, "b") is None
    s.wait_until(lambda: s.metric("egpu_scheduler_bind_failures_total",
                                  '{reason="ambiguous"}') == 1)


def test_filter_steers_around_an_ambiguous_node(kube_api, sched):
    """Two pods of the same core size, node-a and node-b
    both fit. a is bound to node-a and not yet allocated; filter for b fails
    node-a with the reason and passes node-b (binpack ranks the fuller
    node-a first: before, filter passed node-a alone and bind refused it,
    until a's container had started). Once the agent marks a allocated,
    node-a passes again."""
    cluster(kube_api, nodes=("node-a", "node-b"), gpus=1)
    s = sched()
    s.wait_ready()
    kube_api.pod("a", 30, 1024)
    b = kube_api.pod("b", 30, 2048)
    s.wait_until(lambda: s.metric("egpu_scheduler_cache_pods") == 2)
    st, out = s.post("bind", {"PodName": "a", "PodNamespace": "default", "PodUID": "",
                              "Node": "node-a"})
    assert out["Error"] == ""
    s.wait_until(lambda: assigned(kube_api, "a") is not None)
    st, out = s.post("filter", args(b, ["node-a", "node-b"]))
    assert st == 200 and out["Error"] == ""
    assert out["NodeNames"] == ["node-b"], out
    assert out["FailedNodes"]["node-a"] == (
        "pod default/a placed on node node-a is not yet allocated and asks the same gpu-core "
        "(30%) on other cards or memory; the kubelet's request would be ambiguous until it is "
        "(retry shortly)")
    st, out = s.post("prioritize", args(b, ["node-b"]))
    assert out == [{"Host": "node-b", "Score": 10}]
    # bind keeps its refusal as the safety net.
    st, out = s.post("bind", {"PodName": "b", "PodNamespace": "default", "PodUID": "",
                              "Node": "node-a"})
    assert "not yet allocated" in out["Error"]
    # The agent marks a allocated: node-a, the fuller, passes again.
    st, _ = kube_api.call("PATCH", "/api/v1/namespaces/default/pods/a",
                          {"metadata": {"annotations": {"elasticgpu.io/allocated": json.dumps(
                              {"containers": {"main": {"gpus": ["GPU-node-a-0"], "core": 30,
                                                       "memory": 1024}}})}}},
                          ctype="application/merge-patch+json")
    assert st == 200
    s.wait_until(lambda: s.post("filter", args(b, ["node-a", "node-b"]))[1]["NodeNames"]
                 == ["node-a"])
    st, out = s.post("bind", {"PodName": "b", "PodNamespace": "default", "PodUID": "",
                              "Node": "node-a"})
    assert out["Error"] == ""


def test_bad_input_gets_4xx_and_changes_nothing(kube_api, sched):
    """Malformed requests get 400 with what is wrong, an oversized body 413, and refusals
    the protocol carries (a pod or node the cache lacks, a bad Pod) HTTP 200 with the
    protocol's Error; none of them allocates anything, a good filter
    still passes, and /metrics parses as Prometheus text."""
    from prometheus_client.parser import text_string_to_metric_families
    cluster(kube_api, nodes=("gpu-1",), gpus=1)
    # The pod exists before the scheduler starts, so it is in the cache once
    # the scheduler is ready (the bind cases below look it up there).
    pod = kube_api.pod("p", 30)
    s = sched(extra=("--max-body", "65536"))
    s.wait_ready()
    s.wait_until(lambda: s.metric("egpu_scheduler_cache_pods") == 1)
    cases = [
        ("filter", b"{not json", 400, "malformed JSON"),
        ("filter", b"[]", 400, "must be a JSON object"),
        ("prioritize", json.dumps({"Pod": pod, "NodeNames": "gpu-1"}).encode(), 400,
         "NodeNames"),
        ("bind", json.dumps({"PodName": ["p"]}).encode(), 400, "PodName"),
    ]
    for verb, raw, code, needle in cases:
        st, out = s.post(verb, None, raw=raw)
        assert st == code, (verb, raw, out)
        assert needle in json.dumps(out), (verb, out)
    # A refusal of a request that is the protocol's is
    # HTTP 200 with the protocol's Error, so kube-scheduler shows the text
    # (any other status shows only "code <n>").
    refusals = [
        ("filter", {"Pod": {"metadata": {"name": 5}, "spec": {}}, "NodeNames": []},
         {"Nodes": None, "NodeNames": None, "FailedNodes": None,
          "FailedAndUnresolvableNodes": None,
          "Error": "ExtenderArgs.Pod: metadata.name: must be a string"}),
        ("bind", {"PodName": "ghost", "PodNamespace": "default", "Node": "gpu-1"},
         {"Error": "pod default/ghost is not in the elastic-gpu cache"}),
        ("bind", {"PodName": "p", "PodNamespace": "default", "Node": "nowhere"},
         {"Error": "node nowhere is not in the elastic-gpu cache"}),
    ]
    for verb, body, want in refusals:
        st, out = s.post(verb, body)
        assert (st, out) == (200, want), (verb, body)
    st, out = s.post("filter", None, raw=b"{" + b" " * 70000 + b"}")
    assert st == 413
    st, out = s.post("filter", args(pod, ["gpu-1"]))
    assert out["NodeNames"] == ["gpu-1"]
    assert s.metric("egpu_scheduler_allocated_core_percent", '{node="gpu-1"}') in (None, 0)
    _, text = s.get("/metrics")
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"egpu_scheduler_binds", "egpu_http_request_duration_seconds"} <= names


def test_leader_election_failover(kube_api, sched):
    """Two egpu-schedulers with their own leader election (the Lease elastic-gpu-scheduler,
    deploy/scheduler/main-scheduler's RBAC): the second is not ready and refuses bind
    with the protocol's Error; the leader killed without releasing, the second takes over
    within the 3 s lease and two retries, and binds."""
    cluster(kube_api, nodes=("gpu-1",), gpus=1)
    s1 = sched("s1")
    s1.wait_ready()
    s2 = sched("s2")
    time.sleep(2)
    assert s2.get("/readyz")[0] == 503 and "not the leader" in s2.get("/readyz")[1]
    kube_api.pod("p", 30)
    s2.wait_until(lambda: s2.metric("egpu_scheduler_cache_pods") == 1)
    st, out = s2.post("bind", {"PodName": "p", "PodNamespace": "default", "PodUID": "",
                               "Node": "gpu-1"})
    # A refusal with the protocol's Error.
    assert st == 200 and out["Error"].startswith("egpu-scheduler ") and \
        out["Error"].endswith(" is not the leader"), out
    assert assigned(kube_api, "p") is None
    # Kill the leader without release. client-go semantics: s2 trusts the
    # lease for the lease duration (3 s) after it last SAW the record change,
    # which can be one of its jittered retries (<= 1.2 s) after s1's last
    # renew; it then takes over on its next try (<= 1.2 s). With 2 s for
    # process and probe latency on a loaded 2-core CI machine that is under
    # 7.4 s -- and far below the 15 s default lease, which is what would show
    # if the flags were ignored.
    lease, retry_jittered, slack = 3, 1.2, 2.0
    t0 = time.time()
    s1.stop(signal.SIGKILL)
    s2.wait_ready(timeout=12)
    assert time.time() - t0 < lease + 2 * retry_jittered + slack
    st, out = s2.post("bind", {"PodName": "p", "PodNamespace": "default", "PodUID": "",
                               "Node": "gpu-1"})
    assert out["Error"] == ""


def test_sigterm_releases_the_lease(kube_api, sched):
    """The leader stopped by SIGTERM exits 0 and releases its Lease (an update of it, which
    its Role allows), so the other replica leads within about one retry period, not a
    lease duration."""
    s1 = sched("s1")
    s1.wait_ready()
    s2 = sched("s2")
    time.sleep(1.5)
    assert s1.stop() == 0
    t0 = time.time()
    s2.wait_ready(timeout=6)
    assert time.time() - t0 < 3, "released lease should be taken over in about a retry period"
    assert "released lease" in s1.log.read_text()


# kube-scheduler's Lease in deploy/ (scheduler-config.yaml's leaderElection.resourceName),
# the only one egpu-scheduler may read (rbac.yaml's elastic-gpu-scheduler-follow-lease).
KUBE_SCHEDULER_LEASE = "elastic-gpu-kube-scheduler"


def leases(api):
    """The Leases of egpu-scheduler's namespace (its kubeconfig's): elastic-gpu-system on the
    real control plane, elastic-gpu on the test API server."""
    ns = SYSTEM_NAMESPACE if api.real else "elastic-gpu"
    return f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"


def put_lease(api, name, holder, duration=3):
    """Create or renew Lease name as kube-scheduler would: holderIdentity
    "<pod>_<uuid>", renewTime now (the admin's write, standing in for kube-scheduler's)."""
    path = leases(api)
    now = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1e6) % 1000000:06d}Z"
    spec = {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": now,
            "acquireTime": now}
    st, obj = api.call("GET", f"{path}/{name}")
    if st == 404:
        st, obj = api.call("POST", path, {"apiVersion": "coordination.k8s.io/v1",
                                            "kind": "Lease", "metadata": {"name": name},
                                            "spec": spec})
        assert st == 201, obj
        return
    obj["spec"] = spec
    st, obj = api.call("PUT", f"{path}/{name}", obj)
    assert st == 200, obj


def test_follow_lease_binds_only_in_the_leading_pod(kube_api, sched):
    """deploy/: each extender follows the kube-scheduler of its own pod
    (--follow-lease). Only the extender whose pod's kube-scheduler holds the
    Lease, renewed, binds; the other refuses (the protocol's Error, HTTP 200)
    and is not ready; a
    handover moves binding with it; a Lease no longer renewed stops it; and
    binds sent to both at once never overcommit a card."""
    import threading
    cluster(kube_api, nodes=("gpu-1",), gpus=2)
    holder = {"id": "pod-a_6f1c", "renew": True}
    stop = threading.Event()

    def renew():
        while not stop.is_set():
            if holder["renew"]:
                put_lease(kube_api, KUBE_SCHEDULER_LEASE, holder["id"])
            stop.wait(0.5)
    put_lease(kube_api, KUBE_SCHEDULER_LEASE, holder["id"])
    t = threading.Thread(target=renew, daemon=True)
    t.start()
    try:
        follow = ("--follow-lease", KUBE_SCHEDULER_LEASE)
        a = sched("a", extra=(*follow, "--pod-name", "pod-a"))
        b = sched("b", extra=(*follow, "--pod-name", "pod-b"))
        a.wait_ready()
        body = b.wait_ready(want=503, reason="does not hold Lease")
        assert "pod-b" in body
        for i in range(16):
            kube_api.pod(f"r{i}", 40)
        for s in (a, b):
            s.wait_until(lambda s=s: s.metric("egpu_scheduler_cache_pods") == 16)
        assert a.metric("egpu_scheduler_leader") == 1 and b.metric("egpu_scheduler_leader") == 0

        def bind(s, i):
            return s.post("bind", {"PodName": f"r{i}", "PodNamespace": "default", "PodUID": "",
                                   "Node": "gpu-1"})
        st, out = bind(b, 0)
        assert st == 200 and "does not hold Lease" in out["Error"], out
        assert assigned(kube_api, "r0") is None
        st, out = bind(a, 0)
        assert st == 200 and out["Error"] == "", out
        # Handover to pod-b: a stops, b starts.
        holder["id"] = "pod-b_93d2"
        b.wait_ready(timeout=5)
        a.wait_ready(want=503, timeout=5)
        st, out = bind(a, 1)
        assert st == 200 and "not the leader" in out["Error"], out
        # Binds sent to both extenders at once: only b's are served, and no
        # card goes past 100%.
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            res = list(ex.map(lambda i: (i, bind(a if i % 2 else b, i)), range(1, 16)))
        for i, (st, out) in res:
            if i % 2:
                assert st == 200 and "not the leader" in out["Error"], out
        used = {}
        for i in range(16):
            got = assigned(kube_api, f"r{i}")
            if got:
                card = got["containers"][0]["gpus"][0]
                used[card] = used.get(card, 0) + got["containers"][0]["core"]
        assert sum(used.values()) > 40, used  # b bound some
        assert all(v <= 100 for v in used.values()), used
        # pod-b's kube-scheduler stops renewing: after the Lease duration
        # (3 s) b binds no more.
        holder["renew"] = False
        b.wait_ready(want=503, timeout=8)
        kube_api.pod("late", 10)
        b.wait_until(lambda: b.metric("egpu_scheduler_cache_pods") == 17)
        st, out = b.post("bind", {"PodName": "late", "PodNamespace": "default", "PodUID": "",
                                  "Node": "gpu-1"})
        assert st == 200 and "not renewed" in out["Error"], out
    finally:
        stop.set()
        t.join(timeout=5)


def set_health(api, gpu, health):
    """Merge-patch a GPU object's status.health as egpu-agent does."""
    st, out = api.call("PATCH", f"/apis/elasticgpu.io/v1alpha1/gpus/{gpu}/status",
                       {"status": {"health": health}},
                       ctype="application/merge-patch+json")
    assert st == 200, out


def test_unhealthy_cards_take_no_new_pod(kube_api, sched):
    """Once its GPU objects say Unhealthy, a node's cards
    take no new pod: filter fails the node naming the cards and their
    status.health, bind refuses it, the pod already there stays counted, and
    a card Healthy again takes the next pod."""
    cluster(kube_api, nodes=("gpu-1", "gpu-2"), gpus=2)
    kube_api.pod("a", 30)
    b = kube_api.pod("b", 40)  # not 30: the ambiguity rule would hold it back
    s = sched()
    s.wait_ready()
    s.wait_until(lambda: s.metric("egpu_scheduler_cache_pods") == 2)
    st, out = s.post("bind", {"PodName": "a", "PodNamespace": "default", "PodUID": "",
                              "Node": "gpu-1"})
    assert (st, out) == (200, {"Error": ""})
    s.wait_until(lambda: s.metric("egpu_scheduler_allocated_core_percent",
                                  '{node="gpu-1"}') == 30)
    set_health(kube_api, "gpu-1-gpu0", "Unhealthy")
    set_health(kube_api, "gpu-1-gpu1", "Unhealthy: XID 79")
    want = ("cards gpu-1-gpu0 (Unhealthy), gpu-1-gpu1 (Unhealthy: XID 79) take no new pods; "
            "no card with 40% core and 0 MiB free for container 0 (most free card: 0%, 0 MiB)")
    s.wait_until(lambda: s.post("filter", args(b, ["gpu-1", "gpu-2"]))[1]
                 .get("FailedNodes", {}).get("gpu-1") == want)
    st, out = s.post("filter", args(b, ["gpu-1", "gpu-2"]))
    assert st == 200 and out["NodeNames"] == ["gpu-2"] and out["Error"] == "", out
    st, out = s.post("bind", {"PodName": "b", "PodNamespace": "default", "PodUID": "",
                              "Node": "gpu-1"})
    assert st == 200 and out["Error"].startswith("cards gpu-1-gpu0 (Unhealthy), "), out
    assert assigned(kube_api, "b") is None and "nodeName" not in kube_api.get_pod("b")["spec"]
    # a stays counted on its card.
    assert s.metric("egpu_scheduler_allocated_core_percent", '{node="gpu-1"}') == 30
    card_a = assigned(kube_api, "a")["containers"][0]["gpus"][0]
    # The card a is not on comes back: b goes there.
    other = "gpu-1-gpu1" if card_a == "GPU-gpu-1-0" else "gpu-1-gpu0"
    set_health(kube_api, other, "Healthy")
    s.wait_until(lambda: s.post("bind", {"PodName": "b", "PodNamespace": "default",
                                         "PodUID": "", "Node": "gpu-1"})[1] == {"Error": ""})
    assert assigned(kube_api, "b")["containers"][0]["gpus"] == ["GPU-" + other.replace("-gpu", "-")]
    s.wait_until(lambda: s.metric("egpu_scheduler_allocated_core_percent",
                                  '{node="gpu-1"}') == 70)


def test_multi_card_pod_gets_an_nvlink_pair(kube_api, sched):
    """A node of 8 cards in two NVLink islands, {0,2,4,6}
    and {1,3,5,7} (the system between them), published in spec.topology after
    the scheduler has the cards (egpu-agent adds it on its next sync, so the
    node is rebuilt when topology changes): a 2-card pod is bound to an NVLink
    pair, and a 4-card pod to the other island whole. On the code before,
    index order gave cards 0 and 1, across the islands."""
    cluster(kube_api, nodes=("nv8",), gpus=8)
    two = kube_api.pod("two", 200)
    kube_api.pod("four", 400)
    s = sched()
    s.wait_ready()
    s.wait_until(lambda: s.metric("egpu_scheduler_cache_pods") == 2)
    for i in range(8):
        topo = [{"index": j, "link": "NVLink" if i % 2 == j % 2 else "System"}
                for j in range(8) if j != i]
        st, out = kube_api.call("PATCH", f"/apis/elasticgpu.io/v1alpha1/gpus/nv8-gpu{i}",
                                {"spec": {"topology": topo}}, ctype="application/merge-patch+json")
        assert st == 200, out
    # One GPU watch delivers events in order: once a card created after the
    # patches is counted, every patch is in the cache.
    kube_api.node("marker")
    kube_api.gpu("marker", 0)
    s.wait_until(lambda: s.metric("egpu_scheduler_cache_gpus") == 9)
    st, out = s.post("filter", args(two, ["nv8"]))
    assert st == 200 and out["NodeNames"] == ["nv8"], out
    st, out = s.post("bind", {"PodName": "two", "PodNamespace": "default", "PodUID": "",
                              "Node": "nv8"})
    assert (st, out) == (200, {"Error": ""})
    assert assigned(kube_api, "two")["containers"][0]["gpus"] == ["GPU-nv8-0", "GPU-nv8-2"]
    s.wait_until(lambda: s.metric("egpu_scheduler_allocated_core_percent",
                                  '{node="nv8"}') == 200)
    st, out = s.post("bind", {"PodName": "four", "PodNamespace": "default", "PodUID": "",
                              "Node": "nv8"})
    assert (st, out) == (200, {"Error": ""})
    assert sorted(assigned(kube_api, "four")["containers"][0]["gpus"]) == \
        ["GPU-nv8-1", "GPU-nv8-3", "GPU-nv8-5", "GPU-nv8-7"]
