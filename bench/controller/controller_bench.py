#!/usr/bin/env python3
"""egpu-controller's reconcile throughput and latency against the test API server
(tests/apiserver/server.py).

Starts the test API server, creates --nodes Nodes with --cards GPU objects each (A100,
40960 MiB) and one ElasticGPUClass (gpushare.provisioner.elasticgpu.io, Immediate, Delete),
opens a watch on ElasticGPUClaims, starts egpu-controller (--leader-elect false) and waits
for /readyz, then creates --claims claims (gpu-core 25, gpu-memory 4096) as fast as
--clients kept-alive connections can. Each claim's time to Bound is from the moment its POST
was sent to the moment the watch delivered it with status.phase Bound.

Prints: claims/s created and bound (first POST to last Bound), p50/p90/p99/max time to
Bound, the CPU seconds of egpu-controller, of the test API server and of this driver over
the claim phase, the controller's reconcile metrics, and the errors (failed POSTs, claims not
Bound by --timeout, E/F lines in the controller's log). The test API server is one Python
process under the GIL: when its CPU is near one core it, not the controller, sets the pace.

Figures only: no pass/fail thresholds. The exit status is 1 only when something could not
run or a claim did not reach Bound.

Usage: /usr/bin/python3 bench/controller/controller_bench.py
         --controller build/src/controller/egpu-controller [--claims 10000] [--nodes 1000]
         [--cards 8] [--clients 4] [--timeout S] [--quick] [--keep]
"""
import argparse
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKEN = "controller-bench-token"
G = "/apis/elasticgpu.io/v1alpha1"
V = "elasticgpu.io/v1alpha1"
NS = "default"
CLK = os.sysconf("SC_CLK_TCK")


class Conn:
    """One kept-alive HTTP/1.1 connection to the test API server."""

    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port
        self.c = http.client.HTTPConnection(self.host, self.port, timeout=60)

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        hdr = {"Authorization": "Bearer " + TOKEN}
        if data is not None:
            hdr["Content-Type"] = "application/json"
        for attempt in (0, 1):
            try:
                self.c.request(method, path, body=data, headers=hdr)
                r = self.c.getresponse()
                return r.status, r.read()
            except (http.client.HTTPException, OSError):
                self.c.close()
                self.c = http.client.HTTPConnection(self.host, self.port, timeout=60)
                if attempt:
                    raise
        return None, b""


