"""A fake kubelet for testing device plugins over real gRPC (grpcio).

It plays the kubelet's side of the device plugin API v1beta1 and of the
PodResources API v1, as described in ../shared/k8s-wire/deviceplugin_notes.md
and as kubelet's devicemanager does it:

* serves ``v1beta1.Registration/Register`` on ``<plugin_dir>/kubelet.sock``;
  checks ``version`` and ``resource_name`` with the kubelet's error messages,
  joins ``endpoint`` to ``plugin_dir``, dials it (authority ``localhost``,
  blocking, 10 s), and, before ``Register`` returns, calls
  ``GetDevicePluginOptions``; a failure of any step fails the ``Register``
  call;
* after ``Register`` returns, opens ``ListAndWatch`` and keeps the latest full
  device list; when the stream ends, every device of that resource counts as
  unhealthy (the plugin must register again);
* admits containers one at a time the way the kubelet does
  (:meth:`FakeKubelet.admit`): picks from the healthy devices not in use,
  calls ``GetPreferredAllocation`` (only if the plugin's options say so) with
  one container request, takes its preference, calls ``Allocate`` with exactly
  one container request, records the IDs as the container's (PodResources
  ``List`` shows them from then on, as the kubelet's podDevices), then, when
  the container starts (at once, or later with ``start=False``: the image
  pull), ``PreStartContainer`` (only if the options say so); every request,
  response and error is kept in an :class:`Admission`;
* serves ``v1.PodResourcesLister`` (``List``, ``GetAllocatableResources``,
  ``Get``) on ``<pod_resources_dir>/kubelet.sock`` from a state the test sets
  (:meth:`FakeKubelet.set_pod_resources`); a successful admission adds its
  container to that state, as the kubelet's podDevices does;
* :meth:`FakeKubelet.restart` does what a kubelet restart does to the plugin
  directory: both servers go away, every socket in ``plugin_dir`` is deleted
  (the checkpoint file and other plain files stay), and a new ``kubelet.sock``
  is served; plugins must notice and register again.

Like the kubelet it also keeps ``kubelet_internal_checkpoint`` up to date
(written to a temporary file and renamed, after every registration, device
list and admission) and creates the empty ``DEPRECATION`` file at start, so a
plugin that watches the directory with inotify sees the same noise as on a
node. The checkpoint's layout follows the notes; its ``Checksum`` is 0, not
the kubelet's hash: nothing but the kubelet may read that file.

Where the kubelet's order is Go map order (device IDs in requests, entries of
``List``), the fake shuffles with a seeded ``random.Random``, so a plugin that
depends on an order fails here too, reproducibly.

Deviations, all deliberate: the kubelet sets no deadline on
``GetDevicePluginOptions``, ``GetPreferredAllocation`` and ``Allocate``; here
they are bounded by ``rpc_timeout_s`` so a hung plugin fails a test instead of
hanging it. No topology manager: every device is "no affinity", so the
plugin's preference decides (as on a node with the ``none`` policy). Devices
of a failed ``Allocate`` are released at once (the kubelet frees them later).

The Python message classes are generated at import time by running
``protoc --python_out`` on the project's own proto/ files into a temporary
directory; the gRPC glue is written here by hand with
``grpc.method_handlers_generic_handler`` and ``channel.unary_unary`` /
``unary_stream``, and is exported for tests that play the plugin:
:func:`device_plugin_handler`, :func:`registration_handler`,
:func:`pod_resources_handler`, :class:`RegistrationStub`,
:class:`DevicePluginStub`, :class:`PodResourcesListerStub`.
"""
import base64
import dataclasses
import importlib.util
import json
import os
import random
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures
from typing import Callable, Dict, List, Optional

import grpc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROTO_DIR = os.path.join(ROOT, "proto")

# Constants of k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/constants.go.
VERSION = "v1beta1"
SUPPORTED_VERSIONS = ["v1beta1"]
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
KUBELET_SOCKET = "kubelet.sock"
CHECKPOINT_FILE = "kubelet_internal_checkpoint"
DEPRECATION_FILE = "DEPRECATION"
PRE_START_TIMEOUT_S = 30  # KubeletPreStartContainerRPCTimeoutInSecs
DIAL_TIMEOUT_S = 10  # the kubelet's blocking dial of a plugin

# The kubelet's defaults for the PodResources rate limit.
POD_RESOURCES_QPS = 100
POD_RESOURCES_BURST = 10


# --------------------------------------------------------------------------
# Message classes, generated from proto/ at import time


