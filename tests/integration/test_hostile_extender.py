"""Issue 10, finding 3, played by a hostile tenant against the real
egpu-scheduler and the test API server: anyone who reaches the extender
must not bind any pod to any node, nor stop it answering with slow
connections.

The extender is started the way deploy/ runs it apart from the ports: no
--listen (so its own default address), flags an older egpu-scheduler also
knows, and the new settings through EGPU_* variables, which an older one
ignores; so each test shows the same attack on the code before the fix.
Every socket here stays on this host (loopback or its own address)."""
import json
import re
import resource
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from test_scheduler import ASSIGNED, api, cluster  # noqa: F401 (fixture)


class Extender:
    """egpu-scheduler with its defaults, as a tenant would find it."""

    def __init__(self, build_dir, api, tmp_path, env=None):
        self.log = tmp_path / "extender.log"
        self.proc = subprocess.Popen(
            [str(build_dir / "src/scheduler/egpu-scheduler"), "--kubeconfig", api.kubeconfig,
             "--port", "0", "--leader-elect", "false"],
            env={"PATH": "/usr/bin:/bin", "EGPU_HEALTH_LISTEN": "127.0.0.1",
                 "EGPU_HEALTH_PORT": "0", **(env or {})},
            stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))
        deadline = time.time() + 15
        m = None
        while time.time() < deadline and m is None:
            m = re.search(r"main\.c:\d+\] egpu-scheduler: serving addr=(\S+) port=(\d+)"
                          r"(?: health_addr=\S+ "
                          r"health_port=(\d+))?", self.log.read_text())
            if m is None:
                assert self.proc.poll() is None, self.log.read_text()
                time.sleep(0.05)
        assert m, self.log.read_text()
        self.port = int(m.group(2))  # the extender verbs
        self.health_port = int(m.group(3) or m.group(2))  # /healthz, /readyz, /metrics

    def request(self, method, path, body=None, host="127.0.0.1", port=None, timeout=10):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://{host}:{port or self.port}{path}", data=data,
                                     method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def health(self, path, timeout=10):
        return self.request("GET", path, port=self.health_port, timeout=timeout)

    def metric(self, name, labels=""):
        _, text = self.health("/metrics")
        for line in text.splitlines():
            if line.startswith(name + labels + " "):
                return float(line.split()[-1])
        return None

    def wait_ready(self, pods):
        deadline = time.time() + 15
        while time.time() < deadline:
            if (self.health("/readyz")[0] == 200
                    and self.metric("egpu_scheduler_cache_pods") == pods):
                return
            time.sleep(0.1)
        raise AssertionError("not ready\n" + self.log.read_text())

    def stop(self):
        self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def extender(build_dir, api, tmp_path):
    started = []

    def start(env=None):
        x = Extender(build_dir, api, tmp_path, env)
        started.append(x)
        return x
    yield start
    for x in started:
        x.stop()


def own_address():
    """An IPv4 address of this host that is not loopback (what a pod on the
    network would connect to), or None."""
    try:
        out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"],
                             capture_output=True, text=True, timeout=10).stdout
    except OSError:
        return None
    m = re.search(r"\binet (\d+\.\d+\.\d+\.\d+)/", out)
    return m.group(1) if m else None


def other_pod(api, name, ns="team-b", scheduler="default-scheduler", gpu=0):
    res = {"cpu": "1"}
    if gpu:
        res["elasticgpu.io/gpu-core"] = str(gpu)
    st, obj = api.call("POST", f"/api/v1/namespaces/{ns}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
        "spec": {"schedulerName": scheduler, "tolerations": [],
                 "containers": [{"name": "c", "image": "busybox",
                                 "resources": {"requests": res}}]}})
    assert st == 201, obj
    return obj


