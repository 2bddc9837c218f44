"""Static checks of the deployment manifests under deploy/: the kustomize base
renders offline with kubectl, the CRDs are valid structural v1 CRDs, and the
pieces of the scheduler's and the controller's deployments and the agent's
DaemonSet agree with each other and with what egpu-scheduler,
egpu-controller and egpu-agent do (their API calls, their flags, their HTTP
endpoints, the host paths the agent opens).

Nothing here talks to a cluster. Skipped when kubectl is missing, except
under CI=true, where that fails. The webhook's part of deploy/ has its own
module, test_deploy_webhook.py."""
import os
import re
import shutil
import subprocess
import urllib.parse

import pytest
import yaml

from conftest import ROOT, find_tool

DEPLOY = ROOT / "deploy"
NS = "elastic-gpu-system"
GROUP = "elasticgpu.io"
VERSION = "v1alpha1"
PART_OF = ("app.kubernetes.io/part-of", "elastic-gpu")
SCHEDULER_NAME = "elastic-gpu-scheduler"
EGPU_LEASE_DEFAULT = "elastic-gpu-scheduler"  # egpu-scheduler --lease-name default

# kind -> (plural, scope): DESIGN.md section 3.
CRDS = {
    "GPU": ("gpus", "Cluster"),
    "ElasticGPU": ("elasticgpus", "Cluster"),
    "ElasticGPUClaim": ("elasticgpuclaims", "Namespaced"),
    "ElasticGPUClass": ("elasticgpuclasses", "Cluster"),
    "GPUBudget": ("gpubudgets", "Namespaced"),
}
CLUSTER_KINDS = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
                 "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
                 "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "PriorityClass",
                 "DeviceClass"}
NAMESPACED_KINDS = {"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Service",
                    "Deployment", "DaemonSet", "Secret", "NetworkPolicy", "PodDisruptionBudget"}

# Every (apiGroup, resource, verb) egpu-scheduler uses: src/scheduler/api.c
# (informers on nodes, pods, GPUs, ElasticGPUs, claims and classes; GET +
# merge PATCH of pods; merge PATCH of a WaitForFirstConsumer claim's
# selected-node/selected-gpus annotations; the Binding; in DRA mode, its informer on
# resource.k8s.io/v1 ResourceClaims and GET of a pod's claim its cache lacks: a DRA pod's
# ask is its claims' requests, the allocated claims what the cards hold).
EGPU_NEEDS = {
    ("", "nodes", "list"), ("", "nodes", "watch"),
    ("", "pods", "list"), ("", "pods", "watch"), ("", "pods", "get"), ("", "pods", "patch"),
    ("", "pods/binding", "create"), ("", "events", "create"),
    (GROUP, "gpus", "list"), (GROUP, "gpus", "watch"),
    (GROUP, "elasticgpus", "list"), (GROUP, "elasticgpus", "watch"),
    (GROUP, "elasticgpuclaims", "list"), (GROUP, "elasticgpuclaims", "watch"),
    (GROUP, "elasticgpuclaims", "patch"),
    (GROUP, "elasticgpuclasses", "list"), (GROUP, "elasticgpuclasses", "watch"),
    *{("resource.k8s.io", "resourceclaims", v) for v in ("get", "list", "watch")},
}
# Every (apiGroup, resource, verb) egpu-controller uses, from src/controller:
#   main.c start_informers: list + watch of elasticgpuclaims,
#     elasticgpuclasses, elasticgpus, gpus, nodes, pods (src/kube/informer.c)
#   egpu.c claim_exists: GET of a claim its cache lacks; claim.c: GET of an
#     ElasticGPU (a Bound claim's, before calling it Lost; the one a retried
#     provision already made), POST (provision), DELETE (reclaimPolicy Delete)
#   writes.c egpu__controller_put, whole-object PUTs: a claim's finalizers (update), its
#     status (elasticgpuclaims/status), an ElasticGPU's spec.claimRef
#     (update) and status (elasticgpus/status)
#   gpustatus.c egpu__controller_gs_sync: merge PATCH of a GPU's status.allocated
#     (gpus/status), its only PATCH
#   writes.c egpu__controller_event -> src/kube/event.c: POST of core/v1 events
#   dra.c (--mode dra): list + watch of resourceclaimtemplates (informer), POST of a
#     pod's templates, DELETE of unused ones of its own; list + watch of deviceclasses
#     (informer), POST of an ElasticGPUClass's, PUT of one it owns that differs;
#     list + watch of resourceclaims (informer, its own), POST of an ElasticGPUClaim's
#   dra_metering.c egpu__controller_dra_meter_claims: LIST of a budgeted
#     namespace's resource.k8s.io/v1 ResourceClaims (metering, in either mode)
# Its Lease is a Role of its own namespace (CONTROLLER_LEASE_VERBS).
CONTROLLER_NEEDS = {
    (GROUP, "elasticgpuclaims", "list"), (GROUP, "elasticgpuclaims", "watch"),
    (GROUP, "elasticgpuclaims", "get"), (GROUP, "elasticgpuclaims", "update"),
    (GROUP, "elasticgpuclaims/status", "update"),
    (GROUP, "elasticgpus", "list"), (GROUP, "elasticgpus", "watch"),
    (GROUP, "elasticgpus", "get"), (GROUP, "elasticgpus", "create"),
    (GROUP, "elasticgpus", "update"), (GROUP, "elasticgpus", "delete"),
    (GROUP, "elasticgpus/status", "update"),
    (GROUP, "elasticgpuclasses", "list"), (GROUP, "elasticgpuclasses", "watch"),
    (GROUP, "gpus", "list"), (GROUP, "gpus", "watch"),
    (GROUP, "gpus/status", "patch"),
    ("", "nodes", "list"), ("", "nodes", "watch"),
    ("", "pods", "list"), ("", "pods", "watch"), ("", "pods", "update"),
    (GROUP, "gpubudgets", "list"), (GROUP, "gpubudgets", "watch"),
    (GROUP, "gpubudgets/status", "update"),
    ("", "events", "create"),
    *{("resource.k8s.io", "resourceclaimtemplates", v)
      for v in ("list", "watch", "create", "delete")},
    *{("resource.k8s.io", "deviceclasses", v) for v in ("list", "watch", "create", "update")},
    *{("resource.k8s.io", "resourceclaims", v) for v in ("list", "watch", "create")},
}
# Every (apiGroup, resource, verb) egpu-agent uses, from src/agent:
#   inventory.c egpu_inventory_publish: LIST of the node's GPU objects (by
#     label elasticgpu.io/node), POST of a new card's, GET of one a POST
#     found already there (409), merge PATCH of spec and labels, DELETE of a
#     card that is gone; sync_status and egpu_inventory_report_used: merge
#     PATCH of status (gpus/status: health, capacity, used)
#   preferred.c node_pods: LIST of pods (field selector spec.nodeName);
#   prestart.c egpu__prestart_run: GET of the pod owning the IDs;
#     post_mismatch_event -> src/kube/event.c: POST of core/v1 events
#   container.c egpu__container_mark: GET of the pod, merge PATCH of its
#     elasticgpu.io/allocated annotation
#   dra_slice.c egpu__dra_slice_publish (DRA mode): LIST of the node's
#     ResourceSlices (field selectors spec.nodeName, spec.driver), POST of
#     the node's slice, PUT of it when its devices change, DELETE of a
#     duplicate; GET of the node's Node (its uid, for the owner reference)
#   dra_plugin.c egpu__dra_plugin_prepare (DRA mode): GET of the
#     ResourceClaim the kubelet names
# No watch in device-plugin mode; no Lease (one agent per node, no election).
# (The DRA calls stay granted to egpu-agent while tests/cluster and
# test_cluster_dra_slice.py run them with its token; --mode dra runs as
# egpu-agent-dra, AGENT_DRA_NEEDS.)
AGENT_NEEDS = {
    (GROUP, "gpus", "list"), (GROUP, "gpus", "get"), (GROUP, "gpus", "create"),
    (GROUP, "gpus", "patch"), (GROUP, "gpus", "delete"),
    (GROUP, "gpus/status", "patch"),
    ("", "pods", "list"), ("", "pods", "get"), ("", "pods", "patch"),
    ("", "events", "create"),
    *{("resource.k8s.io", "resourceslices", v) for v in ("list", "create", "update", "delete")},
    ("resource.k8s.io", "resourceclaims", "get"),
    ("", "nodes", "get"),
}
# What egpu-agent --mode dra (deploy/agent-dra, ServiceAccount egpu-agent-dra) uses:
#   inventory.c through health.c: the node's GPU objects, as above
#   dra_slice.c egpu__dra_slice_publish: as above; dra_mode.c's informer on the
#     node's ResourceSlices (LIST + WATCH, field selectors spec.nodeName and
#     spec.driver): a slice the kubelet deletes is published again at once
#   dra_plugin.c: GET of the ResourceClaim; dra_slice.c: GET of the Node
# No pods, no events.
AGENT_DRA_NEEDS = {
    (GROUP, "gpus", "list"), (GROUP, "gpus", "get"), (GROUP, "gpus", "create"),
    (GROUP, "gpus", "patch"), (GROUP, "gpus", "delete"),
    (GROUP, "gpus/status", "patch"),
    *{("resource.k8s.io", "resourceslices", v)
      for v in ("list", "watch", "create", "update", "delete")},
    ("resource.k8s.io", "resourceclaims", "get"),
    ("", "nodes", "get"),
}
AGENT_PORT_DEFAULT = 9400  # egpu-agent --port default
# What the agent's code needs beyond a dropped-ALL root: deploy/agent/daemonset.yaml
# says why each (fchown of a dir taken back; the cleanup of shared/ trees).
AGENT_CAPS = {"CHOWN", "DAC_OVERRIDE", "FOWNER"}
CONTROLLER_LEASE_DEFAULT = "elastic-gpu-controller"  # egpu-controller --lease-name default
CONTROLLER_PORT_DEFAULT = 9090  # egpu-controller --port default
LEASE_VERBS = {"get", "create", "update"}  # client-go style leader election
SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"  # where in-cluster clients read
KUBE_SCHEDULER_SECURE_PORT = 10259

KUBECTL = find_tool("kubectl")  # tools/bin's (make deps), else PATH's
# Under CI=true a missing kubectl fails every test (kustomize() asserts it).
pytestmark = pytest.mark.skipif(KUBECTL is None and os.environ.get("CI") != "true",
                                reason="kubectl is not installed")


# --- helpers ------------------------------------------------------------------

