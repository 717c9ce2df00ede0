"""``python -m experiments.workload``: search or verify the workload's settings."""

from experiments.workload.measure import main

raise SystemExit(main())
