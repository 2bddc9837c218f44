"""egpu-agent --mode dra (src/agent/dra_mode.c) with fake cards (--fake-gpus 2xA100-80GB),
over real unix sockets and real gRPC, the kubelet's side played by this test with the
protobuf modules protoc makes from proto/ (as tests/kubelet does). Each test runs twice:
against the real control plane (kube-apiserver v1.36.3 from tools/bin, the `kube_api`
fixture; the agent with ServiceAccount egpu-agent-dra's token, so deploy/agent-dra's RBAC is
what is checked, the informer's watch included: no call of the agent is forbidden) and
against the project's test API server (tests/apiserver/server.py, the `fault_api` fixture:
no fault is armed, it is there so the test runs where the control plane is not built):

* the registration socket <registry>/gpu.elasticgpu.io-reg.sock answers GetInfo (type
  DRAPlugin, the driver, the DRAPlugin socket, v1 then v1beta1) and
  NotifyRegistrationStatus; the DRAPlugin socket answers NodePrepareResources (an allocated
  claim gets its CDI device ID and its CDI spec) and NodeUnprepareResources (the spec is
  removed; an unknown claim is success);
* the node's ResourceSlice holds the cards as devices gpu-0 and gpu-1, shared
  (allowMultipleAllocations) with the cores and memory capacities; deleted (as the kubelet
  does at its start and 30 s after the plugin leaves), it is created again within seconds
  with a higher pool generation;
* a card marked unhealthy (--fake-health-file) leaves the slice, and comes back;
* a removed registration socket (a wiped registry dir) and a removed DRAPlugin socket are
  served again;
* SIGTERM exits 0 with both sockets gone (the slice stays for the kubelet to wipe);
* deploy/agent-dra's DeviceClasses are accepted by kube-apiserver and stored whole,
  extendedResourceName included;
* --mode bogus and EGPU_AGENT_MODE=bogus exit 2 naming the flag and the allowed values;
  --mode dra --no-api exits 2; --help lists the DRA mode's flags.

Timeouts are generous (15 s for what takes a loop turn of 200 ms): they hold with the other
core busy."""
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import grpc
import pytest

from conftest import ROOT

DRIVER = "gpu.elasticgpu.io"
NODE = "node-a"
FAKE = "2xA100-80GB"
INTERPOSER = "/opt/egpu-test/libegpu-vcuda.so"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
WAIT_S = 15


def _protos():
    """pluginregistration/v1 and dra/v1 message modules, from proto/ by protoc."""
    out = tempfile.mkdtemp(prefix="egpu-dra-pb-")
    files = {"egpu_test_pluginregistration_pb2": "pluginregistration/v1/api.proto",
             "egpu_test_dra_v1_pb2": "dra/v1/api.proto"}
    try:
        subprocess.run(["protoc", "-I" + str(ROOT / "proto"), "--python_out=" + out,
                        *files.values()], check=True, capture_output=True, text=True)
    except FileNotFoundError:
        pytest.fail("protoc not found (Debian package protobuf-compiler)")
    mods = []
    for name, rel in files.items():
        spec = importlib.util.spec_from_file_location(
            name, os.path.join(out, rel.replace(".proto", "_pb2.py")))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        mods.append(mod)
    shutil.rmtree(out, ignore_errors=True)
    return mods


reg_pb, dra_pb = _protos()


def unary(path, method, request, response_cls, timeout=5):
    """One unary call on the unix socket path, authority localhost (as the kubelet dials)."""
    with grpc.insecure_channel("unix:" + path,
                               options=[("grpc.default_authority", "localhost")]) as ch:
        call = ch.unary_unary(method, request_serializer=lambda m: m.SerializeToString(),
                              response_deserializer=response_cls.FromString)
        return call(request, timeout=timeout)


def get_info(path):
    return unary(path, "/pluginregistration.Registration/GetInfo", reg_pb.InfoRequest(),
                 reg_pb.PluginInfo)


def wait(what, pred, timeout=WAIT_S):
    deadline = time.time() + timeout
    while True:
        v = pred()
        if v:
            return v
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def agent_bin(build_dir):
    b = build_dir / "src/agent/egpu-agent"
    if not b.exists():
        pytest.fail(f"{b} not built")
    return str(b)


