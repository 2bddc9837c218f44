"""The docs held to the code they describe, where a new user trips.

- README.md's first commands work on a fresh Debian 12, which has no make:
  the line before them names the one package to install first, and the
  section says what ../shared is and where the source comes from.
- README.md's list of what `make demo` writes has as many entries as it says,
  and they are the files egpu-sim writes to --out.
- README.md and the operator guide say that kubectl and helm are in
  tools/bin, and how `make install` puts the binaries and the plugin on PATH
  (the Makefile's target is cmake --install).
- Every reason egpu-controller sets on a claim's or a budget's condition is
  in docs/claims.md or docs/budgets.md, read from src/controller.
- Every quote of the unhealthy-card message in docs/ and README.md is what
  src/core/cards.c writes: "card X (...) takes" for one card, "cards X (...),
  Y (...) take" for several.
"""
import re

from conftest import ROOT


def text(rel):
    return (ROOT / rel).read_text()


def flat(s):
    """s with every run of white space one space (a quote may span lines)."""
    return re.sub(r"\s+", " ", s)


def section(doc, title):
    """The text of the Markdown section headed title, up to the next heading of
    the same or a higher level."""
    m = re.search(rf"^(#+) {re.escape(title)}\n", doc, re.M)
    assert m, title
    body = doc[m.end():]
    end = re.search(rf"^#{{1,{len(m.group(1))}}} ", body, re.M)
    return body[:end.start()] if end else body


def test_readme_first_commands_work_on_a_fresh_debian():
    s = section(text("README.md"), "The two commands")
    before, block, after = re.match(r"(.*?)```sh\n(.*?)```(.*)", s, re.S).groups()
    assert [l.split()[:2] for l in block.strip().splitlines()] == [["make", "demo"],
                                                                    ["make", "check"]]
    # The one package to install first, on the line that introduces them.
    (intro,) = [l for l in before.strip().splitlines() if "fresh Debian 12" in l]
    assert "apt-get install -y make" in intro and "root" in intro, intro
    # make deps installs the rest, make included (build-essential depends on it).
    assert re.search(r'^BUILD_PKGS="build-essential ', text("scripts/deps.sh"), re.M)
    # What ../shared is, and where the source comes from.
    a = flat(after)
    assert "The source is this repository" in a, a
    assert "`../shared` is a folder beside the checkout that is not part of it" in a, a
    assert "alibaba/clusterdata" in a and "make data" in a, a


def test_readme_lists_what_make_demo_writes():
    s = text("README.md")
    m = re.search(r"The run writes (\w+) files to `out/`[^\n]*\n\n((?:- .*\n(?:  .*\n)*)+)", s)
    assert m, "no list of what make demo writes"
    listed = re.findall(r"^- `([^`]+)`", m.group(2), re.M)
    words = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
    assert words[m.group(1)] == len(listed), (m.group(1), listed)
    written = set(re.findall(r'"%s/([a-z_]+\.[a-z]+)"', text("src/sim/main.c")))
    assert set(listed) == written, (listed, written)


def test_docs_say_where_kubectl_helm_and_the_plugin_are():
    readme = flat(section(text("README.md"), "Install"))
    assert "`make deps` puts kubectl and helm in `tools/bin`" in readme, readme
    assert "export PATH=$PWD/tools/bin:$PATH" in readme
    assert "`make install` is `cmake --install build --prefix $(PREFIX)`" in readme
    assert "`kubectl-egpu` into `PREFIX/bin`" in readme
    guide = flat(section(text("docs/operator-guide.md"), "2. The manifests"))
    assert "kubectl 1.35 and helm 4.1 are in `tools/bin` after `make deps`" in guide, guide
    assert "`make install`" in flat(section(text("docs/operator-guide.md"), "7. Check"))
    assert re.search(r"^install: build\n\t@cmake --install \$\(BUILD\) --prefix \$\(PREFIX\)$",
                     text("Makefile"), re.M)


def test_every_condition_reason_is_documented():
    claim = text("src/controller/claim.c")
    reasons = set(re.findall(r'set_cond\([^;]*?,\s*(?:true|false),\s*"([A-Za-z]+)"', claim, re.S))
    reasons |= set(re.findall(r'pending\(x,\s*(?:true|false),\s*"([A-Za-z]+)"', claim))
    assert {"Bound", "ElasticGPULost", "WaitForFirstConsumer"} <= reasons, reasons
    claims_doc = flat(section(text("docs/claims.md"), "ElasticGPUClaim (namespaced, short name "
                                                      "`egpuc`)"))
    for r in sorted(reasons):
        assert f"`{r}`" in claims_doc, f"docs/claims.md does not list the reason {r}"
    budget = text("src/controller/budget.c")
    reasons = set(re.findall(r'egpu_api_condition_set\([^;]*?EGPU_API_COND_\w+,\s*"([A-Za-z]+)"',
                             budget, re.S))
    assert reasons == {"Metered", "InvalidTimeZone"}, reasons
    budgets_doc = flat(text("docs/budgets.md"))
    for r in sorted(reasons):
        assert f"`{r}`" in budgets_doc, f"docs/budgets.md does not list the reason {r}"


def test_unhealthy_card_message_is_quoted_as_written():
    src = text("src/core/cards.c")
    m = re.search(r'snprintf\(why, len, "(card%s %s take%s no new pods; %s)", '
                  r'n > 1 \? "s" : "", note,\s*n > 1 \? "" : "s", rest\);', src)
    assert m, "the unhealthy-card message of src/core/cards.c changed: update this test"
    fmt = m.group(1)
    card = r"[a-z0-9-]+ \([^()`]*\)"
    one = re.escape(fmt % ("", "NOTE", "s", "")).replace("NOTE", card)
    several = re.escape(fmt % ("s", "NOTE", "", "")).replace("NOTE", f"{card}(?:, {card})+")
    quotes = []
    for rel in ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]:
        for q in re.findall(r"`([^`]*no new pods[^`]*)`", flat(text(rel))):
            quotes.append((rel, q))
    assert {rel for rel, _ in quotes} >= {"docs/user-guide.md", "docs/operator-guide.md",
                                          "docs/scheduler.md"}, quotes
    for rel, q in quotes:
        m = re.search(rf"(?:^|: )({several}|{one})", q)
        assert m, f"{rel}: `{q}` is not what src/core/cards.c writes ({fmt})"
