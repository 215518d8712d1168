"""Tests of the olfaction app (MixScentNet)."""
