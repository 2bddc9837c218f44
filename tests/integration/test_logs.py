"""Logs and --v are the same in every server binary (egpu-scheduler,
egpu-agent, egpu-webhook, egpu-controller): src/net/log.c writes every line
and turns --v and --log-level into a level, src/net/cli.c parses them for
all four, src/net/service.c logs the start. tests/unit/test_log.c holds what
each level shows and the escaping; here each binary is run as shipped:

- its --help has the same --v and --log-level entries as the others;
- --v N, --log-level NAME and EGPU_V give the same level in each (the
  "starting version=... v=N" line reports it), a flag wins over EGPU_V,
  and the last of --v and --log-level wins;
- at --v 0 the start is shown, at --log-level error only the error;
- every line it writes to stderr is one klog line naming the binary;
- a bad --v or EGPU_V exits 2 with the same message in each.

Each run is given a kubeconfig that does not exist, so it gets past its
flags, logs its start, fails to start and exits 1; no API server is needed.
"""
import os
import re
import subprocess

import pytest

VERSION = "0.1.0"  # EGPU_VERSION (include/egpu/cli.h)
MISSING = "/nonexistent/kubeconfig"
# binary -> (path in the build, what else it needs to get to its start)
BINARIES = {
    "egpu-scheduler": ("src/scheduler/egpu-scheduler", []),
    "egpu-agent": ("src/agent/egpu-agent", ["--node-name", "n1", "--fake-gpus", "1xA100-80GB"]),
    "egpu-webhook": ("src/webhook/egpu-webhook",
                     ["--tls-cert", "/nonexistent/tls.crt", "--tls-key", "/nonexistent/tls.key"]),
    "egpu-controller": ("src/controller/egpu-controller", []),
}
# klog's header (k8s.io/klog: Lmmdd hh:mm:ss.uuuuuu threadid file:line]), then the binary
KLOG = r"[EWI](0[1-9]|1[0-2])[0-3]\d [0-2]\d:[0-5]\d:[0-5]\d\.\d{6} [ \d]{6}\d [\w.-]+\.c:\d+\] "


def exe(build_dir, name):
    path = build_dir / BINARIES[name][0]
    if not path.exists():
        pytest.fail(f"{path} not built: run `make build` first")
    return str(path)


def run(build_dir, name, args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("EGPU_")}
    env.update(env_extra or {})
    return subprocess.run([exe(build_dir, name), *BINARIES[name][1], *args], capture_output=True,
                          text=True, timeout=30, env=env)


def log_help(text):
    """The --v and --log-level entries of a --help, whitespace collapsed."""
    m = re.search(r"^  --v N\n(.*?)^  --log-level L\n(.*?)(?=^  -)", text, re.M | re.S)
    assert m, "no --v N / --log-level L entries in --help"
    assert all(len(line) <= 80 for line in m.group(0).splitlines()), m.group(0)
    return " ".join(m.group(0).split())


def test_help_is_the_same_everywhere(build_dir):
    helps = {}
    for name in BINARIES:
        r = subprocess.run([exe(build_dir, name), "--help"], capture_output=True, text=True,
                           timeout=10)
        assert r.returncode == 0, r.stderr
        helps[name] = log_help(r.stdout)
    assert len(set(helps.values())) == 1, helps
    text = helps["egpu-scheduler"]
    for words in ("0..10", "EGPU_V", "default 2", "EGPU_LOG_LEVEL", "0:", "2:", "4:",
                  "(= --v 2)", "(= --v 4)"):
        assert words in text, words


# (flags, EGPU_* variables) -> the verbosity the binary runs at
LEVELS = [
    ([], {}, 2),
    (["--v=0"], {}, 0),
    (["--v", "4"], {}, 4),
    (["--v=10"], {}, 10),
    (["--log-level", "info"], {}, 2),
    (["--log-level", "debug"], {}, 4),
    ([], {"EGPU_V": "3"}, 3),
    (["--v", "1"], {"EGPU_V": "3"}, 1),
    (["--v", "0", "--log-level", "debug"], {}, 4),
    (["--log-level", "debug", "--v", "0"], {}, 0),
    ([], {"EGPU_LOG_LEVEL": "debug"}, 4),
]


@pytest.mark.parametrize("name", sorted(BINARIES))
def test_verbosity_means_the_same(build_dir, name):
    for args, env, want in LEVELS:
        r = run(build_dir, name, [*args, "--kubeconfig", MISSING], env)
        assert r.returncode == 1, (args, env, r.returncode, r.stderr)
        lines = r.stderr.splitlines()
        for line in lines:
            assert re.match(KLOG + re.escape(name) + r": \S", line), (args, line)
        assert re.match(r"I.* service\.c:\d+\] " + re.escape(name) +
                        rf": starting version={re.escape(VERSION)} v={want}$", lines[0]), \
            (args, env, lines[0])
        assert lines[-1].startswith("E") and f"start failed: kubeconfig {MISSING}" in lines[-1], \
            (args, lines[-1])


@pytest.mark.parametrize("name", sorted(BINARIES))
def test_error_level_hides_the_start(build_dir, name):
    for level in ("error", "warn"):
        r = run(build_dir, name, ["--log-level", level, "--kubeconfig", MISSING])
        assert r.returncode == 1, r.stderr
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("E"), (level, lines)
        assert re.match(KLOG + re.escape(name) + r": start failed: ", lines[0])


@pytest.mark.parametrize("name", sorted(BINARIES))
def test_bad_verbosity_refused_alike(build_dir, name):
    for args, env, who, value in ((["--v", "11"], {}, "--v", "11"),
                                  (["--v=-1"], {}, "--v", "-1"),
                                  (["--v", "debug"], {}, "--v", "debug"),
                                  ([], {"EGPU_V": "4x"}, "EGPU_V", "4x")):
        r = run(build_dir, name, [*args, "--kubeconfig", MISSING], env)
        assert r.returncode == 2, (args, env, r.stderr)
        assert r.stderr == (f'{name}: {who} "{value}": expected a verbosity in 0..10\n'
                            f"Try '{name} --help'.\n"), r.stderr
