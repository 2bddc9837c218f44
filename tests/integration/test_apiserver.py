"""Faithfulness of the test API server (tests/apiserver/server.py).

The C components are tested against that server, so it must behave like a
real kube-apiserver for what they touch. These tests drive it with real
clients, which have only ever talked to real clusters:

* kubectl (get, list, watch, create -f, patch merge/json/strategic, label
  selectors, ``create --raw`` for a binding, delete with finalizers,
  bearer-token auth over HTTPS: kubectl, like client-go's clientcmd, never
  sends a token over plain HTTP);
* Debian's python3-kubernetes (paging, watch with resourceVersion and
  bookmarks, create/patch/replace and 409, bindings, custom objects and their
  finalizers, leases);
* raw HTTP, compared with the wire fixtures in ../shared/k8s-wire (Status
  bodies, 410 after compaction, watch events) and for the control API (fault
  injection, down mode, dropped watches, the request log).
"""
import http.client
import json
import os
import pathlib
import select
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import find_tool, tool

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVER = ROOT / "tests" / "apiserver" / "server.py"
WIRE = ROOT.parent / "shared" / "k8s-wire"
TOKEN = "egpu-test-token"
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

try:
    import kubernetes
    from kubernetes import client as kclient
    from kubernetes import watch as kwatch
    from kubernetes.client.rest import ApiException
except ImportError:  # pragma: no cover - Debian's python3-kubernetes is a test dependency
    kubernetes = None

KUBECTL = find_tool("kubectl")  # tools/bin's (make deps), else PATH's
# Under CI=true a missing kubectl fails the kube fixture's tests instead.
needs_kubectl = pytest.mark.skipif(KUBECTL is None and os.environ.get("CI") != "true",
                                   reason="kubectl is not installed (`make deps`)")
needs_pyclient = pytest.mark.skipif(kubernetes is None,
                                    reason="python3-kubernetes (Debian package) is not installed")


# =============================================================================
# Server fixtures
# =============================================================================

class Server:
    """A running server.py and a small raw HTTP client for it."""

    def __init__(self, args, ca=None):
        self.log = tempfile.TemporaryFile()  # stderr: a pipe nobody reads could fill up
        self.proc = subprocess.Popen([PYTHON, str(SERVER), "--port", "0"] + args,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline().strip()
        if not line.startswith("listening on "):
            self.proc.kill()
            self.log.seek(0)
            raise RuntimeError(f"server did not start: {line!r} {self.log.read().decode()}")
        self.url = line[len("listening on "):]
        self.ca = ca
        self.ctx = ssl.create_default_context(cafile=ca) if ca else None

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.log.seek(0)
        errors = self.log.read().decode(errors="replace")
        self.log.close()
        assert "Traceback" not in errors, errors  # the server never crashes on a request

    def request(self, method, path, body=None, ctype="application/json", token=TOKEN,
                headers=None, timeout=10):
        """(status, parsed JSON or text, response headers)"""
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", ctype)
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.ctx) as r:
                code, raw, hdrs = r.status, r.read(), r.headers
        except urllib.error.HTTPError as e:
            code, raw, hdrs = e.code, e.read(), e.headers
        try:
            return code, json.loads(raw), hdrs
        except ValueError:
            return code, raw.decode(errors="replace"), hdrs

    def control(self, path, body=None, method="POST"):
        code, out, _ = self.request(method, "/_control/" + path, body, token=None)
        assert code == 200, out
        return out

    def watches(self):
        return self.control("watches", method="GET")

    def wait_watches(self, n, timeout=5):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.watches() == n:
                return True
            time.sleep(0.02)
        return False


STARTED = []


@pytest.fixture(scope="module")
def apiserver():
    """The server over HTTP with a bearer token: yields (url, token)."""
    srv = Server(["--token", TOKEN, "--bookmark-interval", "0.2", "--history", "100"])
    STARTED.append(srv)
    yield srv.url, TOKEN
    STARTED.remove(srv)
    srv.stop()


@pytest.fixture(scope="module")
def srv(apiserver):
    return next(s for s in STARTED if s.url == apiserver[0])


@pytest.fixture(autouse=True)
def _reset_servers():
    for s in STARTED:
        s.control("reset", {})
    yield


def ok(resp, code=200):
    c, body, _ = resp
    assert c == code, body
    return body


def pod(name, ns="ml-team", labels=None, node=None, **spec):
    p = {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
         "spec": {"containers": [{"name": "trainer",
                                  "image": "registry.example.com/ml/trainer:1.4.2"}], **spec}}
    if node:
        p["spec"]["nodeName"] = node
    return p


def gpu(name, node="gpu-node-1", index=0):
    return {"apiVersion": "elasticgpu.io/v1alpha1", "kind": "GPU",
            "metadata": {"name": name, "labels": {"node": node}},
            "spec": {"nodeName": node, "index": index, "uuid": f"GPU-{name}", "model": "A100",
                     "memory": 40960}}


def fixture(name):
    return json.loads((WIRE / name).read_text())


def claim(name, finalizers=None, ns="ml-team"):
    c = {"apiVersion": "elasticgpu.io/v1alpha1", "kind": "ElasticGPUClaim",
         "metadata": {"name": name, "namespace": ns},
         "spec": {"resources": {"requests": {"elasticgpu.io/gpu-core": "50"}}}}
    if finalizers:
        c["metadata"]["finalizers"] = list(finalizers)
    return c


PROTECTION = "elasticgpu.io/claim-protection"


def no_new_finalizers(kind, name, added):
    """The real 422 message (apimachinery ValidateNoNewFinalizers, %#v of the sorted names)."""
    names = ", ".join(json.dumps(a) for a in sorted(added))
    return (f'{kind} "{name}" is invalid: metadata.finalizers: Forbidden: no new finalizers can '
            f'be added if the object is being deleted, found new finalizers []string{{{names}}}')


# =============================================================================
# kubectl
# =============================================================================

class Kubectl:
    def __init__(self, server, tmp, token):
        self.server = server
        self.tmp = tmp
        args = ["--server", server.url, "--cache-dir", str(tmp / "cache")]
        if token:
            args += ["--token", token]
        if server.ca:
            args += ["--certificate-authority", server.ca]
        self.args = args

    def __call__(self, *argv, check=True, timeout=30, stdin=None):
        env = dict(os.environ, KUBECONFIG=str(self.tmp / "no-kubeconfig"), HOME=str(self.tmp))
        p = subprocess.run([KUBECTL] + self.args + list(argv), capture_output=True, text=True,
                           timeout=timeout, env=env, input=stdin)
        if check:
            assert p.returncode == 0, f"kubectl {' '.join(argv)}: {p.stderr}"
        return p

    def json(self, *argv):
        return json.loads(self(*argv, "-o", "json").stdout)

    def popen(self, *argv):
        env = dict(os.environ, KUBECONFIG=str(self.tmp / "no-kubeconfig"), HOME=str(self.tmp))
        return subprocess.Popen([KUBECTL] + self.args + list(argv), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)


@pytest.fixture(scope="module")
def kube(tmp_path_factory):
    """kubectl against the server over HTTPS with the token (kubectl sends tokens only over
    HTTPS); without openssl to make a certificate, over HTTP with auth off."""
    tool("kubectl")
    tmp = tmp_path_factory.mktemp("kubectl")
    token = None
    args = ["--bookmark-interval", "0.2"]
    ca = None
    if shutil.which("openssl"):
        key, cert = tmp / "key.pem", tmp / "cert.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out",
                        str(cert), "-days", "2", "-subj", "/CN=127.0.0.1", "-addext",
                        "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
        args += ["--tls-cert", str(cert), "--tls-key", str(key), "--token", TOKEN]
        token, ca = TOKEN, str(cert)
    server = Server(args, ca=ca)
    server.control("reset", {})
    STARTED.append(server)
    yield Kubectl(server, tmp, token)
    STARTED.remove(server)
    server.stop()


def write_json(tmp_path, name, obj):
    p = tmp_path / name
    p.write_text(json.dumps(obj))
    return str(p)


@needs_kubectl
def test_kubectl_version_and_discovery(kube):
    v = json.loads(kube("version", "-o", "json").stdout)
    assert v["serverVersion"]["gitVersion"].startswith("v1.")
    out = kube("api-resources", "--no-headers").stdout
    for line in ("pods", "nodes", "leases", "events", "gpus", "elasticgpuclaims", "gpubudgets"):
        assert any(row.split()[0] == line for row in out.splitlines()), (line, out)
    assert kube("get", "--raw", "/api/v1").stdout.find('"pods/binding"') > 0


