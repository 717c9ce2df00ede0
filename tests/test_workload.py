"""The workload experiment: the search on a known landscape, the checks of a user's workload,
one configuration measured for real (DataLoader workers, bfloat16, channels_last, DDP replicas),
and the recommendation files."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from experiments.workload import KNOBS
from experiments.workload.loader import WorkloadError, load, resolve_entry
from experiments.workload.search import MIN_ROUNDS, Search, decide, geomean_ci
from lab.results import RunResult

ROOT = Path(__file__).resolve().parent.parent

# ------------------------------------------------------------------ the search


def test_the_interval_of_the_geometric_mean_ratio():
    # by hand: logs ln 2, ln 8: mean ln 4, standard error ln 2, t(0.975, 1 df) = 12.706
    mean, lo, hi = geomean_ci([2.0, 8.0])
    assert mean == pytest.approx(4.0) and lo == pytest.approx(4 * 2**-12.706, rel=1e-3)
    assert hi == pytest.approx(4 * 2**12.706, rel=1e-3)
    assert math.isnan(geomean_ci([1.3])[1]) and geomean_ci([1.2] * 3) == pytest.approx((1.2,) * 3)
    # coverage: 2000 comparisons of 6 log-normal rounds around a true ratio of 1.1
    rng = random.Random(1)
    covered = 0
    for _ in range(2000):
        _, lo, hi = geomean_ci([1.1 * math.exp(rng.gauss(0, 0.12)) for _ in range(6)])
        covered += lo <= 1.1 <= hi
    assert 0.93 <= covered / 2000 <= 0.97


def test_a_comparison_is_decided_when_its_interval_excludes_one():
    assert MIN_ROUNDS == 4
    assert decide([1.2] * 3, 10) == ""  # too few rounds, however clear
    assert decide([1.2] * 4, 10) == "better" and decide([0.8] * 4, 10) == "worse"
    assert decide([1.2, 0.9] * 2, 10) == ""  # interval 0.79-1.35: measure on
    assert decide([1.2, 0.9] * 5, 10) == "no clear difference"  # rounds spent, 0.93-1.16


class Landscape:
    """A known throughput per configuration, with seeded multiplicative noise; counts windows."""

    def __init__(self, noise: float = 0.05, seed: int = 0) -> None:
        self.rng, self.noise, self.windows = random.Random(seed), noise, 0

    def value(self, cfg: dict) -> float:
        base = {0: 100.0, 1: 130.0, 2: 170.0}[cfg["workers"]] * (1.25 if cfg["bf16"] else 1.0)
        base *= 0.5 if cfg["workers"] + cfg["threads"] > 3 else 1.0  # oversubscribed
        return base * (1 + self.rng.uniform(-self.noise, self.noise))

    def round(self, cand: dict, inc: dict, r: int) -> tuple[float, float]:
        self.windows += 2
        return self.value(cand), self.value(inc)


def test_search_finds_the_best_of_a_known_landscape():
    land = Landscape()
    space = {"workers": [0, 1, 2], "threads": [1, 2], "bf16": [False, True]}
    s = Search(space, {"workers": 0, "threads": 1, "bf16": False}, land.round, lambda c: "", budget_s=1e9)
    best, trail = s.run()
    assert best == {"workers": 2, "threads": 1, "bf16": True}
    assert s.stopped == "converged"
    # every clear difference (25% and more, 5% noise) is decided at the fewest rounds allowed
    assert {c.decision for c in trail} <= {"better", "worse"} and all(len(c.ratios) == MIN_ROUNDS for c in trail)
    exhaustive = 12  # 3 x 2 x 2 configurations
    assert len(trail) < exhaustive


def test_search_respects_invalid_candidates_coupled_knobs_and_the_budget():
    land = Landscape()
    space = {"workers": [0, 1, 2], "threads": [1, 2, 3], "bf16": [False, True]}
    start = {"workers": 0, "threads": 3, "bf16": False}
    fit = lambda cfg, knob: {**cfg, "threads": min(cfg["threads"], 3 - cfg["workers"])} if knob == "workers" else cfg  # noqa: E731
    invalid = lambda cfg: "no bf16 here" if cfg["bf16"] else ""  # noqa: E731
    best, trail = Search(space, start, land.round, invalid, budget_s=1e9, adjust=fit).run()
    assert best["workers"] == 2 and best["bf16"] is False
    moved = [c for c in trail if c.knob == "workers"]
    assert all(c.candidate["threads"] + c.candidate["workers"] <= 3 for c in moved)  # moved together
    assert [c.decision for c in trail if c.candidate["bf16"]] == ["invalid"] * len(
        [c for c in trail if c.candidate["bf16"]]
    )
    clock = iter(range(0, 10_000, 1)).__next__  # one "second" per call: the budget runs out
    s = Search(space, start, land.round, lambda c: "", budget_s=20, clock=lambda: float(clock()))
    s.run()
    assert s.stopped == "budget" and s.trail[-1].decision == "budget"


# ------------------------------------------------------------------ the user's workload, checked


def _module(tmp_path, monkeypatch, name: str, body: str) -> str:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{name}:build"


GOOD = """
import torch
class Data:
    def __len__(self): return 64
    def __getitem__(self, i): return torch.randn(8), i % 2
def build():
    return {"model": torch.nn.Linear(8, 2), "dataset": Data(), "loss": torch.nn.CrossEntropyLoss(),
            "current": {"num_workers": 1}}
