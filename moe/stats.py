"""Routing statistics for logging, and a load plot."""

from __future__ import annotations

import math

import torch

from moe.routing import Routing


def routing_stats(routing: Routing, dropped: int = 0) -> dict:
    """Summary of one routing decision.

    Returns ``load`` (list of per-expert fractions of assignments), ``load_entropy`` normalised
    to [0, 1] (1 = perfectly balanced), ``max_over_mean_load``, ``mean_router_entropy`` (of the
    router probabilities, nats; None without probs), ``num_tokens``, ``dropped``, and the
    auxiliary losses as floats.
    """
    counts = routing.counts.float()
    total = counts.sum().clamp_min(1.0)
    load = counts / total
    nz = load[load > 0]
    e = routing.num_experts
    entropy = float(-(nz * nz.log()).sum() / math.log(e)) if e > 1 else 1.0
    mean_load = float(counts.mean())
    router_entropy = None
    if routing.probs is not None:
        p = routing.probs.float()
        p = p / p.sum(-1, keepdim=True).clamp_min(1e-20)
        h = -(p * p.clamp_min(1e-20).log()).sum(-1)
        if routing.mask is not None:
            h = h[routing.mask]
        router_entropy = float(h.mean()) if h.numel() else None
    n_tokens = int(routing.indices.shape[0] if routing.mask is None else routing.mask.sum())
    out = {
        "num_tokens": n_tokens,
        "load": load.tolist(),
        "load_entropy": entropy,
        "max_over_mean_load": float(counts.max() / mean_load) if mean_load > 0 else 0.0,
        "mean_router_entropy": router_entropy,
        "dropped": int(dropped),
    }
    out.update({f"aux_{k}": float(v) for k, v in routing.aux_losses.items()})
    return out


def plot_expert_load(counts: torch.Tensor, ax=None, title: str = "Tokens per expert"):
    """Bar plot of ``counts (E,)`` with the uniform-load line; returns the matplotlib Axes."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3))
    c = counts.detach().cpu().float().numpy()
    ax.bar(range(len(c)), c, color="#4472c4")
    ax.axhline(c.mean(), color="#c00000", linestyle="--", label="uniform")
    ax.set_xlabel("expert")
    ax.set_ylabel("assignments")
    ax.set_title(title)
    ax.legend(loc="upper right")
    return ax
