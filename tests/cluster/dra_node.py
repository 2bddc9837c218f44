"""A DRA GPU node of the real control plane, without a container runtime.

What tests/cluster/node.py's Node is for device-plugin mode, DRANode is for DRA mode
(issue 26): the kubelet's identity, its Node (labelled elasticgpu.io/agent-mode=dra, the
label the DRA DaemonSet selects on) and Lease as Node does, and

- egpu-agent --mode dra as deploy/agent-dra's DaemonSet runs it (components.dra_agent:
  ServiceAccount egpu-agent-dra's token), with fake cards (the fake backend's 2xH100-80GB
  by default, so no NVML is needed) and its kubelet paths (the plugin registry, the
  DRAPlugin socket, the CDI dir, --alloc-root) and --interposer moved into the node's
  folder (agent_args()); it publishes the node's ResourceSlice and registers with the
  kubelet's plugin watcher;
- as its kubelet, tests/kubelet/fake_dra_manager.py's FakeDRAManager (registration, one
  NodePrepareResources per driver per pod with the 45 s deadline, NodeUnprepareResources
  after the last pod using a claim ends), the ResourceClaims read with the node's own
  identity (the Node authorizer lets a node read the claims of its pods, as the kubelet);
- for each pod bound to it (spec.nodeName) that is Pending: its claims prepared
  (prepare_pod), then the pod Running with its containers running and Ready, each
  container's CDI IDs (what CRI's cdi_devices would carry) kept in cdi[ns/pod][container];
  a prepare that fails leaves the pod Pending, an Event FailedPrepareDynamicResources
  with the kubelet's message, and the node tries again 2 s later (the kubelet's pod worker
  backs off too); a pod being deleted ends (pod_ended: its claims unprepared when it was
  their last pod) and is deleted with grace 0, and so does a pod that is gone from the
  list (deleted with grace 0 by its owner, which the kubelet learns from its watch) or
  Succeeded or Failed; every 5 s the manager reconciles against the pods still bound
  here (the kubelet does every 60 s);
- restart_kubelet(): what a kubelet restart does: the manager stops, the node's
  ResourceSlices are deleted (DeleteCollection by spec.nodeName, as the kubelet at its
  start), and a new manager on the same state dir registers the plugin again and prepares
  the claims of the running pods again (the "prepared" flag is not checkpointed).

The label makes deploy/agent-dra's DaemonSet (when installed) put its egpu-agent-dra pod
here; it is set Running like any pod without claims: the agent runs here as a host process
in its place.

Pods are found by listing with fieldSelector spec.nodeName every 0.3 s, as Node does."""
import json
import os
import pathlib
import shutil
import sys
import threading
import time
import traceback
import urllib.parse

import components
from cluster import wait_until
from node import Node, forget_node, now

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "kubelet"))
from fake_dra_manager import FakeDRAManager, PrepareError  # noqa: E402

DRIVER = "gpu.elasticgpu.io"
MODE_LABEL = "elasticgpu.io/agent-mode"
FAKE_GPUS = "2xH100-80GB"
RETRY_S = 2.0
RECONCILE_S = 5.0


def agent_args(base, build_dir, fake_gpus):
    """egpu-agent --mode dra's paths and cards for a node in folder base (the kubelet's
    paths moved there): {flag: value} (components.dra_agent adds the rest)."""
    return {"--fake-gpus": fake_gpus,
            "--plugin-registry-dir": base / "plugins_registry",
            "--dra-socket": base / "plugins" / DRIVER / "dra.sock",
            "--cdi-dir": base / "cdi",
            "--alloc-root": base / "alloc",
            "--interposer": pathlib.Path(build_dir) / "src" / "vcuda" / "libegpu-vcuda.so"}