def _generate_messages():
    """Runs protoc --python_out on proto/ and imports the two _pb2 modules."""
    out = tempfile.mkdtemp(prefix="egpu-fake-kubelet-pb-")
    files = ["deviceplugin/v1beta1/api.proto", "podresources/v1/api.proto"]
    try:
        subprocess.run(["protoc", "-I" + PROTO_DIR, "--python_out=" + out] + files,
                       check=True, capture_output=True, text=True)
    except FileNotFoundError as e:
        raise ImportError("fake_kubelet needs protoc (Debian package protobuf-compiler)") from e
    except subprocess.CalledProcessError as e:
        raise ImportError("protoc failed on proto/: " + e.stderr) from e
    mods = []
    for name, rel in (("egpu_fake_kubelet_deviceplugin_pb2", "deviceplugin/v1beta1/api_pb2.py"),
                      ("egpu_fake_kubelet_podresources_pb2", "podresources/v1/api_pb2.py")):
        spec = importlib.util.spec_from_file_location(name, os.path.join(out, rel))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        mods.append(mod)
    shutil.rmtree(out, ignore_errors=True)
    return mods


# deviceplugin_pb2 (alias dp): package v1beta1 (RegisterRequest, Device, AllocateRequest, ...).
# podresources_pb2 (alias pr): package v1 (ListPodResourcesResponse, ContainerDevices, ...).
deviceplugin_pb2, podresources_pb2 = _generate_messages()
dp = deviceplugin_pb2
pr = podresources_pb2


# --------------------------------------------------------------------------
# Hand-written gRPC glue (what grpc_tools would generate)

_DP_SERVICE = "v1beta1.DevicePlugin"
_REG_SERVICE = "v1beta1.Registration"
_PR_SERVICE = "v1.PodResourcesLister"

# method name -> (request class, response class, server streaming)
_DP_METHODS = {
    "GetDevicePluginOptions": (dp.Empty, dp.DevicePluginOptions, False),
    "ListAndWatch": (dp.Empty, dp.ListAndWatchResponse, True),
    "GetPreferredAllocation": (dp.PreferredAllocationRequest, dp.PreferredAllocationResponse,
                               False),
    "Allocate": (dp.AllocateRequest, dp.AllocateResponse, False),
    "PreStartContainer": (dp.PreStartContainerRequest, dp.PreStartContainerResponse, False),
}
_REG_METHODS = {"Register": (dp.RegisterRequest, dp.Empty, False)}
_PR_METHODS = {
    "List": (pr.ListPodResourcesRequest, pr.ListPodResourcesResponse, False),
    "GetAllocatableResources": (pr.AllocatableResourcesRequest, pr.AllocatableResourcesResponse,
                                False),
    "Get": (pr.GetPodResourcesRequest, pr.GetPodResourcesResponse, False),
}


def _handler(service: str, methods: dict, servicer) -> grpc.GenericRpcHandler:
    handlers = {}
    for name, (req, resp, streaming) in methods.items():
        fn = getattr(servicer, name, None)
        if fn is None:
            continue
        make = grpc.unary_stream_rpc_method_handler if streaming else \
            grpc.unary_unary_rpc_method_handler
        handlers[name] = make(fn, request_deserializer=req.FromString,
                              response_serializer=resp.SerializeToString)
    return grpc.method_handlers_generic_handler(service, handlers)


def device_plugin_handler(servicer) -> grpc.GenericRpcHandler:
    """gRPC handler for ``v1beta1.DevicePlugin`` (the plugin's side).

    ``servicer`` has methods named like the RPCs, ``fn(request, context)``;
    ``ListAndWatch`` returns an iterator of ``ListAndWatchResponse``. Missing
    methods answer UNIMPLEMENTED."""
    return _handler(_DP_SERVICE, _DP_METHODS, servicer)


def registration_handler(servicer) -> grpc.GenericRpcHandler:
    """gRPC handler for ``v1beta1.Registration`` (``Register(request, context)``)."""
    return _handler(_REG_SERVICE, _REG_METHODS, servicer)


def pod_resources_handler(servicer) -> grpc.GenericRpcHandler:
    """gRPC handler for ``v1.PodResourcesLister`` (List, GetAllocatableResources, Get)."""
    return _handler(_PR_SERVICE, _PR_METHODS, servicer)


class _Stub:
    def __init__(self, channel: grpc.Channel, service: str, methods: dict):
        for name, (req, resp, streaming) in methods.items():
            make = channel.unary_stream if streaming else channel.unary_unary
            setattr(self, name, make("/%s/%s" % (service, name),
                                     request_serializer=req.SerializeToString,
                                     response_deserializer=resp.FromString))


class DevicePluginStub(_Stub):
    """Client of ``v1beta1.DevicePlugin``: ``stub.Allocate(req, timeout=...)``,
    ``stub.ListAndWatch(dp.Empty())`` (an iterator), and so on."""

    def __init__(self, channel: grpc.Channel):
        super().__init__(channel, _DP_SERVICE, _DP_METHODS)