"""


@pytest.mark.parametrize(
    "name, body, message",
    [
        ("wl_none", None, "cannot find module wl_none_missing in "),
        ("wl_broken", "import not_installed_here\n\n\ndef build():\n    pass\n", "cannot import wl_broken (Module"),
        ("wl_tuple", "def build():\n    return 42\n", "returned int; expected a dict with model, dataset, loss"),
        (
            "wl_model",
            GOOD.replace("torch.nn.Linear(8, 2)", "'not a model'"),
            "the model is a str, not a torch.nn.Module",
        ),
        (
            "wl_forward",
            GOOD.replace("torch.nn.Linear(8, 2)", "torch.nn.Linear(5, 2)"),
            "the model's forward failed on a batch",
        ),
        (
            "wl_getitem",
            GOOD.replace("return torch.randn(8), i % 2", "raise IndexError('no such file')"),
            "dataset[0] raised IndexError: no such file",
        ),
        ("wl_loss", GOOD.replace("torch.nn.CrossEntropyLoss()", "None"), "task train needs a loss"),
        (
            "wl_nan",
            GOOD.replace("torch.randn(8), i % 2", "torch.full((8,), float('nan')), i % 2"),
            "the loss on the first batch is nan, not a finite number",
        ),
        ("wl_nolen", GOOD.replace("def __len__(self)", "def size(self)"), "the dataset (Data) has no __len__; allowed"),
        (
            "wl_current",
            GOOD.replace('{"num_workers": 1}', '{"workers": 1}'),
            "current settings: unknown knob 'workers'",
        ),
        ("wl_value", GOOD.replace('{"num_workers": 1}', '{"precision": "fp16"}'), "precision='fp16'; allowed: one of"),
        ("wl_neg", GOOD.replace('{"num_workers": 1}', '{"num_workers": -1}'), "num_workers=-1; allowed: int >= 0"),
        ("wl_proc", GOOD.replace('{"num_workers": 1}', '{"processes": 0}'), "processes=0; allowed: int >= 1"),
        ("wl_thr", GOOD.replace('{"num_workers": 1}', '{"threads": 0}'), "threads=0; allowed: int >= 1"),
        (
            "wl_prefetch",
            GOOD.replace('{"num_workers": 1}', '{"num_workers": 0, "prefetch_factor": 4}'),
            "prefetch_factor and persistent_workers apply with num_workers > 0",
        ),
        ("wl_mode", GOOD.replace('{"num_workers": 1}', '{"mode": "script"}'), "mode='script' applies to task infer"),
        ("wl_small", GOOD.replace("return 64", "return 10"), "the dataset has 10 items, fewer than workload.batch"),
        (
            "wl_noparams",
            GOOD.replace(
                "torch.nn.Linear(8, 2)", "torch.nn.Sequential(torch.nn.Identity(), torch.nn.Softmax(-1))"
            ).replace("torch.randn(8)", "torch.randn(2)"),
            "task train needs a model with trainable parameters",
        ),
    ],
)
def test_a_bad_workload_gets_one_line_naming_the_config_key(tmp_path, monkeypatch, name, body, message):
    entry = f"{name}_missing:build" if body is None else _module(tmp_path, monkeypatch, name, body)
    with pytest.raises(WorkloadError) as err:
        load(entry, "train", 16)
    text = str(err.value)
    assert text.startswith(f"config key workload.entry: '{entry}': ") and message in text and "\n" not in text


def test_a_good_workload_loads_with_its_current_settings(tmp_path, monkeypatch):
    w = load(_module(tmp_path, monkeypatch, "wl_good", GOOD), "train", 16)
    assert w.current == {"num_workers": 1} and w.input_dims == 2
    builtin = load("", "train", 32)
    assert builtin.input_dims == 4 and builtin.current == {} and builtin.entry.endswith("builtin:build")


def test_a_bad_workload_is_a_failed_point_and_its_verification_says_why(tmp_path):
    out = tmp_path / "stage~search"
    cmd = [sys.executable, "-m", "lab.point", "workload", "--entry", "nosuch.pkg:build", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    m = pd.read_csv(out / "metrics.csv")
    assert list(m["status"]) == ["failed"]
    assert m["reason"][0].startswith("config key workload.entry: 'nosuch.pkg:build': cannot find module nosuch.pkg")
    verify = tmp_path / "stage~verify"
    cmd = [
        sys.executable,
        "-m",
        "lab.point",
        "workload",
        "--stage",
        "verify",
        "--after",
        str(out),
        "--out",
        str(verify),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    reason = pd.read_csv(verify / "metrics.csv")["reason"][0]
    assert reason.startswith("the search did not finish (config key workload.entry: 'nosuch.pkg:build': cannot find")
    assert reason.endswith("); nothing to verify")


LATE = GOOD.replace("return torch.randn(8), i % 2", "return (torch.randn(8), i % 2) if i < 40 else {}['no file']")


def test_a_getitem_that_raises_while_measured_fails_the_point_naming_the_entry(tmp_path, monkeypatch):
    """The check reads the first batch only; an item that raises later, in a DataLoader worker or
    in the main process, still gives a failed point naming workload.entry, not a traceback."""
    from experiments.workload.measure import Params, run

    entry = _module(tmp_path, monkeypatch, "wl_late", LATE)
    for workers in ((0,), (1,)):
        params = Params(entry=entry, batch_size=16, steps=4, warmup=0, num_workers=workers, threads=(1,))
        fixed = {"processes": (1,), "precision": ("float32",), "channels_last": (False,), "mode": ("eager",)}
        params = dataclasses.replace(params, **fixed)
        res = run(params)
        assert [r["status"] for r in res.rows] == ["failed"], res.rows
        reason = res.rows[0]["reason"]
        assert reason.startswith(f"config key workload.entry: '{entry}': the workload raised "), reason
        assert "'no file'" in reason and "\n" not in reason


def test_nothing_to_search_is_one_skipped_row_and_the_start_is_verified(tmp_path, monkeypatch):
    from experiments.workload.measure import Params, run

    entry = _module(tmp_path, monkeypatch, "wl_fixed", GOOD)
    one = {k: (v,) for k, v in _cfg().items()}
    res = run(Params(entry=entry, batch_size=16, steps=2, warmup=0, budget_s=0, **one))
    assert [(r["status"], r["stage"]) for r in res.rows] == [("skipped", "search")]
    assert res.rows[0]["reason"].startswith("nothing to compare")
    assert res.outcome["winner"] == res.outcome["start"]
    assert all(not c["ratios"] for c in res.outcome["trail"])  # budget 0: nothing measured
    assert res.outcome["stopped"] == "budget"  # single values other than the start's: a budget of 0 s tries none
    from experiments.workload.candidates import defaults

    start = {**defaults({}), "num_workers": 1}  # GOOD's current settings
    same = {k: (start[k],) for k in _cfg()}
    res = run(Params(entry=entry, batch_size=16, steps=2, warmup=0, **same))  # budget auto
    assert [(r["status"], r["stage"]) for r in res.rows] == [("skipped", "search")]
    assert res.outcome["stopped"] == "nothing to search" and not res.outcome["trail"]


def test_a_verification_without_an_interval_and_a_search_with_nothing_to_search_say_so():
    """Too few rounds to bound a median give a gain without a CI (``recommended.json`` keeps
    null), said as such, never formatted as a number; a search whose knobs offer no value but the
    start's did not run out of budget, and its answer does not ask for a larger one."""
    from experiments.workload.analysis import _recommendation_sentence
    from experiments.workload.recommend import _header, gain_text, incomplete_text, outcome

    assert gain_text(1.05, [None, None]) == "1.05x (no 95% CI: too few rounds)"
    assert gain_text(1.05, [0.98, 1.12]) == "1.05x (95% CI 0.98-1.12)"
    assert gain_text(None, None) == "no gain measured"
    d = {
        "status": "ok",
        "verified": False,
        "gain": 1.02,
        "gain_ci": [None, None],
        "current_source": "PyTorch's defaults",
        "current": {"threads": 1},
        "best_found": {"threads": 1},
        "search": {"stopped": "nothing to search", "budget_s": 0.0, "untried": []},
    }
    assert incomplete_text(d) == "" and outcome(d) == "searched completely"
    said = _recommendation_sentence(d)
    assert said.startswith("Nothing to search: the workload section offers no value of any knob other than PyTorch's")
    assert "they gave 1.02x (no 95% CI: too few rounds)" in said and "budget" not in said
    assert _header(d, "#") == [
        "# Your current settings are fine here: the search found nothing faster (against themselves 1.02x"
        " (no 95% CI: too few rounds))."
    ]
    other = {**d, "best_found": {"threads": 2}}
    assert _header(other, "#") == [
        "# Your current settings are fine here: the best found gave 1.02x (no 95% CI: too few rounds),"
        " not clearly faster."
    ]
    from experiments.workload.recommend import best_gave

    assert best_gave(d) == "measured against themselves they gave" and best_gave(other) == "the best found gave"


