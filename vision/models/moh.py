"""MoH: a Mamba diffusion backbone with a Mixture of Hierarchical experts.

A timestep-conditioned router (from ``moe``) picks, per sample and denoising step,

1. **representation levels**: which coarse token grids (level ``l`` pools the ``g x g`` patch
   grid by ``2^l``) are computed by their own Mamba blocks and added back to the fine tokens
   (``moe.topk_select`` over level scores; level 0, the fine grid, is always kept);
2. **a feature-transform expert** applied after the scan stack (pointwise MLP, or depthwise
   3x3 / 5x5 convolutions that add spatial inductive bias), via ``moe.TopKRouter`` with k=1;
3. **the scan depth**: how many of the fine-grid Mamba blocks run (``depth_choices``), via a
   second ``moe.TopKRouter``; samples with a shallower route skip the remaining blocks, so the
   compute saving is real (``route["sample_layers"]`` counts blocks actually run).

Hard choices get the Switch-Transformer gradient through a straight-through gate: the value of
``y = y_route + (p - sg(p)) * Δ`` equals the routed output while ``∂y/∂p = Δ`` (``sg`` is
stop-gradient, ``p`` the router probability of the chosen option, ``Δ`` the routed update). A
compute penalty ``depth_cost * E_p[depth] / max_depth`` joins the routers' load-balance and z
losses in ``aux_loss``.

Shapes: ``sample (b, c, H, W)``, ``timestep`` scalar or ``(b,)`` -> ``BackboneOutput.sample
(b, c, H, W)`` (predicted noise), with ``l = (H / patch)^2`` tokens of width ``d``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from common.errors import InputError
from common.pretrained import register_model, register_to_config
from moe import TopKRouter, dispatch_combine, topk_select
from vision.models.layers import (
    AdaLNMambaBlock,
    BackboneOutput,
    DiffusionBackbone,
    FinalLayer,
    PatchEmbed,
    TimestepEmbedder,
    check_sample,
    prepare_timestep,
)

TRANSFORM_EXPERTS = ("mlp", "dwconv3", "dwconv5")


class TransformExpert(nn.Module):
    """Feature transform on flattened token grids ``(m, l * d) -> (m, l * d)`` (flat so that
    ``moe.dispatch_combine`` can route whole samples). ``kind`` is ``mlp`` (pointwise, 2x
    hidden) or ``dwconvK`` (K x K depthwise conv over the grid, then pointwise). The last
    projection is zero-initialised, so every expert starts as the identity update 0."""

    def __init__(self, kind: str, d: int, grid: int) -> None:
        super().__init__()
        if kind not in TRANSFORM_EXPERTS:
            raise ValueError(f"unknown transform expert {kind!r}; choose from {TRANSFORM_EXPERTS}")
        self.kind, self.d, self.grid = kind, d, grid
        self.norm = nn.LayerNorm(d)
        if kind == "mlp":
            self.inner = nn.Linear(d, 2 * d)
            self.out = nn.Linear(2 * d, d)
        else:
            k = int(kind.removeprefix("dwconv"))
            self.inner = nn.Conv2d(d, d, k, padding=k // 2, groups=d)
            self.out = nn.Linear(d, d)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, flat: Tensor) -> Tensor:
        x = self.norm(rearrange(flat, "m (l d) -> m l d", d=self.d))
        if self.kind == "mlp":
            y = self.out(F.gelu(self.inner(x)))
        else:
            g = rearrange(x, "m (h w) d -> m d h w", h=self.grid)
            y = self.out(F.gelu(rearrange(self.inner(g), "m d h w -> m (h w) d")))
        return rearrange(y, "m l d -> m (l d)")


def _straight_through(p: Tensor) -> Tensor:
    """``1 + p - sg(p)``: equals 1, gradient 1 w.r.t. ``p``."""
    return 1.0 + p - p.detach()


@register_model("moh")
class MoHBackbone(DiffusionBackbone):
    """Mamba diffusion backbone with timestep-routed levels, transform experts and scan depth.

    Args:
        sample_size, in_channels, patch_size: image geometry (``sample_size % (patch_size *
            2**(num_levels-1)) == 0``).
        d_model, d_state, expand: Mamba width, SSM state size, inner expansion.
        depth_choices: candidate numbers of fine-grid Mamba blocks (the stack has ``max``).
        num_levels, k_levels, level_layers: token-grid levels (0 = fine), how many are used per
            sample (level 0 always), Mamba blocks per coarse level.
        transform_experts: names from ``TRANSFORM_EXPERTS``.
        scan_orders: 2D scan orders cycled over the fine blocks (``vision.scan.SCAN_ORDERS``).
        depth_cost, balance_coef, z_coef: auxiliary loss coefficients.
        checkpoint_scan: recompute the S6 states in the backward pass instead of keeping them
            (``MambaMixer``; same results, less activation memory for the large sizes).
    """

    @register_to_config
    def __init__(
        self,
        sample_size: int = 32,
        in_channels: int = 1,
        patch_size: int = 4,
        d_model: int = 64,
        d_state: int = 8,
        expand: int = 2,
        depth_choices: tuple[int, ...] = (2, 4, 6),
        num_levels: int = 3,
        k_levels: int = 2,
        level_layers: int = 1,
        transform_experts: tuple[str, ...] = TRANSFORM_EXPERTS,
        scan_orders: tuple[str, ...] = ("raster", "zigzag_rev", "column", "zigzag_col_rev"),
        depth_cost: float = 0.02,
        balance_coef: float = 0.01,
        z_coef: float = 1e-3,
        checkpoint_scan: bool = False,
    ) -> None:
        super().__init__()
        depth_choices = tuple(sorted(int(x) for x in depth_choices))
        if depth_choices[0] < 1:
            raise ValueError(f"depth_choices must be >= 1, got {depth_choices}")
        grid = sample_size // patch_size
        if sample_size % patch_size or grid % (2 ** (num_levels - 1)):
            raise ValueError(
                f"sample_size {sample_size} must be divisible by patch_size {patch_size} * 2^(num_levels-1)"
            )
        if not 1 <= k_levels <= num_levels:
            raise ValueError(f"k_levels must be in [1, {num_levels}], got {k_levels}")
        self.grid, self.depth_options = grid, depth_choices
        self.t_embed = TimestepEmbedder(d_model)
        self.patch = PatchEmbed(sample_size, in_channels, patch_size, d_model)
        self.blocks = nn.ModuleList(
            AdaLNMambaBlock(d_model, d_state, expand, scan_orders[i % len(scan_orders)], grid,
                            checkpoint_scan=checkpoint_scan)
            for i in range(depth_choices[-1])
        )
        self.level_gate = nn.Linear(d_model, num_levels)
        self.level_blocks = nn.ModuleList(
            nn.ModuleList(
                AdaLNMambaBlock(d_model, d_state, expand, scan_orders[j % len(scan_orders)], grid >> lvl,
                                checkpoint_scan=checkpoint_scan)
                for j in range(level_layers)
            )
            for lvl in range(1, num_levels)
        )
        self.level_out = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(1, num_levels))
        for m in self.level_out:  # coarse levels start as a zero update
            nn.init.zeros_(m.weight)
            nn.init.zeros_(m.bias)
        self.transforms = nn.ModuleList(TransformExpert(k, d_model, grid) for k in transform_experts)
        self.transform_router = TopKRouter(
            d_model, len(transform_experts), k=1, balance_coef=balance_coef, z_coef=z_coef, normalize=False
        )
        self.depth_router = TopKRouter(
            d_model, len(depth_choices), k=1, balance_coef=balance_coef, z_coef=z_coef, normalize=False
        )
        self.final = FinalLayer(d_model, in_channels, patch_size, grid)

    # -- routing ---------------------------------------------------------------------------
    def _levels(self, c: Tensor, forced: list[int] | None) -> tuple[Tensor, Tensor]:
        """``mask (b, G)`` bool of used levels and gate probabilities ``(b, G)``."""
        scores = self.level_gate(c)
        b, g = scores.shape
        always = torch.zeros(b, g, dtype=torch.bool, device=c.device)
        always[:, 0] = True
        if forced is not None:
            if any(not 0 <= lvl < g for lvl in forced):
                raise InputError(f"levels must be in [0, {g - 1}], got {forced}")
            mask = always.clone()
            mask[:, list(forced)] = True
        else:
            _, mask = topk_select(scores, self.config.k_levels, always=always)
        return mask, torch.softmax(scores, dim=-1)

    def forward(
        self,
        sample: Tensor,
        timestep: Tensor | int | float,
        return_dict: bool = True,
        route: dict | None = None,
    ) -> BackboneOutput | tuple:
        """Predict the noise of ``sample (b, c, H, W)`` at ``timestep``.

        ``route`` optionally forces choices for every sample: ``{"depth": int, "levels":
        [int, ...]}`` (either or both; the bench's full route). The returned ``route`` dict holds per
        sample ``depth (b,)``, ``levels (b, G)`` bool, ``transform (b,)``, and
        ``sample_layers`` (int, Mamba blocks run summed over samples, coarse levels included).
        """
        cfg = self.config
        check_sample(sample, cfg.in_channels, cfg.sample_size)
        route = route or {}
        if set(route) - {"depth", "levels"}:
            raise InputError(f"a route forces 'depth' and / or 'levels', got {sorted(route)}")
        b = sample.shape[0]
        t = prepare_timestep(timestep, b, sample.device)
        c = self.t_embed(t)
        x = self.patch(sample)
        sample_layers = 0
        aux = x.new_zeros(())

        # 1. representation levels: coarse grids see global context at a fraction of the cost
        level_mask, level_p = self._levels(c, route.get("levels"))
        for lvl in range(1, len(self.level_blocks) + 1):
            rows = level_mask[:, lvl].nonzero().squeeze(1)
            if rows.numel() == 0:
                continue
            f = 2**lvl
            g = rearrange(x[rows], "m (h w) d -> m d h w", h=self.grid)
            coarse = rearrange(F.avg_pool2d(g, f), "m d h w -> m (h w) d")
            for blk in self.level_blocks[lvl - 1]:
                coarse = blk(coarse, c[rows])
                sample_layers += rows.numel()
            up = rearrange(coarse, "m (h w) d -> m d h w", h=self.grid // f)
            up = rearrange(F.interpolate(up, scale_factor=f, mode="nearest"), "m d h w -> m (h w) d")
            update = self.level_out[lvl - 1](up) * _straight_through(level_p[rows, lvl])[:, None, None]
            x = x.index_add(0, rows, update.to(x.dtype))  # under autocast the update may be bfloat16

        # 2. scan depth: sample i runs blocks 0 .. depth_i - 1
        depth_routing = self.depth_router(c)
        aux = aux + depth_routing.aux_loss
        if "depth" in route:
            if (forced := int(route["depth"])) not in self.depth_options:
                raise InputError(f"depth must be one of {self.depth_options}, got {forced}")
            depth_idx = torch.full((b,), self.depth_options.index(forced), dtype=torch.long, device=c.device)
        else:
            depth_idx = depth_routing.indices[:, 0]
        options = torch.tensor(self.depth_options, device=c.device, dtype=torch.float32)
        depth = options.long()[depth_idx]
        aux = aux + cfg.depth_cost * (depth_routing.probs * options).sum(-1).mean() / options[-1]
        h = x
        for i, blk in enumerate(self.blocks):
            rows = (depth > i).nonzero().squeeze(1)
            if rows.numel() == 0:
                break
            if rows.numel() == b:
                h = blk(h, c)
            else:
                h = h.index_copy(0, rows, blk(h[rows], c[rows]).to(h.dtype))
            sample_layers += rows.numel()
        p_depth = depth_routing.probs.gather(1, depth_idx[:, None])
        h = h + (p_depth - p_depth.detach())[:, :, None] * (h - x)

        # 3. feature-transform expert, one per sample, dispatched by moe
        t_routing = self.transform_router(c)
        aux = aux + t_routing.aux_loss
        t_routing.weights = _straight_through(t_routing.weights)
        flat = rearrange(h, "b l d -> b (l d)")
        update, _ = dispatch_combine(flat, t_routing, list(self.transforms))
        h = h + rearrange(update, "b (l d) -> b l d", d=cfg.d_model)

        out = self.final(h, c)
        info = {
            "depth": depth.detach(),
            "levels": level_mask.detach(),
            "transform": t_routing.indices[:, 0].detach(),
            "sample_layers": int(sample_layers),
            "depth_probs": depth_routing.probs.detach(),
        }
        if not return_dict:
            return (out, aux, info)
        return BackboneOutput(sample=out, aux_loss=aux, route=info)

    @classmethod
    def tiny_example(cls):
        torch.manual_seed(0)
        return cls.perturbed(cls(sample_size=16, patch_size=4, d_model=16, d_state=2, depth_choices=(1, 3))), cls.example_input()
