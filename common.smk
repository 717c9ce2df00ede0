# Helpers shared by experiments/, analysis/ and report/ rules.smk (host label, sweep points, command lines).
import itertools
import json
import os
import shlex
import sys
from pathlib import Path

import pandas as pd
from snakemake.utils import Paramspace

sys.path.insert(0, workflow.basedir)

from analysis.spec import FIGURES, HOST_FIGURES, SPECS, TIMELINES
from experiments.common import (
    available_cpus,
    measurement_tmpdir,
    default_host,
    prepare_environment,
    sanitise_host,
)

HOST = sanitise_host(config["host"]) if config.get("host") else default_host()
if HOST == "compare":
    raise ValueError(
        "host label 'compare' is reserved for results/compare/; set another with --config host=NAME"
    )
EXPERIMENTS = list(config["experiments"])
# One lock file per checkout, outside results/ (which holds only host directories): two host
# labels measured from one checkout (e.g. under taskset) never measure at the same time.
MEASURE_LOCK = str(Path(".snakemake/lab/measure.lock").resolve())

# Every job writes its caches under .snakemake/lab/ and draws headless. Measurement jobs get a
# short TMPDIR of their own (AF_UNIX socket paths of multiprocessing must stay short).
prepare_environment(workflow.basedir, ".snakemake/lab")
MEASURE_TMPDIR = measurement_tmpdir(workflow.basedir)


def sweep_values(experiment, key):
    """Values swept for `key` of `experiment` (intraop threads 'auto' resolved here)."""
    value = config[experiment][key]
    if experiment == "intraop" and key == "threads" and value == "auto":
        n = available_cpus()
        return list(range(1, n + 1)) + [2 * n]
    return list(value)


def points(experiment):
    """Point paths `<key>~<value>/...` of `experiment`, keys in the spec's order."""
    keys = SPECS[experiment].keys
    grid = itertools.product(*(sweep_values(experiment, k) for k in keys))
    space = Paramspace(pd.DataFrame(list(grid), columns=list(keys)), param_sep="~")
    return list(space.instance_patterns)


def metrics_files(experiment, host=HOST, name="metrics.csv"):
    return [f"results/{host}/{experiment}/{p}/{name}" for p in points(experiment)]


def point_args(wildcards):
    """Command-line flags of one point: swept values from the path, the rest from config."""
    spec = SPECS[wildcards.experiment]
    point = dict(part.split("~", 1) for part in wildcards.point.split("/"))
    first = point[spec.keys[0]]
    args = {"sample_hz": config["sample_hz"]}
    for key, value in config[wildcards.experiment].items():
        if key in point:
            value = point[key]
        elif isinstance(value, dict):
            value = value[first]
        args[key] = value
    args["max_oversubscription"] = config["max_oversubscription"]
    text = " ".join(
        f"--{k.replace('_', '-')} {shlex.quote(str(v))}" for k, v in args.items()
    )
    # The group's baseline is measured in the same job, interleaved with the point.
    if any(str(point.get(k)) != str(v) for k, v in spec.baseline.items()):
        text += " --baseline " + " ".join(
            shlex.quote(f"{k}={v}") for k, v in spec.baseline.items()
        )
    return text


def selfcheck_args(wildcards):
    sc = config["selfcheck"]
    return (
        f"--load busy --baseline load=idle --duration-s {sc['duration_s']}"
        f" --repeats {sc['repeats']} --sample-hz {config['sample_hz']}"
    )


def analysis_inputs(wildcards):
    exp = wildcards.experiment
    return {
        "host": f"results/{wildcards.host}/host.json",
        "metrics": metrics_files(exp, wildcards.host),
        "samples": metrics_files(exp, wildcards.host, "samples.csv"),
        "spans": metrics_files(exp, wildcards.host, "spans.csv"),
    }


def figure_inputs(wildcards):
    exp = FIGURES[wildcards.figure]
    host = f"results/{wildcards.host}"
    if exp is None:  # a figure of the whole run
        return {"jobs": f"{host}/jobs.csv", "host": f"{host}/host.json"}
    return {
        "summary": f"{host}/{exp}/summary.csv",
        "spans": f"{host}/{exp}/spans.csv",
        "samples": f"{host}/{exp}/samples.csv",
        "host": f"{host}/host.json",
    }


def trace_inputs(wildcards):
    host = f"results/{wildcards.host}"
    if wildcards.trace == "jobs":
        return {"jobs": f"{host}/jobs.csv"}
    exp = wildcards.trace
    return {"spans": f"{host}/{exp}/spans.csv", "samples": f"{host}/{exp}/samples.csv"}


def fidelity_inputs(wildcards):
    host = wildcards.host
    files = {
        "host": f"results/{host}/host.json",
        "selfcheck": f"results/{host}/selfcheck/metrics.csv",
    }
    for exp in ("gil", "intraop"):
        if exp in EXPERIMENTS:
            files[exp] = f"results/{host}/{exp}/summary.csv"
    return files


def fidelity_args(wildcards, input):
    return " ".join(
        f"--{exp} {input[exp]}" for exp in ("gil", "intraop") if exp in input.keys()
    )


def job_files(wildcards):
    host = wildcards.host
    files = [f"results/{host}/selfcheck/job.json"]
    for exp in EXPERIMENTS:
        files += metrics_files(exp, host, "job.json")
    return files


def report_inputs(wildcards):
    host = wildcards.host
    files = {
        "host": f"results/{host}/host.json",
        "config": f"results/{host}/config.yaml",
        "fidelity": f"results/{host}/fidelity.csv",
        "run": f"results/{host}/run.json",
        "summaries": [],
        "findings": [],
        "figures": [f"results/{host}/figures/{fig}.png" for fig in HOST_FIGURES],
        "traces": [f"results/{host}/traces/jobs.json"],
        # the report's own text: editing it re-renders the report, and nothing else
        "text": [
            "report/sections.yaml",
            "report/templates/report.html.j2",
            "report/templates/report.md.j2",
        ],
    }
    for exp in EXPERIMENTS:
        files["summaries"].append(f"results/{host}/{exp}/summary.csv")
        files["findings"].append(f"results/{host}/{exp}/findings.json")
        files["figures"] += [
            f"results/{host}/figures/{fig}.png" for fig in SPECS[exp].figures
        ]
        if exp in TIMELINES:
            files["traces"].append(f"results/{host}/traces/{exp}.json")
    return files


def summary_files(wildcards):
    return [f"results/{wildcards.host}/{exp}/summary.csv" for exp in EXPERIMENTS]


def report_targets(host=HOST):
    return [
        f"results/{host}/report.html",
        f"results/{host}/report.md",
        f"results/{host}/status.csv",
    ]


def config_json():
    """The run's configuration, for results/<host>/config.yaml."""
    return shlex.quote(json.dumps(config, sort_keys=False))


# ---- host comparison (target compare) never measures, it only reads host directories
def compare_host_dirs():
    """Host directories to compare: config compare.hosts under results/ (default: every
    results/<host>/ with a host.json), plus compare.dirs."""
    cc = config.get("compare") or {}
    if cc.get("hosts"):
        dirs = [f"results/{h}" for h in cc["hosts"]]
    else:
        dirs = sorted(
            str(p.parent)
            for p in Path("results").glob("*/host.json")
            if p.parent.name != "compare"
        )
    return dirs + [os.path.normpath(d) for d in cc.get("dirs") or []]


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
            for n in ("replicates.csv", "summary.csv")
        ]
        for name in names:
            f = Path(d, name)
            if f.exists():
                st = f.stat()
                h.update(f"{f}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:16]