class DRANode(Node):
    """DRA node name of cluster (see the module's docstring); fake_gpus: the agent's
    --fake-gpus."""

    def __init__(self, cluster, name, build_dir, labels=None, fake_gpus=FAKE_GPUS, **kw):
        super().__init__(cluster, name, build_dir, labels={MODE_LABEL: "dra", **(labels or {})},
                         **kw)
        self.fake_gpus = fake_gpus
        self.flags = agent_args(self.base, build_dir, fake_gpus)
        self.registry = self.base / "plugins_registry"
        self.cdi_dir = self.base / "cdi"
        self.alloc_root = self.base / "alloc"
        self.state_dir = self.base / "kubelet-state"
        self.manager = None
        self.cdi = {}            # "ns/pod" -> {container: [CDI IDs]}
        self.prepare_errors = {}  # "ns/pod" -> the last PrepareError text
        self.uids = {}           # "ns/pod" -> pod uid, for the pods prepared here
        self._retry_at = {}
        self._restarted = set()  # pod keys to prepare again after a kubelet restart
        self._lock = threading.RLock()
        self._last_reconcile = 0.0
        self.timings = {}        # seconds the last agent start, stop and kubelet restart took

    # ---- the kubelet's API reads ------------------------------------------------------

    def get_claim(self, ns, name):
        st, obj = self.call("GET", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/"
                            f"{urllib.parse.quote(name)}")
        if st == 404:
            return None
        if st != 200:
            raise PrepareError(f"prepare dynamic resources: GET ResourceClaim {ns}/{name}: "
                               f"{st} {obj}")
        return obj

    def slices(self):
        st, lst = self.cluster.call("GET", "/apis/resource.k8s.io/v1/resourceslices"
                                    f"?fieldSelector=spec.nodeName%3D{self.name}")
        assert st == 200, lst
        return lst["items"]

    # ---- life cycle -------------------------------------------------------------------

    def start(self, agent=True):
        self._register()
        self._renew_lease()
        self._patch_status()
        self.manager = FakeDRAManager(str(self.registry), str(self.state_dir),
                                      self.get_claim).start()
        if agent:
            self.start_agent()
        self._thread = threading.Thread(target=self._loop, name=f"dra-node-{self.name}",
                                        daemon=True)
        self._thread.start()
        return self

    def start_agent(self, timeout=60):
        """egpu-agent --mode dra for this node; waits until its plugin is registered and
        its ResourceSlice published."""
        t = time.monotonic()
        seen = len(self.manager.registrations)
        n = getattr(self, "_agent_starts", 0)
        self._agent_starts = n + 1
        f = self.flags
        self.agent = components.dra_agent(
            self.cluster, self.build, self.base, self.name, f["--plugin-registry-dir"],
            f["--dra-socket"], f["--cdi-dir"], f["--alloc-root"], f["--interposer"],
            fake_gpus=self.fake_gpus, name=f"egpu-agent-{self.name}" + (f"-{n}" if n else ""),
            timeout=timeout)
        wait_until(lambda: any(r.ok and r.info.name == DRIVER
                               for r in self.manager.registrations[seen:]),
                   f"{self.name}'s agent registered with the kubelet", timeout)
        self.timings["agent registered"] = round(time.monotonic() - t, 2)
        wait_until(lambda: self.slices(), f"the ResourceSlice of {self.name}", timeout)
        self.timings["agent slice"] = round(time.monotonic() - t, 2)
        return self.agent

    def stop_agent(self, timeout=30):
        """Stop the agent (SIGTERM) and wait until the kubelet's plugin watcher saw its
        registration socket go."""
        if self.agent:
            t = time.monotonic()
            self.agent.stop()
            self.timings["agent stop"] = round(time.monotonic() - t, 2)
            self.agent = None
            wait_until(lambda: self.manager.plugin(DRIVER) is None,
                       f"{self.name}'s plugin deregistered", timeout)
            self.timings["deregistered"] = round(time.monotonic() - t, 2)

    def stop(self, forget=True):
        """As Node.stop: the loop, the agent and the manager stop, the folder goes, and with
        forget the node's GPU objects, ResourceSlices, Lease and Node (node.forget_node)."""
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)
        self.stop_agent()
        if self.manager:
            self.manager.stop()
        shutil.rmtree(self.base, ignore_errors=True)
        if forget:
            self.errors.extend(forget_node(self.cluster, self.name))

    def restart_kubelet(self, timeout=60):
        """The kubelet restarts (module docstring). Returns the new manager once the
        plugin is registered again and the pods prepared before are prepared again."""
        t = time.monotonic()
        with self._lock:
            old = self.manager
            old.stop()
            st, out = self.call("DELETE", "/apis/resource.k8s.io/v1/resourceslices"
                                f"?fieldSelector=spec.nodeName%3D{self.name}")
            if st != 200:
                self.errors.append(f"kubelet start: delete ResourceSlices: {st} {out}")
            self.manager = FakeDRAManager(str(self.registry), str(self.state_dir),
                                          self.get_claim).start()
            self._restarted = set(self.cdi)
        self.manager.wait_for_plugin(DRIVER, timeout=timeout)
        try:
            wait_until(lambda: not self._restarted, "the running pods prepared again", timeout)
        except TimeoutError as e:
            raise AssertionError(f"{e}: {sorted(self._restarted)} not prepared; prepare "
                                 f"errors {self.prepare_errors}; node errors "
                                 f"{self.errors}") from None
        self.timings["kubelet restart"] = round(time.monotonic() - t, 2)
        return self.manager

    def _loop(self):
        last_lease = last_status = time.monotonic()
        while not self._stop.wait(0.3):
            try:
                t = time.monotonic()
                if t - last_lease >= 2:
                    self._renew_lease()
                    last_lease = t
                if t - last_status >= 10:
                    self._patch_status()
                    last_status = t
                with self._lock:
                    self._sync_pods()
            except Exception:  # noqa: BLE001  (a test reads errors; the loop goes on)
                self.errors.append(traceback.format_exc())

    # ---- pods -------------------------------------------------------------------------

    def _sync_pods(self):
        st, lst = self.call("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{self.name}")
        if st != 200:
            self.errors.append(f"list pods: {st} {lst}")
            return
        active = []
        listed = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["metadata"]["uid"]
                  for p in lst["items"]}
        for key, uid in list(self.uids.items()):
            if listed.get(key) != uid:  # gone at once (grace 0) or made again: it ended
                self._end({"metadata": {"uid": uid}}, key)
        for pod in lst["items"]:
            m = pod["metadata"]
            key = f"{m['namespace']}/{m['name']}"
            phase = pod.get("status", {}).get("phase")
            if m.get("deletionTimestamp"):
                self._delete(pod, key)
                continue
            if phase in ("Succeeded", "Failed"):
                self._end(pod, key)
                continue
            active.append(m["uid"])
            if key in self._restarted:
                self._prepare(pod, key, rerun=True)
            elif key not in self.cdi and phase in (None, "Pending"):
                if time.monotonic() >= self._retry_at.get(key, 0):
                    self._prepare(pod, key)
        if time.monotonic() - self._last_reconcile >= RECONCILE_S:
            self._last_reconcile = time.monotonic()
            self.manager.reconcile(active)

    def _prepare(self, pod, key, rerun=False):
        m = pod["metadata"]
        try:
            self.manager.prepare_pod(pod)
        except PrepareError as e:
            self.prepare_errors[key] = str(e)
            self._retry_at[key] = time.monotonic() + RETRY_S
            self._event(pod, "FailedPrepareDynamicResources", str(e))
            return
        self.prepare_errors.pop(key, None)
        self.uids[key] = m["uid"]
        cdi = {}
        for c in pod["spec"]["containers"]:
            ids = []
            for rc in (c.get("resources") or {}).get("claims") or []:
                pod_claim = next((x for x in pod["spec"].get("resourceClaims") or []
                                  if x["name"] == rc["name"]), None)
                if pod_claim is None:
                    continue
                one = dict(pod, spec={**pod["spec"], "resourceClaims": [pod_claim]})
                ids += self.manager.cdi_devices(one, request=rc.get("request"))
            cdi[c["name"]] = ids
        self.cdi[key] = cdi
        if rerun:
            self._restarted.discard(key)
            return
        t = now()
        self._set_status(pod, {
            "phase": "Running", "hostIP": "127.0.0.1", "podIP": "127.0.0.1", "startTime": t,
            "conditions": [{"type": c, "status": "True", "lastTransitionTime": t}
                           for c in ("PodScheduled", "Initialized", "ContainersReady",
                                     "Ready")],
            "containerStatuses": [{"name": c["name"], "image": c["image"], "imageID": "",
                                   "ready": True, "restartCount": 0, "started": True,
                                   "state": {"running": {"startedAt": t}}}
                                  for c in pod["spec"]["containers"]]})

    def _event(self, pod, reason, message):
        m = pod["metadata"]
        t = now()
        st, out = self.call("POST", f"/api/v1/namespaces/{m['namespace']}/events", {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{m['name']}.", "namespace": m["namespace"]},
            "involvedObject": {"kind": "Pod", "namespace": m["namespace"], "name": m["name"],
                               "uid": m["uid"], "apiVersion": "v1"},
            "reason": reason, "message": message[:1024], "type": "Warning",
            "source": {"component": "kubelet", "host": self.name},
            "firstTimestamp": t, "lastTimestamp": t, "count": 1})
        if st != 201:
            self.errors.append(f"event {reason}: {st} {out}")

    def _end(self, pod, key):
        if key in self.cdi or key in self.uids:
            self.manager.pod_ended(pod["metadata"]["uid"])
            self.cdi.pop(key, None)
            self.uids.pop(key, None)
            self._restarted.discard(key)

    def _delete(self, pod, key):
        m = pod["metadata"]
        self.manager.pod_ended(m["uid"])
        self.cdi.pop(key, None)
        self.uids.pop(key, None)
        self._restarted.discard(key)
        st, out = self.call("DELETE", f"/api/v1/namespaces/{m['namespace']}/pods/{m['name']}",
                            {"apiVersion": "v1", "kind": "DeleteOptions",
                             "gracePeriodSeconds": 0, "preconditions": {"uid": m["uid"]}})
        if st not in (200, 404, 409):
            self.errors.append(f"delete {key}: {st} {out}")

    def cdi_spec(self, claim_uid):
        """The agent's CDI spec file of claim claim_uid (a dict), or None."""
        p = self.cdi_dir / f"k8s.{DRIVER}-claim_{claim_uid}.json"
        try:
            return json.loads(p.read_text())
        except FileNotFoundError:
            return None

    def cdi_files(self):
        try:
            return sorted(os.listdir(self.cdi_dir))
        except FileNotFoundError:
            return []
