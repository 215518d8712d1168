"""Dispatch tokens to experts and combine their outputs.

``dispatch_combine`` is the fast path: it sorts the (token, slot) assignments by expert, runs
each expert once on a contiguous slice, and scatters the weighted outputs back.
``dispatch_combine_loop`` is the simple per-expert masked reference with the same result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from moe.routing import Routing

Expert = Callable[[Tensor], Tensor]


@dataclass
class DispatchInfo:
    """Bookkeeping of one dispatch: ``capacity`` per expert (None = unlimited), ``dropped``
    assignments over capacity, and ``kept_mask (N, k)`` bool of the assignments computed."""

    capacity: int | None
    dropped: int
    kept_mask: Tensor


def expert_capacity(num_assignments: int, num_experts: int, capacity_factor: float) -> int:
    """Slots per expert: ``ceil(capacity_factor * assignments / E)``."""
    if capacity_factor <= 0:
        raise ValueError(f"capacity_factor must be > 0, got {capacity_factor}")
    return max(1, math.ceil(capacity_factor * num_assignments / num_experts))


def _check(x: Tensor, routing: Routing, experts: Sequence[Expert]) -> None:
    if x.dim() != 2:
        raise ValueError(f"x must have shape (N, d), got {tuple(x.shape)}")
    if routing.indices.shape[0] != x.shape[0]:
        raise ValueError(f"x has {x.shape[0]} tokens but routing has {routing.indices.shape[0]}")
    if len(experts) != routing.num_experts:
        raise ValueError(f"routing is over {routing.num_experts} experts, got {len(experts)} experts")


def _kept(routing: Routing, capacity: int | None) -> Tensor:
    """``(N, k)`` bool: valid assignments that fit in their expert's capacity (first come,
    first served in token order, slot 0 before slot 1)."""
    n, k = routing.indices.shape
    valid = torch.ones(n, k, dtype=torch.bool, device=routing.indices.device)
    if routing.mask is not None:
        valid &= routing.mask[:, None]
    if capacity is None:
        return valid
    flat = routing.indices.t().reshape(-1)  # slot-major priority
    flat_valid = valid.t().reshape(-1)
    one_hot = torch.nn.functional.one_hot(flat, routing.num_experts) * flat_valid[:, None]
    position = (one_hot.cumsum(0) * one_hot).sum(1)  # 1-based rank within its expert
    keep = flat_valid & (position <= capacity)
    return keep.reshape(k, n).t()


def _plan(
    x: Tensor, routing: Routing, experts: Sequence[Expert], capacity_factor: float | None
) -> tuple[int | None, Tensor]:
    """Validate the inputs; return the per-expert capacity and the ``(N, k)`` kept mask."""
    _check(x, routing, experts)
    n, k = routing.indices.shape
    capacity = None
    if capacity_factor is not None:
        capacity = expert_capacity(n * k, routing.num_experts, capacity_factor)
    return capacity, _kept(routing, capacity)


def _dropped(keep: Tensor, routing: Routing) -> int:
    """Assignments of valid tokens that did not fit their expert's capacity."""
    masked = 0 if routing.mask is None else int((~routing.mask).sum()) * routing.k
    return int((~keep).sum()) - masked


def dispatch_combine(
    x: Tensor,
    routing: Routing,
    experts: Sequence[Expert],
    capacity_factor: float | None = None,
) -> tuple[Tensor, DispatchInfo]:
    """Sort-based grouped dispatch: ``x (N, d)`` -> ``y (N, d_out)``, ``y_n = sum_j w_nj E_j(x_n)``."""
    n, k = routing.indices.shape
    capacity, keep = _plan(x, routing, experts, capacity_factor)
    flat_expert = routing.indices.reshape(-1)
    flat_token = torch.arange(n, device=x.device).repeat_interleave(k)
    flat_weight = routing.weights.reshape(-1)
    sel = keep.reshape(-1).nonzero().squeeze(1)
    order = sel[torch.argsort(flat_expert[sel], stable=True)]
    sizes = torch.bincount(flat_expert[order], minlength=routing.num_experts).tolist()
    tokens = flat_token[order]
    grouped = x.index_select(0, tokens)
    outs = []
    for expert, chunk in zip(experts, grouped.split(sizes), strict=True):
        if chunk.shape[0]:
            outs.append(expert(chunk))
    y_sorted = _concat_outputs(outs, x, experts)
    y_sorted = y_sorted * flat_weight[order, None].to(y_sorted.dtype)
    y = y_sorted.new_zeros(n, y_sorted.shape[1]).index_add(0, tokens, y_sorted)
    return y, DispatchInfo(capacity, _dropped(keep, routing), keep)


def _concat_outputs(outs: list[Tensor], x: Tensor, experts: Sequence[Expert]) -> Tensor:
    if outs:
        return torch.cat(outs, 0)
    # No token reached any expert: infer the output width from one expert on an empty batch.
    return experts[0](x[:0])


def dispatch_combine_loop(
    x: Tensor,
    routing: Routing,
    experts: Sequence[Expert],
    capacity_factor: float | None = None,
) -> tuple[Tensor, DispatchInfo]:
    """Reference implementation: for each expert, run it on its tokens and add them back."""
    n, k = routing.indices.shape
    capacity, keep = _plan(x, routing, experts, capacity_factor)
    y = None
    for e, expert in enumerate(experts):
        hit = (routing.indices == e) & keep  # (N, k)
        token_ids = hit.any(1).nonzero().squeeze(1)
        if token_ids.numel() == 0:
            continue
        w = (routing.weights * hit).sum(1)[token_ids]
        out = expert(x[token_ids]) * w[:, None]
        if y is None:
            y = out.new_zeros(n, out.shape[1])
        y = y.index_add(0, token_ids, out)
    if y is None:
        empty = _concat_outputs([], x, experts)
        y = empty.new_zeros(n, empty.shape[1])
    return y, DispatchInfo(capacity, _dropped(keep, routing), keep)


def dispatch_combine_einsum(x: Tensor, routing: Routing, experts: Sequence[Expert]) -> Tensor:
    """Dense one-hot baseline: every expert runs on every token, outputs mixed by ``to_dense``.

    Only for benchmarks and tests (cost E times the sparse paths)."""
    _check(x, routing, experts)
    combine = routing.to_dense()  # (N, E)
    if routing.mask is not None:
        combine = combine * routing.mask[:, None]
    stacked = torch.stack([expert(x) for expert in experts], 1)  # (N, E, d_out)
    return torch.einsum("ne,ned->nd", combine.to(stacked.dtype), stacked)
