#!/usr/bin/python3
"""bench/restart_apiserver.py - egpu-scheduler's restart against the real kube-apiserver.

bench_restart serves the lists itself; this one asks the real control plane of
tests/cluster/cluster.py (etcd, kube-apiserver; kube-controller-manager stopped so no
controller touches the objects) to hold the cluster of bench_extender --nodes N:
N Nodes, 8 GPU objects each (deploy/crds), and the openb trace's pods (bench/openb_pods.h's
draw and fill, recomputed here) bound to their nodes with elasticgpu.io/assigned and
allocated. Each kind's first object is POSTed through the API and the rest are written into
etcd as the API server stored that one (--populate etcd, the default: 65,000 nodes in
minutes), or every object is POSTed (--populate api: 274 a second here). It then times,
for each of nodes, GPUs and pods, a list of 500 a page following `continue` and a
streaming list (a watch with sendInitialEvents up to its initial-events-end bookmark, what
egpu-scheduler's informers ask), each with kube-apiserver's CPU meanwhile, and the restart of
egpu-scheduler (--leader-elect false, the admin's client certificate) from exec to /readyz
200, with its CPU and peak RSS and the API server's CPU meanwhile. Figures, not a test.

With --variants each kind is also listed with resourceVersion=0 (any version: the watch
cache), with resourceVersionMatch=NotOlderThan, 5,000 a page, and one page as protobuf.

Usage: bench/restart_apiserver.py [--nodes N] [--fill F] [--jobs J] [--populate etcd|api]
                                  [--go-memlimit SIZE] [--variants] [--scheduler PATH]...
  EGPU_BUILD (default build), EGPU_TRACE_DIR (default data/openb, else ../shared/data/openb)
"""
import argparse
import base64
import concurrent.futures
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests/cluster"))
import cluster as cluster_module  # noqa: E402

M64 = (1 << 64) - 1


class Lcg:
    """openb_pods.h's rng_next: a 64-bit LCG's top 31 bits."""

    def __init__(self, seed):
        self.x = seed

    def next(self):
        self.x = (self.x * 6364136223846793005 + 1442695040888963407) & M64
        return self.x >> 33


def read_trace(path):
    pods = []
    for line in pathlib.Path(path).read_text().splitlines()[1:]:
        f = line.split(",")
        cpu, mem, ngpu, milli = int(f[1]), int(f[2]), int(f[3]), int(f[4])
        pods.append((cpu, mem, ngpu, 1000 if ngpu > 1 else milli))
    return pods


def fill(nodes, trace, frac):
    """openb_pods.h's draw_pod, place_pod and fill_fits: [(node, pod, cards)]."""
    x = Lcg(42)
    free = [[96000, 384 * 1024, [1000] * 8] for _ in range(nodes)]
    asked, target, out = 0, int(frac * nodes * 8 * 1000), []
    while asked < target:
        t = trace[x.next() % len(trace)]
        if t[2] == 0 and x.next() % 2 == 0:
            continue
        asked += t[2] * t[3]
        for _ in range(16):
            k = x.next() % nodes
            fn = free[k]
            if fn[0] < t[0] or fn[1] < t[1]:
                continue
            cards = [g for g in range(8)
                     if (fn[2][g] == 1000 if t[3] == 1000 else fn[2][g] >= t[3])][:t[2]]
            if len(cards) < t[2]:
                continue
            fn[0] -= t[0]
            fn[1] -= t[1]
            for g in cards:
                fn[2][g] -= t[3]
            out.append((k, t, cards))
            break
    return out


def node_obj(i):
    name = f"gpu-node-{i:05d}"
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"capacity": {"cpu": "96", "memory": "384Gi", "pods": "110"},
                       "allocatable": {"cpu": "96", "memory": "384Gi", "pods": "110"}}}


def gpu_obj(i, g):
    uuid = f"GPU-{i:05d}-{g}"
    return {"apiVersion": "elasticgpu.io/v1alpha1", "kind": "GPU",
            "metadata": {"name": uuid.lower()},
            "spec": {"nodeName": f"gpu-node-{i:05d}", "index": g, "uuid": uuid,
                     "model": "A100", "memory": 40960}}


