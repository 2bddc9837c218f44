"""DRA mode on the real control plane (issue 26 section 5): egpu-agent --mode dra as the DRA
driver of a node, the real kube-scheduler's allocator placing consumable capacity from the
agent's ResourceSlice, and the fake kubelet DRA manager (tests/kubelet/fake_dra_manager.py,
proved against a plugin of its own in test_fake_dra_manager.py) calling the agent as the
kubelet does (tests/cluster/dra_node.py):

(a) two ResourceClaims of cores 30 + memory 4096Mi (DeviceClass gpu-share.elasticgpu.io)
    share one GPU: the same device, two different shareIDs, consumedCapacity as asked;
(b) a pod with a ResourceClaimTemplate gets a claim of its own, made by the real
    kube-controller-manager (owned by the pod, named in its resourceClaimStatuses);
(c) claims of cores 60 that no card has left stay pending, with the scheduler's own
    reason ("cannot allocate all claims") in the pod's PodScheduled condition;
(d) prepare: one NodePrepareResources per driver per pod with the 45 s deadline, and the
    agent's CDI spec of each claim passes the CDI rules of
    ../shared/k8s-wire/dra/cdi_notes.md (cdiVersion the lowest its fields need, kind, device
    names, env, device nodes, the interposer mount, /etc/ld.so.preload, the share's dir);
(e) a process run with the spec's env and mounts (applied in a mount namespace of its
    own, as a runtime would: /etc/ld.so.preload preloads the interposer) over the mock
    CUDA driver is held to 4096 MiB and to about 30% of the card;
(f) a kubelet restart (a new manager; the node's ResourceSlices deleted, as the kubelet
    does at its start) prepares the running pods again and gets the same CDI IDs, the
    agent answering from its records (neither record nor spec written again) and
    publishing its slice again; so does an agent restart;
(g) the pod's end unprepares its claim: the share's dirs, the spec and the record go.

Each test names in its docstring what it shows. Every claim here is allocated by
kube-scheduler, never written by the test."""
import json
import os
import pathlib
import re
import shlex
import subprocess
import threading
import time

import pytest

from conftest import MACHINE_CANNOT, cluster_module  # noqa: F401  (tests/cluster on sys.path)
from cluster import wait_until as wait  # noqa: E402
import dra_node  # noqa: E402  (tests/cluster/dra_node.py)

DRIVER = "gpu.elasticgpu.io"
CLASS = "gpu-share.elasticgpu.io"
NS = "dra-e2e"
NODE = "dra-gpu-1"
MIB = 1 << 20
OOM = 2
RES = "/apis/resource.k8s.io/v1"
CLASS_SELECTOR = ('device.driver == "gpu.elasticgpu.io" && '  # deploy/agent-dra's
                  '"type" in device.attributes["gpu.elasticgpu.io"] && '
                  'device.attributes["gpu.elasticgpu.io"].type == "gpu"')


# ---- objects --------------------------------------------------------------------------


def share_request(cores="30", memory="4096Mi"):
    return {"name": "gpu", "exactly": {
        "deviceClassName": CLASS, "allocationMode": "ExactCount", "count": 1,
        "capacity": {"requests": {"cores": cores, "memory": memory}}}}


def make_claim(c, name, cores="30", memory="4096Mi"):
    st, obj = c.call("POST", f"{RES}/namespaces/{NS}/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"devices": {"requests": [share_request(cores, memory)]}}})
    assert st == 201, obj
    return obj


def make_pod(c, name, claim=None, template=None):
    src = {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": template}
    st, obj = c.call("POST", f"/api/v1/namespaces/{NS}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
        "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                 "resources": {"claims": [{"name": "gpu"}]}}],
                 "resourceClaims": [{"name": "gpu", **src}],
                 "terminationGracePeriodSeconds": 0}})
    assert st == 201, obj
    return obj


def get(c, path):
    st, obj = c.call("GET", path)
    assert st == 200, (path, obj)
    return obj


def claim_of(c, name):
    return get(c, f"{RES}/namespaces/{NS}/resourceclaims/{name}")


def pod_of(c, name):
    return get(c, f"/api/v1/namespaces/{NS}/pods/{name}")


def allocated(c, name, timeout=60):
    return wait(lambda: (lambda o: o if o.get("status", {}).get("allocation") else None)(
        claim_of(c, name)), f"claim {name} allocated", timeout)


def result(claim):
    (r,) = claim["status"]["allocation"]["devices"]["results"]
    return r


def delete_pod(c, name):
    c.call("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}")


def gone(c, path):
    return c.call("GET", path)[0] == 404


# ---- CDI rules (cdi_notes.md sections 1 to 3) -------------------------------------------

