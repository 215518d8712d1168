"""Models: a per-part point-cloud autoencoder and a flow-matching transformer over part tokens.

PartAutoencoder (one part at a time, points in the part's box frame ``[-1, 1]^3``):
    encode: points (N, M, 3) -> Fourier features -> T learned queries cross-attend -> z (N, T, d_z)
    decode: z (N, T, d_z) -> self-attention over the T tokens -> M_out learned queries
            cross-attend -> points (N, M_out, 3)
    trained with the (squared) Chamfer distance.

PartFlowTransformer (rectified flow / flow matching, diffusers ``FlowMatchEulerDiscreteScheduler``
convention): a shape is P parts, each T latent tokens ``z (P, T, d_z)`` plus a box ``(P, 6)``,
both standardised (boxes as centre and log-size, ``data.box_to_param``). With
``x_s = (1 - s) x_0 + s * eps`` the network predicts ``v = eps - x_0`` from ``x_s``, ``s`` and the
condition: category (incl. a null class for unconditional/CFG), number of parts, and an optional
MiniLM text embedding ``(B, 384)`` projected to ``d`` (a learned null embedding stands in when
there is no text). DiT blocks with adaLN-Zero; the token mixer is a component attention from
``attention.py`` (MoCA or a baseline), given the current (noisy) boxes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from common.errors import InputError
from common.pretrained import PretrainedMixin, register_model, register_to_config
from common.sizes import SizeTable
from generation3d.attention import ATTENTION_KINDS, MoCAAttention, build_attention
from generation3d.data import CATEGORIES
from generation3d.geometry import fourier
from generation3d.text import TEXT_DIM


@dataclass
class AEConfig:
    n_latents: int = 8
    d_latent: int = 8
    d_model: int = 64
    n_heads: int = 4
    n_out: int = 256
    n_freq: int = 6


@register_model("part_autoencoder")
class PartAutoencoder(PretrainedMixin, nn.Module):
    """Point cloud of one part -> T latent tokens -> point cloud (see module docstring)."""

    @register_to_config
    def __init__(self, config: AEConfig | None = None):
        super().__init__()
        self.config = c = config or AEConfig()
        self.point_in = nn.Sequential(nn.Linear(3 * (2 * c.n_freq + 1), c.d_model), nn.GELU(), nn.Linear(c.d_model, c.d_model))
        self.latent_queries = nn.Parameter(torch.randn(c.n_latents, c.d_model) * 0.02)
        self.enc_attn = nn.MultiheadAttention(c.d_model, c.n_heads, batch_first=True)
        self.enc_mlp = nn.Sequential(nn.LayerNorm(c.d_model), nn.Linear(c.d_model, 2 * c.d_model), nn.GELU(), nn.Linear(2 * c.d_model, c.d_model))
        self.to_latent = nn.Linear(c.d_model, c.d_latent)
        self.from_latent = nn.Linear(c.d_latent, c.d_model)
        self.dec_self = nn.TransformerEncoderLayer(c.d_model, c.n_heads, 2 * c.d_model, dropout=0.0, batch_first=True, norm_first=True)
        self.out_queries = nn.Parameter(torch.randn(c.n_out, c.d_model) * 0.02)
        self.dec_attn = nn.MultiheadAttention(c.d_model, c.n_heads, batch_first=True)
        self.dec_mlp = nn.Sequential(nn.LayerNorm(c.d_model), nn.Linear(c.d_model, 2 * c.d_model), nn.GELU(), nn.Linear(2 * c.d_model, 3))

    def encode(self, points: Tensor) -> Tensor:
        """points (N, M, 3) in the box frame -> z (N, T, d_z)."""
        feats = self.point_in(fourier(points, self.config.n_freq))
        q = self.latent_queries.expand(points.shape[0], -1, -1)
        h = q + self.enc_attn(q, feats, feats, need_weights=False)[0]
        return self.to_latent(h + self.enc_mlp(h))

    def decode(self, z: Tensor) -> Tensor:
        """z (N, T, d_z) -> points (N, n_out, 3)."""
        h = self.dec_self(self.from_latent(z))
        q = self.out_queries.expand(z.shape[0], -1, -1)
        o = q + self.dec_attn(q, h, h, need_weights=False)[0]
        return self.dec_mlp(o)

    def forward(self, points: Tensor) -> Tensor:
        return self.decode(self.encode(points))

    @classmethod
    def tiny_example(cls):
        torch.manual_seed(0)
        points = torch.rand(2, 20, 3, generator=torch.Generator().manual_seed(0)) * 2 - 1
        return cls(AEConfig(n_latents=2, d_latent=3, d_model=8, n_heads=2, n_out=16, n_freq=2)), (points,)


@dataclass(frozen=True)
class ModelSize:
    """A named generator size (the way DiT and timm name theirs): width, depth, heads and the
    latent tokens per part T (the autoencoder's ``n_latents``)."""

    d_model: int
    n_layers: int
    n_heads: int
    tokens_per_part: int


# S is the default recipe (the results tables' models); the README's sizes table has a row for each.
MODEL_SIZES = SizeTable({
    "S": ModelSize(d_model=128, n_layers=4, n_heads=4, tokens_per_part=8),
    "B": ModelSize(d_model=256, n_layers=6, n_heads=8, tokens_per_part=16),
    "L": ModelSize(d_model=384, n_layers=8, n_heads=12, tokens_per_part=32),
}, default="S")


MOCA_ROUTER_DISTILL = 0.5  # default router distillation weight of MoCA
MOCA_DENSE_WARMUP = 0.25  # default dense warm-up fraction of MoCA


@dataclass
class GenConfig:
    n_latents: int = 8
    d_latent: int = 8
    max_parts: int = 64
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 4
    attention: str = "moca"
    top_k: int = 4
    n_compressed: int = 2
    # DeepSeek-V3.2 sparse-attention training recipe (training only, learned routers: moca / topk):
    # weight of the router distillation loss KL(full-attention part mass || router) and the fraction
    # of steps trained densely (k = P) first. None = the default: on for MoCA (README "Router
    # distillation + dense warm-up"), off (0) otherwise
    router_distill: float | None = None
    dense_warmup: float | None = None
    n_categories: int = len(CATEGORIES)  # + 1 null class for unconditional generation
    d_text: int = TEXT_DIM

    def __post_init__(self):
        if self.attention not in ATTENTION_KINDS:
            raise InputError(f"unknown attention {self.attention!r}; choose from {', '.join(ATTENTION_KINDS)}")
        moca = self.attention == "moca"
        if self.router_distill is None:
            self.router_distill = MOCA_ROUTER_DISTILL if moca else 0.0
        if self.dense_warmup is None:
            self.dense_warmup = MOCA_DENSE_WARMUP if moca else 0.0
        if self.d_model % self.n_heads:
            raise InputError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.top_k < 1 or self.n_compressed < 0 or self.max_parts < 1 or self.n_layers < 1:
            raise InputError(f"need top_k >= 1, n_compressed >= 0, max_parts >= 1 and n_layers >= 1, got {self.top_k}, "
                             f"{self.n_compressed}, {self.max_parts}, {self.n_layers}")
        if self.router_distill < 0 or not 0 <= self.dense_warmup < 1:
            raise InputError(f"need router_distill >= 0 and 0 <= dense_warmup < 1, got {self.router_distill}, {self.dense_warmup}")
        if (self.router_distill or self.dense_warmup) and self.attention not in ("moca", "topk"):
            raise InputError(f"router distillation and dense warm-up need a learned router (moca, topk), not {self.attention!r}")


def timestep_embedding(t: Tensor, dim: int) -> Tensor:
    """Sinusoidal embedding of ``t (B,)`` (in [0, 1000]) -> ``(B, dim)``."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    ang = t.float()[:, None] * freqs[None]
    return torch.cat([ang.cos(), ang.sin()], -1)


class DiTBlock(nn.Module):
    """adaLN-Zero transformer block over part tokens ``(B, P, T, d)`` with a component attention."""

    def __init__(self, c: GenConfig):
        super().__init__()
        d = c.d_model
        self.norm1 = nn.LayerNorm(d, elementwise_affine=False)
        self.attn = build_attention(c.attention, d, c.n_heads, top_k=c.top_k, n_compressed=c.n_compressed)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=False)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.ada = nn.Linear(d, 6 * d)
        nn.init.zeros_(self.ada.weight)
        nn.init.zeros_(self.ada.bias)

    def forward(self, x: Tensor, cond: Tensor, boxes: Tensor, valid: Tensor | None) -> Tensor:
        s1, sc1, g1, s2, sc2, g2 = (m[:, None, None] for m in self.ada(F.silu(cond)).chunk(6, -1))
        x = x + g1 * self.attn(self.norm1(x) * (1 + sc1) + s1, boxes, valid)
        return x + g2 * self.mlp(self.norm2(x) * (1 + sc2) + s2)


@register_model("moca_generator")
class PartFlowTransformer(PretrainedMixin, nn.Module):
    """Velocity network. ``forward(z (B,P,T,d_z), box (B,P,6), t (B,) in [0,1000], category (B,)
    long (``n_categories`` = null), n_parts (B,) long, valid (B,P) bool | None, text (B,d_text) |
    None, text_keep (B,) bool | None) -> (v_z, v_box)`` with the same shapes as ``z`` and ``box``.
    Rows of ``text`` with ``text_keep`` False (or all rows when ``text`` is None) use the null
    text embedding. Config version 2: without the fields of the removed MoCA variants (version 1,
    which had them, is refused)."""

    config_version = 2

    @register_to_config
    def __init__(self, config: GenConfig | None = None):
        super().__init__()
        self.config = c = config or GenConfig()
        d = c.d_model
        self.z_in = nn.Linear(c.d_latent, d)
        self.box_in = nn.Linear(6 * 13, d)
        self.slot = nn.Embedding(c.max_parts, d)
        self.token_pos = nn.Parameter(torch.randn(c.n_latents, d) * 0.02)
        self.t_mlp = nn.Sequential(nn.Linear(d, d), nn.SiLU(), nn.Linear(d, d))
        self.cat_emb = nn.Embedding(c.n_categories + 1, d)
        self.count_emb = nn.Embedding(c.max_parts + 1, d)
        self.text_proj = nn.Sequential(nn.Linear(c.d_text, d), nn.SiLU(), nn.Linear(d, d))
        self.text_null = nn.Parameter(torch.zeros(d))
        self.blocks = nn.ModuleList(DiTBlock(c) for _ in range(c.n_layers))
        self.norm_out = nn.LayerNorm(d, elementwise_affine=False)
        self.ada_out = nn.Linear(d, 2 * d)
        self.z_out = nn.Linear(d, c.d_latent)
        self.box_out = nn.Linear(d, 6)
        for lin in (self.ada_out, self.z_out, self.box_out):
            nn.init.zeros_(lin.weight)
            nn.init.zeros_(lin.bias)

    def check_parts(self, n_parts: int) -> None:
        if not 1 <= n_parts <= self.config.max_parts:
            raise InputError(f"number of parts {n_parts} is outside the trained range 1..{self.config.max_parts}")

    def text_condition(self, text: Tensor | None, text_keep: Tensor | None, batch: int) -> Tensor:
        """``(B, d)``: projected text, the null embedding where there is none."""
        null = self.text_null.expand(batch, -1)
        if text is None:
            return null
        proj = self.text_proj(text)
        return proj if text_keep is None else torch.where(text_keep[:, None], proj, null)

    def forward(self, z: Tensor, box: Tensor, t: Tensor, category: Tensor, n_parts: Tensor, valid: Tensor | None = None,
                text: Tensor | None = None, text_keep: Tensor | None = None):
        b, p, tt, _ = z.shape
        if p > self.config.max_parts:
            raise InputError(f"number of parts {p} exceeds the trained maximum {self.config.max_parts}")
        slots = torch.arange(p, device=z.device)
        x = self.z_in(z) + self.token_pos + (self.box_in(fourier(box, 6)) + self.slot(slots))[:, :, None]
        cond = self.t_mlp(timestep_embedding(t, self.config.d_model)) + self.cat_emb(category) + self.count_emb(n_parts)
        cond = cond + self.text_condition(text, text_keep, b)
        for blk in self.blocks:
            x = blk(x, cond, box, valid)
        shift, scale = (m[:, None, None] for m in self.ada_out(F.silu(cond)).chunk(2, -1))
        h = self.norm_out(x) * (1 + scale) + shift
        return self.z_out(h), self.box_out(h.mean(2))

    def set_sparse_training(self, distill: bool = False, dense: bool = False) -> None:
        """Training-only switches of every routed attention (``MoCAAttention.distill`` / ``.dense``)."""
        for blk in self.blocks:
            if isinstance(blk.attn, MoCAAttention):
                blk.attn.distill, blk.attn.dense = distill, dense

    def router_distill_loss(self) -> Tensor | None:
        """Mean over layers of the router distillation losses of the last forward (None if none)."""
        losses = [blk.attn.distill_loss for blk in self.blocks if getattr(blk.attn, "distill_loss", None) is not None]
        return torch.stack(losses).mean() if losses else None

    def routing(self) -> list[dict]:
        """Router choices of the last forward, one dict per layer (``indices (B,P,k)``, ``scores``)."""
        return [getattr(b.attn, "last_selection", {}) for b in self.blocks]

    @classmethod
    def tiny_example(cls):
        """MoCA generator (zero-initialised heads perturbed so outputs are not all 0) on 2 shapes
        of 3 parts, the second with 2 valid parts and a text condition."""
        torch.manual_seed(0)
        model = cls(GenConfig(n_latents=2, d_latent=3, max_parts=4, d_model=16, n_heads=2, n_layers=1, top_k=2,
                              n_compressed=1, d_text=6))
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        g = torch.Generator().manual_seed(0)
        inputs = (torch.randn(2, 3, 2, 3, generator=g), torch.randn(2, 3, 6, generator=g), torch.tensor([10.0, 900.0]),
                  torch.tensor([0, 1]), torch.tensor([3, 2]), torch.tensor([[True] * 3, [True, True, False]]),
                  torch.randn(2, 6, generator=g), torch.tensor([False, True]))
        return model, inputs


@register_model("moca_pipeline")
class PipelineCheckpoint(PretrainedMixin, nn.Module):
    """A whole MoCA pipeline in one checkpoint, the form it ships in (``common.shipped.ship``
    takes one model): ``ae`` (``PartAutoencoder(ae_config)``), ``gen``
    (``PartFlowTransformer(gen_config)``), the latent ``stats`` (``z_mean``, ``z_std``,
    ``box_mean``, ``box_std`` as lists), the training ``descriptions``, the trained
    ``categories`` and the generator's box parameterisation ``box_param``.
    ``sampling.MoCAPipeline.from_checkpoint`` samples from it."""

    @register_to_config
    def __init__(self, ae_config: AEConfig, gen_config: GenConfig, stats: dict, descriptions: list[str],
                 categories: list[str], box_param: str):
        super().__init__()
        self.ae, self.gen = PartAutoencoder(ae_config), PartFlowTransformer(gen_config)
        self.stats, self.descriptions, self.categories = stats, list(descriptions), list(categories)
        self.box_param = box_param

    def example_forward(self, z: Tensor, box: Tensor, t: Tensor, category: Tensor, n_parts: Tensor):
        """The generator's velocities ``(v_z, v_box)`` and the autoencoder's decoding of ``z[0]``."""
        v_z, v_box = self.gen(z, box, t, category, n_parts)
        return v_z, v_box, self.ae.decode(z[0])

    @classmethod
    def tiny_example(cls):
        torch.manual_seed(0)
        ae = AEConfig(n_latents=2, d_latent=3, d_model=8, n_heads=2, n_out=16, n_freq=2)
        gen = GenConfig(n_latents=2, d_latent=3, max_parts=4, d_model=16, n_heads=2, n_layers=1, top_k=2,
                        n_compressed=1, d_text=6)
        stats = {"z_mean": [0.1, 0.0, -0.1], "z_std": [1.0, 0.5, 2.0], "box_mean": [0.0] * 3 + [-1.0] * 3,
                 "box_std": [0.5] * 6}
        model = cls(ae, gen, stats, ["a chair with 3 parts"], ["chair", "table"], "centre+log_size")
        with torch.no_grad():  # the generator's heads start at zero: perturb them so outputs move
            for p in model.gen.parameters():
                p.add_(0.05 * torch.randn_like(p))
        g = torch.Generator().manual_seed(0)
        return model, (torch.randn(1, 3, 2, 3, generator=g), torch.randn(1, 3, 6, generator=g), torch.tensor([500.0]),
                       torch.tensor([0]), torch.tensor([3]))
