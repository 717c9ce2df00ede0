"""A text classifier trained on synthetic documents: an example workload package."""