_VENDOR = re.compile(r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")
VERSIONS = ["0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0"]
EDIT_KEYS = {"env", "deviceNodes", "hooks", "mounts", "intelRdt", "additionalGids",
             "netDevices"}


def cdi_min_version(spec):
    """The lowest cdiVersion spec's fields need (cdi_notes.md section 2)."""
    need = "0.3.0"

    def at_least(v):
        nonlocal need
        if VERSIONS.index(v) > VERSIONS.index(need):
            need = v
    edits = [spec.get("containerEdits") or {}] + [d.get("containerEdits") or {}
                                                   for d in spec["devices"]]
    for e in edits:
        if any("type" in m for m in e.get("mounts") or []):
            at_least("0.4.0")
        if any("hostPath" in n for n in e.get("deviceNodes") or []):
            at_least("0.5.0")
        if "intelRdt" in e or "additionalGids" in e:
            at_least("0.7.0")
        if "netDevices" in e:
            at_least("1.1.0")
    if any(d["name"][:1].isdigit() for d in spec["devices"]):
        at_least("0.5.0")
    if "annotations" in spec or any("annotations" in d for d in spec["devices"]):
        at_least("0.6.0")
    if "." in spec["kind"].split("/", 1)[1]:
        at_least("0.6.0")
    return need


def cdi_problems(spec):
    """What a CDI loader refuses in spec (a dict), as a list of texts (empty: loadable)."""
    bad = []
    if set(spec) - {"cdiVersion", "kind", "annotations", "devices", "containerEdits"}:
        bad.append(f"unknown top-level keys {set(spec) - {'cdiVersion', 'kind'}}")
    if spec.get("cdiVersion") not in VERSIONS:
        bad.append(f"cdiVersion {spec.get('cdiVersion')!r} unknown")
    kind = spec.get("kind", "")
    vendor, _, cls = kind.partition("/")
    if not (_VENDOR.match(vendor) and _VENDOR.match(cls)) or "/" in cls:
        bad.append(f"kind {kind!r} is not vendor/class")
    if len(cls) > 63 or len(vendor) > 253:
        bad.append(f"kind {kind!r} too long")
    devs = spec.get("devices") or []
    if not devs:
        bad.append("no devices")
    names = [d.get("name", "") for d in devs]
    if len(set(names)) != len(names):
        bad.append(f"device names repeated {names}")
    for d in devs:
        if set(d) - {"name", "annotations", "containerEdits"}:
            bad.append(f"device {d.get('name')}: unknown keys {set(d)}")
        if not _NAME.match(d.get("name", "")):
            bad.append(f"device name {d.get('name')!r}")
    for where, e in [("spec", spec.get("containerEdits") or {})] + \
            [(d.get("name"), d.get("containerEdits") or {}) for d in devs]:
        if set(e) - EDIT_KEYS:
            bad.append(f"{where}: unknown containerEdits keys {set(e) - EDIT_KEYS}")
        for v in e.get("env") or []:
            if "=" not in v or v.index("=") == 0:
                bad.append(f"{where}: env {v!r}")
        for n in e.get("deviceNodes") or []:
            if set(n) - {"path", "hostPath", "type", "major", "minor", "fileMode",
                         "permissions", "uid", "gid"}:
                bad.append(f"{where}: deviceNode keys {set(n)}")
            if not str(n.get("path", "")).startswith("/"):
                bad.append(f"{where}: deviceNode path {n.get('path')!r}")
            if "type" in n and n["type"] not in ("b", "c", "u", "p"):
                bad.append(f"{where}: deviceNode type {n['type']!r}")
            if set(n.get("permissions", "")) - set("rwm"):
                bad.append(f"{where}: deviceNode permissions {n['permissions']!r}")
        for m in e.get("mounts") or []:
            if set(m) - {"hostPath", "containerPath", "options", "type"}:
                bad.append(f"{where}: mount keys {set(m)}")
            if not m.get("hostPath") or not m.get("containerPath"):
                bad.append(f"{where}: mount without hostPath or containerPath {m}")
        for h in e.get("hooks") or []:
            if h.get("hookName") not in ("createRuntime", "createContainer", "startContainer",
                                         "poststart", "poststop") or \
                    not str(h.get("path", "")).startswith("/"):
                bad.append(f"{where}: hook {h}")
    if not bad and VERSIONS.index(spec["cdiVersion"]) < VERSIONS.index(cdi_min_version(spec)):
        bad.append(f"cdiVersion {spec['cdiVersion']} below the {cdi_min_version(spec)} its "
                   "fields need")
    return bad


def resolve(cdi_dir, ids):
    """What a runtime does with CDI device IDs ids against the spec files of cdi_dir (only
    *.json and *.yaml are loaded): the merged edits {env, deviceNodes, mounts} of every spec
    a device of which is named (spec-level edits once per spec) and of each device."""
    specs = []
    for f in sorted(os.listdir(cdi_dir)):
        if f.endswith((".json", ".yaml")):
            specs.append(json.loads((pathlib.Path(cdi_dir) / f).read_text()))
    out = {"env": [], "deviceNodes": [], "mounts": []}
    used = []
    for cid in ids:
        kind, _, name = cid.partition("=")
        hits = [(s, d) for s in specs if s["kind"] == kind for d in s["devices"]
                if d["name"] == name]
        assert len(hits) == 1, f"CDI device {cid}: {len(hits)} definitions in {cdi_dir}"
        s, d = hits[0]
        for e in ([s.get("containerEdits") or {}] if not any(s is u for u in used) else []) + \
                [d.get("containerEdits") or {}]:
            for k in out:
                out[k].extend(e.get(k) or [])
        used.append(s)
    return out


# ---- a "container": the spec's mounts in a mount namespace, its env, the mock driver ----

OVERLAY_TOPS = ("/etc", "/opt", "/run", "/var", "/usr")


def container_script(edits, tmp, argv):
    """A sh script that, run under `unshare --mount --propagation private`, applies the CDI
    mounts of edits as a runtime would (each containerPath made where it does not exist on
    an overlay of its top directory, over a tmpfs of tmp's: nothing on the host changes;
    bind, ro remounted ro; /etc/ld.so.preload last, since it preloads every later
    process), then execs argv with only the spec's env (and what the caller adds)."""
    lines = ["set -e", f"mount -t tmpfs egpu-ctr {shlex.quote(str(tmp))}"]
    tops = set()
    mounts = sorted(edits["mounts"], key=lambda m: m["containerPath"] == "/etc/ld.so.preload")
    for m in mounts:
        cp = m["containerPath"]
        if not os.path.exists(cp):
            top = "/" + cp.strip("/").split("/")[0]
            assert top in OVERLAY_TOPS, f"mount target {cp} outside {OVERLAY_TOPS}"
            tops.add(top)
    for i, top in enumerate(sorted(tops)):
        up, wk = f"{tmp}/up{i}", f"{tmp}/wk{i}"
        lines += [f"mkdir -p {up} {wk}",
                  f"mount -t overlay egpu-ovl -o lowerdir={top},upperdir={up},workdir={wk} "
                  f"{top}"]
    for m in mounts:
        hp, cp = shlex.quote(m["hostPath"]), shlex.quote(m["containerPath"])
        if os.path.isdir(m["hostPath"]):
            lines.append(f"mkdir -p {cp}")
        else:
            lines.append(f"mkdir -p $(dirname {cp}); [ -e {cp} ] || : > {cp}")
        lines.append(f"mount --bind {hp} {cp}")
        if "ro" in (m.get("options") or []):
            lines.append(f"mount -o remount,bind,ro {cp}")
    lines.append("exec " + " ".join(shlex.quote(str(a)) for a in argv))
    return "\n".join(lines) + "\n"


class Probe:
    """tests/vcuda/vcuda_probe run in a "container" of the CDI edits: one command in, one
    line out (as test_vcuda.py's Probe)."""

    def __init__(self, build_dir, edits, tmp, more_env):
        env = dict(e.split("=", 1) for e in edits["env"])
        env.update(more_env)
        tmp.mkdir(parents=True, exist_ok=True)
        exe = build_dir / "tests" / "vcuda" / "vcuda_probe_direct"
        script = container_script(edits, tmp / "ns", ["env", "-i"] + [
            f"{k}={v}" for k, v in env.items()] + [str(exe), "--lookup", "direct"])
        (tmp / "ns").mkdir(exist_ok=True)
        self.err_path = tmp / "probe.err"
        self.err = open(self.err_path, "w")
        self.p = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh",
                                   "-c", script], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.err, text=True, bufsize=1)
        self.lines = []
        self.cv = threading.Condition()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.p.stdout:
            with self.cv:
                self.lines.append(line.split())
                self.cv.notify_all()
        with self.cv:
            self.lines.append(None)
            self.cv.notify_all()

    def __call__(self, cmd, timeout=30):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        with self.cv:
            self.cv.wait_for(lambda: self.lines, timeout)
            if not self.lines or self.lines[0] is None:
                raise AssertionError(f"probe: no answer to {cmd!r}; stderr "
                                     f"{self.err_path.read_text()[-2000:]}")
            return self.lines.pop(0)

    def close(self):
        if self.p.poll() is None:
            try:
                self("quit", timeout=5)
            except (AssertionError, BrokenPipeError):
                pass
        rc = self.p.wait(timeout=30)
        self.err.close()
        return rc


