"""make cluster-demo: Elastic GPU on a real Kubernetes control plane, end to end.

1. Starts the control plane of tests/cluster/cluster.py (etcd, kube-apiserver,
   kube-controller-manager, kube-scheduler v1.36.3 from tools/bin) in a temporary folder.
2. Installs Elastic GPU with `helm install` of deploy/helm/elastic-gpu.
3. Runs its binaries as host processes, as deploy/'s Deployments run them (the chart renders
   the same objects: tests/integration/test_helm.py), each with its ServiceAccount's token (tests/cluster/components.py): egpu-webhook (a certificate the
   cluster CA signed; the webhook configurations pointed at 127.0.0.1, as no kube-proxy here
   routes their Service), egpu-controller, and egpu-scheduler beside a second kube-scheduler
   with deploy/scheduler's KubeSchedulerConfiguration.
4. Joins two nodes with fake GPUs (tests/cluster/node.py: the fake kubelet and egpu-agent over
   the mock NVML): node-a with two A100 80GB, node-b with two H100 80GB.
5. Applies deploy/examples: a share (pod.yaml), a whole card (whole-card.yaml), a claim and a
   pod that uses it (claim.yaml), and a namespace over its GPU budget (over-budget.yaml: once
   the first pod has spent the budget, the late pod gets gpu-over-budget).
6. Prints `kubectl get pods -o wide`, `kubectl egpu inspect` and each pod's placement decision
   (its elasticgpu.io/assigned: node, card, core and memory; and its PriorityClass), then
   stops every process it started.

Usage: python3 tests/cluster/demo.py [--build DIR] [--keep]
  --build DIR  the CMake build folder (default build, or $EGPU_BUILD)
  --keep       keep the cluster running after printing, until Ctrl-C (KUBECONFIG printed)
Exit status 0 when every pod ran as the demo expects, 1 otherwise (the reason printed)."""
import argparse
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import cluster as cl  # noqa: E402
import components  # noqa: E402
import node as nodes  # noqa: E402

NS = "elastic-gpu-system"
EXAMPLES = ROOT / "deploy" / "examples"
A100 = ",".join(f"NVIDIA A100-SXM4-80GB:81920:GPU-6d0c1c3e-0000-4000-8000-00000000a0{i}"
                for i in range(2))
H100 = ",".join(f"NVIDIA H100 80GB HBM3:81559:GPU-6d0c1c3e-0000-4000-8000-00000000b0{i}"
                for i in range(2))
# namespace/pod -> what the demo expects of it
PODS = {"default/egpu-example": "a 30% share with 4096 MiB",
        "default/egpu-whole-card": "a whole card",
        "default/egpu-claim-user": "the claim egpu-example-claim's card",
        "lab/lab-first": "a whole card, spending lab's budget",
        "lab/lab-late": "a share, lab over its budget"}
T0 = time.monotonic()


def wait(pred, what, timeout=120):
    return cl.wait_until(pred, what, timeout, every=0.3)


def step(text):
    print(f"[{time.monotonic() - T0:6.1f}s] {text}", flush=True)


def get(c, path):
    st, obj = c.call("GET", path)
    return obj if st == 200 else None


def pod(c, key):
    ns, name = key.split("/")
    return get(c, f"/api/v1/namespaces/{ns}/pods/{name}")


def running(c, key):
    p = pod(c, key)
    return p if p and p.get("status", {}).get("phase") == "Running" else None


def apply(c, path, *docs):
    """kubectl apply --server-side of file path, or of only docs (dicts) of it."""
    if docs:
        text = "\n---\n".join(json.dumps(d) for d in docs)
        return c.kubectl("apply", "--server-side", "-f", "-", stdin=text)
    return c.kubectl("apply", "--server-side", "-f", str(path))


