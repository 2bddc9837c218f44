"""GPU budgets at admission: egpu-webhook (the real binary over HTTPS, as its
ServiceAccount egpu-webhook) against the real control plane (the `kube`
fixture) holding a GPUBudget and two PriorityClasses (scheduling.k8s.io/v1),
which it lists and watches. Only the /readyz test, which needs a list that
fails, runs on the test API server (tests/apiserver/server.py, `fault_api`).

- A GPU pod of namespace ml, as the API server hands it over (its Priority
  plugin has set spec.priority 0 and preemptionPolicy), gets the in-budget
  class: the patch, applied with python3-jsonpatch, sets priorityClassName,
  priority (the class's value) and preemptionPolicy together and adds the
  finalizer elasticgpu.io/metering; it passes /validate, and a second
  /mutate patches nothing. Created in the API server and deleted, the pod
  stays (Terminating) until the finalizer goes; the real API server's
  Priority admission plugin accepts the priority the patch wrote.
- The budget's status.state flipped to OverBudget: the next pod gets the
  over-budget class (its value and preemptionPolicy Never), with a warning
  saying so; a pod naming its own class has it replaced.
- The over-budget class deleted: the pod is admitted at its own priority,
  with a warning naming the budget and the missing class.
- /validate refuses a tenant's UPDATE removing the finalizer and allows
  the controller's.
- /readyz waits for GPUBudgets and PriorityClasses to be listed.

curl and openssl: missing, a test fails under CI=true and is skipped otherwise.
"""
import base64
import json
import time

import jsonpatch
import pytest

from test_webhook import UID, api, cert, gpus, pod, review, webhook  # noqa: F401 (fixtures)

G = "/apis/elasticgpu.io/v1alpha1"
PC = "/apis/scheduling.k8s.io/v1/priorityclasses"
FIN = "elasticgpu.io/metering"
CTRL = "system:serviceaccount:elastic-gpu-system:egpu-controller"
GPU = {"elasticgpu.io/gpu-core": "30", "elasticgpu.io/gpu-memory": "4096"}
IN_MSG = ("namespace ml is within its GPU budget (GPUBudget team); the pod gets PriorityClass "
          "gpu-in-budget")
OVER_MSG = ("namespace ml is over its GPU budget (GPUBudget team); the pod gets PriorityClass "
            "gpu-over-budget and may be preempted by pods of namespaces within budget")


def priority_class(api, name, value, policy=None):  # noqa: F811
    """Create PriorityClass name (value, preemptionPolicy policy) on api (Api or RealApi)."""
    obj = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
           "metadata": {"name": name}, "value": value}
    if policy:
        obj["preemptionPolicy"] = policy
    st, out = api.call("POST", PC, obj)
    assert st == 201, out


def set_state(api, state):  # noqa: F811
    """Write the budget's status.state as the controller does."""
    path = f"{G}/namespaces/ml/gpubudgets/team"
    st, obj = api.call("GET", path)
    assert st == 200, obj
    obj["status"] = {"state": state}
    st, obj = api.call("PUT", path + "/status", obj)
    assert st == 200, obj


def setup_budget(api, state="InBudget"):  # noqa: F811
    gpus(api, 40960)
    priority_class(api, "gpu-in-budget", 1000)
    priority_class(api, "gpu-over-budget", -10, "Never")
    priority_class(api, "team-high", 100000)
    st, obj = api.call("POST", f"{G}/namespaces/ml/gpubudgets", {
        "apiVersion": "elasticgpu.io/v1alpha1", "kind": "GPUBudget",
        "metadata": {"name": "team", "namespace": "ml"},
        "spec": {"gpuHours": 100, "period": "Monthly",
                 "inBudgetPriorityClassName": "gpu-in-budget",
                 "overBudgetPriorityClassName": "gpu-over-budget"}})
    assert st == 201, obj
    if state is not None:
        set_state(api, state)


def gpu_pod(own_class=None, priority=0):
    """A GPU pod as the Priority plugin leaves it for the mutating webhooks."""
    p = pod(GPU)
    p["spec"]["schedulerName"] = "elastic-gpu-scheduler"
    if own_class:
        p["spec"]["priorityClassName"] = own_class
    p["spec"]["priority"] = priority
    p["spec"]["preemptionPolicy"] = "PreemptLowerPriority"
    return p


def mutate(w, obj):
    """/mutate's patch for obj, applied, and its warnings; the result passes
    /validate and a second /mutate patches nothing."""
    resp = w.review("/mutate", review(obj))
    assert resp["allowed"] is True and resp["patchType"] == "JSONPatch", resp
    ops = json.loads(base64.b64decode(resp["patch"]))
    out = jsonpatch.apply_patch(obj, ops)
    assert w.review("/validate", review(out)) == {"uid": UID, "allowed": True}
    assert w.review("/mutate", review(out)) == {"uid": UID, "allowed": True}
    return out, resp["warnings"]


def wait_for(w, want_warning, own_class=None):
    """Mutate a GPU pod until the webhook's caches give want_warning first
    (its watch has brought the change); returns the last result."""
    deadline = time.time() + 10
    while True:
        out, warnings = mutate(w, gpu_pod(own_class))
        if warnings and warnings[0] == want_warning:
            return out, warnings
        assert time.time() < deadline, warnings
        time.sleep(0.1)


def want_class(out, name, value, policy):
    spec = out["spec"]
    assert (spec.get("priorityClassName"), spec["priority"], spec["preemptionPolicy"]) == \
        (name, value, policy), spec