def mockctl(build_dir, state, *args):
    return subprocess.run([str(build_dir / "tests/mock/mockctl"), str(state), *args],
                          capture_output=True, text=True, check=True).stdout


# ---- fixtures -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dra(cluster, deployed, webhook, build_dir):
    """The session's control plane with deploy/ (egpu-agent-dra's RBAC), DeviceClass
    gpu-share.elasticgpu.io (deploy/'s when it has one, else made here with the same CEL
    selector), namespace NS, and one DRANode with the agent's fake cards. The session's
    egpu-webhook serves deploy/'s claims.webhook.elasticgpu.io, which the API server calls
    (failurePolicy Fail) for every claim and template of this driver's classes."""
    assert cluster.version.startswith("v1.36"), cluster.version  # DRAConsumableCapacity on
    made_class = not any(o["kind"] == "DeviceClass" and o["metadata"]["name"] == CLASS
                         for o in deployed)
    if made_class:
        st, obj = cluster.call("POST", f"{RES}/deviceclasses", {
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": CLASS},
            "spec": {"selectors": [{"cel": {"expression": CLASS_SELECTOR}}]}})
        assert st in (201, 409), obj
    cluster.namespace(NS)
    n = dra_node.DRANode(cluster, NODE, build_dir).start()
    yield n
    for p in get(cluster, f"/api/v1/namespaces/{NS}/pods")["items"]:
        delete_pod(cluster, p["metadata"]["name"])
    try:
        wait(lambda: not get(cluster, f"/api/v1/namespaces/{NS}/pods")["items"], "pods gone", 30)
    finally:
        n.stop()  # its Node, slice and GPU objects go with it
        cluster.call("DELETE", f"/api/v1/namespaces/{NS}")
        if made_class:
            cluster.call("DELETE", f"{RES}/deviceclasses/{CLASS}")


