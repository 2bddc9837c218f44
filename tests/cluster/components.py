"""Elastic GPU's binaries run against the real control plane as deploy/ runs them,
as host processes: there is no container runtime here.

A component's command line is the one its Deployment in deploy/ gives the container (args,
and env with literal values or the pod's namespace), changed only where a host process must
differ, each change named by the caller: listen addresses to 127.0.0.1, ports to 0 (any free
port, which the binary logs), TLS files to the test's. It authenticates with a token of the
ServiceAccount deploy/ gives it (Cluster.sa_kubeconfig), so every call it makes meets the
RBAC deploy/ grants it, as in a cluster."""
import base64
import pathlib
import re
import signal
import subprocess
import time
import urllib.parse

import yaml

import cluster as cluster_module  # tests/cluster/cluster.py

ROOT = pathlib.Path(__file__).resolve().parents[2]
NS = "elastic-gpu-system"


def deploy_container(manifest, container, docs=None):
    """(args, env) of container in the Deployment or DaemonSet of deploy/ file manifest
    (a path relative to deploy/), or of the objects docs (dicts: what an overlay
    renders) when given: env holds the literal values, and the pod's namespace for a
    fieldRef to metadata.namespace (elastic-gpu-system)."""
    for doc in docs or yaml.safe_load_all((ROOT / "deploy" / manifest).read_text()):
        if not doc or doc.get("kind") not in ("Deployment", "DaemonSet"):
            continue
        for c in doc["spec"]["template"]["spec"]["containers"]:
            if c["name"] != container:
                continue
            env = {}
            for e in c.get("env") or []:
                if "value" in e:
                    env[e["name"]] = str(e["value"])
                elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == \
                        "metadata.namespace":
                    env[e["name"]] = NS
            return [str(a) for a in c.get("args") or []], env
    raise LookupError(f"{'the objects given' if docs else 'deploy/' + manifest} have no "
                      f"container {container}")


def replace_flags(args, changes):
    """args with the value of each flag in changes (flag -> new value) replaced; a flag
    not in args is an error (deploy/ changed: the test must be told)."""
    out = list(args)
    for flag, value in changes.items():
        if flag not in out:
            raise LookupError(f"{flag} is not among deploy/'s args {out}")
        out[out.index(flag) + 1] = str(value)
    return out


class Component:
    """One binary running against the cluster: exe with args, log in workdir/<name>.log,
    its ports from its main.c "serving" log line (source: the file that logs it, for a
    mode whose own main logs it, e.g. "dra_mode" for egpu-agent --mode dra): (port,
    health_port), or (port, None) for one without a health port (health=False)."""

    def __init__(self, name, exe, args, env, workdir, health=True, timeout=30, source="main"):
        self.name = name
        self.log = pathlib.Path(workdir) / f"{name}.log"
        self.proc = subprocess.Popen(cluster_module.with_parent([exe, *args]),
                                     stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=open(self.log, "w"),
                                     env={**{k: v for k, v in cluster_module.clean_env().items()
                                             if not k.startswith("EGPU_")}, **env})
        deadline = time.monotonic() + timeout
        self.ports = None
        while time.monotonic() < deadline:
            m = re.search(re.escape(source) + r"\.c:\d+\] \S+: serving addr=\S+ port=(\d+)" +
                          (r" health_addr=\S+ health_port=(\d+)" if health else "()"),
                          self.log.read_text(errors="replace"))
            if m:
                self.ports = (int(m.group(1)), int(m.group(2)) if m.group(2) else None)
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if self.ports is None:
            self.stop()
            raise AssertionError(f"{name} did not start:\n{self.log.read_text()[-3000:]}")

    def ready(self, timeout=60):
        """Wait until GET /readyz on the health port answers 200 (its informers have
        synced); AssertionError with the log's end if not within timeout s."""
        import urllib.request
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[1]}/readyz",
                                            timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"{self.name} not ready:\n"
                                     f"{self.log.read_text()[-3000:]}")
            time.sleep(0.2)

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def webhook(cluster, build_dir, workdir, cert, key, extra=(), docs=None):
    """egpu-webhook as deploy/webhook/deployment.yaml runs it (or as the Deployment of docs,
    what an overlay renders), with ServiceAccount egpu-webhook's token; changed: --listen
    and --health-listen 127.0.0.1, --port and --health-port 0, --tls-cert and --tls-key the
    files cert and key (a pre-made certificate, as cert-manager leaves one; with
    --self-signed, where it writes its own)."""
    args, env = deploy_container("webhook/deployment.yaml", "egpu-webhook", docs)
    args = replace_flags(args, {"--listen": "127.0.0.1", "--health-listen": "127.0.0.1",
                                "--port": 0, "--health-port": 0, "--tls-cert": cert,
                                "--tls-key": key})
    kc = cluster.sa_kubeconfig(NS, "egpu-webhook")
    return Component("egpu-webhook", build_dir / "src/webhook/egpu-webhook",
                     [*args, "--kubeconfig", kc, *extra], env, workdir)


