"""egpu-webhook --self-signed against the real control plane (the `kube`
fixture), as its ServiceAccount egpu-webhook with the grants deploy/'s
Component webhook/self-signed adds (its rbac.yaml, applied here): so a call
that RBAC refuses fails the test. The racing test, which needs a POST held
back, runs on the test API server (tests/apiserver/server.py, `fault_api`).

The real egpu-webhook makes its own CA and serving certificate, keeps them in
the Secret elastic-gpu-system/egpu-webhook-tls, writes them to the files it
serves (--tls-cert, --tls-key, in a directory it makes 0700), and keeps every
webhook's caBundle of the Mutating- and ValidatingWebhookConfiguration
(deploy/webhook/webhooks.yaml, as deploy/ renders them) equal to the CA.

- First start: the Secret is created (type kubernetes.io/tls, ca.crt, ca.key,
  tls.crt, tls.key), every caBundle is the CA; a Python ssl client that
  trusts only the caBundle's CA connects by the Service's name and gets an
  AdmissionReview reply; the certificate names the four Service names.
- A second replica started against the same server uses the same CA and
  serving certificate (no second CA).
- Two replicas racing: the first POST of the Secret is held back (a fault
  with a delay) while another writer creates it; the POST gets 409
  AlreadyExists and the webhook serves the other writer's certificate.
- Renewal: with a 20 s certificate renewed 12 s before its end, a client
  keeps its connection across the renewal (the same socket answers), new
  connections get the new certificate and verify against the same CA.
- CA renewal: with a short CA, the new CA replaces the old one and caBundle
  holds both while the old one is valid.
- A caBundle changed by someone else is put back at the next check.
- Without the Component's rbac.yaml (deploy/webhook/rbac.yaml alone) the
  real API server refuses it the Secret (403) and it exits, serving nothing.
"""
import base64
import http.client
import json
import os
import socket
import ssl
import stat
import subprocess
import threading
import time

import pytest

from conftest import ROOT
from test_webhook_tls import HOST, review

NS = "elastic-gpu-system"
SECRET = "egpu-webhook-tls"
CFG = "elastic-gpu-webhook"
NAMES = ["egpu-webhook", f"egpu-webhook.{NS}", f"egpu-webhook.{NS}.svc",
         f"egpu-webhook.{NS}.svc.cluster.local"]
SECRET_PATH = f"/api/v1/namespaces/{NS}/secrets/{SECRET}"
CFG_PATH = {"MutatingWebhookConfiguration":
            f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{CFG}",
            "ValidatingWebhookConfiguration":
            f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{CFG}"}


def configurations():
    """The two configurations of deploy/webhook/webhooks.yaml, caBundle-free."""
    import yaml
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy/webhook/webhooks.yaml").read_text())
            if d]
    out = []
    for d in docs:
        d.setdefault("metadata", {}).pop("namespace", None)
        for w in d["webhooks"]:
            w["clientConfig"].pop("caBundle", None)
        out.append(d)
    assert sorted(d["kind"] for d in out) == sorted(CFG_PATH)
    return out


SELF_SIGNED_RBAC = ROOT / "deploy/webhook/self-signed/rbac.yaml"


def install_configurations(api):
    """The two configurations created on api (Api or RealApi), caBundle-free."""
    for d in configurations():
        st, body = api.call("POST", CFG_PATH[d["kind"]].rsplit("/", 1)[0], d)
        assert st == 201, body
    return api


@pytest.fixture
def cluster(kube_api):
    """The real control plane with the two configurations and the self-signed Component's
    RBAC (removed again afterwards, so other modules' egpu-webhook has deploy/'s grants
    alone). The configurations are deleted afterwards too: no Service egpu-webhook is there
    to answer their failurePolicy Fail webhooks."""
    kube_api.cluster.kubectl("apply", "--server-side", "-f", str(SELF_SIGNED_RBAC))
    install_configurations(kube_api)
    yield kube_api
    for path in CFG_PATH.values():
        kube_api.call("DELETE", path)
    kube_api.cluster.kubectl("delete", "--ignore-not-found", "-f", str(SELF_SIGNED_RBAC))