def untouched(api, name, ns="team-b"):
    st, p = api.call("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
    assert st == 200
    return not p["spec"].get("nodeName") and ASSIGNED not in (p["metadata"].get("annotations")
                                                             or {})


def test_anonymous_bind_from_the_network_is_not_served(api, extender):
    """A tenant's pod reaches the scheduler pod's address: POST /bind there
    finds nothing listening (the verbs are on loopback only)."""
    addr = own_address()
    if addr is None:
        pytest.skip("this host has no non-loopback IPv4 address to play the pod network")
    cluster(api, nodes=("gpu-1",), gpus=1)
    other_pod(api, "victim")
    x = extender()
    x.wait_ready(pods=1)
    try:
        st, body = x.request("POST", "/bind", {"PodName": "victim", "PodNamespace": "team-b",
                                               "PodUID": "", "Node": "gpu-1"}, host=addr,
                             timeout=5)
        served = f"{st} {body}"
    except (ConnectionRefusedError, urllib.error.URLError) as e:
        served = None
        assert "refused" in str(e).lower(), e
    assert served is None, f"the extender answered a bind from {addr}: {served}"
    assert untouched(api, "victim")


@pytest.mark.parametrize("case", ["other-scheduler", "no-gpu"])
def test_bind_of_a_pod_not_ours_binds_nothing(api, extender, case):
    """Even on the extender's own port, bind refuses a pod of another
    scheduler (asking a GPU or not) and one of ours asking no GPU: 403 naming
    the pod and why, and the pod is neither bound nor annotated."""
    cluster(api, nodes=("gpu-1",), gpus=1)
    if case == "other-scheduler":
        other_pod(api, "victim", gpu=30)
        why = 'spec.schedulerName is "default-scheduler"'
    else:
        other_pod(api, "victim", scheduler="elastic-gpu-scheduler")
        why = "asks for no elasticgpu.io/gpu-core"
    x = extender()
    x.wait_ready(pods=1)
    st, body = x.request("POST", "/bind", {"PodName": "victim", "PodNamespace": "team-b",
                                           "PodUID": "", "Node": "gpu-1"})
    assert st == 403, body
    err = json.loads(body)["Error"]
    assert "team-b/victim" in err and why in err, err
    time.sleep(0.5)
    assert untouched(api, "victim")
    deadline = time.time() + 5
    while x.metric("egpu_scheduler_bind_failures_total", '{reason="not_ours"}') != 1:
        assert time.time() < deadline, x.health("/metrics")[1]
        time.sleep(0.1)


def flood(port, n, sources):
    """Open n connections to 127.0.0.1:port from the given source addresses
    (round robin) and send nothing. Returns the sockets (the caller closes)."""
    socks = []
    for i in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        socks.append(s)
        s.bind((sources[i % len(sources)], 0))
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            pass  # refused while the backlog is full is fine: it is a flood
    return socks


@pytest.mark.parametrize("sources", [1, 40], ids=["one-client", "many-clients"])
def test_slow_connections_neither_stop_the_extender_nor_go_unnoticed(api, extender, sources):
    """1,100 connections that send nothing, from one address and from forty,
    to the port a tenant reaches: kube-scheduler's calls on its kept-alive
    connection and the kubelet's probes are still answered, and the refusals
    are counted."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    cluster(api, nodes=("gpu-1",), gpus=1)
    api.pod("p", 30)
    x = extender()
    x.wait_ready(pods=1)
    # kube-scheduler's connection, kept alive, open before the flood.
    ks = http_client(x.port)
    st, _ = ks("/filter", {"Pod": api.get_pod("p"), "NodeNames": ["gpu-1"]})
    assert st == 200
    socks = flood(x.health_port, 1100, [f"127.0.1.{i + 1}" for i in range(sources)])
    try:
        time.sleep(0.5)
        t0 = time.time()
        st, body = ks("/filter", {"Pod": api.get_pod("p"), "NodeNames": ["gpu-1"]})
        assert st == 200 and json.loads(body)["NodeNames"] == ["gpu-1"], body
        # A fresh connection of kube-scheduler's too.
        st, body = x.request("POST", "/filter", {"Pod": api.get_pod("p"),
                                                 "NodeNames": ["gpu-1"]}, timeout=5)
        assert st == 200, body
        assert time.time() - t0 < 5
        reason = "per_client" if sources == 1 else "total"
        if sources == 1:
            # The kubelet's probe comes from another address: still answered.
            assert x.health("/readyz", timeout=5)[0] == 200
        else:
            # Forty addresses fill the health port; they never reach the verbs.
            for s in socks[:900]:
                s.close()
            socks = socks[900:]
            time.sleep(0.5)
        refused = x.metric("egpu_http_connections_refused_total", f'{{reason="{reason}"}}')
        assert refused is not None and refused >= 800, x.health("/metrics")[1]
    finally:
        for s in socks:
            s.close()


def http_client(port):
    """A kept-alive HTTP/1.1 client on one connection, as kube-scheduler's."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)

    def post(path, body):
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read().decode()
    return post


def test_slowloris_is_dropped_after_the_request_timeout(api, extender):
    """A client that trickles its headers a byte every 0.2 s (never idle
    long enough for an inactivity timeout) is dropped request-timeout (2 s)
    after its first byte, and counted."""
    cluster(api, nodes=("gpu-1",), gpus=1)
    x = extender(env={"EGPU_REQUEST_TIMEOUT": "2"})
    x.wait_ready(pods=0)
    s = socket.create_connection(("127.0.0.1", x.health_port), timeout=0.2)
    req = b"GET /readyz HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 200
    t0, sent, dropped = time.time(), 0, None
    try:
        while time.time() - t0 < 8 and dropped is None:
            try:
                s.send(req[sent:sent + 1])
                sent += 1
                if s.recv(1) == b"":
                    dropped = time.time() - t0
            except socket.timeout:
                pass
            except OSError:
                dropped = time.time() - t0
    finally:
        s.close()
    assert dropped is not None, f"still connected after 8 s ({sent} bytes sent)"
    assert 1.8 <= dropped < 4.0, dropped
    assert sent < len(req)
    assert x.metric("egpu_http_connections_timed_out_total", '{reason="slow"}') == 1
