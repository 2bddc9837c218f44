"""Issue 10, findings 1 and 4, played by a hostile tenant against the real
egpu-scheduler and the test API server: one object a pod owner writes must
not stop GPU scheduling, and an owner's edit of the scheduler's recorded
decision must not free its card in the scheduler's books."""
import json
import time

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
