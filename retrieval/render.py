"""Product renderer of the synthetic e-commerce CIR benchmark: attribute vocabularies, studio
renders and (hard preset) photos. The caption text lives in ``retrieval.captions``.

A *product* is a Fashion-MNIST garment (its 28x28 silhouette fixes the category and shape)
rendered as a 32x32 RGB image with controllable attributes:

========== ======================================================= ==========================
group      values                                                  how it shows
========== ======================================================= ==========================
category   the 10 Fashion-MNIST classes                           garment silhouette
colour     8 hues                                                  base colour
pattern    solid, striped, checked, dotted                        secondary-colour motif
scale      fine, bold (patterned items only; -1 for solid)        motif period 4 px vs 8 px
finish     matte, glossy, faded, dark                             shading / brightness look
fabric     cotton, linen, wool, silk                              faint grain texture only
lightness  deep, medium, light, pale (ordered)                    base colour to black / white
saturation greyed, muted, rich, vivid (ordered)                   base colour to its own grey
========== ======================================================= ==========================

``lightness`` and ``saturation`` are the *relative* groups (``RELATIVE_GROUPS``): ordered levels that
requests change by a step ("darker", "more colourful") instead of naming a value. One lightness step
moves the base colour's luma by at least 0.073 (3.6 times the std of the render's colour jitter), one
saturation step its chroma (max - min channel) by at least 0.058.

``fabric`` is nearly invisible in the image (as in real product photos), so the item
description carries information that the image lacks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CATEGORIES = [
    "t-shirt",
    "trousers",
    "pullover",
    "dress",
    "coat",
    "sandals",
    "shirt",
    "sneakers",
    "bag",
    "ankle boots",
]
COLOURS = ["red", "orange", "yellow", "green", "teal", "blue", "purple", "pink"]
PATTERNS = ["solid", "striped", "checked", "dotted"]
SCALES = ["fine", "bold"]
FINISHES = ["matte", "glossy", "faded", "dark"]
FABRICS = ["cotton", "linen", "wool", "silk"]
LIGHTNESS = ["deep", "medium", "light", "pale"]  # darkest first
SATURATION = ["greyed", "muted", "rich", "vivid"]  # dullest first

ATTRIBUTES: dict[str, list[str]] = {
    "category": CATEGORIES,
    "colour": COLOURS,
    "pattern": PATTERNS,
    "scale": SCALES,
    "finish": FINISHES,
    "fabric": FABRICS,
    "lightness": LIGHTNESS,
    "saturation": SATURATION,
}
GROUPS: list[str] = list(ATTRIBUTES)
RELATIVE_GROUPS: tuple[str, ...] = ("lightness", "saturation")  # ordered levels, asked for by a step
# base colour -> lightness level: negative scales towards black, positive mixes towards white
LIGHTNESS_SHIFT = (-0.5, -0.25, 0.0, 0.35)
SATURATION_KEEP = (0.2, 0.45, 0.7, 1.0)  # share of the base colour's chroma kept per level
NUM_VALUES: list[int] = [len(v) for v in ATTRIBUTES.values()]
IMAGE_SIZE = 32

# FashionIQ-style evaluation categories: a triplet's reference and target share one.
FIQ_CATEGORIES = {"tops": [0, 2, 4, 6], "bottoms": [1, 3], "accessories": [5, 7, 8, 9]}
CATEGORY_TO_FIQ = {c: name for name, cs in FIQ_CATEGORIES.items() for c in cs}

_RGB = (
    np.array(
        [
            [220, 30, 40],
            [245, 130, 20],
            [240, 215, 30],
            [40, 170, 60],
            [20, 160, 160],
            [40, 80, 220],
            [130, 50, 180],
            [240, 120, 180],
        ],
        np.float32,
    )
    / 255
)

@dataclass(frozen=True)
class Attributes:
    """Attribute values of one product (indices into the ``ATTRIBUTES`` vocabularies)."""

    category: int
    colour: int
    pattern: int
    scale: int  # -1 when pattern is solid
    finish: int
    fabric: int
    lightness: int = 2  # the defaults render the hue as it is
    saturation: int = 3

    def as_list(self) -> list[int]:
        return [self.category, self.colour, self.pattern, self.scale, self.finish, self.fabric, self.lightness,
                self.saturation]

    def names(self) -> dict[str, str | None]:
        return {
            g: (ATTRIBUTES[g][v] if v >= 0 else None) for g, v in zip(GROUPS, self.as_list(), strict=False)
        }

    def replace(self, **kw: int) -> Attributes:
        d = dict(zip(GROUPS, self.as_list(), strict=False))
        d.update(kw)
        if d["pattern"] == 0:
            d["scale"] = -1
        elif d["scale"] < 0:
            d["scale"] = 0
        return Attributes(**d)

    def differs(self, other: Attributes) -> list[str]:
        return [g for g, a, b in zip(GROUPS, self.as_list(), other.as_list(), strict=False) if a != b]


def tone(base: np.ndarray, lightness: int, saturation: int) -> np.ndarray:
    """Base colour (3,) in [0, 1] at a saturation level (mixed towards its own luma) and a lightness
    level (scaled towards black or mixed towards white): (3,)."""
    luma = float(base @ np.array([0.299, 0.587, 0.114], np.float32))
    c = luma + SATURATION_KEEP[saturation] * (base - luma)
    shift = LIGHTNESS_SHIFT[lightness]
    return (c * (1 + shift) if shift < 0 else c + shift * (1 - c)).astype(np.float32)


def _surface(attrs: Attributes, base: np.ndarray, shade: np.ndarray, x: np.ndarray, y: np.ndarray,
             extent: float, dot_offset: float) -> np.ndarray:
    """Garment colour (h, w, 3) before compositing: the pattern motif in off-white over ``base``
    (3,), the finish (with the garment luminance ``shade`` (h, w)) and the fabric grain, all drawn
    in the coordinates ``x``, ``y`` (h, w) (studio: image pixels; photo: garment coordinates, so
    they turn and scale with it). ``extent``: the span of the glossy highlight's diagonal;
    ``dot_offset``: where a dot sits in its motif cell (pixel corners vs centres)."""
    if attrs.pattern == 0:
        motif = np.zeros(x.shape, np.float32)
    else:
        period = 4 if attrs.scale == 0 else 8
        half = period / 2
        if attrs.pattern == 1:  # stripes
            motif = ((y % period) < half).astype(np.float32)
        elif attrs.pattern == 2:  # checks
            motif = (((y // half) + (x // half)) % 2).astype(np.float32)
        else:  # dots
            dy, dx = (y % period) - half + dot_offset, (x % period) - half + dot_offset
            motif = ((dy**2 + dx**2) <= (period / 3.2) ** 2).astype(np.float32)
    second = np.full(3, 0.95, np.float32)  # motifs in off-white
    colour = base[None, None] * (1 - motif[..., None]) + second * motif[..., None]
    if attrs.finish == 1:  # glossy: diagonal specular highlight
        hl = np.exp(-(((x - y) / extent) ** 2) / 0.02)[..., None]
        colour = colour * (0.85 + 0.15 * shade[..., None]) + 0.35 * hl
    elif attrs.finish == 2:  # faded: desaturated, lighter
        colour = 0.45 * colour + 0.35 * colour.mean(-1, keepdims=True) + 0.25
    elif attrs.finish == 3:  # dark
        colour = colour * 0.45
    else:  # matte
        colour = colour * (0.7 + 0.3 * shade[..., None])
    # fabric: faint deterministic grain (weak visual cue; the description carries it)
    grain_freq = [0.0, 1.7, 2.9, 0.9][attrs.fabric]
    if grain_freq > 0:
        colour = colour + 0.025 * np.sin(x * grain_freq + y * grain_freq * 0.6)[..., None]
    return colour


def render(silhouette: np.ndarray, attrs: Attributes, rng: np.random.Generator | None = None) -> np.ndarray:
    """Render a product image.

    silhouette: (28, 28) uint8 Fashion-MNIST garment. Returns (32, 32, 3) uint8 RGB on a light
    grey background. ``rng`` adds small render noise (shift, hue jitter, pixel noise); pass None
    for a noise-free render.
    """
    if silhouette.shape != (28, 28):
        raise ValueError(f"silhouette must be 28x28, got {silhouette.shape}")
    size = IMAGE_SIZE
    mask = np.zeros((size, size), np.float32)
    dy, dx = (0, 0) if rng is None else tuple(rng.integers(-1, 2, size=2))
    mask[2 + dy : 30 + dy, 2 + dx : 30 + dx] = silhouette.astype(np.float32) / 255
    shade = np.clip(mask * 1.25, 0, 1)  # garment luminance detail (folds, seams)
    alpha = (mask > 0.08).astype(np.float32)

    base = tone(_RGB[attrs.colour], attrs.lightness, attrs.saturation)
    if rng is not None:
        base = np.clip(base + rng.normal(0, 0.03, 3), 0, 1)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    colour = _surface(attrs, base, shade, xx, yy, extent=size, dot_offset=0.5)

    img = np.full((size, size, 3), 0.92, np.float32)
    img = img * (1 - alpha[..., None]) + np.clip(colour, 0, 1) * alpha[..., None]
    if rng is not None:
        img = img + rng.normal(0, 0.02, img.shape)
    return (np.clip(img, 0, 1) * 255).round().astype(np.uint8)


# ----------------------------------------------------------------------------- hard preset: photos



@dataclass(frozen=True)
class PhotoJitter:
    """Ranges of the natural variation of :func:`render_photo` (all zero: a centred studio shot).

    scale: garment height as a fraction of the image, drawn from ``scale``; rotation_deg: pose,
    uniform in [-r, r]; shift: centre offset as a fraction of the image (crops the garment at the
    border when large); flip_prob: mirror image; cast: std of the per-channel white-balance gain;
    brightness: exposure gain drawn from [1 - b, 1 + b]; backgrounds: share of non-studio
    backdrops (gradient, texture, coloured scene) with a soft shadow.
    """

    scale: tuple[float, float] = (0.62, 0.95)
    rotation_deg: float = 15.0
    shift: float = 0.1
    flip_prob: float = 0.5
    cast: float = 0.06
    brightness: float = 0.12
    backgrounds: float = 0.7

    @classmethod
    def none(cls) -> PhotoJitter:
        return cls((0.875, 0.875), 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def _background(size: int, rng: np.random.Generator, share: float) -> np.ndarray:
    """(size, size, 3) float backdrop: studio grey, a two-tone gradient, a blotchy texture, or a
    muted coloured scene (which can be close to the garment's colour)."""
    kind = "studio" if rng.random() >= share else str(rng.choice(["gradient", "texture", "scene"]))
    if kind == "studio":
        return np.full((size, size, 3), 0.92, np.float32) + rng.normal(0, 0.02, 3).astype(np.float32)
    if kind == "gradient":
        top, bottom = rng.uniform(0.55, 0.98, 3), rng.uniform(0.45, 0.95, 3)
        t = np.linspace(0, 1, size, dtype=np.float32)[:, None, None]
        return (top * (1 - t) + bottom * t).astype(np.float32) * np.ones((1, size, 1), np.float32)
    if kind == "texture":
        coarse = rng.uniform(-1, 1, (4, 4)).astype(np.float32)
        from PIL import Image

        blot = np.asarray(Image.fromarray(coarse).resize((size, size), Image.BICUBIC), np.float32)
        tone = rng.uniform(0.6, 0.9, 3).astype(np.float32)
        return tone + 0.08 * blot[..., None]
    hue = _RGB[int(rng.integers(len(_RGB)))]
    value = rng.uniform(0.45, 0.8)
    return (0.55 * hue + 0.45 * value).astype(np.float32) * np.ones((size, size, 1), np.float32)


def render_photo(
    silhouette: np.ndarray,
    attrs: Attributes,
    rng: np.random.Generator,
    size: int = 64,
    jitter: PhotoJitter | None = None,
) -> np.ndarray:
    """Render a product *photo*: the garment at a random pose, scale and crop on a varied backdrop
    under a colour cast, like scraped shop images.

    silhouette: (28, 28) uint8 Fashion-MNIST garment. Returns (size, size, 3) uint8 RGB. The
    pattern, highlight and fabric grain are drawn in garment coordinates ``(u, v)`` (the 28x28
    silhouette frame), so they rotate and scale with the garment; the motif periods are those of
    :func:`render` (4 / 8 garment pixels).
    """
    if silhouette.shape != (28, 28):
        raise ValueError(f"silhouette must be 28x28, got {silhouette.shape}")
    from PIL import Image

    j = jitter or PhotoJitter()
    s = rng.uniform(*j.scale) * size / 28  # image pixels per garment pixel
    angle = np.deg2rad(rng.uniform(-j.rotation_deg, j.rotation_deg))
    flip = -1.0 if rng.random() < j.flip_prob else 1.0
    cx, cy = size / 2 + rng.uniform(-j.shift, j.shift, 2) * size
    cos, sin = np.cos(angle), np.sin(angle)
    # inverse map, image pixel (x, y) -> garment coordinates (u, v): u = a x + b y + c, v = d x + e y + f
    a, b = flip * cos / s, flip * sin / s
    d, e = -sin / s, cos / s
    c, f = 14 - a * cx - b * cy, 14 - d * cx - e * cy
    sil = Image.fromarray(silhouette)
    mask = np.asarray(sil.transform((size, size), Image.AFFINE, (a, b, c, d, e, f), Image.BILINEAR), np.float32)
    mask = mask / 255
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) + 0.5
    u, v = a * xx + b * yy + c, d * xx + e * yy + f

    shade = np.clip(mask * 1.25, 0, 1)
    alpha = np.clip((mask - 0.05) / 0.1, 0, 1)
    base = np.clip(tone(_RGB[attrs.colour], attrs.lightness, attrs.saturation) + rng.normal(0, 0.03, 3), 0, 1)
    base = base.astype(np.float32)
    colour = _surface(attrs, base, shade, u, v, extent=28, dot_offset=0.0)

    img = _background(size, rng, j.backgrounds)
    if j.backgrounds > 0:  # soft drop shadow below-right of the garment
        off = max(1, size // 32)
        shadow = np.asarray(Image.fromarray((alpha * 255).astype(np.uint8)).resize(
            (size // 4, size // 4), Image.BILINEAR).resize((size, size), Image.BILINEAR), np.float32) / 255
        shadow = np.roll(shadow, (off, off), (0, 1))
        img = img * (1 - 0.3 * shadow[..., None])
    img = img * (1 - alpha[..., None]) + np.clip(colour, 0, 1) * alpha[..., None]
    gain = np.clip(1 + rng.normal(0, j.cast, 3), 0.8, 1.2) * rng.uniform(1 - j.brightness, 1 + j.brightness)
    img = img * gain.astype(np.float32) + rng.normal(0, 0.02, img.shape)
    return (np.clip(img, 0, 1) * 255).round().astype(np.uint8)
