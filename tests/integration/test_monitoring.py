"""deploy/monitoring: the Grafana dashboard, the ServiceMonitors and PodMonitor, and the
Helm chart's monitoring option.

- Every PromQL expression of the dashboard (the panels' targets, those of collapsed rows
  included, and the template variables' label_values queries) names only metrics the
  binaries export: egpu-scheduler and egpu-controller against the test API server,
  egpu-webhook with an openssl-made certificate, egpu-agent with fake cards and the fake
  kubelet, each scraped on /metrics, where every registered family is listed by its
  # TYPE line even before it has a sample (a histogram as its _bucket, _sum and _count
  series). The same names are also checked against the families the sources register
  (egpu_metric_counter/gauge/histogram, or a row of an egpu_service_metrics_new table),
  which needs no binary. Every function the expressions call is a PromQL function. Of
  the agent series the panels outside the "DRA nodes" row use, DRA mode's agent
  (src/agent/dra_mode.c) registers only the card counts; the row's panels use only its
  own families (per card: shares, cores and memory allocated, slice state; the slice's
  publishes, deletions and republishes; the DRAPlugin calls and errors by reason), each
  listed on /metrics by egpu-agent --mode dra itself (against the test API server), and
  its families in no panel are named in the operator guide's section on what the
  dashboard shows for DRA nodes.
- The dashboard is valid JSON of a current Grafana schema, with unique panel ids, a
  `datasource` template variable of type prometheus that every panel and target uses,
  no Grafana variable that is not defined, panels that do not overlap, and a description
  on each; deploy/monitoring/README.md names every panel.
- `kubectl kustomize deploy/monitoring` renders ServiceMonitors whose selectors match
  exactly one Service of the base each, on a port that Service has and whose target port
  the selected pods name; a PodMonitor for each agent DaemonSet (egpu-agent, and
  egpu-agent-dra of DRA mode) whose selector matches that DaemonSet's pods only and names
  their metrics port; together they cover every metrics port of the base. The ConfigMap
  carries the dashboard and the sidecar's label. The base holds no monitoring.coreos.com
  object (it must apply without the Prometheus Operator).
- The Helm chart with monitoring.enabled=true renders the base plus deploy/monitoring
  (Helm's documented differences aside), its dashboard copy is deploy/monitoring's byte
  for byte, each component's monitor goes with the component, and the monitoring values
  change what they should.

kubectl and helm come from tools/bin (`make deps`), else PATH; openssl from PATH. A
missing one skips the tests that need it, except under CI=true, where it fails them.
Every expression also parsed with promtool (Debian's prometheus 2.42, by hand; the package
is not a dependency: a test that skips without it would hide a missing install).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import urllib.request

import pytest
import yaml

from conftest import ROOT, tool
from test_helm import by_key, diff, helm_template, kustomize, run, strip_helm
from test_scheduler import api, sched  # noqa: F401 (the test API server, egpu-scheduler)
from test_controller import ctl  # noqa: F401 (egpu-controller)
from test_webhook import Webhook, cert  # noqa: F401 (egpu-webhook and its certificate)
from test_agent import Agent  # also puts tests/kubelet on sys.path
from fake_kubelet import FakeKubelet  # noqa: E402
from test_agent_dra import DraAgent  # noqa: E402 (egpu-agent --mode dra)

DEPLOY = ROOT / "deploy"
MONITORING = DEPLOY / "monitoring"
DASHBOARD = MONITORING / "elastic-gpu.json"
CHART = DEPLOY / "helm" / "elastic-gpu"
NS = "elastic-gpu-system"
DS = {"type": "prometheus", "uid": "${datasource}"}
MONITOR_KINDS = {"ServiceMonitor", "PodMonitor"}
WORKLOADS = {"Deployment", "DaemonSet", "StatefulSet"}

# --- PromQL -------------------------------------------------------------------

# Prometheus 2.x/3.x functions and aggregation operators (prometheus.io/docs/prometheus/
# latest/querying/functions, .../operators).
FUNCTIONS = {
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
    "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh",
    "count_over_time", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "deg",
    "delta", "deriv", "exp", "floor", "histogram_avg", "histogram_count",
    "histogram_fraction", "histogram_quantile", "histogram_stddev", "histogram_stdvar",
    "histogram_sum", "holt_winters", "double_exponential_smoothing", "hour", "idelta",
    "increase", "irate", "label_join", "label_replace", "last_over_time", "ln", "log10",
    "log2", "mad_over_time", "max_over_time", "min_over_time", "minute", "month", "pi",
    "predict_linear", "present_over_time", "quantile_over_time", "rad", "rate", "resets",
    "round", "scalar", "sgn", "sin", "sinh", "sort", "sort_by_label", "sort_by_label_desc",
    "sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time", "sum_over_time", "tan",
    "tanh", "time", "timestamp", "vector", "year",
}
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
                "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
            "group_right", "offset", "bool", "atan2", "inf", "nan"}
# Grafana's own variables (grafana.com/docs/grafana/latest/dashboards/variables/
# add-template-variables/#global-variables).
GRAFANA_VARS = {"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s",
                "__range_ms", "__dashboard", "__from", "__to"}

STRING = r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\''
SELECTOR = re.compile(r"\{(?:[^{}\"']|" + STRING + r")*\}")
MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*(" + STRING + ")")
IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def promql_names(expr):
    """(metric names, functions called) of a PromQL expression, Grafana variables allowed.

    A small tokenizer, not a parser: selectors' label matchers ({...}, where only
    __name__ can name a metric), strings, ranges ([...]), the label lists of by, without,
    on, ignoring, group_left and group_right, and numbers are taken out; what is left is
    identifiers, each a keyword, a function (or aggregation) when a parenthesis or by/without
    follows, else a metric name."""
    assert expr.count("(") == expr.count(")"), f"unbalanced parentheses: {expr}"
    names, funcs = set(), set()
    for sel in SELECTOR.findall(expr):
        body = sel[1:-1]
        rest = MATCHER.sub("", body)
        assert re.fullmatch(r"[\s,]*", rest), f"cannot read the matchers {sel!r} of {expr}"
        for label, op, value in MATCHER.findall(body):
            if label != "__name__":
                continue
            assert op in ("=", "=~"), f"__name__{op} in {expr}"
            for n in value[1:-1].split("|"):
                assert IDENT.fullmatch(n), f"__name__ {value} is no list of names: {expr}"
                names.add(n)
    e = SELECTOR.sub(" ", expr)
    e = re.sub(STRING, '""', e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r" \1 ", e)
    e = re.sub(r"\boffset\s+-?[\w$]+", " ", e)
    e = re.sub(r"\$\{?\w+\}?", " 1 ", e)
    e = re.sub(r"(?<![\w:])\d+(\.\d+)?([eE][+-]?\d+)?", " ", e)
    for m in IDENT.finditer(e):
        ident, after = m.group(0), e[m.end():].lstrip()
        if ident in KEYWORDS:
            continue
        if after.startswith("(") or (ident in AGGREGATIONS
                                     and re.match(r"(by|without)\b", after)):
            funcs.add(ident)
        else:
            names.add(ident)
    return names, funcs


def test_promql_names_reads_what_it_should():
    n, f = promql_names('histogram_quantile(0.99, sum by (le, path) (rate('
                        'egpu_http_request_duration_seconds_bucket{path=~".*/(filter|bind)"}'
                        '[$__rate_interval])))')
    assert n == {"egpu_http_request_duration_seconds_bucket"}
    assert f == {"histogram_quantile", "sum", "rate"}
    n, f = promql_names('max by (node) (a{node=~"$node"}) / on (node) group_left (gpu) '
                        '(100 * max without (x) (b)) and on (instance) (c == 1) or vector(0)')
    assert n == {"a", "b", "c"} and f == {"max", "vector"}
    n, _ = promql_names('{__name__=~"x_total|y"} - time() offset 5m > bool 1e3')
    assert n == {"x_total", "y"}
    n, f = promql_names('count((g > 0) < 100) - sum(rate(h[5m] offset 1h))')
    assert n == {"g", "h"} and f == {"count", "sum", "rate"}


# --- the dashboard ------------------------------------------------------------

@pytest.fixture(scope="module")
def dashboard():
    return json.loads(DASHBOARD.read_text())


def all_panels(dash):
    """Every panel, those inside collapsed rows included, each with its group (None: top
    level; else the id of the collapsed row holding it)."""
    out = []
    for p in dash["panels"]:
        out.append((p, None))
        for c in p.get("panels") or []:
            out.append((c, p["id"]))
    return out


def queries(dash):
    """(where, PromQL) of every target and of every query variable's label_values."""
    out = []
    for p, _ in all_panels(dash):
        for t in p.get("targets") or []:
            out.append((f"panel {p['id']} {p['title']!r} {t.get('refId')}", t["expr"]))
    for v in dash["templating"]["list"]:
        if v["type"] != "query":
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"\s*label_values\((.*),\s*([A-Za-z_]\w*)\s*\)\s*", q)
        assert m, f"variable {v['name']}: {q}"
        out.append((f"variable {v['name']}", m.group(1)))
    return out