def served_webhook(cluster, build_dir, workdir):
    """webhook() serving a certificate the cluster's CA signed for egpu-webhook's Service
    name and 127.0.0.1 (a pre-made one, as cert-manager leaves it), ready (its informers
    synced), and deploy/'s two webhook configurations pointed at it with that CA as
    caBundle (point_webhooks): the API server calls it for every pod and workload their
    rules match. The Component (the caller stops it)."""
    crt, key = cluster.pki.cert("egpu-webhook", "egpu-webhook.elastic-gpu-system.svc",
                                sans=("IP:127.0.0.1",), server=True)
    w = webhook(cluster, build_dir, workdir, crt, key)
    try:
        w.ready()
        point_webhooks(cluster, w.ports[0], ca_bundle=cluster.pki.ca.read_bytes())
    except BaseException:
        w.stop()
        raise
    return w


def agent(cluster, build_dir, workdir, node, env, device_plugin_dir, pod_resources_socket,
          alloc_root, interposer, nvml):
    """egpu-agent as deploy/agent/daemonset.yaml runs it, with ServiceAccount egpu-agent's
    token, for node (NODE_NAME, as the DaemonSet's fieldRef gives it); changed: --listen
    127.0.0.1, --port 0, the kubelet's paths and the interposer's moved to the arguments
    given; added: --nvml-library nvml (the mock's). No health port: (port, None)."""
    args, denv = deploy_container("agent/daemonset.yaml", "egpu-agent")
    args = replace_flags(args, {"--listen": "127.0.0.1", "--port": 0,
                                "--device-plugin-dir": device_plugin_dir,
                                "--pod-resources-socket": pod_resources_socket,
                                "--alloc-root": alloc_root, "--interposer": interposer})
    kc = cluster.sa_kubeconfig(NS, "egpu-agent", path=pathlib.Path(workdir) / "agent.kubeconfig")
    denv = {k: v for k, v in denv.items() if not k.startswith("NVIDIA_")}
    return Component("egpu-agent", build_dir / "src/agent/egpu-agent",
                     [*args, "--kubeconfig", kc, "--nvml-library", nvml],
                     {**denv, "NODE_NAME": node, **env}, workdir, health=False)


def dra_agent(cluster, build_dir, workdir, node, registry_dir, dra_socket, cdi_dir, alloc_root,
              interposer, fake_gpus=None, nvml=None, env=None, name="egpu-agent", timeout=30):
    """egpu-agent --mode dra (issue 26: the kubelet's DRA plugin) as
    deploy/agent-dra/daemonset.yaml runs it, with ServiceAccount egpu-agent-dra's token,
    for node (NODE_NAME, as the DaemonSet's fieldRef gives it); changed: --listen
    127.0.0.1, --port 0, the kubelet's paths (--plugin-registry-dir, --dra-socket,
    --cdi-dir), --alloc-root and --interposer moved to the arguments given; added: fake
    cards (--fake-gpus) or the NVML library nvml. Its log is workdir/<name>.log. No health
    port: (port, None)."""
    args, denv = deploy_container("agent-dra/daemonset.yaml", "egpu-agent")
    args = replace_flags(args, {"--listen": "127.0.0.1", "--port": 0,
                                "--plugin-registry-dir": registry_dir,
                                "--dra-socket": dra_socket, "--cdi-dir": cdi_dir,
                                "--alloc-root": alloc_root, "--interposer": interposer})
    kc = cluster.sa_kubeconfig(NS, "egpu-agent-dra",
                               path=pathlib.Path(workdir) / f"{name}.kubeconfig")
    denv = {k: v for k, v in denv.items() if not k.startswith("NVIDIA_")}
    args += ["--kubeconfig", kc]
    args += ["--fake-gpus", fake_gpus] if fake_gpus else ["--nvml-library", str(nvml)]
    return Component(name, build_dir / "src/agent/egpu-agent", args,
                     {**denv, "NODE_NAME": node, **(env or {})}, workdir, health=False,
                     timeout=timeout, source="dra_mode")


