"""Shared fixtures for the integration tests: where the built binaries, the
trace and the outside tools are. The Makefile sets EGPU_BUILD; by hand it
defaults to build/. kubectl and helm are looked for in tools/bin (where
`make deps` puts kubectl 1.35 and helm 4.1) before PATH."""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOLS_BIN = ROOT / "tools" / "bin"
sys.path.insert(0, str(ROOT / "tests" / "cluster"))
import cluster as cluster_module  # noqa: E402  (tests/cluster/cluster.py)


def find_tool(name):
    """The path of tool name: tools/bin/name (scripts/deps.sh), else name on PATH, else None."""
    p = TOOLS_BIN / name
    if p.is_file() and os.access(p, os.X_OK):
        return str(p)
    return shutil.which(name)


def tool(name):
    """find_tool(name) for a test that needs it: a missing tool skips the test, except under
    CI=true, where it fails it (scripts/deps.sh installs every tool a test needs)."""
    path = find_tool(name)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} is not installed (scripts/deps.sh, `make deps`)")
        pytest.skip(f"{name} is not installed (`make deps`)")
    return path


@pytest.fixture(scope="session")
def build_dir():
    d = pathlib.Path(os.environ.get("EGPU_BUILD", ROOT / "build"))
    if not (d / "egpu-sim").exists():
        pytest.fail(f"{d}/egpu-sim not built: run `make build` first")
    return d


@pytest.fixture(scope="session")
def sim(build_dir):
    return str(build_dir / "egpu-sim")


@pytest.fixture(scope="session")
def fixtures():
    return ROOT / "tests" / "fixtures"


def trace_dir():
    """The openb trace, found the way egpu-sim finds it, or None."""
    for cand in (os.environ.get("EGPU_TRACE_DIR"), ROOT.parent / "shared" / "data" / "openb",
                 ROOT / "data" / "openb"):
        if cand and pathlib.Path(cand, "openb_pod_list_default.csv").exists():
            return pathlib.Path(cand)
    return None


def _skip_reason(rep):
    """The reason a skipped report gives (pytest.skip's message, or the
    skipif marker's reason)."""
    if isinstance(rep.longrepr, tuple) and len(rep.longrepr) == 3:
        return rep.longrepr[2].removeprefix("Skipped: ")
    return str(rep.longrepr)


# The one skip CI=true keeps: a machine whose kernel or sandbox cannot run containers at
# all (tests/cluster/kubelet.py, machine_cannot: namespaces, an overlay mount, a cgroup),
# which no package installs; the reason names the check that failed.
MACHINE_CANNOT = "this machine cannot run containers: "


