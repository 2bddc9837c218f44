"""One GPU node with the REAL kubelet, beside tests/cluster/node.py's
nodes of the fake kubelet.

RealNode(cluster, name, build_dir).start() makes, in a temporary folder of its own:

- containerd (Debian's 1.6, runc 1.1) with a config of its own: root, state, runc's root,
  its opt dir, its gRPC socket and the CNI config all in the folder; the CRI plugin's
  stream server on 127.0.0.1;
- the CNI network: a bridge of its own (egpu-<hash of the name>, no gateway, no masquerade:
  pods need an address, not a route) with host-local addresses from 10.234.0.0/24, the IPAM
  state in the folder;
- two local images, since no registry is reachable: the sandbox image
  registry.k8s.io/pause:3.10 (containerd's sandbox_image) and TEST_IMAGE, both holding
  tests/cluster/pause.c built with gcc -static into the folder (the test image's program
  copies the files it is given to stdout, then waits), packed here as OCI image archives
  (tarfile, json, hashlib) and imported with `ctr -n k8s.io images import`;
- the kubelet (tools/bin/kubelet, v1.36.3) as system:node:<name> in group system:nodes
  (a client certificate of the cluster's CA, so the Node authorizer and NodeRestriction
  hold it as any kubelet), its root dir in the folder, and a KubeletConfiguration written
  here: authentication by the cluster's CA and webhook (TokenReview), authorization Webhook
  (SubjectAccessReview), as kubeadm's; serving on the host's own address (--node-ip and
  address: the kubelet refuses a loopback node IP, and the API server reaches a node's
  kubelet at its InternalIP for kubectl logs), its ports free ones; registered with the
  NoSchedule taint elasticgpu.io/gpu, which docs/agent.md suggests for GPU nodes and
  deploy/agent's DaemonSet tolerates, so only pods that tolerate it land there (not
  deploy/'s Deployments, whose images no registry here serves); the seccomp profile
  deploy/agent's init container installs
  (deploy/agent/seccomp/shared-gpu.json at <root-dir>/seccomp/elastic-gpu/), since
  egpu-webhook gives every shared-GPU container that Localhost profile;
- egpu-agent as deploy/agent/daemonset.yaml runs it (components.agent: ServiceAccount
  egpu-agent's token, --listen 127.0.0.1, --port 0, the mock NVML of tests/mock with its
  two A100s) on the kubelet's real sockets: --device-plugin-dir
  /var/lib/kubelet/device-plugins (the DaemonSet's own value) and --pod-resources-socket
  <root-dir>/pod-resources/kubelet.sock;

(or, with mode="dra", egpu-agent --mode dra with fake cards on the kubelet's own plugin
registry, <root-dir>/plugins_registry, waiting until the kubelet registered it and the
node's ResourceSlice is there: components.dra_agent; CDI specs in <folder>/cdi, which
containerd 1.6 does not read, so a container gets no CDI edit)
and waits until the Node is Ready with allocatable elasticgpu.io/gpu-core (the device
plugin's IDs: 100 per card; the kubelet writes it at its next node status update, up to
10 s after the plugin registers). The Node is not labelled elasticgpu.io/gpu-node (the
DaemonSet's nodeSelector), so deploy/'s DaemonSet leaves it to the agent run here.

stop() cordons the node and deletes the pods still bound to it (the kubelet tears their
sandboxes and network down), stops the agent and the kubelet, removes every container and
stops containerd and any shim of its, each by PID, then unmounts what is mounted under the
folder and under /var/run/netns since start, removes the bridge, the pod cgroups and every
machine-wide path that did not exist before start, and the folder; last, the Node and its
GPU objects. Each start's timings (s) are in RealNode.timings.

What this machine needs, and why (each set here):
- containerd's `restrict_oom_score_adj = true`: the tests run without CAP_SYS_RESOURCE in
  their bounding set, so runc cannot lower a container's oom_score_adj below its own;
- `SystemdCgroup = false` and the kubelet's `cgroupDriver: cgroupfs`: no systemd runs here;
- the kubelet's `failCgroupV1: false`: the host mounts cgroup v1 (the kubelet refuses v1
  unless told), `failSwapOn: false`; eviction and image GC thresholds near 100 %, so a busy
  shared disk neither evicts the test pod nor deletes the local images;
- the kubelet's `makeIPTablesUtilChains: false`: by default it adds chains to the host's
  iptables (KUBE-FIREWALL in INPUT and OUTPUT, dropping packets to 127.0.0.0/8 from other
  sources, and KUBE-KUBELET-CANARY and KUBE-IPTABLES-HINT in filter, nat and mangle, IPv4
  and IPv6) and keeps them there after it stops; stop() fails naming any KUBE- chain that
  appeared all the same;
- `volumePluginDir` and `podLogsDir` in the folder (by default /usr/libexec/kubernetes
  and /var/log/pods).

Paths the kubelet and containerd use whatever they are told (machine-wide, so only one
RealNode runs on a machine at a time: LOCK is held from start to stop): the kubelet's
device plugin dir is always /var/lib/kubelet/device-plugins (--root-dir moves pod-resources,
seccomp and the rest, not it); containerd's shim sockets are under /run/containerd/s, its
network namespaces under /var/run/netns, the CNI result cache in /var/lib/cni; the kubelet
links container logs into /var/log/containers and makes its pod cgroups (kubepods) at the
root of every hierarchy.

What differs from a real node: no kube-proxy (no Service routing) and pods reach nothing
beyond the bridge; the images are local (imagePullPolicy Never); no NVIDIA driver or
container toolkit: the agent's NVML is the mock, and its Allocate answers are what a
runtime gets, but no device node is injected (the DaemonSet's default strategy names the
cards in NVIDIA_VISIBLE_DEVICES, which runc ignores); the kubelet's serving certificate is
self-signed (the API server does not check it, as by default); the agent runs as a host
process, not as the DaemonSet's pod."""
import fcntl
import gzip
import hashlib
import io
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

