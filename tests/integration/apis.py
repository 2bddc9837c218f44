"""The two API servers the integration tests talk to, behind one client interface.

- Api: the project's test API server (tests/apiserver/server.py), for the tests that need a
  fault a real kube-apiserver cannot be made to show on demand (a 410 in the middle of a
  watch, a dropped connection, an injected 500 or 409, a server that is down): its
  /_control/ API (control()) arms them. The `fault_api` fixture (conftest.py) starts one per
  test.
- RealApi: the same interface over the real control plane of tests/cluster/cluster.py (the
  `kube_api` fixture): call() as the cluster's admin, the objects the tests make with the
  same helpers, and component_kubeconfig(), a kubeconfig holding a token of the
  ServiceAccount deploy/ gives a component, so a component under test has exactly its RBAC.

A test written against this interface runs on either; the real one is the default for every
behaviour it can show. What the test API server simplifies (its docstring's
"Simplified" list) the real one does not: where a test relied on a simplification, it was
rewritten to do what a real client must (write status through /status, create its
namespaces, delete a bound pod with gracePeriodSeconds 0 when no kubelet is there to finish
it)."""
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request

TOKEN = "sched-test-token"  # the test API server's token (fault_api)
SYSTEM_NAMESPACE = "elastic-gpu-system"  # where deploy/ runs the components


