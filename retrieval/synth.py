"""The synthetic e-commerce CIR benchmark builder (``moa3cir build-data``).

:func:`build_benchmark` renders Fashion-MNIST garments with eight controllable attribute groups
(``retrieval.render``), writes item descriptions and modification texts (``retrieval.captions``)
and lays both variants out the way :func:`retrieval.data.load_synthetic` reads them (see
``retrieval.data`` for the layout). ``controlled``: only the mentioned attributes differ;
``confounded``: most triplets also change an unmentioned attribute, as in scraped data. The test
split asks for relative steps ("darker") in phrasings the train and val splits never use
(``retrieval.captions.PHRASINGS``).
"""

from __future__ import annotations

import io
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
from PIL import Image

from common.errors import DataError, InputError
from common.io import signals_deferred, write_json

from .captions import annotator_captions, describe, modification_text
from .data import SPLITS, VARIANTS, image_from_array, load_meta
from .render import (
    ATTRIBUTES,
    CATEGORY_TO_FIQ,
    FIQ_CATEGORIES,
    GROUPS,
    IMAGE_SIZE,
    RELATIVE_GROUPS,
    Attributes,
    PhotoJitter,
    render,
    render_photo,
)


@dataclass
class BuildConfig:
    """Sizes and look of the synthetic benchmark. ``small()`` builds in about a minute on 2 cores.

    ``photo``: None renders 32x32 studio shots (:func:`render`); a :class:`PhotoJitter` renders
    ``image_size`` px photos with pose/scale/crop jitter, backdrops and colour casts
    (:func:`render_photo`). ``annotators``: True writes two FashionIQ-style relative captions per
    triplet (:func:`annotator_captions`) instead of one templated modification text.
    """

    garments: dict[str, int] = field(default_factory=lambda: {"train": 500, "val": 120, "test": 200})
    items_per_garment: int = 3
    triplets: dict[str, int] = field(default_factory=lambda: {"train": 2500, "val": 400, "test": 800})
    confound_prob: float = 0.7  # confounded variant: chance a triplet also changes unmentioned attributes
    description_noise: float = 0.15
    seed: int = 0
    preset: str = "small"
    image_size: int = IMAGE_SIZE
    photo: PhotoJitter | None = None
    annotators: bool = False

    def __post_init__(self) -> None:
        if self.photo is None and self.image_size != IMAGE_SIZE:
            raise InputError(f"studio renders are {IMAGE_SIZE}x{IMAGE_SIZE}; other sizes need photo=PhotoJitter()")
        if self.image_size < 16:
            raise InputError(f"image_size must be at least 16, got {self.image_size}")

    @classmethod
    def small(cls, seed: int = 0) -> BuildConfig:
        return cls(seed=seed)

    @classmethod
    def tiny(cls, seed: int = 0) -> BuildConfig:
        return cls(
            garments={"train": 60, "val": 20, "test": 30},
            triplets={"train": 200, "val": 40, "test": 60},
            seed=seed,
            preset="tiny",
        )

    @classmethod
    def hard(cls, seed: int = 0) -> BuildConfig:
        """64 px photos with natural variation, two annotators' captions, noisier descriptions and a
        gallery about 2.5x the small one's (test: 600 garments x 4 looks + targets)."""
        return cls(
            garments={"train": 700, "val": 150, "test": 600},
            items_per_garment=4,
            triplets={"train": 4000, "val": 500, "test": 1200},
            description_noise=0.25,
            seed=seed,
            preset="hard",
            image_size=64,
            photo=PhotoJitter(),
            annotators=True,
        )

    @classmethod
    def hard_tiny(cls, seed: int = 0) -> BuildConfig:
        """The hard preset's look at the tiny preset's size (tests, smoke runs)."""
        return replace(cls.hard(seed), garments={"train": 60, "val": 20, "test": 30},
                       triplets={"train": 200, "val": 40, "test": 60}, preset="hard-tiny")


PRESETS = {"small": BuildConfig.small, "tiny": BuildConfig.tiny, "hard": BuildConfig.hard,
           "hard-tiny": BuildConfig.hard_tiny}


