"""Example workloads for the lab's workload experiment (docs in examples/README.md)."""
