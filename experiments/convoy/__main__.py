"""``python -m experiments.convoy``: measure one point of the convoy experiment."""

from experiments.convoy.measure import main

raise SystemExit(main())
