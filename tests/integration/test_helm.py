"""deploy/helm/elastic-gpu, the Helm chart, held to the kustomize base.

- `helm template` with the default values renders the objects `kubectl
  kustomize deploy/` does: the same kinds, names and namespaces, and the
  same contents, with only these differences, each documented in the
  chart's README.md:
    * Helm's standard labels (app.kubernetes.io/managed-by, instance and
      version, helm.sh/chart) on every templated object, and instance on
      pod templates;
    * the CRDs come from the chart's crds/ folder, which Helm never
      templates, so they lack the app.kubernetes.io/part-of label kustomize
      adds to everything;
    * the admission policy and its binding have no metadata.namespace, where
      kustomize writes "" (the API server's spelling of none);
    * CEL expressions are compared with their whitespace collapsed: kustomize
      writes the policy's folded (>-) expressions back with a blank line
      added after each more-indented line, where Helm keeps the file's
      value; CEL ignores whitespace.
  The scheduler ConfigMap has the name kustomize's configMapGenerator gives
  it, hash included.
- The chart's crds/ holds exactly deploy/crds's files, byte for byte.
- `helm lint --strict` passes, with the defaults and with every value set.
- Disabling a component (scheduler, agent, webhook, controller, the
  admission policy, the priority classes, the Namespace) removes exactly
  the objects of its deploy/ folder and leaves the others as they were.
- A value changes exactly the fields it should: the images' registry and
  tag and each component's repository (the five Elastic GPU containers,
  nothing else; a component's repository only its own), the
  agent's nodeSelector, the scheduler's node and card policy (egpu-scheduler
  flags, which the binary accepts), the agent's --context-extra-mib
  (agent.contextExtraMib: its one argument, which egpu-agent accepts; a
  value it would refuse fails the rendering), and the namespace (every
  namespaced object and every place that spells it).
- scheduler.mode=main renders deploy/ with the Component
  deploy/scheduler/main-scheduler (and with each webhook certificates
  Component beside it), field by field; another mode fails.
- mode=dra renders deploy/ with the Component deploy/dra (beside each
  certificates Component and main-scheduler), field by field: --mode dra at
  the end of egpu-webhook's and egpu-controller's arguments and nothing else;
  device-plugin, the default, renders no --mode; another mode fails, as the
  binaries refuse it.
- scheduler.podsWithoutGpu=place adds egpu-scheduler --pods-without-gpu
  place and takes managedResources out of kube-scheduler's extender entry,
  its NodeResourcesFit ignoring elasticgpu.io/gpu-memory and elasticgpu.io/dra instead, and
  nothing else; pass is the default; another value fails, and so does place
  with mode main.
- scheduler.targetWorkload renders its document into a ConfigMap (named by
  its hash) mounted read-only and passed with --target-workload, and
  nothing else; egpu-scheduler reads the rendered file; a document of the
  wrong shape fails the rendering.
- values.schema.json makes every value with a fixed set of values an enum
  (the literals the templates compare it with; the policies egpu-scheduler
  takes) and every switch a boolean: each allowed value renders, anything
  else fails naming the value's path and the allowed ones.
- Chart.yaml's appVersion is the images' tag of deploy/kustomization.yaml
  and CMakeLists.txt's version; the chart's version is that version. Each
  component's repository ends in the name of its image in deploy/
  (test_deploy.py holds those to deploy/Dockerfile's targets).

helm and kubectl come from tools/bin (`make deps`), else PATH; a missing one
skips these tests, except under CI=true, where it fails them.
"""
import copy
import json
import os
import re
import subprocess

import pytest
import yaml

from conftest import ROOT, tool
from test_deploy import PROMETHEUS_PEER

DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm" / "elastic-gpu"
NS = "elastic-gpu-system"
RELEASE = "egpu"
HELM_LABELS = {"app.kubernetes.io/managed-by", "app.kubernetes.io/instance",
               "app.kubernetes.io/version", "helm.sh/chart"}
PART_OF = "app.kubernetes.io/part-of"
# component value -> the image name deploy/'s manifests use (set by
# kustomization.yaml's images entries), one per deploy/Dockerfile target
IMAGES = {"scheduler": "egpu-scheduler", "agent": "egpu-agent", "webhook": "egpu-webhook",
          "controller": "egpu-controller"}
EGPU_CONTAINERS = {"egpu-scheduler", "egpu-webhook", "egpu-controller", "egpu-agent",
                   "install-interposer", "install-seccomp-profile"}
# value that disables a component -> its folder under deploy/ (or file)
COMPONENTS = {
    "scheduler.enabled": "scheduler",
    "agent.enabled": "agent",
    "agentDra.enabled": "agent-dra",
    "webhook.enabled": "webhook",
    "controller.enabled": "controller",
    "admissionPolicy.enabled": "admission",
    "priorityClasses.enabled": "budgets",
    "namespace.create": "namespace.yaml",
}


# --- helpers ------------------------------------------------------------------

def run(argv):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{' '.join(argv)} failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def load(text):
    return [d for d in yaml.safe_load_all(text) if d]


def kustomize(path):
    return load(run([tool("kubectl"), "kustomize", str(path)]))


def helm_template(*sets, crds=True, values=None):
    """helm template with --set of each of sets, and values (a path) as -f."""
    argv = [tool("helm"), "template", RELEASE, str(CHART)]
    if crds:
        argv.append("--include-crds")
    if values is not None:
        argv += ["-f", str(values)]
    for s in sets:
        argv += ["--set", s]
    return load(run(argv))