def kustomize(path):
    assert KUBECTL, "kubectl is not installed (scripts/deps.sh)"
    r = subprocess.run([KUBECTL, "kustomize", str(path)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, f"kubectl kustomize {path} failed:\n{r.stderr}"
    return [d for d in yaml.safe_load_all(r.stdout) if d]


@pytest.fixture(scope="module")
def objs():
    docs = kustomize(DEPLOY)
    assert docs, "kubectl kustomize deploy/ rendered nothing"
    return docs


def find(objs, kind, name=None, namespace=None):
    out = [o for o in objs if o["kind"] == kind
           and (name is None or o["metadata"]["name"] == name)
           and (namespace is None or o["metadata"].get("namespace") == namespace)]
    return out


def one(objs, kind, name=None, namespace=None):
    found = find(objs, kind, name, namespace)
    assert len(found) == 1, f"expected one {kind} {name or ''} in {namespace}, got {len(found)}"
    return found[0]


def flag(args, name):
    """Value of --name in args, as `--name V` or `--name=V`; None if absent."""
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def container(pod_spec, name):
    cs = [c for c in pod_spec["containers"] if c["name"] == name]
    assert len(cs) == 1, f"no container {name}"
    return cs[0]


def container_port(c, port):
    """A probe's or Service's port (number or name) as the container's port number."""
    for p in c.get("ports", []):
        if port in (p["containerPort"], p.get("name")):
            return p["containerPort"]
    raise AssertionError(f"port {port!r} is not a port of container {c['name']}")


def scheduler_deployment(objs):
    deps = [d for d in find(objs, "Deployment")
            if any(c["name"] == "egpu-scheduler" for c in d["spec"]["template"]["spec"]["containers"])]
    assert len(deps) == 1, "expected one Deployment running egpu-scheduler"
    return deps[0]


def scheduler_config(objs):
    for cm in find(objs, "ConfigMap"):
        for key, text in (cm.get("data") or {}).items():
            doc = yaml.safe_load(text)
            if isinstance(doc, dict) and doc.get("kind") == "KubeSchedulerConfiguration":
                return cm, key, doc
    raise AssertionError("no ConfigMap holds a KubeSchedulerConfiguration")


def rule_allows(rule, group, resource, verb, name=None):
    if group not in rule.get("apiGroups", []) or resource not in rule.get("resources", []):
        return False
    if verb not in rule.get("verbs", []):
        return False
    names = rule.get("resourceNames")
    return not names or (name is not None and name in names)


def allows(rules, group, resource, verb, name=None):
    return any(rule_allows(r, group, resource, verb, name) for r in rules)


def granted(rules):
    return {(g, res, v) for r in rules for g in r.get("apiGroups", [])
            for res in r.get("resources", []) for v in r.get("verbs", [])}


def bound_to(binding, sa_name, sa_ns):
    return any(s.get("kind") == "ServiceAccount" and s.get("name") == sa_name
               and s.get("namespace") == sa_ns for s in binding.get("subjects", []))


def container_sa(objs, name):
    """The ServiceAccount a container of the scheduler pod runs as: the one
    whose token Secret it mounts at the in-cluster path (the pod mounts none)."""
    spec = scheduler_deployment(objs)["spec"]["template"]["spec"]
    c = container(spec, name)
    vols = {v["name"]: v for v in spec["volumes"]}
    mounts = [m for m in c.get("volumeMounts", []) if m["mountPath"].rstrip("/") == SA_PATH]
    assert len(mounts) == 1, f"{name} mounts no token at {SA_PATH}"
    secret = one(objs, "Secret", vols[mounts[0]["name"]]["secret"]["secretName"], NS)
    assert secret["type"] == "kubernetes.io/service-account-token"
    return secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]


def rules_of(objs, sa, builtin_ok=False):
    """Every rule bound to ServiceAccount sa, with the namespace it holds in
    (None = cluster-wide); a role that deploy/ does not define (a built-in
    one) fails, since its rules cannot be checked here, unless builtin_ok
    (then it is left out)."""
    out = []
    for b in find(objs, "ClusterRoleBinding") + find(objs, "RoleBinding"):
        if not bound_to(b, sa, NS):
            continue
        ref = b["roleRef"]
        ns = b["metadata"].get("namespace")
        roles = find(objs, ref["kind"], ref["name"], None if ref["kind"] == "ClusterRole" else ns)
        if not roles and builtin_ok:
            continue
        assert len(roles) == 1, f"{sa} is bound to {ref['kind']} {ref['name']}, not in deploy/"
        out += [(r, ns) for r in roles[0]["rules"]]
    return out


# --- rendering, namespaces, labels ---------------------------------------------

def test_renders_all_parts(objs):
    kinds = {o["kind"] for o in objs}
    for k in ("Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole",
              "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap", "Service", "Deployment",
              "DaemonSet", "Secret", "NetworkPolicy"):
        assert k in kinds, f"deploy/ renders no {k}"
    one(objs, "Namespace", NS)


def test_crds_render_alone():
    docs = kustomize(DEPLOY / "crds")
    assert sorted(d["spec"]["names"]["kind"] for d in docs) == sorted(CRDS)


def test_namespaces(objs):
    for o in objs:
        kind, meta = o["kind"], o["metadata"]
        where = f"{kind}/{meta['name']}"
        assert kind in CLUSTER_KINDS | NAMESPACED_KINDS, f"{where}: unknown scope, extend this test"
        if kind in CLUSTER_KINDS:
            assert not meta.get("namespace"), f"{where} is cluster-scoped but has a namespace"
        elif kind == "RoleBinding" and o["roleRef"]["name"] == "extension-apiserver-authentication-reader":
            assert meta.get("namespace") == "kube-system", f"{where} must be in kube-system"
        else:
            assert meta.get("namespace") == NS, f"{where} is not in {NS}"
    for o in find(objs, "RoleBinding") + find(objs, "ClusterRoleBinding"):
        for s in o["subjects"]:
            if s["kind"] == "ServiceAccount":
                one(objs, "ServiceAccount", s["name"], s["namespace"])


def test_budget_priority_classes(objs):
    """The PriorityClasses GPUBudgets name (deploy/budgets): within budget
    above the default 0 and preempting, over budget below it and never
    preempting, neither the cluster's default; the example budget names
    exactly these two."""
    import yaml
    inb, over = one(objs, "PriorityClass", "gpu-in-budget"), one(objs, "PriorityClass",
                                                                 "gpu-over-budget")
    assert inb["value"] > 0 > over["value"]
    assert inb["preemptionPolicy"] == "PreemptLowerPriority"
    assert over["preemptionPolicy"] == "Never"
    assert not inb.get("globalDefault") and not over.get("globalDefault")
    ex = yaml.safe_load((DEPLOY / "examples" / "gpubudget.yaml").read_text())
    assert ex["spec"]["inBudgetPriorityClassName"] == "gpu-in-budget"
    assert ex["spec"]["overBudgetPriorityClassName"] == "gpu-over-budget"


def test_common_label(objs):
    for o in objs:
        labels = o["metadata"].get("labels") or {}
        assert labels.get(PART_OF[0]) == PART_OF[1], f"{o['kind']}/{o['metadata']['name']}"
    dep = scheduler_deployment(objs)
    assert dep["spec"]["template"]["metadata"]["labels"].get(PART_OF[0]) == PART_OF[1]
    # Selectors are immutable: the common label must not be added to them.
    assert PART_OF[0] not in dep["spec"]["selector"]["matchLabels"]


# --- CRDs -------------------------------------------------------------------------

def check_structural(node, path, errors):
    """Structural-schema rules (apiextensions.k8s.io/v1) on one schema node."""
    if not isinstance(node, dict):
        errors.append(f"{path}: not a schema object")
        return
    if node.get("x-kubernetes-int-or-string"):
        if "type" in node:
            errors.append(f"{path}: x-kubernetes-int-or-string must not set type")
        if "anyOf" in node and node["anyOf"] not in ([{"type": "integer"}, {"type": "string"}],):
            errors.append(f"{path}: int-or-string anyOf must be [integer, string]")
    elif "type" not in node:
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            errors.append(f"{path}: no type")
    elif node["type"] not in ("object", "array", "string", "integer", "number", "boolean"):
        errors.append(f"{path}: bad type {node['type']!r}")
    for k in ("anyOf", "oneOf", "allOf", "not"):
        if k in node and not node.get("x-kubernetes-int-or-string"):
            errors.append(f"{path}: {k} is not used in these schemas")
    if "properties" in node and "additionalProperties" in node:
        errors.append(f"{path}: additionalProperties alongside properties")
    if node.get("type") == "array" and "items" not in node:
        errors.append(f"{path}: array without items")
    if "enum" in node and "default" in node and node["default"] not in node["enum"]:
        errors.append(f"{path}: default {node['default']!r} not in enum")
    for req in node.get("required", []):
        if req not in node.get("properties", {}):
            errors.append(f"{path}: required {req!r} is not a property")
    for rule in node.get("x-kubernetes-validations", []):
        if not isinstance(rule.get("rule"), str) or not rule["rule"]:
            errors.append(f"{path}: x-kubernetes-validations entry without rule")
    for name, sub in (node.get("properties") or {}).items():
        check_structural(sub, f"{path}.{name}", errors)
    if "items" in node:
        check_structural(node["items"], f"{path}[]", errors)
    if isinstance(node.get("additionalProperties"), dict):
        check_structural(node["additionalProperties"], f"{path}{{}}", errors)


def json_path_fields(jp):
    """'.spec.capacity.elasticgpu\\.io/gpu-core' -> ['spec', 'capacity', 'elasticgpu.io/gpu-core']."""
    assert jp.startswith("."), f"jsonPath {jp!r} must start with ."
    parts = re.split(r"(?<!\\)\.", jp[1:])
    return [p.replace("\\.", ".") for p in parts]


def schema_at(schema, fields):
    node = schema
    for f in fields:
        if f == "metadata" and node is schema:
            return {"type": "object"}  # ObjectMeta: not in the CRD schema
        props = node.get("properties") or {}
        if f not in props:
            return None
        node = props[f]
    return node


def crd(objs, kind):
    found = [o for o in find(objs, "CustomResourceDefinition")
             if o["spec"]["names"]["kind"] == kind]
    assert len(found) == 1, f"expected one CRD of kind {kind}"
    return found[0]


def storage_version(c):
    return [v for v in c["spec"]["versions"] if v.get("storage")][0]


def test_crd_set(objs):
    kinds = sorted(o["spec"]["names"]["kind"] for o in find(objs, "CustomResourceDefinition"))
    assert kinds == sorted(CRDS)


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_crd(objs, kind):
    c = crd(objs, kind)
    spec = c["spec"]
    plural, scope = CRDS[kind]
    assert c["apiVersion"] == "apiextensions.k8s.io/v1"
    assert spec["group"] == GROUP
    assert spec["names"]["plural"] == plural
    assert c["metadata"]["name"] == f"{spec['names']['plural']}.{spec['group']}"
    assert spec["scope"] == scope
    assert spec["names"].get("listKind", kind + "List") == kind + "List"
    storage = [v for v in spec["versions"] if v.get("storage")]
    assert len(storage) == 1, "exactly one storage version"
    assert storage[0]["name"] == VERSION and storage[0]["served"]
    for v in spec["versions"]:
        assert "status" in (v.get("subresources") or {}), f"{v['name']}: no status subresource"
        schema = v["schema"]["openAPIV3Schema"]
        assert schema.get("type") == "object"
        errors = []
        check_structural(schema, kind, errors)
        assert not errors, "not structural:\n" + "\n".join(errors)
        meta = schema["properties"].get("metadata")
        assert meta is None or set(meta.get("properties", {})) <= {"name", "generateName"}
        assert "status" in schema["properties"], "status subresource without a status schema"
        for col in v.get("additionalPrinterColumns", []):
            assert col["type"] in ("integer", "number", "string", "boolean", "date")
            fields = json_path_fields(col["jsonPath"])
            assert schema_at(schema, fields) is not None, \
                f"printer column {col['name']}: {col['jsonPath']} is not in the schema"
        sel = v.get("selectableFields", [])
        assert len(sel) <= 8
        for f in sel:
            node = schema_at(schema, json_path_fields(f["jsonPath"]))
            assert node is not None and node.get("type") in ("string", "integer", "boolean"), \
                f"selectable field {f['jsonPath']} must be a scalar in the schema"


def test_gpu_crd_matches_scheduler(objs):
    v = storage_version(crd(objs, "GPU"))
    schema = v["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    # What src/scheduler/cache.c reads from a GPU object.
    assert {"nodeName", "index", "uuid", "memory"} <= set(spec["required"])
    assert spec["properties"]["index"]["type"] == "integer"
    assert spec["properties"]["memory"]["type"] == "integer"
    assert spec["properties"]["uuid"]["maxLength"] <= 63
    assert {"jsonPath": ".spec.nodeName"} in v["selectableFields"]
    cols = {c["name"]: c["jsonPath"] for c in v["additionalPrinterColumns"]}
    for want in (".spec.nodeName", ".spec.index", ".spec.model", ".spec.memory",
                 ".status.health"):
        assert want in cols.values(), f"GPU has no printer column for {want}"
    item = schema["properties"]["status"]["properties"]["allocated"]["items"]["properties"]
    assert {"pod", "container", "core", "memory"} <= set(item)


@pytest.mark.parametrize("kind,path,values", [
    ("ElasticGPU", ("status", "phase"), ["Pending", "Available", "Bound", "Released", "Failed"]),
    ("ElasticGPUClaim", ("status", "phase"), ["Pending", "Bound", "Lost"]),
    ("ElasticGPUClass", ("reclaimPolicy",), ["Retain", "Delete"]),
    ("ElasticGPUClass", ("bindingMode",), ["Immediate", "WaitForFirstConsumer"]),
])
def test_crd_enums(objs, kind, path, values):
    node = schema_at(storage_version(crd(objs, kind))["schema"]["openAPIV3Schema"], path)
    assert node is not None and sorted(node["enum"]) == sorted(values)


def test_gpu_core_validation(objs):
    for kind, path in (("ElasticGPUClaim", ("spec", "resources", "requests")),
                       ("ElasticGPU", ("spec", "capacity"))):
        node = schema_at(storage_version(crd(objs, kind))["schema"]["openAPIV3Schema"], path)
        want = {"elasticgpu.io/gpu-core", "elasticgpu.io/gpu-memory"}
        if kind == "ElasticGPUClaim":  # a claim may ask TFLOPS instead (test_crds.py)
            want.add("elasticgpu.io/gpu-tflops")
        assert set(node["properties"]) == want
        core = node["properties"]["elasticgpu.io/gpu-core"]
        assert core["type"] == "integer" and core["minimum"] == 1
        (rule,) = [r["rule"] for r in core["x-kubernetes-validations"]]
        # Evaluate the CEL rule (a plain arithmetic one) on the values the
        # resource model accepts and refuses, together with minimum.
        assert re.fullmatch(r"[self<>=!%|&0-9 ()]+", rule), f"rule too complex to check: {rule}"
        py = rule.replace("||", " or ").replace("&&", " and ")

        def valid(n):
            return n >= core["minimum"] and eval(py, {}, {"self": n})  # noqa: S307

        assert [n for n in (0, 1, 30, 99, 100, 150, 200, 250, 800) if valid(n)] == \
            [1, 30, 99, 100, 200, 800]


# --- the scheduler ------------------------------------------------------------------

def test_scheduler_config(objs):
    cm, key, cfg = scheduler_config(objs)
    assert cm["metadata"]["namespace"] == NS
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert [p["schedulerName"] for p in cfg["profiles"]] == [SCHEDULER_NAME]
    le = cfg["leaderElection"]
    assert le["leaderElect"] is True
    assert le.get("resourceLock", "leases") == "leases"
    assert le["resourceName"] not in ("kube-scheduler", EGPU_LEASE_DEFAULT)
    assert le["resourceNamespace"] == NS
    # Every feasible node reaches the extender, so placement sees them all.
    assert cfg["percentageOfNodesToScore"] == 100

    (ext,) = cfg["extenders"]
    assert ext["filterVerb"] == "filter"
    assert ext["prioritizeVerb"] == "prioritize"
    assert ext["bindVerb"] == "bind"
    assert "preemptVerb" not in ext  # egpu-scheduler serves no preempt
    assert ext["weight"] == 5
    assert ext["nodeCacheCapable"] is True
    assert ext["httpTimeout"] == "5s"
    assert ext["ignorable"] is False
    assert not ext.get("enableHTTPS", False)
    managed = {m["name"]: m["ignoredByScheduler"] for m in ext["managedResources"]}
    # elasticgpu.io/dra: the marker egpu-webhook --mode dra gives a container whose GPU it
    # moved to a ResourceClaim, so that kube-scheduler calls the extender for DRA pods too.
    assert managed == {"elasticgpu.io/gpu-core": False, "elasticgpu.io/gpu-memory": True,
                       "elasticgpu.io/dra": True}

    # kube-scheduler calls the extender of its own pod on loopback, where
    # egpu-scheduler serves the verbs and nothing outside the pod reaches.
    url = urllib.parse.urlsplit(ext["urlPrefix"])
    assert url.scheme == "http" and url.path in ("", "/")
    assert url.hostname == "127.0.0.1", "the extender must be called on loopback, in the pod"
    dep = scheduler_deployment(objs)
    pod = dep["spec"]["template"]
    egpu = container(pod["spec"], "egpu-scheduler")
    eargs = egpu.get("command", [])[1:] + egpu.get("args", [])
    assert flag(eargs, "--listen") == "127.0.0.1"
    assert flag(eargs, "--port") == str(url.port) == "8888"
    assert str(url.port) not in [str(p["containerPort"]) for p in egpu.get("ports", [])], \
        "the extender port must not be a port of the pod"
    for svc in find(objs, "Service"):
        for p in svc["spec"]["ports"]:
            assert str(p.get("targetPort", p["port"])) != str(url.port), \
                f"Service {svc['metadata']['name']} leads to the extender verbs"

    # kube-scheduler reads that file from the mounted ConfigMap.
    ks = container(pod["spec"], "kube-scheduler")
    assert ks["image"] == "registry.k8s.io/kube-scheduler:v1.32.0"
    cfg_path = flag(ks.get("command", [])[1:] + ks.get("args", []), "--config")
    assert cfg_path, "kube-scheduler has no --config"
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounted = [m for m in ks["volumeMounts"]
               if cfg_path.startswith(m["mountPath"].rstrip("/") + "/")]
    assert len(mounted) == 1
    vol = vols[mounted[0]["name"]]
    assert vol["configMap"]["name"] == cm["metadata"]["name"]
    assert cfg_path == mounted[0]["mountPath"].rstrip("/") + "/" + key


def test_scheduler_deployment(objs):
    dep = scheduler_deployment(objs)
    assert dep["metadata"]["namespace"] == NS
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]
    assert all(pod["metadata"]["labels"].get(k) == v
               for k, v in dep["spec"]["selector"]["matchLabels"].items())
    spec = pod["spec"]
    assert sorted(c["name"] for c in spec["containers"]) == ["egpu-scheduler", "kube-scheduler"]
    one(objs, "ServiceAccount", spec["serviceAccountName"], NS)

    egpu = container(spec, "egpu-scheduler")
    args = egpu.get("command", [])[1:] + egpu.get("args", [])
    assert flag(args, "--port") == "8888"
    _, _, cfg = scheduler_config(objs)
    # It follows its own pod's kube-scheduler's Lease instead of electing.
    assert flag(args, "--follow-lease") == cfg["leaderElection"]["resourceName"]
    assert flag(args, "--leader-elect") in (None, "false")
    image = egpu["image"]
    assert "/" in image and ":" in image.rsplit("/", 1)[1], \
        f"{image}: the kustomization's images entry should give a registry and tag"
    port = int(flag(args, "--health-port"))
    assert port != int(flag(args, "--port"))
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = egpu[probe]["httpGet"]
        assert get["path"] == path
        assert container_port(egpu, get["port"]) == port
        assert get.get("scheme", "HTTP") == "HTTP"
    assert egpu["resources"]["requests"] and egpu["resources"]["limits"]

    for c in spec["containers"]:
        sc = c.get("securityContext", {})
        assert sc.get("readOnlyRootFilesystem") is True, c["name"]
        assert sc.get("allowPrivilegeEscalation") is False, c["name"]
        assert "ALL" in sc.get("capabilities", {}).get("drop", []), c["name"]
        non_root = sc.get("runAsNonRoot", spec.get("securityContext", {}).get("runAsNonRoot"))
        uid = sc.get("runAsUser", spec.get("securityContext", {}).get("runAsUser"))
        assert non_root is True and uid not in (None, 0), c["name"]
        assert c.get("resources", {}).get("requests"), c["name"]

    # Only the leader is ready, so a rollout that waits for new pods to be
    # ready before removing old ones never finishes: all old pods must be
    # replaceable at once.
    strat = dep["spec"].get("strategy", {})
    if strat.get("type", "RollingUpdate") == "RollingUpdate":
        ru = strat.get("rollingUpdate", {})
        assert str(ru.get("maxUnavailable")) in ("100%", str(dep["spec"]["replicas"]))
    else:
        assert strat["type"] == "Recreate"


def test_egpu_scheduler_cluster_role(objs):
    sa = container_sa(objs, "egpu-scheduler")
    role = one(objs, "ClusterRole", "elastic-gpu-scheduler")
    rules = role["rules"]
    for r in rules:
        for field in ("apiGroups", "resources", "verbs", "resourceNames"):
            assert "*" not in r.get(field, []), f"wildcard in {field}: {r}"
        assert not r.get("nonResourceURLs")
    for g, res, verb in sorted(EGPU_NEEDS):
        assert allows(rules, g, res, verb), f"ClusterRole lacks {verb} {res} ({g or 'core'})"
    extra = granted(rules) - EGPU_NEEDS
    assert not extra, f"ClusterRole grants more than egpu-scheduler uses: {sorted(extra)}"
    crbs = [b for b in find(objs, "ClusterRoleBinding")
            if b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                "name": role["metadata"]["name"]}]
    assert len(crbs) == 1 and bound_to(crbs[0], sa, NS)
    for r in find(objs, "Role") + find(objs, "ClusterRole"):
        for rule in r["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(field, []), f"{r['kind']}/{r['metadata']['name']}"


def test_lease_role(objs):
    _, _, cfg = scheduler_config(objs)
    ks_lease = cfg["leaderElection"]["resourceName"]
    egpu = container(scheduler_deployment(objs)["spec"]["template"]["spec"], "egpu-scheduler")
    env = {e["name"]: e for e in egpu.get("env", [])}
    args = egpu.get("command", [])[1:] + egpu.get("args", [])
    assert flag(args, "--lease-namespace") in (None, NS)
    ns_env = env.get("EGPU_LEASE_NAMESPACE", {})
    assert ns_env.get("value", NS) == NS
    if "valueFrom" in ns_env:
        assert ns_env["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"

    # kube-scheduler elects on its Lease: create, get, update.
    ks_rules = [r for r, ns in rules_of(objs, container_sa(objs, "kube-scheduler"), True)
                if ns == NS]
    assert allows(ks_rules, "coordination.k8s.io", "leases", "create")
    for verb in LEASE_VERBS:
        assert allows(ks_rules, "coordination.k8s.io", "leases", verb, ks_lease), \
            f"kube-scheduler has no {verb} on Lease {ks_lease} in {NS}"
    for r in ks_rules:
        assert r["resources"] == ["leases"], f"lease Role grants more: {r}"
    # egpu-scheduler only reads that Lease.
    egpu_rules = [r for r, ns in rules_of(objs, container_sa(objs, "egpu-scheduler"))
                  if ns == NS]
    assert allows(egpu_rules, "coordination.k8s.io", "leases", "get", ks_lease)
    for r in egpu_rules:
        assert r["resources"] == ["leases"] and r["verbs"] == ["get"] \
            and r.get("resourceNames") == [ks_lease], f"egpu-scheduler may do more: {r}"


def test_kube_scheduler_rbac(objs):
    sa = container_sa(objs, "kube-scheduler")
    cluster_roles = {b["roleRef"]["name"] for b in find(objs, "ClusterRoleBinding")
                     if b["roleRef"]["kind"] == "ClusterRole" and bound_to(b, sa, NS)}
    assert {"system:kube-scheduler", "system:volume-scheduler"} <= cluster_roles
    readers = [b for b in find(objs, "RoleBinding", namespace="kube-system")
               if b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                   "name": "extension-apiserver-authentication-reader"}]
    assert len(readers) == 1 and bound_to(readers[0], sa, NS)


def test_service_account_split(objs):
    """Each container of the scheduler pod has its own identity: the pod
    mounts no token, each container mounts only its own ServiceAccount's
    token, and the two are different ServiceAccounts."""
    spec = scheduler_deployment(objs)["spec"]["template"]["spec"]
    assert spec.get("automountServiceAccountToken") is False
    egpu_sa, ks_sa = container_sa(objs, "egpu-scheduler"), container_sa(objs, "kube-scheduler")
    assert egpu_sa != ks_sa
    assert egpu_sa == "egpu-scheduler"
    for sa in (egpu_sa, ks_sa):
        one(objs, "ServiceAccount", sa, NS)
    vols = {v["name"]: v for v in spec["volumes"]}
    token_vols = {n for n, v in vols.items() if "secret" in v
                  and one(objs, "Secret", v["secret"]["secretName"], NS)["type"]
                  == "kubernetes.io/service-account-token"}
    assert len(token_vols) == 2
    for c in spec["containers"] + spec.get("initContainers", []):
        mounted = {m["name"] for m in c.get("volumeMounts", [])} & token_vols
        assert len(mounted) == 1, f"{c['name']} mounts {sorted(mounted)}"
    assert {m["name"] for m in container(spec, "egpu-scheduler")["volumeMounts"]} & token_vols \
        != {m["name"] for m in container(spec, "kube-scheduler")["volumeMounts"]} & token_vols
    # The pod's own ServiceAccount gives no token to anyone.
    for sa in find(objs, "ServiceAccount"):
        assert sa.get("automountServiceAccountToken") is False, sa["metadata"]["name"]


def test_egpu_scheduler_least_privilege(objs):
    """Code running in the extender holds only what the extender uses: no
    built-in role, no delete, no Secrets, no PersistentVolumes, no writes
    but the pod annotation patch and the Binding."""
    rules = rules_of(objs, container_sa(objs, "egpu-scheduler"))
    grants = {(g, res, v, ns) for r, ns in rules for g in r.get("apiGroups", [])
              for res in r.get("resources", []) for v in r.get("verbs", [])}
    cluster = {(g, res, v) for g, res, v, ns in grants if ns is None}
    assert cluster == EGPU_NEEDS, sorted(cluster ^ EGPU_NEEDS)
    assert {(g, res, v) for g, res, v, ns in grants if ns is not None} == \
        {("coordination.k8s.io", "leases", "get")}
    for g, res, v, ns in grants:
        assert v not in ("delete", "deletecollection", "update", "create", "escalate", "bind",
                         "impersonate", "*") or (res, v) in (("pods/binding", "create"),
                                                             ("events", "create")), (g, res, v)
        assert res not in ("secrets", "persistentvolumes", "persistentvolumeclaims",
                           "serviceaccounts", "serviceaccounts/token"), (g, res, v)


def test_network_policy(objs):
    """Ingress to the scheduler pods only on egpu-scheduler's health and
    metrics port and kube-scheduler's (authenticating) secure port, never on
    the extender verbs' port."""
    dep = scheduler_deployment(objs)
    labels = dep["spec"]["template"]["metadata"]["labels"]
    egpu = container(dep["spec"]["template"]["spec"], "egpu-scheduler")
    args = egpu.get("command", [])[1:] + egpu.get("args", [])
    assert flag(args, "--health-port"), "egpu-scheduler serves health and verbs on one port"
    health, verbs = int(flag(args, "--health-port")), int(flag(args, "--port"))
    pols = [p for p in find(objs, "NetworkPolicy", namespace=NS)
            if all(labels.get(k) == v for k, v in p["spec"]["podSelector"]["matchLabels"].items())]
    assert len(pols) == 1, "expected one NetworkPolicy selecting the scheduler pods"
    spec = pols[0]["spec"]
    assert "Ingress" in spec["policyTypes"]
    allowed = set()
    for rule in spec.get("ingress", []):
        assert rule.get("ports"), f"an ingress rule opens every port: {rule}"
        allowed |= {p["port"] for p in rule["ports"]}
    assert allowed == {health, KUBE_SCHEDULER_SECURE_PORT}
    assert verbs not in allowed


def test_example_pod(objs):
    with open(DEPLOY / "examples" / "pod.yaml") as f:
        pod = yaml.safe_load(f)
    assert pod["kind"] == "Pod"
    _, _, cfg = scheduler_config(objs)
    assert pod["spec"]["schedulerName"] == cfg["profiles"][0]["schedulerName"]
    (c,) = pod["spec"]["containers"]
    limits = c["resources"]["limits"]
    assert str(limits["elasticgpu.io/gpu-core"]) == "30"
    assert str(limits["elasticgpu.io/gpu-memory"]) == "4096"
    req = c["resources"].get("requests", {})
    for k in ("elasticgpu.io/gpu-core", "elasticgpu.io/gpu-memory"):
        assert k not in req or str(req[k]) == str(limits[k])


# --- the images -----------------------------------------------------------------------
#
# deploy/Dockerfile: one build stage, and one runtime stage per component,
# each the --target of one image. These tests read it as text (Docker cannot
# run here) and hold it to scripts/deps.sh, to the CMake build, to `ldd` of
# the binaries in $EGPU_BUILD with dpkg on this machine (Debian 12, as the
# images are), to the manifests' users and to the version.

# runtime stage (docker build --target) -> its image name in deploy/'s
# manifests (kustomization.yaml's images entries set registry and tag)
STAGE_IMAGES = {"scheduler": "egpu-scheduler", "agent": "egpu-agent",
                "webhook": "egpu-webhook", "controller": "egpu-controller"}
# The one runtime stage that runs as root, and why: the kubelet's sockets and
# directories are root's (deploy/agent/daemonset.yaml, which drops every
# capability but AGENT_CAPS). The others run as 65532.
ROOT_STAGES = {"agent"}
NONROOT_UID = 65532
# Packages of debian:bookworm-slim the runtime stages rely on without
# installing them (all Essential or priority required, in every slim image):
SLIM_BASE = {
    "libc6",      # libc.so.6, libm.so.6 and ld-linux-x86-64.so.2, which every binary links
    "dash",       # /bin/sh of the agent's init container
    "coreutils",  # its cp, chmod and mv
    "passwd",     # groupadd and useradd of the non-root stages
}
# Packages a runtime stage installs for something other than a library its
# binary links, and the stages that may: ca-certificates where the binary
# talks HTTPS to the API server (libcurl; a kubeconfig whose server has no CA
# of its own uses the system's), tzdata where GLib reads time zones (the
# controller's GPUBudget spec.timeZone, docs/budgets.md).
RUNTIME_EXTRA = {"ca-certificates": {"scheduler", "agent", "webhook", "controller"},
                 "tzdata": {"controller"}}
# The toolchain of the build stage; every other package there must provide
# a pkg-config module, header or program the CMake build asks for.
BUILD_TOOLCHAIN = {"build-essential", "cmake", "pkg-config"}


def dockerfile_args():
    """The ARGs declared before the first FROM, with their defaults."""
    args = {}
    for line in (DEPLOY / "Dockerfile").read_text().splitlines():
        line = line.strip()
        if line.upper().startswith("FROM "):
            break
        m = re.match(r"ARG\s+(\w+)(?:=(\S*))?$", line)
        if m:
            args[m.group(1)] = m.group(2)
    return args


def dockerfile_stages():
    """[{name, from (ARGs expanded), from_raw, lines: [(INSTR, rest)]}] in order."""
    args = dockerfile_args()
    stages, cur = [], None
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instr, _, rest = line.partition(" ")
        if instr.upper() == "FROM":
            words = rest.split()
            raw = words[0]
            expanded = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], raw)
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            cur = {"name": name, "from": expanded, "from_raw": raw, "lines": []}
            stages.append(cur)
        elif cur is not None:
            cur["lines"].append((instr.upper(), re.sub(r"\s+", " ", rest.strip())))
    return stages