class Api:
    """A minimal client of the test API server (urllib, bearer token).

    url: the server's base URL; kubeconfig: a kubeconfig for it (namespace elastic-gpu)."""

    def __init__(self, url):
        self.url = url
        self.kubeconfig = None
        self.real = False

    def call(self, method, path, body=None, ctype="application/json", token=TOKEN):
        """One request: (HTTP status, the body decoded from JSON or None)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        if data is not None:
            req.add_header("Content-Type", ctype)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def control(self, what, body=None, method="POST"):
        """The test API server's /_control/WHAT (no auth): (status, body)."""
        return self.call(method, "/_control/" + what, body if body is not None else {}, token=None)

    def component_kubeconfig(self, service_account):
        """The kubeconfig a component runs with. The test API server has no RBAC: the one
        kubeconfig (its token) for every component."""
        del service_account
        return self.kubeconfig

    def node(self, name, cpu="64", memory="256Gi"):
        st, obj = self.call("POST", "/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": cpu, "memory": memory}}})
        assert st == 201, obj

    def gpu(self, node, index, model="A100", memory=40960):
        st, obj = self.call("POST", "/apis/elasticgpu.io/v1alpha1/gpus", {
            "apiVersion": "elasticgpu.io/v1alpha1", "kind": "GPU",
            "metadata": {"name": f"{node}-gpu{index}"},
            "spec": {"nodeName": node, "index": index, "uuid": f"GPU-{node}-{index}",
                     "model": model, "memory": memory}})
        assert st == 201, obj

    def pod(self, name, core, memory=0, ns="default", annotations=None):
        """Pod ns/name for elastic-gpu-scheduler, one container "main" asking core percent
        and memory MiB (none when 0), with annotations; the created object."""
        res = {"cpu": "1", "elasticgpu.io/gpu-core": str(core)}
        if memory:
            res["elasticgpu.io/gpu-memory"] = str(memory)
        meta = {"name": name, "namespace": ns, **({"annotations": dict(annotations)}
                                                   if annotations else {})}
        st, obj = self.call("POST", f"/api/v1/namespaces/{ns}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": "elastic-gpu-scheduler",
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"requests": res, "limits": {
                                         k: v for k, v in res.items() if k != "cpu"}}}]}})
        assert st == 201, obj
        return obj

    def get_pod(self, name, ns="default"):
        st, obj = self.call("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        assert st == 200, obj
        return obj


# What reset() empties between two tests on the shared real control plane, in this order
# (pods before the objects their controllers would recreate or wait on):
# (list path, namespaced). Namespaces themselves stay (a namespace's deletion takes the
# namespace controller seconds; the next test may want the same name at once).
_RESET = (
    ("/api/v1/pods", True),
    ("/apis/elasticgpu.io/v1alpha1/elasticgpuclaims", True),
    ("/apis/elasticgpu.io/v1alpha1/elasticgpus", False),
    ("/apis/elasticgpu.io/v1alpha1/elasticgpuclasses", False),
    ("/apis/elasticgpu.io/v1alpha1/gpubudgets", True),
    ("/apis/elasticgpu.io/v1alpha1/gpus", False),
    ("/api/v1/nodes", False),
    ("/api/v1/resourcequotas", True),
    ("/api/v1/events", True),
    ("/apis/coordination.k8s.io/v1/leases", True),
    ("/api/v1/secrets", True),
    ("/apis/scheduling.k8s.io/v1/priorityclasses", False),
    ("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", False),
    ("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", False),
)
# Objects the control plane itself keeps: never deleted by reset().
_KEEP_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")


class RealApi(Api):
    """Api over a real control plane (tests/cluster/cluster.py's Cluster, with the contract
    installed: the `kube` fixture). call() is the cluster admin's (client certificate)
    whatever token the test names, unless it names one of its own (sent as a bearer token,
    e.g. a ServiceAccount's) or None (no credentials: the API server's anonymous user).

    Two rules of the test API server are kept so the same tests run on both, each a step a
    real client takes anyway: a namespace an object is created in is created first when
    missing (and its default ServiceAccount waited for, without which no pod is admitted),
    and reset() (the test API server's /_control/reset) empties what the tests make."""

    def __init__(self, cluster):
        super().__init__(cluster.url)
        self.cluster = cluster
        self.real = True
        self.kubeconfig = cluster.write_kubeconfig(cluster.dir / "tests-admin.kubeconfig",
                                                   cert=(cluster.dir / "pki/admin.crt",
                                                         cluster.dir / "pki/admin.key"),
                                                   namespace=SYSTEM_NAMESPACE)
        self._namespaces = set()
        self._kubeconfigs = {}

    def call(self, method, path, body=None, ctype="application/json", token=TOKEN):
        if method == "POST":
            m = re.match(r"/api/v1/namespaces/([^/]+)/|/apis/[^/]+/[^/]+/namespaces/([^/]+)/",
                         path)
            if m:
                self.namespace(m.group(1) or m.group(2))
        if token is TOKEN or token == TOKEN:
            return self.cluster.call(method, path, body, ctype)
        if token is None:
            return self._anonymous(method, path, body, ctype)
        return self.cluster.call(method, path, body, ctype, token=token)

    def _anonymous(self, method, path, body, ctype):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", ctype)
        try:
            with urllib.request.urlopen(req, timeout=30,
                                        context=self.cluster.ssl_context()) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def control(self, what, body=None, method="POST"):
        raise AssertionError(f"/_control/{what} is the test API server's: a test that needs "
                             "that fault uses the fault_api fixture and says so")

    def namespace(self, name):
        """Namespace name exists (created when missing) and has its default ServiceAccount."""
        if name in self._namespaces:
            return
        self.cluster.namespace(name)
        self._namespaces.add(name)

    def component_kubeconfig(self, service_account):
        """A kubeconfig holding a token (TokenRequest, one hour) of ServiceAccount
        elastic-gpu-system/service_account, whose namespace is elastic-gpu-system: the
        component runs with the RBAC deploy/ gives it, its Lease in that namespace."""
        if service_account not in self._kubeconfigs:
            self._kubeconfigs[service_account] = self.cluster.sa_kubeconfig(
                SYSTEM_NAMESPACE, service_account)
        return self._kubeconfigs[service_account]

    def reset(self):
        """Empty what tests make (_RESET's kinds; the control plane's own objects stay:
        kube-system, the default ServiceAccounts and their namespaces, system PriorityClasses,
        deploy/'s contract). Finalizers are removed first, pods are deleted with
        gracePeriodSeconds 0 (no kubelet is there to finish a graceful deletion), and each
        kind is waited for until its list is empty. What appears meanwhile is deleted too:
        kube-controller-manager's node controller posts its RemovingNode event about a
        deleted node seconds after the deletion."""
        for path, namespaced in _RESET:
            self._delete_all(path, namespaced)
        deadline = time.monotonic() + 30
        for path, namespaced in _RESET:
            while self._delete_all(path, namespaced):
                assert time.monotonic() < deadline, f"reset: {path} not empty after 30 s"
                time.sleep(0.1)

    def _delete_all(self, path, namespaced):
        """Delete what path lists that reset() empties; whether there was any."""
        left = [o for o in self._leftovers(path) if self._resettable(path, o, namespaced)]
        for obj in left:
            meta = obj["metadata"]
            if meta.get("deletionTimestamp") and not meta.get("finalizers"):
                continue  # going already
            item = self._item(path, meta.get("namespace"), meta["name"])
            if meta.get("finalizers"):
                self.cluster.call("PATCH", item, {"metadata": {"finalizers": None}},
                                  "application/merge-patch+json")
            self.cluster.call("DELETE", item, {"apiVersion": "v1", "kind": "DeleteOptions",
                                               "gracePeriodSeconds": 0})
        return bool(left)

    def _resettable(self, path, obj, namespaced):
        meta = obj["metadata"]
        if namespaced and meta.get("namespace") in _KEEP_NAMESPACES:
            return False
        if path.endswith("/priorityclasses") and meta["name"].startswith("system-"):
            return False
        if path.endswith("/secrets") and obj.get("type") == "kubernetes.io/service-account-token":
            return False
        return True

    def _leftovers(self, path):
        st, obj = self.cluster.call("GET", path)
        assert st == 200, f"GET {path}: {st} {obj}"
        return obj.get("items") or []

    @staticmethod
    def _item(path, ns, name):
        name = urllib.parse.quote(name, safe="")
        if ns is None:
            return f"{path}/{name}"
        prefix, plural = path.rsplit("/", 1)
        return f"{prefix}/namespaces/{ns}/{plural}/{name}"
