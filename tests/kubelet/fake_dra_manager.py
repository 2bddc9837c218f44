"""A fake of the kubelet's DRA manager, for testing DRA kubelet plugins over real gRPC.

It plays the kubelet's side of plugin registration (pluginregistration v1) and of the
DRAPlugin service (v1 and v1beta1) as ../shared/k8s-wire/dra/kubelet_plugin_notes.md
describes the kubelet's plugin watcher, its DRA plugin manager and its DRA manager
(pkg/kubelet/cm/dra) doing it:

* the plugin watcher: the registry directory (made 0755 if missing) and its
  subdirectories are scanned every 0.2 s (the kubelet uses inotify; a scan cannot miss a
  socket either). A unix socket that does not start with ``.`` is registered; a deleted
  socket deregisters its plugin, a re-created one registers again;
* registration (operation_generator.go): ``GetInfo`` with a 1 s deadline; ``type`` must be
  ``DRAPlugin`` (else ``NotifyRegistrationStatus{false, "...no handler registered..."}``);
  the version is the first of the kubelet's own list ``[v1.DRAPlugin, v1beta1.DRAPlugin]``
  that the plugin lists (so v1 wins whenever the plugin offers it, in any order); none, or
  an empty list, fails validation with the kubelet's message; an empty ``endpoint`` means
  the registration socket; a second registration of the same endpoint for the same driver
  is refused; then ``NotifyRegistrationStatus{true}`` with a 5 s deadline. The newest
  registration of a driver is the one used;
* prepare (:meth:`FakeDRAManager.prepare_pod`): the pod's claims (``spec.resourceClaims``
  by ``resourceClaimName``, or for a template the name in ``status.resourceClaimStatuses``)
  are read through the ``get_claim`` callback (the kubelet GETs them); a claim whose
  ``status.reservedFor`` lacks the pod, or that has no allocation, fails the pod before any
  call, as does a driver with no registered plugin. The claims are checkpointed, then the
  claims not already prepared are sent in **one** ``NodePrepareResources`` per driver per
  pod, each with a **45 s** deadline; the response is checked as the kubelet checks it (a UID
  not asked for, a claim's ``error``, a claim missing from the map, a gRPC error), and the
  devices (pool, device, share ID, request names, CDI IDs) are recorded and checkpointed;
* unprepare (:meth:`FakeDRAManager.pod_ended`, :meth:`FakeDRAManager.reconcile`): when the
  **last** pod using a claim has ended, one ``NodeUnprepareResources`` per driver carries
  the claims (45 s deadline); every claim must have an entry, an empty one is success; a
  claim that fails stays, and reconcile tries again (the kubelet does so every 60 s);
* restart: the checkpoint (``<state_dir>/dra_manager_state``, written to a temporary file
  and renamed) keeps claims and their pods but not the "prepared" flag, as the kubelet's
  ``ClaimInfo.prepared`` is not checkpointed; a new manager on the same state dir
  therefore sends ``NodePrepareResources`` again for the claims of the pods it syncs.

Every RPC made is kept in :attr:`FakeDRAManager.calls` (a :class:`Call`), so a test can
count the calls, read the versions, deadlines, requests and responses.

Deviations, all deliberate: no health stream (``DRAResourceHealth``) is opened; a driver
with several live instances uses the newest registration, connected or not; the checkpoint
is JSON of its own layout (nothing but the kubelet reads the real one).

The Python message classes are generated at import time by running ``protoc --python_out``
on the project's own proto/ files (pluginregistration/v1, dra/v1, dra/v1beta1: the
kubelet's field numbers) into a temporary directory, loaded by path; the gRPC glue is
written here with ``grpc.method_handlers_generic_handler`` and ``channel.unary_unary`` and
is exported for tests that play the plugin: :func:`registration_handler`,
:func:`dra_plugin_handler`, :data:`reg`, :data:`dra_v1`, :data:`dra_v1beta1`."""
import dataclasses
import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, Dict, List, Optional

import grpc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROTO_DIR = os.path.join(ROOT, "proto")

