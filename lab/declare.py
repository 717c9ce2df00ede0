"""What an experiment declares about itself, light enough for the Snakefile to read at parse time.

Each experiment package ``experiments/<name>/`` defines ``EXPERIMENT = Experiment(...)`` in its
``__init__.py`` (plain Python: no torch, pandas or matplotlib). The workflow builds the path
scheme ``results/<host>/<name>/<key>~<value>/.../metrics.csv`` from it (keys in the order of
:attr:`Experiment.keys`), and the analysis and the report read its metric, baseline, units,
extra columns, flags and timeline from it. What needs pandas or matplotlib (findings, figures,
timeline point choice, theory checks) lives in the package's ``analysis.py``; the report's
prose in its ``report.yaml``; its config schema is generated from its ``Params``
(docs/adding-an-experiment.md).

Speedup always compares a higher-is-better throughput metric with the baseline of the point's
group, measured interleaved in the point's own job (:mod:`analysis.stats`). Parallel efficiency
is ``speedup / p`` (Amdahl's and Gustafson's textbook definition, e.g. Hennessy and Patterson,
*Computer Architecture*), ``p`` from :attr:`Experiment.parallel_units`; empty where ``p`` has no
meaning (DataLoader workers feed one training loop; JIT modes are not parallelism).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal


class RegistryError(ValueError):
    """An experiment package that is incomplete or inconsistent; the message names the file."""


#: Parameters that may differ between hosts for every experiment: the number of rounds and the
#: sampler's rate change how precisely a point is known, not what it measures.
FREE_PARAMS = frozenset({"repeats", "sample_hz"})


@dataclass(frozen=True)
class Column:
    """An experiment-specific metrics column summarised per point: its median and 95% CI become
    summary columns ``<name>``, ``<name>_ci_low``, ``<name>_ci_high``.

    Attributes:
        name: the metrics column (its unit in the name, e.g. ``latency_ms``).
        label: what the report's table calls it, e.g. ``latency``.
        unit: its unit for the table header, e.g. ``ms`` (header ``latency ms``).
        in_table: whether the report's per-point table shows it.
    """

    name: str
    label: str
    unit: str = ""
    in_table: bool = True

    @property
    def header(self) -> str:
        """The report table's column header: label and unit."""
        return f"{self.label} {self.unit}".strip()


#: The types a metrics column may have (:class:`Col`): how ``analysis.tables`` reads it back.
COLUMN_TYPES = ("float", "int", "bool", "str")


@dataclass(frozen=True)
class Col:
    """A column of ``metrics.csv`` that an experiment's ``run`` writes besides its parameter
    columns (its ``Params``) and the lab's own (:data:`lab.results.COMMON_COLUMNS`, the capacity
    probe's). Declared once, in :attr:`Experiment.columns`: the job refuses rows with an
    undeclared column, the CSV loader types it, and docs/parameters.md lists it.

    Attributes:
        type: ``float``, ``int``, ``bool`` or ``str`` (text; empty cells stay ``""``).
        meaning: what the value is and how it is computed, in one or two sentences (Markdown).
        unit: its unit (``samples/s``, ``ms``, ``%``); empty for a metric or summarised column,
            whose unit :attr:`Experiment.metrics` or its :class:`Column` gives, and ``-`` for
            none.
    """

    type: Literal["float", "int", "bool", "str"]
    meaning: str
    unit: str = ""


@dataclass(frozen=True)
class Flag:
    """A metrics column that flags a point in the report's ``flags`` column.

    Attributes:
        column: the metrics column; the summary carries one value per point.
        label: the flag's text in the report, e.g. ``worker warning``.
        aggregate: ``text``: the summary keeps the first non-empty text of the point's rows and
            the flag shows when there is one; ``all``: the summary is True when every ok row is
            true (a boolean column) and the flag shows when it is False; ``any``: the summary is
            True when some ok row is true and the flag shows when it is True.
    """

    column: str
    label: str
    aggregate: Literal["text", "all", "any"] = "text"

    def raised(self, value) -> bool:
        """Whether a summary value of this column shows the flag (missing values never do)."""
        if value is None or (not isinstance(value, str) and value != value):  # None or NaN
            return False
        if self.aggregate == "text":
            return str(value) != ""
        return (not bool(value)) if self.aggregate == "all" else bool(value)


@dataclass(frozen=True)
class SpanKind:
    """One kind of work span (``spans.csv`` column ``kind``) and how timelines draw it."""

    name: str
    colour: str
    label: str


def one_thread(point: Mapping[str, Any]) -> int:
    """Threads per timeline actor when every actor is one thread."""
    return 1


