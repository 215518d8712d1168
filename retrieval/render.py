"""Product renderer and text generators for the synthetic e-commerce CIR benchmark.

A *product* is a Fashion-MNIST garment (its 28x28 silhouette fixes the category and shape)
rendered as a 32x32 RGB image with controllable attributes:

======== ======================================================= ==========================
group    values                                                  how it shows
======== ======================================================= ==========================
category the 10 Fashion-MNIST classes                           garment silhouette
colour   8 hues                                                  base colour
pattern  solid, striped, checked, dotted                        secondary-colour motif
scale    fine, bold (patterned items only; -1 for solid)        motif period 4 px vs 8 px
finish   matte, glossy, faded, dark                             shading / brightness look
fabric   cotton, linen, wool, silk                              faint grain texture only
======== ======================================================= ==========================

``fabric`` is nearly invisible in the image (as in real product photos), so the item
description carries information that the image lacks. Item descriptions (title + attribute
text) use varied wording, random order, omissions and typos; modification texts are built from
clauses ("make it red", "with bold stripes") joined by ", " / " and ".
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

ATTRIBUTES: dict[str, list[str]] = {
    "category": CATEGORIES,
    "colour": COLOURS,
    "pattern": PATTERNS,
    "scale": SCALES,
    "finish": FINISHES,
    "fabric": FABRICS,
}
GROUPS: list[str] = list(ATTRIBUTES)
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

_SYN = {
    "colour": {
        "red": ["red", "scarlet", "cherry red"],
        "orange": ["orange", "tangerine"],
        "yellow": ["yellow", "mustard", "lemon"],
        "green": ["green", "grass green"],
        "teal": ["teal", "turquoise"],
        "blue": ["blue", "royal blue", "cobalt"],
        "purple": ["purple", "violet"],
        "pink": ["pink", "rose"],
    },
    "pattern": {
        "solid": ["plain", "solid-colour", "solid"],
        "striped": ["striped", "stripy"],
        "checked": ["checked", "plaid", "check"],
        "dotted": ["polka-dot", "dotted"],
    },
    "scale": {"fine": ["fine", "small", "thin"], "bold": ["bold", "large", "wide"]},
    "finish": {
        "matte": ["matte", "flat"],
        "glossy": ["glossy", "shiny", "satin"],
        "faded": ["faded", "washed-out", "vintage wash"],
        "dark": ["dark", "deep-toned"],
    },
    "fabric": {
        "cotton": ["cotton", "100% cotton"],
        "linen": ["linen", "linen-blend"],
        "wool": ["wool", "merino wool"],
        "silk": ["silk", "pure silk"],
    },
    "category": {
        "t-shirt": ["t-shirt", "tee", "top"],
        "trousers": ["trousers", "pants"],
        "pullover": ["pullover", "sweater", "jumper"],
        "dress": ["dress", "frock"],
        "coat": ["coat", "jacket"],
        "sandals": ["sandals", "sandal"],
        "shirt": ["shirt", "button-down shirt"],
        "sneakers": ["sneakers", "trainers"],
        "bag": ["bag", "handbag", "tote"],
        "ankle boots": ["ankle boots", "booties"],
    },
}
_MOTIF = {"striped": "stripes", "checked": "checks", "dotted": "dots"}
_FILLER = [
    "Great for everyday wear.",
    "Free returns.",
    "Machine washable.",
    "Regular fit.",
    "New season.",
    "Bestseller!",
    "Limited stock.",
    "Pairs well with anything.",
]


@dataclass(frozen=True)
class Attributes:
    """Attribute values of one product (indices into the ``ATTRIBUTES`` vocabularies)."""

    category: int
    colour: int
    pattern: int
    scale: int  # -1 when pattern is solid
    finish: int
    fabric: int

    def as_list(self) -> list[int]:
        return [self.category, self.colour, self.pattern, self.scale, self.finish, self.fabric]

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

    base = _RGB[attrs.colour].copy()
    if rng is not None:
        base = np.clip(base + rng.normal(0, 0.03, 3), 0, 1)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    if attrs.pattern == 0:
        motif = np.zeros((size, size), np.float32)
    else:
        period = 4 if attrs.scale == 0 else 8
        half = period / 2
        if attrs.pattern == 1:  # stripes
            motif = ((yy % period) < half).astype(np.float32)
        elif attrs.pattern == 2:  # checks
            motif = (((yy // half) + (xx // half)) % 2).astype(np.float32)
        else:  # dots
            cy, cx = (yy % period) - half + 0.5, (xx % period) - half + 0.5
            motif = ((cy**2 + cx**2) <= (period / 3.2) ** 2).astype(np.float32)
    second = np.full(3, 0.95, np.float32)  # motifs in off-white
    colour = base[None, None] * (1 - motif[..., None]) + second * motif[..., None]

    if attrs.finish == 1:  # glossy: diagonal specular highlight
        hl = np.exp(-(((xx - yy) / size) ** 2) / 0.02)[..., None]
        colour = colour * (0.85 + 0.15 * shade[..., None]) + 0.35 * hl
    elif attrs.finish == 2:  # faded: desaturated, lighter
        grey = colour.mean(-1, keepdims=True)
        colour = 0.45 * colour + 0.35 * grey + 0.25
    elif attrs.finish == 3:  # dark
        colour = colour * 0.45
    else:  # matte
        colour = colour * (0.7 + 0.3 * shade[..., None])

    # fabric: faint deterministic grain (weak visual cue; the description carries it)
    grain_freq = [0.0, 1.7, 2.9, 0.9][attrs.fabric]
    if grain_freq > 0:
        grain = np.sin(xx * grain_freq + yy * grain_freq * 0.6)[..., None]
        colour = colour + 0.025 * grain

    img = np.full((size, size, 3), 0.92, np.float32)
    img = img * (1 - alpha[..., None]) + np.clip(colour, 0, 1) * alpha[..., None]
    if rng is not None:
        img = img + rng.normal(0, 0.02, img.shape)
    return (np.clip(img, 0, 1) * 255).round().astype(np.uint8)


def _typo(word: str, rng: np.random.Generator) -> str:
    if len(word) < 4:
        return word
    i = int(rng.integers(1, len(word) - 2))
    return word[:i] + word[i + 1] + word[i] + word[i + 2 :]


def _syn(group: str, value: str, rng: np.random.Generator) -> str:
    options = _SYN[group][value]
    return options[int(rng.integers(len(options)))]


def describe(attrs: Attributes, rng: np.random.Generator, noise: float = 0.1) -> str:
    """Item description: a title plus attribute sentences, varied wording and some noise.

    With probability ``noise`` each attribute sentence is dropped or gets a typo, and filler
    text is added; the title always names colour and category.
    """
    n = attrs.names()
    cat = _syn("category", n["category"], rng)
    col = _syn("colour", n["colour"], rng)
    pat = "" if n["pattern"] == "solid" and rng.random() < 0.5 else _syn("pattern", n["pattern"], rng)
    title = " ".join(w for w in [col.capitalize(), pat, cat] if w) + "."
    sentences = []
    if n["pattern"] != "solid":
        sentences.append(
            rng.choice(
                [
                    f"Features {_syn('scale', n['scale'], rng)} {_MOTIF[n['pattern']]}.",
                    f"{_syn('scale', n['scale'], rng).capitalize()} {n['pattern']} print.",
                ]
            )
        )
    sentences.append(
        rng.choice(
            [
                f"{_syn('finish', n['finish'], rng).capitalize()} finish.",
                f"Has a {_syn('finish', n['finish'], rng)} look.",
            ]
        )
    )
    sentences.append(
        rng.choice(
            [
                f"Made of {_syn('fabric', n['fabric'], rng)}.",
                f"Material: {_syn('fabric', n['fabric'], rng)}.",
                f"{_syn('fabric', n['fabric'], rng).capitalize()} fabric.",
            ]
        )
    )
    out = []
    for s in sentences:
        r = rng.random()
        if r < noise / 2:
            continue
        if r < noise:
            words = s.split(" ")
            j = int(rng.integers(len(words)))
            words[j] = _typo(words[j], rng)
            s = " ".join(words)
        out.append(s)
    rng.shuffle(out)
    if rng.random() < noise * 3:
        out.append(str(rng.choice(_FILLER)))
    return " ".join([title] + out)


def modification_clause(group: str, ref: Attributes, tgt: Attributes, rng: np.random.Generator) -> str:
    """One clause saying how attribute ``group`` changes from ``ref`` to ``tgt``."""
    new = tgt.names()[group]
    old = ref.names()[group]
    if group == "colour":
        v = _syn("colour", new, rng)
        return str(
            rng.choice([f"make it {v}", f"in {v}", f"change the colour to {v}", f"{v} instead of {old}"])
        )
    if group == "category":
        v = _syn("category", new, rng)
        return str(rng.choice([f"as {v}", f"make it {v}", f"I want {v} instead"]))
    if group == "pattern":
        if new == "solid":
            return str(rng.choice(["plain, no pattern", "make it solid-colour", "remove the print"]))
        return str(
            rng.choice(
                [f"with {_MOTIF[new]}", f"make it {_syn('pattern', new, rng)}", f"add a {new} pattern"]
            )
        )
    if group == "scale":
        v = _syn("scale", new, rng)
        motif = _MOTIF[tgt.names()["pattern"]]
        return str(
            rng.choice(
                [
                    f"with {v} {motif}",
                    f"make the {motif} {v}er" if v in ("bold", "small") else f"{v} {motif}",
                    f"{'bigger' if new == 'bold' else 'smaller'} {motif}",
                ]
            )
        )
    if group == "finish":
        v = _syn("finish", new, rng)
        return str(rng.choice([f"{v} finish", f"make it look {v}", f"with a {v} look"]))
    if group == "fabric":
        v = _syn("fabric", new, rng)
        return str(rng.choice([f"in {v}", f"made of {v}", f"switch the fabric to {v}"]))
    raise ValueError(f"unknown attribute group {group!r}")


def modification_text(ref: Attributes, tgt: Attributes, groups: list[str], rng: np.random.Generator) -> str:
    """Modification text naming the changes of ``groups`` (other differences go unmentioned)."""
    if not groups:
        raise ValueError("a modification needs at least one attribute group")
    clauses = [modification_clause(g, ref, tgt, rng) for g in groups]
    if len(clauses) == 1:
        return clauses[0]
    return ", ".join(clauses[:-1]) + " and " + clauses[-1]


def split_clauses(text: str) -> list[str]:
    """Split a modification text into clauses (the model's text tokens). Never empty."""
    parts = [p.strip() for chunk in text.replace(" and ", ",").split(",") for p in [chunk]]
    parts = [p for p in parts if p]
    return parts or [text.strip()]


def split_sentences(text: str) -> list[str]:
    """Split a description into sentences (the model's description tokens). Never empty."""
    parts = [p.strip() for p in text.replace("!", ".").split(".")]
    parts = [p for p in parts if p]
    return parts or [text.strip()]


# ----------------------------------------------------------------------------- "hard" preset: photos

WARM_COLOURS = {"red", "orange", "yellow", "pink"}  # the others (green, teal, blue, purple) are cool


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
    base = np.clip(_RGB[attrs.colour] + rng.normal(0, 0.03, 3), 0, 1).astype(np.float32)
    if attrs.pattern == 0:
        motif = np.zeros((size, size), np.float32)
    else:
        period = 4 if attrs.scale == 0 else 8
        half = period / 2
        if attrs.pattern == 1:
            motif = ((v % period) < half).astype(np.float32)
        elif attrs.pattern == 2:
            motif = (((v // half) + (u // half)) % 2).astype(np.float32)
        else:
            du, dv = (u % period) - half, (v % period) - half
            motif = ((du**2 + dv**2) <= (period / 3.2) ** 2).astype(np.float32)
    colour = base[None, None] * (1 - motif[..., None]) + np.full(3, 0.95, np.float32) * motif[..., None]
    if attrs.finish == 1:
        hl = np.exp(-(((u - v) / 28) ** 2) / 0.02)[..., None]
        colour = colour * (0.85 + 0.15 * shade[..., None]) + 0.35 * hl
    elif attrs.finish == 2:
        colour = 0.45 * colour + 0.35 * colour.mean(-1, keepdims=True) + 0.25
    elif attrs.finish == 3:
        colour = colour * 0.45
    else:
        colour = colour * (0.7 + 0.3 * shade[..., None])
    grain_freq = [0.0, 1.7, 2.9, 0.9][attrs.fabric]
    if grain_freq > 0:
        colour = colour + 0.025 * np.sin(u * grain_freq + v * grain_freq * 0.6)[..., None]

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


# ----------------------------------------------------------------------------- "hard" preset: captions

_CATEGORY_HINTS = {
    "t-shirt": ["has short sleeves", "is more casual"],
    "trousers": ["is a pair of pants", "has legs"],
    "pullover": ["is a knit", "is warmer"],
    "dress": ["is one piece", "is longer"],
    "coat": ["is for outdoors", "is heavier"],
    "sandals": ["is open toed", "is more summery"],
    "shirt": ["has buttons", "is more formal"],
    "sneakers": ["is sporty", "has laces"],
    "bag": ["is for carrying things", "has a handle"],
    "ankle boots": ["covers the ankle", "is a boot"],
}
_FINISH_RELATIVE = {
    "matte": ["is less shiny", "is more matte", "has a flat look"],
    "glossy": ["is shinier", "is shiny", "has a satin sheen"],
    "faded": ["is lighter", "is more faded", "looks washed out", "is paler"],
    "dark": ["is darker", "is deeper in tone", "is a darker shade"],
}
_FABRIC_RELATIVE = {
    "cotton": ["looks like cotton", "is cotton"],
    "linen": ["is linen", "looks lighter weight"],
    "wool": ["is wool", "looks warmer"],
    "silk": ["is silk", "looks smoother", "looks softer"],
}
_CHATTER = ["is more fashionable", "looks nicer", "is cuter", "has a similar style", "is prettier"]


def relative_clause(group: str, ref: Attributes, tgt: Attributes, rng: np.random.Generator,
                    disagree: float = 0.15) -> str:
    """One FashionIQ-style clause about the target relative to the reference (``"is darker"``,
    ``"has bigger stripes"``, ``"is not red"``), often vaguer than :func:`modification_clause`.

    With probability ``disagree`` a colour is named as the neighbouring hue (annotators perceive
    colour differently, more so under a colour cast).
    """
    new, old = tgt.names()[group], ref.names()[group]
    r = rng.random()
    if group == "colour":
        if r < disagree:
            i = COLOURS.index(new) + int(rng.choice([-1, 1]))
            return f"is more {COLOURS[i % len(COLOURS)]}"
        if r < disagree + 0.15 and (new in WARM_COLOURS) != (old in WARM_COLOURS):
            return str(rng.choice(["has a warmer color", "is warmer toned"] if new in WARM_COLOURS
                                  else ["has a cooler color", "is cooler toned"]))
        if r < disagree + 0.25:
            return f"is not {old}"
        v = _syn("colour", new, rng)
        return str(rng.choice([f"is {v}", f"is {v} colored", f"{v} instead of {old}", f"has a {v} color"]))
    if group == "category":
        if r < 0.35:
            return str(rng.choice(_CATEGORY_HINTS[new]))
        v = _syn("category", new, rng)
        return str(rng.choice([f"is a {v}", f"is more like {v}", f"{v} instead"]))
    if group == "pattern":
        if new == "solid":
            return str(rng.choice(["is plain", "has no pattern", "is solid", "is less busy"]))
        if r < 0.2:
            return str(rng.choice(["has a print", "is patterned", "is busier"]))
        if old != "solid" and r < 0.5:
            return f"has {_MOTIF[new]} instead of {_MOTIF[old]}"
        return str(rng.choice([f"has {_MOTIF[new]}", f"is {_syn('pattern', new, rng)}"]))
    if group == "scale":
        motif = _MOTIF[tgt.names()["pattern"]]
        bigger = new == "bold"
        return str(rng.choice([f"has {'bigger' if bigger else 'smaller'} {motif}",
                               f"the {motif} are {'wider' if bigger else 'thinner'}",
                               f"has a {'larger' if bigger else 'finer'} print"]))
    if group == "finish":
        return str(rng.choice(_FINISH_RELATIVE[new]))
    if group == "fabric":
        return str(rng.choice(_FABRIC_RELATIVE[new]))
    raise ValueError(f"unknown attribute group {group!r}")


def annotator_captions(ref: Attributes, tgt: Attributes, groups: list[str], rng: np.random.Generator,
                       disagree: float = 0.15, chatter: float = 0.2, typo: float = 0.05) -> list[str]:
    """Two annotators' captions of one triplet, as in FashionIQ: lower case, relative phrasing,
    each naming only part of the change.

    Every group of ``groups`` is described by annotator 1, annotator 2 or both (each annotator
    gets at least one, so together they cover all of ``groups``); each writes their own clause
    (:func:`relative_clause`, so two descriptions of one change can disagree). With probability
    ``chatter`` an annotator adds an uninformative clause ("looks nicer"), with ``typo`` a typo.
    Returns two strings, clauses joined by " and ".
    """
    if not groups:
        raise ValueError("a modification needs at least one attribute group")
    who = [int(rng.choice(3, p=[0.3, 0.3, 0.4])) for _ in groups]  # 0: first, 1: second, 2: both
    for k in (0, 1):
        if not any(w in (k, 2) for w in who):
            who[int(rng.integers(len(who)))] = 2
    captions = []
    for k in (0, 1):
        clauses = [relative_clause(g, ref, tgt, rng, disagree) for g, w in zip(groups, who, strict=True)
                   if w in (k, 2)]
        rng.shuffle(clauses)
        if rng.random() < chatter:
            clauses.insert(int(rng.integers(len(clauses) + 1)), str(rng.choice(_CHATTER)))
        text = " and ".join(clauses)
        if rng.random() < typo:
            words = text.split(" ")
            j = int(rng.integers(len(words)))
            words[j] = _typo(words[j], rng)
            text = " ".join(words)
        captions.append(text)
    return captions
