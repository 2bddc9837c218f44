"""The claim model's CRDs and GPUBudget's (deploy/crds: ElasticGPUClaim,
ElasticGPUClass, ElasticGPU, GPUBudget) held against src/api's decoders
(claim.c, class.c, elasticgpu.c, budget.c), which the controller reads them
with.

No kube-apiserver runs here, so the API server's side is played by a
structural-schema validator (below: types, enums, limits, required, list
types, date-time, defaults) and the CRDs' CEL rules evaluated by
tests/cel/crd_eval.mjs (@bufbuild/cel, with the API server's typing and
property-name escaping). The decoders' side is <build>/tests/tools/egpu-api-objects.

What it shows: every field the decoder reads or writes is in the schema and
every schema field is read (status of a class aside); the enums are the
decoder's names; each object the API server would accept the decoder
accepts and the other way round (a few decoder-only rules listed in
DECODER_ONLY, with why), GPU objects too (src/api/gpu.c, decoded for
kubectl-egpu; no encoder, so not in the MAX tests); every object the encoder writes is one the API
server accepts; the CEL transition rules make a claim's elasticGPUName and a
class's provisioner, parameters, reclaimPolicy and bindingMode immutable;
kubectl renders the CRDs. kubectl and node are needed: a missing one skips,
or fails under CI=true.
"""
import copy
import json
import os
import re
import subprocess

import pytest

from conftest import ROOT, tool

CORE, MEM, TFLOPS = "elasticgpu.io/gpu-core", "elasticgpu.io/gpu-memory", "elasticgpu.io/gpu-tflops"
API = "elasticgpu.io/v1alpha1"
TIME = "2026-07-24T09:31:03Z"