import components
import node  # default_cards, forget_node
from cluster import BIN, ROOT, ClusterError, free_port

sys.path.insert(0, str(ROOT / "tests" / "kubelet"))
import fake_kubelet  # noqa: E402  (its PodResources client and messages)

KUBELET = BIN / "kubelet"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
TEST_IMAGE = "egpu.local/show:1"
DEVICE_PLUGIN_DIR = pathlib.Path("/var/lib/kubelet/device-plugins")
NETNS_DIR = pathlib.Path("/var/run/netns")
GPU_CORE = "elasticgpu.io/gpu-core"
DRA_DRIVER = "gpu.elasticgpu.io"
TAINT = "elasticgpu.io/gpu"  # the node's NoSchedule taint: a pod for it tolerates TOLERATION
TOLERATION = {"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}
LOCK = pathlib.Path("/tmp/egpu-real-kubelet.lock")
CNI_BIN = pathlib.Path("/usr/lib/cni")
SUBNET = "10.234.0.0/24"
# Paths outside the folder the kubelet, containerd or CNI make whatever they are told;
# stop() removes each that did not exist before start.
MACHINE_PATHS = (pathlib.Path("/var/lib/kubelet"), pathlib.Path("/run/containerd"),
                 pathlib.Path("/var/lib/cni"), NETNS_DIR, pathlib.Path("/run/netns"),
                 pathlib.Path("/var/log/containers"), pathlib.Path("/var/log/pods"))
CGROUP_ROOT = pathlib.Path("/sys/fs/cgroup")
CGROUP_NAMES = ("kubepods",)


def missing():
    """What this machine lacks to run a RealNode (empty when nothing): root, the kubelet
    binary (`make k8s`), containerd, ctr and runc, the CNI plugins, gcc."""
    out = []
    if os.geteuid() != 0:
        out.append("root")
    if shutil.which("ip") is None:
        out.append("ip (Debian package iproute2)")
    if not os.access(KUBELET, os.X_OK):
        out.append(f"{KUBELET} (`make k8s`)")
    for exe, pkg in (("containerd", "containerd"), ("ctr", "containerd"), ("runc", "runc"),
                     ("gcc", "build-essential")):
        if shutil.which(exe) is None:
            out.append(f"{exe} (Debian package {pkg})")
    for plugin in ("bridge", "host-local", "loopback"):
        if not os.access(CNI_BIN / plugin, os.X_OK):
            out.append(f"{CNI_BIN / plugin} (Debian package containernetworking-plugins)")
    return out


def machine_cannot():
    """Why this machine's kernel or sandbox cannot run containers at all, or None: new
    mount, PID, network, UTS and IPC namespaces (runc makes each), an overlay mount
    (containerd's snapshotter) and a cgroup of its own (the kubelet's kubepods). Not a
    missing package: a machine that lacks these runs no container runtime whatever is
    installed. Checked as root only (missing() names root otherwise)."""
    if os.geteuid() != 0:
        return None
    r = subprocess.run(["unshare", "--mount", "--pid", "--net", "--uts", "--ipc", "--fork",
                        "true"], capture_output=True, text=True)
    if r.returncode != 0:
        return f"unshare of mount, PID, network, UTS and IPC namespaces: {r.stderr.strip()}"
    d = pathlib.Path(tempfile.mkdtemp(prefix="egpu-overlay-probe-"))
    try:
        for x in ("lower", "upper", "work", "merged"):
            (d / x).mkdir()
        r = subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                            f"lowerdir={d}/lower,upperdir={d}/upper,workdir={d}/work",
                            str(d / "merged")], capture_output=True, text=True)
        if r.returncode != 0:
            return f"an overlay mount: {r.stderr.strip()}"
        subprocess.run(["umount", str(d / "merged")], capture_output=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    probe = CGROUP_ROOT / "pids" / f"egpu-probe-{os.getpid()}"
    if not (CGROUP_ROOT / "pids").is_dir():
        probe = CGROUP_ROOT / f"egpu-probe-{os.getpid()}"  # a unified (v2) hierarchy
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as e:
        return f"a cgroup of its own ({probe}): {e.strerror}"
    return None


# ---- OCI image archives ---------------------------------------------------------------

def _tar_add(tar, name, data, mode=0o644):
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    tar.addfile(info, io.BytesIO(data))


def oci_archive(binary, entry, ref, out):
    """An OCI image archive at out (as `ctr images import` takes it: oci-layout,
    index.json naming ref, blobs/sha256): one layer holding binary at entry (mode 0755),
    its config running entry as user 65535 (as the pause image does). Its manifest's
    digest."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as t:
        parts = entry.strip("/").split("/")
        for i in range(1, len(parts)):
            d = tarfile.TarInfo("/".join(parts[:i]))
            d.type, d.mode, d.mtime = tarfile.DIRTYPE, 0o755, 0
            t.addfile(d)
        _tar_add(t, "/".join(parts), pathlib.Path(binary).read_bytes(), 0o755)
    raw = layer.getvalue()
    gz = gzip.compress(raw, mtime=0)
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "config": {"Entrypoint": [entry], "User": "65535:65535"},
                         "rootfs": {"type": "layers",
                                    "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]}
                         }).encode()
    blobs = {}

    def blob(data, media):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"mediaType": media, "digest": digest, "size": len(data)}
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": blob(config, "application/vnd.oci.image.config.v1+json"),
        "layers": [blob(gz, "application/vnd.oci.image.layer.v1.tar+gzip")]}).encode()
    mdesc = blob(manifest, "application/vnd.oci.image.manifest.v1+json")
    mdesc["annotations"] = {"io.containerd.image.name": ref,
                            "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1]}
    mdesc["platform"] = {"architecture": "amd64", "os": "linux"}
    index = json.dumps({"schemaVersion": 2,
                        "mediaType": "application/vnd.oci.image.index.v1+json",
                        "manifests": [mdesc]}).encode()
    with tarfile.open(out, "w") as t:
        _tar_add(t, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _tar_add(t, "index.json", index)
        for digest, data in blobs.items():
            _tar_add(t, "blobs/sha256/" + digest.split(":", 1)[1], data)
    return mdesc["digest"]


# ---- the node -------------------------------------------------------------------------

def host_address():
    """This host's first global IPv4 address (ip -4 addr), the node's InternalIP."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"],
                         capture_output=True, text=True, timeout=10).stdout
    for m in re.finditer(r"\binet (\d+\.\d+\.\d+\.\d+)/", out):
        return m.group(1)
    raise ClusterError(f"no global IPv4 address on this host: {out}")


