#!/usr/bin/env python3
"""The live scheduling path against the replay.

Drives the real egpu-scheduler over HTTP as kube-scheduler does, through a trace variant's
arrival sequence, and prints the GPU allocation ratio at 80/90/100/130% arrived beside
egpu-sim's on the very same sequence, and the pods/s.

Setup: the test API server (tests/apiserver/server.py) gets one Node per trace node (its
cpu_milli and memory_mib as allocatable) and one GPU object per card (the node's model,
16384 MiB: the trace gives no card memory and its pods ask none); egpu-scheduler runs with
--node-policy P --card-policy P --seed SEED against it (P: --policy, default fgd).

Arrival sequence: computed here exactly as src/sim/replay.c does (pods sorted by name,
shuffled with xoshiro256** seeded by egpu_hash_str("arrivals", seed), clones appended while
the GPU request stays within --inflate x capacity); the number of arrivals and the final
arrived percent are checked against egpu-sim's replay_runs.csv, so both ran the same list.

Per arrival, as kube-scheduler does it:
  1. create the pod (gpu-core = gpu_milli/10 for a share, 100 x num_gpu for whole cards;
     cpu and memory requests from the trace; its gpu_spec as elasticgpu.io/gpu-model) in
     the test API server;
  2. its own filter NodeResourcesFit: the nodes where the pod's cpu and memory fit beside
     the pods bound so far (ignoredByScheduler for the GPU resources);
  3. a pod asking a GPU: POST /filter with those NodeNames (nodeCacheCapable), then POST
     /prioritize with the nodes that passed; finalscore = score x weight (1) x 10 per node
     (0 for a node not in the list), the best total wins and ties are broken at random by
     reservoir sampling (random.Random(seed)), as schedule_one.go's selectHost;
     kube-scheduler's in-tree score plugins are left out;
  4. a pod asking no GPU goes through steps 3 and 5 too: egpu-scheduler runs with
     --pods-without-gpu place, as behind a kube-scheduler whose extender config has no
     managedResources (docs/scheduler.md, "Pods without GPUs"), and judges it by the node
     policy on its cpu and memory as egpu-sim does. With --cpu-pods kube-scheduler it is
     not the extender's (deploy/'s managedResources): kube-scheduler alone places it,
     modelled as a seeded random node among those of step 2, and binds it with
     pods/binding as the DefaultBinder does; --gpu-pods-only leaves them out of both;
  5. POST /bind; a bind refused (the pod not yet in the extender's cache, or the ambiguity
     rule) is tried again after 5 ms, up to --bind-tries times;
  6. a simulated kubelet admission: a GPU pod is patched with elasticgpu.io/allocated (as
     the node agent marks it), every pod with status phase Running with its container
     running. A filter that steered around a node because a pod placed there is not yet
     marked allocated in egpu-scheduler's cache (the reason says "not yet allocated") is
     sent again 1 ms later, up to --bind-tries times, as arrivals spaced wider than the
     watch's lag would find the cache: so the figures do not depend on how loaded the
     machine is.

With --dra (DRA mode) a GPU pod is made as egpu-webhook --mode dra makes it: the marker
elasticgpu.io/dra: 1 instead of gpu-core and its GPU in a ResourceClaim of its own, created
first (claim_object); egpu-scheduler runs with --dra. kube-scheduler's allocator is modelled
as egpu-sim --dra models it (allocator_pick: the first fit over the devices gpu-0, gpu-1, ...
in the agent's index order): step 2 also keeps only the nodes where it finds cards (its
DynamicResources filter), and before step 5 the bench writes its fit into the claim's
status.allocation (PreBind); a filter refused because the claim's watch event has not
reached the extender yet is sent again 1 ms later; there is no allocated mark. egpu-sim
runs with --dra (index order, blind extender).

The allocation ratio is the GPU compute of the pods bound over the cluster's, recorded after
every arrival into the bucket of the arrived percent (rounded), averaged per bucket, as
egpu-sim records it. The sum of egpu_scheduler_allocated_core_percent over the nodes is
printed at the end as a cross-check of the bench's own count.

Figures only, no pass/fail threshold; exit 1 only when something could not run.
"""
import argparse
import csv
import http.client
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKEN = "live-replay-token"
G = "/apis/elasticgpu.io/v1alpha1"
NS = "default"
M64 = (1 << 64) - 1
CHECKPOINTS = (80, 90, 100, 130)


# --- src/core/rng.c, bit for bit -------------------------------------------------------

def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)


def hash_str(s, seed):
    h = 0xCBF29CE484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001B3) & M64
    _, z = splitmix64(h ^ seed)
    return z


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M64


class Rng:
    def __init__(self, seed):
        self.s = []
        for _ in range(4):
            seed, z = splitmix64(seed)
            self.s.append(z)

    def next(self):
        s = self.s
        result = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def below(self, n):
        limit = M64 - M64 % n
        while True:
            x = self.next()
            if x < limit:
                return x % n