def stage(name):
    found = [s for s in dockerfile_stages() if s["name"] == name]
    assert len(found) == 1, f"deploy/Dockerfile has no stage {name}"
    return found[0]


def apt_packages(stage_):
    pkgs = set()
    for instr, rest in stage_["lines"]:
        if instr != "RUN":
            continue
        for m in re.finditer(r"apt-get install ([^&;|]*)", rest):
            pkgs |= {w for w in m.group(1).split() if not w.startswith("-")}
    return pkgs


def stage_user(stage_):
    """(uid, gid) of a stage's last USER, as strings; ("0", "0") without one."""
    users = [rest for instr, rest in stage_["lines"] if instr == "USER"]
    if not users:
        return "0", "0"
    uid, _, gid = users[-1].partition(":")
    return uid, gid or uid


def copies_from_build(stage_):
    """(source, destination) of each COPY --from=build of a stage."""
    out = []
    for instr, rest in stage_["lines"]:
        if instr == "COPY" and rest.startswith("--from=build "):
            src, dest = rest.split()[1:3]
            out.append((src, dest))
    return out


def deps_list(var):
    text = (ROOT / "scripts" / "deps.sh").read_text()
    m = re.search(rf'^{var}="([^"]*)"', text, re.M)
    assert m, f"scripts/deps.sh has no {var}"
    return set(m.group(1).split())