def helm_fails(*sets, values=None, skip_schema=False):
    """helm template's error output for values it must refuse; skip_schema:
    without values.schema.json (--skip-schema-validation), so that the
    templates' own checks answer."""
    argv = [tool("helm"), "template", RELEASE, str(CHART)]
    if skip_schema:
        argv.append("--skip-schema-validation")
    if values is not None:
        argv += ["-f", str(values)]
    for s in sets:
        argv += ["--set", s]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0, (sets, r.stdout[-2000:])
    return r.stderr


def key(o):
    return (o["kind"], o["metadata"]["name"], o["metadata"].get("namespace") or None)


def by_key(objs):
    out = {}
    for o in objs:
        assert key(o) not in out, f"{key(o)} rendered twice"
        out[key(o)] = o
    return out


def squash_cel(o):
    """o with the whitespace of every CEL expression collapsed."""
    if isinstance(o, dict):
        return {k: re.sub(r"\s+", " ", v) if k == "expression" and isinstance(v, str)
                else squash_cel(v) for k, v in o.items()}
    if isinstance(o, list):
        return [squash_cel(v) for v in o]
    return o


def strip_helm(o):
    """o without the documented differences of a Helm rendering."""
    o = squash_cel(copy.deepcopy(o))
    metas = [o["metadata"]]
    tmpl = (o.get("spec") or {}).get("template")
    if isinstance(tmpl, dict) and "metadata" in tmpl:
        metas.append(tmpl["metadata"])
    for m in metas:
        labels = m.get("labels") or {}
        for k in HELM_LABELS:
            labels.pop(k, None)
    if o["metadata"].get("namespace") == "":
        del o["metadata"]["namespace"]
    if o["kind"] == "CustomResourceDefinition":
        o["metadata"].get("labels", {}).pop(PART_OF, None)
        if not o["metadata"].get("labels"):
            o["metadata"].pop("labels", None)
    return o


