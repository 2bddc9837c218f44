"""Elastic GPU installed into a real control plane: etcd,
kube-apiserver, kube-controller-manager and kube-scheduler built from tools/go.mod
(tests/cluster/cluster.py, the `cluster` fixture), as an operator installs it.

- The control plane is the pinned version, with RBAC and the Node authorizer on, and a
  ServiceAccount token from the TokenRequest API authenticates as that ServiceAccount.
- `kubectl apply --server-side -k deploy/`: every object accepted; every CRD Established
  (structural schemas, CEL rules within the cost budget, selectableFields: what the test API
  server never checked); every object deploy/ renders is there, as rendered.
- In another cluster, `helm install` of deploy/helm/elastic-gpu: the same; `helm upgrade
  --set mode=dra` is taken and puts --mode dra on the webhook's and controller's
  Deployments and --dra on the scheduler's only, and mode=device-plugin takes them off.
- The ValidatingAdmissionPolicy guarding the system annotations, evaluated by the real API
  server's CEL: a pod owner (a ServiceAccount with the `edit` ClusterRole in its namespace)
  writing elasticgpu.io/assigned or elasticgpu.io/allocated onto a pod is refused with the
  policy's message; the ServiceAccounts deploy/ gives egpu-scheduler and egpu-agent may
  write them (their names in the policy are the real usernames); a pod owner's other edits go
  through: the policy runs before the validating webhook, so its message is the answer.
- egpu-webhook as deploy/ runs it (conftest's `webhook`), called by the API server over TLS
  with the configuration's caBundle, for pods and workloads; with it down, failurePolicy Fail
  refuses a pod that names an elasticgpu.io annotation; its RBAC from the audit log."""
import base64
import json
import pathlib
import re
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from conftest import ROOT, cluster_module as cl
import components  # noqa: E402  (tests/cluster/components.py)

DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm" / "elastic-gpu"
NS = "elastic-gpu-system"
TENANT = "tenant-a"
ASSIGNED = "elasticgpu.io/assigned"
ALLOCATED = "elasticgpu.io/allocated"
FORBIDDEN_PROBE = "/api/v1/namespaces/kube-system/secrets"  # outside egpu-webhook's grants


def pinned_kubernetes():
    for line in (ROOT / "tools" / "go.mod").read_text().splitlines():
        f = line.split()
        if len(f) >= 2 and f[0] == "k8s.io/kubernetes" and f[1].startswith("v"):
            return f[1]
    raise AssertionError("tools/go.mod pins no k8s.io/kubernetes")


def rendered(cluster, *cmd):
    """The objects a command renders (kubectl kustomize, helm template), as dicts."""
    text = cluster.kubectl(*cmd).stdout if cmd[0] == "kustomize" else cmd[1]
    return [o for o in yaml.safe_load_all(text) if o]


def ref(o):
    """(apiVersion, kind, namespace, name) of object o; the namespace "" for a
    cluster-scoped one."""
    m = o["metadata"]
    return o["apiVersion"], o["kind"], m.get("namespace") or "", m["name"]


def api_path(cluster, o, default_ns=None, _cache={}):
    """The REST path of object o, its resource found by discovery (cached per
    apiVersion); a namespaced object that names no namespace is in default_ns (where
    helm puts it)."""
    api_version, kind, ns, name = ref(o)
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    key = (id(cluster), api_version)
    if key not in _cache:
        st, disc = cluster.call("GET", base)
        assert st == 200, (api_version, disc)
        _cache[key] = {r["kind"]: r for r in disc["resources"] if "/" not in r["name"]}
    r = _cache[key][kind]
    if r["namespaced"] and not ns and default_ns:
        ns = default_ns
    assert r["namespaced"] == bool(ns), f"{kind} {name}: namespace {ns!r} but namespaced=" \
        f"{r['namespaced']}"
    return base + (f"/namespaces/{ns}" if ns else "") + f"/{r['name']}/{name}"


