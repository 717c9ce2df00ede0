"""``python -m experiments.dataloader``: measure one point of the dataloader experiment."""

from experiments.dataloader.measure import main

raise SystemExit(main())
