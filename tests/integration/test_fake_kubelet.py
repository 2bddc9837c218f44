"""The fake kubelet (tests/kubelet/fake_kubelet.py) against a tiny device plugin.

The agent's device plugin tests trust the fake kubelet to behave like the
real one, so this file proves it with a plugin written here in Python, over
the real unix sockets and real gRPC (grpcio on both sides):

* registration: GetDevicePluginOptions is called while Register is still in
  flight, ListAndWatch follows and every full device list is seen; a bad
  version, a non-extended resource name or an endpoint nobody serves fail
  Register with the kubelet's messages;
* admission in kubelet order: GetPreferredAllocation (one container request,
  only when the options ask for it), Allocate (one container), PreStartContainer
  (only when asked; again on a container restart, without Allocate); the
  kubelet follows the preference, never hands out a device twice, refuses
  what it cannot give, and frees the devices of a failed Allocate;
* the end of ListAndWatch leaves no healthy device;
* restart: every socket in the directory is deleted (the checkpoint and plain
  files stay), and the plugin, watching its socket, registers again;
* PodResources: List, Get and GetAllocatableResources over the real socket
  answer what the test set, in the kubelet's one-device-per-entry shape; the
  plugin finds the owner of its device IDs from PreStartContainer.
"""
import json
import os
import pathlib
import queue
import shutil
import stat
import sys
import tempfile
import threading
import time
from concurrent import futures

import grpc
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "kubelet"))

import fake_kubelet  # noqa: E402
from fake_kubelet import FakeKubelet, dp, pr  # noqa: E402

RES = "example.com/tiny"
IDS = ["tiny-0", "tiny-1", "tiny-2", "tiny-3"]