def run(build, keep):
    work = pathlib.Path(tempfile.mkdtemp(prefix="egpu-cluster-demo-"))
    started = []
    c = None
    try:
        step(f"control plane in {work}")
        c = cl.Cluster(work / "cluster").start()
        step(f"{c.version} up: etcd, kube-apiserver, kube-controller-manager, kube-scheduler")

        step("helm install egpu deploy/helm/elastic-gpu --namespace elastic-gpu-system")
        c.helm("install", "egpu", str(ROOT / "deploy/helm/elastic-gpu"), "--namespace", NS,
               "--create-namespace")
        crds = [p.name for p in (ROOT / "deploy/helm/elastic-gpu/crds").glob("*.yaml")]
        c.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        step(f"installed: {len(crds)} CRDs Established")

        started.append(components.served_webhook(c, build, work))
        ctl = components.controller(c, build, work)
        started.append(ctl)
        started.append(components.SchedulerPair(c, build, work, "elastic-gpu"))
        step("egpu-webhook, egpu-controller, egpu-scheduler and its kube-scheduler running, "
             "each with its ServiceAccount")

        for name, cards, model in (("node-a", A100, "2x A100 80GB"),
                                   ("node-b", H100, "2x H100 80GB")):
            n = nodes.Node(c, name, build, cards=cards).start()
            started.append(n)
            step(f"{name} joined ({model}): Node registered, egpu-agent its device plugin")
        wait(lambda: len((get(c, "/apis/elasticgpu.io/v1alpha1/gpus") or {}).get("items", []))
             == 4, "the 4 GPU objects")

        step("kubectl apply -f deploy/examples/{pod,whole-card,claim}.yaml")
        for f in ("pod.yaml", "whole-card.yaml", "claim.yaml"):
            apply(c, EXAMPLES / f)
        import yaml
        budget = [d for d in yaml.safe_load_all((EXAMPLES / "over-budget.yaml").read_text())
                  if d]
        step("kubectl apply -f deploy/examples/over-budget.yaml: namespace lab, its GPUBudget "
             "of 0.001 GPU-hours")

        def state():
            return (get(c, "/apis/elasticgpu.io/v1alpha1/namespaces/lab/gpubudgets/lab")
                    or {}).get("status", {}).get("state")
        apply(c, None, *budget[:2])
        wait(lambda: state() == "InBudget", "lab's budget InBudget")
        step("lab is InBudget: now lab-first, a whole card")
        apply(c, None, budget[2])
        wait(lambda: running(c, "lab/lab-first"), "lab/lab-first Running")
        wait(lambda: state() == "OverBudget", "lab's budget OverBudget", timeout=180)
        step("lab is OverBudget: now lab-late")
        apply(c, None, budget[3])
        for key in PODS:
            wait(lambda: running(c, key), f"{key} Running")
        step("every pod Running")

        print()
        print("$ kubectl get pods -A -o wide", flush=True)
        print(c.kubectl("get", "pods", "-A", "-o", "wide").stdout, flush=True)
        bindir = work / "bin"
        bindir.mkdir()
        (bindir / "kubectl-egpu").symlink_to(build / "src/kubectl/kubectl-egpu")
        print("$ kubectl egpu inspect", flush=True)
        r = subprocess.run([str(cl.BIN / "kubectl"), "egpu", "inspect"], capture_output=True,
                           text=True, timeout=60, env={**cl.clean_env(),
                                                        "KUBECONFIG": c.kubeconfig,
                                                        "PATH": f"{bindir}:{os.environ['PATH']}"})
        print(r.stdout + r.stderr, flush=True)
        if r.returncode != 0:
            raise RuntimeError(f"kubectl egpu inspect: rc {r.returncode}")
        print("placement decisions (elasticgpu.io/assigned, written by egpu-scheduler at bind):")
        for key, what in PODS.items():
            p = pod(c, key)
            a = json.loads(p["metadata"]["annotations"]["elasticgpu.io/assigned"])
            cs = ", ".join(f"{x.get('name', '?')}: core {x.get('core')}%, memory "
                           f"{x.get('memory') or 'all'}{' MiB' if x.get('memory') else ''}"
                           f" on {', '.join(x.get('gpus') or [])}"
                           for x in a.get("containers", []))
            print(f"  {key:<26} ({what}) -> node {a.get('node')}; {cs}; "
                  f"priorityClassName {p['spec'].get('priorityClassName', '-')}", flush=True)
        late = pod(c, "lab/lab-late")
        if late["spec"].get("priorityClassName") != "gpu-over-budget":
            raise RuntimeError(f"lab-late has {late['spec'].get('priorityClassName')}, "
                               "not gpu-over-budget")
        print()
        if keep:
            step(f"running until Ctrl-C: KUBECONFIG={c.kubeconfig}")
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
        return 0
    finally:
        for x in reversed(started):
            x.stop()
        if c is not None:
            c.stop()
        step("stopped every process the demo started")
        shutil.rmtree(work, ignore_errors=True)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("EGPU_BUILD") or str(ROOT / "build"))
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args(argv[1:])
    missing = cl.missing_binaries()
    if missing:
        print(f"cluster-demo: tools/bin lacks {', '.join(missing)}: run `make deps`",
              file=sys.stderr)
        return 1
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM}) if a.keep \
        else None
    try:
        return run(pathlib.Path(a.build).resolve(), a.keep)
    except (TimeoutError, RuntimeError, cl.ClusterError, AssertionError) as e:
        print(f"cluster-demo: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
