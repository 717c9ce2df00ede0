"""Shared test set-up: headless matplotlib, caches in a temporary directory, repo paths."""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from helpers import snakemake_in  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _owned_environment(tmp_path_factory):
    """Point every cache at a temporary directory, as the Snakefile does for jobs."""
    from lab.host import prepare_environment

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


class ChildCgroup:
    """A real child cgroup with a 1-CPU quota: ``cgroup`` (its path in the hierarchy),
    ``version`` (v1 or v2), ``directory``; :meth:`enter` moves the calling process into it (a
    ``preexec_fn``)."""

    def __init__(self, directory: Path, cgroup: str, version: str) -> None:
        self.directory, self.cgroup, self.version = directory, cgroup, version

    def enter(self) -> None:
        (self.directory / "cgroup.procs").write_text(str(os.getpid()))


def _cpu_hierarchies() -> list[tuple[str, Path]]:
    """``(version, mount point)`` of the mounted cgroup hierarchies with the cpu controller:
    a v1 one, or v2 where ``cgroup.controllers`` lists cpu."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        head, _, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if len(rest) >= 3 and rest[0] == "cgroup" and "cpu" in rest[2].split(","):
            found.append(("v1", Path(fields[4])))
        elif rest and rest[0] == "cgroup2":
            controllers = Path(fields[4], "cgroup.controllers")
            if controllers.exists() and "cpu" in controllers.read_text().split():
                found.append(("v2", Path(fields[4])))
    return found


def _cgroup_parents() -> list[tuple[str, Path, Path]]:
    """``(version, mount, parent)``: where the quota tests may make their child cgroup. With
    ``LAB_CGROUP_PARENT`` (a cgroup of the user's own, for example a delegated systemd scope),
    only there; otherwise the hierarchies' roots."""
    hierarchies = _cpu_hierarchies()
    own = os.environ.get("LAB_CGROUP_PARENT")
    if not own:
        return [(version, mount, mount) for version, mount in hierarchies]
    parent = Path(own).resolve()
    return [(v, m, parent) for v, m in hierarchies if parent == m or m in parent.parents]


def _remove_stale(parent: Path) -> None:
    """Remove the empty ``cpulab-test-<pid>`` cgroups a killed test run left under ``parent``."""
    for d in parent.glob("cpulab-test-*"):
        pid = d.name.rpartition("-")[2]
        if pid.isdigit() and not Path("/proc", pid).exists():
            try:
                d.rmdir()
            except OSError:
                pass


def _make_child(version: str, parent: Path) -> tuple[Path, bool]:
    """Make ``parent/cpulab-test-<pid>`` with a quota of 1 CPU; returns it and whether the cpu
    controller had to be enabled in ``parent`` (v2; disabled again after). Raises OSError."""
    enabled = False
    if version == "v2":
        control = parent / "cgroup.subtree_control"
        if "cpu" not in control.read_text().split():
            control.write_text("+cpu")
            enabled = True
    d = parent / f"cpulab-test-{os.getpid()}"
    d.mkdir()
    if version == "v1":
        (d / "cpu.cfs_period_us").write_text("100000")
        (d / "cpu.cfs_quota_us").write_text("100000")
    else:
        (d / "cpu.max").write_text("100000 100000")
    return d, enabled


@pytest.fixture
def child_cgroup():
    """A child cgroup with a quota of 1 CPU, made and removed by the test (root, or a cgroup of
    the user's own in ``LAB_CGROUP_PARENT``; cgroup v1's cpu controller, or v2's).

    It changes the machine's cgroups, so it runs only when asked: ``LAB_ALLOW_CGROUP=1``,
    ``LAB_REQUIRE_CGROUP=1`` (CI: where none can be made, the test fails instead of skipping),
    or ``LAB_CGROUP_PARENT``. Otherwise the test skips and says what it would touch. The child
    is removed after the test, the cpu controller disabled again where the fixture enabled it,
    and children that a killed run left behind are removed by the next one."""
    required = os.environ.get("LAB_REQUIRE_CGROUP") == "1"
    parents = _cgroup_parents()
    if not (required or os.environ.get("LAB_ALLOW_CGROUP") == "1" or os.environ.get("LAB_CGROUP_PARENT")):
        where = ", ".join(str(p) for *_, p in parents) or "the cpu hierarchy"
        pytest.skip(
            f"would make a child cgroup with a 1-CPU quota under {where} (enabling the cpu controller"
            " there on cgroup v2): set LAB_ALLOW_CGROUP=1 to allow it, or LAB_CGROUP_PARENT to a cgroup of your own"
        )
    why = "no cgroup hierarchy with the cpu controller is mounted" + (
        f" at LAB_CGROUP_PARENT={os.environ['LAB_CGROUP_PARENT']}" if os.environ.get("LAB_CGROUP_PARENT") else ""
    )
    for version, mount, parent in parents:
        _remove_stale(parent)
        try:
            d, enabled = _make_child(version, parent)
        except OSError as exc:
            why = f"cannot make a child cgroup under {parent} ({exc})"
            continue
        yield ChildCgroup(d, "/" + str(d.relative_to(mount)), version)
        for _ in range(100):  # its processes must have left before the directory can go
            try:
                d.rmdir()
                break
            except OSError:
                time.sleep(0.1)
        if enabled:
            try:
                (parent / "cgroup.subtree_control").write_text("-cpu")
            except OSError:  # another child enabled since uses it: left as it is
                pass
        return
    if required:
        pytest.fail(f"LAB_REQUIRE_CGROUP is set but {why}")
    pytest.skip(why)


IGNORE = shutil.ignore_patterns(
    ".git", ".venv", "results", "logs", ".snakemake", "__pycache__", ".pytest_cache", ".ruff_cache"
)


#: The fixture experiment package the end-to-end run adds to its checkout (tests/fixtures/nap),
#: and the config section it adds for it: one folder and a config section, nothing else.
FIXTURE_EXPERIMENT = ROOT / "tests" / "fixtures" / "nap"
#: The end-to-end run measures what a default run measures (config.yaml's list), and the fixture.
DEFAULT_EXPERIMENTS = yaml.safe_load((ROOT / "config.yaml").read_text())["experiments"]
FIXTURE_CONFIG = f"experiments: [{', '.join([*DEFAULT_EXPERIMENTS, 'nap'])}]\n" + "nap:\n  sleepers: [1, 2]\n"
FIXTURE_FIGURES = ("nap_speedup",)


def e2e_figures() -> list[str]:
    """The figures the end-to-end run draws: those of the experiments in its config's list (the
    fixture's included), then those of the whole run."""
    import yaml

    from analysis.figures import HOST_FIGURES
    from lab import registry

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
    (base / "log-tail.txt").write_text("\n".join(proc.stderr.splitlines()[-10:]))
    (base / "written.txt").write_text(
        "\n".join(sorted(str(p) for p in {p.relative_to(work) for p in work.rglob("*")} - before))
    )
    return work


#: Test modules that measure nothing and start no measurement: they run first, while the side
#: runs (tests/side_runs.py) measure in the background, on CPU time those leave idle (they wait on
#: SLURM's steps, on each other's set-up and on experiments that sleep). Every other test waits
#: until the side runs have ended (:func:`pytest_runtest_setup`), so nothing that measures or
#: asserts physics runs beside them.
BESIDE_SIDE_RUNS = frozenset(
    {
        "test_analysis.py",
        "test_architecture.py",
        "test_cluster.py",
        "test_compare.py",
        "test_config.py",
        "test_report.py",
        "test_timelines.py",
        "test_trust.py",
    }
)


def _beside(item) -> bool:
    return item.path.name in BESIDE_SIDE_RUNS


def pytest_collection_modifyitems(session, config, items):
    """Run the modules of :data:`BESIDE_SIDE_RUNS` first (a stable sort: each keeps its order)."""
    items.sort(key=lambda item: not _beside(item))


class _Background:
    """The side runs, started in a thread when the session starts; :meth:`wait` waits for them.

    Whether they have ended is an event the thread sets, not ``Thread.is_alive()``: on Python
    3.11 a ``join()`` that Ctrl-C interrupts leaves ``is_alive()`` False while the thread runs on
    (its ``_wait_for_tstate_lock`` releases the lock and marks the thread stopped, bpo-45274)."""

    def __init__(self, names: list[str], base_of) -> None:
        from side_runs import run_all

        self.result: dict | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.started, self.ended = time.monotonic(), float("nan")

        def target() -> None:
            try:
                self.result = run_all(names, base_of)
            except BaseException as exc:  # noqa: BLE001 - raised again by the tests that ask
                self.error = exc
            finally:
                self.ended = time.monotonic()
                self.done.set()

        self.thread = threading.Thread(target=target, name="side-runs", daemon=True)
        self.thread.start()

    def wait(self) -> dict:
        """The side runs' ``{name: Outcome}`` once all have ended; raises what ``run_all`` raised."""
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.result or {}

    def timing(self) -> str:
        """One line for the session's summary: when the side runs ended (s after they started)
        and each run's wall time, longest first; the side phase's end sets when the tests that
        measure can start."""
        if not self.done.is_set() or self.error is not None:
            return f"side runs: did not finish ({type(self.error).__name__ if self.error else 'still running'})"
        runs = sorted((self.result or {}).values(), key=lambda o: -o.seconds)
        each = ", ".join(f"{o.name} {o.seconds:.0f} s" for o in runs)
        return f"side runs: ended {self.ended - self.started:.0f} s after they started ({each})"

    def cancel(self) -> None:
        """Kill every run still going (their process groups; no new process starts); each run
        then ends at once, and the SLURM cluster goes down."""
        from side_runs import kill_all

        if not self.done.is_set():
            kill_all()

    def stop(self) -> None:
        """Cancel the runs still going (Ctrl-C, or the session ending early) and wait for them."""
        self.cancel()
        self.done.wait()


_SIDE: list[_Background] = []
_TIMINGS: list[str] = []  # the side runs' timing lines, said in the session's summary


@pytest.fixture(scope="session", autouse=True)
def _side_runs_started(request, tmp_path_factory, _owned_environment):
    """Start the side runs the selected tests name (marker ``side_run``) in the background as
    the session starts (the first test's set-up); cancelled and joined when it ends. Where the
    first test is not one that may run beside them, they are waited for at once."""
    items = request.session.items
    names = sorted({m.args[0] for item in items for m in item.iter_markers("side_run")})
    if names:
        _SIDE.append(_Background(names, lambda name: tmp_path_factory.mktemp(f"side-{name}")))
        if not _beside(items[0]):
            _SIDE[0].done.wait()
    yield
    while _SIDE:
        background = _SIDE.pop()
        background.stop()
        _TIMINGS.append(background.timing())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A test outside :data:`BESIDE_SIDE_RUNS` starts only once the side runs have ended, before
    any of its fixtures is set up (a session fixture such as ``quick_run`` measures too; their
    errors are left to the tests that read them)."""
    if _SIDE and not _beside(item):
        _SIDE[0].done.wait()


def pytest_terminal_summary(terminalreporter):
    """Say when the side runs ended and how long each took (the test line's goal is a time)."""
    for line in _TIMINGS:
        terminalreporter.write_line(line)


def pytest_keyboard_interrupt(excinfo):
    """Ctrl-C: kill the side runs at once, wherever the main thread was (waiting for them, or in
    a test beside them), so that pytest's exit does not wait for them to finish."""
    for background in _SIDE:
        background.cancel()


@pytest.fixture(scope="session")
def side_runs() -> dict:
    """The end-to-end runs that assert no physics (tests/side_runs.py), those the selected tests
    name with ``@pytest.mark.side_run(name)``, started at once when the session starts
    (:func:`_side_runs_started`); returns ``{name: Outcome}`` once all have ended. Only the
    modules of :data:`BESIDE_SIDE_RUNS` run beside them."""
    assert _SIDE, "a test that asks for side_runs needs @pytest.mark.side_run(name)"
    return _SIDE[0].wait()
