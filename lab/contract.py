"""The typed contract between the lab and an experiment's analysis: which hooks it has, and
the one object every hook receives.

An experiment package's ``analysis.py`` ends with ``ANALYSIS = Analysis(findings=..., ...)``:
every hook is named by a keyword, so a misspelt one (``headline=``) is a ``TypeError`` here and a
:class:`lab.registry.RegistryError` naming the file and the keyword when the registry loads the
package (it reads the declaration from the source, without importing pandas). The lab calls a
hook only through this declaration: no ``hasattr``, no reading of parameter names.

Every per-host hook takes one :class:`Context`: the experiment's summary, replicates, work
spans, CPU samples, the points' job records, its findings (for figures) and the :class:`Host`
(``lab.host.Host``: label and host.json). Tables are loaded on first use, so a figure that
reads only the summary never parses ``spans.csv``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

#: What a :class:`Context` can hold besides the host, in the order the docs list them.
CONTEXT_FIELDS = ("summary", "replicates", "spans", "samples", "jobs", "findings")


class Context:
    """What one experiment's analysis hook reads about one host.

    Attributes:
        host: the :class:`lab.host.Host` (a mapping of host.json's facts, with ``label``).
        summary: the summary table (:func:`analysis.stats.summarise`; one row per point), or None
            where there is none (a fidelity check of an experiment that did not run).
        replicates: one row per measured window (docs/csv-schema.md), or None.
        spans: the work spans of every point (``spans.csv``), or None.
        samples: the CPU samples of every point (``samples.csv``), or None.
        jobs: the points' ``job.json`` records (list of dicts; empty if none).
        findings: the experiment's ``findings.json`` (dict), for figures that mark its answers.
    """

    def __init__(self, host: Mapping, loader: Callable[[str], Any] | None = None, **given) -> None:
        unknown = set(given) - set(CONTEXT_FIELDS)
        if unknown:
            raise TypeError(f"Context has no {', '.join(sorted(unknown))}; it holds {', '.join(CONTEXT_FIELDS)}")
        self.host, self._given, self._loader = host, dict(given), loader

    def _get(self, name: str):
        if name not in self._given:
            self._given[name] = self._loader(name) if self._loader is not None else None
        value = self._given[name]
        return ([] if value is None else value) if name == "jobs" else value

    summary = property(lambda self: self._get("summary"))
    replicates = property(lambda self: self._get("replicates"))
    spans = property(lambda self: self._get("spans"))
    samples = property(lambda self: self._get("samples"))
    jobs = property(lambda self: self._get("jobs"))
    findings = property(lambda self: self._get("findings"))

    @property
    def ncpu(self) -> int | None:
        """The host's available CPUs (host.json ``available_cpus``), or None if unknown."""
        cpus = self.host.get("available_cpus")
        return int(cpus) if cpus is not None else None


Hook = Callable[[Context], Any]


@dataclass(frozen=True)
class Analysis:
    """The hooks of one experiment's ``analysis.py``; the lab calls nothing else of it.

    Attributes:
        findings: ``ctx -> [sentence]``: plain-language findings, every number from the data.
        figures: figure name -> ``ctx -> matplotlib Figure``; exactly the declared figures
            (:attr:`lab.declare.Experiment.figures`).
        headlines: ``ctx -> [{"question", "answer"}]`` for the report's first screen.
        tables: ``ctx -> [{"caption", "columns", "rows"}]`` of text for the report.
        data: ``ctx -> dict`` kept in findings.json for artefacts and the comparison of hosts.
        timeline_points: ``ctx -> [{key: value}]``: the points the timeline draws (needed with
            :attr:`lab.declare.Experiment.timeline`).
        fidelity: ``ctx -> [row]``: measured ratios against theory (:mod:`analysis.fidelity`);
            ``ctx.summary`` is None when the experiment did not run.
        summarise: ``replicates -> summary`` where the shared :func:`analysis.stats.summarise`
            does not fit (the workload's search).
        compare_tables: ``[HostResults] -> [{"caption", "columns", "rows"}]`` for the comparison
            of hosts (:mod:`analysis.compare`).
        artefacts: file name -> ``findings data -> text`` (:attr:`lab.declare.Experiment.artefacts`).

    Raises:
        TypeError: for a hook that is not callable, naming it.
    """

    findings: Hook
    figures: Mapping[str, Hook] = field(default_factory=dict)
    headlines: Hook | None = None
    tables: Hook | None = None
    data: Hook | None = None
    timeline_points: Hook | None = None
    fidelity: Hook | None = None
    summarise: Callable[[Any], Any] | None = None
    compare_tables: Callable[[list], list[dict]] | None = None
    artefacts: Mapping[str, Callable[[dict], str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            hooks = value.items() if isinstance(value, Mapping) else [(f.name, value)]
            for name, hook in hooks:
                if hook is not None and not callable(hook):
                    raise TypeError(f"hook {name!r} is not callable: {hook!r}")


#: The keyword names of :class:`Analysis` (the registry checks a declaration against them).
HOOKS = tuple(f.name for f in fields(Analysis))
