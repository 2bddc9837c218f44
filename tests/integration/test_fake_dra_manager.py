"""The fake DRA manager (tests/kubelet/fake_dra_manager.py) against a tiny DRA plugin.

The agent's DRA tests trust the fake manager to call a plugin as the kubelet's DRA manager
does (../shared/k8s-wire/dra/kubelet_plugin_notes.md), so this file proves it with a plugin
written here in Python, over real unix sockets and real gRPC (grpcio on both sides):

* registration: GetInfo (1 s deadline), the version chosen (v1.DRAPlugin over
  v1beta1.DRAPlugin in either order, v1beta1 alone, nothing known refused with the
  kubelet's message in NotifyRegistrationStatus), a type that is not DRAPlugin refused;
  a deleted socket deregisters, a re-created one registers again; dot files are skipped;
* prepare: one NodePrepareResources per driver per pod carrying all the pod's claims of
  that driver, with the 45 s deadline; a claim already prepared is not sent again for a
  second pod; a claim's error, a skipped claim, a gRPC error and a pod missing from
  reservedFor fail the pod with the kubelet's messages; the CDI IDs are recorded;
* unprepare: only after the last pod using the claim ends, batched per driver; a failed
  unprepare is tried again by reconcile;
* restart: a new manager on the same state dir prepares the claims of running pods again
  and gets the same CDI IDs, and unprepares from its checkpoint;
* the deadline ends a prepare the plugin does not answer in time."""
import os
import pathlib
import shutil
import sys
import tempfile
import threading
import time
from concurrent import futures

import grpc
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "kubelet"))

import fake_dra_manager as fdm  # noqa: E402
from fake_dra_manager import FakeDRAManager, PrepareError  # noqa: E402

DRIVER = "gpu.example.com"
OTHER = "net.example.com"


class TinyDRAPlugin:
    """A DRA kubelet plugin in a few lines: registration on <registry>/<driver>-reg.sock,
    DRAPlugin (the versions given) on <plugin dir>/dra.sock; prepare answers one device
    per claim with CDI ID k8s.<driver>/claim=<uid>-dev (the same every time: idempotent),
    records every call with its deadline. fail: claim UID -> error text to answer."""

    def __init__(self, base, driver=DRIVER, versions=(fdm.V1, fdm.V1BETA1), type_="DRAPlugin",
                 serve=None, skip=()):
        self.driver = driver
        self.versions = list(versions)
        self.type = type_
        self.dir = os.path.join(base, "plugins", driver)
        os.makedirs(self.dir, exist_ok=True)
        self.endpoint = os.path.join(self.dir, "dra.sock")
        self.reg_socket = os.path.join(base, "registry", driver + fdm.REG_SUFFIX)
        self.calls = []          # (method path, claim UIDs, time remaining at arrival)
        self.get_info = []       # time remaining of each GetInfo
        self.notified = []       # RegistrationStatus received
        self.fail = {}
        self.skip = set(skip)
        self.grpc_error = None
        self.hang_s = 0  # seconds each DRAPlugin call sleeps before answering
        self.lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers([fdm.registration_handler(self)])
        for v in serve if serve is not None else self.versions:
            if v in (fdm.V1, fdm.V1BETA1):
                self.server.add_generic_rpc_handlers(
                    [fdm.dra_plugin_handler(_Versioned(self, v), v)])
        self.server.add_insecure_port("unix:" + self.endpoint)

    def start(self):
        self.server.start()
        self.register()
        return self

    def register(self):
        os.makedirs(os.path.dirname(self.reg_socket), exist_ok=True)
        self.reg_server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.reg_server.add_generic_rpc_handlers([fdm.registration_handler(self)])
        self.reg_server.add_insecure_port("unix:" + self.reg_socket)
        self.reg_server.start()

    def unregister(self):
        self.reg_server.stop(0)
        if os.path.exists(self.reg_socket):
            os.unlink(self.reg_socket)

    def stop(self):
        self.unregister()
        self.server.stop(0)

    # registration
    def GetInfo(self, request, context):
        self.get_info.append(context.time_remaining())
        return fdm.reg.PluginInfo(type=self.type, name=self.driver, endpoint=self.endpoint,
                                  supported_versions=self.versions)

    def NotifyRegistrationStatus(self, request, context):
        self.notified.append(request)
        return fdm.reg.RegistrationStatusResponse()

    def of(self, method):
        with self.lock:
            return [c for c in self.calls if c[0].endswith("/" + method)]


