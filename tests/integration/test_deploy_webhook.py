"""deploy/webhook: egpu-webhook's manifests, checked offline.

- The Mutating- and ValidatingWebhookConfiguration that `kubectl kustomize
  deploy/` renders have exactly the webhooks, paths, rules, selectors,
  sideEffects, timeouts and failurePolicy of docs/webhook.md, and pass the
  checks the API server makes on them (admission_notes.md, "Webhook
  configuration keys").
- Their matchConditions, evaluated by a real CEL evaluator
  (tests/cel/match_eval.mjs, @bufbuild/cel) as the API server does before
  it calls a webhook, let through exactly the objects that name a GPU
  resource or annotation, over a table of pods, templates and malformed
  objects, and never fail to evaluate (an evaluation error would be a
  webhook failure under failurePolicy Fail); place.webhook's let through
  exactly the pods that ask no GPU and name no scheduler of their own.
- The Deployment, Service, NetworkPolicy, PodDisruptionBudget and RBAC agree
  with each other and with egpu-webhook's flags.
- certs.sh --dry-run makes a serving certificate that openssl and a real TLS
  client (Python's ssl) verify against its CA for the Service's name; run
  against a stand-in kubectl it patches caBundle into every webhook, keeping
  the previous CA, before it replaces the Secret.
- The cert-manager Component renders in an overlay and wires the Secret and
  the CA injection.

kubectl, node and openssl: a test that needs a missing one is skipped, except
under CI=true, where it fails.
"""
import base64
import json
import os
import re
import socket
import ssl
import stat
import subprocess
import threading

import pytest
import yaml

from conftest import ROOT, tool

DEPLOY = ROOT / "deploy"
WEBHOOK_DIR = DEPLOY / "webhook"
CERTS_SH = WEBHOOK_DIR / "certs.sh"
NS = "elastic-gpu-system"
SERVICE = "egpu-webhook"
SECRET = "egpu-webhook-tls"
CONFIG = "elastic-gpu-webhook"
HOST = f"{SERVICE}.{NS}.svc"
TLS_DIR = "/etc/egpu-webhook/tls"
MUTATE, MUTATE_NV, VALIDATE = ("mutate.webhook.elasticgpu.io",
                               "mutate-nvidia.webhook.elasticgpu.io",
                               "validate.webhook.elasticgpu.io")
CLAIMS = "claims.webhook.elasticgpu.io"
CLAIMS_CONDITION = "elasticgpu-claims-and-dra-claims-of-its-classes"
PLACE = "place.webhook.elasticgpu.io"
PLACE_LABEL = "elasticgpu.io/pods-without-gpu"
NV_LABEL = "elasticgpu.io/compat-nvidia"

# The compatible names of the contract (DESIGN.md section 1, docs/webhook.md).
COMPAT = ["tencent.com/vcuda-core", "tencent.com/vcuda-memory", "inspur.com/vcuda-core",
          "inspur.com/vcuda-memory", "aliyun.com/gpu-mem", "elastic-gpu/gpu-percent",
          "elasticgpu.com/gpu-core", "elasticgpu.com/gpu-memory",
          "gpushare.provisioner.elasticgpu.io/gpu-core",
          "gpushare.provisioner.elasticgpu.io/gpu-memory"]
COMPAT_NVIDIA = ["nvidia.com/gpucores", "nvidia.com/gpumem"]
CORE_LIMIT_ANNOTATIONS = ["tencent.com/vcuda-core-limit", "inspur.com/vcuda-core-limit"]




def kubectl():
    return tool("kubectl")


