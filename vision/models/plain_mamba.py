"""Plain Mamba diffusion backbone (DiS / DiM style): patch tokens, ``depth`` adaLN Mamba
blocks with cycled 2D scan orders, every block run at every timestep (fixed computation).

Shapes: ``sample (b, c, H, W)``, ``timestep`` scalar or ``(b,)`` -> ``BackboneOutput.sample
(b, c, H, W)`` (predicted noise).
"""

from __future__ import annotations

import torch
from torch import nn

from common.pretrained import register_model, register_to_config
from vision.models.layers import (
    AdaLNMambaBlock,
    FinalLayer,
    FixedStackBackbone,
    PatchEmbed,
    TimestepEmbedder,
)


@register_model("plain_mamba")
class PlainMambaBackbone(FixedStackBackbone):
    """Fixed-depth Mamba backbone; the baseline MoH is compared to at matched parameters
    (``checkpoint_scan`` as in ``MoHBackbone``)."""

    @register_to_config
    def __init__(
        self,
        sample_size: int = 32,
        in_channels: int = 1,
        patch_size: int = 4,
        d_model: int = 64,
        d_state: int = 8,
        expand: int = 2,
        depth: int = 8,
        scan_orders: tuple[str, ...] = ("raster", "zigzag_rev", "column", "zigzag_col_rev"),
        checkpoint_scan: bool = False,
    ) -> None:
        super().__init__()
        grid = sample_size // patch_size
        self.t_embed = TimestepEmbedder(d_model)
        self.patch = PatchEmbed(sample_size, in_channels, patch_size, d_model)
        self.blocks = nn.ModuleList(
            AdaLNMambaBlock(d_model, d_state, expand, scan_orders[i % len(scan_orders)], grid,
                            checkpoint_scan=checkpoint_scan)
            for i in range(depth)
        )
        self.final = FinalLayer(d_model, in_channels, patch_size, grid)

    @classmethod
    def tiny_example(cls):
        torch.manual_seed(0)
        return cls.perturbed(cls(sample_size=16, patch_size=4, d_model=16, d_state=2, depth=2)), cls.example_input()