@pytest.fixture(scope="module")
def shared(dra, cluster):
    """Claims share-a and share-b (cores 30, memory 4096Mi) used by pods pa and pb, both
    Running on the DRA node."""
    make_claim(cluster, "share-a")
    make_claim(cluster, "share-b")
    make_pod(cluster, "pa", claim="share-a")
    make_pod(cluster, "pb", claim="share-b")
    dra.pod(NS, "pa")
    dra.pod(NS, "pb")
    return {"a": claim_of(cluster, "share-a"), "b": claim_of(cluster, "share-b")}


# ---- (a) (b) (c): kube-scheduler's allocator ------------------------------------------


def test_slice_is_the_agents(dra, cluster):
    """The node's ResourceSlice is the agent's: driver, pool, two shareable devices with the
    cores and memory capacities (what the allocator below works from)."""
    (s,) = dra.slices()
    spec = s["spec"]
    assert spec["driver"] == DRIVER and spec["nodeName"] == NODE
    assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1"]
    for d in spec["devices"]:
        assert d["allowMultipleAllocations"] is True, d
        assert d["capacity"]["cores"]["value"] == "100", d
    assert dra.errors == []


def test_two_claims_share_one_gpu(dra, cluster, shared):
    """(a) kube-scheduler allocates both 30% + 4096Mi claims on one device of the node (its
    first fit), each with a shareID of its own and consumedCapacity as requested."""
    ra, rb = result(shared["a"]), result(shared["b"])
    assert ra["driver"] == rb["driver"] == DRIVER
    assert ra["pool"] == rb["pool"] == NODE
    assert ra["device"] == rb["device"] == "gpu-0", (ra, rb)
    assert ra["shareID"] and rb["shareID"] and ra["shareID"] != rb["shareID"], (ra, rb)
    for r in (ra, rb):
        assert r["consumedCapacity"] == {"cores": "30", "memory": "4Gi"}, r
    for name, c in shared.items():
        assert [x["name"] for x in c["status"]["reservedFor"]] == [f"p{name}"], c
    assert pod_of(cluster, "pa")["spec"]["nodeName"] == NODE


def test_template_claim_made_by_the_controller_manager(dra, cluster):
    """(b) A pod naming a ResourceClaimTemplate gets a claim of its own, made by
    kube-controller-manager's resourceclaim controller: owned by the pod, named in the
    pod's status.resourceClaimStatuses, allocated, and the pod Running."""
    st, obj = cluster.call("POST", f"{RES}/namespaces/{NS}/resourceclaimtemplates", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpu-share-30", "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [share_request()]}}}})
    assert st == 201, obj
    make_pod(cluster, "pt", template="gpu-share-30")
    pod = dra.pod(NS, "pt")
    (status,) = pod["status"]["resourceClaimStatuses"]
    assert status["name"] == "gpu" and status["resourceClaimName"].startswith("pt-gpu-")
    claim = allocated(cluster, status["resourceClaimName"])
    (owner,) = claim["metadata"]["ownerReferences"]
    assert owner["kind"] == "Pod" and owner["name"] == "pt" and \
        owner["uid"] == pod["metadata"]["uid"], owner
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpu"
    assert result(claim)["consumedCapacity"] == {"cores": "30", "memory": "4Gi"}
    assert dra.cdi[f"{NS}/pt"]["main"] == [
        f"k8s.{DRIVER}/claim={claim['metadata']['uid']}-{result(claim)['device']}"]
    # the pod's end deletes its claim (the controller again)
    delete_pod(cluster, "pt")
    wait(lambda: gone(cluster, f"{RES}/namespaces/{NS}/resourceclaims/"
                      f"{status['resourceClaimName']}"), "the template claim deleted", 60)


def test_claim_over_every_card_stays_pending(dra, cluster, shared):
    """(c) Cores 60 fits at most once per card (100 each), so of three such pods on this
    two-card node at least one cannot be placed: it stays Pending and unscheduled, its
    PodScheduled condition giving kube-scheduler's own reason, and its claim
    unallocated."""
    for i in range(3):
        make_claim(cluster, f"big-{i}", cores="60")
        make_pod(cluster, f"pbig-{i}", claim=f"big-{i}")

    def settled():
        out = {}
        for i in range(3):
            p = pod_of(cluster, f"pbig-{i}")
            cond = next((c for c in p.get("status", {}).get("conditions") or []
                         if c["type"] == "PodScheduled"), None)
            if p["spec"].get("nodeName"):
                out[i] = "bound"
            elif cond and cond["status"] == "False":
                out[i] = cond
            else:
                return None
        return out
    states = wait(settled, "the three cores-60 pods bound or unschedulable", 90)
    pending = {i: s for i, s in states.items() if s != "bound"}
    assert pending, states
    assert len(states) - len(pending) <= 2, states
    print(f"cores-60 pods: {len(states) - len(pending)} bound; pending: "
          f"{[c['message'] for c in pending.values()]}")
    for i, cond in pending.items():
        assert cond["reason"] == "Unschedulable", cond
        assert "cannot allocate all claims" in cond["message"], cond
        assert not claim_of(cluster, f"big-{i}").get("status", {}).get("allocation")
        assert pod_of(cluster, f"pbig-{i}")["status"]["phase"] == "Pending"
    # the bound ones each took a card of their own
    devices = [result(claim_of(cluster, f"big-{i}"))["device"] for i in states
               if states[i] == "bound"]
    assert len(set(devices)) == len(devices), devices
    for i in range(3):
        delete_pod(cluster, f"pbig-{i}")
    for i in range(3):
        wait(lambda: gone(cluster, f"/api/v1/namespaces/{NS}/pods/pbig-{i}"), "pbig gone", 60)
        cluster.call("DELETE", f"{RES}/namespaces/{NS}/resourceclaims/big-{i}")