def item_renderer(root: Path):
    """``f(silhouette (28, 28) uint8, attrs, rng) -> (32, 32, 3) uint8``: an item drawn the way the
    benchmark variant at ``root`` (``<out>/<variant>``, its ``meta.json``) draws items, at the size
    the loaders deliver (photos resized with the loaders' bilinear filter). The augmentation
    editor renders its edits with it."""
    meta = load_meta(root)
    jitter = meta.get("photo_jitter")
    if jitter is None:
        return render
    try:
        photo, size = PhotoJitter(**{**jitter, "scale": tuple(jitter["scale"])}), int(meta["image_size"])
    except (KeyError, TypeError, ValueError):
        raise DataError(f"{root}/meta.json: malformed photo_jitter/image_size") from None

    def draw(silhouette: np.ndarray, attrs: Attributes, rng: np.random.Generator) -> np.ndarray:
        return image_from_array(render_photo(silhouette, attrs, rng, size, photo))

    return draw


def _random_attrs(category: int, rng: np.random.Generator) -> Attributes:
    pattern = int(rng.integers(4))
    return Attributes(
        category,
        int(rng.integers(len(ATTRIBUTES["colour"]))),
        pattern,
        -1 if pattern == 0 else int(rng.integers(2)),
        int(rng.integers(4)),
        int(rng.integers(4)),
        int(rng.integers(len(ATTRIBUTES["lightness"]))),
        int(rng.integers(len(ATTRIBUTES["saturation"]))),
    )


def change_attribute(attrs: Attributes, group: str, rng: np.random.Generator) -> Attributes:
    """Attributes with ``group`` set to a different valid value (category stays in its FIQ group; a
    relative group moves one step, the answer to "darker" / "more colourful")."""
    cur = attrs.as_list()[GROUPS.index(group)]
    if group in RELATIVE_GROUPS:
        pool = [v for v in (cur - 1, cur + 1) if 0 <= v < len(ATTRIBUTES[group])]
    elif group == "category":
        pool = [c for c in FIQ_CATEGORIES[CATEGORY_TO_FIQ[cur]] if c != cur]
    elif group == "scale":
        pool = [1 - cur]
    else:
        pool = [v for v in range(len(ATTRIBUTES[group])) if v != cur]
    return attrs.replace(**{group: int(rng.choice(pool))})


def _changeable(attrs: Attributes) -> list[str]:
    return [g for g in GROUPS if not (g == "scale" and attrs.pattern == 0)]


def _add_item(items: dict, key_to_id: dict, prefix: str, garment: int, attrs: Attributes) -> str:
    """Register (garment, attrs) as an item once; returns its id ``<prefix>_<garment>_<n>``."""
    key = (garment, tuple(attrs.as_list()))
    if key not in key_to_id:
        iid = f"{prefix}_{garment:05d}_{len(items):05d}"
        items[iid] = (garment, attrs)
        key_to_id[key] = iid
    return key_to_id[key]


def _save_png(img: np.ndarray, path: Path) -> None:
    """Encode in memory, then write with Ctrl-C and SIGTERM held until the file is whole
    (``write_bytes`` opens, then writes: a signal handled in between left an empty image)."""
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    with signals_deferred():
        path.write_bytes(buf.getvalue())