def build_tree():
    d = os.environ.get("EGPU_BUILD", str(ROOT / "build"))
    if not os.path.isfile(os.path.join(d, "src/scheduler/egpu-scheduler")):
        pytest.fail(f"{d}: binaries not built: run `make build` first")
    return d


def installed_files(build):
    """What `cmake --install` of the build puts under the prefix, from its
    cmake_install.cmake files: {"bin/egpu-agent": <file in the build>, ...}."""
    out = {}
    for root, _, files in os.walk(build):
        if "cmake_install.cmake" not in files:
            continue
        text = open(os.path.join(root, "cmake_install.cmake")).read()
        for m in re.finditer(r'file\(INSTALL DESTINATION "\$\{CMAKE_INSTALL_PREFIX\}/([^"]+)" '
                             r'TYPE \w+ FILES "([^"]+)"', text):
            out[m.group(1) + "/" + os.path.basename(m.group(2))] = m.group(2)
    return out


def stage_files(stage_, build):
    """The build's files a runtime stage copies: {installed path: build file}."""
    inst = installed_files(build)
    out = {}
    for src, _ in copies_from_build(stage_):
        assert src.startswith("/out/usr/local/"), src
        rel = src[len("/out/usr/local/"):].rstrip("/")
        got = {k: v for k, v in inst.items() if k == rel or k.startswith(rel + "/")}
        assert got, f"stage {stage_['name']}: COPY {src}: the build installs nothing there"
        out.update(got)
    return out


_dpkg_cache = {}


def dpkg_owner(path):
    """The Debian package that ships path (its real path too, for merged /usr)."""
    for p in (path, os.path.realpath(path), "/usr" + path if path.startswith("/lib") else path):
        if p in _dpkg_cache:
            return _dpkg_cache[p]
        r = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True)
        if r.returncode == 0:
            pkg = r.stdout.splitlines()[0].split(":")[0]
            _dpkg_cache[p] = pkg
            return pkg
    raise AssertionError(f"dpkg -S: no package ships {path}")


def dpkg_closure(pkgs):
    """pkgs and every package they depend on, as installed on this machine."""
    seen, todo = set(), list(pkgs)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        r = subprocess.run(["dpkg-query", "-W", "-f=${Depends}, ${Pre-Depends}", p],
                           capture_output=True, text=True)
        if r.returncode != 0:
            continue
        for dep in r.stdout.split(","):
            for alt in dep.split("|"):
                name = alt.strip().split(" ")[0].split(":")[0]
                if name:
                    todo.append(name)
    return seen