# its model's tolist() is what makes the start unrunnable: torch's tracer warns of it on the way
@pytest.mark.filterwarnings("ignore:Converting a tensor to a Python list:torch.jit.TracerWarning")
def test_a_start_that_cannot_run_is_reported_as_such(tmp_path, monkeypatch):
    """The current settings are run first: a start the workload cannot run fails the point
    with that reason, instead of every candidate being blamed for it."""
    from experiments.workload.measure import Params, run

    odd = "class Odd(torch.nn.Module):\n    def forward(self, x, *rest):\n        return {'v': x.tolist()}\n"
    body = GOOD.replace('{"num_workers": 1}', '{"mode": "script"}').replace("torch.nn.Linear(8, 2)", "Odd()")
    entry = _module(tmp_path, monkeypatch, "wl_badstart", body.replace("class Data:", odd + "class Data:"))
    params = Params(entry=entry, task="infer", batch_size=16, steps=2, warmup=0, mode=("eager", "script"))
    res = run(dataclasses.replace(params, precision=("float32",)))
    assert [r["status"] for r in res.rows] == ["failed"], res.rows
    assert "your current settings" in res.rows[0]["reason"] and "do not run on this workload" in res.rows[0]["reason"]


def test_bfloat16_numerics_read_every_tensor_of_a_structured_output():
    import torch

    from experiments.workload.session import _tensors

    out = {"logits": torch.ones(2, 3), "aux": (torch.zeros(1), torch.tensor([1, 2])), "name": "x"}
    got = _tensors(out)
    assert [t.shape for t in got] == [torch.Size([1]), torch.Size([2, 3])]  # sorted keys; ints dropped
    assert all(t.dtype == torch.float32 for t in got)


def test_user_code_is_told_from_the_labs_own(tmp_path, monkeypatch):
    from experiments.workload.loader import raised_by_user, user_code

    entry = _module(tmp_path, monkeypatch, "wl_where", "def build():\n    raise KeyError('x')\n")
    module = __import__("wl_where")
    try:
        module.build()
    except KeyError as exc:
        assert raised_by_user(exc, entry)
    try:
        load("", "infer", -1)  # the lab's own error, not the built-in workload's file
    except Exception as exc:  # noqa: BLE001
        assert not raised_by_user(exc, "")
    assert user_code("").name == "builtin.py" and user_code(entry) == tmp_path / "wl_where.py"


# ------------------------------------------------------------------ measured for real


def _bench(meter, workload, steps=3):
    from experiments.workload.bench import Bench

    return Bench(workload, {"entry": "", "task": "train", "batch_size": 32}, meter, steps=steps, warmup=1)