@needs_kubectl
def test_kubectl_bearer_token_is_checked(kube):
    if kube.server.ca is None:
        pytest.skip("no openssl: kubectl runs over HTTP without a token")
    kube("get", "pods", "-A")
    reqs = kube.server.control("requests", method="GET")
    assert reqs and all(r["authorization"] == f"Bearer {TOKEN}" for r in reqs)
    args = [a if a != TOKEN else "wrong-token" for a in kube.args]
    p = subprocess.run([KUBECTL] + args + ["get", "pods", "-A"], capture_output=True, text=True,
                       timeout=30, env=dict(os.environ, KUBECONFIG="/nonexistent"))
    assert p.returncode != 0
    assert "Unauthorized" in p.stderr or "credentials" in p.stderr


@needs_kubectl
def test_kubectl_sends_no_token_over_http(srv, tmp_path):
    """Why the kubectl tests use HTTPS: clientcmd drops credentials for an http:// server, so
    against the HTTP server with --token kubectl gets 401, exactly as with a real cluster."""
    p = subprocess.run([tool("kubectl"), "--server", srv.url, "--token", TOKEN, "--cache-dir",
                        str(tmp_path / "cache"), "get", "--raw", "/version"],
                       capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, KUBECONFIG=str(tmp_path / "none"), HOME=str(tmp_path)))
    assert p.returncode != 0
    reqs = srv.control("requests", method="GET")
    assert reqs and all(r["authorization"] == "" for r in reqs)


@needs_kubectl
def test_kubectl_create_get_list(kube, tmp_path):
    f = write_json(tmp_path, "pod.json", pod("train-job-0", labels={"app": "trainer"}))
    assert "pod/train-job-0 created" in kube("create", "-f", f).stdout
    got = kube.json("get", "pod", "-n", "ml-team", "train-job-0")
    assert got["kind"] == "Pod" and got["metadata"]["uid"] and got["status"]["phase"] == "Pending"
    assert got["spec"]["containers"][0]["name"] == "trainer"
    lst = kube.json("get", "pods", "-A")
    assert [i["metadata"]["name"] for i in lst["items"]] == ["train-job-0"]
    # table output (server-side printing: meta.k8s.io/v1 Table)
    out = kube("get", "pods", "-n", "ml-team").stdout.splitlines()
    assert out[0].split()[:3] == ["NAME", "READY", "STATUS"]
    assert out[1].split()[:3] == ["train-job-0", "0/1", "Pending"]
    again = kube("create", "-f", f, check=False)
    assert again.returncode != 0 and "AlreadyExists" in again.stderr
    missing = kube("get", "pod", "-n", "ml-team", "nope", check=False)
    assert missing.returncode != 0 and 'pods "nope" not found' in missing.stderr


@needs_kubectl
def test_kubectl_label_and_field_selectors(kube, tmp_path):
    for name, labels, node in (("a", {"app": "x", "tier": "1"}, "gpu-node-1"),
                               ("b", {"app": "y"}, "gpu-node-2"), ("c", {"app": "x"}, None)):
        kube("create", "-f", write_json(tmp_path, f"{name}.json", pod(name, labels=labels,
                                                                        node=node)))

    def names(*sel):
        return kube("get", "pods", "-A", "-o", "name", *sel).stdout.split()
    assert names("-l", "app=x") == ["pod/a", "pod/c"]
    assert names("-l", "app==x,tier") == ["pod/a"]
    assert names("-l", "app!=x") == ["pod/b"]
    assert names("-l", "app in (x,y),!tier") == ["pod/b", "pod/c"]
    assert names("--field-selector", "spec.nodeName=gpu-node-1") == ["pod/a"]
    assert names("--field-selector", "spec.nodeName=") == ["pod/c"]
    bad = kube("get", "pods", "-A", "--field-selector", "spec.bogus=1", check=False)
    assert bad.returncode != 0 and "field label not supported" in bad.stderr


@needs_kubectl
def test_kubectl_patch_merge_json_strategic(kube, tmp_path):
    kube("create", "-f", write_json(tmp_path, "p.json", pod("p", labels={"app": "x"})))
    kube("patch", "pod", "-n", "ml-team", "p", "--type", "merge",
         "-p", '{"metadata":{"labels":{"app":null,"team":"ml"}}}')
    kube("patch", "pod", "-n", "ml-team", "p", "--type", "json",
         "-p", '[{"op":"add","path":"/metadata/annotations","value":{"k":"v"}}]')
    # strategic (kubectl's default): containers merge by name
    kube("patch", "pod", "-n", "ml-team", "p",
         "-p", '{"spec":{"containers":[{"name":"trainer","image":"trainer:2"}]}}')
    got = kube.json("get", "pod", "-n", "ml-team", "p")
    assert got["metadata"]["labels"] == {"team": "ml"}
    assert got["metadata"]["annotations"] == {"k": "v"}
    assert got["spec"]["containers"][0]["image"] == "trainer:2"
    assert got["spec"]["containers"][0]["terminationMessagePath"] == "/dev/termination-log"
    failed = kube("patch", "pod", "-n", "ml-team", "p", "--type", "json", "-p",
                  '[{"op":"test","path":"/metadata/labels/team","value":"other"}]', check=False)
    assert failed.returncode != 0
    assert "the server rejected our request due to an error in our request" in failed.stderr
    # pod spec is immutable except images and a few fields, as on a real cluster
    forbidden = kube("patch", "pod", "-n", "ml-team", "p", "--type", "merge", "-p",
                     '{"spec":{"schedulerName":"elastic-gpu-scheduler"}}', check=False)
    assert forbidden.returncode != 0 and "pod updates may not change fields" in forbidden.stderr


@needs_kubectl
def test_kubectl_custom_resources(kube, tmp_path):
    kube("create", "-f", write_json(tmp_path, "gpu.json", gpu("gpu-node-1-0")))
    table = kube("get", "gpus").stdout.splitlines()
    assert table[0].split() == ["NAME", "NODE", "INDEX", "MODEL", "MEMORY", "HEALTH", "AGE"]
    assert table[1].split()[:5] == ["gpu-node-1-0", "gpu-node-1", "0", "A100", "40960"]
    kube("patch", "gpu", "gpu-node-1-0", "--type", "merge", "-p", '{"spec":{"model":"H100"}}')
    got = kube.json("get", "gpu", "gpu-node-1-0")
    assert got["spec"]["model"] == "H100" and got["metadata"]["generation"] == 2
    smp = kube("patch", "gpu", "gpu-node-1-0", "-p", '{"spec":{"model":"x"}}', check=False)
    assert smp.returncode != 0
    assert fixture("status_415_smp_on_crd.json")["message"] in smp.stderr
    claim = {"apiVersion": "elasticgpu.io/v1alpha1", "kind": "ElasticGPUClaim",
             "metadata": {"name": "c1", "namespace": "ml-team"},
             "spec": {"resources": {"requests": {"elasticgpu.io/gpu-core": "50"}}}}
    kube("create", "-f", write_json(tmp_path, "claim.json", claim))
    assert kube("get", "egpuc", "-A", "-o", "name").stdout.split() == \
        ["elasticgpuclaim.elasticgpu.io/c1"]


@needs_kubectl
def test_kubectl_finalizers_hold_deletion(kube, tmp_path):
    """kubectl delete of a claim with a finalizer leaves it terminating; adding a finalizer
    then is refused with the real message; removing the last one deletes it. Without
    finalizers, delete removes it at once."""
    kube("create", "-f", write_json(tmp_path, "c1.json", claim("c1", [PROTECTION])))
    out = kube("delete", "egpuc", "c1", "-n", "ml-team", "--wait=false")
    # kubectl 1.35 names the namespace, older ones do not.
    assert out.stdout.strip() in ('elasticgpuclaim.elasticgpu.io "c1" deleted',
                                  'elasticgpuclaim.elasticgpu.io "c1" deleted from ml-team '
                                  'namespace')
    got = kube.json("get", "egpuc", "c1", "-n", "ml-team")
    md = got["metadata"]
    assert md["finalizers"] == [PROTECTION] and md["deletionGracePeriodSeconds"] == 0
    assert md["deletionTimestamp"].endswith("Z") and md["generation"] == 2
    bad = kube("patch", "egpuc", "c1", "-n", "ml-team", "--type=merge", "-p",
               json.dumps({"metadata": {"finalizers": [PROTECTION, "example.com/late"]}}),
               check=False)
    assert bad.returncode != 0
    # kubectl rebuilds the message from details.kind, name and causes
    assert bad.stderr.strip() == no_new_finalizers("The ElasticGPUClaim", "c1",
                                                   ["example.com/late"])
    assert kube.json("get", "egpuc", "c1", "-n", "ml-team") == got  # nothing written
    kube("patch", "egpuc", "c1", "-n", "ml-team", "--type=merge", "-p",
         '{"metadata":{"finalizers":null}}')
    gone = kube("get", "egpuc", "c1", "-n", "ml-team", "-o", "json", check=False)
    assert gone.returncode != 0
    assert 'elasticgpuclaims.elasticgpu.io "c1" not found' in gone.stderr
    # no finalizers: gone at once
    kube("create", "-f", write_json(tmp_path, "c2.json", claim("c2")))
    kube("delete", "egpuc", "c2", "-n", "ml-team", "--wait=false")
    assert kube("get", "egpuc", "-n", "ml-team", "-o", "name").stdout.strip() == ""


