"""egpu-agent's device plugin against the fake kubelet (tests/kubelet/fake_kubelet.py),
over real unix sockets and real gRPC, with fake cards (--fake-gpus 2xA100-80GB).

Without an API server (--no-api):

* registration: version, endpoint, resource name, and both options on;
* ListAndWatch: 100 healthy IDs "<uuid>-<nn>" per card;
* Allocate: 30 IDs on one card (that card's UUID, the interposer and an
  /etc/ld.so.preload naming it), 100 IDs (the whole card, no interposer),
  200 IDs on two cards (both UUIDs), malformed and unknown IDs
  (INVALID_ARGUMENT naming the ID);
* GetPreferredAllocation keeps a shared container on one card;
* a kubelet restart (every socket wiped) leads to a new registration;
* /healthz, /readyz, /metrics; SIGTERM exits 0; bad usage exits 2, a
  missing NVML 1.

With the test API server (tests/apiserver/server.py) and pods carrying
elasticgpu.io/assigned: GetPreferredAllocation steers the kubelet to the
assigned card(s), and a container no assignment names to the card the
placement core picks (or to no preference when none has room); PreStartContainer finds the owner through PodResources,
writes limits.json and elasticgpu.io/allocated, for a shared container, a
whole card, two cards, two containers of one pod, and two pods of equal core
and different memory; IDs on another card than assigned fail
FAILED_PRECONDITION and write nothing.

An agent restart keeps every allocation dir and limits.json, answers a
PreStartContainer for a restarted container with the same limits, and
steers new containers clear of the IDs already given. Allocation dirs that
no container holds (PodResources List) are removed at start and every
--cleanup-interval seconds; dirs in use, other names, and everything when
PodResources cannot be asked, stay. An allocation root that cannot hold
dirs (a path under a regular file) or a limits.json that cannot be renamed
into place fail Allocate and PreStartContainer with INTERNAL naming the
path, leaving no temporary file and no elasticgpu.io/allocated.

A health change comes from --fake-health-file (the fake backend's outside
switch): the next ListAndWatch update reports the card's 100 IDs Unhealthy,
Allocate refuses them, and the card comes back when marked healthy.
"""
import json
import os
import stat
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

import apis

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "kubelet"))

from fake_kubelet import FakeKubelet, dp, unix_channel, DevicePluginStub  # noqa: E402

RES = "elasticgpu.io/gpu-core"
INTERPOSER = "/opt/egpu-test/libegpu-vcuda.so"
ID_RE = re.compile(r"^(GPU-[0-9a-f-]{36})-(\d\d)$")


@pytest.fixture(scope="module")
def agent_bin(build_dir):
    b = build_dir / "src/agent/egpu-agent"
    if not b.exists():
        pytest.fail(f"{b} not built")
    return str(b)


class Agent:
    """egpu-agent, logging to a file: --no-api unless given a kubeconfig, its cards from
    gpus (default two fake A100 80GB; e.g. ("--nvml-library", PATH) for the mock NVML),
    env its environment (default ours)."""

    def __init__(self, agent_bin, base, extra=(), api=None, alloc_root=None,
                 gpus=("--fake-gpus", "2xA100-80GB"), env=None):
        self.base = base
        self.dp_dir = os.path.join(base, "device-plugins")
        self.alloc_root = alloc_root or os.path.join(base, "alloc")
        self.log = os.path.join(base, "agent.log")
        self.proc = subprocess.Popen(
            [agent_bin, *(["--kubeconfig", api] if api else ["--no-api"]), *gpus,
             "--node-name", "node-a",
             "--device-plugin-dir", self.dp_dir,
             "--pod-resources-socket", os.path.join(base, "pod-resources", "kubelet.sock"),
             "--alloc-root", self.alloc_root, "--interposer", INTERPOSER,
             "--listen", "127.0.0.1", "--port", "0", *extra],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "w"), env=env)
        deadline = time.time() + 15
        self.url = None
        while time.time() < deadline and self.url is None:
            m = re.search(r"egpu-agent: serving .*?port=(\d+)", self.text())
            if m:
                self.url = f"http://127.0.0.1:{m.group(1)}"
            else:
                assert self.proc.poll() is None, self.text()
                time.sleep(0.05)
        assert self.url, self.text()

    def text(self):
        with open(self.log) as f:
            return f.read()

    def get(self, path):
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

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


@pytest.fixture
def env(agent_bin):
    # A short base path: unix socket paths must stay under 108 bytes.
    base = tempfile.mkdtemp(prefix="egpu-agent-")
    kubelet = FakeKubelet(os.path.join(base, "device-plugins")).start()
    agent = Agent(agent_bin, base, extra=("--fake-health-file", os.path.join(base, "health")))
    yield kubelet, agent
    try:
        assert agent.stop() == 0, agent.text()
    finally:
        kubelet.stop()
        shutil.rmtree(base, ignore_errors=True)


def cards_of(devices):
    cards = {}
    for d in devices:
        m = ID_RE.match(d.ID)
        assert m, d.ID
        cards.setdefault(m.group(1), []).append(d)
    return cards


def allocate(plugin, ids):
    return plugin.stub.Allocate(dp.AllocateRequest(
        container_requests=[dp.ContainerAllocateRequest(devices_ids=ids)]), timeout=10)


def mounts(resp):
    return {m.container_path: m for m in resp.mounts}


def test_registers_with_options(env):
    kubelet, agent = env
    reg = kubelet.wait_for_registration(1, timeout=15)
    assert reg.ok, reg.error
    assert reg.request.version == "v1beta1"
    assert reg.request.endpoint == "elasticgpu.sock"
    assert reg.request.resource_name == RES
    assert reg.request.options.get_preferred_allocation_available
    assert reg.request.options.pre_start_required
    assert reg.options.get_preferred_allocation_available and reg.options.pre_start_required


def test_lists_100_ids_per_card(env):
    kubelet, agent = env
    devs = kubelet.wait_for_devices(RES, lambda d: len(d) == 200, timeout=15)
    cards = cards_of(devs)
    assert len(cards) == 2
    for uuid, ds in cards.items():
        assert sorted(d.ID for d in ds) == ["%s-%02d" % (uuid, i) for i in range(100)]
        assert all(d.health == "Healthy" for d in ds)
        assert all(len(d.ID) <= 63 for d in ds)
    assert len(set(d.ID for d in devs)) == 200


