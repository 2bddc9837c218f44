"""The live path makes the replay's choices, end to end with the real
binaries: egpu-sim writes the FGD target workload it measured fragmentation against
(target_workload.json), egpu-scheduler --target-workload reads that file, and with
--pods-without-gpu place a pod asking no GPU goes through filter, prioritize and bind like
the pods that ask one (bench/live_replay shows the figures: docs/scheduler.md)."""
import csv
import json
import subprocess

from test_scheduler import api, args, cluster, sched  # noqa: F401 (fixtures)
from test_sim_cli import run, small_trace

ASSIGNED = "elasticgpu.io/assigned"


def sim_workload(sim, tmp_path, fixtures):
    d = small_trace(tmp_path, fixtures)
    out = tmp_path / "out"
    p = run(sim, "--trace-dir", str(d), "--policy", "fgd", "--seeds", "1", "--out", str(out),
            "--no-plot")
    assert p.returncode == 0, p.stderr
    assert "target_workload.json" in p.stdout
    return d, out / "target_workload.json"


def test_sim_writes_the_target_workload(sim, tmp_path, fixtures):
    """Five distinct pods, coverage 0.95: all five typical pods at weight 0.2 each, with the
    trace's CPU, per-card milli-GPU, cards and model lists (gpu_spec)."""
    d, path = sim_workload(sim, tmp_path, fixtures)
    doc = json.loads(path.read_text())
    assert doc["apiVersion"] == "elasticgpu.io/v1alpha1" and doc["kind"] == "TargetWorkload"
    models = lambda text: "|".join(sorted(text.split("|"))) if text else ""  # noqa: E731
    with open(d / "openb_pod_list_default.csv") as f:
        want = sorted((int(r["cpu_milli"]), int(r["gpu_milli"]), int(r["num_gpu"]),
                       models(r["gpu_spec"])) for r in csv.DictReader(f))
    got = sorted((p["cpuMilli"], p["gpuMilli"], p["gpus"], models(p.get("models", "")))
                 for p in doc["typicalPods"])
    assert got == want
    assert abs(sum(p["weight"] for p in doc["typicalPods"]) - 1) < 1e-9
    assert all(abs(p["weight"] - 0.2) < 1e-9 for p in doc["typicalPods"])


def cpu_pod(api, name, cpu):
    st, obj = api.call("POST", "/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulerName": "elastic-gpu-scheduler",
                 "containers": [{"name": "main", "image": "busybox",
                                 "resources": {"requests": {"cpu": cpu}}}]}})
    assert st == 201, obj
    return obj


def test_scheduler_places_pods_without_gpu_against_the_sims_workload(
        api, sched, sim, tmp_path, fixtures):
    _, path = sim_workload(sim, tmp_path, fixtures)
    cluster(api, nodes=("gpu-1", "gpu-2"), gpus=2)
    api.node("cpu-small", cpu="2")
    nodes = ["gpu-1", "gpu-2", "cpu-small"]
    s = sched(extra=("--node-policy", "fgd", "--card-policy", "fgd", "--pods-without-gpu",
                     "place", "--target-workload", str(path)))
    s.wait_ready()
    log = s.log.read_text()
    assert "target workload pinned" in log and "typical_pods=5" in log
    assert "--pods-without-gpu place" in log
    pod = cpu_pod(api, "cpu-4", "4")
    st, fr = s.post("filter", args(pod, nodes))
    assert st == 200 and not fr.get("Error"), fr
    assert "cpu" in fr["FailedNodes"]["cpu-small"], fr
    passed = fr["NodeNames"]
    st, plist = s.post("prioritize", args(pod, passed))
    assert st == 200
    tens = [e["Host"] for e in plist if e["Score"] == 10]
    assert len(tens) == 1 and tens[0] in ("gpu-1", "gpu-2"), plist
    s.wait_until(lambda: s.post("bind", {"PodName": "cpu-4", "PodNamespace": "default",
                                         "PodUID": "", "Node": tens[0]})[1].get("Error") == "")
    got = api.get_pod("cpu-4")
    assert got["spec"]["nodeName"] == tens[0]
    assert ASSIGNED not in got["metadata"].get("annotations", {})
    s.wait_until(lambda: s.metric("egpu_scheduler_binds_total") == 1)
    assert s.metric("egpu_scheduler_cache_waiting_pods") == 0