def needed_libs(elf):
    """(direct: the packages of its DT_NEEDED libraries, all: of everything ldd loads)."""
    r = subprocess.run(["ldd", elf], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "not found" not in r.stdout, f"{elf}: {r.stdout}"
    paths = {}
    for line in r.stdout.splitlines():
        m = re.match(r"\s*(\S+) => (/\S+)", line) or re.match(r"\s*()(/\S+) \(", line)
        if m:
            paths[os.path.basename(m.group(1) or m.group(2))] = m.group(2)
    d = subprocess.run(["readelf", "-d", elf], capture_output=True, text=True, check=True)
    direct = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", d.stdout)
    for lib in direct:
        assert lib in paths, f"{elf}: ldd does not resolve {lib}"
    return ({dpkg_owner(paths[lib]) for lib in direct},
            {dpkg_owner(p) for p in paths.values()})


def dockerignore_lets_in(path):
    """Whether deploy/Dockerfile.dockerignore lets path (of the context) in:
    the last pattern matching it or a folder above it decides."""
    import fnmatch
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    ok = True
    for line in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        neg = line.startswith("!")
        pat = line.lstrip("!").strip("/")
        if pat.startswith("**/"):
            hit = any(fnmatch.fnmatch(p, pat[3:]) for p in parts)
        else:
            hit = any(fnmatch.fnmatch(p, pat) for p in prefixes)
        if hit:
            ok = neg
    return ok


def test_dockerfile_stages():
    """A build stage and the runtime stages, every one on the Debian release
    of the DEBIAN_RELEASE ARG (bookworm-slim), none with another spelled out."""
    stages = dockerfile_stages()
    args = dockerfile_args()
    assert stages[0]["name"] == "build"
    assert [s["name"] for s in stages[1:]] == list(STAGE_IMAGES)
    for s in stages:
        assert s["from_raw"] == "debian:${DEBIAN_RELEASE}-slim", (s["name"], s["from_raw"])
        assert s["from"] == "debian:bookworm-slim", s["from"]
    assert args["DEBIAN_RELEASE"] == "bookworm"


def test_build_stage_installs_deps_build_packages():
    """(a) The build stage installs exactly scripts/deps.sh's BUILD_PKGS, a
    part of what `make deps` installs, and each of them is the toolchain or
    provides what CMake asks for (a pkg-config module, libcsv, protoc-c):
    nothing test-only (cmocka, clang, python, ...)."""
    build = apt_packages(stage("build"))
    want = deps_list("BUILD_PKGS")
    assert build == want, f"build stage {sorted(build ^ want)} vs deps.sh BUILD_PKGS"
    assert want <= deps_list("PKGS")
    assert "libcmocka-dev" not in build
    cmake_text = "\n".join(p.read_text() for p in
                           [ROOT / "CMakeLists.txt", *ROOT.glob("src/*/CMakeLists.txt"),
                            *ROOT.glob("proto/CMakeLists.txt"), *ROOT.glob("bench/*/CMakeLists.txt")])
    modules = set(re.findall(r"pkg_check_modules\(\w+ REQUIRED (?:IMPORTED_TARGET )?([\w.+-]+)\)",
                             cmake_text))
    assert {"grpc", "libprotobuf-c", "glib-2.0", "gnutls", "libcurl"} <= modules, modules
    provides = {}
    for mod in modules:
        r = subprocess.run(["pkg-config", "--path", mod], capture_output=True, text=True)
        assert r.returncode == 0, f"pkg-config {mod}: {r.stderr}"
        provides[dpkg_owner(r.stdout.strip())] = mod
    assert "find_path(CSV_INCLUDE_DIR csv.h)" in cmake_text
    provides[dpkg_owner("/usr/include/csv.h")] = "csv.h"
    assert "find_program(PROTOC_C NAMES protoc-c" in cmake_text
    provides[dpkg_owner("/usr/bin/protoc-c")] = "protoc-c"
    assert set(provides) <= build, f"the build stage lacks {sorted(set(provides) - build)}"
    assert build - BUILD_TOOLCHAIN <= set(provides), \
        f"the build needs none of {sorted(build - BUILD_TOOLCHAIN - set(provides))}"


def build_stage_cmake():
    """(the -D options of the build stage's cmake, the --target list)."""
    runs = [rest for instr, rest in stage("build")["lines"] if instr == "RUN" and "cmake -S" in rest]
    assert len(runs) == 1
    opts = re.findall(r"(-D\S+)", runs[0])
    m = re.search(r"cmake --build \S+(?: -j\S+)? --target ([^&]+)", runs[0])
    assert m, runs[0]
    assert "cmake --install" in runs[0] and "DESTDIR=/out" in runs[0], runs[0]
    return opts, set(m.group(1).split())


def test_build_stage_copies_what_cmake_reads(tmp_path):
    """(a) The sources the build stage COPYs, and only those, configure with
    its cmake options (-DEGPU_BUILD_TESTS=OFF: no cmocka, no unit tests), and
    the context lets each in; it builds every target with an install rule,
    so `cmake --install` finds them all."""
    lines = stage("build")["lines"]
    workdir = [rest for instr, rest in lines if instr == "WORKDIR"][-1]
    srcdir = tmp_path / "src"
    srcdir.mkdir()
    copied = []
    for instr, rest in lines:
        if instr != "COPY":
            continue
        src, dest = rest.split()
        assert dockerignore_lets_in(src), f"Dockerfile.dockerignore keeps out {src}"
        assert (ROOT / src).exists(), src
        copied.append(src.rstrip("/"))
        target = srcdir / (src if dest == "./" else dest)
        if (ROOT / src).is_dir():
            shutil.copytree(ROOT / src, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / src, target)
    assert workdir == "/src"
    for need in ("CMakeLists.txt", "cmake", "include", "src", "proto"):
        assert need in copied, f"the build stage does not copy {need}"
    # Every top folder the build names (add_subdirectory, includes, sources
    # by ${CMAKE_SOURCE_DIR}) is in the copy.
    cmake_files = [p for p in srcdir.rglob("CMakeLists.txt")] + list(srcdir.glob("cmake/*.cmake"))
    for p in cmake_files:
        for ref in re.findall(r"\$\{CMAKE_SOURCE_DIR\}/([\w./-]+)", p.read_text()):
            if ref.startswith("tests/") and p.parent.name in ("tests", "fuzz"):
                continue  # tests/ itself, which EGPU_BUILD_TESTS=OFF leaves out
            assert (srcdir / ref).exists(), f"{p.relative_to(srcdir)} reads {ref}, not copied"
    opts, targets = build_stage_cmake()
    assert "-DEGPU_BUILD_TESTS=OFF" in opts
    r = subprocess.run(["cmake", "-S", str(srcdir), "-B", str(tmp_path / "b"), *opts],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"cmake with the build stage's sources failed:\n{r.stderr[-3000:]}"
    assert "cmocka" not in (tmp_path / "b" / "CMakeCache.txt").read_text().replace(
        "needs cmocka", "")
    # The --target list is every target `cmake --install` installs.
    inst = installed_files(str(tmp_path / "b"))
    want = set()
    for rel in inst:
        name = os.path.basename(rel)
        m = re.match(r"lib(.+)\.so$", name)
        want.add(m.group(1) if m else name)
    assert targets == want, f"--target {sorted(targets)} vs installed {sorted(want)}"
    assert {"egpu-scheduler", "egpu-agent", "egpu-webhook", "egpu-controller",
            "egpu-vcuda", "egpu-vcuda-inspect"} <= targets


@pytest.mark.parametrize("name", list(STAGE_IMAGES))
def test_runtime_stage_has_its_libraries(name):
    """(b) A runtime stage's packages are those of the libraries its binaries
    link (readelf's NEEDED, resolved by ldd and dpkg -S on this Debian 12
    machine) plus RUNTIME_EXTRA, no -dev package and nothing else; every
    library ldd loads comes from those packages, their dependencies or the
    slim base."""
    with open("/etc/os-release") as f:
        assert "VERSION_CODENAME=bookworm" in f.read(), "the ldd check needs a Debian 12 machine"
    build = build_tree()
    s = stage(name)
    pkgs = apt_packages(s)
    assert pkgs, f"stage {name} installs nothing"
    dev = {p for p in pkgs if p.endswith("-dev")}
    assert not dev, f"stage {name} installs -dev packages {sorted(dev)}"
    files = stage_files(s, build)
    assert f"bin/{STAGE_IMAGES[name]}" in files, f"stage {name} lacks its binary"
    closure = dpkg_closure(pkgs | SLIM_BASE)
    linked = set()
    for rel, elf in sorted(files.items()):
        direct, everything = needed_libs(elf)
        missing = direct - pkgs - SLIM_BASE
        assert not missing, f"stage {name}: {rel} links libraries of {sorted(missing)}"
        assert everything <= closure, \
            f"stage {name}: {rel} loads libraries of {sorted(everything - closure)}"
        linked |= direct
    extra = {p for p in pkgs - linked if name not in RUNTIME_EXTRA.get(p, ())}
    assert not extra, f"stage {name} installs {sorted(extra)}, which nothing of it links"
    for p, stages in RUNTIME_EXTRA.items():
        assert (p in pkgs) == (name in stages), (name, p)


def test_runtime_stage_users_match_manifests(objs):
    """(c) Each runtime stage's USER is the user its pods run as: 65532 and
    runAsNonRoot for all but ROOT_STAGES, root (runAsUser 0, runAsNonRoot
    false) for the agent and its init container; each stage's image is used."""
    used = set()
    for o in find(objs, "Deployment") + find(objs, "DaemonSet"):
        spec = o["spec"]["template"]["spec"]
        pod_sc = spec.get("securityContext", {})
        for c in spec["containers"] + spec.get("initContainers", []):
            repo = c["image"].rsplit(":", 1)[0].rsplit("/", 1)[-1]
            stages = [s for s, img in STAGE_IMAGES.items() if img == repo]
            if not stages:
                continue
            used.add(stages[0])
            sc = c.get("securityContext", {})
            uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
            gid = sc.get("runAsGroup", pod_sc.get("runAsGroup"))
            non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
            s_uid, s_gid = stage_user(stage(stages[0]))
            where = f"{o['kind']} {o['metadata']['name']} {c['name']} (stage {stages[0]})"
            if stages[0] in ROOT_STAGES:
                assert (s_uid, s_gid) == ("0", "0"), where
                assert uid == 0 and non_root is False, where
            else:
                assert (s_uid, s_gid) == (str(NONROOT_UID), str(NONROOT_UID)), where
                assert non_root is True and uid == NONROOT_UID, where
                assert gid in (None, NONROOT_UID), where
    assert used == set(STAGE_IMAGES), f"stages no manifest uses: {set(STAGE_IMAGES) - used}"


def test_images_and_versions_in_one_place(objs):
    """(d) The manifests' images are the Dockerfile's targets under one tag:
    kustomization.yaml's images, the chart's values and appVersion, the
    Dockerfile's EGPU_VERSION (checked against CMakeLists.txt in the build
    too) and CMakeLists.txt's project VERSION agree."""
    version = dockerfile_args()["EGPU_VERSION"]
    cmake = re.search(r"project\(elastic_gpu VERSION ([0-9.]+)",
                      (ROOT / "CMakeLists.txt").read_text()).group(1)
    assert version == cmake, (version, cmake)
    assert any('grep -q "^project(elastic_gpu VERSION ${EGPU_VERSION} " CMakeLists.txt' in rest
               for instr, rest in stage("build")["lines"] if instr == "RUN")
    for name in STAGE_IMAGES:
        lines = stage(name)["lines"]
        assert ("ARG", "EGPU_VERSION") in lines, name
        label = " ".join(rest for instr, rest in lines if instr == "LABEL")
        assert 'org.opencontainers.image.version="${EGPU_VERSION}"' in label, name
        assert f'org.opencontainers.image.title="{STAGE_IMAGES[name]}"' in label, name
        assert [rest for instr, rest in lines if instr == "ENTRYPOINT"] == \
            [f'["/usr/local/bin/{STAGE_IMAGES[name]}"]'], name
    kz = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    entries = {i["name"]: i for i in kz["images"]}
    assert set(entries) == set(STAGE_IMAGES.values())
    chart = DEPLOY / "helm" / "elastic-gpu"
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    values = yaml.safe_load((chart / "values.yaml").read_text())
    assert meta["appVersion"] == f"v{version}" and meta["version"] == version
    for comp, name in STAGE_IMAGES.items():
        e = entries[name]
        assert e["newTag"] == f"v{version}", e
        assert e["newName"].rsplit("/", 1)[1] == name, e
        assert e["newName"] == f"{values['image']['registry']}/{values[comp]['image']['repository']}"
    assert values["image"]["tag"] in ("", f"v{version}")
    # Every Elastic GPU container of the rendered base names one of them.
    ours = 0
    for o in find(objs, "Deployment") + find(objs, "DaemonSet"):
        spec = o["spec"]["template"]["spec"]
        for c in spec["containers"] + spec.get("initContainers", []):
            if c["image"].startswith("registry.k8s.io/kube-scheduler:"):
                continue
            repo, _, tag = c["image"].rpartition(":")
            assert repo in {e["newName"] for e in entries.values()}, c["image"]
            assert tag == f"v{version}", c["image"]
            ours += 1
    # scheduler, webhook, controller, and each agent (device-plugin, DRA) with its two
    # init containers
    assert ours == 9


def test_agent_image_carries_the_interposer():
    """The agent stage has egpu-agent, egpu-vcuda-inspect and libegpu-vcuda.so,
    where the DaemonSet's init container copies it from."""
    files = stage_files(stage("agent"), build_tree())
    assert {"bin/egpu-agent", "bin/egpu-vcuda-inspect",
            "lib/elastic-gpu/libegpu-vcuda.so"} <= set(files), sorted(files)
    for name in set(STAGE_IMAGES) - {"agent"}:
        assert set(stage_files(stage(name), build_tree())) == {f"bin/{STAGE_IMAGES[name]}"}, name


# --- the controller -------------------------------------------------------------------

def controller_deployment(objs):
    deps = [d for d in find(objs, "Deployment")
            if any(c["name"] == "egpu-controller"
                   for c in d["spec"]["template"]["spec"]["containers"])]
    assert len(deps) == 1, "expected one Deployment running egpu-controller"
    dep = deps[0]
    return dep, container(dep["spec"]["template"]["spec"], "egpu-controller")


def controller_port(c):
    """The port egpu-controller serves /healthz, /readyz and /metrics on."""
    args = c.get("command", [])[1:] + c.get("args", [])
    return int(flag(args, "--port") or CONTROLLER_PORT_DEFAULT)


def controller_exe():
    build = os.environ.get("EGPU_BUILD", str(ROOT / "build"))
    exe = os.path.join(build, "src/controller/egpu-controller")
    if not os.access(exe, os.X_OK):
        pytest.fail(f"{exe} not built: run `make build` first")
    return exe


def test_controller_deployment(objs):
    dep, c = controller_deployment(objs)
    assert dep["metadata"]["namespace"] == NS
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]
    assert all(pod["metadata"]["labels"].get(k) == v
               for k, v in dep["spec"]["selector"]["matchLabels"].items())
    assert PART_OF[0] not in dep["spec"]["selector"]["matchLabels"]
    spec = pod["spec"]
    assert [x["name"] for x in spec["containers"]] == ["egpu-controller"]
    assert spec["serviceAccountName"] == "egpu-controller"
    one(objs, "ServiceAccount", "egpu-controller", NS)
    assert c["command"] == ["/usr/local/bin/egpu-controller"]
    # Its own image, the Dockerfile's controller target, tagged as the
    # extender's (the kustomization's images entries).
    sched = container(scheduler_deployment(objs)["spec"]["template"]["spec"], "egpu-scheduler")
    assert c["image"].rsplit(":", 1)[0].endswith("/" + STAGE_IMAGES["controller"])
    assert c["image"].rsplit(":", 1)[1] == sched["image"].rsplit(":", 1)[1]

    # Two replicas, one reconciling: leader election on.
    args = c.get("command", [])[1:] + c.get("args", [])
    assert flag(args, "--leader-elect") in (None, "true")

    # The probes reach the port it serves them on, over plain HTTP.
    port = controller_port(c)
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = c[probe]["httpGet"]
        assert get["path"] == path
        assert container_port(c, get["port"]) == port
        assert get.get("scheme", "HTTP") == "HTTP"
    assert flag(args, "--listen") in (None, "0.0.0.0"), "the kubelet probes the pod address"
    for svc in find(objs, "Service"):
        if svc["spec"].get("selector") == dep["spec"]["selector"]["matchLabels"]:
            for p in svc["spec"]["ports"]:
                assert container_port(c, p.get("targetPort", p["port"])) == port

    res = c.get("resources", {})
    assert res.get("requests", {}).get("cpu") and res.get("requests", {}).get("memory")
    assert res.get("limits", {}).get("memory")
    pod_sc = spec.get("securityContext", {})
    sc = c.get("securityContext", {})
    assert sc.get("readOnlyRootFilesystem") is True
    assert sc.get("allowPrivilegeEscalation") is False
    assert "ALL" in sc.get("capabilities", {}).get("drop", [])
    assert sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True
    assert sc.get("runAsUser", pod_sc.get("runAsUser")) not in (None, 0)
    assert "privileged" not in sc and not spec.get("hostNetwork") and not spec.get("hostPID")
    assert not any("hostPath" in v for v in spec.get("volumes", []))

    # Both replicas are Ready (readiness does not depend on leading), so a
    # rolling update that keeps one up finishes.
    strat = dep["spec"].get("strategy", {})
    assert strat.get("type", "RollingUpdate") == "RollingUpdate"
    assert str(strat.get("rollingUpdate", {}).get("maxUnavailable")) == "0"


def test_controller_cluster_role(objs):
    role = one(objs, "ClusterRole", "elastic-gpu-controller")
    rules = role["rules"]
    for r in rules:
        for field in ("apiGroups", "resources", "verbs", "resourceNames"):
            assert "*" not in r.get(field, []), f"wildcard in {field}: {r}"
        assert not r.get("nonResourceURLs") and not r.get("resourceNames")
    missing = {n for n in CONTROLLER_NEEDS if not allows(rules, *n)}
    assert not missing, f"ClusterRole lacks what egpu-controller uses: {sorted(missing)}"
    extra = granted(rules) - CONTROLLER_NEEDS
    assert not extra, f"ClusterRole grants more than egpu-controller uses: {sorted(extra)}"
    crbs = [b for b in find(objs, "ClusterRoleBinding")
            if b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                "name": "elastic-gpu-controller"}]
    assert len(crbs) == 1 and bound_to(crbs[0], "egpu-controller", NS)
    assert [s["name"] for s in crbs[0]["subjects"]] == ["egpu-controller"]


