"""egpu-webhook as the API server uses it: the real binary over HTTPS (an
openssl-made certificate), its GPU facts listed and watched from the real
control plane (the `kube` fixture: kube-apiserver with deploy/'s CRDs and
RBAC) holding GPU objects, as its ServiceAccount egpu-webhook (so with the
grants of deploy/webhook/rbac.yaml), called with curl. Only the test of an
API server going away runs on the test API server (tests/apiserver/server.py,
`fault_api`), which can be made to stop answering.

- A GPU pod CREATE in gpu-manager's names is patched: the base64 JSON Patch,
  applied to the object with python3-jsonpatch, gives the elasticgpu.io
  names and schedulerName, with one warning per converted name; the same
  pass over the patched pod patches nothing.
- A share of one card without gpu-memory is refused, or given gpu-core x
  --default-memory-per-core MiB by /mutate.
- A bad request is denied with the exact message users read; gpu-memory is
  checked against the largest card of the GPU objects, which follows the
  watch when a bigger card is added.
- /readyz says 503 until the GPU objects are listed and once their watch
  has failed for --watch-unhealthy-seconds, 200 otherwise; /metrics counts requests by route
  and result, conversions by name, and the GPU facts.
- POST /mutate-place gives a pod asking no GPU the scheduler name, and
  nothing else; GPU pods, other schedulers and UPDATEs are left alone.
- A malformed body gets HTTP 400 with a plain-text reason, plain HTTP on the
  TLS port gets no answer, and the server keeps serving; SIGTERM exits 0.

curl and openssl: missing, a test fails under CI=true and is skipped otherwise.
"""
import base64
import json
import os
import re
import shutil
import signal
import subprocess
import time

import jsonpatch
import pytest

UID = "7e0b7a4e-52f1-4a40-9d58-0c1d2e3f4a5b"


@pytest.fixture
def api(kube_api):
    """The real control plane (apis.RealApi) these tests run on."""
    return kube_api


def need(tool):
    if shutil.which(tool):
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{tool} is not installed (scripts/deps.sh installs it); CI=true: failing")
    pytest.skip(f"{tool} is not installed")


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    need("openssl")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=egpu-webhook",
                    "-days", "1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(d / "tls.key"), "-out", str(d / "tls.crt")],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return d


class Webhook:
    """egpu-webhook started with kubeconfig (for a real control plane, one of its
    ServiceAccount: api.component_kubeconfig("egpu-webhook")) and cert's pair."""

    def __init__(self, build_dir, kubeconfig, cert, tmp_path, extra=()):
        exe = build_dir / "src/webhook/egpu-webhook"
        if not exe.exists():
            pytest.fail(f"{exe} not built: run `make build` first")
        self.cert = cert
        self.log = tmp_path / "webhook.log"
        self.proc = subprocess.Popen(
            [str(exe), "--kubeconfig", kubeconfig, "--listen", "127.0.0.1", "--port", "0",
             "--health-listen", "127.0.0.1", "--health-port", "0",
             "--tls-cert", str(cert / "tls.crt"), "--tls-key", str(cert / "tls.key"),
             "--watch-unhealthy-seconds", "2", *extra],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))
        deadline = time.time() + 15
        self.url = None
        while time.time() < deadline and self.url is None:
            m = re.search(r"webhook: serving addr=\S+ port=(\d+) health_addr=\S+ "
                          r"health_port=(\d+)", self.log.read_text())
            if m:
                self.url = f"https://127.0.0.1:{m.group(1)}"
                self.health = f"http://127.0.0.1:{m.group(2)}"
            else:
                assert self.proc.poll() is None, self.log.read_text()
                time.sleep(0.05)
        assert self.url, self.log.read_text()

    def curl(self, url, data=None):
        """(status, content type, body) of a GET, or a POST of data (bytes)."""
        cmd = ["curl", "-sS", "--max-time", "10", "--cacert", str(self.cert / "tls.crt"),
               "-o", "-", "-w", "\n%{http_code} %{content_type}", url]
        if data is not None:
            cmd += ["-X", "POST", "-H", "Content-Type: application/json", "--data-binary", "@-"]
        out = subprocess.run(cmd, input=data, stdout=subprocess.PIPE, check=True).stdout
        body, _, tail = out.rpartition(b"\n")
        code, _, ctype = tail.decode().partition(" ")
        return int(code), ctype, body

    def review(self, route, review):
        st, ctype, body = self.curl(self.url + route, json.dumps(review).encode())
        assert st == 200 and ctype == "application/json", (st, body)
        doc = json.loads(body)
        assert doc["apiVersion"] == "admission.k8s.io/v1" and doc["kind"] == "AdmissionReview"
        assert doc["response"]["uid"] == UID
        return doc["response"]

    def wait_ready(self, want=200, timeout=15):
        deadline = time.time() + timeout
        while time.time() < deadline:
            st, _, body = self.curl(self.health + "/readyz")
            if st == want:
                return body.decode()
            time.sleep(0.1)
        raise AssertionError(f"readyz never {want}\n" + self.log.read_text())

    def metrics(self):
        st, _, body = self.curl(self.health + "/metrics")
        assert st == 200
        return body.decode()

    def metric(self, name, labels=""):
        for line in self.metrics().splitlines():
            if line.startswith(name + labels + " "):
                return float(line.split()[-1])
        return None

    def wait_metric(self, name, want, timeout=10):
        """The GPU gauges follow the facts within a fifth of a second."""
        deadline = time.time() + timeout
        while self.metric(name) != want:
            assert time.time() < deadline, (name, self.metric(name), want)
            time.sleep(0.05)

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=15)
        return self.proc.returncode


