"""The extender under the real kube-scheduler: egpu-scheduler and a
stock kube-scheduler v1.36 (tools/bin) run as deploy/scheduler/ runs them, against a real
control plane of this module's own (tests/cluster/cluster.py, no default kube-scheduler:
only the pair below schedules), with Elastic GPU installed by
`kubectl apply --server-side -k deploy/`.

What differs from deploy/, and nothing else:
- the install: after the apply, the two webhook configurations (elastic-gpu-webhook) are
  deleted: no egpu-webhook runs here and their failurePolicy Fail would refuse every GPU
  pod. So the pods set spec.schedulerName elastic-gpu-scheduler themselves (the mutating
  webhook would). The ValidatingAdmissionPolicy on the system annotations stays: the
  extender's own elasticgpu.io/assigned patch meets it.
- egpu-scheduler (components.scheduler): deployment.yaml's args and env, --port and
  --health-port 0 (free ports), --health-listen 127.0.0.1, and --kubeconfig with a token of
  ServiceAccount egpu-scheduler (in the pod: its token Secret at the in-cluster path).
- kube-scheduler: scheduler-config.yaml (the file the kustomization turns into ConfigMap
  elastic-gpu-scheduler-config) with the extender's urlPrefix on egpu-scheduler's port
  instead of 8888 and clientConnection.kubeconfig a token of ServiceAccount
  elastic-gpu-kube-scheduler (deployment.yaml gives that container its own ServiceAccount;
  the same kubeconfig authenticates and authorizes its secure port). Leader election as
  configured: Lease elastic-gpu-kube-scheduler in elastic-gpu-system, which egpu-scheduler
  --follow-lease follows (both processes have this host's name, as both containers have
  their pod's).
- nodes: tests/cluster/node.py's, CARDS (3) cards of 40 GiB each (the mock NVML): the fake
  kubelet, with the kubelet's identity, registers the Node, renews its Lease and keeps it
  Ready, and admits the pods bound to it through egpu-agent's device plugin; egpu-agent runs
  as deploy/agent runs it and publishes the GPU objects.
- the leader election test: a second pair, its kube-scheduler under its own host name
  egpu-pod-b (unshare --uts: a pod has its own) and egpu-scheduler --pod-name egpu-pod-b
  (in a pod the host name is the pod's name already).
- the main-scheduler variant (deploy/scheduler/main-scheduler, in an overlay of deploy/, on a
  second control plane): see the main_env fixture for what differs."""
import json
import os
import shutil
import signal
import ssl
import subprocess
import urllib.error
import urllib.request

import pytest
import yaml

from conftest import ROOT, cluster_module as cl
import components  # tests/cluster/components.py
import node as nodes  # tests/cluster/node.py

NS = "elastic-gpu-system"
TENANT = "sched-tenant"
ASSIGNED = "elasticgpu.io/assigned"
NODES = ("gpu-node-a", "gpu-node-b")
# Three cards a node: the four 30% shares of the first test take 120 gpu-core of one node,
# and the whole-card pod of the second must still pass kube-scheduler's own NodeResourcesFit
# (100 gpu-core free) on both nodes to meet the extender's refusal on each; with two cards
# it depended on where the shares had landed.
CARDS = 3
CARD_MIB = 40960
SCHED_USER = f"system:serviceaccount:{NS}:egpu-scheduler"
KUBE_SCHED_USER = f"system:serviceaccount:{NS}:elastic-gpu-kube-scheduler"


def wait_for(cond, timeout=60, what="condition"):
    return cl.wait_until(cond, what, timeout)


def card_uuids(node):
    """The UUIDs of node's CARDS cards (the mock NVML's), of its own."""
    tag = format(NODES.index(node) + 10, "x")
    return [f"GPU-6d0c1c3e-0000-4000-8000-0000000{tag}{i:03d}" for i in range(CARDS)]


def card_list(node):
    """EGPU_MOCK_NVML_GPUS for node: CARDS cards of CARD_MIB."""
    return ",".join(f"NVIDIA A100-SXM4-40GB:{CARD_MIB}:{u}" for u in card_uuids(node))


