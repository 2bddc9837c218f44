"""DRA mode's CEL strings (src/api/dra.c), judged by a real CEL library.

Text a tenant writes (the elasticgpu.io/gpu-model annotation) reaches the CEL
selector of a ResourceClaimTemplate, which kube-scheduler's allocator
evaluates for every device of the cluster. Here:
- every hostile string egpu_api_cel_quote is given becomes a literal that
  @bufbuild/cel (tests/cel/selector_eval.mjs, a conformant CEL evaluator)
  parses back to exactly that string, and nothing else: quotes, backslashes,
  newlines, `" || true || "`, NUL and control characters, non-ASCII up to
  U+10FFFF, and a literal that is printable ASCII only;
- invalid UTF-8 is refused with a message naming the byte;
- the model selector selects a device of a named model, not another, not a
  device without the attribute (no evaluation error), and an injection
  attempt through the annotation stays one model name that matches nothing;
- the selector inside a whole-card claim spec is the same expression, and
  template names are the SHA-256 of the sorted compact spec (computed here
  with hashlib).

The C side is <build>/tests/tools/egpu-dra-claims. node is needed: a missing
one skips, except under CI=true, where it fails.
"""
import hashlib
import json
import subprocess

import pytest

from conftest import ROOT, tool

DRIVER = "gpu.elasticgpu.io"

HOSTILE = [
    "A100-SXM4-80GB",
    "",
    '"',
    "\\",
    "\\\"",
    "a\nb\rc\td",
    '" || true || "',
    '\\" || true || \\"',
    "'",
    "' || true || '",
    '"""',
    "'''",
    "\x00",
    "\x01\x1f\x7f",
    "${x}`x`",
    "é",
    "日本語",
    "😀",
    "\u2028\u2029",
    "＂ || true || ＂",  # fullwidth quotes: not quotes
    "\U0010ffff",
    "\\u0022 || true || \\u0022",
    "\\x22) || true || (\\x22",
]


@pytest.fixture(scope="module")
def claims_tool(build_dir):
    path = build_dir / "tests" / "tools" / "egpu-dra-claims"
    assert path.exists(), f"{path} not built: run `make build`"
    return str(path)