def _kube_chains():
    """The KUBE-* iptables chains now: {(command, table, chain)} (empty without iptables)."""
    out = set()
    for cmd in ("iptables", "ip6tables"):
        if shutil.which(cmd) is None:
            continue
        for table in ("filter", "nat", "mangle"):
            r = subprocess.run([cmd, "-t", table, "-S"], capture_output=True, text=True)
            out |= {(cmd, table, line.split()[1]) for line in r.stdout.splitlines()
                    if line.startswith("-N KUBE-")}
    return out


def _mounts():
    """The mount points now (/proc/self/mountinfo order: parents before children)."""
    out = []
    for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines():
        p = line.split()[4]
        out.append(p.encode().decode("unicode_escape"))
    return out


def _cgroups():
    """The pod cgroup dirs at the root of each hierarchy (CGROUP_NAMES) now."""
    return {p for h in CGROUP_ROOT.iterdir() if h.is_dir()
            for p in (h / n for n in CGROUP_NAMES) if p.is_dir()}


class RealNode:
    """Node name of cluster with the real kubelet (see the module's docstring).
    agent_env: more environment for egpu-agent (e.g. EGPU_CLEANUP_INTERVAL). log_dir: where
    stop() copies the logs (containerd.log, kubelet.log, egpu-agent.log) before it removes
    the folder."""

    def __init__(self, cluster, name, build_dir, agent_env=None, log_dir=None,
                 mode="device-plugin"):
        self.cluster, self.name = cluster, name
        self.mode = mode
        self.build = pathlib.Path(build_dir).resolve()
        self.agent_env = dict(agent_env or {})
        self.log_dir = pathlib.Path(log_dir) if log_dir else None
        self.base = None
        self.procs = {}          # name -> Popen (containerd, kubelet)
        self.agent = None
        self.bridge = "egpu-" + hashlib.sha256(name.encode()).hexdigest()[:8]
        self._lock = None
        self._before = {}
        self.timings = {}        # what start() took, per step (s)

    # paths in the folder
    @property
    def sock(self):
        return self.base / "containerd" / "containerd.sock"

    @property
    def root_dir(self):
        return self.base / "kubelet"

    @property
    def pod_resources_socket(self):
        return self.root_dir / "pod-resources" / "kubelet.sock"

    def log(self, name):
        """The text of name's log: containerd, kubelet or egpu-agent."""
        d = self.base if self.base is not None else self.log_dir
        return (d / f"{name}.log").read_text(errors="replace")

    def ctr(self, *args, check=True):
        """ctr ARGS against this node's containerd, namespace k8s.io (the CRI's): its
        stdout; with check, ClusterError unless rc 0."""
        r = self._ctr(*args)
        if check and r.returncode != 0:
            raise ClusterError(f"ctr {' '.join(map(str, args))}: {r.stderr.strip()}")
        return r.stdout

    def _ctr(self, *args):
        return subprocess.run(["ctr", "--address", str(self.sock), "--namespace", "k8s.io",
                               *map(str, args)], capture_output=True, text=True, timeout=60)

    def pod_resources(self):
        """The kubelet's PodResources List: {"ns/pod": {container: {resource: [IDs]}}}."""
        with fake_kubelet.unix_channel(str(self.pod_resources_socket)) as ch:
            resp = fake_kubelet.PodResourcesListerStub(ch).List(
                fake_kubelet.pr.ListPodResourcesRequest(), timeout=10)
        out = {}
        for p in resp.pod_resources:  # the kubelet sends one ContainerDevices per ID
            for c in p.containers:
                held = out.setdefault(f"{p.namespace}/{p.name}", {}).setdefault(c.name, {})
                for d in c.devices:
                    held.setdefault(d.resource_name, []).extend(d.device_ids)
        return out

    def allocatable_devices(self):
        """The kubelet's PodResources GetAllocatableResources: {resource: [IDs]}."""
        with fake_kubelet.unix_channel(str(self.pod_resources_socket)) as ch:
            resp = fake_kubelet.PodResourcesListerStub(ch).GetAllocatableResources(
                fake_kubelet.pr.AllocatableResourcesRequest(), timeout=10)
        out = {}
        for d in resp.devices:
            out.setdefault(d.resource_name, []).extend(d.device_ids)
        return out

    # ---- start ----------------------------------------------------------------------

    def start(self, timeout=90):
        lacking = missing()
        if lacking:
            raise ClusterError(f"a real node needs {', '.join(lacking)}")
        self._lock = open(LOCK, "w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            self._lock = None
            raise ClusterError(f"another real node runs on this machine ({LOCK} is locked)")
        self._before = {"paths": {p for p in MACHINE_PATHS if os.path.lexists(p)},
                        "mounts": set(_mounts()), "cgroups": _cgroups(),
                        "chains": _kube_chains(),
                        "ip_forward": pathlib.Path("/proc/sys/net/ipv4/ip_forward")
                        .read_text()}
        self.base = pathlib.Path(tempfile.mkdtemp(prefix="egpu-kl-"))  # short: sockets
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _step(self, what, t0):
        self.timings[what] = round(time.monotonic() - t0, 1)
        return time.monotonic()

    def _spawn(self, name, args):
        log = open(self.base / f"{name}.log", "w")
        self.procs[name] = subprocess.Popen(
            [str(a) for a in args], stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, cwd=self.base, start_new_session=True,
            env={k: v for k, v in os.environ.items()
                 if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")})
        log.close()
        return self.procs[name]

    def _wait(self, what, pred, timeout, proc=None):
        deadline = time.monotonic() + timeout
        while True:
            try:
                v = pred()
                if v:
                    return v
            except (OSError, ClusterError, subprocess.SubprocessError):
                pass
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise ClusterError(f"{name} exited with {p.returncode} while waiting for "
                                       f"{what}:\n{self.log(name)[-3000:]}")
            if time.monotonic() > deadline:
                logs = "".join(f"\n--- {n}.log\n{self.log(n)[-2500:]}" for n in self.procs)
                raise ClusterError(f"node {self.name}: timed out after {timeout} s waiting for "
                                   f"{what}{logs}")
            time.sleep(0.2)

    def _start(self, timeout):
        t = t0 = time.monotonic()
        b = self.base
        ctd = b / "containerd"
        for d in (ctd / "root", ctd / "state", ctd / "cni", ctd / "opt", b / "cni-ipam",
                  self.root_dir / "seccomp" / "elastic-gpu", b / "alloc", b / "pod-logs",
                  b / "volume-plugins", b / "images"):
            d.mkdir(parents=True)

        # containerd
        (ctd / "cni" / "10-egpu.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": "egpu-real-node", "plugins": [
                {"type": "bridge", "bridge": self.bridge, "isGateway": False,
                 "ipMasq": False, "ipam": {"type": "host-local", "dataDir": str(b / "cni-ipam"),
                                           "ranges": [[{"subnet": SUBNET}]]}},
                {"type": "loopback"}]}))
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        (ctd / "config.toml").write_text(f"""version = 2
root = "{ctd / 'root'}"
state = "{ctd / 'state'}"
[grpc]
  address = "{self.sock}"
[ttrpc]
  address = "{self.sock}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{ctd / 'opt'}"
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  restrict_oom_score_adj = true
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{ctd / 'runc'}"
  [{cri}.cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{ctd / 'cni'}"
""")
        self._spawn("containerd", ["containerd", "--config", ctd / "config.toml"])
        self._wait("containerd's socket", lambda: self.ctr("version"), 30)
        t = self._step("containerd", t)

        # the images
        exe = b / "images" / "pause"
        r = subprocess.run(["gcc", "-static", "-Os", "-s", "-o", exe,
                            ROOT / "tests" / "cluster" / "pause.c"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise ClusterError(f"gcc -static tests/cluster/pause.c: {r.stderr}")
        for ref, entry in ((PAUSE_IMAGE, "/pause"), (TEST_IMAGE, "/bin/show")):
            archive = b / "images" / (ref.replace("/", "_").replace(":", "_") + ".tar")
            oci_archive(exe, entry, ref, archive)
            self.ctr("images", "import", archive)
        t = self._step("images", t)

        # the kubelet
        shutil.copy(ROOT / "deploy" / "agent" / "seccomp" / "shared-gpu.json",
                    self.root_dir / "seccomp" / "elastic-gpu" / "shared-gpu.json")
        crt, key = self.cluster.pki.cert(f"kubelet-{self.name}", f"system:node:{self.name}",
                                         orgs=("system:nodes",))
        kubeconfig = self.cluster.write_kubeconfig(b / "kubelet.kubeconfig", cert=(crt, key))
        self.kubelet_port, self.address = free_port(), host_address()
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(self.cluster.pki.ca)}},
            "authorization": {"mode": "Webhook"},
            "address": self.address, "port": self.kubelet_port, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": free_port(),
            "cgroupDriver": "cgroupfs", "failSwapOn": False, "failCgroupV1": False,
            "containerRuntimeEndpoint": f"unix://{self.sock}",
            "imageServiceEndpoint": f"unix://{self.sock}",
            "podLogsDir": str(b / "pod-logs"), "volumePluginDir": str(b / "volume-plugins"),
            "resolvConf": "/etc/resolv.conf", "serializeImagePulls": False,
            "registerNode": True,
            "registerWithTaints": [{"key": TAINT, "value": "present", "effect": "NoSchedule"}],
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%"},
            "imageGCHighThresholdPercent": 99, "imageGCLowThresholdPercent": 98,
            "makeIPTablesUtilChains": False}
        (b / "kubelet-config.json").write_text(json.dumps(config, indent=1))
        self._spawn("kubelet", [KUBELET, "--config", b / "kubelet-config.json",
                                "--kubeconfig", kubeconfig, "--root-dir", self.root_dir,
                                "--cert-dir", b / "kubelet-pki", "--hostname-override",
                                self.name, "--node-ip", self.address, "--v", "2"])
        self._wait("the Node Ready", lambda: self.ready(), timeout)
        t = self._step("kubelet (Node Ready)", t)

        if self.mode == "dra":
            self._start_dra_agent(timeout, t)
            self.timings["start"] = round(time.monotonic() - t0, 1)
            return
        # egpu-agent on the kubelet's sockets
        env = {"EGPU_MOCK_CUDA_STATE": str(b / "mock.state"), "NODE_NAME": self.name,
               "EGPU_MOCK_NVML_GPUS": node.default_cards(self.name), **self.agent_env}
        self.agent = components.agent(
            self.cluster, self.build, b, node=self.name, env=env,
            device_plugin_dir=DEVICE_PLUGIN_DIR, pod_resources_socket=self.pod_resources_socket,
            alloc_root=b / "alloc", interposer=self.build / "src" / "vcuda" / "libegpu-vcuda.so",
            nvml=self.build / "tests" / "mock" / "cuda" / "libnvidia-ml.so.1")
        self._wait(f"allocatable {GPU_CORE}", lambda: self.allocatable(GPU_CORE), timeout)
        self._step("egpu-agent (allocatable gpu-core)", t)
        self.timings["start"] = round(time.monotonic() - t0, 1)

    @property
    def cdi_dir(self):
        return self.base / "cdi"

    def _start_dra_agent(self, timeout, t):
        """mode "dra": egpu-agent --mode dra (the fake backend's two H100s) on the kubelet's
        own plugin registry (<root-dir>/plugins_registry, where its plugin watcher looks)
        with its DRAPlugin socket in <root-dir>/plugins/<driver>/; waits until the kubelet
        registered it (the agent logs the kubelet's NotifyRegistrationStatus) and the node's
        ResourceSlice is there (the kubelet deletes the node's slices at its start; the
        agent publishes again)."""
        self.agent = components.dra_agent(
            self.cluster, self.build, self.base, self.name,
            registry_dir=self.root_dir / "plugins_registry",
            dra_socket=self.root_dir / "plugins" / DRA_DRIVER / "dra.sock",
            cdi_dir=self.cdi_dir, alloc_root=self.base / "alloc",
            interposer=self.build / "src" / "vcuda" / "libegpu-vcuda.so",
            fake_gpus="2xH100-80GB", env=self.agent_env)
        self._wait("the kubelet registering the DRA plugin",
                   lambda: "kubelet registered the plugin" in self.agent.log.read_text(),
                   timeout)

        def published():
            st, lst = self.cluster.call("GET", "/apis/resource.k8s.io/v1/resourceslices"
                                        f"?fieldSelector=spec.nodeName%3D{self.name}")
            return st == 200 and lst["items"]
        self._wait("the node's ResourceSlice", published, timeout)
        self._step("egpu-agent --mode dra (registered, slice published)", t)

    def node(self):
        st, n = self.cluster.call("GET", f"/api/v1/nodes/{self.name}")
        return n if st == 200 else None

    def ready(self):
        n = self.node()
        return n is not None and {c["type"]: c["status"] for c in n["status"].get(
            "conditions", [])}.get("Ready") == "True"

    def allocatable(self, resource):
        n = self.node()
        return (n or {}).get("status", {}).get("allocatable", {}).get(resource)

    # ---- stop -----------------------------------------------------------------------

    def _bound_pods(self):
        st, lst = self.cluster.call(
            "GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{self.name}")
        return lst["items"] if st == 200 else []

    def stop(self):
        if self.base is None:
            return
        errors = []
        kubelet = self.procs.get("kubelet")
        if kubelet is not None and kubelet.poll() is None:
            # the kubelet stops their containers, tears the network down and deletes them;
            # cordoned first, so nothing replaces them
            self.cluster.call("PATCH", f"/api/v1/nodes/{self.name}",
                              {"spec": {"unschedulable": True}},
                              ctype="application/merge-patch+json")
            for p in self._bound_pods():
                m = p["metadata"]
                self.cluster.call("DELETE", f"/api/v1/namespaces/{m['namespace']}/pods/"
                                  f"{m['name']}", {"gracePeriodSeconds": 2})
            deadline = time.monotonic() + 30
            while self._bound_pods() and time.monotonic() < deadline:
                time.sleep(0.3)
        if self.agent:
            self.agent.stop()
        self._stop_proc("kubelet")
        if self.procs.get("containerd") and self.procs["containerd"].poll() is None:
            for c in self.ctr("containers", "ls", "-q", check=False).split():
                self._ctr("tasks", "kill", "-s", "SIGKILL", c)
                for _ in range(50):  # a killed task can be deleted once it has exited
                    r = self._ctr("tasks", "delete", c)
                    if r.returncode == 0 or "not found" in r.stderr:
                        break
                    time.sleep(0.1)
                r = self._ctr("containers", "rm", c)
                if r.returncode != 0:
                    errors.append(f"ctr containers rm {c}: {r.stderr.strip()}")
        self._stop_proc("containerd")
        self._kill_shims()
        # mounts made since start under the folder and the network namespace dirs,
        # children first
        for m in reversed(_mounts()):
            if m in self._before["mounts"]:
                continue
            if m.startswith(str(self.base) + "/") or m == str(self.base) or \
                    m.startswith(str(NETNS_DIR) + "/") or m.startswith("/run/netns/"):
                r = subprocess.run(["umount", m], capture_output=True, text=True)
                if r.returncode != 0:
                    r = subprocess.run(["umount", "-l", m], capture_output=True, text=True)
                    if r.returncode != 0:
                        errors.append(f"umount {m}: {r.stderr.strip()}")
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        for cg in sorted(_cgroups() - self._before["cgroups"]):
            for d in sorted((p for p in cg.rglob("*") if p.is_dir()), key=lambda p: -len(
                    p.parts)) + [cg]:
                try:
                    d.rmdir()
                except OSError as e:
                    errors.append(f"rmdir {d}: {e}")
        for p in MACHINE_PATHS:
            if p not in self._before["paths"] and os.path.lexists(p):
                if p.is_symlink():
                    p.unlink()
                else:
                    shutil.rmtree(p, ignore_errors=True)
        chains = _kube_chains() - self._before["chains"]
        if chains:
            errors.append(f"iptables chains the kubelet left: {sorted(chains)}")
        fwd = pathlib.Path("/proc/sys/net/ipv4/ip_forward")
        if fwd.read_text() != self._before["ip_forward"]:
            fwd.write_text(self._before["ip_forward"])
        if self.log_dir:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            for f in self.base.glob("*.log"):
                shutil.copy(f, self.log_dir / f.name)
        shutil.rmtree(self.base, ignore_errors=True)
        self.base = None
        if self._lock:
            self._lock.close()
            self._lock = None
        errors.extend(node.forget_node(self.cluster, self.name))  # Node, GPUs, slices, Lease
        if errors:
            raise ClusterError(f"node {self.name}: cleanup: {errors}")

    def _stop_proc(self, name):
        p = self.procs.get(name)
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)

    def _kill_shims(self):
        """containerd-shim-runc-v2 processes serving this containerd (their command line
        names its socket): a shim outlives containerd while its task runs."""
        for d in pathlib.Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                cmd = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd and cmd[0].endswith(b"containerd-shim-runc-v2") and \
                    str(self.sock).encode() in cmd:
                try:
                    os.kill(int(d.name), signal.SIGKILL)
                except ProcessLookupError:
                    pass