@dataclass(frozen=True)
class Timeline:
    """The experiment records work spans: it gets a Gantt timeline, a per-core heatmap and a
    Chrome trace (figures ``<name>_timeline``, ``<name>_cores``; ``traces/<name>.json``), of the
    points its ``analysis.py`` hook ``timeline_points`` chooses.

    Attributes:
        title: the timeline figure's title.
        kinds: the span kinds the experiment records, in legend order.
        on_cpu_share: spans carry ``cpu_s`` (CPU time inside the span): the light bar is the
            span's wall time and the dark fill's height its on-CPU share.
        threads_per_actor: threads of one actor at a point (the on-CPU share is per thread).
        roles: the windows drawn per point, by ``role`` (in order), and what each is called: by
            default the point's own (``{"point": ""}``); the workload draws its current settings
            (``baseline``) above the recommendation (``point``).
        scale_keys: keys whose points share the time axis's scale (same work); None: the group.
    """

    title: str
    kinds: tuple[SpanKind, ...]
    on_cpu_share: bool = False
    threads_per_actor: Callable[[Mapping[str, Any]], int] = one_thread
    roles: Mapping[str, str] = field(default_factory=lambda: {"point": ""})
    scale_keys: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Experiment:
    """How to run and read one experiment.

    Attributes:
        name: the package, config section, path component and ``experiment`` column.
        keys: swept parameters, in path order; together they identify a point.
        metrics: throughput column(s), higher is better, and the unit of each (``{"samples_per_s": "samples/s"}``).
        group: keys whose points share a baseline (speedups are computed within a group).
        baseline: ``{key: value}`` picking the baseline point inside each group; ``{}``: no
            baseline point (each job measures what its points are compared with).
        figures: the figures its ``ANALYSIS.figures`` draw, in report order (then its timelines).
        metric_for: the metric column of a point (``{key: value}``); default: the one metric.
        parallel_units: ``p`` of a point for parallel efficiency; None where it has no meaning.
        extra_columns, flags: other columns summarised per point (median and CI); columns that
            flag a point in the report.
        columns: every column its ``run`` writes beyond its parameters and the lab's own, with
            type, unit and meaning (:class:`Col`); the metrics, :attr:`extra_columns` and
            :attr:`flags` among them. A job whose rows hold an undeclared column fails before it
            writes a file.
        free_params: parameters besides :data:`FREE_PARAMS` hosts may differ in (warm-ups).
        resolve: per config key, a function ``(config value, available CPUs) -> list of values``
            that resolves a symbolic config value at parse time (e.g. ``threads: auto``): the
            values swept for a swept key, the tuple passed for a tuple-typed parameter.
        depends: the points (``{key: value}``) whose jobs must finish before a point's job;
            their ``job.json`` (with its ``outcome``) reaches ``run(..., after=[...])``.
        host_files: files of ``results/<host>/`` (JSON) the experiment's jobs read, e.g.
            ``user_env.json``; they reach ``run(..., host_files={name: content})``.
        artefacts: files its ``ANALYSIS.artefacts`` write into ``results/<host>/<name>/`` beside
            the summary (the workload's ``recommended.json``, ...).
        interpreters: its measured code runs under each interpreter of config ``interpreters``
            (:mod:`lab.interpreters`): the key ``interpreter`` (which must be in
            ``keys``) sweeps their labels, and its jobs read ``interpreters.json`` (which must be
            in ``host_files``).
        timeline: set if the experiment records work spans.
        adaptive_rounds: its ``run`` measures in interleaved rounds under a policy
            (``run(..., rounds=Rounds)``, :mod:`lab.rounds`): config ``rounds`` adds rounds where
            an interval is wide and splits them over worker processes. False for a job that
            decides its own rounds (the workload's search).
        times_setup: its runners time their set-up (a compile: ``upfront_s``), so its jobs'
            worker processes set up one at a time, not together (:mod:`lab.turns`).
        chooses_points: its job chooses its own points (the workload's search) and gets
            ``run(..., max_oversubscription=factor)`` to skip the ones that ask too much.
        job_env: the environment variables a point's job must start with (``{name: value}``,
            ``None``: unset), for settings a library reads once, when it loads, so that the
            job cannot set them itself (OpenMP's ``OMP_WAIT_POLICY``, read when torch loads
            libgomp). The workflow sets them on the job's command line and starts a job server
            with them beside the main one, which forks the job (:func:`lab.serverctl.start`;
            :data:`lab.threads.LOAD_TIME_VARIABLES`); a job
            started without them stops before it measures (:func:`lab.threads.check_job_env`).
        include: which points of the swept grid run (``{key: config value}`` -> bool; default:
            every one), to leave out points where a swept value changes nothing.
        later_keys: keys added after it first wrote results: a host's tables without one are
            compared with it read as not recorded (any other missing key column is an error).
        check_config: checks the experiment's config section (defaults filled in) at parse time
            beyond what its JSON Schema can say, before any job runs (the workload's entry
            point must exist); raises ValueError with one line naming the key.
        order: position in the report (lower first; ties by name).
    """

    name: str
    keys: tuple[str, ...]
    metrics: Mapping[str, str]
    group: tuple[str, ...]
    baseline: Mapping[str, Any]
    figures: tuple[str, ...] = ()
    metric_for: Callable[[Mapping[str, Any]], str] | None = None
    parallel_units: Callable[[Mapping[str, Any]], float] | None = None
    extra_columns: tuple[Column, ...] = ()
    flags: tuple[Flag, ...] = ()
    columns: Mapping[str, Col] = field(default_factory=dict)
    free_params: frozenset[str] = frozenset()
    resolve: Mapping[str, Callable[[Any, int], list]] = field(default_factory=dict)
    depends: Callable[[Mapping[str, Any]], list[dict]] | None = None
    host_files: tuple[str, ...] = ()
    artefacts: tuple[str, ...] = ()
    timeline: Timeline | None = None
    interpreters: bool = False
    adaptive_rounds: bool = True
    times_setup: bool = False
    chooses_points: bool = False
    check_config: Callable[[Mapping[str, Any]], None] | None = None
    job_env: Callable[[Mapping[str, Any]], Mapping[str, str | None]] | None = None
    later_keys: frozenset[str] = frozenset()
    include: Callable[[Mapping[str, Any]], bool] | None = None
    order: int = 100

    def __post_init__(self) -> None:
        if not self.keys:
            raise ValueError(f"experiment {self.name!r}: keys must name at least one swept parameter")
        if not self.metrics:
            raise ValueError(f"experiment {self.name!r}: metrics must name at least one throughput column")
        if len(self.metrics) > 1 and self.metric_for is None:
            raise ValueError(f"experiment {self.name!r}: several metrics need metric_for to choose one per point")
        unknown = [k for k in (*self.group, *self.baseline) if k not in self.keys]
        if unknown:
            raise ValueError(f"experiment {self.name!r}: group and baseline keys {unknown} are not in keys {self.keys}")
        self._check_columns()
        if self.interpreters and ("interpreter" not in self.keys or "interpreters.json" not in self.host_files):
            raise ValueError(
                f"experiment {self.name!r}: interpreters=True needs the key 'interpreter' in keys and"
                " 'interpreters.json' in host_files"
            )

    def _check_columns(self) -> None:
        """Every metric, summarised column and flag is among :attr:`columns`, each a :class:`Col`
        with a meaning and a known type (a number for a metric or summarised column, text or a
        boolean for a flag as it aggregates), and a unit given twice is the same unit."""
        named = {**dict.fromkeys(self.metrics, "metrics"), **dict.fromkeys(self.summarised_columns, "extra_columns")}
        named |= {f.column: "flags" for f in self.flags}
        missing = [f"{c} ({where})" for c, where in named.items() if c not in self.columns]
        if missing:
            raise ValueError(
                f"experiment {self.name!r}: columns lacks {', '.join(missing)}: declare each with Col(...)"
            )
        must = dict.fromkeys([*self.metrics, *self.summarised_columns], ("float", "int"))
        must |= {f.column: ("str",) if f.aggregate == "text" else ("bool",) for f in self.flags}
        for name, col in self.columns.items():
            if not isinstance(col, Col):
                raise ValueError(
                    f"experiment {self.name!r}: column {name!r} must be Col(type, meaning, unit), got {col!r}"
                )
            if col.type not in must.get(name, COLUMN_TYPES):
                allowed = must.get(name, COLUMN_TYPES)
                raise ValueError(
                    f"experiment {self.name!r}: column {name!r} has type {col.type!r}; allowed: {allowed}"
                    + (f" (it is one of {named[name]})" if name in must else "")
                )
            if not (isinstance(col.meaning, str) and col.meaning.strip()):
                raise ValueError(f"experiment {self.name!r}: column {name!r} needs a meaning: what it is, how computed")
            unit = self._declared_unit(name)
            if unit and col.unit and col.unit != unit:
                raise ValueError(
                    f"experiment {self.name!r}: column {name!r} has unit {col.unit!r} but is declared {unit!r}"
                    " in metrics or extra_columns: give it once"
                )

    def _declared_unit(self, name: str) -> str:
        """The unit :attr:`metrics` or :attr:`extra_columns` give column ``name`` ("" if none)."""
        return self.metrics.get(name) or next((c.unit for c in self.extra_columns if c.name == name), "")

    def column_unit(self, name: str) -> str:
        """The unit of one of :attr:`columns`: its own, else its metric's or summarised column's,
        else ``-``."""
        col = self.columns.get(name)
        return (col.unit if col is not None and col.unit else self._declared_unit(name)) or "-"

    def run_options(self) -> frozenset[str]:
        """The keyword arguments the package's ``run(params, baseline, ...)`` gets, as declared:
        ``rounds`` (:attr:`adaptive_rounds`), ``after`` (:attr:`depends`), ``host_files``
        (:attr:`host_files`) and ``max_oversubscription`` (:attr:`chooses_points`)."""
        declared = {
            "rounds": self.adaptive_rounds,
            "after": self.depends is not None,
            "host_files": bool(self.host_files),
            "max_oversubscription": self.chooses_points,
        }
        return frozenset(k for k, on in declared.items() if on)

    def metric(self, point: Mapping[str, Any]) -> str:
        """The metric column of a point (``point`` maps keys to values)."""
        return self.metric_for(point) if self.metric_for is not None else next(iter(self.metrics))

    def unit(self, metric: str) -> str:
        """The unit of a metric column (the column name itself if it is not declared)."""
        return self.metrics.get(metric, metric)

    def is_baseline(self, point: Mapping[str, Any]) -> bool:
        """Whether ``point`` is its group's baseline (values compared as text). An experiment
        without a baseline (``{}``) has no baseline point: its jobs measure their own."""
        return bool(self.baseline) and all(str(point[k]) == str(v) for k, v in self.baseline.items())

    def units_of(self, point: Mapping[str, Any]) -> float:
        """``p`` of a point for parallel efficiency (NaN where it has no meaning)."""
        return float(self.parallel_units(point)) if self.parallel_units is not None else float("nan")

    @property
    def all_figures(self) -> tuple[str, ...]:
        """Every figure of the experiment in report order: its own, then timeline and cores."""
        extra = (f"{self.name}_timeline", f"{self.name}_cores") if self.timeline else ()
        return (*self.figures, *extra)

    @property
    def summarised_columns(self) -> tuple[str, ...]:
        """Names of :attr:`extra_columns`."""
        return tuple(c.name for c in self.extra_columns)

    def sweep_values(self, key: str, value, ncpu: int) -> list:
        """The values swept for ``key`` given its config ``value`` (resolved at parse time)."""
        if key in self.resolve:
            return list(self.resolve[key](value, ncpu))
        return list(value) if isinstance(value, (list, tuple)) else [value]

    def env_of(self, point: Mapping[str, Any]) -> dict[str, str | None]:
        """The environment a point's job must start with (see :attr:`job_env`); ``{}`` if none."""
        return dict(self.job_env(point)) if self.job_env is not None else {}

    def needs(self, point: Mapping[str, Any]) -> list[dict]:
        """The points whose jobs must finish before this point's (see :attr:`depends`)."""
        return list(self.depends(point)) if self.depends is not None else []


