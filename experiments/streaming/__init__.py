"""Streaming research scripts (MoSAIC): run with ``python -m experiments.streaming.<name>``."""