def subset(want, got, path=""):
    """The places where want (a rendered object) is not in got (the API server's copy):
    every key of want with the same value, got may have more (defaults, status). A key of
    a zero value (false, 0, "", [], {}) may be missing: Go's omitempty drops it."""
    if isinstance(want, dict) and isinstance(got, dict):
        return [d for k, v in want.items()
                for d in (subset(v, got[k], f"{path}.{k}") if k in got
                          else [] if v in (False, 0, "", [], {}, None) else [f"{path}.{k}"])]
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [d for i, (a, b) in enumerate(zip(want, got)) for d in subset(a, b, f"{path}[{i}]")]
    return [] if want == got or (isinstance(want, (int, float)) and str(want) == str(got)) \
        else [f"{path}: {want!r} != {got!r}"]


def check_installed(cluster, objs, default_ns=None):
    """Every object of objs is in the API server as rendered (apart from what the API
    server normalises: quantities, zero values it omits; and the webhooks' clientConfig,
    which the tests point at 127.0.0.1), every CRD Established, and returns the CRDs'
    names."""
    missing, differ = [], []
    for o in objs:
        st, got = cluster.call("GET", api_path(cluster, o, default_ns))
        if st != 200:
            missing.append(f"{ref(o)}: {st}")
            continue
        diffs = subset({k: v for k, v in o.items() if k not in ("metadata", "status")},
                       {k: v for k, v in got.items() if k != "metadata"})
        diffs += subset({k: o["metadata"].get(k) or {} for k in ("labels", "annotations")},
                        {k: got["metadata"].get(k) or {} for k in ("labels", "annotations")})
        diffs = [d for d in diffs if not re.search(r"(cpu|memory|ephemeral-storage)'?: ", d)]
        if o["kind"].endswith("WebhookConfiguration"):  # pointed at 127.0.0.1 (deployed)
            diffs = [d for d in diffs if not re.match(r"\.webhooks\[\d+\]\.clientConfig\.", d)]
        if diffs:
            differ.append(f"{ref(o)}: {diffs[:5]}")
    assert not missing, missing
    assert not differ, differ
    crds = [o["metadata"]["name"] for o in objs if o["kind"] == "CustomResourceDefinition"]
    assert crds, "no CRD rendered"
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    *[f"crd/{n}" for n in crds])
    for n in crds:
        st, crd = cluster.call("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{n}")
        conds = {c["type"]: c for c in crd["status"]["conditions"]}
        assert conds["Established"]["status"] == "True", conds
        assert conds["NamesAccepted"]["status"] == "True", conds
        assert conds.get("NonStructuralSchema", {}).get("status") != "True", conds
    return crds


@pytest.fixture(scope="module")
def kustomized(cluster, deployed):
    """deploy/ as conftest's `deployed` applied it (`kubectl apply --server-side -k`, as
    the README says, then the webhooks pointed at a closed port on 127.0.0.1: no webhook
    answers until the `webhook` fixture starts one), each object checked there
    (check_installed). The objects it rendered and the CRDs' names."""
    return {"objects": deployed, "crds": check_installed(cluster, deployed)}