def diff(a, b, path=""):
    """The paths at which a and b differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                out.append(f"{path}.{k}")
            else:
                out += diff(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [path]
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out += diff(x, y, f"{path}[{i}]")
        return out
    return [] if a == b else [path]


def changes(before, after):
    """{key: [paths]} of every object that differs; added or removed objects too."""
    b, a = by_key(before), by_key(after)
    out = {}
    for k in set(b) | set(a):
        if k not in b or k not in a:
            out[k] = ["<added>" if k in a else "<removed>"]
            continue
        d = diff(b[k], a[k])
        if d:
            out[k] = d
    return out


def pod_specs(o):
    spec = o.get("spec") or {}
    if "template" in spec and isinstance(spec["template"], dict):
        return [spec["template"]["spec"]]
    return []


@pytest.fixture(scope="module")
def base():
    return kustomize(DEPLOY)


@pytest.fixture(scope="module")
def chart():
    return helm_template()


# --- the tests ----------------------------------------------------------------

def test_default_values_render_the_kustomize_base(base, chart):
    want = {k: strip_helm(o) for k, o in by_key(base).items()}
    got = {k: strip_helm(o) for k, o in by_key(chart).items()}
    assert sorted(got, key=str) == sorted(want, key=str)
    for k in want:
        assert got[k] == want[k], f"{k} differs at {diff(want[k], got[k])}"
    # The documented differences are really there, and only on templated objects.
    for o in chart:
        labels = o["metadata"].get("labels") or {}
        if o["kind"] == "CustomResourceDefinition":
            assert not HELM_LABELS & set(labels) and PART_OF not in labels
        else:
            assert labels[PART_OF] == "elastic-gpu"
            assert labels["app.kubernetes.io/managed-by"] == "Helm"
            assert labels["app.kubernetes.io/instance"] == RELEASE
    cms = [o for o in chart if o["kind"] == "ConfigMap"]
    assert len(cms) == 1 and re.fullmatch(r"elastic-gpu-scheduler-config-[a-z0-9]{10}",
                                          cms[0]["metadata"]["name"])


def test_crds_are_deploy_crds():
    ours = sorted(p.name for p in (CHART / "crds").iterdir())
    theirs = sorted(p.name for p in (DEPLOY / "crds").glob("*.yaml")
                    if p.name != "kustomization.yaml")
    assert ours == theirs
    for name in ours:
        assert (CHART / "crds" / name).read_bytes() == (DEPLOY / "crds" / name).read_bytes(), \
            f"crds/{name} differs from deploy/crds/{name}: copy it again"
    # and they render only with the CRDs included
    assert not [o for o in helm_template(crds=False) if o["kind"] == "CustomResourceDefinition"]


def test_helm_lint_strict():
    helm = tool("helm")
    run([helm, "lint", "--strict", str(CHART)])
    run([helm, "lint", "--strict", str(CHART), "--set", "image.tag=v9.9.9",
         "--set", "scheduler.nodePolicy=fgd", "--set", "scheduler.cardPolicy=spread",
         "--set", "namespace.name=gpu", "--set", "agent.nodeSelector.gpu=yes",
         "--set", "agent.contextExtraMib=96", "--set", "scheduler.mode=main",
         "--set", "mode=dra"])
    run([helm, "lint", "--strict", str(CHART), "--set", "scheduler.podsWithoutGpu=place",
         "--set", "scheduler.targetWorkload.apiVersion=elasticgpu.io/v1alpha1",
         "--set", "scheduler.targetWorkload.kind=TargetWorkload",
         "--set", "scheduler.targetWorkload.typicalPods[0].cpuMilli=2000",
         "--set", "scheduler.targetWorkload.typicalPods[0].weight=1"])
    run([helm, "lint", "--strict", str(CHART)] +
        [a for k in COMPONENTS for a in ("--set", f"{k}=false")])


def test_chart_version_matches_images_and_build():
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    kz = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert sorted(i["name"] for i in kz["images"]) == sorted(IMAGES.values())
    tags = {i["newTag"] for i in kz["images"]}
    cmake = re.search(r"project\(elastic_gpu VERSION ([0-9.]+)",
                      (ROOT / "CMakeLists.txt").read_text()).group(1)
    assert tags == {meta["appVersion"]} and meta["appVersion"] == f"v{cmake}"
    assert meta["version"] == cmake
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for comp, name in IMAGES.items():
        kz_name = next(i["newName"] for i in kz["images"] if i["name"] == name)
        assert kz_name == f"{values['image']['registry']}/{values[comp]['image']['repository']}"
        assert kz_name.rsplit("/", 1)[1] == name


@pytest.mark.parametrize("value", sorted(COMPONENTS))
def test_disabling_a_component_removes_exactly_its_objects(chart, value):
    src = DEPLOY / COMPONENTS[value]
    own = {(o["kind"], o["metadata"]["name"])
           for o in (kustomize(src) if src.is_dir() else load(src.read_text()))}
    assert own
    rest = helm_template(f"{value}=false")
    before = {k: o for k, o in by_key(chart).items() if (k[0], k[1]) not in own}
    assert len(before) == len(chart) - len(own)
    assert by_key(rest) == before


def test_image_values_change_exactly_the_images(chart):
    after = helm_template("image.registry=registry.example.com", "image.tag=v0.2.0-rc1",
                          *[f"{c}.image.repository=team/{n}" for c, n in IMAGES.items()])
    ch = changes(chart, after)
    want = {}
    for o in chart:
        paths = []
        for field in ("containers", "initContainers"):
            for i, c in enumerate(pod_specs(o)[0].get(field, []) if pod_specs(o) else []):
                if c["name"] in EGPU_CONTAINERS:
                    paths.append(f".spec.template.spec.{field}[{i}].image")
        if paths:
            want[key(o)] = sorted(paths)
    assert {k: sorted(v) for k, v in ch.items()} == want
    # the DRA agent's DaemonSet (deploy/agent-dra) runs egpu-agent and its two init
    # containers again
    assert len([p for v in want.values() for p in v]) == len(EGPU_CONTAINERS) + 3
    images = {c["image"] for o in after for s in pod_specs(o)
              for c in s.get("containers", []) + s.get("initContainers", [])}
    assert images == {f"registry.example.com/team/{n}:v0.2.0-rc1" for n in IMAGES.values()} | \
        {"registry.k8s.io/kube-scheduler:v1.32.0"}
    # A component's repository changes its own containers' images alone.
    for comp, name in IMAGES.items():
        one = helm_template(f"{comp}.image.repository=team/x")
        ch = changes(chart, one)
        own = {f"egpu-{comp}"} | ({"egpu-agent-dra"} if comp == "agent" else set())
        assert ch and {k[1] for k in ch} == own, (comp, ch)
        assert all(p.endswith(".image") for v in ch.values() for p in v), ch
    # kube-scheduler's own image is a value of its own
    ks = helm_template("scheduler.kubeScheduler.image.tag=v1.35.2")
    assert list(changes(chart, ks).values()) == [[".spec.template.spec.containers[1].image"]]


def test_node_selector_changes_only_the_agent(chart):
    after = helm_template("agent.nodeSelector.elasticgpu\\.io/gpu-node=null",
                          "agent.nodeSelector.node\\.example\\.com/gpu=a100")
    ch = changes(chart, after)
    assert list(ch) == [("DaemonSet", "egpu-agent", NS)]
    assert all(p.startswith(".spec.template.spec.nodeSelector.") for p in ch[list(ch)[0]]), ch
    ds = by_key(after)[("DaemonSet", "egpu-agent", NS)]
    assert ds["spec"]["template"]["spec"]["nodeSelector"] == {"node.example.com/gpu": "a100"}


def test_dra_node_selector_changes_only_the_dra_agent(chart):
    """agentDra.nodeSelector places the DRA agent alone; its default is the
    GPU nodes labelled elasticgpu.io/agent-mode=dra, which the device-plugin
    agent's NotIn affinity keeps it off."""
    ds = by_key(chart)[("DaemonSet", "egpu-agent-dra", NS)]
    assert ds["spec"]["template"]["spec"]["nodeSelector"] == {
        "elasticgpu.io/gpu-node": "true", "elasticgpu.io/agent-mode": "dra"}
    dp = by_key(chart)[("DaemonSet", "egpu-agent", NS)]
    (term,) = dp["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "elasticgpu.io/agent-mode", "operator": "NotIn",
                                         "values": ["dra"]}]
    after = helm_template("agentDra.nodeSelector.node\\.example\\.com/dra=yes")
    ch = changes(chart, after)
    assert list(ch) == [("DaemonSet", "egpu-agent-dra", NS)]
    assert all(p.startswith(".spec.template.spec.nodeSelector.") for p in ch[list(ch)[0]]), ch


def test_policies_change_only_the_scheduler_flags(chart, build_dir):
    after = helm_template("scheduler.nodePolicy=fgd", "scheduler.cardPolicy=best-fit")
    key_ = ("Deployment", "egpu-scheduler", NS)
    assert changes(chart, after) == {key_: [".spec.template.spec.containers[0].args"]}
    old = by_key(chart)[key_]["spec"]["template"]["spec"]["containers"][0]["args"]
    new = by_key(after)[key_]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert new == old + ["--node-policy", "fgd", "--card-policy", "best-fit"]
    assert "--node-policy" not in old and "--card-policy" not in old
    # egpu-scheduler takes these names; a wrong one it refuses.
    exe = str(build_dir / "src/scheduler/egpu-scheduler")
    for args, ok in ((["--node-policy", "fgd", "--card-policy", "best-fit"], True),
                     (["--node-policy", "fastest"], False)):
        r = subprocess.run([exe, *args, "--help"], capture_output=True, text=True, timeout=30)
        assert (r.returncode == 0) == ok, (args, r.returncode, r.stderr)