def dashboard_metrics(dash):
    out = {}
    for where, expr in queries(dash):
        names, funcs = promql_names(expr)
        unknown = funcs - FUNCTIONS - AGGREGATIONS
        assert not unknown, f"{where}: no PromQL function {sorted(unknown)} in {expr}"
        assert names, f"{where}: no metric in {expr}"
        for n in names:
            out.setdefault(n, []).append(where)
    return out


def test_dashboard_is_valid_grafana_json(dashboard):
    d = dashboard
    assert d["schemaVersion"] >= 39 and d["uid"] and d["title"] and d["description"]
    ids = [p["id"] for p, _ in all_panels(d)]
    assert all(isinstance(i, int) for i in ids) and len(ids) == len(set(ids)), ids
    var = {v["name"]: v for v in d["templating"]["list"]}
    assert var["datasource"]["type"] == "datasource" and var["datasource"]["query"] == "prometheus"
    assert {"node", "namespace"} <= set(var)
    for v in var.values():
        if v["type"] == "query":
            assert v["datasource"] == DS, v["name"]
    defined = set(var) | GRAFANA_VARS
    for where, expr in queries(d):
        used = set(re.findall(r"\$\{?(\w+)", expr))
        assert used <= defined, f"{where}: undefined {sorted(used - defined)}"
    titles = set()
    for p, _ in all_panels(d):
        assert p["title"] and p.get("description"), p["id"]
        if p["type"] == "row":
            assert p["collapsed"] == bool(p["panels"]), p["title"]
            continue
        assert p["title"] not in titles, f"two panels called {p['title']!r}"
        titles.add(p["title"])
        assert p["datasource"] == DS, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == DS and t["expr"].strip(), p["title"]


