"""MoH: Mamba diffusion backbone with a Mixture of Hierarchical experts (see README.md)."""