def _cfg(**kw):
    base = {"num_workers": 0, "threads": 1, "precision": "float32", "channels_last": False, "mode": "eager"}
    return {**base, "processes": 1, "prefetch_factor": 2, "persistent_workers": False, **kw}


def test_a_configuration_is_measured_with_its_workers_memory_and_spans():
    from lab.window import Meter

    workload = load("", "train", 32)
    with Meter(20) as meter:
        bench = _bench(meter, workload)
        try:
            win, row, spans = bench.measure(_cfg(num_workers=1, persistent_workers=True, channels_last=True))
            _, plain, _ = bench.measure(_cfg())
            numbers = bench.local.numerics("bfloat16", 3)
        finally:
            bench.close()
    assert row["batches"] == 3 and row["samples_per_s"] == pytest.approx(3 * 32 / win.wall_s)
    assert row["workers_pss_mb"] > 0 and row["peak_pss_mb"] > row["main_pss_mb"] > 0  # one worker's memory counted
    assert plain["workers_pss_mb"] == 0 and row["start_method"] == "fork" and plain["start_method"] == ""
    kinds = pd.DataFrame(spans).groupby(["actor", "kind"]).size().to_dict()
    assert kinds == {("main", "step"): 3, ("main", "wait"): 3, ("worker-0", "fetch"): 3}
    assert 0 <= row["data_stall_pct"] <= 100 and row["oversubscribed"] is (2 > meter.ncpu)
    # bfloat16 autocast changes the numbers a little, measurably: same steps, same batches
    assert 0 < numbers["max_abs_diff"] < 0.1 and abs(numbers["loss_after"] - numbers["loss_after_fp32"]) < 0.05


def test_a_window_drops_the_batches_its_workers_fetched_while_the_other_configuration_ran():
    """The workers of a configuration prefetch ``num_workers x prefetch_factor`` batches while
    the other arm of a round is measured; its next steps window drops them untimed, then warms
    up, so that its first timed step fetches as a settled one does (benchmarks/warmup.py
    --search). An epoch window starts a fresh iterator and drops nothing."""
    from experiments.workload.bench import in_flight
    from lab.window import Meter

    assert in_flight(_cfg()) == 0 and in_flight(_cfg(num_workers=2, prefetch_factor=3)) == 6
    workload = load("", "train", 32)
    with Meter(20) as meter:
        bench = _bench(meter, workload, steps=2)
        calls, real = [], bench.local.run
        bench.local.run = lambda setup, **kw: calls.append(kw) or real(setup, **kw)
        try:
            _, row, _ = bench.measure(_cfg(num_workers=2, prefetch_factor=3, persistent_workers=True))
            bench.measure(_cfg())
            bench.measure(_cfg(num_workers=1), epoch=True, epoch_steps_max=2)
        finally:
            bench.close()
    untimed = [(c["steps"], c["drain"]) for c in calls if "drain" in c and not c["epoch"] and c["steps"] == 1]
    assert untimed == [(1, 6), (1, 0), (1, 0)]  # the warm-up step after the dropped batches
    assert row["batches"] == 2  # the window itself steps as many times as before


def test_a_change_of_threads_gets_one_more_warm_up_step():
    """One untimed step before a window; two where the intra-op thread count is not the last
    window's in the same process(es) (the thread pool's wake-up, benchmarks/warmup.py --search);
    none where ``warmup`` is 0."""
    from types import SimpleNamespace

    from experiments.workload.bench import Bench

    bench = SimpleNamespace(warmup=1, last_threads={})
    windows = [_cfg(threads=2), _cfg(threads=2), _cfg(threads=1), _cfg(threads=1, processes=2), _cfg(threads=2)]
    assert [Bench.warmup_for(bench, c) for c in windows] == [1, 1, 2, 1, 2]
    off = SimpleNamespace(warmup=0, last_threads={})
    assert [Bench.warmup_for(off, c) for c in windows] == [0] * 5


def test_a_later_steps_window_starts_from_its_configurations_last_memory_read():
    """Each memory read walks ``/proc/<pid>/smaps_rollup`` (12.8 ms a window's two in the quick
    search): a steps window of a configuration measured before reads only after itself, and its
    peak and worker growth run from the read after that configuration's last window. A released
    configuration, and every epoch window, reads before again."""
    from lab.window import Meter

    workload = load("", "train", 32)
    a, b = _cfg(num_workers=1, persistent_workers=True), _cfg()
    with Meter(20) as meter:
        bench = _bench(meter, workload, steps=2)
        reads, real = [], bench.local.memory
        bench.local.memory = lambda setup: reads.append(real(setup)) or reads[-1]
        try:
            counts, rows = [], []
            for cfg, kw in ((a, {}), (b, {}), (a, {}), (a, {"epoch": True, "epoch_steps_max": 2})):
                n = len(reads)
                rows.append(bench.measure(cfg, **kw)[1])
                counts.append(len(reads) - n)
            bench.release_except({"nothing"})
            n = len(reads)
            bench.measure(a)
            counts.append(len(reads) - n)
        finally:
            bench.close()
    assert counts[:3] == [2, 2, 1] and counts[3] >= 2 and counts[4] == 2
    first_after, second_after = reads[1], reads[4]

    def uss(r):
        return r["main_uss_mb"] + sum(u for u, _ in r["workers"].values())

    assert rows[2]["peak_uss_mb"] == pytest.approx(max(uss(first_after), uss(second_after)))
    (pid,) = first_after["workers"]
    assert rows[2]["worker_uss_growth_mb"] == pytest.approx(
        max(0.0, second_after["workers"][pid][0] - first_after["workers"][pid][0])
    )


