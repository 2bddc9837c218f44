// tests/cel/selector_eval.mjs - evaluate CEL device selectors and literals as
// kube-scheduler's allocator does for a DeviceClass's or a claim request's
// selectors (resource.k8s.io/v1 CELDeviceSelector), for the tests (no
// kube-scheduler runs here).
//
// stdin: {"cases": [{"name", "expression", "device"}]}
//   device (may be absent: an expression that reads none, e.g. a literal):
//   {"driver": "...", "attributes": {"<domain>": {"<id>": value}},
//    "capacity": {"<domain>": {"<id>": "<quantity>"}},
//    "allowMultipleAllocations": bool}
//   attribute values are JSON strings, integers or booleans (a DeviceAttribute's
//   string, int, bool; version attributes are not read by these tests).
// stdout: [{"name", "value", "type", "error"}], one per case, in order: value is
//   the result (a string, a bool, ...; a BigInt as its decimal text), type its
//   JS type, error the evaluation's or parse's message, else null.
//
// The environment is the DRA one (dra_notes.md section 4): a variable device
// with driver, attributes (a map of domain to a map of attribute id to value:
// an unknown domain reads as an empty map in the scheduler; here, as absent),
// capacity and allowMultipleAllocations. CEL itself is @bufbuild/cel, a
// conformant evaluator of the CEL spec; the expressions under test use
// standard CEL only (has(), in, ==, &&, list literals, string escapes).
import { run } from "@bufbuild/cel";

function toCel(v) {
  if (Array.isArray(v)) return v.map(toCel);
  if (v !== null && typeof v === "object")
    return new Map(Object.entries(v).map(([k, x]) => [k, toCel(x)]));
  if (typeof v === "number" && Number.isInteger(v)) return BigInt(v);
  return v;
}

function isError(v) {
  return v instanceof Error || (v !== null && typeof v === "object" && "_exprId" in v);
}

function plain(v) {
  if (typeof v === "bigint") return v.toString();
  if (Array.isArray(v)) return v.map(plain);
  return v;
}

function evaluate(c) {
  const device = c.device || {};
  const vars = {
    device: toCel({
      driver: device.driver || "",
      attributes: device.attributes || {},
      capacity: device.capacity || {},
      allowMultipleAllocations: device.allowMultipleAllocations || false,
    }),
  };
  let value;
  try {
    value = run(c.expression, vars);
  } catch (e) {
    value = e;
  }
  if (isError(value)) return { value: null, type: null, error: String(value.message) };
  return { value: plain(value), type: typeof value, error: null };
}

let text = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (d) => (text += d));
process.stdin.on("end", () => {
  const input = JSON.parse(text);
  const out = input.cases.map((c) => ({ name: c.name, ...evaluate(c) }));
  process.stdout.write(JSON.stringify(out));
});