def test_health_change(env):
    kubelet, agent = env
    p = kubelet.wait_for_plugin(RES, timeout=15)
    uuids = sorted(cards_of(p.devices))
    # The list is in card index order: IDs 100..199 are card 1's.
    index, sick = 1, ID_RE.match(p.devices[100].ID).group(1)
    with open(os.path.join(agent.base, "health"), "w") as f:
        f.write("%d unhealthy XID 79\n" % index)

    def only_sick_unhealthy(devs):
        by = cards_of(devs)
        return all(d.health == ("Unhealthy" if u == sick else "Healthy")
                   for u, ds in by.items() for d in ds)
    devs = kubelet.wait_for_devices(RES, only_sick_unhealthy, timeout=10)
    assert len(devs) == 200
    with pytest.raises(grpc.RpcError) as e:
        allocate(p, ["%s-00" % sick])
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and sick in e.value.details()
    with open(os.path.join(agent.base, "health"), "w") as f:
        f.write("%d healthy\n" % index)
    kubelet.wait_for_devices(RES, lambda d: all(x.health == "Healthy" for x in d), timeout=10)
    assert set(uuids) == set(cards_of(kubelet.plugins[RES].devices))


def test_allocate_shared_card(env):
    kubelet, agent = env
    p = kubelet.wait_for_plugin(RES, timeout=15)
    uuid = sorted(cards_of(p.devices))[0]
    ids = ["%s-%02d" % (uuid, i) for i in range(30)]
    resp = allocate(p, ids)
    c = resp.container_responses[0]
    assert c.envs["NVIDIA_VISIBLE_DEVICES"] == uuid
    assert c.envs["EGPU_ALLOC_DIR"] == "/etc/elastic-gpu"
    m = mounts(c)
    alloc = m["/etc/elastic-gpu"].host_path
    assert os.path.dirname(alloc) == agent.alloc_root and os.path.isdir(alloc)
    assert m[INTERPOSER].host_path == INTERPOSER and m[INTERPOSER].read_only
    assert m["/etc/elastic-gpu"].read_only and not m["/etc/elastic-gpu/shared"].read_only
    assert m["/etc/elastic-gpu/shared"].host_path == os.path.join(alloc, "shared")
    assert os.path.isdir(os.path.join(alloc, "shared"))
    pre = m["/etc/ld.so.preload"]
    assert pre.read_only and os.path.dirname(pre.host_path) == alloc
    with open(pre.host_path) as f:
        assert f.read().strip() == INTERPOSER
    # The same IDs in another order map to the same allocation dir.
    again = allocate(p, list(reversed(ids))).container_responses[0]
    assert mounts(again)["/etc/elastic-gpu"].host_path == alloc


def test_allocate_whole_and_two_cards(env):
    kubelet, agent = env
    p = kubelet.wait_for_plugin(RES, timeout=15)
    uuids = sorted(cards_of(p.devices))
    whole = allocate(p, ["%s-%02d" % (uuids[1], i) for i in range(100)]).container_responses[0]
    assert whole.envs["NVIDIA_VISIBLE_DEVICES"] == uuids[1]
    assert set(mounts(whole)) == {"/etc/elastic-gpu"}
    both = allocate(p, [d.ID for d in p.devices]).container_responses[0]
    assert sorted(both.envs["NVIDIA_VISIBLE_DEVICES"].split(",")) == uuids
    assert set(mounts(both)) == {"/etc/elastic-gpu"}


@pytest.mark.parametrize("bad", ["nonsense", "GPU-00000000-0000-4000-0000-000000000000-07",
                                 "{uuid}-7", "{uuid}-x1", "{uuid}07"])
def test_allocate_bad_ids(env, bad):
    kubelet, agent = env
    p = kubelet.wait_for_plugin(RES, timeout=15)
    uuid = sorted(cards_of(p.devices))[0]
    bad = bad.format(uuid=uuid)
    with pytest.raises(grpc.RpcError) as e:
        allocate(p, ["%s-00" % uuid, bad])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad in e.value.details()


