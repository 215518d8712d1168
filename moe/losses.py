"""Auxiliary router losses: Switch-style load balance and router z-loss."""

from __future__ import annotations

import torch
from torch import Tensor


def load_balance_loss(probs: Tensor, indices: Tensor, mask: Tensor | None = None) -> Tensor:
    """Switch Transformer load-balance loss ``E * sum_e f_e * P_e``.

    ``probs (N, E)`` router probabilities, ``indices (N, k)`` chosen experts. ``f_e`` is the
    fraction of (valid token, slot) assignments sent to expert ``e``, ``P_e`` the mean router
    probability of expert ``e`` over valid tokens. Equals 1 for perfectly uniform routing.
    """
    n, e = probs.shape
    if indices.shape[0] != n:
        raise ValueError(f"probs has {n} tokens but indices has {indices.shape[0]}")
    if mask is None:
        mask = torch.ones(n, dtype=torch.bool, device=probs.device)
    valid = mask.to(probs.dtype)
    n_valid = valid.sum().clamp_min(1.0)
    one_hot = torch.zeros_like(probs).scatter_add(
        1, indices, valid[:, None].expand_as(indices).to(probs.dtype)
    )
    f = one_hot.sum(0) / (n_valid * indices.shape[1])
    p = (probs * valid[:, None]).sum(0) / n_valid
    return e * (f.detach() * p).sum()


def router_z_loss(logits: Tensor, mask: Tensor | None = None) -> Tensor:
    """ST-MoE router z-loss: mean over valid tokens of ``logsumexp(logits)^2``."""
    z = torch.logsumexp(logits.float(), dim=-1) ** 2
    if mask is None:
        return z.mean()
    m = mask.to(z.dtype)
    return (z * m).sum() / m.sum().clamp_min(1.0)