def arrivals(pods, capacity_milli, inflate, seed):
    """src/sim/replay.c's arrivals(): indices into pods (sorted by name)."""
    rng = Rng(hash_str("arrivals", seed))
    order = list(range(len(pods)))
    total = sum(p["gpu"] for p in pods)
    for i in range(len(pods), 1, -1):
        j = rng.below(i)
        order[i - 1], order[j] = order[j], order[i - 1]
    target = inflate * capacity_milli
    while True:
        j = rng.below(len(pods))
        if total + pods[j]["gpu"] > target:
            break
        order.append(j)
        total += pods[j]["gpu"]
    return order


# --- the trace ---------------------------------------------------------------------------

def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def subsample(trace_dir, nodes_csv, pods_csv, every, gpu_only, out_dir):
    """Every every-th node and every every-th pod (in file order; with gpu_only, of the pods
    asking a GPU), written to out_dir."""
    nodes = read_csv(os.path.join(trace_dir, nodes_csv))[::every]
    pods = read_csv(os.path.join(trace_dir, pods_csv))
    if gpu_only:
        pods = [p for p in pods if int(p["num_gpu"]) > 0]
    pods = pods[::every]
    for name, rows in (("nodes.csv", nodes), ("pods.csv", pods)):
        with open(os.path.join(out_dir, name), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)
    return nodes, pods


# --- HTTP --------------------------------------------------------------------------------

class Conn:
    def __init__(self, url, token=None):
        m = re.match(r"http://([^:/]+):(\d+)", url)
        self.host, self.port, self.token = m.group(1), int(m.group(2)), token
        self.c = http.client.HTTPConnection(self.host, self.port, timeout=60)

    def call(self, method, path, body=None, ctype="application/json"):
        data = None if body is None else json.dumps(body).encode()
        hdr = {}
        if self.token:
            hdr["Authorization"] = "Bearer " + self.token
        if data is not None:
            hdr["Content-Type"] = ctype
        for attempt in (0, 1):
            try:
                self.c.request(method, path, body=data, headers=hdr)
                r = self.c.getresponse()
                raw = r.read()
                return r.status, (json.loads(raw) if raw[:1] in (b"{", b"[") else raw)
            except (http.client.HTTPException, OSError):
                self.c.close()
                self.c = http.client.HTTPConnection(self.host, self.port, timeout=60)
                if attempt:
                    raise
        return None, None