# ---- (d) (e) (f) (g): the agent as the kubelet's DRA plugin ---------------------------


def test_prepare_calls_and_cdi_spec(dra, cluster, shared):
    """(d) One NodePrepareResources per pod (one driver) with the 45 s deadline, version
    v1.DRAPlugin; the CDI IDs answered name the claim's device; each spec file passes the
    CDI rules, its cdiVersion the lowest its fields need, and injects the card's device
    node, the interposer, /etc/ld.so.preload naming it, the share's dir and the limits."""
    m = dra.manager
    plugin = m.plugin(DRIVER)
    assert plugin.version == "v1.DRAPlugin", plugin
    reg = [r for r in m.registrations if r.info and r.info.name == DRIVER][-1]
    assert list(reg.info.supported_versions)[:2] == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    assert reg.ok and reg.notified is True
    for name, c in shared.items():
        uid = c["metadata"]["uid"]
        calls = [x for x in m.calls_of("NodePrepareResources") if uid in x.claims]
        assert len(calls) == 1, calls
        assert calls[0].claims == [uid] and calls[0].timeout_s == 45.0 and calls[0].error is None
        r = result(c)
        info = m.claims[uid]
        (dev,) = info.devices[DRIVER]
        assert dev["poolName"] == NODE and dev["deviceName"] == r["device"]
        assert dev["shareID"] == r["shareID"], (dev, r)
        kind = f"k8s.{DRIVER}/claim"
        assert dev["cdiDeviceIDs"] == [f"{kind}={uid}-{r['device']}"], dev
        assert dra.cdi[f"{NS}/p{name}"]["main"] == dev["cdiDeviceIDs"]

        spec = dra.cdi_spec(uid)
        assert spec is not None, dra.cdi_files()
        assert cdi_problems(spec) == [], json.dumps(spec, indent=1)
        # the lowest version the fields need: 0.5.0 when the UID starts with a digit
        assert spec["cdiVersion"] == cdi_min_version(spec), spec["cdiVersion"]
        assert spec["kind"] == kind
        assert [d["name"] for d in spec["devices"]] == [f"{uid}-{r['device']}"]
        edits = resolve(dra.cdi_dir, dev["cdiDeviceIDs"])
        env = dict(e.split("=", 1) for e in edits["env"])
        uuid = next(d for d in dra.slices()[0]["spec"]["devices"]
                    if d["name"] == r["device"])["attributes"]["uuid"]["string"]
        assert env.get("EGPU_VCUDA_GPUS") == uuid, env
        assert env.get("EGPU_VCUDA_CORE") == "30", env
        assert env.get("EGPU_VCUDA_MEMORY_MIB") == "4096", env
        nodes = [n["path"] for n in edits["deviceNodes"]]
        assert f"/dev/nvidia{r['device'].split('-')[1]}" in nodes and "/dev/nvidiactl" in nodes, \
            nodes
        mounts = {mm["containerPath"]: mm for mm in edits["mounts"]}
        pre = mounts["/etc/ld.so.preload"]
        assert "ro" in pre["options"], pre
        lib = pathlib.Path(pre["hostPath"]).read_text().split()
        assert len(lib) == 1 and lib[0] in mounts and "ro" in mounts[lib[0]]["options"], \
            (lib, mounts)
        assert pathlib.Path(mounts[lib[0]]["hostPath"]).samefile(
            dra.build / "src/vcuda/libegpu-vcuda.so")
        conf_dir = mounts["/etc/elastic-gpu"]
        assert "ro" in conf_dir["options"], conf_dir
        conf = (pathlib.Path(conf_dir["hostPath"]) / "vcuda.conf").read_text()
        assert "EGPU_VCUDA_MEMORY_MIB=4096\n" in conf and "EGPU_VCUDA_CORE=30\n" in conf, conf
        assert str(dra.alloc_root) in conf_dir["hostPath"], conf_dir
    assert dra.errors == []