def point_webhooks(cluster, port, ca_bundle=None, host="127.0.0.1"):
    """Point every webhook of deploy/'s two configurations at https://host:port and the
    path its Service reference names, the only change to them: no kube-proxy here routes
    the Service's ClusterIP (and a port nothing listens on is a webhook that is down).
    ca_bundle (PEM bytes) replaces the caBundle when given."""
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        path = f"/apis/admissionregistration.k8s.io/v1/{kind}/elastic-gpu-webhook"
        st, cfg = cluster.call("GET", path)
        assert st == 200, cfg
        for w in cfg["webhooks"]:
            cc = w["clientConfig"]
            route = cc.pop("service")["path"] if "service" in cc else \
                urllib.parse.urlsplit(cc["url"]).path
            cc["url"] = f"https://{host}:{port}{route}"
            if ca_bundle is not None:
                cc["caBundle"] = base64.b64encode(ca_bundle).decode()
        st, got = cluster.call("PUT", path, cfg)
        assert st == 200, got


def controller(cluster, build_dir, workdir, name="egpu-controller", extra=()):
    """egpu-controller as deploy/controller/deployment.yaml runs it (leader election on,
    its Lease elastic-gpu-controller in elastic-gpu-system), with ServiceAccount
    egpu-controller's token; changed: --listen 127.0.0.1, --port 0; extra flags after
    (a later flag wins: a test's shorter lease times, for one). No health port: (port,
    None)."""
    args, env = deploy_container("controller/deployment.yaml", "egpu-controller")
    args = replace_flags(args, {"--listen": "127.0.0.1", "--port": 0})
    kc = cluster.sa_kubeconfig(NS, "egpu-controller",
                               path=pathlib.Path(workdir) / f"{name}.kubeconfig")
    return Component(name, build_dir / "src/controller/egpu-controller",
                     [*args, "--kubeconfig", kc, *extra], env, workdir, health=False)


def scheduler(cluster, build_dir, workdir, name="egpu-scheduler", extra=(), docs=None,
              changes=None):
    """egpu-scheduler as deploy/scheduler/deployment.yaml runs it (its args and env:
    --follow-lease elastic-gpu-kube-scheduler, EGPU_LEASE_NAMESPACE the pod's namespace),
    or as the Deployment among docs (an overlay's rendered objects, e.g. with
    main-scheduler/) does, with ServiceAccount egpu-scheduler's token (--kubeconfig
    added: in the pod it reads the token Secret mounted at the in-cluster path); changed:
    --listen and --health-listen 127.0.0.1 (the base's --listen is that already), --port
    and --health-port 0 (free ports), and the flags in changes (e.g. the TLS files).
    extra: more flags (e.g. --pod-name)."""
    args, env = deploy_container("scheduler/deployment.yaml", "egpu-scheduler", docs)
    args = replace_flags(args, {"--listen": "127.0.0.1", "--port": 0, "--health-port": 0,
                                "--health-listen": "127.0.0.1", **(changes or {})})
    kc = cluster.sa_kubeconfig(NS, "egpu-scheduler",
                               path=pathlib.Path(workdir) / f"{name}.kubeconfig")
    return Component(name, build_dir / "src/scheduler/egpu-scheduler",
                     [*args, "--kubeconfig", kc, *extra], env, workdir)