def test_panels_do_not_overlap(dashboard):
    groups = {}
    for p, group in all_panels(dashboard):
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        groups.setdefault(group, []).append(p)
    for ps in groups.values():
        cells = {}
        for p in ps:
            g = p["gridPos"]
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                    cells[(x, y)] = p["title"]


def test_readme_names_every_panel(dashboard):
    text = (MONITORING / "README.md").read_text()
    missing = [p["title"] for p, _ in all_panels(dashboard) if p["title"] not in text]
    assert not missing, f"deploy/monitoring/README.md does not describe {missing}"


# --- what the binaries export -------------------------------------------------

REGISTER = re.compile(r'egpu_metric_(counter|gauge|histogram)\(\s*[\w>.-]+\s*,\s*"(\w+)"')
# A row of an egpu_service_metrics_new table (src/net/service.c): {EGPU_SERVICE_GAUGE, "name", ...}
REGISTER_TABLE = re.compile(r'\{\s*EGPU_SERVICE_(COUNTER|GAUGE|HISTOGRAM)\s*,\s*"(\w+)"')


def exposed(families):
    """The series names a Prometheus can select, from {family: type}."""
    out = set()
    for name, typ in families.items():
        out |= {name + s for s in ("_bucket", "_sum", "_count")} if typ == "histogram" else {name}
    return out


