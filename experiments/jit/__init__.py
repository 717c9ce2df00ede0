"""JIT experiment: does TorchScript or torch.compile speed up CPU inference, and at what cost?

The declaration; the measurement is in :mod:`experiments.jit.measure`, findings and figures in
:mod:`experiments.jit.analysis`, the report's prose in ``report.yaml``. The config section's
schema, the command line and the parameter table come from its ``Params``.
"""

from lab.declare import Column, Experiment, Flag

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
    ),
    flags=(Flag("allclose", "output differs from eager", "all"),),
    free_params=frozenset({"warmup_calls"}),
    order=50,
)

#: Modes in report order.
MODES = ("eager", "script", "trace", "compile")