class DraAgent:
    """egpu-agent --mode dra in a short temporary base (unix socket paths stay under 108
    bytes), logging to a file."""

    def __init__(self, agent_bin, kubeconfig, extra=()):
        self.base = tempfile.mkdtemp(prefix="egpu-dra-")
        self.registry = os.path.join(self.base, "registry")
        self.socket = os.path.join(self.base, "plugins", DRIVER, "dra.sock")
        self.reg_socket = os.path.join(self.registry, DRIVER + "-reg.sock")
        self.cdi = os.path.join(self.base, "cdi")
        self.alloc = os.path.join(self.base, "alloc")
        self.health = os.path.join(self.base, "health")
        self.log = os.path.join(self.base, "agent.log")
        self.proc = subprocess.Popen(
            [agent_bin, "--mode", "dra", "--kubeconfig", kubeconfig, "--node-name", NODE,
             "--fake-gpus", FAKE, "--fake-health-file", self.health,
             "--dra-socket", self.socket, "--plugin-registry-dir", self.registry,
             "--cdi-dir", self.cdi, "--alloc-root", self.alloc, "--interposer", INTERPOSER,
             "--listen", "127.0.0.1", "--port", "0", *extra],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))
        m = wait("the agent to serve", lambda: self.proc.poll() is None and re.search(
            r"egpu-agent: serving .*?port=(\d+)", self.text()) or self._dead())
        self.url = f"http://127.0.0.1:{m.group(1)}"
        wait("both sockets", lambda: os.path.exists(self.reg_socket)
             and os.path.exists(self.socket) or self._dead())

    def _dead(self):
        assert self.proc.poll() is None, self.text()
        return None

    def text(self):
        with open(self.log) as f:
            return f.read()

    def readyz(self):
        try:
            with urllib.request.urlopen(self.url + "/readyz", timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def metric(self, name):
        """The value of the series name (with its labels, as written) on /metrics."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as r:
            text = r.read().decode()
        m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
        return float(m.group(1)) if m else None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise
        return self.proc.returncode


@pytest.fixture(params=["real", "test"])
def api(request):
    """(Api, the agent's kubeconfig): the real control plane's with egpu-agent-dra's token,
    or the test API server's. The node is made, and its slices are deleted after."""
    if request.param == "real":
        a = request.getfixturevalue("kube_api")
        kubeconfig = a.component_kubeconfig("egpu-agent-dra")
    else:
        a = request.getfixturevalue("fault_api")
        kubeconfig = a.kubeconfig
    a.node(NODE)
    yield a, kubeconfig
    a.call("DELETE", SLICES + f"?fieldSelector=spec.nodeName%3D{NODE}")
    a.call("DELETE", f"/api/v1/nodes/{NODE}")


@pytest.fixture
def dra(api, agent_bin):
    a, kubeconfig = api
    agent = DraAgent(agent_bin, kubeconfig)
    yield a, agent
    try:
        assert agent.stop() == 0, agent.text()
        # Every call it made was allowed (the real control plane checks RBAC: a watch
        # egpu-agent-dra may not make is logged "... is forbidden: User ...").
        assert "forbidden" not in agent.text().lower(), agent.text()
    finally:
        shutil.rmtree(agent.base, ignore_errors=True)


def node_slices(api):
    st, lst = api.call("GET", SLICES + f"?fieldSelector=spec.nodeName%3D{NODE}")
    assert st == 200, lst
    return lst["items"]


def one_slice(api):
    items = node_slices(api)
    return items[0] if len(items) == 1 else None


def devices(sl):
    return [d["name"] for d in sl["spec"]["devices"]]


def test_registration_answers_get_info_and_notify(dra):
    api, agent = dra
    info = get_info(agent.reg_socket)
    assert info.type == "DRAPlugin"
    assert info.name == DRIVER
    assert info.endpoint == agent.socket
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    unary(agent.reg_socket, "/pluginregistration.Registration/NotifyRegistrationStatus",
          reg_pb.RegistrationStatus(plugin_registered=True),
          reg_pb.RegistrationStatusResponse)
    wait("the registration logged", lambda: "kubelet registered the plugin" in agent.text())
    wait("/readyz 200", lambda: agent.readyz() == 200)
    wait("egpu_agent_dra_registered 1", lambda: agent.metric("egpu_agent_dra_registered") == 1)
    assert agent.metric("egpu_agent_dra_get_info_total") >= 1
    assert agent.metric("egpu_agent_gpus") == 2 and agent.metric("egpu_agent_gpus_healthy") == 2
    assert agent.metric("egpu_agent_dra_slice_devices") == 2
    assert agent.metric('egpu_agent_dra_slice_publishes_total{result="ok"}') >= 1
    # The kubelet refusing it: logged with its reason, the gauge back to 0.
    with pytest.raises(grpc.RpcError) as e:
        unary(agent.reg_socket, "/pluginregistration.Registration/NotifyRegistrationStatus",
              reg_pb.RegistrationStatus(plugin_registered=False, error="no such version"),
              reg_pb.RegistrationStatusResponse)
    assert "no such version" in e.value.details()
    wait("the refusal logged", lambda: 'error="no such version"' in agent.text())
    wait("egpu_agent_dra_registered 0", lambda: agent.metric("egpu_agent_dra_registered") == 0)


def test_slice_has_the_cards_shared(dra):
    api, agent = dra
    sl = wait("one slice", lambda: one_slice(api))
    spec = sl["spec"]
    assert spec["driver"] == DRIVER and spec["nodeName"] == NODE
    assert spec["pool"]["name"] == NODE and spec["pool"]["resourceSliceCount"] == 1
    assert devices(sl) == ["gpu-0", "gpu-1"]
    for d in spec["devices"]:
        assert d["allowMultipleAllocations"] is True
        assert d["capacity"]["cores"]["value"] == "100"
        assert d["capacity"]["memory"]["value"] == "80Gi"  # 81920 MiB, a fake A100-80GB
        assert d["attributes"]["uuid"]["string"].startswith("GPU-")
        # what the fake backend tells of an A100 (dra_slice.c's egpu__dra_slice_attributes)
        assert d["attributes"]["architecture"] == {"string": "Ampere"}
        assert d["attributes"]["cudaComputeCapability"] == {"version": "8.0.0"}
        assert d["attributes"]["driverVersion"] == {"version": "570.133.20"}
    owner = sl["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "Node" and owner["name"] == NODE


def test_deleted_slice_is_published_again(dra):
    api, agent = dra
    sl = wait("one slice", lambda: one_slice(api))
    gen = sl["spec"]["pool"]["generation"]
    st, _ = api.call("DELETE", SLICES + "/" + sl["metadata"]["name"])
    assert st == 200
    again = wait("the slice again", lambda: (s := one_slice(api)) and
                 s["metadata"]["name"] != sl["metadata"]["name"] and s)
    assert again["spec"]["pool"]["generation"] > gen
    assert devices(again) == ["gpu-0", "gpu-1"]
    assert "ResourceSlice deleted name=" + sl["metadata"]["name"] in agent.text()
    wait("the republish counted",
         lambda: agent.metric("egpu_agent_dra_slice_republishes_total") >= 1)
    assert agent.metric("egpu_agent_dra_slice_deletions_total") >= 1
    assert agent.metric("egpu_agent_dra_slice_generation") >= again["spec"]["pool"]["generation"]
    # The kubelet's DeleteCollection at its start: the same.
    st, _ = api.call("DELETE", SLICES + f"?fieldSelector=spec.nodeName%3D{NODE}")
    assert st == 200
    third = wait("the slice after a DeleteCollection", lambda: (s := one_slice(api)) and
                 s["metadata"]["name"] != again["metadata"]["name"] and s)
    assert third["spec"]["pool"]["generation"] > again["spec"]["pool"]["generation"]


TAINT_KEY = "gpu.elasticgpu.io/unhealthy"


def taints(sl, name):
    return [t for d in sl["spec"]["devices"] if d["name"] == name for t in d.get("taints", [])]


def test_unhealthy_card_is_tainted(dra):
    """An XID card stays in the slice with a NoSchedule device taint (DRADeviceTaints, on in
    1.36 and in the test API server by default) and loses it when healthy again."""
    api, agent = dra
    wait("one slice", lambda: one_slice(api))
    with open(agent.health, "w") as f:
        f.write("1 unhealthy XID 79\n")
    sl = wait("gpu-1 tainted", lambda: (s := one_slice(api)) and taints(s, "gpu-1") and s)
    assert devices(sl) == ["gpu-0", "gpu-1"]
    # (the real API server adds timeAdded)
    assert [{k: t[k] for k in ("key", "value", "effect")} for t in taints(sl, "gpu-1")] == [
        {"key": TAINT_KEY, "value": "XID-79", "effect": "NoSchedule"}]
    assert taints(sl, "gpu-0") == []
    wait("gpu-1 tainted on /metrics", lambda: slice_state(agent, "gpu-1") == "tainted")
    assert slice_state(agent, "gpu-0") == "published"
    gen = sl["spec"]["pool"]["generation"]
    with open(agent.health, "w") as f:
        f.write("1 healthy\n")
    back = wait("gpu-1 untainted", lambda: (s := one_slice(api)) and not taints(s, "gpu-1") and s)
    assert devices(back) == ["gpu-0", "gpu-1"]
    wait("gpu-1 published on /metrics", lambda: slice_state(agent, "gpu-1") == "published")
    assert back["spec"]["pool"]["generation"] > gen


def test_unhealthy_card_leaves_the_slice_without_taints(fault_api, agent_bin):
    """Where the API server drops device taints (DRADeviceTaints off), the agent sees the
    drop, logs it naming the gate and publishes the slice without the card instead."""
    st, _ = fault_api.control("gates", {"DRADeviceTaints": False})
    assert st == 200
    fault_api.node(NODE)
    agent = DraAgent(agent_bin, fault_api.kubeconfig)
    try:
        wait("one slice", lambda: one_slice(fault_api))
        with open(agent.health, "w") as f:
            f.write("1 unhealthy XID 79\n")
        sl = wait("gpu-1 out", lambda: (s := one_slice(fault_api)) and devices(s) == ["gpu-0"]
                  and s)
        assert taints(sl, "gpu-0") == []
        assert "DRADeviceTaints" in agent.text()
        wait("gpu-1 absent on /metrics", lambda: slice_state(agent, "gpu-1") == "absent")
        gen = sl["spec"]["pool"]["generation"]
        with open(agent.health, "w") as f:
            f.write("1 healthy\n")
        back = wait("gpu-1 back", lambda: (s := one_slice(fault_api)) and len(devices(s)) == 2
                    and s)
        assert back["spec"]["pool"]["generation"] > gen
    finally:
        assert agent.stop() == 0, agent.text()


def test_removed_sockets_are_served_again(dra):
    api, agent = dra
    os.unlink(agent.reg_socket)
    wait("the registration socket again", lambda: os.path.exists(agent.reg_socket))
    assert get_info(agent.reg_socket).name == DRIVER
    shutil.rmtree(agent.registry)  # the whole dir, as a kubelet reinstall might
    wait("the registry dir again", lambda: os.path.exists(agent.reg_socket))
    assert get_info(agent.reg_socket).endpoint == agent.socket
    os.unlink(agent.socket)
    wait("the DRAPlugin socket again", lambda: os.path.exists(agent.socket))
    resp = unary(agent.socket, "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources",
                 dra_pb.NodeUnprepareResourcesRequest(claims=[dra_pb.Claim(
                     namespace="default", uid="0b0c0d0e-0000-4000-8000-000000000001",
                     name="never-prepared")]), dra_pb.NodeUnprepareResourcesResponse)
    assert resp.claims["0b0c0d0e-0000-4000-8000-000000000001"].error == ""


def test_prepare_and_unprepare_a_claim(dra, request):
    """An allocated claim of 30 % and 4 GiB of gpu-0, as kube-scheduler writes it."""
    api, agent = dra
    request_cleanup = request.addfinalizer
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "share", "namespace": "default"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": "gpu-share.elasticgpu.io",
                 "capacity": {"requests": {"cores": "30", "memory": "4Gi"}}}}]}},
             "status": {"allocation": {"devices": {"results": [{
                 "request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-0",
                 "shareID": "9c3e6f0a-51d7-4b2e-8f4a-0d6c2b7e1a95",
                 "consumedCapacity": {"cores": "30", "memory": "4Gi"}}]}}}}
    st, obj = api.call("POST", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims",
                       claim)
    assert st == 201, obj
    path = f"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/{obj['metadata']['name']}"
    request_cleanup(lambda: api.call("DELETE", path))
    if api.real:  # kube-scheduler writes status.allocation through /status
        obj["status"] = claim["status"]
        st, obj = api.call("PUT", path + "/status", obj)
        assert st == 200, obj
    assert obj["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
    uid = obj["metadata"]["uid"]
    req = dra_pb.NodePrepareResourcesRequest(
        claims=[dra_pb.Claim(namespace="default", uid=uid, name="share")])
    method = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/"
    resp = unary(agent.socket, method + "NodePrepareResources", req,
                 dra_pb.NodePrepareResourcesResponse, timeout=45)
    got = resp.claims[uid]
    assert got.error == ""
    assert [d.device_name for d in got.devices] == ["gpu-0"]
    cdi_id = f"k8s.{DRIVER}/claim={uid}-gpu-0"
    assert list(got.devices[0].cdi_device_ids) == [cdi_id]
    spec_file = os.path.join(agent.cdi, f"k8s.{DRIVER}-claim_{uid}.json")
    with open(spec_file) as f:
        spec = json.load(f)
    assert spec["kind"] == f"k8s.{DRIVER}/claim"
    # Again (a kubelet retry): the same ID.
    again = unary(agent.socket, method + "NodePrepareResources", req,
                  dra_pb.NodePrepareResourcesResponse, timeout=45)
    assert list(again.claims[uid].devices[0].cdi_device_ids) == [cdi_id]
    done = unary(agent.socket, method + "NodeUnprepareResources",
                 dra_pb.NodeUnprepareResourcesRequest(claims=req.claims),
                 dra_pb.NodeUnprepareResourcesResponse)
    assert done.claims[uid].error == ""
    assert not os.path.exists(spec_file)


def make_claim(api, request, name, device, cores, memory, share):
    """An allocated claim of cores % and memory of device, as kube-scheduler writes it (its
    spec asks for nothing: the agent reads the allocation results only); its uid."""
    alloc = {"allocation": {"devices": {"results": [{
        "request": "gpu", "driver": DRIVER, "pool": NODE, "device": device, "shareID": share,
        "consumedCapacity": {"cores": cores, "memory": memory}}]}}}
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": name, "namespace": "default"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": "gpu-share.elasticgpu.io",
                 "capacity": {"requests": {"cores": "1", "memory": "1Mi"}}}}]}},
             "status": alloc}
    st, obj = api.call("POST", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims",
                       claim)
    assert st == 201, obj
    path = f"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/{name}"
    request.addfinalizer(lambda: api.call("DELETE", path))
    if api.real:
        obj["status"] = alloc
        st, obj = api.call("PUT", path + "/status", obj)
        assert st == 200, obj
    return obj["metadata"]["uid"]


