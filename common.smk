# Helpers shared by experiments/, analysis/ and report/ rules.smk (host label, sweep points,
# command lines). Experiments come from the registry (lab/registry.py): every package
# experiments/<name>/; nothing here names one.
import itertools
import json
import os
import shlex
import sys
import time
from pathlib import Path

import pandas as pd
from snakemake.exceptions import WorkflowError
from snakemake.utils import Paramspace

sys.path.insert(0, workflow.basedir)

from analysis.runinfo import RUN_FIGURES
from analysis.hosts import compare_dirs, compare_dirs_problem
from lab import registry
from lab.userenv import capture as capture_user_env
from lab.server import export as export_job_server
from lab.schedfix import one_timer_at_a_time
from lab.threads import env_command
from lab.interpreters import labels as interpreter_labels
from lab.interpreters import found as interpreters_found
from lab.hostinfo import other_machine
from lab.fileio import output_dir_problem
from lab.host import (
    available_cpus,
    host_label,
    measurement_tmpdir,
    prepare_environment,
)

# Snakemake's scheduler otherwise wakes itself once a second per finished job, and took up to
# 0.23 CPU from the last measurements of a run (lab/schedfix.py)
one_timer_at_a_time()
#: The thread variables of the user's shell, before any job's environment is set.
USER_ENV = capture_user_env()
REGISTRY = registry.experiments()
#: When Snakemake read this file (s since the epoch): a comparison written after it is this run's.
_PARSED_AT = time.time()
HOST = host_label(config.get("host"))
#: SLURM node types by host label (config cluster.hosts; profiles/slurm): each label's points
#: run on nodes its partition and constraint select. Empty: this machine, under HOST.
CLUSTER = (config.get("cluster") or {}).get("hosts") or {}
#: Host labels this run measures.
HOSTS = list(CLUSTER) or [HOST]
# host left out, null or `--config host=` (empty): the label taken, said once
if not config.get("host") and not CLUSTER:
    print(
        f"host label {HOST!r}, this machine's hostname: measurements go under results/{HOST}/"
        " (--config host=NAME sets another)",
        file=sys.stderr,
    )
# "compare" is refused by the schema; any other case too: one directory where case does not count
for h in HOSTS:
    if h.lower() == "compare":
        sys.exit(
            f"Invalid configuration: host label {h!r} would be results/compare/, the comparison's"
            " directory, where case does not count: set another with --config host=NAME"
        )
EXPERIMENTS = list(config["experiments"])
#: Experiments that record work spans: each gets a timeline, a heatmap and a Chrome trace.
TIMELINES = [name for name, e in REGISTRY.items() if e.spec.timeline]
#: Files the experiments' analysis writes beside their summaries (e.g. recommended.json).
ARTEFACTS = sorted({a for e in REGISTRY.values() for a in e.spec.artefacts})
#: Every figure name -> its experiment; figures of the whole run map to None.
FIGURES = registry.figures() | dict.fromkeys(RUN_FIGURES)
# Every job writes its caches under .snakemake/lab/ and draws headless. Measurement jobs get a
# short TMPDIR of their own (AF_UNIX socket paths of multiprocessing must stay short); under a
# checkout whose path has a space, TMPDIR and the inductor cache move there too.
MEASURE_TMPDIR = measurement_tmpdir(workflow.basedir)
prepare_environment(workflow.basedir, ".snakemake/lab", short_dir=MEASURE_TMPDIR)
# One lock file per machine and checkout, in the machine's own /tmp: two host labels measured
# from one checkout (e.g. under taskset) never measure at the same time on one machine, while
# on a cluster jobs on different nodes (each node held exclusively) do not wait for each other.
MEASURE_LOCK = f"{MEASURE_TMPDIR}/measure.lock"
#: The job server (lab/server.py): locally, jobs fork from one process that has imported
#: torch, pandas and matplotlib (2.5 s and 1.5 s a job otherwise); the rules' commands reach it
#: through LAB_JOB_SERVER. On a cluster the submit host's own jobs (the local rules: analysis,
#: figures, reports) fork from a server that imports no torch; a job on a node (Snakemake again
#: inside the SLURM job, in remote mode) names no server and starts its own interpreter,
#: so a measurement never runs outside its SLURM job. Where none is up, every job starts afresh.
JOB_SERVER = (
    ""
    if CLUSTER and (workflow.remote_exec or workflow.subprocess_exec)
    else f"{MEASURE_TMPDIR}/jobs.sock"
)
export_job_server(JOB_SERVER)
#: Rules whose jobs do not go through the server: each measures a fresh interpreter of its own.
UNSERVED_RULES = ("user_env", "interpreters", "all", "compare")
_SERVER = {}