@needs_kubectl
def test_kubectl_watch_sees_an_event(kube):
    srv = kube.server
    proc = kube.popen("get", "pods", "-n", "ml-team", "--watch-only", "-o", "name")
    try:
        assert srv.wait_watches(1, timeout=15), proc.stderr.read() if proc.poll() else "no watch"
        ok(srv.request("POST", "/api/v1/namespaces/ml-team/pods", pod("watched")), 201)
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        assert ready, "kubectl printed nothing"
        assert proc.stdout.readline().strip() == "pod/watched"
    finally:
        proc.kill()
        proc.wait()
    # and the human-readable (Table) watch
    proc = kube.popen("get", "pods", "-n", "ml-team", "--watch")
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 15)
        assert ready
        assert proc.stdout.readline().split()[:2] == ["NAME", "READY"]
        assert proc.stdout.readline().split()[0] == "watched"
        assert srv.wait_watches(1, timeout=10)
        ok(srv.request("PATCH", "/api/v1/namespaces/ml-team/pods/watched",
                       {"metadata": {"labels": {"x": "y"}}}, "application/merge-patch+json"))
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        assert ready and proc.stdout.readline().split()[0] == "watched"
    finally:
        proc.kill()
        proc.wait()


@needs_kubectl
def test_kubectl_create_raw_binding(kube, tmp_path):
    srv = kube.server
    created = ok(srv.request("POST", "/api/v1/namespaces/ml-team/pods", pod("train-job-0")), 201)
    binding = fixture("binding.json")
    binding["metadata"]["uid"] = created["metadata"]["uid"]
    f = write_json(tmp_path, "binding.json", binding)
    out = kube("create", "--raw", "/api/v1/namespaces/ml-team/pods/train-job-0/binding", "-f", f)
    assert json.loads(out.stdout) == fixture("binding_response_201.json")
    got = kube.json("get", "pod", "-n", "ml-team", "train-job-0")
    assert got["spec"]["nodeName"] == "gpu-node-1"
    assert got["metadata"]["annotations"] == binding["metadata"]["annotations"]
    assert [c["type"] for c in got["status"]["conditions"]] == ["PodScheduled"]
    again = kube("create", "--raw", "/api/v1/namespaces/ml-team/pods/train-job-0/binding",
                 "-f", f, check=False)
    assert again.returncode != 0
    assert 'pod train-job-0 is already assigned to node "gpu-node-1"' in again.stderr


@needs_kubectl
def test_kubectl_leases_events_delete(kube):
    kube("create", "-f", str(WIRE / "lease_create_request.json"))
    out = kube("get", "leases", "-n", "vgpu-system").stdout
    assert "vgpu-scheduler-extender" in out and "vgpu-extender-6c9f7d8b5-k2lqz" in out
    ev = {"apiVersion": "v1", "kind": "Event",
          "metadata": {"name": "train-job-0.17a3f", "namespace": "ml-team"},
          "involvedObject": {"kind": "Pod", "name": "train-job-0", "namespace": "ml-team"},
          "reason": "Scheduled", "message": "assigned to gpu-node-1", "type": "Normal"}
    kube("create", "-f", "-", stdin=json.dumps(ev))
    assert "assigned to gpu-node-1" in kube("get", "events", "-n", "ml-team").stdout
    assert kube("get", "events", "-A", "--field-selector", "involvedObject.name=train-job-0",
                "-o", "name").stdout.split() == ["event/train-job-0.17a3f"]
    kube("delete", "lease", "-n", "vgpu-system", "vgpu-scheduler-extender")
    assert kube("get", "leases", "-A", "-o", "name").stdout.strip() == ""


# =============================================================================
# python3-kubernetes
# =============================================================================

@pytest.fixture(scope="module")
def api(apiserver):
    url, token = apiserver
    cfg = kclient.Configuration()
    cfg.host = url
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    return kclient.ApiClient(cfg)


def body_of(exc):
    return json.loads(exc.body)


@needs_pyclient
def test_py_list_paging(api, srv):
    v1 = kclient.CoreV1Api(api)
    for i in range(5):
        v1.create_namespaced_pod("ml-team", kclient.V1Pod(
            metadata=kclient.V1ObjectMeta(name=f"p{i}", labels={"app": "trainer"}),
            spec=kclient.V1PodSpec(containers=[kclient.V1Container(name="c", image="i:1")])))
    page = v1.list_namespaced_pod("ml-team", limit=2)
    assert [p.metadata.name for p in page.items] == ["p0", "p1"]
    assert page.metadata._continue and page.metadata.remaining_item_count == 3
    rv = page.metadata.resource_version
    # a change between pages does not show: the continuation reads the snapshot at rv
    v1.delete_namespaced_pod("p3", "ml-team")
    names = [p.metadata.name for p in page.items]
    while page.metadata._continue:
        page = v1.list_namespaced_pod("ml-team", limit=2, _continue=page.metadata._continue)
        assert page.metadata.resource_version == rv
        names += [p.metadata.name for p in page.items]
    assert names == ["p0", "p1", "p2", "p3", "p4"]
    assert page.metadata.remaining_item_count is None
    # all namespaces, with a selector (no remainingItemCount with selectors)
    sel = v1.list_pod_for_all_namespaces(limit=1, label_selector="app=trainer")
    assert len(sel.items) == 1 and sel.metadata._continue
    assert sel.metadata.remaining_item_count is None
    # the request really was paged
    assert any(r["query"] == "limit=2" and r["path"] == "/api/v1/namespaces/ml-team/pods"
               for r in srv.control("requests", method="GET"))


@needs_pyclient
def test_py_watch_resource_version_and_bookmarks(api):
    v1 = kclient.CoreV1Api(api)
    first = v1.create_namespaced_pod("ml-team", pod("w0"))
    v1.patch_namespaced_pod("w0", "ml-team", {"metadata": {"labels": {"step": "2"}}})
    w = kwatch.Watch()
    events = []
    for ev in w.stream(v1.list_namespaced_pod, "ml-team",
                       resource_version=first.metadata.resource_version,
                       allow_watch_bookmarks=True, timeout_seconds=5):
        events.append(ev)
        if ev["type"] == "BOOKMARK":
            w.stop()
    assert events[0]["type"] == "MODIFIED"
    assert events[0]["object"].metadata.labels == {"step": "2"}
    bm = events[-1]["raw_object"]
    assert events[-1]["type"] == "BOOKMARK"
    assert int(bm["metadata"]["resourceVersion"]) >= \
        int(events[0]["object"].metadata.resource_version)
    assert bm["spec"] == {"containers": None} and bm["kind"] == "Pod"
    # resourceVersion unset: synthetic ADDED for what exists, then live events
    seen = []
    w = kwatch.Watch()

    def later():
        time.sleep(0.3)
        v1.create_namespaced_pod("ml-team", pod("w1"))
    t = threading.Thread(target=later)
    t.start()
    for ev in w.stream(v1.list_namespaced_pod, "ml-team", timeout_seconds=5):
        seen.append((ev["type"], ev["object"].metadata.name))
        if len(seen) == 2:
            w.stop()
    t.join()
    assert seen == [("ADDED", "w0"), ("ADDED", "w1")]


@needs_pyclient
def test_py_create_patch_replace_conflict(api):
    v1 = kclient.CoreV1Api(api)
    p = v1.create_namespaced_pod("ml-team", pod("train-job-0"))
    assert p.metadata.uid and p.metadata.creation_timestamp and p.status.phase == "Pending"
    patched = v1.patch_namespaced_pod("train-job-0", "ml-team",
                                      {"metadata": {"annotations": {"example.com/a": "1"}}})
    assert int(patched.metadata.resource_version) > int(p.metadata.resource_version)
    stale = p  # still carries the first resourceVersion
    stale.metadata.labels = {"x": "y"}
    with pytest.raises(ApiException) as e:
        v1.replace_namespaced_pod("train-job-0", "ml-team", stale)
    assert e.value.status == 409
    assert body_of(e.value) == fixture("status_409_conflict.json")
    fresh = v1.read_namespaced_pod("train-job-0", "ml-team")
    fresh.metadata.labels = {"x": "y"}
    assert v1.replace_namespaced_pod("train-job-0", "ml-team", fresh).metadata.labels == {"x": "y"}
    with pytest.raises(ApiException) as e:
        v1.create_namespaced_pod("ml-team", pod("train-job-0"))
    assert e.value.status == 409 and body_of(e.value)["reason"] == "AlreadyExists"
    gen = v1.create_namespaced_pod("ml-team", {"metadata": {"generateName": "job-"},
                                               "spec": pod("x")["spec"]})
    assert gen.metadata.name.startswith("job-") and len(gen.metadata.name) == 9
    with pytest.raises(ApiException) as e:
        v1.read_namespaced_pod("nope", "ml-team")
    assert e.value.status == 404 and body_of(e.value)["details"] == {"name": "nope",
                                                                      "kind": "pods"}


