"""The workload experiment: the search on a known landscape, the checks of a user's workload,
one configuration measured for real (DataLoader workers, bfloat16, channels_last, DDP replicas),
and the recommendation files."""

from __future__ import annotations

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
from experiments.workload.loader import WorkloadError, load
from experiments.workload.search import Search, decide, median_ci

ROOT = Path(__file__).resolve().parent.parent

# ------------------------------------------------------------------ the search


def test_sign_test_interval_of_the_median():
    assert median_ci([1.0] * 5)[1:] == (pytest.approx(math.nan, nan_ok=True),) * 2  # no 95% interval under 6
    assert median_ci([3, 1, 2, 6, 5, 4]) == (3.5, 1, 6)  # n = 6: P(all on one side) = 1/32 < 5%: [min, max]
    assert median_ci(list(range(1, 11))) == (5.5, 2, 9)  # n = 10: [x_(2), x_(9)]
    assert decide([1.2] * 6, 10) == "better" and decide([0.8] * 6, 10) == "worse"
    assert decide([1.2, 0.9] * 3, 10) == "" and decide([1.2, 0.9] * 5, 10) == "no clear difference"


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
    # every clear difference is decided after the 6 rounds a 95% interval needs
    assert {c.decision for c in trail} <= {"better", "worse"} and all(len(c.ratios) == 6 for c in trail)
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
        ("wl_none", None, "cannot import wl_none_missing (ModuleNotFoundError"),
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
            "wl_current",
            GOOD.replace('{"num_workers": 1}', '{"workers": 1}'),
            "current settings: unknown knob 'workers'",
        ),
        ("wl_value", GOOD.replace('{"num_workers": 1}', '{"precision": "fp16"}'), "precision='fp16'; allowed: one of"),
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
    cmd = [sys.executable, "-m", "experiments.workload", "--entry", "nosuch.pkg:build", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    m = pd.read_csv(out / "metrics.csv")
    assert list(m["status"]) == ["failed"]
    assert m["reason"][0].startswith("config key workload.entry: 'nosuch.pkg:build': cannot import nosuch.pkg")
    verify = tmp_path / "stage~verify"
    cmd = [sys.executable, "-m", "experiments.workload", "--stage", "verify", "--after", str(out), "--out", str(verify)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    reason = pd.read_csv(verify / "metrics.csv")["reason"][0]
    assert reason.startswith("the search did not finish") and "nothing to verify" in reason


# ------------------------------------------------------------------ measured for real


def _bench(meter, workload, steps=3):
    from experiments.workload.bench import Bench

    return Bench(workload, {"entry": "", "task": "train", "batch_size": 32}, meter, steps=steps, warmup=1)


def _cfg(**kw):
    base = {"num_workers": 0, "threads": 1, "precision": "float32", "channels_last": False, "mode": "eager"}
    return {**base, "processes": 1, "prefetch_factor": 2, "persistent_workers": False, **kw}


def test_a_configuration_is_measured_with_its_workers_memory_and_spans():
    from experiments.window import Meter

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


def test_two_replicas_train_one_model_over_gloo():
    from experiments.window import Meter

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


def test_knob_space_drops_what_this_machine_or_workload_cannot_do(monkeypatch):
    from experiments.workload import candidates
    from experiments.workload.measure import Params

    workload = load("", "train", 32)
    monkeypatch.setattr(candidates, "native_bf16", lambda: (False, "avx512_bf16: no, amx_tile: no"))
    space, skipped = candidates.knob_space(Params(mode=("eager", "script")), workload)
    assert space["precision"] == ["float32"] and "workload.bf16: any" in skipped["precision"]
    assert space["mode"] == ["eager"] and space["channels_last"] == [False, True]  # 4-D images
    space, skipped = candidates.knob_space(Params(bf16="any"), workload)
    assert "bfloat16" in space["precision"] and "precision" not in skipped
    cfg = _cfg(processes=2, threads=2, num_workers=4)  # 2 x (2 + 4) = 12 CPUs at once
    why = candidates.invalid_reason(cfg, Params(), workload, {}, limit=2)
    assert why.startswith("asks for 12 CPUs at once")
    assert candidates.invalid_reason(_cfg(persistent_workers=True), Params(), workload, {}, 4).startswith("persistent")
    fit = candidates.fit_threads(2, (1, 2))
    assert fit(_cfg(threads=2, num_workers=1), "num_workers")["threads"] == 1
    assert fit(_cfg(threads=2, num_workers=1), "threads")["threads"] == 2  # only a workers move is coupled
    back = fit(_cfg(num_workers=0, persistent_workers=True, prefetch_factor=4), "num_workers")
    assert back["persistent_workers"] is False and back["prefetch_factor"] == 2  # DataLoader's defaults


# ------------------------------------------------------------------ the recommendation


def _verified(gain_ci_low: float) -> dict:
    from experiments.workload.recommend import recommendation

    rows = []
    for role, cfg, v in (("baseline", _cfg(), 100.0), ("point", _cfg(num_workers=2, precision="bfloat16"), 150.0)):
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
    assert d["measured"]["data_stall_pct"]["recommended"]["median"] == 5.0
    py = as_python(d)
    assert "num_workers=2, persistent_workers=False, prefetch_factor=2" in py
    assert 'with torch.autocast("cpu", dtype=torch.bfloat16):' in py and "torch.set_num_threads(1)" in py
    compile(py.replace("dataset", "[]"), "recommended.py", "exec")  # valid Python
    assert "OMP_NUM_THREADS=1" in as_env(d) and json.loads(as_json(d))["gain_ci"] == [1.4, 1.6]
    unclear = _verified(0.9)  # the gain's CI includes 1: no recommendation
    assert not unclear["verified"] and unclear["recommended"] == unclear["current"] and unclear["changes"] == {}
    assert "current settings are fine here" in as_python(unclear) and "num_workers=0" in as_python(unclear)


def test_the_users_shell_is_measured_not_assumed():
    from experiments.userenv import capture, torch_defaults

    env = {"OMP_NUM_THREADS": "1", "KMP_AFFINITY": "compact", "PATH": "/bin", "GOMP_CPU_AFFINITY": "0"}
    assert capture(env) == {"GOMP_CPU_AFFINITY": "0", "KMP_AFFINITY": "compact", "OMP_NUM_THREADS": "1"}
    measured, why = torch_defaults({"OMP_NUM_THREADS": "1"})
    assert why == "" and measured["torch_threads"] == 1
    from experiments.workload.analysis import environment_sentences

    text = " ".join(
        environment_sentences({"variables": {"OMP_NUM_THREADS": "1", "KMP_AFFINITY": "compact"}, "torch_threads": 1}, 2)
    )
    assert "Your shell exports OMP_NUM_THREADS=1: your own programs run 1 intra-op thread" in text
    assert "KMP_AFFINITY=compact" in text
    assert KNOBS[0] == "num_workers"