def start_api(tmp):
    proc = subprocess.Popen(["/usr/bin/python3", os.path.join(ROOT, "tests/apiserver/server.py"),
                             "--port", "0", "--token", TOKEN, "--bookmark-interval", "1",
                             "--history", "1000000"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline().strip()
    m = re.match(r"listening on (http://127\.0\.0\.1:\d+)$", line)
    if not m:
        proc.kill()
        sys.exit(f"live_replay: the test API server did not start: {line!r}")
    kubeconfig = os.path.join(tmp, "kubeconfig")
    with open(kubeconfig, "w") as f:
        f.write("apiVersion: v1\nkind: Config\n"
                f"clusters: [{{name: t, cluster: {{server: '{m.group(1)}'}}}}]\n"
                f"users: [{{name: u, user: {{token: {TOKEN}}}}}]\n"
                "contexts: [{name: t, context: {cluster: t, user: u, namespace: default}}]\n"
                "current-context: t\n")
    return proc, m.group(1), kubeconfig


def start_scheduler(binary, kubeconfig, tmp, seed, extra, policy="fgd"):
    log = os.path.join(tmp, "egpu-scheduler.log")
    proc = subprocess.Popen([binary, "--kubeconfig", kubeconfig, "--listen", "127.0.0.1",
                             "--port", "0", "--health-listen", "127.0.0.1", "--health-port", "0",
                             "--leader-elect", "false", "--node-policy", policy,
                             "--card-policy", policy, "--seed", str(seed),
                             *extra],
                            stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    deadline = time.time() + 30
    while time.time() < deadline:
        with open(log) as f:
            text = f.read()
        m = re.search(r"serving addr=\S+ port=(\d+) health_addr=\S+ health_port=(\d+)", text)
        if m:
            return proc, log, f"http://127.0.0.1:{m.group(1)}", f"http://127.0.0.1:{m.group(2)}"
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    sys.exit(f"live_replay: egpu-scheduler did not start:\n{text}")


def metrics(health):
    st, body = Conn(health).call("GET", "/metrics")
    return body.decode() if isinstance(body, bytes) else ""



# --- the two replays ---------------------------------------------------------------------

def run_sim(sim, tmp, seed, inflate, dra=False, policy="fgd"):
    out = os.path.join(tmp, "sim-out")
    r = subprocess.run([sim, "--trace-dir", tmp, "--nodes", "nodes.csv", "--pods", "pods.csv",
                        "--policy", policy, "--seeds", str(seed), "--inflate", str(inflate),
                        "--jobs", "1", "--no-plot", "--out", out] + (["--dra"] if dra else []),
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"live_replay: egpu-sim failed ({r.returncode}):\n{r.stderr}")
    row = read_csv(os.path.join(out, "replay_runs.csv"))[0]
    return row


class Buckets:
    """src/sim/replay.c's record() and bucket_mean() for one run."""

    def __init__(self):
        self.sum, self.n = {}, {}

    def add(self, arrived_pct, alloc_pct):
        b = min(int(math.floor(arrived_pct + 0.5)), 200)
        self.sum[b] = self.sum.get(b, 0.0) + alloc_pct
        self.n[b] = self.n.get(b, 0) + 1

    def at(self, x):
        for b in (x, x - 1, x + 1):
            if self.n.get(b):
                return self.sum[b] / self.n[b]
        return None


def pod_object(name, p, dra=False):
    res = {"cpu": f"{p['cpu']}m", "memory": f"{p['mem']}Mi"}
    lim = {}
    if p["num_gpu"] > 0 and dra:
        # As egpu-webhook --mode dra leaves it: the marker, the GPU in claim `name`.
        res["elasticgpu.io/dra"] = lim["elasticgpu.io/dra"] = "1"
    elif p["num_gpu"] > 0:
        core = p["gpu_milli"] // 10 if p["num_gpu"] == 1 and p["gpu_milli"] < 1000 \
            else 100 * p["num_gpu"]
        res["elasticgpu.io/gpu-core"] = lim["elasticgpu.io/gpu-core"] = str(core)
    meta = {"name": name, "namespace": NS}
    if p["spec"]:
        # The trace's gpu_spec: the models the pod may use, '|'-separated, as the
        # elasticgpu.io/gpu-model annotation takes them (egpu_cluster_model_mask).
        meta["annotations"] = {"elasticgpu.io/gpu-model": p["spec"]}
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
           "spec": {"schedulerName": "elastic-gpu-scheduler",
                    "containers": [{"name": "main", "image": "trace",
                                    "resources": {"requests": res, "limits": lim}}]}}
    if p["num_gpu"] > 0 and dra:
        obj["spec"]["resourceClaims"] = [{"name": "egpu-0", "resourceClaimName": name}]
        obj["spec"]["containers"][0]["resources"]["claims"] = [{"name": "egpu-0"}]
    return obj


def claim_object(name, p):
    """--dra: the pod's ResourceClaim, as the webhook's template makes it (a share: cores
    percent and, as the trace's pods, no memory; whole cards: count of the whole-card class)."""
    if p["num_gpu"] == 1 and p["gpu_milli"] < 1000:
        ex = {"deviceClassName": "gpu-share.elasticgpu.io", "allocationMode": "ExactCount",
              "count": 1, "capacity": {"requests": {"cores": str(p["gpu_milli"] // 10)}}}
    else:
        ex = {"deviceClassName": "gpu.elasticgpu.io", "allocationMode": "ExactCount",
              "count": p["num_gpu"]}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": ex}]}}}


def allocator_pick(used, model, p):
    """--dra: kube-scheduler's structured allocator on one node, as egpu-sim --dra models it
    (src/core/cards.c egpu__cards_pick_dra): the devices gpu-0, gpu-1, ... in the agent's
    index order, the first that fits a share (free cores), the first num_gpu entirely free
    ones for whole cards. used: milli-GPU allocated per card. The card indexes, or None."""
    if p["spec"] and model not in p["spec"].split("|"):
        return None
    if p["num_gpu"] == 1 and p["gpu_milli"] < 1000:
        for g, u in enumerate(used):
            if u + (p["gpu_milli"] // 10) * 10 <= 1000:
                return [g]
        return None
    free = [g for g, u in enumerate(used) if u == 0]
    return free[:p["num_gpu"]] if len(free) >= p["num_gpu"] else None


def claim_status(p, host, picks):
    """What DynamicResources' PreBind writes into the claim: one result per card."""
    share = p["num_gpu"] == 1 and p["gpu_milli"] < 1000
    results = []
    for g in picks:
        r = {"request": "gpu", "driver": "gpu.elasticgpu.io", "pool": host, "device": f"gpu-{g}"}
        if share:
            r["shareID"] = "9c3e6f0a-51d7-4b2e-8f4a-0d6c2b7e1a95"
            r["consumedCapacity"] = {"cores": str(p["gpu_milli"] // 10), "memory": "0"}
        results.append(r)
    return {"allocation": {"devices": {"results": results}, "nodeSelector": {
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [host]}]}]}}}


def select_host(plist, feasible, rnd):
    """kube-scheduler: extender score x weight (1) x 10 added per host; the best total
    wins, ties by reservoir sampling (schedule_one.go selectHost)."""
    total = {n: 0 for n in feasible}
    for e in plist:
        if e["Host"] in total:
            total[e["Host"]] += e["Score"] * 1 * 10
    best, best_score, count = None, None, 0
    for n in feasible:
        s = total[n]
        if best is None or s > best_score:
            best, best_score, count = n, s, 1
        elif s == best_score:
            count += 1
            if rnd.randrange(count) == 0:
                best = n
    ties = sum(1 for n in feasible if total[n] == best_score)
    return best, ties


# kube-scheduler's defaults for a pod's score when it requests none (pkg/scheduler/util,
# GetNonzeroRequests): 100 milli-CPU, 200 MiB.
NONZERO_CPU, NONZERO_MEM = 100, 200


def kube_score(strategy, node, free, p):
    """kube-scheduler's resource scores for pod p on node (its allocatable in node, what is
    left in free): NodeResourcesFit (scoringStrategy
    LeastAllocated, the default, or MostAllocated; cpu and memory, weight 1 each; with
    gpu-most-allocated, MostAllocated on elasticgpu.io/gpu-core alone, which the agent
    advertises as 100 per card) plus NodeResourcesBalancedAllocation (cpu and memory), each
    0..100 with the plugins' integer arithmetic, weight 1 each. The pods scored here ask no
    GPU, and kube-scheduler leaves an extended resource a pod does not request out of its
    score (v1.36 pkg/scheduler/framework/plugins/noderesources/resource_allocation.go,
    calculateNodeAllocatableRequest: "bypass scoring on it"; tests/integration/
    test_cluster_cpu_pods.py shows it on the real kube-scheduler): so gpu-most-allocated,
    whose only resource is gpu-core, gives every node a NodeResourcesFit score of 0."""
    fracs, fit = [], 0
    for cap, left, req, nz in ((node["cpu"], free[0], p["cpu"], NONZERO_CPU),
                               (node["mem"], free[1], p["mem"], NONZERO_MEM)):
        requested = cap - left + (req or nz)
        if strategy == "gpu-most-allocated":
            pass
        elif strategy == "most-allocated":
            fit += min(requested, cap) * 100 // cap if cap else 0
        else:
            fit += (cap - requested) * 100 // cap if cap and requested <= cap else 0
        fracs.append(min(requested / cap, 1.0) if cap else 1.0)
    balanced = int((1 - abs(fracs[0] - fracs[1]) / 2) * 100)
    return fit // 2 + balanced


def bursts(order, pods, k, window):
    """The arrival order grouped into bursts of up to k same-size replicas: each burst is the
    first arrival not yet taken and the next ones of the same GPU request (num_gpu, gpu_milli,
    gpu_spec) among the following window arrivals, as a Deployment's replicas arrive together.
    Returns lists of positions in order."""
    key = lambda i: (pods[order[i]]["num_gpu"], pods[order[i]]["gpu_milli"],
                     pods[order[i]]["spec"])
    taken, out = [False] * len(order), []
    for i in range(len(order)):
        if taken[i]:
            continue
        b = [i]
        taken[i] = True
        for j in range(i + 1, min(len(order), i + 1 + window)):
            if len(b) == k:
                break
            if not taken[j] and key(j) == key(i):
                b.append(j)
                taken[j] = True
        out.append(b)
    return out


def waiting_pods(health):
    for l in metrics(health).splitlines():
        if l.startswith("egpu_scheduler_cache_waiting_pods"):
            return int(float(l.split()[-1]))
    return None


def arrival_mode(args, order, pods, create, attempt, record, mark, st_, lag_rnd, health, t1):
    """--mark-lag: pods arrive in bursts (--burst same-size replicas, --burst-gap ms apart) on
    a virtual clock; each scheduling cycle takes --cycle ms; a bound GPU pod is marked
    elasticgpu.io/allocated a uniformly drawn --mark-lag LO-HI ms after its bind (the kubelet's
    admission and Allocate, the agent's mark, the watch), and before each cycle the marks due
    are written and the bench waits until egpu-scheduler's cache shows exactly the pods still
    waiting (egpu_scheduler_cache_waiting_pods), so the figures do not depend on the machine's
    load. A pod no node passed while a node was steered around for a pod not yet allocated is
    kube-scheduler's unschedulable pod: tried again after its backoff (1 s, doubling to 10 s),
    at most --bind-tries times; a pod that fits nowhere otherwise fails, as in the replay."""
    import heapq
    lo, hi = args.mark_lag
    queue, marks, seq = [], [], 0
    for b, group in enumerate(bursts(order, pods, args.burst, 8 * args.burst)):
        for pos in group:
            heapq.heappush(queue, (b * args.burst_gap, seq, pos, 0, None))
            seq += 1
    clock, waiting, done = 0.0, 0, 0
    while queue:
        t, _, pos, tries, made = heapq.heappop(queue)
        clock = max(clock, t)
        marked = False
        while marks and marks[0][0] <= clock:
            mark(heapq.heappop(marks)[1])
            waiting -= 1
            marked = True
        # bind counts its pod as waiting at once; a mark reaches the cache by the watch.
        for _ in range(10000 if marked else 0):
            if waiting_pods(health) == waiting:
                break
            time.sleep(0.002)
        else:
            st_["unmarked"] += marked
        if made is None:
            made = create(pos, order[pos])
            st_["arrived"] += made[1]["gpu"]
        name, p, obj = made
        bound, _, steered = attempt(name, p, obj, False)
        clock += args.cycle
        if bound and p["num_gpu"] > 0:
            heapq.heappush(marks, (clock + lag_rnd.uniform(lo, hi), name))
            waiting += 1
        st_["requeued_placed"] += bound and tries > 0
        if not bound and steered and tries + 1 < args.bind_tries:
            st_["requeued"] += tries == 0
            backoff = min(1000.0 * 2 ** tries, 10000.0)
            heapq.heappush(queue, (clock + backoff, seq, pos, tries + 1, made))
            seq += 1
        elif not bound:
            st_["failed"] += 1
        record()
        done += tries == 0
        if args.progress and tries == 0 and done % 1000 == 0:
            print(f"  {done}/{len(order)} arrivals, {done / (time.time() - t1):.1f} pods/s",
                  file=sys.stderr, flush=True)
    st_["virtual_s"] = clock / 1000.0


def live(args, nodes, pods, order, capacity_milli, tmp):
    api_proc, api_url, kubeconfig = start_api(tmp)
    sched = None
    try:
        api = Conn(api_url, TOKEN)
        t0 = time.time()
        for n in nodes:
            st, obj = api.call("POST", "/api/v1/nodes", {
                "apiVersion": "v1", "kind": "Node", "metadata": {"name": n["sn"]},
                "status": {"allocatable": {"cpu": f"{n['cpu']}m", "memory": f"{n['mem']}Mi"}}})
            assert st == 201, obj
            for g in range(n["gpus"]):
                st, obj = api.call("POST", G + "/gpus", {
                    "apiVersion": "elasticgpu.io/v1alpha1", "kind": "GPU",
                    "metadata": {"name": f"{n['sn']}-gpu{g}"},
                    "spec": {"nodeName": n["sn"], "index": g, "uuid": f"GPU-{n['sn']}-{g}",
                             "model": n["model"], "memory": 16384}})
                assert st == 201, obj
        sched, log, url, health = start_scheduler(args.scheduler, kubeconfig, tmp, args.seed,
                                                  (["--dra"] if args.dra else [])
                                                  + (["--pods-without-gpu", "place"]
                                                   if args.cpu_pods == "extender" else [])
                                                  + (["--target-workload", args.target]
                                                     if args.target else [])
                                                  + args.scheduler_args, args.policy)
        deadline = time.time() + 60
        while True:
            st, _ = Conn(health).call("GET", "/readyz")
            if st == 200:
                break
            if time.time() > deadline:
                sys.exit("live_replay: egpu-scheduler never ready:\n" + open(log).read())
            time.sleep(0.1)
        setup = time.time() - t0
        ext = Conn(url)
        rnd = random.Random(args.seed)
        lag_rnd = random.Random(args.seed + 1)  # its own stream: rnd's draws stay the replay's
        bynode = {n["sn"]: n for n in nodes}
        free = {n["sn"]: [n["cpu"], n["mem"]] for n in nodes}
        cards = {n["sn"]: [0] * n["gpus"] for n in nodes}  # --dra: milli-GPU used per card
        claims = {}  # --dra: the created claim of each GPU pod
        names = [n["sn"] for n in nodes]
        buckets = Buckets()
        st_ = dict(arrived=0, used=0, failed=0, retries=0, bind_errors=0, ties_sum=0,
                   ties_many=0, cpu_random=0, waits=0, gpu_picked=0, steered=0, requeued=0,
                   requeued_placed=0, unmarked=0, claim_waits=0)

        def mark(name):
            st, _ = api.call("PATCH", f"/api/v1/namespaces/{NS}/pods/{name}",
                             {"metadata": {"annotations": {"elasticgpu.io/allocated": "true"}}},
                             "application/merge-patch+json")
            assert st == 200, st

        def attempt(name, p, obj, resend):
            """One scheduling cycle of pod p: kube-scheduler's filter, prioritize, bind (and
            the kubelet's Running). Returns (bound, host, steered): steered when a node failed
            filter for a pod there not yet allocated. With resend, such a filter is sent again
            1 ms later (the watch's lag, not a real wait)."""
            feasible = [n for n in names if free[n][0] >= p["cpu"] and free[n][1] >= p["mem"]]
            dra = args.dra and p["num_gpu"] > 0
            if dra:
                # DynamicResources' Filter: only the nodes where the allocator finds devices.
                feasible = [n for n in feasible
                            if allocator_pick(cards[n], bynode[n]["model"], p) is not None]
            host, steered = None, False
            if feasible and p["num_gpu"] == 0 and args.cpu_pods != "extender":
                # Not the extender's (managedResources): kube-scheduler's own choice among
                # the nodes where it fits: a seeded random one (its score plugins left out),
                # or by its resource scores (kube_score), ties at random.
                plist = [] if args.cpu_pods == "kube-scheduler" else \
                    [{"Host": n, "Score": kube_score(args.cpu_pods, bynode[n], free[n], p)}
                     for n in feasible]
                host, _ = select_host(plist, feasible, rnd)
                st_["cpu_random"] += 1
            elif feasible:
                a = {"Pod": obj, "Nodes": None, "NodeNames": feasible}
                for k in range(args.bind_tries if resend else 1):
                    st, fr = ext.call("POST", "/filter", a)
                    assert st == 200, (st, fr)
                    if dra and "not in the elastic-gpu cache yet" in (fr.get("Error") or ""):
                        st_["claim_waits"] += 1  # the claim's watch event has not come yet
                        time.sleep(0.001)
                        continue
                    steered = any("not yet allocated" in why
                                  for why in (fr.get("FailedNodes") or {}).values())
                    if not steered or not resend:
                        break
                    st_["waits"] += 1
                    time.sleep(0.001)
                st_["steered"] += steered
                passed = fr.get("NodeNames") or []
                if passed:
                    a["NodeNames"] = passed
                    st, pl = ext.call("POST", "/prioritize", a)
                    assert st == 200, (st, pl)
                    host, ties = select_host(pl, passed, rnd)
                    if p["num_gpu"] > 0:
                        st_["ties_sum"] += ties
                        st_["ties_many"] += ties > 1
                        st_["gpu_picked"] += 1
            bound = False
            if host is not None and p["num_gpu"] == 0 and args.cpu_pods != "extender":
                st, b = api.call("POST", f"/api/v1/namespaces/{NS}/pods/{name}/binding", {
                    "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": host}})
                bound = st == 201
            elif host is not None:
                picks = allocator_pick(cards[host], bynode[host]["model"], p) if dra else None
                if dra:
                    # PreBind: the allocator's choice written into the claim.
                    c = claims[name]
                    c["status"] = claim_status(p, host, picks)
                    st, c2 = api.call("PUT", f"/apis/resource.k8s.io/v1/namespaces/{NS}/"
                                      f"resourceclaims/{name}", c)
                    assert st == 200, (st, c2)
                    claims[name] = c2
                for k in range(args.bind_tries):
                    st, b = ext.call("POST", "/bind", {"PodName": name, "PodNamespace": NS,
                                                       "PodUID": obj["metadata"]["uid"],
                                                       "Node": host})
                    if st == 200 and isinstance(b, dict) and not b.get("Error"):
                        bound = True
                        break
                    st_["retries"] += 1
                    time.sleep(0.005)
                st_["bind_errors"] += not bound
            if bound and dra:
                for g in picks:
                    cards[host][g] += 1000 if len(picks) > 1 or p["gpu_milli"] >= 1000 \
                        else (p["gpu_milli"] // 10) * 10
            if bound:
                free[host][0] -= p["cpu"]
                free[host][1] -= p["mem"]
                st_["used"] += p["gpu"]
                if p["num_gpu"] > 0 and args.mark_lag is None and not args.dra:
                    mark(name)
                st2, _ = api.call("PATCH", f"/api/v1/namespaces/{NS}/pods/{name}/status",
                                  {"status": {"phase": "Running", "containerStatuses": [
                                      {"name": "main", "ready": True, "restartCount": 0,
                                       "image": "trace", "imageID": "",
                                       "state": {"running": {"startedAt":
                                                             "2026-01-01T00:00:00Z"}}}]}},
                                  "application/merge-patch+json")
                assert st2 == 200, st2
            return bound, host, steered

        def record():
            buckets.add(100.0 * st_["arrived"] / capacity_milli,
                        100.0 * st_["used"] / capacity_milli)

        def create(i, idx):
            p = pods[idx]
            name = p["name"] if i < len(pods) else f"{p['name']}-clone-{i}"
            if args.dra and p["num_gpu"] > 0:
                st, c = api.call("POST", f"/apis/resource.k8s.io/v1/namespaces/{NS}/"
                                 "resourceclaims", claim_object(name, p))
                assert st == 201, c
                claims[name] = c
            st, obj = api.call("POST", f"/api/v1/namespaces/{NS}/pods",
                               pod_object(name, p, args.dra))
            assert st == 201, obj
            return name, p, obj

        t1 = time.time()
        if args.mark_lag is None:
            for i, idx in enumerate(order):
                name, p, obj = create(i, idx)
                st_["arrived"] += p["gpu"]
                bound, _, _ = attempt(name, p, obj, True)
                st_["failed"] += not bound
                record()
                if args.progress and (i + 1) % 1000 == 0:
                    print(f"  {i + 1}/{len(order)} arrivals, {(i + 1) / (time.time() - t1):.1f} "
                          "pods/s", file=sys.stderr, flush=True)
        else:
            arrival_mode(args, order, pods, create, attempt, record, mark, st_, lag_rnd, health,
                         t1)
        elapsed = time.time() - t1
        time.sleep(1.5)  # the last binds reach the cache's metrics through the watch
        text = metrics(health)
        sched_core = sum(float(l.split()[-1]) for l in text.splitlines()
                         if l.startswith("egpu_scheduler_allocated_core_percent{"))
        rebuilds = {r: sum(float(l.split()[-1]) for l in text.splitlines()
                           if l.startswith("egpu_scheduler_target_workload_rebuilds_total{"
                                           f'result="{r}"'))
                    for r in ("kept", "replaced")}
        errors = [l for l in open(log) if l[:1] in "EF"]
        return dict(st_, buckets=buckets, elapsed=elapsed, setup=setup,
                    ties_mean=st_["ties_sum"] / max(1, st_["gpu_picked"]),
                    sched_core=sched_core, errors=errors, rebuilds=rebuilds,
                    final_arrived=100.0 * st_["arrived"] / capacity_milli)
    finally:
        for p in (sched, api_proc):
            if p is not None and p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scheduler", required=True, help="the egpu-scheduler binary")
    ap.add_argument("--sim", required=True, help="the egpu-sim binary")
    ap.add_argument("--trace-dir", default=os.environ.get("EGPU_TRACE_DIR") or
                    os.path.join(os.path.dirname(ROOT), "shared/data/openb"))
    ap.add_argument("--nodes", default="openb_node_list_gpu_node.csv")
    ap.add_argument("--pods", default="openb_pod_list_default.csv")
    ap.add_argument("--every", type=int, default=4,
                    help="keep every N-th node and every N-th pod (default 4; 1 = all)")
    ap.add_argument("--gpu-pods-only", action="store_true",
                    help="leave out the pods asking no GPU (both replays)")
    ap.add_argument("--cpu-pods", default="extender",
                    choices=("extender", "kube-scheduler", "least-allocated", "most-allocated",
                             "gpu-most-allocated"),
                    help="who places the pods asking no GPU: the extender (egpu-scheduler "
                    "--pods-without-gpu place; default) or kube-scheduler alone: "
                    "kube-scheduler = a seeded random node where they fit; least-allocated = "
                    "its default profile's NodeResourcesFit (LeastAllocated) and "
                    "NodeResourcesBalancedAllocation scores; most-allocated = the same with "
                    "NodeResourcesFit's scoringStrategy MostAllocated; gpu-most-allocated = "
                    "MostAllocated on elasticgpu.io/gpu-core alone")
    ap.add_argument("--mark-lag", default=None, metavar="LO[-HI]",
                    help="arrival mode: virtual ms from a GPU pod's bind to its "
                    "elasticgpu.io/allocated mark, drawn uniformly (e.g. 200-1000); 0 = marked "
                    "before the next cycle. Without it: marked at once, every pod in turn")
    ap.add_argument("--burst", type=int, default=1,
                    help="with --mark-lag: same-size replicas arriving together (default 1)")
    ap.add_argument("--burst-gap", type=float, default=1000.0,
                    help="with --mark-lag: virtual ms between bursts (default 1000)")
    ap.add_argument("--cycle", type=float, default=10.0,
                    help="with --mark-lag: virtual ms per scheduling cycle (default 10)")
    ap.add_argument("--dra", action="store_true",
                    help="DRA mode: each GPU pod as egpu-webhook --mode dra makes it (the "
                    "marker elasticgpu.io/dra, its GPU in a ResourceClaim), the cards chosen by "
                    "kube-scheduler's allocator (first fit in the agent's index order, written "
                    "into the claim before bind), egpu-scheduler --dra scoring the nodes; "
                    "against egpu-sim --dra")
    ap.add_argument("--learn-workload", action="store_true",
                    help="let egpu-scheduler build FGD's target workload from the pods it has "
                    "seen (its default) instead of --target-workload with egpu-sim's")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--policy", default="fgd",
                    help="both tiers' policy, of egpu-scheduler and egpu-sim (default fgd)")
    ap.add_argument("--inflate", type=float, default=1.3)
    ap.add_argument("--bind-tries", type=int, default=400)
    ap.add_argument("--progress", action="store_true", help="a line per 1,000 arrivals")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--scheduler-args", nargs=argparse.REMAINDER, default=[],
                    help="more egpu-scheduler flags (the rest of the line)")
    args = ap.parse_args()
    if args.mark_lag is not None:
        m = re.fullmatch(r"(\d+(?:\.\d+)?)(?:-(\d+(?:\.\d+)?))?", args.mark_lag)
        if not m or float(m.group(2) or m.group(1)) < float(m.group(1)):
            ap.error(f"--mark-lag {args.mark_lag!r}: expected LO or LO-HI milliseconds, LO <= HI")
        args.mark_lag = (float(m.group(1)), float(m.group(2) or m.group(1)))
    if args.dra and args.mark_lag is not None:
        ap.error("--dra has no allocated marks to lag: not with --mark-lag")
    if args.burst < 1 or args.burst_gap < 0 or args.cycle <= 0:
        ap.error("--burst must be >= 1, --burst-gap >= 0 and --cycle > 0")
    if not os.path.isdir(args.trace_dir):
        sys.exit(f"live_replay: no trace at {args.trace_dir} (--trace-dir, $EGPU_TRACE_DIR)")
    tmp = tempfile.mkdtemp(prefix="egpu-live-replay-")
    try:
        raw_nodes, raw_pods = subsample(args.trace_dir, args.nodes, args.pods, args.every,
                                        args.gpu_pods_only, tmp)
        nodes = [{"sn": r["sn"], "cpu": int(r["cpu_milli"]), "mem": int(r["memory_mib"]),
                  "gpus": int(r["gpu"]), "model": r.get("model") or ""} for r in raw_nodes]
        pods = sorted(({"name": r["name"], "cpu": int(r["cpu_milli"]),
                        "mem": int(r["memory_mib"]), "num_gpu": int(r["num_gpu"]),
                        "gpu_milli": int(r["gpu_milli"]), "spec": r.get("gpu_spec") or ""}
                       for r in raw_pods),
                      key=lambda p: p["name"].encode())
        for p in pods:
            p["gpu"] = p["num_gpu"] * p["gpu_milli"]
        capacity = 1000 * sum(n["gpus"] for n in nodes)
        order = arrivals(pods, capacity, args.inflate, args.seed)
        sim = run_sim(args.sim, tmp, args.seed, args.inflate, args.dra, args.policy)
        if int(sim["arrivals"]) != len(order):
            sys.exit(f"live_replay: egpu-sim replayed {sim['arrivals']} arrivals, this bench "
                     f"computed {len(order)}: not the same sequence")
        print(f"live_replay: {args.pods} and {args.nodes} from {args.trace_dir}")
        print(f"  subsample: every {args.every}th node and pod (file order): {len(nodes)} nodes, "
              f"{capacity // 1000} GPUs, {len(pods)} trace pods, {len(order)} arrivals "
              f"(inflate {args.inflate}, seed {args.seed}); egpu-sim replayed the same "
              f"subsample and the same {sim['arrivals']} arrivals")
        args.target = None if args.learn_workload else \
            os.path.join(tmp, "sim-out", "target_workload.json")
        r = live(args, nodes, pods, order, capacity, tmp)
        label = f"{args.policy}+dra" if args.dra else args.policy
        print(f"  egpu-scheduler: --node-policy {args.policy} --card-policy {args.policy} "
              f"--seed {args.seed} "
              + ("--dra " if args.dra else "")
              + ("--pods-without-gpu place " if args.cpu_pods == "extender" else "")
              + ("--target-workload <egpu-sim's target_workload.json> " if args.target else "")
              + f"{' '.join(args.scheduler_args)}".rstrip())
        print(f"{'':24}{'alloc@80':>10}{'alloc@90':>10}{'alloc@100':>10}{'alloc@130':>10}"
              f"{'failed':>8}")
        simv = [float(sim[f"alloc{x}"]) for x in CHECKPOINTS]
        livev = [r["buckets"].at(x) for x in CHECKPOINTS]
        fmt = lambda v: f"{v:10.2f}" if v is not None else f"{'-':>10}"
        print(f"{f'egpu-sim ({label})':24}" + "".join(fmt(v) for v in simv)
              + f"{sim['failed']:>8}")
        print(f"{f'live ({label})':24}" + "".join(fmt(v) for v in livev) + f"{r['failed']:>8}")
        print(f"{'live - egpu-sim':24}" + "".join(
            f"{l - s:+10.2f}" if l is not None else f"{'-':>10}" for l, s in zip(livev, simv)))
        print(f"  live: {len(order)} arrivals in {r['elapsed']:.1f} s = "
              f"{len(order) / r['elapsed']:.1f} pods/s (create, filter, prioritize, bind, "
              f"admission; setup {r['setup']:.1f} s)")
        print(f"  live: final arrived {r['final_arrived']:.2f}% (egpu-sim "
              f"{float(sim['final_arrived_pct']):.2f}%), final allocated "
              f"{100.0 * r['used'] / capacity:.2f}% (egpu-sim {float(sim['final_alloc_pct']):.2f}%);"
              f" egpu_scheduler_allocated_core_percent summed {r['sched_core']:.0f} of "
              f"{capacity // 10} (bench's count {r['used'] // 10})")
        if args.cpu_pods != "extender":
            how = {"kube-scheduler": "a seeded random node where cpu and memory fit",
                   "least-allocated": "NodeResourcesFit LeastAllocated + BalancedAllocation",
                   "most-allocated": "NodeResourcesFit MostAllocated + BalancedAllocation",
                   "gpu-most-allocated": "NodeResourcesFit MostAllocated on "
                                         "elasticgpu.io/gpu-core + BalancedAllocation"}
            print(f"  live: {r['cpu_random']} pods asking no GPU placed by kube-scheduler alone "
                  f"({how[args.cpu_pods]}; egpu-sim places them by its policy)")
        else:
            print("  live: pods asking no GPU judged by the extender (--pods-without-gpu place)")
        if args.dra:
            print(f"  live: filters sent again because the pod's claim had not reached the "
                  f"extender's cache yet {r['claim_waits']}")
        elif args.mark_lag is None:
            print(f"  live: filters sent again because a node waited for a pod's allocated "
                  f"mark {r['waits']}")
        else:
            print(f"  arrival mode: mark lag {args.mark_lag[0]:g}-{args.mark_lag[1]:g} ms, bursts "
                  f"of {args.burst} same-size replicas {args.burst_gap:g} ms apart, {args.cycle:g} "
                  f"ms a cycle ({r['virtual_s']:.0f} virtual s); filters that steered around a "
                  f"node for a pod not yet allocated {r['steered']}; pods sent back to "
                  f"kube-scheduler's queue (nowhere else to go) {r['requeued']}, placed on a "
                  f"later try {r['requeued_placed']}; cycles whose cache never showed the marks "
                  f"{r['unmarked']}")
        print(f"  live: nodes tied for kube-scheduler's best total, mean {r['ties_mean']:.2f} per "
              f"GPU pod; GPU pods with more than one {r['ties_many']}; bind retries {r['retries']}, "
              f"binds given up {r['bind_errors']}; E/F lines in egpu-scheduler's log "
              f"{len(r['errors'])}")
        if args.learn_workload:
            print(f"  live: learned target workload rebuilt {r['rebuilds']['kept']:.0f} times "
                  f"within 1% of the one in use (kept), {r['rebuilds']['replaced']:.0f} times "
                  "put into use (the first included)")
        for l in r["errors"][:5]:
            print("    " + l.rstrip())
        return 0
    finally:
        if args.keep:
            print(f"  kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
