# CPU-utilisation lab: how well do Python and PyTorch use this machine's CPUs, and why?
#
#   snakemake --cores 4                                   # default config.yaml
#   snakemake --cores 4 --configfile config.quick.yaml    # small, about 4 minutes
#   snakemake --cores 4 --config host=laptop              # choose the host label
#
# Experiments are the packages experiments/<name>/, found by lab/registry.py; this file
# and the rule files name none of them (docs/architecture.md, docs/adding-an-experiment.md).
#
# Output paths (one meaning per separator):
#   results/<host>/host.json, config.yaml                     machine fingerprint, the config it ran with
#   results/<host>/selfcheck/{metrics,samples,spans}.csv, job.json  sampler self-check
#   results/<host>/<experiment>/<key>~<value>/.../metrics.csv one row per window (raw):
#       point and, interleaved, the experiment's baseline (column role)
#       ... samples.csv (CPU samples), spans.csv (work spans), job.json (job timing)
#   results/<host>/<experiment>/{replicates,summary,spans,samples}.csv, findings.json
#   results/<host>/fidelity.csv                               measured ratios against theory
#   results/<host>/run.json, jobs.csv                         run duration, share measured, contention; job schedule
#   results/<host>/capacity.csv                               the capacity probe's readings, per job
#   results/<host>/interference.csv                           other processes that took CPU while points were measured
#   results/<host>/figures/<figure>.png
#   results/<host>/traces/<experiment>.json, traces/jobs.json Chrome trace events (Perfetto)
#   results/<host>/report.html, results/<host>/report.md
#   logs/<host>/...                                           one log per job
#   results/compare/report.html, report.md (target `compare`)  hosts side by side
import re
import sys

from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


sys.path.insert(0, workflow.basedir)
from lab import registry
from lab.configcheck import ConfigError, validate_config
from lab.schema import lab_sections, write_schemas

try:
    # each experiment's config section schema, and the self-check's, generated from its Params
    SCHEMAS = write_schemas(".snakemake/lab/schemas", registry.experiments())
    LAB_SCHEMAS = write_schemas(".snakemake/lab/schemas", lab_sections())
except registry.RegistryError as exc:
    sys.exit(f"Invalid experiment package: {exc}")
# Snakemake's validate (JSON Schema), failures explained in one line naming the key.
try:
    validate_config(
        config,
        f"{workflow.basedir}/schemas/config.schema.yaml",
        SCHEMAS,
        registry.rounds_users(),
        registry.config_checks(),
        LAB_SCHEMAS,
    )
except ConfigError as exc:
    sys.exit(f"Invalid configuration: {exc}")


include: "common.smk"


wildcard_constraints:
    # only this run's host labels: a run never writes into another host's directory
    host="|".join(re.escape(h) for h in HOSTS),
    experiment="|".join(REGISTRY),
    point=r"[^/~]+~[^/~]+(/[^/~]+~[^/~]+)*",
    figure="|".join(FIGURES),
    trace="|".join([*TIMELINES, "jobs"]),
    artefact="|".join(re.escape(a) for a in ARTEFACTS) or "(?!)",


include: "lab/rules.smk"
include: "analysis/rules.smk"
include: "report/rules.smk"


localrules:
    all,


onstart:
    refuse_another_machine()
    start_job_server()


onsuccess:
    stop_job_server()
    say_where_the_reports_are()


onerror:
    stop_job_server()


rule all:
    default_target: True
    input:
        report_targets(),
