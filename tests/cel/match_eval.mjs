// tests/cel/match_eval.mjs - evaluate an admission webhook's matchConditions
// as the API server does before it calls the webhook, for the tests (no
// kube-apiserver runs here).
//
// stdin: {"webhook": <one entry of webhooks[] of an admissionregistration.k8s.io/v1
//          Mutating- or ValidatingWebhookConfiguration>,
//         "cases": [{"name", "object", "oldObject", "request"}]}
//   request is the AdmissionRequest's fields the conditions may read
//   (operation, kind, resource, userInfo, namespace, name); object and
//   oldObject may be null (oldObject is null on CREATE).
// stdout: [{"name", "match", "error", "conditions": [{"name", "value", "error"}]}],
//   one per case, in order. match: every condition is true (the webhook is
//   called); error: the first condition that failed to evaluate, or returned
//   something other than a bool, with its message (the API server then
//   applies failurePolicy), else null.
//
// As the API server does (KEP-3716): each condition is a CEL expression over
// object, oldObject, request (and authorizer, which these conditions do not
// use); the webhook is called only when all are true; an evaluation error is
// a failure of the webhook call. JSON numbers that are integers are CEL ints,
// as in the API server's unstructured objects. CEL itself is @bufbuild/cel,
// a conformant evaluator of the CEL spec (with the one correction below);
// the conditions under test use standard CEL only.
import { celMap, run } from "@bufbuild/cel";

// The CEL spec (and cel-go, the API server's evaluator): a map entry whose
// value is null is present, so has(m.k) and 'k' in m are true. @bufbuild/cel
// 0.6.1 reports such an entry as absent (its native map's has() is
// get(key) != undefined), which would let a condition that reads a null
// field without checking its type pass here and fail in the API server.
// Presence is the key's, as in the spec.
const nativeMap = Object.getPrototypeOf(celMap(new Map()));
nativeMap.has = function has(key) {
  return (typeof key === "string" && this._map.has(key)) || this.get(key) !== undefined;
};

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

function evaluate(webhook, c) {
  const vars = {
    object: c.object === undefined ? null : toCel(c.object),
    oldObject: c.oldObject === undefined ? null : toCel(c.oldObject),
    request: toCel(c.request || {}),
  };
  const conditions = [];
  let error = null;
  let match = true;
  for (const mc of webhook.matchConditions || []) {
    let value;
    try {
      value = run(mc.expression, vars);
    } catch (e) {
      value = e;
    }
    if (isError(value)) {
      conditions.push({ name: mc.name, value: null, error: String(value.message) });
      error = error || `${mc.name}: ${value.message}`;
      match = false;
    } else if (typeof value !== "boolean") {
      conditions.push({ name: mc.name, value: null, error: `not a bool: ${String(value)}` });
      error = error || `${mc.name}: not a bool`;
      match = false;
    } else {
      conditions.push({ name: mc.name, value, error: null });
      match = match && value;
    }
  }
  return { match: error === null && match, error, conditions };
}

let text = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (d) => (text += d));
process.stdin.on("end", () => {
  const input = JSON.parse(text);
  const out = input.cases.map((c) => ({ name: c.name, ...evaluate(input.webhook, c) }));
  process.stdout.write(JSON.stringify(out));
});