@needs_pyclient
def test_py_binding(api):
    v1 = kclient.CoreV1Api(api)
    p = v1.create_namespaced_pod("ml-team", pod("train-job-0"))
    body = kclient.V1Binding(
        metadata=kclient.V1ObjectMeta(name="train-job-0", namespace="ml-team", uid=p.metadata.uid,
                                      annotations={"elasticgpu.io/assigned": "x"}),
        target=kclient.V1ObjectReference(kind="Node", name="gpu-node-2"))
    # The reply is a Status, which this client cannot read as a V1Binding (a known issue of the
    # generated client, also against a real cluster): read the raw reply instead.
    r = v1.create_namespaced_binding("ml-team", body, _preload_content=False)
    assert r.status == 201 and json.loads(r.data) == fixture("binding_response_201.json")
    bound = v1.read_namespaced_pod("train-job-0", "ml-team")
    assert bound.spec.node_name == "gpu-node-2"
    assert bound.metadata.annotations == {"elasticgpu.io/assigned": "x"}
    assert [(c.type, c.status) for c in bound.status.conditions] == [("PodScheduled", "True")]
    body.metadata.uid = None
    with pytest.raises(ApiException) as e:
        v1.create_namespaced_pod_binding("train-job-0", "ml-team", body, _preload_content=False)
    assert e.value.status == 409
    assert body_of(e.value) == fixture("status_409_binding_conflict.json")


