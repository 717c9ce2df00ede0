"""Experiments of the CPU-utilisation lab and the machinery they share.

Every subpackage ``experiments/<name>/`` is one experiment (found by :mod:`experiments.registry`;
``python -m experiments.<name>`` measures one point); the modules beside them are the shared
measurement machinery (docs/architecture.md).
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
SCHEMA_VERSION = 3
