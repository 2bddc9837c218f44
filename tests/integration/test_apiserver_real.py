"""The checks of test_apiserver.py that are also run against the real control plane
(conftest.py's `kube_api`), showing the test API server and a real kube-apiserver agree.
test_apiserver.py's own `kube` fixture (kubectl over the test API server) would shadow
conftest.py's there, hence this file."""

from test_apiserver import check_graceful_pod_deletion


def test_pod_graceful_deletion_on_the_real_api_server(kube_api):
    """test_apiserver.py's graceful pod deletion checks, on a real kube-apiserver: a bound
    pod is marked (deletionTimestamp now + grace) until a DELETE with grace 0, a second
    DELETE only shortens the grace, unbound, finished and force-deleted pods go at once,
    finalizers hold a pod past grace 0."""
    def call(method, path, body):
        ctype = "application/json"
        if isinstance(body, tuple):
            body, ctype = body
        return kube_api.call(method, path, body, ctype)

    check_graceful_pod_deletion(call, "grace-check")