class _Versioned:
    def __init__(self, plugin, version):
        self.p, self.v = plugin, version
        self.pb = fdm.dra_v1 if version == fdm.V1 else fdm.dra_v1beta1
        self.service = fdm._DRA[version][0]

    def _record(self, method, request, context):
        with self.p.lock:
            self.p.calls.append((f"/{self.service}/{method}", [c.uid for c in request.claims],
                                 context.time_remaining()))
        if self.p.hang_s:
            time.sleep(self.p.hang_s)
        if self.p.grpc_error:
            context.abort(grpc.StatusCode.UNAVAILABLE, self.p.grpc_error)

    def NodePrepareResources(self, request, context):
        self._record("NodePrepareResources", request, context)
        resp = self.pb.NodePrepareResourcesResponse()
        for c in request.claims:
            if c.uid in self.p.skip:
                continue
            if c.uid in self.p.fail:
                resp.claims[c.uid].error = self.p.fail[c.uid]
                continue
            d = resp.claims[c.uid].devices.add(
                request_names=["gpu"], pool_name="node-1", device_name="gpu-0",
                cdi_device_ids=[f"k8s.{self.p.driver}/claim={c.uid}-gpu-0"])
            if self.v == fdm.V1:
                d.share_id = "share-" + c.uid
        return resp

    def NodeUnprepareResources(self, request, context):
        self._record("NodeUnprepareResources", request, context)
        resp = self.pb.NodeUnprepareResourcesResponse()
        for c in request.claims:
            if c.uid in self.p.fail:
                resp.claims[c.uid].error = self.p.fail[c.uid]
            else:
                resp.claims[c.uid].SetInParent()  # an entry with an empty value: success
        return resp


# ---- objects ---------------------------------------------------------------------------


def claim(name, uid, drivers=(DRIVER,), pods=(), ns="ns1"):
    return {"metadata": {"namespace": ns, "name": name, "uid": uid},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": d, "pool": "node-1", "device": "gpu-0"}
                for d in drivers]}},
                "reservedFor": [{"resource": "pods", "name": "p", "uid": p} for p in pods]}}


def pod(name, uid, claim_names, ns="ns1"):
    return {"metadata": {"namespace": ns, "name": name, "uid": uid},
            "spec": {"resourceClaims": [{"name": f"c{i}", "resourceClaimName": n}
                                        for i, n in enumerate(claim_names)]}}


class World:
    """The claims a test's API would hold: get_claim for the manager."""

    def __init__(self, *claims):
        self.claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims}

    def get(self, ns, name):
        return self.claims.get((ns, name))


@pytest.fixture
def base():
    d = tempfile.mkdtemp(prefix="egpu-fdm-")  # short: unix socket paths
    yield d
    shutil.rmtree(d, ignore_errors=True)


def manager(base, world, **kw):
    return FakeDRAManager(os.path.join(base, "registry"), os.path.join(base, "state"),
                          world.get, **kw).start()


def stop_all(*things):
    for t in things:
        t.stop()


# ---- registration ----------------------------------------------------------------------


@pytest.mark.parametrize("versions,want", [
    ([fdm.V1, fdm.V1BETA1], fdm.V1),
    ([fdm.V1BETA1, fdm.V1], fdm.V1),          # the kubelet's preference, not the plugin's
    ([fdm.V1BETA1], fdm.V1BETA1),
    (["v1alpha1.DRAResourceHealth", fdm.V1BETA1], fdm.V1BETA1),
])
def test_registration_chooses_the_version(base, versions, want):
    p = TinyDRAPlugin(base, versions=versions).start()
    m = manager(base, World(claim("a", "uid-a", pods=["pod-1"])))
    try:
        got = m.wait_for_plugin(DRIVER)
        assert got.version == want and got.endpoint == p.endpoint
        r = m.registrations[0]
        assert r.ok and r.notified is True, r
        assert len(p.get_info) == 1 and 0.5 < p.get_info[0] <= 1.1, p.get_info  # 1 s deadline
        assert [n.plugin_registered for n in p.notified] == [True] and not p.notified[0].error
        m.prepare_pod(pod("p", "pod-1", ["a"]))
        (path, uids, _), = p.calls
        assert path == f"/{fdm._DRA[want][0]}/NodePrepareResources" and uids == ["uid-a"]
        info = m.claims["uid-a"]
        share = info.devices[DRIVER][0]["shareID"]
        assert share == ("share-uid-a" if want == fdm.V1 else None), info
    finally:
        stop_all(m, p)


