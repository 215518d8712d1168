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
