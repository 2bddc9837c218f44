// tests/cel/vap_eval.mjs - evaluate a ValidatingAdmissionPolicy as the API
// server's admission step does, for the tests (no kube-apiserver runs here).
//
// stdin: {"policy": <admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy>,
//         "cases": [{"name", "operation", "username", "object", "oldObject"}]}
// stdout: [{"name", "allowed", "message"}], one per case, in order.
//
// As the API server does (KEP-3488): spec.variables are evaluated in order,
// each seeing the ones before it as variables.<name>; every validation is
// evaluated with object, oldObject (null on CREATE), request and variables;
// the request is denied by the first validation that is false, with its
// message; an evaluation error is a denial when failurePolicy is Fail (the
// default). CEL itself is @bufbuild/cel, a conformant evaluator of the CEL
// spec; the policies under test use standard CEL only.
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

function evaluate(policy, c) {
  const spec = policy.spec;
  const failClosed = (spec.failurePolicy || "Fail") === "Fail";
  const request = {
    operation: c.operation,
    userInfo: { username: c.username, groups: c.groups || [] },
    namespace: (c.object && c.object.metadata && c.object.metadata.namespace) || "",
    name: (c.object && c.object.metadata && c.object.metadata.name) || "",
  };
  const vars = {
    object: toCel(c.object),
    oldObject: c.oldObject === undefined ? null : toCel(c.oldObject),
    request: toCel(request),
    variables: new Map(),
  };
  for (const v of spec.variables || []) {
    const value = run(v.expression, vars);
    if (isError(value))
      return { allowed: !failClosed, message: `variable ${v.name}: ${value.message}` };
    vars.variables.set(v.name, value);
  }
  for (const val of spec.validations || []) {
    const r = run(val.expression, vars);
    if (isError(r)) {
      if (failClosed) return { allowed: false, message: `expression error: ${r.message}` };
      continue;
    }
    if (r !== true) return { allowed: false, message: val.message || val.expression };
  }
  return { allowed: true, message: "" };
}

let text = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (d) => (text += d));
process.stdin.on("end", () => {
  const input = JSON.parse(text);
  const out = input.cases.map((c) => ({ name: c.name, ...evaluate(input.policy, c) }));
  process.stdout.write(JSON.stringify(out));
});