class Webhook:
    """egpu-webhook --self-signed against api (Api or RealApi), as its ServiceAccount."""

    def __init__(self, build_dir, api, tmp_path, name="w1", extra=()):
        exe = build_dir / "src/webhook/egpu-webhook"
        if not exe.exists():
            pytest.fail(f"{exe} not built: run `make build` first")
        self.dir = tmp_path / name / "tls"
        (tmp_path / name).mkdir()
        self.log = tmp_path / f"{name}.log"
        self.proc = subprocess.Popen(
            [str(exe), "--kubeconfig", api.component_kubeconfig("egpu-webhook"), "--listen",
             "127.0.0.1", "--port", "0", "--health-listen", "127.0.0.1", "--health-port", "0",
             "--tls-cert", str(self.dir / "tls.crt"), "--tls-key", str(self.dir / "tls.key"),
             "--self-signed", "--self-signed-namespace", NS, *extra],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))
        deadline = time.time() + 20
        self.port = None
        while time.time() < deadline:
            text = self.log.read_text()
            if "serving addr=" in text:
                self.port = int(text.split("serving addr=")[1].split("port=")[1].split()[0])
                break
            assert self.proc.poll() is None, text
            time.sleep(0.05)
        assert self.port, self.log.read_text()

    def stop(self):
        self.proc.terminate()
        assert self.proc.wait(timeout=10) == 0, self.log.read_text()


@pytest.fixture
def start(build_dir, cluster, tmp_path):
    started = []

    def go(name="w1", extra=()):
        w = Webhook(build_dir, cluster, tmp_path, name, extra)
        started.append(w)
        return w
    yield go
    for w in started:
        w.stop()


def secret(api):
    st, s = api.call("GET", SECRET_PATH)
    assert st == 200, s
    return s, {k: base64.b64decode(v).decode() for k, v in s["data"].items()}


def ca_bundles(api):
    """Every webhook's caBundle, decoded, by (kind, webhook name)."""
    out = {}
    for kind, path in CFG_PATH.items():
        st, c = api.call("GET", path)
        assert st == 200, c
        for w in c["webhooks"]:
            b = w["clientConfig"].get("caBundle")
            out[(kind, w["name"])] = base64.b64decode(b).decode() if b else None
    return out


def pems(text):
    return [p + "-----END CERTIFICATE-----\n"
            for p in text.split("-----END CERTIFICATE-----\n") if "BEGIN" in p]


def context(tmp_path, ca_pem):
    f = tmp_path / f"ca-{time.monotonic_ns()}.pem"
    f.write_text(ca_pem)
    ctx = ssl.create_default_context(cafile=str(f))  # trusts this CA only
    return ctx


def connect(port, ctx):
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    # verify against the Service's name, as the API server does
    conn.sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                server_hostname=HOST)
    return conn


