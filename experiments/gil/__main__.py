"""``python -m experiments.gil``: measure one point of the gil experiment."""

from experiments.gil.measure import main

raise SystemExit(main())
