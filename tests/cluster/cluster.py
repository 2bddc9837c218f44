"""A real Kubernetes control plane on loopback, started and stopped by the tests.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler, the binaries `make k8s`
builds into tools/bin from the versions tools/go.mod pins, run as host processes in one
temporary folder:

- a certificate authority (openssl), the API server's serving certificate (127.0.0.1,
  localhost and the `kubernetes` Service's names), a client certificate for the admin
  (group system:masters), kube-controller-manager (system:kube-controller-manager) and
  kube-scheduler (system:kube-scheduler), and the ServiceAccount signing key;
- etcd on two loopback ports (no fsync: a test cluster);
- kube-apiserver with `--authorization-mode=Node,RBAC`, its default admission plugins plus
  NodeRestriction, an audit log (audit.log: every request at Metadata level, with the user and
  the response code), no endpoint reconciler (the `kubernetes` Service cannot have a
  loopback endpoint), and its kubelet client as kubeadm sets it up: a client certificate
  (kube-apiserver-kubelet-client, group system:masters) for the kubelets' API (logs, exec)
  and a node's InternalIP before its host name (--kubelet-preferred-address-types: a node's
  name need not resolve; tests/cluster/kubelet.py's real kubelet serves on 127.0.0.1);
- kube-controller-manager with ServiceAccount tokens and credentials per controller
  (namespaces, garbage collection, node lifecycle, ServiceAccounts and the rest of its default
  controllers);
- kube-scheduler (optional, and with a KubeSchedulerConfiguration of the caller's).

start() waits for the API server's /readyz, the other two's /healthz and the `default`
ServiceAccount (pods cannot be created before it); stop() stops every process it started, by
PID (SIGTERM, then SIGKILL after 10 s), and each dies with the test process if that is
killed before its teardown (with_parent). Each process's output goes to <name>.log in the
folder.

Clients: call() (urllib, the admin's client certificate), the admin kubeconfig
(`kubeconfig`), kubectl() and helm() with it, and sa_kubeconfig(ns, name), a kubeconfig
holding a token of that ServiceAccount from the TokenRequest API, so a component runs with
exactly the RBAC its ServiceAccount has.

Used by tests/integration/conftest.py's `cluster` fixture and by `make cluster-demo`.
`python3 tests/cluster/cluster.py DIR` starts one in DIR and keeps it until interrupted."""
import json
import os
import pathlib
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = ROOT / "tools" / "bin"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
SERVICE_CIDR = "10.96.0.0/16"
API_SANS = ("IP:127.0.0.1", "DNS:localhost", "IP:10.96.0.1", "DNS:kubernetes",
            "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
            "DNS:kubernetes.default.svc.cluster.local")


# kube-controller-manager flags for a node lifecycle controller a test can watch: a node
# whose Lease was not renewed for 10 s (the default is 50 s) is NotReady, checked every 2 s.
FAST_NODE_MONITOR = ("--node-monitor-grace-period=10s", "--node-monitor-period=2s")


class ClusterError(Exception):
    """The control plane could not start (the message names the process and ends with its
    log's last lines)."""