def test_control_plane_is_the_pinned_release(cluster):
    st, v = cluster.call("GET", "/version")
    assert st == 200 and v["gitVersion"] == pinned_kubernetes(), v
    st, text = cluster.call("GET", "/readyz?verbose")
    assert st == 200
    # RBAC and the Node authorizer are on: a ServiceAccount with no grant may not list pods
    st, _ = cluster.call("POST", "/api/v1/namespaces/default/serviceaccounts", {
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "nobody"}})
    assert st == 201
    token = cluster.token("default", "nobody")
    st, who = cluster.call("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}, token=token)
    assert st == 201, who
    assert who["status"]["userInfo"]["username"] == "system:serviceaccount:default:nobody"
    st, denied = cluster.call("GET", "/api/v1/pods", token=token)
    assert st == 403, denied
    assert 'User "system:serviceaccount:default:nobody" cannot list resource "pods"' in \
        denied["message"], denied


def test_kustomize_install_is_accepted_and_established(cluster, kustomized):
    crds = kustomized["crds"]
    want = sorted(p.stem.split("_", 1)[1] + ".elasticgpu.io" for p in
                  (DEPLOY / "crds").glob("elasticgpu.io_*.yaml"))
    assert sorted(crds) == want
    # each CRD serves its kind: a list from the real API server (other tests of the
    # session may have made objects already)
    for o in kustomized["objects"]:
        if o["kind"] != "CustomResourceDefinition":
            continue
        g, plural = o["spec"]["group"], o["spec"]["names"]["plural"]
        for v in (v["name"] for v in o["spec"]["versions"] if v.get("served")):
            # a CRD just Established may answer 429 (retryAfterSeconds 1) while its storage
            # starts: kube-apiserver's own answer, which the components retry
            deadline = time.monotonic() + 30
            while True:
                st, lst = cluster.call("GET", f"/apis/{g}/{v}/{plural}")
                if st != 429 or time.monotonic() > deadline:
                    break
                time.sleep(lst.get("details", {}).get("retryAfterSeconds", 1))
            assert st == 200 and lst["kind"] == o["spec"]["names"]["kind"] + "List", \
                (plural, st, lst)
    kinds = {o["kind"] for o in kustomized["objects"]}
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
            "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} <= kinds


def policy_messages():
    """The messages of deploy/admission's policy, by the annotation they guard."""
    doc = next(d for d in yaml.safe_load_all((DEPLOY / "admission/system-annotations.yaml")
                                             .read_text()) if d["kind"] ==
               "ValidatingAdmissionPolicy")
    out = {}
    for v in doc["spec"]["validations"]:
        for a in (ASSIGNED, ALLOCATED):
            if f"'{a}'" in v["expression"]:
                out[a] = " ".join(v["message"].split())
    assert set(out) == {ASSIGNED, ALLOCATED}, out
    return out


@pytest.fixture(scope="module")
def tenant(cluster, kustomized):
    """Namespace tenant-a and its pod owner: ServiceAccount owner with the `edit`
    ClusterRole there (what a team gets); a kubeconfig with its token."""
    cluster.kubectl("create", "namespace", TENANT)
    cluster.kubectl("-n", TENANT, "create", "serviceaccount", "owner")
    cluster.kubectl("-n", TENANT, "create", "rolebinding", "owner-edit", "--clusterrole=edit",
                    f"--serviceaccount={TENANT}:owner")
    return cluster.sa_kubeconfig(TENANT, "owner")


def plain_pod(name):
    """A pod no webhook of deploy/ matches (no GPU resource, no elasticgpu.io annotation)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": TENANT, "labels": {"app": name}},
            "spec": {"containers": [{"name": "main", "image": "busybox:1"}]}}


def patch_annotation(cluster, token, name, key, value):
    body = {"metadata": {"annotations": {key: value}}}
    return cluster.call("PATCH", f"/api/v1/namespaces/{TENANT}/pods/{name}", body,
                        ctype="application/merge-patch+json", token=token)


def test_policy_refuses_a_pod_owner_writing_the_system_annotations(cluster, kustomized, tenant,
                                                                   webhook):
    owner = json.loads(pathlib.Path(tenant).read_text())["users"][0]["user"]["token"]
    msgs = policy_messages()
    st, pod = cluster.call("POST", f"/api/v1/namespaces/{TENANT}/pods", plain_pod("p1"),
                           token=owner)
    assert st == 201, pod
    for key in (ASSIGNED, ALLOCATED):
        st, err = patch_annotation(cluster, owner, "p1", key, '{"node":"n1"}')
        assert st == 403, (key, st, err)
        assert err["reason"] == "Forbidden"
        assert "ValidatingAdmissionPolicy 'elastic-gpu-system-annotations'" in err["message"], err
        assert msgs[key] in err["message"], (msgs[key], err["message"])
    # On CREATE the mutating webhook comes first: with none answering (the configurations
    # pointed at a closed port for a moment), failurePolicy Fail refuses the pod
    # (docs/operator-guide.md), and it is not created.
    bad = plain_pod("p2")
    bad["metadata"]["annotations"] = {ALLOCATED: "{}"}
    components.point_webhooks(cluster, cl.free_port())
    try:
        st, err = cluster.call("POST", f"/api/v1/namespaces/{TENANT}/pods", bad, token=owner)
    finally:
        components.point_webhooks(cluster, webhook.ports[0])
    assert st == 500 and 'failed calling webhook "mutate.webhook.elasticgpu.io"' in \
        err["message"], (st, err)
    assert cluster.call("GET", f"/api/v1/namespaces/{TENANT}/pods/p2")[0] == 404
    # the owner's other edits go through
    st, _ = patch_annotation(cluster, owner, "p1", "team/owner", "alice")
    assert st == 200


def test_policy_lets_the_components_write_them(cluster, kustomized, tenant, webhook):
    """egpu-scheduler's and egpu-agent's ServiceAccounts, as deploy/ makes them, with the
    RBAC deploy/ grants: the policy's usernames are the real ones."""
    owner = json.loads(pathlib.Path(tenant).read_text())["users"][0]["user"]["token"]
    st, _ = cluster.call("POST", f"/api/v1/namespaces/{TENANT}/pods", plain_pod("p3"),
                         token=owner)
    assert st == 201
    for sa, key in (("egpu-scheduler", ASSIGNED), ("egpu-agent", ALLOCATED)):
        st, got = patch_annotation(cluster, cluster.token(NS, sa), "p3", key, '{"x":1}')
        assert st == 200, (sa, st, got)
        assert got["metadata"]["annotations"][key] == '{"x":1}'
    # and once written, the owner may not change them, nor drop them
    st, err = patch_annotation(cluster, owner, "p3", ASSIGNED, None)
    assert st == 403, err


@pytest.fixture(scope="module")
def helm_cluster(tmp_path_factory):
    """A second control plane of its own, for the chart: deploy/ and the chart make the
    same cluster-scoped objects."""
    c = cl.Cluster(tmp_path_factory.mktemp("helm-cluster"), scheduler=False).start()
    yield c
    c.stop()


def test_helm_install_is_accepted_and_established(helm_cluster):
    c = helm_cluster
    r = c.helm("install", "egpu", str(CHART), "--namespace", NS, "--create-namespace",
               "--wait=false")
    assert "STATUS: deployed" in r.stdout, r.stdout
    text = c.helm("get", "manifest", "egpu", "--namespace", NS).stdout
    objs = [o for o in yaml.safe_load_all(text) if o]
    crds = [o for o in yaml.safe_load_all("\n---\n".join(
        p.read_text() for p in sorted((CHART / "crds").glob("*.yaml")))) if o]
    check_installed(c, objs + crds, default_ns=NS)
    st, rel = c.call("GET", f"/api/v1/namespaces/{NS}/secrets?labelSelector=owner%3Dhelm")
    assert st == 200 and len(rel["items"]) == 1, rel


def test_helm_upgrade_to_dra_mode(helm_cluster):
    """`helm upgrade --reuse-values --set mode=dra`, the operator guide's step: the real
    API server takes the new revision as rendered, its egpu-webhook and egpu-controller
    Deployments' arguments end in --mode dra and egpu-scheduler's in --dra, and no other
    object of the release changed; `--set mode=device-plugin` puts them back."""
    c = helm_cluster

    def deployments():
        out = {}
        for name in ("egpu-webhook", "egpu-controller", "egpu-scheduler"):
            st, d = c.call("GET", f"/apis/apps/v1/namespaces/{NS}/deployments/{name}")
            assert st == 200, (name, d)
            out[name] = d["spec"]["template"]["spec"]["containers"][0]["args"]
        return out

    before = deployments()
    assert all("--mode" not in a and "--dra" not in a for a in before.values()), before
    old = c.helm("get", "manifest", "egpu", "--namespace", NS).stdout
    c.helm("upgrade", "egpu", str(CHART), "--namespace", NS, "--reuse-values",
           "--set", "mode=dra", "--wait=false")
    text = c.helm("get", "manifest", "egpu", "--namespace", NS).stdout
    objs = [o for o in yaml.safe_load_all(text) if o]
    crds = [o for o in yaml.safe_load_all("\n---\n".join(
        p.read_text() for p in sorted((CHART / "crds").glob("*.yaml")))) if o]
    check_installed(c, objs + crds, default_ns=NS)
    after = deployments()
    assert after == {n: a + (["--dra"] if n == "egpu-scheduler" else ["--mode", "dra"])
                     for n, a in before.items()}, after
    olds = {ref(o): o for o in yaml.safe_load_all(old) if o}
    changed = {ref(o)[3] for o in objs if olds.get(ref(o)) != o}
    assert changed == {"egpu-webhook", "egpu-controller", "egpu-scheduler"}, changed
    c.helm("upgrade", "egpu", str(CHART), "--namespace", NS, "--reuse-values",
           "--set", "mode=device-plugin", "--wait=false")
    assert deployments() == before


def gpu_pod(name, resources, annotations=None):
    """A pod as its owner writes it: the default scheduler, resources as requests and
    limits."""
    meta = {"name": name, "namespace": TENANT}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "main", "image": "trainer:1", "resources": {
                "requests": dict(resources), "limits": dict(resources)}}]}}