def test_process_held_to_the_share(dra, cluster, shared, build_dir, tmp_path):
    """(e) vcuda_probe run in a mount namespace with claim share-a's CDI mounts and env
    (the interposer preloaded by /etc/ld.so.preload alone, no LD_PRELOAD), over the mock
    CUDA driver whose card has the slice's UUID: cuMemGetInfo says 4096 MiB, allocations
    stop there (the driver took no more), and a spinning kernel gets about 30% of the
    card (held_share of test_vcuda.py: busy over wall time at most 40%, over the probe's
    own time at least 20%)."""
    from test_vcuda import held_share
    c = shared["a"]
    r = result(c)
    ids = dra.cdi[f"{NS}/pa"]["main"]
    edits = resolve(dra.cdi_dir, ids)
    devs = {d["name"]: d for d in dra.slices()[0]["spec"]["devices"]}
    cards = ",".join(f"NVIDIA H100 80GB HBM3:81920:{devs[n]['attributes']['uuid']['string']}"
                     for n in ("gpu-0", "gpu-1"))
    state = tmp_path / "mock.state"
    more = {"LD_LIBRARY_PATH": str(build_dir / "tests/mock/cuda"),
            "EGPU_MOCK_CUDA_STATE": str(state), "EGPU_MOCK_NVML_GPUS": cards,
            "EGPU_MOCK_CUDA_KERNEL_NS": "k=1000000"}
    card = int(r["device"].split("-")[1])
    probe = Probe(build_dir, edits, tmp_path / "ctr", more)
    try:
        assert probe("init")[1] == "0"
        assert probe(f"ctx {card} primary")[1] == "0"
        a = probe("meminfo")
        assert a[1] == "0" and int(a[3]) == 4096 * MIB, a      # the limit, not the card's 80 GiB
        filled = probe(f"fill mem {100 * MIB}")
        assert filled[2] == str(OOM), filled
        assert int(filled[1]) == int(a[2]) // (100 * MIB), (filled, a)  # exactly what was free
        used = int(re.search(rf"^card {card} .*used_bytes=(\d+)",
                             mockctl(build_dir, state), re.M).group(1))
        assert used <= 4096 * MIB, used
        assert probe("freeall")[2] == "0"
        assert probe("spin kernel k 1") == ["spin", "0"]
        time.sleep(0.5)  # past learning the kernel
        world = {"state": state, "paths": {"mockctl": build_dir / "tests/mock/mockctl"}}
        share, own, waited = held_share(world, probe, 1.5, card=card)
        stop = probe("stop")
        assert stop[2] == "0" and int(stop[1]) > 50, stop
        said = f"{share:.1f}% of the card, {own:.1f}% of the probe's own time " \
               f"({waited:.2f} s waiting for a CPU)"
        print(f"a 30% + 4096 MiB share: {said}; {int(filled[1])} x 100 MiB fitted")
        assert share <= 40 and own >= 20, f"a 30% share got {said}"
    finally:
        rc = probe.close()
    assert rc == 0, probe.err_path.read_text()[-2000:]


def test_restart_gives_the_same_cdi_ids(dra, cluster, shared):
    """(f) A kubelet restart: the node's slices are deleted and the agent publishes its slice
    again; the new manager registers the plugin again and prepares pa and pb again; the
    agent answers the same CDI IDs from its records (record and spec not written again).
    Then an agent restart: the same once more, the slice kept."""
    uids = [c["metadata"]["uid"] for c in shared.values()]
    before = {k: dict(v) for k, v in dra.cdi.items() if k in (f"{NS}/pa", f"{NS}/pb")}
    records = {u: dra.alloc_root / "dra" / f"claim-{u}.json" for u in uids}
    specs = {u: dra.cdi_dir / f"k8s.{DRIVER}-claim_{u}.json" for u in uids}
    stamps = {p: p.stat().st_mtime_ns for p in [*records.values(), *specs.values()]}
    old_slice = dra.slices()[0]["metadata"]["uid"]
    m = dra.restart_kubelet()
    for u in uids:
        (call,) = [x for x in m.calls_of("NodePrepareResources") if u in x.claims]
        assert call.error is None, call
    assert {k: dict(v) for k, v in dra.cdi.items() if k in before} == before
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    s = wait(lambda: dra.slices(), "the agent publishing its slice again", 60)
    assert s[0]["metadata"]["uid"] != old_slice

    kept = dra.slices()[0]["metadata"]["uid"]
    dra.stop_agent()
    dra.start_agent()
    assert dra.slices()[0]["metadata"]["uid"] == kept   # within the kubelet's 30 s: kept
    first = len(dra.manager.calls)
    for u in uids:
        dra.manager.claims[u].prepared = False   # the pods synced again
    for key in before:
        dra.manager.prepare_pod(pod_of(cluster, key.split("/")[1]))
    assert all(x.error is None for x in dra.manager.calls[first:])
    assert {u: dra.manager.claims[u].cdi_ids() for u in uids} == \
        {u: [i for v in before.values() for i in v["main"] if u in i] for u in uids}
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert dra.errors == []
    print(f"restarts (s): {dra.timings}")


