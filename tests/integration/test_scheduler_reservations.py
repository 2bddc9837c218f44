"""egpu-scheduler and ElasticGPUs: the capacity an ElasticGPU
holds counts as allocated in the scheduler's cache, built by list+watch from
the API server's elasticgpus. A pod that would fit only into reserved
capacity is filtered out, and fits once the ElasticGPU is Failed or deleted;
one naming a GPU that is not there yet waits for it; two that overfill a card
leave the second out and say so; a malformed one is refused by the API server
(the CRD's rules) or, stored anyway, skipped and counted; the cache is not
ready until ElasticGPUs are listed.

On the real control plane (kube_api, egpu-scheduler with its ServiceAccount's
token), except the two tests that need the test API server (fault_api), each
saying why: a malformed ElasticGPU stored, which the real one refuses, and
injected 500s on the list of ElasticGPUs."""
import json
import time

import pytest

from test_scheduler import args, cluster, sched  # noqa: F401 (fixtures)


@pytest.fixture
def api(kube_api):
    """The real control plane (conftest.py's kube_api): every test here; sched starts
    egpu-scheduler with its ServiceAccount's token."""
    return kube_api

EGPUS = "/apis/elasticgpu.io/v1alpha1/elasticgpus"


def egpu(api, name, node, gpu, core, memory=None, phase="Bound", names=None):
    cap = {"elasticgpu.io/gpu-core": core}
    if memory:
        cap["elasticgpu.io/gpu-memory"] = memory
    spec = {"capacity": cap, "nodeName": node}
    if names:
        spec["physicalGPU"] = {"gpuNames": names}
    else:
        spec["gpuShare"] = {"gpuName": gpu}
    st, obj = api.call("POST", EGPUS, {"apiVersion": "elasticgpu.io/v1alpha1",
                                       "kind": "ElasticGPU", "metadata": {"name": name},
                                       "spec": spec})
    assert st == 201, obj
    if phase:
        set_phase(api, name, phase)


def set_phase(api, name, phase):
    st, obj = api.call("PATCH", f"{EGPUS}/{name}/status", {"status": {"phase": phase}},
                       ctype="application/merge-patch+json")
    assert st == 200, obj
    assert obj["status"]["phase"] == phase


def fits(s, pod, node):
    st, out = s.post("filter", args(pod, [node]))
    assert st == 200, out
    return out["NodeNames"] == [node]


def test_reserved_capacity_is_taken(api, sched):
    """A Bound gpuShare ElasticGPU of 50% holds half of the card: a 60% pod is filtered
    out, a 40% one fits; Failed frees the capacity, Bound again takes it, deleted frees
    it, and bind then places the 60% pod there."""
    cluster(api, nodes=("gpu-1",), gpus=1)
    egpu(api, "resv", "gpu-1", "gpu-1-gpu0", 50, 8192)
    s = sched()
    s.wait_ready()
    s.wait_until(lambda: s.metric("egpu_scheduler_reservations", '{state="applied"}') == 1)
    assert s.metric("egpu_scheduler_reserved_core_percent") == 50
    assert s.metric("egpu_scheduler_reserved_memory_mib") == 8192
    s.wait_until(lambda: s.metric("egpu_scheduler_allocated_core_percent",
                                  '{node="gpu-1"}') == 50)
    big, small = api.pod("big", 60), api.pod("small", 40, 4096)
    st, out = s.post("filter", args(big, ["gpu-1"]))
    assert st == 200 and out["NodeNames"] == []
    assert "60% core" in out["FailedNodes"]["gpu-1"], out
    assert fits(s, small, "gpu-1")  # the rest of the card is free
    # Failed: the capacity is free again, and the pod fits.
    set_phase(api, "resv", "Failed")
    s.wait_until(lambda: fits(s, big, "gpu-1"))
    s.wait_until(lambda: s.metric("egpu_scheduler_reservations", '{state="off"}') == 1)
    # Bound again: taken again; deleted: free.
    set_phase(api, "resv", "Bound")
    s.wait_until(lambda: not fits(s, big, "gpu-1"))
    st, _ = api.call("DELETE", f"{EGPUS}/resv")
    assert st == 200
    s.wait_until(lambda: fits(s, big, "gpu-1"))
    s.wait_until(lambda: s.metric("egpu_scheduler_reservations", '{state="applied"}') == 0)
    # bind places the pod into the freed capacity.
    s.wait_until(lambda: s.post("bind", {"PodName": "big", "PodNamespace": "default",
                                         "PodUID": "", "Node": "gpu-1"})[1].get("Error") == "")
    s.wait_until(lambda: s.metric("egpu_scheduler_allocated_core_percent",
                                  '{node="gpu-1"}') == 60)