class SchedulerPair:
    """egpu-scheduler and its kube-scheduler, as one pod of deploy/scheduler runs them:
    scheduler() (process egpu-NAME) and a kube-scheduler (process kube-NAME) with
    kube_scheduler_config() on its port and ServiceAccount elastic-gpu-kube-scheduler's
    token. wrap: kube-scheduler's command line runs under it (e.g. unshare --uts, a host name
    of its own); extra: egpu-scheduler's extra flags."""

    def __init__(self, cluster, build_dir, workdir, name, wrap=(), extra=()):
        self.c, self.build, self.dir = cluster, build_dir, pathlib.Path(workdir)
        self.name, self.extra = name, tuple(extra)
        self.ext = scheduler(cluster, build_dir, workdir, name=f"egpu-{name}", extra=extra)
        self.kube = f"kube-{name}"
        self.restarts = 0
        kc = cluster.sa_kubeconfig(NS, "elastic-gpu-kube-scheduler",
                                   path=self.dir / f"kube-{name}.kubeconfig")
        try:
            cluster.start_scheduler(kube_scheduler_config(self.ext.ports[0]), name=self.kube,
                                    kubeconfig=kc, wrap=wrap)
        except BaseException:
            self.ext.stop()
            raise

    @property
    def health(self):
        """egpu-scheduler's health URL (/healthz, /readyz, /metrics)."""
        return f"http://127.0.0.1:{self.ext.ports[1]}"

    def get(self, path):
        """GET path of the health port: (status, text), (None, "") when it does not answer."""
        import urllib.error
        import urllib.request
        try:
            with urllib.request.urlopen(self.health + path, timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return None, ""

    def ready(self):
        return self.get("/readyz")[0] == 200

    def metric(self, name, node=None):
        """Sample name (with label node when given) of egpu-scheduler's /metrics, or None."""
        from prometheus_client.parser import text_string_to_metric_families
        _, text = self.get("/metrics")
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name == name and s.labels.get("node") == node:
                    return s.value
        return None

    def kill_extender(self, sig=signal.SIGKILL):
        """Stop egpu-scheduler with sig (its kube-scheduler keeps running and calling it)."""
        self.ext.stop(sig)

    def start_extender(self):
        """Start egpu-scheduler again on the extender port kube-scheduler's configuration
        names, as the kubelet restarts a container of the pod; its log is egpu-NAME-N.log
        for the Nth restart."""
        port = self.ext.ports[0]
        self.restarts += 1
        self.ext = scheduler(self.c, self.build, self.dir, name=f"egpu-{self.name}-{self.restarts}",
                             extra=self.extra, changes={"--port": port})

    def stop(self):
        self.c.stop_process(self.kube)
        self.ext.stop()


def kube_scheduler_config(extender_port):
    """deploy/scheduler/scheduler-config.yaml (the file the kustomization's
    configMapGenerator makes ConfigMap elastic-gpu-scheduler-config of) as a dict, the
    extender's urlPrefix on extender_port instead of 8888: the only change
    (Cluster.start_scheduler fills in clientConnection.kubeconfig)."""
    cfg = yaml.safe_load((ROOT / "deploy/scheduler/scheduler-config.yaml").read_text())
    (ext,) = cfg["extenders"]
    assert ext["urlPrefix"] == "http://127.0.0.1:8888", ext
    ext["urlPrefix"] = f"http://127.0.0.1:{extender_port}"
    return cfg


def kube_scheduler_alone_config(profile="elastic-gpu-scheduler"):
    """deploy/scheduler/scheduler-config.yaml as kube-scheduler alone would place with it: the
    extender entry removed and each resource it lists with ignoredByScheduler (no node
    advertises them: gpu-memory, DRA mode's marker elasticgpu.io/dra) in the profile's
    NodeResourcesFit ignoredResources instead (what kube-scheduler does with them while the
    extender is configured), the profile named profile, leader election off (a test's
    scheduler beside the session's). A dict for Cluster.start_scheduler."""
    cfg = yaml.safe_load((ROOT / "deploy/scheduler/scheduler-config.yaml").read_text())
    (ext,) = cfg.pop("extenders")
    ignored = [m["name"] for m in ext.get("managedResources") or [] if m["ignoredByScheduler"]]
    assert ignored, ext
    (prof,) = cfg["profiles"]
    prof["schedulerName"] = profile
    prof["pluginConfig"] = [{"name": "NodeResourcesFit", "args": {"ignoredResources": ignored}}]
    cfg["leaderElection"] = {"leaderElect": False}
    return cfg
