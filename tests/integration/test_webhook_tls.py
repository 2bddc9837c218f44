"""egpu-webhook's TLS against real TLS peers (curl and Python's ssl module).

egpu-webhook runs against the real control plane (the `kube` fixture), as
its ServiceAccount egpu-webhook, with a serving certificate made here by openssl for the Service's name
(egpu-webhook.elastic-gpu-system.svc) and 127.0.0.1, signed by a test CA.
The certificate and key sit in the layout of a Kubernetes Secret volume:
tls.crt and tls.key are links through ..data, a link to a timestamped
directory; an update writes a new directory and renames a new ..data link
over the old one, as the kubelet does.

- curl --cacert POSTs an AdmissionReview to /validate by the Service's name
  and gets HTTP 200 with response.uid equal to request.uid, allowed for a
  good GPU pod and denied, with the reason, for a bad one.
- Python's ssl client keeps one connection while the Secret is updated to a
  pair signed by a second CA: the same socket still answers and still shows
  the first certificate (its session is kept), while a new connection gets
  the new certificate: it verifies against the second CA (curl and Python),
  not against the first; the health port's /metrics counts the reload.
- Plain HTTP to the TLS port gets no HTTP answer; a client that does not
  trust the CA fails verification.

openssl and curl: a test that needs a missing one is skipped, except under
CI=true, where it fails.
"""
import http.client
import json
import os
import re
import shutil
import ssl
import subprocess
import time
import urllib.request
import uuid

import pytest

from conftest import ROOT
HOST = "egpu-webhook.elastic-gpu-system.svc"


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


def run(*cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class Pki:
    """Two CAs, a leaf of each for HOST and 127.0.0.1, and a Secret volume."""

    def __init__(self, d):
        self.d = d
        (d / "leaf.ext").write_text(f"subjectAltName=DNS:{HOST},IP:127.0.0.1\n"
                                    "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
        self.ca, self.leaf, self.key = [], [], []
        for i in (1, 2):
            ca, ca_key = d / f"ca{i}.crt", d / f"ca{i}.key"
            run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-subj", f"/CN=egpu-test-ca-{i}",
                "-days", "2", "-addext", "basicConstraints=critical,CA:TRUE", "-addext",
                "keyUsage=critical,keyCertSign", "-keyout", str(ca_key), "-out", str(ca))
            leaf, key, csr = d / f"leaf{i}.crt", d / f"leaf{i}.key", d / f"leaf{i}.csr"
            run("openssl", "req", "-new", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-subj", f"/CN={HOST}",
                "-keyout", str(key), "-out", str(csr))
            run("openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
                "-set_serial", str(100 + i), "-days", "1", "-extfile", str(d / "leaf.ext"),
                "-out", str(leaf))
            self.ca.append(str(ca))
            self.leaf.append(leaf)
            self.key.append(key)
        self.vol = d / "vol"
        self.vol.mkdir()
        self.version = 0
        self.cert_path = str(self.vol / "tls.crt")
        self.key_path = str(self.vol / "tls.key")

    def der(self, i):
        """Certificate i (0 or 1) as DER, as getpeercert(binary_form=True) gives it."""
        return ssl.PEM_cert_to_DER_cert(self.leaf[i].read_text())

    def publish(self, i):
        """The Secret now holds pair i: a new ..vN directory, a new ..data link renamed over."""
        self.version += 1
        v = self.vol / f"..v{self.version}"
        v.mkdir()
        shutil.copyfile(self.leaf[i], v / "tls.crt")
        shutil.copyfile(self.key[i], v / "tls.key")
        os.symlink(v.name, self.vol / "..data_tmp")
        os.rename(self.vol / "..data_tmp", self.vol / "..data")
        if self.version == 1:
            os.symlink("..data/tls.crt", self.vol / "tls.crt")
            os.symlink("..data/tls.key", self.vol / "tls.key")


class Webhook:
    """egpu-webhook serving pki's Secret volume, against api (Api or RealApi) with the
    kubeconfig of its ServiceAccount (api.component_kubeconfig)."""

    def __init__(self, build_dir, api, tmp_path, pki):
        exe = build_dir / "src/webhook/egpu-webhook"
        if not exe.exists():
            pytest.fail(f"{exe} not built: run `make build` first")
        self.log = tmp_path / "webhook.log"
        self.proc = subprocess.Popen(
            [str(exe), "--kubeconfig", api.component_kubeconfig("egpu-webhook"), "--listen", "127.0.0.1", "--port", "0",
             "--health-listen", "127.0.0.1", "--health-port", "0", "--tls-cert", pki.cert_path,
             "--tls-key", pki.key_path],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))
        deadline = time.time() + 15
        self.port = None
        while time.time() < deadline and self.port is None:
            m = re.search(r"serving addr=\S+ port=(\d+) health_addr=\S+ health_port=(\d+)",
                          self.log.read_text())
            if m:
                self.port, self.health_port = int(m.group(1)), int(m.group(2))
            else:
                assert self.proc.poll() is None, self.log.read_text()
                time.sleep(0.05)
        assert self.port, self.log.read_text()
        # Ready once the GPU objects are listed (there are none).
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz",
                                            timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        pytest.fail("egpu-webhook never ready:\n" + self.log.read_text())

    def stop(self):
        self.proc.terminate()
        assert self.proc.wait(timeout=10) == 0, self.log.read_text()


