"""MoA³CIR: five-tower composed image retrieval with Mixture of Attribute-Aware Attention.

Towers (``retrieval.towers``, shared with the baselines; asymmetric: query and gallery sides have
their own weights)

* reference-image tower, ``MoA3Config.image_encoder``:
  ``"scratch"``: ``ImageTower``, a small CNN trained from scratch, (b, 3, 32, 32) -> (b, 64, d)
  tokens (8x8 grid); ``"efficientnet-lite0"``: ``PretrainedImageTower`` on the token grid of the
  ImageNet EfficientNet-Lite0 (``common.image_encoder``; images resized to
  ``encoder_resolution``, MBConv block ``token_block``: (b, g*g, c) -> (b, g*g, d)), frozen by
  default (frozen grids are computed once per image and cached by image hash) or with its last
  ``trainable_blocks`` blocks fine-tuned. One encoder is shared by both sides; the projections
  are not.
* modification-text tower ``TextTower``: frozen MiniLM clause embeddings (b, lt, 384) -> (b, lt, d)
* reference-description tower ``TextTower``: sentence embeddings (b, ld, 384) -> (b, ld, d)
* target-image tower, target-description tower: same architectures, gallery side.

MoA³ (``GroupedAttentionPool``): H = G*h heads split into G head groups, one per attribute
group (category, colour, pattern, scale, finish, fabric, lightness, saturation). Group g pools
the tokens X with its own queries::

    slot_g = W_o^g [ softmax(q_{g,j} K_j^T / sqrt(d_h)) V_j ]_{j in heads of g}     (b, G, d_s)

Reference slots r_g come from the reference image + description tokens, text slots t_g from the
modification-text clauses. The router (``ClauseRouter``) scores every projected clause token
u_j of the modification text per group and keeps the best clause::

    z_g = max_j  w_g . GELU(W u_j + b) + b_g           (b, G) logits; "make it red" -> colour

(a text names a group when *one* of its clauses does; a mean over clauses would wash a clause
out). ``moe.route_topk`` (sigmoid, top-k over groups, not renormalised) turns z into per-group
weights a_g (zero outside the top k); the composed slot is ``c_g = (1 - a_g) r_g + a_g t_g``
(keep unmentioned attributes from the reference, take mentioned ones from the text).

Relative groups (``render.RELATIVE_GROUPS``: lightness, saturation; ordered levels) compose by
value instead: a readout gives the reference's level, the text slot a signed step, and both sides
embed the level on a circle bank, so the match depends only on the difference of levels::

    v = l_g(r_g) + a_g * w_g . t_g          (query)      v' = l'_g(s_g)          (gallery)
    e(v) = [cos(w_k v), sin(w_k v)]_k       cos(e(v), e(v')) = mean_k cos(w_k (v - v'))

(w_k fixed, ``LEVEL_FREQUENCIES``). A garment's absolute lightness is ambiguous in the image (hue,
finish and shading shift it), a difference between two looks of one garment is not: the readouts
are trained on level *differences* (target minus reference), the step on the asked one, so
"darker" moves the reference's lightness down a step whatever it was. Query / gallery embeddings
are the concatenation of unit-norm slots divided by sqrt(G), so ``q . g = mean_g cos(c_g, s_g)``.
Attribute heads on every slot supervise the group specialisation; the router is supervised
with the attribute groups the text mentions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from common.pretrained import register_model, register_to_config
from moe import Routing, route_topk

from .render import GROUPS, NUM_VALUES, RELATIVE_GROUPS
from .towers import DEFAULT_IMAGE_ENCODER, CIRTowers, attribute_loss, check_image_encoder, tiny_cir_batch

LEVEL_FREQUENCIES = (0.3, 2.0)  # range of w_k: one level apart -> cosine 0.36, two -> -0.39


def level_embedding(v: torch.Tensor, d: int) -> torch.Tensor:
    """Levels (b,) -> (b, d) circle-bank features ``[cos(w_k v), sin(w_k v)]`` (zero-padded to odd d),
    whose cosine similarity is a function of the level difference only (module docstring)."""
    w = torch.linspace(*LEVEL_FREQUENCIES, d // 2, device=v.device, dtype=v.dtype)
    x = torch.cat([torch.cos(v[:, None] * w), torch.sin(v[:, None] * w)], -1)
    return F.pad(x, (0, d - x.shape[-1]))


@dataclass
class MoA3Config:
    """Configuration of :class:`MoA3CIR` (plain dataclass, saved with checkpoints)."""

    d_model: int = 64
    d_slot: int = 32
    heads_per_group: int = 2
    num_groups: int = len(GROUPS)
    num_values: list[int] = field(default_factory=lambda: list(NUM_VALUES))
    route_k: int = 3
    attention: str = "moa3"  # "moa3" (grouped, routed) | "plain" (one multi-head pool, no groups)
    routing: str = "router"  # "router" | "uniform" (MoA³ without routing: a_g = 1/2)
    use_descriptions: bool = True
    attr_weight: float = 0.5
    router_weight: float = 2.0
    # at search time (eval mode) query slot g weighs 1 + request_emphasis * a_g in the match, so the
    # groups a request names outweigh what the reference keeps; training always matches all groups equally
    request_emphasis: float = 0.0
    init_temperature: float = 0.07
    image_encoder: str = DEFAULT_IMAGE_ENCODER  # IMAGE_ENCODERS
    encoder_resolution: int = 64  # pretrained encoder: input side after resizing
    token_block: int = 7  # pretrained encoder: MBConv block of the token grid (7: stride 16, 80 channels)
    trainable_blocks: int = 0  # pretrained encoder: last MBConv blocks fine-tuned (0 = frozen)

    def __post_init__(self) -> None:
        check_image_encoder(self)
        if self.attention not in ("moa3", "plain"):
            raise ValueError(f"attention must be 'moa3' or 'plain', got {self.attention!r}")
        if self.routing not in ("router", "uniform"):
            raise ValueError(f"routing must be 'router' or 'uniform', got {self.routing!r}")
        if not 1 <= self.route_k <= self.num_groups:
            raise ValueError(f"route_k must be in [1, {self.num_groups}], got {self.route_k}")
        if len(self.num_values) != self.num_groups:
            raise ValueError("num_values needs one entry per attribute group")

    @property
    def embed_dim(self) -> int:
        return self.num_groups * self.d_slot


class GroupedAttentionPool(nn.Module):
    """Grouped multi-head attention pooling: tokens (b, l, d) + mask (b, l) -> slots (b, G, d_s).

    G groups x h heads of size d_h = d_s / h; each head has a learned query. With G = 1 this is
    ordinary multi-head attention pooling (the "plain attention" ablation).
    """

    def __init__(self, d: int, groups: int, heads_per_group: int, d_slot: int):
        super().__init__()
        if d_slot % heads_per_group:
            raise ValueError("d_slot must be divisible by heads_per_group")
        self.g, self.h, self.dh = groups, heads_per_group, d_slot // heads_per_group
        n_heads = groups * heads_per_group
        self.query = nn.Parameter(torch.randn(n_heads, self.dh) / math.sqrt(self.dh))
        self.kv = nn.Linear(d, 2 * n_heads * self.dh)
        self.out = nn.Parameter(torch.randn(groups, heads_per_group * self.dh, d_slot) / math.sqrt(d_slot))
        self.norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns slots (b, G, d_s) and attention weights (b, G*h, l)."""
        k, v = rearrange(self.kv(self.norm(x)), "b l (two n e) -> two b n l e", two=2, e=self.dh)
        logits = torch.einsum("ne,bnle->bnl", self.query, k) / math.sqrt(self.dh)
        logits = logits.masked_fill(~mask[:, None, :], float("-inf"))
        attn = logits.softmax(-1)
        heads = torch.einsum("bnl,bnle->bne", attn, v)
        heads = rearrange(heads, "b (g h) e -> b g (h e)", g=self.g)
        return torch.einsum("bgi,gio->bgo", heads, self.out), attn


