// tests/cel/crd_eval.mjs - evaluate a CRD schema's x-kubernetes-validations
// as the API server does on create and update, for the tests (no
// kube-apiserver runs here).
//
// stdin: {"schema": <a version's openAPIV3Schema>,
//         "cases": [{"name", "object", "oldObject"}]}   (oldObject absent: create)
// stdout: [{"name", "errors": [{"path", "rule", "message"}]}], one per case.
//
// As the API server does (KEP-2876, apiextensions-apiserver's cel package):
// every rule of a schema node is evaluated on each value present at that
// node, with self the value; a rule that reads oldSelf (a transition rule)
// is evaluated only on update and only where the old object has a value at
// the same place (through properties and map values; list items are not
// correlated here, no rule of ours sits under a list); a false result or an
// evaluation error is a failure with the rule's message. Values are typed by
// the schema, as the API server types them: integer fields are CEL ints,
// number fields doubles; property names that are not CEL identifiers are
// escaped (elasticgpu.io/gpu-core -> elasticgpu__dot__io__slash__gpu__dash__core),
// while the keys of a map (additionalProperties) stay as they are.
import { celMap, run } from "@bufbuild/cel";

// As in match_eval.mjs: a map entry whose value is null is present.
const nativeMap = Object.getPrototypeOf(celMap(new Map()));
nativeMap.has = function has(key) {
  return (typeof key === "string" && this._map.has(key)) || this.get(key) !== undefined;
};

const KEYWORDS = new Set(["true", "false", "null", "in", "as", "break", "const", "continue",
  "else", "for", "function", "if", "import", "let", "loop", "package", "namespace", "return",
  "var", "void", "while"]);

function escape(name) {
  if (KEYWORDS.has(name)) return `__${name}__`;
  if (/^[A-Za-z_][A-Za-z0-9_]*$/.test(name) && !name.includes("__")) return name;
  return name.replace(/__/g, "__underscores__").replace(/\./g, "__dot__")
    .replace(/-/g, "__dash__").replace(/\//g, "__slash__");
}

function toCel(schema, v) {
  if (v === null || v === undefined) return v;
  if (Array.isArray(v)) return v.map((x) => toCel(schema && schema.items, x));
  if (typeof v === "object") {
    if (schema && schema.properties)
      return new Map(Object.entries(v).map(([k, x]) => [escape(k), toCel(schema.properties[k], x)]));
    const sub = schema && typeof schema.additionalProperties === "object"
      ? schema.additionalProperties : null;
    return new Map(Object.entries(v).map(([k, x]) => [k, toCel(sub, x)]));
  }
  if (typeof v === "number") {
    const t = schema && schema.type;
    if (t === "number") return v; // a double, also when whole
    if (Number.isInteger(v)) return BigInt(v);
  }
  return v;
}

function isError(v) {
  return v instanceof Error || (v !== null && typeof v === "object" && "_exprId" in v);
}

function check(schema, value, old, path, errors) {
  if (!schema || value === undefined || value === null) return;
  for (const rule of schema["x-kubernetes-validations"] || []) {
    const transition = /\boldSelf\b/.test(rule.rule);
    if (transition && (old === undefined || old === null)) continue;
    const vars = { self: toCel(schema, value) };
    if (transition) vars.oldSelf = toCel(schema, old);
    let r;
    try {
      r = run(rule.rule, vars);
    } catch (e) {
      r = e;
    }
    if (isError(r) || r !== true)
      errors.push({ path, rule: rule.rule,
        message: isError(r) ? `${rule.message || rule.rule} (error: ${r.message})`
          : rule.message || rule.rule });
  }
  if (Array.isArray(value)) {
    value.forEach((x, i) => check(schema.items, x, undefined, `${path}[${i}]`, errors));
  } else if (typeof value === "object") {
    for (const [k, x] of Object.entries(value)) {
      const sub = schema.properties ? schema.properties[k]
        : typeof schema.additionalProperties === "object" ? schema.additionalProperties : null;
      const o = old !== null && typeof old === "object" && !Array.isArray(old) ? old[k] : undefined;
      check(sub, x, o, path ? `${path}.${k}` : k, errors);
    }
  }
}

let text = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (d) => (text += d));
process.stdin.on("end", () => {
  const input = JSON.parse(text);
  const out = input.cases.map((c) => {
    const errors = [];
    check(input.schema, c.object, c.oldObject, "", errors);
    return { name: c.name, errors };
  });
  process.stdout.write(JSON.stringify(out));
});