def post(conn):
    body = review()
    conn.request("POST", "/validate", body=json.dumps(body),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    reply = json.loads(r.read())
    assert r.status == 200
    assert reply["kind"] == "AdmissionReview"
    assert reply["response"]["uid"] == body["request"]["uid"]
    assert reply["response"]["allowed"] is True
    return conn.sock.getpeercert(binary_form=True)


def wait_for(what, fn, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def test_first_start_creates_secret_and_ca_bundles(start, cluster, tmp_path):
    """First start: the Secret (kubernetes.io/tls, CA and pair) is created, all five webhooks'
    caBundle is its CA, the files are served from a 0700 directory, and a client trusting
    only the caBundle connects by the Service's name (the four names in the certificate);
    one trusting other CAs does not."""
    w = start()
    s, data = secret(cluster)
    assert s["type"] == "kubernetes.io/tls"
    assert sorted(data) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert len(pems(data["ca.crt"])) == 1
    bundles = ca_bundles(cluster)
    assert len(bundles) == 5  # mutate, mutate-nvidia, place, validate and claims
    assert set(bundles.values()) == {data["ca.crt"]}
    # the files it serves, in a private directory
    st = os.stat(w.dir)
    assert stat.S_IMODE(st.st_mode) == 0o700
    assert (w.dir / "tls.crt").read_text() == data["tls.crt"]
    assert stat.S_IMODE(os.stat(w.dir / "tls.key").st_mode) == 0o600
    # a client trusting only the caBundle's CA
    conn = connect(w.port, context(tmp_path, bundles[("ValidatingWebhookConfiguration",
                                                      "validate.webhook.elasticgpu.io")]))
    der = post(conn)
    assert ssl.DER_cert_to_PEM_cert(der).split() == data["tls.crt"].split()
    cert = conn.sock.getpeercert()
    assert sorted(v for k, v in cert["subjectAltName"] if k == "DNS") == sorted(NAMES)
    conn.close()
    # a client trusting another CA fails
    other = ssl.create_default_context()
    with pytest.raises(ssl.SSLCertVerificationError):
        connect(w.port, other)


def test_second_replica_uses_the_same_ca(start, cluster, tmp_path):
    """A second replica reads the Secret the first created: the same CA and pair, no new CA."""
    w1 = start("w1")
    _, first = secret(cluster)
    w2 = start("w2")
    _, second = secret(cluster)
    assert second == first
    assert (w2.dir / "tls.crt").read_text() == first["tls.crt"]
    ctx = context(tmp_path, first["ca.crt"])
    for w in (w1, w2):
        conn = connect(w.port, ctx)
        post(conn)
        conn.close()
    assert "created (new CA)" in w1.log.read_text()
    assert "created" not in w2.log.read_text()


def test_racing_create_ends_with_one_ca(build_dir, fault_api, tmp_path):
    """The webhook's POST of the Secret is held 2 s; meanwhile another replica
    (a POST of our own, its certificate made here by the webhook itself from
    a first run in another namespace) creates it: the webhook gets 409
    AlreadyExists and uses that one. On the test API server (fault_api): it
    holds that POST back on demand (a delayed fault), which a real one cannot."""
    cluster = install_configurations(fault_api)
    w0 = Webhook(build_dir, cluster, tmp_path, "w0", ("--self-signed-namespace", "elsewhere"))
    # a valid Secret for elastic-gpu-system made by a first webhook under another name
    st, other = cluster.call("GET", f"/api/v1/namespaces/elsewhere/secrets/{SECRET}")
    assert st == 200
    w0.stop()
    st, _ = cluster.control("fault", {"method": "POST", "path": f"/namespaces/{NS}/secrets$",
                                      "code": 0, "delay_ms": 2000, "count": 1})
    assert st == 200
    theirs = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
              "metadata": {"name": SECRET, "namespace": NS}, "data": other["data"]}
    # their certificate names egpu-webhook.elsewhere...: the webhook renews the
    # serving certificate under *their* CA, and never makes a CA of its own
    started = []
    t = threading.Thread(target=lambda: started.append(Webhook(build_dir, cluster, tmp_path,
                                                               "w1")))
    t.start()

    def webhook_posted():
        st, reqs = cluster.control("requests", method="GET")
        return any(r["method"] == "POST" and r["path"].endswith(f"/namespaces/{NS}/secrets")
                   for r in reqs)
    wait_for("the webhook's POST", webhook_posted)
    st, body = cluster.call("POST", f"/api/v1/namespaces/{NS}/secrets", theirs)
    assert st == 201, body
    t.join(timeout=30)
    _, data = secret(cluster)
    their_ca = base64.b64decode(other["data"]["ca.crt"]).decode()
    assert data["ca.crt"] == their_ca  # one CA: theirs
    assert set(ca_bundles(cluster).values()) == {their_ca}
    log = (tmp_path / "w1.log").read_text()
    assert "created by another replica" in log, log
    assert len(started) == 1, log
    started[0].stop()


def test_renewal_keeps_connections(start, cluster, tmp_path):
    """A 20 s certificate renewed 12 s before its end: the Secret gets a new pair under the same
    CA, new connections get it, a kept connection answers on in its session."""
    w = start(extra=("--self-signed-cert-validity", "20s", "--self-signed-renew-before", "12s",
                     "--self-signed-check-interval", "1s"))
    _, data = secret(cluster)
    ctx = context(tmp_path, data["ca.crt"])
    kept = connect(w.port, ctx)
    old = post(kept)
    new = wait_for("a renewed certificate",
                   lambda: secret(cluster)[1]["tls.crt"] != data["tls.crt"], timeout=30)
    assert new
    _, renewed = secret(cluster)
    assert renewed["ca.crt"] == data["ca.crt"]  # the CA is kept
    assert set(ca_bundles(cluster).values()) == {data["ca.crt"]}

    def serves_new():
        c = connect(w.port, ctx)  # verifies against the same CA
        der = post(c)
        c.close()
        return der != old
    wait_for("the new certificate served", serves_new, timeout=15)
    assert post(kept) == old  # the kept connection still answers, in its session
    kept.close()


def test_ca_renewal_overlaps(start, cluster, tmp_path):
    """A short CA is renewed: the Secret's ca.crt holds the new CA then the old one, every
    caBundle follows, and new connections verify against the new CA alone."""
    w = start(extra=("--self-signed-ca-validity", "40s", "--self-signed-cert-validity", "40s",
                     "--self-signed-renew-before", "30s", "--self-signed-check-interval", "1s"))
    _, data = secret(cluster)
    old_ca = data["ca.crt"]

    def ca_renewed():
        _, d = secret(cluster)
        return d if d["ca.crt"] != old_ca else None
    d = wait_for("a new CA", ca_renewed, timeout=30)
    bundle = pems(d["ca.crt"])
    assert len(bundle) == 2 and bundle[1] == old_ca  # new first, the old one kept
    wait_for("caBundle with both CAs",
             lambda: set(ca_bundles(cluster).values()) == {d["ca.crt"]}, timeout=10)
    # new connections verify against the new CA alone
    new_only = context(tmp_path, bundle[0])
    wait_for("the new CA's certificate served",
             lambda: _verifies(w.port, new_only), timeout=15)


def _verifies(port, ctx):
    try:
        c = connect(port, ctx)
    except ssl.SSLError:
        return False
    post(c)
    c.close()
    return True


def test_changed_ca_bundle_is_put_back(start, cluster):
    """A caBundle someone else changed (a JSON patch on the real API server) is put back at the
    next check."""
    start(extra=("--self-signed-check-interval", "1s"))
    _, data = secret(cluster)
    st, body = cluster.call(
        "PATCH", CFG_PATH["MutatingWebhookConfiguration"],
        [{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle",
          "value": base64.b64encode(b"someone else's CA").decode()}],
        ctype="application/json-patch+json")
    assert st == 200, body
    assert set(ca_bundles(cluster).values()) != {data["ca.crt"]}
    wait_for("caBundle put back",
             lambda: set(ca_bundles(cluster).values()) == {data["ca.crt"]}, timeout=10)


def test_refuses_a_shared_directory(build_dir, cluster, tmp_path):
    """A --tls-key directory others may write (0777) is refused, naming mode 0700, before any key
    is written."""
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o777)
    p = subprocess.run(
        [str(build_dir / "src/webhook/egpu-webhook"), "--kubeconfig",
         cluster.component_kubeconfig("egpu-webhook"),
         "--listen", "127.0.0.1", "--port", "0", "--health-listen", "127.0.0.1",
         "--health-port", "0", "--tls-cert", str(d / "tls.crt"), "--tls-key",
         str(d / "tls.key"), "--self-signed", "--self-signed-namespace", NS],
        capture_output=True, text=True, timeout=20)
    assert p.returncode != 0
    assert "mode 0700" in p.stderr, p.stderr
    assert not (d / "tls.key").exists()


