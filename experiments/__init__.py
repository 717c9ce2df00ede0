"""The experiments of the CPU-utilisation lab: one package per experiment, nothing else.

Every subpackage ``experiments/<name>/`` is one experiment, found by :mod:`lab.registry`;
``python -m lab.point <name>`` measures one of its points. The machinery they share is the
package :mod:`lab` (docs/architecture.md, docs/adding-an-experiment.md).
"""