def pod_obj(n, k, t, cards):
    node = f"gpu-node-{k:05d}"
    req = {"cpu": f"{max(t[0], 1)}m", "memory": f"{max(t[1], 1)}Mi"}
    meta = {"name": f"pop-{n}", "namespace": "bench"}
    if t[2] > 0:
        req["elasticgpu.io/gpu-core"] = str(100 * t[2] if t[3] == 1000 else t[3] // 10)
        ann = {"node": node, "containers": [{"name": "c", "core": t[3] // 10,
                                             "memory": 40960 if t[3] == 1000 else 0,
                                             "gpus": [f"GPU-{k:05d}-{g}" for g in cards]}]}
        meta["annotations"] = {"elasticgpu.io/assigned": json.dumps(ann, separators=(",", ":")),
                               "elasticgpu.io/allocated": "true"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": node, "schedulerName": "elastic-gpu-scheduler",
                     "containers": [{"name": "c", "image": "registry.example.com/trainer:v1",
                                     "resources": {"requests": req, "limits": req}}]}}


def create_all(c, jobs, items):
    def one(item):
        path, obj = item
        for _ in range(5):
            st, out = c.call("POST", path, obj)
            if st in (201, 409):
                return
            time.sleep(0.2)
        raise RuntimeError(f"POST {path}: {st} {out}")
    with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
        list(ex.map(one, items))


# kube-apiserver's etcd keys (its default --etcd-prefix /registry): Nodes are
# stored as "minions", a custom resource under its group and plural.
ETCD_KEYS = {"/api/v1/nodes": "/registry/minions/{name}",
             "/apis/elasticgpu.io/v1alpha1/gpus": "/registry/elasticgpu.io/gpus/{name}",
             "/api/v1/namespaces/bench/pods": "/registry/pods/bench/{name}"}
ETCD_TXN_OPS = 128  # etcd's default --max-txn-ops


def stored(c, path, obj):
    """obj as kube-apiserver stores it: POST the kind's first object through the API
    (defaulting, admission: a pod's ServiceAccount volume and tolerations, managedFields)
    and take what it returned as the template the others follow, with their own name,
    uid, spec and annotations. Returns a function from an object to its stored JSON."""
    st, made = c.call("POST", path, obj)
    if st != 201:
        raise RuntimeError(f"POST {path}: {st} {made}")
    meta = made["metadata"]
    for k in ("resourceVersion", "generation"):
        meta.pop(k, None)

    def render(o):
        m = dict(meta, name=o["metadata"]["name"], uid=str(uuid.uuid4()))
        if "annotations" in o["metadata"]:
            m["annotations"] = o["metadata"]["annotations"]
        else:
            m.pop("annotations", None)
        if "labels" in o["metadata"]:
            m["labels"] = o["metadata"]["labels"]
        out = dict(made, metadata=m)
        if "spec" in o:
            spec = dict(made.get("spec") or {}, **o["spec"])
            if "containers" in o["spec"]:
                spec["containers"] = [dict(made["spec"]["containers"][0],
                                           **o["spec"]["containers"][0])]
            out["spec"] = spec
        if "status" in o:
            out["status"] = dict(made.get("status") or {}, **o["status"])
        return json.dumps(out, separators=(",", ":"))
    return render