def test_two_replicas_train_one_model_over_gloo():
    from lab.window import Meter

    workload = load("", "train", 32)
    with Meter(20) as meter:
        bench = _bench(meter, workload)
        try:
            win, row, spans = bench.measure(_cfg(processes=2))
        finally:
            bench.close()
    assert row["batches"] == 2 * 3  # both replicas' steps count
    assert row["samples_per_s"] == pytest.approx(2 * 3 * 32 / win.wall_s)
    assert len(spans) == 3 * 3  # rank 0's spans: wait, step, fetch per batch


COPY_ON_READ = """
import numpy as np
import torch
class Data:
    def __init__(self, python_objects):
        if python_objects:  # 1M floats: about 32 MB of Python objects
            self.rows = [[float(j) for j in range(512)] for _ in range(2048)]
        else:  # the same numbers in one array (built without Python objects)
            self.rows = np.tile(np.arange(512, dtype=np.float64), (2048, 1))
    def __len__(self): return len(self.rows)
    def __getitem__(self, i):
        return torch.full((8,), float(sum(self.rows[i])) / 512), i % 2  # sum() increfs every float
def build(python_objects=True):
    return {"model": torch.nn.Linear(8, 2), "dataset": Data(python_objects), "loss": torch.nn.CrossEntropyLoss()}
def build_numpy():
    return build(python_objects=False)
"""


def test_a_worker_that_copies_python_objects_on_read_is_flagged_across_an_epoch(tmp_path, monkeypatch):
    """pytorch/pytorch#13246: a forked worker that reads a list of Python objects writes their
    reference counts, so the pages it reads become its own; a numpy array's do not."""
    from lab.window import Meter

    entry = _module(tmp_path, monkeypatch, "wl_cow", COPY_ON_READ)
    rows = {}
    for name, fn in (("list", entry), ("numpy", entry.replace(":build", ":build_numpy"))):
        workload = load(fn, "train", 32)
        with Meter(20) as meter:
            bench = _bench(meter, workload)
            try:
                rows[name] = bench.measure(_cfg(num_workers=1), epoch=True)[1]
            finally:
                bench.close()
    for row in rows.values():
        assert row["window"] == "epoch" and row["batches"] == row["epoch_batches"] == 2048 // 32
    growth = {k: round(r["worker_uss_growth_mb"], 1) for k, r in rows.items()}
    assert rows["list"]["memory_grows"] and growth["list"] > 20, growth  # measured: 31 MB (32 MB of objects)
    assert not rows["numpy"]["memory_grows"] and growth["numpy"] < 5, growth  # measured: 0.7-0.9 MB


def test_a_configuration_over_the_memory_budget_is_excluded_with_the_reason():
    from experiments.workload.measure import Params, run

    fixed = dict(persistent_workers=(False,), threads=(1,), processes=(1,), precision=("float32",))
    fixed.update(channels_last=(False,), mode=("eager",), prefetch_factor=(2,))
    params = Params(stage="search", num_workers=(0, 1), steps=2, warmup=0, memory_budget_gb=0.0001, **fixed)
    outcome = run(params).outcome
    (c,) = outcome["trail"]
    assert c["candidate"]["num_workers"] == 1 and c["decision"] == "excluded"
    assert c["reason"].startswith("peak PSS") and c["reason"].endswith("MB exceeds memory_budget_gb")
    assert outcome["winner"]["num_workers"] == 0


@pytest.mark.parametrize("verify_epochs", [False, True])
def test_the_verification_runs_an_epoch_each_then_its_rounds(tmp_path, monkeypatch, verify_epochs):
    """Default: repeat 0 is one whole epoch of each side (the timeline's spans), then the rounds
    of ``steps`` steps, A B B A; ``verify_epochs``: every round a whole epoch. The rounds are
    split over two worker processes (``verify_processes``); the first measures the timeline."""
    from experiments.workload.measure import Params, run

    entry = _module(tmp_path, monkeypatch, "wl_verify", GOOD)  # 64 items: 4 batches of 16
    start, best = _cfg(), _cfg(num_workers=1)
    after = [{"outcome": {"start": start, "winner": best, "numerics": {}}}]
    params = Params(
        stage="verify", entry=entry, batch_size=16, steps=3, warmup=0, repeats=4, verify_epochs=verify_epochs
    )
    res = run(params, after=after)
    rows = pd.DataFrame(res.rows)
    spans = pd.DataFrame(res.spans)
    assert set(rows["status"]) == {"ok"} and set(spans["repeat"]) == {0}
    if verify_epochs:
        assert set(rows["window"]) == {"epoch"} and set(rows["batches"]) == {4} and len(rows) == 2 * 4
    else:
        first = rows[rows["repeat"] == 0]
        assert set(first["window"]) == {"epoch"} and set(first["batches"]) == {4}
        rounds = rows[rows["repeat"] > 0]
        assert set(rounds["window"]) == {"steps"} and set(rounds["batches"]) == {3} and len(rounds) == 2 * 4
    order = [r["role"] for r in res.rows if r["repeat"] > (0 if not verify_epochs else -1)]
    assert order[:4] == ["point", "baseline", "baseline", "point"]  # A B B A
    assert set(spans[spans["kind"] == "memory"]["role"]) == {"baseline", "point"}  # the reads, drawn
    per_worker = rows.groupby("worker")["repeat"].nunique().to_dict()
    assert per_worker == ({0: 2, 1: 2} if verify_epochs else {0: 3, 1: 2})  # 4 rounds, and the epochs
    assert set(rows[rows["repeat"] == 0]["worker"]) == {0}
    assert res.rounds["done"] == (4 if verify_epochs else 5) and res.rounds["per_worker"] == list(per_worker.values())
    one = run(dataclasses.replace(params, verify_processes=1), after=after)
    assert "worker" not in pd.DataFrame(one.rows) and one.rounds["per_worker"] == [one.rounds["done"]]
    assert one.rounds["workers"] == 1 and one.rounds["min_rounds"] == one.rounds["done"]