def test_controller_least_privilege(objs):
    """All egpu-controller is bound to: the ClusterRole above, cluster-wide,
    and in its own namespace only its Lease (create, and get + update of
    that one name), which is the Lease its flags elect on, in the namespace
    the pod gives it."""
    _, c = controller_deployment(objs)
    args = c.get("command", [])[1:] + c.get("args", [])
    lease = flag(args, "--lease-name") or CONTROLLER_LEASE_DEFAULT
    assert flag(args, "--lease-namespace") in (None, NS)
    ns_env = {e["name"]: e for e in c.get("env", [])}.get("EGPU_LEASE_NAMESPACE", {})
    assert ns_env.get("value", NS) == NS
    if "valueFrom" in ns_env:
        assert ns_env["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"

    rules = rules_of(objs, "egpu-controller")
    cluster = {(g, res, v) for r, ns in rules if ns is None for g in r["apiGroups"]
               for res in r["resources"] for v in r["verbs"]}
    assert cluster == CONTROLLER_NEEDS, sorted(cluster ^ CONTROLLER_NEEDS)
    local = [(r, ns) for r, ns in rules if ns is not None]
    assert local and all(ns == NS for _, ns in local)
    local_rules = [r for r, _ in local]
    assert allows(local_rules, "coordination.k8s.io", "leases", "create")
    for verb in LEASE_VERBS:
        assert allows(local_rules, "coordination.k8s.io", "leases", verb, lease), \
            f"egpu-controller has no {verb} on Lease {lease} in {NS}"
        assert verb == "create" or not allows(local_rules, "coordination.k8s.io", "leases",
                                              verb, "some-other-lease"), \
            f"egpu-controller may {verb} every Lease of {NS}"
    for r in local_rules:
        assert r["apiGroups"] == ["coordination.k8s.io"] and r["resources"] == ["leases"], r
        assert set(r["verbs"]) <= LEASE_VERBS, r


def test_controller_network_policy(objs):
    dep, c = controller_deployment(objs)
    labels = dep["spec"]["template"]["metadata"]["labels"]
    pols = [p for p in find(objs, "NetworkPolicy", namespace=NS)
            if all(labels.get(k) == v for k, v in p["spec"]["podSelector"]["matchLabels"].items())]
    assert len(pols) == 1, "expected one NetworkPolicy selecting the controller pods"
    spec = pols[0]["spec"]
    assert "Ingress" in spec["policyTypes"]
    allowed = set()
    for rule in spec.get("ingress", []):
        assert rule.get("ports"), f"an ingress rule opens every port: {rule}"
        allowed |= {(p.get("protocol", "TCP"), p["port"]) for p in rule["ports"]}
    assert allowed == {("TCP", controller_port(c))}


def test_controller_flags_exist(objs):
    """Every flag the Deployment passes is one egpu-controller --help lists,
    and the binary accepts them with their values: given a kubeconfig that
    does not exist it gets past its flags (a bad flag or value exits 2
    before anything else) and stops at the kubeconfig."""
    _, c = controller_deployment(objs)
    args = c.get("command", [])[1:] + c.get("args", [])
    exe = controller_exe()
    r = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    listed = set(re.findall(r"^\s+(?:-\w, )?(--[a-z][a-z0-9-]*)", r.stdout, re.M))
    assert "--port" in listed and "--lease-name" in listed, "unexpected --help layout"
    assert f"default {CONTROLLER_PORT_DEFAULT}" in r.stdout.split("--port", 1)[1].split("\n  --")[0]
    assert f"default {CONTROLLER_LEASE_DEFAULT}" in r.stdout
    for a in args:
        if a.startswith("--"):
            assert a.split("=")[0] in listed, f"egpu-controller has no flag {a}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EGPU_")}
    for e in c.get("env", []):
        assert e["name"] in r.stdout, f"egpu-controller --help names no {e['name']}"
        env[e["name"]] = e.get("value", NS)  # a fieldRef gives the pod's namespace
    r = subprocess.run([exe, *args, "--kubeconfig", "/nonexistent/kubeconfig"],
                       capture_output=True, text=True, timeout=20, env=env)
    assert r.returncode not in (0, 2), f"exit {r.returncode}: {r.stderr}"
    assert "/nonexistent/kubeconfig" in r.stderr, r.stderr


# --- DRA mode for the webhook and the controller (deploy/dra) -----------------------