class ClauseRouter(nn.Module):
    """Attribute-group logits from clause tokens: (b, lt, d) + mask (b, lt) -> (b, G).

    ``z_g = max_j w_g . GELU(W u_j + b) + b_g`` over the valid clauses j (see module docstring).
    """

    def __init__(self, d: int, groups: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, groups))

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        per_clause = self.net(tokens).masked_fill(~mask[..., None], float("-inf"))  # (b, lt, G)
        return per_clause.max(1).values


def slots_to_embedding(slots: torch.Tensor) -> torch.Tensor:
    """(b, G, d_s) -> (b, G*d_s) with unit-norm slots scaled so the embedding has norm 1."""
    g = slots.shape[1]
    return rearrange(F.normalize(slots, dim=-1) / math.sqrt(g), "b g d -> b (g d)")


def emphasised_embedding(slots: torch.Tensor, group_scale: torch.Tensor) -> torch.Tensor:
    """(b, G, d_s) slots and (b, G) positive group weights -> (b, G*d_s) unit-norm embedding whose
    dot product with a gallery embedding (``slots_to_embedding``) is the weighted mean of the
    per-group cosines: the groups a request names count more in the match."""
    w = group_scale / group_scale.norm(dim=-1, keepdim=True)
    return rearrange(F.normalize(slots, dim=-1) * w[..., None], "b g d -> b (g d)")