@pytest.mark.skipif(not __import__("lab.capabilities").capabilities.native_bf16()[0], reason="no native bf16")
def test_bfloat16_is_searched_and_measured_where_the_cpu_has_it():
    """The native path (avx512_bf16 or AMX): searched by default, and autocast runs."""
    from experiments.workload import candidates
    from experiments.workload.measure import Params
    from lab.window import Meter

    workload = load("", "train", 32)
    space, skipped = candidates.knob_space(Params(), workload)
    assert "bfloat16" in space["precision"] and "precision" not in skipped
    with Meter(20) as meter:
        bench = _bench(meter, workload)
        try:
            _, row, _ = bench.measure(_cfg(precision="bfloat16"))
        finally:
            bench.close()
    assert row["precision"] == "bfloat16" and row["samples_per_s"] > 0


def test_knob_space_drops_what_this_machine_or_workload_cannot_do(monkeypatch):
    from experiments.workload import candidates
    from experiments.workload.measure import Params

    workload = load("", "train", 32)
    monkeypatch.setattr(candidates, "native_bf16", lambda: (False, "avx512_bf16: no, amx_tile: no"))
    space, skipped = candidates.knob_space(Params(mode=("eager", "script")), workload)
    assert space["precision"] == ["float32"] and "workload.bf16: any" in skipped["precision"]
    assert space["mode"] == ["eager"] and space["channels_last"] == [False, True]  # 4-D images
    assert "task: infer" in skipped["mode"]  # a knob the config lists is never dropped without a word
    space, skipped = candidates.knob_space(Params(bf16="any"), workload)
    assert "bfloat16" in space["precision"] and "precision" not in skipped
    cfg = _cfg(processes=2, threads=2, num_workers=4)  # 2 x (2 + 4) = 12 CPUs at once
    why = candidates.invalid_reason(cfg, Params(), workload, {}, limit=2)
    assert why.startswith("asks for 12 CPUs at once")
    assert candidates.invalid_reason(_cfg(persistent_workers=True), Params(), workload, {}, 4).startswith("persistent")
    space = {"threads": [1, 2], "persistent_workers": [True], "prefetch_factor": [4, 2]}
    fit = candidates.fit_threads(2, space)
    assert fit(_cfg(threads=2, num_workers=1), "num_workers")["threads"] == 1
    assert fit(_cfg(threads=2, num_workers=1), "threads")["threads"] == 2  # only a workers move is coupled
    back = fit(_cfg(num_workers=0, persistent_workers=True, prefetch_factor=4), "num_workers")
    assert back["persistent_workers"] is False and back["prefetch_factor"] == 2  # DataLoader's defaults
    # workers added to a start without them are tried as the config asks: persistent, prefetch 2
    # (listed, so kept); a prefetch_factor the config does not list takes its first value
    added = fit(_cfg(num_workers=1), "num_workers")
    assert added["persistent_workers"] is True and added["prefetch_factor"] == 2
    assert fit(_cfg(num_workers=1, prefetch_factor=3), "num_workers")["prefetch_factor"] == 4
    both = candidates.fit_threads(2, {**space, "persistent_workers": [False, True]})
    assert both(_cfg(num_workers=1), "num_workers")["persistent_workers"] is False  # listed: tried later


# ------------------------------------------------------------------ the recommendation


def _verified(gain_ci_low: float, point: dict | None = None) -> dict:
    from experiments.workload.recommend import recommendation

    rows = []
    best = point or _cfg(num_workers=2, precision="bfloat16")
    for role, cfg, v in (("baseline", _cfg(), 100.0), ("point", best, 150.0)):
        for r in range(6):
            rows.append(
                {
                    "stage": "verify",
                    "role": role,
                    "status": "ok",
                    "repeat": r,
                    "value": v,
                    **cfg,
                    "data_stall_pct": 40.0 if role == "baseline" else 5.0,
                    "cpu_util_pct": 50.0,
                    "peak_pss_mb": 300.0,
                    "memory_grows": False,
                    "entry": "",
                    "task": "train",
                    "batch_size": 32,
                }
            )
    summary = pd.DataFrame(
        [
            {"stage": "search", "status": "ok", "reason": ""},
            {
                "stage": "verify",
                "status": "ok",
                "reason": "",
                "n": 6,
                "speedup": 1.5,
                "speedup_ci_low": gain_ci_low,
                "speedup_ci_high": 1.6,
            },
        ]
    )
    return recommendation(summary, pd.DataFrame(rows), [])


def test_recommendation_files_reproduce_the_verified_settings():
    from experiments.workload.recommend import as_env, as_json, as_python

    d = _verified(1.4)
    assert d["verified"] and d["changes"] == {"num_workers": [0, 2], "precision": ["float32", "bfloat16"]}
    assert d["measured"]["data_stall_pct"]["best_found"]["median"] == 5.0
    py = as_python(d)
    assert "num_workers=2, persistent_workers=False, prefetch_factor=2" in py
    assert 'with torch.autocast("cpu", dtype=torch.bfloat16):' in py and "torch.set_num_threads(1)" in py
    compile(py, "recommended.py", "exec")  # valid Python
    assert "export OMP_NUM_THREADS=1" in as_env(d) and json.loads(as_json(d))["gain_ci"] == [1.4, 1.6]
    from experiments.workload.analysis import _recommendation_sentence

    assert d["processes"] == 1 and "interleaved rounds: " in _recommendation_sentence(d)
    assert "interleaved rounds in 2 worker processes: " in _recommendation_sentence(d | {"processes": 2})
    unclear = _verified(0.9)  # the gain's CI includes 1: no recommendation
    assert not unclear["verified"] and unclear["recommended"] == unclear["current"] and unclear["changes"] == {}
    assert "current settings are fine here" in as_python(unclear) and "num_workers=0" in as_python(unclear)