def source_families():
    fams = {}
    for f in sorted((ROOT / "src").rglob("*.c")):
        text = f.read_text()
        for typ, name in REGISTER.findall(text):
            fams[name] = typ
        for typ, name in REGISTER_TABLE.findall(text):
            fams[name] = typ.lower()
    return fams


def scraped_families(text):
    fams = {}
    for line in text.splitlines():
        m = re.fullmatch(r"# TYPE (\S+) (counter|gauge|histogram|summary|untyped)", line)
        if m:
            fams[m.group(1)] = m.group(2)
    return fams


def test_dashboard_metrics_are_registered_in_the_source(dashboard):
    fams = source_families()
    assert len(fams) > 40, "the registration pattern found too few families"
    want = dashboard_metrics(dashboard)
    missing = {n: w for n, w in want.items() if n not in exposed(fams)}
    assert not missing, f"no source registers {missing}"


DRA_ROW = "DRA nodes"
# What an operator must see of DRA nodes (issue 26, "Operate it"), each in a panel of the row.
DRA_ROW_NEEDS = {
    "egpu_agent_dra_gpu_shares", "egpu_agent_dra_gpu_allocated_core_percent",
    "egpu_agent_dra_gpu_allocated_memory_mib", "egpu_agent_dra_gpu_slice_state",
    "egpu_agent_dra_slice_publishes_total", "egpu_agent_dra_slice_republishes_total",
    "egpu_agent_dra_slice_deletions_total", "egpu_agent_dra_requests_total",
    "egpu_agent_dra_errors_total",
}


def row_of(dash):
    """{panel id: title of the row it is under} (top-level panels follow their row; a
    collapsed row holds its own)."""
    out, row = {}, None
    for p in dash["panels"]:
        if p["type"] == "row":
            row = p["title"]
            for c in p.get("panels") or []:
                out[c["id"]] = row
            continue
        out[p["id"]] = row
    return out


def dra_families():
    text = (ROOT / "src" / "agent" / "dra_mode.c").read_text()
    return {name for _, name in REGISTER_TABLE.findall(text) + REGISTER.findall(text)}


def split_by_dra_row(dash):
    """(metrics of the DRA row's panels, metrics of every other panel and variable)."""
    rows = row_of(dash)
    inside, outside = set(), set()
    for p, _ in all_panels(dash):
        if p["type"] == "row":
            continue
        for t in p.get("targets") or []:
            (inside if rows[p["id"]] == DRA_ROW else outside).update(promql_names(t["expr"])[0])
    for where, expr in queries(dash):
        if where.startswith("variable "):
            outside.update(promql_names(expr)[0])
    return inside, outside


def test_dra_nodes_row(dashboard):
    """What docs/operator-guide.md ("What the dashboard shows for DRA nodes") and
    deploy/monitoring/README.md say: outside the "DRA nodes" row, egpu-agent --mode dra (the
    families src/agent/dra_mode.c registers, scraped by the PodMonitor egpu-agent-dra) feeds
    only the card counts; the row's panels use only its own families, all of DRA_ROW_NEEDS
    among them; the guide names its families that no panel uses."""
    dra = dra_families()
    assert "egpu_agent_dra_registered" in dra, "the registration pattern found no DRA family"
    assert DRA_ROW in {p["title"] for p in dashboard["panels"] if p["type"] == "row"}
    inside, outside = split_by_dra_row(dashboard)
    agent_outside = {n for n in outside if n.startswith("egpu_agent_")}
    assert agent_outside & dra == {"egpu_agent_gpus", "egpu_agent_gpus_healthy"}, \
        agent_outside & dra
    assert not {n for n in agent_outside if n.startswith("egpu_agent_dra_")}, agent_outside
    assert inside <= dra, f"the DRA row uses what the DRA agent does not register: {inside - dra}"
    assert inside <= {n for n in dra if n.startswith("egpu_agent_dra_")}, inside
    assert DRA_ROW_NEEDS <= inside, f"the DRA row shows no {sorted(DRA_ROW_NEEDS - inside)}"
    guide = (ROOT / "docs" / "operator-guide.md").read_text()
    section = guide.split("### What the dashboard shows for DRA nodes", 1)[1].split("\n## ", 1)[0]
    for name in sorted(dra):
        assert re.search(f"`{name}[`{{]", section), \
            f"the operator guide's DRA dashboard section names no {name}"
    agent_doc = (ROOT / "docs" / "agent.md").read_text()
    for name in sorted(dra):
        assert f"`{name}`" in agent_doc, f"docs/agent.md does not describe {name}"