@pytest.mark.parametrize("versions,type_,error", [
    (["v2.DRAPlugin"], "DRAPlugin",
     "RegisterPlugin error -- plugin validation failed with err: none of services supported "
     "by the plugin (['v2.DRAPlugin']) are supported by the kubelet"),
    ([], "DRAPlugin", "plugin validation failed with err: empty list of supported gRPC"),
    ([fdm.V1], "CSIPlugin", "no handler registered for plugin type: CSIPlugin"),
])
def test_registration_refused(base, versions, type_, error):
    p = TinyDRAPlugin(base, versions=versions, type_=type_, serve=[fdm.V1]).start()
    m = manager(base, World())
    try:
        r = m.wait_for_registration()
        assert not r.ok and error in r.error, r
        assert [n.plugin_registered for n in p.notified] == [False]
        assert error in p.notified[0].error, p.notified[0]
        assert m.plugin(DRIVER) is None
    finally:
        stop_all(m, p)


def test_socket_deleted_deregisters_and_recreated_registers(base):
    p = TinyDRAPlugin(base).start()
    # a dot file and a plain file in the registry are not plugins
    open(os.path.join(base, "registry", "notes.txt"), "w").close()
    m = manager(base, World())
    try:
        m.wait_for_plugin(DRIVER)
        p.unregister()
        deadline = time.monotonic() + 10
        while m.plugin(DRIVER) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert m.plugin(DRIVER) is None
        p.register()
        m.wait_for_plugin(DRIVER)
        assert len(m.registrations) == 2 and all(r.ok for r in m.registrations)
        assert len(p.get_info) == 2
    finally:
        stop_all(m, p)


# ---- prepare and unprepare ------------------------------------------------------------


def test_one_call_per_driver_per_pod_with_the_kubelet_deadline(base):
    w = World(claim("a", "uid-a", pods=["pod-1"]), claim("b", "uid-b", pods=["pod-1"]),
              claim("n", "uid-n", drivers=(OTHER,), pods=["pod-1"]))
    g, n = TinyDRAPlugin(base).start(), TinyDRAPlugin(base, driver=OTHER).start()
    m = manager(base, w)
    try:
        m.wait_for_plugin(DRIVER)
        m.wait_for_plugin(OTHER)
        p1 = pod("p1", "pod-1", ["a", "b", "n"])
        infos = m.prepare_pod(p1)
        assert [c[1] for c in g.calls] == [["uid-a", "uid-b"]], g.calls
        assert [c[1] for c in n.calls] == [["uid-n"]], n.calls
        for _, _, left in g.calls + n.calls:
            assert 40 < left <= 45.1, left     # the 45 s deadline reached the plugin
        assert all(c.timeout_s == 45.0 and c.error is None for c in m.calls)
        assert infos["a"].prepared and infos["n"].prepared
        assert m.cdi_devices(p1) == [f"k8s.{DRIVER}/claim=uid-a-gpu-0",
                                     f"k8s.{DRIVER}/claim=uid-b-gpu-0",
                                     f"k8s.{OTHER}/claim=uid-n-gpu-0"]
        assert m.cdi_devices(p1, "b", request="gpu") == [f"k8s.{DRIVER}/claim=uid-b-gpu-0"]
        assert m.cdi_devices(p1, "b", request="other") == []
        # the same pod synced again: everything is prepared, no call
        m.prepare_pod(p1)
        assert len(g.calls) == 1 and len(n.calls) == 1
    finally:
        stop_all(m, g, n)