class Kubelets:
    """The nodes of NODES (tests/cluster/node.py: the fake kubelet with the kubelet's
    identity registers the Node, renews its Lease, keeps it Ready and runs the pods bound
    to it through the device plugin; egpu-agent over the mock NVML publishes the GPU
    objects), until stop(). errors: what any of them could not do."""

    def __init__(self, cluster, build_dir):
        self.nodes = []
        try:
            for n in NODES:
                self.nodes.append(nodes.Node(cluster, n, build_dir, cards=card_list(n)).start())
        except BaseException:
            self.stop()
            raise

    @property
    def errors(self):
        return [e for n in self.nodes for e in n.errors]

    def stop(self):
        for n in self.nodes:
            n.stop()


def gpu_objects(cluster):
    """Wait for the GPU objects the agents publish: CARDS per node, Healthy."""
    def healthy():
        st, lst = cluster.call("GET", "/apis/elasticgpu.io/v1alpha1/gpus")
        got = [g for g in lst.get("items", []) if g["spec"]["nodeName"] in NODES
               and g.get("status", {}).get("health") == "Healthy"] if st == 200 else []
        return len(got) == CARDS * len(NODES)
    wait_for(healthy, 60, "the agents' GPU objects, Healthy")


Pair = components.SchedulerPair


def install(c, kustomization, build_dir):
    """kubectl apply --server-side -k kustomization (deploy/ or an overlay of it), the
    webhook configurations deleted (no egpu-webhook here), the nodes created and kept
    Ready (Kubelets, returned) with their GPU objects, untainted, and namespace TENANT with
    ServiceAccount owner holding `edit` there."""
    r = c.kubectl("apply", "--server-side", "--field-manager", "elastic-gpu-test",
                  "-k", str(kustomization))
    assert "serverside-applied" in r.stdout, r.stdout
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        st, obj = c.call("DELETE", f"/apis/admissionregistration.k8s.io/v1/{kind}/"
                         "elastic-gpu-webhook")
        assert st == 200, obj
    c.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/gpus.elasticgpu.io")
    kubelets = Kubelets(c, build_dir)
    try:
        gpu_objects(c)
        # the TaintNodesByCondition admission plugin gives a new node the not-ready taint;
        # the node lifecycle controller takes it away once it sees the node Ready
        wait_for(lambda: all(not (c.call("GET", f"/api/v1/nodes/{n}")[1]["spec"]
                                  .get("taints")) for n in NODES), 90, "nodes untainted")
        c.namespace(TENANT)
        assert c.call("POST", f"/api/v1/namespaces/{TENANT}/serviceaccounts", {
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "owner"}})[0] == 201
        assert c.call("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{TENANT}/"
                      "rolebindings", {
                          "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                          "metadata": {"name": "owner-edit"},
                          "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                      "kind": "ClusterRole", "name": "edit"},
                          "subjects": [{"kind": "ServiceAccount", "name": "owner",
                                        "namespace": TENANT}]})[0] == 201
        wait_for(lambda: c.call("GET", f"/api/v1/namespaces/{TENANT}/serviceaccounts/"
                                "default")[0] == 200, 60, "default ServiceAccount")
    except BaseException:
        kubelets.stop()
        raise
    return kubelets


def new_cluster(tmp_path_factory, name):
    missing = cl.missing_binaries()
    if missing:
        pytest.skip(f"tools/bin lacks {', '.join(missing)} (`make k8s`)")
    d = tmp_path_factory.mktemp(name)
    return d, cl.Cluster(d, scheduler=False).start()


@pytest.fixture(scope="module")
def env(tmp_path_factory, build_dir):
    """A control plane of its own without the default kube-scheduler, deploy/ installed
    (install(): webhook configurations deleted, see the module docstring), the nodes kept
    Ready and their GPU objects, a tenant namespace with a ServiceAccount that has `edit`
    there, and one scheduler pair (egpu-scheduler ready: its kube-scheduler leads)."""
    d, c = new_cluster(tmp_path_factory, "sched-cluster")
    kubelets = None
    pairs = []
    try:
        kubelets = install(c, ROOT / "deploy", build_dir)
        pair = Pair(c, build_dir, d, "a")
        pairs.append(pair)
        wait_for(pair.ready, 60, "egpu-scheduler ready (its kube-scheduler leads)")
        yield {"cluster": c, "dir": d, "kubelets": kubelets, "pairs": pairs,
               "build": build_dir, "token": c.token(TENANT, "owner")}
    finally:
        for p in pairs:
            p.stop()
        if kubelets:
            kubelets.stop()
        c.stop()


