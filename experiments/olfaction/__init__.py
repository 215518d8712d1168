"""Olfaction research scripts (MixScentNet): run with ``python -m experiments.olfaction.<name>``."""
