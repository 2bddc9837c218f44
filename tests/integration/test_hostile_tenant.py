"""The hostile tenant: a pod owner, and every process inside a GPU
container, tries to stop GPU scheduling, write host files, bind pods or lift
its limits. One section per component, each against the real binary with the
project's own test API server, fake kubelet and mock driver; every test here
failed on the code before the fix (24b3727) and passes after.

Sections: findings 1 and 4 (the scheduler: objects tenants write, the recorded
decision, admission), finding 3 (the extender: who reaches it), finding 2 (the
node agent: what a container can write), findings 5 and 6 (the interposer:
the shared accounting, every launch entry point)."""
import json
import os
import re
import resource
import shutil
import socket
import stat
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import grpc
import pytest
import yaml

from conftest import ROOT, tool
from test_agent import (  # noqa: F401 (fixtures, used by name)
    RES, Agent, agent_bin, alloc_dir, allocate, api_env, cleanup_env, dp, env, mounts, scrape,
    wait_until)
from test_deploy_main_scheduler import guide_cert, objs  # noqa: F401 (fixtures)
from test_scheduler import ASSIGNED, api, args, assigned, cluster, sched  # noqa: F401
from test_vcuda import (CTX_MIB, MIB, OOM, Probe, card_share, core_conf,  # noqa: F401
                        log_lines, mem_conf, meminfo, mock_used, mockctl, paths, world)


# ============================================================================
# Findings 1 and 4: the scheduler
#
# Played by a hostile tenant against the real
# egpu-scheduler and the test API server: one object a pod owner writes must
# not stop GPU scheduling, and an owner's edit of the scheduler's recorded
# decision must not free its card in the scheduler's books.
# ============================================================================


def bind(s, name, node, ns="default"):
    return s.post("bind", {"PodName": name, "PodNamespace": ns, "PodUID": "", "Node": node})