def refuse_another_machine():
    """Snakemake's onstart, first: a local run that would measure under a label whose host.json
    describes another machine (a directory copied from elsewhere, or this label's results from a
    VM of another CPU model) stops before its first job, naming both machines; every point would
    be set aside as measured on another node. A run that only analyses such a directory (its
    report redone with newer code) goes on."""
    if CLUSTER:  # a label's host.json describes its nodes, not this submit host
        return
    measured = {
        j.wildcards.host
        for j in workflow.dag.needrun_jobs()
        if j.rule.name in ("measure", "selfcheck")
    }
    for host in sorted(measured):
        if problem := other_machine(f"results/{host}/host.json"):
            sys.exit(
                f"Invalid host label {host!r}: {problem}. Measure this machine under another label"
                " (--config host=NAME), or move that directory away (compare it from anywhere:"
                " config compare.dirs)"
            )


def start_job_server():
    """Snakemake's onstart: start the job server if this run has jobs for it, with the
    environment Snakemake gives a measurement job (thread variables = all cores, its TMPDIR), so
    that what torch and OpenMP read when they load is what a job would read; and a variant
    server for each load-time setting the run's measurement jobs ask for (`job_env`). A run
    whose jobs all come from analysis/rules.smk and report/rules.smk gets a server that imports
    no torch (`lab.server serve --analysis-only`): so does a cluster run (executor slurm), whose
    server serves only the local rules (on this machine's CPUs); its other jobs run on nodes.
    """
    expected = "slurm" if CLUSTER else "local"
    if executor_name().rsplit("-", 1)[-1] != expected or not JOB_SERVER:
        return
    jobs = list(workflow.dag.needrun_jobs())
    served = [
        j
        for j in jobs
        if j.rule.name not in UNSERVED_RULES and (not CLUSTER or j.is_local)
    ]
    if not served:
        return
    from lab import serverctl

    cores = str(available_cpus() if CLUSTER else workflow.cores)
    env = dict(os.environ) | {"TMPDIR": MEASURE_TMPDIR}
    for var in ("OMP", "GOTO", "OPENBLAS", "MKL", "NUMEXPR"):
        env[f"{var}_NUM_THREADS"] = cores
    env["VECLIB_MAXIMUM_THREADS"] = cores
    os.makedirs(MEASURE_TMPDIR, exist_ok=True)
    wanted = [
        REGISTRY[j.wildcards.experiment].spec.env_of(point_of(j.wildcards))
        for j in served
        if j.rule.name == "measure"
    ]
    # a run that only analyses and reports (`snakemake compare`, a report redrawn) needs no torch
    analysis_only = all(
        Path(j.rule.snakefile).parent.name in ("analysis", "report") for j in served
    )
    _SERVER["procs"] = serverctl.start(
        JOB_SERVER, env, f"{MEASURE_TMPDIR}/server.log", wanted, analysis_only
    )


def stop_job_server():
    """Snakemake's onsuccess and onerror: stop the job server, if one was started."""
    from lab import serverctl

    serverctl.stop(_SERVER.pop("procs", []))


def say_where_the_reports_are():
    """Snakemake's onsuccess (a run that ran jobs): one line per report of this run's host
    labels, and of the comparison where this run wrote it, so that the last lines of a long log
    say where to look."""
    for where in [*(f"results/{h}" for h in HOSTS), "results/compare"]:
        html = Path(where, "report.html")
        if html.is_file() and (
            where != "results/compare" or html.stat().st_mtime >= _PARSED_AT
        ):
            print(f"Report: {html} and {html.with_suffix('.md')}", file=sys.stderr)


def host_cpus(host):
    """CPUs a host label's points may use, for sweeps resolved at parse time (`threads: auto`):
    its cluster.hosts entry's `cpus`, else this machine's available CPUs."""
    return int(CLUSTER[host]["cpus"]) if host in CLUSTER else available_cpus()


LOCAL_EXECUTORS = ("local", "dryrun", "touch")


def executor_name():
    """The executor plugin's name (``local`` where none is set)."""
    plugin = workflow.executor_plugin
    return getattr(plugin, "name", "local") if plugin is not None else "local"


