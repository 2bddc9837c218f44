#!/usr/bin/python3
"""A small Kubernetes API server for Elastic GPU's integration tests.

No kube-apiserver can run on the test machines, so the C components (API
client, scheduler extender, node agent, controller) and the kubectl plugin are
tested against this server instead. It is test code and is never shipped. It
uses only the Python standard library.

    /usr/bin/python3 tests/apiserver/server.py --port 0 [--host 127.0.0.1]
        [--token TOKEN] [--bookmark-interval SECONDS] [--history N]
        [--tls-cert FILE --tls-key FILE] [--initial-rv N] [--verbose]

The first line on stdout is ``listening on http://HOST:PORT`` (``https://`` with
--tls-cert). kubectl, like client-go's clientcmd, sends a bearer token only over
HTTPS, which is what --tls-cert is for.

What it serves, following ../shared/k8s-wire (api_protocol_notes.md,
crd_lease_leader_election_notes.md) to the letter:

* core/v1 ``pods`` (with ``binding`` and ``status``), ``nodes`` (``status``),
  ``namespaces`` (``status``), ``events``, ``bindings``, ``resourcequotas``
  (``status``; a pod create that would take a namespace past a quota's
  ``hard`` ``requests.<resource>`` or ``pods`` is refused 403 with the
  ResourceQuota admission plugin's message, counting the requests of the
  pods that count (not finished, not deleted past their grace period: the
  evaluator's QuotaV1Pod), a container's limit standing for a missing
  request; the quota controller's ``status.hard`` and ``status.used`` follow
  each write of a quota or of a pod of its namespace);
  ``secrets`` (stored as given); ``admissionregistration.k8s.io/v1``
  ``mutatingwebhookconfigurations`` and ``validatingwebhookconfigurations``
  (stored, never called);
  ``coordination.k8s.io/v1`` ``leases``; ``scheduling.k8s.io/v1``
  ``priorityclasses`` (stored as given: no value or globalDefault checks);
  and the project's custom resources in
  ``elasticgpu.io/v1alpha1``: ``gpus``, ``elasticgpus``, ``elasticgpuclasses``
  (cluster-scoped), ``elasticgpuclaims``, ``gpubudgets`` (namespaced), each
  with a ``status`` subresource.
* get, list (``limit``/``continue`` with opaque etcd-style tokens and
  ``remainingItemCount``, label and field selectors, all-namespaces lists,
  ``resourceVersion``/``resourceVersionMatch``), create (``generateName``,
  409 AlreadyExists), update (409 Conflict on a stale resourceVersion), patch
  (JSON patch, merge patch, strategic merge patch for built-in types and 415
  for custom resources, a JSON-only server-side apply), delete (with
  preconditions) and deletecollection.
* finalizers and deletion as the generic registry does them: DELETE of an
  object whose ``metadata.finalizers`` is not empty only marks it (a MODIFIED
  event; ``deletionTimestamp`` now, ``deletionGracePeriodSeconds`` 0, or for a
  bound pod its grace period, see below; ``generation`` + 1 the first time if it
  has one) and answers 200 with the
  object, for every resource (202 only with the deprecated
  ``orphanDependents: false``); a repeated DELETE changes nothing. While it is
  being deleted, an update or patch cannot add finalizers (422 Invalid,
  ``metadata.finalizers: Forbidden: no new finalizers can be added if the
  object is being deleted, found new finalizers []string{...}``) nor change
  ``deletionTimestamp``; the update that leaves no finalizers deletes it: one
  DELETED event carrying the object as last stored (finalizers included, as
  etcd's previous value), and the reply is the updated object. DELETE
  preconditions (uid, resourceVersion) that do not hold get 409 Conflict with
  rest.BeforeDelete's message (``Operation cannot be fulfilled on
  ElasticGPUClaim.elasticgpu.io "c1": the UID in the precondition (...) does
  not match the UID in record (...). ...``). deletecollection deletes each
  object the same way and lists them as they were before.
* watch: ``watch=1|true`` (and the old ``/watch/`` paths), synthetic ADDED
  events for ``resourceVersion`` unset or "0", replay from "N", BOOKMARK
  events every ``--bookmark-interval`` seconds when ``allowWatchBookmarks``,
  ``timeoutSeconds``, selectors (an object that stops matching is sent as
  DELETED, as the watch cache does), ``sendInitialEvents`` with the
  ``k8s.io/initial-events-end`` bookmark, and "too old resource version" as
  HTTP 200 plus one ERROR event carrying a 410 Expired Status.
* one global resourceVersion counter, as etcd's revision; a bounded history
  (``--history`` events) plays the role of etcd compaction: watches and
  ``continue`` tokens older than it get 410.
* the pod ``binding`` subresource exactly as BindingREST: 201 + Success
  Status, annotations merged, ``PodScheduled=True``, 409 when already bound,
  uid/resourceVersion preconditions.
* status subresources: the main resource ignores ``.status``, ``/status``
  changes only ``.status``; ``metadata.generation`` counts spec changes of
  custom resources; custom resources refuse a PUT without
  ``metadata.resourceVersion`` (422) and drop ``.status`` on create; a no-op
  update writes nothing (same resourceVersion, no event).
* discovery (``/version``, ``/api``, ``/apis``, per group-version
  APIResourceLists) and ``meta.k8s.io/v1`` Table output, so ``kubectl`` and
  the official Python client work against it.
* bearer-token auth: with --token, every API request needs
  ``Authorization: Bearer TOKEN``, else 401 with an Unauthorized Status.

Control API for the tests (no auth, JSON in and out, not in the request log):

  POST   /_control/reset         drop every object (the four default namespaces
                                 come back), the history, faults, down mode and
                                 the request log; open watches end
  POST   /_control/fault         {"method": "PATCH" or "*", "path": "<Python regex,
                                 searched in the URL path>", "code": 500,
                                 "count": 1, "delay_ms": 0}, or a list of them:
                                 the next `count` matching API requests
                                 (count < 0: all of them) wait delay_ms and then,
                                 unless code is 0, get that code with a Status
                                 body (429/503/504 also carry Retry-After: 1)
  GET    /_control/fault         the armed faults; DELETE disarms them all
  POST   /_control/drop-watches  cut every open watch now, abruptly (no final
                                 chunk, as a lost connection), or cleanly with
                                 {"graceful": true}; answers {"dropped": N}
  POST   /_control/compact       forget the history: every resourceVersion given
                                 out so far is too old for watches (ERROR 410)
                                 and continue tokens (HTTP 410)
  POST   /_control/down          {"down": true|false}: while down, every API
                                 request gets 503 ServiceUnavailable
  GET    /_control/requests      [{method, path, query, content_type,
                                 authorization, user_agent}] of the API requests
                                 so far, oldest first; DELETE clears it
  GET    /_control/watches       the number of open watch streams (a JSON number)
  POST   /_control/gates         {"DRADeviceTaints": false}: feature gates of the API
                                 server from now on (reset: all on); off, this one drops
                                 ``spec.devices[].taints`` of ResourceSlices written, as
                                 the real registry's dropDisabledFields does
  POST   /_control/token         {"tokens": ["..."]}: the accepted tokens from
                                 now on ([]: no auth), e.g. to test rotation

Simplified, compared with a real kube-apiserver:

* no admission (webhooks are not called), no RBAC, no namespace lifecycle
  (creating an object in a namespace that does not exist creates the
  namespace instead of answering 404; deleting a namespace deletes it and its
  objects at once, finalizers or not), no garbage collector (``propagationPolicy``
  and ``orphanDependents`` are accepted, but the ``orphan`` and
  ``foregroundDeletion`` finalizers are never added, as nothing would remove
  them); DELETE of an object without finalizers removes it at once, answering,
  like the real registries, with the object for pods, namespaces and custom
  resources and with a Success Status naming it for nodes, events and leases.
  Pods alone are deleted gracefully, as the pod registry does (rest.BeforeDelete
  and CheckGracefulDelete): a bound pod (``spec.nodeName``) not yet finished gets
  ``deletionTimestamp`` now + grace and ``deletionGracePeriodSeconds`` grace (the
  DeleteOptions' ``gracePeriodSeconds``, else ``spec.terminationGracePeriodSeconds``),
  a MODIFIED event and 200 with the pod, and stays until a DELETE with
  ``gracePeriodSeconds`` 0 (the kubelet's); a second DELETE may shorten the grace
  (``deletionTimestamp`` moves earlier), never extend it. An unbound or finished pod,
  or one deleted with grace 0, is marked with grace 0 (MODIFIED) and then removed
  (DELETED) unless it has finalizers. Nothing ever deletes a pod when its grace period
  ends (no kubelet, no pod garbage collector).
* ResourceQuota: the quota controller's status is written at once (a real
  one writes it a moment later: until then a new quota refuses every pod it
  would count, "status unknown for quota", and a finished or deleted pod still
  counts in ``status.used``), and admission counts the pods as they stand
  rather than from ``status.used``; only ``pods`` and ``requests.<name>`` are
  counted (no ``limits.``, bare ``cpu``/``memory``, ``count/``, scopes or
  scopeSelector).
* custom resources are not validated against a schema and nothing is pruned
  or defaulted; built-in types get a few defaults (pods: the usual spec
  defaults, requests from limits, ``status.phase=Pending``, ``qosClass``)
  and a small part of their validation (object names, pod containers, pod
  spec immutability).
* strategic merge patch knows merge keys by field name only (containers,
  volumes, env, conditions, ...), not per type; ``$setElementOrder`` is ignored.
* server-side apply accepts JSON bodies only and acts as a merge patch
  (creating the object when missing); there is no field ownership.
* no protobuf, no YAML responses, no aggregated discovery. ``/openapi/v2`` is 404 and
  ``/openapi/v3`` is a stub with no schemas: it only declares the ``fieldValidation`` query
  parameter, so kubectl's default ``--validate=strict`` relies on the server, which does not
  check unknown fields.
"""

import argparse
import base64
import collections
import copy
import datetime
import http.server
import json
import os
import random
import re
import select
import signal
import socket
import ssl
import sys
import threading
import time
import traceback
import urllib.parse
import uuid

MAX_BODY = 3 * 1024 * 1024  # the real server's limit for a request body
DEFAULT_WATCH_TIMEOUT = 1800  # seconds, like --min-request-timeout
SERVER_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2024-12-11T00:00:00Z",
    "goVersion": "go1.23.3",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def mark_as_deleting(md):
    """The registry's markAsDeleting on metadata md (modified in place)."""
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    current = parse_rfc3339(md.get("deletionTimestamp"))
    if current is None and int(md.get("generation") or 0) > 0:
        md["generation"] = int(md["generation"]) + 1
    if current is None or current > now:
        md["deletionTimestamp"] = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    md["deletionGracePeriodSeconds"] = 0


NO_NEW_FINALIZERS = ("no new finalizers can be added if the object is being deleted, found new "
                     "finalizers")


def go_string_slice(items):
    """A []string as Go's %#v prints it: []string{"a", "b"}."""
    return "[]string{" + ", ".join(json.dumps(x, ensure_ascii=False) for x in items) + "}"


def parse_rfc3339(s):
    try:
        return datetime.datetime.strptime(s[:19], "%Y-%m-%dT%H:%M:%S").replace(
            tzinfo=datetime.timezone.utc)
    except (TypeError, ValueError):
        return None


# =============================================================================
# Errors: every failure is a metav1.Status
# =============================================================================

