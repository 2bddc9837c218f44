"""place.webhook.elasticgpu.io (POST /mutate-place) called by the real API server:
deploy/ as conftest's `deployed` applied it, egpu-webhook as deploy/ runs it
(conftest's `webhook`, the configurations pointed at it with the cluster CA).

- In a namespace labelled elasticgpu.io/pods-without-gpu=place, a pod that asks no GPU and
  names no scheduler (the API server writes default-scheduler into it before admission), or
  names default-scheduler, is created with schedulerName elastic-gpu-scheduler: the real API
  server evaluated the webhook's matchConditions, called /mutate-place over TLS and applied its
  JSON Patch.
- In a namespace without the label, the same pod keeps default-scheduler, and /mutate-place
  is never called (namespaceSelector).
- A pod naming another scheduler keeps it, and is never sent (matchConditions); a GPU pod in
  the labelled namespace is /mutate's (converted, elastic-gpu-scheduler) and never reaches
  /mutate-place either.
- With no webhook answering, failurePolicy Ignore creates the CPU pod as written, with
  default-scheduler: nothing is refused."""
import urllib.request

import pytest

from conftest import cluster_module as cl
import components  # noqa: E402  (tests/cluster/components.py)

LABEL = "elasticgpu.io/pods-without-gpu"
ON, OFF = "place-on", "place-off"


def place_calls(w):
    """egpu_webhook_admission_requests_total of route mutate-place, summed over results."""
    with urllib.request.urlopen(f"http://127.0.0.1:{w.ports[1]}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith('egpu_webhook_admission_requests_total{route="mutate-place"'))


def pod(name, sched=None, resources=None):
    spec = {"containers": [{"name": "main", "image": "busybox:1"}]}
    if resources:
        spec["containers"][0]["resources"] = {"requests": dict(resources),
                                              "limits": dict(resources)}
    if sched is not None:
        spec["schedulerName"] = sched
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@pytest.fixture(scope="module")
def namespaces(cluster, deployed):
    """place-on, labelled for the place webhook, and place-off, not; both removed after."""
    for ns, labels in ((ON, {LABEL: "place"}), (OFF, {})):
        cluster.namespace(ns, labels)
    yield
    for ns in (ON, OFF):
        cluster.call("DELETE", f"/api/v1/namespaces/{ns}")


def create(cluster, ns, body):
    st, got = cluster.call("POST", f"/api/v1/namespaces/{ns}/pods", body)
    assert st == 201, (st, got)
    return got


def test_labelled_namespace_cpu_pod_gets_elastic_gpu_scheduler(cluster, namespaces, webhook):
    """A CPU pod of the labelled namespace, naming no scheduler or default-scheduler, is
    created with schedulerName elastic-gpu-scheduler, each through one call of
    /mutate-place; everything else of the pod is as written."""
    before = place_calls(webhook)
    got = create(cluster, ON, pod("cpu-unnamed"))
    assert got["spec"]["schedulerName"] == "elastic-gpu-scheduler", got["spec"]
    got = create(cluster, ON, pod("cpu-default", sched="default-scheduler"))
    assert got["spec"]["schedulerName"] == "elastic-gpu-scheduler", got["spec"]
    assert got["spec"]["containers"][0]["image"] == "busybox:1"
    assert "resources" not in got["spec"]["containers"][0] or \
        not got["spec"]["containers"][0]["resources"]
    assert place_calls(webhook) == before + 2


def test_unlabelled_namespace_cpu_pod_keeps_default_scheduler(cluster, namespaces, webhook):
    """Without the label the namespaceSelector sends nothing: default-scheduler stays."""
    before = place_calls(webhook)
    got = create(cluster, OFF, pod("cpu"))
    assert got["spec"]["schedulerName"] == "default-scheduler", got["spec"]
    assert place_calls(webhook) == before


def test_pod_naming_another_scheduler_keeps_it(cluster, namespaces, webhook):
    """A pod of the labelled namespace naming its own scheduler keeps it; the real API
    server's CEL (names-no-scheduler) does not even send it."""
    before = place_calls(webhook)
    got = create(cluster, ON, pod("volcano", sched="volcano"))
    assert got["spec"]["schedulerName"] == "volcano", got["spec"]
    assert place_calls(webhook) == before


def test_gpu_pod_of_the_labelled_namespace_is_mutates(cluster, namespaces, webhook):
    """A GPU pod there is converted by /mutate (listed first) and given
    elastic-gpu-scheduler by it; place's conditions (asks-no-gpu, evaluated on the object
    /mutate patched) keep it from /mutate-place."""
    before = place_calls(webhook)
    got = create(cluster, ON, pod("share", resources={"tencent.com/vcuda-core": "30",
                                                      "tencent.com/vcuda-memory": "16"}))
    assert got["spec"]["schedulerName"] == "elastic-gpu-scheduler", got["spec"]
    want = {"elasticgpu.io/gpu-core": "30", "elasticgpu.io/gpu-memory": "4096"}
    assert got["spec"]["containers"][0]["resources"] == {"requests": want, "limits": want}
    assert place_calls(webhook) == before


def test_webhook_down_the_pod_keeps_default_scheduler(cluster, namespaces, webhook):
    """failurePolicy Ignore: with nothing listening where the configurations point, the
    API server creates the CPU pod as written (default-scheduler), not refused."""
    components.point_webhooks(cluster, cl.free_port())
    try:
        st, got = cluster.call("POST", f"/api/v1/namespaces/{ON}/pods", pod("cpu-down"))
    finally:
        components.point_webhooks(cluster, webhook.ports[0])
    assert st == 201, (st, got)
    assert got["spec"]["schedulerName"] == "default-scheduler", got["spec"]