def test_dashboard_metrics_are_exported_by_the_binaries(  # noqa: F811 (fixtures imported)
        dashboard, build_dir, api, sched, ctl, cert, tmp_path):
    """Scrape each binary's /metrics: the families it lists, samples or not."""
    def get(url):
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            assert r.status == 200
            return r.read().decode()

    scraped = {}
    scraped["egpu-scheduler"] = get(sched().health_url)
    scraped["egpu-controller"] = get(ctl().url)
    w = Webhook(build_dir, api.kubeconfig, cert, tmp_path)
    try:
        scraped["egpu-webhook"] = get(w.health)
    finally:
        w.stop(signal.SIGKILL)
    agent_exe = build_dir / "src/agent/egpu-agent"
    assert agent_exe.exists(), f"{agent_exe} not built"
    base = tempfile.mkdtemp(prefix="egpu-mon-")  # unix socket paths stay short
    kubelet = FakeKubelet(os.path.join(base, "device-plugins")).start()
    agent = None
    try:
        agent = Agent(str(agent_exe), base)
        scraped["egpu-agent"] = get(agent.url)
    finally:
        if agent is not None:
            agent.stop()
        kubelet.stop()
        shutil.rmtree(base, ignore_errors=True)
    # egpu-agent --mode dra, as the PodMonitor egpu-agent-dra scrapes it (its families are
    # listed from the start, before the node has a slice or a claim).
    dra_agent = DraAgent(str(agent_exe), api.kubeconfig)
    try:
        scraped["egpu-agent-dra"] = get(dra_agent.url)
    finally:
        assert dra_agent.stop() == 0, dra_agent.text()
        shutil.rmtree(dra_agent.base, ignore_errors=True)
    inside, _ = split_by_dra_row(dashboard)
    dra_exported = exposed(scraped_families(scraped["egpu-agent-dra"]))
    assert inside and inside <= dra_exported, \
        f"the DRA row uses what egpu-agent --mode dra does not list: {inside - dra_exported}"

    fams = {}
    for binary, text in scraped.items():
        f = scraped_families(text)
        prefix = "egpu_" + binary.split("-")[1] + "_"
        assert any(n.startswith(prefix) for n in f), f"{binary} lists no {prefix}* family"
        fams.update(f)
    # the source's registrations are what the binaries list (lazily registered ones, such
    # as the TLS families of a server without a certificate, aside)
    src = source_families()
    assert set(fams) <= set(src), sorted(set(fams) - set(src))
    assert all(src[n] == t for n, t in fams.items())
    want = dashboard_metrics(dashboard)
    missing = {n: w for n, w in want.items() if n not in exposed(fams)}
    assert not missing, f"no binary exports {missing}"


# --- kustomize ----------------------------------------------------------------

@pytest.fixture(scope="module")
def base():
    return kustomize(DEPLOY)


@pytest.fixture(scope="module")
def monitoring():
    return kustomize(MONITORING)


def matches(selector, labels):
    return bool(selector) and all((labels or {}).get(k) == v for k, v in selector.items())