def test_namespace_value_moves_every_namespaced_object(chart):
    after = helm_template("namespace.name=gpu-team")
    text = yaml.safe_dump_all(after)
    assert NS not in text
    for o in after:
        ns = o["metadata"].get("namespace")
        if key(o) == ("RoleBinding", "elastic-gpu-kube-scheduler-auth-reader", "kube-system"):
            continue
        assert ns in (None, "gpu-team"), key(o)
    # the scheduler ConfigMap's hash changes with the namespace it names
    unhashed = lambda k: (k[0], re.sub(r"-[a-z0-9]{10}$", "", k[1]) if k[0] == "ConfigMap" else k[1])
    moved = {unhashed(k) for k in by_key(after) if k[2] == "gpu-team"}
    before = {unhashed(k) for k in by_key(chart) if k[2] == NS}
    assert moved == before
    assert ("Namespace", "gpu-team", None) in by_key(after)


@pytest.mark.parametrize("mode,component", [("self-signed", "webhook/self-signed"),
                                            ("cert-manager", "webhook/cert-manager")])
def test_webhook_certificates_render_the_component(mode, component, tmp_path):
    """webhook.certificates=self-signed (cert-manager) renders deploy/ with the
    kustomize Component deploy/webhook/self-signed (cert-manager): the same
    objects, field by field; secret, the default, is the base alone."""
    rel = os.path.relpath(DEPLOY, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {rel}\ncomponents:\n  - {rel}/{component}\n")
    want = {k: strip_helm(o) for k, o in by_key(kustomize(tmp_path)).items()}
    got = {k: strip_helm(o) for k, o in by_key(helm_template(f"webhook.certificates={mode}")).items()}
    assert sorted(got, key=str) == sorted(want, key=str)
    for k in want:
        assert got[k] == want[k], f"{k} differs at {diff(want[k], got[k])}"
    moved = helm_template(f"webhook.certificates={mode}", "namespace.name=gpu-team")
    assert NS not in yaml.safe_dump_all(moved)


def agent_args(objs, name="egpu-agent"):
    ds = by_key(objs)[("DaemonSet", name, NS)]
    (c,) = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "egpu-agent"]
    return c["args"]


def test_context_extra_mib_changes_only_the_agent_flag(base, chart, build_dir):
    """agent.contextExtraMib is egpu-agent --context-extra-mib: its default is
    deploy/agent's, it changes that one argument and nothing else, the agent
    takes what it renders, and a value the agent would refuse fails the
    rendering instead of becoming a default."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    old = agent_args(chart)
    i = old.index("--context-extra-mib") + 1
    old_dra = agent_args(chart, "egpu-agent-dra")  # DRA mode takes the same figure
    j = old_dra.index("--context-extra-mib") + 1
    assert old_dra[j] == old[i]
    assert agent_args(base)[i - 1:i + 1] == ["--context-extra-mib",
                                             str(values["agent"]["contextExtraMib"])]
    exe = str(build_dir / "src/agent/egpu-agent")
    for v, want in (("96", "96"), ("65536", "65536"), ("0", "0"), ("007", "7")):
        for how in ("--set", "--set-string"):
            after = load(run([tool("helm"), "template", RELEASE, str(CHART), "--include-crds", how,
                              f"agent.contextExtraMib={v}"]))
            ch = changes(chart, after)
            if want == old[i]:
                assert ch == {}, (v, ch)
                continue
            assert ch == {("DaemonSet", "egpu-agent", NS):
                          [f".spec.template.spec.containers[0].args[{i}]"],
                          ("DaemonSet", "egpu-agent-dra", NS):
                          [f".spec.template.spec.containers[0].args[{j}]"]}, (v, ch)
            new = agent_args(after)
            assert new[:i] + new[i + 1:] == old[:i] + old[i + 1:] and new[i] == want, (v, new)
            assert agent_args(after, "egpu-agent-dra")[j] == want
        r = subprocess.run([exe, "--context-extra-mib", want, "--help"], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, (want, r.stderr)
    for bad in ("65537", "-1", "1.5", "96MiB", ""):
        r = subprocess.run([tool("helm"), "template", RELEASE, str(CHART), "--set-string",
                            f"agent.contextExtraMib={bad}"], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode != 0, bad
        assert f'agent.contextExtraMib is "{bad}": expected MiB, a whole number in 0..65536' \
            in r.stderr, r.stderr
        a = subprocess.run([exe, "--context-extra-mib", bad, "--help"], capture_output=True,
                           text=True, timeout=30)
        assert a.returncode == 2, (bad, a.stdout)  # egpu-agent refuses it too


@pytest.mark.parametrize("certs", ["secret", "self-signed", "cert-manager"])
def test_scheduler_mode_main_renders_the_component(certs, tmp_path):
    """scheduler.mode=main renders deploy/ with the kustomize Component
    deploy/scheduler/main-scheduler (and the webhook certificates' Component
    beside it), field by field, and with another namespace names it
    everywhere, the extender stanza's URL included."""
    rel = os.path.relpath(DEPLOY, tmp_path)
    comps = ["scheduler/main-scheduler"] + ([] if certs == "secret" else [f"webhook/{certs}"])
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {rel}\ncomponents:\n" + "".join(f"  - {rel}/{c}\n" for c in comps))
    sets = ["scheduler.mode=main", f"webhook.certificates={certs}"]
    want = {k: strip_helm(o) for k, o in by_key(kustomize(tmp_path)).items()}
    got = {k: strip_helm(o) for k, o in by_key(helm_template(*sets)).items()}
    assert sorted(got, key=str) == sorted(want, key=str)
    for k in want:
        assert got[k] == want[k], f"{k} differs at {diff(want[k], got[k])}"
    moved = helm_template(*sets, "namespace.name=gpu-team")
    assert NS not in yaml.safe_dump_all(moved)
    (cm,) = [o for o in moved if o["kind"] == "ConfigMap"]
    (ext,) = yaml.safe_load(cm["data"]["extenders.yaml"])["extenders"]
    assert ext["urlPrefix"] == "https://egpu-scheduler.gpu-team.svc:8888"
    assert ext["tlsConfig"]["serverName"] == "egpu-scheduler.gpu-team.svc"


