"""A GPU node of the real control plane, without a container runtime.

The project's fake kubelet (tests/kubelet/fake_kubelet.py) stands in for the kubelet, never
for the API server. A Node here is what a kubelet and the egpu-agent DaemonSet make of a
machine:

- the kubelet's identity: a client certificate for system:node:<name> in group system:nodes,
  so the Node authorizer and the NodeRestriction admission plugin hold it to its own Node,
  its Lease and the pods bound to it, as they hold a kubelet;
- it registers its Node (capacity and allocatable: cpu, memory, pods, and each device
  plugin's resource as the count of its healthy devices, updated when the list changes),
  renews its Lease in kube-node-lease every 2 s (duration 40 s, as the kubelet) and keeps the
  Ready condition's heartbeat, so the node lifecycle controller keeps it Ready and untainted;
- egpu-agent runs as deploy/agent/daemonset.yaml runs it, with ServiceAccount egpu-agent's
  token, over the mock NVML (tests/mock) of a simulated machine of its own; changed: --listen
  127.0.0.1, --port 0, and its kubelet paths (--device-plugin-dir, --pod-resources-socket,
  --alloc-root) and --interposer moved into the node's folder, plus --nvml-library;
- for each pod bound to it (spec.nodeName), it admits each container as the kubelet's device
  manager does (GetPreferredAllocation, Allocate, PreStartContainer through the fake
  kubelet's admit, for the device plugin resources the container asks), then sets the pod's
  status Running with the containers running and Ready; an Allocate that fails sets the pod
  Failed with reason UnexpectedAdmissionError and the plugin's message, and a
  PreStartContainer that fails leaves it Pending, the container waiting with reason
  CreateContainerError and the message, as the kubelet does (which then tries again; this
  node does not). A pod being deleted is released (its devices freed) and deleted with
  grace 0.

stop() deletes what the node left in the cluster (forget_node(): its GPU objects,
ResourceSlices, Lease and Node), as a machine taken out of the cluster, so a later test of
the same cluster sees neither the node nor its cards; stop(forget=False) leaves them, as a
machine that died does (its Node goes NotReady, then unreachable).

Pods are found by listing with fieldSelector spec.nodeName every 0.3 s (the kubelet
watches; a list is enough here and cannot miss a pod)."""
import hashlib
import json
import os
import pathlib
import shutil
import sys
import tempfile
import threading
import time
import traceback

import components
from cluster import wait_until

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "kubelet"))
from fake_kubelet import FakeKubelet  # noqa: E402

GPU_CORE = "elasticgpu.io/gpu-core"
LEASE_S = 40


def now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def now_micro():
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


