"""Baselines on the same towers as MoA³CIR: image-only, text-only, sum fusion, CLIP4Cir combiner.

All use global tower features of E dims (image: CLIP-style 8-head attention pooling over the
image tower's token grid with positional embeddings, the same image towers and
``image_encoder`` choice as MoA³CIR; text: mean over tokens, then a linear projection):
``f_i`` (reference image), ``f_d`` (reference description), ``f_t`` (modification text);
gallery ``g = norm(f_i' + f_d')`` from the gallery towers.

* ``image``:    q = norm(f_i + f_d)                      (retrieve look-alikes of the reference)
* ``text``:     q = norm(f_t)
* ``sum``:      q = norm(f_i + f_d + f_t)
* ``combiner``: CLIP4Cir (Baldrati et al., 2022) Combiner with x = f_i + f_d, y = f_t::

      p = [relu(W_x x); relu(W_y y)],  lam = sigmoid(MLP_l(p)),
      q = norm(W_o relu(W_c p) + lam * y + (1 - lam) * x)

and, untrained, ``raw_pixel_embeddings`` (cosine of centred pixels, reference image as the query).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from common.pretrained import register_model, register_to_config

from .model import GroupedAttentionPool
from .render import NUM_VALUES
from .towers import DEFAULT_IMAGE_ENCODER, CIRTowers, attribute_loss, check_image_encoder, tiny_cir_batch

FUSIONS = ("image", "text", "sum", "combiner")


@dataclass
class CombinerConfig:
    fusion: str = "combiner"
    d_model: int = 64
    embed_dim: int = 256  # MoA³CIR size S: 8 groups x 32
    use_descriptions: bool = True
    num_values: list[int] = field(default_factory=lambda: list(NUM_VALUES))
    attr_weight: float = 0.5
    init_temperature: float = 0.07
    image_encoder: str = DEFAULT_IMAGE_ENCODER  # as MoA3Config
    encoder_resolution: int = 64
    token_block: int = 7
    trainable_blocks: int = 0

    def __post_init__(self) -> None:
        check_image_encoder(self)
        if self.fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {FUSIONS}, got {self.fusion!r}")


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.float()[..., None]
    return (x * m).sum(1) / m.sum(1).clamp_min(1.0)


class _AttnPool(nn.Module):
    """(b, l, d) image tokens -> (b, E) by 8-head attention pooling (one head group)."""

    def __init__(self, d: int, embed_dim: int):
        super().__init__()
        self.pool = GroupedAttentionPool(d, groups=1, heads_per_group=8, d_slot=embed_dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        mask = torch.ones(tokens.shape[:2], dtype=torch.bool, device=tokens.device)
        return self.pool(tokens, mask)[0][:, 0]


@register_model("combiner_cir")
class CombinerCIR(CIRTowers):
    """Global-feature CIR baselines. Same batch format and API as :class:`~retrieval.model.MoA3CIR`:
    ``encode_query(batch) -> (q (b, E), info)``, ``encode_gallery(batch) -> (b, E)``. Phase-1
    features are global vectors (b, E) (``CIRTowers.alignment_terms``)."""

    @register_to_config
    def __init__(self, config: CombinerConfig | None = None):
        super().__init__()
        self.config = c = config or CombinerConfig()
        self.build_towers(c)
        self.proj = nn.ModuleDict({k: nn.Linear(c.d_model, c.embed_dim) for k in ("qd", "qt", "gd")})
        # image feature: CLIP-style multi-head attention pooling over the 8x8 token grid
        self.proj.update({k: _AttnPool(c.d_model, c.embed_dim) for k in ("qi", "gi")})
        if c.fusion == "combiner":
            e = c.embed_dim
            self.w_x, self.w_y = nn.Linear(e, 2 * e), nn.Linear(e, 2 * e)
            self.w_c, self.w_o = nn.Linear(4 * e, 4 * e), nn.Linear(4 * e, e)
            self.w_l = nn.Sequential(nn.Linear(4 * e, e), nn.ReLU(), nn.Linear(e, 1))
        self.attr_heads = nn.ModuleList(nn.Linear(c.embed_dim, n) for n in c.num_values)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / c.init_temperature)))

    def _visual(self, image_tower, desc_tower, pi, pd, img, desc, desc_mask):
        x = pi(image_tower(img))  # img: images or token grids (ImageInput)
        if self.config.use_descriptions and desc is not None and bool(desc_mask.any()):
            x = x + pd(_masked_mean(desc_tower(desc), desc_mask))
        return x

    def encode_query(self, batch: dict) -> tuple[torch.Tensor, dict]:
        c = self.config
        x = self._visual(
            self.q_image,
            self.q_desc,
            self.proj["qi"],
            self.proj["qd"],
            self.image_input(batch, "ref_img"),
            batch.get("ref_desc"),
            batch.get("ref_desc_mask"),
        )
        y = self.proj["qt"](_masked_mean(self.q_text(batch["text"]), batch["text_mask"]))
        if c.fusion == "image":
            q = x
        elif c.fusion == "text":
            q = y
        elif c.fusion == "sum":
            q = x + y
        else:
            p = torch.cat([F.relu(self.w_x(x)), F.relu(self.w_y(y))], -1)
            lam = torch.sigmoid(self.w_l(p))
            q = self.w_o(F.relu(self.w_c(p))) + lam * y + (1 - lam) * x
        return F.normalize(q, dim=-1), {"composed": q}

    def _gallery_feature(self, batch: dict) -> torch.Tensor:
        return self._visual(
            self.g_image,
            self.g_desc,
            self.proj["gi"],
            self.proj["gd"],
            self.image_input(batch, "img"),
            batch.get("desc"),
            batch.get("desc_mask"),
        )

    def encode_gallery(self, batch: dict) -> torch.Tensor:
        return F.normalize(self._gallery_feature(batch), dim=-1)

    def gallery_slots(self, batch: dict) -> torch.Tensor:
        return self._gallery_feature(batch)

    # -- phase-1 hooks (CIRTowers.alignment_terms)
    def _side_projections(self, side: str) -> tuple[nn.Module, nn.Module]:
        return (self.proj["qi"], self.proj["qd"]) if side == "query" else (self.proj["gi"], self.proj["gd"])

    def image_feature(self, side: str, x: torch.Tensor) -> torch.Tensor:
        """Global image feature (b, E) of ``side`` from its tower input ``x``."""
        return self._side_projections(side)[0](self.side_towers(side)[0](x))

    def description_feature(self, side: str, desc: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Global description feature (b, E): the masked mean of the projected sentence tokens."""
        return self._side_projections(side)[1](_masked_mean(self.side_towers(side)[1](desc), mask))

    def feature_embedding(self, feature: torch.Tensor) -> torch.Tensor:
        return F.normalize(feature, dim=-1)

    def attribute_logits(self, feature: torch.Tensor) -> list[torch.Tensor]:
        return [h(feature) for h in self.attr_heads]

    def auxiliary_loss(self, info: dict, batch: dict, gallery_slots: torch.Tensor | None) -> torch.Tensor:
        if batch.get("tgt_attrs") is None or gallery_slots is None:
            return batch["ref_img"].new_zeros(())
        return self.config.attr_weight * attribute_loss(self.attribute_logits(gallery_slots), batch["tgt_attrs"])

    @classmethod
    def tiny_example(cls):
        torch.manual_seed(0)
        return cls(CombinerConfig(d_model=16, embed_dim=24)), (tiny_cir_batch(),)


def raw_pixel_embeddings(images: np.ndarray) -> np.ndarray:
    """Untrained raw-pixel baseline: (N, H, W, 3) uint8 -> (N, 3HW) float32 unit vectors of the
    pixels minus the mean image of ``images``; a query is its reference image's vector (cosine
    similarity of centred pixels, the text is ignored)."""
    x = images.reshape(len(images), -1).astype(np.float32) / 255
    x -= x.mean(0, keepdims=True)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-8)