def admission_requests(w):
    """egpu-webhook's egpu_webhook_admission_requests_total, summed over its labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{w.ports[1]}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("egpu_webhook_admission_requests_total"))


def test_webhook_is_called_by_the_real_api_server(cluster, tenant, webhook):
    """The API server calls egpu-webhook over TLS with the configuration's caBundle (the
    cluster CA, which signed the pre-made certificate), as deploy/ configures the webhooks
    (matchConditions, failurePolicy, reinvocation): a GPU pod of gpu-manager's names comes
    out rewritten, sent to the second scheduler, under the seccomp guard; a bad request is
    refused with the webhook's message; a pod that names no GPU never reaches it."""
    owner = json.loads(pathlib.Path(tenant).read_text())["users"][0]["user"]["token"]
    before = admission_requests(webhook)
    st, pod = cluster.call("POST", f"/api/v1/namespaces/{TENANT}/pods", plain_pod("cpu-only"),
                           token=owner)
    assert st == 201, pod
    assert admission_requests(webhook) == before, "matchConditions let a CPU pod through"
    assert pod["spec"]["schedulerName"] == "default-scheduler"

    st, pod = cluster.call("POST", f"/api/v1/namespaces/{TENANT}/pods", gpu_pod(
        "share", {"tencent.com/vcuda-core": "30", "tencent.com/vcuda-memory": "16"}),
        token=owner)
    assert st == 201, pod
    assert admission_requests(webhook) >= before + 2  # /mutate and /validate
    c = pod["spec"]["containers"][0]
    want = {"elasticgpu.io/gpu-core": "30", "elasticgpu.io/gpu-memory": "4096"}
    assert c["resources"] == {"requests": want, "limits": want}, c["resources"]
    assert pod["spec"]["schedulerName"] == "elastic-gpu-scheduler"
    assert c["securityContext"]["seccompProfile"] == {
        "type": "Localhost", "localhostProfile": "elastic-gpu/shared-gpu.json"}

    st, err = cluster.call("POST", f"/api/v1/namespaces/{TENANT}/pods", gpu_pod(
        "too-much", {"elasticgpu.io/gpu-core": "150", "elasticgpu.io/gpu-memory": "1024"}),
        token=owner)
    assert st in (400, 403, 422), (st, err)
    assert 'admission webhook "' in err["message"] and "gpu-core" in err["message"] and \
        "150" in err["message"], err
    assert cluster.call("GET", f"/api/v1/namespaces/{TENANT}/pods/too-much")[0] == 404

    # a workload's pod template has its names converted (docs/webhook.md: templates get
    # no scheduler name, each pod does when it is created)
    dep = {"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "infer", "namespace": TENANT},
           "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "infer"}},
                    "template": {"metadata": {"labels": {"app": "infer"}},
                                 "spec": gpu_pod("x", {"tencent.com/vcuda-core": "20",
                                                       "tencent.com/vcuda-memory": "8"})
                                 ["spec"]}}}
    st, got = cluster.call("POST", f"/apis/apps/v1/namespaces/{TENANT}/deployments", dep,
                           token=owner)
    assert st == 201, got
    want = {"elasticgpu.io/gpu-core": "20", "elasticgpu.io/gpu-memory": "2048"}
    assert got["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "requests": want, "limits": want}, got["spec"]["template"]


def test_components_calls_are_allowed_by_their_rbac(cluster, webhook):
    """Every request egpu-webhook made with its ServiceAccount's token (the audit log's
    record of them) was allowed by the RBAC deploy/ grants it, and one outside its grants is
    forbidden."""
    user = f"system:serviceaccount:{NS}:egpu-webhook"
    events = cluster.audit(user)
    assert events, f"no request of {user} in the audit log"
    denied = [(e["verb"], e["requestURI"], e["responseStatus"]["code"]) for e in events
              if e.get("responseStatus", {}).get("code") in (401, 403)]
    assert not denied, denied
    lists = {e["objectRef"]["resource"] for e in events
             if e["verb"] in ("list", "watch") and "objectRef" in e}
    assert {"gpus", "elasticgpuclaims", "gpubudgets", "priorityclasses"} <= lists, lists
    st, err = cluster.call("GET", FORBIDDEN_PROBE, token=cluster.token(NS, "egpu-webhook"))
    assert st == 403, err


def test_self_signed_webhook_keeps_its_own_ca_bundle(cluster, tenant, webhook, build_dir,
                                                   tmp_path):
    """deploy/webhook/self-signed added as an operator adds it (an overlay of deploy/ with
    the Component): egpu-webhook, run with the overlay's arguments and
    the Component's RBAC, makes its CA and certificate, keeps them in the Secret
    egpu-webhook-tls, and sets its CA as caBundle of every webhook of both configurations;
    the API server then calls it and trusts it. The test changes --self-signed-service to
    localhost (the certificate's names, which the URL must match) besides what
    components.webhook changes, and points the configurations at https://localhost:PORT;
    afterwards the session's webhook is put back."""
    import os
    owner = json.loads(pathlib.Path(tenant).read_text())["users"][0]["user"]["token"]
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    base = os.path.relpath(DEPLOY, overlay)
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {base}\ncomponents:\n  - {base}/webhook/self-signed\n")
    # What the Component adds to the cluster is its RBAC (the rest patches the Deployment,
    # whose arguments this test runs): applied alone, as the session's webhooks point at
    # 127.0.0.1 (an apply of the whole overlay would set clientConfig.service beside the
    # url, which the API server refuses: exactly one of them).
    docs = rendered(cluster, "kustomize", str(overlay))
    cluster.kubectl("apply", "--server-side", "--field-manager", "elastic-gpu-test",
                    "-f", str(DEPLOY / "webhook/self-signed/rbac.yaml"))
    tls = tmp_path / "tls"
    tls.mkdir()
    w = components.webhook(cluster, build_dir, tmp_path, tls / "self-signed" / "tls.crt",
                           tls / "self-signed" / "tls.key", docs=docs,
                           extra=("--self-signed-service", "localhost"))
    path = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/" \
           "elastic-gpu-webhook"
    session_ca = base64.b64encode(cluster.pki.ca.read_bytes()).decode()
    try:
        def own_bundle():
            cfg = cluster.call("GET", path)[1]
            bundles = {x["clientConfig"].get("caBundle") for x in cfg["webhooks"]}
            return len(bundles) == 1 and session_ca not in bundles and None not in bundles
        try:
            cl.wait_until(own_bundle, "the webhook's own caBundle on every webhook", 30)
        except TimeoutError as e:
            raise AssertionError(f"{e}\n{w.log.read_text()[-2000:]}") from None
        st, secret = cluster.call("GET", f"/api/v1/namespaces/{NS}/secrets/egpu-webhook-tls")
        assert st == 200 and {"tls.crt", "tls.key"} <= set(secret["data"]), st
        components.point_webhooks(cluster, w.ports[0], host="localhost")
        st, pod = cluster.call("POST", f"/api/v1/namespaces/{TENANT}/pods", gpu_pod(
            "self-signed", {"elasticgpu.io/gpu-core": "10", "elasticgpu.io/gpu-memory": "512"}),
            token=owner)
        assert st == 201, pod
        assert pod["spec"]["schedulerName"] == "elastic-gpu-scheduler"
        denied = [e for e in cluster.audit(f"system:serviceaccount:{NS}:egpu-webhook")
                  if e.get("responseStatus", {}).get("code") == 403
                  and e["requestURI"] != FORBIDDEN_PROBE]
        assert not denied, [(e["verb"], e["requestURI"]) for e in denied]
    finally:
        w.stop()
        components.point_webhooks(cluster, webhook.ports[0],
                                  ca_bundle=cluster.pki.ca.read_bytes())