@pytest.mark.parametrize("args,msg", [
    (["--self-signed-renew-before", "400d"], "must be less than"),
    (["--self-signed-cert-validity", "1y"], "expected a duration"),
    (["--self-signed-service", ""], "expected a Service name"),
])
def test_bad_flags(build_dir, args, msg):
    """Bad --self-signed-* flags exit 2 naming what is wrong (no API server is needed)."""
    p = subprocess.run([str(build_dir / "src/webhook/egpu-webhook"), "--tls-cert", "c",
                        "--tls-key", "k", "--self-signed", *args],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and msg in p.stderr, p.stderr


def test_needs_the_components_rbac(build_dir, kube_api, tmp_path):
    """deploy/webhook/rbac.yaml alone grants egpu-webhook no Secrets (its certificate comes
    as a volume): without the self-signed Component's rbac.yaml, the real API server refuses
    it the Secret, it says so and serves nothing, and no Secret is made."""
    install_configurations(kube_api)
    try:
        p = subprocess.run(
            [str(build_dir / "src/webhook/egpu-webhook"), "--kubeconfig",
             kube_api.component_kubeconfig("egpu-webhook"), "--listen", "127.0.0.1", "--port",
             "0", "--health-listen", "127.0.0.1", "--health-port", "0",
             "--tls-cert", str(tmp_path / "tls" / "tls.crt"),
             "--tls-key", str(tmp_path / "tls" / "tls.key"),
             "--self-signed", "--self-signed-namespace", NS],
            capture_output=True, text=True, timeout=60)
    finally:
        for path in CFG_PATH.values():
            kube_api.call("DELETE", path)
    assert p.returncode != 0, p.stderr
    assert f"start failed: GET {SECRET_PATH}: 403 Forbidden" in p.stderr, p.stderr
    assert 'User "system:serviceaccount:elastic-gpu-system:egpu-webhook" cannot get resource ' \
        '"secrets"' in p.stderr, p.stderr
    assert "serving addr=" not in p.stderr, p.stderr
    assert kube_api.call("GET", SECRET_PATH)[0] == 404
