"""Shared test set-up: headless matplotlib, caches in a temporary directory, repo paths."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from helpers import snakemake_in  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _owned_environment(tmp_path_factory):
    """Point every cache at a temporary directory, as the Snakefile does for jobs."""
    from experiments.common import prepare_environment

    saved = dict(os.environ)
    prepare_environment(str(ROOT), str(tmp_path_factory.mktemp("lab-env")))
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(autouse=True)
def _close_figures():
    """Close the figures a test drew (pyplot keeps every open figure alive)."""
    yield
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


@pytest.fixture
def root() -> Path:
    return ROOT


IGNORE = shutil.ignore_patterns(
    ".git", ".venv", "results", "logs", ".snakemake", "__pycache__", ".pytest_cache", ".ruff_cache"
)


@pytest.fixture(scope="session")
def quick_run(tmp_path_factory) -> Path:
    """A temporary copy of the repository after ``snakemake --cores 4 --configfile
    config.quick.yaml --config host=e2e`` (about 3 minutes on 2 CPUs), shared by the
    end-to-end and browser tests."""
    base = tmp_path_factory.mktemp("e2e")
    work = base / "repo"
    shutil.copytree(ROOT, work, ignore=IGNORE)
    home = base / "home"  # an empty HOME, and a bogus DISPLAY: the run must write and draw neither
    home.mkdir()
    before = {p.relative_to(work) for p in work.rglob("*")}
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")} | {"HOME": str(home), "DISPLAY": ":99"}
    proc = snakemake_in(work, "--cores", "4", "--configfile", "config.quick.yaml", "--config", "host=e2e", env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    (base / "written.txt").write_text(
        "\n".join(sorted(str(p) for p in {p.relative_to(work) for p in work.rglob("*")} - before))
    )
    return work
