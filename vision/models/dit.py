"""Small DiT (Peebles & Xie 2023): patch tokens, adaLN-Zero transformer blocks
(self-attention + MLP), linear head.

Shapes: ``sample (b, c, H, W)``, ``timestep`` scalar or ``(b,)`` -> ``BackboneOutput.sample
(b, c, H, W)`` (predicted noise).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from common.pretrained import register_model, register_to_config
from vision.models.layers import (
    FinalLayer,
    FixedStackBackbone,
    PatchEmbed,
    TimestepEmbedder,
)


class DiTBlock(nn.Module):
    """``x + g1 * attn(mod(LN x)) ; x + g2 * mlp(mod(LN x))`` with shifts/scales/gates from
    ``c (b, d)`` (adaLN-Zero). ``x (b, l, d)``."""

    def __init__(self, d: int, heads: int, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        hidden = int(d * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(d, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, d))
        self.ada = nn.Linear(d, 6 * d)
        nn.init.zeros_(self.ada.weight)
        nn.init.zeros_(self.ada.bias)

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        s1, sc1, g1, s2, sc2, g2 = self.ada(F.silu(c))[:, None].chunk(6, dim=-1)
        h = self.norm1(x) * (1 + sc1) + s1
        q, k, v = rearrange(self.qkv(h), "b l (three n e) -> three b n l e", three=3, n=self.heads)
        a = rearrange(F.scaled_dot_product_attention(q, k, v), "b n l e -> b l (n e)")
        x = x + g1 * self.proj(a)
        return x + g2 * self.mlp(self.norm2(x) * (1 + sc2) + s2)


@register_model("dit")
class DiTBackbone(FixedStackBackbone):
    """Small DiT baseline."""

    @register_to_config
    def __init__(
        self,
        sample_size: int = 32,
        in_channels: int = 1,
        patch_size: int = 4,
        d_model: int = 64,
        depth: int = 6,
        heads: int = 4,
        mlp_ratio: float = 4.0,
    ) -> None:
        super().__init__()
        grid = sample_size // patch_size
        self.t_embed = TimestepEmbedder(d_model)
        self.patch = PatchEmbed(sample_size, in_channels, patch_size, d_model)
        self.blocks = nn.ModuleList(DiTBlock(d_model, heads, mlp_ratio) for _ in range(depth))
        self.final = FinalLayer(d_model, in_channels, patch_size, grid)

    @classmethod
    def tiny_example(cls):
        torch.manual_seed(0)
        return cls.perturbed(cls(sample_size=16, patch_size=4, d_model=16, depth=2, heads=2)), cls.example_input()