def dra_overlay(tmp_path):
    """kubectl kustomize of an overlay of deploy/ with the Component deploy/dra."""
    rel = os.path.relpath(DEPLOY, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {rel}\ncomponents:\n  - {rel}/dra\n")
    return kustomize(tmp_path)


def test_dra_component_sets_the_mode_of_webhook_and_controller(objs, tmp_path):
    """deploy/dra is a Component (the base stays device-plugin: neither
    Deployment passes --mode or EGPU_MODE there); an overlay of deploy/ with
    it builds, and differs from the base only in egpu-webhook's and
    egpu-controller's arguments, which end in --mode dra, and egpu-scheduler's,
    which end in --dra (DRA pods judged by their claims); the binaries take
    the overlay's arguments (a bad flag or value exits 2 before anything
    else; the controller stops at the kubeconfig that does not exist)."""
    comp = yaml.safe_load((DEPLOY / "dra" / "kustomization.yaml").read_text())
    assert comp["kind"] == "Component"
    kz = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert "dra" not in kz["resources"] and "components" not in kz
    names = ("egpu-webhook", "egpu-controller")
    for name in names:
        c = container(one(objs, "Deployment", name)["spec"]["template"]["spec"], name)
        assert flag(c["args"], "--mode") is None and "EGPU_MODE" not in str(c.get("env")), name
    dra = dra_overlay(tmp_path)
    ident = {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")): o for o in dra}
    base = {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")): o for o in objs}
    assert set(ident) == set(base)
    assert {k for k in base if base[k] != ident[k]} == \
        {("Deployment", n, NS) for n in names + ("egpu-scheduler",)}
    build = os.environ.get("EGPU_BUILD", str(ROOT / "build"))
    old = container(base[("Deployment", "egpu-scheduler", NS)]["spec"]["template"]["spec"],
                    "egpu-scheduler")
    new = container(ident[("Deployment", "egpu-scheduler", NS)]["spec"]["template"]["spec"],
                    "egpu-scheduler")
    assert "--dra" not in old["args"] and new["args"] == old["args"] + ["--dra"], new["args"]
    assert {**new, "args": old["args"]} == old
    sched = os.path.join(build, "src", "scheduler", "egpu-scheduler")
    r = subprocess.run([sched, *new["args"], "--help"], capture_output=True, text=True,
                       timeout=10, env={k: v for k, v in os.environ.items()
                                        if not k.startswith("EGPU_")})
    assert r.returncode == 0 and "--dra[=BOOL]" in r.stdout, (r.returncode, r.stderr)
    for name in names:
        old = container(base[("Deployment", name, NS)]["spec"]["template"]["spec"], name)
        new = container(ident[("Deployment", name, NS)]["spec"]["template"]["spec"], name)
        assert new["args"] == old["args"] + ["--mode", "dra"], (name, new["args"])
        assert {**new, "args": old["args"]} == old, name
        exe = os.path.join(build, "src", name.split("-")[1], name)
        if not os.access(exe, os.X_OK):
            pytest.fail(f"{exe} not built: run `make build` first")
        args = new.get("command", [])[1:] + new["args"]
        h = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=10)
        assert "--mode MODE" in h.stdout and "dra" in h.stdout.split("--mode", 1)[1], name
        env = {k: v for k, v in os.environ.items() if not k.startswith("EGPU_")}
        env["EGPU_LEASE_NAMESPACE"] = NS
        r = subprocess.run([exe, *args, "--help"], capture_output=True, text=True, timeout=10,
                           env=env)
        assert r.returncode == 0, (name, r.stderr)
        bad = [a if a != "dra" else "dra-mode" for a in args]
        r = subprocess.run([exe, *bad, "--help"], capture_output=True, text=True, timeout=10,
                           env=env)
        assert r.returncode == 2 and "dra-mode" in r.stderr, (name, r.returncode, r.stderr)
    _, c = controller_deployment(dra)
    r = subprocess.run([controller_exe(), *c["args"], "--kubeconfig", "/nonexistent/kubeconfig"],
                       capture_output=True, text=True, timeout=20, env=env)
    assert r.returncode not in (0, 2), f"exit {r.returncode}: {r.stderr}"
    assert "/nonexistent/kubeconfig" in r.stderr, r.stderr


# --- the agent ----------------------------------------------------------------------

def agent_daemonsets(objs):
    """{--mode value: (DaemonSet, its egpu-agent container)}: one per mode."""
    out = {}
    for d in find(objs, "DaemonSet"):
        spec = d["spec"]["template"]["spec"]
        if any(c["name"] == "egpu-agent" for c in spec["containers"]):
            c = container(spec, "egpu-agent")
            mode = flag(c.get("command", [])[1:] + c.get("args", []), "--mode") or \
                "device-plugin"
            assert mode not in out, f"two DaemonSets run egpu-agent --mode {mode}"
            out[mode] = (d, c)
    assert sorted(out) == ["device-plugin", "dra"], sorted(out)
    return out


def agent_daemonset(objs):
    return agent_daemonsets(objs)["device-plugin"]


def agent_dra_daemonset(objs):
    return agent_daemonsets(objs)["dra"]


def agent_exe():
    build = os.environ.get("EGPU_BUILD", str(ROOT / "build"))
    exe = os.path.join(build, "src/agent/egpu-agent")
    if not os.access(exe, os.X_OK):
        pytest.fail(f"{exe} not built: run `make build` first")
    return exe


def agent_help():
    r = subprocess.run([agent_exe(), "--help"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    return r.stdout


def agent_path_flag(args, help_text, name):
    """The path egpu-agent uses for flag name: the DaemonSet's, else the
    default its --help gives."""
    v = flag(args, name)
    if v is not None:
        return v
    text = help_text.split(name, 1)[1].split("\n  --")[0]
    m = re.search(r"default (/[^\s;)]+)", text)
    assert m, f"egpu-agent --help gives no default path for {name}"
    return m.group(1)


def host_path_at(spec, c, path):
    """The host path behind container path path in container c (a hostPath
    volume mounted at path or a folder above it), or None."""
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    best = None
    for m in c.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/")
        if (path == mp or path.startswith(mp + "/")) and "hostPath" in vols[m["name"]]:
            if best is None or len(mp) > len(best[0]):
                best = (mp, vols[m["name"]]["hostPath"]["path"].rstrip("/"), m)
    if best is None:
        return None
    mp, hp, m = best
    return hp + path[len(mp):], m


def trusted_agent_user(objs):
    """The user the admission policy and egpu-webhook --agent-user trust as
    the only writer of elasticgpu.io/allocated."""
    pol = one(objs, "ValidatingAdmissionPolicy")
    var = {v["name"]: v["expression"] for v in pol["spec"]["variables"]}
    policy_user = var["agent"].strip("'\"")
    wh = [c for d in find(objs, "Deployment") for c in d["spec"]["template"]["spec"]["containers"]
          if c["name"] == "egpu-webhook"]
    assert len(wh) == 1
    webhook_user = flag(wh[0].get("command", [])[1:] + wh[0].get("args", []), "--agent-user")
    assert webhook_user == policy_user, (webhook_user, policy_user)
    return policy_user


def test_agent_daemonset(objs):
    ds, c = agent_daemonset(objs)
    assert ds["metadata"]["namespace"] == NS
    pod = ds["spec"]["template"]
    assert all(pod["metadata"]["labels"].get(k) == v
               for k, v in ds["spec"]["selector"]["matchLabels"].items())
    assert PART_OF[0] not in ds["spec"]["selector"]["matchLabels"]
    spec = pod["spec"]
    assert [x["name"] for x in spec["containers"]] == ["egpu-agent"]
    assert c["command"] == ["/usr/local/bin/egpu-agent"]

    # Its identity is the one the rest of deploy/ trusts with the
    # elasticgpu.io/allocated annotation, and the pod gets its token.
    user = trusted_agent_user(objs)
    assert user == f"system:serviceaccount:{NS}:{spec['serviceAccountName']}", user
    one(objs, "ServiceAccount", spec["serviceAccountName"], NS)
    assert spec.get("automountServiceAccountToken") is True

    # Its own image (the Dockerfile's agent target), tagged as the other
    # components', for the agent and the init container that installs the
    # interposer from it.
    sched = container(scheduler_deployment(objs)["spec"]["template"]["spec"], "egpu-scheduler")
    assert c["image"].rsplit(":", 1)[0].endswith("/" + STAGE_IMAGES["agent"])
    assert c["image"].rsplit(":", 1)[1] == sched["image"].rsplit(":", 1)[1]
    for ic in spec.get("initContainers", []):
        assert ic["image"] == c["image"], ic["name"]

    # Only GPU nodes, tainted or not; NODE_NAME (--node-name) is the node.
    assert spec.get("nodeSelector"), "the agent must run only on GPU nodes"
    assert any(t.get("key") == "nvidia.com/gpu" and t.get("effect") == "NoSchedule"
               and t.get("operator") == "Exists" for t in spec.get("tolerations", []))
    env = {e["name"]: e for e in c.get("env", [])}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    args = c.get("command", [])[1:] + c.get("args", [])
    assert flag(args, "--node-name") is None and flag(args, "--no-api") is None
    assert flag(args, "--fake-gpus") is None and "EGPU_FAKE_GPUS" not in env
    # The context extra, when shown, is a value the agent takes (0..65536 MiB).
    extra = flag(args, "--context-extra-mib")
    assert extra is None or (extra.isdigit() and int(extra) <= 65536), extra
    assert extra is None or "--context-extra-mib" in agent_help()

    # The probes reach the port it serves them on, over plain HTTP.
    port = int(flag(args, "--port") or AGENT_PORT_DEFAULT)
    assert flag(args, "--listen") in (None, "0.0.0.0"), "the kubelet probes the pod address"
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = c[probe]["httpGet"]
        assert get["path"] == path
        assert container_port(c, get["port"]) == port
        assert get.get("scheme", "HTTP") == "HTTP"
    res = c.get("resources", {})
    assert res.get("requests", {}).get("cpu") and res.get("requests", {}).get("memory")
    assert res.get("limits", {}).get("memory")

    # Least privilege: root (the kubelet's sockets and directories are
    # root's), every capability dropped but those the code needs, nothing
    # else of the host's.
    for x in [c] + spec.get("initContainers", []):
        sc = x.get("securityContext", {})
        assert sc.get("allowPrivilegeEscalation") is False, x["name"]
        assert sc.get("readOnlyRootFilesystem") is True, x["name"]
        assert not sc.get("privileged"), x["name"]
        assert "ALL" in sc.get("capabilities", {}).get("drop", []), x["name"]
    assert set(c["securityContext"]["capabilities"].get("add", [])) <= AGENT_CAPS
    for ic in spec.get("initContainers", []):
        assert not ic["securityContext"]["capabilities"].get("add"), ic["name"]
    for k in ("hostNetwork", "hostPID", "hostIPC"):
        assert not spec.get(k), k
    assert spec.get("securityContext", {}).get("seccompProfile", {}).get("type") == \
        "RuntimeDefault"


def test_agent_mounts_cover_its_paths(objs):
    """Every host path egpu-agent opens, or hands the kubelet to mount into
    a container, is mounted from the host at the same path; the interposer
    it names is on the host where the init container puts it, copied from
    where the image holds it."""
    ds, c = agent_daemonset(objs)
    spec = ds["spec"]["template"]["spec"]
    args = c.get("command", [])[1:] + c.get("args", [])
    help_text = agent_help()
    vols = {v["name"]: v for v in spec["volumes"]}
    for name, writes in (("--device-plugin-dir", True), ("--alloc-root", True),
                         ("--pod-resources-socket", False)):
        path = agent_path_flag(args, help_text, name).rstrip("/")
        found = host_path_at(spec, c, path)
        assert found, f"{name} {path} is not mounted from the host"
        host, m = found
        assert host == path, f"{name}: {path} in the container is {host} on the host"
        assert not m.get("readOnly") or not writes, f"{name} {path} is mounted read-only"
    # Only hostPath volumes the agent needs, none of / or /dev.
    for v in spec["volumes"]:
        if "hostPath" in v:
            assert v["hostPath"]["path"].rstrip("/") not in ("", "/dev", "/var/lib/kubelet",
                                                             "/proc", "/sys"), v

    interposer = agent_path_flag(args, help_text, "--interposer")
    installers = [ic for ic in spec.get("initContainers", [])
                  if interposer.rsplit("/", 1)[1] in " ".join(ic.get("command", []) +
                                                              ic.get("args", []))]
    assert len(installers) == 1, "no init container installs the interposer"
    ic = installers[0]
    script = " ".join(ic.get("command", []) + ic.get("args", []))
    host_dir = interposer.rsplit("/", 1)[0]
    mounts = [m for m in ic["volumeMounts"]
              if vols[m["name"]].get("hostPath", {}).get("path", "").rstrip("/") == host_dir]
    assert len(mounts) == 1 and not mounts[0].get("readOnly"), \
        f"the init container does not write {host_dir} of the host"
    dest = mounts[0]["mountPath"].rstrip("/") + "/" + interposer.rsplit("/", 1)[1]
    assert re.search(r"mv -f \S+ " + re.escape(dest) + r"(\s|$)", script), \
        f"the init container does not rename a copy into {dest}: {script}"
    # The image holds the library there: the Dockerfile copies the build's
    # install of lib/elastic-gpu (src/vcuda/CMakeLists.txt) to that folder.
    src = re.search(r"cp (\S+) ", script).group(1)
    assert src == interposer, (src, interposer)
    assert "install(TARGETS egpu-vcuda LIBRARY DESTINATION lib/elastic-gpu)" in \
        (ROOT / "src" / "vcuda" / "CMakeLists.txt").read_text()
    copies = copies_from_build(stage("agent"))
    assert any(a.rstrip("/") == "/out/usr/local/lib/elastic-gpu" and b.rstrip("/") == host_dir
               for a, b in copies), copies


def test_agent_least_privilege(objs):
    """All egpu-agent is bound to is one ClusterRole granting exactly the
    calls its code makes (AGENT_NEEDS), without wildcards or names, and no
    namespaced role: everything needed is granted, nothing more."""
    ds, _ = agent_daemonset(objs)
    sa = ds["spec"]["template"]["spec"]["serviceAccountName"]
    rules = rules_of(objs, sa)
    assert rules, f"{sa} is bound to nothing"
    assert all(ns is None for _, ns in rules), "egpu-agent needs no namespaced role"
    rs = [r for r, _ in rules]
    for r in rs:
        for field in ("apiGroups", "resources", "verbs", "resourceNames"):
            assert "*" not in r.get(field, []), f"wildcard in {field}: {r}"
        assert not r.get("nonResourceURLs") and not r.get("resourceNames"), r
    missing = {n for n in AGENT_NEEDS if not allows(rs, *n)}
    assert not missing, f"egpu-agent lacks what its code uses: {sorted(missing)}"
    extra = granted(rs) - AGENT_NEEDS
    assert not extra, f"egpu-agent is granted more than its code uses: {sorted(extra)}"
    crbs = [b for b in find(objs, "ClusterRoleBinding") if bound_to(b, sa, NS)]
    assert len(crbs) == 1 and [s["name"] for s in crbs[0]["subjects"]] == [sa]


def test_agent_needs_match_its_code():
    """AGENT_NEEDS follows src/agent: each kube call there, by resource and
    verb, is in the table, and each entry of the table has a call."""
    calls = {
        "egpu_kube_list": "list", "egpu_kube_get": "get", "egpu_kube_create": "create",
        "egpu_kube_patch": "patch", "egpu_kube_delete": "delete", "egpu_kube_update": "update",
        "egpu_kube_watch": "watch", "egpu_kube_patch_status": "patch",
        "egpu_kube_update_status": "update",
    }
    resources = {"egpu_kube_gpus": (GROUP, "gpus"), "egpu_kube_pods": ("", "pods"),
                 "egpu_kube_resourceslices": ("resource.k8s.io", "resourceslices"),
                 "egpu_kube_resourceclaims": ("resource.k8s.io", "resourceclaims"),
                 "egpu_kube_nodes": ("", "nodes")}
    found = set()
    for f in sorted((ROOT / "src" / "agent").glob("*.c")):
        text = f.read_text()
        for m in re.finditer(r"\b(egpu_kube_[a-z_]+)\(\s*[^,]+,\s*&(egpu_kube_[a-z]+)", text):
            fn, res = m.group(1), m.group(2)
            assert fn in calls, f"{f.name}: {fn} on {res}: extend this test"
            assert res in resources, f"{f.name}: {fn} on {res}: extend this test"
            g, r = resources[res]
            found.add((g, r + ("/status" if fn.endswith("_status") else ""), calls[fn]))
        if re.search(r"\begpu_kube_event_post\(", text):
            found.add(("", "events", "create"))
        if "egpu_kube_informer_new(" in text:  # list + watch of its opts' .res
            for res in re.findall(r"\.res = &(egpu_kube_[a-z]+)", text):
                assert res in resources, f"{f.name}: an informer on {res}: extend this test"
                g, r = resources[res]
                found |= {(g, r, "list"), (g, r, "watch")}
    want = AGENT_NEEDS | AGENT_DRA_NEEDS
    assert found == want, sorted(found ^ want)


def test_agent_network_policy(objs):
    ds, c = agent_daemonset(objs)
    labels = ds["spec"]["template"]["metadata"]["labels"]
    pols = [p for p in find(objs, "NetworkPolicy", namespace=NS)
            if all(labels.get(k) == v for k, v in p["spec"]["podSelector"]["matchLabels"].items())]
    assert len(pols) == 1, "expected one NetworkPolicy selecting the agent pods"
    spec = pols[0]["spec"]
    assert "Ingress" in spec["policyTypes"]
    allowed = set()
    for rule in spec.get("ingress", []):
        assert rule.get("ports"), f"an ingress rule opens every port: {rule}"
        allowed |= {(p.get("protocol", "TCP"), p["port"]) for p in rule["ports"]}
    args = c.get("command", [])[1:] + c.get("args", [])
    assert allowed == {("TCP", int(flag(args, "--port") or AGENT_PORT_DEFAULT))}


def test_agent_flags_exist(objs):
    """Every flag and variable the DaemonSet gives egpu-agent is one its
    --help lists, and the binary accepts them with their values: it gets
    past its flags (a bad flag or value exits 2 first) and stops at NVML,
    which is not here."""
    _, c = agent_daemonset(objs)
    args = c.get("command", [])[1:] + c.get("args", [])
    help_text = agent_help()
    listed = set(re.findall(r"^\s+(?:-\w, )?(--[a-z][a-z0-9-]*)", help_text, re.M))
    assert "--port" in listed and "--alloc-root" in listed, "unexpected --help layout"
    assert f"default {AGENT_PORT_DEFAULT}" in help_text.split("--port", 1)[1].split("\n  --")[0]
    for a in args:
        if a.startswith("--"):
            assert a.split("=")[0] in listed, f"egpu-agent has no flag {a}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EGPU_")}
    for e in c.get("env", []):
        if not e["name"].startswith("NVIDIA_"):  # for the NVIDIA Container Toolkit
            assert e["name"] in help_text, f"egpu-agent --help names no {e['name']}"
        env[e["name"]] = e.get("value", "gpu-node-1")  # a fieldRef gives the node's name
    r = subprocess.run([agent_exe(), *args, "--nvml-library", "/nonexistent/libnvidia-ml.so.1"],
                       capture_output=True, text=True, timeout=20, env=env)
    assert r.returncode not in (0, 2), f"exit {r.returncode}: {r.stderr}"
    assert "/nonexistent/libnvidia-ml.so.1" in r.stderr, r.stderr


# --- the agent in DRA mode (deploy/agent-dra) -------------------------------------

def api_h(name):
    """The string macro name of include/egpu/api.h, its pieces (literals and
    other macros, e.g. "gpu." EGPU_API_GROUP) joined."""
    text = (ROOT / "include" / "egpu" / "api.h").read_text()
    m = re.search(rf"^#define {name}\s+(.+?)\s*(/\*.*)?$", text, re.M)
    assert m, f"api.h defines no {name}"
    out = ""
    for lit, ref in re.findall(r'"((?:[^"\\]|\\.)*)"|([A-Z_][A-Z0-9_]*)', m.group(1)):
        out += lit if not ref else api_h(ref)
    return out


def test_one_agent_mode_per_node(objs):
    """The device-plugin DaemonSet keeps off the nodes labelled for DRA mode,
    and the DRA one runs only there (the label of api.h), on GPU nodes."""
    label, dra = api_h("EGPU_LABEL_AGENT_MODE"), api_h("EGPU_LABEL_AGENT_MODE_DRA")
    assert (label, dra) == ("elasticgpu.io/agent-mode", "dra")
    dp, _ = agent_daemonset(objs)
    terms = dp["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms and all({"key": label, "operator": "NotIn", "values": [dra]}
                         in t["matchExpressions"] for t in terms), terms
    ds, c = agent_dra_daemonset(objs)
    spec = ds["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {**dp["spec"]["template"]["spec"]["nodeSelector"],
                                    label: dra}
    assert not spec.get("affinity")
    args = c.get("command", [])[1:] + c.get("args", [])
    assert flag(args, "--mode") == "dra"
    assert ds["metadata"]["namespace"] == NS
    assert all(ds["spec"]["template"]["metadata"]["labels"].get(k) == v
               for k, v in ds["spec"]["selector"]["matchLabels"].items())
    # The two DaemonSets' pods are told apart by their selectors.
    assert ds["spec"]["selector"]["matchLabels"] != dp["spec"]["selector"]["matchLabels"]


def test_agent_dra_daemonset(objs):
    """As the device-plugin DaemonSet: its image, probes, root with the same
    three capabilities, NODE_NAME; its own ServiceAccount, which is not the
    one trusted with elasticgpu.io/allocated (DRA mode marks no pod)."""
    dp, dpc = agent_daemonset(objs)
    ds, c = agent_dra_daemonset(objs)
    spec = ds["spec"]["template"]["spec"]
    assert [x["name"] for x in spec["containers"]] == ["egpu-agent"]
    assert c["command"] == dpc["command"] and c["image"] == dpc["image"]
    for ic in spec.get("initContainers", []):
        assert ic["image"] == c["image"], ic["name"]
    assert [ic["name"] for ic in spec["initContainers"]] == \
        [ic["name"] for ic in dp["spec"]["template"]["spec"]["initContainers"]]
    sa = spec["serviceAccountName"]
    assert sa == "egpu-agent-dra" and spec.get("automountServiceAccountToken") is True
    one(objs, "ServiceAccount", sa, NS)
    assert trusted_agent_user(objs) != f"system:serviceaccount:{NS}:{sa}"
    env = {e["name"]: e for e in c.get("env", [])}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    args = c.get("command", [])[1:] + c.get("args", [])
    assert flag(args, "--no-api") is None and flag(args, "--fake-gpus") is None
    port = int(flag(args, "--port") or AGENT_PORT_DEFAULT)
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        assert c[probe]["httpGet"]["path"] == path
        assert container_port(c, c[probe]["httpGet"]["port"]) == port
    assert c["securityContext"] == dpc["securityContext"]
    assert set(c["securityContext"]["capabilities"].get("add", [])) <= AGENT_CAPS
    for k in ("hostNetwork", "hostPID", "hostIPC"):
        assert not spec.get(k), k
    assert spec["tolerations"] == dp["spec"]["template"]["spec"]["tolerations"]


def test_agent_dra_mounts_cover_its_paths(objs):
    """Every host path egpu-agent --mode dra serves or writes (the registry
    dir, the DRAPlugin socket's dir, the CDI dir, the allocation root) is
    mounted writable from the host at the same path; the registration's
    endpoint is the kubelet's plugins dir of the driver (api.h's name)."""
    ds, c = agent_dra_daemonset(objs)
    spec = ds["spec"]["template"]["spec"]
    args = c.get("command", [])[1:] + c.get("args", [])
    help_text = agent_help()
    driver = api_h("EGPU_API_DRA_DRIVER")
    assert driver == "gpu.elasticgpu.io"
    paths = {name: agent_path_flag(args, help_text, name).rstrip("/")
             for name in ("--plugin-registry-dir", "--dra-socket", "--cdi-dir", "--alloc-root")}
    assert paths["--plugin-registry-dir"] == "/var/lib/kubelet/plugins_registry"
    assert paths["--dra-socket"] == f"/var/lib/kubelet/plugins/{driver}/dra.sock"
    paths["--dra-socket"] = paths["--dra-socket"].rsplit("/", 1)[0]
    for name, path in paths.items():
        found = host_path_at(spec, c, path)
        assert found, f"{name} {path} is not mounted from the host"
        host, m = found
        assert host == path, f"{name}: {path} in the container is {host} on the host"
        assert not m.get("readOnly"), f"{name} {path} is mounted read-only"
    # Nothing of device-plugin mode, nothing broad.
    mounted = {m["mountPath"].rstrip("/") for m in c["volumeMounts"]}
    assert not mounted & {"/var/lib/kubelet/device-plugins", "/var/lib/kubelet/pod-resources"}
    for v in spec["volumes"]:
        if "hostPath" in v:
            assert v["hostPath"]["path"].rstrip("/") not in (
                "", "/dev", "/var/lib/kubelet", "/var/lib/kubelet/plugins", "/proc", "/sys",
                "/var/run"), v


def test_agent_dra_least_privilege(objs):
    """egpu-agent-dra is bound to one ClusterRole granting exactly what DRA
    mode's code calls (AGENT_DRA_NEEDS), no wildcards, no names."""
    ds, _ = agent_dra_daemonset(objs)
    sa = ds["spec"]["template"]["spec"]["serviceAccountName"]
    rules = rules_of(objs, sa)
    assert rules and all(ns is None for _, ns in rules)
    rs = [r for r, _ in rules]
    for r in rs:
        for field in ("apiGroups", "resources", "verbs", "resourceNames"):
            assert "*" not in r.get(field, []), f"wildcard in {field}: {r}"
        assert not r.get("nonResourceURLs") and not r.get("resourceNames"), r
    assert granted(rs) == AGENT_DRA_NEEDS, sorted(granted(rs) ^ AGENT_DRA_NEEDS)
    crbs = [b for b in find(objs, "ClusterRoleBinding") if bound_to(b, sa, NS)]
    assert len(crbs) == 1 and [s["name"] for s in crbs[0]["subjects"]] == [sa]


def test_agent_dra_network_policy(objs):
    ds, c = agent_dra_daemonset(objs)
    labels = ds["spec"]["template"]["metadata"]["labels"]
    pols = [p for p in find(objs, "NetworkPolicy", namespace=NS)
            if all(labels.get(k) == v for k, v in p["spec"]["podSelector"]["matchLabels"].items())]
    assert len(pols) == 1, "expected one NetworkPolicy selecting the DRA agent pods"
    allowed = {(p.get("protocol", "TCP"), p["port"])
               for rule in pols[0]["spec"].get("ingress", []) for p in rule["ports"]}
    args = c.get("command", [])[1:] + c.get("args", [])
    assert allowed == {("TCP", int(flag(args, "--port") or AGENT_PORT_DEFAULT))}


def test_agent_dra_flags_exist(objs):
    """The DRA DaemonSet's flags are egpu-agent's and it takes them with their
    values: it gets past its flags (a bad one exits 2) and stops at NVML."""
    _, c = agent_dra_daemonset(objs)
    args = c.get("command", [])[1:] + c.get("args", [])
    listed = set(re.findall(r"^\s+(?:-\w, )?(--[a-z][a-z0-9-]*)", agent_help(), re.M))
    for a in args:
        if a.startswith("--"):
            assert a.split("=")[0] in listed, f"egpu-agent has no flag {a}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EGPU_")}
    env["NODE_NAME"] = "gpu-node-1"
    r = subprocess.run([agent_exe(), *args, "--nvml-library", "/nonexistent/libnvidia-ml.so.1"],
                       capture_output=True, text=True, timeout=20, env=env)
    assert r.returncode not in (0, 2), f"exit {r.returncode}: {r.stderr}"
    assert "/nonexistent/libnvidia-ml.so.1" in r.stderr, r.stderr


