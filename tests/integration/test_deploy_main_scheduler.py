"""deploy/scheduler/main-scheduler: the extender in the cluster's own
kube-scheduler, a kustomize Component on top of deploy/.

Offline, on `kubectl kustomize` of an overlay of deploy/ with the Component:
- exactly the second scheduler's objects go (its kube-scheduler container,
  ServiceAccount, token, RBAC and ConfigMap, egpu-scheduler's read of its
  Lease), exactly egpu-scheduler's own Lease Role and the stanza's ConfigMap
  come, and only the scheduler Deployment, Service and NetworkPolicy, the
  webhook Deployment and the MutatingWebhookConfiguration change (the
  latter loses exactly place.webhook.elasticgpu.io: there is no
  elastic-gpu-scheduler to send pods without GPU to);
- egpu-scheduler serves the verbs on the pod address over HTTPS with the
  Secret's files and asks clients for a certificate of the client CA
  Secret's ca.crt (--tls-client-ca), binds pods of default-scheduler and
  elects on a Lease it may create, get and update, and nothing else is
  granted beyond deploy/;
- the Service and the NetworkPolicy lead to and admit that port;
- the extenders: stanza names that Service, port and scheme, the verbs
  egpu-scheduler serves (its --help), and the same nodeCacheCapable,
  ignorable, weight, timeout and managedResources as deploy/'s
  KubeSchedulerConfiguration; its serverName is the host it calls, and its
  tlsConfig gives kube-scheduler a client certificate and key;
- egpu-webhook leaves schedulerName alone, and the binaries take the flags.

Live, against the test API server: the operator guide's openssl commands
make the Secrets' files and kube-scheduler's client certificate (a stand-in
kubectl records the Secrets), egpu-webhook runs with the Component's flags
and egpu-scheduler with the Component's flags and those files, and a GPU
pod goes through admission, filter and bind over HTTPS checked as
kube-scheduler checks it (the stanza's serverName, the CA) with the
stanza's client certificate: it is bound, still of default-scheduler. With
Python's ssl module as the peer, bind from a client without a certificate,
with a client certificate of another CA, or with egpu-scheduler's own
server certificate fails at the TLS handshake and binds nothing, while
kube-scheduler's certificate binds.

kubectl and openssl: a test that needs a missing one is skipped, except
under CI=true, where it fails.
"""
import base64
import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import time
import urllib.parse

import jsonpatch
import pytest
import yaml

from conftest import ROOT, tool
from test_deploy import EGPU_LEASE_DEFAULT, EGPU_NEEDS, LEASE_VERBS, NS, PROMETHEUS_PEER, allows, \
    container, container_port, find, flag, one, rules_of, scheduler_config
from test_scheduler import Scheduler, api, cluster  # noqa: F401 (api: the test API server)
from test_webhook import Webhook, cert, need, review  # noqa: F401 (cert: the webhook's)

DEPLOY = ROOT / "deploy"
COMPONENT = DEPLOY / "scheduler" / "main-scheduler"
GUIDE = ROOT / "docs" / "operator-guide.md"
SECRET = "egpu-scheduler-tls"
CLIENT_CA_SECRET = "egpu-scheduler-client-ca"
DEFAULT_SCHEDULER = "default-scheduler"
# What the Component removes from deploy/, and what it adds and changes.
GONE = {("ConfigMap", "elastic-gpu-scheduler-config"),
        ("ServiceAccount", "elastic-gpu-kube-scheduler"),
        ("Secret", "elastic-gpu-kube-scheduler-token"),
        ("Role", "elastic-gpu-kube-scheduler-lease"),
        ("RoleBinding", "elastic-gpu-kube-scheduler-lease"),
        ("ClusterRoleBinding", "elastic-gpu-kube-scheduler"),
        ("ClusterRoleBinding", "elastic-gpu-volume-scheduler"),
        ("RoleBinding", "elastic-gpu-kube-scheduler-auth-reader"),
        ("Role", "elastic-gpu-scheduler-follow-lease"),
        ("RoleBinding", "elastic-gpu-scheduler-follow-lease")}