def test_budget_state_sets_the_class(webhook, api):  # noqa: F811
    """The budget's state picks the class: InBudget gives gpu-in-budget (value, policy and
    the metering finalizer), and the pod so patched is created by the real API server and,
    deleted, stays Terminating under the finalizer, which /validate lets only the controller
    remove; OverBudget gives gpu-over-budget (replacing a class of the pod's own, saying
    so); the over-budget class deleted, the pod keeps its own priority with a warning; a
    namespace without a budget gets no class."""
    setup_budget(api)
    w = webhook()
    w.wait_ready()
    out, warnings = wait_for(w, IN_MSG)
    assert warnings == [IN_MSG]
    want_class(out, "gpu-in-budget", 1000, "PreemptLowerPriority")
    assert out["metadata"]["finalizers"] == [FIN]

    # the patched pod in the API server: deleted, it stays until the
    # controller (alone) removes the finalizer
    st, created = api.call("POST", "/api/v1/namespaces/ml/pods", out)
    assert st == 201, created
    st, gone = api.call("DELETE", "/api/v1/namespaces/ml/pods/train")
    assert st == 200, gone
    st, held = api.call("GET", "/api/v1/namespaces/ml/pods/train")
    assert st == 200 and held["metadata"]["deletionTimestamp"], held
    assert held["metadata"]["finalizers"] == [FIN]
    released = json.loads(json.dumps(held))
    released["metadata"]["finalizers"] = []
    resp = w.review("/validate", review(released, op="UPDATE", old=held))
    assert resp["allowed"] is False and resp["status"]["code"] == 403, resp
    assert resp["status"]["message"] == (
        f"finalizer {FIN} is removed only by the controller ({CTRL}), once it has metered the "
        "pod's GPU time to its end; user \"alice\" may not remove it")
    assert w.review("/validate", review(released, op="UPDATE", old=held, user=CTRL)) == \
        {"uid": UID, "allowed": True}

    # over budget now: the next pod gets the other class
    set_state(api, "OverBudget")
    out, warnings = wait_for(w, OVER_MSG)
    assert warnings == [OVER_MSG]
    want_class(out, "gpu-over-budget", -10, "Never")
    assert out["metadata"]["finalizers"] == [FIN]
    # a class of the pod's own is replaced, saying so
    out, warnings = mutate(w, gpu_pod("team-high", 100000))
    want_class(out, "gpu-over-budget", -10, "Never")
    assert warnings == [OVER_MSG, "the pod's PriorityClass team-high is replaced by "
                        "gpu-over-budget: GPU pods of namespace ml take the class of GPUBudget "
                        "team"]

    # the class deleted: admitted at the pod's own priority, with a warning
    assert api.call("DELETE", f"{PC}/gpu-over-budget")[0] == 200
    missing = ("namespace ml is over its GPU budget (GPUBudget team), whose PriorityClass "
               "gpu-over-budget (spec.overBudgetPriorityClassName) does not exist: the pod is "
               "admitted at the priority it has; create the PriorityClass or correct the "
               "GPUBudget")
    out, warnings = wait_for(w, missing, own_class="team-high")
    assert warnings == [missing]
    want_class(out, "team-high", 0, "PreemptLowerPriority")  # as it came
    assert out["metadata"]["finalizers"] == [FIN]

    # another namespace, no budget: no class and no finalizer (only the seccomp guard's
    # profile, which every share gets)
    other = gpu_pod()
    req = review(other)
    req["request"]["namespace"] = other["metadata"]["namespace"] = "prod"
    resp = w.review("/mutate", req)
    assert resp["allowed"] is True, resp
    assert json.loads(base64.b64decode(resp["patch"])) == [{
        "op": "add", "path": "/spec/containers/0/securityContext",
        "value": {"seccompProfile": {"type": "Localhost",
                                     "localhostProfile": "elastic-gpu/shared-gpu.json"}}}]


def test_unmetered_budget_is_in_budget(webhook, api):  # noqa: F811
    """A GPUBudget whose status the controller has not written yet counts as InBudget."""
    setup_budget(api, state=None)
    w = webhook()
    w.wait_ready()
    out, warnings = wait_for(w, IN_MSG)
    want_class(out, "gpu-in-budget", 1000, "PreemptLowerPriority")


@pytest.mark.parametrize("plural,kind", [
    (r"^/apis/elasticgpu\.io/v1alpha1/gpubudgets$", "GPUBudgets"),
    (r"^/apis/scheduling\.k8s\.io/v1/priorityclasses$", "PriorityClasses")])
def test_readyz_waits_for_budgets_and_classes(webhook, fault_api, plural, kind):  # noqa: F811
    """/readyz says 503, naming the kind, until GPUBudgets (or PriorityClasses) are listed,
    then ok. On the test API server (fault_api): it answers that list 503 on demand, which a
    real one does not."""
    api = fault_api
    gpus(api, 40960)
    api.control("fault", {"method": "GET", "path": plural, "code": 503, "count": -1})
    w = webhook(kubeconfig=api.kubeconfig)
    deadline = time.time() + 15
    while True:
        st, _, body = w.curl(w.health + "/readyz")
        assert st == 503, body
        if f"not ready: {kind} not listed yet".encode() in body:
            break
        assert time.time() < deadline, body
        time.sleep(0.1)
    api.control("fault", method="DELETE")
    assert w.wait_ready(200, timeout=40).strip() == "ok"