def test_the_snippet_runs_as_python_for_every_layout():
    """recommended.py, filled in with a tiny model and dataset, runs for each task, process
    layout, precision, memory format and mode: no undefined names, no DataLoader argument
    clash (a DistributedSampler and shuffle)."""
    import itertools

    import torch

    from experiments.workload.recommend import _snippet

    for task, procs, prec, cl, mode in itertools.product(
        ("train", "infer"), (1, 2), ("float32", "bfloat16"), (False, True), ("eager", "script")
    ):
        if task == "train" and mode != "eager":
            continue
        cfg = _cfg(processes=procs, precision=prec, channels_last=cl, mode=mode, num_workers=0)
        code = "\n".join(_snippet(cfg, task, 4))
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 2, 1), torch.nn.Flatten(), torch.nn.Linear(8, 2))
        data = [(torch.randn(3, 2, 2), 1) for _ in range(8)]
        names = {"model": model, "dataset": data, "loss_fn": torch.nn.CrossEntropyLoss()}
        names["optimizer"] = torch.optim.SGD(model.parameters(), lr=0.1)
        if procs > 1 and task == "train":  # the snippet's DDP and sampler need a process group
            assert "DistributedSampler(dataset)" in code and "shuffle" not in code
            continue
        exec(compile(code, "recommended.py", "exec"), names)  # noqa: S102 - the lab's own snippet
        assert ("out" in names) == (task == "infer")


def test_a_best_equal_to_the_current_settings_is_not_a_recommendation():
    """When the search kept the start, the verification measures it against itself: a CI above
    1 there is noise (a percentile CI excludes 1 a few % of the time), not a recommendation."""
    same = _verified(1.01, point=_cfg())
    assert not same["verified"] and same["changes"] == {} and same["recommended"] == same["current"]


def test_knobs_read_back_as_their_own_types():
    """A search point with a skipped row makes the knob columns float; the settings (and the
    snippet's torch.set_num_threads) must still get integers and booleans."""
    from experiments.workload.recommend import _config

    rows = pd.DataFrame([{**_cfg(threads=2), "num_workers": 0.0, "threads": 2.0, "channels_last": 0.0}])
    cfg = _config(rows)
    assert cfg["threads"] == 2 and type(cfg["threads"]) is int and type(cfg["num_workers"]) is int
    assert cfg["channels_last"] is False


def test_the_users_shell_is_measured_not_assumed():
    from lab.userenv import capture, torch_defaults

    env = {"OMP_NUM_THREADS": "1", "KMP_AFFINITY": "compact", "PATH": "/bin", "GOMP_CPU_AFFINITY": "0"}
    assert capture(env) == {"GOMP_CPU_AFFINITY": "0", "KMP_AFFINITY": "compact", "OMP_NUM_THREADS": "1"}
    # the shell's PYTHON_GIL is recorded: the report says the interpreters did not apply it
    assert capture(env | {"PYTHON_GIL": "1", "PYTHONPATH": "/x"})["PYTHON_GIL"] == "1"
    measured, why = torch_defaults({"OMP_NUM_THREADS": "1"})
    assert why == "" and measured["torch_threads"] == 1
    from experiments.workload.analysis import environment_sentences

    text = " ".join(
        environment_sentences({"variables": {"OMP_NUM_THREADS": "1", "KMP_AFFINITY": "compact"}, "torch_threads": 1}, 2)
    )
    assert "Your shell exports OMP_NUM_THREADS=1: your own programs run 1 intra-op thread" in text
    assert "KMP_AFFINITY=compact" in text
    assert KNOBS[0] == "num_workers"


def test_compile_pays_off_after_the_calls_its_upfront_cost_needs():
    """payoff_calls: (setup + first call beyond the current first call) / time saved per call."""
    from experiments.workload.recommend import payoff_calls

    current = pd.DataFrame(
        {"wall_s": [1.0, 1.0], "processes": [1, 1], "batches": [100, 100], "first_call_s": [0.01] * 2}
    )
    current["setup_s"] = 0.0
    # compiled: 6 ms per call instead of 10 ms; 16 s to compile plus a 0.01 s first call
    fast = pd.DataFrame({"wall_s": [0.6, 0.6], "processes": [1, 1], "batches": [100, 100], "first_call_s": [0.01] * 2})
    fast["setup_s"] = 16.0
    assert payoff_calls(current, fast) == 4000  # 16 s / 4 ms
    slower = fast.assign(wall_s=1.2)
    assert payoff_calls(current, slower) is None  # saves nothing per call: never pays off


def test_the_search_sentence_says_why_it_stopped_before_its_budget_was_spent():
    from experiments.workload.recommend import search_sentence

    early = {"search": {"comparisons": 1, "spent_s": 25.0, "budget_s": 45.0, "stopped": "budget"}}
    assert search_sentence(early) == (
        "The search compared 1 candidate in 25 s of its 45 s budget and stopped because the next "
        "comparison would not fit in the 20 s left (one took 25 s on average)."
    )
    over = {"search": {"comparisons": 4, "spent_s": 46.0, "budget_s": 45.0, "stopped": "budget"}}
    assert search_sentence(over).startswith("The search compared 4 candidates in 46 s of its 45 s budget (the")
    assert search_sentence(over).endswith("and stopped because its time budget ran out.")
    # the diagnosis runs before the budget's clock starts: said apart, not in the average
    diagnosed = {"search": early["search"] | {"diagnosis_s": 10.2}}
    said = search_sentence(diagnosed)
    assert said == search_sentence(early) + " The diagnosis before it took 10 s, outside the budget."


