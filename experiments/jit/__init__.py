"""JIT experiment: does TorchScript or torch.compile speed up CPU inference, and at what cost?

The declaration; the measurement is in :mod:`experiments.jit.measure`, findings and figures in
:mod:`experiments.jit.analysis`, the report's prose in ``report.yaml``. The config section's
schema, the command line and the parameter table come from its ``Params``.
"""

from lab.declare import Col, Column, Experiment, Flag

EXPERIMENT = Experiment(
    name="jit",
    keys=("model", "mode"),
    metrics={"samples_per_s": "samples/s"},
    group=("model",),
    baseline={"mode": "eager"},
    figures=("jit_latency",),
    extra_columns=(
        Column("latency_ms", "latency", "ms"),
        Column("setup_s", "setup", "s"),
        Column("first_call_s", "first call", "s"),
        Column("first_call_warm_s", "first call, cache filled", "s"),
    ),
    flags=(Flag("allclose", "output differs from eager", "all"),),
    free_params=frozenset({"warmup_calls"}),
    times_setup=True,  # setup_s, first_call_s timed in the set-up; a compile finds the cache filled
    columns={
        "samples_per_s": Col("float", "`batch x iterations / wall_s`, batch 64 (`mlp`) or 16 (`cnn`)"),
        "latency_ms": Col("float", "`1000 x wall_s / iterations`: time per call (one batch)"),
        "setup_s": Col(
            "float",
            "creating the scripted/traced/compiled object, once per runner (~0 for `eager`); same on every row of one"
            " role",
        ),
        "first_call_s": Col(
            "float",
            "first call after setup (TorchScript profiling run, inductor compilation), once per runner; same on every"
            " row of one role; for `compile`, with inductor's cache empty (the job's first worker process), empty in"
            " later worker processes",
        ),
        "first_call_warm_s": Col(
            "float",
            "`compile` only: the first call in a later worker process of the job, which finds inductor's cache filled"
            " by the first one (what a restarted process pays); empty elsewhere",
        ),
        "upfront_s": Col(
            "float",
            "`setup_s` plus this runner's first call (cold or with the cache filled): the wall time of its timed"
            " up-front measurement, once per runner; the run's timing counts it as time spent measuring"
            " (`run.json` `upfront_s`)",
            "s",
        ),
        "allclose": Col(
            "bool", "output equals eager output on the same input, `torch.allclose(rtol=1e-4, atol=1e-5)`", "-"
        ),
        "max_abs_diff": Col(
            "float", "max absolute difference from the eager output (0.0 for `eager`)", "model output units"
        ),
        "torch_threads": Col("int", "`torch.get_num_threads()`, set before every window (equals `threads`)", "threads"),
        "interop_threads": Col("int", "`torch.get_num_interop_threads()` (not set; torch default)", "threads"),
        "omp_num_threads_env": Col("str", "`$OMP_NUM_THREADS` in the job; empty if unset", "-"),
    },
    order=50,
)

#: Modes in report order.
MODES = ("eager", "script", "trace", "compile")