def test_a_v1beta1_kubelet_gets_the_same_ids(dra, cluster, shared, tmp_path):
    """The agent serves DRAPlugin v1beta1 too: a kubelet that speaks only v1beta1 (1.32, 1.33)
    registers it with that version, and its NodePrepareResources of pa's claim answers the
    same device and CDI IDs."""
    from fake_dra_manager import FakeDRAManager, V1BETA1
    old = FakeDRAManager(str(dra.registry), str(tmp_path / "state"), dra.get_claim,
                         kubelet_services=[V1BETA1]).start()
    try:
        p = old.wait_for_plugin(DRIVER, timeout=30)
        assert p.version == V1BETA1, p
        old.prepare_pod(pod_of(cluster, "pa"))
        (call,) = old.calls_of("NodePrepareResources")
        assert call.version == V1BETA1 and call.error is None, call
        uid = shared["a"]["metadata"]["uid"]
        (dev,) = old.claims[uid].devices[DRIVER]
        assert dev["cdiDeviceIDs"] == dra.cdi[f"{NS}/pa"]["main"], dev
        assert dev["deviceName"] == result(shared["a"])["device"], dev
    finally:
        old.stop()


def test_unprepare_after_the_pod_ends(dra, cluster, shared):
    """(g) Deleting pa ends it: the manager calls NodeUnprepareResources for share-a (its
    last pod), and the agent removes the share's dirs, the CDI spec and its record; pb's
    stay."""
    ua, ub = (shared[k]["metadata"]["uid"] for k in ("a", "b"))
    spec_a = dra.cdi_dir / f"k8s.{DRIVER}-claim_{ua}.json"
    edits = resolve(dra.cdi_dir, dra.cdi[f"{NS}/pa"]["main"])
    dirs = [pathlib.Path(mm["hostPath"]) for mm in edits["mounts"]
            if str(dra.alloc_root) in mm["hostPath"]]
    assert dirs and all(d.exists() for d in dirs), dirs
    delete_pod(cluster, "pa")
    wait(lambda: gone(cluster, f"/api/v1/namespaces/{NS}/pods/pa"), "pa deleted", 60)
    wait(lambda: ua not in dra.manager.claims, "share-a unprepared", 30)
    (un,) = [x for x in dra.manager.calls_of("NodeUnprepareResources") if ua in x.claims]
    assert un.claims == [ua] and un.error is None and un.timeout_s == 45.0, un
    assert not spec_a.exists(), dra.cdi_files()
    for d in dirs:  # the share's dir and all in it (vcuda.conf, shared/, ld.so.preload)
        assert not d.exists(), d
    assert not (dra.alloc_root / "dra" / f"claim-{ua}.json").exists()
    assert (dra.cdi_dir / f"k8s.{DRIVER}-claim_{ub}.json").exists()
    assert (dra.alloc_root / "dra" / f"claim-{ub}.json").exists()
    assert dra.errors == []


def test_agent_calls_are_allowed_by_its_rbac(dra, cluster):
    """Every request egpu-agent --mode dra made with ServiceAccount egpu-agent-dra's token (the
    one deploy/agent-dra gives it) was allowed: its slice writes, the claims it read for
    prepare, the node it read."""
    user = "system:serviceaccount:elastic-gpu-system:egpu-agent-dra"
    events = cluster.audit(user)
    assert events, f"no request of {user} in the audit log"
    denied = [(e["verb"], e["requestURI"], e["responseStatus"]["code"]) for e in events
              if e.get("responseStatus", {}).get("code") in (401, 403)]
    assert not denied, denied
    seen = {(e["objectRef"].get("resource"), e["verb"]) for e in events if e.get("objectRef")}
    assert {("resourceslices", "create"), ("resourceclaims", "get")} <= seen, seen


# ---- the real kubelet ------------------------------------------------------------------


def test_the_real_kubelet_prepares_through_the_agent(cluster, dra, build_dir, tmp_path_factory):
    """The real kubelet 1.36.3 (tests/cluster/kubelet.py, mode "dra") registers the agent
    through its plugin watcher, and for a pod of a claim allocated on its node calls
    NodePrepareResources: the agent writes the claim's CDI spec (which the pod's
    containerd 1.6 does not apply) and the pod runs; after the pod ends the kubelet calls
    NodeUnprepareResources and the spec and the agent's record go."""
    import kubelet as real  # tests/cluster/kubelet.py
    cannot = real.machine_cannot()
    if cannot:
        pytest.skip(f"{MACHINE_CANNOT}{cannot}")
    lacking = real.missing()
    if lacking:
        pytest.skip(f"a real kubelet node needs {', '.join(lacking)} (scripts/deps.sh, "
                    "`make k8s`)")
    name = "dra-real-1"
    n = real.RealNode(cluster, name, build_dir, mode="dra",
                      log_dir=tmp_path_factory.mktemp("real-dra-logs")).start()
    try:
        make_claim(cluster, "real-a")
        st, obj = cluster.call("POST", f"/api/v1/namespaces/{NS}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "preal", "namespace": NS},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": name},
                     "tolerations": [real.TOLERATION],
                     "containers": [{"name": "main", "image": real.TEST_IMAGE,
                                     "imagePullPolicy": "Never",
                                     "resources": {"claims": [{"name": "gpu"}]}}],
                     "resourceClaims": [{"name": "gpu", "resourceClaimName": "real-a"}],
                     "terminationGracePeriodSeconds": 1}})
        assert st == 201, obj
        wait(lambda: pod_of(cluster, "preal")["status"].get("phase") == "Running",
             "preal Running on the real kubelet", 120)
        c = claim_of(cluster, "real-a")
        r = result(c)
        assert r["pool"] == name and r["shareID"], r
        uid = c["metadata"]["uid"]
        spec = n.cdi_dir / f"k8s.{DRIVER}-claim_{uid}.json"
        assert spec.exists(), sorted(os.listdir(n.cdi_dir))
        assert cdi_problems(json.loads(spec.read_text())) == []
        record = n.base / "alloc" / "dra" / f"claim-{uid}.json"
        assert record.exists()
        delete_pod(cluster, "preal")
        wait(lambda: gone(cluster, f"/api/v1/namespaces/{NS}/pods/preal"), "preal gone", 90)
        wait(lambda: not spec.exists() and not record.exists(),
             "the kubelet unpreparing real-a", 90)
        cluster.call("DELETE", f"{RES}/namespaces/{NS}/resourceclaims/real-a")
    finally:
        n.stop()


