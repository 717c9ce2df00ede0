# Measurement rules. Each configuration point is its own job. Measurement jobs never run at
# the same time on one machine: each takes all --cores (measure_threads), one unit of the
# `measure` resource (limited to 1 by profiles/default/config.yaml) and an exclusive flock on
# the machine's own MEASURE_LOCK. On a cluster (config cluster.hosts, profiles/slurm) each is a
# SLURM job holding a whole node of its host label exclusively (MEASURE_RESOURCES); the rest of
# the workflow runs as local rules. Experiments set their own thread counts explicitly.


rule host_info:
    output:
        "results/{host}/host.json",
    log:
        "logs/{host}/host_info.log",
    # measurements first, back to back; analysis jobs fill the cores afterwards
    priority: 10
    conda:
        "../environment.yml"
    threads: measure_threads
    resources:
        **MEASURE_RESOURCES,
    shell:
        'mkdir -p "$TMPDIR" && '
        "python -m lab.server run --"
        " lab.hostinfo --host {wildcards.host:q} --out {output:q} > {log:q} 2>&1"


rule user_env:
    output:
        "results/{host}/user_env.json",
    log:
        "logs/{host}/user_env.log",
    # measurements first; it imports torch once, so it takes the measurement slot too
    priority: 10
    conda:
        "../environment.yml"
    threads: measure_threads
    resources:
        **MEASURE_RESOURCES,
    params:
        # the user's shell, captured at parse time: a change reruns this job, not the measurements
        env=user_env_json(),
    shell:
        'mkdir -p "$TMPDIR" && '
        "python -m lab.userenv --env {params.env} --out {output:q} > {log:q} 2>&1"


rule interpreters:
    output:
        "results/{host}/interpreters.json",
    log:
        "logs/{host}/interpreters.log",
    # starts each configured interpreter once: measurements first, in the measurement slot
    priority: 10
    conda:
        "../environment.yml"
    threads: measure_threads
    resources:
        **MEASURE_RESOURCES,
    params:
        interpreters=json.dumps(config["interpreters"]),
        # where each command is found now: one installed since the last run is probed again
        found=json.dumps(interpreters_found(config["interpreters"]), sort_keys=True),
    shell:
        'mkdir -p "$TMPDIR" && '
        "python -m lab.interpreters --config {params.interpreters:q} --out {output:q} > {log:q} 2>&1"


rule selfcheck:
    input:
        # ancient: a host.json newer than the points (copied without -p, recreated) re-measures
        # nothing; another machine's is refused before the first job (refuse_another_machine)
        host=ancient("results/{host}/host.json"),
    output:
        metrics="results/{host}/selfcheck/metrics.csv",
        samples="results/{host}/selfcheck/samples.csv",
        spans="results/{host}/selfcheck/spans.csv",
        job="results/{host}/selfcheck/job.json",
    log:
        "logs/{host}/selfcheck.log",
    # measurements first, back to back; analysis jobs fill the cores afterwards
    priority: 10
    conda:
        "../environment.yml"
    threads: measure_threads
    resources:
        **MEASURE_RESOURCES,
    params:
        args=selfcheck_args,
        lock=MEASURE_LOCK,
    shell:
        'mkdir -p "$TMPDIR" && '
        "python -m lab.server run --"
        " lab.selfcheck {params.args} --host {wildcards.host:q}"
        ' --lock {params.lock:q} --out "$(dirname {output.metrics:q})" > {log:q} 2>&1'


rule measure:
    input:
        unpack(measure_inputs),
    output:
        metrics="results/{host}/{experiment}/{point}/metrics.csv",
        samples="results/{host}/{experiment}/{point}/samples.csv",
        spans="results/{host}/{experiment}/{point}/spans.csv",
        job="results/{host}/{experiment}/{point}/job.json",
    log:
        "logs/{host}/{experiment}/{point}.log",
    # measurements first, back to back; analysis jobs fill the cores afterwards
    priority: 10
    conda:
        "../environment.yml"
    threads: measure_threads
    resources:
        **MEASURE_RESOURCES,
    params:
        args=point_args,
        env=point_env,
        lock=MEASURE_LOCK,
        timeout=config["job_timeout_s"],
    shell:
        'mkdir -p "$TMPDIR" && '
        "{params.env} python -m lab.supervise --timeout-s {params.timeout} --log {log:q}"
        ' --host {wildcards.host:q} --experiment {wildcards.experiment:q} --out "$(dirname {output.metrics:q})"'
        " -- python -m lab.server run --"
        " lab.point {wildcards.experiment:q} {params.args} --host {wildcards.host:q}"
        ' --lock {params.lock:q} --out "$(dirname {output.metrics:q})" > {log:q} 2>&1'