@needs_pyclient
def test_py_custom_objects(api):
    co = kclient.CustomObjectsApi(api)
    g, v = "elasticgpu.io", "v1alpha1"
    obj = gpu("gpu-node-1-0")
    obj["status"] = {"health": "Healthy"}  # create cannot set status (status subresource)
    created = co.create_cluster_custom_object(g, v, "gpus", obj)
    assert "status" not in created and created["metadata"]["generation"] == 1
    co.create_cluster_custom_object(g, v, "gpus", gpu("gpu-node-2-0", node="gpu-node-2"))
    st = co.patch_cluster_custom_object_status(g, v, "gpus", "gpu-node-1-0",
                                               {"status": {"health": "Healthy"},
                                                "spec": {"model": "ignored"}})
    assert st["status"] == {"health": "Healthy"} and st["spec"]["model"] == "A100"
    assert st["metadata"]["generation"] == 1
    main = co.patch_cluster_custom_object(g, v, "gpus", "gpu-node-1-0",
                                          {"spec": {"memory": 81920},
                                           "status": {"health": "ignored"}})
    assert main["spec"]["memory"] == 81920 and main["status"] == {"health": "Healthy"}
    assert main["metadata"]["generation"] == 2
    got = co.get_cluster_custom_object(g, v, "gpus", "gpu-node-1-0")
    assert got["kind"] == "GPU" and got["apiVersion"] == "elasticgpu.io/v1alpha1"
    lst = co.list_cluster_custom_object(g, v, "gpus", field_selector="spec.nodeName=gpu-node-2")
    assert lst["kind"] == "GPUList" and [i["metadata"]["name"] for i in lst["items"]] == \
        ["gpu-node-2-0"]
    assert lst["items"][0]["kind"] == "GPU"  # custom resource lists keep kind and apiVersion
    claim = {"apiVersion": f"{g}/{v}", "kind": "ElasticGPUClaim", "metadata": {"name": "c1"},
             "spec": {"resources": {"requests": {"elasticgpu.io/gpu-core": "50"}}}}
    co.create_namespaced_custom_object(g, v, "ml-team", "elasticgpuclaims", claim)
    claims = co.list_namespaced_custom_object(g, v, "ml-team", "elasticgpuclaims")
    assert [c["metadata"]["name"] for c in claims["items"]] == ["c1"]
    # custom resources need metadata.resourceVersion on PUT; replace_* sends the one read
    got["spec"]["index"] = 3
    assert co.replace_cluster_custom_object(g, v, "gpus", "gpu-node-1-0", got)["spec"]["index"] == 3
    del got["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as e:
        co.replace_cluster_custom_object(g, v, "gpus", "gpu-node-1-0", got)
    assert e.value.status == 422 and body_of(e.value)["message"] == (
        'GPU.elasticgpu.io "gpu-node-1-0" is invalid: metadata.resourceVersion: Invalid value: '
        '0x0: must be specified for an update')
    # a watch on custom objects: the python client hands them over as dicts
    w = kwatch.Watch()
    seen = []
    for ev in w.stream(co.list_cluster_custom_object, g, v, "gpus", timeout_seconds=3):
        seen.append((ev["type"], ev["object"]["metadata"]["name"]))
        if len(seen) == 2:
            w.stop()
    assert seen == [("ADDED", "gpu-node-1-0"), ("ADDED", "gpu-node-2-0")]
    deleted = co.delete_cluster_custom_object(g, v, "gpus", "gpu-node-2-0")
    assert deleted["kind"] == "GPU"  # custom resources: DELETE returns the object
    with pytest.raises(ApiException) as e:
        api.call_api("/apis/elasticgpu.io/v1alpha1/gpus/gpu-node-1-0", "PATCH",
                     header_params={"Content-Type": "application/strategic-merge-patch+json",
                                    "Accept": "application/json"},
                     body={"spec": {"model": "x"}}, auth_settings=["BearerToken"],
                     _preload_content=False)
    assert e.value.status == 415 and body_of(e.value) == fixture("status_415_smp_on_crd.json")


@needs_pyclient
def test_py_finalizers_hold_deletion(api):
    """CustomObjectsApi on elasticgpuclaims: DELETE with a finalizer keeps the object with
    deletionTimestamp (MODIFIED), a second DELETE changes nothing, a new finalizer is refused,
    deletionTimestamp cannot be unset, and removing the last finalizer deletes it (DELETED
    with the object as last stored). Without finalizers DELETE removes it at once."""
    co = kclient.CustomObjectsApi(api)
    g, v, ns, plural = "elasticgpu.io", "v1alpha1", "ml-team", "elasticgpuclaims"
    created = co.create_namespaced_custom_object(g, v, ns, plural, claim("c1", [PROTECTION]))
    rv0 = int(created["metadata"]["resourceVersion"])
    marked = co.delete_namespaced_custom_object(g, v, ns, plural, "c1")
    md = marked["metadata"]
    assert marked["kind"] == "ElasticGPUClaim" and md["uid"] == created["metadata"]["uid"]
    assert md["finalizers"] == [PROTECTION] and md["deletionGracePeriodSeconds"] == 0
    assert md["deletionTimestamp"].endswith("Z") and md["generation"] == 2
    assert int(md["resourceVersion"]) > rv0
    assert co.get_namespaced_custom_object(g, v, ns, plural, "c1") == marked
    assert co.delete_namespaced_custom_object(g, v, ns, plural, "c1") == marked  # no new write
    with pytest.raises(ApiException) as e:
        co.patch_namespaced_custom_object(g, v, ns, plural, "c1",
                                          {"metadata": {"finalizers": ["b.example.com/x",
                                                                       PROTECTION,
                                                                       "a.example.com/y"]}})
    st = body_of(e.value)
    assert e.value.status == 422 and st["reason"] == "Invalid"
    assert st["message"] == no_new_finalizers("ElasticGPUClaim.elasticgpu.io", "c1",
                                              ["a.example.com/y", "b.example.com/x"])
    assert st["details"]["causes"] == [{"reason": "FieldValueForbidden",
                                        "message": st["message"].split(" is invalid: "
                                                                       "metadata.finalizers: ")[1],
                                        "field": "metadata.finalizers"}]
    kept = co.patch_namespaced_custom_object(g, v, ns, plural, "c1",
                                             {"metadata": {"deletionTimestamp": None,
                                                           "deletionGracePeriodSeconds": None}})
    assert kept == marked  # deletionTimestamp is kept: a no-op
    last = co.patch_namespaced_custom_object(g, v, ns, plural, "c1",
                                             {"metadata": {"finalizers": []}})
    assert "finalizers" not in last["metadata"] or last["metadata"]["finalizers"] == []
    assert last["metadata"]["deletionTimestamp"] == md["deletionTimestamp"]
    with pytest.raises(ApiException) as e:
        co.get_namespaced_custom_object(g, v, ns, plural, "c1")
    assert e.value.status == 404
    w = kwatch.Watch()
    seen = []
    for ev in w.stream(co.list_namespaced_custom_object, g, v, ns, plural,
                       resource_version=str(rv0), timeout_seconds=3):
        seen.append(ev)
        if ev["type"] == "DELETED":
            w.stop()
    assert [ev["type"] for ev in seen] == ["MODIFIED", "DELETED"]
    assert seen[0]["object"] == marked
    gone = seen[1]["object"]
    assert int(gone["metadata"]["resourceVersion"]) > int(md["resourceVersion"])
    assert {k: x for k, x in gone["metadata"].items() if k != "resourceVersion"} == \
        {k: x for k, x in md.items() if k != "resourceVersion"}  # as last stored
    # without finalizers: deleted at once
    co.create_namespaced_custom_object(g, v, ns, plural, claim("c2"))
    assert "deletionTimestamp" not in \
        co.delete_namespaced_custom_object(g, v, ns, plural, "c2")["metadata"]
    assert co.list_namespaced_custom_object(g, v, ns, plural)["items"] == []


@needs_pyclient
def test_py_leases(api):
    co = kclient.CoordinationV1Api(api)
    req = fixture("lease_create_request.json")
    lease = co.create_namespaced_lease("vgpu-system", req)
    assert lease.spec.holder_identity == req["spec"]["holderIdentity"]
    assert lease.spec.renew_time is not None
    with pytest.raises(ApiException) as e:
        co.create_namespaced_lease("vgpu-system", req)  # another candidate won
    assert e.value.status == 409 and body_of(e.value)["reason"] == "AlreadyExists"
    assert body_of(e.value)["details"] == {"name": "vgpu-scheduler-extender",
                                           "group": "coordination.k8s.io", "kind": "leases"}
    released = fixture("lease_released.json")
    released["metadata"]["resourceVersion"] = lease.metadata.resource_version
    out = co.replace_namespaced_lease("vgpu-scheduler-extender", "vgpu-system", released)
    assert out.spec.holder_identity is None or out.spec.holder_identity == ""
    assert out.spec.lease_duration_seconds == 1
    with pytest.raises(ApiException) as e:  # the same resourceVersion again: stale now
        co.replace_namespaced_lease("vgpu-scheduler-extender", "vgpu-system", released)
    assert e.value.status == 409
    assert body_of(e.value)["message"] == (
        'Operation cannot be fulfilled on leases.coordination.k8s.io "vgpu-scheduler-extender": '
        'the object has been modified; please apply your changes to the latest version and try '
        'again')
    st = co.delete_namespaced_lease("vgpu-scheduler-extender", "vgpu-system")
    assert st.status == "Success" and st.details.kind == "leases"  # a Status, not the object


# =============================================================================
# Raw HTTP: wire details and the control API
# =============================================================================

def test_first_line_and_auth(srv):
    assert srv.url.startswith("http://127.0.0.1:")
    code, body, _ = srv.request("GET", "/api/v1/pods", token=None)
    assert code == 401 and body == {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                    "status": "Failure", "message": "Unauthorized",
                                    "reason": "Unauthorized", "code": 401}
    assert srv.request("GET", "/api/v1/pods", token="wrong")[0] == 401
    assert srv.request("GET", "/api/v1/pods")[0] == 200
    assert srv.request("GET", "/version")[1]["major"] == "1"


def test_status_409_bodies_match_fixtures(srv):
    created = ok(srv.request("POST", "/api/v1/namespaces/ml-team/pods", pod("train-job-0")), 201)
    stale = dict(created, metadata=dict(created["metadata"], labels={"a": "b"}))
    ok(srv.request("PUT", "/api/v1/namespaces/ml-team/pods/train-job-0", stale))
    code, body, _ = srv.request("PUT", "/api/v1/namespaces/ml-team/pods/train-job-0", stale)
    assert code == 409 and body == fixture("status_409_conflict.json")
    binding = fixture("binding.json")
    binding["metadata"]["uid"] = created["metadata"]["uid"]
    binding["target"]["name"] = "gpu-node-2"
    assert ok(srv.request("POST", "/api/v1/namespaces/ml-team/pods/train-job-0/binding",
                          binding), 201) == fixture("binding_response_201.json")
    code, body, _ = srv.request("POST", "/api/v1/namespaces/ml-team/pods/train-job-0/binding",
                                binding)
    assert code == 409 and body == fixture("status_409_binding_conflict.json")


def test_binding_errors(srv):
    ok(srv.request("POST", "/api/v1/namespaces/ml-team/pods", pod("p")), 201)
    url = "/api/v1/namespaces/ml-team/pods/p/binding"
    b = {"kind": "Binding", "apiVersion": "v1", "metadata": {"name": "other"},
         "target": {"kind": "Node", "name": "n"}}
    code, body, _ = srv.request("POST", url, b)
    assert code == 400 and body["message"] == "name in URL does not match name in Binding object"
    b["metadata"] = {"name": "p", "namespace": "elsewhere"}
    assert srv.request("POST", url, b)[0] == 400
    b["metadata"] = {"name": "p", "uid": "not-the-uid"}
    code, body, _ = srv.request("POST", url, b)
    assert code == 409
    assert "Precondition failed: UID in precondition: not-the-uid" in body["message"]
    b["metadata"] = {"name": "p"}
    b["target"] = {"kind": "Node"}
    assert srv.request("POST", url, b)[1]["message"] == "target.name: Required value"
    code, body, _ = srv.request("POST", "/api/v1/namespaces/ml-team/pods/none/binding",
                                {"metadata": {"name": "none"}, "target": {"name": "n"}})
    assert code == 404 and body["message"] == 'pods "none" not found'
    # the old collection: POST .../bindings
    ok(srv.request("POST", "/api/v1/namespaces/ml-team/bindings",
                   {"metadata": {"name": "p"}, "target": {"name": "gpu-node-3"}}), 201)
    assert ok(srv.request("GET", "/api/v1/namespaces/ml-team/pods/p"))["spec"]["nodeName"] == \
        "gpu-node-3"


def read_events(resp, n=None):
    """Read watch events (one JSON document per line) until n of them or the end."""
    out = []
    while n is None or len(out) < n:
        try:
            line = resp.readline()
        except (http.client.IncompleteRead, ConnectionError, OSError):
            break
        if not line:
            break
        out.append(json.loads(line))
    return out


def open_watch(srv, path, token=TOKEN, timeout=10):
    u = urllib.parse.urlsplit(srv.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
    resp = conn.getresponse()
    return conn, resp


def test_watch_410_after_compact_and_history(srv):
    created = ok(srv.request("POST", "/api/v1/namespaces/ml-team/pods", pod("p")), 201)
    rv = created["metadata"]["resourceVersion"]
    srv.control("compact", {})
    conn, resp = open_watch(srv, f"/api/v1/namespaces/ml-team/pods?watch=1&resourceVersion={rv}")
    assert resp.status == 200
    assert resp.getheader("Transfer-Encoding") == "chunked"
    events = read_events(resp)
    conn.close()
    assert len(events) == 1
    err = events[0]
    want = json.loads((WIRE / "watch_error_410.jsonl").read_text().splitlines()[0])
    assert err["type"] == "ERROR" and err["object"]["code"] == 410
    assert {k: v for k, v in err["object"].items() if k != "message"} == \
        {k: v for k, v in want["object"].items() if k != "message"}
    assert err["object"]["message"].startswith(f"too old resource version: {rv} (")
    # without compaction, the bounded history (--history 100) also expires old versions
    created = ok(srv.request("POST", "/api/v1/namespaces/ml-team/pods", pod("q")), 201)
    for i in range(101):
        ok(srv.request("PATCH", "/api/v1/namespaces/ml-team/pods/q",
                       {"metadata": {"labels": {"i": str(i)}}}, "application/merge-patch+json"))
    conn, resp = open_watch(srv, "/api/v1/namespaces/ml-team/pods?watch=true&resourceVersion="
                            + created["metadata"]["resourceVersion"])
    events = read_events(resp)
    conn.close()
    assert [e["object"]["code"] for e in events] == [410]


def test_continue_token_expires(srv):
    for n in ("a", "b", "c"):
        ok(srv.request("POST", "/api/v1/namespaces/ml-team/pods", pod(n)), 201)
    page = ok(srv.request("GET", "/api/v1/pods?limit=1"))
    assert page["metadata"]["remainingItemCount"] == 2
    token = page["metadata"]["continue"]
    srv.control("compact", {})
    code, body, _ = srv.request("GET", "/api/v1/pods?limit=1&continue=" + urllib.parse.quote(token))
    want = fixture("status_410_expired_continue.json")
    assert code == 410 and body["reason"] == "Expired" and body["message"] == want["message"]
    assert body["metadata"]["continue"]
    assert srv.request("GET", "/api/v1/pods?limit=1&continue=garbage")[0] == 400


def test_watch_events_selectors_and_bookmarks(srv):
    base = "/api/v1/namespaces/ml-team/pods"
    ok(srv.request("POST", base, pod("a", labels={"app": "x"})), 201)
    conn, resp = open_watch(srv, f"{base}?watch=1&labelSelector=app%3Dx&allowWatchBookmarks=true")
    events = read_events(resp, 1)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "a")]
    assert events[0]["object"]["kind"] == "Pod" and events[0]["object"]["apiVersion"] == "v1"
    ok(srv.request("POST", base, pod("other", labels={"app": "y"})), 201)
    ok(srv.request("PATCH", f"{base}/a", {"metadata": {"labels": {"app": "z"}}},
                   "application/merge-patch+json"))
    ok(srv.request("POST", base, pod("b", labels={"app": "x"})), 201)
    ok(srv.request("DELETE", f"{base}/b"))
    events = [e for e in read_events(resp, 6) if e["type"] != "BOOKMARK"][:4]
    # a stops matching: DELETED with its last matching state; "other" never shows; the
    # pod registry marks b (deletionTimestamp, grace 0 as it is not bound) before it
    # removes it, as the real one does
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == \
        [("DELETED", "a"), ("ADDED", "b"), ("MODIFIED", "b"), ("DELETED", "b")]
    assert events[2]["object"]["metadata"]["deletionGracePeriodSeconds"] == 0
    assert events[0]["object"]["metadata"]["labels"] == {"app": "x"}
    bm = [e for e in read_events(resp, 3) if e["type"] == "BOOKMARK"]
    assert bm, "no BOOKMARK within 3 events"
    want = json.loads((WIRE / "watch_pods_stream.jsonl").read_text().splitlines()[2])
    want["object"]["metadata"]["resourceVersion"] = bm[0]["object"]["metadata"]["resourceVersion"]
    assert bm[0] == want
    conn.close()
    assert srv.wait_watches(0)


