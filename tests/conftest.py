"""Shared test set-up: headless matplotlib, caches in a temporary directory, repo paths."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session", autouse=True)
def _owned_environment(tmp_path_factory):
    """Point every cache at a temporary directory, as the Snakefile does for jobs."""
    from experiments.common import prepare_environment

    saved = dict(os.environ)
    prepare_environment(str(ROOT), str(tmp_path_factory.mktemp("lab-env")))
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def root() -> Path:
    return ROOT