def gpu_pod(env, name, core, memory, scheduler="elastic-gpu-scheduler"):
    """A pod asking core (percent of a card) and memory MiB of GPU (none when core is 0),
    created by the tenant's ServiceAccount; schedulerName set here (the webhook would),
    left out (default-scheduler) when scheduler is None."""
    res = {"elasticgpu.io/gpu-core": str(core), "elasticgpu.io/gpu-memory": str(memory)} \
        if core else {}
    spec = {"containers": [{"name": "main", "image": "busybox",
                            "resources": {"requests": {"cpu": "1", **res}, "limits": res}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    st, obj = env["cluster"].call("POST", f"/api/v1/namespaces/{TENANT}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec},
        token=env["token"])
    assert st == 201, obj
    return obj


def get_pod(env, name):
    st, obj = env["cluster"].call("GET", f"/api/v1/namespaces/{TENANT}/pods/{name}")
    assert st == 200, obj
    return obj


def bound(env, name, timeout=60):
    return wait_for(lambda: (lambda p: p if p["spec"].get("nodeName") else None)(
        get_pod(env, name)), timeout, f"pod {name} bound")


def assigned(pod):
    return json.loads(pod["metadata"]["annotations"][ASSIGNED])


def allocated_by_api(env):
    """Per node, the gpu-core (percent) the API's bound pods' elasticgpu.io/assigned
    annotations hold."""
    st, pods = env["cluster"].call("GET", "/api/v1/pods")
    assert st == 200
    out = {n: 0 for n in NODES}
    for p in pods["items"]:
        ann = (p["metadata"].get("annotations") or {}).get(ASSIGNED)
        if p["spec"].get("nodeName") in out and ann:
            out[p["spec"]["nodeName"]] += sum(ct["core"] * len(ct["gpus"])
                                              for ct in json.loads(ann)["containers"])
    return out


def test_pods_bound_through_the_extender(env):
    """GPU pods created through the real API server are filtered, prioritized and bound
    by the real kube-scheduler through egpu-scheduler: each gets spec.nodeName and the
    elasticgpu.io/assigned annotation (written by the extender, past the real admission
    policy) naming that node and one of its cards with the asked core and memory; the
    extender's binpack keeps shares of 30% on one card until it is full; and its
    egpu_scheduler_allocated_core_percent per node equals what the API's pods hold."""
    pair = env["pairs"][0]
    names = [f"share-{i}" for i in range(4)]
    pods = []
    for n in names:  # one after another: each placement sees the ones before it bound
        gpu_pod(env, n, 30, 4096)
        pods.append(bound(env, n))
    cards = []
    for p in pods:
        a = assigned(p)
        assert a["node"] == p["spec"]["nodeName"] in NODES, a
        (ct,) = a["containers"]
        assert ct["name"] == "main" and ct["core"] == 30 and ct["memory"] == 4096, a
        (card,) = ct["gpus"]
        assert card in set(card_uuids(a["node"])), a
        cards.append(card)
        assert any(c["type"] == "PodScheduled" and c["status"] == "True"
                   for c in p["status"]["conditions"])
    # binpack: the first three 30% shares on one card, the fourth (no room there) elsewhere
    assert len({cards[0], cards[1], cards[2]}) == 1, cards
    assert cards[3] != cards[0], cards
    # the Binding was made by egpu-scheduler (its bind verb), not by kube-scheduler
    binds = [e for e in env["cluster"].audit(SCHED_USER)
             if e.get("objectRef", {}).get("subresource") == "binding"
             and e["objectRef"].get("name") in names]
    assert {e["objectRef"]["name"] for e in binds if e["responseStatus"]["code"] == 201} \
        == set(names), binds
    want = allocated_by_api(env)
    assert sum(want.values()) == 120, want
    wait_for(lambda: all(pair.metric("egpu_scheduler_allocated_core_percent", n) == want[n]
                         for n in NODES), 30,
             f"metrics equal to the API's {want}: "
             f"{[pair.metric('egpu_scheduler_allocated_core_percent', n) for n in NODES]}")


def test_pod_that_fits_no_card_stays_pending_with_the_reason(env):
    """A whole-card pod asking more GPU memory than any card has stays Pending, unbound and
    unannotated, and kube-scheduler's FailedScheduling event carries egpu-scheduler's
    refusal for each node (src/core/cards.c pick_whole's text)."""
    gpu_pod(env, "too-big", 100, CARD_MIB + 1)
    reason = "container 0 needs 1 whole free cards with enough memory, node has 0"

    def event():
        st, evs = env["cluster"].call(
            "GET", f"/api/v1/namespaces/{TENANT}/events"
            "?fieldSelector=involvedObject.name%3Dtoo-big")
        assert st == 200, evs
        return [e for e in evs["items"] if e["reason"] == "FailedScheduling"]

    evs = wait_for(event, 60, "FailedScheduling event")
    msg = evs[0]["message"]
    assert f"0/{len(NODES)} nodes are available" in msg, msg
    assert f"{len(NODES)} {reason}" in msg, msg
    p = get_pod(env, "too-big")
    assert not p["spec"].get("nodeName") and p["status"]["phase"] == "Pending", p
    assert ASSIGNED not in (p["metadata"].get("annotations") or {}), p
    cond = {c["type"]: c for c in p["status"]["conditions"]}["PodScheduled"]
    assert cond["status"] == "False" and cond["reason"] == "Unschedulable", cond
    assert reason in cond["message"], cond


def uts_wrap(hostname):
    """A command line that runs a program with its own host name (a UTS namespace, as each
    pod has), or None where unshare cannot make one here."""
    unshare = shutil.which("unshare")
    if not unshare:
        return None
    wrap = [unshare, "--uts"] if os.geteuid() == 0 else \
        [unshare, "--user", "--map-root-user", "--uts"]
    wrap += ["/bin/sh", "-c", f'hostname {hostname} && exec "$0" "$@"']
    r = subprocess.run([*wrap, "hostname"], capture_output=True, text=True)
    return wrap if r.returncode == 0 and r.stdout.strip() == hostname else None


def lease_holder(env):
    st, lease = env["cluster"].call(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/"
        "elastic-gpu-kube-scheduler")
    return lease["spec"].get("holderIdentity", "") if st == 200 else ""


def test_leader_election_fails_over_to_the_other_pair(env):
    """Two scheduler pods' pairs (the second one's processes under the host name
    egpu-pod-b, as a second pod has its own, and egpu-scheduler --pod-name egpu-pod-b)
    against the real Lease API: while the first pod's kube-scheduler holds Lease
    elastic-gpu-kube-scheduler, the second pod's egpu-scheduler is not ready and not
    leader; SIGKILL of the first kube-scheduler (no release: it waits out the 15 s
    leaseDuration) lets the second take the Lease, its egpu-scheduler becomes ready and
    the first's not, and the next pod is bound by the second extender (its binds count),
    placed with every earlier allocation counted (its metrics equal the API's pods)."""
    wrap = uts_wrap("egpu-pod-b")
    if wrap is None:
        pytest.skip("unshare cannot give a process its own host name here")
    c, a = env["cluster"], env["pairs"][0]
    b = Pair(c, env["build"], env["dir"], "b", wrap=wrap,
             extra=["--pod-name", "egpu-pod-b"])
    env["pairs"].append(b)
    holder_a = lease_holder(env)
    assert holder_a and not holder_a.startswith("egpu-pod-b_"), holder_a
    wait_for(lambda: b.get("/healthz")[0] == 200, 30, "egpu-scheduler b alive")
    wait_for(lambda: b.metric("egpu_scheduler_cache_gpus") == len(NODES) * CARDS, 30,
             "b's cache synced")
    assert b.metric("egpu_scheduler_leader") == 0 and not b.ready()
    assert a.metric("egpu_scheduler_leader") == 1 and a.ready()
    binds_a = a.metric("egpu_scheduler_binds_total")
    before = sum(allocated_by_api(env).values())
    c.stop_process(a.kube, signal.SIGKILL)
    wait_for(lambda: lease_holder(env).startswith("egpu-pod-b_"), 60,
             f"kube-scheduler b holds the Lease (holder {lease_holder(env)!r})")
    wait_for(b.ready, 30, "egpu-scheduler b ready")
    wait_for(lambda: not a.ready(), 30, "egpu-scheduler a not ready")
    wait_for(lambda: a.metric("egpu_scheduler_leader") == 0, 30, "a not leader")
    gpu_pod(env, "after-failover", 30, 4096)
    p = bound(env, "after-failover")
    assert assigned(p)["node"] == p["spec"]["nodeName"]
    # metrics are refreshed by egpu-scheduler's main loop, not at each scrape
    wait_for(lambda: b.metric("egpu_scheduler_binds_total") == 1, 30, "b's bind counted")
    assert a.metric("egpu_scheduler_binds_total") == binds_a
    want = allocated_by_api(env)
    assert sum(want.values()) == before + 30, want
    wait_for(lambda: all(b.metric("egpu_scheduler_allocated_core_percent", n) == want[n]
                         for n in NODES), 30, f"b's metrics equal to the API's {want}")


def test_nodes_stayed_ready(env):
    """The nodes the tests scheduled onto were Ready and untainted throughout (their Lease
    renewals and status writes all went through): the placements above were not shaped by
    the node lifecycle controller."""
    k = env["kubelets"]
    assert not k.errors, k.errors
    for n in NODES:
        node = env["cluster"].call("GET", f"/api/v1/nodes/{n}")[1]
        assert not node["spec"].get("taints"), node["spec"]
        ready = {c["type"]: c for c in node["status"]["conditions"]}["Ready"]
        assert ready["status"] == "True", ready


def test_no_request_of_the_scheduler_pair_refused(env):
    """The audit log holds requests of both ServiceAccounts of the scheduler pod (the
    extender's watches, get of the Lease, patch and binding; kube-scheduler's watches,
    its Lease's create, get and update, its events: both list by streaming watch, so no
    list verb is expected of either, and the extender's watches of Nodes, GPU objects
    and Pods ask sendInitialEvents), and none of them was refused (403):
    deploy/scheduler/rbac.yaml grants what the real binaries use (list too, for an API
    server that refuses the stream)."""
    c = env["cluster"]
    for user, verbs in ((SCHED_USER, {"watch", "patch", "create", "get"}),
                        (KUBE_SCHED_USER, {"watch", "create", "update", "get"})):
        evs = c.audit(user)
        seen = {e["verb"] for e in evs}
        assert verbs <= seen, (user, seen)
        refused = sorted({(e["verb"], e["requestURI"].split("?")[0]) for e in evs
                          if e.get("responseStatus", {}).get("code") == 403})
        assert not refused, (user, refused)
    streamed = {e["requestURI"].split("?")[0] for e in c.audit(SCHED_USER)
                if e["verb"] == "watch" and "sendInitialEvents=true" in e["requestURI"]}
    assert {"/api/v1/nodes", "/apis/elasticgpu.io/v1alpha1/gpus", "/api/v1/pods"} <= streamed, \
        streamed
    assert not [e["requestURI"] for e in c.audit(SCHED_USER) if e["verb"] == "list"]


# ---- the main-scheduler variant (deploy/scheduler/main-scheduler) -------------------------

@pytest.fixture(scope="module")
def main_env(tmp_path_factory, build_dir):
    """Another control plane, deploy/ with the Component main-scheduler/ installed by an
    overlay (as its kustomization.yaml says), egpu-scheduler as that overlay's Deployment
    runs it (its own Lease elastic-gpu-scheduler, mutual TLS, --scheduler-name
    default-scheduler), and the cluster's own kube-scheduler (identity
    system:kube-scheduler, leader election off as Cluster runs it) with the ConfigMap
    elastic-gpu-main-scheduler-extender's extenders stanza and percentageOfNodesToScore
    100 (as it recommends). Changed in that stanza: urlPrefix https://127.0.0.1:<port>
    (no Service routing here; serverName stays the Service's name, in the serving
    certificate) and the caFile, certFile, keyFile the test's: one CA (made here) signs
    the serving and the client certificate, where deploy/ lets the operator use two.
    egpu-scheduler: --tls-cert, --tls-key, --tls-client-ca those files, ports and listen
    addresses as components.scheduler."""
    d, c = new_cluster(tmp_path_factory, "main-sched-cluster")
    kubelets = ext = None
    try:
        overlay = d / "overlay"
        overlay.mkdir()  # kustomize takes relative paths only
        (overlay / "kustomization.yaml").write_text(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
            f"resources:\n  - {os.path.relpath(ROOT / 'deploy', overlay)}\n"
            "components:\n"
            f"  - {os.path.relpath(ROOT / 'deploy/scheduler/main-scheduler', overlay)}\n")
        docs = [o for o in yaml.safe_load_all(c.kubectl("kustomize", str(overlay)).stdout) if o]
        kubelets = install(c, overlay, build_dir)
        pki = cl.Pki(d / "extender-pki")
        crt, key = pki.cert("egpu-scheduler-tls", "egpu-scheduler", server=True,
                            sans=(f"DNS:egpu-scheduler.{NS}.svc",))
        client = pki.cert("kube-scheduler-client", "kube-scheduler")
        ext = components.scheduler(c, build_dir, d, docs=docs, changes={
            "--tls-cert": crt, "--tls-key": key, "--tls-client-ca": pki.ca})
        (cm,) = [o for o in docs if o["kind"] == "ConfigMap"
                 and o["metadata"]["name"] == "elastic-gpu-main-scheduler-extender"]
        stanza = yaml.safe_load(cm["data"]["extenders.yaml"])
        (x,) = stanza["extenders"]
        assert x["urlPrefix"] == f"https://egpu-scheduler.{NS}.svc:8888", x
        x["urlPrefix"] = f"https://127.0.0.1:{ext.ports[0]}"
        assert x["tlsConfig"]["serverName"] == f"egpu-scheduler.{NS}.svc", x
        x["tlsConfig"].update(caFile=str(pki.ca), certFile=str(client[0]),
                              keyFile=str(client[1]))
        c.start_scheduler({**stanza, "percentageOfNodesToScore": 100})
        health = f"http://127.0.0.1:{ext.ports[1]}"

        def ready():
            try:
                with urllib.request.urlopen(health + "/readyz", timeout=5) as r:
                    return r.status == 200
            except OSError:
                return False
        wait_for(ready, 60, "egpu-scheduler ready (it leads its own Lease)")
        yield {"cluster": c, "dir": d, "ext": ext, "pki": pki, "health": health,
               "token": c.token(TENANT, "owner")}
    finally:
        if ext:
            ext.stop()
        if kubelets:
            kubelets.stop()
        c.stop()


def test_main_scheduler_binds_gpu_pods_through_the_extender(main_env):
    """With main-scheduler/, GPU pods keeping schedulerName default-scheduler are bound by
    the cluster's own kube-scheduler through egpu-scheduler over mutual TLS (the
    Binding is egpu-scheduler's, with the assigned annotation naming the node), a pod
    asking no GPU is bound by kube-scheduler alone (not sent to the extender: it asks no
    managed resource), and the extender answers no caller without a client certificate
    of its CA."""
    c = main_env["cluster"]
    gpu_pod(main_env, "main-gpu", 30, 4096, scheduler=None)
    gpu_pod(main_env, "main-cpu", 0, 0, scheduler=None)
    p = bound(main_env, "main-gpu")
    assert p["spec"]["schedulerName"] == "default-scheduler"
    a = assigned(p)
    assert a["node"] == p["spec"]["nodeName"] in NODES, a
    assert a["containers"][0]["gpus"][0] in card_uuids(a["node"]), a
    q = bound(main_env, "main-cpu")
    assert ASSIGNED not in (q["metadata"].get("annotations") or {}), q
    binders = {e["objectRef"]["name"]: e["user"]["username"] for e in c.audit()
               if e.get("objectRef", {}).get("subresource") == "binding"
               and e["responseStatus"]["code"] == 201}
    assert binders["main-gpu"] == SCHED_USER, binders
    assert binders["main-cpu"] == "system:kube-scheduler", binders
    # no client certificate: the TLS handshake fails, no verb is served; with the one
    # kube-scheduler has, the same request gets an HTTP answer
    url = f"https://127.0.0.1:{main_env['ext'].ports[0]}/filter"
    ctx = ssl.create_default_context(cafile=str(main_env["pki"].ca))
    ctx.check_hostname = False
    with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)) as e:
        urllib.request.urlopen(urllib.request.Request(url, data=b"{}", method="POST"),
                               timeout=10, context=ctx).read()
    assert not isinstance(e.value, urllib.error.HTTPError), e.value
    d = main_env["pki"].d
    ctx.load_cert_chain(str(d / "kube-scheduler-client.crt"), str(d / "kube-scheduler-client.key"))
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=b"{}", method="POST"),
                                    timeout=10, context=ctx) as r:
            assert r.status == 200
    except urllib.error.HTTPError as he:  # an answer (the empty args refused): served
        assert he.code < 500, he


def test_main_scheduler_rbac(main_env):
    """Under main-scheduler/, egpu-scheduler's own leader election (get, create, update of
    Lease elastic-gpu-scheduler, main-scheduler/rbac.yaml) and its other requests were
    all allowed: no 403 in the audit log."""
    evs = main_env["cluster"].audit(SCHED_USER)
    leases = {e["verb"] for e in evs if e.get("objectRef", {}).get("resource") == "leases"}
    assert {"create", "update"} <= leases, leases
    refused = sorted({(e["verb"], e["requestURI"].split("?")[0]) for e in evs
                      if e.get("responseStatus", {}).get("code") == 403})
    assert not refused, refused
