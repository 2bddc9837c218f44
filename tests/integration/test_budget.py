"""GPUBudget metering by egpu-controller against the real control plane (the `kube`
fixture): egpu-controller runs with its ServiceAccount's token, so its
RBAC (deploy/controller/rbac.yaml) is exercised, its Lease the one deploy/ grants
(elastic-gpu-controller). Pods are bound through the binding subresource (which sets
PodScheduled's lastTransitionTime), finished through their status, deleted while holding the
webhook's elasticgpu.io/metering finalizer, with gracePeriodSeconds 0: no kubelet runs here
to end a graceful deletion, whose deletionTimestamp would be the end of its grace period.

- Exact across restarts and failover: 300 pods with staggered binds, ends
  and deletions while the leader is SIGKILLed five times and the Lease
  moves to the other replica; the budget's status then holds, to the
  percent-second, what each pod's own timestamps give over the metered
  span, and every deleted pod is released and gone.
- A pod deleted while no controller runs is charged up to its deletion and
  then released.
- Over budget: state, the OverBudget event, the metrics.
- A budget whose time zone does not exist says so and holds no pod; a
  namespace whose budget is deleted has its pods released.
"""
import random
import re
import signal
import time

import pytest

from test_controller import G, V, ctl, wait  # noqa: F401 (ctl: a fixture, on this module's api)

FIN = "elasticgpu.io/metering"
# The Lease is deploy/'s (--lease-name's default, elastic-gpu-controller): the only one the
# ServiceAccount may get and update.
LEASE = ("--leader-elect", "true", "--lease-duration", "3", "--renew-deadline", "2",
         "--retry-period", "1", "--meter-seconds", "1")


@pytest.fixture
def api(kube_api):
    """The real control plane (apis.RealApi)."""
    return kube_api


def ts(text):
    return int(time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")) - time.timezone)


def mkbudget(api, name, hours, ns="default", **spec):
    obj = {"apiVersion": V, "kind": "GPUBudget", "metadata": {"name": name, "namespace": ns},
           "spec": {"gpuHours": hours, "overBudgetPriorityClassName": "gpu-over-budget", **spec}}
    st, out = api.call("POST", f"{G}/namespaces/{ns}/gpubudgets", obj)
    assert st == 201, out


def budget(api, name, ns="default"):
    st, out = api.call("GET", f"{G}/namespaces/{ns}/gpubudgets/{name}")
    return out if st == 200 else None


def gpu_pod(api, name, core, mem=None, ns="default", finalizer=True):
    res = {"elasticgpu.io/gpu-core": str(core)}
    if mem:
        res["elasticgpu.io/gpu-memory"] = str(mem)
    meta = {"name": name, "namespace": ns}
    if finalizer:
        meta["finalizers"] = [FIN]
    st, out = api.call("POST", f"/api/v1/namespaces/{ns}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"containers": [{"name": "main", "image": "x",
                                 "resources": {"requests": res, "limits": res}}]}})
    assert st == 201, out


