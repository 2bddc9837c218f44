"""What `make install` puts where, and what each installed binary says it is.

- Every binary CMake builds outside tests/ and bench/ has an install() rule
  (src/*/CMakeLists.txt and CMakeLists.txt), and `make install` is
  `cmake --install` of the build into PREFIX: the binaries, the kubectl
  plugin kubectl-egpu among them, in PREFIX/bin, the interposer in
  PREFIX/lib/elastic-gpu.
- With PREFIX/bin on PATH, `kubectl egpu` runs the installed plugin.
- Every installed binary answers --version with "<name> <version>", the
  version of CMakeLists.txt's project(), and kubectl-egpu's and
  egpu-vcuda-inspect's --help list the flag (both once took it for an unknown
  flag).
- kubectl-egpu with no kubeconfig anywhere names every place it looked, not
  only the in-cluster error.
"""
import os
import re
import subprocess

import pytest

from conftest import ROOT, tool

BINARIES = ["egpu-scheduler", "egpu-agent", "egpu-webhook", "egpu-controller", "egpu-sim",
            "egpu-vcuda-inspect", "kubectl-egpu"]


def cmake_version():
    return re.search(r"project\(elastic_gpu VERSION ([0-9.]+)",
                     (ROOT / "CMakeLists.txt").read_text()).group(1)


def test_every_binary_has_an_install_rule():
    """add_executable outside tests/ and bench/ (and the top level's bench_*)
    <=> install(TARGETS ... RUNTIME)."""
    built, installed = set(), set()
    for f in [ROOT / "CMakeLists.txt", *sorted((ROOT / "src").rglob("CMakeLists.txt"))]:
        text = f.read_text()
        built |= set(re.findall(r"add_executable\(\s*([A-Za-z0-9_-]+)", text))
        installed |= set(re.findall(r"install\(TARGETS\s+([A-Za-z0-9_-]+)\s+RUNTIME", text))
    built = {b for b in built if not b.startswith("bench_")}
    assert built == set(BINARIES), built
    assert installed == built, built - installed


@pytest.fixture(scope="module")
def prefix(build_dir, tmp_path_factory):
    """`make install`'s command, run into a scratch PREFIX."""
    p = tmp_path_factory.mktemp("prefix")
    dry = subprocess.run(["make", "-n", "--no-print-directory", "install", f"PREFIX={p}",
                          f"BUILD={build_dir}"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert dry.returncode == 0, dry.stderr
    cmd = dry.stdout.strip().splitlines()[-1]
    assert cmd == f"cmake --install {build_dir} --prefix {p}", dry.stdout
    r = subprocess.run(["cmake", "--install", str(build_dir), "--prefix", str(p)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return p


def test_make_install_puts_the_binaries_and_the_plugin_in_prefix_bin(prefix):
    assert sorted(os.listdir(prefix / "bin")) == sorted(BINARIES)
    for b in BINARIES:
        assert os.access(prefix / "bin" / b, os.X_OK), b
    assert (prefix / "lib" / "elastic-gpu" / "libegpu-vcuda.so").is_file()


def test_every_installed_binary_answers_version(prefix):
    want = cmake_version()
    for b in BINARIES:
        r = subprocess.run([str(prefix / "bin" / b), "--version"], capture_output=True,
                           text=True, timeout=30)
        assert (r.returncode, r.stdout, r.stderr) == (0, f"{b} {want}\n", ""), b
    for b in ("kubectl-egpu", "egpu-vcuda-inspect"):
        r = subprocess.run([str(prefix / "bin" / b), "--help"], capture_output=True, text=True,
                           timeout=30)
        assert "--version" in r.stdout, b


def test_kubectl_runs_the_installed_plugin(prefix):
    env = {**os.environ, "PATH": f"{prefix / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run([tool("kubectl"), "egpu", "--version"], capture_output=True, text=True,
                       timeout=60, env=env)
    assert (r.returncode, r.stdout) == (0, f"kubectl-egpu {cmake_version()}\n"), r.stderr


def test_no_kubeconfig_names_every_place_tried(prefix, tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")}
    env["HOME"] = str(tmp_path)
    r = subprocess.run([str(prefix / "bin" / "kubectl-egpu"), "inspect"], capture_output=True,
                       text=True, timeout=30, env=env)
    assert (r.returncode, r.stdout) == (1, ""), r.stderr
    assert r.stderr == (
        "kubectl-egpu: no kubeconfig: --kubeconfig not given; $KUBECONFIG not set; "
        f"{tmp_path}/.kube/config: no such file; in-cluster: unable to load in-cluster "
        "configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined\n")
    env["KUBECONFIG"] = f"{tmp_path}/a:{tmp_path}/b"
    r = subprocess.run([str(prefix / "bin" / "kubectl-egpu"), "claims"], capture_output=True,
                       text=True, timeout=30, env=env)
    assert r.returncode == 1
    assert f'$KUBECONFIG "{tmp_path}/a:{tmp_path}/b" names no file that exists; ' in r.stderr, \
        r.stderr
