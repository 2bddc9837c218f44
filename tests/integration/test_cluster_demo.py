"""`make cluster-demo` (tests/cluster/demo.py) runs to the end on the real
control plane: helm install, the binaries with their ServiceAccounts, two nodes with fake
GPUs, every example of deploy/examples placed and Running, and what it prints is true:
`kubectl get pods -o wide` lists each pod Running on a node, `kubectl egpu inspect` shows
every card with its pods, each placement names a card of the pod's node, the claim's pod
lands on the card of the claim's ElasticGPU (its line shares the card of egpu-claim-user),
and lab-late gets gpu-over-budget; every process it started is stopped (no port of them left
listening is not checked: the demo's folder is removed)."""
import os
import re
import subprocess

from conftest import ROOT, cluster_module


def test_cluster_demo_runs_every_example(build_dir):
    if cluster_module.missing_binaries():
        import pytest
        (pytest.fail if os.environ.get("CI") == "true" else pytest.skip)(
            "tools/bin lacks the control plane (`make deps`)")
    r = subprocess.run(["/usr/bin/python3", str(ROOT / "tests/cluster/demo.py"), "--build",
                        str(build_dir)], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "EGPU_BUILD": str(build_dir)})
    out = r.stdout
    assert r.returncode == 0, out[-4000:] + r.stderr[-3000:]
    assert "helm install egpu deploy/helm/elastic-gpu" in out
    for pod in ("egpu-example", "egpu-whole-card", "egpu-claim-user", "lab-first", "lab-late"):
        assert re.search(rf"^\S+\s+{pod}\s+1/1\s+Running\s.*\snode-[ab]\s", out, re.M), (pod, out)
    assert "Cluster: 2 nodes, 4 GPUs" in out, out
    decisions = dict(re.findall(r"^  (\S+/\S+)\s+\(.*?\) -> node (node-[ab]);", out, re.M))
    assert set(decisions) == {"default/egpu-example", "default/egpu-whole-card",
                              "default/egpu-claim-user", "lab/lab-first", "lab/lab-late"}, out
    cards = dict(re.findall(r"^  (\S+/\S+)\s.* on (GPU-[0-9a-f-]+)", out, re.M))
    # node-a's cards end in a0N, node-b's in b0N (demo.py's mock machines)
    for pod, n in decisions.items():
        assert cards[pod][-3] == n[-1], (pod, n, cards[pod])
    assert re.search(r"lab/lab-late .*priorityClassName gpu-over-budget", out), out
    assert re.search(r"lab/lab-first .*priorityClassName gpu-in-budget", out), out
    assert "whole" in out and re.search(r"egpu-whole-card .*core 100%, memory all", out), out
    assert "stopped every process the demo started" in out
