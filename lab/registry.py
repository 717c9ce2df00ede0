"""The experiments of this checkout, found by looking, never listed by hand.

Every package ``experiments/<name>/`` (a directory with an ``__init__.py``) is an experiment.
It must define ``EXPERIMENT`` (an :class:`lab.declare.Experiment` whose ``name`` is the
directory's name) and hold the files of :data:`PACKAGE_FILES` (docs/adding-an-experiment.md):
the declaration, the measurement (``Params``, ``run``), the analysis (``ANALYSIS``, the
typed hooks of :class:`lab.contract.Analysis`) and the report's prose. Its config section's
schema, its command line and its parameter table are generated from ``Params``
(:mod:`lab.schema`); ``python -m lab.point <name>`` measures one point.
The workflow (``common.smk``), ``analysis/`` and ``report/`` loop over :func:`experiments` and
import an experiment's modules only through :class:`Registered`; none of them names one.

Importing this module and calling :func:`experiments` is light (the declarations, the report
prose and the ``Params`` dataclasses: no torch, pandas or matplotlib), so the Snakefile does it at
parse time. An experiment's ``analysis`` module (pandas, matplotlib) is imported on first use.
"""

from __future__ import annotations

import ast
import functools
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from lab.contract import HOOKS, Analysis
from lab.declare import Experiment, RegistryError
from lab.params import Declared, parse_value

#: Where the experiment packages live.
ROOT = Path(__file__).resolve().parent.parent / "experiments"

#: The files every experiment package holds, and what each is for.
PACKAGE_FILES = {
    "__init__.py": "the declaration: EXPERIMENT = Experiment(...)",
    "measure.py": "frozen Params(Declared), pure run(params, baseline, ...); no pandas, matplotlib or jinja2",
    "analysis.py": "ANALYSIS = Analysis(findings=..., figures={...}, ...): hooks that take one Context",
    "report.yaml": "title, question, what, why; caption and alt per figure",
}

#: Keys of report.yaml.
PROSE_KEYS = ("title", "question", "what", "why", "figures")


@dataclass(frozen=True)
class Registered:
    """One experiment package found in ``experiments/``.

    Attributes:
        spec: its declaration.
        path: the package directory.
    """

    spec: Experiment
    path: Path

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def package(self) -> str:
        """The package's module name, ``experiments.<name>``."""
        return f"experiments.{self.name}"

    def measurement(self) -> ModuleType:
        """Its measurement module (``Params``, ``run``, ``main``)."""
        return importlib.import_module(f"{self.package}.measure")

    def analysis(self) -> ModuleType:
        """Its analysis module (findings, figures, timeline points, theory checks)."""
        return importlib.import_module(f"{self.package}.analysis")

    def hooks(self) -> Analysis:
        """Its analysis hooks: ``analysis.ANALYSIS`` (imports pandas and matplotlib).

        Raises:
            RegistryError: naming the file, if ``ANALYSIS`` is not an :class:`Analysis`.
        """
        hooks = getattr(self.analysis(), "ANALYSIS", None)
        if not isinstance(hooks, Analysis):
            raise RegistryError(f"{self.path / 'analysis.py'}: needs ANALYSIS = Analysis(findings=..., ...)")
        return hooks

    def run_options(self) -> frozenset[str]:
        """The keyword arguments its ``run`` gets besides ``params`` and ``baseline``, from its
        declaration (:meth:`lab.declare.Experiment.run_options`)."""
        return self.spec.run_options()

    @property
    def params_cls(self) -> type:
        """Its ``Params`` dataclass."""
        return self.measurement().Params

    @functools.cached_property
    def prose(self) -> dict:
        """``report.yaml``: title, question, what, why and ``figures: {name: {caption, alt}}``."""
        return yaml.safe_load((self.path / "report.yaml").read_text(encoding="utf-8"))

    def parse_point(self, point: Mapping[str, str]) -> dict[str, Any]:
        """A point read from a path (``{"workers": "2"}``) with its values typed as in ``Params``,
        keys in declaration order.

        Raises:
            ValueError: a key missing, or a value that is not of its field's type.
        """
        missing = [k for k in self.spec.keys if k not in point]
        if missing:
            raise ValueError(f"{self.name}: point {dict(point)} lacks the keys {missing}")
        return {k: parse_value(self.params_cls, k, str(point[k])) for k in self.spec.keys}


