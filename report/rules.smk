# Report rule: render the HTML and Markdown reports from analysis outputs and host.json.


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
        "python -m report --host-dir results/{wildcards.host} --experiments {params.experiments}"
        " --html {output.html} --md {output.md} > {log} 2>&1"