def build_benchmark(out: Path, config: BuildConfig | None = None, overwrite: bool = False) -> dict:
    """Build both variants of the synthetic benchmark under ``out``; returns a summary dict.

    Garments for train come from Fashion-MNIST train, val/test from disjoint halves of
    Fashion-MNIST test, so splits are item-disjoint. Refuses to write into a non-empty
    directory unless ``overwrite``.
    """
    config = config or BuildConfig()
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise InputError(f"output directory {out} is not empty (pass overwrite to replace)")
    try:
        from common.data_dir import load_fashion_mnist
    except ImportError as e:  # pragma: no cover - common/ is part of the suite
        raise DataError(f"common.data_dir unavailable: {e}") from None
    try:
        fm = {"train": load_fashion_mnist("train"), "test": load_fashion_mnist("test")}
    except (OSError, FileNotFoundError) as e:
        raise DataError(f"cannot read Fashion-MNIST: {e}") from None

    rng = np.random.default_rng(config.seed)
    pools = {}
    test_perm = rng.permutation(len(fm["test"][1]))
    half = len(test_perm) // 2
    pools["train"] = ("train", rng.permutation(len(fm["train"][1])))
    pools["val"] = ("test", test_perm[:half])
    pools["test"] = ("test", test_perm[half:])

    summary: dict = {"preset": config.preset, "seed": config.seed, "variants": {}}
    for variant in VARIANTS:
        vrng = np.random.default_rng([config.seed, VARIANTS.index(variant)])
        root = out / variant
        (root / "images").mkdir(parents=True, exist_ok=True)
        vsum = {}
        for split in SPLITS:
            src, perm = pools[split]
            x, y = fm[src]
            garments = perm[: config.garments[split]]
            by_cat: dict[int, list[int]] = defaultdict(list)
            for g in garments:
                by_cat[int(y[g])].append(int(g))
            items: dict[str, tuple[int, Attributes]] = {}
            key_to_id: dict[tuple, str] = {}
            prefix = f"{variant[:4]}_{split}"

            for g in garments:
                for _ in range(config.items_per_garment):
                    _add_item(items, key_to_id, prefix, int(g), _random_attrs(int(y[g]), vrng))
            base_ids = list(items)
            triplets = []
            for _ in range(config.triplets[split]):
                ref_id = base_ids[int(vrng.integers(len(base_ids)))]
                garment, ref = items[ref_id]
                n_change = int(vrng.choice([1, 2, 3], p=[0.4, 0.35, 0.25]))
                tgt, mentioned = ref, []
                for _ in range(n_change):
                    options = [g for g in _changeable(tgt) if g not in mentioned]
                    if tgt.pattern == 0 or "pattern" in mentioned:
                        options = [g for g in options if g != "scale"]
                    if ref.pattern == 0 and "scale" in options:
                        options.remove("scale")
                    if "scale" in mentioned and "pattern" in options:
                        options.remove("pattern")
                    group = str(vrng.choice(options))
                    tgt = change_attribute(tgt, group, vrng)
                    mentioned.append(group)
                if "category" in mentioned and not by_cat[tgt.category]:
                    continue  # no garment of that category in this split
                if variant == "confounded" and vrng.random() < config.confound_prob:
                    hidden = [
                        g
                        for g in ("colour", "finish", "fabric", "pattern")
                        if g not in mentioned and not (g == "pattern" and "scale" in mentioned)
                    ]
                    tgt = change_attribute(tgt, str(vrng.choice(hidden)), vrng)
                tgt_garment = garment
                if tgt.category != ref.category:
                    cands = by_cat[tgt.category]
                    tgt_garment = cands[int(vrng.integers(len(cands)))]
                tgt_id = _add_item(items, key_to_id, prefix, tgt_garment, tgt)
                phrasing = "eval" if split == "test" else "train"
                if config.annotators:
                    captions = annotator_captions(ref, tgt, mentioned, vrng, phrasing=phrasing)
                else:
                    captions = [modification_text(ref, tgt, mentioned, vrng, phrasing)]
                triplets.append(
                    {
                        "candidate": ref_id,
                        "target": tgt_id,
                        "captions": captions,
                        "changed": mentioned,
                        "category": CATEGORY_TO_FIQ[ref.category],
                    }
                )

            descs, attrs_out = {}, {}
            for iid, (garment, attrs) in items.items():
                if config.photo is None:
                    img = render(x[garment], attrs, vrng)
                else:
                    img = render_photo(x[garment], attrs, vrng, config.image_size, config.photo)
                _save_png(img, root / "images" / f"{iid}.png")
                descs[iid] = describe(attrs, vrng, config.description_noise)
                attrs_out[iid] = attrs.as_list()
            for cat in FIQ_CATEGORIES:
                write_json(
                    root / "image_splits" / f"split.{cat}.{split}.json",
                    [i for i, (_, a) in items.items() if CATEGORY_TO_FIQ[a.category] == cat],
                )
                write_json(
                    root / "captions" / f"cap.{cat}.{split}.json",
                    [t for t in triplets if t["category"] == cat],
                )
            write_json(root / "descriptions" / f"desc.{split}.json", descs)
            write_json(root / "attributes" / f"attr.{split}.json", attrs_out)
            vsum[split] = {"items": len(items), "triplets": len(triplets)}
        meta = {
            "variant": variant,
            "seed": config.seed,
            "groups": GROUPS,
            "attributes": ATTRIBUTES,
            "categories": list(FIQ_CATEGORIES),
            "splits": vsum,
            "image_size": config.image_size,
            "preset": config.preset,
            "photo_jitter": None if config.photo is None else asdict(config.photo),
            "captions_per_triplet": 2 if config.annotators else 1,
        }
        write_json(root / "meta.json", meta)
        summary["variants"][variant] = vsum
    return summary