def test_scheduler_mode_is_checked(chart):
    """second is the default; main keeps the policy values; anything else
    fails the rendering."""
    assert by_key(helm_template("scheduler.mode=second")) == by_key(chart)
    main = by_key(helm_template("scheduler.mode=main", "scheduler.nodePolicy=fgd"))
    dep = main[("Deployment", "egpu-scheduler", NS)]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--node-policy") + 1] == "fgd" and "--tls-cert" in args
    err = helm_fails("scheduler.mode=both")
    assert "at '/scheduler/mode': value must be one of 'second', 'main'" in err, err
    err = helm_fails("scheduler.mode=both", skip_schema=True)
    assert 'scheduler.mode is "both": expected second or main' in err, err


def overlay(tmp_path, components):
    """An overlay of deploy/ in tmp_path with deploy/'s components (paths
    relative to deploy/), in that order."""
    rel = os.path.relpath(DEPLOY, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {rel}\ncomponents:\n" + "".join(f"  - {rel}/{c}\n" for c in components))
    return tmp_path


@pytest.mark.parametrize("sets,components", [
    ([], []),
    (["webhook.certificates=self-signed"], ["webhook/self-signed"]),
    (["webhook.certificates=cert-manager"], ["webhook/cert-manager"]),
    (["scheduler.mode=main"], ["scheduler/main-scheduler"]),
])
def test_mode_dra_renders_the_component(sets, components, tmp_path):
    """mode=dra renders deploy/ with the kustomize Component deploy/dra (after
    the other values' Components), field by field: egpu-webhook's and
    egpu-controller's arguments end in --mode dra, egpu-scheduler's in --dra,
    and nothing else differs from the same values in device-plugin mode."""
    want = {k: strip_helm(o)
            for k, o in by_key(kustomize(overlay(tmp_path, components + ["dra"]))).items()}
    dra = helm_template("mode=dra", *sets)
    got = {k: strip_helm(o) for k, o in by_key(dra).items()}
    assert sorted(got, key=str) == sorted(want, key=str)
    for k in want:
        assert got[k] == want[k], f"{k} differs at {diff(want[k], got[k])}"
    before = helm_template(*sets)
    ch = changes(before, dra)
    assert set(ch) == {("Deployment", "egpu-webhook", NS),
                       ("Deployment", "egpu-controller", NS),
                       ("Deployment", "egpu-scheduler", NS)}, ch
    for k in ch:
        c, old = [next(x for x in by_key(d)[k]["spec"]["template"]["spec"]["containers"]
                       if x["name"] == k[1]) for d in (dra, before)]
        more = ["--dra"] if k[1] == "egpu-scheduler" else ["--mode", "dra"]
        assert c["args"] == old["args"] + more, (k, c["args"])
        assert "EGPU_MODE" not in {e["name"] for e in c.get("env", [])}
        assert {**c, "args": old["args"]} == old, k


def test_mode_is_checked(chart, build_dir):
    """device-plugin is the default and renders no --mode (the base); dra is a
    value both binaries take; anything else fails the rendering, with the
    schema and without it, as both binaries refuse it."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["mode"] == "device-plugin"
    assert by_key(helm_template("mode=device-plugin")) == by_key(chart)
    for name in ("egpu-webhook", "egpu-controller"):
        (c,) = by_key(chart)[("Deployment", name, NS)]["spec"]["template"]["spec"]["containers"]
        assert "--mode" not in c["args"] and "EGPU_MODE" not in str(c.get("env"))
    err = helm_fails("mode=DRA")
    assert "at '/mode': value must be one of 'device-plugin', 'dra'" in err, err
    err = helm_fails("mode=both", skip_schema=True)
    assert 'mode is "both": expected device-plugin or dra' in err, err
    for exe in ("webhook/egpu-webhook", "controller/egpu-controller"):
        for v, rc in (("dra", 0), ("device-plugin", 0), ("both", 2)):
            r = subprocess.run([str(build_dir / "src" / exe), "--mode", v, "--help"],
                               capture_output=True, text=True, timeout=30)
            assert r.returncode == rc, (exe, v, r.returncode, r.stderr)


def schema_enums(node, path=""):
    """{values path "a.b": its enum} and [paths of the booleans] of values.schema.json."""
    enums, bools = {}, []
    if "enum" in node:
        enums[path] = node["enum"]
    if node.get("type") == "boolean":
        bools.append(path)
    for k, sub in node.get("properties", {}).items():
        e, b = schema_enums(sub, f"{path}.{k}" if path else k)
        enums.update(e)
        bools += b
    return enums, bools


def test_every_enumerated_value_is_checked(build_dir):
    """values.schema.json makes every value that takes one
    of a fixed set an enum and every switch a boolean, so `--set
    webhook.certificates=bogus` (or certmanager) and
    `scheduler.nodePolicy=pack` fail naming the value and the allowed ones,
    instead of rendering the default with status 0. Each enum is what the
    templates compare the value with (every `eq .Values.X "..."` of the
    templates is an enum of the schema that holds its literal) and what the
    binary takes (the policies are egpu-scheduler's); each allowed value
    renders."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    enums, bools = schema_enums(schema)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    # Every literal the templates compare a value with is allowed by the schema.
    compared = {}
    for f in (CHART / "templates").rglob("*"):
        if f.is_file():
            for v, lit in re.findall(r'\beq \.Values\.([A-Za-z.]+) "([^"]*)"', f.read_text()):
                compared.setdefault(v, set()).add(lit)
    assert compared, "no comparison found in the templates"
    for v, lits in compared.items():
        assert v in enums, f"the templates compare {v} with {sorted(lits)}; the schema has no enum"
        assert lits <= set(enums[v]), (v, lits, enums[v])
    assert set(enums) >= {"mode", "webhook.certificates", "scheduler.nodePolicy",
                          "scheduler.cardPolicy", "scheduler.mode", "scheduler.podsWithoutGpu",
                          "image.pullPolicy"}
    # The policies are the names egpu-scheduler takes (its error lists them).
    r = subprocess.run([str(build_dir / "src/scheduler/egpu-scheduler"), "--node-policy", "pack"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    allowed = re.search(r"allowed: ([a-z, -]+)", r.stderr).group(1).split(", ")
    for v in ("scheduler.nodePolicy", "scheduler.cardPolicy"):
        assert enums[v] == [""] + allowed, (v, enums[v], allowed)
    assert enums["image.pullPolicy"] == ["Always", "IfNotPresent", "Never"]
    # Each default is allowed, each allowed value renders, anything else fails.
    for v, allowed_values in enums.items():
        default = values
        for part in v.split("."):
            default = default[part]
        assert default in allowed_values, (v, default)
        for ok in allowed_values:
            if ok != default:
                run([tool("helm"), "template", RELEASE, str(CHART), "--set-string", f"{v}={ok}"])
        shown = ", ".join(f"'{a}'" for a in allowed_values)
        for bad in ("bogus", "certmanager", "pack"):
            err = helm_fails(f"{v}={bad}")
            path = "/" + v.replace(".", "/")
            assert f"at '{path}': value must be one of {shown}" in err, err
    for v in bools:
        assert v.endswith(".enabled") or v == "namespace.create", v
        err = helm_fails(f"{v}=flase")
        assert f"at '/{v.replace('.', '/')}': got string, want boolean" in err, err
    assert set(COMPONENTS) <= set(bools)


# --- pods without GPUs and the target workload ----------------------------------

SCHED = ("Deployment", "egpu-scheduler", NS)


def scheduler_args(objs):
    return by_key(objs)[SCHED]["spec"]["template"]["spec"]["containers"][0]["args"]


def kube_scheduler_config(objs):
    """(the ConfigMap's key, the KubeSchedulerConfiguration it holds)."""
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap"
             and o["metadata"]["name"].startswith("elastic-gpu-scheduler-config-")]
    return key(cm), yaml.safe_load(cm["data"]["scheduler-config.yaml"])


def test_pods_without_gpu_place_drops_managed_resources(chart, build_dir):
    """scheduler.podsWithoutGpu=place: egpu-scheduler --pods-without-gpu place,
    and kube-scheduler's extender entry without managedResources (it would
    call the extender only for pods asking one of them), its NodeResourcesFit
    ignoring what ignoredByScheduler ignored; nothing else changes. pass is
    the default; another value fails, as egpu-scheduler would refuse it; so
    does place with mode main."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["scheduler"]["podsWithoutGpu"] == "pass"
    assert by_key(helm_template("scheduler.podsWithoutGpu=pass")) == by_key(chart)
    after = helm_template("scheduler.podsWithoutGpu=place")
    old_cm, old = kube_scheduler_config(chart)
    new_cm, new = kube_scheduler_config(after)
    # The configuration's ConfigMap is renamed (its hash), so the pods roll.
    assert old_cm != new_cm
    assert changes(chart, after) == {
        SCHED: [".spec.template.spec.containers[0].args",
                ".spec.template.spec.volumes[0].configMap.name"],
        old_cm: ["<removed>"], new_cm: ["<added>"]}
    assert scheduler_args(after) == scheduler_args(chart) + ["--pods-without-gpu", "place"]
    dep = by_key(after)[SCHED]["spec"]["template"]["spec"]
    assert dep["volumes"][0]["configMap"]["name"] == new_cm[1]
    # The extender entry: the same but for managedResources.
    (old_ext,), (new_ext,) = old["extenders"], new["extenders"]
    assert old_ext["managedResources"] and "managedResources" not in new_ext
    assert new_ext == {k: v for k, v in old_ext.items() if k != "managedResources"}
    # What ignoredByScheduler said, NodeResourcesFit says now.
    ignored = [m["name"] for m in old_ext["managedResources"] if m["ignoredByScheduler"]]
    assert ignored == ["elasticgpu.io/gpu-memory", "elasticgpu.io/dra"]
    (old_prof,), (new_prof,) = old["profiles"], new["profiles"]
    assert "pluginConfig" not in old_prof
    assert new_prof["pluginConfig"] == [{"name": "NodeResourcesFit",
                                         "args": {"ignoredResources": ignored}}]
    assert {k: v for k, v in new_prof.items() if k != "pluginConfig"} == old_prof
    rest = lambda c: {k: v for k, v in c.items() if k not in ("extenders", "profiles")}
    assert rest(new) == rest(old)
    # egpu-scheduler takes the rendered flag, and refuses what the chart refuses.
    exe = str(build_dir / "src/scheduler/egpu-scheduler")
    r = subprocess.run([exe, *scheduler_args(after), "--help"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    for bad in ("maybe", "PLACE", "true", ""):
        err = helm_fails(f"scheduler.podsWithoutGpu={bad}")
        assert "at '/scheduler/podsWithoutGpu': value must be one of 'pass', 'place'" in err, err
        err = helm_fails(f"scheduler.podsWithoutGpu={bad}", skip_schema=True)
        assert f'scheduler.podsWithoutGpu is "{bad}": expected pass or place' in err, err
        if bad:
            a = subprocess.run([exe, "--pods-without-gpu", bad, "--help"], capture_output=True,
                               text=True, timeout=30)
            assert a.returncode == 2, (bad, a.stdout)
    err = helm_fails("scheduler.podsWithoutGpu=place", "scheduler.mode=main")
    assert 'scheduler.podsWithoutGpu is "place" with scheduler.mode main' in err, err


WORKLOAD = {"apiVersion": "elasticgpu.io/v1alpha1", "kind": "TargetWorkload",
            "typicalPods": [{"cpuMilli": 8000, "gpuMilli": 500, "gpus": 1, "weight": 0.25},
                            {"cpuMilli": 4000, "gpuMilli": 1000, "gpus": 2,
                             "models": "V100M16|V100M32", "weight": 0.5},
                            {"cpuMilli": 2000, "weight": 0.25}]}


def values_file(tmp_path, name, workload):
    p = tmp_path / name
    p.write_text(yaml.safe_dump({"scheduler": {"targetWorkload": workload}}))
    return p


def workload_configmap(objs):
    cms = [o for o in objs if o["kind"] == "ConfigMap"
           and o["metadata"]["name"].startswith("elastic-gpu-target-workload")]
    assert len(cms) == 1, [o["metadata"]["name"] for o in cms]
    return cms[0]


def run_with_workload(build_dir, path):
    """egpu-scheduler --target-workload path, with no API server to reach: it
    reads the file first, so it logs the pinned workload (or why the file is
    refused) and then stops at the kubeconfig, exit 1."""
    r = subprocess.run([str(build_dir / "src/scheduler/egpu-scheduler"), "--target-workload",
                        str(path), "--kubeconfig", str(path.parent / "no-kubeconfig"),
                        "--port", "0", "--health-port", "0"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, r.stderr
    return r.stderr


def test_target_workload_renders_a_configmap_egpu_scheduler_reads(chart, build_dir, tmp_path):
    """scheduler.targetWorkload: the document, as JSON, in a ConfigMap named by
    its hash, mounted read-only where --target-workload points; nothing else
    changes. egpu-scheduler pins the rendered file; a document it refuses
    (a field's value) is refused at its start, one of the wrong shape fails
    the rendering; {} renders nothing."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["scheduler"]["targetWorkload"] == {}
    after = helm_template(values=values_file(tmp_path, "w.yaml", WORKLOAD))
    cm = workload_configmap(after)
    name = cm["metadata"]["name"]
    assert re.fullmatch(r"elastic-gpu-target-workload-[a-z0-9]{10}", name), name
    assert cm["metadata"]["namespace"] == NS
    assert list(cm["data"]) == ["target_workload.json"]
    assert json.loads(cm["data"]["target_workload.json"]) == WORKLOAD
    assert changes(chart, after) == {
        SCHED: [".spec.template.spec.containers[0].args",
                ".spec.template.spec.containers[0].volumeMounts",
                ".spec.template.spec.volumes"],
        key(cm): ["<added>"]}
    old, args = scheduler_args(chart), scheduler_args(after)
    path = args[args.index("--target-workload") + 1]
    assert args == old + ["--target-workload", path]
    spec = by_key(after)[SCHED]["spec"]["template"]["spec"]
    mounts = [m for m in spec["containers"][0]["volumeMounts"]
              if m["mountPath"].rstrip("/") == os.path.dirname(path)]
    assert len(mounts) == 1 and mounts[0]["readOnly"] is True
    (vol,) = [v for v in spec["volumes"] if v["name"] == mounts[0]["name"]]
    assert vol["configMap"] == {"name": name}
    assert os.path.basename(path) in cm["data"]
    # egpu-scheduler reads the file as the pod would see it.
    f = tmp_path / "mount" / os.path.basename(path)
    f.parent.mkdir()
    f.write_text(cm["data"][os.path.basename(path)])
    log = run_with_workload(build_dir, f)
    assert f"target workload pinned file={f} typical_pods=3" in log, log
    # The same in mode main; a new document, a new name (the pods roll).
    main = helm_template("scheduler.mode=main", values=values_file(tmp_path, "w.yaml", WORKLOAD))
    assert workload_configmap(main)["metadata"]["name"] == name
    assert "--target-workload" in scheduler_args(main)
    other = copy.deepcopy(WORKLOAD)
    other["typicalPods"][2]["cpuMilli"] = 4000
    moved = helm_template(values=values_file(tmp_path, "o.yaml", other))
    assert workload_configmap(moved)["metadata"]["name"] != name
    # A field egpu-scheduler refuses renders (the chart checks the shape) and
    # stops egpu-scheduler at start, naming it.
    refused = copy.deepcopy(WORKLOAD)
    refused["typicalPods"][0]["gpus"] = 3
    bad = json.loads(workload_configmap(helm_template(
        values=values_file(tmp_path, "r.yaml", refused)))["data"]["target_workload.json"])
    f.write_text(json.dumps(bad))
    log = run_with_workload(build_dir, f)
    assert "typicalPods[0].gpus: 3 whole cards need gpuMilli 1000, not 500" in log, log
    assert "target workload pinned" not in log
    # The wrong shape fails the rendering.
    shapes = [
        ({**WORKLOAD, "apiVersion": "v1"},
         'scheduler.targetWorkload.apiVersion is "v1": expected elasticgpu.io/v1alpha1'),
        ({k: v for k, v in WORKLOAD.items() if k != "kind"},
         'scheduler.targetWorkload.kind is "": expected TargetWorkload'),
        ({**WORKLOAD, "typicalPods": []},
         "scheduler.targetWorkload.typicalPods: expected a non-empty list"),
        ({**WORKLOAD, "typicalPods": {"cpuMilli": 1}},
         "scheduler.targetWorkload.typicalPods: expected a non-empty list"),
        ({**WORKLOAD, "typicalPods": [{"cpuMilli": 1}, "small"]},
         "scheduler.targetWorkload.typicalPods[1]: expected a map"),
        ({**WORKLOAD, "weights": [1]}, "scheduler.targetWorkload.weights: unknown key"),
        ("target_workload.json", "scheduler.targetWorkload is a string: expected a "
                                 "TargetWorkload document"),
    ]
    for i, (doc, want) in enumerate(shapes):
        err = helm_fails(values=values_file(tmp_path, f"bad{i}.yaml", doc))
        assert want in err, (doc, err)


def test_image_digests_pin_the_images(chart):
    """Each image has a digest value: set, the image is <repo>:<tag>@<digest>
    (only that field changes); a digest that is not sha256: and 64 lowercase
    hex digits fails the rendering, naming the value."""
    dig = {c: "sha256:" + format(i + 10, "x") * 64 for i, c in enumerate(IMAGES)}
    ks = "sha256:" + "f" * 64
    after = helm_template(*[f"{c}.image.digest={d}" for c, d in dig.items()],
                          f"scheduler.kubeScheduler.image.digest={ks}")
    images = {c["image"] for o in after for s in pod_specs(o)
              for c in s.get("containers", []) + s.get("initContainers", [])}
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert images == {f"ghcr.io/elastic-gpu/{n}:{version}@{dig[c]}" for c, n in IMAGES.items()} | \
        {f"registry.k8s.io/kube-scheduler:v1.32.0@{ks}"}
    assert all(p.endswith(".image") for v in changes(chart, after).values() for p in v)
    for bad in ("sha256:abc", "sha256:" + "A" * 64, "md5:" + "0" * 64, "a" * 64,
                "sha256:" + "0" * 64 + "\n"):
        err = helm_fails(f"webhook.image.digest={bad}")
        assert f"webhook.image.digest is {json.dumps(bad)}: expected sha256: and 64 lowercase " \
            "hex digits" in err, err
    assert "scheduler.kubeScheduler.image.digest is \"sha256:1\"" in helm_fails(
        "scheduler.kubeScheduler.image.digest=sha256:1")


def test_default_memory_per_core_is_the_webhook_flag(chart):
    """webhook.defaultMemoryPerCore 0 (the default) renders deploy/webhook's
    arguments; another value adds --default-memory-per-core and nothing else;
    a value egpu-webhook would refuse fails the rendering."""
    assert changes(chart, helm_template("webhook.defaultMemoryPerCore=0")) == {}
    after = helm_template("webhook.defaultMemoryPerCore=400")
    ch = changes(chart, after)
    assert list(ch) == [("Deployment", "egpu-webhook", NS)], ch
    dep = [o for o in after if o["kind"] == "Deployment" and o["metadata"]["name"] == "egpu-webhook"]
    args = dep[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--default-memory-per-core") + 1] == "400"
    for bad in ("65537", "-1", "4x"):
        assert f'webhook.defaultMemoryPerCore is "{bad}"' in helm_fails(
            f"webhook.defaultMemoryPerCore={bad}"), bad


def test_network_policy_values_set_who_reaches_the_webhook_and_agent(chart):
    """networkPolicy.podCIDRs are the addresses the webhook's HTTPS
    port excepts, networkPolicy.apiServerCIDRs replace them by a list of the
    only admitted addresses, and networkPolicy.prometheus selects who scrapes
    the webhook's, the agent's, the scheduler's and the controller's metrics
    ports; nothing else changes."""
    def pol(objs, name):
        (p,) = [o for o in objs if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == name]
        return p["spec"]["ingress"]

    got = helm_template("networkPolicy.podCIDRs={10.0.0.0/14,fd12::/48}")
    assert pol(got, "egpu-webhook")[0]["from"] == [
        {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/14"]}},
        {"ipBlock": {"cidr": "::/0", "except": ["fd12::/48"]}}]
    got = helm_template("networkPolicy.apiServerCIDRs={192.0.2.10/32,192.0.2.11/32}")
    assert pol(got, "egpu-webhook")[0]["from"] == [{"ipBlock": {"cidr": "192.0.2.10/32"}},
                                                   {"ipBlock": {"cidr": "192.0.2.11/32"}}]
    got = helm_template("networkPolicy.prometheus.podSelector.matchLabels.app=prom",
                        "networkPolicy.prometheus.namespaceSelector.matchLabels.team=mon")
    peer = {"namespaceSelector": {"matchLabels": {"team": "mon"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus",
                                            "app": "prom"}}}
    assert pol(got, "egpu-webhook")[1]["from"] == [peer]
    assert pol(got, "egpu-agent")[0]["from"] == [peer]
    assert pol(got, "egpu-agent-dra")[0]["from"] == [peer]
    assert pol(got, "egpu-scheduler")[0]["from"] == [peer]
    assert pol(got, "egpu-controller")[0]["from"] == [peer]
    changed = {k for k, o in by_key(got).items() if by_key(chart).get(k) != o}
    assert {k[1] for k in changed} == {"egpu-webhook", "egpu-agent", "egpu-agent-dra",
                                       "egpu-scheduler", "egpu-controller"}, changed
    # scheduler.mode=main: the verbs' 8888 from anywhere, 8889 still only
    # from the scrapers.
    main = pol(helm_template("scheduler.mode=main"), "egpu-scheduler")
    assert main[0]["from"] == [PROMETHEUS_PEER] and main[0]["ports"][0]["port"] == 8889
    assert main[1] == {"ports": [{"port": 8888, "protocol": "TCP"}]}
