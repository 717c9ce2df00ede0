"""``python -m experiments.jit``: measure one point of the jit experiment."""

from experiments.jit.measure import main

raise SystemExit(main())