def test_watch_send_initial_events_and_timeout(srv):
    base = "/api/v1/namespaces/ml-team/pods"
    ok(srv.request("POST", base, pod("a")), 201)
    ok(srv.request("POST", base, pod("b")), 201)
    t0 = time.monotonic()
    conn, resp = open_watch(srv, f"{base}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true"
                                 "&resourceVersionMatch=NotOlderThan&timeoutSeconds=1")
    events = read_events(resp)
    conn.close()
    assert 0.9 < time.monotonic() - t0 < 4
    assert [e["type"] for e in events[:3]] == ["ADDED", "ADDED", "BOOKMARK"]
    want = json.loads((WIRE / "watch_initial_events_end_bookmark.jsonl").read_text())
    rv = events[2]["object"]["metadata"]["resourceVersion"]
    want["object"]["metadata"]["resourceVersion"] = rv
    assert events[2] == want
    # sendInitialEvents without resourceVersionMatch is refused, as upstream
    code, body, _ = srv.request("GET", f"{base}?watch=1&sendInitialEvents=true"
                                       "&allowWatchBookmarks=true")
    assert code == 422 and body["reason"] == "Invalid"


def test_drop_watches(srv):
    conn, resp = open_watch(srv, "/api/v1/pods?watch=1")
    assert resp.status == 200 and srv.wait_watches(1)
    assert srv.control("drop-watches", {})["dropped"] == 1
    assert read_events(resp) == []  # the stream ends
    conn.close()
    assert srv.watches() == 0


def test_fault_injection(srv):
    srv.control("fault", {"method": "GET", "path": r"^/api/v1/nodes$", "code": 500, "count": 2})
    for _ in range(2):
        code, body, _ = srv.request("GET", "/api/v1/nodes")
        assert code == 500 and body["kind"] == "Status" and body["reason"] == "InternalError"
    assert srv.request("GET", "/api/v1/nodes")[0] == 200
    assert srv.request("GET", "/api/v1/pods")[0] == 200
    srv.control("fault", {"method": "*", "path": "/pods", "code": 0, "delay_ms": 300})
    t0 = time.monotonic()
    assert srv.request("GET", "/api/v1/pods")[0] == 200
    assert time.monotonic() - t0 >= 0.3
    srv.control("fault", {"method": "PATCH", "path": "/nodes/", "code": 429})
    ok(srv.request("POST", "/api/v1/nodes", {"metadata": {"name": "n1"}}), 201)
    code, body, hdrs = srv.request("PATCH", "/api/v1/nodes/n1", {}, "application/merge-patch+json")
    assert code == 429 and hdrs["Retry-After"] == "1" and body["reason"] == "TooManyRequests"
    # a watch can fail too
    srv.control("fault", {"method": "GET", "path": "/pods", "code": 503})
    conn, resp = open_watch(srv, "/api/v1/pods?watch=1")
    assert resp.status == 503
    conn.close()


def test_down_mode(srv):
    srv.control("down", {"down": True})
    code, body, _ = srv.request("GET", "/api/v1/pods")
    assert code == 503 and body["reason"] == "ServiceUnavailable"
    assert srv.request("GET", "/api/v1/pods", token=None)[0] == 503
    srv.control("down", {"down": False})
    assert srv.request("GET", "/api/v1/pods")[0] == 200


def test_request_log(srv):
    srv.request("PATCH", "/api/v1/namespaces/ml-team/pods/x", {"a": 1},
                "application/merge-patch+json")
    srv.request("GET", "/api/v1/pods?limit=5&labelSelector=app%3Dx")
    reqs = srv.control("requests", method="GET")
    assert {"method": "PATCH", "path": "/api/v1/namespaces/ml-team/pods/x", "query": "",
            "content_type": "application/merge-patch+json"}.items() <= reqs[0].items()
    assert reqs[1]["query"] == "limit=5&labelSelector=app%3Dx"
    assert not any(r["path"].startswith("/_control") for r in reqs)


def test_malformed_input_is_a_400(srv):
    base = "/api/v1/namespaces/ml-team/pods"
    for body in (b"{not json", b"[1,2]", b"", b"\xff\xfe"):
        code, st, _ = srv.request("POST", base, body)
        assert code == 400 and st["kind"] == "Status" and st["reason"] == "BadRequest", body
    assert "json parse error" in srv.request("POST", base, b"{")[1]["message"]
    ok(srv.request("POST", base, pod("p")), 201)
    for ctype in ("application/merge-patch+json", "application/json-patch+json"):
        code, st, _ = srv.request("PATCH", f"{base}/p", b"{oops", ctype)
        assert code == 400 and st["reason"] == "BadRequest"
    assert srv.request("PATCH", f"{base}/p", {}, "text/plain")[0] == 415
    assert srv.request("GET", f"{base}?labelSelector=a%20b%20c")[0] == 400
    assert srv.request("GET", f"{base}?limit=x")[0] == 400
    assert srv.request("GET", "/api/v1/nonsense")[0] == 404
    assert srv.request("GET", "/api/v1/namespaces/ml-team/nodes/x")[0] == 404
    code, st, _ = srv.request("POST", base, {"metadata": {"name": "Bad_Name"},
                                             "spec": pod("x")["spec"]})
    assert code == 422 and st["reason"] == "Invalid" and st["details"]["kind"] == "Pod"
    code, st, _ = srv.request("POST", base, {"metadata": {"name": "nocontainers"}, "spec": {}})
    assert code == 422 and "spec.containers: Required value" in st["message"]


def test_json_patch_and_merge_patch_preconditions(srv):
    base = "/api/v1/namespaces/ml-team/pods"
    p = ok(srv.request("POST", base, pod("p")), 201)
    rv = p["metadata"]["resourceVersion"]
    ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": rv},
           {"op": "add", "path": "/metadata/labels/x", "value": "1"}]
    ok(srv.request("PATCH", f"{base}/p", ops, "application/json-patch+json"))
    code, st, _ = srv.request("PATCH", f"{base}/p", ops, "application/json-patch+json")
    assert code == 422 and st["reason"] == "Invalid"
    code, st, _ = srv.request("PATCH", f"{base}/p", {"metadata": {"resourceVersion": rv,
                                                                  "labels": {"y": "2"}}},
                              "application/merge-patch+json")
    assert code == 409 and st["reason"] == "Conflict"
    # remove, move, copy; a no-op patch keeps the resourceVersion
    out = ok(srv.request("PATCH", f"{base}/p", [
        {"op": "copy", "from": "/metadata/labels/x", "path": "/metadata/labels/z"},
        {"op": "move", "from": "/metadata/labels/x", "path": "/metadata/labels/w"},
        {"op": "remove", "path": "/metadata/labels/z"}], "application/json-patch+json"))
    assert out["metadata"]["labels"] == {"w": "1"}
    same = ok(srv.request("PATCH", f"{base}/p", {"metadata": {"labels": {"w": "1"}}},
                          "application/merge-patch+json"))
    assert same["metadata"]["resourceVersion"] == out["metadata"]["resourceVersion"]
    # strategic merge on built-ins: conditions merge by type, $patch: delete
    ok(srv.request("PATCH", f"{base}/p/status", {"status": {"conditions": [
        {"type": "Ready", "status": "False"}]}}, "application/strategic-merge-patch+json"))
    ok(srv.request("PATCH", f"{base}/p/status", {"status": {"conditions": [
        {"type": "Initialized", "status": "True"}]}}, "application/strategic-merge-patch+json"))
    st = ok(srv.request("GET", f"{base}/p"))["status"]
    assert [c["type"] for c in st["conditions"]] == ["Ready", "Initialized"]
    ok(srv.request("PATCH", f"{base}/p/status", {"status": {"conditions": [
        {"type": "Ready", "$patch": "delete"}]}}, "application/strategic-merge-patch+json"))
    st = ok(srv.request("GET", f"{base}/p"))["status"]
    assert [c["type"] for c in st["conditions"]] == ["Initialized"]