class TinyPlugin:
    """A device plugin in a few lines: serves v1beta1.DevicePlugin on
    <dir>/<name>.sock, registers, streams its device list, prefers the
    highest-sorted IDs, and records every call it gets."""

    def __init__(self, plugin_dir, name="tiny", resource=RES, pre_start=True, preferred=True,
                 devices=None, version="v1beta1"):
        self.dir = plugin_dir
        self.name = name
        self.socket = os.path.join(plugin_dir, name + ".sock")
        self.resource = resource
        self.version = version
        self.options = dp.DevicePluginOptions(pre_start_required=pre_start,
                                              get_preferred_allocation_available=preferred)
        self.devices = devices if devices is not None else [
            dp.Device(ID=i, health="Healthy", topology=dp.TopologyInfo(nodes=[dp.NUMANode(ID=0)]))
            for i in IDS]
        self.calls = []  # (method, request), in arrival order
        self.register_in_flight = False
        self.options_during_register = []  # register_in_flight at each GetDevicePluginOptions
        self.allocate_error = None  # (code, details) to fail Allocate with
        self.allocate_empty = False  # answer Allocate with no container_responses
        self.owners = []  # what PreStartContainer found through PodResources List
        self.registrations = 0
        self.streams_ended = 0
        self._streams = []
        self._lock = threading.Lock()
        self._server = None
        self._watcher = None
        self._stop = threading.Event()

    # plugin life cycle
    def serve(self):
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        self._server.add_generic_rpc_handlers([fake_kubelet.device_plugin_handler(self)])
        self._server.add_insecure_port("unix:" + self.socket)
        self._server.start()

    def register(self, kubelet_socket):
        self.register_in_flight = True
        try:
            with fake_kubelet.unix_channel(kubelet_socket) as ch:
                fake_kubelet.RegistrationStub(ch).Register(dp.RegisterRequest(
                    version=self.version, endpoint=self.name + ".sock",
                    resource_name=self.resource, options=self.options), timeout=15)
            self.registrations += 1
        finally:
            self.register_in_flight = False

    def start(self, kubelet_socket):
        self.serve()
        self.register(kubelet_socket)
        return self

    def watch_for_restart(self, kubelet_socket):
        """Re-serve and re-register when our socket is deleted (a kubelet restart)."""
        def loop():
            while not self._stop.wait(0.05):
                if os.path.exists(self.socket) or not os.path.exists(kubelet_socket):
                    continue
                self._server.stop(grace=None).wait(5)
                self.serve()
                try:
                    self.register(kubelet_socket)
                except grpc.RpcError:
                    pass  # the kubelet is not up yet: the next turn tries again
        self._watcher = threading.Thread(target=loop, daemon=True)
        self._watcher.start()

    def stop(self):
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(5)
        with self._lock:
            for q in self._streams:
                q.put(None)
        if self._server is not None:
            self._server.stop(grace=None).wait(5)

    def set_devices(self, devices):
        """Send a new full list on every open ListAndWatch stream."""
        with self._lock:
            self.devices = list(devices)
            for q in self._streams:
                q.put(list(devices))

    def end_streams(self):
        with self._lock:
            for q in self._streams:
                q.put(None)

    # v1beta1.DevicePlugin
    def GetDevicePluginOptions(self, request, context):
        self.calls.append(("GetDevicePluginOptions", request))
        self.options_during_register.append(self.register_in_flight)
        return self.options

    def ListAndWatch(self, request, context):
        self.calls.append(("ListAndWatch", request))
        q = queue.Queue()
        with self._lock:
            self._streams.append(q)
            first = list(self.devices)
        try:
            yield dp.ListAndWatchResponse(devices=first)
            while context.is_active():
                try:
                    item = q.get(timeout=0.05)
                except queue.Empty:
                    continue
                if item is None:
                    return
                yield dp.ListAndWatchResponse(devices=item)
        finally:
            with self._lock:
                self._streams.remove(q)
                self.streams_ended += 1

    def GetPreferredAllocation(self, request, context):
        self.calls.append(("GetPreferredAllocation", request))
        resp = dp.PreferredAllocationResponse()
        for c in request.container_requests:
            want = sorted(c.available_deviceIDs, reverse=True)[:c.allocation_size]
            resp.container_responses.add(deviceIDs=want)
        return resp

    def Allocate(self, request, context):
        self.calls.append(("Allocate", request))
        if self.allocate_error is not None:
            context.abort(*self.allocate_error)
        resp = dp.AllocateResponse()
        if self.allocate_empty:
            return resp
        for c in request.container_requests:
            r = resp.container_responses.add()
            r.envs["TINY_DEVICES"] = ",".join(sorted(c.devices_ids))
            r.mounts.add(container_path="/opt/tiny", host_path="/var/lib/tiny", read_only=True)
            r.devices.add(container_path="/dev/tiny0", host_path="/dev/null", permissions="rw")
        return resp

    def PreStartContainer(self, request, context):
        self.calls.append(("PreStartContainer", request))
        # What the agent does: find who owns these IDs through PodResources List.
        pods_dir = os.path.join(os.path.dirname(self.dir), "pod-resources", "kubelet.sock")
        with fake_kubelet.unix_channel(pods_dir) as ch:
            listing = fake_kubelet.PodResourcesListerStub(ch).List(pr.ListPodResourcesRequest(),
                                                                  timeout=5)
        want = set(request.devices_ids)
        for p in listing.pod_resources:
            for c in p.containers:
                got = {i for d in c.devices if d.resource_name == self.resource
                       for i in d.device_ids}
                if got == want:
                    self.owners.append((p.namespace, p.name, c.name))
        return dp.PreStartContainerResponse()

    def methods(self):
        return [m for m, _ in self.calls]


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="egpu-fk-")  # short: unix socket paths are at most 107 bytes
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def kubelet(workdir):
    k = FakeKubelet(os.path.join(workdir, "device-plugins"), seed=7)
    k.start()
    yield k
    k.stop()