ADDED = {("ConfigMap", "elastic-gpu-main-scheduler-extender"),
         ("Role", "elastic-gpu-scheduler-lease"), ("RoleBinding", "elastic-gpu-scheduler-lease")}
CHANGED = {("Deployment", "egpu-scheduler"), ("Service", "egpu-scheduler"),
           ("NetworkPolicy", "egpu-scheduler"), ("Deployment", "egpu-webhook"),
           ("MutatingWebhookConfiguration", "elastic-gpu-webhook")}


def kustomize(path):
    r = subprocess.run([tool("kubectl"), "kustomize", str(path)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, f"kubectl kustomize {path} failed:\n{r.stderr}"
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def name_of(o):
    """(kind, name), a generated ConfigMap's hash left out."""
    n = o["metadata"]["name"]
    if o["kind"] == "ConfigMap":
        n = re.sub(r"-[a-z0-9]{10}$", "", n)
    return (o["kind"], n)


@pytest.fixture(scope="module")
def base():
    return kustomize(DEPLOY)


@pytest.fixture(scope="module")
def objs(tmp_path_factory):
    d = tmp_path_factory.mktemp("overlay")
    rel = os.path.relpath(DEPLOY, d)
    (d / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {rel}\ncomponents:\n  - {rel}/scheduler/main-scheduler\n")
    return kustomize(d)


def deployment(objs, name):
    return one(objs, "Deployment", name, NS)


def args_of(c):
    return c.get("command", [])[1:] + c.get("args", [])


def egpu_args(objs):
    return args_of(container(deployment(objs, "egpu-scheduler")["spec"]["template"]["spec"],
                             "egpu-scheduler"))


def webhook_args(objs):
    return args_of(container(deployment(objs, "egpu-webhook")["spec"]["template"]["spec"],
                             "egpu-webhook"))


def stanza(objs):
    cm = one(objs, "ConfigMap", "elastic-gpu-main-scheduler-extender", NS)
    assert list(cm["data"]) == ["extenders.yaml"]
    doc = yaml.safe_load(cm["data"]["extenders.yaml"])
    assert list(doc) == ["extenders"], "the stanza is the extenders: list alone"
    (ext,) = doc["extenders"]
    return ext


def extender_port(objs):
    """(the Service port the extender is reached on, the container's port number)."""
    svc = one(objs, "Service", "egpu-scheduler", NS)
    egpu = container(deployment(objs, "egpu-scheduler")["spec"]["template"]["spec"],
                     "egpu-scheduler")
    verbs = int(flag(egpu_args(objs), "--port"))
    ports = [p for p in svc["spec"]["ports"]
             if container_port(egpu, p.get("targetPort", p["port"])) == verbs]
    assert len(ports) == 1, "expected one Service port leading to the extender verbs"
    return ports[0]["port"], verbs


# --- offline ------------------------------------------------------------------

def test_changes_exactly_the_second_schedulers_objects(base, objs):
    before = {name_of(o): o for o in base}
    after = {name_of(o): o for o in objs}
    assert set(before) - set(after) == GONE
    assert set(after) - set(before) == ADDED
    changed = {k for k in set(before) & set(after) if before[k] != after[k]}
    assert changed == CHANGED
    for o in objs:
        if name_of(o) in ADDED:
            assert o["metadata"]["namespace"] == NS
            assert o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "elastic-gpu"
    # Nothing of the second scheduler is left anywhere.
    text = yaml.safe_dump_all(objs)
    assert "elastic-gpu-kube-scheduler" not in text
    for o in find(objs, "ConfigMap"):
        for v in (o.get("data") or {}).values():
            assert "kind: KubeSchedulerConfiguration" not in v
    for d in find(objs, "Deployment"):
        assert [c["name"] for c in d["spec"]["template"]["spec"]["containers"]
                if "kube-scheduler" in c.get("image", "")] == []


def test_egpu_scheduler_flags(objs):
    dep = deployment(objs, "egpu-scheduler")
    spec = dep["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["egpu-scheduler"]
    egpu = container(spec, "egpu-scheduler")
    args = egpu_args(objs)
    assert flag(args, "--listen") == "0.0.0.0", "the main kube-scheduler is not in the pod"
    assert flag(args, "--scheduler-name") == DEFAULT_SCHEDULER
    assert flag(args, "--follow-lease") is None
    assert flag(args, "--leader-elect") in (None, "true")
    assert flag(args, "--prefix") is None
    # HTTPS with the files of the Secret egpu-scheduler-tls (kubernetes.io/tls
    # keys); clients' certificates checked against the client CA Secret's ca.crt.
    vols = {v["name"]: v for v in spec["volumes"]}
    for fl, key, secret in (("--tls-cert", "tls.crt", SECRET), ("--tls-key", "tls.key", SECRET),
                            ("--tls-client-ca", "ca.crt", CLIENT_CA_SECRET)):
        path = flag(args, fl)
        assert path and os.path.basename(path) == key, (fl, path)
        (m,) = [m for m in egpu["volumeMounts"]
                if os.path.dirname(path) == m["mountPath"].rstrip("/")]
        assert m.get("readOnly") is True
        assert vols[m["name"]]["secret"]["secretName"] == secret
        assert "items" not in vols[m["name"]]["secret"]
        # The pod runs as 65532 with fsGroup 65532: 0440 lets it read the files.
        assert vols[m["name"]]["secret"]["defaultMode"] == 0o440
    assert flag(args, "--tls-client-cn") is None  # the CA is the extender's own
    assert "configMap" not in json.dumps(spec["volumes"])
    assert spec["securityContext"]["fsGroup"] == spec["securityContext"]["runAsUser"]
    # Its readiness (leading) picks the pod the Service sends calls to.
    assert egpu["readinessProbe"]["httpGet"]["path"] == "/readyz"
    strat = dep["spec"]["strategy"]["rollingUpdate"]
    assert str(strat["maxUnavailable"]) == "100%"


def test_lease_rbac(objs):
    """egpu-scheduler elects on its own Lease (--lease-name's default, in
    its pod's namespace): create, get and update of that one, nothing more
    than deploy/ grants otherwise."""
    args = egpu_args(objs)
    lease = flag(args, "--lease-name") or EGPU_LEASE_DEFAULT
    egpu = container(deployment(objs, "egpu-scheduler")["spec"]["template"]["spec"],
                     "egpu-scheduler")
    env = {e["name"]: e for e in egpu.get("env", [])}
    assert env["EGPU_LEASE_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.namespace"
    rules = rules_of(objs, "egpu-scheduler")
    cluster_grants = {(g, res, v) for r, ns in rules if ns is None for g in r["apiGroups"]
                      for res in r["resources"] for v in r["verbs"]}
    assert cluster_grants == EGPU_NEEDS
    local = [r for r, ns in rules if ns is not None]
    assert all(ns == NS for _, ns in rules if ns is not None)
    assert allows(local, "coordination.k8s.io", "leases", "create")
    for verb in LEASE_VERBS:
        assert allows(local, "coordination.k8s.io", "leases", verb, lease), verb
        assert verb == "create" or not allows(local, "coordination.k8s.io", "leases", verb,
                                              "elastic-gpu-kube-scheduler")
    for r in local:
        assert r["apiGroups"] == ["coordination.k8s.io"] and r["resources"] == ["leases"], r
        assert set(r["verbs"]) <= LEASE_VERBS, r


def test_service_and_network_policy(objs):
    port, verbs = extender_port(objs)
    svc = one(objs, "Service", "egpu-scheduler", NS)
    assert svc["spec"].get("type", "ClusterIP") == "ClusterIP"
    assert {p["name"] for p in svc["spec"]["ports"]} == {"metrics", "extender"}
    labels = deployment(objs, "egpu-scheduler")["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
    (pol,) = [p for p in find(objs, "NetworkPolicy", namespace=NS)
              if all(labels.get(k) == v
                     for k, v in p["spec"]["podSelector"]["matchLabels"].items())]
    allowed = {p["port"] for rule in pol["spec"]["ingress"] for p in rule["ports"]}
    assert allowed == {verbs, int(flag(egpu_args(objs), "--health-port"))}
    # The verbs from anywhere (mutual TLS keeps callers out), the health
    # port only from Prometheus pods (and the node), as in deploy/.
    peers = {p["port"]: rule.get("from") for rule in pol["spec"]["ingress"]
             for p in rule["ports"]}
    assert peers[verbs] is None
    assert peers[int(flag(egpu_args(objs), "--health-port"))] == [PROMETHEUS_PEER]


def test_extender_stanza_matches_what_egpu_scheduler_serves(base, objs, build_dir):
    ext = stanza(objs)
    port, _ = extender_port(objs)
    url = urllib.parse.urlsplit(ext["urlPrefix"])
    assert url.scheme == "https" and ext["enableHTTPS"] is True  # it has --tls-cert
    assert url.hostname == f"egpu-scheduler.{NS}.svc" and url.port == port
    assert url.path in ("", "/")  # egpu-scheduler has no --prefix
    tls = ext["tlsConfig"]
    assert tls["serverName"] == url.hostname
    assert tls["caFile"] and not tls.get("insecure", False)
    # kube-scheduler's client certificate, which --tls-client-ca asks for,
    # beside the CA on the control plane.
    assert flag(egpu_args(objs), "--tls-client-ca")
    assert tls["certFile"] and tls["keyFile"] and tls["certFile"] != tls["keyFile"]
    assert {os.path.dirname(tls[k]) for k in ("caFile", "certFile", "keyFile")} == \
        {os.path.dirname(tls["caFile"])}
    assert set(tls) == {"serverName", "caFile", "certFile", "keyFile"}
    # The verbs egpu-scheduler serves, from its --help, and no preempt.
    r = subprocess.run([str(build_dir / "src/scheduler/egpu-scheduler"), "--help"],
                       capture_output=True, text=True, timeout=10)
    served = re.search(r"Serves POST <prefix>/(\w+), <prefix>/(\w+), <prefix>/(\w+) ", r.stdout)
    assert served, r.stdout
    assert [ext["filterVerb"], ext["prioritizeVerb"], ext["bindVerb"]] == list(served.groups())
    assert "preemptVerb" not in ext
    # The rest is the second scheduler's stanza (deploy/scheduler/scheduler-config.yaml).
    _, _, cfg = scheduler_config(base)
    (second,) = cfg["extenders"]
    for k in ("weight", "nodeCacheCapable", "httpTimeout", "ignorable", "managedResources"):
        assert ext[k] == second[k], k
    assert ext["nodeCacheCapable"] is True and ext["ignorable"] is False
    assert {m["name"] for m in ext["managedResources"]} == {"elasticgpu.io/gpu-core",
                                                           "elasticgpu.io/gpu-memory",
                                                           "elasticgpu.io/dra"}


def test_webhook_keeps_default_scheduler(objs, base):
    """The webhook no longer sends GPU pods to a second scheduler, and
    nothing else of its flags changes."""
    args, old = webhook_args(objs), webhook_args(base)
    assert flag(args, "--set-scheduler-name") == "false"
    assert flag(args, "--scheduler-name") is None
    assert flag(old, "--scheduler-name") == "elastic-gpu-scheduler"
    rest = [a for a in args if a not in ("--set-scheduler-name", "false")]
    assert rest == [a for a in old if a not in ("--scheduler-name", "elastic-gpu-scheduler")]


def test_place_webhook_goes(objs, base):
    """The MutatingWebhookConfiguration loses place.webhook.elasticgpu.io, and only it:
    /mutate-place would give pods without GPU elastic-gpu-scheduler, which the Component
    removes (they would wait for ever)."""
    (old,) = find(base, "MutatingWebhookConfiguration")
    (new,) = find(objs, "MutatingWebhookConfiguration")
    names = [w["name"] for w in old["webhooks"]]
    assert "place.webhook.elasticgpu.io" in names
    assert new["webhooks"] == [w for w in old["webhooks"]
                               if w["name"] != "place.webhook.elasticgpu.io"]
    assert {k: v for k, v in new.items() if k != "webhooks"} == \
        {k: v for k, v in old.items() if k != "webhooks"}


def test_binaries_take_the_flags(objs, build_dir):
    for exe, args in ((build_dir / "src/scheduler/egpu-scheduler", egpu_args(objs)),
                      (build_dir / "src/webhook/egpu-webhook", webhook_args(objs))):
        r = subprocess.run([str(exe), *args, "--help"], capture_output=True, text=True,
                           timeout=10)
        assert r.returncode == 0, (exe.name, r.stderr)


# --- live -----------------------------------------------------------------------

def guide_cert_commands():
    """The operator guide's shell block that makes the extender's certificates."""
    blocks = re.findall(r"```sh\n(.*?)```", GUIDE.read_text(), re.S)
    (block,) = [b for b in blocks if f"create secret tls {SECRET}" in b]
    return re.sub(r"^ {3}", "", block, flags=re.M)


@pytest.fixture
def guide_cert(tmp_path):
    """Run the guide's commands in a directory, kubectl replaced by a script
    that records each call's arguments; return the directory."""
    need("openssl")
    d = tmp_path / "cert"
    d.mkdir()
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "kubectl").write_text('#!/bin/sh\necho "$*" >> "$KUBECTL_ARGS"\n')
    (fake / "kubectl").chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}",
               KUBECTL_ARGS=str(tmp_path / "kubectl.args"))
    r = subprocess.run(["sh", "-ec", guide_cert_commands()], cwd=d, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    calls = (tmp_path / "kubectl.args").read_text().splitlines()
    assert calls == [f"-n {NS} create secret tls {SECRET} --cert tls.crt --key tls.key",
                     f"-n {NS} create secret generic {CLIENT_CA_SECRET} --from-file ca.crt"]
    for f in ("ca.crt", "tls.crt", "tls.key", "client.crt", "client.key"):
        assert (d / f).is_file(), f
    return d


def https_connection(port, server_name, ca, client=None, source=None):
    """A connection as kube-scheduler's extender client makes it with
    enableHTTPS and tlsConfig {serverName, caFile, certFile, keyFile}: to
    127.0.0.1:port (from the address source, None: the kernel's choice), the
    certificate checked against serverName and the CA, presenting the client
    certificate and key of client (a pair of paths; None: none). Kept alive
    until closed; the handshake is done on return."""
    ctx = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        ctx.load_cert_chain(str(client[0]), str(client[1]))
    sock = socket.create_connection(("127.0.0.1", port), timeout=10,
                                    source_address=(source, 0) if source else None)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.sock = ctx.wrap_socket(sock, server_hostname=server_name)
    return conn


def conn_post(conn, path, body):
    """POST body (JSON) on conn: (status, the JSON answer)."""
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, json.loads(r.read())


def https_post(port, server_name, ca, path, body, client=None):
    """POST on a new https_connection, then close it."""
    conn = https_connection(port, server_name, ca, client)
    try:
        return conn_post(conn, path, body)
    finally:
        conn.close()


def gpu_pod(name, ns):
    """A GPU pod as its owner writes it and the API server defaults it."""
    res = {"cpu": "1", "elasticgpu.io/gpu-core": "30", "elasticgpu.io/gpu-memory": "4096"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"schedulerName": DEFAULT_SCHEDULER,
                     "containers": [{"name": "main", "image": "trainer:1",
                                     "resources": {"requests": res, "limits": {
                                         k: v for k, v in res.items() if k != "cpu"}}}]}}


def local(args, drop):
    """args without the flags (and their values) in drop."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in drop:
            skip = True
        else:
            out.append(a)
    return out


def on_control_plane(guide_cert, path):
    """The guide's file that the operator copies to path on the control plane
    (step 2 copies ca.crt, client.crt and client.key there by name)."""
    return guide_cert / os.path.basename(path)


def component_scheduler(objs, api, build_dir, guide_cert, tmp_path):
    """egpu-scheduler with the Component's flags (its own listen and ports),
    the files of the Secrets made by the guide's commands in place of their
    mounts; ready (it leads on its own Lease). Returns it and its verbs' port."""
    egpu = local(egpu_args(objs), {"--listen", "--port", "--health-listen", "--health-port"})
    mounts = [a for a in egpu if a.startswith("/etc/egpu-scheduler/")]
    assert {os.path.basename(a) for a in mounts} == {"tls.crt", "tls.key", "ca.crt"}, mounts
    egpu = [str(guide_cert / os.path.basename(a)) if a in mounts else a for a in egpu]
    s = Scheduler(build_dir, api, tmp_path, "main", [*egpu, "--lease-namespace", NS])
    s.wait_ready()
    return s, int(s.url.rsplit(":", 1)[1])


def kube_scheduler_client(objs, guide_cert):
    """The client certificate and key the stanza gives kube-scheduler."""
    tls = stanza(objs)["tlsConfig"]
    return (on_control_plane(guide_cert, tls["certFile"]),
            on_control_plane(guide_cert, tls["keyFile"]))


def test_gpu_pod_placed_through_the_component(objs, api, cert, build_dir, guide_cert,  # noqa: F811
                                              tmp_path):
    ext = stanza(objs)
    cluster(api)
    # egpu-webhook with the Component's flags (its own listen, ports and TLS)
    w = Webhook(build_dir, api.kubeconfig, cert, tmp_path,
                local(webhook_args(objs), {"--listen", "--port", "--health-listen",
                                           "--health-port", "--tls-cert", "--tls-key"}))
    try:
        w.wait_ready()
        pod = gpu_pod("train", "ml")
        resp = w.review("/mutate", review(pod))
        assert resp["allowed"], resp
        if "patch" in resp:
            pod = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(resp["patch"])))
        assert pod["spec"]["schedulerName"] == DEFAULT_SCHEDULER
    finally:
        w.stop()
    st, pod = api.call("POST", "/api/v1/namespaces/ml/pods", pod)
    assert st == 201, pod
    # egpu-scheduler with the Component's flags and the guide's certificates;
    # the client is kube-scheduler as the stanza configures it.
    s, port = component_scheduler(objs, api, build_dir, guide_cert, tmp_path)
    try:
        prefix = urllib.parse.urlsplit(ext["urlPrefix"]).path.rstrip("/")
        server_name = ext["tlsConfig"]["serverName"]
        ca = on_control_plane(guide_cert, ext["tlsConfig"]["caFile"])
        client = kube_scheduler_client(objs, guide_cert)
        st, out = https_post(port, server_name, ca, f"{prefix}/{ext['filterVerb']}",
                             {"Pod": pod, "Nodes": None, "NodeNames": ["gpu-1", "gpu-2"]},
                             client)
        assert st == 200 and out["Error"] == "" and out["NodeNames"], out
        node = out["NodeNames"][0]
        deadline = time.time() + 10
        while True:
            st, out = https_post(port, server_name, ca, f"{prefix}/{ext['bindVerb']}",
                                 {"PodName": "train", "PodNamespace": "ml",
                                  "PodUID": pod["metadata"]["uid"], "Node": node}, client)
            if st == 200 and out.get("Error") == "" or time.time() > deadline:
                break
            time.sleep(0.1)
        assert st == 200 and out.get("Error") == "", out
        st, got = api.call("GET", "/api/v1/namespaces/ml/pods/train")
        assert got["spec"]["nodeName"] == node
        assert got["spec"]["schedulerName"] == DEFAULT_SCHEDULER
        # A client that checks another name than the certificate's fails.
        with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
            https_post(port, "egpu-scheduler.other.svc", ca, f"{prefix}/filter", {}, client)
    finally:
        s.stop()


def refused_at_handshake(post):
    """post() fails as a client the server refuses during the TLS handshake:
    an alert or a closed connection where the response would be, never a
    response and never a refused TCP connection (the server is up)."""
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)) as e:
        post()
    assert not isinstance(e.value, ConnectionRefusedError), e.value
    return e.value