class ApiError(Exception):
    """An error answered with a Status object (api_protocol_notes.md)."""

    def __init__(self, code, reason, message, details=None, metadata=None, headers=None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.metadata = metadata
        self.headers = headers or {}

    def status(self):
        return status_body(self.code, self.reason, self.message, self.details, self.metadata)


def status_body(code, reason, message, details=None, metadata=None):
    s = {"kind": "Status", "apiVersion": "v1", "metadata": metadata or {},
         "status": "Failure", "message": message}
    if reason:
        s["reason"] = reason
    if details is not None:
        s["details"] = details
    s["code"] = code
    return s


QUANTITY = re.compile(r"^([+-]?[0-9.]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
QUANTITY_SCALE = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
                  "Ei": 2**60, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9,
                  "T": 1e12, "P": 1e15, "E": 1e18}


def quantity(v):
    """A resource.Quantity (text or number) as a number; None when it is not one."""
    m = QUANTITY.match(str(v).strip())
    if not m:
        return None
    try:
        return float(m.group(1)) * QUANTITY_SCALE[m.group(2)]
    except ValueError:
        return None


def quantity_text(x):
    return str(int(x)) if float(x).is_integer() else repr(x)


def pod_requests(pod):
    """The quota usage of a pod: requests.<name> per resource (a container's
    limit stands for a missing request, as the API server defaults it), and
    pods=1."""
    use = {"pods": 1}
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        for name in set(req) | set(lim):
            q = quantity(req.get(name, lim.get(name)))
            if q is not None:
                use["requests." + name] = use.get("requests." + name, 0) + q
    return use


def quota_counts(pod):
    """Whether a pod counts against its namespace's quotas (the quota evaluator's
    QuotaV1Pod): not once it has finished, nor once its deletion's grace period is over
    (deletionTimestamp + deletionGracePeriodSeconds past: a pod held by a finalizer with a
    grace period of 0 no longer counts)."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    md = pod.get("metadata") or {}
    deleted = parse_rfc3339(md.get("deletionTimestamp"))
    grace = md.get("deletionGracePeriodSeconds")
    if deleted is not None and grace is not None:
        end = deleted + datetime.timedelta(seconds=int(grace))
        return datetime.datetime.now(datetime.timezone.utc) <= end
    return True


def quota_status(quota, pods):
    """status (hard, used) of quota over pods (those that count), as the quota controller
    writes it: used has a value for each name of hard the emulation counts."""
    hard = dict((quota.get("spec") or {}).get("hard") or {})
    used = {k: 0 for k, v in hard.items()
            if (k == "pods" or k.startswith("requests.")) and quantity(v) is not None}
    for p in pods:
        for k, v in pod_requests(p).items():
            if k in used:
                used[k] += v
    return {"hard": hard, "used": used}


def success_status(code):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}


def _details(res, name, kind=None):
    d = {"name": name}
    if res is not None and res.group:
        d["group"] = res.group
    d["kind"] = kind if kind is not None else (res.plural if res is not None else "")
    return d


def err_not_found(res, name):
    return ApiError(404, "NotFound", f'{res.qualified} "{name}" not found', _details(res, name))


def err_already_exists(res, name):
    return ApiError(409, "AlreadyExists", f'{res.qualified} "{name}" already exists',
                    _details(res, name))


def err_conflict(res, name, why, qualified=None):
    """409 Conflict; qualified overrides the resource (e.g. "pods/binding")."""
    if qualified:
        return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {qualified} "{name}": '
                        f'{why}', {"name": name, "kind": qualified})
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {res.qualified} "{name}": '
                    f'{why}', _details(res, name))


STALE_RV = ("the object has been modified; please apply your changes to the latest version "
            "and try again")


def err_bad_request(message):
    return ApiError(400, "BadRequest", message)


def err_invalid(res, name, causes):
    """causes: [(field, reason, message)] as in field.ErrorList."""
    parts = [f"{f}: {m}" for f, _, m in causes]
    agg = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details = {"name": name}
    if res.group:
        details["group"] = res.group
    details["kind"] = res.kind
    details["causes"] = [{"reason": r, "message": m, "field": f} for f, r, m in causes]
    group_kind = f"{res.kind}.{res.group}" if res.group else res.kind
    return ApiError(422, "Invalid", f'{group_kind} "{name}" is invalid: {agg}', details)


def err_list_options(field, message):
    return ApiError(422, "Invalid",
                    f'ListOptions.meta.k8s.io "" is invalid: {field}: Forbidden: {message}',
                    {"group": "meta.k8s.io", "kind": "ListOptions",
                     "causes": [{"reason": "FieldValueForbidden",
                                 "message": f"Forbidden: {message}", "field": field}]})


def err_too_old(requested, oldest):
    return ApiError(410, "Expired", f"too old resource version: {requested} ({oldest})")


def err_too_large(requested, current):
    return ApiError(504, "Timeout", f"Too large resource version: {requested}, current: {current}",
                    {"causes": [{"reason": "ResourceVersionTooLarge",
                                 "message": "Too large resource version"}],
                     "retryAfterSeconds": 1}, headers={"Retry-After": "1"})


ERR_NOT_FOUND_PATH = ApiError(404, "NotFound", "the server could not find the requested resource",
                              {})
ERR_METHOD = ApiError(405, "MethodNotAllowed",
                      "the server does not allow this method on the requested resource", {})

REASON_FOR_CODE = {
    400: ("BadRequest", "the server rejected our request for an unknown reason"),
    401: ("Unauthorized", "Unauthorized"),
    403: ("Forbidden", "forbidden: injected fault"),
    404: ("NotFound", "the server could not find the requested resource"),
    409: ("Conflict", "the server reported a conflict"),
    410: ("Expired", "the resource version is too old"),
    415: ("UnsupportedMediaType", "the server does not support the media type"),
    422: ("Invalid", "the server rejected our request due to an error in our request"),
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "Internal error occurred: injected fault"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: ("Timeout", "the server was unable to return a response in the time allotted"),
}


def err_for_code(code, message=None):
    reason, default = REASON_FOR_CODE.get(
        code, ("", f"the server responded with the status code {code}"))
    details = None
    headers = {}
    if code in (429, 503, 504):
        details = {"retryAfterSeconds": 1}
        headers["Retry-After"] = "1"
    return ApiError(code, reason, message or default, details, headers=headers)


# =============================================================================
# Resources: the types this server knows, and their per-type behaviour
# =============================================================================

VERBS_ALL = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                 "characters, '-' or '.', and must start and end with an alphanumeric character "
                 "(e.g. 'example.com', regex used for validation is "
                 "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
             "'-', and must start and end with an alphanumeric character (e.g. 'my-name',  or "
             "'123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")


class Resource:
    """One REST resource (a plural under a group/version)."""

    def __init__(self, group, version, plural, kind, namespaced, *, singular=None, short=(),
                 categories=(), subresources=(), custom=False, fields=(), columns=None,
                 create_on_update=False, bookmark=None, verbs=None, dns_label=False,
                 return_deleted=None):
        self.group = group
        self.version = version
        self.plural = plural
        self.kind = kind
        self.namespaced = namespaced
        self.singular = singular or kind.lower()
        self.short = list(short)
        self.categories = list(categories)
        self.subresources = set(subresources)
        self.custom = custom  # a custom resource: no strategic merge patch, generation counts
        self.fields = (["metadata.name"] + (["metadata.namespace"] if namespaced else [])
                       + list(fields))
        self.columns = columns or []
        self.create_on_update = create_on_update
        self.bookmark_extra = bookmark or {}
        self.verbs = verbs or VERBS_ALL
        self.dns_label = dns_label
        # DELETE answers with the object (pods, namespaces, custom resources) or with a
        # Success Status naming it (the generic registry's default)
        self.return_deleted = custom if return_deleted is None else return_deleted
        # custom resources refuse a PUT without metadata.resourceVersion
        self.unconditional_update = not custom

    @property
    def api_version(self):
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self):  # as in error messages: pods, leases.coordination.k8s.io
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self):
        return self.kind + "List"

    @property
    def has_status(self):
        return "status" in self.subresources

    def key(self, ns, name):
        return f"{ns}/{name}" if self.namespaced else name

    def bookmark(self, rv, initial_end=False):
        md = {"resourceVersion": str(rv)}
        if not self.custom:
            md["creationTimestamp"] = None
        if initial_end:
            md["annotations"] = {"k8s.io/initial-events-end": "true"}
        obj = {"kind": self.kind, "apiVersion": self.api_version, "metadata": md}
        obj.update(copy.deepcopy(self.bookmark_extra))
        return obj

    # ---- per-type hooks, overridden below --------------------------------
    def prepare_create(self, obj):
        if self.has_status and self.custom:
            obj.pop("status", None)  # "create cannot set status" for custom resources

    def validate(self, obj, old=None):
        pass


# Feature gates the control API turns off (POST /_control/gates); missing = on.
GATES = {}


class ResourceSliceResource(Resource):
    """resource.k8s.io/v1 ResourceSlice: with DRADeviceTaints off, the registry drops
    spec.devices[].taints on create and update (dropDisabledDRADeviceTaintsFields)."""

    def drop_disabled(self, obj):
        if GATES.get("DRADeviceTaints", True):
            return
        for d in ((obj.get("spec") or {}).get("devices") or []):
            if isinstance(d, dict):
                d.pop("taints", None)

    def prepare_create(self, obj):
        super().prepare_create(obj)
        self.drop_disabled(obj)

    def validate(self, obj, old=None):
        # called with the object about to be stored, on create and update alike
        self.drop_disabled(obj)


class PodResource(Resource):
    def prepare_create(self, obj):
        spec = obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        for c in list(spec.get("initContainers") or []) + list(spec.get("containers") or []):
            if not isinstance(c, dict):
                continue
            c.setdefault("resources", {})
            res = c["resources"]
            if isinstance(res, dict) and isinstance(res.get("limits"), dict):
                req = res.setdefault("requests", {})
                if isinstance(req, dict):
                    for k, v in res["limits"].items():
                        req.setdefault(k, v)  # requests default to limits
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            image = c.get("image") or ""
            tag = image.rsplit("/", 1)[-1]
            latest = "@" not in tag and (":" not in tag or tag.endswith(":latest"))
            c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("securityContext", {})
        spec.setdefault("schedulerName", "default-scheduler")
        tolerations = spec.setdefault("tolerations", [])
        if isinstance(tolerations, list):
            keys = {t.get("key") for t in tolerations if isinstance(t, dict)}
            for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
                if key not in keys:  # DefaultTolerationSeconds admission
                    tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                        "tolerationSeconds": 300})
        spec.setdefault("priority", 0)
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        obj["status"] = {"phase": "Pending", "qosClass": pod_qos(spec)}

    def validate(self, obj, old=None):
        name = obj["metadata"].get("name", "")
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            raise err_invalid(self, name, [("spec", "FieldValueRequired", "Required value")])
        containers = spec.get("containers")
        if not isinstance(containers, list) or not containers:
            raise err_invalid(self, name, [("spec.containers", "FieldValueRequired",
                                            "Required value")])
        for i, c in enumerate(containers):
            if not isinstance(c, dict) or not isinstance(c.get("name"), str) or not c.get("name"):
                raise err_invalid(self, name, [(f"spec.containers[{i}].name", "FieldValueRequired",
                                                "Required value")])
        if old is not None and _pod_spec_masked(old.get("spec")) != _pod_spec_masked(spec):
            raise err_invalid(self, name, [("spec", "FieldValueForbidden", POD_UPDATE_MSG)])


POD_UPDATE_MSG = ("Forbidden: pod updates may not change fields other than "
                  "`spec.containers[*].image`,`spec.initContainers[*].image`,"
                  "`spec.activeDeadlineSeconds`,`spec.tolerations` "
                  "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                  "(allow it to be set to 1 if it was previously negative)")


def _pod_spec_masked(spec):
    s = copy.deepcopy(spec) if isinstance(spec, dict) else {}
    for k in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds",
              "schedulingGates"):
        s.pop(k, None)
    for lst in ("containers", "initContainers"):
        for c in s.get(lst) or []:
            if isinstance(c, dict):
                c.pop("image", None)
    return s


def pod_qos(spec):
    """BestEffort / Guaranteed / Burstable from cpu and memory requests and limits."""
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    any_set = False
    guaranteed = True
    for c in containers:
        r = (c.get("resources") or {}) if isinstance(c, dict) else {}
        req = r.get("requests") or {}
        lim = r.get("limits") or {}
        for k in ("cpu", "memory"):
            if k in req or k in lim:
                any_set = True
            if k not in lim or req.get(k, lim.get(k)) != lim.get(k):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


class NamespaceResource(Resource):
    def prepare_create(self, obj):
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict):
            spec.setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}


# ---- Table columns: (name, type, priority, function(obj) -> cell) ----------

def jp(path):
    """A tiny JSONPath: .a.b[0].c"""
    steps = re.findall(r"\.([^.\[]+)|\[(\d+)\]", path)

    def get(obj):
        cur = obj
        for key, idx in steps:
            if key and isinstance(cur, dict):
                cur = cur.get(key)
            elif idx and isinstance(cur, list) and int(idx) < len(cur):
                cur = cur[int(idx)]
            else:
                return None
            if cur is None:
                return None
        if isinstance(cur, (dict, list)):
            return json.dumps(cur, separators=(",", ":"))
        return cur
    return get


def human_duration(seconds):
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m" if s % 60 == 0 else f"{m}m{s % 60}s"
    if m < 180:
        return f"{m}m"
    h = s // 3600
    if h < 8:
        return f"{h}h" if m % 60 == 0 else f"{h}h{m % 60}m"
    if h < 48:
        return f"{h}h"
    if h < 24 * 8:
        return f"{h // 24}d" if h % 24 == 0 else f"{h // 24}d{h % 24}h"
    if h < 24 * 365 * 2:
        return f"{h // 24}d"
    if h < 24 * 365 * 8:
        dy = (h // 24) % 365
        return f"{h // 24 // 365}y" if dy == 0 else f"{h // 24 // 365}y{dy}d"
    return f"{h // 24 // 365}y"


def age(ts_path=".metadata.creationTimestamp"):
    get = jp(ts_path)

    def cell(obj):
        t = parse_rfc3339(get(obj))
        if t is None:
            return "<unknown>"
        return human_duration((datetime.datetime.now(datetime.timezone.utc) - t).total_seconds())
    return cell


def _pod_ready(o):
    cs = (o.get("status") or {}).get("containerStatuses") or []
    ready = sum(1 for c in cs if c.get("ready"))
    return f"{ready}/{len((o.get('spec') or {}).get('containers') or [])}"


def _pod_status(o):
    st = o.get("status") or {}
    if (o.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    return st.get("reason") or st.get("phase") or "Unknown"


def _pod_restarts(o):
    return sum(int(c.get("restartCount") or 0)
               for c in (o.get("status") or {}).get("containerStatuses") or [])


def _node_status(o):
    conds = (o.get("status") or {}).get("conditions") or []
    ready = [c for c in conds if c.get("type") == "Ready"]
    s = "Unknown" if not ready else ("Ready" if ready[0].get("status") == "True" else "NotReady")
    if (o.get("spec") or {}).get("unschedulable"):
        s += ",SchedulingDisabled"
    return s


def _node_roles(o):
    labels = (o.get("metadata") or {}).get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    return ",".join(r for r in roles if r) or "<none>"


def _node_addr(kind):
    def get(o):
        for a in (o.get("status") or {}).get("addresses") or []:
            if a.get("type") == kind:
                return a.get("address")
        return "<none>"
    return get


def _event_object(o):
    io = o.get("involvedObject") or {}
    return f"{(io.get('kind') or '').lower()}/{io.get('name') or ''}"


def _event_last_seen(o):
    for f in ("lastTimestamp", "eventTime", "firstTimestamp"):
        if o.get(f):
            return age("." + f)(o)
    return age()(o)


NAME_COL = ("Name", "string", 0, lambda o: o["metadata"].get("name"))
AGE_COL = ("Age", "string", 0, age())
COL_DESC = {
    "Name": "Name must be unique within a namespace. Is required when creating resources, although "
            "some resources may allow a client to request the generation of an appropriate name "
            "automatically. Name is primarily intended for creation idempotence and configuration "
            "definition. Cannot be updated. More info: "
            "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
    "Age": "CreationTimestamp is a timestamp representing the server time when this object was "
           "created. It is not guaranteed to be set in happens-before order across separate "
           "operations. Clients may not set this value. It is represented in RFC3339 form and is "
           "in UTC.",
}

POD_COLUMNS = [NAME_COL,
               ("Ready", "string", 0, _pod_ready),
               ("Status", "string", 0, _pod_status),
               ("Restarts", "string", 0, _pod_restarts),
               AGE_COL,
               ("IP", "string", 1, lambda o: (o.get("status") or {}).get("podIP") or "<none>"),
               ("Node", "string", 1, lambda o: (o.get("spec") or {}).get("nodeName") or "<none>"),
               ("Nominated Node", "string", 1,
                lambda o: (o.get("status") or {}).get("nominatedNodeName") or "<none>"),
               ("Readiness Gates", "string", 1, lambda o: "<none>")]
NODE_COLUMNS = [NAME_COL, ("Status", "string", 0, _node_status),
                ("Roles", "string", 0, _node_roles), AGE_COL,
                ("Version", "string", 0, lambda o: jp(".status.nodeInfo.kubeletVersion")(o) or ""),
                ("Internal-IP", "string", 1, _node_addr("InternalIP")),
                ("External-IP", "string", 1, _node_addr("ExternalIP")),
                ("OS-Image", "string", 1,
                 lambda o: jp(".status.nodeInfo.osImage")(o) or "<unknown>"),
                ("Kernel-Version", "string", 1,
                 lambda o: jp(".status.nodeInfo.kernelVersion")(o) or "<unknown>")]
NAMESPACE_COLUMNS = [NAME_COL, ("Status", "string", 0, lambda o: jp(".status.phase")(o) or ""),
                     AGE_COL]
LEASE_COLUMNS = [NAME_COL, ("Holder", "string", 0, lambda o: jp(".spec.holderIdentity")(o) or ""),
                 AGE_COL]
EVENT_COLUMNS = [("Last Seen", "string", 0, _event_last_seen),
                 ("Type", "string", 0, lambda o: o.get("type")),
                 ("Reason", "string", 0, lambda o: o.get("reason")),
                 ("Object", "string", 0, _event_object),
                 ("Message", "string", 0, lambda o: o.get("message")),
                 ("Name", "string", 1, lambda o: o["metadata"].get("name"))]


def crd_columns(*cols):
    """additionalPrinterColumns: (name, type, jsonPath[, priority])"""
    out = [NAME_COL]
    for c in cols:
        out.append((c[0], c[1], c[3] if len(c) > 3 else 0, jp(c[2])))
    out.append(AGE_COL)
    return out


POD_BOOKMARK = {"spec": {"containers": None}, "status": {}}
NODE_BOOKMARK = {"spec": {}, "status": {
    "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
    "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
                 "osImage": "", "containerRuntimeVersion": "", "kubeletVersion": "",
                 "kubeProxyVersion": "", "operatingSystem": "", "architecture": ""}}}
EVENT_BOOKMARK = {"involvedObject": {}, "reason": "", "message": "", "source": {},
                  "firstTimestamp": None, "lastTimestamp": None, "eventTime": None,
                  "reportingComponent": "", "reportingInstance": ""}

EGPU = "elasticgpu.io"
RESOURCES = [
    PodResource("", "v1", "pods", "Pod", True, short=["po"], categories=["all"],
                return_deleted=True,
                subresources=["status", "binding"], columns=POD_COLUMNS, bookmark=POD_BOOKMARK,
                fields=["spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
                        "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
                        "status.podIP", "status.nominatedNodeName"]),
    Resource("", "v1", "nodes", "Node", False, short=["no"], subresources=["status"],
             columns=NODE_COLUMNS, bookmark=NODE_BOOKMARK, fields=["spec.unschedulable"]),
    NamespaceResource("", "v1", "namespaces", "Namespace", False, short=["ns"],
                      return_deleted=True,
                      subresources=["status"], columns=NAMESPACE_COLUMNS, dns_label=True,
                      bookmark={"spec": {}, "status": {}}, fields=["status.phase"]),
    Resource("", "v1", "events", "Event", True, short=["ev"], columns=EVENT_COLUMNS,
             bookmark=EVENT_BOOKMARK, create_on_update=True,
             fields=["involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                     "involvedObject.uid", "involvedObject.apiVersion",
                     "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason",
                     "reportingComponent", "source", "type"]),
    Resource("", "v1", "bindings", "Binding", True, verbs=["create"]),
    Resource("", "v1", "secrets", "Secret", True, fields=["type"]),
    Resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
             "MutatingWebhookConfiguration", False),
    Resource("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
             "ValidatingWebhookConfiguration", False),
    Resource("", "v1", "resourcequotas", "ResourceQuota", True, short=["quota"],
             subresources=["status"]),
    Resource("coordination.k8s.io", "v1", "leases", "Lease", True, columns=LEASE_COLUMNS,
             bookmark={"spec": {}}, create_on_update=True),
    Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, short=["pc"],
             columns=[NAME_COL, ("Value", "integer", 0, lambda o: o.get("value")),
                      ("Global-Default", "boolean", 0, lambda o: bool(o.get("globalDefault"))),
                      AGE_COL]),
    # DRA: the agent's NodePrepareResources GETs the claim (tests/unit/test_agent_dra_plugin.c
    # creates it with its status.allocation, as the scheduler would have written it).
    Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True),
    # egpu-controller --mode dra makes a pod's ResourceClaimTemplates and the DeviceClasses
    # of ElasticGPUClasses (tests/integration/test_controller_dra.py).
    Resource("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True),
    Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False),
    # the agent's slice: egpu-agent --mode dra publishes it (tests/integration/test_agent_dra.py),
    # listed and watched by the field selectors kube-apiserver serves for it;
    # tests/unit/test_agent_dra_slice.c turns device taints off with the gate
    ResourceSliceResource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False,
                          fields=["spec.nodeName", "spec.driver"]),
    Resource(EGPU, "v1alpha1", "gpus", "GPU", False, subresources=["status"],
             custom=True, fields=["spec.nodeName"],
             columns=crd_columns(("Node", "string", ".spec.nodeName"),
                                 ("Index", "integer", ".spec.index"),
                                 ("Model", "string", ".spec.model"),
                                 ("Memory", "integer", ".spec.memory"),
                                 ("Health", "string", ".status.health"),
                                 ("UUID", "string", ".spec.uuid", 1))),
    Resource(EGPU, "v1alpha1", "elasticgpus", "ElasticGPU", False, short=["egpu"],
             subresources=["status"], custom=True, fields=["spec.nodeName"],
             columns=crd_columns(("Node", "string", ".spec.nodeName"),
                                 ("Phase", "string", ".status.phase"),
                                 ("Claim", "string", ".spec.claimRef.name"))),
    Resource(EGPU, "v1alpha1", "elasticgpuclaims", "ElasticGPUClaim", True, short=["egpuc"],
             subresources=["status"], custom=True,
             columns=crd_columns(("Phase", "string", ".status.phase"),
                                 ("ElasticGPU", "string", ".spec.elasticGPUName"),
                                 ("Class", "string", ".spec.elasticGPUClassName"))),
    Resource(EGPU, "v1alpha1", "elasticgpuclasses", "ElasticGPUClass", False, short=["egpuclass"],
             subresources=["status"], custom=True,
             columns=crd_columns(("Provisioner", "string", ".provisioner"),
                                 ("ReclaimPolicy", "string", ".reclaimPolicy"),
                                 ("BindingMode", "string", ".bindingMode"))),
    Resource(EGPU, "v1alpha1", "gpubudgets", "GPUBudget", True, short=["gpub"],
             subresources=["status"], custom=True,
             columns=crd_columns(("Used", "string", ".status.used"),
                                 ("Remaining", "string", ".status.remaining"))),
]
REGISTRY = {(r.group, r.version, r.plural): r for r in RESOURCES}
GROUPS = collections.OrderedDict()  # group -> [versions]
for _r in RESOURCES:
    GROUPS.setdefault(_r.group, [])
    if _r.version not in GROUPS[_r.group]:
        GROUPS[_r.group].append(_r.version)
PODS = REGISTRY[("", "v1", "pods")]
QUOTAS = REGISTRY[("", "v1", "resourcequotas")]
NAMESPACES = REGISTRY[("", "v1", "namespaces")]
DEFAULT_NAMESPACES = ["default", "kube-system", "kube-public", "kube-node-lease"]


def discovery_resources(group, version):
    out = []
    for r in RESOURCES:
        if r.group != group or r.version != version:
            continue
        entry = {"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
                 "kind": r.kind, "verbs": r.verbs}
        if r.short:
            entry["shortNames"] = r.short
        if r.categories:
            entry["categories"] = r.categories
        out.append(entry)
        if "binding" in r.subresources:
            out.append({"name": f"{r.plural}/binding", "singularName": "",
                        "namespaced": r.namespaced, "kind": "Binding", "verbs": ["create"]})
        if "status" in r.subresources:
            out.append({"name": f"{r.plural}/status", "singularName": "",
                        "namespaced": r.namespaced, "kind": r.kind,
                        "verbs": ["get", "patch", "update"]})
    return out


def openapi_v3_root():
    paths = {}
    for group, versions in GROUPS.items():
        for v in versions:
            key = f"apis/{group}/{v}" if group else f"api/{v}"
            paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}"}
    return {"paths": paths}


def openapi_v3_gv(group, version):
    """A minimal OpenAPI v3 document: one PATCH operation per kind, declaring the fieldValidation
    query parameter, which is what kubectl looks for before it relies on server-side validation
    (kubectl create/apply/replace with the default --validate=strict). No schemas."""
    paths = {}
    for r in RESOURCES:
        if r.group != group or r.version != version or "patch" not in r.verbs:
            continue
        prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
        path = (f"{prefix}/namespaces/{{namespace}}/{r.plural}/{{name}}" if r.namespaced
                else f"{prefix}/{r.plural}/{{name}}")
        paths[path] = {"patch": {
            "operationId": f"patch{r.kind}",
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": r.kind},
            "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                           {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
                           {"name": "dryRun", "in": "query", "schema": {"type": "string"}}],
            "responses": {"200": {"description": "OK"}}}}
    return {"openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": SERVER_VERSION["gitVersion"]},
            "paths": paths, "components": {"schemas": {}}}


# =============================================================================
# Selectors
# =============================================================================

LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                       r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def _split_top(s, sep=","):
    """Split on sep outside parentheses."""
    out, depth, cur = [], 0, []
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == sep and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


class LabelSelector:
    """labels.Parse: =, ==, !=, in, notin, exists (key), !key, gt, lt."""

    def __init__(self, text):
        self.text = text or ""
        self.reqs = []
        if not self.text.strip():
            return
        for term in _split_top(self.text):
            self.reqs.append(self._parse(term.strip()))

    def _bad(self, term, why):
        return err_bad_request(f"unable to parse requirement: {why}: {term!r}")

    def _check_key(self, term, key):
        if not LABEL_KEY.match(key) or len(key.rsplit("/", 1)[-1]) > 63:
            raise self._bad(term, f'invalid label key "{key}"')

    def _check_value(self, term, v):
        if len(v) > 63 or not LABEL_VALUE.match(v):
            raise self._bad(term, f'invalid label value: "{v}"')

    def _parse(self, term):
        if not term:
            raise self._bad(term, "found '', expected: identifier")
        m = re.match(r"^(\S+?)\s+(in|notin)\s*\((.*)\)$", term)
        if m:
            key, op, vals = m.group(1), m.group(2), [v.strip() for v in m.group(3).split(",")]
            self._check_key(term, key)
            for v in vals:
                self._check_value(term, v)
            return (key, op, set(vals))
        m = re.match(r"^([^=!<>\s]+)\s*(==|=|!=|>|<)\s*(.*)$", term)
        if m:
            key, op, val = m.group(1), m.group(2), m.group(3).strip()
            self._check_key(term, key)
            if op in (">", "<"):
                if not re.match(r"^-?\d+$", val):
                    raise self._bad(term, 'for "gt", "lt" operators, exactly one value is required')
                return (key, "gt" if op == ">" else "lt", int(val))
            self._check_value(term, val)
            return (key, "!=" if op == "!=" else "=", val)
        if term.startswith("!"):
            key = term[1:].strip()
            self._check_key(term, key)
            return (key, "!", None)
        self._check_key(term, term)
        return (term, "exists", None)

    def empty(self):
        return not self.reqs

    def matches(self, labels):
        labels = labels or {}
        for key, op, val in self.reqs:
            has = key in labels
            v = labels.get(key)
            if op == "=" and (not has or v != val):
                return False
            if op == "!=" and has and v == val:
                return False
            if op == "in" and (not has or v not in val):
                return False
            if op == "notin" and has and v in val:
                return False
            if op == "exists" and not has:
                return False
            if op == "!" and has:
                return False
            if op in ("gt", "lt"):
                try:
                    n = int(v)
                except (TypeError, ValueError):
                    return False
                if (op == "gt" and not n > val) or (op == "lt" and not n < val):
                    return False
        return True


def _field_value(obj, path):
    cur = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if isinstance(cur, (dict, list)):
        return json.dumps(cur, separators=(",", ":"))
    return str(cur)


def _unescape_field(s):
    return re.sub(r"\\(.)", r"\1", s)


class FieldSelector:
    """fields.ParseSelector: k=v, k==v, k!=v, comma-separated; only supported fields."""

    def __init__(self, text, res):
        self.text = text or ""
        self.reqs = []
        if not self.text.strip():
            return
        for term in re.split(r"(?<!\\),", self.text):
            m = re.match(r"^([^=!]+?)\s*(==|=|!=)\s*(.*)$", term.strip())
            if not m:
                raise err_bad_request(f"invalid selector: '{self.text}'; can't understand '{term}'")
            field, op, val = m.group(1).strip(), m.group(2), _unescape_field(m.group(3))
            if field not in res.fields:
                if res.custom:
                    known = ", ".join(f'"{f}"' for f in res.fields)
                    raise err_bad_request(f'"{field}" is not a known field selector: only {known}')
                raise err_bad_request(f'field label not supported: {field}')
            self.reqs.append((field, op != "!=", val))

    def add(self, field, value):
        self.reqs.append((field, True, value))

    def empty(self):
        return not self.reqs

    def matches(self, obj):
        for field, eq, val in self.reqs:
            if (_field_value(obj, field) == val) != eq:
                return False
        return True


# =============================================================================
# Patches: RFC 7386 merge patch, RFC 6902 JSON patch, strategic merge patch
# =============================================================================

def merge_patch(target, patch):
    """RFC 7386. Neither argument is modified."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


class PatchError(Exception):
    pass


def json_equal(a, b):
    """JSON equality: 1 == 1.0 but true != 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    return a == b


def _pointer(path):
    if path == "":
        return []
    if not isinstance(path, str) or not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer: {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _container(doc, tokens, path):
    cur = doc
    for t in tokens[:-1]:
        if isinstance(cur, dict) and t in cur:
            cur = cur[t]
        elif isinstance(cur, list) and re.match(r"^(0|[1-9]\d*)$", t) and int(t) < len(cur):
            cur = cur[int(t)]
        else:
            raise PatchError(f"doc is missing path: {path}: missing value")
    return cur


def _get(doc, path):
    tokens = _pointer(path)
    if not tokens:
        return doc
    c = _container(doc, tokens, path)
    t = tokens[-1]
    if isinstance(c, dict) and t in c:
        return c[t]
    if isinstance(c, list) and re.match(r"^(0|[1-9]\d*)$", t) and int(t) < len(c):
        return c[int(t)]
    raise PatchError(f"doc is missing path: {path}: missing value")


def _add(doc, path, value):
    tokens = _pointer(path)
    if not tokens:
        return value
    c = _container(doc, tokens, path)
    t = tokens[-1]
    if isinstance(c, dict):
        c[t] = value
    elif isinstance(c, list):
        if t == "-":
            c.append(value)
        elif re.match(r"^(0|[1-9]\d*)$", t) and int(t) <= len(c):
            c.insert(int(t), value)
        else:
            raise PatchError(f"add operation does not apply: doc is missing path: {path}: "
                             "missing value")
    else:
        raise PatchError(f"add operation does not apply: doc is missing path: {path}: "
                         "missing value")
    return doc


def _remove(doc, path):
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("unable to remove the root")
    c = _container(doc, tokens, path)
    t = tokens[-1]
    if isinstance(c, dict) and t in c:
        return c.pop(t)
    if isinstance(c, list) and re.match(r"^(0|[1-9]\d*)$", t) and int(t) < len(c):
        return c.pop(int(t))
    raise PatchError(f"remove operation does not apply: doc is missing path: \"{path}\": "
                     "missing value")


def json_patch(doc, ops):
    """RFC 6902 on a deep copy of doc."""
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict):
            raise PatchError("invalid operation")
        kind = op.get("op")
        path = op.get("path")
        if path is None:
            raise PatchError(f"operation missing path: {op}")
        if kind == "add":
            if "value" not in op:
                raise PatchError("add operation missing value")
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            if "value" not in op:
                raise PatchError("replace operation missing value")
            tokens = _pointer(path)
            if not tokens:
                doc = copy.deepcopy(op["value"])
                continue
            _get(doc, path)  # must exist
            c = _container(doc, tokens, path)
            t = tokens[-1]
            if isinstance(c, dict):
                c[t] = copy.deepcopy(op["value"])
            else:
                c[int(t)] = copy.deepcopy(op["value"])
        elif kind in ("move", "copy"):
            frm = op.get("from")
            if frm is None:
                raise PatchError(f"{kind} operation missing from")
            value = _get(doc, frm)
            if kind == "move":
                if path.startswith(frm + "/"):
                    raise PatchError("move operation cannot move into a child of itself")
                _remove(doc, frm)
            doc = _add(doc, path, copy.deepcopy(value))
        elif kind == "test":
            try:
                cur = _get(doc, path)
            except PatchError:
                cur = None
                if op.get("value", None) is not None:
                    raise PatchError(f"testing value {path} failed: test failed")
            if not json_equal(cur, op.get("value")):
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise PatchError(f"Unexpected kind: {kind}")
    return doc


# patchMergeKey by field name (Go struct tags of core/v1 and meta/v1)
SMP_MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "volumes": "name", "env": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath",
    "ports": "containerPort", "imagePullSecrets": "name", "conditions": "type",
    "ownerReferences": "uid", "addresses": "type", "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey", "readinessGates": "conditionType",
    "resourceClaims": "name", "schedulingGates": "name", "resizePolicy": "resourceName",
    "containerStatuses": "name", "initContainerStatuses": "name", "podIPs": "ip", "hostIPs": "ip",
    "webhooks": "name",  # admissionregistration/v1 Mutating- and ValidatingWebhookConfiguration
}
SMP_PRIMITIVE_MERGE = {"finalizers", "podCIDRs"}
_DELETE = object()


def _smp_strip(v):
    """Drop patch directives from a value that is copied in whole."""
    if isinstance(v, dict):
        return {k: _smp_strip(x) for k, x in v.items()
                if not k.startswith("$") and x is not None}
    if isinstance(v, list):
        return [_smp_strip(x) for x in v
                if not (isinstance(x, dict) and x.get("$patch") == "delete")]
    return copy.deepcopy(v)


def strategic_merge(target, patch):
    if not isinstance(patch, dict):
        raise PatchError("strategic merge patch must be a JSON object")
    if not isinstance(target, dict):
        target = {}
    directive = patch.get("$patch")
    if directive == "replace":
        return _smp_strip({k: v for k, v in patch.items() if k != "$patch"})
    if directive == "delete":
        return _DELETE
    if directive not in (None, "merge"):
        raise PatchError(f"Unknown patch type: {directive}")
    result = copy.deepcopy(target)
    for k, v in patch.items():
        if k in ("$patch", "$retainKeys") or k.startswith("$setElementOrder/"):
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            field = k.split("/", 1)[1]
            if isinstance(result.get(field), list) and isinstance(v, list):
                result[field] = [x for x in result[field] if x not in v]
            continue
        if v is None:
            result.pop(k, None)
            continue
        cur = result.get(k)
        if isinstance(v, dict) and isinstance(cur, dict):
            merged = strategic_merge(cur, v)
            if merged is _DELETE:
                result.pop(k, None)
            else:
                result[k] = merged
        elif isinstance(v, dict):
            merged = strategic_merge({}, v)
            if merged is not _DELETE:
                result[k] = merged
        elif isinstance(v, list) and k in SMP_MERGE_KEYS and isinstance(cur, list):
            result[k] = _smp_merge_list(cur, v, SMP_MERGE_KEYS[k])
        elif isinstance(v, list) and k in SMP_PRIMITIVE_MERGE and isinstance(cur, list):
            result[k] = cur + [x for x in v if x not in cur]
        else:
            result[k] = _smp_strip(v)
    if isinstance(patch.get("$retainKeys"), list):
        keep = set(patch["$retainKeys"])
        result = {k: v for k, v in result.items() if k in keep}
    return result


def _smp_merge_list(cur, patch_list, key):
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch_list):
        return [_smp_strip(p) for p in patch_list
                if not (isinstance(p, dict) and p.get("$patch") == "replace")]
    out = copy.deepcopy(cur)
    for p in patch_list:
        if not isinstance(p, dict) or key not in p:
            out.append(_smp_strip(p))
            continue
        idx = next((i for i, x in enumerate(out) if isinstance(x, dict) and x.get(key) == p[key]),
                   None)
        if p.get("$patch") == "delete":
            out = [x for x in out if not (isinstance(x, dict) and x.get(key) == p[key])]
        elif idx is None:
            out.append(_smp_strip(p))
        else:
            merged = strategic_merge(out[idx], p)
            if merged is _DELETE:
                out.pop(idx)
            else:
                out[idx] = merged
    return out


# =============================================================================
# Store: objects, the global resourceVersion, history, watchers
# =============================================================================

META_ORDER = ["name", "generateName", "namespace", "selfLink", "uid", "resourceVersion",
              "generation", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
              "labels", "annotations", "ownerReferences", "finalizers", "managedFields"]


def normalize(obj):
    """Go struct order: kind, apiVersion, metadata (in ObjectMeta order), then the rest."""
    md = obj.get("metadata") or {}
    nmd = {k: md[k] for k in META_ORDER if k in md}
    nmd.update({k: v for k, v in md.items() if k not in nmd})
    out = {"kind": obj.get("kind"), "apiVersion": obj.get("apiVersion"), "metadata": nmd}
    out.update({k: v for k, v in obj.items() if k not in ("kind", "apiVersion", "metadata")})
    return out


def with_rv(obj, rv):
    o = dict(obj)
    o["metadata"] = dict(obj["metadata"])
    o["metadata"]["resourceVersion"] = str(rv)
    return o


class Event:
    __slots__ = ("rv", "res", "ns", "type", "obj", "prev")

    def __init__(self, rv, res, ns, etype, obj, prev):
        self.rv, self.res, self.ns, self.type, self.obj, self.prev = rv, res, ns, etype, obj, prev


class Watcher:
    def __init__(self, res, ns):
        self.res = res
        self.ns = ns
        self.queue = collections.deque()
        self.drop = None  # None, "abrupt" or "graceful"


class Store:
    """All objects, one resourceVersion counter, a bounded event history.

    Stored objects are never modified in place: every write stores a new dict,
    so events and list results can share them safely. `cond` guards everything;
    handlers hold it across read-check-write sequences (that is what makes
    resourceVersion preconditions atomic).
    """

    def __init__(self, history, initial_rv=1):
        self.cond = threading.Condition(threading.RLock())
        self.rv = initial_rv
        self.history_size = max(1, history)
        self.reset()

    def reset(self):
        with self.cond:
            self.objects = {r: {} for r in RESOURCES}
            self.history = collections.deque()
            self.floor = self.rv  # watches from an RV below this get 410
            for w in getattr(self, "watchers", set()):
                w.drop = w.drop or "graceful"
            self.watchers = set()
            for ns in DEFAULT_NAMESPACES:
                obj = {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": ns}}
                NAMESPACES.prepare_create(obj)
                self.rv += 1
                obj["metadata"].update(uid=str(uuid.uuid4()), resourceVersion=str(self.rv),
                                       creationTimestamp=now_rfc3339())
                obj["metadata"]["labels"] = {"kubernetes.io/metadata.name": ns}
                self.objects[NAMESPACES][(None, ns)] = normalize(obj)
            self.floor = self.rv
            self.cond.notify_all()

    def compact(self):
        """Forget the history. Every resourceVersion handed out so far becomes too old for
        watches and continue tokens; a new list gets a fresh one that is not (the counter moves
        on by one, so a list-then-watch after compaction does not loop on 410)."""
        with self.cond:
            self.history.clear()
            self.rv += 1
            self.floor = self.rv
            return self.rv

    # ---- reads (caller may or may not hold the lock) ----------------------
    def get(self, res, ns, name):
        with self.cond:
            return self.objects[res].get((ns if res.namespaced else None, name))

    def current(self, res, ns):
        with self.cond:
            return {k: v for k, v in self.objects[res].items() if ns is None or k[0] == ns}

    def snapshot(self, res, ns, rv):
        """The objects of res (in ns, or all) as they were at rv."""
        with self.cond:
            if rv < self.floor:
                raise err_too_old(rv, self.floor + 1)
            state = self.current(res, ns)
            for ev in reversed(self.history):
                if ev.rv <= rv:
                    break
                if ev.res is not res or (ns is not None and ev.ns != ns):
                    continue
                key = (ev.ns, ev.obj["metadata"]["name"])
                if ev.type == "ADDED":
                    state.pop(key, None)
                else:
                    state[key] = ev.prev
            return state

    # ---- writes: the caller holds the lock --------------------------------
    def commit(self, res, etype, obj, prev):
        """Store obj (None when deleting) with a new resourceVersion; returns it."""
        self.rv += 1
        ns = obj["metadata"].get("namespace") if res.namespaced else None
        key = (ns, obj["metadata"]["name"])
        obj = normalize(with_rv(obj, self.rv))
        if etype == "DELETED":
            self.objects[res].pop(key, None)
        else:
            self.objects[res][key] = obj
        ev = Event(self.rv, res, ns, etype, obj, prev)
        self.history.append(ev)
        while len(self.history) > self.history_size:
            self.floor = self.history.popleft().rv
        for w in self.watchers:
            if w.res is res and (w.ns is None or w.ns == ns):
                w.queue.append(ev)
        self.cond.notify_all()
        if res is PODS or (res is QUOTAS and etype != "DELETED"):
            self.refresh_quotas(ns)
        return obj

    def refresh_quotas(self, ns):
        """The quota controller's part, at once: each ResourceQuota of ns whose status
        (hard, used over the pods that count) has changed is written with it (a MODIFIED
        event). The real controller does it a moment after the write; until it has, a new
        quota refuses every pod ("status unknown for quota") and a pod that finished still
        counts in status.used."""
        quotas = self.current(QUOTAS, ns)
        pods = [p for p in self.current(PODS, ns).values() if quota_counts(p)] if quotas else []
        for _, q in sorted(quotas.items()):
            st = quota_status(q, pods)
            st["used"] = {k: quantity_text(v) for k, v in st["used"].items()}
            if {k: q.get("status", {}).get(k) for k in st} != st:
                self.commit(QUOTAS, "MODIFIED", {**q, "status": st}, q)

    def drop_watches(self, mode):
        with self.cond:
            n = 0
            for w in self.watchers:
                if w.drop is None:
                    w.drop = mode
                    n += 1
            self.cond.notify_all()
            return n


# =============================================================================
# Control state: faults, down mode, request log, tokens
# =============================================================================

class Control:
    def __init__(self, tokens):
        self.lock = threading.Lock()
        self.tokens = list(tokens)
        self.faults = []
        self.down = False
        self.requests = []

    def reset(self):
        with self.lock:
            self.faults = []
            self.down = False
            GATES.clear()
            self.requests = []

    def add_fault(self, spec):
        if not isinstance(spec, dict):
            raise err_bad_request("fault: expected a JSON object")
        try:
            fault = {"method": str(spec.get("method", "*")).upper(),
                     "path": str(spec.get("path", ".*")),
                     "code": int(spec.get("code", 500)),
                     "count": int(spec.get("count", 1)),
                     "delay_ms": int(spec.get("delay_ms", 0))}
            fault["re"] = re.compile(fault["path"])
        except (TypeError, ValueError, re.error) as e:
            raise err_bad_request(f"fault: {e}")
        if fault["code"] and not 100 <= fault["code"] <= 599:
            raise err_bad_request("fault: code must be 0 or an HTTP status")
        with self.lock:
            self.faults.append(fault)

    def take_fault(self, method, path):
        with self.lock:
            for f in self.faults:
                if f["count"] == 0:
                    continue
                if f["method"] not in ("*", method) or not f["re"].search(path):
                    continue
                if f["count"] > 0:
                    f["count"] -= 1
                return dict(f)
            return None

    def list_faults(self):
        with self.lock:
            return [{k: v for k, v in f.items() if k != "re"} for f in self.faults]


# =============================================================================
# Tables (Accept: application/json;as=Table;v=v1;g=meta.k8s.io)
# =============================================================================

def table_version(accept):
    """The meta.k8s.io version of Table the client prefers, or None for plain JSON."""
    for part in (accept or "").split(","):
        fields = [f.strip() for f in part.split(";")]
        mtype = fields[0].lower()
        params = dict(f.split("=", 1) for f in fields[1:] if "=" in f)
        if mtype not in ("application/json", "application/*", "*/*"):
            continue
        if params.get("as") == "Table":
            if params.get("g") == "meta.k8s.io" and params.get("v") in ("v1", "v1beta1"):
                return params["v"]
            continue
        if "as" not in params:
            return None
    return None


def make_table(res, objs, version, include, metadata, headers=True):
    cols = res.columns or [NAME_COL, AGE_COL]
    t = {"kind": "Table", "apiVersion": f"meta.k8s.io/{version}", "metadata": metadata}
    t["columnDefinitions"] = [
        {"name": n, "type": typ, "format": "name" if n == "Name" else "",
         "description": COL_DESC.get(n, n), "priority": prio}
        for n, typ, prio, _ in cols] if headers else None
    rows = []
    for o in objs:
        cells = []
        for _, _, _, fn in cols:
            try:
                cells.append(fn(o))
            except Exception:  # a malformed object must not break printing
                cells.append(None)
        row = {"cells": cells}
        if include == "Object":
            row["object"] = o
        elif include != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": o.get("metadata", {})}
        rows.append(row)
    t["rows"] = rows
    return t


# =============================================================================
# Continue tokens: base64url({"v":"meta.k8s.io/v1","rv":N,"start":"key\u0000"})
# =============================================================================

def encode_continue(rv, last_key):
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": last_key + "\x00"},
                     separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_continue(token):
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        d = json.loads(raw)
        if d.get("v") != "meta.k8s.io/v1" or not isinstance(d.get("rv"), int) or \
                not isinstance(d.get("start"), str):
            raise ValueError("bad token")
        return d["rv"], d["start"]
    except (ValueError, TypeError, AttributeError, UnicodeDecodeError):
        raise err_bad_request("continue key is not valid: invalid continue token")


CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this response "
    "to retrieve the remainder of the results. Continuing with the provided token results in an "
    "inconsistent list - objects that were created, modified, or deleted between the time the "
    "first chunk was returned and now may show up in the list.")


# =============================================================================
# HTTP handler
# =============================================================================

def dumps(obj):
    return (json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


def truthy(v):
    return v in ("1", "true", "True", "t", "T", "TRUE")


GENERATE_CHARS = "bcdfghjklmnpqrstvwxz2456789"


class _EmptyReader:
    """rfile for a connection whose TLS handshake failed: handle() reads EOF and stops."""

    def readline(self, *_):
        return b""

    def read(self, *_):
        return b""

    def close(self):
        pass


# What a write to a client that has closed its end raises: over TLS the
# close shows as an SSL EOF (a watch client that hangs up mid-stream), not
# as a broken pipe.
CLIENT_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, ssl.SSLEOFError,
               ssl.SSLZeroReturnError)

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "egpu-test-apiserver"
    sys_version = ""
    # TCP_NODELAY, as kube-apiserver's Go net/http sets it: a reply goes out as
    # headers then body, and with Nagle the body waited for the client's
    # delayed ACK, 40 ms on every request (bench/controller).
    disable_nagle_algorithm = True

    # set by main()
    store = None
    control = None
    bookmark_interval = 1.0
    verbose = False

    def setup(self):
        super().setup()
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.settimeout(10)
            try:
                self.connection.do_handshake()
            except (OSError, ssl.SSLError):
                self.close_connection = True
                self.rfile = _EmptyReader()
            self.connection.settimeout(None)

    def log_message(self, fmt, *args):  # quiet unless --verbose
        if self.verbose:
            sys.stderr.write("apiserver: " + (fmt % args) + "\n")

    # ---- entry points ------------------------------------------------------
    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def do_HEAD(self):
        self.dispatch("HEAD")

    def do_OPTIONS(self):
        self.dispatch("OPTIONS")

    # ---- plumbing ----------------------------------------------------------
    def read_body(self):
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            chunks, total = [], 0
            while True:
                line = self.rfile.readline(65537)
                try:
                    size = int(line.split(b";")[0].strip(), 16)
                except ValueError:
                    raise err_bad_request("malformed chunked request body")
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                total += size
                if total > MAX_BODY:
                    self.close_connection = True
                    raise ApiError(413, "RequestEntityTooLarge", "the request is too large")
                chunks.append(self.rfile.read(size))
                self.rfile.readline(65537)
            return b"".join(chunks)
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            raise err_bad_request("invalid Content-Length")
        if n > MAX_BODY:
            self.close_connection = True
            raise ApiError(413, "RequestEntityTooLarge", "the request is too large")
        return self.rfile.read(n) if n > 0 else b""

    def send_response(self, code, message=None):
        entry = getattr(self, "log_entry", None)
        if entry is not None:  # the request log's entry of this API request: its answer
            entry["code"] = code
            self.log_entry = None
        super().send_response(code, message)

    def send_json(self, code, obj, headers=None):
        data = dumps(obj)
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_error_status(self, e):
        self.send_json(e.code, e.status(), e.headers)

    def dispatch(self, method):
        try:
            url = urllib.parse.urlsplit(self.path)
            self.url_path = url.path or "/"
            self.raw_query = url.query
            q = urllib.parse.parse_qs(url.query, keep_blank_values=True)
            self.q = {k: v[0] for k, v in q.items()}
            self.log_entry = None  # set by handle_api for an API request
            try:
                body = self.read_body()
            except ApiError as e:
                self.send_error_status(e)
                return
            if self.url_path.startswith("/_control/") or self.url_path == "/_control":
                self.handle_control(method, body)
                return
            self.handle_api(method, body)
        except CLIENT_GONE:
            self.close_connection = True
        except ApiError as e:
            self.send_error_status(e)
        except Exception as e:  # never crash: answer 500 and log
            traceback.print_exc(file=sys.stderr)
            try:
                self.send_json(500, status_body(
                    500, "InternalError", f"Internal error occurred: {type(e).__name__}: {e}"))
            except OSError:
                self.close_connection = True

    # ---- control API -------------------------------------------------------
    def handle_control(self, method, body):
        path = self.url_path.rstrip("/")
        store, control = self.store, self.control

        def arg():
            if not body.strip():
                return {}
            try:
                return json.loads(body)
            except ValueError as e:
                raise err_bad_request(f"control: request body is not valid JSON: {e}")

        if path == "/_control/reset" and method == "POST":
            control.reset()
            store.reset()
            self.send_json(200, {"ok": True, "resourceVersion": str(store.rv)})
        elif path == "/_control/fault" and method == "POST":
            spec = arg()
            for f in (spec if isinstance(spec, list) else [spec]):
                control.add_fault(f)
            self.send_json(200, {"ok": True, "faults": control.list_faults()})
        elif path == "/_control/fault" and method == "GET":
            self.send_json(200, control.list_faults())
        elif path == "/_control/fault" and method == "DELETE":
            with control.lock:
                control.faults = []
            self.send_json(200, {"ok": True})
        elif path == "/_control/drop-watches" and method == "POST":
            a = arg()
            graceful = isinstance(a, dict) and bool(a.get("graceful"))
            n = store.drop_watches("graceful" if graceful else "abrupt")
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:  # let the streams actually close
                with store.cond:
                    if not any(w.drop for w in store.watchers):
                        break
                time.sleep(0.01)
            self.send_json(200, {"ok": True, "dropped": n})
        elif path == "/_control/compact" and method == "POST":
            rv = store.compact()
            self.send_json(200, {"ok": True, "resourceVersion": str(rv)})
        elif path == "/_control/gates" and method == "POST":
            a = arg()
            if not isinstance(a, dict) or not all(isinstance(v, bool) for v in a.values()):
                raise err_bad_request('control: expected {"<Gate>": true|false, ...}')
            with control.lock:
                GATES.update(a)
            self.send_json(200, {"ok": True, "gates": dict(GATES)})
        elif path == "/_control/down" and method == "POST":
            a = arg()
            if not isinstance(a, dict) or not isinstance(a.get("down"), bool):
                raise err_bad_request('control: expected {"down": true|false}')
            with control.lock:
                control.down = a["down"]
            self.send_json(200, {"ok": True, "down": a["down"]})
        elif path == "/_control/requests" and method == "GET":
            with control.lock:
                self.send_json(200, list(control.requests))
        elif path == "/_control/requests" and method == "DELETE":
            with control.lock:
                control.requests = []
            self.send_json(200, {"ok": True})
        elif path == "/_control/watches" and method == "GET":
            with store.cond:
                n = len(store.watchers)
            self.send_json(200, n)
        elif path == "/_control/token" and method == "POST":
            a = arg()
            toks = a.get("tokens") if isinstance(a, dict) else None
            if not isinstance(toks, list) or not all(isinstance(t, str) for t in toks):
                raise err_bad_request('control: expected {"tokens": ["..."]}')
            with control.lock:
                control.tokens = toks
            self.send_json(200, {"ok": True})
        else:
            self.send_json(404, {"error": f"unknown control endpoint {method} {path}"})

    # ---- the API -----------------------------------------------------------
    def handle_api(self, method, body):
        control = self.control
        entry = {"method": method, "path": self.url_path, "query": self.raw_query,
                 "content_type": self.headers.get("Content-Type") or "",
                 "authorization": self.headers.get("Authorization") or "",
                 "user_agent": self.headers.get("User-Agent") or ""}
        self.log_entry = entry  # send_response adds the status code it answered
        with control.lock:
            control.requests.append(entry)
            down = control.down
            tokens = list(control.tokens)
        if down:
            raise err_for_code(503)
        fault = control.take_fault(method, self.url_path)
        if fault:
            if fault["delay_ms"] > 0:
                time.sleep(fault["delay_ms"] / 1000.0)
            if fault["code"]:
                raise err_for_code(fault["code"])
        if tokens:
            auth = self.headers.get("Authorization") or ""
            scheme, _, tok = auth.partition(" ")
            if scheme.lower() != "bearer" or tok.strip() not in tokens:
                raise ApiError(401, "Unauthorized", "Unauthorized")
        if method in ("HEAD", "OPTIONS"):
            raise ERR_METHOD
        self.route(method, body)

    def route(self, method, body):
        path = self.url_path
        parts = ([urllib.parse.unquote(p) for p in path.strip("/").split("/")]
                 if path.strip("/") else [])
        if method == "GET":
            if path == "/version":
                return self.send_json(200, SERVER_VERSION)
            if path in ("/healthz", "/readyz", "/livez"):
                return self.send_text(200, "ok")
            if path == "/api":
                host = self.headers.get("Host") or "127.0.0.1"
                return self.send_json(200, {
                    "kind": "APIVersions", "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                    "serverAddress": host}]})
            if path == "/apis":
                return self.send_json(200, {"kind": "APIGroupList", "apiVersion": "v1",
                                            "groups": [self.api_group(g) for g in GROUPS if g]})
            if len(parts) == 2 and parts[0] == "apis" and parts[1] in GROUPS and parts[1]:
                g = self.api_group(parts[1])
                g.update(kind="APIGroup", apiVersion="v1")
                return self.send_json(200, normalize_kind_first(g))
            if path == "/openapi/v3":
                return self.send_json(200, openapi_v3_root())
            if parts[:2] == ["openapi", "v3"]:
                rest = parts[2:]
                if rest == ["api", "v1"]:
                    return self.send_json(200, openapi_v3_gv("", "v1"))
                if len(rest) == 3 and rest[0] == "apis" and rest[2] in GROUPS.get(rest[1], []) \
                        and rest[1]:
                    return self.send_json(200, openapi_v3_gv(rest[1], rest[2]))
            gv = None
            if parts == ["api", "v1"]:
                gv = ("", "v1")
            elif len(parts) == 3 and parts[0] == "apis" and parts[2] in GROUPS.get(parts[1], []):
                gv = (parts[1], parts[2])
            if gv and gv[0] in GROUPS:
                return self.send_json(200, {
                    "kind": "APIResourceList", "apiVersion": "v1",
                    "groupVersion": f"{gv[0]}/{gv[1]}" if gv[0] else gv[1],
                    "resources": discovery_resources(*gv)})
        # resource paths
        if len(parts) >= 3 and parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 4 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ERR_NOT_FOUND_PATH
        force_watch = False
        if rest and rest[0] == "watch":
            force_watch, rest = True, rest[1:]
        ns = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            r = REGISTRY.get((group, version, rest[2]))
            if r is not None and r.namespaced:
                ns, rest = rest[1], rest[2:]
        if not rest:
            raise ERR_NOT_FOUND_PATH
        res = REGISTRY.get((group, version, rest[0]))
        if res is None or len(rest) > 3:
            raise ERR_NOT_FOUND_PATH
        if (not res.namespaced and ns is not None) or \
                (res.namespaced and ns is None and len(rest) > 1):
            raise ERR_NOT_FOUND_PATH
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and sub not in res.subresources:
            raise ERR_NOT_FOUND_PATH
        if force_watch:
            if method != "GET" or sub is not None:
                raise ERR_METHOD
            return self.watch(res, ns, name)
        self.resource(method, res, ns, name, sub, body)

    def send_text(self, code, text):
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    @staticmethod
    def api_group(g):
        vs = [{"groupVersion": f"{g}/{v}", "version": v} for v in GROUPS[g]]
        return {"name": g, "versions": vs, "preferredVersion": vs[0]}

    def resource(self, method, res, ns, name, sub, body):
        if res.plural == "bindings":
            if method == "POST" and name is None and ns is not None:
                return self.bind(ns, None, body)
            raise ERR_METHOD
        if name is None:
            if method == "GET":
                if truthy(self.q.get("watch", "")):
                    return self.watch(res, ns, None)
                return self.list(res, ns)
            if method == "POST":
                if res.namespaced and ns is None:
                    raise ERR_METHOD
                return self.create(res, ns, body)
            if method == "DELETE":
                return self.delete_collection(res, ns, body)
            raise ERR_METHOD
        if sub == "binding":
            if method == "POST":
                return self.bind(ns, name, body)
            raise ERR_METHOD
        if method == "GET":
            if truthy(self.q.get("watch", "")):
                return self.watch(res, ns, name)
            return self.get(res, ns, name)
        if method == "PUT":
            return self.update(res, ns, name, sub, body)
        if method == "PATCH":
            return self.patch(res, ns, name, sub, body)
        if method == "DELETE" and sub is None:
            return self.delete(res, ns, name, body)
        raise ERR_METHOD

    # ---- helpers -----------------------------------------------------------
    def parse_json(self, body, what="the request body"):
        ctype = self.headers.get("Content-Type") or "application/json"
        ctype = ctype.split(";")[0].strip().lower()
        if "protobuf" in ctype or "cbor" in ctype:
            raise ApiError(415, "UnsupportedMediaType",
                           "the body of the request was in an unknown format - accepted "
                           "media types include: application/json")
        if not body.strip():
            raise err_bad_request(f"{what} is empty")
        try:
            return json.loads(body)
        except UnicodeDecodeError as e:
            raise err_bad_request(f"{what} is not valid UTF-8: {e}")
        except ValueError as e:
            raise err_bad_request(f"couldn't get version/kind; json parse error: {e}")

    def parse_object(self, res, body):
        obj = self.parse_json(body)
        if not isinstance(obj, dict):
            raise err_bad_request(f"couldn't get version/kind; json parse error: expected a JSON "
                                  f"object, got {type(obj).__name__}")
        av, kind = obj.get("apiVersion"), obj.get("kind")
        if av not in (None, "") and av != res.api_version:
            raise err_bad_request(f"the API version in the data ({av}) does not match the expected "
                                  f"API version ({res.api_version})")
        if kind not in (None, "") and kind != res.kind:
            raise err_bad_request(f"the kind in the data ({kind}) does not match the expected "
                                  f"kind ({res.kind})")
        md = obj.get("metadata")
        if md is None:
            md = {}
        if not isinstance(md, dict):
            raise err_bad_request("metadata: expected a JSON object")
        for k in ("name", "namespace", "generateName", "resourceVersion", "uid"):
            if md.get(k) is not None and not isinstance(md[k], str):
                raise err_bad_request(f"json: cannot unmarshal {type(md[k]).__name__} into Go "
                                      f"struct field ObjectMeta.metadata.{k} of type string")
        for k in ("labels", "annotations"):
            v = md.get(k)
            if v is not None and (not isinstance(v, dict) or
                                  not all(isinstance(x, str) for x in v.values())):
                raise err_bad_request(f"json: cannot unmarshal into Go struct field "
                                      f"ObjectMeta.metadata.{k} of type map[string]string")
        fin = md.get("finalizers")
        if fin is not None and (not isinstance(fin, list) or
                                not all(isinstance(x, str) for x in fin)):
            raise err_bad_request("json: cannot unmarshal into Go struct field "
                                  "ObjectMeta.metadata.finalizers of type []string")
        obj = dict(obj)
        obj["kind"], obj["apiVersion"], obj["metadata"] = res.kind, res.api_version, dict(md)
        return obj

    def int_param(self, name, default=None):
        v = self.q.get(name)
        if v in (None, ""):
            return default
        try:
            n = int(v)
        except ValueError:
            raise err_bad_request(f'invalid value for {name}: "{v}": must be an integer')
        if n < 0:
            raise err_bad_request(f"{name}: must be greater than or equal to 0")
        return n

    def rv_param(self):
        v = self.q.get("resourceVersion", "")
        if v == "":
            return None
        try:
            n = int(v)
            if n < 0:
                raise ValueError
            return n
        except ValueError:
            raise err_bad_request(f'invalid resource version "{v}"')

    def dry_run(self):
        return "dryRun" in self.q

    def validate_name(self, res, name):
        if res.dns_label:
            rx, msg = DNS1123_LABEL, LABEL_MSG
        else:
            rx, msg = DNS1123_SUBDOMAIN, SUBDOMAIN_MSG
        limit = 63 if res.dns_label else 253
        if len(name) > limit:
            raise err_invalid(res, name, [("metadata.name", "FieldValueInvalid",
                                           f'Invalid value: "{name}": must be no more than '
                                           f'{limit} characters')])
        if not rx.match(name):
            raise err_invalid(res, name, [("metadata.name", "FieldValueInvalid",
                                           f'Invalid value: "{name}": {msg}')])

    def list_item(self, res, obj):
        if res.custom:
            return obj  # unstructured lists keep kind/apiVersion
        return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}

    def selectors(self, res, name=None):
        ls = LabelSelector(self.q.get("labelSelector", ""))
        fs = FieldSelector(self.q.get("fieldSelector", ""), res)
        if name is not None:
            fs.add("metadata.name", name)
        return ls, fs

    # ---- get / list --------------------------------------------------------
    def get(self, res, ns, name):
        obj = self.store.get(res, ns, name)
        if obj is None:
            raise err_not_found(res, name)
        tv = table_version(self.headers.get("Accept"))
        if tv:
            meta = {"resourceVersion": obj["metadata"]["resourceVersion"]}
            return self.send_json(200, make_table(res, [obj], tv, self.q.get("includeObject"),
                                                  meta))
        self.send_json(200, obj)

    def list(self, res, ns):
        ls, fs = self.selectors(res)
        limit = self.int_param("limit", 0)
        cont = self.q.get("continue", "")
        rv = self.rv_param()
        rvm = self.q.get("resourceVersionMatch", "")
        if cont and rv not in (None, 0):
            raise err_bad_request("specifying resource version is not allowed when using continue")
        if rvm:
            if rvm not in ("Exact", "NotOlderThan"):
                raise err_list_options("resourceVersionMatch", f'unsupported value "{rvm}"')
            if rv is None:
                raise err_list_options("resourceVersionMatch",
                                       "resourceVersionMatch is forbidden unless "
                                       "resourceVersion is provided")
            if cont:
                raise err_list_options("resourceVersionMatch",
                                       "resourceVersionMatch is forbidden when continue is "
                                       "provided")
            if rvm == "Exact" and rv == 0:
                raise err_list_options("resourceVersionMatch",
                                       'resourceVersionMatch "exact" is forbidden for '
                                       'resourceVersion "0"')
        store = self.store
        start = ""
        with store.cond:
            if cont:
                at, start = decode_continue(cont)
                if at < store.floor:
                    fresh = encode_continue(store.rv, start.rstrip("\x00"))
                    raise ApiError(410, "Expired", CONTINUE_EXPIRED, metadata={"continue": fresh})
                state = store.snapshot(res, ns, at)
            elif rvm == "Exact":
                if rv > store.rv:
                    raise err_too_large(rv, store.rv)
                at = rv
                state = store.snapshot(res, ns, rv)
            else:
                if rv is not None and rv > store.rv:
                    raise err_too_large(rv, store.rv)
                at = store.rv
                state = store.current(res, ns)
        items = sorted(((res.key(k[0], k[1]), o) for k, o in state.items()), key=lambda x: x[0])
        items = [(k, o) for k, o in items if k >= start and
                 ls.matches(o["metadata"].get("labels")) and fs.matches(o)]
        meta = {"resourceVersion": str(at)}
        page = items
        if limit and len(items) > limit:
            page = items[:limit]
            meta["continue"] = encode_continue(at, page[-1][0])
            if ls.empty() and fs.empty():
                meta["remainingItemCount"] = len(items) - limit
        objs = [o for _, o in page]
        tv = table_version(self.headers.get("Accept"))
        if tv:
            return self.send_json(200, make_table(res, objs, tv, self.q.get("includeObject"), meta))
        self.send_json(200, {"kind": res.list_kind, "apiVersion": res.api_version, "metadata": meta,
                             "items": [self.list_item(res, o) for o in objs]})

    # ---- create ------------------------------------------------------------
    def create(self, res, ns, body, obj=None, name_from_url=None):
        if obj is None:
            obj = self.parse_object(res, body)
        md = obj["metadata"]
        if res.namespaced:
            if md.get("namespace") and md["namespace"] != ns:
                raise err_bad_request("the namespace of the provided object does not match the "
                                      "namespace sent on the request")
            md["namespace"] = ns
        else:
            md.pop("namespace", None)
        if name_from_url is not None and not md.get("name"):
            md["name"] = name_from_url
        store = self.store
        with store.cond:
            if not md.get("name"):
                gen = md.get("generateName")
                if not gen:
                    raise err_invalid(res, "", [
                        ("metadata.name", "FieldValueRequired",
                         "Required value: name or generateName is required")])
                for _ in range(100):
                    cand = gen[:58] + "".join(random.choice(GENERATE_CHARS) for _ in range(5))
                    if store.get(res, ns, cand) is None:
                        break
                md["name"] = cand
            name = md["name"]
            self.validate_name(res, name)
            if store.get(res, ns, name) is not None:
                raise err_already_exists(res, name)
            res.prepare_create(obj)
            res.validate(obj)
            quotas = self.admit_quota(ns, obj) if res is PODS else []
            if res.namespaced and not self.dry_run():
                self.ensure_namespace(ns)
            for k in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds",
                      "selfLink"):
                md.pop(k, None)
            md["uid"] = str(uuid.uuid4())
            md["creationTimestamp"] = now_rfc3339()
            if res.custom:
                md["generation"] = 1
            else:
                md.pop("generation", None)
            if self.dry_run():
                return self.send_json(201, normalize(obj))
            del quotas  # status.used follows in Store.refresh_quotas
            stored = store.commit(res, "ADDED", obj, None)
        self.send_json(201, stored)

    def admit_quota(self, ns, pod):
        """ResourceQuota admission of a new pod (the caller holds the lock):
        [(quota, used after it)] to record, or ApiError 403 with the
        plugin's message for the first quota it would exceed."""
        want = pod_requests(pod)
        live = [p for p in self.store.current(PODS, ns).values() if quota_counts(p)]
        out = []
        for (_, qname), q in sorted(self.store.current(QUOTAS, ns).items()):
            used = quota_status(q, live)["used"]
            hard = {k: quantity(q["spec"]["hard"][k]) for k in used}
            over = sorted(k for k in hard if k in want and used[k] + want[k] > hard[k])
            if over:
                def show(d):
                    return ",".join(f"{k}={quantity_text(d[k])}" for k in over)
                name = pod["metadata"]["name"]
                raise ApiError(403, "Forbidden",
                               f'pods "{name}" is forbidden: exceeded quota: {qname}, requested: '
                               f"{show(want)}, used: {show(used)}, limited: {show(hard)}",
                               {"name": name, "kind": "pods"})
            out.append((q, {k: used[k] + want.get(k, 0) for k in hard}))
        return out

    def ensure_namespace(self, ns):
        """Simplification: the namespace of a new object is created when missing (a real
        server answers 404 namespaces "ns" not found). The caller holds the lock."""
        if self.store.get(NAMESPACES, None, ns) is not None:
            return
        if not DNS1123_LABEL.match(ns) or len(ns) > 63:
            raise err_not_found(NAMESPACES, ns)
        obj = {"kind": "Namespace", "apiVersion": "v1",
               "metadata": {"name": ns, "uid": str(uuid.uuid4()),
                            "creationTimestamp": now_rfc3339(),
                            "labels": {"kubernetes.io/metadata.name": ns}}}
        NAMESPACES.prepare_create(obj)
        self.store.commit(NAMESPACES, "ADDED", obj, None)

    # ---- update (PUT) ------------------------------------------------------
    def update(self, res, ns, name, sub, body):
        new = self.parse_object(res, body)
        self.check_identity(res, ns, name, new)
        with self.store.cond:
            old = self.store.get(res, ns, name)
            if old is None:
                if res.create_on_update and sub is None:
                    if new["metadata"].get("resourceVersion"):
                        raise err_not_found(res, name)
                    return self.create(res, ns, None, obj=new)
                raise err_not_found(res, name)
            if not res.unconditional_update and not new["metadata"].get("resourceVersion"):
                raise err_invalid(res, name, [("metadata.resourceVersion", "FieldValueInvalid",
                                               "Invalid value: 0x0: must be specified for an "
                                               "update")])
            code, out = self.apply_update(res, ns, name, sub, old, new)
        self.send_json(code, out)

    def check_identity(self, res, ns, name, new):
        md = new["metadata"]
        if md.get("name") and md["name"] != name:
            raise err_bad_request(f"the name of the object ({md['name']}) does not match the name "
                                  f"on the URL ({name})")
        md["name"] = name
        if res.namespaced:
            if md.get("namespace") and md["namespace"] != ns:
                raise err_bad_request("the namespace of the provided object does not match the "
                                      "namespace sent on the request")
            md["namespace"] = ns
        else:
            md.pop("namespace", None)

    def apply_update(self, res, ns, name, sub, old, new):
        """Store new over old (the caller holds the lock). Returns (code, object)."""
        md = new["metadata"]
        want_rv = md.get("resourceVersion")
        if want_rv and want_rv != old["metadata"]["resourceVersion"]:
            raise err_conflict(res, name, STALE_RV)
        if sub == "status":
            merged = copy.deepcopy(old)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
        else:
            merged = new
            if res.has_status:
                if "status" in old:
                    merged["status"] = copy.deepcopy(old["status"])
                else:
                    merged.pop("status", None)
            mmd = merged["metadata"]
            omd = old["metadata"]
            for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                      "generation"):
                if k in omd:
                    mmd[k] = omd[k]
                else:
                    mmd.pop(k, None)
            mmd.pop("selfLink", None)
            if omd.get("deletionTimestamp"):
                added = sorted(set(mmd.get("finalizers") or []) - set(omd.get("finalizers") or []))
                if added:
                    raise err_invalid(res, name, [("metadata.finalizers", "FieldValueForbidden",
                                                   f"Forbidden: {NO_NEW_FINALIZERS} "
                                                   f"{go_string_slice(added)}")])
            res.validate(merged, old)
            if res.custom and _spec_part(old) != _spec_part(merged):
                mmd["generation"] = int(omd.get("generation") or 1) + 1
        merged["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if self.deletes_on_update(old, merged):
            # the registry's Update deletes instead of writing: the DELETED event carries the
            # object as last stored (finalizers and all), the reply the updated object
            if not self.dry_run():
                self.store.commit(res, "DELETED", old, old)
            return 200, normalize(merged)
        if json_equal(normalize(merged), old):
            return 200, old  # a no-op update writes nothing
        if self.dry_run():
            return 200, normalize(merged)
        return 200, self.store.commit(res, "MODIFIED", merged, old)

    @staticmethod
    def deletes_on_update(old, new):
        """The registry's ShouldDeleteDuringUpdate: the update leaves no finalizers on an
        object whose deletion was requested with no grace period (nil or 0) left."""
        omd = old["metadata"]
        if new["metadata"].get("finalizers") or not omd.get("deletionTimestamp"):
            return False
        return omd.get("deletionGracePeriodSeconds") in (None, 0)

    # ---- patch -------------------------------------------------------------
    def patch(self, res, ns, name, sub, body):
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        kinds = ["application/json-patch+json", "application/merge-patch+json",
                 "application/apply-patch+yaml"]
        if not res.custom:
            kinds.append("application/strategic-merge-patch+json")
        if ctype not in kinds:
            raise ApiError(415, "UnsupportedMediaType",
                           "the body of the request was in an unknown format - accepted "
                           "media types include: " + ", ".join(kinds))
        try:
            patch = json.loads(body) if body.strip() else None
        except (ValueError, UnicodeDecodeError) as e:
            if ctype == "application/apply-patch+yaml":
                raise err_bad_request(f"error decoding YAML: this test server accepts apply "
                                      f"patches in JSON form only: {e}")
            raise err_bad_request(f"error decoding patch: {e}")
        store = self.store
        with store.cond:
            old = store.get(res, ns, name)
            if ctype == "application/apply-patch+yaml":
                if not self.q.get("fieldManager"):
                    raise err_bad_request("PATCH requests with apply require fieldManager")
                if not isinstance(patch, dict):
                    raise err_bad_request("error decoding YAML: apply patch must be an object")
                if old is None:
                    if sub is not None:
                        raise err_not_found(res, name)
                    obj = self.parse_object(res, json.dumps(patch).encode())
                    self.check_identity(res, ns, name, obj)
                    return self.create(res, ns, None, obj=obj)
            if old is None:
                raise err_not_found(res, name)
            try:
                if ctype == "application/json-patch+json":
                    if not isinstance(patch, list):
                        raise err_bad_request("json: cannot unmarshal object into Go value of type "
                                              "jsonpatch.Patch")
                    new = json_patch(old, patch)
                elif ctype == "application/strategic-merge-patch+json":
                    if not isinstance(patch, dict):
                        raise err_bad_request("strategic merge patch: the patch is not a JSON "
                                              "object")
                    new = strategic_merge(old, patch)
                    if new is _DELETE:
                        raise PatchError("$patch: delete on the whole object")
                else:
                    if not isinstance(patch, dict):
                        raise err_bad_request("merge patch: the patch is not a JSON object")
                    new = merge_patch(old, patch)
            except PatchError as e:
                sys.stderr.write(f"apiserver: patch failed: {e}\n")
                raise ApiError(422, "Invalid",
                               "the server rejected our request due to an error in our request")
            if not isinstance(new, dict):
                raise err_bad_request("the patched object is not a JSON object")
            new = self.parse_object(res, json.dumps(new).encode())
            md = new["metadata"]
            if md.get("name") != name:
                raise err_bad_request(f"the name of the object ({md.get('name')}) does not match "
                                      f"the name on the URL ({name})")
            if res.namespaced and md.get("namespace") != ns:
                raise err_bad_request("the namespace of the provided object does not match the "
                                      "namespace sent on the request")
            if md.get("uid") and md["uid"] != old["metadata"]["uid"]:
                raise err_conflict(res, name, f"Precondition failed: UID in precondition: "
                                              f"{md['uid']}, UID in object meta: "
                                              f"{old['metadata']['uid']}")
            code, out = self.apply_update(res, ns, name, sub, old, new)
        self.send_json(code, out)

    # ---- delete ------------------------------------------------------------
    def delete_options(self, body):
        """DeleteOptions from the body or, when there is none, from the query (as the real
        handler decodes them); only preconditions and orphanDependents change anything here."""
        if not body.strip():
            v = self.q.get("orphanDependents")
            return {} if v in (None, "") else {"orphanDependents": truthy(v)}
        try:
            opts = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise err_bad_request(f"couldn't get version/kind; json parse error: {e}")
        if not isinstance(opts, dict):
            raise err_bad_request("DeleteOptions: expected a JSON object")
        return opts

    def delete(self, res, ns, name, body):
        opts = self.delete_options(body)
        store = self.store
        with store.cond:
            old = store.get(res, ns, name)
            if old is None:
                raise err_not_found(res, name)
            self.check_delete_preconditions(res, old, opts)
            code, out, deleted = self.delete_one(res, old, opts)
        if deleted and not res.return_deleted:
            details = _details(res, name)
            details["uid"] = old["metadata"]["uid"]
            out = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                   "details": details}
        self.send_json(code, out)

    @staticmethod
    def check_delete_preconditions(res, old, opts):
        """rest.BeforeDelete's early check of DeleteOptions.preconditions: 409 Conflict naming
        the kind (not the resource), as the real server answers."""
        pre = opts.get("preconditions")
        if not isinstance(pre, dict):
            return
        md = old["metadata"]
        name = md["name"]
        gk = f"{res.kind}.{res.group}" if res.group else res.kind
        details = {"name": name}
        if res.group:
            details["group"] = res.group
        details["kind"] = res.kind
        if pre.get("uid") is not None and pre["uid"] != md["uid"]:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {gk} "{name}": the '
                           f'UID in the precondition ({pre["uid"]}) does not match the UID in '
                           f'record ({md["uid"]}). The object might have been deleted and then '
                           f'recreated', details)
        if pre.get("resourceVersion") is not None and \
                pre["resourceVersion"] != md["resourceVersion"]:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {gk} "{name}": the '
                           f'ResourceVersion in the precondition ({pre["resourceVersion"]}) does '
                           f'not match the ResourceVersion in record ({md["resourceVersion"]}). '
                           f'The object might have been modified', details)

    def delete_one(self, res, old, opts):
        """Delete old as the generic registry does (the caller holds the lock); returns
        (HTTP code, object, deleted). An object with finalizers is only marked: it gets
        deletionTimestamp (now, unless already set), deletionGracePeriodSeconds 0 and, the
        first time, generation + 1 when it has one; a repeated DELETE writes nothing. The
        reply is then 200 with the object (202 only for the deprecated orphanDependents:
        false), whatever the resource returns for a real deletion. Namespaces are removed at
        once, with their objects (no namespace lifecycle)."""
        store = self.store
        if res is PODS:
            return self.delete_pod(old, opts)
        if res is not NAMESPACES and old["metadata"].get("finalizers"):
            new = copy.deepcopy(old)
            mark_as_deleting(new["metadata"])
            if json_equal(normalize(new), old):
                out = old
            elif self.dry_run():
                out = normalize(new)
            else:
                out = store.commit(res, "MODIFIED", new, old)
            return (202 if opts.get("orphanDependents") is False else 200), out, False
        if self.dry_run():
            return 200, old, True
        return 200, self.remove(res, old), True

    def delete_pod(self, old, opts):
        """Delete pod old as the pod registry does (the caller holds the lock): rest.BeforeDelete
        with podStrategy.CheckGracefulDelete, then the Store's
        updateForGracefulDeletionAndFinalizers. The grace period is the DeleteOptions'
        gracePeriodSeconds, else spec.terminationGracePeriodSeconds; 0 when the pod is not
        bound (no spec.nodeName) or has finished (Succeeded/Failed); a negative one is 1.
        A pod not yet being deleted gets deletionTimestamp now + grace and
        deletionGracePeriodSeconds grace (generation + 1 when it has one), written as a
        MODIFIED event; with grace 0 and no finalizers it is then removed (DELETED, carrying
        that deletionTimestamp). A pod already being deleted with a grace period left: a
        shorter gracePeriodSeconds moves deletionTimestamp earlier by the difference (0
        removes it unless it has finalizers), a longer, equal or missing one changes nothing.
        One whose grace period is 0 (or unset) is removed, or, with finalizers, marked as
        markAsDeleting does. Replies 200 with the pod (202 only with orphanDependents
        false while it stays)."""
        store = self.store
        md = old["metadata"]
        grace = opts.get("gracePeriodSeconds")
        if grace is not None:
            try:
                grace = int(grace)
            except (TypeError, ValueError):
                raise err_bad_request("DeleteOptions.gracePeriodSeconds: expected an integer")
            if grace < 0:
                grace = 1
        kept = 202 if opts.get("orphanDependents") is False else 200
        new = copy.deepcopy(old)
        nmd = new["metadata"]
        current = parse_rfc3339(md.get("deletionTimestamp"))
        dgps = md.get("deletionGracePeriodSeconds")
        if dgps is not None and int(dgps) < 0:
            nmd["deletionGracePeriodSeconds"] = dgps = 1
        if current is not None and dgps not in (None, 0):
            if grace is None or grace >= int(dgps):
                return kept, old, False  # graceful deletion pending: nothing changes
            start = current - datetime.timedelta(seconds=int(dgps))
            nmd["deletionTimestamp"] = (start + datetime.timedelta(seconds=grace)).strftime(
                "%Y-%m-%dT%H:%M:%SZ")
            nmd["deletionGracePeriodSeconds"] = grace
            period = grace
        elif current is not None:
            # grace period already 0 (or unset): delete now, or mark when finalizers wait
            if md.get("finalizers"):
                mark_as_deleting(nmd)
                if json_equal(normalize(new), old):
                    return kept, old, False
                if self.dry_run():
                    return kept, normalize(new), False
                return kept, store.commit(PODS, "MODIFIED", new, old), False
            if self.dry_run():
                return 200, old, True
            return 200, self.remove(PODS, old), True
        else:
            spec = old.get("spec") or {}
            period = grace if grace is not None else int(spec.get("terminationGracePeriodSeconds")
                                                          or 0)
            if not spec.get("nodeName"):
                period = 0
            if (old.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                period = 0
            if period < 0:
                period = 1
            now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
            nmd["deletionTimestamp"] = (now + datetime.timedelta(seconds=period)).strftime(
                "%Y-%m-%dT%H:%M:%SZ")
            nmd["deletionGracePeriodSeconds"] = period
            if int(md.get("generation") or 0) > 0:
                nmd["generation"] = int(md["generation"]) + 1
        if self.dry_run():
            out = normalize(new)
            return (kept, out, False) if period > 0 or md.get("finalizers") else (200, out, True)
        out = store.commit(PODS, "MODIFIED", new, old)
        if period > 0 or md.get("finalizers"):
            return kept, out, False
        return 200, self.remove(PODS, out), True

    def remove(self, res, old):
        """Delete old (the caller holds the lock); a namespace takes its objects with it,
        finalizers or not."""
        if res is NAMESPACES:
            ns = old["metadata"]["name"]
            for r in RESOURCES:
                if r.namespaced:
                    for o in list(self.store.current(r, ns).values()):
                        self.store.commit(r, "DELETED", o, o)
        return self.store.commit(res, "DELETED", old, old)

    def delete_collection(self, res, ns, body):
        """Each matching object is deleted as by DELETE (objects with finalizers are only
        marked); the reply lists them as they were before, as the real DeleteCollection does."""
        opts = self.delete_options(body)
        ls, fs = self.selectors(res)
        out = []
        with self.store.cond:
            rv = self.store.rv
            for _, o in sorted(self.store.current(res, ns).items(), key=_store_order):
                if ls.matches(o["metadata"].get("labels")) and fs.matches(o):
                    out.append(o)
            for o in out:
                self.delete_one(res, o, opts)
        self.send_json(200, {"kind": res.list_kind, "apiVersion": res.api_version,
                             "metadata": {"resourceVersion": str(rv)},
                             "items": [self.list_item(res, o) for o in out]})

    # ---- pods/binding ------------------------------------------------------
    def bind(self, ns, name, body):
        b = self.parse_json(body)
        if not isinstance(b, dict):
            raise err_bad_request(f"not a Binding object: {json.dumps(b)[:200]}")
        if b.get("kind") not in (None, "", "Binding") or \
                b.get("apiVersion") not in (None, "", "v1"):
            raise err_bad_request(f"not a Binding object: kind {b.get('kind')!r}, apiVersion "
                                  f"{b.get('apiVersion')!r}")
        md = b.get("metadata") or {}
        if not isinstance(md, dict):
            raise err_bad_request("metadata: expected a JSON object")
        if md.get("namespace") and md["namespace"] != ns:
            raise err_bad_request("the namespace of the provided object does not match the "
                                  "namespace sent on the request")
        bname = md.get("name") or ""
        if name is None:  # POST .../bindings
            name = bname
        if bname != name:
            raise err_bad_request("name in URL does not match name in Binding object")
        target = b.get("target")
        if not isinstance(target, dict):
            target = {}
        errs = []
        if target.get("kind") not in (None, "", "Node"):
            errs.append(f'target.kind: Unsupported value: "{target.get("kind")}": supported '
                        f'values: "Node", ""')
        if not target.get("name") or not isinstance(target.get("name"), str):
            errs.append("target.name: Required value")
        if errs:  # BindingREST returns the bare field.ErrorList: a 500 with no reason
            raise ApiError(500, "", errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]")
        annotations = md.get("annotations") or {}
        if not isinstance(annotations, dict) or \
                not all(isinstance(v, str) for v in annotations.values()):
            raise err_bad_request("metadata.annotations: expected a map of strings")
        node = target["name"]
        store = self.store
        with store.cond:
            pod = store.get(PODS, ns, name)
            if pod is None:
                raise err_not_found(PODS, name)
            pmd = pod["metadata"]
            if md.get("uid") and md["uid"] != pmd["uid"]:
                raise err_conflict(PODS, name, f"Precondition failed: UID in precondition: "
                                               f"{md['uid']}, UID in object meta: {pmd['uid']}")
            if md.get("resourceVersion") and md["resourceVersion"] != pmd["resourceVersion"]:
                raise err_conflict(PODS, name, f"Precondition failed: ResourceVersion in "
                                               f"precondition: {md['resourceVersion']}, "
                                               f"ResourceVersion in object meta: "
                                               f"{pmd['resourceVersion']}")
            spec = pod.get("spec") or {}
            if pmd.get("deletionTimestamp"):
                raise err_conflict(PODS, name, f"pod {name} is being deleted, cannot be assigned "
                                               f"to a host", qualified="pods/binding")
            if spec.get("nodeName"):
                raise err_conflict(PODS, name, f'pod {name} is already assigned to node '
                                               f'"{spec["nodeName"]}"', qualified="pods/binding")
            if spec.get("schedulingGates"):
                raise err_conflict(PODS, name, f"pod {name} has non-empty .spec.schedulingGates",
                                   qualified="pods/binding")
            new = copy.deepcopy(pod)
            new["spec"]["nodeName"] = node
            if annotations:
                new["metadata"].setdefault("annotations", {}).update(annotations)
            status = new.setdefault("status", {})
            conds = status.setdefault("conditions", [])
            cond = next((c for c in conds if c.get("type") == "PodScheduled"), None)
            if cond is None:
                conds.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                              "lastTransitionTime": now_rfc3339()})
            elif cond.get("status") != "True":
                cond.update(status="True", lastTransitionTime=now_rfc3339())
                cond.pop("reason", None)
                cond.pop("message", None)
            if not self.dry_run():
                store.commit(PODS, "MODIFIED", new, pod)
        self.send_json(201, success_status(201))

    # ---- watch -------------------------------------------------------------
    def watch(self, res, ns, name):
        ls, fs = self.selectors(res, name)
        rv = self.rv_param()
        allow_bm = truthy(self.q.get("allowWatchBookmarks", ""))
        sie = self.q.get("sendInitialEvents", "")
        rvm = self.q.get("resourceVersionMatch", "")
        timeout = self.int_param("timeoutSeconds", None)
        if timeout is None or timeout == 0:
            timeout = DEFAULT_WATCH_TIMEOUT
        if sie not in ("", "true", "false"):
            raise err_bad_request(f'invalid value for sendInitialEvents: "{sie}"')
        if sie:
            if rvm != "NotOlderThan":
                raise err_list_options("resourceVersionMatch", "sendInitialEvents requires setting "
                                       "resourceVersionMatch to NotOlderThan")
            if sie == "true" and not allow_bm:
                raise err_list_options("allowWatchBookmarks", "sendInitialEvents requires setting "
                                       "allowWatchBookmarks to true")
        elif rvm:
            raise err_list_options("resourceVersionMatch", "resourceVersionMatch is forbidden for "
                                   "watch unless sendInitialEvents is provided")
        table = table_version(self.headers.get("Accept"))
        include = self.q.get("includeObject")
        store = self.store
        w = Watcher(res, ns)
        initial, expired = [], None
        with store.cond:
            if rv is not None and rv > store.rv:  # the watch cache waits up to 3 s for it
                store.cond.wait_for(lambda: store.rv >= rv, timeout=3)
                if rv > store.rv:
                    raise err_too_large(rv, store.rv)
            if sie == "true" or (sie == "" and not rv):
                initial = [o for _, o in sorted(store.current(res, ns).items(), key=_store_order)]
                start_rv = store.rv
            elif sie == "false" and not rv:
                start_rv = store.rv
            elif rv < store.floor:
                expired = err_too_old(rv, store.floor + 1)
            else:
                start_rv = rv
                for ev in store.history:
                    if ev.rv > rv and ev.res is res and (ns is None or ev.ns == ns):
                        w.queue.append(ev)
            if not expired:
                store.watchers.add(w)
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Cache-Control", "no-cache, private")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if expired:
                self.write_chunk(dumps({"type": "ERROR", "object": expired.status()}))
                self.end_chunks()
                return
            self.stream(res, w, ls, fs, initial, start_rv, sie == "true", allow_bm, timeout,
                        table, include)
        except CLIENT_GONE + (socket.timeout,):
            self.close_connection = True
        finally:
            with store.cond:
                store.watchers.discard(w)

    def write_chunk(self, data):
        self.wfile.write(b"%X\r\n%s\r\n" % (len(data), data))

    def end_chunks(self):
        self.wfile.write(b"0\r\n\r\n")

    def client_gone(self):
        """True when the watch client has closed its end (it sends nothing during a watch)."""
        conn = self.connection
        try:
            if isinstance(conn, ssl.SSLSocket):
                if conn.pending():
                    return False
                r, _, _ = select.select([conn], [], [], 0)
                return bool(r)  # a close_notify alert or EOF
            r, _, _ = select.select([conn], [], [], 0)
            if r:
                return conn.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True
        return False

    def emit(self, res, etype, obj, table, include):
        if table:
            obj = make_table(res, [obj], table, include,
                             {"resourceVersion": obj["metadata"].get("resourceVersion", "")})
        self.write_chunk(dumps({"type": etype, "object": obj}))

    def stream(self, res, w, ls, fs, initial, start_rv, initial_end, allow_bm, timeout, table,
               include):
        def match(o):
            return o is not None and ls.matches(o["metadata"].get("labels")) and fs.matches(o)

        for o in initial:
            if match(o):
                self.emit(res, "ADDED", o, table, include)
        if initial_end:
            self.write_chunk(dumps({"type": "BOOKMARK", "object": res.bookmark(start_rv, True)}))
        store = self.store
        deadline = time.monotonic() + timeout
        interval = self.bookmark_interval if allow_bm and self.bookmark_interval > 0 else None
        next_bm = time.monotonic() + interval if interval else None
        while True:
            bookmark_rv = None
            with store.cond:
                while True:
                    now = time.monotonic()
                    if w.queue or w.drop or now >= deadline or (next_bm and now >= next_bm):
                        break
                    wake = min(deadline, next_bm or deadline, now + 0.25) - now
                    store.cond.wait(max(wake, 0.001))
                    if not w.queue and not w.drop and self.client_gone():
                        raise BrokenPipeError("watch client went away")
                events = list(w.queue)
                w.queue.clear()
                drop = w.drop
                if not events and next_bm and time.monotonic() >= next_bm:
                    bookmark_rv = store.rv
            if drop == "abrupt":
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return
            if drop == "graceful":
                self.end_chunks()
                return
            for ev in events:
                old_ok = match(ev.prev) if ev.type == "MODIFIED" else False
                new_ok = match(ev.obj)
                if ev.type == "ADDED" and new_ok:
                    self.emit(res, "ADDED", ev.obj, table, include)
                elif ev.type == "DELETED" and new_ok:
                    self.emit(res, "DELETED", ev.obj, table, include)
                elif ev.type == "MODIFIED":
                    if old_ok and new_ok:
                        self.emit(res, "MODIFIED", ev.obj, table, include)
                    elif new_ok:
                        self.emit(res, "ADDED", ev.obj, table, include)
                    elif old_ok:  # stopped matching: DELETED with the old state, the new RV
                        self.emit(res, "DELETED", with_rv(ev.prev, ev.rv), table, include)
            if bookmark_rv is not None:
                self.write_chunk(dumps({"type": "BOOKMARK", "object": res.bookmark(bookmark_rv)}))
            if next_bm and time.monotonic() >= next_bm:
                next_bm = time.monotonic() + interval
            if time.monotonic() >= deadline:
                self.end_chunks()
                return