@pytest.fixture
def plugins():
    made = []

    def make(kubelet, register=True, **kw):
        p = TinyPlugin(kubelet.plugin_dir, **kw)
        made.append(p)
        if register:
            p.start(kubelet.kubelet_socket)
        else:
            p.serve()
        return p
    yield make
    for p in made:
        p.stop()


def eventually(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not met in %.1f s" % timeout
        time.sleep(0.01)


def healthy(devices):
    return sorted(d.ID for d in devices if d.health == "Healthy")


# ---------------------------------------------------------------------------
# Registration and ListAndWatch


def test_layout_on_start(kubelet, workdir):
    assert kubelet.kubelet_socket == os.path.join(workdir, "device-plugins", "kubelet.sock")
    assert kubelet.pod_resources_socket == os.path.join(workdir, "pod-resources", "kubelet.sock")
    assert stat.S_ISSOCK(os.stat(kubelet.kubelet_socket).st_mode)
    assert stat.S_ISSOCK(os.stat(kubelet.pod_resources_socket).st_mode)
    assert os.path.getsize(os.path.join(kubelet.plugin_dir, "DEPRECATION")) == 0


def test_register_options_then_list_and_watch(kubelet, plugins):
    p = plugins(kubelet)
    reg = kubelet.wait_for_registration(1)
    assert reg.ok
    assert reg.request.endpoint == "tiny.sock" and reg.request.resource_name == RES
    seen = kubelet.wait_for_plugin(RES)
    assert seen.endpoint == p.socket
    assert seen.options.pre_start_required and seen.options.get_preferred_allocation_available
    # The options were asked for inside Register, before it returned.
    assert p.options_during_register == [True]
    assert p.methods()[:2] == ["GetDevicePluginOptions", "ListAndWatch"]
    assert healthy(seen.devices) == IDS
    assert [n.ID for n in seen.devices[0].topology.nodes] == [0]

    # Each message is the whole list: one device turns unhealthy, one disappears.
    p.set_devices([dp.Device(ID="tiny-0", health="Unhealthy"), dp.Device(ID="tiny-1",
                   health="Healthy"), dp.Device(ID="tiny-2", health="Healthy")])
    devs = kubelet.wait_for_devices(RES, lambda d: len(d) == 3)
    assert healthy(devs) == ["tiny-1", "tiny-2"]
    assert len(seen.updates) == 2
    with open(os.path.join(kubelet.plugin_dir, "kubelet_internal_checkpoint")) as f:
        assert json.load(f)["Data"]["RegisteredDevices"] == {RES: ["tiny-0", "tiny-1", "tiny-2"]}


def test_register_refusals(kubelet, plugins):
    bad = plugins(kubelet, register=False, name="old", version="v1alpha")
    with pytest.raises(grpc.RpcError) as e:
        bad.register(kubelet.kubelet_socket)
    assert e.value.code() == grpc.StatusCode.UNKNOWN
    assert e.value.details() == ('requested API version "v1alpha" is not supported by kubelet. '
                                 'Supported version is ["v1beta1"]')
    for name in ("kubernetes.io/tiny", "tiny", "requests.example.com/tiny", "example.com/"):
        p = plugins(kubelet, register=False, name="n%d" % len(kubelet.registrations),
                    resource=name)
        with pytest.raises(grpc.RpcError) as e:
            p.register(kubelet.kubelet_socket)
        assert e.value.details() == 'the ResourceName "%s" is invalid' % name
        assert p.calls == []  # refused before the kubelet dialled it

    kubelet.dial_timeout_s = 0.5
    with fake_kubelet.unix_channel(kubelet.kubelet_socket) as ch:
        with pytest.raises(grpc.RpcError) as e:
            fake_kubelet.RegistrationStub(ch).Register(dp.RegisterRequest(
                version="v1beta1", endpoint="nobody.sock", resource_name=RES), timeout=5)
    assert "failed to dial device plugin" in e.value.details()
    assert all(not r.ok for r in kubelet.registrations)
    assert kubelet.plugins == {}


def test_stream_end_leaves_no_healthy_device(kubelet, plugins):
    p = plugins(kubelet)
    kubelet.wait_for_plugin(RES)
    p.end_streams()
    kubelet.wait_for_stream_end(RES)
    adm = kubelet.admit(RES, 1)
    assert not adm.ok and adm.stage == "kubelet" and adm.calls == []
    assert adm.error == ("requested number of devices unavailable for %s. Requested: 1, "
                         "Available: 0" % RES)


# ---------------------------------------------------------------------------
# Admission


def test_admission_in_kubelet_order(kubelet, plugins):
    p = plugins(kubelet)
    kubelet.wait_for_plugin(RES)
    del p.calls[:]

    adm = kubelet.admit(RES, 2, namespace="ml", pod="train", container="trainer", check=True)
    assert adm.calls == ["GetPreferredAllocation", "Allocate", "PreStartContainer"]
    assert p.methods() == adm.calls
    pref = adm.preferred_request.container_requests
    assert len(pref) == 1
    assert sorted(pref[0].available_deviceIDs) == IDS
    assert list(pref[0].must_include_deviceIDs) == [] and pref[0].allocation_size == 2
    # The kubelet followed the plugin's preference (the two highest IDs).
    assert sorted(adm.devices) == ["tiny-2", "tiny-3"]
    alloc = p.calls[1][1]
    assert len(alloc.container_requests) == 1
    assert sorted(alloc.container_requests[0].devices_ids) == ["tiny-2", "tiny-3"]
    assert adm.envs == {"TINY_DEVICES": "tiny-2,tiny-3"}
    assert adm.container_response.mounts[0].read_only
    assert sorted(p.calls[2][1].devices_ids) == ["tiny-2", "tiny-3"]
    # At PreStartContainer time the kubelet's PodResources already lists the container.
    assert p.owners == [("ml", "train", "trainer")]
    assert kubelet.pod_resources()["ml/train"] == {"trainer": {RES: adm.devices}}

    # The next container gets only what is left.
    adm2 = kubelet.admit(RES, 2, namespace="ml", pod="infer", container="server", check=True)
    assert sorted(adm2.preferred_request.container_requests[0].available_deviceIDs) == \
        ["tiny-0", "tiny-1"]
    assert sorted(adm2.devices) == ["tiny-0", "tiny-1"]
    adm3 = kubelet.admit(RES, 1, pod="late")
    assert adm3.stage == "kubelet" and "Available: 0" in adm3.error and adm3.calls == []

    # A container restart: PreStartContainer again, no new Allocate.
    n = len(p.calls)
    kubelet.start_container(adm)
    assert p.methods()[n:] == ["PreStartContainer"]
    assert adm.calls[-1] == "PreStartContainer" and len(adm.prestart_requests) == 2

    # The pod goes: its devices are free again.
    kubelet.remove_pod("ml", "train")
    assert kubelet.admit(RES, 2, pod="again", check=True).ok


def test_admission_while_the_image_pulls(kubelet, plugins):
    """start=False: Allocate and no PreStartContainer (the image is pulling);
    PodResources List already shows the container's IDs, as the kubelet's
    device manager records them at admission. start_container later makes
    the one PreStartContainer."""
    p = plugins(kubelet)
    kubelet.wait_for_plugin(RES)
    del p.calls[:]
    adm = kubelet.admit(RES, 2, namespace="ml", pod="pull", container="main", start=False,
                        check=True)
    assert adm.calls == ["GetPreferredAllocation", "Allocate"] and p.methods() == adm.calls
    assert flatten(list_pods(kubelet)) == {"ml/pull": {"main": {RES: sorted(adm.devices)}}}
    kubelet.start_container(adm, check=True)
    assert p.methods() == ["GetPreferredAllocation", "Allocate", "PreStartContainer"]


def test_admission_without_optional_calls(kubelet, plugins):
    p = plugins(kubelet, pre_start=False, preferred=False)
    kubelet.wait_for_plugin(RES)
    del p.calls[:]
    adm = kubelet.admit(RES, 3, check=True)
    assert adm.calls == ["Allocate"] and p.methods() == ["Allocate"]
    # Without a preference the kubelet takes the available IDs in sorted order.
    assert sorted(adm.devices) == ["tiny-0", "tiny-1", "tiny-2"]


def test_admission_errors(kubelet, plugins):
    p = plugins(kubelet)
    kubelet.wait_for_plugin(RES)
    p.allocate_error = (grpc.StatusCode.FAILED_PRECONDITION, "no card for these IDs")
    adm = kubelet.admit(RES, 4, pod="a")
    assert (adm.stage, adm.code, adm.error) == ("Allocate", grpc.StatusCode.FAILED_PRECONDITION,
                                                "no card for these IDs")
    assert adm.calls == ["GetPreferredAllocation", "Allocate"]
    with pytest.raises(fake_kubelet.AdmissionError):
        kubelet.admit(RES, 1, pod="b", check=True)

    p.allocate_error = None
    p.allocate_empty = True
    adm = kubelet.admit(RES, 4, pod="c")
    assert adm.stage == "Allocate" and adm.error.startswith("no containers return")
    assert kubelet.pod_resources() == {}

    p.allocate_empty = False
    assert kubelet.admit(RES, 4, pod="d", check=True).ok  # nothing leaked from the failures
    assert kubelet.admit(RES, 1, pod="e").error.endswith("Available: 0")


def test_unregistered_resource(kubelet):
    adm = kubelet.admit("example.com/none", 1)
    assert adm.stage == "kubelet" and adm.error == \
        "cannot allocate unregistered device example.com/none"


# ---------------------------------------------------------------------------
# Restart


def test_restart_wipes_sockets_and_plugin_registers_again(kubelet, plugins):
    p = plugins(kubelet)
    p.watch_for_restart(kubelet.kubelet_socket)
    first = kubelet.wait_for_plugin(RES)
    adm = kubelet.admit(RES, 1, pod="running", check=True)
    keep = os.path.join(kubelet.plugin_dir, "notes.txt")
    with open(keep, "w") as f:
        f.write("not a socket")

    kubelet.restart()
    assert kubelet.plugins.get(RES) is not first
    second = kubelet.wait_for_plugin(RES, timeout=10)
    assert second is not first and first.stream_ended
    assert kubelet.wait_for_registration(2).ok
    eventually(lambda: p.registrations == 2)  # its Register call has returned
    assert p.streams_ended >= 1  # the plugin saw its first stream go
    assert os.path.exists(keep)
    assert os.path.exists(os.path.join(kubelet.plugin_dir, "kubelet_internal_checkpoint"))
    assert kubelet.restarts == 1

    # Running pods survive; the new connection serves admissions.
    assert kubelet.pod_resources()["default/running"] == {"main": {RES: adm.devices}}
    adm2 = kubelet.admit(RES, 3, pod="after", check=True)
    assert not set(adm2.devices) & set(adm.devices)


def test_restart_deletes_every_socket(kubelet, plugins):
    p = plugins(kubelet)  # no watcher: nobody re-registers
    kubelet.wait_for_plugin(RES)
    kubelet.restart()
    assert not os.path.exists(p.socket)
    assert os.path.exists(kubelet.kubelet_socket)
    assert kubelet.plugins == {}
    assert kubelet.admit(RES, 1).error == "cannot allocate unregistered device " + RES


# ---------------------------------------------------------------------------
# PodResources


def list_pods(kubelet):
    with fake_kubelet.unix_channel(kubelet.pod_resources_socket) as ch:
        return fake_kubelet.PodResourcesListerStub(ch).List(pr.ListPodResourcesRequest(),
                                                           timeout=5)


def flatten(resp):
    """ns/pod -> container -> resource -> sorted IDs, gathered over all entries."""
    out = {}
    for p in resp.pod_resources:
        pod = out.setdefault("%s/%s" % (p.namespace, p.name), {})
        for c in p.containers:
            cont = pod.setdefault(c.name, {})
            for d in c.devices:
                cont.setdefault(d.resource_name, []).extend(d.device_ids)
    for pod in out.values():
        for cont in pod.values():
            for r in cont:
                cont[r].sort()
    return out


def test_pod_resources(kubelet, plugins):
    plugins(kubelet, devices=[
        dp.Device(ID="tiny-0", health="Healthy",
                  topology=dp.TopologyInfo(nodes=[dp.NUMANode(ID=1)])),
        dp.Device(ID="tiny-1", health="Healthy"),
        dp.Device(ID="tiny-2", health="Unhealthy")])
    kubelet.wait_for_plugin(RES)
    state = {"ml-team/train-job-0": {"trainer": {RES: ["tiny-0", "tiny-1"]}, "sidecar": {}},
             "serving/infer": {"server": {RES: ["tiny-2"], "example.com/other": ["x"]}}}
    kubelet.set_pod_resources(state)
    assert kubelet.pod_resources() == state

    resp = list_pods(kubelet)
    assert [(p.namespace, p.name) for p in resp.pod_resources] == \
        [("ml-team", "train-job-0"), ("serving", "infer")]
    assert [c.name for c in resp.pod_resources[0].containers] == ["trainer", "sidecar"]
    assert flatten(resp) == {"ml-team/train-job-0": {"trainer": {RES: ["tiny-0", "tiny-1"]},
                                                     "sidecar": {}},
                             "serving/infer": {"server": {RES: ["tiny-2"],
                                                          "example.com/other": ["x"]}}}
    # The kubelet's shape: one entry per device, with the NUMA node it advertised.
    trainer = resp.pod_resources[0].containers[0].devices
    assert sorted((d.device_ids[0], tuple(n.ID for n in d.topology.nodes)) for d in trainer) == \
        [("tiny-0", (1,)), ("tiny-1", ())]

    # IDs in the state are in use.
    assert kubelet.admit(RES, 1).error.endswith("Available: 0")

    kubelet.allocatable_cpu_ids = [0, 1, 2, 3]
    with fake_kubelet.unix_channel(kubelet.pod_resources_socket) as ch:
        stub = fake_kubelet.PodResourcesListerStub(ch)
        alloc = stub.GetAllocatableResources(pr.AllocatableResourcesRequest(), timeout=5)
        assert sorted(i for d in alloc.devices for i in d.device_ids) == ["tiny-0", "tiny-1"]
        assert list(alloc.cpu_ids) == [0, 1, 2, 3]

        got = stub.Get(pr.GetPodResourcesRequest(pod_name="infer", pod_namespace="serving"),
                       timeout=5)
        assert got.pod_resources.name == "infer" and got.pod_resources.containers[0].name == \
            "server"
        with pytest.raises(grpc.RpcError) as e:
            stub.Get(pr.GetPodResourcesRequest(pod_name="x", pod_namespace="y"), timeout=5)
        assert e.value.details() == "pod x in namespace y not found"

        kubelet.inject_pod_resources_error(grpc.StatusCode.UNAVAILABLE, "kubelet busy")
        with pytest.raises(grpc.RpcError) as e:
            stub.List(pr.ListPodResourcesRequest(), timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        assert stub.List(pr.ListPodResourcesRequest(), timeout=5).pod_resources

        # The kubelet's rate limit (100 qps, burst 10) answers RESOURCE_EXHAUSTED.
        codes = []
        for _ in range(30):
            try:
                stub.List(pr.ListPodResourcesRequest(), timeout=5)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as err:
                codes.append(err.code())
        assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes
    assert kubelet.pod_resources_calls[:4] == ["List", "GetAllocatableResources", "Get", "Get"]
    time.sleep(0.15)  # the bucket refills
    assert list_pods(kubelet).pod_resources
