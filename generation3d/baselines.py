"""Baselines compared with MoCA in the same harness (defined in ``attention.py`` beside MoCA,
since they share its projections and gather kernel):

- ``FullAttention``: global attention over all P*T part tokens (fused SDPA);
- ``TopKAttention``: MoCA's router and top-k, distant parts dropped (no compressed tokens);
- ``LocalWindowAttention``: the k nearest parts by box centre, no router, no compression.
"""

from generation3d.attention import FullAttention, LocalWindowAttention, TopKAttention, build_attention

BASELINES = ("full", "topk", "local")

__all__ = ["BASELINES", "FullAttention", "LocalWindowAttention", "TopKAttention", "build_attention"]
