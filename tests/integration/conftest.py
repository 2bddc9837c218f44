"""Shared fixtures for the integration tests: where the built binaries and
the trace are. The Makefile sets EGPU_BUILD; by hand it defaults to build/."""
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def build_dir():
    d = pathlib.Path(os.environ.get("EGPU_BUILD", ROOT / "build"))
    if not (d / "egpu-sim").exists():
        pytest.fail(f"{d}/egpu-sim not built: run `make build` first")
    return d


@pytest.fixture(scope="session")
def sim(build_dir):
    return str(build_dir / "egpu-sim")


@pytest.fixture(scope="session")
def fixtures():
    return ROOT / "tests" / "fixtures"


def trace_dir():
    """The openb trace, found the way egpu-sim finds it, or None."""
    for cand in (os.environ.get("EGPU_TRACE_DIR"), ROOT.parent / "shared" / "data" / "openb",
                 ROOT / "data" / "openb"):
        if cand and pathlib.Path(cand, "openb_pod_list_default.csv").exists():
            return pathlib.Path(cand)
    return None