@pytest.fixture
def webhook(build_dir, api, cert, tmp_path):  # noqa: F811
    need("curl")
    started = []

    def start(extra=(), kubeconfig=None):
        w = Webhook(build_dir, kubeconfig or api.component_kubeconfig("egpu-webhook"), cert,
                    tmp_path, extra)
        started.append(w)
        return w
    yield start
    for w in started:
        w.stop(signal.SIGKILL)


def review(obj, op="CREATE", user="alice", old=None):
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": UID, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "name": "train", "namespace": "ml", "operation": op,
                        "userInfo": {"username": user}, "object": obj, "oldObject": old,
                        "dryRun": False}}


def pod(resources, annotations=None):
    meta = {"name": "train", "namespace": "ml", "labels": {"app": "x"}}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": "default-scheduler",
                     "tolerations": [{"key": "k", "operator": "Exists"}],
                     "containers": [{"name": "train", "image": "trainer:1",
                                     "resources": {"limits": dict(resources),
                                                   "requests": dict(resources)}}]}}


def gpus(api, *mems):
    for i, mem in enumerate(mems):
        api.gpu("gpu-node-1", i, model="NVIDIA A100-SXM4-40GB" if mem <= 40960 else "NVIDIA H100",
                memory=mem)


def test_gpu_pod_patched(webhook, api):  # noqa: F811
    """A GPU pod in gpu-manager's (tencent), gpushare's (aliyun) and HAMi's (nvidia, on
    /mutate-nvidia only) names is patched into elasticgpu.io's, with the scheduler's name and
    the seccomp guard's profile, one warning per converted name; the patched pod passes
    /mutate unchanged and /validate; /metrics counts each route's results and each name."""
    gpus(api, 40960)
    w = webhook()
    w.wait_ready()
    obj = pod({"tencent.com/vcuda-core": "30", "tencent.com/vcuda-memory": "16"},
              {"team": "ml", "tencent.com/vcuda-core-limit": "60"})
    resp = w.review("/mutate", review(obj))
    assert resp["allowed"] is True and resp["patchType"] == "JSONPatch"
    assert resp["warnings"] == [
        'container "train": tencent.com/vcuda-core rewritten to elasticgpu.io/gpu-core 30 '
        '(percent of a card)',
        'container "train": tencent.com/vcuda-memory 16 (1 = 256 MiB) rewritten to '
        'elasticgpu.io/gpu-memory 4096 (MiB)',
        'annotation tencent.com/vcuda-core-limit rewritten to elasticgpu.io/gpu-core-limit 60 '
        '(percent of a card)']
    ops = json.loads(base64.b64decode(resp["patch"]))
    assert {"op": "replace", "path": "/spec/schedulerName",
            "value": "elastic-gpu-scheduler"} in ops
    assert {"op": "remove",
            "path": "/metadata/annotations/tencent.com~1vcuda-core-limit"} in ops
    patched = jsonpatch.apply_patch(obj, ops)
    want = json.loads(json.dumps(obj))
    want["metadata"]["annotations"] = {"team": "ml", "elasticgpu.io/gpu-core-limit": "60"}
    want["spec"]["schedulerName"] = "elastic-gpu-scheduler"
    ours = {"elasticgpu.io/gpu-core": "30", "elasticgpu.io/gpu-memory": "4096"}
    want["spec"]["containers"][0]["resources"] = {"limits": ours, "requests": ours}
    # a share runs under the profile that refuses new namespaces (the seccomp guard)
    want["spec"]["containers"][0]["securityContext"] = {"seccompProfile": {
        "type": "Localhost", "localhostProfile": "elastic-gpu/shared-gpu.json"}}
    assert patched == want
    # reinvocationPolicy: IfNeeded: the patched pod is left as it is, and it is valid
    assert w.review("/mutate", review(patched)) == {"uid": UID, "allowed": True}
    assert w.review("/validate", review(patched)) == {"uid": UID, "allowed": True}
    # aliyun's memory-only pod: the annotations map is created whole
    resp = w.review("/mutate", review(pod({"aliyun.com/gpu-mem": "8"})))
    patched = jsonpatch.apply_patch(pod({"aliyun.com/gpu-mem": "8"}),
                                    json.loads(base64.b64decode(resp["patch"])))
    assert patched["metadata"]["annotations"] == {"elasticgpu.io/gpu-core-limit": "100"}
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {
        "elasticgpu.io/gpu-core": "1", "elasticgpu.io/gpu-memory": "8192"}
    # HAMi's names only on /mutate-nvidia
    hami = pod({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30", "nvidia.com/gpumem": "4000"})
    assert w.review("/mutate", review(hami)) == {"uid": UID, "allowed": True}
    resp = w.review("/mutate-nvidia", review(hami))
    assert jsonpatch.apply_patch(hami, json.loads(base64.b64decode(resp["patch"])))[
        "spec"]["containers"][0]["resources"]["requests"] == {
        "elasticgpu.io/gpu-core": "30", "elasticgpu.io/gpu-memory": "4000"}
    assert w.metric("egpu_webhook_admission_requests_total",
                    '{route=\"mutate\",result=\"patched\"}') == 2
    assert w.metric("egpu_webhook_admission_requests_total",
                    '{route=\"mutate\",result=\"allowed\"}') == 2
    assert w.metric("egpu_webhook_admission_requests_total",
                    '{route=\"mutate-nvidia\",result=\"patched\"}') == 1
    assert w.metric("egpu_webhook_conversions_total", '{name="tencent.com/vcuda-core"}') == 1
    assert w.metric("egpu_webhook_conversions_total", '{name="aliyun.com/gpu-mem"}') == 1
    assert w.metric("egpu_webhook_conversions_total", '{name="nvidia.com/gpucores"}') == 1
    assert w.stop() == 0
    assert "denied" not in w.log.read_text() and "stopping" in w.log.read_text()


def test_place_route_over_tls(webhook, api):  # noqa: F811
    """POST /mutate-place over HTTPS: a pod asking no GPU that names no
    scheduler (or default-scheduler) gets a patch that, applied, sets
    spec.schedulerName to --scheduler-name and nothing else; a GPU pod (a
    GPU init container), a pod naming another scheduler and a pod UPDATE get
    no patch; a malformed body gets HTTP 400 as on /mutate; /metrics counts
    each by route mutate-place. With --set-scheduler-name false nothing is
    patched."""
    w = webhook(extra=("--scheduler-name", "packer"))
    w.wait_ready()
    cpu = pod({"cpu": "2", "memory": "4Gi"}, {"team": "ml"})
    resp = w.review("/mutate-place", review(cpu))
    assert resp["allowed"] is True and resp["patchType"] == "JSONPatch"
    assert "warnings" not in resp
    ops = json.loads(base64.b64decode(resp["patch"]))
    assert ops == [{"op": "replace", "path": "/spec/schedulerName", "value": "packer"}]
    patched = jsonpatch.apply_patch(cpu, ops)
    want = json.loads(json.dumps(cpu))
    want["spec"]["schedulerName"] = "packer"
    assert patched == want
    assert w.review("/mutate-place", review(patched)) == {"uid": UID, "allowed": True}
    unnamed = json.loads(json.dumps(cpu))
    del unnamed["spec"]["schedulerName"]
    resp = w.review("/mutate-place", review(unnamed))
    assert json.loads(base64.b64decode(resp["patch"])) == [
        {"op": "add", "path": "/spec/schedulerName", "value": "packer"}]
    gpu_init = json.loads(json.dumps(cpu))
    gpu_init["spec"]["initContainers"] = [{"name": "warm", "image": "w:1", "resources": {
        "limits": {"elasticgpu.io/gpu-core": "10", "elasticgpu.io/gpu-memory": "1024"}}}]
    assert w.review("/mutate-place", review(gpu_init)) == {"uid": UID, "allowed": True}
    volcano = json.loads(json.dumps(cpu))
    volcano["spec"]["schedulerName"] = "volcano"
    assert w.review("/mutate-place", review(volcano)) == {"uid": UID, "allowed": True}
    assert w.review("/mutate-place", review(cpu, op="UPDATE", old=cpu)) == {
        "uid": UID, "allowed": True}
    st, ctype, body = w.curl(w.url + "/mutate-place", b'{"request":')
    assert st == 400 and ctype.startswith("text/plain")
    assert body == b"AdmissionReview: body is not JSON: unexpected token near end of file " \
                   b"(line 1, column 11)\n"
    m = "egpu_webhook_admission_requests_total"
    assert w.metric(m, '{route="mutate-place",result="patched"}') == 2
    assert w.metric(m, '{route="mutate-place",result="allowed"}') == 4
    assert w.metric(m, '{route="mutate-place",result="error"}') == 1
    assert w.metric(m, '{route="mutate",result="patched"}') is None  # counted apart
    assert w.stop() == 0
    off = webhook(extra=("--set-scheduler-name", "false"))
    off.wait_ready()
    assert off.review("/mutate-place", review(cpu)) == {"uid": UID, "allowed": True}
    assert off.stop() == 0


def test_share_without_memory(webhook, api):  # noqa: F811
    """A share of one card that names no gpu-memory (here tencent's
    vcuda-core alone) is refused by /validate naming gpu-memory, unless the
    operator set --default-memory-per-core: /mutate then writes gpu-core x
    MiB, with a warning, and the pod validates. Whole cards are left alone."""
    gpus(api, 40960)
    share = pod({"elasticgpu.io/gpu-core": "30"})
    w = webhook()
    w.wait_ready()
    resp = w.review("/validate", review(share))
    assert resp["allowed"] is False and resp["status"]["message"] == (
        'container "train": elasticgpu.io/gpu-core is 30 (a share of one card) without '
        'elasticgpu.io/gpu-memory; allowed: gpu-memory in MiB with every share, in requests and '
        'limits, e.g. elasticgpu.io/gpu-memory: "4096" (a share is booked and limited to the '
        'memory it names)')
    assert w.stop() == 0
    w = webhook(extra=("--default-memory-per-core", "400"))
    w.wait_ready()
    tencent = pod({"tencent.com/vcuda-core": "30"})
    resp = w.review("/mutate", review(tencent))
    assert resp["warnings"][-1] == (
        'container "train": elasticgpu.io/gpu-memory set to 12000 MiB (elasticgpu.io/gpu-core 30 '
        'x 400 MiB, the cluster\'s default memory per gpu-core percent); name '
        'elasticgpu.io/gpu-memory in requests and limits to choose')
    patched = jsonpatch.apply_patch(tencent, json.loads(base64.b64decode(resp["patch"])))
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {
        "elasticgpu.io/gpu-core": "30", "elasticgpu.io/gpu-memory": "12000"}
    assert w.review("/validate", review(patched)) == {"uid": UID, "allowed": True}
    whole = pod({"elasticgpu.io/gpu-core": "100"})
    whole["spec"]["schedulerName"] = "elastic-gpu-scheduler"
    assert w.review("/mutate", review(whole)) == {"uid": UID, "allowed": True}
    assert "default_memory_per_core_mib=400" in w.log.read_text()


def test_gpushare_pod_loses_its_card_count(webhook, api):  # noqa: F811
    """A gpushare pod's aliyun.com/gpu-count goes
    with its aliyun.com/gpu-mem (no device plugin advertises it once
    gpushare's is gone, so the pod would stay Pending), with a warning; the
    memory's warning names the unit of each side; a count of several cards
    is refused, naming the field and what is allowed."""
    gpus(api, 40960)
    w = webhook()
    w.wait_ready()
    obj = pod({"aliyun.com/gpu-mem": "4", "aliyun.com/gpu-count": "1"})
    resp = w.review("/mutate", review(obj))
    assert resp["allowed"] is True, resp
    assert 'container "train": aliyun.com/gpu-mem 4 (GiB) rewritten to elasticgpu.io/gpu-memory ' \
        '4096 (MiB)' in resp["warnings"], resp["warnings"]
    assert 'container "train": aliyun.com/gpu-count removed (gpushare\'s card count; ' \
        'aliyun.com/gpu-mem is one shared card\'s memory)' in resp["warnings"], resp["warnings"]
    patched = jsonpatch.apply_patch(obj, json.loads(base64.b64decode(resp["patch"])))
    ours = {"elasticgpu.io/gpu-core": "1", "elasticgpu.io/gpu-memory": "4096"}
    assert patched["spec"]["containers"][0]["resources"] == {"limits": ours, "requests": ours}
    assert w.review("/validate", review(patched)) == {"uid": UID, "allowed": True}
    resp = w.review("/mutate", review(pod({"aliyun.com/gpu-mem": "4",
                                           "aliyun.com/gpu-count": "2"})))
    assert resp["allowed"] is False
    assert resp["status"]["message"].endswith(
        'container "train": aliyun.com/gpu-count is 2 with aliyun.com/gpu-mem; allowed: 1 '
        '(aliyun.com/gpu-mem is the memory of one shared card; Elastic GPU shares at most one '
        'card per container), or no aliyun.com/gpu-count'), resp
    assert w.stop() == 0


def test_bad_request_denied(webhook, api):  # noqa: F811
    """Bad requests are denied with the exact message users read: a gpu-core neither a
    share nor whole cards, more gpu-memory than the largest card the control plane's GPU
    objects have (allowed once the watch brings a bigger card), a model the cluster has
    not, an elasticgpu.io/assigned annotation from a user other than the scheduler."""
    gpus(api, 40960, 24576)
    w = webhook()
    w.wait_ready()
    resp = w.review("/validate", review(pod({"elasticgpu.io/gpu-core": "150"})))
    assert resp == {"uid": UID, "allowed": False, "status": {
        "metadata": {}, "status": "Failure", "reason": "Forbidden", "code": 403,
        "message": 'container "train": elasticgpu.io/gpu-core is 150; allowed: 1..99 to share '
                   'one card, or a multiple of 100 for whole cards'}}
    big = pod({"elasticgpu.io/gpu-core": "50", "elasticgpu.io/gpu-memory": "61440"})
    resp = w.review("/validate", review(big))
    assert resp["status"]["message"] == (
        'container "train": elasticgpu.io/gpu-memory is 61440; allowed: up to 40960 MiB, the '
        'memory of the largest card in the cluster')
    w.wait_metric("egpu_webhook_gpus", 2)
    w.wait_metric("egpu_webhook_largest_card_mib", 40960)
    # a bigger card joins: the watch brings it, and the same pod is allowed
    api.gpu("gpu-node-2", 0, model="NVIDIA H100", memory=81920)
    deadline = time.time() + 10
    while w.review("/validate", review(big)) != {"uid": UID, "allowed": True}:
        assert time.time() < deadline, w.log.read_text()
        time.sleep(0.1)
    resp = w.review("/validate", review(pod({"elasticgpu.io/gpu-core": "30", "elasticgpu.io/gpu-memory": "4096"},
                                            {"elasticgpu.io/gpu-model": "Tesla T4"})))
    assert resp["status"]["message"] == (
        'annotation elasticgpu.io/gpu-model names "Tesla T4"; allowed: the models the cluster '
        'has: NVIDIA A100-SXM4-40GB, NVIDIA H100')
    resp = w.review("/validate", review(pod({"elasticgpu.io/gpu-core": "30", "elasticgpu.io/gpu-memory": "4096"},
                                            {"elasticgpu.io/assigned": "{}"})))
    assert resp["status"]["message"] == (
        'annotation elasticgpu.io/assigned is written only by the scheduler '
        '(system:serviceaccount:elastic-gpu-system:egpu-scheduler); user "alice" may not add it')
    assert w.metric("egpu_webhook_admission_requests_total",
                    '{route=\"validate\",result=\"denied\"}') >= 4
    assert re.search(r'denied route=validate uid=' + UID + r' kind=Pod object=ml/train',
                     w.log.read_text())


def test_readyz(webhook, api, tmp_path):  # noqa: F811
    """/readyz (on the health port and the TLS port) says 503, naming why, while the GPU
    objects cannot be listed (an API server where nothing listens), /healthz 200 all the
    same; with the GPUs of the control plane listed it says ok and /metrics gives their
    count, largest card and models."""
    dead = tmp_path / "dead.kubeconfig"
    kubeconfig = api.component_kubeconfig("egpu-webhook")
    dead.write_text(open(kubeconfig).read().replace(api.url, "http://127.0.0.1:9"))
    w = webhook(kubeconfig=str(dead))
    body = w.wait_ready(503)
    assert "not ready: GPU objects not listed yet" in body
    st, _, body = w.curl(w.url + "/readyz")  # on the TLS port too
    assert st == 503
    assert w.curl(w.url + "/healthz")[0] == 200
    w.stop()
    gpus(api, 16384)
    w = webhook()
    assert w.wait_ready(200).strip() == "ok"
    assert w.curl(w.url + "/readyz")[0] == 200
    w.wait_metric("egpu_webhook_gpus", 1)
    w.wait_metric("egpu_webhook_largest_card_mib", 16384)
    w.wait_metric("egpu_webhook_gpu_models", 1)


def test_readyz_when_the_api_server_goes_away(webhook, fault_api):  # noqa: F811
    """On the test API server (fault_api), which can be made to stop answering and drop
    its watches at once (down, drop-watches): the webhook is not ready once the watch of
    GPUs has failed for --watch-unhealthy-seconds (2), still answers from what it knows
    (the largest card it listed), and is ready again once the server is back."""
    gpus(fault_api, 16384)
    w = webhook(kubeconfig=fault_api.kubeconfig)
    assert w.wait_ready(200).strip() == "ok"
    w.wait_metric("egpu_webhook_largest_card_mib", 16384)
    fault_api.control("down", {"down": True})
    fault_api.control("drop-watches")
    body = w.wait_ready(503, timeout=20)
    assert "not ready: the list and watch of GPU objects has failed for" in body
    resp = w.review("/validate", review(pod({"elasticgpu.io/gpu-core": "50",
                                             "elasticgpu.io/gpu-memory": "20000"})))
    assert "up to 16384 MiB" in resp["status"]["message"]
    fault_api.control("down", {"down": False})
    w.wait_ready(200, timeout=40)


def test_malformed_body_and_keeps_serving(webhook, api):  # noqa: F811
    """A body that is not JSON gets HTTP 400 with a plain-text reason, a review without its
    fields a 400 status in the reply, plain HTTP on the TLS port and random bytes break
    nothing: the server keeps serving, counts them, and exits 0 on SIGTERM."""
    w = webhook()
    w.wait_ready()
    st, ctype, body = w.curl(w.url + "/mutate", b'{"request":')
    assert st == 400 and ctype.startswith("text/plain")
    assert body == b"AdmissionReview: body is not JSON: unexpected token near end of file " \
                   b"(line 1, column 11)\n"
    st, _, body = w.curl(w.url + "/validate", b'{"apiVersion":"v1","request":{"uid":"x"}}')
    assert st == 200
    assert json.loads(body)["response"]["status"]["code"] == 400
    # plain HTTP on the TLS port: no HTTP answer, and nothing breaks
    r = subprocess.run(["curl", "-sS", "--max-time", "5", "-o", "/dev/null", "-w",
                        "%{http_code}", "http://" + w.url[len("https://"):] + "/validate"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert r.stdout.decode() in ("000", "")
    for _ in range(20):
        garbage = os.urandom(512)
        st, _, _ = w.curl(w.url + "/validate", garbage)
        assert st in (200, 400)
    assert w.review("/validate", review(pod({"elasticgpu.io/gpu-core": "30", "elasticgpu.io/gpu-memory": "4096"}))) == {
        "uid": UID, "allowed": True}
    assert w.metric("egpu_webhook_admission_requests_total",
                    '{route=\"mutate\",result=\"error\"}') == 1
    assert w.metric("egpu_http_requests_total", '{path="/mutate",code="400"}') == 1
    assert w.proc.poll() is None
    assert w.stop() == 0
