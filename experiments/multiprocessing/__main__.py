"""``python -m experiments.multiprocessing``: measure one point of the multiprocessing experiment."""

from experiments.multiprocessing.measure import main

raise SystemExit(main())