def thread_ladder(ncpu: int) -> list[int]:
    """The thread (or process) counts a scaling sweep measures on ``ncpu`` available CPUs: the
    powers of two below ``ncpu``, then ``ncpu`` itself, as scaling studies sample them (1, 2, 4,
    8, 12 on 12 CPUs; 1, 2, ..., 128, 192 on 192). Every count is a job: 1 .. ``ncpu`` would be
    192 jobs on a 192-CPU node. Raises ValueError for ``ncpu`` below 1."""
    if ncpu < 1:
        raise ValueError(f"available CPUs must be at least 1, got {ncpu}")
    ladder = [1 << i for i in range(ncpu.bit_length()) if 1 << i < ncpu]
    return [*ladder, ncpu]


def point_label(point: Mapping[str, Any]) -> str:
    """``key=value`` pairs of a point, space separated, e.g. ``mode=threads workers=2``."""
    return " ".join(f"{k}={v}" for k, v in point.items())


@dataclass(frozen=True)
class Section:
    """A config section of the lab's own, not an experiment (``selfcheck``), whose schema, table
    and quick values are generated from a ``Params`` like an experiment's: it has the
    attributes of :class:`lab.registry.Registered` that :mod:`lab.schema` reads.

    Attributes:
        name: the config section, e.g. ``selfcheck``.
        title: what the section configures, for the schema's description.
        params_cls: its frozen ``Params(Declared)`` dataclass; no swept keys.
        source: the file that declares it, named by a declaration error.
        columns: the columns its rows hold besides its parameters and the lab's own (:class:`Col`).
    """

    name: str
    title: str
    params_cls: type
    source: str
    columns: Mapping[str, Col] = field(default_factory=dict)

    @property
    def prose(self) -> dict:
        return {"title": self.title}

    @property
    def spec(self):
        """No swept keys and no resolvers, as an experiment's declaration would hold."""
        return _NO_SPEC


#: What a :class:`Section` has of an experiment's declaration: no swept keys, no resolvers.
_NO_SPEC = type("NoSpec", (), {"keys": (), "resolve": {}})()
