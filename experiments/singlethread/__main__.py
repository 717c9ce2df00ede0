"""``python -m experiments.singlethread``: measure one point of the singlethread experiment."""

from experiments.singlethread.measure import main

raise SystemExit(main())