def test_an_entry_defined_inside_a_top_level_block_is_found_without_importing(tmp_path):
    """A fallback import (``try``/``except ImportError``) or an ``if`` block defines names as
    surely as a top-level ``def``; a name defined nowhere is still refused, with a near one."""
    pkg = tmp_path / "brkpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "wl.py").write_text(
        "try:\n    from brkpkg.impl import build\nexcept ImportError as missing:\n    build = None\n"
        "if True:\n    def other():\n        pass\nwith open(__file__) as fh:\n    pass\n"
    )
    path = [str(tmp_path)]
    for name in ("build", "other", "missing", "fh"):
        assert resolve_entry(f"brkpkg.wl:{name}", "entry", path) == pkg / "wl.py"
    with pytest.raises(WorkloadError, match=r"defines no othr \(did you mean other\?\)"):
        resolve_entry("brkpkg.wl:othr", "entry", path)


def test_a_thread_count_compared_under_contention_is_flagged_like_precision():
    """A new user's quick run verified threads=1 at 8.9x over the default 2 threads while another
    process held a CPU (1.0x on an idle run of the same machine): every knob compared under
    contention is flagged, not only precision and memory format."""
    from experiments.workload.analysis import _contention_sentence

    d = {
        "search": {
            "trail": [
                {"comparison": 2, "knob": "threads", "value": 1, "contended": True},
                {"comparison": 3, "knob": "precision", "value": "bfloat16", "contended": False},
            ]
        },
        "status": "ok",
        "verify_contended": True,
        "current": {"threads": 2, "precision": "float32"},
        "best_found": {"threads": 1, "precision": "float32"},
    }
    said = _contention_sentence(d)
    assert said.startswith(
        "Measured while other processes took CPU: comparison 2 (threads 1), the verification (threads differ)."
    )
    assert "thread, worker and process counts compete" in said
    assert _contention_sentence(d | {"verify_contended": False, "search": {"trail": []}}) == ""


def test_the_first_screen_gives_the_verified_gain_with_its_ci_and_rerun_interval():
    """The CI decides "verified faster"; the rerun interval, beside it, may reach below 1."""
    from experiments.workload.analysis import _gain

    d = {"gain": 1.47, "gain_ci": [1.29, 1.60], "gain_rerun": [1.20, 1.69]}
    assert _gain(d) == "1.47x (95% CI 1.29-1.60; 95% rerun interval 1.20-1.69)"
    assert _gain({**d, "gain_rerun": None}) == "1.47x (95% CI 1.29-1.60)"  # a recommended.json from before


def test_the_verification_splits_its_rounds_over_processes_set_up_one_at_a_time(monkeypatch):
    """Its policy: ``repeats`` rounds and the timeline's epochs over ``verify_processes``
    workers, set up one at a time (two set-ups at once run their steps on the same CPUs)."""
    from experiments.workload import verify
    from experiments.workload.measure import Params

    seen = []
    monkeypatch.setattr(verify, "run_workers", lambda call, policy: seen.append(policy) or RunResult())
    after = [{"outcome": {"start": _cfg(), "winner": _cfg(num_workers=1)}}]
    for epochs in (False, True):
        verify.verify(Params(stage="verify", repeats=6, verify_processes=3, verify_epochs=epochs), after)
    assert [(p.min_rounds, p.workers, p.setup_alone) for p in seen] == [(7, 3, True), (6, 3, True)]


def test_a_verification_of_fewer_than_two_rounds_a_process_is_refused():
    """An interval needs 2 rounds, and so does the spread within a process that the spread
    between processes is judged against (a single round gave a CI of nan-nan and broke the
    recommendation's files)."""
    from experiments.workload.measure import Params

    with pytest.raises(ValueError, match=r"repeats=1 is out of range; it must be >= 2 x verify_processes = 2"):
        Params(repeats=1, verify_processes=1)
    with pytest.raises(ValueError, match=r"it must be >= 2 x verify_processes = 6"):
        Params(repeats=5, verify_processes=3)
    assert Params(repeats=6, verify_processes=3).verify_processes == 3


def test_the_precision_headline_gives_the_last_bfloat16_comparison_and_names_the_first():
    """A new user's search tried bfloat16 twice: 1.03x, no clear difference, against the first
    settings; 1.54x, better, after other knobs had changed, which made it the recommendation. The
    headline quoted the first; it gives the last and names the first beside it."""
    from experiments.workload.analysis import precision_headline

    first = {"knob": "precision", "value": "bfloat16", "rounds": 4, "ratio": 1.03, "ci_low": 0.58, "ci_high": 1.82}
    last = {"knob": "precision", "value": "bfloat16", "rounds": 6, "ratio": 1.54, "ci_low": 1.17, "ci_high": 2.02}
    back = {"knob": "precision", "value": "float32", "rounds": 4, "ratio": 0.7, "ci_low": 0.6, "ci_high": 0.8}
    trail = [first | {"decision": "no clear difference"}, back | {"decision": "worse"}, last | {"decision": "better"}]
    answer = precision_headline({"search": {"trail": trail}})["answer"]
    assert answer.startswith("precision bfloat16 on your model: 1.54x the best so far (95% CI 1.17-2.02), better")
    assert answer.endswith("last of 2 comparisons, the first against other settings read 1.03x (no clear difference)")
    one = precision_headline({"search": {"trail": trail[:1]}})["answer"]
    assert "1.03x" in one and "comparisons" not in one
    assert precision_headline({"search": {"trail": [back | {"decision": "worse"}]}}) is None