def bind(api, name, ns="default"):
    st, out = api.call("POST", f"/api/v1/namespaces/{ns}/pods/{name}/binding", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": ns},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}})
    assert st == 201, out


def finish(api, name, ns="default"):
    st, pod = api.call("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
    assert st == 200
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    pod["status"]["phase"] = "Succeeded"
    pod["status"]["containerStatuses"] = [{"name": "main", "state": {"terminated": {
        "exitCode": 0, "finishedAt": now}}}]
    st, out = api.call("PUT", f"/api/v1/namespaces/{ns}/pods/{name}/status", pod)
    assert st == 200, out


def delete(api, name, ns="default"):
    """The owner's DELETE of the pod and, when the pod registry gave it a grace period
    (bound, not finished), the DELETE with gracePeriodSeconds 0 its kubelet sends once it
    has stopped it (no kubelet runs here): that moves deletionTimestamp back to the
    owner's DELETE. The object as it stands then (deletionTimestamp set, the finalizer
    holding it)."""
    path = f"/api/v1/namespaces/{ns}/pods/{name}"
    st, out = api.call("DELETE", path)
    assert st in (200, 202), out
    if out["metadata"].get("deletionGracePeriodSeconds"):
        st, out = api.call("DELETE", path, {"apiVersion": "v1", "kind": "DeleteOptions",
                                            "gracePeriodSeconds": 0})
        assert st == 200, out
    return out


def pods(api, ns="default"):
    st, out = api.call("GET", f"/api/v1/namespaces/{ns}/pods")
    assert st == 200
    return {p["metadata"]["name"]: p for p in out["items"]}


def span(pod):
    """(core, start, end) from the pod's own timestamps, as metered."""
    core = int(pod["spec"]["containers"][0]["resources"]["requests"]["elasticgpu.io/gpu-core"])
    start = next((ts(c["lastTransitionTime"]) for c in pod["status"].get("conditions", [])
                  if c["type"] == "PodScheduled" and c["status"] == "True"), None)
    end = None
    fins = [ts(c["state"]["terminated"]["finishedAt"])
            for c in pod["status"].get("containerStatuses", []) if "terminated" in c["state"]]
    if pod["status"].get("phase") == "Succeeded" and fins:
        end = max(fins)
    elif pod["metadata"].get("deletionTimestamp"):
        end = ts(pod["metadata"]["deletionTimestamp"])
    return core, start, end


def expected(spans, frm, until):
    total = 0
    for core, start, end in spans.values():
        if start is None:
            continue
        a, b = max(start, frm), min(end if end is not None else until, until)
        total += core * max(0, b - a)
    return total


def metering_start(api, name):
    """When metering began: the MeteringStarted event's time."""
    st, out = api.call("GET", "/api/v1/namespaces/default/events")
    for e in out["items"]:
        if e["involvedObject"]["name"] == name and e["reason"] == "MeteringStarted":
            return ts(re.search(r"metered from (\S+);", e["message"]).group(1))
    return None


def test_exact_across_kills_and_failover(api, ctl):  # noqa: F811
    """300 pods bound, finished and deleted at random while the leader is SIGKILLed five
    times and the Lease moves between the two replicas: the budget's coreSeconds is, to
    the percent-second, what the pods' own timestamps give over the metered span, and each
    deleted pod is released (its finalizer dropped) and gone."""
    api.node("n1")
    mkbudget(api, "team", 100000, period="Daily")
    replicas = {"a": ctl("a0", LEASE), "b": ctl("b0", LEASE)}
    wait(lambda: metering_start(api, "team"), "metering started")
    rng = random.Random(13)
    names = [f"p{i:03d}" for i in range(300)]
    spans, kills, leaders, deleted = {}, 0, set(), set()
    for i, n in enumerate(names):
        gpu_pod(api, n, rng.choice([10, 25, 30, 50, 100, 200]), mem=rng.choice([None, 4096]))
    def leader():
        return next((k for k, c in replicas.items()
                     if c.proc.poll() is None and c.metric("egpu_controller_leader") == 1), None)
    for rnd, i in enumerate(range(0, len(names), 25)):
        for n in names[i:i + 25]:
            bind(api, n)
        for n in rng.sample(names[:i + 25], 8):
            p = pods(api).get(n)
            if p and not p["metadata"].get("deletionTimestamp") and \
                    p["status"].get("phase") != "Succeeded":
                if rng.random() < 0.5:
                    finish(api, n)
                else:
                    spans[n] = span(delete(api, n))  # it may be gone by the end
                    deleted.add(n)
        if rnd % 2 == 1 and kills < 5:
            # SIGKILL the leader (whoever holds the Lease now) and start it again.
            key = wait(leader, "a leader", timeout=20)
            leaders.add(key)
            replicas[key].stop(signal.SIGKILL)
            kills += 1
            # The other replica takes the Lease over before the killed one is back (else
            # the restarted one may win every race for it, and the Lease never moves).
            other = "b" if key == "a" else "a"
            leaders.add(wait(lambda: leader() == other and other, "failover", timeout=20))
            replicas[key] = ctl(f"{key}{kills}", LEASE)
        time.sleep(rng.uniform(0.3, 1.2))
    assert kills == 5, kills
    leaders.add(wait(leader, "a leader", timeout=20))
    assert leaders == {"a", "b"}, f"the Lease never moved: {leaders}"
    # The deleted pods are metered to their end and released; the rest
    # give their spans as they stand.
    assert deleted, "the test deleted no pod"
    wait(lambda: not (deleted & set(pods(api))), "deleted pods released and gone", timeout=30)
    for n, p in pods(api).items():
        spans[n] = span(p)
    # Two more metering steps, then compare with the status as it stands.
    before = budget(api, "team")["status"]["metering"]["until"]
    wait(lambda: ts(budget(api, "team")["status"]["metering"]["until"]) >= ts(before) + 2,
         "metering goes on", timeout=20)
    b = budget(api, "team")
    until = ts(b["status"]["metering"]["until"])
    frm = max(metering_start(api, "team"), ts(b["status"]["periodStart"]))
    want = expected(spans, frm, until)
    got = b["status"]["metering"]["coreSeconds"]
    print(f"300 pods, 5 kills, failover: metered {got} percent-seconds, by hand {want}")
    assert got == want
    assert b["status"]["state"] == "InBudget"
    assert abs(b["status"]["used"] - got / 360000) < 0.001


def test_pod_deleted_while_no_controller_runs(api, ctl):  # noqa: F811
    """A pod deleted while no controller runs stays (the metering finalizer) until the next
    controller has charged it up to its deletionTimestamp, and nothing after."""
    api.node("n1")
    mkbudget(api, "team", 100)
    gpu_pod(api, "p", 40)
    bind(api, "p")
    c = ctl("c0", ("--leader-elect", "false", "--meter-seconds", "1"))
    wait(lambda: metering_start(api, "team"), "metering started")
    c.stop(signal.SIGKILL)
    time.sleep(1)
    delete(api, "p")
    p = pods(api)["p"]
    assert p["metadata"]["finalizers"] == [FIN]  # held: nobody has metered its end
    core, start, end = span(p)
    time.sleep(2)
    ctl("c1", ("--leader-elect", "false", "--meter-seconds", "1"))
    wait(lambda: "p" not in pods(api), "the pod released once metered")
    b = budget(api, "team")
    frm = metering_start(api, "team")
    assert b["status"]["metering"]["coreSeconds"] >= core * (end - max(start, frm))
    # Nothing after its end: the next steps add nothing more.
    got = b["status"]["metering"]["coreSeconds"]
    time.sleep(2.5)
    assert budget(api, "team")["status"]["metering"]["coreSeconds"] == got
    assert got == core * (end - max(start, frm))


def test_over_budget(api, ctl):  # noqa: F811
    """A budget of 3.6 card-seconds and a whole card held: OverBudget in its state, a
    Warning event OverBudget naming the PriorityClass new GPU pods get, and the metrics say
    so."""
    api.node("n1")
    mkbudget(api, "small", 0.001)  # 3.6 s of a whole card
    gpu_pod(api, "p", 100)
    bind(api, "p")
    c = ctl("c0", ("--leader-elect", "false", "--meter-seconds", "1"))
    wait(lambda: (budget(api, "small").get("status") or {}).get("state") == "OverBudget",
         "OverBudget", timeout=20)
    b = budget(api, "small")
    assert b["status"]["remaining"] <= 0 and b["status"]["used"] >= 0.001
    ready = next(x for x in b["status"]["conditions"] if x["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Metered")
    st, ev = api.call("GET", "/api/v1/namespaces/default/events")
    over = [e for e in ev["items"] if e["reason"] == "OverBudget"]
    assert over and over[0]["type"] == "Warning"
    assert "get PriorityClass gpu-over-budget" in over[0]["message"]
    assert c.metric("egpu_controller_budget_over", '{namespace="default",name="small"}') == 1
    assert c.metric("egpu_controller_budget_remaining_gpu_hours",
                    '{namespace="default",name="small"}') <= 0


def test_bad_zone_and_deleted_budget_release_pods(api, ctl):  # noqa: F811
    """A budget whose time zone does not exist is Ready False InvalidTimeZone and holds no
    pod; once every budget of the namespace is deleted, a running pod's finalizer goes."""
    api.node("n1")
    mkbudget(api, "mars", 10, period="Daily", timeZone="Mars/Olympus")
    gpu_pod(api, "p", 30)
    bind(api, "p")
    ctl("c0", ("--leader-elect", "false", "--meter-seconds", "1"))

    def cond():
        st = budget(api, "mars").get("status") or {}
        return next((x for x in st.get("conditions", []) if x["type"] == "Ready"), None)
    c = wait(cond, "the Ready condition")
    assert (c["status"], c["reason"]) == ("False", "InvalidTimeZone")
    assert "Mars/Olympus" in c["message"]
    assert "metering" not in budget(api, "mars")["status"]
    # A pod is not held by a budget that cannot meter.
    delete(api, "p")
    wait(lambda: "p" not in pods(api), "released")
    # The budgets deleted: a running pod's finalizer goes too (nothing will
    # meter it), so deleting it later is not held up.
    mkbudget(api, "team", 10)
    gpu_pod(api, "q", 30)
    bind(api, "q")
    wait(lambda: metering_start(api, "team"), "metering started")
    time.sleep(1.5)
    assert pods(api)["q"]["metadata"]["finalizers"] == [FIN]  # running: held
    for name in ("team", "mars"):
        st, _ = api.call("DELETE", f"{G}/namespaces/default/gpubudgets/{name}")
        assert st == 200
    wait(lambda: not pods(api)["q"]["metadata"].get("finalizers"), "released, no budget left")
