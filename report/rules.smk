# Report rules: render the HTML and Markdown reports from analysis outputs and host.json;
# record the run's configuration; compare hosts (target `compare`). Local rules on a cluster.


localrules:
    report,
    point_status,
    run_config,
    compare_tables,
    compare_figure,
    compare_report,
    compare,


rule report:
    input:
        unpack(report_inputs),
    output:
        html="results/{host}/report.html",
        md="results/{host}/report.md",
    log:
        "logs/{host}/report.log",
    conda:
        "../environment.yml"
    params:
        experiments=EXPERIMENTS,
    shell:
        "python -m lab.server run --"
        " report --host-dir results/{wildcards.host:q} --experiments {params.experiments:q}"
        " --html {output.html:q} --md {output.md:q} > {log:q} 2>&1"


rule point_status:
    input:
        report=rules.report.output,
        summaries=summary_files,
    output:
        "results/{host}/status.csv",
    log:
        "logs/{host}/point_status.log",
    conda:
        "../environment.yml"
    params:
        # the command it prints for a failed point measures it again under this run's settings
        rerun=rerun_args,
    shell:
        "python -m lab.server run --"
        " analysis status --rerun-args {params.rerun} --out {output:q} {input.summaries:q} > {log:q} 2>&1"


rule run_config:
    output:
        "results/{host}/config.yaml",
    log:
        "logs/{host}/run_config.log",
    conda:
        "../environment.yml"
    params:
        config=config_json(),
    shell:
        "python -m lab.server run --"
        " analysis config --json {params.config} --out {output:q} > {log:q} 2>&1"


rule compare_tables:
    output:
        environment="results/compare/environment.csv",
        comparison="results/compare/comparison.csv",
        best="results/compare/best.csv",
        hosts="results/compare/hosts.json",
        tables="results/compare/tables.json",
    log:
        "logs/compare/compare.log",
    conda:
        "../environment.yml"
    params:
        dirs=compare_dirs_checked,
        baseline=compare_baseline(),
        experiments=EXPERIMENTS,
        stamp=compare_stamp(),
    shell:
        "python -m lab.server run --"
        " analysis compare --baseline {params.baseline:q} --experiments {params.experiments:q}"
        " --out-dir results/compare {params.dirs:q} > {log:q} 2>&1"
        # an error on the console, not only in the log, after the hosts left out and why (a
        # host directory that cannot be read can leave too few to compare)
        " || {{ grep -h '^not comparable:' {log:q} >&2; grep -h '^error:' {log:q} >&2;"
        # the last comparison's report no longer stands for what was asked: kept, under another name
        " for f in results/compare/report.html results/compare/report.md; do [ -e $f ] || continue;"
        " mv -f $f ${{f%.*}}.previous.${{f##*.}} && echo \"$f is the previous comparison's: moved to"
        ' ${{f%.*}}.previous.${{f##*.}}" >&2; done; exit 1; }};'
        # a host that could not be read is left out with its reason: say so on the console too
        " grep -h '^not comparable:' {log:q} >&2 || true"


rule compare_figure:
    input:
        comparison="results/compare/comparison.csv",
        hosts="results/compare/hosts.json",
    output:
        report(
            "results/compare/figures/compare_{experiment}.png",
            caption="../report/captions/compare.rst",
            category="compare",
        ),
    log:
        "logs/compare/figures/{experiment}.log",
    conda:
        "../environment.yml"
    shell:
        "python -m lab.server run --"
        " analysis compare-figure {wildcards.experiment:q} --compare-dir results/compare"
        " --out {output:q} > {log:q} 2>&1"


rule compare_report:
    input:
        tables=rules.compare_tables.output,
        figures=expand(
            "results/compare/figures/compare_{experiment}.png", experiment=EXPERIMENTS
        ),
        text=[
            "report/sections.yaml",
            "report/templates/compare.html.j2",
            "report/templates/compare.md.j2",
        ],
    output:
        html="results/compare/report.html",
        md="results/compare/report.md",
    log:
        "logs/compare/report.log",
    conda:
        "../environment.yml"
    shell:
        "python -m lab.server run --"
        " report --compare-dir results/compare --html {output.html:q} --md {output.md:q} > {log:q} 2>&1"


rule compare:
    input:
        rules.compare_report.output,