def test_nul_in_an_annotation_does_not_stop_scheduling(api, sched):
    """A pod in another namespace with "\\u0000" in an annotation value: the
    pod watch goes on, later pods reach the cache and bind, /readyz stays
    honest, and a restarted scheduler becomes ready (its list decodes)."""
    cluster(api, nodes=("gpu-1",), gpus=2)
    s = sched()
    s.wait_ready()
    st, _ = api.call("POST", "/api/v1/namespaces/tenant/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "evil", "namespace": "tenant",
                     "annotations": {"note": "a\u0000b", ASSIGNED: "{\u0000}"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    assert st == 201
    api.pod("after", 30)
    s.wait_until(lambda: s.metric("egpu_scheduler_cache_pods") == 2)
    st, out = bind(s, "after", "gpu-1")
    assert st == 200 and out["Error"] == "", out
    assert assigned(api, "after")["node"] == "gpu-1"
    s.wait_ready()
    # A restart lists the same pods: the list decodes, the cache is whole.
    s.stop()
    s2 = sched("s2")
    s2.wait_ready()
    s2.wait_until(lambda: s2.metric("egpu_scheduler_cache_pods") == 2)
    s2.wait_until(lambda: s2.metric("egpu_scheduler_allocated_core_percent",
                                    '{node="gpu-1"}') == 30)
    api.pod("later", 30)
    s2.wait_until(lambda: bind(s2, "later", "gpu-1")[1].get("Error") == "")


def test_nul_in_gpu_uuid_skips_that_gpu_only(api, sched):
    """A GPU object with "\\u0000" in spec.uuid is logged, counted and left
    out; the GPU watch goes on and later cards arrive."""
    cluster(api, nodes=("gpu-1",), gpus=1)
    s = sched()
    s.wait_ready()
    st, _ = api.call("POST", "/apis/elasticgpu.io/v1alpha1/gpus", {
        "apiVersion": "elasticgpu.io/v1alpha1", "kind": "GPU", "metadata": {"name": "bad"},
        "spec": {"nodeName": "gpu-1", "index": 9, "uuid": "GPU-x\u0000y", "model": "A100",
                 "memory": 40960}})
    assert st == 201
    cluster(api, nodes=("gpu-2",), gpus=2)
    s.wait_until(lambda: s.metric("egpu_scheduler_cache_gpus") == 3)
    s.wait_until(lambda: s.metric("egpu_scheduler_objects_skipped_total", '{kind="GPU"}') == 1)
    assert s.metric("egpu_scheduler_objects_skipped_total", '{kind="Pod"}') == 0
    pod = api.pod("p", 60)
    st, out = s.post("filter", args(pod, ["gpu-1", "gpu-2"]))
    # Both nodes fit: each passes, or fails only because the other fits better
    # (filter passes just the nodes tied for the best score).
    better = {n for n, why in (out["FailedNodes"] or {}).items() if "fits this pod better" in why}
    assert st == 200 and out["NodeNames"] and set(out["NodeNames"]) | better == {"gpu-1", "gpu-2"}


def test_readyz_503_while_a_watch_keeps_failing(api, sched):
    """A watch that keeps failing (the cache no longer follows the API) makes
    the extender not ready after the stated bound, and ready again after."""
    cluster(api, nodes=("gpu-1",), gpus=1)
    s = sched(extra=("--watch-unhealthy-seconds", "2"))
    s.wait_ready()
    api.control("fault", {"method": "GET", "path": "^/api/v1/pods$", "code": 500, "count": -1})
    api.control("drop-watches")
    body = s.wait_ready(want=503, timeout=20, reason="list and watch of Pod objects")
    assert "failed for" in body, body
    api.control("fault", method="DELETE")
    s.wait_ready(timeout=40)


def test_owner_edit_of_assigned_does_not_free_the_card(api, sched):
    """After bind, the owner rewrites elasticgpu.io/assigned (core 80 -> 1),
    then removes it; the card stays 80% used, and a second 80% pod is not
    bound onto it."""
    cluster(api, nodes=("gpu-1",), gpus=1)
    s = sched()
    s.wait_ready()
    api.pod("a", 80)
    s.wait_until(lambda: bind(s, "a", "gpu-1")[1].get("Error") == "")
    a = assigned(api, "a")
    s.wait_until(lambda: s.metric("egpu_scheduler_allocated_core_percent",
                                  '{node="gpu-1"}') == 80)
    a["containers"][0]["core"] = 1
    for value in (json.dumps(a), None):
        st, _ = api.call("PATCH", "/api/v1/namespaces/default/pods/a",
                         {"metadata": {"annotations": {ASSIGNED: value}}},
                         ctype="application/merge-patch+json")
        assert st == 200
    s.wait_until(lambda: s.metric("egpu_scheduler_assigned_changes_ignored_total") == 2)
    assert s.metric("egpu_scheduler_allocated_core_percent", '{node="gpu-1"}') == 80
    b = api.pod("b", 80)
    s.wait_until(lambda: s.metric("egpu_scheduler_cache_pods") == 2)
    st, out = s.post("filter", args(b, ["gpu-1"]))
    assert st == 200 and out["NodeNames"] == [], out
    st, out = bind(s, "b", "gpu-1")
    assert out.get("Error"), out
    assert api.get_pod("b")["spec"].get("nodeName", "") == ""
    time.sleep(0.3)
    assert s.metric("egpu_scheduler_allocated_core_percent", '{node="gpu-1"}') == 80


def test_duplicate_gpu_uuid_drops_only_the_duplicate(api, sched):
    """A GPU object on gpu-2 that repeats gpu-1's card UUID: neither node
    leaves the cache, the duplicate card is left out, and a Warning event
    DuplicateGPU names it."""
    cluster(api, nodes=("gpu-1", "gpu-2"), gpus=1)
    s = sched()
    s.wait_ready()
    st, _ = api.call("POST", "/apis/elasticgpu.io/v1alpha1/gpus", {
        "apiVersion": "elasticgpu.io/v1alpha1", "kind": "GPU", "metadata": {"name": "gpu-2-gpu7"},
        "spec": {"nodeName": "gpu-2", "index": 7, "uuid": "GPU-gpu-1-0", "model": "A100",
                 "memory": 40960}})
    assert st == 201
    s.wait_until(lambda: s.metric("egpu_scheduler_cache_duplicate_gpus") == 1)
    assert s.metric("egpu_scheduler_cache_nodes") == 2
    assert s.metric("egpu_scheduler_cache_gpus") == 2
    pod = api.pod("p", 100)
    st, out = s.post("filter", args(pod, ["gpu-1", "gpu-2"]))
    assert st == 200 and out["NodeNames"] == ["gpu-1", "gpu-2"], out

    def events():
        _, lst = api.call("GET", "/api/v1/namespaces/default/events")
        return [e for e in lst["items"] if e.get("reason") == "DuplicateGPU"]
    s.wait_until(lambda: events())
    ev = events()[0]
    assert ev["type"] == "Warning"
    assert ev["involvedObject"]["name"] == "gpu-2-gpu7"
    assert "gpu-1-gpu0" in ev["message"]


# --- deploy/'s admission protection of the system annotations ----------------

SCHED_SA = "system:serviceaccount:elastic-gpu-system:egpu-scheduler"
AGENT_SA = "system:serviceaccount:elastic-gpu-system:egpu-agent"
OWNER = "alice@example.com"
ALLOCATED = "elasticgpu.io/allocated"


def rendered_policy():
    """deploy/ as kubectl renders it: the policy and its binding."""
    out = subprocess.run([tool("kubectl"), "kustomize", str(ROOT / "deploy")], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    policies = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    bindings = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert len(policies) == 1 and len(bindings) == 1
    return policies[0], bindings[0]


def pod_with(annotations):
    meta = {"name": "p", "namespace": "team"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def evaluate(policy, cases):
    """Run the policy's CEL the way the API server's admission does
    (tests/cel/vap_eval.mjs, with the @bufbuild/cel evaluator)."""
    node = shutil.which("node")
    assert node, "node is not installed: run `make deps`"
    assert (ROOT / "tests/cel/node_modules/@bufbuild/cel").is_dir(), \
        "tests/cel/node_modules is missing: run `make deps`"
    r = subprocess.run([node, str(ROOT / "tests/cel/vap_eval.mjs")], capture_output=True,
                       text=True, timeout=60, input=json.dumps({"policy": policy, "cases": cases}))
    assert r.returncode == 0, r.stderr
    return {c["name"]: c for c in json.loads(r.stdout)}


def test_admission_policy_keeps_system_annotations_to_their_writers():
    """A pod owner can neither set, change nor remove elasticgpu.io/assigned
    or elasticgpu.io/allocated; egpu-scheduler may write assigned, egpu-agent
    allocated; everything else about a pod stays the owner's."""
    policy, binding = rendered_policy()
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert any("pods" in r["resources"] and {"CREATE", "UPDATE"} <= set(r["operations"])
               for r in rules)
    a1 = json.dumps({"node": "n1", "containers": [{"name": "c", "core": 80, "memory": 1024,
                                                   "gpus": ["GPU-1"]}]})
    a2 = a1.replace('"core": 80', '"core": 1')
    bound = {ASSIGNED: a1, "team/x": "1"}
    cases = [
        # name, operation, user, new annotations, old annotations, allowed
        ("owner creates a plain pod", "CREATE", OWNER, None, None, True),
        ("owner creates with other annotations", "CREATE", OWNER, {"team/x": "1"}, None, True),
        ("owner creates with assigned", "CREATE", OWNER, {ASSIGNED: a1}, None, False),
        ("owner creates with allocated", "CREATE", OWNER, {ALLOCATED: "c"}, None, False),
        ("owner lowers assigned core", "UPDATE", OWNER, {ASSIGNED: a2, "team/x": "1"}, bound,
         False),
        ("owner removes assigned", "UPDATE", OWNER, {"team/x": "1"}, bound, False),
        ("owner removes every annotation", "UPDATE", OWNER, None, bound, False),
        ("owner adds assigned", "UPDATE", OWNER, {ASSIGNED: a1}, {"team/x": "1"}, False),
        ("owner edits another annotation", "UPDATE", OWNER, {ASSIGNED: a1, "team/x": "2"}, bound,
         True),
        ("owner updates a pod without annotations", "UPDATE", OWNER, None, None, True),
        ("owner adds allocated", "UPDATE", OWNER, {**bound, ALLOCATED: "c"}, bound, False),
        ("scheduler records assigned", "UPDATE", SCHED_SA, {ASSIGNED: a1}, None, True),
        ("scheduler undoes assigned", "UPDATE", SCHED_SA, {}, {ASSIGNED: a1}, True),
        ("scheduler writes allocated", "UPDATE", SCHED_SA, {**bound, ALLOCATED: "c"}, bound,
         False),
        ("agent writes allocated", "UPDATE", AGENT_SA, {**bound, ALLOCATED: "c"}, bound, True),
        ("agent changes assigned", "UPDATE", AGENT_SA, {ASSIGNED: a2}, bound, False),
    ]
    results = evaluate(policy, [
        {"name": n, "operation": op, "username": user, "object": pod_with(new),
         "oldObject": pod_with(old) if op == "UPDATE" else None}
        for n, op, user, new, old, _ in cases])
    for n, _, _, _, _, allowed in cases:
        assert results[n]["allowed"] == allowed, (n, results[n])
        if not allowed:
            msg = results[n]["message"]
            assert "only ServiceAccount elastic-gpu-system/egpu-" in msg, (n, msg)


def test_admission_policy_keeps_dra_claims_fixed():
    """DRA mode's elasticgpu.io/dra-claims (the pod's ResourceClaimTemplates, which
    egpu-controller creates from it) cannot be added, changed or removed once the pod
    exists, by anyone; on CREATE it passes (egpu-webhook's /validate judges it there)."""
    policy, _ = rendered_policy()
    dra = "elasticgpu.io/dra-claims"
    claims = json.dumps({"egpu-5f75388cac51c537165fcf027a25a102": {"devices": {}}})
    made = {dra: claims, "team/x": "1"}
    cases = [
        ("create with it", "CREATE", OWNER, {dra: claims}, None, True),
        ("owner edits another annotation", "UPDATE", OWNER, {dra: claims, "team/x": "2"}, made,
         True),
        ("owner changes it", "UPDATE", OWNER, {dra: "{}", "team/x": "1"}, made, False),
        ("owner removes it", "UPDATE", OWNER, {"team/x": "1"}, made, False),
        ("owner removes every annotation", "UPDATE", OWNER, None, made, False),
        ("owner adds it", "UPDATE", OWNER, {dra: claims}, {"team/x": "1"}, False),
        ("owner adds it to a pod without annotations", "UPDATE", OWNER, {dra: claims}, None,
         False),
        ("scheduler changes it", "UPDATE", SCHED_SA, {dra: "{}"}, made, False),
        ("agent removes it", "UPDATE", AGENT_SA, {"team/x": "1"}, made, False),
    ]
    results = evaluate(policy, [
        {"name": n, "operation": op, "username": user, "object": pod_with(new),
         "oldObject": pod_with(old) if op == "UPDATE" else None}
        for n, op, user, new, old, _ in cases])
    for n, _, _, _, _, allowed in cases:
        assert results[n]["allowed"] == allowed, (n, results[n])
        if not allowed:
            assert "metadata.annotations[elasticgpu.io/dra-claims] names the pod's " \
                "ResourceClaimTemplates" in results[n]["message"], (n, results[n])


# ============================================================================
# Finding 3: the extender
#
# Played by a hostile tenant against the real
# egpu-scheduler and the test API server: anyone who reaches the extender
# must not bind any pod to any node, nor stop it answering with slow
# connections.
#
# The extender is started the way deploy/ runs it apart from the ports: no
# --listen (so its own default address), flags an older egpu-scheduler also
# knows, and the new settings through EGPU_* variables, which an older one
# ignores; so each test shows the same attack on the code before the fix.
# Every socket here stays on this host (loopback or its own address).
# ============================================================================


class Extender:
    """egpu-scheduler with its defaults, as a tenant would find it."""

    def __init__(self, build_dir, api, tmp_path, env=None):
        self.log = tmp_path / "extender.log"
        self.proc = subprocess.Popen(
            [str(build_dir / "src/scheduler/egpu-scheduler"), "--kubeconfig", api.kubeconfig,
             "--port", "0", "--leader-elect", "false"],
            env={"PATH": "/usr/bin:/bin", "EGPU_HEALTH_LISTEN": "127.0.0.1",
                 "EGPU_HEALTH_PORT": "0", **(env or {})},
            stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))
        deadline = time.time() + 15
        m = None
        while time.time() < deadline and m is None:
            m = re.search(r"main\.c:\d+\] egpu-scheduler: serving addr=(\S+) port=(\d+)"
                          r"(?: health_addr=\S+ "
                          r"health_port=(\d+))?", self.log.read_text())
            if m is None:
                assert self.proc.poll() is None, self.log.read_text()
                time.sleep(0.05)
        assert m, self.log.read_text()
        self.port = int(m.group(2))  # the extender verbs
        self.health_port = int(m.group(3) or m.group(2))  # /healthz, /readyz, /metrics

    def request(self, method, path, body=None, host="127.0.0.1", port=None, timeout=10):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://{host}:{port or self.port}{path}", data=data,
                                     method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def health(self, path, timeout=10):
        return self.request("GET", path, port=self.health_port, timeout=timeout)

    def metric(self, name, labels=""):
        _, text = self.health("/metrics")
        for line in text.splitlines():
            if line.startswith(name + labels + " "):
                return float(line.split()[-1])
        return None

    def wait_ready(self, pods):
        deadline = time.time() + 15
        while time.time() < deadline:
            if (self.health("/readyz")[0] == 200
                    and self.metric("egpu_scheduler_cache_pods") == pods):
                return
            time.sleep(0.1)
        raise AssertionError("not ready\n" + self.log.read_text())

    def stop(self):
        self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def extender(build_dir, api, tmp_path):
    started = []

    def start(env=None):
        x = Extender(build_dir, api, tmp_path, env)
        started.append(x)
        return x
    yield start
    for x in started:
        x.stop()


def own_address():
    """An IPv4 address of this host that is not loopback (what a pod on the
    network would connect to), or None. Asks iproute2's ip (scripts/deps.sh):
    without it the test skips, or fails under CI=true, naming ip, not the
    host's addresses."""
    ip = tool("ip")
    try:
        out = subprocess.run([ip, "-4", "-o", "addr", "show", "scope", "global"],
                             capture_output=True, text=True, timeout=10).stdout
    except OSError:
        return None
    m = re.search(r"\binet (\d+\.\d+\.\d+\.\d+)/", out)
    return m.group(1) if m else None


def other_pod(api, name, ns="team-b", scheduler="default-scheduler", gpu=0):
    res = {"cpu": "1"}
    if gpu:
        res["elasticgpu.io/gpu-core"] = str(gpu)
    st, obj = api.call("POST", f"/api/v1/namespaces/{ns}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
        "spec": {"schedulerName": scheduler, "tolerations": [],
                 "containers": [{"name": "c", "image": "busybox",
                                 "resources": {"requests": res}}]}})
    assert st == 201, obj
    return obj


def untouched(api, name, ns="team-b"):
    st, p = api.call("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
    assert st == 200
    return not p["spec"].get("nodeName") and ASSIGNED not in (p["metadata"].get("annotations")
                                                             or {})


def test_anonymous_bind_from_the_network_is_not_served(api, extender):
    """A tenant's pod reaches the scheduler pod's address: POST /bind there
    finds nothing listening (the verbs are on loopback only)."""
    addr = own_address()
    if addr is None:
        pytest.skip("this host has no non-loopback IPv4 address to play the pod network")
    cluster(api, nodes=("gpu-1",), gpus=1)
    other_pod(api, "victim")
    x = extender()
    x.wait_ready(pods=1)
    try:
        st, body = x.request("POST", "/bind", {"PodName": "victim", "PodNamespace": "team-b",
                                               "PodUID": "", "Node": "gpu-1"}, host=addr,
                             timeout=5)
        served = f"{st} {body}"
    except (ConnectionRefusedError, urllib.error.URLError) as e:
        served = None
        assert "refused" in str(e).lower(), e
    assert served is None, f"the extender answered a bind from {addr}: {served}"
    assert untouched(api, "victim")


@pytest.mark.parametrize("case", ["other-scheduler", "no-gpu"])
def test_bind_of_a_pod_not_ours_binds_nothing(api, extender, case):
    """Even on the extender's own port, bind refuses a pod of another
    scheduler (asking a GPU or not) and one of ours asking no GPU: the
    protocol's Error (HTTP 200) naming the pod and why, and the pod is neither
    bound nor annotated."""
    cluster(api, nodes=("gpu-1",), gpus=1)
    if case == "other-scheduler":
        other_pod(api, "victim", gpu=30)
        why = 'spec.schedulerName is "default-scheduler"'
    else:
        other_pod(api, "victim", scheduler="elastic-gpu-scheduler")
        why = "asks for no elasticgpu.io/gpu-core"
    x = extender()
    x.wait_ready(pods=1)
    st, body = x.request("POST", "/bind", {"PodName": "victim", "PodNamespace": "team-b",
                                           "PodUID": "", "Node": "gpu-1"})
    assert st == 200, body
    err = json.loads(body)["Error"]
    assert "team-b/victim" in err and why in err, err
    time.sleep(0.5)
    assert untouched(api, "victim")
    deadline = time.time() + 5
    while x.metric("egpu_scheduler_bind_failures_total", '{reason="not_ours"}') != 1:
        assert time.time() < deadline, x.health("/metrics")[1]
        time.sleep(0.1)


def flood(port, n, sources):
    """Open n connections to 127.0.0.1:port from the given source addresses
    (round robin) and send nothing. Returns the sockets (the caller closes)."""
    socks = []
    for i in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        socks.append(s)
        s.bind((sources[i % len(sources)], 0))
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            pass  # refused while the backlog is full is fine: it is a flood
    return socks


@pytest.mark.parametrize("sources", [1, 40], ids=["one-client", "many-clients"])
def test_slow_connections_neither_stop_the_extender_nor_go_unnoticed(api, extender, sources):
    """1,100 connections that send nothing, from one address and from forty,
    to the port a tenant reaches: kube-scheduler's calls on its kept-alive
    connection and the kubelet's probes are still answered, and the refusals
    are counted."""
    enough_files()
    cluster(api, nodes=("gpu-1",), gpus=1)
    api.pod("p", 30)
    x = extender()
    x.wait_ready(pods=1)
    # kube-scheduler's connection, kept alive, open before the flood.
    ks = http_client(x.port)
    st, _ = ks("/filter", {"Pod": api.get_pod("p"), "NodeNames": ["gpu-1"]})
    assert st == 200
    socks = flood(x.health_port, 1100, [f"127.0.1.{i + 1}" for i in range(sources)])
    try:
        time.sleep(0.5)
        t0 = time.time()
        st, body = ks("/filter", {"Pod": api.get_pod("p"), "NodeNames": ["gpu-1"]})
        assert st == 200 and json.loads(body)["NodeNames"] == ["gpu-1"], body
        # A fresh connection of kube-scheduler's too.
        st, body = x.request("POST", "/filter", {"Pod": api.get_pod("p"),
                                                 "NodeNames": ["gpu-1"]}, timeout=5)
        assert st == 200, body
        assert time.time() - t0 < 5
        reason = "per_client" if sources == 1 else "total"
        if sources == 1:
            # The kubelet's probe comes from another address: still answered.
            assert x.health("/readyz", timeout=5)[0] == 200
        else:
            # Forty addresses fill the health port; they never reach the verbs.
            for s in socks[:900]:
                s.close()
            socks = socks[900:]
            time.sleep(0.5)
        refused = x.metric("egpu_http_connections_refused_total", f'{{reason="{reason}"}}')
        assert refused is not None and refused >= 800, x.health("/metrics")[1]
    finally:
        for s in socks:
            s.close()


def http_client(port):
    """A kept-alive HTTP/1.1 client on one connection, as kube-scheduler's."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)

    def post(path, body):
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read().decode()
    return post


def test_slowloris_is_dropped_after_the_request_timeout(api, extender):
    """A client that trickles its headers a byte every 0.2 s (never idle
    long enough for an inactivity timeout) is dropped request-timeout (2 s)
    after its first byte, and counted."""
    cluster(api, nodes=("gpu-1",), gpus=1)
    x = extender(env={"EGPU_REQUEST_TIMEOUT": "2"})
    x.wait_ready(pods=0)
    s = socket.create_connection(("127.0.0.1", x.health_port), timeout=0.2)
    req = b"GET /readyz HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 200
    t0, sent, dropped = time.time(), 0, None
    try:
        while time.time() - t0 < 8 and dropped is None:
            try:
                s.send(req[sent:sent + 1])
                sent += 1
                if s.recv(1) == b"":
                    dropped = time.time() - t0
            except socket.timeout:
                pass
            except OSError:
                dropped = time.time() - t0
    finally:
        s.close()
    assert dropped is not None, f"still connected after 8 s ({sent} bytes sent)"
    assert 1.8 <= dropped < 4.0, dropped
    assert sent < len(req)
    assert x.metric("egpu_http_connections_timed_out_total", '{reason="slow"}') == 1


# One pod floods the webhook's HTTPS port (failurePolicy
# Fail: while its reviews fail, no GPU pod is admitted cluster-wide).

def partial_client_hello():
    """A TLS record header announcing a 512-byte ClientHello and its first
    bytes; the rest never comes."""
    return bytes([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]) + b"\x42" * 16


def enough_files():
    """Room for a flood's sockets: RLIMIT_NOFILE raised to 4,096 if below."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))


def flood_handshakes(port, n, source):
    """n connections from source to a TLS port (flood), every second one
    stopped inside a ClientHello, the others silent; no certificate ever.
    Returns the sockets (the caller closes)."""
    socks = flood(port, n, [source])
    hello = partial_client_hello()
    for s in socks[::2]:
        try:
            s.send(hello)
        except OSError:
            pass  # refused: closed by the server
    return socks


def wait_metric(port, name, labels, least, timeout=10):
    """Wait (at most timeout seconds) until name{labels} on port's /metrics
    is at least least; return its last value (None: not there)."""
    deadline = time.time() + timeout
    while True:
        n = port_metric(port, name, labels)
        if (n is not None and n >= least) or time.time() > deadline:
            return n
        time.sleep(0.25)


def test_one_pod_cannot_hold_the_webhook_port(build_dir, api, tmp_path):  # noqa: F811
    """A pod (127.0.1.5) opens 1,100 connections to egpu-webhook's HTTPS
    port, silent or stopped inside a ClientHello, and holds them; the API
    server (127.0.0.3) still gets every AdmissionReview answered, on its
    kept-alive connection and on new ones, within a second each. The pod
    holds at most --max-per-client (256); the rest are refused and counted,
    and the held ones are closed at --handshake-timeout (5 s). Before the
    fix the pod held all 1,024 and the API server's new connections were
    refused."""
    from test_webhook_tls import Pki, Webhook, need, post, review
    import http.client
    import ssl as ssl_mod
    need("openssl")
    enough_files()
    pki = Pki(tmp_path)
    pki.publish(0)
    w = Webhook(build_dir, api, tmp_path, pki)
    ctx = ssl_mod.create_default_context(cafile=pki.ca[0])

    def apiserver():
        return http.client.HTTPSConnection("127.0.0.1", w.port, context=ctx, timeout=5,
                                           source_address=("127.0.0.3", 0))
    try:
        kept = apiserver()
        st, _ = post(kept, review())
        assert st == 200
        socks = flood_handshakes(w.port, 1100, "127.0.1.5")
        try:
            time.sleep(0.5)
            t0 = time.time()
            for i in range(20):
                conn = kept if i % 2 == 0 else apiserver()
                t = time.time()
                body = review()
                st, reply = post(conn, body)
                assert st == 200 and reply["response"]["uid"] == body["request"]["uid"], reply
                assert time.time() - t < 1.0, f"review {i} took {time.time() - t:.2f} s"
                if conn is not kept:
                    conn.close()
            assert time.time() - t0 < 10
            refused = port_metric(w.health_port, "egpu_http_connections_refused_total",
                             '{reason="per_client"}')
            assert refused is not None and refused >= 1100 - 256 - 8, refused
            # The held ones never finish a handshake: closed at 5 s.
            n = wait_metric(w.health_port, "egpu_http_connections_timed_out_total",
                            '{reason="handshake"}', 240)
            assert n is not None and n >= 240, n
        finally:
            for s in socks:
                s.close()
            kept.close()
    finally:
        w.stop()


def port_metric(port, name, labels, source=None):
    """The value of name{labels} on 127.0.0.1:port/metrics (asked from the
    address source; None: the kernel's choice), or None."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5,
                                      source_address=(source, 0) if source else None)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    m = re.search(r"^" + re.escape(name + labels) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def test_one_pod_cannot_hold_the_extenders_mtls_port(objs, api, build_dir,  # noqa: F811
                                                     guide_cert, tmp_path):
    """Main-scheduler mode (deploy/scheduler/main-scheduler's egpu-scheduler
    flags: HTTPS on the pod address, --tls-client-ca): a pod (127.0.1.5)
    opens 300 connections to the verbs' port with no certificate, half
    silent, half stopped inside a ClientHello, and holds them; kube-scheduler
    (127.0.0.3, the stanza's client certificate) still gets filter,
    prioritize and bind answered, on its kept-alive connection and on new
    ones, within 2 s each. The pod holds at most --max-per-client (128) of
    the 256: the rest are refused and counted, and the held ones are closed
    at --handshake-timeout (5 s) and counted. Before src/net capped
    connections per address the pod held all 256 (the verbs' cap per address was the
    total) until the idle timeout and kube-scheduler's new connections were
    refused."""
    from test_deploy_main_scheduler import (component_scheduler, conn_post, gpu_pod,
                                            https_connection, kube_scheduler_client,
                                            on_control_plane, stanza)
    from test_webhook_tls import need
    need("openssl")
    enough_files()
    ext = stanza(objs)
    cluster(api)
    st, pod = api.call("POST", "/api/v1/namespaces/ml/pods", gpu_pod("train", "ml"))
    assert st == 201, pod
    s, port = component_scheduler(objs, api, build_dir, guide_cert, tmp_path)
    health = int(s.health_url.rsplit(":", 1)[1])
    prefix = urllib.parse.urlsplit(ext["urlPrefix"]).path.rstrip("/")
    ca = on_control_plane(guide_cert, ext["tlsConfig"]["caFile"])
    client = kube_scheduler_client(objs, guide_cert)
    filter_args = {"Pod": pod, "Nodes": None, "NodeNames": ["gpu-1", "gpu-2"]}

    def kube_scheduler():
        return https_connection(port, ext["tlsConfig"]["serverName"], ca, client,
                                source="127.0.0.3")

    def call(conn, verb, body):
        t = time.time()
        st, out = conn_post(conn, f"{prefix}/{ext[verb]}", body)
        assert time.time() - t < 2.0, f"{verb} took {time.time() - t:.2f} s"
        assert st == 200, out
        return out
    kept, socks = None, []
    try:
        kept = kube_scheduler()
        assert call(kept, "filterVerb", filter_args)["Error"] == ""
        socks = flood_handshakes(port, 300, "127.0.1.5")
        time.sleep(0.5)
        for i in range(6):
            conn = kept if i % 2 == 0 else kube_scheduler()
            out = call(conn, "filterVerb", filter_args)
            assert out["Error"] == "" and out["NodeNames"], out
            assert {h["Host"] for h in call(conn, "prioritizeVerb", filter_args)} == {"gpu-1", "gpu-2"}
            if conn is not kept:
                conn.close()
        # bind, on a new connection (it may wait for the cache to see the pod).
        bind = {"PodName": "train", "PodNamespace": "ml", "PodUID": pod["metadata"]["uid"],
                "Node": "gpu-1"}
        deadline = time.time() + 10
        while True:
            conn = kube_scheduler()
            out = call(conn, "bindVerb", bind)
            conn.close()
            if out.get("Error") == "" or time.time() > deadline:
                break
            time.sleep(0.1)
        assert out.get("Error") == "", out
        st, got = api.call("GET", "/api/v1/namespaces/ml/pods/train")
        assert got["spec"]["nodeName"] == "gpu-1"
        refused = port_metric(health, "egpu_http_connections_refused_total",
                              '{reason="per_client"}')
        assert refused is not None and refused >= 300 - 128 - 8, refused
        n = wait_metric(health, "egpu_http_connections_timed_out_total", '{reason="handshake"}',
                        120)
        assert n is not None and n >= 120, n
    finally:
        for x in socks:
            x.close()
        if kept is not None:
            kept.close()
        s.stop()


def test_pods_cannot_fill_the_agents_port(env):  # noqa: F811
    """Eight pods (127.0.1.5 to 127.0.1.12) open 12 silent connections each
    to egpu-agent's only port, three times over, which fills its 64 (8 each,
    the rest refused); the kubelet's liveness probe from the
    node's address (127.0.0.2: a new connection each time, timeoutSeconds 1)
    still gets /healthz 200 within a second, every time: a newcomer on a
    full port takes the oldest waiting connection of the address holding
    the most, counted as refused for the total. Before, the port was first
    come, first served and the probe's connection was refused (the kubelet
    would restart the agent in a loop)."""
    import http.client
    enough_files()
    _, agent = env
    port = int(agent.url.rsplit(":", 1)[1])
    pods = [f"127.0.1.{i}" for i in range(5, 13)]

    def probe():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1,
                                          source_address=("127.0.0.2", 0))
        t = time.time()
        try:
            conn.request("GET", "/healthz")
            return conn.getresponse().status, time.time() - t
        except (OSError, http.client.HTTPException) as e:
            return repr(e), time.time() - t
        finally:
            conn.close()
    assert probe()[0] == 200
    socks = []
    try:
        for _ in range(3):
            socks += flood(port, 12 * len(pods), pods)
            time.sleep(0.3)
            for _ in range(3):
                st, t = probe()
                assert st == 200 and t < 1.0, (st, t, agent.text()[-2000:])
        # Refused for the full port: each round's 32 past the 64, and the
        # connection each probe took.
        refused = port_metric(port, "egpu_http_connections_refused_total", '{reason="total"}',
                              source="127.0.0.2")
        assert refused is not None and refused >= 3 * 4 * len(pods) + 9, refused
    finally:
        for x in socks:
            x.close()


# ============================================================================
# Finding 2: the node agent
#
# The hostile tenant against egpu-agent: the agent runs
# as root and writes a container's limits; the container's processes are
# adversaries that write wherever their mounts let them.
#
# The tests run the real egpu-agent with the fake kubelet and the test API
# server, as test_agent.py does, and play the container from the Allocate
# answer: every read-write mount that is a directory is somewhere the tenant
# writes (on the host, at that mount's host path), as root (the tests run as
# root: a container without a user namespace) or as an unprivileged user
# (uid 65534, as a container's ``runAsUser`` would be). What the interposer
# reads is the host file behind /etc/elastic-gpu/vcuda.conf, found through the
# mounts the way a container runtime would resolve it.
#
# What the tenant tries, one test each:
#
# * symlinks at the agent's old temporary names and at limits.json and
# vcuda.conf: no host file is written through them;
# * an unprivileged user plants the temporary files and keeps them open: the
# interposer's vcuda.conf stays root's, unwritable by others, with the
# agent's limits, even after the tenant writes through what it kept;
# * a FIFO at limits.json and other names: the agent still answers /metrics
# and registers again after a kubelet restart;
# * a 12-deep and a 10,000-deep tree, links to files and directories outside,
# a FIFO: the cleanup removes all of it and every link target survives;
# * rewriting every file it can reach: the allocation metrics do not move,
# neither at once nor after an agent restart.
# ============================================================================


NOBODY = 65534
EVIL_CONF = (b"EGPU_VCUDA_MEMORY_MIB=16777216\nEGPU_VCUDA_CORE=100\n"
             b"EGPU_VCUDA_CORE_LIMIT=100\n")


def writable_dirs(resp):
    """Host paths of the directories the container can write."""
    return [m.host_path for m in resp.mounts
            if not m.read_only and os.path.isdir(m.host_path)]


def host_path(resp, container_path):
    """The host file behind container_path: the longest mount over it."""
    best = None
    for m in resp.mounts:
        cp = m.container_path.rstrip("/")
        if container_path == cp or container_path.startswith(cp + "/"):
            if best is None or len(cp) > len(best.container_path.rstrip("/")):
                best = m
    assert best is not None, container_path
    rest = container_path[len(best.container_path.rstrip("/")):]
    return best.host_path + rest


def old_tmp_names(agent):
    """The agent's temporary names before the fix: ".<name>.tmp.<pid>"."""
    pid = agent.proc.pid
    return [f".{n}.tmp.{pid}" for n in ("limits.json", "vcuda.conf", "ld.so.preload")]


def shared_pod(api, kubelet, name, core=30, mem=4096, card=0):
    """Make pod name with one container on card, set its PodResources and
    Allocate its IDs; returns (ids, Allocate's container response)."""
    u = api.uuids()
    api.pod(name, [("main", core, mem, [u[card]])])
    ids = ["%s-%02d" % (u[card], i) for i in range(core)]
    kubelet.set_pod_resources({f"default/{name}": {"main": {RES: ids}}})
    resp = allocate(kubelet.plugins[RES], ids).container_responses[0]
    return ids, resp


def prestart(kubelet, ids):
    kubelet.plugins[RES].stub.PreStartContainer(dp.PreStartContainerRequest(devices_ids=ids),
                                                timeout=30)


def make_chain(parent, name, depth):
    """A chain of depth directories "d" below parent/name; returns the fd of
    the deepest (the caller closes it)."""
    os.mkdir(os.path.join(parent, name))
    fd = os.open(os.path.join(parent, name), os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        nfd = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    return fd


def test_symlink_at_limits_tmp_writes_no_host_file(api_env):
    api, kubelet, agent = api_env
    ids, resp = shared_pod(api, kubelet, "links")
    victims = {}
    dirs = writable_dirs(resp)
    assert dirs, "a shared container has somewhere to put its regions"
    for i, d in enumerate(dirs):
        for name in old_tmp_names(agent) + ["limits.json", "vcuda.conf", "ld.so.preload"]:
            victim = os.path.join(agent.base, f"victim-{i}-{name.strip('.')}")
            with open(victim, "w") as f:
                f.write("host file\n")
            path = os.path.join(d, name)
            if os.path.lexists(path):
                os.unlink(path)
            os.symlink(victim, path)
            victims[victim] = path
    prestart(kubelet, ids)
    allocate(kubelet.plugins[RES], ids)  # Allocate again rewrites ld.so.preload
    for victim, link in victims.items():
        with open(victim) as f:
            assert f.read() == "host file\n", f"written through {link}"
    # What the interposer reads is the agent's, in a file of its own.
    conf = host_path(resp, "/etc/elastic-gpu/vcuda.conf")
    assert not os.path.islink(conf)
    with open(conf) as f:
        assert "EGPU_VCUDA_MEMORY_MIB=4096\n" in f.read()
    # A whole card runs without the interposer: nothing to write at all.
    u = api.uuids()
    whole = allocate(kubelet.plugins[RES],
                     ["%s-%02d" % (u[1], i) for i in range(100)]).container_responses[0]
    assert writable_dirs(whole) == []


def test_planted_tmp_file_cannot_become_config(api_env):
    api, kubelet, agent = api_env
    os.chmod(agent.base, 0o755)  # the tenant's user reaches the alloc root, as on a node
    ids, resp = shared_pod(api, kubelet, "plant")
    dirs = writable_dirs(resp)
    names = old_tmp_names(agent) + ["limits.json", "vcuda.conf"]
    script = (
        "import os, sys\n"
        "fds = []\n"
        f"for d in {dirs!r}:\n"
        f"    for n in {names!r}:\n"
        "        try:\n"
        "            fds.append(os.open(os.path.join(d, n), os.O_RDWR | os.O_CREAT, 0o666))\n"
        "        except OSError:\n"
        "            pass\n"
        "print(len(fds), flush=True)\n"
        "sys.stdin.readline()\n"
        "for fd in fds:\n"
        "    try:\n"
        "        os.ftruncate(fd, 0)\n"
        f"        os.pwrite(fd, {EVIL_CONF!r}, 0)\n"
        "    except OSError:\n"
        "        pass\n"
        "print('done', flush=True)\n")
    tenant = subprocess.Popen([sys.executable, "-c", script], user=NOBODY, group=NOBODY,
                              extra_groups=[], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd="/")
    try:
        planted = int(tenant.stdout.readline())
        assert planted > 0, "the tenant's user can write in its shared dir"
        prestart(kubelet, ids)
        tenant.stdin.write("go\n")
        tenant.stdin.flush()
        assert tenant.stdout.readline().strip() == "done"
    finally:
        tenant.kill()
        tenant.wait()
    conf = host_path(resp, "/etc/elastic-gpu/vcuda.conf")
    st = os.lstat(conf)
    assert stat.S_ISREG(st.st_mode)
    assert st.st_uid == 0 and st.st_mode & 0o022 == 0, \
        f"vcuda.conf uid={st.st_uid} mode={stat.S_IMODE(st.st_mode):o}"
    with open(conf) as f:
        text = f.read()
    assert "EGPU_VCUDA_MEMORY_MIB=4096\n" in text and "EGPU_VCUDA_CORE=30\n" in text, text
    # Its directory, as the container sees it, is no place to swap it.
    top = host_path(resp, "/etc/elastic-gpu")
    st = os.stat(top)
    assert st.st_uid == 0 and st.st_mode & 0o022 == 0


def test_fifo_at_limits_does_not_hang_agent(api_env):
    api, kubelet, agent = api_env
    u = api.uuids()
    api.pod("fifo", [("main", 30, 4096, [u[0]])])
    adm = kubelet.admit(RES, 30, pod="fifo", check=True)
    for d in writable_dirs(adm.container_response):
        for name in ("limits.json", "vcuda.conf", "ld.so.preload", "vcuda-memory.shm", "x"):
            path = os.path.join(d, name)
            if os.path.lexists(path):
                os.unlink(path)
            os.mkfifo(path, 0o666)
    time.sleep(2.5)  # the agent's loop looks at its allocations every second
    assert agent.get("/metrics")[0] == 200
    kubelet.restart()
    assert kubelet.wait_for_registration(2, timeout=15).ok, agent.text()
    assert agent.get("/metrics")[0] == 200
    assert wait_until(lambda: agent.get("/readyz")[0] == 200, 5), agent.text()


def test_deep_tree_and_links_removed_by_cleanup(cleanup_env):
    kubelet, start = cleanup_env
    agent = start("--cleanup-interval", "1")
    kubelet.wait_for_devices(RES, lambda d: len(d) == 200, timeout=15)
    a = kubelet.admit(RES, 30, pod="a", check=True)
    top = alloc_dir(a)
    outside_file = os.path.join(agent.base, "keep-file")
    outside_dir = os.path.join(agent.base, "keep-dir")
    with open(outside_file, "w") as f:
        f.write("host\n")
    os.mkdir(outside_dir)
    with open(os.path.join(outside_dir, "inside"), "w") as f:
        f.write("x")
    dirs = writable_dirs(a.container_response)
    assert dirs
    try:
        for d in dirs:
            for name, depth in (("deep12", 12), ("deeper", 10000)):
                fd = make_chain(d, name, depth)
                os.symlink(outside_file, "out", dir_fd=fd)
                os.symlink(outside_dir, "outdir", dir_fd=fd)
                os.mkfifo("fifo", dir_fd=fd)
                os.close(fd)
            os.symlink(outside_file, os.path.join(d, "tofile"))
            os.symlink(outside_dir, os.path.join(d, "todir"))
            os.symlink("..", os.path.join(d, "up"))
            os.mkfifo(os.path.join(d, "fifo"))
        kubelet.remove_pod("default", "a")
        assert wait_until(lambda: not os.path.lexists(top), 60), agent.text()
        with open(outside_file) as f:
            assert f.read() == "host\n"
        assert os.listdir(outside_dir) == ["inside"]
        assert os.path.isdir(agent.alloc_root)
        assert agent.get("/healthz")[0] == 200
    finally:
        if os.path.lexists(top):  # GNU rm copes with any depth
            subprocess.run(["rm", "-rf", "--one-file-system", top], check=False)


def test_rewriting_files_does_not_change_metrics(api_env, agent_bin):
    api, kubelet, agent = api_env
    u = api.uuids()
    api.pod("honest", [("main", 30, 4096, [u[1]])])
    adm = kubelet.admit(RES, 30, pod="honest", container="main", check=True)
    core = ("egpu_agent_gpu_allocated_core_percent", (("gpu", u[1]),))
    mem = ("egpu_agent_gpu_allocated_memory_mib", (("gpu", u[1]),))
    other = ("egpu_agent_gpu_allocated_core_percent", (("gpu", u[0]),))
    labels = (("container", "main"), ("namespace", "default"), ("pod", "honest"))
    ctr_core = ("egpu_agent_container_limit_core_percent", labels)
    want = {core: 30, mem: 4096, other: 0, ctr_core: 30}
    assert wait_until(lambda: scrape(agent).get(core) == 30, 5), scrape(agent)

    forged = json.dumps({"pod": "honest", "namespace": "default", "container": "main",
                         "gpus": u, "core": 100, "memory": 16777216})
    for d in writable_dirs(adm.container_response):
        for name in ("limits.json", "vcuda.conf", "forged.json"):
            tmp = os.path.join(d, ".forge")
            with open(tmp, "w") as f:
                f.write(forged)
            os.replace(tmp, os.path.join(d, name))  # root in the container may
    time.sleep(2.5)  # two refreshes of the metrics
    m = scrape(agent)
    assert {k: m.get(k) for k in want} == want
    # A restarted agent rebuilds the same from what it wrote itself.
    assert agent.stop() == 0, agent.text()
    again = Agent(agent_bin, agent.base, api=os.path.join(agent.base, "kubeconfig"))
    try:
        assert kubelet.wait_for_registration(2, timeout=15).ok
        assert wait_until(lambda: scrape(again).get(ctr_core) is not None, 5), scrape(again)
        m = scrape(again)
        assert {k: m.get(k) for k in want} == want
    finally:
        assert again.stop() == 0, again.text()


# ============================================================================
# Findings 5 and 6: the CUDA interposer
#
# A hostile tenant inside a GPU container
# against the CUDA interposer libegpu-vcuda.so (preloaded over the mock
# driver, driven through tests/vcuda/vcuda_probe.c as test_vcuda.py does).
#
# * Finding 5, the shared accounting: zeroing the usage words of
# vcuda-memory.shm does not let the container's processes together allocate
# past the limit; a symlink planted at vcuda-memory.shm does not make each
# process count on its own (they fail closed with one log line); a symlink
# planted at vcuda-core.shm does not get its target overwritten, and the
# compute limit does not fall back to a per-process bucket either.
# * Finding 6, launch entry points: cuLaunchCooperativeKernel(_ptsz),
# cuLaunchCooperativeKernelMultiDevice, cuLaunch, cuLaunchGrid and
# cuLaunchGridAsync are held to the container's share of the card, as
# measured with the mock's device clock.
# ============================================================================


LAUNCH_ENTRIES = [
    ("coop", "direct", "cuLaunchCooperativeKernel"),
    ("coop_ptsz", "procaddr", "cuLaunchCooperativeKernel_ptsz"),
    ("multi", "dlsym", "cuLaunchCooperativeKernelMultiDevice"),
    ("launch", "direct", "cuLaunch"),
    ("grid", "procaddr", "cuLaunchGrid"),
    ("gridasync", "dlsym", "cuLaunchGridAsync"),
]


@pytest.mark.parametrize("what,lookup,entry", LAUNCH_ENTRIES,
                         ids=[f"{e[2]}-{e[1]}" for e in LAUNCH_ENTRIES])
def test_other_launch_entry_points_get_only_the_core_share(world, what, lookup, entry):
    """A process that launches 1 ms kernels over and over through entry gets
    its 30% of the card's device time, not the whole card (each launch is
    one block of the kernel "k", EGPU_MOCK_CUDA_KERNEL_NS k=1000000)."""
    conf = dict(core_conf(30), EGPU_MOCK_CUDA_KERNEL_NS="k=1000000")
    probe = Probe(world, lookup=lookup, conf=conf)
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert probe(f"spin {what} k 1") == ["spin", "0"]
    time.sleep(0.5)  # past learning the kernel's cost
    share = card_share(world, 1.5)
    stop = probe("stop")
    assert stop[2] == "0" and int(stop[1]) > 100, (stop, probe.stderr())
    assert 20 <= share <= 40, f"{entry} got {share:.1f}% of the card at a 30% limit"
    assert probe.close() == 0
    assert log_lines(probe.stderr()) == []


def card_launches(world):
    """Kernel launches each card has run so far (the mock's count), card 0 and 1."""
    out = mockctl(world)
    return [int(re.search(rf"^card {c} .*launches=(\d+)", out, re.M).group(1)) for c in (0, 1)]


def test_multi_device_cooperative_launch_is_refused_under_a_core_limit(world):
    """cuLaunchCooperativeKernelMultiDevice over two cards cannot be held to
    the container's share (the controller holds one launch on one device at
    a time), so under a compute limit it is refused whole: rc 801
    (CUDA_ERROR_NOT_SUPPORTED), nothing runs on either card, and one warning
    says why, however often it is tried. Without a limit the same call runs
    on both cards (the mock has two: EGPU_MOCK_NVML_GPUS' default), so the
    refusal is the interposer's."""
    kernel = {"EGPU_MOCK_CUDA_KERNEL_NS": "k=1000000"}
    free = Probe(world, lookup="dlsym", conf=dict(kernel, EGPU_VCUDA_CORE="100"))  # no limit
    assert free.rc("init") == 0
    assert free.rc("ctx 0 primary") == 0 and free.rc("ctx 1 primary") == 0
    before = card_launches(world)
    assert free("multi2 k 4") == ["multi2", "0"], free.stderr()
    after = card_launches(world)
    assert after[0] > before[0] and after[1] > before[1], (before, after)
    assert free.close() == 0
    assert log_lines(free.stderr()) == []

    probe = Probe(world, lookup="dlsym", conf=dict(core_conf(30), **kernel))
    assert probe.rc("init") == 0
    assert probe.rc("ctx 0 primary") == 0 and probe.rc("ctx 1 primary") == 0
    before = card_launches(world)
    for _ in range(3):
        assert probe("multi2 k 4") == ["multi2", "801"]
    assert card_launches(world) == before, "a refused launch ran on a card"
    assert probe.rc("launch") == 0  # one device at a time is still served
    assert probe.close() == 0
    lines = log_lines(probe.stderr())
    assert len(lines) == 1, lines
    assert "cuLaunchCooperativeKernelMultiDevice over 2 devices refused" in lines[0], lines
    assert "CUDA_ERROR_NOT_SUPPORTED" in lines[0], lines


# ---- finding 5: the shared accounting ----

def zero_usage_words(region):
    """What a process of the container can do to vcuda-memory.shm (mode
    0666) without the interposer: zero every card's total and every process
    slot's bytes per card, leaving the header, the card table and who holds
    each slot alone. The layout is region.c's: version 2 (24b3727) or 3."""
    data = bytearray(region.read_bytes())
    version, = struct.unpack_from("<I", data, 8)
    hwm, = struct.unpack_from("<I", data, 32)
    cards_off, slot_size, bytes_off = {2: (48, 144, 16), 3: (56, 152, 24)}[version]
    for c in range(16):
        struct.pack_into("<Q", data, cards_off + 32 * c + 24, 0)
    slots_off = cards_off + 16 * 32
    for i in range(hwm):
        at = slots_off + i * slot_size + bytes_off
        data[at:at + 16 * 8] = bytes(16 * 8)
    with open(region, "r+b") as f:  # in place, as a mapping would
        f.write(data)


def test_zeroing_the_memory_region_gives_no_memory(world):
    """Three processes take the whole 2 GiB limit; then the usage words of
    the region are zeroed behind their backs. None of them, and no new
    process, gets one more byte: each repairs its own slot from its own
    ledger, and reservations wait until every live process has registered
    its usage again."""
    limit, chunk = 2048 * MIB, 64 * MIB
    probes = [Probe(world, conf=mem_conf(2048)) for _ in range(3)]
    for p in probes:
        assert p.rc("init") == 0 and p.rc("ctx 0 primary") == 0
    counts = []
    for p in probes:
        a = p(f"fill mem {chunk}")
        assert a[0] == "fill" and a[2] == str(OOM), a
        counts.append(int(a[1]))
    held = 3 * CTX_MIB * MIB + sum(counts) * chunk
    assert limit - held < chunk, (held, counts)
    zero_usage_words(world["dir"] / "vcuda-memory.shm")
    for p in probes:
        assert p.rc(f"alloc mem {chunk}") == OOM
    for p in probes:  # each has been back since: all slots vouched for again
        assert meminfo(p) == (limit - held, limit)
    late = Probe(world, conf=mem_conf(2048))
    assert late.rc("init") == 0
    assert late.rc("ctx 0 primary") == OOM  # 300 MiB more would pass the limit
    for p in probes:
        assert p.rc(f"alloc mem {chunk}") == OOM
    assert mock_used(world) == held  # the driver gave out nothing more
    for p in probes + [late]:
        assert p.close() == 0
    lines = [line for p in probes for line in log_lines(p.stderr())]
    assert len(lines) == 3, lines  # one warning per process that found its slot changed
    assert all("behind the interposer's back" in line for line in lines), lines


def test_symlink_at_memory_region_fails_closed(world, tmp_path):
    """A link planted at vcuda-memory.shm before the first process starts:
    no process counts on its own (three of them would get three times the
    limit); each fails closed, with one error line, and the link's target
    is not touched."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (world["dir"] / "vcuda-memory.shm").symlink_to(victim)
    probes = [Probe(world, conf=mem_conf(1024)) for _ in range(3)]
    for p in probes:
        assert p.rc("init") == 0
        assert p.rc("ctx 0 primary") == OOM
        assert p.rc("ctx 0 v2") == OOM
    assert mock_used(world) == 0
    for p in probes:
        assert p.close() == 0
        lines = log_lines(p.stderr())
        assert len(lines) == 1, lines
        assert "vcuda-memory.shm" in lines[0] and "symbolic link" in lines[0], lines
        assert "failing closed" in lines[0] and lines[0].startswith("E"), lines
    assert victim.read_bytes() == b"precious"


def test_symlink_at_core_region_writes_no_victim(world, tmp_path):
    """A link planted at vcuda-core.shm pointing at a file the container's
    processes can write: the file is neither sized nor overwritten, and the
    compute limit does not fall back to a bucket per process either (three
    processes would get three times the share): launches on the limited
    card are refused, with one error line."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    os.chmod(victim, 0o666)
    (world["dir"] / "vcuda-core.shm").symlink_to(victim)
    probe = Probe(world, conf=core_conf(30))
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert probe.rc("launch") == 701  # CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
    assert probe.close() == 0
    assert victim.read_bytes() == b"precious"
    lines = log_lines(probe.stderr())
    assert len(lines) == 1, lines
    assert "vcuda-core.shm" in lines[0] and "failing closed" in lines[0], lines
