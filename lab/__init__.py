"""The lab's shared core: the measurement kit every experiment package uses.

``lab`` holds what no single experiment owns: the declarations (:mod:`lab.declare`,
:mod:`lab.params`), the registry that finds the experiment packages under ``experiments/``
(:mod:`lab.registry`), the command line and files of a point (:mod:`lab.cli`,
:mod:`lab.fileio`), the measurement windows, sampler and capacity probe (:mod:`lab.window`,
:mod:`lab.sampler`, :mod:`lab.probe`), and the job machinery (:mod:`lab.server`,
:mod:`lab.supervise`). It imports no experiment by name; ``analysis/`` and ``report/`` build on
it, and the experiment packages on all three (docs/architecture.md).
"""

import time as _time

#: Unix time (s) at which this job's interpreter imported the package: the job's start, within
#: the interpreter's own start-up (~20 ms). psutil's ``create_time()`` is not used because it
#: adds clock ticks to the integer boot time (``btime``) and can be up to 1 s early.
JOB_START_UNIX = _time.time()

#: Version of the results' file formats (docs/csv-schema.md), recorded in host.json. Hosts
#: with different versions are not compared (analysis/compare.py).
#: 2: selfcheck ``process_cpu_pct``; intraop ``matmul_bf16``, parameter ``bf16``, column ``dtype``.
#: 3: order-statistic intervals widened by the spread between worker processes (summary
#: ``ci_*``, ``speedup_ci_*``, ``worker_scale``); adaptive rounds (``rounds_stopped``, ``worker``);
#: capacity columns (``steal_pct``, ``throttled_s``, ``cpu_freq_mhz``, ``top_other*``).
#: 4: the capacity probe's loop warmed up before its first reading (``lab.probe.WARM_CALLS``): its
#: ``capacity_*_per_s`` are the specialised loop's, about 1.6x version 3's on CPython 3.11, whose
#: ``delivered_cpus`` read low in some rounds; the self-check's ``wake_read_ms``.
SCHEMA_VERSION = 4