def cpu_seconds(pid):
    """utime + stime of a process (and its waited-for children), in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11:15]) / CLK


def pct(sorted_v, p):
    if not sorted_v:
        return float("nan")
    k = min(len(sorted_v) - 1, max(0, int(round(p / 100.0 * len(sorted_v) + 0.5)) - 1))
    return sorted_v[k]


def wait_line(path, pattern, timeout, proc):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open(path) as f:
                m = re.search(pattern, f.read(), re.M)
        except OSError:
            m = None
        if m:
            return m
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    sys.exit(f"controller_bench: no line /{pattern}/ in {path}:\n" + open(path).read()[-2000:])


class Watcher(threading.Thread):
    """Watches ElasticGPUClaims from a resourceVersion and records when each first shows
    status.phase Bound (time.monotonic())."""

    def __init__(self, url, rv):
        super().__init__(daemon=True)
        self.url, self.rv = url, rv
        self.bound = {}
        self.events = 0
        self.errors = []
        self.stop = False
        self.cv = threading.Condition()

    def run(self):
        u = urllib.parse.urlparse(self.url)
        while not self.stop:
            c = http.client.HTTPConnection(u.hostname, u.port, timeout=3600)
            try:
                c.request("GET", f"{G}/namespaces/{NS}/elasticgpuclaims?watch=1"
                          f"&allowWatchBookmarks=true&resourceVersion={self.rv}",
                          headers={"Authorization": "Bearer " + TOKEN})
                r = c.getresponse()
                if r.status != 200:
                    self.errors.append(f"watch: HTTP {r.status} {r.read()[:200]!r}")
                    return
                while not self.stop:
                    line = r.readline()
                    if not line:
                        break
                    now = time.monotonic()
                    ev = json.loads(line)
                    obj = ev.get("object", {})
                    if ev.get("type") == "ERROR":
                        self.errors.append(f"watch: {obj.get('message')}")
                        return
                    self.rv = obj.get("metadata", {}).get("resourceVersion", self.rv)
                    if ev.get("type") == "BOOKMARK":
                        continue
                    self.events += 1
                    name = obj["metadata"]["name"]
                    if obj.get("status", {}).get("phase") == "Bound" and name not in self.bound:
                        with self.cv:
                            self.bound[name] = now
                            self.cv.notify_all()
            except (http.client.HTTPException, OSError, ValueError) as e:
                if not self.stop:
                    self.errors.append(f"watch: {e!r} (reopened)")
            finally:
                c.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--controller", required=True, help="the egpu-controller binary")
    ap.add_argument("--claims", type=int, default=10000)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--cards", type=int, default=8, help="GPU objects per node")
    ap.add_argument("--clients", type=int, default=4,
                    help="connections creating claims in parallel")
    ap.add_argument("--timeout", type=float, default=0,
                    help="seconds to wait for every claim to be Bound after the last POST "
                         "(default: 60 + claims/20)")
    ap.add_argument("--quick", action="store_true",
                    help="200 claims on 20 nodes: a smoke test, not figures to quote")
    ap.add_argument("--controller-args", default="", help="more flags for egpu-controller")
    ap.add_argument("--api-cpu", default="", help="CPU list to pin the test API server to")
    ap.add_argument("--controller-cpu", default="", help="CPU list to pin egpu-controller to")
    ap.add_argument("--api-nagle", action="store_true",
                    help="turn Nagle's algorithm on in the test API server "
                         "(~44 ms of delayed-ACK wait per request), as it was before")
    ap.add_argument("--keep", action="store_true", help="keep the logs' directory")
    a = ap.parse_args()
    if a.quick:
        a.claims, a.nodes = min(a.claims, 200), min(a.nodes, 20)
    if a.claims < 1 or a.nodes < 1 or a.cards < 1 or a.clients < 1:
        sys.exit("controller_bench: --claims, --nodes, --cards and --clients must be >= 1")
    if a.claims * 25 > a.nodes * a.cards * 100:
        sys.exit(f"controller_bench: {a.claims} claims of gpu-core 25 do not fit on "
                 f"{a.nodes}x{a.cards} cards")
    if not os.access(a.controller, os.X_OK):
        sys.exit(f"controller_bench: {a.controller} not built (make build)")
    timeout = a.timeout or 60 + a.claims / 20.0

    def pin(cpus):
        return ["taskset", "-c", cpus] if cpus and shutil.which("taskset") else []

    base = tempfile.mkdtemp(prefix="egpu-bench-controller.")
    procs = []
    status = 0
    try:
        api_err = open(os.path.join(base, "api.err"), "w")
        # The history holds every event of the run, so the watch never gets 410.
        hist = 4 * a.claims + a.nodes * (a.cards + 1) + 10000
        # tests/apiserver/server.py writes a reply's headers and body in two send()s and
        # sets TCP_NODELAY, as Go's kube-apiserver does; --api-nagle turns Nagle's algorithm
        # back on, so the body waits for the client's delayed ACK (40 ms on Linux).
        nodelay = "server.Handler.disable_nagle_algorithm = False; " if a.api_nagle else ""
        launch = (f"import sys; sys.path.insert(0, {os.path.join(ROOT, 'tests/apiserver')!r}); "
                  f"import server; {nodelay}sys.exit(server.main(sys.argv[1:]))")
        api = subprocess.Popen(
            pin(a.api_cpu) + ["/usr/bin/python3", "-c", launch,
                              "--port", "0", "--token", TOKEN, "--history", str(hist),
                              "--bookmark-interval", "5"],
            stdout=subprocess.PIPE, stderr=api_err, text=True)
        procs.append(api)
        line = api.stdout.readline().strip()
        m = re.match(r"listening on (http://127\.0\.0\.1:\d+)$", line)
        if not m:
            sys.exit("controller_bench: test API server: " + line)
        url = m.group(1)
        conn = Conn(url)

        t = time.monotonic()
        for n in range(a.nodes):
            node = f"node-{n:04d}"
            st, out = conn.call("POST", "/api/v1/nodes", {
                "apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
                "status": {"allocatable": {"cpu": "64", "memory": "256Gi"}}})
            if st != 201:
                sys.exit(f"controller_bench: creating Node {node}: {st} {out[:200]!r}")
            for i in range(a.cards):
                st, out = conn.call("POST", f"{G}/gpus", {
                    "apiVersion": V, "kind": "GPU", "metadata": {"name": f"{node}-gpu{i}"},
                    "spec": {"nodeName": node, "index": i, "uuid": f"GPU-{node}-{i}",
                             "model": "A100", "memory": 40960}})
                if st != 201:
                    sys.exit(f"controller_bench: creating GPU {node}-gpu{i}: {st} "
                             f"{out[:200]!r}")
        st, out = conn.call("POST", f"{G}/elasticgpuclasses", {
            "apiVersion": V, "kind": "ElasticGPUClass", "metadata": {"name": "share"},
            "provisioner": "gpushare.provisioner.elasticgpu.io", "reclaimPolicy": "Delete",
            "bindingMode": "Immediate"})
        if st != 201:
            sys.exit(f"controller_bench: creating the ElasticGPUClass: {st} {out[:200]!r}")
        setup_s = time.monotonic() - t

        kubeconfig = os.path.join(base, "kubeconfig")
        with open(kubeconfig, "w") as f:
            f.write("apiVersion: v1\nkind: Config\n"
                    f"clusters: [{{name: b, cluster: {{server: '{url}'}}}}]\n"
                    f"users: [{{name: b, user: {{token: {TOKEN}}}}}]\n"
                    "contexts: [{name: b, context: {cluster: b, user: b, "
                    "namespace: elastic-gpu}}]\ncurrent-context: b\n")
        log = os.path.join(base, "controller.log")
        t = time.monotonic()
        ctl = subprocess.Popen(
            pin(a.controller_cpu) + [a.controller, "--kubeconfig", kubeconfig,
                                     "--listen", "127.0.0.1", "--port", "0",
                                     "--leader-elect", "false", *a.controller_args.split()],
            stdout=subprocess.DEVNULL, stderr=open(log, "w"))
        procs.append(ctl)
        port = int(wait_line(log, r"egpu-controller: serving addr=\S+ port=(\d+)", 30,
                             ctl).group(1))

        def health(path):  # a fresh connection: the server closes idle ones
            hc = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                hc.request("GET", path)
                r = hc.getresponse()
                return r.status, r.read().decode()
            except (http.client.HTTPException, OSError):
                return None, ""
            finally:
                hc.close()
        deadline = time.time() + 120
        while health("/readyz")[0] != 200:
            if time.time() > deadline or ctl.poll() is not None:
                sys.exit("controller_bench: egpu-controller not ready in 120 s:\n"
                         + open(log).read()[-2000:])
            time.sleep(0.1)
        ready_s = time.monotonic() - t

        # The watch starts at the resourceVersion of an empty claim list.
        st, out = conn.call("GET", f"{G}/namespaces/{NS}/elasticgpuclaims")
        rv = json.loads(out)["metadata"]["resourceVersion"]
        w = Watcher(url, rv)
        w.start()

        sent = {}
        post_errors = []
        lock = threading.Lock()

        def creator(k):
            c = Conn(url)
            for j in range(k, a.claims, a.clients):
                name = f"claim-{j:05d}"
                body = {"apiVersion": V, "kind": "ElasticGPUClaim",
                        "metadata": {"name": name, "namespace": NS},
                        "spec": {"elasticGPUClassName": "share", "resources": {"requests": {
                            "elasticgpu.io/gpu-core": 25, "elasticgpu.io/gpu-memory": 4096}}}}
                t0 = time.monotonic()
                try:
                    st, out = c.call("POST", f"{G}/namespaces/{NS}/elasticgpuclaims", body)
                except (http.client.HTTPException, OSError) as e:
                    st, out = None, repr(e).encode()
                with lock:
                    if st == 201:
                        sent[name] = t0
                    else:
                        post_errors.append(f"{name}: {st} {out[:200]!r}")

        cpu0 = {p.pid: cpu_seconds(p.pid) for p in (api, ctl)}
        self0 = os.times()
        t_start = time.monotonic()
        threads = [threading.Thread(target=creator, args=(k,)) for k in range(a.clients)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        t_posted = time.monotonic()
        deadline = t_posted + timeout
        with w.cv:
            while len(w.bound.keys() & sent.keys()) < len(sent) and time.monotonic() < deadline:
                w.cv.wait(0.5)
        t_end = time.monotonic()
        cpu1 = {p.pid: cpu_seconds(p.pid) for p in (api, ctl)}
        self1 = os.times()
        _, metrics = health("/metrics")

        lat = sorted(w.bound[n] - sent[n] for n in sent if n in w.bound)
        last_bound = max((w.bound[n] for n in sent if n in w.bound), default=t_end)
        wall = last_bound - t_start
        missing = len(sent) - len(lat)
        ctl_cpu = cpu1[ctl.pid] - cpu0[ctl.pid]
        api_cpu = cpu1[api.pid] - cpu0[api.pid]
        me_cpu = (self1.user + self1.system) - (self0.user + self0.system)
        with open(log) as f:
            bad = [ln.rstrip() for ln in f if re.match(r"^[EF]\d{4} ", ln)]

        print(f"== bench/controller: {os.cpu_count()} CPUs, {os.uname().release}; "
              f"{a.nodes} nodes x {a.cards} GPUs, {a.claims} claims (gpu-core 25, "
              f"gpu-memory 4096) over {a.clients} connections")
        print("   test API server sockets: " + ("Nagle on (server.py as is)" if a.api_nagle
                                                   else "TCP_NODELAY"))
        print(f"   setup: {a.nodes * (a.cards + 1) + 1} objects in {setup_s:.1f} s; "
              f"controller ready (lists synced) in {ready_s:.2f} s")
        print(f"   created:  {len(sent)} claims in {t_posted - t_start:.2f} s "
              f"({len(sent) / max(t_posted - t_start, 1e-9):.0f} claims/s)")
        print(f"   bound:    {len(lat)} claims, first POST to last Bound {wall:.2f} s "
              f"({len(lat) / max(wall, 1e-9):.1f} claims/s)")
        if lat:
            print("   time to Bound (POST sent -> watch event): "
                  f"p50 {pct(lat, 50) * 1e3:.0f} ms, p90 {pct(lat, 90) * 1e3:.0f} ms, "
                  f"p99 {pct(lat, 99) * 1e3:.0f} ms, max {lat[-1] * 1e3:.0f} ms, "
                  f"mean {statistics.fmean(lat) * 1e3:.0f} ms")
        span = max(t_end - t_start, 1e-9)
        print(f"   CPU over the {span:.1f} s claim phase: egpu-controller {ctl_cpu:.2f} s "
              f"({100 * ctl_cpu / span:.0f} % of one core, "
              f"{1e3 * ctl_cpu / max(len(lat), 1):.2f} ms a claim), test API server "
              f"{api_cpu:.2f} s ({100 * api_cpu / span:.0f} %), this driver "
              f"{me_cpu:.2f} s ({100 * me_cpu / span:.0f} %)")
        if api_cpu / span > 0.85:
            print("   the test API server (one Python process) was near one full core: "
                  "it, not egpu-controller, sets the pace")
        for mline in (metrics or "").splitlines():
            if re.match(r"egpu_controller_(reconcile_errors_total|reconcile_duration_seconds_"
                        r"(sum|count)|claims)\b", mline):
                print("   metric " + mline)
        errs = post_errors + w.errors + bad
        print(f"   errors: {len(post_errors)} failed POSTs, {missing} claims not Bound "
              f"{timeout:.0f} s after the last POST, {len(w.errors)} watch errors, "
              f"{len(bad)} E/F lines in egpu-controller's log")
        for e in errs[:5]:
            print("     " + e)
        if missing or post_errors or ctl.poll() is not None:
            status = 1
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if a.keep:
            print(f"   logs in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