@pytest.fixture
def pki(tmp_path):
    need("openssl")
    p = Pki(tmp_path)
    p.publish(0)
    return p


@pytest.fixture
def webhook(build_dir, api, tmp_path, pki):
    w = Webhook(build_dir, api, tmp_path, pki)
    yield w
    w.stop()


def review(core="50"):
    """An AdmissionReview of a pod CREATE asking elasticgpu.io/gpu-core=core (and 4096 MiB of
    gpu-memory, which a share must name), with a fresh uid."""
    res = {"elasticgpu.io/gpu-core": core, "elasticgpu.io/gpu-memory": "4096"}
    return {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "train", "namespace": "ml", "operation": "CREATE",
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "train", "namespace": "ml"},
                "spec": {"containers": [{"name": "train", "image": "busybox",
                                         "resources": {"requests": res, "limits": res}}]}},
            "dryRun": False}}


def post(conn, body):
    """POST body to /validate on conn (kept open); the status and the decoded reply."""
    conn.request("POST", "/validate", body=json.dumps(body),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, json.loads(r.read())


def curl_validate(port, cafile, body, tmp_path):
    """curl --cacert POSTing body to /validate by the Service's name; (exit code, reply)."""
    need("curl")
    req = tmp_path / f"req-{uuid.uuid4()}.json"
    req.write_text(json.dumps(body))
    cmd = ["curl", "-sS", "--max-time", "10", "--resolve", f"{HOST}:{port}:127.0.0.1",
           "-H", "Content-Type: application/json", "--data-binary", f"@{req}",
           "-w", "\n%{http_code}", f"https://{HOST}:{port}/validate"]
    if cafile is not None:
        cmd[1:1] = ["--cacert", cafile]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return p.returncode, p.stderr
    text, code = p.stdout.rsplit("\n", 1)
    assert code == "200", p.stdout
    return 0, json.loads(text)


def test_curl_validate(webhook, pki, tmp_path):
    """curl trusting the test CA POSTs reviews by the Service's name: HTTP 200 with the
    request's uid, a good pod allowed, a bad one denied naming gpu-core; without the CA,
    curl's verification fails (exit 60)."""
    body = review("50")
    rc, reply = curl_validate(webhook.port, pki.ca[0], body, tmp_path)
    assert rc == 0, reply
    assert reply["apiVersion"] == "admission.k8s.io/v1" and reply["kind"] == "AdmissionReview"
    assert reply["response"]["uid"] == body["request"]["uid"]
    assert reply["response"]["allowed"] is True
    body = review("150")
    rc, reply = curl_validate(webhook.port, pki.ca[0], body, tmp_path)
    assert rc == 0, reply
    assert reply["response"]["uid"] == body["request"]["uid"]
    assert reply["response"]["allowed"] is False
    assert "elasticgpu.io/gpu-core" in reply["response"]["status"]["message"]
    # curl without the CA: verification fails (exit 60), no reply.
    rc, err = curl_validate(webhook.port, None, review(), tmp_path)
    assert rc == 60, err


def test_rotation_keeps_the_connection(webhook, pki, tmp_path):
    """The Secret volume updated to CA 2's pair, as the kubelet does: a kept connection
    answers on the same socket with the first certificate, new connections get the new one
    (CA 2 verifies it, CA 1 does not, for Python and curl), and /metrics counts one reload."""
    ca1 = ssl.create_default_context(cafile=pki.ca[0])
    kept = http.client.HTTPSConnection("127.0.0.1", webhook.port, context=ca1, timeout=10)
    body = review()
    status, reply = post(kept, body)
    assert status == 200 and reply["response"]["uid"] == body["request"]["uid"]
    sock, local = kept.sock, kept.sock.getsockname()
    assert kept.sock.getpeercert(binary_form=True) == pki.der(0)
    assert kept.sock.getpeercert()["issuer"] == ((("commonName", "egpu-test-ca-1"),),)

    pki.publish(1)  # the Secret now holds CA 2's pair
    time.sleep(1.2)  # past the server's once-a-second look at the files (no assertion)
    # The kept connection still answers on the same socket, in its old session.
    for _ in range(3):
        body = review()
        status, reply = post(kept, body)
        assert status == 200 and reply["response"]["uid"] == body["request"]["uid"]
        assert kept.sock is sock and kept.sock.getsockname() == local
        assert kept.sock.getpeercert(binary_form=True) == pki.der(0)

    # A new connection gets the new certificate: CA 2 verifies it, CA 1 does not (a busy
    # machine may take longer than 1.2 s to the look: retried until it has)
    ca2 = ssl.create_default_context(cafile=pki.ca[1])
    deadline = time.time() + 30
    while True:
        fresh = http.client.HTTPSConnection("127.0.0.1", webhook.port, context=ca2, timeout=10)
        body = review()
        try:
            status, reply = post(fresh, body)
            break
        except ssl.SSLCertVerificationError:
            fresh.close()
            assert time.time() < deadline, webhook.log.read_text()
            time.sleep(0.2)
    assert status == 200 and reply["response"]["uid"] == body["request"]["uid"]
    assert fresh.sock.getpeercert(binary_form=True) == pki.der(1)
    assert fresh.sock.getpeercert()["issuer"] == ((("commonName", "egpu-test-ca-2"),),)
    fresh.close()
    old = http.client.HTTPSConnection("127.0.0.1", webhook.port, context=ca1, timeout=10)
    with pytest.raises(ssl.SSLCertVerificationError):
        post(old, review())
    old.close()
    # curl by the Service's name agrees.
    rc, reply = curl_validate(webhook.port, pki.ca[1], review(), tmp_path)
    assert rc == 0, reply
    rc, err = curl_validate(webhook.port, pki.ca[0], review(), tmp_path)
    assert rc == 60, err
    # And the kept connection is still the same one after all that.
    status, _ = post(kept, review())
    assert status == 200 and kept.sock is sock and kept.sock.getsockname() == local
    kept.close()
    assert re.search(r"TLS certificate reloaded cert=\S+ generation=2 ", webhook.log.read_text())
    with urllib.request.urlopen(f"http://127.0.0.1:{webhook.health_port}/metrics",
                                timeout=10) as r:
        metrics = r.read().decode()
    assert "\negpu_http_tls_reloads_total 1\n" in metrics
    assert "\negpu_http_tls_reload_failures_total 0\n" in metrics


def test_plain_http_and_untrusted_clients_refused(webhook, pki):
    """Plain HTTP on the TLS port gets no HTTP answer; clients trusting the system's CAs or
    another CA fail verification; the webhook serves on through all of it."""
    plain = http.client.HTTPConnection("127.0.0.1", webhook.port, timeout=10)
    with pytest.raises((http.client.HTTPException, OSError)):
        plain.request("GET", "/healthz")
        plain.getresponse()
    plain.close()
    # A client trusting only the system's CAs does not accept the test CA's certificate.
    system = http.client.HTTPSConnection("127.0.0.1", webhook.port,
                                         context=ssl.create_default_context(), timeout=10)
    with pytest.raises(ssl.SSLCertVerificationError):
        post(system, review())
    system.close()
    # Nor does one trusting another CA, even for the right name.
    other = ssl.create_default_context(cafile=pki.ca[1])
    conn = http.client.HTTPSConnection("127.0.0.1", webhook.port, context=other, timeout=10)
    with pytest.raises(ssl.SSLCertVerificationError):
        post(conn, review())
    conn.close()
    # The webhook served on through all of it.
    ok = http.client.HTTPSConnection("127.0.0.1", webhook.port,
                                     context=ssl.create_default_context(cafile=pki.ca[0]),
                                     timeout=10)
    ok.request("GET", "/healthz")
    r = ok.getresponse()
    assert r.status == 200 and r.read() == b"ok"
    ok.close()
