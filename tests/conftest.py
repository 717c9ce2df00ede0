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
    from experiments.host import prepare_environment

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


#: The fixture experiment package the end-to-end run adds to its checkout (tests/fixtures/nap),
#: and the config section it adds for it: one folder and a config section, nothing else.
FIXTURE_EXPERIMENT = ROOT / "tests" / "fixtures" / "nap"
FIXTURE_CONFIG = (
    "experiments: [workload, gil, convoy, multiprocessing, dataloader, intraop, jit, nap]\n"
    + "nap:\n  sleepers: [1, 2]\n"
)
FIXTURE_FIGURES = ("nap_speedup",)


def e2e_figures() -> list[str]:
    """The figures the end-to-end run draws: those of the experiments in its config's list (the
    fixture's included), then those of the whole run."""
    import yaml

    from analysis.figures import HOST_FIGURES
    from experiments import registry

    ran = yaml.safe_load(FIXTURE_CONFIG)["experiments"]
    found = registry.experiments()
    return [f for name in ran if name in found for f in found[name].spec.all_figures] + [
        *FIXTURE_FIGURES,
        *HOST_FIGURES,
    ]


#: The end-to-end run's config files (config.yaml is always read first).
QUICK_CONFIG = ["--configfile", "config.quick.yaml", "nap.yaml"]


def add_fixture_experiment(work: Path) -> None:
    """Add the nap experiment to the checkout ``work``: its package and its config section."""
    shutil.copytree(FIXTURE_EXPERIMENT, work / "experiments" / "nap", ignore=IGNORE)
    (work / "nap.yaml").write_text(FIXTURE_CONFIG)


@pytest.fixture(scope="session")
def quick_run(tmp_path_factory) -> Path:
    """A temporary copy of the repository, plus the fixture experiment, after ``snakemake
    --cores 4 --configfile config.quick.yaml nap.yaml --config host=e2e`` (about 5 minutes on 2
    CPUs), shared by the end-to-end and browser tests. The copy lives under a path with a space
    and a non-ASCII character: every path that reaches a shell command must be quoted."""
    base = tmp_path_factory.mktemp("e2e")
    work = base / "lab r\u00e9sultats" / "repo"
    shutil.copytree(ROOT, work, ignore=IGNORE)
    add_fixture_experiment(work)
    home = base / "home"  # an empty HOME, and a bogus DISPLAY: the run must write and draw neither
    home.mkdir()
    before = {p.relative_to(work) for p in work.rglob("*")}
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")} | {"HOME": str(home), "DISPLAY": ":99"}
    proc = snakemake_in(work, "--cores", "4", *QUICK_CONFIG, "--config", "host=e2e", env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    (base / "written.txt").write_text(
        "\n".join(sorted(str(p) for p in {p.relative_to(work) for p in work.rglob("*")} - before))
    )
    return work