#: Modules a package's declaration and measurement module never import (docs/architecture.md):
#: the declaration is read at parse time, the measurement runs without the analysis stack.
FORBIDDEN = {"__init__.py": ("torch", "pandas", "matplotlib", "jinja2", "analysis", "report")}
FORBIDDEN["measure.py"] = FORBIDDEN["__init__.py"][1:]  # torch: inside functions only, see below


def _imported(tree: ast.Module, top_level_only: bool) -> set[str]:
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def _parse(path: Path) -> ast.Module:
    """The syntax tree of one of a package's files.

    Raises:
        RegistryError: naming the file and the line, for a syntax error.
    """
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as exc:
        raise RegistryError(f"{path}, line {exc.lineno}: SyntaxError: {exc.msg}") from None


def _check_imports(directory: Path) -> None:
    """The declaration imports no torch (at module level), pandas, matplotlib, jinja2, analysis
    or report; the measurement module none of these but torch (which it imports in functions)."""
    for name, forbidden in FORBIDDEN.items():
        tree = _parse(directory / name)
        found = sorted(set(forbidden) & _imported(tree, top_level_only=name == "__init__.py"))
        if name == "measure.py":
            found += sorted({"torch"} & _imported(tree, top_level_only=True))
        if found:
            raise RegistryError(f"{directory / name}: imports {', '.join(found)} (docs/architecture.md, house rules)")


def _load(directory: Path) -> Registered:
    """Import and check one package (see the module docstring)."""
    missing = [f for f in PACKAGE_FILES if not (directory / f).exists()]
    if missing:
        what = "; ".join(f"{f}: {PACKAGE_FILES[f]}" for f in missing)
        raise RegistryError(f"{directory}: missing {', '.join(missing)} ({what})")
    _check_imports(directory)
    try:
        module = importlib.import_module(f"experiments.{directory.name}")
    except (ImportError, ValueError, TypeError, SyntaxError) as exc:
        raise RegistryError(f"{directory / '__init__.py'}: {type(exc).__name__}: {exc}") from None
    spec = getattr(module, "EXPERIMENT", None)
    if not isinstance(spec, Experiment):
        raise RegistryError(f"{directory / '__init__.py'}: defines no EXPERIMENT = Experiment(...)")
    if spec.name != directory.name:
        raise RegistryError(f"{directory / '__init__.py'}: EXPERIMENT.name is {spec.name!r}, not {directory.name!r}")
    found = Registered(spec, directory)
    _check_analysis(found)
    _check_prose(found)
    _check_params(found)
    return found


def _check_prose(exp: Registered) -> None:
    where = exp.path / "report.yaml"
    prose = exp.prose
    if not isinstance(prose, dict) or any(k not in prose for k in PROSE_KEYS):
        raise RegistryError(f"{where}: needs the keys {', '.join(PROSE_KEYS)}")
    for fig in exp.spec.all_figures:
        text = (prose["figures"] or {}).get(fig) or {}
        if not text.get("caption") or not text.get("alt"):
            raise RegistryError(f"{where}: figure {fig!r} needs a caption and an alt text")


#: The declaration behind each keyword argument of ``run`` (:meth:`lab.declare.Experiment.run_options`).
CAPABILITY = {
    "rounds": "adaptive_rounds",
    "after": "depends",
    "host_files": "host_files",
    "max_oversubscription": "chooses_points",
}


def _takes_any_keyword(takes) -> bool:
    import inspect

    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in takes.values())