def test_bind_needs_the_client_certificate(objs, api, build_dir, guide_cert, tmp_path):
    """The Component's egpu-scheduler binds for the holder of kube-scheduler's
    client certificate only: a caller on the pod network without one, with a
    client certificate of another CA, or with egpu-scheduler's own server
    certificate (the same CA, not for clients) gets no response, binds
    nothing and is counted; kube-scheduler's certificate binds the pod."""
    need("openssl")
    ext = stanza(objs)
    cluster(api)
    st, pod = api.call("POST", "/api/v1/namespaces/ml/pods", gpu_pod("victim", "ml"))
    assert st == 201, pod
    # Another CA's client certificate, made as the guide makes kube-scheduler's.
    other = tmp_path / "other"
    other.mkdir()
    r = subprocess.run(["sh", "-ec", """
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
            -subj /CN=other-ca -keyout ca.key -out ca.crt
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
            -subj /CN=kube-scheduler -keyout client.key -out client.csr
        printf 'extendedKeyUsage=clientAuth\\n' > client.ext
        openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 \
            -extfile client.ext -out client.crt
        """], cwd=other, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    s, port = component_scheduler(objs, api, build_dir, guide_cert, tmp_path)
    try:
        prefix = urllib.parse.urlsplit(ext["urlPrefix"]).path.rstrip("/")
        server_name = ext["tlsConfig"]["serverName"]
        ca = on_control_plane(guide_cert, ext["tlsConfig"]["caFile"])
        bind = {"PodName": "victim", "PodNamespace": "ml", "PodUID": pod["metadata"]["uid"],
                "Node": "gpu-1"}

        def post(client):
            return https_post(port, server_name, ca, f"{prefix}/{ext['bindVerb']}", bind, client)

        for client in (None, (other / "client.crt", other / "client.key"),
                       (guide_cert / "tls.crt", guide_cert / "tls.key")):
            refused_at_handshake(lambda: post(client))
        st, got = api.call("GET", "/api/v1/namespaces/ml/pods/victim")
        assert not got["spec"].get("nodeName"), got["spec"]
        assert "elasticgpu.io/assigned" not in (got["metadata"].get("annotations") or {})
        st, metrics = s.get("/metrics")
        assert "\negpu_http_tls_clients_refused_total 3\n" in metrics, metrics
        log = s.log.read_text()
        assert 'TLS client refused client=127.0.0.1 reason="no client certificate"' in log, log
        # kube-scheduler, with the stanza's certificate, binds it (bind may
        # wait for the cache to see the pod).
        client = kube_scheduler_client(objs, guide_cert)
        deadline = time.time() + 10
        while True:
            st, out = post(client)
            if st == 200 and out.get("Error") == "" or time.time() > deadline:
                break
            time.sleep(0.1)
        assert st == 200 and out.get("Error") == "", out
        st, got = api.call("GET", "/api/v1/namespaces/ml/pods/victim")
        assert got["spec"]["nodeName"] == "gpu-1"
        st, metrics = s.get("/metrics")
        assert "\negpu_http_tls_clients_refused_total 3\n" in metrics
    finally:
        s.stop()