class AttributeHeads(nn.Module):
    """One linear classifier per group on its slot: (b, G, d_s) -> list of (b, n_values_g)."""

    def __init__(self, d_slot: int, num_values: list[int], shared_input: bool = False):
        super().__init__()
        self.shared_input = shared_input
        self.heads = nn.ModuleList(nn.Linear(d_slot, n) for n in num_values)

    def forward(self, slots: torch.Tensor) -> list[torch.Tensor]:
        if self.shared_input:  # plain attention: every head reads the single pooled vector
            return [h(slots[:, 0]) for h in self.heads]
        return [h(slots[:, i]) for i, h in enumerate(self.heads)]


@register_model("moa3cir")
class MoA3CIR(CIRTowers):
    """Composed retrieval model. See the module docstring for the maths.

    ``encode_query(batch)`` -> (q (b, E), info) with ``info["routing"]`` a ``moe.Routing``
    (weights (b, k), indices (b, k)) and ``info["group_weights"]`` (b, G) dense weights;
    ``encode_gallery(batch)`` -> (b, E). E = ``config.embed_dim``. Batches are dicts:
    ``ref_img`` (b,3,32,32), ``ref_desc`` (b,ld,384), ``ref_desc_mask`` (b,ld) bool,
    ``text`` (b,lt,384), ``text_mask`` (b,lt) bool; gallery: ``img``, ``desc``, ``desc_mask``;
    with a frozen pretrained encoder optionally ``ref_img_tokens`` / ``img_tokens`` (b, g*g, c).
    Phase-1 features are slots (b, G, d_s) (``CIRTowers.alignment_terms``). ``relative_groups``:
    the indices of the groups composed by value (module docstring); ``info["relative_levels"]``
    (b, R) the reference's levels l_g(r_g), ``info["relative_steps"]`` (b, R) the routed steps.
    """

    describes_attributes = True
    relative_groups: tuple[int, ...] = tuple(GROUPS.index(g) for g in RELATIVE_GROUPS)

    @register_to_config
    def __init__(self, config: MoA3Config | None = None):
        super().__init__()
        self.config = c = config or MoA3Config()
        groups = c.num_groups if c.attention == "moa3" else 1
        d_slot = c.d_slot if c.attention == "moa3" else c.embed_dim
        heads = c.heads_per_group if c.attention == "moa3" else c.heads_per_group * c.num_groups
        self.build_towers(c)
        self.ref_pool = GroupedAttentionPool(c.d_model, groups, heads, d_slot)
        self.gal_pool = GroupedAttentionPool(c.d_model, groups, heads, d_slot)
        if c.attention == "moa3":
            self.text_pool = GroupedAttentionPool(c.d_model, groups, heads, d_slot)
            self.router = ClauseRouter(c.d_model, c.num_groups)
        self.relative = self.relative_groups if c.attention == "moa3" else ()
        if self.relative:  # per relative group: level readouts (query, gallery) and the text's signed step
            self.level = nn.ModuleList(nn.Linear(d_slot, 1) for _ in range(2 * len(self.relative)))
            self.step = nn.ModuleList(nn.Linear(d_slot, 1) for _ in self.relative)
        self.attr_heads = AttributeHeads(d_slot, c.num_values, shared_input=c.attention == "plain")
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / c.init_temperature)))

    # -- helpers
    def _tokens(self, image_tower, desc_tower, img, desc, desc_mask):
        img_tok = image_tower(img)  # img: images or token grids (ImageInput)
        img_mask = torch.ones(img_tok.shape[:2], dtype=torch.bool, device=img_tok.device)
        if not self.config.use_descriptions or desc is None:
            return img_tok, img_mask
        return torch.cat([img_tok, desc_tower(desc)], 1), torch.cat([img_mask, desc_mask], 1)

    def route(self, text_tok: torch.Tensor, text_mask: torch.Tensor) -> Routing:
        """Routing over attribute groups from projected clause tokens (b, lt, d): weights (b, k)."""
        logits = self.router(text_tok, text_mask)
        return route_topk(logits, self.config.route_k, activation="sigmoid", normalize=False)

    # -- public API
    def encode_query(self, batch: dict) -> tuple[torch.Tensor, dict]:
        c = self.config
        tok, mask = self._tokens(
            self.q_image, self.q_desc, self.image_input(batch, "ref_img"), batch.get("ref_desc"),
            batch.get("ref_desc_mask"),
        )
        text_tok = self.q_text(batch["text"])
        info: dict = {}
        if c.attention == "plain":
            slots, _ = self.ref_pool(torch.cat([tok, text_tok], 1), torch.cat([mask, batch["text_mask"]], 1))
            info["composed_slots"] = slots
            return slots_to_embedding(slots), info
        ref_slots, _ = self.ref_pool(tok, mask)
        text_slots, _ = self.text_pool(text_tok, batch["text_mask"])
        if c.routing == "router":
            routing = self.route(text_tok, batch["text_mask"])
            weights = routing.to_dense()
            info["routing"] = routing
        else:
            weights = torch.full(ref_slots.shape[:2], 0.5, device=ref_slots.device)
        composed = (1 - weights[..., None]) * ref_slots + weights[..., None] * text_slots
        if self.relative:
            composed, info["relative_levels"], info["relative_steps"] = self.compose_relative(
                composed, ref_slots, text_slots, weights)
        info.update(
            group_weights=weights, ref_slots=ref_slots, text_slots=text_slots, composed_slots=composed
        )
        if self.training or not c.request_emphasis:
            return slots_to_embedding(composed), info
        return emphasised_embedding(composed, 1 + c.request_emphasis * weights), info

    def compose_relative(self, composed: torch.Tensor, ref_slots: torch.Tensor, text_slots: torch.Tensor,
                         weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Composed slots (b, G, d_s) with each relative group's slot replaced by ``e(v)`` of the
        reference's level plus the routed step; returns them, the levels (b, R) and the steps (b, R)."""
        out, levels, steps = list(composed.unbind(1)), [], []
        for n, g in enumerate(self.relative):
            levels.append(self.level[n](ref_slots[:, g])[:, 0])
            steps.append(weights[:, g] * self.step[n](text_slots[:, g])[:, 0])
            out[g] = level_embedding(levels[-1] + steps[-1], out[g].shape[-1])
        return torch.stack(out, 1), torch.stack(levels, 1), torch.stack(steps, 1)

    def gallery_slots(self, batch: dict) -> torch.Tensor:
        """Gallery slots (b, G, d_s) as pooled (``gallery_embedding`` turns them into the match)."""
        tok, mask = self._tokens(
            self.g_image, self.g_desc, self.image_input(batch, "img"), batch.get("desc"), batch.get("desc_mask")
        )
        return self.gal_pool(tok, mask)[0]

    def gallery_levels(self, slots: torch.Tensor) -> torch.Tensor:
        """Gallery slots (b, G, d_s) -> the relative groups' levels l'_g(s_g) (b, R)."""
        k = len(self.relative)
        return torch.stack([self.level[k + n](slots[:, g])[:, 0] for n, g in enumerate(self.relative)], 1)

    def gallery_embedding(self, slots: torch.Tensor) -> torch.Tensor:
        """Gallery slots (b, G, d_s) -> (b, E), the relative groups embedded by level."""
        if self.relative:
            out, levels = list(slots.unbind(1)), self.gallery_levels(slots)
            for n, g in enumerate(self.relative):
                out[g] = level_embedding(levels[:, n], out[g].shape[-1])
            slots = torch.stack(out, 1)
        return slots_to_embedding(slots)

    def encode_gallery(self, batch: dict) -> torch.Tensor:
        return self.gallery_embedding(self.gallery_slots(batch))

    # -- phase-1 hooks (CIRTowers.alignment_terms)
    def _pool(self, side: str) -> GroupedAttentionPool:
        return self.ref_pool if side == "query" else self.gal_pool

    def image_feature(self, side: str, x: torch.Tensor) -> torch.Tensor:
        """Image slots (b, G, d_s) of ``side`` from its tower input ``x`` (images or token grids)."""
        img_tok = self.side_towers(side)[0](x)
        return self._pool(side)(img_tok, torch.ones(img_tok.shape[:2], dtype=torch.bool, device=img_tok.device))[0]

    def description_feature(self, side: str, desc: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Description slots (b, G, d_s) of ``side`` from sentence embeddings (b, ld, 384)."""
        return self._pool(side)(self.side_towers(side)[1](desc), mask)[0]

    def feature_embedding(self, feature: torch.Tensor) -> torch.Tensor:
        return slots_to_embedding(feature)

    def attribute_logits(self, feature: torch.Tensor) -> list[torch.Tensor]:
        return self.attr_heads(feature)

    # -- phase-2 loss used by train.py
    def auxiliary_loss(self, info: dict, batch: dict, gallery_slots: torch.Tensor | None) -> torch.Tensor:
        """Attribute supervision of the slots + router supervision (phase 2)."""
        c = self.config
        loss = batch["ref_img"].new_zeros(())
        if batch.get("tgt_attrs") is not None:
            composed_attrs = batch["tgt_attrs"].clone()
            composed_attrs[:, list(self.relative)] = -1  # composed relative slots are level embeddings
            loss = loss + c.attr_weight * attribute_loss(self.attr_heads(info["composed_slots"]), composed_attrs)
            if gallery_slots is not None:
                loss = loss + c.attr_weight * attribute_loss(
                    self.attr_heads(gallery_slots), batch["tgt_attrs"]
                )
        if "ref_slots" in info and batch.get("ref_attrs") is not None:
            loss = loss + c.attr_weight * attribute_loss(
                self.attr_heads(info["ref_slots"]), batch["ref_attrs"]
            )
        if "relative_levels" in info and batch.get("tgt_attrs") is not None:
            # level differences in level units: the readouts (target minus reference) and the step
            rel = list(self.relative)
            asked = (batch["tgt_attrs"][:, rel] - batch["ref_attrs"][:, rel]).float()
            loss = loss + F.mse_loss(info["relative_steps"], asked)
            if gallery_slots is not None:
                loss = loss + F.mse_loss(self.gallery_levels(gallery_slots) - info["relative_levels"], asked)
        if "routing" in info and batch.get("changed") is not None:
            logits = info["routing"].logits
            loss = loss + c.router_weight * F.binary_cross_entropy_with_logits(
                logits, batch["changed"].float()
            )
        return loss

    @classmethod
    def tiny_example(cls):
        torch.manual_seed(0)
        return cls(MoA3Config(d_model=16, d_slot=8, heads_per_group=1, route_k=2)), (tiny_cir_batch(),)
