"""The routing result shared by every router, and the functional routers.

Shapes: ``N`` tokens (or items), ``E`` experts, ``k`` experts chosen per token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class Routing:
    """What a router decided for a batch of ``N`` tokens over ``E`` experts.

    Attributes:
        weights: ``(N, k)`` combine weights of the chosen experts (0 for masked tokens).
        indices: ``(N, k)`` long expert ids, one row per token.
        counts: ``(E,)`` long, number of valid (token, slot) assignments per expert.
        num_experts: ``E``.
        logits: ``(N, E)`` raw router logits, when the router has them.
        probs: ``(N, E)`` router probabilities (softmax or sigmoid of the logits).
        aux_losses: scalar auxiliary losses, already multiplied by their coefficients.
        mask: ``(N,)`` bool, True for valid tokens; ``None`` means all valid.
    """

    weights: Tensor
    indices: Tensor
    counts: Tensor
    num_experts: int
    logits: Tensor | None = None
    probs: Tensor | None = None
    aux_losses: dict[str, Tensor] = field(default_factory=dict)
    mask: Tensor | None = None

    @property
    def k(self) -> int:
        return self.indices.shape[1]

    @property
    def aux_loss(self) -> Tensor:
        """Sum of the auxiliary losses (a zero scalar when there are none)."""
        if not self.aux_losses:
            return self.weights.new_zeros(())
        return torch.stack(list(self.aux_losses.values())).sum()

    def to_dense(self) -> Tensor:
        """``(N, E)`` combine matrix: entry (n, e) is the weight token n gives expert e."""
        dense = self.weights.new_zeros(self.weights.shape[0], self.num_experts)
        return dense.scatter_add(1, self.indices, self.weights)


def _check_logits(logits: Tensor, name: str = "logits") -> None:
    if logits.dim() != 2:
        raise ValueError(f"{name} must have shape (N, E), got {tuple(logits.shape)}")
    if logits.shape[1] < 1:
        raise ValueError(f"{name} needs at least one expert, got shape {tuple(logits.shape)}")
    if not torch.isfinite(logits).all():
        raise ValueError(f"{name} contain NaN or inf")


def _check_mask(mask: Tensor | None, n: int) -> Tensor | None:
    if mask is None:
        return None
    if mask.shape != (n,):
        raise ValueError(f"mask must have shape ({n},), got {tuple(mask.shape)}")
    return mask.bool()


def expert_counts(indices: Tensor, num_experts: int, mask: Tensor | None = None) -> Tensor:
    """``(E,)`` number of valid assignments per expert for ``indices (N, k)``."""
    flat = indices if mask is None else indices[mask]
    return torch.bincount(flat.reshape(-1), minlength=num_experts)


def route_topk(
    logits: Tensor,
    k: int,
    activation: str = "softmax",
    normalize: bool = True,
    bias: Tensor | None = None,
    mask: Tensor | None = None,
) -> Routing:
    """Top-k routing from ``logits (N, E)``.

    ``bias (E,)`` is added to the scores for *selection only* (auxiliary-loss-free load
    balancing, DeepSeek-V3): the combine weights come from the unbiased activation, renormalised
    over the chosen ``k`` experts when ``normalize``. Masked tokens get zero weight and are not
    counted. Auxiliary losses are not added here; routers add them with their coefficients.
    """
    _check_logits(logits)
    n, e = logits.shape
    if not 1 <= k <= e:
        raise ValueError(f"k must be in [1, {e}] for {e} experts, got k={k}")
    if activation == "softmax":
        probs = torch.softmax(logits.float(), dim=-1).to(logits.dtype)
    elif activation == "sigmoid":
        probs = torch.sigmoid(logits)
    else:
        raise ValueError(f"activation must be 'softmax' or 'sigmoid', got {activation!r}")
    mask = _check_mask(mask, n)
    scores = probs if bias is None else probs + bias.to(probs.dtype)
    indices = torch.topk(scores.detach(), k, dim=-1, sorted=True).indices
    weights = probs.gather(1, indices)
    if normalize:
        weights = weights / weights.sum(-1, keepdim=True).clamp_min(1e-20)
    if mask is not None:
        weights = weights * mask[:, None].to(weights.dtype)
    counts = expert_counts(indices, e, mask)
    return Routing(weights, indices, counts, e, logits=logits, probs=probs, mask=mask)


def route_by_score(scores: Tensor, lower_is_better: bool = True, mask: Tensor | None = None) -> Routing:
    """Hard routing: each item goes to the one expert with the best external score.

    ``scores (N, E)`` are computed outside the router (e.g. the least-squares residual of each
    item under each expert). Ties go to the lower expert index. Weights are 1 (0 when masked).
    """
    _check_logits(scores, "scores")
    n, e = scores.shape
    mask = _check_mask(mask, n)
    best = scores.argmin(dim=1) if lower_is_better else scores.argmax(dim=1)
    indices = best[:, None]
    weights = torch.ones(n, 1, dtype=scores.dtype, device=scores.device)
    if mask is not None:
        weights = weights * mask[:, None].to(weights.dtype)
    counts = expert_counts(indices, e, mask)
    return Routing(weights, indices, counts, e, logits=None, probs=None, mask=mask)


def expert_choice(logits: Tensor, capacity: int) -> Routing:
    """Expert-choice routing (Zhou et al., 2022): each expert picks its top-``capacity`` tokens.

    Returns a ``Routing`` with ``k = E`` slots per token: slot ``e`` holds expert ``e`` with the
    softmax-over-experts weight if expert ``e`` chose the token, else weight 0. A token may be
    chosen by several experts or by none.
    """
    _check_logits(logits)
    n, e = logits.shape
    if not 1 <= capacity <= n:
        raise ValueError(f"capacity must be in [1, {n}] for {n} tokens, got {capacity}")
    probs = torch.softmax(logits.float(), dim=-1).to(logits.dtype)
    chosen_tokens = torch.topk(probs.detach().t(), capacity, dim=-1).indices  # (E, capacity)
    chosen = torch.zeros(e, n, dtype=torch.bool, device=logits.device)
    chosen.scatter_(1, chosen_tokens, True)
    chosen = chosen.t()  # (N, E)
    indices = torch.arange(e, device=logits.device).expand(n, e).contiguous()
    weights = probs * chosen.to(probs.dtype)
    counts = chosen.sum(0)
    return Routing(weights, indices, counts, e, logits=logits, probs=probs)


def topk_select(scores: Tensor, k: int, always: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Select the ``k`` most relevant groups along the last dim of ``scores (..., G)``.

    ``always (..., G)`` bool forces groups to be selected (e.g. a component's own block); the
    remaining slots are filled by score. Ties go to the lower index.

    Returns ``indices (..., k)`` long (sorted ascending) and ``mask (..., G)`` bool.
    """
    g = scores.shape[-1]
    if not 1 <= k <= g:
        raise ValueError(f"k must be in [1, {g}] for {g} groups, got k={k}")
    if torch.isnan(scores).any():
        raise ValueError("scores contain NaN")
    s = scores.detach().float()
    # A stable sort of the negated scores keeps lower indices first among ties.
    order = torch.argsort(-s, dim=-1, stable=True)
    if always is not None:
        if always.shape != scores.shape:
            raise ValueError(f"always must have shape {tuple(scores.shape)}, got {tuple(always.shape)}")
        if (always.sum(-1) > k).any():
            raise ValueError("more groups are forced by `always` than k allows")
        forced_first = (~always.bool()).gather(-1, order).to(torch.int8)
        order = order.gather(-1, torch.argsort(forced_first, dim=-1, stable=True))
    indices = order[..., :k].sort(dim=-1).values
    mask = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, indices, True)
    return indices, mask