def kustomize(path):
    r = subprocess.run([kubectl(), "kustomize", str(path)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, f"kubectl kustomize {path} failed:\n{r.stderr}"
    return [d for d in yaml.safe_load_all(r.stdout) if d]


@pytest.fixture(scope="module")
def objs():
    return kustomize(DEPLOY)


def find(objs, kind, name=None):
    return [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objs, kind, name=None):
    found = find(objs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def webhooks(objs):
    out = {}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for w in one(objs, kind, CONFIG)["webhooks"]:
            assert w["name"] not in out
            out[w["name"]] = (kind, w)
    return out


def pod_webhooks(objs):
    """The webhooks of pods and pod templates, which filter with matchConditions
    (all but the claims' one)."""
    return {n: w for n, w in webhooks(objs).items() if n != CLAIMS}


def flag(args, name):
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def webhook_deployment(objs):
    dep = one(objs, "Deployment", "egpu-webhook")
    spec = dep["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["egpu-webhook"]
    return dep, spec, spec["containers"][0]


def container_args(c):
    return c.get("command", [])[1:] + c.get("args", [])


def port_number(c, port):
    for p in c.get("ports", []):
        if port in (p["containerPort"], p.get("name")):
            return p["containerPort"]
    raise AssertionError(f"{port!r} is not a port of container {c['name']}")


# --- the webhook configurations: exactly these fields -----------------------------

SYSTEM_NS = {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
             "values": ["kube-system", NS]}
POD_CREATE = {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
              "resources": ["pods"], "scope": "Namespaced"}
WORKLOADS = [
    {"operations": ["CREATE", "UPDATE"], "apiGroups": ["apps"], "apiVersions": ["v1"],
     "resources": ["deployments", "statefulsets", "daemonsets", "replicasets"],
     "scope": "Namespaced"},
    {"operations": ["CREATE", "UPDATE"], "apiGroups": ["batch"], "apiVersions": ["v1"],
     "resources": ["jobs", "cronjobs"], "scope": "Namespaced"}]
COMMON = {"admissionReviewVersions": ["v1"], "sideEffects": "None", "timeoutSeconds": 5,
          "failurePolicy": "Fail", "matchPolicy": "Equivalent"}


def service(path):
    return {"service": {"namespace": NS, "name": SERVICE, "path": path, "port": 443}}


EXPECTED = {
    MUTATE: ("MutatingWebhookConfiguration", {
        **COMMON, "name": MUTATE, "reinvocationPolicy": "IfNeeded",
        "clientConfig": service("/mutate"), "rules": [POD_CREATE, *WORKLOADS],
        "namespaceSelector": {"matchExpressions": [
            SYSTEM_NS, {"key": NV_LABEL, "operator": "NotIn", "values": ["enabled"]}]}}),
    MUTATE_NV: ("MutatingWebhookConfiguration", {
        **COMMON, "name": MUTATE_NV, "reinvocationPolicy": "IfNeeded",
        "clientConfig": service("/mutate-nvidia"), "rules": [POD_CREATE, *WORKLOADS],
        "namespaceSelector": {"matchExpressions": [
            SYSTEM_NS, {"key": NV_LABEL, "operator": "In", "values": ["enabled"]}]}}),
    VALIDATE: ("ValidatingWebhookConfiguration", {
        **COMMON, "name": VALIDATE, "clientConfig": service("/validate"),
        "rules": [
            {"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
             "resources": ["pods"], "scope": "Namespaced"}, *WORKLOADS],
        "namespaceSelector": {"matchExpressions": [SYSTEM_NS]}}),
    # Pods without GPU of the namespaces labelled for it get
    # elastic-gpu-scheduler (src/webhook/place.c): pod CREATEs only, and
    # failurePolicy Ignore (down: the default scheduler places them).
    PLACE: ("MutatingWebhookConfiguration", {
        **COMMON, "name": PLACE, "failurePolicy": "Ignore", "reinvocationPolicy": "Never",
        "clientConfig": service("/mutate-place"), "rules": [POD_CREATE],
        "namespaceSelector": {"matchLabels": {PLACE_LABEL: "place"},
                              "matchExpressions": [SYSTEM_NS]}}),
    # Claims against the namespace's ResourceQuota (src/webhook/quota.c): every
    # ElasticGPUClaim CREATE and UPDATE; DRA claims of this driver's classes only
    # (its matchCondition, CLAIMS_CONDITION, evaluated below).
    CLAIMS: ("ValidatingWebhookConfiguration", {
        **COMMON, "name": CLAIMS, "clientConfig": service("/validate"),
        "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": ["elasticgpu.io"],
                   "apiVersions": ["v1alpha1"], "resources": ["elasticgpuclaims"],
                   "scope": "Namespaced"},
                  # DRA mode's claims and templates against the budget and quota
                  # (src/webhook/dra_quota.c): CREATE only (their spec is immutable)
                  {"operations": ["CREATE"], "apiGroups": ["resource.k8s.io"],
                   "apiVersions": ["v1"],
                   "resources": ["resourceclaims", "resourceclaimtemplates"],
                   "scope": "Namespaced"}],
        "namespaceSelector": {"matchExpressions": [SYSTEM_NS]}}),
}


def test_webhook_configurations_exact(objs):
    """Each webhook is exactly as docs/webhook.md describes it; no caBundle
    in the base (cert-manager or certs.sh adds it), one matchCondition."""
    got = webhooks(objs)
    assert sorted(got) == sorted(EXPECTED)
    for name, (kind, want) in EXPECTED.items():
        gkind, w = got[name]
        assert gkind == kind, name
        w = dict(w)
        conds = w.pop("matchConditions", [])
        assert w == want, f"{name}:\n got  {w}\n want {want}"
        assert [c["name"] for c in conds] == (
            [CLAIMS_CONDITION] if name == CLAIMS
            else ["names-no-scheduler", "asks-no-gpu"] if name == PLACE
            else ["names-gpu-resource-or-annotation"]), name
    # place is the last mutating webhook: it sees a pod after /mutate gave a
    # claim's pod its GPU, and nothing after it reinvokes.
    mutating = one(objs, "MutatingWebhookConfiguration", CONFIG)["webhooks"]
    assert [w["name"] for w in mutating] == [MUTATE, MUTATE_NV, PLACE]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        meta = one(objs, kind, CONFIG)["metadata"]
        assert not meta.get("namespace"), f"{kind} is cluster-scoped"
        assert "cert-manager.io/inject-ca-from" not in (meta.get("annotations") or {})


QUALIFIED = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$")
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
WEBHOOK_KEYS = {"name", "clientConfig", "rules", "failurePolicy", "matchPolicy",
                "namespaceSelector", "objectSelector", "sideEffects", "timeoutSeconds",
                "admissionReviewVersions", "matchConditions"}


def test_webhook_configurations_valid(objs):
    """What the API server's validation of admissionregistration.k8s.io/v1
    checks (pkg/apis/admissionregistration/validation): only known keys,
    names of at least three DNS labels and unique, required fields, values
    in their enums and ranges, matchCondition names qualified and at most
    64 of them, label selector operators with the values they need."""
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        cfg = one(objs, kind, CONFIG)
        assert cfg["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert set(cfg) <= {"apiVersion", "kind", "metadata", "webhooks"}
        mutating = kind.startswith("Mutating")
        names = [w["name"] for w in cfg["webhooks"]]
        assert len(set(names)) == len(names)
        for w in cfg["webhooks"]:
            assert set(w) <= WEBHOOK_KEYS | ({"reinvocationPolicy"} if mutating else set()), \
                set(w) - WEBHOOK_KEYS
            assert DNS1123.match(w["name"]) and w["name"].count(".") >= 2, w["name"]
            assert w["sideEffects"] in ("None", "NoneOnDryRun")
            assert w["admissionReviewVersions"] and set(w["admissionReviewVersions"]) <= {"v1", "v1beta1"}
            assert w.get("failurePolicy", "Fail") in ("Fail", "Ignore")
            assert w.get("matchPolicy", "Equivalent") in ("Exact", "Equivalent")
            assert 1 <= w.get("timeoutSeconds", 10) <= 30
            if mutating:
                assert w.get("reinvocationPolicy", "Never") in ("Never", "IfNeeded")
            svc = w["clientConfig"]["service"]
            assert "url" not in w["clientConfig"]
            assert svc["path"].startswith("/") and 1 <= svc["port"] <= 65535
            assert w["rules"]
            for r in w["rules"]:
                assert set(r["operations"]) <= {"CREATE", "UPDATE", "DELETE", "CONNECT"}
                assert r["apiVersions"] and r["resources"] and "apiGroups" in r
                assert r.get("scope", "*") in ("Cluster", "Namespaced", "*")
                assert not any("*" in x for x in r["resources"] + r["apiGroups"])
            for e in w["namespaceSelector"]["matchExpressions"]:
                assert e["operator"] in ("In", "NotIn", "Exists", "DoesNotExist")
                assert bool(e.get("values")) == (e["operator"] in ("In", "NotIn"))
            conds = w.get("matchConditions", [])
            assert 0 < len(conds) <= 64
            assert len({c["name"] for c in conds}) == len(conds)
            for c in conds:
                assert QUALIFIED.match(c["name"]), c["name"]
                assert c["expression"].strip()


def test_webhook_renders_alone():
    """deploy/webhook is a kustomize base of its own too."""
    kinds = sorted(o["kind"] for o in kustomize(WEBHOOK_DIR))
    assert kinds == sorted(["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Service",
                            "NetworkPolicy", "PodDisruptionBudget", "Deployment",
                            "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"])


def test_webhooks_reach_the_https_port(objs):
    """Every webhook calls Service egpu-webhook, whose port leads to the
    container port egpu-webhook serves HTTPS on (--port)."""
    _, _, c = webhook_deployment(objs)
    svc = one(objs, "Service", SERVICE)
    assert svc["metadata"]["namespace"] == NS
    ports = {p["port"]: p for p in svc["spec"]["ports"]}
    for _, w in webhooks(objs).values():
        ref = w["clientConfig"]["service"]
        assert (ref["namespace"], ref["name"]) == (NS, SERVICE)
        assert port_number(c, ports[ref["port"]]["targetPort"]) == \
            int(flag(container_args(c), "--port")) == 9443
    assert port_number(c, ports[9444]["targetPort"]) == int(flag(container_args(c),
                                                                 "--health-port")) == 9444
    assert set(ports) == {443, 9444}


# --- matchConditions, evaluated --------------------------------------------------

def evaluate(webhook, cases):
    node = tool("node")
    assert (ROOT / "tests/cel/node_modules/@bufbuild/cel").is_dir(), \
        "tests/cel/node_modules is missing: run `make deps`"
    r = subprocess.run([node, str(ROOT / "tests/cel/match_eval.mjs")], capture_output=True,
                       text=True, timeout=60, input=json.dumps({"webhook": webhook, "cases": cases}))
    assert r.returncode == 0, r.stderr
    return {c["name"]: c for c in json.loads(r.stdout)}


def ctr(name="c", requests=None, limits=None, resources=True):
    c = {"name": name, "image": "busybox"}
    if resources is None:
        c["resources"] = None
    elif resources:
        res = {}
        if requests is not None:
            res["requests"] = requests
        if limits is not None:
            res["limits"] = limits
        c["resources"] = res
    return c


def pod(containers=None, init=None, annotations=None, kind="Pod"):
    meta = {"name": "p", "namespace": "team"}
    if annotations is not None:
        meta["annotations"] = annotations
    spec = {"containers": containers if containers is not None else [ctr()]}
    if init is not None:
        spec["initContainers"] = init
    return {"apiVersion": "v1", "kind": kind, "metadata": meta, "spec": spec}


def finalized(p, finalizers):
    p["metadata"]["finalizers"] = finalizers
    return p


def template(p):
    return {"metadata": p["metadata"], "spec": p["spec"]}


def workload(kind, p):
    group = "batch/v1" if kind in ("Job", "CronJob") else "apps/v1"
    spec = {"template": template(p)}
    if kind == "CronJob":
        spec = {"schedule": "*/5 * * * *", "jobTemplate": {"spec": spec}}
    elif kind != "Job":
        spec["selector"] = {"matchLabels": {"app": "x"}}
    return {"apiVersion": group, "kind": kind, "metadata": {"name": "w", "namespace": "team"},
            "spec": spec}


GPU = {"elasticgpu.io/gpu-core": "30", "elasticgpu.io/gpu-memory": "4096"}
PLAIN = {"cpu": "1", "memory": "1Gi"}
ASSIGNED = {"elasticgpu.io/assigned": json.dumps({"node": "n1", "containers": []})}

# name -> (object, operation, oldObject, {webhook: expected match}); a
# webhook left out of the dict does not get that operation (its rules): the
# mutating ones get no pod UPDATE.
M, N, V, P = MUTATE, MUTATE_NV, VALIDATE, PLACE


def all3(x, place=None):
    """The three GPU webhooks x; place (pod CREATEs only) the opposite, or
    place when given."""
    return {M: x, N: x, V: x, P: (not x) if place is None else place}


def gpu_only(x):
    """A workload or UPDATE case: the three GPU webhooks; place gets no
    such request (its rules)."""
    return {M: x, N: x, V: x}


CASES = {
    "gpu pod, limits": (pod([ctr(limits=GPU)]), "CREATE", None, all3(True)),
    "gpu pod, requests only": (pod([ctr(requests={"elasticgpu.io/gpu-core": "50"})]), "CREATE",
                               None, all3(True)),
    "gpu pod, second container": (pod([ctr("a", limits=PLAIN), ctr("b", limits=GPU)]), "CREATE",
                                  None, all3(True)),
    "gpu init container only": (pod([ctr(limits=PLAIN)], init=[ctr("i", limits=GPU)]), "CREATE",
                                None, all3(True)),
    "any elasticgpu.io resource": (pod([ctr(limits={"elasticgpu.io/future": "1"})]), "CREATE",
                                   None, all3(True)),
    "plain pod": (pod([ctr(requests=PLAIN, limits=PLAIN)]), "CREATE", None, all3(False)),
    "plain pod, no resources": (pod([ctr(resources=False)]), "CREATE", None, all3(False)),
    "plain pod, other annotations": (pod(annotations={"example.com/x": "1",
                                                      "nvidia.com/use-gputype": "A100"}),
                                     "CREATE", None, all3(False)),
    "nvidia.com/gpu alone": (pod([ctr(limits={"nvidia.com/gpu": "1"})]), "CREATE", None,
                             all3(False)),
    "nvidia.com/gpucores": (pod([ctr(limits={"nvidia.com/gpu": "1",
                                             "nvidia.com/gpucores": "30"})]), "CREATE", None,
                            {M: False, N: True, V: False, P: False}),
    "nvidia.com/gpumem": (pod([ctr(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"})]),
                          "CREATE", None, {M: False, N: True, V: False, P: False}),
    "nvidia.com/gpumem in an init container": (
        pod([ctr()], init=[ctr("i", requests={"nvidia.com/gpumem": "3000"})]), "CREATE", None,
        {M: False, N: True, V: False, P: False}),
    "nvidia.com/gpumem in a Deployment's template": (
        workload("Deployment", pod([ctr(limits={"nvidia.com/gpu": "1",
                                                "nvidia.com/gpumem": "3000"})])),
        "UPDATE", None, {M: False, N: True, V: False}),
    "a name that only looks like ours": (pod([ctr(limits={"elasticgpu.io.evil/x": "1",
                                                          "xelasticgpu.io/gpu-core": "1",
                                                          "tencent.com/vcuda": "1"})]),
                                         "CREATE", None, all3(False)),
    "annotation elasticgpu.io/gpu-model": (pod(annotations={"elasticgpu.io/gpu-model": "A100"}),
                                           "CREATE", None, all3(True, place=True)),
    "annotation egpuc.elasticgpu.io/<container>": (
        pod(annotations={"egpuc.elasticgpu.io/c": "my-claim"}), "CREATE", None, all3(True)),
    "forged elasticgpu.io/assigned on create": (pod(annotations=ASSIGNED), "CREATE", None,
                                                all3(True, place=True)),
    "Deployment, plain template": (workload("Deployment", pod([ctr(limits=PLAIN)])), "CREATE",
                                   None, gpu_only(False)),
    "Deployment UPDATE, template annotation tencent.com/vcuda-core-limit": (
        workload("Deployment", pod(annotations={"tencent.com/vcuda-core-limit": "50"})),
        "UPDATE", None, gpu_only(True)),
    "CronJob, plain template": (workload("CronJob", pod([ctr(limits=PLAIN)])), "CREATE", None,
                                gpu_only(False)),
    "CronJob, GPU template": (workload("CronJob", pod([ctr(limits=GPU)])), "CREATE", None,
                              gpu_only(True)),
    "CronJob, GPU init container in template": (
        workload("CronJob", pod([ctr()], init=[ctr("i", limits={"aliyun.com/gpu-mem": "2"})])),
        "UPDATE", None, gpu_only(True)),
    # System-annotation protection: every UPDATE that carries them, or
    # carried them, reaches /validate.
    "pod UPDATE keeping elasticgpu.io/assigned": (pod(annotations=ASSIGNED), "UPDATE",
                                                  pod(annotations=ASSIGNED), {V: True}),
    "pod UPDATE removing elasticgpu.io/assigned": (pod(annotations={"team/x": "1"}), "UPDATE",
                                                   pod(annotations=ASSIGNED), {V: True}),
    "pod UPDATE removing elasticgpu.io/allocated": (
        pod(annotations=None), "UPDATE", pod(annotations={"elasticgpu.io/allocated": "c"}),
        {V: True}),
    # DRA mode's elasticgpu.io/dra-claims is fixed at creation: removing it
    # reaches /validate (src/webhook/dra.c refuses it), and a pod carrying it
    # reaches both on CREATE (the webhook overwrites or refuses it).
    "pod UPDATE removing elasticgpu.io/dra-claims": (
        pod(annotations={"team/x": "1"}), "UPDATE",
        pod(annotations={"elasticgpu.io/dra-claims": "{}"}), {V: True}),
    "pod CREATE with elasticgpu.io/dra-claims": (
        pod(annotations={"elasticgpu.io/dra-claims": "{}"}), "CREATE", None,
        all3(True, place=True)),
    # A pod's claim annotations are fixed at creation: removing one reaches
    # /validate too (src/webhook/claims.c refuses it).
    "pod UPDATE removing egpuc.elasticgpu.io/<container>": (
        pod(annotations={"team/x": "1"}), "UPDATE",
        pod(annotations={"egpuc.elasticgpu.io/c": "my-claim"}), {V: True}),
    "pod UPDATE keeping egpuc.elasticgpu.io/<container>": (
        pod(annotations={"egpuc.elasticgpu.io/c": "my-claim", "team/x": "2"}), "UPDATE",
        pod(annotations={"egpuc.elasticgpu.io/c": "my-claim", "team/x": "1"}), {V: True}),
    # The finalizer elasticgpu.io/metering (GPU budgets) is removed only by
    # the controller: every UPDATE whose old object holds it reaches
    # /validate, even of a pod that names no GPU (src/webhook/budgets.c).
    "pod UPDATE removing elasticgpu.io/metering": (
        finalized(pod(), []), "UPDATE", finalized(pod(), ["elasticgpu.io/metering"]), {V: True}),
    "pod UPDATE dropping the finalizers with elasticgpu.io/metering": (
        pod(), "UPDATE", finalized(pod(), ["example.com/x", "elasticgpu.io/metering"]),
        {V: True}),
    "pod UPDATE, another finalizer removed": (
        finalized(pod(), []), "UPDATE", finalized(pod(), ["example.com/x"]), {V: False}),
    "pod UPDATE, old object with finalizers: null": (
        pod(), "UPDATE", finalized(pod(), None), {V: False}),
    "pod UPDATE, old object with finalizers not a list": (
        pod(), "UPDATE", finalized(pod(), {"elasticgpu.io/metering": 1}), {V: False}),
    "plain pod UPDATE": (pod(annotations={"team/x": "2"}), "UPDATE",
                         pod(annotations={"team/x": "1"}), {V: False}),
    "plain pod UPDATE, old object without metadata": (pod(), "UPDATE", {"kind": "Pod"},
                                                      {V: False}),
}
for _kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
    CASES[f"{_kind}, GPU template"] = (workload(_kind, pod([ctr(limits=GPU)])), "CREATE", None,
                                       gpu_only(True))
for _name in COMPAT:
    CASES[f"compatible name {_name}"] = (pod([ctr(limits={_name: "2"})]), "CREATE", None,
                                         all3(True))
    CASES[f"compatible name {_name}, Deployment"] = (
        workload("Deployment", pod([ctr(requests={_name: "2"})])), "CREATE", None,
        gpu_only(True))
for _name in CORE_LIMIT_ANNOTATIONS:
    # asks no GPU by itself: place still sends the pod to elastic-gpu-scheduler
    CASES[f"annotation {_name}"] = (pod(annotations={_name: "60"}), "CREATE", None,
                                    all3(True, place=True))

# Objects with fields absent, null or of the wrong type: false, never an
# error (the API server would count an error as a failed call).
_broken = {
    "no spec": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}},
    "spec null": {"kind": "Pod", "metadata": {"name": "p"}, "spec": None},
    "spec a string": {"kind": "Pod", "metadata": {"name": "p"}, "spec": "x"},
    "no spec.containers": {"kind": "Pod", "metadata": {}, "spec": {"nodeName": "n"}},
    "containers null": {"kind": "Pod", "spec": {"containers": None}},
    "containers a map": {"kind": "Pod", "spec": {"containers": {"c": {"resources": {}}}}},
    "container null": {"kind": "Pod", "spec": {"containers": [None]}},
    "container a string": {"kind": "Pod", "spec": {"containers": ["c"]}},
    "resources null": pod([ctr(resources=None)]),
    "requests and limits null": pod([ctr(requests=None, limits=None) | {
        "resources": {"requests": None, "limits": None}}]),
    "limits a list": pod([{"name": "c", "resources": {"limits": ["elasticgpu.io/gpu-core"]}}]),
    "metadata null": {"kind": "Pod", "metadata": None, "spec": {"containers": []}},
    "annotations null": {"kind": "Pod", "metadata": {"annotations": None}, "spec": {}},
    "annotations a list": {"kind": "Pod", "metadata": {"annotations": ["elasticgpu.io/x"]},
                           "spec": {}},
    "Deployment, template null": {"kind": "Deployment", "spec": {"template": None}},
    "Deployment, template without spec": {"kind": "Deployment",
                                          "spec": {"template": {"metadata": {}}}},
    "Deployment, template.spec null": {"kind": "Deployment",
                                       "spec": {"template": {"spec": None, "metadata": None}}},
    "CronJob, jobTemplate null": {"kind": "CronJob", "spec": {"jobTemplate": None}},
    "CronJob, jobTemplate without spec": {"kind": "CronJob", "spec": {"jobTemplate": {}}},
    "CronJob, jobTemplate.spec without template": {"kind": "CronJob",
                                                   "spec": {"jobTemplate": {"spec": {}}}},
    "CronJob, jobTemplate.spec.template null": {
        "kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": None}}}},
    "object null": None,
}
# place lets through every Pod with a spec object that names no GPU,
# however broken the rest: /mutate-place judges it again (and the API
# server never sends such a pod).
_place_false = {"no spec", "spec null", "spec a string", "object null"}
for _name, _obj in _broken.items():
    _is_pod = (_obj or {}).get("kind", "Pod") == "Pod"
    CASES[f"malformed: {_name}"] = (_obj, "CREATE", None,
                                    all3(False, place=_name not in _place_false) if _is_pod
                                    else gpu_only(False))
    CASES[f"malformed UPDATE: {_name}"] = (
        _obj, "UPDATE", _obj, {V: False} if _is_pod else gpu_only(False))
# schedulerName: place sends only a pod that names none, "" or
# default-scheduler (the API server's default); the GPU webhooks do not look.
for _sched, _want in (("default-scheduler", True), ("", True), ("volcano", False),
                      ("elastic-gpu-scheduler", False), (5, False), (None, False)):
    _p = pod([ctr(requests=PLAIN)])
    _p["spec"]["schedulerName"] = _sched
    CASES[f"plain pod, schedulerName {_sched!r}"] = (_p, "CREATE", None,
                                                     all3(False, place=_want))
    _g = pod([ctr(limits=GPU)])
    _g["spec"]["schedulerName"] = _sched
    CASES[f"gpu pod, schedulerName {_sched!r}"] = (_g, "CREATE", None, all3(True, place=False))
# A GPU init container beside a plain container: not place's; a plain one is.
CASES["plain container, GPU init container in requests"] = (
    pod([ctr(requests=PLAIN)], init=[ctr("i", requests={"elasticgpu.io/gpu-core": "10"})]),
    "CREATE", None, all3(True))
CASES["plain container and init container"] = (
    pod([ctr(requests=PLAIN)], init=[ctr("i", limits=PLAIN)]), "CREATE", None, all3(False))
# A malformed container beside a GPU one does not hide it.
CASES["resources null beside a GPU container"] = (
    pod([ctr("a", resources=None), None, ctr("b", limits=GPU)]), "CREATE", None, all3(True))


def request_for(obj, op):
    kind = (obj or {}).get("kind") or "Pod"
    group = {"Pod": "", "CronJob": "batch", "Job": "batch"}.get(kind, "apps")
    resource = kind.lower() + "s"
    return {"uid": "u", "operation": op, "kind": {"group": group, "version": "v1", "kind": kind},
            "resource": {"group": group, "version": "v1", "resource": resource},
            "namespace": "team", "name": "p",
            "userInfo": {"username": "alice@example.com", "groups": ["system:authenticated"]}}


def rule_covers(w, obj, op):
    req = request_for(obj, op)
    return any(op in r["operations"] and req["resource"]["group"] in r["apiGroups"]
               and req["resource"]["resource"] in r["resources"] for r in w["rules"])


@pytest.fixture(scope="module")
def match_results(objs):
    out = {}
    for name, (_, w) in pod_webhooks(objs).items():
        cases = [{"name": n, "object": obj, "oldObject": old, "request": request_for(obj, op)}
                 for n, (obj, op, old, _) in CASES.items()]
        out[name] = evaluate(w, cases)
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_match_conditions(objs, match_results, case):
    obj, op, _, want = CASES[case]
    whs = webhooks(objs)
    for name, res in match_results.items():
        r = res[case]
        assert r["error"] is None, f"{name}: {case}: evaluation error {r['error']}"
        if name in want:
            # The table says which webhooks get this operation; so do the rules.
            assert rule_covers(whs[name][1], obj, op), f"{name} gets no {op} of this kind"
            assert r["match"] is want[name], f"{name}: {case}: match {r['match']}"


def dra_claim(requests, kind="ResourceClaim"):
    spec = {"devices": {"requests": requests}} if requests is not None else {}
    if kind == "ResourceClaimTemplate":
        spec = {"spec": spec}
    return {"apiVersion": "resource.k8s.io/v1", "kind": kind,
            "metadata": {"name": "c", "namespace": "team"}, "spec": spec}


def dra_request(obj, op="CREATE"):
    req = request_for(obj, op)
    res = obj["kind"].lower() + "s"
    req["kind"] = {"group": "resource.k8s.io", "version": "v1", "kind": obj["kind"]}
    req["resource"] = {"group": "resource.k8s.io", "version": "v1", "resource": res}
    return req


def exactly(cls, **kw):
    return {"name": "gpu", "exactly": {"deviceClassName": cls, **kw}}


CLAIM_CASES = {
    # name: (object, sent to the webhook)
    "elasticgpuclaim": ({"apiVersion": "elasticgpu.io/v1alpha1", "kind": "ElasticGPUClaim",
                         "metadata": {"name": "c", "namespace": "team"},
                         "spec": {"resources": {"requests": {"elasticgpu.io/gpu-core": "30"}}}},
                        True),
    "share claim": (dra_claim([exactly("gpu-share.elasticgpu.io", capacity={
        "requests": {"cores": "30", "memory": "4Gi"}})]), True),
    "whole-card claim": (dra_claim([exactly("gpu.elasticgpu.io", count=2)]), True),
    "an ElasticGPUClass's class": (dra_claim([exactly("elasticgpu-gpushare")]), True),
    "ours in firstAvailable": (dra_claim([{"name": "gpu", "firstAvailable": [
        {"name": "nv", "deviceClassName": "gpu.nvidia.com"},
        {"name": "ours", "deviceClassName": "gpu-share.elasticgpu.io"}]}]), True),
    "template of ours": (dra_claim([exactly("gpu-share.elasticgpu.io")],
                                   "ResourceClaimTemplate"), True),
    "another driver's claim": (dra_claim([exactly("gpu.nvidia.com", count=8)]), False),
    "another driver's firstAvailable": (dra_claim([{"name": "g", "firstAvailable": [
        {"name": "nv", "deviceClassName": "gpu.nvidia.com"}]}]), False),
    "another driver's template": (dra_claim([exactly("gpu.nvidia.com")],
                                            "ResourceClaimTemplate"), False),
    "a claim of no devices": (dra_claim(None), False),
    "a template of no devices": (dra_claim(None, "ResourceClaimTemplate"), False),
    "a request without a class": (dra_claim([{"name": "x", "exactly": {}}]), False),
}


def test_claims_match_condition(objs):
    """claims.webhook gets every ElasticGPUClaim and only the ResourceClaims and
    templates that ask one of this driver's classes (as src/api/dra_usage.c counts
    them), so another driver's claims never wait on egpu-webhook (failurePolicy Fail),
    and nothing errors (an error fails the request closed)."""
    _, w = webhooks(objs)[CLAIMS]
    cases = []
    for n, (obj, _) in CLAIM_CASES.items():
        req = request_for(obj, "CREATE") if obj["kind"] == "ElasticGPUClaim" else dra_request(obj)
        if obj["kind"] == "ElasticGPUClaim":
            req["resource"] = {"group": "elasticgpu.io", "version": "v1alpha1",
                               "resource": "elasticgpuclaims"}
        cases.append({"name": n, "object": obj, "oldObject": None, "request": req})
    got = evaluate(w, cases)
    for n, (_, want) in CLAIM_CASES.items():
        assert got[n]["error"] is None, f"{n}: {got[n]['error']}"
        assert got[n]["match"] is want, f"{n}: match {got[n]['match']}"


def test_match_evaluator_reports_errors(objs):
    """The harness above would see an evaluation error: a condition that
    reads resources.limits without has() errors on a container whose
    resources is null, and one that returns a string is not a bool. And it
    counts a key whose value is null as present, as the API server does."""
    w = dict(webhooks(objs)[MUTATE][1])
    w["matchConditions"] = [
        {"name": "naive", "expression":
         "object.spec.containers.exists(c, 'elasticgpu.io/gpu-core' in c.resources.limits)"}]
    obj = pod([ctr(resources=None)])
    r = evaluate(w, [{"name": "x", "object": obj, "oldObject": None,
                      "request": request_for(obj, "CREATE")}])["x"]
    assert r["error"] and not r["match"]
    w["matchConditions"] = [{"name": "s", "expression": "'yes'"}]
    r = evaluate(w, [{"name": "x", "object": obj, "oldObject": None,
                      "request": request_for(obj, "CREATE")}])["x"]
    assert r["error"] and "not a bool" in r["error"]
    # A map entry whose value is null is present (the CEL spec, cel-go).
    w["matchConditions"] = [{"name": "p", "expression":
                             "has(object.metadata.annotations) && "
                             "'annotations' in object.metadata"}]
    obj = {"kind": "Pod", "metadata": {"annotations": None}, "spec": {}}
    r = evaluate(w, [{"name": "x", "object": obj, "oldObject": None,
                      "request": request_for(obj, "CREATE")}])["x"]
    assert r["error"] is None and r["match"] is True


def test_match_condition_names_match_the_code(objs):
    """The names in the conditions are exactly the contract's compatible
    names (and src/api/compat.c's table, once it is there): a name the
    webhook converts but the condition left out would never reach it."""
    whs = pod_webhooks(objs)
    lists = {}
    for name, (_, w) in whs.items():
        expr = " ".join(c["expression"] for c in w["matchConditions"])
        lists[name] = set(re.findall(r"'([a-z0-9.-]+/[a-z0-9-]+)'", expr))
    resources = set(COMPAT)
    for name in (MUTATE, VALIDATE):
        assert lists[name] - {"elasticgpu.io/assigned", "elasticgpu.io/allocated",
                              "elasticgpu.io/dra-claims", "elasticgpu.io/metering"} == \
            resources | set(CORE_LIMIT_ANNOTATIONS), name
    assert lists[MUTATE_NV] == resources | set(COMPAT_NVIDIA) | set(CORE_LIMIT_ANNOTATIONS)
    # place's: every resource name the others count, HAMi's too; no annotation
    # but the claims' prefix (which the regex does not catch)
    assert lists[PLACE] == resources | set(COMPAT_NVIDIA)
    assert "a.startsWith('egpuc.elasticgpu.io/')" in whs[PLACE][1]["matchConditions"][1][
        "expression"]
    compat_c = ROOT / "src/api/compat.c"
    if compat_c.exists():
        rows = re.findall(r'\{"([^"]+)",\s*(?:CORE|MEMORY),\s*(PLAIN|ALIYUN|NVIDIA)',
                          compat_c.read_text())
        assert rows, "src/api/compat.c: no table of names found"
        assert {n for n, fam in rows if fam != "NVIDIA"} == resources
        assert {n for n, fam in rows if fam == "NVIDIA"} == set(COMPAT_NVIDIA)
        for a in CORE_LIMIT_ANNOTATIONS:
            assert f'"{a}"' in compat_c.read_text()


def test_match_conditions_cost_linear(objs):
    """A pod with 100 containers of 20 resource names each, none a GPU one,
    and 200 annotations: still false (true for place, whose pods ask no
    GPU), no error (a runaway cost would show
    as an error or a timeout here)."""
    many = {f"example.com/r{i}": "1" for i in range(20)}
    big = pod([ctr(f"c{i}", requests=many, limits=many) for i in range(100)],
              annotations={f"example.com/a{i}": "x" for i in range(200)})
    for name, (_, w) in pod_webhooks(objs).items():
        r = evaluate(w, [{"name": "big", "object": big, "oldObject": big,
                          "request": request_for(big, "UPDATE")}])["big"]
        # place's conditions say "asks no GPU": true for this pod (its rules
        # send it no UPDATE, but its conditions read only the object)
        assert r["error"] is None and r["match"] is (name == PLACE), (name, r)


# --- the Deployment and its neighbours ------------------------------------------

def test_webhook_deployment(objs):
    dep, spec, c = webhook_deployment(objs)
    assert dep["metadata"]["namespace"] == NS
    assert dep["spec"]["replicas"] == 2
    labels = dep["spec"]["template"]["metadata"]["labels"]
    sel = dep["spec"]["selector"]["matchLabels"]
    assert all(labels.get(k) == v for k, v in sel.items())
    assert "app.kubernetes.io/part-of" not in sel
    # Spread: anti-affinity on the node, spread over zones.
    terms = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert any(t["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
               and t["podAffinityTerm"]["labelSelector"]["matchLabels"] == sel for t in terms)
    assert any(t["topologyKey"] == "topology.kubernetes.io/zone"
               and t["labelSelector"]["matchLabels"] == sel
               for t in spec["topologySpreadConstraints"])
    # A rollout never leaves fewer Ready webhooks than replicas.
    ru = dep["spec"]["strategy"]["rollingUpdate"]
    assert str(ru["maxUnavailable"]) == "0" and int(ru["maxSurge"]) >= 1

    assert c["command"] == ["/usr/local/bin/egpu-webhook"]
    # Its own image (deploy/Dockerfile's webhook target), tagged as the
    # scheduler's (test_deploy.py checks names and tags against the Dockerfile).
    sched = one(objs, "Deployment", "egpu-scheduler")["spec"]["template"]["spec"]["containers"]
    sched_image = [x for x in sched if x["name"] == "egpu-scheduler"][0]["image"]
    assert c["image"].rsplit(":", 1)[0].endswith("/egpu-webhook")
    assert c["image"].rsplit(":", 1)[1] == sched_image.rsplit(":", 1)[1]
    args = container_args(c)
    assert flag(args, "--port") == "9443" and flag(args, "--health-port") == "9444"
    assert flag(args, "--listen") == flag(args, "--health-listen") == "0.0.0.0"
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = c[probe]["httpGet"]
        assert get["path"] == path and get["scheme"] == "HTTPS"
        assert port_number(c, get["port"]) == 9443
    assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
    assert c["resources"]["limits"]["memory"]

    pod_sc, sc = spec["securityContext"], c["securityContext"]
    assert pod_sc["runAsNonRoot"] is True and pod_sc["runAsUser"] not in (None, 0)
    assert pod_sc["seccompProfile"]["type"] == "RuntimeDefault"
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]

    # The TLS Secret, mounted whole (no subPath, so the kubelet updates it)
    # where --tls-cert and --tls-key point.
    vols = {v["name"]: v for v in spec["volumes"]}
    mounts = [m for m in c["volumeMounts"] if m["mountPath"] == TLS_DIR]
    assert len(mounts) == 1 and mounts[0]["readOnly"] is True and "subPath" not in mounts[0]
    assert vols[mounts[0]["name"]]["secret"]["secretName"] == SECRET
    assert flag(args, "--tls-cert") == f"{TLS_DIR}/tls.crt"
    assert flag(args, "--tls-key") == f"{TLS_DIR}/tls.key"

    # It runs as egpu-webhook, with a token (its GPU watch).
    assert spec["serviceAccountName"] == "egpu-webhook"
    assert spec["automountServiceAccountToken"] is True


def test_webhook_flags_agree_with_the_rest(objs):
    """--scheduler-name is deploy/scheduler's profile, and --scheduler-user
    and --agent-user are the writers deploy/admission's policy allows."""
    _, _, c = webhook_deployment(objs)
    args = container_args(c)
    cfg = None
    for cm in find(objs, "ConfigMap"):
        for text in (cm.get("data") or {}).values():
            doc = yaml.safe_load(text)
            if isinstance(doc, dict) and doc.get("kind") == "KubeSchedulerConfiguration":
                cfg = doc
    assert cfg is not None
    assert flag(args, "--scheduler-name") == cfg["profiles"][0]["schedulerName"]
    policy = one(objs, "ValidatingAdmissionPolicy")
    variables = {v["name"]: v["expression"].strip("'") for v in policy["spec"]["variables"]}
    assert flag(args, "--scheduler-user") == variables["scheduler"] == \
        f"system:serviceaccount:{NS}:egpu-scheduler"
    assert flag(args, "--agent-user") == variables["agent"]
    # the remover of elasticgpu.io/metering is deploy/controller's account
    ctl = one(objs, "ServiceAccount", "egpu-controller")
    assert flag(args, "--controller-user") == \
        f"system:serviceaccount:{ctl['metadata']['namespace']}:egpu-controller"


def test_webhook_flags_exist():
    """Every flag deploy/ passes is one egpu-webhook knows (its --help text
    in src/webhook/options.c; skipped until that file exists)."""
    options = ROOT / "src/webhook/options.c"
    if not options.exists():
        pytest.skip("src/webhook/options.c is not there yet")
    text = options.read_text()
    _, _, c = webhook_deployment(kustomize(DEPLOY))
    for a in container_args(c):
        if a.startswith("--"):
            assert re.search(r'"  ' + re.escape(a.split("=")[0]) + r"[ \\]", text), a


def test_pod_disruption_budget(objs):
    dep, _, _ = webhook_deployment(objs)
    pdb = one(objs, "PodDisruptionBudget", "egpu-webhook")
    assert pdb["apiVersion"] == "policy/v1" and pdb["metadata"]["namespace"] == NS
    assert pdb["spec"]["minAvailable"] == 1 and "maxUnavailable" not in pdb["spec"]
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    assert dep["spec"]["replicas"] > pdb["spec"]["minAvailable"], "a drain could never evict"


def test_webhook_network_policy(objs):
    dep, _, _ = webhook_deployment(objs)
    labels = dep["spec"]["template"]["metadata"]["labels"]
    pols = [p for p in find(objs, "NetworkPolicy")
            if all(labels.get(k) == v for k, v in p["spec"]["podSelector"]["matchLabels"].items())]
    assert len(pols) == 1
    spec = pols[0]["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    allowed = set()
    for rule in spec["ingress"]:
        assert rule.get("ports"), f"an ingress rule opens every port: {rule}"
        allowed |= {p["port"] for p in rule["ports"]}
    assert allowed == {9443, 9444}


# The API calls egpu-webhook makes, as (API group, resource, verb, object name or None
# for any, namespace or "*" for a cluster-wide grant): src/webhook/main.c's
# informers and claims.c's GET of a claim; with --self-signed, selfsigned.c's.
# The ServiceAccount's grants must be exactly these, no more and no fewer.
CALLS = {("elasticgpu.io", res, v, None, "*") for res in ("gpus", "elasticgpuclaims")
         for v in ("get", "list", "watch")} | \
    {(g, res, v, None, "*") for g, res in (("elasticgpu.io", "gpubudgets"),
                                           ("scheduling.k8s.io", "priorityclasses"),
                                           ("elasticgpu.io", "elasticgpus"))
     for v in ("list", "watch")} | \
    {("", res, "list", None, "*") for res in ("resourcequotas", "pods")} | \
    {("resource.k8s.io", "resourceclaims", "list", None, "*")}  # quota.c's live LISTs
SELF_SIGNED_CALLS = {
    ("", "secrets", "get", SECRET, NS),  # read the CA and the certificate
    ("", "secrets", "update", SECRET, NS),  # renew (resourceVersion precondition)
    ("", "secrets", "create", None, NS),  # first start; RBAC cannot name a created object
} | {("admissionregistration.k8s.io", res, v, CONFIG, "*")
     for res in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
     for v in ("get", "patch")}  # compare and put back caBundle


def webhook_grants(objs):
    """Every (group, resource, verb, name, namespace) granted to ServiceAccount egpu-webhook."""
    sa = one(objs, "ServiceAccount", "egpu-webhook")
    assert sa["metadata"]["namespace"] == NS
    assert sa["automountServiceAccountToken"] is False
    grants = set()
    for b in find(objs, "ClusterRoleBinding") + find(objs, "RoleBinding"):
        if not any(s.get("kind") == "ServiceAccount" and s.get("name") == "egpu-webhook"
                   and s.get("namespace") == NS for s in b["subjects"]):
            continue
        ref = b["roleRef"]
        scope = b["metadata"]["namespace"] if b["kind"] == "RoleBinding" else "*"
        role = one(objs, ref["kind"], ref["name"])
        if ref["kind"] == "Role":
            assert role["metadata"]["namespace"] == scope
        for r in role["rules"]:
            assert not r.get("nonResourceURLs")
            assert "*" not in r["verbs"] and "*" not in r["resources"]
            grants |= {(g, res, v, n, scope) for g in r["apiGroups"] for res in r["resources"]
                       for v in r["verbs"] for n in (r.get("resourceNames") or [None])}
    return grants


def test_webhook_rbac(objs):
    """Without --self-signed, ServiceAccount egpu-webhook may get, list and
    watch GPU objects and ElasticGPUClaims (the claims pods use,
    src/webhook/claims.c), list and watch GPUBudgets and PriorityClasses
    (src/webhook/budgets.c), and nothing else, anywhere: no Secrets."""
    assert webhook_grants(objs) == CALLS


def test_webhook_calls_in_the_code():
    """The table's --self-signed calls are the ones selfsigned.c makes: each
    egpu_kube_* call on the Secret and on the configurations, and no other."""
    src = (ROOT / "src/webhook/selfsigned.c").read_text()
    calls = set(re.findall(r"egpu_kube_(\w+)\(s->kc, &?(\w+)", src))
    verbs = {"get": "get", "create": "create", "update": "update", "patch": "patch"}
    assert calls == {("get", "secrets"), ("create", "secrets"), ("update", "secrets"),
                     ("get", "res"), ("patch", "res")}, calls
    assert {verbs[v] for v, r in calls if r == "secrets"} == \
        {c[2] for c in SELF_SIGNED_CALLS if c[1] == "secrets"}
    assert {verbs[v] for v, r in calls if r == "res"} == \
        {c[2] for c in SELF_SIGNED_CALLS if c[0] == "admissionregistration.k8s.io"}
    for res in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        assert f'"{res}"' in src


def self_signed_overlay(tmp_path):
    rel = os.path.relpath(DEPLOY, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {rel}\ncomponents:\n  - {rel}/webhook/self-signed\n")
    return kustomize(tmp_path)


def test_self_signed_component(tmp_path):
    """deploy/ with webhook/self-signed: egpu-webhook runs with --self-signed,
    writes its files into a directory of its own in an emptyDir (no Secret
    volume, which would wait for a Secret that does not exist yet), and its
    grants are the table's, both ways: every call granted, nothing more."""
    objs = self_signed_overlay(tmp_path)
    assert webhook_grants(objs) == CALLS | SELF_SIGNED_CALLS
    _, spec, c = webhook_deployment(objs)
    args = container_args(c)
    assert "--self-signed" in args
    cert, key = flag(args, "--tls-cert"), flag(args, "--tls-key")
    assert os.path.dirname(cert) == os.path.dirname(key) == f"{TLS_DIR}/self-signed"
    vols = {v["name"]: v for v in spec["volumes"]}
    assert not any("secret" in v for v in vols.values())
    mounts = [m for m in c["volumeMounts"] if m["mountPath"] == TLS_DIR]
    assert len(mounts) == 1 and not mounts[0].get("readOnly")
    assert "emptyDir" in vols[mounts[0]["name"]]
    # the defaults of --self-signed name what deploy/ has
    text = (ROOT / "src/webhook/options.c").read_text()
    for default in (f'.secret = "{SECRET}"', f'.service = "{SERVICE}"',
                    f'.configuration = "{CONFIG}"'):
        assert default in text, default
    assert one(objs, "Service", SERVICE)["metadata"]["namespace"] == NS
    for a in args:
        if a.startswith("--"):
            assert re.search(r'"  ' + re.escape(a) + r"[ \\]", text), a
    # the configurations are those of deploy/, untouched
    assert webhooks(objs).keys() == EXPECTED.keys()


# --- certs.sh ----------------------------------------------------------------------

def openssl_text(args, **kw):
    r = subprocess.run([tool("openssl"), *args], capture_output=True, text=True, timeout=60, **kw)
    assert r.returncode == 0, r.stderr
    return r.stdout


def run_certs(*args, env=None):
    tool("openssl")
    return subprocess.run(["sh", str(CERTS_SH), *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


def san(path):
    out = openssl_text(["x509", "-in", str(path), "-noout", "-ext", "subjectAltName"])
    return sorted(x.strip()[4:] for x in out.splitlines()[1].split(",") if x.strip())


def test_certs_dry_run(tmp_path):
    d = tmp_path / "certs"
    r = run_certs("--dry-run", "--dir", str(d))
    assert r.returncode == 0, r.stderr
    assert "kubectl apply -f" in r.stdout and "patch mutatingwebhookconfiguration" in r.stdout
    for f in ("ca.crt", "ca.key", "tls.crt", "tls.key", "secret.yaml", "mutating-patch.json",
              "validating-patch.json"):
        assert (d / f).is_file(), f
    # Keys readable by the owner only.
    for f in ("ca.key", "tls.key", "secret.yaml"):
        assert stat.S_IMODE((d / f).stat().st_mode) & 0o077 == 0, f

    out = openssl_text(["verify", "-CAfile", str(d / "ca.crt"), "-purpose", "sslserver",
                        "-verify_hostname", HOST, str(d / "tls.crt")])
    assert out.strip().endswith("OK")
    assert san(d / "tls.crt") == sorted([SERVICE, f"{SERVICE}.{NS}", HOST,
                                         f"{HOST}.cluster.local"])
    ca_text = openssl_text(["x509", "-in", str(d / "ca.crt"), "-noout", "-text"])
    assert "CA:TRUE" in ca_text and "Certificate Sign" in ca_text
    leaf_text = openssl_text(["x509", "-in", str(d / "tls.crt"), "-noout", "-text"])
    assert "CA:FALSE" in leaf_text and "TLS Web Server Authentication" in leaf_text
    assert "prime256v1" in leaf_text or "P-256" in leaf_text
    # The key is the certificate's.
    assert openssl_text(["pkey", "-in", str(d / "tls.key"), "-pubout"]) == \
        openssl_text(["x509", "-in", str(d / "tls.crt"), "-noout", "-pubkey"])
    # Another name does not verify.
    bad = subprocess.run([tool("openssl"), "verify", "-CAfile", str(d / "ca.crt"),
                          "-verify_hostname", "egpu-webhook.default.svc", str(d / "tls.crt")],
                         capture_output=True, text=True)
    assert bad.returncode != 0

    secret = yaml.safe_load((d / "secret.yaml").read_text())
    assert secret["kind"] == "Secret" and secret["type"] == "kubernetes.io/tls"
    assert (secret["metadata"]["name"], secret["metadata"]["namespace"]) == (SECRET, NS)
    for key, f in (("tls.crt", "tls.crt"), ("tls.key", "tls.key"), ("ca.crt", "ca.crt")):
        assert base64.b64decode(secret["data"][key]) == (d / f).read_bytes(), key

    # The patches set caBundle on as many webhooks as webhooks.yaml has.
    docs = [x for x in yaml.safe_load_all((WEBHOOK_DIR / "webhooks.yaml").read_text()) if x]
    counts = {x["kind"]: len(x["webhooks"]) for x in docs}
    ca = (d / "ca.crt").read_bytes()
    for kind, f in (("MutatingWebhookConfiguration", "mutating-patch.json"),
                    ("ValidatingWebhookConfiguration", "validating-patch.json")):
        patch = json.loads((d / f).read_text())
        assert [p["path"] for p in patch] == \
            [f"/webhooks/{i}/clientConfig/caBundle" for i in range(counts[kind])]
        for p in patch:
            assert p["op"] == "add" and base64.b64decode(p["value"]) == ca


def test_certs_serve_tls(tmp_path):
    """A real TLS client (Python's ssl) verifying against the CA connects to
    a server holding the certificate for the Service's name, and refuses it
    for another name."""
    d = tmp_path / "certs"
    assert run_certs("--dry-run", "--dir", str(d)).returncode == 0
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(d / "tls.crt", d / "tls.key")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve():
        for _ in range(2):
            conn, _ = listener.accept()
            try:
                with server_ctx.wrap_socket(conn, server_side=True) as s:
                    s.sendall(b"ok")
            except (ssl.SSLError, OSError):
                pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    client_ctx = ssl.create_default_context(cafile=str(d / "ca.crt"))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with client_ctx.wrap_socket(raw, server_hostname=HOST) as s:
            assert s.recv(2) == b"ok"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with pytest.raises(ssl.SSLCertVerificationError):
            client_ctx.wrap_socket(raw, server_hostname="egpu-webhook.default.svc")
    t.join(10)
    listener.close()


FAKE_KUBECTL = r"""#!/usr/bin/python3
import json, os, sys
log = os.environ["FAKE_KUBECTL_LOG"]
args = sys.argv[1:]
entry = {"args": args}
if args[0] == "get":
    jp = [a for a in args if a.startswith("jsonpath=")][0]
    if "caBundle" in jp:
        sys.stdout.write(os.environ.get("FAKE_CA_BUNDLE", ""))
    else:
        n = 2 if args[1].startswith("mutating") else 1
        sys.stdout.write("".join(f"w{i}.example.com\n" for i in range(n)))
elif args[0] == "patch":
    entry["patch"] = json.load(open(args[args.index("--patch-file") + 1]))
elif args[0] == "apply":
    entry["manifest"] = open(args[args.index("-f") + 1]).read()
with open(log, "a") as f:
    f.write(json.dumps(entry) + "\n")
"""


def test_certs_live_run_keeps_the_old_ca(tmp_path):
    """Run against a stand-in kubectl that already has a caBundle: both
    configurations get caBundle = new CA then the old one, on every webhook,
    before the Secret is replaced; every command is printed."""
    old = tmp_path / "old"
    assert run_certs("--dry-run", "--dir", str(old)).returncode == 0
    old_ca = (old / "ca.crt").read_bytes()
    fake = tmp_path / "kubectl"
    fake.write_text(FAKE_KUBECTL)
    fake.chmod(0o755)
    log = tmp_path / "kubectl.log"
    d = tmp_path / "new"
    r = run_certs("--dir", str(d), env={
        "KUBECTL": str(fake), "FAKE_KUBECTL_LOG": str(log),
        "FAKE_CA_BUNDLE": base64.b64encode(old_ca + old_ca).decode()})
    assert r.returncode == 0, r.stderr
    calls = [json.loads(x) for x in log.read_text().splitlines()]
    verbs = [c["args"][0] for c in calls]
    assert verbs == ["get", "get", "get", "get", "patch", "patch", "apply"], verbs
    new_ca = (d / "ca.crt").read_bytes()
    assert new_ca != old_ca
    for c, kind, n in ((calls[4], "mutatingwebhookconfiguration", 2),
                       (calls[5], "validatingwebhookconfiguration", 1)):
        assert c["args"][1:3] == [kind, CONFIG]
        assert [p["path"] for p in c["patch"]] == \
            [f"/webhooks/{i}/clientConfig/caBundle" for i in range(n)]
        for p in c["patch"]:
            # The new CA and only the first one of the old bundle.
            assert base64.b64decode(p["value"]) == new_ca + old_ca
    secret = yaml.safe_load(calls[6]["manifest"])
    assert base64.b64decode(secret["data"]["ca.crt"]) == new_ca
    for c in calls[4:]:
        assert f"certs.sh: run: {fake} {' '.join(c['args'])}" in r.stdout


def test_certs_unreachable_cluster_is_not_called_not_found(tmp_path):
    """With no cluster to reach, certs.sh says it cannot
    read the configuration and quotes kubectl's reason (the server it tried),
    instead of saying the configuration is not found; the API server's
    NotFound still says to apply deploy/ first."""
    kc = tmp_path / "kubeconfig"
    kc.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]}))
    r = run_certs("--dir", str(tmp_path / "d"),
                  env={"KUBECTL": tool("kubectl"), "KUBECONFIG": str(kc)})
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert "not found" not in line, line
    assert line.startswith(f"certs.sh: cannot read mutatingwebhookconfiguration {CONFIG} "
                           "from the cluster: "), line
    assert "127.0.0.1:1" in line and "reachable cluster" in line, line
    fake = tmp_path / "kubectl"
    fake.write_text("#!/bin/sh\necho 'Error from server (NotFound): "
                    f"mutatingwebhookconfigurations.admissionregistration.k8s.io \"{CONFIG}\" "
                    "not found' >&2\nexit 1\n")
    fake.chmod(0o755)
    r = run_certs("--dir", str(tmp_path / "d2"), env={"KUBECTL": str(fake)})
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == (f"certs.sh: mutatingwebhookconfiguration {CONFIG} not found: "
                                "apply deploy/ first (kubectl apply -k deploy/)"), r.stderr


@pytest.mark.parametrize("args,msg", [
    (["--days", "0"], "--days is '0'"),
    (["--days", "x"], "--days is 'x'"),
    (["--namespace", "Bad_NS"], "--namespace is 'Bad_NS'"),
    (["--dry-run"], "--dry-run needs --dir"),
    (["--bogus"], "unknown argument '--bogus'"),
])
def test_certs_bad_arguments(tmp_path, args, msg):
    if "--dir" not in args and args != ["--dry-run"]:
        args = args + ["--dry-run", "--dir", str(tmp_path / "d")]
    r = run_certs(*args)
    assert r.returncode == 2 and msg in r.stderr, r.stderr
    assert not (tmp_path / "d").exists()


# --- the cert-manager Component ---------------------------------------------------

def test_cert_manager_component(tmp_path):
    """An overlay of deploy/ with the Component renders; the serving
    Certificate writes the Secret the Deployment mounts, names the Service,
    is signed by a CA Issuer whose CA is a self-signed Certificate, and both
    configurations ask cert-manager to inject that CA."""
    rel = os.path.relpath(DEPLOY, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {rel}\ncomponents:\n  - {rel}/webhook/cert-manager\n")
    objs = kustomize(tmp_path)
    certs = {c["metadata"]["name"]: c for c in find(objs, "Certificate")}
    issuers = {i["metadata"]["name"]: i for i in find(objs, "Issuer")}
    for o in list(certs.values()) + list(issuers.values()):
        assert o["apiVersion"] == "cert-manager.io/v1" and o["metadata"]["namespace"] == NS
    serving = [c for c in certs.values() if c["spec"]["secretName"] == SECRET]
    assert len(serving) == 1
    serving = serving[0]
    assert HOST in serving["spec"]["dnsNames"]
    assert "server auth" in serving["spec"]["usages"]
    ca_issuer = issuers[serving["spec"]["issuerRef"]["name"]]
    ca_cert = [c for c in certs.values()
               if c["spec"]["secretName"] == ca_issuer["spec"]["ca"]["secretName"]]
    assert len(ca_cert) == 1 and ca_cert[0]["spec"]["isCA"] is True
    assert "selfSigned" in issuers[ca_cert[0]["spec"]["issuerRef"]["name"]]["spec"]
    _, spec, _ = webhook_deployment(objs)
    assert SECRET in [v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        ann = one(objs, kind, CONFIG)["metadata"]["annotations"]
        assert ann["cert-manager.io/inject-ca-from"] == f"{NS}/{serving['metadata']['name']}"
    # The webhooks themselves are untouched by the Component.
    assert webhooks(objs).keys() == EXPECTED.keys()


# --- docs/webhook.md stays true ---------------------------------------------------

def test_docs_name_every_flag_and_name():
    """docs/webhook.md's flag table has every flag of egpu-webhook --help
    (src/webhook/options.c, once it is there) and each with its EGPU_*
    variable, and it names every compatible name and every webhook."""
    doc = (ROOT / "docs/webhook.md").read_text()
    for n in COMPAT + COMPAT_NVIDIA + CORE_LIMIT_ANNOTATIONS + [MUTATE, MUTATE_NV, VALIDATE]:
        assert f"`{n}" in doc, n
    options = ROOT / "src/webhook/options.c"
    if not options.exists():
        pytest.skip("src/webhook/options.c is not there yet")
    text = options.read_text()
    flags = re.findall(r'"  (--[a-z-]+)[ \\]', text)
    assert len(flags) > 10, "no flags found in options.c's usage text"
    rows = {m.group(1): m.group(2) for m in
            re.finditer(r"^\| `(--[a-z-]+)[^`]*` \| `(EGPU_[A-Z_]+)`", doc, re.M)}
    for f in flags:
        if f in ("--help", "--version"):
            continue
        assert f in rows, f"docs/webhook.md has no row for {f}"
        # The flag's entry in the usage text: up to the next flag.
        entry = re.search(r'"  ' + re.escape(f) + r'[ \\](.*?)(?="  --|"  -h)', text, re.S)
        assert entry and re.search(r"\(" + rows[f] + r"[;)]", entry.group(1)), \
            f"{f}: docs say {rows[f]}, options.c does not"


def test_docs_overlays_render(tmp_path):
    """The overlays docs/webhook.md gives, applied to deploy/: HAMi's names
    in every namespace leaves mutate-nvidia alone, selecting every
    namespace but the system ones; the failurePolicy one makes validate
    Ignore."""
    doc = (ROOT / "docs/webhook.md").read_text()
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", doc, re.S) if b.startswith("patches:")]
    assert len(blocks) == 2, "expected the HAMi and the failurePolicy overlays"
    rel = os.path.relpath(DEPLOY, tmp_path)
    got = []
    for b in blocks:
        (tmp_path / "kustomization.yaml").write_text(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
            f"resources:\n  - {rel}\n" + b)
        got.append({n: w for n, (_, w) in webhooks(kustomize(tmp_path)).items()})
    hami, ignore = got
    assert sorted(hami) == [CLAIMS, MUTATE_NV, PLACE, VALIDATE]
    assert hami[MUTATE_NV]["namespaceSelector"] == {"matchExpressions": [SYSTEM_NS]}
    assert ignore[VALIDATE]["failurePolicy"] == "Ignore"
    assert ignore[MUTATE]["failurePolicy"] == ignore[MUTATE_NV]["failurePolicy"] == "Fail"