@pytest.fixture(scope="module")
def schemas():
    """kind -> storage version's openAPIV3Schema, as kubectl renders deploy/crds."""
    import yaml
    r = subprocess.run([tool("kubectl"), "kustomize", str(ROOT / "deploy/crds")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = {}
    for d in yaml.safe_load_all(r.stdout):
        if d and d["kind"] == "CustomResourceDefinition":
            v = [v for v in d["spec"]["versions"] if v.get("storage")][0]
            out[d["spec"]["names"]["kind"]] = v["schema"]["openAPIV3Schema"]
            out[d["spec"]["names"]["kind"] + "/crd"] = d
    return out


@pytest.fixture(scope="module")
def objects_tool():
    d = os.environ.get("EGPU_BUILD", str(ROOT / "build"))
    path = os.path.join(d, "tests", "tools", "egpu-api-objects")
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} not built: run `make build` first")
    return path


def decode(objects_tool, kind, objects):
    r = subprocess.run([objects_tool], input=json.dumps({"kind": kind, "objects": objects}),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def cel(schema, cases):
    """[(name, object, oldObject or None)] -> {name: [errors]}."""
    node = tool("node")
    assert (ROOT / "tests/cel/node_modules/@bufbuild/cel").is_dir(), \
        "tests/cel/node_modules is missing: run `make deps`"
    payload = {"schema": schema, "cases": [
        {"name": n, "object": o, **({"oldObject": old} if old is not None else {})}
        for n, o, old in cases]}
    r = subprocess.run([node, str(ROOT / "tests/cel/crd_eval.mjs")], input=json.dumps(payload),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return {c["name"]: c["errors"] for c in json.loads(r.stdout)}


# --- the API server's structural validation, for the keywords these CRDs use ---------

DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def apply_defaults(schema, v):
    if isinstance(v, dict):
        for k, sub in (schema.get("properties") or {}).items():
            if k not in v and "default" in sub:
                v[k] = copy.deepcopy(sub["default"])
            if k in v:
                apply_defaults(sub, v[k])
    return v


def validate(schema, v, path, errors):
    t = schema.get("type")
    ok = {"object": isinstance(v, dict), "array": isinstance(v, list), "string": isinstance(v, str),
          "boolean": isinstance(v, bool),
          "integer": isinstance(v, int) and not isinstance(v, bool),
          "number": isinstance(v, (int, float)) and not isinstance(v, bool)}.get(t, True)
    if not ok:
        errors.append(f"{path}: not {t}")
        return
    if "enum" in schema and v not in schema["enum"]:
        errors.append(f"{path}: not in enum")
    if t in ("integer", "number"):
        if "minimum" in schema and (v < schema["minimum"] or
                                    (schema.get("exclusiveMinimum") and v == schema["minimum"])):
            errors.append(f"{path}: below minimum")
        if "maximum" in schema and v > schema["maximum"]:
            errors.append(f"{path}: above maximum")
    if t == "string":
        if len(v) < schema.get("minLength", 0) or len(v) > schema.get("maxLength", 1 << 30):
            errors.append(f"{path}: length")
        if schema.get("format") == "date-time" and not DATE_TIME.match(v):
            errors.append(f"{path}: not a date-time")
        # ECMA-262 regexes, searched as the API server does; these CRDs' are
        # anchored and use nothing Python's re reads differently.
        if "pattern" in schema and not re.search(schema["pattern"], v):
            errors.append(f"{path}: does not match {schema['pattern']}")
    if t == "array":
        if len(v) < schema.get("minItems", 0) or len(v) > schema.get("maxItems", 1 << 30):
            errors.append(f"{path}: items")
        lt = schema.get("x-kubernetes-list-type")
        if lt == "set" and len({json.dumps(x) for x in v}) != len(v):
            errors.append(f"{path}: duplicate in a set")
        if lt == "map":
            keys = [tuple(x.get(k) for k in schema["x-kubernetes-list-map-keys"])
                    for x in v if isinstance(x, dict)]
            if len(set(keys)) != len(keys):
                errors.append(f"{path}: duplicate key in a map list")
        for i, x in enumerate(v):
            validate(schema["items"], x, f"{path}[{i}]", errors)
    if t == "object":
        if path == ".metadata":
            return
        if len(v) > schema.get("maxProperties", 1 << 30):
            errors.append(f"{path}: too many properties")
        for k in schema.get("required", []):
            if k not in v:
                errors.append(f"{path}.{k}: required")
        props = schema.get("properties")
        for k, x in v.items():
            if props is not None:
                if k in props:  # the API server prunes the rest
                    validate(props[k], x, f"{path}.{k}", errors)
            elif isinstance(schema.get("additionalProperties"), dict):
                validate(schema["additionalProperties"], x, f"{path}.{k}", errors)


def api_verdicts(schema, cases):
    """[(name, object, old)] -> {name: [errors]} as the API server would give them."""
    out, objs = {}, []
    for name, obj, old in cases:
        obj = apply_defaults(schema, copy.deepcopy(obj))
        errors = []
        validate(schema, obj, "", errors)
        out[name] = errors
        objs.append((name, obj, apply_defaults(schema, copy.deepcopy(old)) if old else None))
    for name, errs in cel(schema, objs).items():
        out[name] += [f"{e['path']}: {e['message']}" for e in errs]
    return out


# --- objects ---------------------------------------------------------------------------

def claim(requests=None, spec=None, status=None, **meta):
    o = {"apiVersion": API, "kind": "ElasticGPUClaim",
         "metadata": {"name": "train", "namespace": "ml", **meta},
         "spec": {"resources": {"requests": {CORE: 30} if requests is None else requests},
                  **(spec or {})}}
    if status is not None:
        o["status"] = status
    return o


def klass(provisioner="gpushare.provisioner.elasticgpu.io", **fields):
    o = {"apiVersion": API, "kind": "ElasticGPUClass", "metadata": {"name": "fast"}}
    if provisioner is not None:
        o["provisioner"] = provisioner
    o.update(fields)
    return o


def egpu(spec=None, status=None, share="g0", core=30):
    s = {"capacity": {CORE: core}, "nodeName": "n1"}
    if share:
        s["gpuShare"] = {"gpuName": share}
    s.update(spec or {})
    o = {"apiVersion": API, "kind": "ElasticGPU", "metadata": {"name": "e1"}, "spec": s}
    if status is not None:
        o["status"] = status
    return o


def cond(type_="Bound", **kw):
    c = {"type": type_, "status": "True", "lastTransitionTime": TIME, "reason": "Bound",
         "message": ""}
    c.update(kw)
    return c


def phys(names, core, **spec):
    return egpu({"physicalGPU": {"gpuNames": names}, **spec}, share=None, core=core)


MAX = {
    "ElasticGPUClaim": claim({CORE: 30, MEM: 4096}, {"elasticGPUClassName": "fast",
                                                     "elasticGPUName": "e1"},
                             {"phase": "Bound", "elasticGPUName": "e1",
                              "capacity": {CORE: 40, MEM: 8192}, "observedGeneration": 2,
                              "conditions": [cond(observedGeneration=2)]}),
    "ElasticGPUClass": klass(reclaimPolicy="Retain", bindingMode="WaitForFirstConsumer",
                             parameters={"models": "A100|T4", "nodeSelector": "zone=a",
                                         "policy": "binpack", "tflops.A100": "312"}),
    "ElasticGPU": egpu({"capacity": {CORE: 30, MEM: 4096},
                        "claimRef": {"namespace": "ml", "name": "train", "uid": "u"},
                        "elasticGPUClassName": "fast", "reclaimPolicy": "Retain"},
                       {"phase": "Bound", "reason": "Bound", "message": "m",
                        "observedGeneration": 1, "gpuName": "g0", "model": "NVIDIA T4",
                        "corePercent": 30}),
}
MAX_TFLOPS_CLAIM = claim({TFLOPS: 19.5, MEM: 1024})


def budget(spec=None, status=None, **meta):
    s = {"gpuHours": 120, "overBudgetPriorityClassName": "gpu-over-budget"}
    s.update({k: v for k, v in (spec or {}).items()})
    s = {k: v for k, v in s.items() if v is not None}
    o = {"apiVersion": API, "kind": "GPUBudget",
         "metadata": {"name": "team", "namespace": "ml", **meta}, "spec": s}
    if status is not None:
        o["status"] = status
    return o


PERIOD = {"periodStart": "2026-11-24T00:00:00Z", "periodEnd": "2026-11-25T00:00:00Z"}
MAX["GPUBudget"] = budget(
    {"gpuHours": 7.5, "memoryWeight": 0.0125, "period": "12h", "timeZone": "Europe/Berlin",
     "inBudgetPriorityClassName": "gpu-in-budget"},
    {**PERIOD, "used": 1.5, "remaining": 6, "state": "InBudget", "observedGeneration": 2,
     "metering": {"until": "2026-11-24T06:00:00Z", "coreSeconds": 540000, "memorySeconds": 0},
     "conditions": [cond("Metered", reason="Metered", observedGeneration=2)]})

# Creates: each must get the same verdict from the API server and the decoder.
CASES = {
    "ElasticGPUClaim": {
        "share": claim(),
        "max": MAX["ElasticGPUClaim"],
        "tflops": MAX_TFLOPS_CLAIM,
        "tflops integer": claim({TFLOPS: 100}),
        "tflops least": claim({TFLOPS: 0.001}),
        "tflops most": claim({TFLOPS: 1000000}),
        "whole cards": claim({CORE: 6400}),
        "core 99": claim({CORE: 99}),
        "core 0": claim({CORE: 0}),
        "core 150": claim({CORE: 150}),
        "core 6500": claim({CORE: 6500}),
        "core text": claim({CORE: "30"}),
        "core real": claim({CORE: 30.5}),
        "both": claim({CORE: 30, TFLOPS: 10}),
        "neither": claim({MEM: 1024}),
        "tflops 0": claim({TFLOPS: 0}),
        "tflops negative": claim({TFLOPS: -1}),
        "tflops too many": claim({TFLOPS: 1000000.5}),
        "tflops text": claim({TFLOPS: "19.5"}),
        "memory 0": claim({CORE: 30, MEM: 0}),
        "memory most": claim({CORE: 30, MEM: 4294967295}),
        "memory too much": claim({CORE: 30, MEM: 4294967296}),
        "memory on whole cards": claim({CORE: 100, MEM: 1}),
        "memory with tflops": claim({TFLOPS: 10, MEM: 1}),
        "no requests": claim(spec={"resources": {}}),
        "class 253": claim(spec={"elasticGPUClassName": "a" * 253}),
        "class 254": claim(spec={"elasticGPUClassName": "a" * 254}),
        "egpu 254": claim(spec={"elasticGPUName": "a" * 254}),
        "phase": claim(status={"phase": "Done"}),
        "phase lost": claim(status={"phase": "Lost"}),
        "capacity 150": claim(status={"capacity": {CORE: 150}}),
        "capacity memory 0": claim(status={"capacity": {CORE: 30, MEM: 0}}),
        "observedGeneration -1": claim(status={"observedGeneration": -1}),
        "conditions twice": claim(status={"conditions": [cond(), cond()]}),
        "conditions 8": claim(status={"conditions": [cond(f"T{i}") for i in range(8)]}),
        "conditions 9": claim(status={"conditions": [cond(f"T{i}") for i in range(9)]}),
        "condition status": claim(status={"conditions": [cond(status="Yes")]}),
        "condition no reason": claim(status={"conditions": [
            {k: v for k, v in cond().items() if k != "reason"}]}),
        "condition empty reason": claim(status={"conditions": [cond(reason="")]}),
        "condition reason 128": claim(status={"conditions": [cond(reason="R" * 128)]}),
        "condition message 1023": claim(status={"conditions": [cond(message="m" * 1023)]}),
        "condition message 1024": claim(status={"conditions": [cond(message="m" * 1024)]}),
        "condition type 64": claim(status={"conditions": [cond("T" * 64)]}),
    },
    "ElasticGPUClass": {
        "minimal": klass(),
        "max": MAX["ElasticGPUClass"],
        "physical": klass("physical.provisioner.elasticgpu.io"),
        "no provisioner": klass(None),
        "provisioner": klass("kubernetes.io/gce-pd"),
        "reclaimPolicy": klass(reclaimPolicy="Recycle"),
        "bindingMode": klass(bindingMode="Later"),
        "unknown parameter": klass(parameters={"zone": "a"}),
        "tflops without model": klass(parameters={"tflops.": "1"}),
        "parameter not text": klass(parameters={"policy": 3}),
        "policy": klass(parameters={"policy": "pack"}),
        "policy bestfit": klass(parameters={"policy": "bestfit"}),
        "policy fgd-cpu": klass(parameters={"policy": "fgd-cpu"}),
        "policy fgd-cpu-fill": klass(parameters={"policy": "fgd-cpu-fill"}),
        "models empty part": klass(parameters={"models": "A||B"}),
        "models trailing bar": klass(parameters={"models": "A|"}),
        "models empty": klass(parameters={"models": ""}),
        "peak text": klass(parameters={"tflops.T4": "fast"}),
        "peak 0": klass(parameters={"tflops.T4": "0.000"}),
        "peak decimals": klass(parameters={"tflops.T4": "8.125"}),
        "peak 4 decimals": klass(parameters={"tflops.T4": "8.1234"}),
        "peak most": klass(parameters={"tflops.T4": "1000000"}),
        "peak too high": klass(parameters={"tflops.T4": "1000000.001"}),
        "peak quantity": klass(parameters={"tflops.T4": "8k"}),
        "16 peaks": klass(parameters={f"tflops.m{i}": "1" for i in range(16)}),
        "17 peaks": klass(parameters={f"tflops.m{i}": "1" for i in range(17)}),
        "value 1024": klass(parameters={"models": "A" * 1024}),
        "selector": klass(parameters={"nodeSelector": "zone=a,pool in (x,y),!tainted"}),
        "selector bad": klass(parameters={"nodeSelector": "zone=a,"}),
        "models 256": klass(parameters={"models": "A" * 256}),
    },
    "ElasticGPU": {
        "share": egpu(),
        "max": MAX["ElasticGPU"],
        "physical": phys(["g0", "g1"], 200),
        "both sources": egpu({"physicalGPU": {"gpuNames": ["g1"]}}),
        "no source": egpu(share=None),
        "share of 100": egpu(core=100),
        "core 150": egpu(core=150),
        "core 0": egpu(core=0),
        "cards and core disagree": phys(["g0", "g1", "g2"], 200),
        "memory on whole cards": phys(["g0"], 100, capacity={CORE: 100, MEM: 1}),
        "card twice": phys(["g0", "g0"], 200),
        "no cards": phys([], 100),
        "empty card name": phys([""], 100),
        "65 cards": phys([f"g{i}" for i in range(65)], 6500),
        "64 cards": phys([f"g{i}" for i in range(64)], 6400),
        "no gpuName": egpu({"gpuShare": {}}),
        "no node": egpu({"nodeName": None}),
        "empty node": egpu({"nodeName": ""}),
        "claimRef without name": egpu({"claimRef": {"namespace": "ml"}}),
        "claimRef empty namespace": egpu({"claimRef": {"namespace": "", "name": "x"}}),
        "claimRef uid 64": egpu({"claimRef": {"namespace": "ml", "name": "x", "uid": "u" * 64}}),
        "reclaimPolicy": egpu({"reclaimPolicy": "Recycle"}),
        "phase": egpu(status={"phase": "Lost"}),
        "corePercent 100": egpu(status={"corePercent": 100}),
        "corePercent 0": egpu(status={"corePercent": 0}),
        "reason 1024": egpu(status={"reason": "r" * 1024}),
        "model 256": egpu(status={"model": "m" * 256}),
    },
    "GPUBudget": {
        "minimal": budget(),
        "max": MAX["GPUBudget"],
        "zero": budget({"gpuHours": 0}),
        "most": budget({"gpuHours": 1000000000}),
        "too many": budget({"gpuHours": 1000000001}),
        "negative": budget({"gpuHours": -1}),
        "hours text": budget({"gpuHours": "120"}),
        "no hours": budget({"gpuHours": None}),
        "no over class": budget({"overBudgetPriorityClassName": None}),
        "over class empty": budget({"overBudgetPriorityClassName": ""}),
        "in class empty": budget({"inBudgetPriorityClassName": ""}),
        "in class upper": budget({"inBudgetPriorityClassName": "High"}),
        "in class 253": budget({"inBudgetPriorityClassName": ".".join(["a" * 63] * 3 + ["a" * 61])}),
        "in class 254": budget({"inBudgetPriorityClassName": ".".join(["a" * 63] * 3 + ["a" * 62])}),
        "in class label 64": budget({"inBudgetPriorityClassName": "a" * 64}),
        "in class dots": budget({"inBudgetPriorityClassName": "a..b"}),
        "weight most": budget({"memoryWeight": 1000}),
        "weight too much": budget({"memoryWeight": 1000.5}),
        "weight negative": budget({"memoryWeight": -0.1}),
        "daily": budget({"period": "Daily"}),
        "weekly": budget({"period": "Weekly"}),
        "hourly": budget({"period": "Hourly"}),
        "period 1h30m": budget({"period": "1h30m"}),
        "period 1m": budget({"period": "1m"}),
        "period 59s": budget({"period": "59s"}),
        "period 8784h": budget({"period": "8784h"}),
        "period 8785h": budget({"period": "8785h"}),
        "period days": budget({"period": "1d"}),
        "period fraction": budget({"period": "1.5h"}),
        "period out of order": budget({"period": "30m1h"}),
        "zone": budget({"timeZone": "America/Argentina/Buenos_Aires"}),
        "zone Etc": budget({"timeZone": "Etc/GMT+5"}),
        "zone path": budget({"timeZone": "../etc/passwd"}),
        "zone double slash": budget({"timeZone": "Europe//Berlin"}),
        "zone 64": budget({"timeZone": "A" * 64}),
        "period half": budget(status={"periodStart": PERIOD["periodStart"]}),
        "period backwards": budget(status={"periodStart": PERIOD["periodEnd"],
                                           "periodEnd": PERIOD["periodStart"]}),
        "period not a time": budget(status={"periodStart": "today",
                                            "periodEnd": PERIOD["periodEnd"]}),
        "metering outside": budget(status={**PERIOD, "metering": {
            "until": "2026-11-25T00:00:01Z"}}),
        "metering at end": budget(status={**PERIOD, "metering": {"until": PERIOD["periodEnd"]}}),
        "metering no until": budget(status={"metering": {"coreSeconds": 1}}),
        "metering negative": budget(status={"metering": {"until": TIME, "coreSeconds": -1}}),
        "state": budget(status={"state": "Broke"}),
        "over": budget(status={"state": "OverBudget"}),
    },
}
def gpu(spec=None, status=None, drop=()):
    """A GPU object as egpu-agent publishes it, spec keys in drop removed."""
    s = {"nodeName": "n1", "index": 0, "uuid": "GPU-0", "model": "NVIDIA A100", "memory": 40960,
         **(spec or {})}
    for k in drop:
        s.pop(k)
    o = {"apiVersion": API, "kind": "GPU", "metadata": {"name": "n1-gpu0"}, "spec": s}
    if status is not None:
        o["status"] = status
    return o


def share(**kw):
    return {"namespace": "team-a", "pod": "p", "container": "c", "core": 30, "memory": 4096,
            **kw}


# GPU objects, which src/api decodes for readers (kubectl-egpu): the decoder
# reads exactly what the CRD allows.
CASES["GPU"] = {
    "bare": gpu(),
    "full": gpu(status={"health": "Healthy", "capacity": {"core": 100, "memory": 40960},
                        "allocated": [share(podUID="u1", claim="c1"), share(pod="q", core=100,
                                                                           memory=0)],
                        "used": {"memory": 5000, "utilization": 41, "updateTime": TIME}}),
    "no node": gpu(drop=["nodeName"]),
    "empty node": gpu({"nodeName": ""}),
    "node 253": gpu({"nodeName": "n" * 253}),
    "node 254": gpu({"nodeName": "n" * 254}),
    "no index": gpu(drop=["index"]),
    "index 1023": gpu({"index": 1023}),
    "index 1024": gpu({"index": 1024}),
    "index -1": gpu({"index": -1}),
    "index text": gpu({"index": "3"}),
    "no uuid": gpu(drop=["uuid"]),
    "uuid 63": gpu({"uuid": "G" * 63}),
    "uuid 64": gpu({"uuid": "G" * 64}),
    "no model": gpu(drop=["model"]),
    "model 127": gpu({"model": "m" * 127}),
    "model 128": gpu({"model": "m" * 128}),
    "memory max": gpu({"memory": 4294967295}),
    "memory over": gpu({"memory": 4294967296}),
    "health 64": gpu(status={"health": "h" * 64}),
    "health 65": gpu(status={"health": "h" * 65}),
    "capacity large": gpu(status={"capacity": {"core": 5000, "memory": 1 << 40}}),
    "capacity negative": gpu(status={"capacity": {"core": -1}}),
    "allocated empty": gpu(status={"allocated": []}),
    "allocated no pod": gpu(status={"allocated": [{"namespace": "a", "container": "c"}]}),
    "allocated core 100": gpu(status={"allocated": [share(core=100, memory=0)]}),
    "allocated core 101": gpu(status={"allocated": [share(core=101)]}),
    "allocated memory large": gpu(status={"allocated": [share(memory=1 << 40)]}),
    "allocated memory negative": gpu(status={"allocated": [share(memory=-1)]}),
    "allocated namespace 64": gpu(status={"allocated": [share(namespace="n" * 64)]}),
    "allocated claim 254": gpu(status={"allocated": [share(claim="c" * 254)]}),
    "used utilization 101": gpu(status={"used": {"utilization": 101}}),
    "used memory negative": gpu(status={"used": {"memory": -1}}),
    "used time": gpu(status={"used": {"updateTime": "yesterday"}}),
    # spec.topology (egpu-agent, from NVML's pair topology)
    "topology": gpu({"topology": [{"index": 1, "link": "NVLink"}, {"index": 2, "link": "System"},
                                  {"index": 3, "link": "SingleSwitch"}]}),
    "topology every link": gpu({"topology": [{"index": i + 1, "link": l} for i, l in enumerate(
        ["NVLink", "Internal", "SingleSwitch", "MultipleSwitches", "HostBridge", "NUMANode",
         "System"])]}),
    "topology empty": gpu({"topology": []}),
    "topology 63": gpu({"topology": [{"index": i, "link": "System"} for i in range(1, 64)]}),
    "topology 64": gpu({"topology": [{"index": i, "link": "System"} for i in range(1, 65)]}),
    "topology twice": gpu({"topology": [{"index": 1, "link": "NVLink"},
                                        {"index": 1, "link": "System"}]}),
    "topology link NV": gpu({"topology": [{"index": 1, "link": "NV"}]}),
    "topology link lower": gpu({"topology": [{"index": 1, "link": "nvlink"}]}),
    "topology no link": gpu({"topology": [{"index": 1}]}),
    "topology no index": gpu({"topology": [{"link": "NVLink"}]}),
    "topology index 1023": gpu({"topology": [{"index": 1023, "link": "HostBridge"}]}),
    "topology index 1024": gpu({"topology": [{"index": 1024, "link": "NVLink"}]}),
    "topology index -1": gpu({"topology": [{"index": -1, "link": "NVLink"}]}),
    "topology index text": gpu({"topology": [{"index": "1", "link": "NVLink"}]}),
    "topology not a list": gpu({"topology": {"index": 1, "link": "NVLink"}}),
    "topology entry text": gpu({"topology": ["NVLink"]}),
}

# "no node": {"nodeName": None} is a JSON null, which the API server drops.
CASES["ElasticGPU"]["no node"]["spec"].pop("nodeName")

# What only the decoder checks, and why the CRD does not (the controller
# reports these as events on the object).
DECODER_ONLY = {
    ("ElasticGPUClass", "selector bad"): "the label-selector grammar is not worth a regex in CEL",
    ("ElasticGPUClass", "models 256"): "models is bounded by the pod annotation's 255 bytes, "
                                       "the CRD bounds every parameter at 1023",
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_api_server_and_decoder_agree(schemas, objects_tool, kind):
    cases = CASES[kind]
    schema = schemas[kind]
    api = api_verdicts(schema, [(n, o, None) for n, o in cases.items()])
    dec = decode(objects_tool, kind, [apply_defaults(schema, copy.deepcopy(o))
                                      for o in cases.values()])["results"]
    disagree = []
    for (name, _), d in zip(cases.items(), dec):
        api_ok = not api[name]
        if (kind, name) in DECODER_ONLY:
            assert api_ok and not d["ok"], f"{name}: listed as decoder-only but {api[name]} / {d}"
            continue
        if api_ok != d["ok"]:
            disagree.append(f"{name}: API server {api[name] or 'accepts'}, decoder "
                            f"{d.get('error') or 'accepts'}")
    assert not disagree, "\n".join(disagree)
    # Both sides refuse something: the table is not all good objects.
    assert sum(1 for d in dec if not d["ok"]) >= 5


def leaves(v, path=""):
    """Leaf paths of a JSON value; map parameters' keys are one '*'."""
    if isinstance(v, dict):
        out = set()
        for k, x in v.items():
            p = f"{path}.{k}" if path else k
            out |= leaves(x, f"{path}.*" if path == "parameters" else p)
        return out
    if isinstance(v, list):
        out = set()
        for x in v:
            out |= leaves(x, path + "[]")
        return out or {path + "[]"}
    return {path}


def schema_leaves(s, path=""):
    if s.get("type") == "object" and "properties" in s:
        out = set()
        for k, sub in s["properties"].items():
            out |= schema_leaves(sub, f"{path}.{k}" if path else k)
        return out
    if s.get("type") == "object" and isinstance(s.get("additionalProperties"), dict):
        return {path + ".*"}
    if s.get("type") == "array":
        return schema_leaves(s["items"], path + "[]")
    return {path}


@pytest.mark.parametrize("kind", sorted(MAX))
def test_every_field_is_in_the_schema_and_read(schemas, objects_tool, kind):
    objs = [MAX[kind]] + {"ElasticGPUClaim": [MAX_TFLOPS_CLAIM],
                          "ElasticGPU": [phys(["g0", "g1"], 200)]}.get(kind, [])
    res = decode(objects_tool, kind, objs)["results"]
    assert all(r["ok"] for r in res), res
    written = set()
    for r in res:
        written |= {p for p in leaves(r["encoded"]) if p.split(".")[0] not in
                    ("apiVersion", "kind", "metadata")}
    in_schema = {p for p in schema_leaves(schemas[kind])
                 if p.split(".")[0] not in ("apiVersion", "kind", "metadata")}
    if kind == "ElasticGPUClass":  # nobody reads a class's status (StorageClass has none)
        in_schema = {p for p in in_schema if not p.startswith("status.")}
    assert written - in_schema == set(), "written by the encoder but not in the CRD"
    assert in_schema - written == set(), "in the CRD but not read and written by the decoder"
    # What the decoder read back is what it was given (the encoder loses nothing).
    for given, r in zip(objs, res):
        assert leaves(r["encoded"]) >= {p for p in leaves(given) if not p.startswith("metadata")}


@pytest.mark.parametrize("kind", sorted(MAX))
def test_encoded_objects_are_accepted(schemas, objects_tool, kind):
    objs = [o for o in CASES[kind].values()]
    res = [r for r in decode(objects_tool, kind, objs)["results"] if r["ok"]]
    api = api_verdicts(schemas[kind], [(str(i), r["encoded"], None) for i, r in enumerate(res)])
    assert {k: v for k, v in api.items() if v} == {}
    # ... and decode to themselves.
    again = decode(objects_tool, kind, [r["encoded"] for r in res])["results"]
    assert [a["encoded"] for a in again] == [r["encoded"] for r in res]


def enum_at(schema, *path):
    for p in path:
        schema = schema["properties"][p] if p != "[]" else schema["items"]
    return schema["enum"]


def test_enums_are_the_decoders(schemas, objects_tool):
    names = decode(objects_tool, "ElasticGPU", [])["names"]
    assert enum_at(schemas["ElasticGPUClaim"], "status", "phase") == names["claimPhases"]
    assert enum_at(schemas["ElasticGPU"], "status", "phase") == names["elasticGPUPhases"]
    assert sorted(enum_at(schemas["ElasticGPUClass"], "reclaimPolicy")) == \
        sorted(names["reclaimPolicies"])
    assert sorted(enum_at(schemas["ElasticGPU"], "spec", "reclaimPolicy")) == \
        sorted(names["reclaimPolicies"])
    assert enum_at(schemas["ElasticGPUClass"], "bindingMode") == names["bindingModes"]
    assert enum_at(schemas["ElasticGPUClass"], "provisioner") == names["provisioners"]
    assert enum_at(schemas["ElasticGPUClaim"], "status", "conditions", "[]", "status") == \
        names["conditionStatuses"]
    assert enum_at(schemas["GPUBudget"], "status", "state") == names["budgetStates"]
    assert enum_at(schemas["GPU"], "spec", "topology", "[]", "link") == names["topologyLinks"]
    assert enum_at(schemas["GPUBudget"], "status", "conditions", "[]", "status") == \
        names["conditionStatuses"]
    # The decoder's absent period and time zone are the CRD's defaults.
    res = decode(objects_tool, "GPUBudget", [budget()])["results"][0]["encoded"]
    spec = schemas["GPUBudget"]["properties"]["spec"]["properties"]
    assert res["spec"]["period"] == spec["period"]["default"]
    assert res["spec"]["timeZone"] == spec["timeZone"]["default"]
    # StorageClass's defaults: the decoder's absent values are the CRD's defaults.
    res = decode(objects_tool, "ElasticGPUClass", [klass()])["results"][0]["encoded"]
    assert res["reclaimPolicy"] == schemas["ElasticGPUClass"]["properties"]["reclaimPolicy"]["default"]
    assert res["bindingMode"] == schemas["ElasticGPUClass"]["properties"]["bindingMode"]["default"]


# Updates: (name, old, new, allowed) evaluated with oldSelf as the API server does.
def updates():
    bound = claim(spec={"elasticGPUName": "e1"})
    p = {"models": "A100", "tflops.A100": "312"}
    return {
        "ElasticGPUClaim": [
            ("bind", claim(), bound, True),
            ("bind from empty", claim(spec={"elasticGPUName": ""}), bound, True),
            ("same", bound, bound, True),
            ("rebind", bound, claim(spec={"elasticGPUName": "e2"}), False),
            ("unbind", bound, claim(), False),
            ("empty again", bound, claim(spec={"elasticGPUName": ""}), False),
            ("resize unbound", claim(), claim({CORE: 40}), True),
        ],
        "ElasticGPUClass": [
            ("labels only", klass(parameters=p), klass(parameters=p), True),
            ("provisioner", klass(), klass("physical.provisioner.elasticgpu.io"), False),
            ("reclaimPolicy", klass(), klass(reclaimPolicy="Retain"), False),
            ("reclaimPolicy default", klass(reclaimPolicy="Delete"), klass(), True),
            ("bindingMode", klass(), klass(bindingMode="WaitForFirstConsumer"), False),
            ("parameters changed", klass(parameters=p), klass(parameters={**p, "policy": "fgd"}),
             False),
            ("parameters added", klass(), klass(parameters=p), False),
            ("parameters removed", klass(parameters=p), klass(), False),
        ],
    }


@pytest.mark.parametrize("kind", ["ElasticGPUClaim", "ElasticGPUClass"])
def test_immutable_fields(schemas, kind):
    cases = updates()[kind]
    api = api_verdicts(schemas[kind], [(n, new, old) for n, old, new, _ in cases])
    got = {n: not api[n] for n, _, _, _ in cases}
    assert got == {n: ok for n, _, _, ok in cases}, api
    for n, _, _, ok in cases:
        if not ok:
            assert any("immutable" in e for e in api[n]), api[n]


def test_names_and_columns(schemas):
    names = {k: schemas[k + "/crd"]["spec"]["names"] for k in CASES}
    assert names["ElasticGPUClaim"]["shortNames"] == ["egpuc"]
    assert names["ElasticGPU"]["shortNames"] == ["egpu"]
    assert names["ElasticGPUClass"]["shortNames"] == ["egpuclass"]
    assert names["GPUBudget"]["shortNames"] == ["gpub"]
    cols = {c["name"]: c for v in schemas["ElasticGPUClaim/crd"]["spec"]["versions"]
            for c in v["additionalPrinterColumns"]}
    assert cols["TFLOPS"]["jsonPath"] == ".spec.resources.requests.elasticgpu\\.io/gpu-tflops"
    assert cols["TFLOPS"]["type"] == "number"
    for k in CASES:
        assert "status" in schemas[k + "/crd"]["spec"]["versions"][0]["subresources"]


def test_example_budget(schemas, objects_tool):
    """deploy/examples/gpubudget.yaml is accepted by the API server's checks
    and decodes."""
    import yaml
    ex = yaml.safe_load((ROOT / "deploy/examples/gpubudget.yaml").read_text())
    assert api_verdicts(schemas["GPUBudget"], [("example", ex, None)]) == {"example": []}
    res = decode(objects_tool, "GPUBudget", [ex])["results"][0]
    assert res["ok"], res
    assert res["encoded"]["spec"]["period"] == "Weekly"


def test_whole_deploy_renders():
    r = subprocess.run([tool("kubectl"), "kustomize", str(ROOT / "deploy")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "elasticgpuclaims.elasticgpu.io" in r.stdout