def put_all(c, jobs, path, objs):
    """objs (the first POSTed through the API, the rest written into etcd as
    kube-apiserver stores them, ETCD_TXN_OPS a transaction): how the bench populates a
    large cluster in minutes rather than at the API server's ~274 creates a second. The
    API server's watch cache takes them from its etcd watch, as any write."""
    render = stored(c, path, objs[0])
    key = ETCD_KEYS[path]

    def b64(s):
        return base64.b64encode(s.encode()).decode()

    def txn(chunk):
        ops = [{"requestPut": {"key": b64(key.format(name=o["metadata"]["name"])),
                               "value": b64(render(o))}} for o in chunk]
        req = urllib.request.Request(c.etcd_url + "/v3/kv/txn", method="POST",
                                     data=json.dumps({"success": ops}).encode())
        with urllib.request.urlopen(req, timeout=120) as r:
            if not json.loads(r.read()).get("succeeded"):
                raise RuntimeError(f"etcd txn for {path} did not succeed")
    rest = objs[1:]
    with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
        list(ex.map(txn, [rest[i:i + ETCD_TXN_OPS] for i in range(0, len(rest), ETCD_TXN_OPS)]))


def lists(c, path):
    """Whether the API server answers a consistent list of path (a 504 while its watch
    cache is not yet at etcd's revision)."""
    try:
        return c.call("GET", f"{path}?limit=1")[0] == 200
    except OSError:
        return False


def count(c, path):
    """Objects the API server lists at path (one item a page and remainingItemCount)."""
    st, out = c.call("GET", f"{path}?limit=1")
    if st != 200:
        raise RuntimeError(f"GET {path}: {st} {out}")
    return len(out.get("items") or []) + int(out["metadata"].get("remainingItemCount") or 0)


# The list variants timed for each kind: the query of the first page, and the
# Accept header ("protobuf": application/vnd.kubernetes.protobuf, whose pages
# are counted by size only: nothing here decodes it).
VARIANTS = (("limit=500", "json"),                 # consistent (no resourceVersion)
            ("limit=500&resourceVersion=0", "json"),  # any version: the watch cache
            ("limit=500&resourceVersion=0&resourceVersionMatch=NotOlderThan", "json"),
            ("limit=5000", "json"),
            ("limit=500", "protobuf"))


def timed_list(c, path, query="limit=500", accept="json"):
    """(items, bytes, seconds, pages); items is None for protobuf."""
    t0, n, size, cont, pages = time.monotonic(), 0, 0, None, 0
    hdrs = {"Accept": "application/vnd.kubernetes.protobuf" if accept == "protobuf"
            else "application/json"}
    while True:
        q = f"{path}?" + (f"limit=500&continue={cont}" if cont else query)
        if cont and "limit=5000" in query:
            q = f"{path}?limit=5000&continue={cont}"
        ctx = c.ssl_context((c.dir / "pki/admin.crt", c.dir / "pki/admin.key"))
        req = urllib.request.Request(c.url + q, headers=hdrs)
        with urllib.request.urlopen(req, timeout=120, context=ctx) as r:
            body = r.read()
        size += len(body)
        pages += 1
        if accept == "protobuf":
            # The continue token is not read from protobuf: one page only
            # (limit=500), scaled by the JSON page count afterwards.
            return None, size, time.monotonic() - t0, pages
        page = json.loads(body)
        n += len(page.get("items") or [])
        cont = (page.get("metadata") or {}).get("continue")
        if not cont:
            return n, size, time.monotonic() - t0, pages