def test_shared_claim_prepared_once_unprepared_after_the_last_pod(base):
    w = World(claim("a", "uid-a", pods=["pod-1", "pod-2"]), claim("b", "uid-b", pods=["pod-2"]))
    p = TinyDRAPlugin(base).start()
    m = manager(base, w)
    try:
        m.wait_for_plugin(DRIVER)
        m.prepare_pod(pod("p1", "pod-1", ["a"]))
        m.prepare_pod(pod("p2", "pod-2", ["a", "b"]))
        assert [c[1] for c in p.of("NodePrepareResources")] == [["uid-a"], ["uid-b"]]
        assert m.claims["uid-a"].pods == ["pod-1", "pod-2"]
        assert m.pod_ended("pod-1") == []
        assert p.of("NodeUnprepareResources") == []
        assert sorted(m.pod_ended("pod-2")) == ["uid-a", "uid-b"]
        (un,) = p.of("NodeUnprepareResources")   # batched: one call for the driver
        assert sorted(un[1]) == ["uid-a", "uid-b"] and 40 < un[2] <= 45.1, un
        assert m.claims == {}
        assert m.pod_ended("pod-2") == [] and len(p.of("NodeUnprepareResources")) == 1
    finally:
        stop_all(m, p)


def test_failed_unprepare_is_retried_by_reconcile(base):
    p = TinyDRAPlugin(base).start()
    m = manager(base, World(claim("a", "uid-a", pods=["pod-1"])))
    try:
        m.wait_for_plugin(DRIVER)
        m.prepare_pod(pod("p1", "pod-1", ["a"]))
        p.fail["uid-a"] = "device busy"
        assert m.pod_ended("pod-1") == []
        un = m.calls_of("NodeUnprepareResources")[-1]
        assert un.error == "NodeUnprepareResources failed for ResourceClaim a: device busy"
        assert "uid-a" in m.claims
        del p.fail["uid-a"]
        assert m.reconcile([]) == ["uid-a"] and m.claims == {}
        assert len(p.of("NodeUnprepareResources")) == 2
    finally:
        stop_all(m, p)


def test_prepare_errors_use_the_kubelet_messages(base):
    w = World(claim("a", "uid-a", pods=["pod-1"]), claim("b", "uid-b", pods=["pod-1"]),
              claim("x", "uid-x", pods=["someone-else"]),
              claim("o", "uid-o", drivers=("absent.example.com",), pods=["pod-1"]))
    p = TinyDRAPlugin(base).start()
    m = manager(base, w)
    try:
        m.wait_for_plugin(DRIVER)
        with pytest.raises(PrepareError, match=r"pod ns1/p1 \(pod-1\) is not allowed to use "
                                               r"ResourceClaim x"):
            m.prepare_pod(pod("p1", "pod-1", ["x"]))
        with pytest.raises(PrepareError, match="DRA driver absent.example.com is not "
                                               "registered"):
            m.prepare_pod(pod("p1", "pod-1", ["o"]))
        with pytest.raises(PrepareError, match="failed to fetch ResourceClaim nope"):
            m.prepare_pod(pod("p1", "pod-1", ["nope"]))
        assert p.calls == []  # all refused before any call

        p.fail["uid-a"] = "device gpu-7 is not on this node"
        with pytest.raises(PrepareError, match="NodePrepareResources failed for ResourceClaim "
                                               "a: device gpu-7 is not on this node"):
            m.prepare_pod(pod("p1", "pod-1", ["a", "b"]))
        assert [c[1] for c in p.calls] == [["uid-a", "uid-b"]]
        assert not m.claims["uid-a"].prepared and m.claims["uid-b"].prepared
        del p.fail["uid-a"]
        m.prepare_pod(pod("p1", "pod-1", ["a", "b"]))   # the pod worker's retry: only a
        assert [c[1] for c in p.calls][-1] == ["uid-a"]

        w.claims[("ns1", "c")] = claim("c", "uid-c", pods=["pod-1"])
        p.skip.add("uid-c")
        with pytest.raises(PrepareError, match="NodePrepareResources skipped 1 ResourceClaims"):
            m.prepare_pod(pod("p1", "pod-1", ["c"]))
        p.skip.clear()
        p.grpc_error = "plugin is restarting"
        with pytest.raises(PrepareError, match="NodePrepareResources: rpc error: code = "
                                               "UNAVAILABLE desc = plugin is restarting"):
            m.prepare_pod(pod("p1", "pod-1", ["c"]))
    finally:
        stop_all(m, p)


