"""`make data`: fetches the trace with curl, and without the network says
exactly what to fetch and from where. Runs against file:// URLs so the test
never leaves the machine."""
import subprocess

import pytest

from conftest import ROOT, trace_dir


def make_data(tmp_path, url):
    return subprocess.run(["make", "-s", "--no-print-directory", "data", f"TRACE_URL={url}",
                           f"DATA_DIR={tmp_path / 'openb'}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_unreachable_source_says_what_to_fetch(tmp_path):
    p = make_data(tmp_path, "file:///nonexistent/egpu-trace")
    assert p.returncode != 0
    assert "cannot download openb_node_list_gpu_node.csv" in p.stderr
    assert "https://github.com/alibaba/clusterdata" in p.stderr
    assert "cluster-trace-gpu-v2023/csv" in p.stderr
    assert "openb_pod_list_default.csv" in p.stderr
    assert not list((tmp_path / "openb").glob("*.part"))


@pytest.mark.skipif(trace_dir() is None, reason="openb trace not present")
def test_fetches_every_file(tmp_path):
    p = make_data(tmp_path, f"file://{trace_dir()}")
    assert p.returncode == 0, p.stderr
    for f in ("openb_node_list_gpu_node.csv", "openb_pod_list_default.csv",
              "openb_pod_list_multigpu20.csv"):
        assert (tmp_path / "openb" / f).read_bytes() == (trace_dir() / f).read_bytes()