def timed_stream(c, path):
    """A streaming list, as the informers ask it (a watch with sendInitialEvents, read
    up to the BOOKMARK annotated k8s.io/initial-events-end): (events, bytes, seconds)."""
    t0, n, size = time.monotonic(), 0, 0
    q = (f"{path}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
         "&allowWatchBookmarks=true&timeoutSeconds=600")
    ctx = c.ssl_context((c.dir / "pki/admin.crt", c.dir / "pki/admin.key"))
    req = urllib.request.Request(c.url + q, headers={"Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=600, context=ctx) as r:
        for line in r:
            size += len(line)
            if line.startswith(b'{"type":"BOOKMARK"') and b"k8s.io/initial-events-end" in line:
                return n, size, time.monotonic() - t0
            n += 1
    raise RuntimeError(f"{path}: the stream ended before its initial-events-end bookmark")


def usage(pid):
    st = pathlib.Path(f"/proc/{pid}/stat").read_text()
    f = st[st.rindex(")") + 2:].split()
    cpu = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    hwm = 0
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) / 1024
    return cpu, hwm


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--fill", type=float, default=0.7)
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--scheduler", action="append",
                    help="egpu-scheduler binary to restart (repeatable; default the build's)")
    ap.add_argument("--populate", choices=("etcd", "api"), default="etcd",
                    help="write the cluster into etcd as the API server stores it (each "
                    "kind's first object POSTed as its template; default), or POST every "
                    "object (274 a second here: an hour at 65,000 nodes)")
    ap.add_argument("--go-memlimit", metavar="SIZE",
                    help="GOMEMLIMIT for etcd and kube-apiserver (e.g. 14GiB): the Go "
                    "runtime's soft memory limit, which makes its GC work harder near it")
    ap.add_argument("--variants", action="store_true",
                    help="also time lists from the watch cache, of 5,000 a page, and protobuf")
    a = ap.parse_args()
    build = pathlib.Path(os.environ.get("EGPU_BUILD", ROOT / "build"))
    tdir = os.environ.get("EGPU_TRACE_DIR") or (
        "data/openb" if (ROOT / "data/openb").is_dir() else str(ROOT.parent / "shared/data/openb"))
    trace = read_trace(pathlib.Path(tdir) / "openb_pod_list_default.csv")
    placed = fill(a.nodes, trace, a.fill)
    if a.go_memlimit:
        os.environ["GOMEMLIMIT"] = a.go_memlimit  # cluster.py's processes inherit it
    with tempfile.TemporaryDirectory(prefix="egpu-restart-") as d:
        # etcd's 2 GiB default quota is about what 65,000 nodes' objects take.
        c = cluster_module.Cluster(pathlib.Path(d), scheduler=False,
                                   etcd_args=("--quota-backend-bytes", str(16 << 30))).start()
        try:
            for f in sorted((ROOT / "deploy/crds").glob("elasticgpu.io_*.yaml")):
                c.kubectl("apply", "--server-side", "-f", str(f))
            c.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                      "crd/gpus.elasticgpu.io")
            c.namespace("bench")
            c.stop_process("kube-controller-manager")  # its default ServiceAccount exists now
            t0 = time.monotonic()
            # (where they are created, where they are listed, how many, the objects)
            kinds = (("/api/v1/nodes", "/api/v1/nodes", a.nodes,
                      lambda: [node_obj(i) for i in range(a.nodes)]),
                     ("/apis/elasticgpu.io/v1alpha1/gpus", "/apis/elasticgpu.io/v1alpha1/gpus",
                      8 * a.nodes,
                      lambda: [gpu_obj(i, g) for i in range(a.nodes) for g in range(8)]),
                     ("/api/v1/namespaces/bench/pods", "/api/v1/pods", len(placed),
                      lambda: [pod_obj(n, k, t, cards) for n, (k, t, cards) in
                               enumerate(placed)]))
            for path, _, _, objs in kinds:
                if a.populate == "api":
                    create_all(c, a.jobs, [(path, o) for o in objs()])
                    continue
                put_all(c, a.jobs, path, objs())
            if a.populate == "etcd":
                # A steady API server, not one still taking in a million watch events:
                # restarted, its watch cache lists etcd once per resource.
                t1 = time.monotonic()
                c.restart_apiserver()
                for _, listed, want, _ in kinds:
                    cluster_module.wait_until(lambda: lists(c, listed),
                                              f"a list of {listed}", timeout=900, every=1)
                    have = count(c, listed)
                    if have < want:
                        raise RuntimeError(f"{listed}: {have} objects, not {want}")
                print(f"  kube-apiserver restarted and serving lists in "
                      f"{time.monotonic() - t1:.0f} s", flush=True)
            print(f"== restart against kube-apiserver {c.version}: {a.nodes} nodes, "
                  f"{8 * a.nodes} GPU objects, {len(placed)} pods "
                  f"{'created' if a.populate == 'api' else 'written into etcd'} in "
                  f"{time.monotonic() - t0:.0f} s; load {os.getloadavg()[0]:.2f}", flush=True)
            api_pid = c.procs["kube-apiserver"].pid
            for _, path, _, _ in kinds:
                for query, accept in (VARIANTS if a.variants else VARIANTS[:1]):
                    cpu0 = usage(api_pid)[0]
                    try:
                        n, size, s, pages = timed_list(c, path, query, accept)
                    except urllib.error.HTTPError as e:  # CRDs are JSON only: 406
                        print(f"  list {path}?{query} ({accept}): HTTP {e.code}")
                        continue
                    what = f"{n} items" if n is not None else "first page"
                    print(f"  list {path}?{query} ({accept}): {what}, {pages} pages, "
                          f"{size / 1048576:.2f} MiB in {s:.2f} s, kube-apiserver "
                          f"{usage(api_pid)[0] - cpu0:.1f} s of CPU", flush=True)
                cpu0 = usage(api_pid)[0]
                n, size, s = timed_stream(c, path)
                print(f"  list {path} streamed (sendInitialEvents): {n} events, "
                      f"{size / 1048576:.2f} MiB in {s:.2f} s, kube-apiserver "
                      f"{usage(api_pid)[0] - cpu0:.1f} s of CPU", flush=True)
            for sched in a.scheduler or [str(build / "src/scheduler/egpu-scheduler")]:
                ready = restart(c, d, sched)
        finally:
            c.stop()
    return 0 if ready is not None else 1