def test_status_subresource_semantics(srv):
    node = {"metadata": {"name": "gpu-node-1"},
            "status": {"capacity": {"elasticgpu.io/gpu-core": "400"}}}
    ok(srv.request("POST", "/api/v1/nodes", node), 201)  # the kubelet registers with a status
    n = ok(srv.request("GET", "/api/v1/nodes/gpu-node-1"))
    assert n["status"]["capacity"] == {"elasticgpu.io/gpu-core": "400"}
    n["status"] = {"capacity": {}}
    n["spec"] = {"unschedulable": True}
    n = ok(srv.request("PUT", "/api/v1/nodes/gpu-node-1", n))
    assert n["spec"] == {"unschedulable": True}
    assert n["status"]["capacity"] == {"elasticgpu.io/gpu-core": "400"}  # ignored on main
    n["status"] = {"capacity": {"elasticgpu.io/gpu-core": "800"}}
    n["metadata"]["labels"] = {"dropped": "yes"}
    n["spec"] = {}
    n = ok(srv.request("PUT", "/api/v1/nodes/gpu-node-1/status", n))
    assert n["status"]["capacity"] == {"elasticgpu.io/gpu-core": "800"}
    assert "labels" not in n["metadata"] and n["spec"] == {"unschedulable": True}
    assert srv.request("GET", "/api/v1/namespaces/ml-team/leases/x/status")[0] == 404
    # pods: status is reset on create and only /status changes it
    p = ok(srv.request("POST", "/api/v1/namespaces/ml-team/pods",
                       dict(pod("p"), status={"phase": "Running"})), 201)
    assert p["status"]["phase"] == "Pending" and p["status"]["qosClass"] == "BestEffort"
    p = ok(srv.request("PATCH", "/api/v1/namespaces/ml-team/pods/p/status",
                       {"status": {"phase": "Running"}}, "application/merge-patch+json"))
    assert p["status"]["phase"] == "Running"
    # field selector on status.phase, across namespaces
    lst = ok(srv.request("GET", "/api/v1/pods?fieldSelector=status.phase%3DRunning"))
    assert [i["metadata"]["name"] for i in lst["items"]] == ["p"]
    assert "kind" not in lst["items"][0]  # built-in list items carry no kind/apiVersion


def test_delete_returns_object_and_preconditions(srv):
    base = "/api/v1/namespaces/ml-team/pods"
    p = ok(srv.request("POST", base, pod("p")), 201)
    code, st, _ = srv.request("DELETE", f"{base}/p",
                              {"kind": "DeleteOptions", "apiVersion": "v1",
                               "preconditions": {"uid": "other"}})
    assert code == 409
    conn, resp = open_watch(srv, f"{base}?watch=1&resourceVersion="
                                 f"{p['metadata']['resourceVersion']}")
    d = ok(srv.request("DELETE", f"{base}/p", {"preconditions": {"uid": p["metadata"]["uid"]}}))
    assert d["metadata"]["name"] == "p"
    assert int(d["metadata"]["resourceVersion"]) > int(p["metadata"]["resourceVersion"])
    ev = read_events(resp, 2)
    conn.close()
    # the pod registry marks the (unbound) pod for deletion, grace 0, then removes it
    assert ev[0]["type"] == "MODIFIED" and ev[0]["object"]["metadata"]["deletionTimestamp"]
    assert ev[1]["type"] == "DELETED" and ev[1]["object"] == d
    assert srv.request("DELETE", f"{base}/p")[0] == 404
    # deletecollection with a selector
    for n, app in (("a", "x"), ("b", "y")):
        ok(srv.request("POST", base, pod(n, labels={"app": app})), 201)
    ok(srv.request("DELETE", f"{base}?labelSelector=app%3Dx"))
    assert [i["metadata"]["name"] for i in ok(srv.request("GET", base))["items"]] == ["b"]


def test_delete_with_finalizers_raw(srv):
    """The wire details: preconditions (409 with rest.BeforeDelete's message, also on an
    object being deleted), 202 for orphanDependents=false, the object (not a Status) for a
    resource that answers a real deletion with a Status, pods with finalizers, PUT that
    empties the finalizers, deletecollection, dry run, and binding a pod being deleted."""
    base = "/apis/elasticgpu.io/v1alpha1/namespaces/ml-team/elasticgpuclaims"
    c = ok(srv.request("POST", base, claim("c1", [PROTECTION])), 201)
    uid, rv = c["metadata"]["uid"], c["metadata"]["resourceVersion"]
    code, st, _ = srv.request("DELETE", f"{base}/c1", {"preconditions": {"uid": "other"}})
    assert code == 409 and st["reason"] == "Conflict"
    assert st["message"] == (f'Operation cannot be fulfilled on ElasticGPUClaim.elasticgpu.io '
                             f'"c1": the UID in the precondition (other) does not match the UID '
                             f'in record ({uid}). The object might have been deleted and then '
                             f'recreated')
    assert st["details"] == {"name": "c1", "group": "elasticgpu.io", "kind": "ElasticGPUClaim"}
    dry = ok(srv.request("DELETE", f"{base}/c1?dryRun=All"))
    assert dry["metadata"]["deletionTimestamp"]
    assert "deletionTimestamp" not in ok(srv.request("GET", f"{base}/c1"))["metadata"]
    marked = ok(srv.request("DELETE", f"{base}/c1",
                            {"orphanDependents": False,
                             "preconditions": {"uid": uid, "resourceVersion": rv}}), 202)
    assert ok(srv.request("DELETE", f"{base}/c1?orphanDependents=false"), 202) == marked
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 0
    code, st, _ = srv.request("DELETE", f"{base}/c1", {"preconditions": {"resourceVersion": rv}})
    assert code == 409 and st["message"] == (
        f'Operation cannot be fulfilled on ElasticGPUClaim.elasticgpu.io "c1": the '
        f'ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in '
        f'record ({marked["metadata"]["resourceVersion"]}). The object might have been modified')
    # PUT emptying the finalizers deletes; the reply is the updated object
    put = dict(marked, metadata=dict(marked["metadata"], finalizers=[]))
    out = ok(srv.request("PUT", f"{base}/c1", put))
    assert out["metadata"]["resourceVersion"] == marked["metadata"]["resourceVersion"]
    assert srv.request("GET", f"{base}/c1")[0] == 404
    # a node (real deletion answers a Status) with a finalizer: the object comes back
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gpu-node-9", "finalizers": ["example.com/drain"]}}
    ok(srv.request("POST", "/api/v1/nodes", node), 201)
    n = ok(srv.request("DELETE", "/api/v1/nodes/gpu-node-9"))
    assert n["kind"] == "Node" and n["metadata"]["deletionTimestamp"]
    assert "generation" not in n["metadata"]
    ok(srv.request("PATCH", "/api/v1/nodes/gpu-node-9", [
        {"op": "remove", "path": "/metadata/finalizers"}], "application/json-patch+json"))
    assert srv.request("GET", "/api/v1/nodes/gpu-node-9")[0] == 404
    # a pod with a finalizer: marked, cannot be bound, goes when the finalizer goes
    pods = "/api/v1/namespaces/ml-team/pods"
    p = pod("p")
    p["metadata"]["finalizers"] = ["example.com/keep"]
    ok(srv.request("POST", pods, p), 201)
    ok(srv.request("POST", pods, pod("q")), 201)
    lst = ok(srv.request("DELETE", pods))  # deletecollection: each deleted as by DELETE
    assert [i["metadata"]["name"] for i in lst["items"]] == ["p", "q"]
    assert all("deletionTimestamp" not in i["metadata"] for i in lst["items"])
    left = ok(srv.request("GET", pods))["items"]
    assert [i["metadata"]["name"] for i in left] == ["p"]
    assert left[0]["metadata"]["deletionGracePeriodSeconds"] == 0
    code, st, _ = srv.request("POST", f"{pods}/p/binding",
                              {"metadata": {"name": "p"}, "target": {"name": "gpu-node-1"}})
    assert code == 409 and "pod p is being deleted, cannot be assigned to a host" in st["message"]
    code, st, _ = srv.request("PATCH", f"{pods}/p", {"metadata": {"finalizers": ["x.io/y"]}},
                              "application/merge-patch+json")
    assert code == 422 and st["message"] == no_new_finalizers("Pod", "p", ["x.io/y"])
    ok(srv.request("PATCH", f"{pods}/p", {"metadata": {"finalizers": None}},
                   "application/merge-patch+json"))
    assert ok(srv.request("GET", pods))["items"] == []
    code, st, _ = srv.request("POST", pods, dict(pod("r"), metadata={"name": "r",
                                                                     "finalizers": "x"}))
    assert code == 400 and "metadata.finalizers" in st["message"]