def scrape(agent):
    """{(name, ((label, value), ...)): value} of the agent's /metrics."""
    with urllib.request.urlopen(agent.url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.fullmatch(r"([A-Za-z_:][\w:]*)(?:\{(.*)\})? (\S+)", line)
        if m:
            labels = tuple(sorted(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or "")))
            out[(m.group(1), labels)] = float(m.group(3))
    return out


def card_series(metrics, name, device):
    """{label: value} -> value of name for device (gpu-N), by its gpu label."""
    got = [(dict(k[1]), v) for k, v in metrics.items()
           if k[0] == name and dict(k[1]).get("device") == device]
    assert len(got) == 1, (name, device, got)
    labels, value = got[0]
    assert labels["gpu"].startswith("GPU-"), labels
    return value


def card_figures(agent, device):
    m = scrape(agent)
    return tuple(card_series(m, n, device) for n in (
        "egpu_agent_dra_gpu_shares", "egpu_agent_dra_gpu_allocated_core_percent",
        "egpu_agent_dra_gpu_allocated_memory_mib"))


def errors(agent, method, reason):
    return scrape(agent).get(("egpu_agent_dra_errors_total",
                              (("method", method), ("reason", reason))), 0.0)


def test_metrics_count_prepared_claims_per_card(dra, request):
    """Two claims of gpu-0 (30 % + 4 GiB, 20 % + 2 GiB) prepared: gpu-0 shows 2 shares, 50 %
    and 6144 MiB, from the agent's claim records; one unprepared: 1, 30 %, 4096 MiB; gpu-1
    stays at 0 and its memory is the card's. A claim naming a device the node lacks, one
    that does not exist and a request that does not decode each count an error with its
    reason."""
    api, agent = dra
    wait("one slice", lambda: one_slice(api))
    a = make_claim(api, request, "share-a", "gpu-0", "30", "4Gi",
                   "1c3e6f0a-51d7-4b2e-8f4a-0d6c2b7e1a01")
    b = make_claim(api, request, "share-b", "gpu-0", "20", "2Gi",
                   "1c3e6f0a-51d7-4b2e-8f4a-0d6c2b7e1a02")
    method = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/"
    # (the series come with the main loop's first turn)
    wait("gpu-0's series", lambda: ("egpu_agent_dra_gpu_shares", (
        ("device", "gpu-0"),)) in {(k[0], tuple(x for x in k[1] if x[0] == "device"))
                                   for k in scrape(agent)})
    assert card_figures(agent, "gpu-0") == (0, 0, 0)
    claims = [dra_pb.Claim(namespace="default", uid=a, name="share-a"),
              dra_pb.Claim(namespace="default", uid=b, name="share-b")]
    resp = unary(agent.socket, method + "NodePrepareResources",
                 dra_pb.NodePrepareResourcesRequest(claims=claims),
                 dra_pb.NodePrepareResourcesResponse, timeout=45)
    assert resp.claims[a].error == "" and resp.claims[b].error == ""
    wait("gpu-0 with two shares", lambda: card_figures(agent, "gpu-0") == (2, 50, 6144))
    assert card_figures(agent, "gpu-1") == (0, 0, 0)
    m = scrape(agent)
    assert m[("egpu_agent_dra_claims_prepared", ())] == 2
    assert card_series(m, "egpu_agent_dra_gpu_memory_mib", "gpu-1") == 81920
    assert m[("egpu_agent_dra_requests_total", (("method", "NodePrepareResources"),))] == 1
    assert m[("egpu_agent_dra_claims_total", (("method", "NodePrepareResources"),))] == 2
    done = unary(agent.socket, method + "NodeUnprepareResources",
                 dra_pb.NodeUnprepareResourcesRequest(claims=claims[1:]),
                 dra_pb.NodeUnprepareResourcesResponse)
    assert done.claims[b].error == ""
    wait("gpu-0 with one share", lambda: card_figures(agent, "gpu-0") == (1, 30, 4096))
    assert scrape(agent)[("egpu_agent_dra_claims_prepared", ())] == 1
    assert scrape(agent)[("egpu_agent_dra_requests_total",
                          (("method", "NodeUnprepareResources"),))] == 1

    # Errors, by reason; the figures stay.
    bad = make_claim(api, request, "share-bad", "gpu-7", "10", "1Gi",
                     "1c3e6f0a-51d7-4b2e-8f4a-0d6c2b7e1a03")
    gone = "1c3e6f0a-0000-4000-8000-00000000dead"
    resp = unary(agent.socket, method + "NodePrepareResources",
                 dra_pb.NodePrepareResourcesRequest(claims=[
                     dra_pb.Claim(namespace="default", uid=bad, name="share-bad"),
                     dra_pb.Claim(namespace="default", uid=gone, name="no-such-claim")]),
                 dra_pb.NodePrepareResourcesResponse, timeout=45)
    assert "gpu-7" in resp.claims[bad].error and resp.claims[gone].error
    wait("the invalid claim counted",
         lambda: errors(agent, "NodePrepareResources", "invalid") == 1)
    assert errors(agent, "NodePrepareResources", "not_found") == 1
    with grpc.insecure_channel("unix:" + agent.socket,
                               options=[("grpc.default_authority", "localhost")]) as ch:
        call = ch.unary_unary(method + "NodeUnprepareResources",
                              request_serializer=lambda m: m,
                              response_deserializer=lambda b: b)
        with pytest.raises(grpc.RpcError) as e:
            call(b"\xff\xff\xff", timeout=5)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    wait("the bad request counted",
         lambda: errors(agent, "NodeUnprepareResources", "bad_request") == 1)
    assert errors(agent, "NodeUnprepareResources", "invalid") == 0
    assert card_figures(agent, "gpu-0") == (1, 30, 4096)