def _check_params(exp: Registered) -> None:
    """``Params`` is a :class:`lab.params.Declared` dataclass with the swept keys, ``repeats``
    and ``sample_hz``, and ``run`` takes the keyword arguments its declaration promises
    (:meth:`lab.declare.Experiment.run_options`): a capability is declared, never guessed."""
    where = exp.path / "measure.py"
    try:
        module = exp.measurement()
    except (ImportError, ValueError, TypeError, SyntaxError) as exc:
        raise RegistryError(f"{where}: {type(exc).__name__}: {exc}") from None
    params_cls, run = getattr(module, "Params", None), getattr(module, "run", None)
    if not (isinstance(params_cls, type) and issubclass(params_cls, Declared)) or not callable(run):
        raise RegistryError(f"{where}: needs a frozen dataclass Params(Declared) and a function run(params, baseline)")
    if not getattr(getattr(params_cls, "__dataclass_params__", None), "frozen", False):
        raise RegistryError(f"{where}: Params must be a frozen dataclass: @dataclass(frozen=True)")
    names = {f.name for f in fields(params_cls)}
    missing = [k for k in exp.spec.keys if k not in names]
    if missing:
        raise RegistryError(f"{where}: Params has no fields {missing} (swept keys of {exp.name})")
    if "repeats" not in names or "sample_hz" not in names:
        raise RegistryError(f"{where}: Params needs the fields repeats and sample_hz")
    from lab.results import COMMON_COLUMNS, LAB_COLUMNS, probe_mod

    clash = sorted(set(exp.spec.columns) & (names | {*COMMON_COLUMNS, *LAB_COLUMNS, *probe_mod.COLUMNS}))
    if clash:
        raise RegistryError(
            f"{exp.path / '__init__.py'}: columns {', '.join(clash)} already are a parameter of Params or a column"
            " the lab writes (docs/csv-schema.md, section 2.1): rename them"
        )
    import inspect

    takes = inspect.signature(run).parameters
    positional = [p for p in takes.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < 2 or positional[1].name != "baseline":
        raise RegistryError(f"{where}: run must take (params, baseline=None, ...): the lab passes both by position")
    required = [
        p.name
        for p in list(takes.values())[2:]
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    extra = [n for n in required if n not in exp.run_options()]
    if extra:
        raise RegistryError(
            f"{where}: run(...) requires {', '.join(extra)}, which no declaration in"
            f" {exp.path / '__init__.py'} provides"
        )
    lacking = sorted(o for o in exp.run_options() if o not in takes and not _takes_any_keyword(takes))
    if lacking:
        why = ", ".join(f"{o} (Experiment {CAPABILITY[o]})" for o in lacking)
        raise RegistryError(
            f"{where}: run(...) lacks the keyword arguments {why} that {exp.path / '__init__.py'} declares;"
            " adaptive_rounds is True unless declared False (a job that decides its own rounds)"
        )


def _check_analysis(exp: Registered) -> None:
    """``analysis.py`` ends with ``ANALYSIS = Analysis(...)`` (:class:`lab.contract.Analysis`),
    read from its source (importing it would load pandas and matplotlib at parse time): every
    keyword is a hook the lab knows, each names a function of the module, ``figures`` is a
    literal dict of exactly the declared figures, ``timeline_points`` is there with a timeline
    and ``artefacts`` names the declared artefacts."""
    where = exp.path / "analysis.py"
    tree = _parse(where)
    assigned = [
        n.value
        for n in tree.body
        if isinstance(n, ast.Assign | ast.AnnAssign)
        and any(getattr(t, "id", "") == "ANALYSIS" for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))
    ]
    if len(assigned) != 1 or not (
        isinstance(assigned[0], ast.Call) and getattr(assigned[0].func, "id", "") == "Analysis"
    ):
        times = f" (assigned {len(assigned)} times)" if len(assigned) > 1 else ""
        raise RegistryError(
            f"{where}: needs one ANALYSIS = Analysis(findings=..., figures={{...}}, ...) at module level{times}"
        )
    given = {k.arg: k.value for k in assigned[0].keywords if k.arg}
    _check_hook_values(where, tree, given)
    unknown = [k for k in given if k not in HOOKS]
    if unknown:
        raise RegistryError(f"{where}: Analysis(...) has no hook {unknown[0]!r}; the hooks are {', '.join(HOOKS)}")
    needed = ["findings"] + (["timeline_points"] if exp.spec.timeline else [])
    missing = [n for n in needed if n not in given]
    if missing:
        raise RegistryError(f"{where}: Analysis(...) needs the hook {missing[0]!r}")
    _check_named(where, tree, given, "figures", set(exp.spec.figures), exp.path / "__init__.py")
    _check_named(where, tree, given, "artefacts", set(exp.spec.artefacts), exp.path / "__init__.py")


def _check_hook_values(where: Path, tree: ast.Module, given: dict) -> None:
    """Every hook of an ``Analysis(...)`` call (and every value of its ``figures`` and
    ``artefacts``) names a function the module defines or imports, or is a lambda."""
    known = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    known |= {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    for hook, node in given.items():
        values = node.values if isinstance(node, ast.Dict) and hook in ("figures", "artefacts") else [node]
        for value in values:
            if not (isinstance(value, ast.Lambda) or (isinstance(value, ast.Name) and value.id in known)):
                text = ast.unparse(value)
                raise RegistryError(f"{where}: Analysis(..., {hook}=...): {text} is not a function of the module")


def _check_named(where: Path, tree: ast.Module, given: dict, hook: str, declared: set, declaration: Path) -> None:
    """The ``figures`` or ``artefacts`` of an ``Analysis(...)`` call: a literal dict whose keys
    are exactly the ``declared`` names (an absent one: no names declared)."""
    node = given.get(hook)
    if node is None:
        if declared:
            raise RegistryError(f"{where}: Analysis(...) needs {hook}={{...}} for {sorted(declared)} ({declaration})")
        return
    if not (isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) for k in node.keys)):
        raise RegistryError(f"{where}: Analysis(..., {hook}=...) must be a literal dict with names as keys")
    drawn = {k.value for k in node.keys}
    if drawn != declared:
        raise RegistryError(f"{where}: {hook} has {sorted(drawn)} but {declaration} declares {sorted(declared)}")


