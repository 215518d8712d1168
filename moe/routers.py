"""Learned routers: a linear gate over token features that returns a ``Routing``."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from moe.losses import load_balance_loss, router_z_loss
from moe.routing import Routing, route_topk


class TopKRouter(nn.Module):
    """Linear gate + top-k selection: softmax, sigmoid (optionally bias-balanced), or noisy.

    Args:
        d_model: feature size ``d`` of the tokens.
        num_experts: ``E``.
        k: experts per token.
        activation: ``"softmax"`` or ``"sigmoid"``.
        noisy: add Gaussian noise (scaled by a learned softplus, Shazeer et al. 2017) to the
            logits in training mode only.
        balance_coef, z_coef: coefficients of the load-balance and z-loss in ``aux_losses``
            (0 disables a loss).
        bias_update_rate: with > 0, a per-expert selection bias is nudged after each
            :meth:`update_bias` call toward equal load (auxiliary-loss-free balancing); the bias
            changes which experts are selected, never the combine weights.

    Forward: ``x (N, d)``, optional ``mask (N,)`` bool -> :class:`Routing`.
    """

    def __init__(
        self,
        d_model: int,
        num_experts: int,
        k: int = 1,
        activation: str = "softmax",
        noisy: bool = False,
        noise_std: float = 1.0,
        balance_coef: float = 0.01,
        z_coef: float = 1e-3,
        bias_update_rate: float = 0.0,
        normalize: bool = True,
    ) -> None:
        super().__init__()
        if num_experts < 1:
            raise ValueError(f"num_experts must be >= 1, got {num_experts}")
        if not 1 <= k <= num_experts:
            raise ValueError(f"k must be in [1, {num_experts}], got k={k}")
        if activation not in ("softmax", "sigmoid"):
            raise ValueError(f"activation must be 'softmax' or 'sigmoid', got {activation!r}")
        self.d_model, self.num_experts, self.k = d_model, num_experts, k
        self.activation, self.noisy, self.noise_std = activation, noisy, noise_std
        self.balance_coef, self.z_coef = balance_coef, z_coef
        self.bias_update_rate, self.normalize = bias_update_rate, normalize
        self.gate = nn.Linear(d_model, num_experts, bias=False)
        self.noise = nn.Linear(d_model, num_experts, bias=False) if noisy else None
        self.register_buffer("selection_bias", torch.zeros(num_experts))

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Routing:
        if x.dim() != 2 or x.shape[1] != self.d_model:
            raise ValueError(f"router expects x of shape (N, {self.d_model}), got {tuple(x.shape)}")
        logits = self.gate(x)
        if self.noise is not None and self.training:
            std = nn.functional.softplus(self.noise(x)) * self.noise_std
            logits = logits + torch.randn_like(logits) * std
        use_bias = self.bias_update_rate > 0
        routing = route_topk(
            logits,
            self.k,
            self.activation,
            self.normalize,
            bias=self.selection_bias if use_bias else None,
            mask=mask,
        )
        if self.balance_coef > 0:
            probs = routing.probs
            if self.activation == "sigmoid":
                probs = probs / probs.sum(-1, keepdim=True).clamp_min(1e-20)
            routing.aux_losses["balance"] = self.balance_coef * load_balance_loss(
                probs, routing.indices, routing.mask
            )
        if self.z_coef > 0:
            routing.aux_losses["z"] = self.z_coef * router_z_loss(logits, routing.mask)
        return routing

    @torch.no_grad()
    def update_bias(self, routing: Routing) -> None:
        """Nudge the selection bias: underloaded experts up, overloaded ones down (sign rule)."""
        if self.bias_update_rate <= 0:
            raise ValueError("update_bias needs bias_update_rate > 0")
        load = routing.counts.float()
        self.selection_bias += self.bias_update_rate * torch.sign(load.mean() - load)