def measure_threads(wildcards):
    """Threads of a measurement job: every CPU of its node (cluster.hosts `cpus`: SLURM's
    --cpus-per-task) or, locally, all --cores, so no other job runs beside it. Another executor
    (profiles/slurm) without cluster.hosts would submit measurements that share nodes: refused,
    naming the key."""
    if CLUSTER:
        return host_cpus(wildcards.host)
    name = executor_name()
    if name.rsplit("-", 1)[-1] not in LOCAL_EXECUTORS:
        raise WorkflowError(
            f"config key cluster.hosts: none set, but the executor is {name!r}: measurement jobs would"
            " share nodes with other jobs. Map each host label to its nodes (README 'On a cluster'),"
            " e.g. cluster: {hosts: {mynodes: {partition: p, cpus: 64}}}, or run locally with --cores N"
        )
    return workflow.cores


def _node(wildcards, key, default=""):
    return str(CLUSTER.get(wildcards.host, {}).get(key, default))


def slurm_partition(wildcards):
    return _node(wildcards, "partition")


def slurm_constraint(wildcards):
    """The label's node features (sbatch -C), or None: no constraint (the resource is absent;
    the plugin refuses --constraint inside slurm_extra)."""
    return _node(wildcards, "constraint") or None


def slurm_mem_mb(wildcards):
    """The label's `mem_mb`, or 0: no --mem at all (the plugin adds none for 0), so an exclusive
    job gets what SLURM gives it by default rather than Snakemake's default 1000 MB."""
    return int(CLUSTER.get(wildcards.host, {}).get("mem_mb", 0))