PLUGIN_TYPE = "DRAPlugin"                              # pluginregistration/v1/constants.go
V1 = "v1.DRAPlugin"
V1BETA1 = "v1beta1.DRAPlugin"
KUBELET_SERVICES = [V1, V1BETA1]                       # servicesSupportedByKubelet, in order
GET_INFO_TIMEOUT_S = 1.0                               # operation_generator.go
NOTIFY_TIMEOUT_S = 5.0
CALL_TIMEOUT_S = 45.0                                  # defaultClientCallTimeout
DIAL_TIMEOUT_S = 10.0                                  # the registration socket's blocking dial
STATE_FILE = "dra_manager_state"
REG_SUFFIX = "-reg.sock"
SCAN_EVERY_S = 0.2


# --------------------------------------------------------------------------
# Message classes, generated from proto/ at import time


def _generate_messages():
    out = tempfile.mkdtemp(prefix="egpu-fake-dra-pb-")
    files = ["pluginregistration/v1/api.proto", "dra/v1/api.proto", "dra/v1beta1/api.proto"]
    try:
        subprocess.run(["protoc", "-I" + PROTO_DIR, "--python_out=" + out] + files,
                       check=True, capture_output=True, text=True)
    except FileNotFoundError as e:
        raise ImportError("fake_dra_manager needs protoc (Debian package protobuf-compiler)") \
            from e
    except subprocess.CalledProcessError as e:
        raise ImportError("protoc failed on proto/: " + e.stderr) from e
    mods = []
    for name, rel in (("egpu_fake_dra_reg_pb2", "pluginregistration/v1/api_pb2.py"),
                      ("egpu_fake_dra_v1_pb2", "dra/v1/api_pb2.py"),
                      ("egpu_fake_dra_v1beta1_pb2", "dra/v1beta1/api_pb2.py")):
        if name in sys.modules:  # imported twice under two names: one descriptor pool
            mods.append(sys.modules[name])
            continue
        spec = importlib.util.spec_from_file_location(name, os.path.join(out, rel))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        mods.append(mod)
    shutil.rmtree(out, ignore_errors=True)
    return mods


# reg: package pluginregistration (InfoRequest, PluginInfo, RegistrationStatus, ...).
# dra_v1, dra_v1beta1: packages k8s.io.kubelet.pkg.apis.dra.v1 / .v1beta1.
reg, dra_v1, dra_v1beta1 = _generate_messages()

_REG_SERVICE = "pluginregistration.Registration"
_REG_METHODS = {
    "GetInfo": (reg.InfoRequest, reg.PluginInfo),
    "NotifyRegistrationStatus": (reg.RegistrationStatus, reg.RegistrationStatusResponse),
}
_DRA = {V1: ("k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin", dra_v1),
        V1BETA1: ("k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin", dra_v1beta1)}


def _dra_methods(pb):
    return {"NodePrepareResources": (pb.NodePrepareResourcesRequest,
                                     pb.NodePrepareResourcesResponse),
            "NodeUnprepareResources": (pb.NodeUnprepareResourcesRequest,
                                       pb.NodeUnprepareResourcesResponse)}


def _handler(service, methods, servicer):
    handlers = {}
    for name, (req, resp) in methods.items():
        fn = getattr(servicer, name, None)
        if fn is not None:
            handlers[name] = grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=req.FromString,
                response_serializer=resp.SerializeToString)
    return grpc.method_handlers_generic_handler(service, handlers)


def registration_handler(servicer) -> grpc.GenericRpcHandler:
    """gRPC handler for ``pluginregistration.Registration`` (the plugin's side): servicer
    has ``GetInfo(request, context)`` and ``NotifyRegistrationStatus(request, context)``."""
    return _handler(_REG_SERVICE, _REG_METHODS, servicer)


def dra_plugin_handler(servicer, version: str = V1) -> grpc.GenericRpcHandler:
    """gRPC handler for the DRAPlugin service of version (``V1`` or ``V1BETA1``): servicer
    has ``NodePrepareResources`` and ``NodeUnprepareResources`` ``(request, context)``,
    which get and return that version's messages."""
    service, pb = _DRA[version]
    return _handler(service, _dra_methods(pb), servicer)