def workload_ports(w):
    return {p["name"]: p["containerPort"]
            for c in w["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])
            if "name" in p}


def test_base_needs_no_prometheus_operator(base):
    assert not [o for o in base if o["apiVersion"].startswith("monitoring.coreos.com/")]
    kz = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert not [r for r in kz["resources"] if "monitoring" in r]


def test_monitors_select_the_base_metrics_ports(base, monitoring):
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in monitoring)
    assert kinds == [("ConfigMap", "elastic-gpu-dashboard"), ("PodMonitor", "egpu-agent"),
                     ("PodMonitor", "egpu-agent-dra"), ("ServiceMonitor", "egpu-controller"), ("ServiceMonitor", "egpu-scheduler"),
                     ("ServiceMonitor", "egpu-webhook")]
    for o in monitoring:
        assert o["metadata"]["namespace"] == NS
        assert o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "elastic-gpu"
        if o["kind"] in MONITOR_KINDS:
            assert o["apiVersion"] == "monitoring.coreos.com/v1"
    services = [o for o in base if o["kind"] == "Service"]
    workloads = [o for o in base if o["kind"] in WORKLOADS]
    scraped = set()  # (workload name, container port name)
    for sm in (o for o in monitoring if o["kind"] == "ServiceMonitor"):
        spec = sm["spec"]
        assert "namespaceSelector" not in spec  # its own namespace, the base's
        sel = spec["selector"]["matchLabels"]
        svcs = [s for s in services if s["metadata"]["namespace"] == sm["metadata"]["namespace"]
                and matches(sel, s["metadata"].get("labels"))]
        assert len(svcs) == 1, (sm["metadata"]["name"], [s["metadata"]["name"] for s in svcs])
        svc = svcs[0]
        pods = [w for w in workloads if matches(svc["spec"]["selector"],
                                                w["spec"]["template"]["metadata"]["labels"])]
        assert len(pods) == 1, svc["metadata"]["name"]
        assert spec["jobLabel"] in svc["metadata"]["labels"]
        for ep in spec["endpoints"]:
            port = next((p for p in svc["spec"]["ports"] if p.get("name") == ep["port"]), None)
            assert port is not None, f"{svc['metadata']['name']} has no port {ep['port']}"
            target = port["targetPort"]
            names = workload_ports(pods[0])
            assert target in names or target in names.values(), (svc["metadata"]["name"], target)
            assert ep["path"] == "/metrics" and ep["scheme"] == "http"
            scraped.add((pods[0]["metadata"]["name"],
                         target if isinstance(target, str) else
                         next(n for n, v in names.items() if v == target)))
    for pm in (o for o in monitoring if o["kind"] == "PodMonitor"):
        spec = pm["spec"]
        sel = spec["selector"]["matchLabels"]
        pods = [w for w in workloads if w["metadata"]["namespace"] == pm["metadata"]["namespace"]
                and matches(sel, w["spec"]["template"]["metadata"]["labels"])]
        # each agent DaemonSet (device-plugin and DRA mode) by its own monitor
        assert [(w["kind"], w["metadata"]["name"]) for w in pods] == \
            [("DaemonSet", pm["metadata"]["name"])], pm["metadata"]["name"]
        assert spec["jobLabel"] in pods[0]["spec"]["template"]["metadata"]["labels"]
        for ep in spec["podMetricsEndpoints"]:
            assert ep["port"] in workload_ports(pods[0]), ep["port"]
            assert ep["path"] == "/metrics" and ep["scheme"] == "http"
            assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node",
                    "action": "replace"} in ep["relabelings"]
            scraped.add((pods[0]["metadata"]["name"], ep["port"]))
    # every metrics port of the base is scraped, once
    want = {(w["metadata"]["name"], n) for w in workloads for n in workload_ports(w)
            if n == "metrics"}
    assert want == scraped == {("egpu-scheduler", "metrics"), ("egpu-webhook", "metrics"),
                               ("egpu-controller", "metrics"), ("egpu-agent", "metrics"),
                               ("egpu-agent-dra", "metrics")}


