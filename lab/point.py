"""``python -m lab.point <experiment> [options]``: measure one point of an experiment.

The experiment is a package under ``experiments/`` (:mod:`lab.registry`); its options are the
fields of its ``Params`` (``python -m lab.point <experiment> --help``) plus the common ones of
:func:`lab.cli.build_parser`. The workflow's measurement rule runs this for every point.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run :func:`lab.cli.cli_main` for the experiment named first in ``argv``.

    Returns:
        0 on success; 2 (with the known experiments) for a missing or unknown name, or (with
        the file) for an invalid experiment package.
    """
    from lab import registry
    from lab.cli import cli_main

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        known = ", ".join(registry.experiments())
    except registry.RegistryError as exc:
        print(f"python -m lab.point: invalid experiment package: {exc}", file=sys.stderr)
        return 2
    if not argv or argv[0].startswith("-"):
        asked = bool(argv) and argv[0] in ("-h", "--help")
        usage = f"usage: python -m lab.point EXPERIMENT [options]; EXPERIMENT is one of {known}"
        print(usage + ("; python -m lab.point EXPERIMENT --help lists its options" if asked else ""))
        return 0 if asked else 2
    try:
        exp = registry.get(argv[0])
    except ValueError as exc:
        print(f"python -m lab.point: {exc}", file=sys.stderr)
        return 2
    return cli_main(exp, argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