def forget_node(cluster, name):
    """Delete, as the admin, what node name leaves in cluster once its processes are gone:
    its GPU objects (spec.nodeName name), its ResourceSlices (spec.nodeName, a DRA node's),
    its Lease in kube-node-lease and its Node. A 404 is gone already (also: GPU objects or
    resource.k8s.io/v1 not served). Returns what could not be deleted, as text ([]: all)."""
    failed = []

    def delete(path):
        st, out = cluster.call("DELETE", path)
        if st not in (200, 202, 404):
            failed.append(f"DELETE {path}: {st} {out}")

    try:
        st, lst = cluster.call("GET", "/apis/elasticgpu.io/v1alpha1/gpus")
        if st == 200:
            for g in lst.get("items") or []:
                if (g.get("spec") or {}).get("nodeName") == name:
                    delete(f"/apis/elasticgpu.io/v1alpha1/gpus/{g['metadata']['name']}")
        elif st != 404:
            failed.append(f"GET GPU objects: {st} {lst}")
        delete(f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3D{name}")
        delete(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}")
        delete(f"/api/v1/nodes/{name}")
    except OSError as e:  # the API server is gone (the cluster stopped first)
        failed.append(f"node {name}: forget: {e}")
    return failed


def default_cards(name):
    """EGPU_MOCK_NVML_GPUS for node name: two A100 80GB with UUIDs of that node's own (the
    mock's default cards have the same UUIDs on every machine, and egpu-scheduler rightly
    leaves out a GPU object whose UUID another node's already has)."""
    tag = hashlib.sha256(name.encode()).hexdigest()[:10]
    return ",".join(f"NVIDIA A100-SXM4-80GB:81920:GPU-6d0c1c3e-0000-4000-8000-{tag}{i:02d}"
                    for i in range(2))


class Node:
    """Node name of cluster (see the module's docstring). labels: the Node's labels;
    cards: the mock NVML's cards (EGPU_MOCK_NVML_GPUS; default default_cards(name))."""

    def __init__(self, cluster, name, build_dir, labels=None, cards=None, cpu="64",
                 memory="256Gi"):
        self.cluster, self.name, self.build = cluster, name, pathlib.Path(build_dir)
        self.labels = dict(labels or {})
        self.cards, self.cpu, self.memory = cards, cpu, memory
        self.base = pathlib.Path(tempfile.mkdtemp(prefix=f"egpu-{name}-"))  # short: sockets
        self.state = self.base / "mock.state"
        self.kubelet = self.agent = None
        self.errors = []      # what the node loop could not do (tests assert it stays empty)
        self.admitted = {}    # "ns/pod" -> {container: Admission}
        self._stop = threading.Event()
        self._thread = None
        self._allocatable = {}
        crt, key = cluster.pki.cert(f"node-{name}", f"system:node:{name}",
                                    orgs=("system:nodes",))
        self.cert = (crt, key)
        self.kubeconfig = cluster.write_kubeconfig(self.base / "kubelet.kubeconfig",
                                                   cert=(crt, key))

    # ---- the API as the kubelet ------------------------------------------------------

    def call(self, method, path, body=None, ctype="application/json"):
        """A request as system:node:<name> (the kubelet's identity)."""
        return self.cluster.call(method, path, body, ctype=ctype, cert=self.cert)

    def _node_status(self):
        alloc = {"cpu": self.cpu, "memory": self.memory, "pods": "110", **self._allocatable}
        hb = now()
        return {"capacity": dict(alloc), "allocatable": dict(alloc),
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "kubelet is posting ready status",
                                "lastHeartbeatTime": hb, "lastTransitionTime": hb}],
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                              {"type": "Hostname", "address": self.name}],
                "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "",
                             "kernelVersion": os.uname().release, "osImage": "Debian 12",
                             "containerRuntimeVersion": "fake://0", "kubeletVersion":
                             self.cluster.version, "kubeProxyVersion": "",
                             "operatingSystem": "linux", "architecture": "amd64"}}

    def _register(self):
        st, out = self.call("POST", "/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.name, "labels": {
                "kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", **self.labels}},
            "status": self._node_status()})
        if st != 201:
            raise AssertionError(f"node {self.name}: register: {st} {out}")

    def _patch_status(self):
        st, out = self.call("PATCH", f"/api/v1/nodes/{self.name}/status",
                            {"status": self._node_status()},
                            ctype="application/strategic-merge-patch+json")
        if st != 200:
            self.errors.append(f"node status: {st} {out}")

    def _renew_lease(self):
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.name}"
        spec = {"holderIdentity": self.name, "leaseDurationSeconds": LEASE_S,
                "renewTime": now_micro()}
        st, out = self.call("GET", path)
        if st == 404:
            st, out = self.call("POST", path.rsplit("/", 1)[0], {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": "kube-node-lease"},
                "spec": spec})
            ok = st == 201
        elif st == 200:
            out["spec"].update(spec)
            st, out = self.call("PUT", path, out)
            ok = st == 200
        else:
            ok = False
        if not ok:
            self.errors.append(f"lease: {st} {out}")

    # ---- life cycle ------------------------------------------------------------------

    def start(self):
        self.kubelet = FakeKubelet(str(self.base / "device-plugins")).start()
        self._register()
        self._renew_lease()
        env = {"EGPU_MOCK_CUDA_STATE": str(self.state), "NODE_NAME": self.name,
               "EGPU_MOCK_NVML_GPUS": self.cards or default_cards(self.name)}
        self.agent = components.agent(
            self.cluster, self.build, self.base, node=self.name, env=env,
            device_plugin_dir=self.base / "device-plugins",
            pod_resources_socket=self.base / "pod-resources" / "kubelet.sock",
            alloc_root=self.base / "alloc",
            interposer=self.build / "src" / "vcuda" / "libegpu-vcuda.so",
            nvml=self.build / "tests" / "mock" / "cuda" / "libnvidia-ml.so.1")
        plugin = self.kubelet.wait_for_plugin(GPU_CORE, timeout=30)
        self.kubelet.wait_for_devices(GPU_CORE, lambda d: len(d) > 0, timeout=30)
        self._allocatable = {GPU_CORE: str(len(plugin.healthy_ids()))}
        self._patch_status()
        self._thread = threading.Thread(target=self._loop, name=f"node-{self.name}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self, forget=True):
        """Stop the node's loop, agent and kubelet and remove its folder; forget: then delete
        its objects from the cluster (forget_node(); what could not be is in errors), False:
        leave them, as a machine that died does."""
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)
        if self.agent:
            self.agent.stop()
        if self.kubelet:
            self.kubelet.stop()
        shutil.rmtree(self.base, ignore_errors=True)
        if forget:
            self.errors.extend(forget_node(self.cluster, self.name))

    def _loop(self):
        last_lease = last_status = time.monotonic()
        while not self._stop.wait(0.3):
            try:
                t = time.monotonic()
                if t - last_lease >= 2:
                    self._renew_lease()
                    last_lease = t
                plugin = self.kubelet.plugins.get(GPU_CORE)
                healthy = str(len(plugin.healthy_ids())) if plugin else "0"
                if t - last_status >= 10 or healthy != self._allocatable.get(GPU_CORE):
                    self._allocatable[GPU_CORE] = healthy
                    self._patch_status()
                    last_status = t
                self._sync_pods()
            except Exception:  # noqa: BLE001  (a test reads errors; the loop goes on)
                self.errors.append(traceback.format_exc())

    # ---- pods ------------------------------------------------------------------------

    def _sync_pods(self):
        st, lst = self.call("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{self.name}")
        if st != 200:
            self.errors.append(f"list pods: {st} {lst}")
            return
        for pod in lst["items"]:
            m = pod["metadata"]
            key = f"{m['namespace']}/{m['name']}"
            if m.get("deletionTimestamp"):
                self._delete(pod, key)
            elif key not in self.admitted and pod.get("status", {}).get("phase") in (
                    None, "Pending"):
                self._admit(pod, key)

    def _admit(self, pod, key):
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        self.admitted[key] = {}
        statuses = []
        for c in pod["spec"]["containers"]:
            want = (c.get("resources", {}).get("limits") or {}).get(GPU_CORE)
            if want:
                adm = self.kubelet.admit(GPU_CORE, int(want), namespace=ns, pod=name,
                                         container=c["name"])
                self.admitted[key][c["name"]] = adm
                if not adm.ok and adm.stage != "PreStartContainer":
                    self._set_status(pod, {
                        "phase": "Failed", "reason": "UnexpectedAdmissionError",
                        "message": f"Allocate failed due to {adm.error}, which is unexpected"})
                    return
                if not adm.ok:  # the container is not started; the kubelet tries again later
                    self._set_status(pod, {"phase": "Pending", "containerStatuses": [{
                        "name": c["name"], "image": c["image"], "imageID": "", "ready": False,
                        "restartCount": 0, "started": False, "state": {"waiting": {
                            "reason": "CreateContainerError", "message": adm.error}}}]})
                    return
            statuses.append({"name": c["name"], "image": c["image"], "imageID": "",
                             "ready": True, "restartCount": 0, "started": True,
                             "state": {"running": {"startedAt": now()}}})
        t = now()
        self._set_status(pod, {
            "phase": "Running", "hostIP": "127.0.0.1", "podIP": "127.0.0.1", "startTime": t,
            "conditions": [{"type": c, "status": "True", "lastTransitionTime": t}
                           for c in ("PodScheduled", "Initialized", "ContainersReady",
                                     "Ready")],
            "containerStatuses": statuses})

    def _set_status(self, pod, status):
        m = pod["metadata"]
        st, out = self.call("PATCH", f"/api/v1/namespaces/{m['namespace']}/pods/{m['name']}"
                            "/status", {"status": status},
                            ctype="application/merge-patch+json")
        # 404: the pod was deleted since it was listed (grace 0 deletes at once); the
        # kubelet's status manager drops the update too.
        if st not in (200, 404):
            self.errors.append(f"pod status {m['namespace']}/{m['name']}: {st} {out}")

    def _delete(self, pod, key):
        m = pod["metadata"]
        self.kubelet.remove_pod(m["namespace"], m["name"])
        self.admitted.pop(key, None)
        st, out = self.call("DELETE", f"/api/v1/namespaces/{m['namespace']}/pods/{m['name']}",
                            {"apiVersion": "v1", "kind": "DeleteOptions",
                             "gracePeriodSeconds": 0,
                             "preconditions": {"uid": m["uid"]}})
        if st not in (200, 404, 409):
            self.errors.append(f"delete {key}: {st} {out}")

    def pod(self, ns, name, timeout=60, phase="Running"):
        """Wait until pod ns/name is in phase on this node; the pod."""
        last = {}

        def in_phase():
            st, p = self.cluster.call("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
            last["pod"] = p
            return st == 200 and p.get("status", {}).get("phase") == phase and p
        try:
            return wait_until(in_phase, f"{ns}/{name} {phase}", timeout)
        except TimeoutError:
            raise AssertionError(f"{ns}/{name} not {phase} on {self.name}: "
                                 f"{json.dumps(last.get('pod'))[:2000]}; node errors "
                                 f"{self.errors}") from None
