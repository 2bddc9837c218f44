"""Issue 10, findings 1 and 4, played by a hostile tenant against the real
egpu-scheduler and the test API server: one object a pod owner writes must
not stop GPU scheduling, and an owner's edit of the scheduler's recorded
decision must not free its card in the scheduler's books."""
import json
import shutil
import subprocess
import time

import yaml

from conftest import ROOT
from test_deploy import KUBECTL
from test_scheduler import ASSIGNED, api, args, assigned, cluster, sched  # noqa: F401 (fixtures)


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
    assert st == 200 and out["NodeNames"] == ["gpu-1", "gpu-2"]


def test_readyz_503_while_a_watch_keeps_failing(api, sched):
    """A watch that keeps failing (the cache no longer follows the API) makes
    the extender not ready after the stated bound, and ready again after."""
    cluster(api, nodes=("gpu-1",), gpus=1)
    s = sched(extra=("--watch-unhealthy-seconds", "2"))
    s.wait_ready()
    api.control("fault", {"method": "GET", "path": "^/api/v1/pods$", "code": 500, "count": -1})
    api.control("drop-watches")
    body = s.wait_ready(want=503, timeout=20)
    assert "Pod" in body and "failed for" in body, body
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
    out = subprocess.run([KUBECTL, "kustomize", str(ROOT / "deploy")], capture_output=True,
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
