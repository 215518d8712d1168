"""Shared Mixture-of-Experts routing core used by every moe-apps application."""

from moe.dispatch import (
    DispatchInfo,
    dispatch_combine,
    dispatch_combine_einsum,
    dispatch_combine_loop,
    expert_capacity,
)
from moe.layer import MoE
from moe.losses import load_balance_loss, router_z_loss
from moe.routers import TopKRouter
from moe.routing import Routing, expert_choice, expert_counts, route_by_score, route_topk, topk_select
from moe.stats import plot_expert_load, routing_stats

__all__ = [
    "DispatchInfo",
    "MoE",
    "Routing",
    "TopKRouter",
    "dispatch_combine",
    "dispatch_combine_einsum",
    "dispatch_combine_loop",
    "expert_capacity",
    "expert_choice",
    "expert_counts",
    "load_balance_loss",
    "plot_expert_load",
    "route_by_score",
    "route_topk",
    "router_z_loss",
    "routing_stats",
    "topk_select",
]