def test_template_claim_name_comes_from_the_pod_status(base):
    w = World(claim("p1-gpu-x7k2q", "uid-t", pods=["pod-1"]))
    p = TinyDRAPlugin(base).start()
    m = manager(base, w)
    try:
        m.wait_for_plugin(DRIVER)
        tp = {"metadata": {"namespace": "ns1", "name": "p1", "uid": "pod-1"},
              "spec": {"resourceClaims": [{"name": "gpu",
                                           "resourceClaimTemplateName": "gpu-share"}]}}
        with pytest.raises(PrepareError, match="pod claim gpu: ResourceClaim not created"):
            m.prepare_pod(tp)
        tp["status"] = {"resourceClaimStatuses": [{"name": "gpu",
                                                   "resourceClaimName": "p1-gpu-x7k2q"}]}
        m.prepare_pod(tp)
        assert [c[1] for c in p.calls] == [["uid-t"]]
    finally:
        stop_all(m, p)


def test_restart_prepares_running_pods_again_with_the_same_ids(base):
    w = World(claim("a", "uid-a", pods=["pod-1"]), claim("b", "uid-b", pods=["pod-1"]))
    p = TinyDRAPlugin(base).start()
    m = manager(base, w)
    p1 = pod("p1", "pod-1", ["a", "b"])
    try:
        m.wait_for_plugin(DRIVER)
        m.prepare_pod(p1)
        before = m.cdi_devices(p1)
        m.stop()

        # the kubelet restarts: a new manager, the same state dir and plugin
        m = manager(base, w)
        assert set(m.claims) == {"uid-a", "uid-b"}
        assert not any(c.prepared for c in m.claims.values())   # not checkpointed
        m.wait_for_plugin(DRIVER)
        assert len(p.get_info) == 2                            # registered again
        m.prepare_pod(p1)
        assert [c[1] for c in p.of("NodePrepareResources")] == [["uid-a", "uid-b"]] * 2
        assert m.cdi_devices(p1) == before
        m.stop()

        # restarted again, and the pod ends before it is synced: unprepare from the
        # checkpoint alone
        m = manager(base, w)
        m.wait_for_plugin(DRIVER)
        assert sorted(m.pod_ended("pod-1")) == ["uid-a", "uid-b"]
        assert [sorted(c[1]) for c in p.of("NodeUnprepareResources")] == [["uid-a", "uid-b"]]
    finally:
        stop_all(m, p)


def test_the_deadline_ends_a_hung_prepare(base, monkeypatch):
    """The manager's deadline is real: a plugin that answers after it fails the pod with the
    kubelet's DEADLINE_EXCEEDED message (the deadline shortened here from 45 s to 1 s), and
    the claim stays unprepared for the next try."""
    monkeypatch.setattr(fdm, "CALL_TIMEOUT_S", 1.0)
    p = TinyDRAPlugin(base).start()
    m = manager(base, World(claim("a", "uid-a", pods=["pod-1"])))
    try:
        m.wait_for_plugin(DRIVER)
        p.hang_s = 3
        t = time.monotonic()
        with pytest.raises(PrepareError, match="NodePrepareResources: rpc error: code = "
                                               "DEADLINE_EXCEEDED"):
            m.prepare_pod(pod("p1", "pod-1", ["a"]))
        assert time.monotonic() - t < 2.5
        assert 0 < p.calls[0][2] <= 1.1, p.calls   # the plugin saw the 1 s deadline
        assert not m.claims["uid-a"].prepared
        p.hang_s = 0
        m.prepare_pod(pod("p1", "pod-1", ["a"]))
        assert m.claims["uid-a"].prepared and len(p.calls) == 2
    finally:
        stop_all(m, p)