def clean_env():
    """The environment for the control plane and its clients: this one without the
    proxy variables (HTTPS_PROXY and the rest), which kube-apiserver honours for its
    webhook calls and kubectl for its own: every address here is on loopback."""
    return {k: v for k, v in os.environ.items()
            if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")}


def with_parent(argv):
    """argv run so that it is killed (SIGKILL) when the process that started it dies:
    under `setpriv --pdeathsig KILL` (util-linux, Essential on Debian). A test run that is
    killed before its teardown thus leaves no control plane or component behind."""
    return ["setpriv", "--pdeathsig", "KILL", "--", *map(str, argv)]


def wait_until(pred, what, timeout=60, every=0.2):
    """pred()'s first true value, asked every `every` s for up to timeout s; TimeoutError
    naming what when none came."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


def missing_binaries():
    """The names of BINARIES not in tools/bin (`make k8s` builds them)."""
    return [n for n in BINARIES if not os.access(BIN / n, os.X_OK)]


def free_port():
    """A TCP port free on 127.0.0.1 now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path, n=30):
    try:
        return "\n".join(pathlib.Path(path).read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def decode(raw):
    """A response body: its JSON, else its text, None when empty."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


class Pki:
    """A certificate authority and the certificates the control plane needs, made with the
    openssl command in folder d (ECDSA P-256, valid 2 days)."""

    def __init__(self, d):
        self.d = pathlib.Path(d)
        self.d.mkdir(parents=True, exist_ok=True)
        self.ca = self.d / "ca.crt"
        self.ca_key = self.d / "ca.key"
        self._run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                  "-nodes", "-keyout", self.ca_key, "-out", self.ca, "-days", "2",
                  "-subj", "/CN=elastic-gpu-test-ca", "-addext",
                  "basicConstraints=critical,CA:TRUE", "-addext",
                  "keyUsage=critical,keyCertSign,cRLSign,digitalSignature")

    def _run(self, *args):
        r = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True)
        if r.returncode != 0:
            raise ClusterError(f"openssl {' '.join(map(str, args[:2]))}: {r.stderr.strip()}")

    def key(self, name):
        """A new ECDSA P-256 private key at <name>.key (PEM); its path."""
        path = self.d / f"{name}.key"
        self._run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                  "-out", path)
        return path

    def public(self, key):
        """The public key of private key file key, at <key's stem>.pub (PEM); its path."""
        path = key.with_suffix(".pub")
        self._run("pkey", "-in", key, "-pubout", "-out", path)
        return path

    def cert(self, name, cn, orgs=(), sans=(), server=False):
        """A certificate for cn (organisations orgs: the groups a client certificate gives)
        signed by the CA: (<name>.crt, <name>.key)."""
        key = self.key(name)
        crt, csr, ext = (self.d / f"{name}.{x}" for x in ("crt", "csr", "ext"))
        subj = "".join(f"/O={o}" for o in orgs) + f"/CN={cn}"
        self._run("req", "-new", "-key", key, "-out", csr, "-subj", subj)
        lines = ["basicConstraints=critical,CA:FALSE",
                 "keyUsage=critical,digitalSignature,keyEncipherment",
                 f"extendedKeyUsage={'serverAuth' if server else 'clientAuth'}"]
        if sans:
            lines.append("subjectAltName=" + ",".join(sans))
        ext.write_text("\n".join(lines) + "\n")
        self._run("x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.ca_key,
                  "-CAcreateserial", "-out", crt, "-days", "2", "-extfile", ext)
        return crt, key


class Cluster:
    """One control plane in folder workdir (see the module's docstring).

    scheduler: start kube-scheduler (with scheduler_config, a dict: the
    KubeSchedulerConfiguration, whose clientConnection and leaderElection this fills in
    when absent). apiserver_args, controller_manager_args, etcd_args: more flags.
    etcd_url: etcd's client URL once started (plain HTTP on loopback)."""

    def __init__(self, workdir, scheduler=True, scheduler_config=None, apiserver_args=(),
                 controller_manager_args=(), etcd_args=()):
        self.dir = pathlib.Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.want_scheduler = scheduler
        self.scheduler_config = scheduler_config
        self.apiserver_args = list(apiserver_args)
        self.controller_manager_args = list(controller_manager_args)
        self.etcd_args = list(etcd_args)
        self.etcd_url = None
        self.procs = {}  # name -> Popen, in start order
        self.url = None
        self.kubeconfig = None
        self.audit_log = self.dir / "audit.log"

    # ---- processes --------------------------------------------------------------------

    def _spawn(self, name, args):
        log = open(self.dir / f"{name}.log", "w")
        exe = str(args[0]) if os.path.isabs(str(args[0])) else str(BIN / args[0])
        self.procs[name] = subprocess.Popen(with_parent([exe, *args[1:]]),
                                            stdin=subprocess.DEVNULL, stdout=log, env=clean_env(),
                                            stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        return self.procs[name]

    def _wait(self, name, ready, timeout):
        proc = self.procs[name]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ClusterError(f"{name} exited with {proc.returncode}:\n"
                                   f"{tail(self.dir / f'{name}.log')}")
            try:
                if ready():
                    return
            except (OSError, urllib.error.URLError, ssl.SSLError):
                pass
            time.sleep(0.2)
        raise ClusterError(f"{name} not ready after {timeout} s:\n"
                           f"{tail(self.dir / f'{name}.log')}")

    def _get_ok(self, url, ctx):
        with urllib.request.urlopen(url, timeout=5, context=ctx) as r:
            return r.status == 200

    def start(self, timeout=180):
        """Start every process and wait until the cluster takes pods. Raises ClusterError
        (the processes already started are stopped)."""
        missing = missing_binaries()
        if missing:
            raise ClusterError(f"tools/bin lacks {', '.join(missing)}: run `make k8s`")
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout):
        pki = self.pki = Pki(self.dir / "pki")
        api_crt, api_key = pki.cert("apiserver", "kube-apiserver", sans=API_SANS, server=True)
        admin = pki.cert("admin", "elastic-gpu-test-admin", orgs=("system:masters",))
        kubelet_client = pki.cert("apiserver-kubelet-client", "kube-apiserver-kubelet-client",
                                  orgs=("system:masters",))
        sa_key = pki.key("service-account")
        sa_pub = pki.public(sa_key)
        ctx = self.ssl_context(admin)

        # etcd
        client, peer = free_port(), free_port()
        etcd_url = self.etcd_url = f"http://127.0.0.1:{client}"
        self._spawn("etcd", [
            "etcd", "--name", "default", "--data-dir", self.dir / "etcd",
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"default=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync=true", "--log-level", "warn", *self.etcd_args])
        self._wait("etcd", lambda: self._get_ok(f"{etcd_url}/health", None), 60)

        # kube-apiserver
        port = free_port()
        self.url = f"https://127.0.0.1:{port}"
        policy = self.dir / "audit-policy.yaml"
        policy.write_text("apiVersion: audit.k8s.io/v1\nkind: Policy\n"
                          "omitStages: [RequestReceived]\nrules:\n- level: Metadata\n")
        self._apiserver_argv = [
            "kube-apiserver", "--etcd-servers", etcd_url,
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
            "--secure-port", port, "--tls-cert-file", api_crt, "--tls-private-key-file", api_key,
            "--client-ca-file", pki.ca, "--service-account-key-file", sa_pub,
            "--service-account-signing-key-file", sa_key,
            "--service-account-issuer", "https://kubernetes.default.svc",
            "--service-cluster-ip-range", SERVICE_CIDR,
            "--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
            "--allow-privileged=true", "--endpoint-reconciler-type", "none",
            "--audit-log-path", self.audit_log, "--audit-policy-file", policy,
            "--audit-log-format", "json", "--audit-log-mode", "blocking",
            "--kubelet-client-certificate", kubelet_client[0],
            "--kubelet-client-key", kubelet_client[1],
            "--kubelet-preferred-address-types", "InternalIP,ExternalIP,Hostname",
            *self.apiserver_args]
        self._admin_ctx = ctx
        self._spawn("kube-apiserver", self._apiserver_argv)
        self._wait("kube-apiserver", lambda: self._get_ok(f"{self.url}/readyz", ctx), timeout)
        self.kubeconfig = self.write_kubeconfig(self.dir / "admin.kubeconfig", cert=admin)

        # kube-controller-manager
        kcm = self.write_kubeconfig(self.dir / "kube-controller-manager.kubeconfig",
                                    cert=pki.cert("kcm", "system:kube-controller-manager"))
        kcm_port = free_port()
        self._spawn("kube-controller-manager", [
            "kube-controller-manager", "--kubeconfig", kcm, "--authentication-kubeconfig", kcm,
            "--authorization-kubeconfig", kcm, "--bind-address", "127.0.0.1",
            "--secure-port", kcm_port, "--service-account-private-key-file", sa_key,
            "--root-ca-file", pki.ca, "--use-service-account-credentials=true",
            "--cluster-signing-cert-file", pki.ca, "--cluster-signing-key-file", pki.ca_key,
            "--service-cluster-ip-range", SERVICE_CIDR, "--leader-elect=false",
            *self.controller_manager_args])
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # its own self-signed serving certificate
        self._wait("kube-controller-manager",
                   lambda: self._get_ok(f"https://127.0.0.1:{kcm_port}/healthz", insecure), 60)

        # kube-scheduler
        if self.want_scheduler:
            self.start_scheduler(self.scheduler_config)

        # pods need their ServiceAccount: the default one of namespace default
        self._wait("kube-controller-manager", lambda: self.call(
            "GET", "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200, 60)

    def start_scheduler(self, config=None, name="kube-scheduler", kubeconfig=None, wrap=(),
                        args=()):
        """Start kube-scheduler as process name with KubeSchedulerConfiguration config (a
        dict; default: one default-scheduler profile), leader election off unless config
        sets it. Its identity: system:kube-scheduler (a client certificate), or whoever
        kubeconfig (a path, e.g. sa_kubeconfig()'s) authenticates, for the API and for its
        secure port's authentication and authorization, as an in-cluster kube-scheduler
        uses its ServiceAccount for all three. wrap: a command line it runs under (e.g.
        unshare). args: more flags (e.g. --v=10, which logs each plugin's score). Waits for
        its /healthz."""
        sched = kubeconfig or self.write_kubeconfig(
            self.dir / f"{name}.kubeconfig", cert=self.pki.cert(name, "system:kube-scheduler"))
        cfg = json.loads(json.dumps(config or {}))
        cfg.setdefault("apiVersion", "kubescheduler.config.k8s.io/v1")
        cfg.setdefault("kind", "KubeSchedulerConfiguration")
        cfg.setdefault("clientConnection", {})["kubeconfig"] = str(sched)
        cfg.setdefault("leaderElection", {"leaderElect": False})
        path = self.dir / f"{name}-config.json"
        path.write_text(json.dumps(cfg, indent=1))
        port = free_port()
        self._spawn(name, [
            *([*wrap, BIN / "kube-scheduler"] if wrap else ["kube-scheduler"]),
            "--config", path, "--authentication-kubeconfig", sched,
            "--authorization-kubeconfig", sched, "--bind-address", "127.0.0.1",
            "--secure-port", port, *args])
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        self._wait(name, lambda: self._get_ok(f"https://127.0.0.1:{port}/healthz", insecure), 60)
        return self.procs[name]

    def restart_apiserver(self, timeout=600):
        """Stop kube-apiserver and start it again on the same port and etcd, waiting up to
        timeout s for /readyz: its watch cache is then filled by one list of etcd per
        resource, as after an upgrade, rather than by the events of what was written."""
        self.stop_process("kube-apiserver")
        self._spawn("kube-apiserver", self._apiserver_argv)
        self._wait("kube-apiserver",
                   lambda: self._get_ok(f"{self.url}/readyz", self._admin_ctx), timeout)

    def stop_process(self, name, sig=signal.SIGTERM):
        """Stop process name (sig, then SIGKILL after 10 s) and forget it."""
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        try:
            proc.send_signal(sig)
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def stop(self):
        """Stop every process started, the last started first."""
        for name in reversed(list(self.procs)):
            self.stop_process(name)

    # ---- clients ----------------------------------------------------------------------

    def ssl_context(self, cert=None):
        """An SSL context trusting the cluster's CA, with client certificate cert
        ((crt, key) paths) when given."""
        ctx = ssl.create_default_context(cafile=str(self.dir / "pki" / "ca.crt"))
        if cert:
            ctx.load_cert_chain(str(cert[0]), str(cert[1]))
        return ctx

    def write_kubeconfig(self, path, cert=None, token=None, namespace=None):
        """A kubeconfig at path for this API server (CA by file), authenticating with a
        client certificate ((crt, key)) or a bearer token; its path as a str."""
        user = ({"client-certificate": str(cert[0]), "client-key": str(cert[1])} if cert
                else {"token": token})
        ctx = {"cluster": "test", "user": "user"}
        if namespace:
            ctx["namespace"] = namespace
        cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "test",
               "clusters": [{"name": "test", "cluster": {
                   "server": self.url, "certificate-authority": str(self.dir / "pki/ca.crt")}}],
               "users": [{"name": "user", "user": user}],
               "contexts": [{"name": "test", "context": ctx}]}
        pathlib.Path(path).write_text(json.dumps(cfg, indent=1))
        os.chmod(path, 0o600)
        return str(path)

    def call(self, method, path, body=None, ctype="application/json", token=None, cert=None):
        """One request as the admin, or with bearer token, or with client certificate cert
        ((crt, key) paths): (HTTP status, the body decoded from JSON, or its text when it
        is not JSON, or None when empty)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", ctype)
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        ctx = self.ssl_context(None if token else cert or (self.dir / "pki/admin.crt",
                                                            self.dir / "pki/admin.key"))
        try:
            with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
                return r.status, decode(r.read())
        except urllib.error.HTTPError as e:
            return e.code, decode(e.read())

    @property
    def version(self):
        """The API server's gitVersion (v1.36.3)."""
        return self.call("GET", "/version")[1]["gitVersion"]

    def token(self, namespace, name, seconds=3600):
        """A token of ServiceAccount namespace/name (TokenRequest, authentication.k8s.io/v1),
        valid seconds."""
        st, obj = self.call("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}"
                            "/token", {"apiVersion": "authentication.k8s.io/v1",
                                       "kind": "TokenRequest",
                                       "spec": {"expirationSeconds": seconds}})
        if st != 201:
            raise ClusterError(f"TokenRequest for {namespace}/{name}: {st} {obj}")
        return obj["status"]["token"]

    def sa_kubeconfig(self, namespace, name, path=None):
        """A kubeconfig (its path) holding a token of ServiceAccount namespace/name, namespace
        its default."""
        path = path or self.dir / f"sa-{namespace}-{name}.kubeconfig"
        return self.write_kubeconfig(path, token=self.token(namespace, name),
                                     namespace=namespace)

    def namespace(self, name, labels=None):
        """Namespace name (with labels) made, or kept when it exists, and its ServiceAccount
        default waited for: kube-controller-manager makes it, and no pod is admitted in the
        namespace before (the ServiceAccount admission plugin). ClusterError if not in 60 s."""
        meta = {"name": name, **({"labels": dict(labels)} if labels else {})}
        st, obj = self.call("POST", "/api/v1/namespaces",
                            {"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
        if st not in (201, 409):
            raise ClusterError(f"namespace {name}: {st} {obj}")
        try:
            wait_until(lambda: self.call(
                "GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")[0] == 200,
                f"namespace {name}'s ServiceAccount default")
        except TimeoutError as e:
            raise ClusterError(str(e)) from None
        return name

    def _tool(self, name, args, kubeconfig, timeout, check, stdin):
        exe = BIN / name
        r = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True,
                           timeout=timeout, input=stdin,
                           env={**clean_env(), "KUBECONFIG": kubeconfig or self.kubeconfig})
        if check and r.returncode != 0:
            raise ClusterError(f"{name} {' '.join(map(str, args))}: rc {r.returncode}\n"
                               f"{r.stdout[-2000:]}{r.stderr[-3000:]}")
        return r

    def kubectl(self, *args, kubeconfig=None, timeout=120, check=True, stdin=None):
        """tools/bin/kubectl ARGS against this cluster (the admin, or kubeconfig):
        CompletedProcess; with check, ClusterError unless rc 0."""
        return self._tool("kubectl", args, kubeconfig, timeout, check, stdin)

    def helm(self, *args, kubeconfig=None, timeout=300, check=True):
        """tools/bin/helm ARGS against this cluster, as kubectl()."""
        return self._tool("helm", args, kubeconfig, timeout, check, None)

    def audit(self, user=None):
        """The audit log's events (ResponseComplete and Panic stages), of user when given."""
        out = []
        try:
            text = self.audit_log.read_text()
        except OSError:
            return out
        for line in text.splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if user is None or ev.get("user", {}).get("username") == user:
                out.append(ev)
        return out


def main(argv):
    if len(argv) != 2:
        print(f"usage: {argv[0]} DIR  (start a control plane in DIR until interrupted)",
              file=sys.stderr)
        return 2
    c = Cluster(argv[1])
    try:
        c.start()
        print(f"cluster up: KUBECONFIG={c.kubeconfig}", flush=True)
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        c.stop()
    return 0


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    sys.exit(main(sys.argv))