class RegistrationStub(_Stub):
    """Client of ``v1beta1.Registration``: ``stub.Register(dp.RegisterRequest(...))``."""

    def __init__(self, channel: grpc.Channel):
        super().__init__(channel, _REG_SERVICE, _REG_METHODS)


class PodResourcesListerStub(_Stub):
    """Client of ``v1.PodResourcesLister``: ``List``, ``GetAllocatableResources``, ``Get``."""

    def __init__(self, channel: grpc.Channel):
        super().__init__(channel, _PR_SERVICE, _PR_METHODS)


def unix_channel(path: str) -> grpc.Channel:
    """An insecure channel to a unix socket with authority ``localhost``, as the kubelet dials."""
    return grpc.insecure_channel("unix:" + path,
                                 options=[("grpc.default_authority", "localhost")])


# --------------------------------------------------------------------------
# Records kept for tests


@dataclasses.dataclass
class Registration:
    """One ``Register`` call the fake kubelet received."""
    request: "dp.RegisterRequest"
    error: Optional[str] = None  # the gRPC error text returned, None when accepted
    options: Optional["dp.DevicePluginOptions"] = None  # what GetDevicePluginOptions said
    at: float = 0.0  # time.monotonic() when it arrived

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclasses.dataclass
class Admission:
    """What happened when one container was admitted for one resource.

    ``calls`` lists the RPC names made, in order. ``stage`` names where it
    failed: ``"kubelet"`` (before any RPC), ``"GetPreferredAllocation"``,
    ``"Allocate"`` or ``"PreStartContainer"``; None on success."""
    resource: str
    namespace: str
    pod: str
    container: str
    count: int
    calls: List[str] = dataclasses.field(default_factory=list)
    preferred_request: Optional["dp.PreferredAllocationRequest"] = None
    preferred_response: Optional["dp.PreferredAllocationResponse"] = None
    devices: List[str] = dataclasses.field(default_factory=list)  # the IDs given, in request order
    allocate_request: Optional["dp.AllocateRequest"] = None
    allocate_response: Optional["dp.AllocateResponse"] = None
    prestart_requests: List["dp.PreStartContainerRequest"] = dataclasses.field(
        default_factory=list)
    error: Optional[str] = None
    code: Optional[grpc.StatusCode] = None  # gRPC status when an RPC failed
    stage: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def container_response(self) -> Optional["dp.ContainerAllocateResponse"]:
        """``container_responses[0]``, the only one the kubelet uses."""
        if self.allocate_response is None or not self.allocate_response.container_responses:
            return None
        return self.allocate_response.container_responses[0]

    @property
    def envs(self) -> Dict[str, str]:
        c = self.container_response
        return dict(c.envs) if c is not None else {}


class AdmissionError(Exception):
    """Raised by :meth:`FakeKubelet.admit` with ``check=True`` when admission fails."""

    def __init__(self, admission: Admission):
        super().__init__("%s/%s %s: %s failed: %s" % (admission.namespace, admission.pod,
                                                      admission.container, admission.stage,
                                                      admission.error))
        self.admission = admission


class Plugin:
    """The kubelet's view of one registered device plugin (one resource name).

    Attributes: ``resource``, ``endpoint`` (absolute socket path),
    ``options`` (DevicePluginOptions), ``devices`` (latest full list, a list of
    ``dp.Device``), ``updates`` (every list received, oldest first),
    ``stream_ended`` and ``stream_error`` (set when ListAndWatch ends)."""

    def __init__(self, kubelet: "FakeKubelet", resource: str, endpoint: str,
                 channel: grpc.Channel, options):
        self.kubelet = kubelet
        self.resource = resource
        self.endpoint = endpoint
        self.channel = channel
        self.stub = DevicePluginStub(channel)
        self.options = options
        self.devices: List = []
        self.updates: List[List] = []
        self.stream_ended = False
        self.stream_error: Optional[grpc.RpcError] = None
        self._stream = None
        self._closed = False
        self._thread: Optional[threading.Thread] = None

    def healthy_ids(self) -> List[str]:
        """IDs whose health is "Healthy" (none once the stream has ended)."""
        if self.stream_ended:
            return []
        return [d.ID for d in self.devices if d.health == HEALTHY]

    def _start_watch(self):
        self._stream = self.stub.ListAndWatch(dp.Empty())
        self._thread = threading.Thread(target=self._watch, daemon=True,
                                        name="ListAndWatch " + self.resource)
        self._thread.start()

    def _watch(self):
        k = self.kubelet
        try:
            for resp in self._stream:
                with k._cond:
                    self.devices = list(resp.devices)
                    self.updates.append(list(resp.devices))
                    for d in resp.devices:
                        k._topology.setdefault(self.resource, {})[d.ID] = \
                            [n.ID for n in d.topology.nodes] if d.HasField("topology") else []
                    k._cond.notify_all()
                k._write_checkpoint()
        except grpc.RpcError as e:
            self.stream_error = e
        finally:
            with k._cond:
                self.stream_ended = True
                k._cond.notify_all()

    def close(self):
        """Drops the connection (the kubelet going away, or a newer registration)."""
        if self._closed:
            return
        self._closed = True
        if self._stream is not None:
            self._stream.cancel()
        self.channel.close()
        if self._thread is not None:
            self._thread.join(timeout=5)


