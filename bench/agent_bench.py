#!/usr/bin/env python3
"""egpu-agent's device plugin under load, against the fake kubelet
(tests/kubelet/fake_kubelet.py) and the test API server (tests/apiserver/server.py),
over real unix sockets and gRPC, with 8 fake A100-80GB cards.

Prints, per call kind, p50/p99 latency in microseconds and calls per second
(one client, calls back to back), and the size of the ListAndWatch message for
8 cards (800 device IDs):

* Allocate (--no-api agent): N calls of 30 IDs on one card each (a shared
  container: the allocation dir and its shared/ subdir taken through
  directory fds, ld.so.preload written under a random O_EXCL name with
  fsync + renameat);
* PreStartContainer (--no-api agent): N calls, the ID check only;
* PreStartContainer (agent with the API server): N calls cycling over 24
  admitted containers (3 per card, 30 % each): PodResources List, pod GET,
  limits.json and vcuda.conf (fsync + renameat), elasticgpu.io/allocated merge patch. The
  test API server is Python: most of this time is its own.

Figures only: no pass/fail thresholds.

Usage: /usr/bin/python3 bench/agent_bench.py --agent build/src/agent/egpu-agent [-n 500]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "kubelet"))

from fake_kubelet import FakeKubelet, dp  # noqa: E402

RES = "elasticgpu.io/gpu-core"
TOKEN = "agent-bench-token"
NODE = "bench-node"
CARDS = 8
ID_RE = re.compile(r"^(GPU-[0-9a-f-]{36})-(\d\d)$")


def start_agent(binary, base, api=None):
    log = open(os.path.join(base, "agent.log"), "w")
    proc = subprocess.Popen(
        [binary, *(["--kubeconfig", api] if api else ["--no-api"]),
         "--fake-gpus", "%dxA100-80GB" % CARDS, "--node-name", NODE,
         "--device-plugin-dir", os.path.join(base, "device-plugins"),
         "--pod-resources-socket", os.path.join(base, "pod-resources", "kubelet.sock"),
         "--alloc-root", os.path.join(base, "alloc"), "--interposer", "/opt/egpu/libegpu-vcuda.so",
         "--listen", "127.0.0.1", "--port", "0", "--log-level", "error",
         "--cleanup-interval", "0"],
        stdout=subprocess.DEVNULL, stderr=log)
    return proc


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def by_card(devices):
    cards = {}
    for d in devices:
        m = ID_RE.match(d.ID)
        cards.setdefault(m.group(1), []).append(d.ID)
    return [sorted(cards[u]) for u in sorted(cards)]


def timed(n, call):
    lat = []
    t0 = time.perf_counter()
    for i in range(n):
        s = time.perf_counter()
        call(i)
        lat.append(time.perf_counter() - s)
    total = time.perf_counter() - t0
    lat.sort()
    return lat, total


def report(name, lat, total):
    p50 = statistics.median(lat) * 1e6
    p99 = lat[min(len(lat) - 1, int(round(0.99 * len(lat))) - 1)] * 1e6
    print("%-42s n=%d  p50=%8.0f us  p99=%8.0f us  %8.0f calls/s"
          % (name, len(lat), p50, p99, len(lat) / total))


def api_call(url, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + TOKEN)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read() or b"null")


def bench_no_api(binary, n):
    base = tempfile.mkdtemp(prefix="egpu-bench-")
    kubelet = FakeKubelet(os.path.join(base, "device-plugins"), rate_limit=False).start()
    agent = start_agent(binary, base)
    try:
        kubelet.wait_for_devices(RES, lambda d: len(d) == CARDS * 100, timeout=30)
        p = kubelet.plugins[RES]
        size = dp.ListAndWatchResponse(devices=list(p.devices)).ByteSize()
        cards = by_card(p.devices)
        sets = []
        for i in range(n):
            ids = cards[i % CARDS]
            off = (i // CARDS) % 70
            sets.append(ids[off:off + 30])
        reqs = [dp.AllocateRequest(container_requests=[
            dp.ContainerAllocateRequest(devices_ids=s)]) for s in sets]
        lat, total = timed(n, lambda i: p.stub.Allocate(reqs[i], timeout=10))
        report("Allocate (30 IDs, one card)", lat, total)
        pre = [dp.PreStartContainerRequest(devices_ids=s) for s in sets]
        lat, total = timed(n, lambda i: p.stub.PreStartContainer(pre[i], timeout=30))
        report("PreStartContainer (--no-api: ID check)", lat, total)
        print("%-42s %d bytes (%d cards, %d IDs)" % ("ListAndWatchResponse size", size, CARDS,
                                                     len(p.devices)))
    finally:
        stop(agent)
        kubelet.stop()
        shutil.rmtree(base, ignore_errors=True)


def bench_api(binary, n):
    base = tempfile.mkdtemp(prefix="egpu-bench-")
    # The test API server writes a reply's headers and body separately;
    # without TCP_NODELAY on its side, Nagle and the client's delayed ACK add
    # about 40 ms to every call, which would be the server's cost, not the
    # agent's. So it runs with Nagle off (a bench-side setting only).
    boot = ("import runpy, socketserver, sys; "
            "socketserver.StreamRequestHandler.disable_nagle_algorithm = True; "
            "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")
    server = subprocess.Popen(["/usr/bin/python3", "-c", boot,
                               os.path.join(ROOT, "tests/apiserver/server.py"),
                               "--port", "0", "--token", TOKEN],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    kubelet = agent = None
    try:
        line = server.stdout.readline().strip()
        m = re.match(r"listening on (http://127\.0\.0\.1:\d+)$", line)
        if not m:
            raise SystemExit("agent_bench: test API server did not start: %r" % line)
        url = m.group(1)
        kubeconfig = os.path.join(base, "kubeconfig")
        with open(kubeconfig, "w") as f:
            f.write("apiVersion: v1\nkind: Config\n"
                    f"clusters: [{{name: t, cluster: {{server: '{url}'}}}}]\n"
                    f"users: [{{name: u, user: {{token: {TOKEN}}}}}]\n"
                    "contexts: [{name: t, context: {cluster: t, user: u}}]\n"
                    "current-context: t\n")
        kubelet = FakeKubelet(os.path.join(base, "device-plugins"), rate_limit=False).start()
        agent = start_agent(binary, base, api=kubeconfig)
        kubelet.wait_for_devices(RES, lambda d: len(d) == CARDS * 100, timeout=30)
        p = kubelet.plugins[RES]
        cards = by_card(p.devices)
        pods, sets = {}, []
        for c, ids in enumerate(cards):
            uuid = ID_RE.match(ids[0]).group(1)
            for k in range(3):
                name = "bench-%d-%d" % (c, k)
                assigned = {"node": NODE, "containers": [
                    {"name": "main", "core": 30, "memory": 8192, "gpus": [uuid]}]}
                api_call(url, "POST", "/api/v1/namespaces/default/pods", {
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": "default",
                                 "annotations": {"elasticgpu.io/assigned": json.dumps(assigned)}},
                    "spec": {"nodeName": NODE, "schedulerName": "elastic-gpu-scheduler",
                             "containers": [{"name": "main", "image": "busybox"}]}})
                s = ids[k * 30:(k + 1) * 30]
                pods["default/" + name] = {"main": {RES: s}}
                sets.append(s)
                p.stub.Allocate(dp.AllocateRequest(container_requests=[
                    dp.ContainerAllocateRequest(devices_ids=s)]), timeout=10)
        kubelet.set_pod_resources(pods)
        pre = [dp.PreStartContainerRequest(devices_ids=s) for s in sets]
        lat, total = timed(n, lambda i: p.stub.PreStartContainer(pre[i % len(pre)], timeout=30))
        report("PreStartContainer (API server, %d pods)" % len(pre), lat, total)
    finally:
        if agent is not None:
            stop(agent)
        if kubelet is not None:
            kubelet.stop()
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(base, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agent", required=True, help="the egpu-agent binary")
    ap.add_argument("-n", type=int, default=500, help="calls per kind (default 500)")
    args = ap.parse_args()
    if not os.access(args.agent, os.X_OK):
        raise SystemExit("agent_bench: %s: not an executable" % args.agent)
    print("egpu-agent device plugin, %d fake A100-80GB cards, one client" % CARDS)
    bench_no_api(os.path.abspath(args.agent), args.n)
    bench_api(os.path.abspath(args.agent), args.n)


if __name__ == "__main__":
    main()