class _Stub:
    def __init__(self, channel, service, methods):
        for name, (req, resp) in methods.items():
            setattr(self, name, channel.unary_unary(
                f"/{service}/{name}", request_serializer=req.SerializeToString,
                response_deserializer=resp.FromString))


def unix_channel(path: str) -> grpc.Channel:
    """An insecure channel to unix socket path (grpc-go's NewClient("unix:" + path))."""
    return grpc.insecure_channel("unix:" + path)


# --------------------------------------------------------------------------
# Records


@dataclasses.dataclass
class Registration:
    """One registration attempt of the plugin watcher for socket."""
    socket: str
    info: Optional[object] = None        # reg.PluginInfo; None when GetInfo failed
    version: Optional[str] = None        # the DRAPlugin version chosen
    error: Optional[str] = None          # why it failed (sent in the Notify when it got there)
    notified: Optional[bool] = None      # what NotifyRegistrationStatus said, None if not sent
    get_info_timeout_s: float = GET_INFO_TIMEOUT_S
    at: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclasses.dataclass
class Plugin:
    """A registered DRA plugin: driver name, endpoint (absolute socket path), version."""
    driver: str
    endpoint: str
    version: str
    socket: str
    channel: grpc.Channel
    stub: object = None


@dataclasses.dataclass
class Call:
    """One DRAPlugin RPC the manager made."""
    driver: str
    method: str                          # "NodePrepareResources" | "NodeUnprepareResources"
    version: str
    pod_uid: Optional[str]               # the pod of a prepare; None for an unprepare
    claims: List[str]                    # claim UIDs sent, in request order
    timeout_s: float
    request: object = None
    response: object = None
    error: Optional[str] = None          # the kubelet's error text, None on success
    at: float = 0.0


@dataclasses.dataclass
class ClaimInfo:
    """The manager's cache entry for one claim (claiminfo.go)."""
    uid: str
    namespace: str
    name: str
    pods: List[str] = dataclasses.field(default_factory=list)
    drivers: List[str] = dataclasses.field(default_factory=list)
    devices: Dict[str, List[dict]] = dataclasses.field(default_factory=dict)  # driver -> devs
    prepared: bool = False

    def cdi_ids(self, request: Optional[str] = None) -> List[str]:
        """The CDI IDs of the claim's devices (of those serving request, when given)."""
        out = []
        for devs in self.devices.values():
            for d in devs:
                if request is None or not d["requestNames"] or request in d["requestNames"]:
                    out.extend(d["cdiDeviceIDs"])
        return out


class PrepareError(Exception):
    """The pod cannot start: the kubelet's message (``prepare dynamic resources: ...``)."""