def test_whole_cards_bind_elsewhere(api, sched):
    """A physicalGPU ElasticGPU takes whole cards: bind of a pod to that
    node is refused while the cards are held, and a whole-card pod fits
    only on the free card."""
    cluster(api, nodes=("gpu-1",), gpus=2)
    egpu(api, "whole", "gpu-1", None, 100, names=["gpu-1-gpu0"], phase="Available")
    s = sched()
    s.wait_ready()
    s.wait_until(lambda: s.metric("egpu_scheduler_reservations", '{state="applied"}') == 1)
    two, one = api.pod("two", 200), api.pod("one", 100)
    assert not fits(s, two, "gpu-1")
    assert fits(s, one, "gpu-1")
    st, out = s.post("bind", {"PodName": "two", "PodNamespace": "default", "PodUID": "",
                              "Node": "gpu-1"})
    assert out["Error"] != "", out
    assert api.get_pod("two")["spec"].get("nodeName") is None
    s.wait_until(lambda: s.post("bind", {"PodName": "one", "PodNamespace": "default",
                                         "PodUID": "", "Node": "gpu-1"})[1].get("Error") == "")
    assert json_gpus(api, "one") == ["GPU-gpu-1-1"]


def json_gpus(api, name):
    ann = api.get_pod(name)["metadata"]["annotations"]["elasticgpu.io/assigned"]
    return json.loads(ann)["containers"][0]["gpus"]


def test_order_overfill_and_malformed(api, sched):
    """An ElasticGPU naming a node and GPU not there yet waits, then holds once they
    come; a second one overfilling that card is left out, counted and logged, and takes
    the place of the first once that is deleted; a malformed one (a gpuShare of 150%) is
    refused by the real API server, and nothing moves."""
    cluster(api, nodes=("gpu-1",), gpus=1)
    s = sched()
    s.wait_ready()
    # Names a node and GPU that do not exist yet: waits, then holds.
    egpu(api, "early", "gpu-2", "gpu-2-gpu0", 70)
    s.wait_until(lambda: s.metric("egpu_scheduler_reservations", '{state="waiting"}') == 1)
    api.node("gpu-2")
    api.gpu("gpu-2", 0)
    s.wait_until(lambda: s.metric("egpu_scheduler_reservations", '{state="applied"}') == 1)
    pod = api.pod("p", 40)
    assert not fits(s, pod, "gpu-2")
    assert fits(s, pod, "gpu-1")
    # A second reservation overfilling gpu-2's card: left out and reported.
    egpu(api, "late", "gpu-2", "gpu-2-gpu0", 50, phase="Pending")
    s.wait_until(lambda: s.metric("egpu_scheduler_reservations", '{state="overfill"}') == 1)
    s.wait_until(lambda: s.metric("egpu_scheduler_reservation_overfills_total") == 1)
    s.wait_until(lambda: s.metric("egpu_scheduler_allocated_core_percent",
                                  '{node="gpu-2"}') == 70)
    assert "reservation does not fit its cards, not applied elasticgpu=late" in \
        s.log.read_text()
    # The first goes: the second takes its place.
    api.call("DELETE", f"{EGPUS}/early")
    s.wait_until(lambda: s.metric("egpu_scheduler_allocated_core_percent",
                                  '{node="gpu-2"}') == 50)
    s.wait_until(lambda: s.metric("egpu_scheduler_reservations", '{state="overfill"}') == 0)
    # Malformed (a gpuShare of 150%): the real API server refuses it (the CRD's rule), so
    # nothing moves (test_malformed_elasticgpu_is_skipped: one stored anyway is skipped).
    st, obj = api.call("POST", EGPUS, BAD)
    assert st == 422, obj
    assert "a gpuShare's elasticgpu.io/gpu-core must be 1..99" in obj["message"], obj
    assert fits(s, pod, "gpu-1")
    assert s.metric("egpu_scheduler_allocated_core_percent", '{node="gpu-1"}') == 0
    assert s.metric("egpu_scheduler_reservations", '{state="applied"}') == 1