def slurm_runtime(wildcards):
    """Minutes: the job timeout with 5 minutes to start the job's Snakemake and write."""
    return int(config["job_timeout_s"] // 60 + 5)


#: Resources of every measurement job: the short TMPDIR, and locally one unit of `measure`
#: (limited to 1 by the workflow profile: one measurement at a time on this machine); on a
#: cluster instead the SLURM request of its host label, a whole node held exclusively, so
#: measurements on different nodes run at once.
MEASURE_RESOURCES = {"tmpdir": MEASURE_TMPDIR}
if not CLUSTER:
    MEASURE_RESOURCES["measure"] = 1
else:
    MEASURE_RESOURCES |= {
        "slurm_partition": slurm_partition,
        "constraint": slurm_constraint,
        # the node exclusively: two measurements never share one, and nothing runs beside one
        "slurm_extra": "--exclusive",
        "runtime": slurm_runtime,
        "mem_mb": slurm_mem_mb,
    }


def sweep_values(experiment, key, host):
    """Values swept for `key` of `experiment` on `host`, symbolic ones (e.g. 'auto') resolved
    here with the host's CPUs; the key `interpreter` of an experiment run under every
    interpreter sweeps their labels.
    """
    spec = REGISTRY[experiment].spec
    if spec.interpreters and key == "interpreter":
        return interpreter_labels(config.get("interpreters"))
    return spec.sweep_values(key, config[experiment][key], host_cpus(host))


def points(experiment, host):
    """Point paths `<key>~<value>/...` of `experiment` on `host`, keys in the declared order:
    the swept grid, less the points its `include` leaves out."""
    spec = REGISTRY[experiment].spec
    keys = spec.keys
    grid = itertools.product(*(sweep_values(experiment, k, host) for k in keys))
    if spec.include is not None:
        grid = [v for v in grid if spec.include(dict(zip(keys, v)))]
    space = Paramspace(pd.DataFrame(list(grid), columns=list(keys)), param_sep="~")
    return list(space.instance_patterns)


def metrics_files(experiment, host, name="metrics.csv"):
    return [f"results/{host}/{experiment}/{p}/{name}" for p in points(experiment, host)]


def point_of(wildcards):
    """`{key: value}` (text) of the point in a job's `{point}` wildcard."""
    return dict(part.split("~", 1) for part in wildcards.point.split("/"))


def _arg_value(spec, key, value, point, host):
    """A config value as one command-line word: the path's value for a swept key, a mapping's
    value for the point's first key, a list (a tuple-typed parameter) comma separated.
    """
    if key in point:
        return point[key]
    if key in spec.resolve:
        value = spec.resolve[key](value, host_cpus(host))
    if isinstance(value, dict):
        value = value[point[spec.keys[0]]]
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return value


def point_args(wildcards):
    """Command-line flags of one point: swept values from the path, the rest from config."""
    spec = REGISTRY[wildcards.experiment].spec
    point = point_of(wildcards)
    args = {"sample_hz": config["sample_hz"]}
    for key, value in config[wildcards.experiment].items():
        args[key] = _arg_value(spec, key, value, point, wildcards.host)
    # swept keys that no config section holds (the interpreter's label)
    args.update({k: v for k, v in point.items() if k not in args})
    args["max_oversubscription"] = config["max_oversubscription"]
    rounds = config["rounds"]
    args["rounds_target_ci_pct"] = rounds["target_ci_pct"]
    args["rounds_budget_s"] = rounds["budget_s"]
    args["rounds_max"] = rounds["max_rounds"]
    args["rounds_workers"] = rounds["workers"]
    args["rounds_probe_ms"] = rounds["probe_ms"]
    # optional: null or absent, a point that beats its baseline goes by the two above
    for key in ("lead_target_ci_pct", "lead_budget_s"):
        if rounds.get(key) is not None:
            args[f"rounds_{key}"] = rounds[key]
    text = " ".join(
        f"--{k.replace('_', '-')} {shlex.quote(str(v))}" for k, v in args.items()
    )
    # The group's baseline is measured in the same job, interleaved with the point.
    if spec.baseline and not spec.is_baseline(point):
        text += " --baseline " + " ".join(
            shlex.quote(f"{k}={v}") for k, v in spec.baseline.items()
        )
    needs = point_dirs(wildcards)
    if needs:
        text += " --after " + " ".join(shlex.quote(d) for d in needs)
    if spec.host_files:
        text += " --host-file " + " ".join(
            shlex.quote(f) for f in host_files(wildcards)
        )
    return text


def point_env(wildcards):
    """`env` words that start a point's job with what its experiment's `job_env` asks for
    (`env -u NAME` unsets, `env NAME=VALUE` sets); '' where it asks for nothing."""
    return env_command(REGISTRY[wildcards.experiment].spec.env_of(point_of(wildcards)))


def point_dirs(wildcards):
    """Directories of the points this point's job depends on (`Experiment.depends`)."""
    spec = REGISTRY[wildcards.experiment].spec
    base = Path("results", wildcards.host, wildcards.experiment)
    return [
        str(base.joinpath(*(f"{k}~{p[k]}" for k in spec.keys)))
        for p in spec.needs(point_of(wildcards))
    ]


def host_files(wildcards):
    """The host-level files (results/<host>/...) the experiment's jobs read (`Experiment.host_files`)."""
    names = REGISTRY[wildcards.experiment].spec.host_files
    return [f"results/{wildcards.host}/{name}" for name in names]


def measure_inputs(wildcards):
    """host.json (its existence, not its time), the host files the experiment reads, and the
    job.json of every point this point depends on."""
    return {
        # ancient: a host.json newer than the points (copied without -p, recreated after it was
        # lost) re-measures none of them; the measurements' own code and parameters still do
        "host": ancient(f"results/{wildcards.host}/host.json"),
        "host_files": host_files(wildcards),
        "after": [f"{d}/job.json" for d in point_dirs(wildcards)],
    }


def user_env_json():
    """The user's thread variables (USER_ENV) as one quoted shell word."""
    return shlex.quote(json.dumps(USER_ENV, sort_keys=True))


def selfcheck_args(wildcards):
    sc = config["selfcheck"]
    return (
        f"--load busy --baseline load=idle --duration-s {sc['duration_s']}"
        f" --repeats {sc['repeats']} --sample-hz {config['sample_hz']}"
    )


def mixed_nodes_flag():
    """`--allow-mixed-nodes` where config cluster.allow_mixed_nodes is true, else nothing."""
    allow = (config.get("cluster") or {}).get("allow_mixed_nodes")
    return "--allow-mixed-nodes" if allow else ""


def code_files(*packages):
    """The Python modules of `packages` (directories of the checkout), sorted: inputs of the
    rules that run them, so that changed analysis or report code redoes the analysis, figures
    and report from the measurements there are (code alone never reruns a measurement).
    """
    return sorted(str(p) for d in packages for p in Path(d).glob("*.py"))


#: What every analysis job runs: the analysis package and the lab's core.
ANALYSIS_CODE = code_files("analysis", "lab")


def experiment_code(exp):
    """The analysis code of one experiment: :data:`ANALYSIS_CODE` and its package's modules."""
    return ANALYSIS_CODE + code_files(os.path.relpath(REGISTRY[exp].path))


def analysis_inputs(wildcards):
    exp = wildcards.experiment
    return {
        "code": experiment_code(exp),
        "host": f"results/{wildcards.host}/host.json",
        "user_env": f"results/{wildcards.host}/user_env.json",
        "interpreters": f"results/{wildcards.host}/interpreters.json",
        "metrics": metrics_files(exp, wildcards.host),
        "samples": metrics_files(exp, wildcards.host, "samples.csv"),
        "spans": metrics_files(exp, wildcards.host, "spans.csv"),
        "jobs": metrics_files(exp, wildcards.host, "job.json"),
    }


def figure_inputs(wildcards):
    exp = FIGURES[wildcards.figure]
    host = f"results/{wildcards.host}"
    if exp is None:  # a figure of the whole run
        return {
            "code": ANALYSIS_CODE,
            "jobs": f"{host}/jobs.csv",
            "capacity": f"{host}/capacity.csv",
            "host": f"{host}/host.json",
        }
    return {
        "code": experiment_code(exp),
        "summary": f"{host}/{exp}/summary.csv",
        "replicates": f"{host}/{exp}/replicates.csv",
        "findings": f"{host}/{exp}/findings.json",
        "spans": f"{host}/{exp}/spans.csv",
        "samples": f"{host}/{exp}/samples.csv",
        "host": f"{host}/host.json",
        "interpreters": f"{host}/interpreters.json",
    }


def trace_inputs(wildcards):
    host = f"results/{wildcards.host}"
    if wildcards.trace == "jobs":
        return {"code": ANALYSIS_CODE, "jobs": f"{host}/jobs.csv"}
    exp = wildcards.trace
    spans, samples = f"{host}/{exp}/spans.csv", f"{host}/{exp}/samples.csv"
    return {"code": experiment_code(exp), "spans": spans, "samples": samples}


def summary_files(wildcards):
    return [f"results/{wildcards.host}/{exp}/summary.csv" for exp in EXPERIMENTS]


def fidelity_inputs(wildcards):
    host = wildcards.host
    return {
        "code": ANALYSIS_CODE,
        "host": f"results/{host}/host.json",
        "selfcheck": f"results/{host}/selfcheck/metrics.csv",
        "summaries": summary_files(wildcards),
        # the checks also read the tables beside each summary (a point's own spans and rounds)
        "tables": [
            f"results/{host}/{exp}/{table}.csv"
            for exp in EXPERIMENTS
            for table in ("replicates", "spans")
        ],
    }


def job_files(wildcards):
    host = wildcards.host
    files = [f"results/{host}/selfcheck/job.json"]
    for exp in EXPERIMENTS:
        files += metrics_files(exp, host, "job.json")
    return files


def report_text():
    """The report's own text and every run experiment's prose: editing one re-renders the
    report, and nothing else."""
    return [
        "report/sections.yaml",
        "report/templates/report.html.j2",
        "report/templates/report.md.j2",
        *(f"experiments/{exp}/report.yaml" for exp in EXPERIMENTS),
    ]


def report_inputs(wildcards):
    host = wildcards.host
    files = {
        "host": f"results/{host}/host.json",
        "user_env": f"results/{host}/user_env.json",
        "interpreters": f"results/{host}/interpreters.json",
        "config": f"results/{host}/config.yaml",
        "fidelity": f"results/{host}/fidelity.csv",
        "run": f"results/{host}/run.json",
        "interference": f"results/{host}/interference.csv",
        "summaries": [],
        "findings": [],
        "figures": [f"results/{host}/figures/{fig}.png" for fig in RUN_FIGURES],
        "traces": [f"results/{host}/traces/jobs.json"],
        "text": report_text(),
        "code": ANALYSIS_CODE + code_files("report"),
    }
    for exp in EXPERIMENTS:
        files["summaries"].append(f"results/{host}/{exp}/summary.csv")
        files["findings"].append(f"results/{host}/{exp}/findings.json")
        files["figures"] += [
            f"results/{host}/figures/{fig}.png"
            for fig in REGISTRY[exp].spec.all_figures
        ]
        if exp in TIMELINES:
            files["traces"].append(f"results/{host}/traces/{exp}.json")
        files["artefacts"] = files.get("artefacts", []) + [
            f"results/{host}/{exp}/{a}" for a in REGISTRY[exp].spec.artefacts
        ]
    return files


def report_targets():
    """Every host label's report and point status."""
    return [
        f"results/{host}/{name}"
        for host in HOSTS
        for name in ("report.html", "report.md", "status.csv")
    ]


def config_json():
    """The run's configuration, for results/<host>/config.yaml (quoted for the shell)."""
    return shlex.quote(json.dumps(config, sort_keys=False))


def run_profile():
    """The ``--profile`` of the snakemake command line that reads this Snakefile (else
    ``$SNAKEMAKE_PROFILE``), as given, or None: Snakemake keeps no record of it in the workflow
    object. The workflow's own profile (profiles/default) applies again by itself."""
    argv = sys.argv[1:]
    for i, word in enumerate(argv):
        if word == "--profile" and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith("--profile="):
            return word.split("=", 1)[1]
    return os.environ.get("SNAKEMAKE_PROFILE") or None


def rerun_args(wildcards):
    """This run's own ``--profile`` (:func:`run_profile`; without one, a cluster run's
    ``--executor``), ``--configfile`` files (relative where under the working directory) and
    ``--config`` overrides, the host label included: the arguments with which a failed point's
    advice (analysis status) measures it again under the same settings and on the same
    executor, as one shell word.
    """
    files = [
        os.path.relpath(p) if not os.path.relpath(p).startswith("..") else str(p)
        for p in workflow.overwrite_configfiles
    ]
    overrides = dict(workflow.config_settings.config) | {"host": wildcards.host}
    executor, profile = getattr(workflow.executor_plugin, "name", None), run_profile()
    if profile:
        words = ["--profile", profile]
    elif executor not in (None, "local", "dryrun", "touch"):
        words = ["--executor", executor]
    else:
        words = []
    words += ["--configfile", *files] if files else []
    words += ["--config", *(f"{k}={json.dumps(v)}" for k, v in overrides.items())]
    return shlex.quote(shlex.join(words))


# ---- host comparison (target compare) never measures, it only reads host directories
def compare_host_dirs():
    """Host directories to compare (analysis.hosts.compare_dirs of config compare.hosts and
    compare.dirs)."""
    cc = config.get("compare") or {}
    return compare_dirs(cc.get("hosts"), cc.get("dirs"))


def compare_dirs_checked(wildcards=None):
    """compare_host_dirs(), refused where they cannot be compared (analysis.hosts.compare_dirs_problem):
    `snakemake compare` then stops as the Snakefile is read (compare_requested), or else while it
    builds its jobs (the rule's params call this), before any runs."""
    dirs = compare_host_dirs()
    baseline = (config.get("compare") or {}).get("baseline")
    if problem := compare_dirs_problem(dirs, baseline):
        raise WorkflowError(problem)
    return dirs


def compare_baseline():
    cc = config.get("compare") or {}
    names = [Path(d).name for d in compare_host_dirs()]
    if cc.get("baseline"):
        return cc["baseline"]
    return HOST if HOST in names else (names[0] if names else HOST)


def compare_stamp():
    """Digest of the compared files (path, size, mtime). The comparison declares no input
    files, so Snakemake never schedules a job of another host (or a measurement of this one);
    this parameter changes, and reruns the comparison, when any compared file changes.
    """
    import hashlib

    h = hashlib.sha1()
    for d in compare_host_dirs():
        names = ["host.json"] + [
            f"{exp}/{n}"
            for exp in EXPERIMENTS
            for n in ("replicates.csv", "summary.csv", "findings.json")
        ]
        for name in names:
            f = Path(d, name)
            if f.exists():
                st = f.stat()
                h.update(f"{f}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:16]


def compare_requested():
    """Whether the snakemake command line that reads this Snakefile asks for the comparison (the
    target ``compare`` or a file under results/compare/): Snakemake keeps its targets out of
    the workflow object until the DAG is built."""
    return any(w == "compare" or w.startswith("results/compare/") for w in sys.argv[1:])


for d in [f"{top}/{h}" for top in ("results", "logs") for h in HOSTS] + [".snakemake"]:
    # a file where a directory belongs, or one that refuses a new file: one line, before any job
    if problem := output_dir_problem(d):
        sys.exit(f"Cannot write {d}/: it {problem}")


if compare_requested():
    # refused here, in one line, rather than inside Snakemake's InputFunctionException block
    # from the rule's params (which still refuse where the command line is not Snakemake's)
    try:
        compare_dirs_checked()
    except WorkflowError as exc:
        sys.exit(str(exc))