def c_side(claims_tool, quote=(), selectors=(), specs=()):
    doc = {"quote": [q.hex() for q in quote], "selectors": [s.hex() for s in selectors],
           "specs": [dict(s, models=s.get("models", b"").hex()) for s in specs]}
    r = subprocess.run([claims_tool], input=json.dumps(doc), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def cel(cases):
    node = tool("node")
    assert (ROOT / "tests/cel/node_modules/@bufbuild/cel").is_dir(), \
        "tests/cel/node_modules is missing: run `make deps`"
    r = subprocess.run([node, str(ROOT / "tests/cel/selector_eval.mjs")], capture_output=True,
                       text=True, timeout=60, input=json.dumps({"cases": cases}))
    assert r.returncode == 0, r.stderr
    return {c["name"]: c for c in json.loads(r.stdout)}


def device(model=None):
    attrs = {"uuid": "GPU-1", "index": 0}
    if model is not None:
        attrs["productName"] = model
    return {"driver": DRIVER, "attributes": {DRIVER: attrs}, "allowMultipleAllocations": True}


def test_quoted_text_is_one_literal_of_the_same_value(claims_tool):
    got = c_side(claims_tool, quote=[s.encode() for s in HOSTILE])["quote"]
    cases = []
    for i, (s, r) in enumerate(zip(HOSTILE, got)):
        assert r["ok"], (s, r)
        lit = r["literal"]
        assert all(0x20 <= ord(ch) < 0x7f for ch in lit), lit
        assert lit.startswith('"') and lit.endswith('"')
        cases.append({"name": f"lit{i}", "expression": lit})
        # Nothing after the literal joins it: the literal, then `+ "x"`, is its value + "x".
        cases.append({"name": f"cat{i}", "expression": lit + ' + "x"'})
        cases.append({"name": f"eq{i}", "expression": lit + " == " + lit})
    out = cel(cases)
    for i, s in enumerate(HOSTILE):
        assert out[f"lit{i}"]["error"] is None, (s, out[f"lit{i}"])
        assert out[f"lit{i}"]["type"] == "string"
        assert out[f"lit{i}"]["value"] == s, (s, out[f"lit{i}"])
        assert out[f"cat{i}"]["value"] == s + "x"
        assert out[f"eq{i}"]["value"] is True


@pytest.mark.parametrize("raw, at", [
    (b"\xff", 0), (b"ab\x80", 2), (b"\xc0\xaf", 0), (b"\xe0\x80\xa2", 0),
    (b"x\xed\xa0\x80", 1), (b"\xf4\x90\x80\x80", 0), (b"\xe6\x97", 0),
    (b'\xc3" || true || "', 0),
])
def test_invalid_utf8_is_refused(claims_tool, raw, at):
    r = c_side(claims_tool, quote=[raw])["quote"][0]
    assert not r["ok"]
    assert r["error"] == (f"byte {at} (0x{raw[at]:02X}) of the text is not valid UTF-8; "
                          "allowed: UTF-8 text")


def test_model_selector_selects_the_named_models_only(claims_tool):
    injections = [
        # Unquoted, each of these would select every device.
        '"] + [device.attributes["gpu.elasticgpu.io"].productName] + ["',
        '\\"] + [device.attributes[\\"gpu.elasticgpu.io\\"].productName] + [\\"',
        "\"]) || true || ([\"".replace("|", ""),  # '|' separates models: no bars here
        'x" in ["x"] ? true : "',
    ]
    models = ["NVIDIA H100|NVIDIA A100-SXM4-40GB"] + injections
    got = c_side(claims_tool, selectors=[m.encode() for m in models])["selectors"]
    assert all(r["ok"] for r in got), got
    cases = []
    for i, r in enumerate(got):
        e = r["expression"]
        for dev, m in (("h100", "NVIDIA H100"), ("a100", "NVIDIA A100-SXM4-40GB"),
                       ("other", "Tesla T4"), ("none", None)):
            cases.append({"name": f"{i}-{dev}", "expression": e, "device": device(m)})
        # The injection text itself, as a device's model (cut to the API's 64 bytes, as
        # the agent's slice holds it), is the one thing it selects.
        if i > 0:
            cases.append({"name": f"{i}-self", "expression": e,
                          "device": device(models[i].encode()[:64].decode())})
    out = cel(cases)
    assert all(c["error"] is None for c in out.values()), out
    assert out["0-h100"]["value"] is True
    assert out["0-a100"]["value"] is True
    assert out["0-other"]["value"] is False
    assert out["0-none"]["value"] is False  # no attribute: not selected, no error
    for i in range(1, len(models)):
        for dev in ("h100", "a100", "other", "none"):
            assert out[f"{i}-{dev}"]["value"] is False, (models[i], dev)
        assert out[f"{i}-self"]["value"] is True


def test_model_selector_refusals(claims_tool):
    got = c_side(claims_tool, selectors=[b"", b"A||B", b'"] || true || ["', b"A|\xff"])
    msgs = [r.get("error") for r in got["selectors"]]
    assert msgs[0] == ("annotation elasticgpu.io/gpu-model is empty; allowed: GPU models "
                       "separated by '|'")
    assert msgs[1] == msgs[2] == ("annotation elasticgpu.io/gpu-model names an empty model; "
                                  "allowed: GPU models separated by '|'")
    assert msgs[3].startswith("annotation elasticgpu.io/gpu-model: byte 0 (0xFF)")


def test_spec_selector_and_template_name(claims_tool):
    got = c_side(claims_tool, selectors=[b"NVIDIA H100"],
                 specs=[{"core": 200, "memory": 0, "models": b"NVIDIA H100"},
                        {"core": 30, "memory": 4096}])
    whole, share = got["specs"]
    assert whole["ok"] and share["ok"]
    ex = whole["spec"]["devices"]["requests"][0]["exactly"]
    assert ex["deviceClassName"] == "gpu.elasticgpu.io" and ex["count"] == 2
    assert ex["selectors"] == [{"cel": {"expression": got["selectors"][0]["expression"]}}]
    assert share["spec"]["devices"]["requests"][0]["exactly"]["capacity"] == {
        "requests": {"cores": "30", "memory": "4096Mi"}}
    for r in (whole, share):
        text = json.dumps(r["spec"], sort_keys=True, separators=(",", ":"))
        assert r["name"] == "egpu-" + hashlib.sha256(text.encode()).hexdigest()[:32]
    out = cel([{"name": "h100", "expression": ex["selectors"][0]["cel"]["expression"],
                "device": device("NVIDIA H100")}])
    assert out["h100"]["value"] is True


def test_long_model_matches_the_slice_cut(claims_tool):
    """The agent's slice holds a model cut to the API's 64 bytes at a character boundary
    (src/agent/dra_slice.c); the selector of the whole name selects that card."""
    name = "NVIDIA " + "é" * 40  # 87 bytes: cut inside the 29th é
    cut = name.encode()[:64].decode("utf-8", "ignore")
    assert len(cut.encode()) == 63
    [r] = c_side(claims_tool, selectors=[name.encode()])["selectors"]
    out = cel([{"name": "cut", "expression": r["expression"], "device": device(cut)},
               {"name": "whole", "expression": r["expression"], "device": device(name)}])
    assert out["cut"]["value"] is True
    assert out["whole"]["value"] is False