def test_allocate_duplicate_and_empty(env):
    kubelet, agent = env
    p = kubelet.wait_for_plugin(RES, timeout=15)
    uuid = sorted(cards_of(p.devices))[0]
    with pytest.raises(grpc.RpcError) as e:
        allocate(p, ["%s-01" % uuid, "%s-01" % uuid])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as e:
        p.stub.Allocate(dp.AllocateRequest(), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_admit_in_kubelet_order(env):
    kubelet, agent = env
    kubelet.wait_for_devices(RES, lambda d: len(d) == 200, timeout=15)
    a = kubelet.admit(RES, 30, pod="a", check=True)
    assert a.calls == ["GetPreferredAllocation", "Allocate", "PreStartContainer"]
    assert len({ID_RE.match(d).group(1) for d in a.devices}) == 1
    # Binpack: the next shared container lands on the same card.
    b = kubelet.admit(RES, 50, pod="b", check=True)
    assert {ID_RE.match(d).group(1) for d in b.devices} == \
        {ID_RE.match(d).group(1) for d in a.devices}
    assert b.envs["NVIDIA_VISIBLE_DEVICES"] == ID_RE.match(a.devices[0]).group(1)
    # A whole card: the other one, untouched.
    w = kubelet.admit(RES, 100, pod="w", check=True)
    assert len({ID_RE.match(d).group(1) for d in w.devices}) == 1
    assert set(mounts(w.container_response)) == {"/etc/elastic-gpu"}


def test_kubelet_restart_reregisters(env):
    kubelet, agent = env
    kubelet.wait_for_plugin(RES, timeout=15)
    kubelet.restart()
    reg = kubelet.wait_for_registration(2, timeout=15)
    assert reg.ok, reg.error
    p = kubelet.wait_for_plugin(RES, timeout=15)
    kubelet.wait_for_devices(RES, lambda d: len(d) == 200, timeout=15)
    uuid = sorted(cards_of(p.devices))[0]
    assert allocate(p, ["%s-05" % uuid]).container_responses[0].envs[
        "NVIDIA_VISIBLE_DEVICES"] == uuid


def test_health_and_metrics(env):
    kubelet, agent = env
    kubelet.wait_for_plugin(RES, timeout=15)
    assert agent.get("/healthz")[0] == 200
    deadline = time.time() + 10
    while agent.get("/readyz")[0] != 200 and time.time() < deadline:
        time.sleep(0.1)
    assert agent.get("/readyz")[0] == 200
    deadline = time.time() + 5
    while time.time() < deadline:
        st, body = agent.get("/metrics")
        if "egpu_agent_registered 1" in body:
            break
        time.sleep(0.2)
    assert "egpu_agent_registered 1" in body and "egpu_agent_gpus 2" in body, body


def test_bad_usage_and_missing_nvml(agent_bin, tmp_path):
    r = subprocess.run([agent_bin, "--port", "x"], capture_output=True, text=True)
    assert r.returncode == 2 and "--port" in r.stderr
    r = subprocess.run([agent_bin, "--fake-gpus", "2xA100-80GB"], capture_output=True, text=True,
                       env={k: v for k, v in os.environ.items() if k != "NODE_NAME"})
    assert r.returncode == 2 and "--node-name" in r.stderr
    r = subprocess.run([agent_bin, "--no-api", "--nvml-library", str(tmp_path / "nope.so"),
                        "--device-plugin-dir", str(tmp_path), "--port", "0"],
                       capture_output=True, text=True,
                       env={k: v for k, v in os.environ.items() if k != "EGPU_FAKE_GPUS"})
    assert r.returncode == 1 and "nope.so" in r.stderr, r.stderr
    r = subprocess.run([agent_bin, "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--device-plugin-dir" in r.stdout


# --------------------------------------------------------------------------
# With the test API server: GetPreferredAllocation follows elasticgpu.io/assigned,
# PreStartContainer writes limits.json and elasticgpu.io/allocated.

TOKEN = "agent-test-token"
NODE = "node-a"
ASSIGNED = "elasticgpu.io/assigned"
ALLOCATED = "elasticgpu.io/allocated"


class Api(apis.Api):
    """apis.Api with this module's token."""

    def call(self, method, path, body=None, ctype="application/json", token=TOKEN):
        return super().call(method, path, body, ctype, token)

    def uuids(self):
        st, obj = self.call("GET", "/apis/elasticgpu.io/v1alpha1/gpus")
        assert st == 200, obj
        gpus = sorted((g["spec"]["index"], g["spec"]["uuid"]) for g in obj["items"]
                      if g["spec"]["nodeName"] == NODE)
        return [u for _, u in gpus]

    def pod(self, name, containers, ns="default", annotations=None):
        """containers: [(name, core, memory, [uuids])]; bound to NODE, assigned."""
        assigned = {"node": NODE, "containers": [
            {"name": c, "core": core, "memory": mem, "gpus": gpus}
            for c, core, mem, gpus in containers]}
        specs = [{"name": c, "image": "busybox", "resources": {
            "requests": {"elasticgpu.io/gpu-core": str(core * len(gpus))},
            "limits": {"elasticgpu.io/gpu-core": str(core * len(gpus))}}}
            for c, core, mem, gpus in containers]
        st, obj = self.call("POST", f"/api/v1/namespaces/{ns}/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns,
                         "annotations": {ASSIGNED: json.dumps(assigned),
                                         **(annotations or {})}},
            "spec": {"nodeName": NODE, "schedulerName": "elastic-gpu-scheduler",
                     "containers": specs}})
        assert st == 201, obj
        return obj

    def allocated(self, name, ns="default"):
        st, obj = self.call("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        assert st == 200, obj
        text = obj["metadata"].get("annotations", {}).get(ALLOCATED)
        return None if text is None else json.loads(text)


@pytest.fixture
def api_env(agent_bin):
    yield from _api_env(agent_bin)


def _api_env(agent_bin, alloc_root=None, extra=()):
    base = tempfile.mkdtemp(prefix="egpu-agent-")
    server = subprocess.Popen(["/usr/bin/python3", str(ROOT / "tests/apiserver/server.py"),
                               "--port", "0", "--token", TOKEN],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = server.stdout.readline().strip()
    m = re.match(r"listening on (http://127\.0\.0\.1:\d+)$", line)
    assert m, line
    kubeconfig = os.path.join(base, "kubeconfig")
    with open(kubeconfig, "w") as f:
        f.write("apiVersion: v1\nkind: Config\n"
                f"clusters: [{{name: t, cluster: {{server: '{m.group(1)}'}}}}]\n"
                f"users: [{{name: u, user: {{token: {TOKEN}}}}}]\n"
                "contexts: [{name: t, context: {cluster: t, user: u}}]\n"
                "current-context: t\n")
    api = Api(m.group(1))
    kubelet = FakeKubelet(os.path.join(base, "device-plugins")).start()
    agent = Agent(agent_bin, base, api=kubeconfig,
                  alloc_root=alloc_root and os.path.join(base, alloc_root), extra=extra)
    try:
        kubelet.wait_for_devices(RES, lambda d: len(d) == 200, timeout=15)
        yield api, kubelet, agent
        assert agent.stop() == 0, agent.text()
    finally:
        agent.stop()
        kubelet.stop()
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(base, ignore_errors=True)


def limits_of(agent, adm):
    alloc = mounts(adm.container_response)["/etc/elastic-gpu"].host_path
    with open(os.path.join(alloc, "limits.json")) as f:
        return json.load(f)


def vcuda_conf_of(adm):
    """vcuda.conf of the container as {key: value}, and the mount of the
    writable shared/ subdir (None without the interposer)."""
    m = mounts(adm.container_response)
    alloc = m["/etc/elastic-gpu"].host_path
    with open(os.path.join(alloc, "vcuda.conf")) as f:
        lines = [ln for ln in f.read().splitlines() if ln and not ln.startswith("#")]
    return dict(ln.split("=", 1) for ln in lines), m.get("/etc/elastic-gpu/shared")


def card_set(ids):
    return {ID_RE.match(d).group(1) for d in ids}


def test_api_publishes_gpus(api_env):
    api, kubelet, agent = api_env
    uuids = api.uuids()
    assert len(uuids) == 2
    assert set(uuids) == card_set(d.ID for d in kubelet.plugins[RES].devices)


def test_shared_container_follows_assignment(api_env):
    api, kubelet, agent = api_env
    u = api.uuids()
    api.pod("shared", [("main", 30, 4096, [u[1]])])  # the second card: not the binpack pick
    adm = kubelet.admit(RES, 30, pod="shared", container="main", check=True)
    assert card_set(adm.devices) == {u[1]}
    assert set(adm.preferred_response.container_responses[0].deviceIDs) == set(adm.devices)
    assert limits_of(agent, adm) == {"pod": "shared", "namespace": "default",
                                     "container": "main", "gpus": [u[1]], "core": 30,
                                     "memory": 4096}
    assert api.allocated("shared") == {"containers": {"main": {
        "gpus": [u[1]], "core": 30, "memory": 4096}}}
    # The interposer's copy, in the agent's own dir, mounted read-only.
    conf, mount = vcuda_conf_of(adm)
    assert conf == {"EGPU_VCUDA_GPUS": u[1], "EGPU_VCUDA_MEMORY_MIB": "4096",
                    "EGPU_VCUDA_CORE": "30", "EGPU_VCUDA_CORE_LIMIT": "30"}
    top = mounts(adm.container_response)["/etc/elastic-gpu"]
    alloc = top.host_path
    assert top.read_only
    st = os.stat(alloc)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (os.geteuid(), 0o755)
    for name in ("vcuda.conf", "limits.json", "ld.so.preload"):
        st = os.lstat(os.path.join(alloc, name))
        assert stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()
        assert stat.S_IMODE(st.st_mode) == 0o644
    # Any user of the container creates the interposer's regions in the
    # writable subdir, mounted read-write over the read-only dir.
    assert mount is not None and not mount.read_only
    assert mount.host_path == os.path.join(alloc, "shared")
    assert stat.S_IMODE(os.lstat(mount.host_path).st_mode) == 0o1777
    names = [m.container_path for m in adm.container_response.mounts]
    assert names.index("/etc/elastic-gpu") < names.index("/etc/elastic-gpu/shared")


def test_preference_without_assignment_is_the_cores(api_env):
    """A container no assignment names (no pending pod asks its size) gets the
    card the placement core picks, as egpu-scheduler's bind would: with equal
    free compute (70 IDs on each card), binpack leaves the least memory, so the
    card whose containers hold 60000 MiB (the agent's record), not the lower
    index the agent's own rule took before. A share no card has room for gets
    no preference (logged), not IDs spread over two cards."""
    api, kubelet, agent = api_env
    u = api.uuids()
    # One after the other, as the scheduler's ambiguity rule binds them.
    api.pod("light", [("main", 30, 1024, [u[0]])])
    assert card_set(kubelet.admit(RES, 30, pod="light", check=True).devices) == {u[0]}
    api.pod("heavy", [("main", 30, 60000, [u[1]])])
    assert card_set(kubelet.admit(RES, 30, pod="heavy", check=True).devices) == {u[1]}
    stray = kubelet.admit(RES, 20, pod="stray", start=False, check=True)
    preferred = stray.preferred_response.container_responses[0].deviceIDs
    assert len(preferred) == 20 and card_set(preferred) == {u[1]}
    assert set(stray.devices) == set(preferred)
    assert "preferred by the card policy policy=binpack size=20" in agent.text()
    # 70 free on one card, 50 on the other: no card has room for 80.
    wide = kubelet.admit(RES, 80, pod="wide", start=False, check=True)
    assert list(wide.preferred_response.container_responses[0].deviceIDs) == []
    assert re.search(r"GetPreferredAllocation: no preference size=80 .*"
                     r'reason="no card with 80% core', agent.text()), agent.text()


def test_context_extra_mib_reaches_vcuda_conf(agent_bin):
    """--context-extra-mib N > 0 goes into every container's vcuda.conf as
    EGPU_VCUDA_CONTEXT_EXTRA_MIB=N, a line of its own (without the flag the
    key is absent: test_shared_container_follows_assignment)."""
    gen = _api_env(agent_bin, extra=("--context-extra-mib", "96"))
    api, kubelet, agent = next(gen)
    try:
        u = api.uuids()
        api.pod("torch", [("main", 30, 4096, [u[0]])])
        adm = kubelet.admit(RES, 30, pod="torch", container="main", check=True)
        conf, _ = vcuda_conf_of(adm)
        assert conf == {"EGPU_VCUDA_GPUS": u[0], "EGPU_VCUDA_MEMORY_MIB": "4096",
                        "EGPU_VCUDA_CORE": "30", "EGPU_VCUDA_CORE_LIMIT": "30",
                        "EGPU_VCUDA_CONTEXT_EXTRA_MIB": "96"}
        alloc = mounts(adm.container_response)["/etc/elastic-gpu"].host_path
        with open(os.path.join(alloc, "vcuda.conf")) as f:
            text = f.read()
        assert text.endswith("\nEGPU_VCUDA_CONTEXT_EXTRA_MIB=96\n"), text
    finally:
        gen.close()


@pytest.mark.parametrize("value", ["65537", "96MiB", "-1", ""])
def test_context_extra_mib_bad_value(agent_bin, value):
    r = subprocess.run([agent_bin, "--no-api", "--context-extra-mib", value],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert "--context-extra-mib" in r.stderr and "0..65536" in r.stderr, r.stderr
    r = subprocess.run([agent_bin, "--no-api"], capture_output=True, text=True,
                       env={**os.environ, "EGPU_CONTEXT_EXTRA_MIB": value or "x"})
    assert r.returncode == 2, r.stderr
    assert "EGPU_CONTEXT_EXTRA_MIB" in r.stderr and "0..65536" in r.stderr, r.stderr


def test_core_limit_annotation(api_env):
    api, kubelet, agent = api_env
    u = api.uuids()
    api.pod("burst", [("main", 30, 4096, [u[0]])],
            annotations={"elasticgpu.io/gpu-core-limit": "80"})
    adm = kubelet.admit(RES, 30, pod="burst", container="main", check=True)
    conf, _ = vcuda_conf_of(adm)
    assert conf["EGPU_VCUDA_CORE"] == "30" and conf["EGPU_VCUDA_CORE_LIMIT"] == "80"
    kubelet.remove_pod("default", "burst")
    # Below the container's core, above 100, or not a number: refused, nothing written.
    for i, bad in enumerate(("20", "101", "lots")):
        name = f"bad-{i}"
        api.pod(name, [("main", 30, 4096, [u[1]])],
                annotations={"elasticgpu.io/gpu-core-limit": bad})
        ids = ["%s-%02d" % (u[1], k) for k in range(30)]
        kubelet.set_pod_resources({f"default/{name}": {"main": {RES: ids}}})
        p = kubelet.plugins[RES]
        alloc = mounts(allocate(p, ids).container_responses[0])["/etc/elastic-gpu"].host_path
        with pytest.raises(grpc.RpcError) as e:
            p.stub.PreStartContainer(dp.PreStartContainerRequest(devices_ids=ids), timeout=30)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "elasticgpu.io/gpu-core-limit" in e.value.details()
        assert f'"{bad}"' in e.value.details() and "to 100" in e.value.details()
        assert sorted(os.listdir(alloc)) == ["ld.so.preload", "shared"]
        assert api.allocated(name) is None


def test_whole_and_two_card_containers(api_env):
    api, kubelet, agent = api_env
    u = api.uuids()
    api.pod("whole", [("main", 100, 81920, [u[1]])])
    adm = kubelet.admit(RES, 100, pod="whole", container="main", check=True)
    assert card_set(adm.devices) == {u[1]}
    assert limits_of(agent, adm)["gpus"] == [u[1]]
    assert limits_of(agent, adm)["core"] == 100
    assert INTERPOSER not in mounts(adm.container_response)
    conf, mount = vcuda_conf_of(adm)
    assert conf["EGPU_VCUDA_CORE"] == "100" and conf["EGPU_VCUDA_CORE_LIMIT"] == "100"
    assert mount is None  # no interposer, nothing to mount
    kubelet.remove_pod("default", "whole")
    api.pod("two", [("train", 100, 81920, [u[0], u[1]])])
    adm = kubelet.admit(RES, 200, pod="two", container="train", check=True)
    assert card_set(adm.devices) == set(u)
    lim = limits_of(agent, adm)
    assert lim["gpus"] == [u[0], u[1]] and lim["container"] == "train"
    assert api.allocated("two")["containers"]["train"]["gpus"] == [u[0], u[1]]


def test_pod_with_two_containers(api_env):
    api, kubelet, agent = api_env
    u = api.uuids()
    api.pod("multi", [("a", 20, 1024, [u[0]]), ("b", 40, 2048, [u[1]])])
    a = kubelet.admit(RES, 20, pod="multi", container="a", check=True)
    b = kubelet.admit(RES, 40, pod="multi", container="b", check=True)
    assert card_set(a.devices) == {u[0]} and card_set(b.devices) == {u[1]}
    assert limits_of(agent, a)["memory"] == 1024 and limits_of(agent, b)["memory"] == 2048
    assert set(api.allocated("multi")["containers"]) == {"a", "b"}


def test_equal_core_different_memory(api_env):
    api, kubelet, agent = api_env
    u = api.uuids()
    api.pod("p1", [("main", 30, 1000, [u[0]])])
    api.pod("p2", [("main", 30, 2000, [u[0]])])
    a = kubelet.admit(RES, 30, pod="p1", check=True)
    b = kubelet.admit(RES, 30, pod="p2", check=True)
    assert card_set(a.devices) == card_set(b.devices) == {u[0]}
    assert not set(a.devices) & set(b.devices)
    la, lb = limits_of(agent, a), limits_of(agent, b)
    assert (la["pod"], la["memory"]) == ("p1", 1000)
    assert (lb["pod"], lb["memory"]) == ("p2", 2000)
    assert api.allocated("p1")["containers"]["main"]["memory"] == 1000
    assert api.allocated("p2")["containers"]["main"]["memory"] == 2000


def test_prestart_mismatch_writes_nothing(api_env):
    api, kubelet, agent = api_env
    u = api.uuids()
    api.pod("wrong", [("main", 30, 4096, [u[1]])])
    ids = ["%s-%02d" % (u[0], i) for i in range(30)]  # on the other card
    kubelet.set_pod_resources({"default/wrong": {"main": {RES: ids}}})
    p = kubelet.plugins[RES]
    resp = allocate(p, ids).container_responses[0]
    alloc = mounts(resp)["/etc/elastic-gpu"].host_path
    with pytest.raises(grpc.RpcError) as e:
        p.stub.PreStartContainer(dp.PreStartContainerRequest(devices_ids=ids), timeout=30)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "default/wrong" in e.value.details() and u[1] in e.value.details()
    assert not os.path.exists(os.path.join(alloc, "limits.json"))
    assert api.allocated("wrong") is None


def test_prestart_unknown_owner(api_env):
    api, kubelet, agent = api_env
    u = api.uuids()
    p = kubelet.plugins[RES]
    with pytest.raises(grpc.RpcError) as e:
        p.stub.PreStartContainer(dp.PreStartContainerRequest(devices_ids=["%s-07" % u[0]]),
                                 timeout=30)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert "%s-07" % u[0] in e.value.details()



# --------------------------------------------------------------------------
# Agent restart, cleanup of allocation dirs, an allocation root that cannot
# be used.

def alloc_dir(adm):
    return mounts(adm.container_response)["/etc/elastic-gpu"].host_path


def test_restart_keeps_allocations(api_env, agent_bin):
    api, kubelet, agent = api_env
    u = api.uuids()
    api.pod("keep", [("main", 30, 4096, [u[0]])])
    api.pod("whole", [("main", 100, 81920, [u[1]])])
    a = kubelet.admit(RES, 30, pod="keep", check=True)
    w = kubelet.admit(RES, 100, pod="whole", check=True)
    lims = {}
    for adm in (a, w):
        path = os.path.join(alloc_dir(adm), "limits.json")
        with open(path) as f:
            lims[path] = (f.read(), os.stat(path).st_ino, os.stat(path).st_mtime_ns)
    preload = os.path.join(alloc_dir(a), "ld.so.preload")
    preload_st = os.stat(preload)
    allocated = api.allocated("keep")
    assert agent.stop() == 0, agent.text()
    again = Agent(agent_bin, agent.base, api=os.path.join(agent.base, "kubeconfig"))
    try:
        # Registration comes after the start's cleanup in the agent's loop.
        assert kubelet.wait_for_registration(2, timeout=15).ok
        kubelet.wait_for_devices(RES, lambda d: len(d) == 200, timeout=15)
        for path, (text, ino, mtime) in lims.items():
            with open(path) as f:
                assert f.read() == text
            assert (os.stat(path).st_ino, os.stat(path).st_mtime_ns) == (ino, mtime)
        assert os.stat(preload).st_ino == preload_st.st_ino
        # The container restarts: PreStartContainer again, without Allocate.
        kubelet.start_container(a, check=True)
        assert a.calls == ["GetPreferredAllocation", "Allocate", "PreStartContainer",
                           "PreStartContainer"]
        assert limits_of(again, a) == {"pod": "keep", "namespace": "default",
                                       "container": "main", "gpus": [u[0]], "core": 30,
                                       "memory": 4096}
        assert api.allocated("keep") == allocated
        # A new container on the shared card gets other IDs, as assigned.
        api.pod("next", [("main", 50, 2048, [u[0]])])
        n = kubelet.admit(RES, 50, pod="next", check=True)
        assert card_set(n.devices) == {u[0]} and not set(n.devices) & set(a.devices)
        assert limits_of(again, n)["memory"] == 2048
        assert os.path.isdir(alloc_dir(a)) and os.path.isdir(alloc_dir(w))
        # The last 20 IDs of the shared card.
        api.pod("rest", [("main", 20, 1024, [u[0]])])
        r = kubelet.admit(RES, 20, pod="rest", check=True)
        assert card_set(r.devices) == {u[0]}
        assert len(set(r.devices) | set(n.devices) | set(a.devices)) == 100
    finally:
        assert again.stop() == 0, again.text()


@pytest.fixture
def cleanup_env(agent_bin):
    base = tempfile.mkdtemp(prefix="egpu-agent-")
    kubelet = FakeKubelet(os.path.join(base, "device-plugins")).start()
    agents = []

    def start(*extra):
        agents.append(Agent(agent_bin, base, extra=extra))
        return agents[-1]
    try:
        yield kubelet, start
        for a in agents:
            assert a.stop() == 0, a.text()
    finally:
        for a in agents:
            a.stop()
        kubelet.stop()
        shutil.rmtree(base, ignore_errors=True)


def wait_until(pred, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


def test_cleanup_removes_dirs_no_container_holds(cleanup_env):
    kubelet, start = cleanup_env
    agent = start("--cleanup-interval", "1")
    kubelet.wait_for_devices(RES, lambda d: len(d) == 200, timeout=15)
    a = kubelet.admit(RES, 30, pod="a", check=True)
    b = kubelet.admit(RES, 50, pod="b", check=True)
    w = kubelet.admit(RES, 100, pod="w", check=True)
    other = os.path.join(agent.alloc_root, "not-an-allocation")
    os.makedirs(other)
    hexfile = os.path.join(agent.alloc_root, "0123456789abcdef")
    open(hexfile, "w").close()
    kubelet.remove_pod("default", "a")
    assert wait_until(lambda: not os.path.exists(alloc_dir(a))), agent.text()
    assert "allocation dir removed" in agent.text()
    time.sleep(2.5)  # more sweeps: what is held stays
    for adm in (b, w):
        assert os.path.isdir(alloc_dir(adm))
    assert os.path.isfile(os.path.join(alloc_dir(b), "ld.so.preload"))
    assert os.path.isdir(other) and os.path.isfile(hexfile)


def test_cleanup_at_start(cleanup_env):
    kubelet, start = cleanup_env
    agent = start()
    kubelet.wait_for_devices(RES, lambda d: len(d) == 200, timeout=15)
    b = kubelet.admit(RES, 50, pod="b", check=True)
    assert agent.stop() == 0
    orphan = os.path.join(agent.alloc_root, "fedcba9876543210")
    os.makedirs(os.path.join(orphan, "sub"))
    open(os.path.join(orphan, "sub", "f"), "w").close()
    old = time.time() - 3600
    for d in (orphan, alloc_dir(b)):
        os.utime(d, (old, old))
    # PodResources cannot be asked: nothing is removed.
    kubelet.inject_pod_resources_error(grpc.StatusCode.UNAVAILABLE, "down", times=1)
    agent = start()
    assert kubelet.wait_for_registration(2, timeout=15).ok
    assert os.path.isdir(orphan) and os.path.isdir(alloc_dir(b))
    assert agent.stop() == 0
    agent = start()
    assert kubelet.wait_for_registration(3, timeout=15).ok
    assert wait_until(lambda: not os.path.exists(orphan), 5), agent.text()
    assert os.path.isfile(os.path.join(alloc_dir(b), "ld.so.preload"))


def test_alloc_root_not_a_directory(cleanup_env, agent_bin):
    kubelet, start = cleanup_env
    base = os.path.dirname(kubelet.plugin_dir)
    blocker = os.path.join(base, "blocker")
    open(blocker, "w").close()
    root = os.path.join(blocker, "alloc")
    agent = Agent(agent_bin, base, alloc_root=root, extra=("--cleanup-interval", "1"))
    try:
        p = kubelet.wait_for_plugin(RES, timeout=15)
        uuid = sorted(cards_of(p.devices))[0]
        for n in (30, 100):
            with pytest.raises(grpc.RpcError) as e:
                allocate(p, ["%s-%02d" % (uuid, i) for i in range(n)])
            assert e.value.code() == grpc.StatusCode.INTERNAL
            assert root in e.value.details() and "Not a directory" in e.value.details(), \
                e.value.details()
        assert os.path.isfile(blocker) and os.path.getsize(blocker) == 0
        assert agent.get("/healthz")[0] == 200
    finally:
        assert agent.stop() == 0, agent.text()


def test_prestart_alloc_root_not_a_directory(agent_bin):
    gen = _api_env(agent_bin, alloc_root="blocker/alloc")
    try:
        api, kubelet, agent = next(gen)
        blocker = os.path.dirname(agent.alloc_root)
        u = api.uuids()
        api.pod("bad", [("main", 30, 4096, [u[0]])])
        ids = ["%s-%02d" % (u[0], i) for i in range(30)]
        kubelet.set_pod_resources({"default/bad": {"main": {RES: ids}}})
        open(blocker, "w").close()
        with pytest.raises(grpc.RpcError) as e:
            kubelet.plugins[RES].stub.PreStartContainer(
                dp.PreStartContainerRequest(devices_ids=ids), timeout=30)
        assert e.value.code() == grpc.StatusCode.INTERNAL
        assert agent.alloc_root in e.value.details() and "Not a directory" in e.value.details()
        assert os.path.getsize(blocker) == 0 and api.allocated("bad") is None
    finally:
        gen.close()


def test_prestart_limits_not_renamed_leaves_nothing(api_env):
    api, kubelet, agent = api_env
    u = api.uuids()
    api.pod("half", [("main", 30, 4096, [u[0]])])
    ids = ["%s-%02d" % (u[0], i) for i in range(30)]
    kubelet.set_pod_resources({"default/half": {"main": {RES: ids}}})
    p = kubelet.plugins[RES]
    alloc = mounts(allocate(p, ids).container_responses[0])["/etc/elastic-gpu"].host_path
    # The agent marks the pod allocated right after Allocate, on a
    # thread of its own: wait for that mark and take it off, so that what
    # the failed PreStartContainer writes, or not, is all there is to see.
    assert wait_until(lambda: api.allocated("half") is not None, 5), agent.text()
    st, out = api.call("PATCH", "/api/v1/namespaces/default/pods/half",
                       {"metadata": {"annotations": {ALLOCATED: None}}},
                       ctype="application/merge-patch+json")
    assert st == 200 and api.allocated("half") is None, out
    os.makedirs(os.path.join(alloc, "limits.json", "x"))  # rename(2) onto it fails
    with pytest.raises(grpc.RpcError) as e:
        p.stub.PreStartContainer(dp.PreStartContainerRequest(devices_ids=ids), timeout=30)
    assert e.value.code() == grpc.StatusCode.INTERNAL
    assert os.path.join(alloc, "limits.json") in e.value.details(), e.value.details()
    assert sorted(os.listdir(alloc)) == ["ld.so.preload", "limits.json", "shared"]  # no vcuda.conf
    assert os.path.isdir(os.path.join(alloc, "limits.json"))
    assert api.allocated("half") is None
    shutil.rmtree(os.path.join(alloc, "limits.json"))
    p.stub.PreStartContainer(dp.PreStartContainerRequest(devices_ids=ids), timeout=30)
    with open(os.path.join(alloc, "limits.json")) as f:
        assert json.load(f)["core"] == 30
    assert api.allocated("half")["containers"]["main"]["core"] == 30


# --------------------------------------------------------------------------
# --device-list-strategy, allocation metrics, the AllocationMismatch event.

@pytest.mark.parametrize("strategy", [None, "envvar", "cdi", "device-nodes"])
def test_device_list_strategy(agent_bin, strategy):
    base = tempfile.mkdtemp(prefix="egpu-agent-")
    kubelet = FakeKubelet(os.path.join(base, "device-plugins")).start()
    extra = () if strategy is None else ("--device-list-strategy", strategy)
    agent = Agent(agent_bin, base, extra=extra)
    try:
        p = kubelet.wait_for_plugin(RES, timeout=15)
        kubelet.wait_for_devices(RES, lambda d: len(d) == 200, timeout=15)
        uuids = sorted(cards_of(p.devices))
        # Card i of --fake-gpus has minor i; the list is in index order.
        minor = {ID_RE.match(p.devices[0].ID).group(1): 0,
                 ID_RE.match(p.devices[100].ID).group(1): 1}
        shared = allocate(p, ["%s-%02d" % (uuids[0], i) for i in range(30)]).container_responses[0]
        both = allocate(p, [d.ID for d in p.devices]).container_responses[0]
        for c in (shared, both):
            assert c.envs["EGPU_ALLOC_DIR"] == "/etc/elastic-gpu"
            assert "/etc/elastic-gpu" in mounts(c)
        assert INTERPOSER in mounts(shared) and INTERPOSER not in mounts(both)
        if strategy in (None, "envvar"):
            assert shared.envs["NVIDIA_VISIBLE_DEVICES"] == uuids[0]
            assert sorted(both.envs["NVIDIA_VISIBLE_DEVICES"].split(",")) == uuids
            assert not shared.cdi_devices and not shared.devices
        elif strategy == "cdi":
            assert "NVIDIA_VISIBLE_DEVICES" not in shared.envs
            assert "NVIDIA_VISIBLE_DEVICES" not in both.envs
            assert [d.name for d in shared.cdi_devices] == ["nvidia.com/gpu=" + uuids[0]]
            assert sorted(d.name for d in both.cdi_devices) == \
                ["nvidia.com/gpu=" + u for u in uuids]
            assert not shared.devices
        else:
            assert "NVIDIA_VISIBLE_DEVICES" not in shared.envs and not shared.cdi_devices
            ctl = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
            for c, cards in ((shared, [uuids[0]]), (both, uuids)):
                want = sorted(["/dev/nvidia%d" % minor[u] for u in cards] + ctl)
                assert sorted(d.container_path for d in c.devices) == want
                assert all(d.host_path == d.container_path and d.permissions == "rw"
                           for d in c.devices)
    finally:
        try:
            assert agent.stop() == 0, agent.text()
        finally:
            kubelet.stop()
            shutil.rmtree(base, ignore_errors=True)


def test_device_list_strategy_bad_value(agent_bin):
    r = subprocess.run([agent_bin, "--no-api", "--device-list-strategy", "volume-mounts"],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert "--device-list-strategy" in r.stderr
    assert all(v in r.stderr for v in ("envvar", "cdi", "device-nodes")), r.stderr
    r = subprocess.run([agent_bin, "--no-api"], capture_output=True, text=True,
                       env={**os.environ, "EGPU_DEVICE_LIST_STRATEGY": "bogus"})
    assert r.returncode == 2 and "EGPU_DEVICE_LIST_STRATEGY" in r.stderr, r.stderr


def scrape(agent):
    from prometheus_client.parser import text_string_to_metric_families
    st, body = agent.get("/metrics")
    assert st == 200, body
    out = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_allocation_metrics(api_env):
    api, kubelet, agent = api_env
    u = api.uuids()
    api.pod("shared", [("main", 30, 4096, [u[1]])])
    kubelet.admit(RES, 30, pod="shared", container="main", check=True)
    core = ("egpu_agent_gpu_allocated_core_percent", (("gpu", u[1]),))
    mem = ("egpu_agent_gpu_allocated_memory_mib", (("gpu", u[1]),))
    labels = (("container", "main"), ("namespace", "default"), ("pod", "shared"))
    assert wait_until(lambda: scrape(agent).get(core) == 30, 5), scrape(agent)
    m = scrape(agent)
    assert m[mem] == 4096
    assert m[("egpu_agent_gpu_allocated_core_percent", (("gpu", u[0]),))] == 0
    assert m[("egpu_agent_gpu_allocated_memory_mib", (("gpu", u[0]),))] == 0
    assert m[("egpu_agent_container_limit_core_percent", labels)] == 30
    assert m[("egpu_agent_container_limit_memory_mib", labels)] == 4096
    assert m[("egpu_agent_allocation_mismatches_total", ())] == 0
    # Fake cards measure no memory in use (source "none"); NVML's is checked
    # in test_agent_gpus and test_gpu_status.
    assert m[("egpu_agent_gpu_used_memory_mib", (("gpu", u[1]), ("source", "none")))] == 0
    assert m[("egpu_agent_gpu_reserved_memory_mib", (("gpu", u[1]),))] == 0


def test_prestart_mismatch_event_and_counter(api_env):
    api, kubelet, agent = api_env
    u = api.uuids()
    api.pod("wrong", [("main", 30, 4096, [u[1]])])
    st, pod = api.call("GET", "/api/v1/namespaces/default/pods/wrong")
    assert st == 200, pod
    ids = ["%s-%02d" % (u[0], i) for i in range(30)]
    kubelet.set_pod_resources({"default/wrong": {"main": {RES: ids}}})
    p = kubelet.plugins[RES]
    allocate(p, ids)
    with pytest.raises(grpc.RpcError) as e:
        p.stub.PreStartContainer(dp.PreStartContainerRequest(devices_ids=ids), timeout=30)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    st, evs = api.call("GET", "/api/v1/namespaces/default/events")
    assert st == 200, evs
    evs = [ev for ev in evs["items"] if ev.get("reason") == "AllocationMismatch"]
    assert len(evs) == 1, evs
    ev = evs[0]
    assert ev["type"] == "Warning"
    io = ev["involvedObject"]
    assert (io["kind"], io["namespace"], io["name"], io["uid"]) == \
        ("Pod", "default", "wrong", pod["metadata"]["uid"])
    assert u[0] in ev["message"] and u[1] in ev["message"]
    assert ev["source"] == {"component": "egpu-agent", "host": NODE}
    key = ("egpu_agent_allocation_mismatches_total", ())
    assert wait_until(lambda: scrape(agent).get(key) == 1, 5), scrape(agent)


# --------------------------------------------------------------------------
# elasticgpu.io/allocated right after Allocate

MARKS = "egpu_agent_allocated_marks_total"


def test_allocated_marked_right_after_allocate(api_env):
    """The kubelet records a container's IDs at admission (Allocate) and
    starts it only after its image is pulled (PreStartContainer). The agent
    learns the owner from PodResources right after Allocate and writes
    elasticgpu.io/allocated then, so the scheduler may bind another pod of the
    same core to the node during the pull. Before, it was written only at
    PreStartContainer."""
    api, kubelet, agent = api_env
    u = api.uuids()
    want = {"containers": {"main": {"gpus": [u[1]], "core": 30, "memory": 4096}}}
    api.pod("early", [("main", 30, 4096, [u[1]])])
    t0 = time.monotonic()
    adm = kubelet.admit(RES, 30, pod="early", start=False, check=True)  # the image is pulling
    assert adm.calls == ["GetPreferredAllocation", "Allocate"]
    assert wait_until(lambda: api.allocated("early") is not None, 5), agent.text()
    took = time.monotonic() - t0
    assert api.allocated("early") == want
    assert not adm.prestart_requests
    assert not os.path.exists(os.path.join(alloc_dir(adm), "limits.json"))
    assert "marked allocated after Allocate pod=default/early container=main" in agent.text()
    # The pull is done: PreStartContainer writes the limits and finds the mark there.
    kubelet.start_container(adm, check=True)
    assert limits_of(agent, adm)["memory"] == 4096
    assert api.allocated("early") == want
    assert wait_until(lambda: scrape(agent).get((MARKS, (("at", "allocate"),))) == 1, 5)
    assert scrape(agent).get((MARKS, (("at", "prestart"),)), 0) == 0
    assert took < 3, took
    # A second container of the pod is marked beside the first, none lost.
    api.pod("two", [("a", 20, 1024, [u[0]]), ("b", 40, 2048, [u[1]])])
    a = kubelet.admit(RES, 20, pod="two", container="a", start=False, check=True)
    b = kubelet.admit(RES, 40, pod="two", container="b", start=False, check=True)
    assert wait_until(lambda: set((api.allocated("two") or {}).get("containers", {}))
                      == {"a", "b"}, 5), agent.text()
    kubelet.start_container(b, check=True)
    kubelet.start_container(a, check=True)
    assert set(api.allocated("two")["containers"]) == {"a", "b"}


def test_prestart_marks_when_podresources_does_not_show_it(api_env):
    """PodResources never shows the owner (a kubelet that lists only running
    pods): the agent gives up after its few tries and PreStartContainer still
    writes elasticgpu.io/allocated, as before."""
    api, kubelet, agent = api_env
    u = api.uuids()
    api.pod("late", [("main", 30, 4096, [u[0]])])
    adm = kubelet.admit(RES, 30, pod="late", record=False, start=False, check=True)
    assert wait_until(lambda: "PodResources did not show the owner" in agent.text(), 10), \
        agent.text()
    assert api.allocated("late") is None
    kubelet.set_pod_resources({"default/late": {"main": {RES: adm.devices}}})
    kubelet.start_container(adm, check=True)
    assert api.allocated("late") == {"containers": {"main": {
        "gpus": [u[0]], "core": 30, "memory": 4096}}}
    assert wait_until(lambda: scrape(agent).get((MARKS, (("at", "prestart"),))) == 1, 5)
    assert scrape(agent).get((MARKS, (("at", "allocate"),)), 0) == 0