# --------------------------------------------------------------------------
# The fake kubelet


_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(r"^%s(\.%s)*$" % (_DNS1123_LABEL, _DNS1123_LABEL))
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def is_extended_resource_name(name: str) -> bool:
    """The kubelet's check (v1helper.IsExtendedResourceName): ``domain/name``,
    domain not kubernetes.io, not prefixed ``requests.``, a qualified name."""
    if "/" not in name or name.startswith("requests."):
        return False
    domain, _, short = name.partition("/")
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        return False
    if "/" in short or not short or len(short) > 63 or not _QUALIFIED_NAME.match(short):
        return False
    return len(domain) <= 253 and bool(_DNS1123_SUBDOMAIN.match(domain))


def _go_quote_list(items) -> str:
    return "[" + " ".join('"%s"' % s for s in items) + "]"


class FakeKubelet:
    """The kubelet, as far as a device plugin can tell.

    ``FakeKubelet(plugin_dir)`` serves ``<plugin_dir>/kubelet.sock`` and
    ``<pod_resources_dir>/kubelet.sock`` (default: ``pod-resources`` beside
    ``plugin_dir``, as /var/lib/kubelet/{device-plugins,pod-resources}) once
    :meth:`start` is called; it is also a context manager. Main methods:

    * :meth:`wait_for_plugin`, :meth:`wait_for_devices` - wait for a
      registration, a device list;
    * :meth:`admit`, :meth:`start_container`, :meth:`remove_pod` - the
      container life cycle, in kubelet order;
    * :meth:`set_pod_resources`, :meth:`pod_resources` - what PodResources
      ``List`` answers;
    * :meth:`restart` - a kubelet restart;
    * :meth:`inject_pod_resources_error` - make the next PodResources calls fail.

    Attributes for tests: ``plugins`` (resource -> :class:`Plugin`, current
    registrations), ``registrations`` (every :class:`Registration`, kept across
    restarts), ``admissions`` (every :class:`Admission`), ``pod_resources_calls``
    (method names of PodResources calls served), ``allocatable_cpu_ids`` (what
    GetAllocatableResources reports as CPUs), ``get_enabled`` (the
    KubeletPodResourcesGet gate), ``restarts`` (count).
    """

    def __init__(self, plugin_dir: str, pod_resources_dir: Optional[str] = None, *,
                 seed: int = 0, dial_timeout_s: float = DIAL_TIMEOUT_S,
                 rpc_timeout_s: float = 30.0, rate_limit: bool = True):
        self.plugin_dir = os.path.abspath(plugin_dir)
        if pod_resources_dir is None:
            pod_resources_dir = os.path.join(os.path.dirname(self.plugin_dir), "pod-resources")
        self.pod_resources_dir = os.path.abspath(pod_resources_dir)
        self.dial_timeout_s = dial_timeout_s
        self.rpc_timeout_s = rpc_timeout_s
        self.rate_limit = rate_limit
        self.allocatable_cpu_ids: List[int] = []
        self.get_enabled = True
        self.plugins: Dict[str, Plugin] = {}
        self.registrations: List[Registration] = []
        self.admissions: List[Admission] = []
        self.pod_resources_calls: List[str] = []
        self.restarts = 0
        self._rng = random.Random(seed)
        self._lock = threading.RLock()
        self._admit_lock = threading.Lock()  # the kubelet admits one pod at a time
        self._cond = threading.Condition(self._lock)
        # "ns/pod" -> container -> resource -> [ids]; dicts keep insertion order.
        self._pods: Dict[str, Dict[str, Dict[str, List[str]]]] = {}
        self._pending: Dict[str, set] = {}  # resource -> IDs reserved during Allocate
        self._topology: Dict[str, Dict[str, List[int]]] = {}  # resource -> ID -> NUMA nodes
        self._alloc_resp: Dict[tuple, bytes] = {}  # (ns/pod, container, resource) -> bytes
        self._faults: List[tuple] = []
        self._tokens = float(POD_RESOURCES_BURST)
        self._tokens_at = time.monotonic()
        self._reg_server: Optional[grpc.Server] = None
        self._pr_server: Optional[grpc.Server] = None

    # -- life cycle ---------------------------------------------------------

    @property
    def kubelet_socket(self) -> str:
        """``<plugin_dir>/kubelet.sock``, where plugins call Register."""
        return os.path.join(self.plugin_dir, KUBELET_SOCKET)

    @property
    def pod_resources_socket(self) -> str:
        """``<pod_resources_dir>/kubelet.sock``, the PodResources API."""
        return os.path.join(self.pod_resources_dir, KUBELET_SOCKET)

    def start(self) -> "FakeKubelet":
        """Creates the directories, cleans the plugin directory as the kubelet's
        device manager does at start, writes DEPRECATION, and serves both sockets."""
        os.makedirs(self.plugin_dir, exist_ok=True)
        os.makedirs(self.pod_resources_dir, exist_ok=True)
        self._cleanup_plugin_dir()
        with open(os.path.join(self.plugin_dir, DEPRECATION_FILE), "w"):
            pass
        self._serve()
        return self

    def stop(self):
        """Stops serving and drops every plugin connection (a kubelet that died)."""
        for server in (self._reg_server, self._pr_server):
            if server is not None:
                server.stop(grace=None).wait(5)
        self._reg_server = self._pr_server = None
        with self._lock:
            plugins = list(self.plugins.values())
            self.plugins.clear()
            self._cond.notify_all()
        for p in plugins:
            p.close()

    def restart(self):
        """A kubelet restart: stop, delete every socket in the plugin directory
        (the checkpoint and other plain files stay), serve a new kubelet.sock and
        a new PodResources socket. Registrations are gone; pods keep running, so
        the PodResources state stays."""
        self.stop()
        with self._lock:
            self.restarts += 1
        self._cleanup_plugin_dir()
        self._serve()

    def __enter__(self) -> "FakeKubelet":
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _cleanup_plugin_dir(self):
        # CleanupPluginDirectory: every socket except the checkpoint; directories stay.
        for name in os.listdir(self.plugin_dir):
            path = os.path.join(self.plugin_dir, name)
            if name == CHECKPOINT_FILE:
                continue
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if stat.S_ISSOCK(st.st_mode):
                os.unlink(path)

    def _serve(self):
        for path in (self.kubelet_socket, self.pod_resources_socket):
            if os.path.exists(path):
                os.unlink(path)
        self._reg_server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self._reg_server.add_generic_rpc_handlers([registration_handler(self)])
        self._reg_server.add_insecure_port("unix:" + self.kubelet_socket)
        self._reg_server.start()
        self._pr_server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self._pr_server.add_generic_rpc_handlers([pod_resources_handler(self)])
        self._pr_server.add_insecure_port("unix:" + self.pod_resources_socket)
        self._pr_server.start()

    # -- Registration (served) ----------------------------------------------

    def Register(self, request, context):
        """``v1beta1.Registration/Register``: validate, dial, GetDevicePluginOptions,
        then ListAndWatch (opened as Register returns). Errors are plain Go errors in the
        kubelet, so they reach the plugin as status UNKNOWN with the message."""
        reg = Registration(request=request, at=time.monotonic())
        with self._lock:
            self.registrations.append(reg)
        error = None
        if request.version not in SUPPORTED_VERSIONS:
            error = ("requested API version %s is not supported by kubelet. Supported version "
                     "is %s" % (json.dumps(request.version), _go_quote_list(SUPPORTED_VERSIONS)))
        elif not is_extended_resource_name(request.resource_name):
            error = "the ResourceName %s is invalid" % json.dumps(request.resource_name)
        plugin = None
        if error is None:
            plugin, error = self._connect(request, reg)
        if error is not None:
            with self._cond:
                reg.error = error
                self._cond.notify_all()
            context.abort(grpc.StatusCode.UNKNOWN, error)
        with self._cond:
            old = self.plugins.get(request.resource_name)
            self.plugins[request.resource_name] = plugin
            self._cond.notify_all()
        if old is not None:
            old.close()
        # The kubelet starts the client's ListAndWatch in a goroutine just before
        # Register returns, so the stream may open before the plugin sees the reply.
        plugin._start_watch()
        self._write_checkpoint()
        return dp.Empty()

    def _connect(self, request, reg):
        endpoint = os.path.join(self.plugin_dir, request.endpoint)
        channel = unix_channel(endpoint)
        try:
            grpc.channel_ready_future(channel).result(timeout=self.dial_timeout_s)
        except grpc.FutureTimeoutError:
            channel.close()
            return None, ("failed to dial device plugin: context deadline exceeded "
                          "(endpoint %s)" % endpoint)
        try:
            options = DevicePluginStub(channel).GetDevicePluginOptions(
                dp.Empty(), timeout=self.rpc_timeout_s)
        except grpc.RpcError as e:
            channel.close()
            return None, "failed to get device plugin options: %s" % e.details()
        reg.options = options
        return Plugin(self, request.resource_name, endpoint, channel, options), None

    # -- waiting --------------------------------------------------------------

    def _wait(self, pred: Callable[[], object], timeout: float, what: str):
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                v = pred()
                if v:
                    return v
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("fake kubelet: timed out after %.1f s waiting for %s"
                                       % (timeout, what))
                self._cond.wait(left)

    def wait_for_registration(self, count: int = 1, timeout: float = 10.0) -> Registration:
        """Waits until ``count`` Register calls arrived in all (across restarts)
        and the last one is decided; returns that :class:`Registration`."""
        def done():
            if len(self.registrations) < count:
                return None
            r = self.registrations[count - 1]
            return r if (r.error is not None or r.options is not None) else None
        return self._wait(done, timeout, "registration #%d" % count)

    def wait_for_plugin(self, resource: str, timeout: float = 10.0) -> Plugin:
        """Waits until a plugin for ``resource`` is registered with this kubelet
        instance (since the last restart) and has sent its first device list."""
        def ready():
            p = self.plugins.get(resource)
            return p if p is not None and p.updates else None
        return self._wait(ready, timeout, "plugin %s" % resource)

    def wait_for_devices(self, resource: str, pred: Callable[[List], bool],
                         timeout: float = 10.0) -> List:
        """Waits until the latest device list of ``resource`` satisfies ``pred``
        (called with a list of ``dp.Device``); returns that list."""
        def ok():
            p = self.plugins.get(resource)
            return list(p.devices) if p is not None and p.updates and pred(p.devices) else None
        return self._wait(ok, timeout, "devices of %s" % resource)

    def wait_for_stream_end(self, resource: str, timeout: float = 10.0) -> Plugin:
        """Waits until the ListAndWatch stream of ``resource`` has ended."""
        def ended():
            p = self.plugins.get(resource)
            return p if p is not None and p.stream_ended else None
        return self._wait(ended, timeout, "end of ListAndWatch of %s" % resource)

    # -- admission ------------------------------------------------------------

    def devices_in_use(self, resource: str) -> set:
        """IDs of ``resource`` held by containers in the PodResources state or
        reserved by an Allocate in flight."""
        with self._lock:
            used = set(self._pending.get(resource, ()))
            for containers in self._pods.values():
                for res in containers.values():
                    used.update(res.get(resource, ()))
            return used

    def admit(self, resource: str, count: int, *, namespace: str = "default",
              pod: str = "pod", container: str = "main", must_include=(),
              record: bool = True, start: bool = True, check: bool = False) -> Admission:
        """Admits one container asking ``count`` devices of ``resource``, as the
        kubelet's device manager does, and returns the :class:`Admission`.

        1. available = healthy IDs not in use; fewer than ``count`` fails with
           the kubelet's "requested number of devices unavailable" message.
        2. If the options say get_preferred_allocation_available:
           GetPreferredAllocation with one ContainerPreferredAllocationRequest
           (available incl. ``must_include``, must_include_deviceIDs,
           allocation_size = ``count``). The answer is intersected with the
           available IDs and taken in sorted order (Go's sets.List), then the
           remainder comes from the sorted available IDs.
        3. Allocate with exactly one ContainerAllocateRequest; an empty
           container_responses is an error.
        4. If ``record``, the container joins the PodResources state, at once
           after Allocate returns, as the kubelet's device manager inserts it
           into podDevices (which List reads) in the same call.
        5. If ``start``, :meth:`start_container`: PreStartContainer if
           pre_start_required. On a node the container starts only after its
           image is pulled, which may take minutes: ``start=False`` stops
           here, as a pull in progress, and the test calls
           :meth:`start_container` when the pull is done.

        ``check=True`` raises :class:`AdmissionError` on failure. Admissions are
        serialized, as the kubelet admits pods one at a time."""
        with self._admit_lock:
            adm = self._admit(resource, count, namespace, pod, container, must_include,
                              record, check)
        if adm.ok and adm.stage is None and start and "Allocate" in adm.calls:
            return self.start_container(adm, check=check)
        return adm

    def _admit(self, resource, count, namespace, pod, container, must_include, record, check):
        adm = Admission(resource=resource, namespace=namespace, pod=pod, container=container,
                        count=count)
        with self._lock:
            self.admissions.append(adm)
            plugin = self.plugins.get(resource)
            if plugin is None:
                return self._fail(adm, "kubelet", "cannot allocate unregistered device %s"
                                  % resource, check=check)
            must = [d for d in must_include]
            needed = count - len(must)
            available = set(plugin.healthy_ids()) - self.devices_in_use(resource) - set(must)
            if len(available) < needed:
                return self._fail(adm, "kubelet",
                                  "requested number of devices unavailable for %s. Requested: "
                                  "%d, Available: %d" % (resource, needed, len(available)),
                                  check=check)
            allocated = list(must)
            self._pending.setdefault(resource, set()).update(available)

        def take(candidates):
            nonlocal needed
            for d in sorted(candidates):
                if needed <= 0:
                    break
                if d not in allocated:
                    allocated.append(d)
                    needed -= 1
            return needed <= 0

        done = needed <= 0
        if not done and plugin.options.get_preferred_allocation_available:
            offered = sorted(available | set(must))
            self._rng.shuffle(offered)  # available.UnsortedList()
            must_sent = list(must)
            self._rng.shuffle(must_sent)
            req = dp.PreferredAllocationRequest(container_requests=[
                dp.ContainerPreferredAllocationRequest(available_deviceIDs=offered,
                                                       must_include_deviceIDs=must_sent,
                                                       allocation_size=count)])
            adm.preferred_request = req
            adm.calls.append("GetPreferredAllocation")
            try:
                resp = plugin.stub.GetPreferredAllocation(req, timeout=self.rpc_timeout_s)
            except grpc.RpcError as e:
                self._release_pending(resource, available)
                return self._fail(adm, "GetPreferredAllocation",
                                  "device plugin GetPreferredAllocation rpc failed with err: "
                                  + str(e.details()), e.code(), check)
            adm.preferred_response = resp
            preferred = set(resp.container_responses[0].deviceIDs) \
                if resp.container_responses else set()
            done = take(preferred & available)
        if not done:
            take(available)
        with self._lock:
            self._pending[resource] -= available
            self._pending[resource].update(allocated)

        devs = list(allocated)
        self._rng.shuffle(devs)  # allocDevices.UnsortedList()
        adm.devices = devs
        req = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(
            devices_ids=devs)])
        adm.allocate_request = req
        adm.calls.append("Allocate")
        try:
            resp = plugin.stub.Allocate(req, timeout=self.rpc_timeout_s)
            if not resp.container_responses:
                raise ValueError("no containers return in allocation response %s" % resp)
        except grpc.RpcError as e:
            self._release_pending(resource, allocated)
            return self._fail(adm, "Allocate", str(e.details()), e.code(), check)
        except ValueError as e:
            self._release_pending(resource, allocated)
            return self._fail(adm, "Allocate", str(e), None, check)
        adm.allocate_response = resp
        key = "%s/%s" % (namespace, pod)
        with self._lock:
            self._pending[resource] -= set(allocated)
            if record:
                c = self._pods.setdefault(key, {}).setdefault(container, {})
                c[resource] = list(devs)
                self._alloc_resp[(key, container, resource)] = \
                    resp.container_responses[0].SerializeToString()
        self._write_checkpoint()
        return adm

    def start_container(self, adm: Admission, check: bool = False) -> Admission:
        """A (re)start of the admitted container: PreStartContainer with its device
        IDs if the plugin's options have pre_start_required (30 s timeout, as the
        kubelet); Allocate is never repeated. Returns ``adm``, updated."""
        plugin = self.plugins.get(adm.resource)
        if plugin is None:
            return self._fail(adm, "kubelet", "cannot start container: %s is not registered"
                              % adm.resource, check=check)
        if not plugin.options.pre_start_required:
            return adm
        devs = list(adm.devices)
        self._rng.shuffle(devs)
        req = dp.PreStartContainerRequest(devices_ids=devs)
        adm.prestart_requests.append(req)
        adm.calls.append("PreStartContainer")
        try:
            plugin.stub.PreStartContainer(req, timeout=PRE_START_TIMEOUT_S)
        except grpc.RpcError as e:
            return self._fail(adm, "PreStartContainer", str(e.details()), e.code(), check)
        return adm

    def remove_pod(self, namespace: str, pod: str):
        """The pod is gone: its devices are free and List no longer shows it."""
        key = "%s/%s" % (namespace, pod)
        with self._lock:
            self._pods.pop(key, None)
            for k in [k for k in self._alloc_resp if k[0] == key]:
                del self._alloc_resp[k]
        self._write_checkpoint()

    def _release_pending(self, resource, ids):
        with self._lock:
            self._pending.get(resource, set()).difference_update(ids)

    def _fail(self, adm, stage, error, code=None, check=False):
        adm.stage = stage
        adm.error = error
        adm.code = code
        if check:
            raise AdmissionError(adm)
        return adm

    # -- PodResources state -----------------------------------------------------

    def set_pod_resources(self, pods: Dict[str, Dict[str, Dict[str, List[str]]]]):
        """Replaces what PodResources List answers.

        ``pods`` maps ``"namespace/name"`` to containers, each container to
        ``{resource_name: [device IDs]}`` (``{}`` for a container without
        devices), in the order List should list them. The IDs count as in use
        for :meth:`admit`."""
        with self._lock:
            self._pods = {k: {c: {r: list(ids) for r, ids in res.items()}
                              for c, res in containers.items()}
                          for k, containers in pods.items()}
        self._write_checkpoint()

    def pod_resources(self) -> Dict[str, Dict[str, Dict[str, List[str]]]]:
        """A copy of the PodResources state, in the form set_pod_resources takes."""
        with self._lock:
            return json.loads(json.dumps(self._pods))

    def inject_pod_resources_error(self, code: grpc.StatusCode, details: str, times: int = 1):
        """Makes the next ``times`` PodResources calls fail with ``code``."""
        with self._lock:
            self._faults.extend([(code, details)] * times)

    def _container_devices(self, resource: str, ids) -> list:
        # One ContainerDevices per device and NUMA node, in map order, as the kubelet's
        # containerDevicesFromResourceDeviceInstances builds them.
        out = []
        for d in ids:
            nodes = self._topology.get(resource, {}).get(d)
            if not nodes:
                out.append(pr.ContainerDevices(resource_name=resource, device_ids=[d]))
                continue
            for n in nodes:
                out.append(pr.ContainerDevices(
                    resource_name=resource, device_ids=[d],
                    topology=pr.TopologyInfo(nodes=[pr.NUMANode(ID=n)])))
        return out

    def _pod_message(self, key, containers):
        namespace, _, name = key.partition("/")
        msg = pr.PodResources(name=name, namespace=namespace)
        for cname, res in containers.items():
            devices = []
            for resource, ids in res.items():
                devices.extend(self._container_devices(resource, ids))
            self._rng.shuffle(devices)
            msg.containers.append(pr.ContainerResources(name=cname, devices=devices))
        return msg

    def _pr_gate(self, method, context):
        with self._lock:
            self.pod_resources_calls.append(method)
            if self._faults:
                code, details = self._faults.pop(0)
                context.abort(code, details)
            if self.rate_limit:
                now = time.monotonic()
                self._tokens = min(float(POD_RESOURCES_BURST),
                                   self._tokens + (now - self._tokens_at) * POD_RESOURCES_QPS)
                self._tokens_at = now
                if self._tokens < 1.0:
                    context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")
                self._tokens -= 1.0

    def List(self, request, context):
        """``v1.PodResourcesLister/List``: every pod of the state."""
        self._pr_gate("List", context)
        with self._lock:
            return pr.ListPodResourcesResponse(
                pod_resources=[self._pod_message(k, c) for k, c in self._pods.items()])

    def GetAllocatableResources(self, request, context):
        """``v1.PodResourcesLister/GetAllocatableResources``: the healthy devices of
        every registered resource, and ``allocatable_cpu_ids``."""
        self._pr_gate("GetAllocatableResources", context)
        with self._lock:
            devices = []
            for resource, p in self.plugins.items():
                devices.extend(self._container_devices(resource, p.healthy_ids()))
            self._rng.shuffle(devices)
            return pr.AllocatableResourcesResponse(devices=devices,
                                                   cpu_ids=list(self.allocatable_cpu_ids))

    def Get(self, request, context):
        """``v1.PodResourcesLister/Get`` (gate ``get_enabled``)."""
        self._pr_gate("Get", context)
        if not self.get_enabled:
            context.abort(grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled")
        key = "%s/%s" % (request.pod_namespace, request.pod_name)
        with self._lock:
            if key not in self._pods:
                context.abort(grpc.StatusCode.UNKNOWN, "pod %s in namespace %s not found"
                              % (request.pod_name, request.pod_namespace))
            return pr.GetPodResourcesResponse(pod_resources=self._pod_message(key,
                                                                              self._pods[key]))

    # -- checkpoint -------------------------------------------------------------

    def _write_checkpoint(self):
        try:
            self._write_checkpoint_file()
        except OSError:
            pass  # the directory is being torn down by the test

    def _write_checkpoint_file(self):
        with self._lock:
            if not os.path.isdir(self.plugin_dir):
                return
            entries = []
            for key, containers in self._pods.items():
                for cname, res in containers.items():
                    for resource, ids in res.items():
                        resp = self._alloc_resp.get((key, cname, resource), b"")
                        entries.append({"PodUID": key, "ContainerName": cname,
                                        "ResourceName": resource, "DeviceIDs": {"-1": ids},
                                        "AllocResp": base64.b64encode(resp).decode()})
            registered = {r: [d.ID for d in p.devices] for r, p in self.plugins.items()}
            data = {"Data": {"PodDeviceEntries": entries, "RegisteredDevices": registered},
                    "Checksum": 0}
            fd, tmp = tempfile.mkstemp(prefix="." + CHECKPOINT_FILE, dir=self.plugin_dir)
            with os.fdopen(fd, "w") as f:
                json.dump(data, f)
            os.replace(tmp, os.path.join(self.plugin_dir, CHECKPOINT_FILE))