def normalize_kind_first(d):
    out = {"kind": d.get("kind"), "apiVersion": d.get("apiVersion")}
    out.update({k: v for k, v in d.items() if k not in out})
    return out


def _store_order(item):
    """Sort key for Store entries ((namespace, name), obj): etcd key order."""
    return (item[0][0] or "", item[0][1])


def _spec_part(obj):
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}


# =============================================================================
# main
# =============================================================================

class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False
    request_queue_size = 128

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError, ssl.SSLError)):
            return  # a client went away: not worth a traceback
        super().handle_error(request, client_address)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Kubernetes API server for Elastic GPU's tests")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--token", action="append", default=[],
                    help="bearer token every API request must carry (repeatable)")
    ap.add_argument("--bookmark-interval", type=float, default=1.0,
                    help="seconds between BOOKMARK events on watches that allow them (0: none)")
    ap.add_argument("--history", type=int, default=1000,
                    help="events kept for watches and continue tokens (older ones get 410)")
    ap.add_argument("--initial-rv", type=int, default=1, help="the first resourceVersion")
    ap.add_argument("--tls-cert", help="serve HTTPS with this PEM certificate (chain)")
    ap.add_argument("--tls-key", help="the PEM private key of --tls-cert")
    ap.add_argument("--verbose", action="store_true", help="log every request on stderr")
    args = ap.parse_args(argv)

    Handler.store = Store(args.history, args.initial_rv)
    Handler.control = Control(args.token)
    Handler.bookmark_interval = args.bookmark_interval
    Handler.verbose = args.verbose
    try:
        httpd = Server((args.host, args.port), Handler)
    except OSError as e:
        sys.stderr.write(f"apiserver: cannot listen on {args.host}:{args.port}: {e}\n")
        return 1
    scheme = "http"
    if args.tls_cert:
        try:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(args.tls_cert, args.tls_key)
        except (OSError, ssl.SSLError) as e:
            sys.stderr.write(f"apiserver: cannot load --tls-cert/--tls-key: {e}\n")
            return 1
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True,
                                       do_handshake_on_connect=False)
        scheme = "https"
    host = args.host if ":" not in args.host else f"[{args.host}]"
    sys.stdout.write(f"listening on {scheme}://{host}:{httpd.server_address[1]}\n")
    sys.stdout.flush()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    try:
        httpd.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