# ---- the checks' own checks (no control plane) -----------------------------------------

GOOD_SPEC = {  # the layout of cdi_notes.md section 5, with values of this file's own
    "cdiVersion": "0.5.0", "kind": "k8s.gpu.elasticgpu.io/claim",
    "devices": [{"name": "0b5e2c1d-7a3f-4e9b-8c2d-5f6a7b8c9d0e-gpu-1", "containerEdits": {
        "env": ["EGPU_VCUDA_CORE=30", "EGPU_VCUDA_MEMORY_MIB=4096"],
        "deviceNodes": [{"path": "/dev/nvidia1"}],
        "mounts": [{"hostPath": "/var/lib/elastic-gpu/alloc/dra/x", "containerPath":
                    "/etc/elastic-gpu", "options": ["ro", "nosuid", "nodev", "bind"]}]}}],
    "containerEdits": {
        "deviceNodes": [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}],
        "mounts": [{"hostPath": "/opt/x/ld.so.preload", "containerPath": "/etc/ld.so.preload",
                    "options": ["ro", "nosuid", "nodev", "bind"]}]}}


def test_cdi_rules_accept_a_good_spec_and_refuse_breakage():
    """cdi_problems accepts a spec of the layout cdi_notes.md describes, and refuses what a
    CDI loader refuses: an unknown key, a version below what the fields need (a device
    name starting with a digit needs 0.5.0, annotations 0.6.0) or unknown, a bad kind, an
    env entry without a name, a relative device node, a mount without containerPath, a
    device name given twice."""
    good = GOOD_SPEC
    assert cdi_problems(good) == [] and cdi_min_version(good) == "0.5.0"

    def broken(change):
        s = json.loads(json.dumps(good))
        change(s)
        return cdi_problems(s)
    assert broken(lambda s: s.update(extra=1))
    assert broken(lambda s: s.update(cdiVersion="0.4.0"))
    assert broken(lambda s: s.update(cdiVersion="0.9.0"))
    assert broken(lambda s: s.update(kind="k8s.gpu.elasticgpu.io"))
    assert broken(lambda s: s["devices"][0]["containerEdits"]["env"].append("=1"))
    assert broken(lambda s: s["containerEdits"]["deviceNodes"].append({"path": "dev/x"}))
    assert broken(lambda s: s["containerEdits"]["mounts"].append({"hostPath": "/x"}))
    assert broken(lambda s: s["devices"].append(dict(s["devices"][0])))
    assert broken(lambda s: s["devices"][0].update(annotations={"a": "b"}))  # needs 0.6.0


def test_container_mounts_change_nothing_on_the_host(tmp_path):
    """container_script's namespace: a file bound at /etc/ld.so.preload and a dir at
    /etc/elastic-gpu are seen inside, read-only, and neither path appears on the host."""
    host_dir = tmp_path / "share"
    host_dir.mkdir()
    (host_dir / "vcuda.conf").write_text("x\n")
    pre = tmp_path / "ld.so.preload"
    pre.write_text("/nonexistent/lib.so\n")  # a missing preload is a warning of ld.so only
    edits = {"env": ["A=1"], "deviceNodes": [], "mounts": [
        {"hostPath": str(host_dir), "containerPath": "/etc/elastic-gpu",
         "options": ["ro", "nosuid", "nodev", "bind"]},
        {"hostPath": str(pre), "containerPath": "/etc/ld.so.preload",
         "options": ["ro", "nosuid", "nodev", "bind"]}]}
    assert not os.path.exists("/etc/elastic-gpu") and not os.path.exists("/etc/ld.so.preload")
    (tmp_path / "ns").mkdir()
    script = container_script(edits, tmp_path / "ns", [
        "sh", "-c", "cat /etc/elastic-gpu/vcuda.conf /etc/ld.so.preload; "
        "touch /etc/elastic-gpu/w 2>/dev/null && echo writable || echo read-only"])
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0 and "unshare failed" in r.stderr:
        pytest.skip(f"{MACHINE_CANNOT}no mount namespace: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:3] == ["x", "/nonexistent/lib.so", "read-only"], r.stdout
    assert not os.path.exists("/etc/elastic-gpu") and not os.path.exists("/etc/ld.so.preload")