def _fail_skip_under_ci(rep):
    """Under CI=true a skip is a failure, the skip's reason in its report:
    CI has everything a test needs (scripts/deps.sh, README), so a test that
    would skip there names what is missing instead of passing silently. An
    expected failure (xfail) stays what it is, and so does a skip for
    MACHINE_CANNOT."""
    if os.environ.get("CI") != "true" or not rep.skipped or hasattr(rep, "wasxfail"):
        return
    if _skip_reason(rep).startswith(MACHINE_CANNOT):
        return
    rep.outcome = "failed"
    rep.longrepr = (f"skipped under CI=true, which runs every test (scripts/deps.sh installs "
                    f"what they need): {_skip_reason(rep)}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_skip_under_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A whole module skipped at collection (pytest.skip(allow_module_level=True),
    pytest.importorskip) fails under CI=true too."""
    outcome = yield
    _fail_skip_under_ci(outcome.get_result())


def need_control_plane():
    """Skip the test when tools/bin lacks a control-plane binary (`make k8s`), or fail it
    under CI=true."""
    missing = cluster_module.missing_binaries()
    if missing:
        msg = f"tools/bin lacks {', '.join(missing)} (`make k8s`, which `make deps` runs)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)


def install_deploy(c):
    """deploy/ installed into control plane c as the README says (`kubectl apply
    --server-side -k deploy/`), every CRD Established and serving (a CRD just Established
    answers 429 for a moment). The objects deploy/ renders (dicts)."""
    import yaml
    c.kubectl("apply", "--server-side", "--field-manager", "elastic-gpu-test",
              "-k", str(ROOT / "deploy"))
    objs = [o for o in yaml.safe_load_all(c.kubectl("kustomize", str(ROOT / "deploy")).stdout)
            if o]
    crds = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
    c.kubectl("wait", "--for=condition=Established", "--timeout=60s",
              *[f"crd/{o['metadata']['name']}" for o in crds])
    wait_serving(c, crds)
    return objs


def wait_serving(c, crds):
    """Wait until each CRD of crds (dicts) answers a LIST with 200."""
    for o in crds:
        path = f"/apis/{o['spec']['group']}/{o['spec']['versions'][0]['name']}/" \
               f"{o['spec']['names']['plural']}"
        cluster_module.wait_until(lambda: c.call("GET", path)[0] == 200, f"GET {path}")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """The real control plane (tests/cluster/cluster.py): etcd, kube-apiserver,
    kube-controller-manager and kube-scheduler from tools/bin, one for the whole session
    (tests share it, each in namespaces and nodes of its own). Its node lifecycle controller
    acts within 10 s (FAST_NODE_MONITOR) instead of 50, so a test can watch it. Without the binaries (`make k8s`, which
    `make deps` runs) the tests that need it skip, except under CI=true, where they fail."""
    need_control_plane()
    c = cluster_module.Cluster(tmp_path_factory.mktemp("cluster"),
                               controller_manager_args=cluster_module.FAST_NODE_MONITOR).start()
    yield c
    c.stop()


@pytest.fixture(scope="session")
def deployed(cluster):
    """deploy/ installed into the session's control plane as the README says (`kubectl
    apply --server-side -k deploy/`), every CRD Established, and the webhooks of both
    configurations pointed at a port on 127.0.0.1 where nothing listens (no kube-proxy here
    routes their Service; a test that needs the webhook starts one and points them at it:
    tests/cluster/components.py). The objects deploy/ renders (dicts)."""
    objs = install_deploy(cluster)
    import components
    components.point_webhooks(cluster, cluster_module.free_port())
    return objs


@pytest.fixture(scope="session")
def webhook(cluster, deployed, build_dir, tmp_path_factory):
    """egpu-webhook as deploy/ runs it (tests/cluster/components.py) against the session's
    control plane, serving a certificate the cluster's CA signed for 127.0.0.1 (a pre-made
    one, as cert-manager leaves it), and both configurations pointed at it with that CA as
    caBundle: the API server calls it for every pod and workload its rules match."""
    import components
    w = components.served_webhook(cluster, build_dir, tmp_path_factory.mktemp("webhook"))
    yield w
    w.stop()


@pytest.fixture
def fault_api(tmp_path):
    """The project's test API server (tests/apiserver/server.py, apis.Api), one per test,
    for a test that needs a fault the real control plane cannot be made to show (its
    /_control/ API: injected errors, dropped watches, compaction, down): each test that asks
    for it says which fault in its docstring. api.kubeconfig names it with its token, default
    namespace elastic-gpu."""
    from apis import TOKEN, Api
    proc = subprocess.Popen(["/usr/bin/python3", str(ROOT / "tests/apiserver/server.py"),
                             "--port", "0", "--token", TOKEN, "--bookmark-interval", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline().strip()
    m = re.match(r"listening on (http://127\.0\.0\.1:\d+)$", line)
    assert m, line
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: t, cluster: {{server: '{m.group(1)}'}}}}]\n"
        f"users: [{{name: u, user: {{token: {TOKEN}}}}}]\n"
        "contexts: [{name: t, context: {cluster: t, user: u, namespace: elastic-gpu}}]\n"
        "current-context: t\n")
    a = Api(m.group(1))
    a.kubeconfig = str(kubeconfig)
    yield a
    proc.terminate()
    proc.wait(timeout=10)


# The kinds of deploy/ that make the elasticgpu.io contract and each component's identity:
# what the `kube` control plane gets (not the Deployments, the webhook configurations, the
# ValidatingAdmissionPolicy or the PriorityClasses: the tests that use it start the
# components as host processes and make their own admission objects).
CONTRACT_KINDS = ("CustomResourceDefinition", "Namespace", "ServiceAccount", "ClusterRole",
                  "ClusterRoleBinding", "Role", "RoleBinding")


@pytest.fixture(scope="session")
def kube(tmp_path_factory):
    """A second real control plane (tests/cluster/cluster.py) for the component tests that
    once ran against the test API server (apis.RealApi): no kube-scheduler (the tests drive
    the extender as kube-scheduler does; test_cluster_scheduler.py runs the real one), with
    deploy/'s CRDs (Established and serving), namespace, ServiceAccounts and RBAC
    (CONTRACT_KINDS), so each component can run with its own ServiceAccount's token. Apart
    from `cluster` so that no webhook configuration or admission policy of the deployed
    system stands between these tests and the API server. Missing binaries skip, or fail
    under CI=true, as for `cluster`."""
    import yaml
    need_control_plane()
    c = cluster_module.Cluster(tmp_path_factory.mktemp("kube"), scheduler=False).start()
    try:
        objs = [o for o in yaml.safe_load_all(c.kubectl("kustomize", str(ROOT / "deploy")).stdout)
                if o and o["kind"] in CONTRACT_KINDS]
        c.kubectl("apply", "--server-side", "--field-manager", "elastic-gpu-test", "-f", "-",
                  stdin="\n---\n".join(yaml.safe_dump(o) for o in objs))
        crds = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
        c.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                  *[f"crd/{o['metadata']['name']}" for o in crds])
        wait_serving(c, crds)
        yield c
    finally:
        c.stop()


@pytest.fixture
def kube_api(kube):
    """apis.RealApi over the `kube` control plane, emptied of what earlier tests made."""
    from apis import RealApi
    a = RealApi(kube)
    a.reset()
    return a