def test_scheduler_without_place_leaves_such_pods_alone(api, sched):
    cluster(api, nodes=("gpu-1",), gpus=1)
    s = sched()
    s.wait_ready()
    pod = cpu_pod(api, "cpu-1", "1")
    st, fr = s.post("filter", args(pod, ["gpu-1"]))
    assert st == 200 and fr["NodeNames"] == ["gpu-1"]
    s.wait_until(lambda: api.get_pod("cpu-1") is not None)
    st, b = s.post("bind", {"PodName": "cpu-1", "PodNamespace": "default", "PodUID": "",
                            "Node": "gpu-1"})
    assert "--pods-without-gpu pass" in b["Error"] or "not in the elastic-gpu cache" in b["Error"]


def test_bad_target_workload_or_mode_refused_at_start(build_dir, api, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"apiVersion": "elasticgpu.io/v1alpha1", "kind": "TargetWorkload",
                               "typicalPods": [{"gpuMilli": 500, "gpus": 3, "weight": 1}]}))
    exe = str(build_dir / "src/scheduler/egpu-scheduler")
    base = [exe, "--kubeconfig", api.kubeconfig, "--port", "0", "--health-port", "0"]
    for extra, code, needle in (
            (["--target-workload", str(bad)], 1,
             "typicalPods[0].gpus: 3 whole cards need gpuMilli 1000, not 500"),
            (["--target-workload", str(tmp_path / "none.json")], 1, "none.json"),
            (["--pods-without-gpu", "maybe"], 2, "expected pass or place")):
        p = subprocess.run(base + extra, capture_output=True, text=True, timeout=30)
        assert p.returncode == code, (extra, p.stderr)
        assert needle in p.stderr, (extra, p.stderr)


def test_fgd_cpu_by_annotation_prefers_the_node_whose_cpu_feeds_its_cards(api, sched, tmp_path):
    """The case of tests/unit/test_policy.c's test_fgd_cpu_node_choice through the real
    extender: nodes a (10 cores) and b (40 cores) of 2 free cards, a target workload of one
    1-card pod with 4 cores, a pod of 6 cores and no GPU. Under FGD the two tie (both score
    50; the seeded hash decides); a pod annotated elasticgpu.io/node-policy: fgd-cpu gets 10
    on b, whatever the seed, as on a its cores would feed only one of the two cards again."""
    path = tmp_path / "tw.json"
    path.write_text(json.dumps({"apiVersion": "elasticgpu.io/v1alpha1", "kind": "TargetWorkload",
                                "typicalPods": [{"cpuMilli": 4000, "gpuMilli": 1000, "gpus": 1,
                                                 "weight": 1}]}))
    for n, cpu in (("a", "10"), ("b", "40")):
        api.node(n, cpu=cpu)
        for i in range(2):
            api.gpu(n, i)
    s = sched(extra=("--node-policy", "fgd", "--card-policy", "fgd", "--pods-without-gpu",
                     "place", "--target-workload", str(path)))
    s.wait_ready()
    st, pod = api.call("POST", "/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "cpu-6", "namespace": "default",
                     "annotations": {"elasticgpu.io/node-policy": "fgd-cpu"}},
        "spec": {"schedulerName": "elastic-gpu-scheduler",
                 "containers": [{"name": "main", "image": "busybox",
                                 "resources": {"requests": {"cpu": "6"}}}]}})
    assert st == 201, pod
    st, fr = s.post("filter", args(pod, ["a", "b"]))
    assert st == 200 and fr["NodeNames"] == ["b"], fr
    assert "fits this pod better (node policy fgd-cpu)" in fr["FailedNodes"]["a"], fr
    st, plist = s.post("prioritize", args(pod, ["a", "b"]))
    assert st == 200
    assert [e["Host"] for e in plist if e["Score"] == 10] == ["b"], plist
