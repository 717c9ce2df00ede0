"""``python -m experiments.intraop``: measure one point of the intraop experiment."""

from experiments.intraop.measure import main

raise SystemExit(main())