# An ElasticGPU whose gpuShare holds 150% of a card, which the CRD's rules refuse.
BAD = {"apiVersion": "elasticgpu.io/v1alpha1", "kind": "ElasticGPU", "metadata": {"name": "bad"},
       "spec": {"capacity": {"elasticgpu.io/gpu-core": 150}, "nodeName": "gpu-1",
                "gpuShare": {"gpuName": "gpu-1-gpu0"}}}


def test_malformed_elasticgpu_is_skipped(fault_api, sched):
    """An ElasticGPU the scheduler cannot use (a gpuShare of 150%) is skipped, logged and
    counted, and nothing moves: the one applied beside it stays. Needs the test API server
    (fault_api): it stores what the CRD's validation rules refuse, as an object stored
    before those rules (or by a cluster without them) would be, which the real API server
    does not let a test make."""
    cluster(fault_api, nodes=("gpu-1",), gpus=1)
    egpu(fault_api, "good", "gpu-1", "gpu-1-gpu0", 30)
    s = sched()
    s.wait_ready()
    s.wait_until(lambda: s.metric("egpu_scheduler_reservations", '{state="applied"}') == 1)
    st, obj = fault_api.call("POST", EGPUS, BAD)
    assert st == 201, obj
    s.wait_until(lambda: s.metric("egpu_scheduler_objects_skipped_total",
                                  '{kind="ElasticGPU"}') == 1)
    assert "ignored malformed ElasticGPU name=bad" in s.log.read_text()
    assert "gpu-core is 150" in s.log.read_text()
    assert fits(s, fault_api.pod("p", 40), "gpu-1")
    assert s.metric("egpu_scheduler_allocated_core_percent", '{node="gpu-1"}') == 30
    assert s.metric("egpu_scheduler_reservations", '{state="applied"}') == 1


def test_ready_waits_for_elasticgpus(fault_api, sched):
    """Until the first list of ElasticGPUs comes, the cache is not synced:
    /readyz says 503 and filter refuses with the protocol's Error (HTTP 200,
    so kube-scheduler shows the text). Needs the test API server
    (fault_api): every list of ElasticGPUs answered 500 until the fault is lifted, which a
    real API server does not do on demand."""
    cluster(fault_api, nodes=("gpu-1",), gpus=1)
    fault_api.control("fault", {"method": "GET", "path": "/elasticgpus$", "code": 500,
                                "count": -1})
    s = sched()
    time.sleep(1.5)
    body = s.wait_ready(want=503, reason="cache not synced")
    assert "ElasticGPUs" in body
    st, out = s.post("filter", args(fault_api.pod("p", 10), ["gpu-1"]))
    assert (st, out) == (200, {"Nodes": None, "NodeNames": None, "FailedNodes": None,
                               "FailedAndUnresolvableNodes": None,
                               "Error": "elastic-gpu extender: node cache not synced yet"})
    fault_api.control("fault", method="DELETE")
    s.wait_ready(timeout=20)