def warm_passes(port):
    """egpu_scheduler_memo_warm_passes_total on the health port's /metrics (0 if unread)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("egpu_scheduler_memo_warm_passes_total "):
                    return float(line.split()[-1])
    except OSError:
        pass
    return 0


def restart(c, d, sched):
    """egpu-scheduler sched from exec to /readyz 200: seconds, or None."""
    kcfg = c.write_kubeconfig(pathlib.Path(d) / "sched.kubeconfig",
                              cert=(c.dir / "pki/admin.crt", c.dir / "pki/admin.key"))
    hp, vp = cluster_module.free_port(), cluster_module.free_port()
    api_pid = c.procs["kube-apiserver"].pid
    api_cpu0 = usage(api_pid)[0]
    t0 = time.monotonic()
    p = subprocess.Popen([sched, "--kubeconfig", kcfg,
                          "--leader-elect", "false", "--listen", "127.0.0.1", "--port",
                          str(vp), "--health-listen", "127.0.0.1", "--health-port",
                          str(hp)], stderr=subprocess.DEVNULL)
    ready = None
    while time.monotonic() - t0 < 600 and p.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{hp}/readyz", timeout=1) as r:
                if r.status == 200:
                    ready = time.monotonic() - t0
                    break
        except OSError:
            pass
        time.sleep(0.02)
    if ready is not None:
        cpu, hwm = usage(p.pid)
        api_cpu = usage(api_pid)[0] - api_cpu0
        print(f"  {sched} ready after {ready:.1f} s; its CPU {cpu:.1f} s, peak RSS "
              f"{hwm:.0f} MiB; kube-apiserver's CPU meanwhile {api_cpu:.1f} s; "
              f"load {os.getloadavg()[0]:.2f}", flush=True)
        # The memo warm's first pass (--memo-warm, on by default) follows ready and
        # adds its verdicts to the peak.
        t1, done = time.monotonic(), False
        while time.monotonic() - t1 < 300 and p.poll() is None and not done:
            time.sleep(0.2)
            done = warm_passes(hp) >= 1
        if done:
            cpu, hwm = usage(p.pid)
            print(f"  memo warm's first pass {time.monotonic() - t1:.1f} s after ready; "
                  f"CPU {cpu:.1f} s, peak RSS {hwm:.0f} MiB then", flush=True)
        else:
            print(f"  memo warm's first pass not done {time.monotonic() - t1:.0f} s after "
                  "ready", flush=True)
    else:
        print(f"  {sched} was not ready")
    p.terminate()
    p.wait(timeout=20)
    return ready


if __name__ == "__main__":
    sys.exit(main())