def slice_state(agent, device):
    """The state label whose egpu_agent_dra_gpu_slice_state is 1, for device."""
    on = [dict(k[1])["state"] for k, v in scrape(agent).items()
          if k[0] == "egpu_agent_dra_gpu_slice_state" and dict(k[1])["device"] == device
          and v == 1]
    return on[0] if len(on) == 1 else None


def test_sigterm_removes_both_sockets(api, agent_bin):
    a, kubeconfig = api
    agent = DraAgent(agent_bin, kubeconfig)
    try:
        wait("one slice", lambda: one_slice(a))
        assert agent.stop() == 0, agent.text()
        assert not os.path.exists(agent.reg_socket)
        assert not os.path.exists(agent.socket)
        assert one_slice(a) is not None  # the kubelet wipes it 30 s later, not we
    finally:
        agent.stop()
        shutil.rmtree(agent.base, ignore_errors=True)


@pytest.mark.parametrize("args,env,want", [
    (["--mode", "bogus"], {}, '--mode "bogus": expected device-plugin or dra'),
    ([], {"EGPU_AGENT_MODE": "bogus"}, 'EGPU_AGENT_MODE "bogus": expected device-plugin or dra'),
    (["--mode", "dra", "--no-api"], {}, "--no-api: --mode dra needs the API server"),
    (["--mode", "dra", "--slice-interval", "0"], {}, '--slice-interval "0": expected seconds'),
])
def test_bad_mode_usage(agent_bin, args, env, want):
    r = subprocess.run([agent_bin, *args], capture_output=True, text=True, timeout=10,
                       env={**os.environ, **env})
    assert r.returncode == 2, r
    assert want in r.stderr


