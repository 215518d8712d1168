"""Route a synthetic batch through a chosen router and report the per-expert load."""

from __future__ import annotations

import torch

from moe import Routing, TopKRouter, expert_choice, route_by_score, routing_stats

ROUTERS = ("softmax top-k", "sigmoid top-k + bias balancing", "noisy top-k", "expert choice", "hard score")
D_MODEL = 16


def _skewed_tokens(num_tokens: int, num_experts: int, skew: float, g: torch.Generator):
    """Tokens ``(N, d)`` whose last feature is a constant 1, and a gate weight ``(E, d)`` whose
    last column ``linspace(skew, 0)`` pushes every token toward the low-index experts."""
    x = torch.randn(num_tokens, D_MODEL, generator=g)
    x[:, -1] = 1.0
    w = torch.randn(num_experts, D_MODEL, generator=g) * 0.5
    w[:, -1] = torch.linspace(skew, 0.0, num_experts)
    return x, w


def route_batch(
    router_name: str,
    num_experts: int,
    k: int,
    num_tokens: int,
    skew: float,
    seed: int = 0,
    bias_steps: int = 50,
) -> tuple[Routing, dict]:
    """Route ``num_tokens`` random tokens, skewed toward expert 0 by ``skew``, through the named
    router; returns ``(Routing, stats)``. The bias-balanced router first runs ``bias_steps``
    bias updates, so its selection bias visibly evens the load."""
    if router_name not in ROUTERS:
        raise ValueError(f"unknown router {router_name!r}; choose one of {ROUTERS}")
    if not 1 <= k <= num_experts:
        raise ValueError(f"k must be in [1, {num_experts}], got {k}")
    g = torch.Generator().manual_seed(seed)
    x, w = _skewed_tokens(num_tokens, num_experts, skew, g)
    if router_name == "expert choice":
        routing = expert_choice(x @ w.t(), capacity=max(1, num_tokens * k // num_experts))
    elif router_name == "hard score":
        routing = route_by_score(x @ w.t(), lower_is_better=False)
    else:
        torch.manual_seed(seed)
        sigmoid = router_name.startswith("sigmoid")
        router = TopKRouter(
            D_MODEL,
            num_experts,
            k,
            activation="sigmoid" if sigmoid else "softmax",
            noisy=router_name == "noisy top-k",
            bias_update_rate=0.02 if sigmoid else 0.0,
        )
        router.train(router_name == "noisy top-k")
        with torch.no_grad():
            router.gate.weight.copy_(w)
            for _ in range(bias_steps if sigmoid else 0):
                router.update_bias(router(x))
            routing = router(x)
    return routing, routing_stats(routing)