def pod_claim_names(pod: dict) -> List[str]:
    """The names of the ResourceClaims pod uses (its spec.resourceClaims: resourceClaimName,
    or for resourceClaimTemplateName the name status.resourceClaimStatuses gives); a
    template claim not yet made is PrepareError, as the kubelet waits for it."""
    statuses = {s["name"]: s.get("resourceClaimName")
                for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
    out = []
    for rc in pod["spec"].get("resourceClaims") or []:
        if rc.get("resourceClaimName"):
            out.append(rc["resourceClaimName"])
        elif rc["name"] in statuses and statuses[rc["name"]]:
            out.append(statuses[rc["name"]])
        elif rc["name"] in statuses:
            continue  # the template made no claim: the pod does not need one
        else:
            raise PrepareError(f"prepare dynamic resources: pod claim {rc['name']}: "
                               "ResourceClaim not created yet")
    return out


# --------------------------------------------------------------------------
# The manager


class FakeDRAManager:
    """The kubelet's DRA manager and plugin watcher for one node (module docstring).

    registry_dir: the plugin registry (the kubelet's /var/lib/kubelet/plugins_registry).
    state_dir: where the checkpoint lives (the same one for a "restarted" manager).
    get_claim(namespace, name): the ResourceClaim (a dict) or None (the kubelet's GET)."""

    def __init__(self, registry_dir: str, state_dir: str,
                 get_claim: Callable[[str, str], Optional[dict]],
                 kubelet_services=None):
        self.registry_dir = registry_dir
        self.state_dir = state_dir
        self.get_claim = get_claim
        self.kubelet_services = list(kubelet_services or KUBELET_SERVICES)
        self.registrations: List[Registration] = []
        self.plugins: Dict[str, List[Plugin]] = {}   # driver -> instances, oldest first
        self.calls: List[Call] = []
        self.claims: Dict[str, ClaimInfo] = {}       # claim UID -> info
        self._seen: Dict[str, tuple] = {}            # socket path -> (inode, ctime)
        self._cond = threading.Condition()
        self._op = threading.Lock()                  # prepares and unprepares: one at a time
        self._stop = threading.Event()
        self._thread = None
        self._load_checkpoint()

    # ---- life cycle -------------------------------------------------------------------

    def start(self) -> "FakeDRAManager":
        os.makedirs(self.registry_dir, mode=0o755, exist_ok=True)
        os.makedirs(self.state_dir, exist_ok=True)
        self._scan()
        self._thread = threading.Thread(target=self._watch, daemon=True,
                                        name="fake-dra-plugin-watcher")
        self._thread.start()
        return self

    def stop(self):
        """The kubelet going away: the watcher stops and every plugin connection closes (the
        checkpoint stays, for a new manager on the same state_dir)."""
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        with self._cond:
            for insts in self.plugins.values():
                for p in insts:
                    p.channel.close()
            self.plugins.clear()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ---- plugin watcher and registration ----------------------------------------------

    def _watch(self):
        while not self._stop.wait(SCAN_EVERY_S):
            try:
                self._scan()
            except OSError:
                pass

    def _sockets(self):
        found = {}
        for d, dirs, files in os.walk(self.registry_dir):
            dirs[:] = [x for x in dirs if not x.startswith(".")]
            for f in files:
                if f.startswith("."):
                    continue
                p = os.path.join(d, f)
                try:
                    st = os.lstat(p)
                except OSError:
                    continue
                if stat.S_ISSOCK(st.st_mode):
                    found[p] = (st.st_ino, st.st_ctime_ns)
        return found

    def _scan(self):
        found = self._sockets()
        for path in list(self._seen):
            if found.get(path) != self._seen[path]:
                self._deregister(path)
                del self._seen[path]
        for path, ident in sorted(found.items()):
            if path not in self._seen:
                self._seen[path] = ident
                self._register(path)

    def _deregister(self, socket_path):
        with self._cond:
            for driver in list(self.plugins):
                keep = []
                for p in self.plugins[driver]:
                    if p.socket == socket_path:
                        p.channel.close()
                    else:
                        keep.append(p)
                if keep:
                    self.plugins[driver] = keep
                else:
                    del self.plugins[driver]
            self._cond.notify_all()

    def choose_version(self, versions) -> str:
        """validateSupportedServices: the first of the kubelet's services the plugin lists;
        ValueError with the kubelet's message when there is none."""
        versions = list(versions)
        if not versions:
            raise ValueError("empty list of supported gRPC services (aka supported versions)")
        for s in self.kubelet_services:
            if s in versions:
                return s
        raise ValueError(f"none of services supported by the plugin ({versions}) are "
                         f"supported by the kubelet ({self.kubelet_services})")

    def _register(self, socket_path):
        r = Registration(socket=socket_path, at=time.monotonic())
        channel = unix_channel(socket_path)
        stub = _Stub(channel, _REG_SERVICE, _REG_METHODS)
        try:
            try:
                grpc.channel_ready_future(channel).result(timeout=DIAL_TIMEOUT_S)
                r.info = stub.GetInfo(reg.InfoRequest(), timeout=GET_INFO_TIMEOUT_S)
            except (grpc.RpcError, grpc.FutureTimeoutError) as e:
                r.error = f"failed to get plugin info using RPC GetInfo at socket " \
                          f"{socket_path}, err: {_status(e)}"
                return
            info = r.info
            if info.type != PLUGIN_TYPE:
                r.error = f"no handler registered for plugin type: {info.type} at socket " \
                          f"{socket_path}"
                self._notify(stub, r, False)
                return
            try:
                if not info.name:
                    raise ValueError("plugin name is empty")
                r.version = self.choose_version(info.supported_versions)
            except ValueError as e:
                r.error = f"RegisterPlugin error -- plugin validation failed with err: {e}"
                self._notify(stub, r, False)
                return
            endpoint = info.endpoint or socket_path
            with self._cond:
                if any(p.endpoint == endpoint for p in self.plugins.get(info.name, [])):
                    r.error = f"RegisterPlugin error -- failed to register plugin at " \
                              f"{endpoint}: already registered"
            if r.error:
                self._notify(stub, r, False)
                return
            dra_channel = unix_channel(endpoint)
            service, pb = _DRA[r.version]
            plugin = Plugin(driver=info.name, endpoint=endpoint, version=r.version,
                            socket=socket_path, channel=dra_channel,
                            stub=_Stub(dra_channel, service, _dra_methods(pb)))
            with self._cond:
                self.plugins.setdefault(info.name, []).append(plugin)
            self._notify(stub, r, True)
        finally:
            channel.close()
            with self._cond:
                self.registrations.append(r)
                self._cond.notify_all()

    def _notify(self, stub, r, ok):
        try:
            stub.NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=ok, error=r.error or ""),
                timeout=NOTIFY_TIMEOUT_S)
            r.notified = ok
        except grpc.RpcError as e:
            if ok:  # the plugin refused our "registered": the kubelet logs it; it stays
                r.notified = ok
            r.error = r.error or f"NotifyRegistrationStatus: {_status(e)}"

    def plugin(self, driver) -> Optional[Plugin]:
        """The instance of driver in use (the newest registration), or None."""
        with self._cond:
            insts = self.plugins.get(driver)
            return insts[-1] if insts else None

    def wait_for_plugin(self, driver, timeout=10.0) -> Plugin:
        """Wait until driver has a registered plugin; TimeoutError with the registrations."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self.plugins.get(driver):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no plugin of driver {driver} registered in {timeout} "
                                       f"s; registrations: {self.registrations}")
                self._cond.wait(left)
            return self.plugins[driver][-1]

    def wait_for_registration(self, count=1, timeout=10.0) -> Registration:
        """Wait until count registration attempts were made; the last one."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.registrations) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(self.registrations)} registrations of {count} "
                                       f"in {timeout} s: {self.registrations}")
                self._cond.wait(left)
            return self.registrations[count - 1]

    # ---- checkpoint -------------------------------------------------------------------

    def _checkpoint(self):
        data = {"version": 1, "claims": [
            {"uid": c.uid, "namespace": c.namespace, "name": c.name, "pods": c.pods,
             "drivers": c.drivers, "devices": c.devices} for c in self.claims.values()]}
        path = os.path.join(self.state_dir, STATE_FILE)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, path)

    def _load_checkpoint(self):
        try:
            with open(os.path.join(self.state_dir, STATE_FILE)) as f:
                data = json.load(f)
        except FileNotFoundError:
            return
        for c in data["claims"]:
            self.claims[c["uid"]] = ClaimInfo(uid=c["uid"], namespace=c["namespace"],
                                              name=c["name"], pods=list(c["pods"]),
                                              drivers=list(c["drivers"]),
                                              devices=dict(c["devices"]), prepared=False)

    # ---- prepare ----------------------------------------------------------------------

    def prepare_pod(self, pod: dict) -> Dict[str, ClaimInfo]:
        """Prepare the claims of pod (a Pod dict) as the kubelet does before the pod's
        containers start (module docstring): {claim name: ClaimInfo}. PrepareError with the
        kubelet's message when the pod cannot start (its prepared claims stay prepared)."""
        with self._op:
            return self._prepare_pod(pod)

    def _prepare_pod(self, pod):
        pod_uid = pod["metadata"]["uid"]
        ns = pod["metadata"]["namespace"]
        pod_key = f"{ns}/{pod['metadata']['name']}"
        infos, objs = {}, {}
        for name in pod_claim_names(pod):
            claim = self.get_claim(ns, name)
            if claim is None:
                raise PrepareError(f"prepare dynamic resources: failed to fetch ResourceClaim "
                                   f"{name} referenced by pod {pod_key}: not found")
            if not any(r.get("uid") == pod_uid
                       for r in claim.get("status", {}).get("reservedFor") or []):
                raise PrepareError(f"prepare dynamic resources: pod {pod_key} ({pod_uid}) is "
                                   f"not allowed to use ResourceClaim {name} "
                                   f"({claim['metadata']['uid']})")
            alloc = claim.get("status", {}).get("allocation")
            if not alloc:
                raise PrepareError(f"prepare dynamic resources: ResourceClaim {name} is not "
                                   "allocated")
            drivers = []
            for res in alloc.get("devices", {}).get("results") or []:
                if res["driver"] not in drivers:
                    drivers.append(res["driver"])
            for d in drivers:
                if self.plugin(d) is None:
                    raise PrepareError(f"prepare dynamic resources: DRA driver {d} is not "
                                       "registered")
            objs[name] = claim
            uid = claim["metadata"]["uid"]
            info = self.claims.get(uid)
            if info is None:
                info = self.claims[uid] = ClaimInfo(uid=uid, namespace=ns, name=name,
                                                    drivers=drivers)
            if pod_uid not in info.pods:
                info.pods.append(pod_uid)
            infos[name] = info
        self._checkpoint()  # before the calls, as the kubelet

        by_driver: Dict[str, List[ClaimInfo]] = {}
        for info in infos.values():
            if info.prepared:
                continue
            for d in info.drivers:
                by_driver.setdefault(d, []).append(info)
        try:
            for driver, claims in by_driver.items():
                self._prepare_call(driver, pod_uid, claims)
        finally:
            self._checkpoint()
        self._checkpoint()
        return infos

    def _prepare_call(self, driver, pod_uid, claims):
        plugin = self.plugin(driver)
        pb = _DRA[plugin.version][1]
        req = pb.NodePrepareResourcesRequest(claims=[
            pb.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims])
        call = Call(driver=driver, method="NodePrepareResources", version=plugin.version,
                    pod_uid=pod_uid, claims=[c.uid for c in claims], timeout_s=CALL_TIMEOUT_S,
                    request=req, at=time.monotonic())
        with self._cond:
            self.calls.append(call)
        try:
            resp = call.response = plugin.stub.NodePrepareResources(req,
                                                                     timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as e:
            call.error = f"NodePrepareResources: {_status(e)}"
            raise PrepareError(f"prepare dynamic resources: {call.error}") from None
        asked = {c.uid: c for c in claims}
        errs = []
        for uid, r in resp.claims.items():
            c = asked.get(uid)
            if c is None:
                errs.append(f"NodePrepareResources returned result for unknown claim UID {uid}")
                continue
            if r.error:
                errs.append(f"NodePrepareResources failed for ResourceClaim {c.name}: "
                            f"{r.error}")
                continue
            c.devices[driver] = [{
                "requestNames": list(d.request_names), "poolName": d.pool_name,
                "deviceName": d.device_name, "cdiDeviceIDs": list(d.cdi_device_ids),
                "shareID": (d.share_id if plugin.version == V1 and d.HasField("share_id")
                            else None)} for d in r.devices]
            c.prepared = all(d in c.devices for d in c.drivers)  # as the kubelet, at once
        missing = [u for u in asked if u not in resp.claims]
        if missing:
            errs.append(f"NodePrepareResources skipped {len(missing)} ResourceClaims")
        if errs:
            call.error = "; ".join(errs)
            raise PrepareError(f"prepare dynamic resources: {call.error}")

    # ---- unprepare --------------------------------------------------------------------

    def pod_ended(self, pod_uid: str) -> List[str]:
        """Pod pod_uid has terminated: it drops its references, and the claims no pod uses
        any more are unprepared (one call per driver). The UIDs unprepared; a claim that
        failed stays (see reconcile)."""
        with self._op:
            for c in self.claims.values():
                if pod_uid in c.pods:
                    c.pods.remove(pod_uid)
            self._checkpoint()
            return self._unprepare_unused()

    def reconcile(self, active_pod_uids) -> List[str]:
        """The kubelet's reconcile loop: every claim's pods not in active_pod_uids are
        dropped, and claims left without pods are unprepared. The UIDs unprepared."""
        active = set(active_pod_uids)
        with self._op:
            for c in self.claims.values():
                c.pods = [p for p in c.pods if p in active]
            self._checkpoint()
            return self._unprepare_unused()

    def _unprepare_unused(self):
        unused = [c for c in self.claims.values() if not c.pods]
        by_driver: Dict[str, List[ClaimInfo]] = {}
        for c in unused:
            for d in c.drivers:
                by_driver.setdefault(d, []).append(c)
        failed = set()
        for driver, claims in by_driver.items():
            failed |= self._unprepare_call(driver, claims)
        done = []
        for c in unused:
            if c.uid not in failed:
                del self.claims[c.uid]
                done.append(c.uid)
        self._checkpoint()
        return done

    def _unprepare_call(self, driver, claims):
        plugin = self.plugin(driver)
        uids = {c.uid for c in claims}
        if plugin is None:
            with self._cond:
                self.calls.append(Call(driver=driver, method="NodeUnprepareResources",
                                       version="", pod_uid=None, claims=sorted(uids),
                                       timeout_s=0, error=f"DRA driver {driver} is not "
                                       "registered", at=time.monotonic()))
            return uids
        pb = _DRA[plugin.version][1]
        req = pb.NodeUnprepareResourcesRequest(claims=[
            pb.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims])
        call = Call(driver=driver, method="NodeUnprepareResources", version=plugin.version,
                    pod_uid=None, claims=[c.uid for c in claims], timeout_s=CALL_TIMEOUT_S,
                    request=req, at=time.monotonic())
        with self._cond:
            self.calls.append(call)
        try:
            resp = call.response = plugin.stub.NodeUnprepareResources(req,
                                                                       timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as e:
            call.error = f"NodeUnprepareResources: {_status(e)}"
            return uids
        failed, errs = set(), []
        for c in claims:
            if c.uid not in resp.claims:
                failed.add(c.uid)
                errs.append(f"NodeUnprepareResources skipped ResourceClaim {c.name}")
            elif resp.claims[c.uid].error:
                failed.add(c.uid)
                errs.append(f"NodeUnprepareResources failed for ResourceClaim {c.name}: "
                            f"{resp.claims[c.uid].error}")
        if errs:
            call.error = "; ".join(errs)
        return failed

    # ---- queries ----------------------------------------------------------------------

    def calls_of(self, method=None, driver=None) -> List[Call]:
        with self._cond:
            return [c for c in self.calls if (method is None or c.method == method) and
                    (driver is None or c.driver == driver)]

    def cdi_devices(self, pod: dict, claim_name: Optional[str] = None,
                    request: Optional[str] = None) -> List[str]:
        """The CDI IDs the kubelet would give pod's container (CRI cdi_devices) for its claim
        claim_name (all the pod's claims when None), request narrowing as
        resources.claims[].request does."""
        out = []
        for name in pod_claim_names(pod):
            if claim_name is not None and name != claim_name:
                continue
            for c in self.claims.values():
                if c.name == name and c.namespace == pod["metadata"]["namespace"]:
                    out.extend(c.cdi_ids(request))
        return out


def _status(e) -> str:
    if isinstance(e, grpc.RpcError) and hasattr(e, "code"):
        return f"rpc error: code = {e.code().name} desc = {e.details()}"
    return f"timed out ({e.__class__.__name__})"