def test_help_lists_dra_flags(agent_bin):
    r = subprocess.run([agent_bin, "--help"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0
    for flag in ("--mode MODE", "--dra-socket", "--plugin-registry-dir", "--cdi-dir",
                 "--slice-interval", "/var/lib/kubelet/plugins/gpu.elasticgpu.io/dra.sock",
                 "/var/lib/kubelet/plugins_registry", "/var/run/cdi"):
        assert flag in r.stdout


def test_device_classes_are_served_as_written(kube_api, request):
    """deploy/agent-dra's DeviceClasses on kube-apiserver v1.36.3: created (their CEL
    compiles), stored with every field, extendedResourceName included (1.36 serves it:
    DRAExtendedResource beta, on; a field the server does not serve would be dropped)."""
    import yaml
    docs = [d for d in yaml.safe_load_all(
        (ROOT / "deploy" / "agent-dra" / "deviceclasses.yaml").read_text()) if d]
    assert sorted(d["metadata"]["name"] for d in docs) == ["gpu-share.elasticgpu.io", DRIVER]
    path = "/apis/resource.k8s.io/v1/deviceclasses"
    for d in docs:
        name = d["metadata"]["name"]
        kube_api.call("DELETE", f"{path}/{name}")
        request.addfinalizer(lambda name=name: kube_api.call("DELETE", f"{path}/{name}"))
        st, obj = kube_api.call("POST", path, d)
        assert st == 201, obj
        assert obj["spec"] == d["spec"], obj["spec"]
    st, obj = kube_api.call("GET", f"{path}/{DRIVER}")
    assert st == 200 and obj["spec"]["extendedResourceName"] == "elasticgpu.io/gpu", obj
    # A selector that does not compile is refused: the server checks the CEL.
    bad = {**docs[0], "metadata": {"name": "bad.elasticgpu.io"},
           "spec": {"selectors": [{"cel": {"expression": "device.driver =="}}]}}
    st, obj = kube_api.call("POST", path, bad)
    assert st == 422, obj