def discover(root: Path = ROOT) -> dict[str, Registered]:
    """Every experiment package under ``root``, in report order (``order``, then name).

    Raises:
        RegistryError: naming the file of a package that is incomplete or inconsistent.
    """
    found = [_load(d) for d in sorted(root.iterdir()) if d.is_dir() and (d / "__init__.py").exists()]
    return {e.name: e for e in sorted(found, key=lambda e: (e.spec.order, e.name))}


@functools.cache
def experiments() -> dict[str, Registered]:
    """The experiments of this checkout (discovered once per process)."""
    return discover()


def get(name: str) -> Registered:
    """The experiment called ``name``.

    Raises:
        ValueError: if there is none, naming the experiments there are.
    """
    try:
        return experiments()[name]
    except KeyError:
        raise ValueError(f"unknown experiment {name!r}; known: {', '.join(experiments())}") from None


def figures() -> dict[str, str]:
    """Every experiment figure name -> the experiment that draws it."""
    return {fig: e.name for e in experiments().values() for fig in e.spec.all_figures}


def config_checks() -> dict[str, object]:
    """Each experiment's parse-time check of its config section (``Experiment.check_config``), by name."""
    return {n: e.spec.check_config for n, e in experiments().items() if e.spec.check_config is not None}


def rounds_users() -> list[str]:
    """The experiments that declare ``adaptive_rounds`` (:mod:`lab.rounds`): their ``repeats``
    are a minimum and config ``rounds`` applies to them."""
    return [n for n, e in experiments().items() if e.spec.adaptive_rounds]