def test_device_classes(objs):
    """The share and whole-card DeviceClasses of api.h, each selecting by CEL
    the devices of the driver with the attribute type "gpu" that
    dra_slice.c publishes (testing the domain first); only the whole-card
    class carries extendedResourceName (Kubernetes 1.36 serves it:
    DRAExtendedResource beta, on)."""
    driver = api_h("EGPU_API_DRA_DRIVER")
    share, whole = api_h("EGPU_API_DRA_CLASS_SHARE"), api_h("EGPU_API_DRA_CLASS_WHOLE")
    classes = {o["metadata"]["name"]: o for o in find(objs, "DeviceClass")}
    assert sorted(classes) == sorted([share, whole])
    slice_c = (ROOT / "src" / "agent" / "dra_slice.c").read_text()
    assert re.search(r'set_attr\(attrs, "type", "string", json_string\("gpu"\)\)', slice_c)
    for name, o in classes.items():
        assert o["apiVersion"] == "resource.k8s.io/v1"
        (sel,) = o["spec"]["selectors"]
        expr = " ".join(sel["cel"]["expression"].split())
        assert f'device.driver == "{driver}"' in expr, expr
        assert f'"type" in device.attributes["{driver}"]' in expr, expr
        assert f'device.attributes["{driver}"].type == "gpu"' in expr, expr
        assert expr.index('"type" in') < expr.index(".type =="), "presence is tested first"
    assert classes[whole]["spec"]["extendedResourceName"] == GROUP + "/gpu"
    assert "extendedResourceName" not in classes[share]["spec"]
    notes = ROOT.parent / "shared" / "k8s-wire" / "dra" / "dra_notes.md"
    if notes.exists():
        assert re.search(r"extendedResourceName.*beta/on 1\.36", notes.read_text())


def test_kustomize_images_pin_by_digest(tmp_path):
    """docs/operator-guide.md's pinning: an overlay's images entries with
    digest: make every Elastic GPU container's image <name>@<digest>."""
    names = ["egpu-scheduler", "egpu-agent", "egpu-webhook", "egpu-controller"]
    digests = {n: "sha256:" + format(i + 10, "x") * 64 for i, n in enumerate(names)}
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(DEPLOY, tmp_path)],
        "images": [{"name": f"ghcr.io/elastic-gpu/{n}", "digest": d}
                   for n, d in digests.items()]}))
    images = {c["image"] for o in kustomize(tmp_path)
              for c in (o.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
                        + o.get("spec", {}).get("template", {}).get("spec", {})
                        .get("initContainers", []))
              if c["image"].startswith("ghcr.io/elastic-gpu/")}
    assert images == {f"ghcr.io/elastic-gpu/{n}@{d}" for n, d in digests.items()}


# Each port admits only whom it serves. The pod's own node (the
# kubelet's probes) is always admitted by a NetworkPolicy, so a rule names
# only the other callers.
PROMETHEUS_PEER = {"namespaceSelector": {},
                   "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}


def port_peers(pol):
    """{port: [peer, ...]} of a NetworkPolicy; a rule without "from" (open to
    every address) fails the test."""
    out = {}
    for rule in pol["spec"]["ingress"]:
        assert rule.get("from"), f"a rule admits anyone: {rule}"
        for p in rule["ports"]:
            out.setdefault(p["port"], []).extend(rule["from"])
    return out


def assert_no_pod_reaches(peers, pod_cidrs):
    """The peers admit no pod: ipBlocks only, each excepting the pod CIDRs of
    its address family."""
    for peer in peers:
        assert set(peer) == {"ipBlock"}, f"a pod selector reaches the port: {peer}"
        block = peer["ipBlock"]
        if block["cidr"] in ("0.0.0.0/0", "::/0"):
            fam = ":" in block["cidr"]
            assert set(block.get("except", [])) == {c for c in pod_cidrs if (":" in c) == fam}


def test_network_policies_admit_each_port_only_from_whom_it_serves(objs):
    web = port_peers(one(objs, "NetworkPolicy", "egpu-webhook", NS))
    assert set(web) == {9443, 9444}
    assert_no_pod_reaches(web[9443], ["10.244.0.0/16", "fd00:10:244::/56"])
    assert web[9444] == [PROMETHEUS_PEER]
    agent = port_peers(one(objs, "NetworkPolicy", "egpu-agent", NS))
    assert agent == {9400: [PROMETHEUS_PEER]}
    controller = port_peers(one(objs, "NetworkPolicy", "egpu-controller", NS))
    assert controller == {9090: [PROMETHEUS_PEER]}
    # The scheduler's health port; kube-scheduler's secure port (its own
    # authentication) stays open to its probes.
    sched = one(objs, "NetworkPolicy", "egpu-scheduler", NS)["spec"]["ingress"]
    assert port_peers({"spec": {"ingress": [r for r in sched if r.get("from")]}}) == {
        8889: [PROMETHEUS_PEER]}
    assert [r for r in sched if not r.get("from")] == [
        {"ports": [{"port": KUBE_SCHEDULER_SECURE_PORT, "protocol": "TCP"}]}]
