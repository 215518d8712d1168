"""``MoE``: a router plus any list of expert modules."""

from __future__ import annotations

from torch import Tensor, nn

from moe.dispatch import dispatch_combine
from moe.routing import Routing


class MoE(nn.Module):
    """Sparse mixture of experts over arbitrary expert modules.

    Forward: ``x (..., d)``, optional ``mask (...)`` bool -> ``(y (..., d_out), Routing)``; the
    leading dims are flattened to ``N`` tokens for routing. The routing's ``aux_loss`` should be
    added to the training loss. ``last_dispatch`` holds the last :class:`DispatchInfo`.
    """

    def __init__(
        self, experts: nn.ModuleList, router: nn.Module, capacity_factor: float | None = None
    ) -> None:
        super().__init__()
        self.experts = experts
        self.router = router
        self.capacity_factor = capacity_factor
        self.last_dispatch = None

    def forward(self, x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Routing]:
        lead = x.shape[:-1]
        flat = x.reshape(-1, x.shape[-1])
        flat_mask = None if mask is None else mask.reshape(-1)
        routing = self.router(flat, mask=flat_mask)
        y, self.last_dispatch = dispatch_combine(flat, routing, self.experts, self.capacity_factor)
        return y.reshape(*lead, y.shape[-1]), routing