def test_list_exact_resource_version_and_too_large(srv):
    base = "/api/v1/namespaces/ml-team/pods"
    a = ok(srv.request("POST", base, pod("a")), 201)
    ok(srv.request("POST", base, pod("b")), 201)
    rv = a["metadata"]["resourceVersion"]
    old = ok(srv.request("GET", f"{base}?resourceVersion={rv}&resourceVersionMatch=Exact"))
    assert [i["metadata"]["name"] for i in old["items"]] == ["a"]
    assert old["metadata"]["resourceVersion"] == rv
    code, st, hdrs = srv.request("GET", f"{base}?resourceVersion=99999999")
    assert code == 504 and st["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"


def test_optimistic_concurrency_under_load(srv):
    """Read-modify-write with retry on 409 from several threads loses no update, and a watch
    sees every version of the object in order."""
    base = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
    lease = ok(srv.request("POST", base, {"metadata": {"name": "counter"},
                                          "spec": {"leaseTransitions": 0}}), 201)
    conn, resp = open_watch(srv, f"{base}?watch=1&resourceVersion="
                                 f"{lease['metadata']['resourceVersion']}")
    conflicts = []

    def worker():
        for _ in range(15):
            while True:
                cur = ok(srv.request("GET", f"{base}/counter"))
                cur["spec"]["leaseTransitions"] += 1
                code, _, _ = srv.request("PUT", f"{base}/counter", cur)
                if code == 200:
                    break
                assert code == 409
                conflicts.append(1)
    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ok(srv.request("GET", f"{base}/counter"))["spec"]["leaseTransitions"] == 90
    events = read_events(resp, 90)
    conn.close()
    assert [e["object"]["spec"]["leaseTransitions"] for e in events] == list(range(1, 91))
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and len(set(rvs)) == 90


def _ts(s):
    import datetime
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def check_graceful_pod_deletion(call, ns):
    """The pod registry's graceful deletion, as call(method, path, body) -> (code, body)
    sees it; shared by the test API server's test and the real control plane's
    (test_apiserver_real.py), so the two are shown to agree. No kubelet runs: a bound pod
    stays Pending on its node."""
    base = f"/api/v1/namespaces/{ns}/pods"
    mp = "application/merge-patch+json"

    def make(name, node="gpu-node-1", **spec):
        code, out = call("POST", base, pod(name, ns=ns, node=node, **spec))
        assert code == 201, out
        return out

    def gone(name):
        return call("GET", f"{base}/{name}", None)[0] == 404

    # A bound pod: the first DELETE only marks it, with its terminationGracePeriodSeconds.
    make("bound", terminationGracePeriodSeconds=30)
    before = time.time()
    code, out = call("DELETE", f"{base}/bound", None)
    assert code == 200 and out["kind"] == "Pod", out
    md = out["metadata"]
    assert md["deletionGracePeriodSeconds"] == 30, md
    assert before + 30 - 2 <= _ts(md["deletionTimestamp"]) <= time.time() + 30 + 1, md
    code, held = call("GET", f"{base}/bound", None)
    assert code == 200 and held["metadata"]["deletionTimestamp"] == md["deletionTimestamp"]
    # A longer grace does not extend it; a shorter one moves deletionTimestamp earlier.
    code, out = call("DELETE", f"{base}/bound", {"gracePeriodSeconds": 60})
    assert code == 200 and out["metadata"]["deletionTimestamp"] == md["deletionTimestamp"]
    assert out["metadata"]["deletionGracePeriodSeconds"] == 30
    code, out = call("DELETE", f"{base}/bound", {"gracePeriodSeconds": 10})
    assert code == 200 and out["metadata"]["deletionGracePeriodSeconds"] == 10, out
    assert _ts(md["deletionTimestamp"]) - _ts(out["metadata"]["deletionTimestamp"]) == 20
    assert not gone("bound")
    # The kubelet's final DELETE (grace 0) removes it.
    code, out = call("DELETE", f"{base}/bound", {"gracePeriodSeconds": 0})
    assert code == 200 and out["metadata"]["name"] == "bound", out
    assert gone("bound")

    # The DeleteOptions' grace wins over the pod's; an unbound pod goes at once, so does a
    # finished one, and any pod deleted with grace 0.
    make("own", terminationGracePeriodSeconds=30)
    code, out = call("DELETE", f"{base}/own", {"gracePeriodSeconds": 5})
    assert code == 200 and out["metadata"]["deletionGracePeriodSeconds"] == 5, out
    assert call("DELETE", f"{base}/own", {"gracePeriodSeconds": 0})[0] == 200 and gone("own")
    make("unbound", node=None)
    code, out = call("DELETE", f"{base}/unbound", None)
    assert code == 200 and out["metadata"]["name"] == "unbound" and gone("unbound"), out
    make("done")
    code, out = call("PATCH", f"{base}/done/status", ({"status": {"phase": "Succeeded"}}, mp))
    assert code == 200 and out["status"]["phase"] == "Succeeded", out
    assert call("DELETE", f"{base}/done", None)[0] == 200 and gone("done")
    make("forced")
    assert call("DELETE", f"{base}/forced", {"gracePeriodSeconds": 0})[0] == 200
    assert gone("forced")

    # Finalizers: grace 0 only marks a pod that has some, and removing them deletes it;
    # removing them during a grace period leaves it for the kubelet's DELETE.
    fin = {"metadata": {"finalizers": ["example.com/hold"]}}
    for name, grace in (("held-now", 0), ("held-grace", 30)):
        p = pod(name, ns=ns, node="gpu-node-1")
        p["metadata"].update(fin["metadata"])
        code, out = call("POST", base, p)
        assert code == 201, out
        code, out = call("DELETE", f"{base}/{name}", {"gracePeriodSeconds": grace})
        assert code == 200 and out["metadata"]["deletionGracePeriodSeconds"] == grace, out
        assert out["metadata"]["finalizers"] == ["example.com/hold"]
        assert not gone(name)
        code, out = call("PATCH", f"{base}/{name}", ({"metadata": {"finalizers": None}}, mp))
        assert code == 200, out
        if grace == 0:
            assert gone(name)
        else:
            assert not gone(name)
            assert call("DELETE", f"{base}/{name}", {"gracePeriodSeconds": 0})[0] == 200
            assert gone(name)


def test_pod_graceful_deletion(srv):
    """A bound pod is deleted gracefully as by the real pod registry (deletionTimestamp
    now + grace, shortened but never extended by a second DELETE, removed by the
    kubelet's grace 0), an unbound, finished or force-deleted one at once; finalizers
    combine as in the generic registry. The same checks pass on the real control plane
    (test_apiserver_real.py). Also: the watch sees MODIFIED (marked) then DELETED."""
    def call(method, path, body):
        ctype = "application/json"
        if isinstance(body, tuple):
            body, ctype = body
        code, out, _ = srv.request(method, path, body, ctype) if body is not None else \
            srv.request(method, path)
        return code, out

    conn, resp = open_watch(srv, "/api/v1/namespaces/ml-team/pods?watch=1")
    check_graceful_pod_deletion(call, "ml-team")
    events = []
    while not any(e["type"] == "DELETED" and e["object"]["metadata"]["name"] == "held-grace"
                  for e in events):
        got = read_events(resp, 1)
        assert got, events
        events += got
    bound = [(e["type"], e["object"]["metadata"].get("deletionGracePeriodSeconds"))
             for e in events if e["object"]["metadata"]["name"] == "bound"]
    assert bound == [("ADDED", None), ("MODIFIED", 30), ("MODIFIED", 10), ("MODIFIED", 0),
                     ("DELETED", 0)], bound
    conn.close()