def test_dashboard_configmap(monitoring):
    cm = next(o for o in monitoring if o["kind"] == "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["data"] == {"elastic-gpu.json": DASHBOARD.read_text()}
    # `kubectl apply` (client side) copies the object into the last-applied annotation, and a
    # ConfigMap's annotations may hold 256 KiB in all: keep the dashboard well under half.
    assert len(DASHBOARD.read_bytes()) < 128 * 1024


# --- Helm ---------------------------------------------------------------------

def test_chart_dashboard_is_deploy_monitorings():
    assert (CHART / "dashboards" / "elastic-gpu.json").read_bytes() == DASHBOARD.read_bytes(), \
        "deploy/helm/elastic-gpu/dashboards/elastic-gpu.json differs: copy it again"


def test_chart_with_monitoring_renders_base_and_monitoring(base, monitoring):
    chart = helm_template("monitoring.enabled=true")
    want = {k: strip_helm(o) for k, o in by_key(base + monitoring).items()}
    got = {k: strip_helm(o) for k, o in by_key(chart).items()}
    assert sorted(got, key=str) == sorted(want, key=str)
    for k in want:
        assert got[k] == want[k], f"{k} differs at {diff(want[k], got[k])}"
    assert not [o for o in helm_template() if o["kind"] in MONITOR_KINDS
                or o["metadata"]["name"] == "elastic-gpu-dashboard"]


def monitoring_objects(*sets):
    return {(o["kind"], o["metadata"]["name"]): o for o in helm_template(*sets, crds=False)
            if o["kind"] in MONITOR_KINDS or o["metadata"]["name"] == "elastic-gpu-dashboard"}


@pytest.mark.parametrize("component,monitor", [
    ("scheduler", ("ServiceMonitor", "egpu-scheduler")),
    ("webhook", ("ServiceMonitor", "egpu-webhook")),
    ("controller", ("ServiceMonitor", "egpu-controller")),
    ("agent", ("PodMonitor", "egpu-agent")),
    ("agentDra", ("PodMonitor", "egpu-agent-dra")),
])
def test_a_components_monitor_goes_with_it(component, monitor):
    every = set(monitoring_objects("monitoring.enabled=true"))
    assert set(monitoring_objects("monitoring.enabled=true", f"{component}.enabled=false")) == \
        every - {monitor}


def test_monitoring_values():
    on = monitoring_objects("monitoring.enabled=true")
    dash = ("ConfigMap", "elastic-gpu-dashboard")
    assert set(monitoring_objects("monitoring.enabled=true",
                                  "monitoring.serviceMonitor.enabled=false")) == {dash}
    assert set(monitoring_objects("monitoring.enabled=true",
                                  "monitoring.dashboard.enabled=false")) == set(on) - {dash}
    after = monitoring_objects("monitoring.enabled=true", "monitoring.serviceMonitor.interval=15s",
                               "monitoring.serviceMonitor.labels.release=prom",
                               "monitoring.dashboard.labels.grafana_dashboard=null",
                               "monitoring.dashboard.labels.dashboards=egpu")
    for k, o in on.items():
        d = diff(o, after[k])
        if k == dash:
            assert d == [".metadata.labels.dashboards", ".metadata.labels.grafana_dashboard"]
            continue
        eps = "endpoints" if k[0] == "ServiceMonitor" else "podMetricsEndpoints"
        assert d == [".metadata.labels.release", f".spec.{eps}[0].interval"], (k, d)
        assert after[k]["metadata"]["labels"]["release"] == "prom"
        assert after[k]["spec"][eps][0]["interval"] == "15s"
    moved = monitoring_objects("monitoring.enabled=true", "namespace.name=gpu-team")
    assert {o["metadata"]["namespace"] for o in moved.values()} == {"gpu-team"}


def test_helm_lint_strict_with_monitoring():
    run([tool("helm"), "lint", "--strict", str(CHART), "--set", "monitoring.enabled=true",
         "--set", "monitoring.serviceMonitor.labels.release=prom"])
