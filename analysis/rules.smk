# Analysis rules: per experiment, load and validate every point's CSVs and summarise them;
# per figure, draw it; per timeline, export a Chrome trace. These jobs may run in parallel with each other.
# On a cluster they run where Snakemake runs (local rules): they read files and measure nothing.


localrules:
    analyse,
    fidelity,
    run_info,
    figure,
    trace,
    artefact,


rule analyse:
    input:
        unpack(analysis_inputs),
    output:
        replicates="results/{host}/{experiment}/replicates.csv",
        summary="results/{host}/{experiment}/summary.csv",
        spans="results/{host}/{experiment}/spans.csv",
        samples="results/{host}/{experiment}/samples.csv",
        findings="results/{host}/{experiment}/findings.json",
    log:
        "logs/{host}/analyse/{experiment}.log",
    conda:
        "../environment.yml"
    params:
        mixed=mixed_nodes_flag(),
    shell:
        "python -m lab.server run --"
        " analysis summarise --experiment {wildcards.experiment:q} --host-json {input.host:q}"
        " --user-env {input.user_env:q} --interpreters {input.interpreters:q} {params.mixed}"
        ' --out-dir "$(dirname {output.summary:q})" {input.metrics:q} > {log:q} 2>&1'


rule fidelity:
    input:
        unpack(fidelity_inputs),
    output:
        "results/{host}/fidelity.csv",
    log:
        "logs/{host}/fidelity.log",
    conda:
        "../environment.yml"
    params:
        sample_hz=config["sample_hz"],
    shell:
        "python -m lab.server run --"
        " analysis fidelity --host-json {input.host:q} --selfcheck {input.selfcheck:q}"
        " --sample-hz {params.sample_hz} --out {output:q} {input.summaries:q} > {log:q} 2>&1"


rule run_info:
    input:
        host="results/{host}/host.json",
        jobs=job_files,
        code=ANALYSIS_CODE,
    output:
        run="results/{host}/run.json",
        jobs="results/{host}/jobs.csv",
        interference="results/{host}/interference.csv",
        capacity="results/{host}/capacity.csv",
    log:
        "logs/{host}/run_info.log",
    conda:
        "../environment.yml"
    shell:
        "python -m lab.server run --"
        " analysis runinfo --host-json {input.host:q} --out {output.run:q} --jobs-csv {output.jobs:q}"
        " --interference-csv {output.interference:q} --capacity-csv {output.capacity:q}"
        " {input.jobs:q} > {log:q} 2>&1"


rule figure:
    input:
        unpack(figure_inputs),
    output:
        report(
            "results/{host}/figures/{figure}.png",
            caption="../report/captions/figure.rst",
            category="{figure}",
        ),
    log:
        "logs/{host}/figures/{figure}.log",
    conda:
        "../environment.yml"
    shell:
        "python -m lab.server run --"
        " analysis figure {wildcards.figure:q} --host-dir results/{wildcards.host:q}"
        " --out {output:q} > {log:q} 2>&1"


rule trace:
    input:
        unpack(trace_inputs),
    output:
        "results/{host}/traces/{trace}.json",
    log:
        "logs/{host}/traces/{trace}.log",
    conda:
        "../environment.yml"
    shell:
        "python -m lab.server run --"
        " analysis trace {wildcards.trace:q} --host-dir results/{wildcards.host:q}"
        " --out {output:q} > {log:q} 2>&1"


rule artefact:
    input:
        findings="results/{host}/{experiment}/findings.json",
        code=lambda wildcards: experiment_code(wildcards.experiment),
    output:
        "results/{host}/{experiment}/{artefact}",
    log:
        "logs/{host}/artefacts/{experiment}/{artefact}.log",
    conda:
        "../environment.yml"
    shell:
        "python -m lab.server run --"
        " analysis artefact {wildcards.experiment:q} {wildcards.artefact:q} --findings {input.findings:q}"
        " --out {output:q} > {log:q} 2>&1"
