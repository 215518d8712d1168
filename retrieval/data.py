"""Benchmark builder and loaders (synthetic benchmark, FashionIQ, Shoes).

All loaders return a :class:`CIRSplit`: gallery images (uint8, resized to 32x32), optional
item descriptions and attribute labels, triplets, and the evaluation galleries (FashionIQ: one
per category; Shoes: one over all eval images, reference excluded).

On-disk layout written by :func:`build_benchmark` (FashionIQ layout + description files)::

    <out>/<variant>/images/<id>.png                 variant in {controlled, confounded}
    <out>/<variant>/image_splits/split.<cat>.<split>.json   list of image ids
    <out>/<variant>/captions/cap.<cat>.<split>.json  [{"candidate","target","captions",...}]
    <out>/<variant>/descriptions/desc.<split>.json   {id: description}
    <out>/<variant>/attributes/attr.<split>.json     {id: [6 attribute indices]}
    <out>/<variant>/meta.json
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from common.errors import DataError, InputError
from common.io import write_json

from .render import (
    ATTRIBUTES,
    CATEGORY_TO_FIQ,
    FIQ_CATEGORIES,
    GROUPS,
    IMAGE_SIZE,
    Attributes,
    PhotoJitter,
    annotator_captions,
    describe,
    modification_text,
    render,
    render_photo,
)

SPLITS = ("train", "val", "test")
VARIANTS = ("controlled", "confounded")
FASHIONIQ_CATEGORIES = ("dress", "shirt", "toptee")


@dataclass
class Triplet:
    reference: str
    target: str
    text: str
    category: str  # evaluation gallery the triplet belongs to
    changed: list[str] | None = None  # attribute groups the text mentions (synthetic only)


@dataclass
class CIRSplit:
    """One split of a CIR dataset held in memory.

    images: (N, 32, 32, 3) uint8, row i is ``ids[i]``; descriptions/attributes may be None
    (real datasets); attributes: (N, 6) int64 with -1 for "not applicable".
    galleries: evaluation gallery per category (lists of ids); ``exclude_reference`` follows the
    dataset's official protocol.
    """

    name: str
    split: str
    ids: list[str]
    images: np.ndarray
    triplets: list[Triplet]
    galleries: dict[str, list[str]]
    descriptions: dict[str, str] | None = None
    attributes: np.ndarray | None = None
    exclude_reference: bool = False
    description_files: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.index = {i: n for n, i in enumerate(self.ids)}
        for t in self.triplets:
            for key in (t.reference, t.target):
                if key not in self.index:
                    raise DataError(f"{self.name}/{self.split}: image id {key!r} is not in the gallery")
        for cat, gal in self.galleries.items():
            missing = [g for g in gal if g not in self.index]
            if missing:
                raise DataError(f"{self.name}/{self.split}: gallery {cat!r} lists unknown id {missing[0]!r}")

    def rows(self, ids: list[str]) -> np.ndarray:
        return np.array([self.index[i] for i in ids], np.int64)

    def with_triplets(self, triplets: list[Triplet], split: str) -> CIRSplit:
        """The same items and galleries with other triplets (a validation split carved from train)."""
        return CIRSplit(self.name, split, self.ids, self.images, triplets, self.galleries, self.descriptions,
                        self.attributes, self.exclude_reference, self.description_files)


def carve_validation(split: CIRSplit, fraction: float, seed: int = 0) -> tuple[CIRSplit, CIRSplit | None]:
    """Split ``split``'s triplets into (train, validation) by *target image*: a random ``fraction``
    of the distinct targets (at least one) and every triplet aiming at one of them go to
    validation, so no validation target is ever a training target. Validation queries search the
    train galleries (same protocol as the dataset). Returns ``(split, None)`` when ``fraction`` is
    0 or fewer than 2 distinct targets (or gallery-resident targets) exist."""
    in_gallery = {(cat, g) for cat, gal in split.galleries.items() for g in gal}
    targets = sorted({t.target for t in split.triplets if (t.category, t.target) in in_gallery})
    if fraction <= 0 or len(targets) < 2:
        return split, None
    rng = np.random.default_rng(seed)
    n_val = min(len(targets) - 1, max(1, round(fraction * len(targets))))
    chosen = {targets[i] for i in rng.permutation(len(targets))[:n_val]}
    val = [t for t in split.triplets if t.target in chosen and (t.category, t.target) in in_gallery]
    train = [t for t in split.triplets if t.target not in chosen]
    return split.with_triplets(train, split.split), split.with_triplets(val, f"{split.split}-validation")


def read_descriptions(
    root: Path, split: str, ids: list[str], categories: list[str] | None = None
) -> tuple[dict[str, str] | None, list[str]]:
    """Item descriptions of ``split`` from ``root/descriptions/``, if the user has them.

    Files (JSON objects ``{image id: description text}``, all optional, merged):
    ``desc.<split>.json`` (one per split) and ``desc.<category>.<split>.json`` (one per category
    and split). Ids of other splits are ignored; items without an entry get no description.
    Returns ``({id: text} for the ids found, [files read])`` or ``(None, [])`` when no file exists.
    """
    d = Path(root) / "descriptions"
    files = [d / f"desc.{split}.json"] + [d / f"desc.{c}.{split}.json" for c in categories or []]
    files = [f for f in files if f.is_file()]
    if not files:
        return None, []
    wanted, found = set(ids), {}
    for f in files:
        table = _read_json(f, "description file")
        if not isinstance(table, dict):
            raise DataError(f"description file {f} must hold a JSON object {{image id: text}}")
        for key, text in table.items():
            if not isinstance(text, str):
                raise DataError(f"description file {f}: the entry for {key!r} is not a string")
            if key in wanted and text.strip():
                found[key] = text.strip()
    return {i: found[i] for i in ids if i in found}, [str(f) for f in files]


# ----------------------------------------------------------------------------- images


def load_image(path: Path, size: int = IMAGE_SIZE) -> np.ndarray:
    """Read an image file as (size, size, 3) uint8 RGB; InputError when unreadable."""
    try:
        with Image.open(path) as im:
            im = im.convert("RGB")
            if im.size != (size, size):
                im = im.resize((size, size), Image.BILINEAR)
            return np.asarray(im, np.uint8).copy()
    except FileNotFoundError:
        raise InputError(f"image file not found: {path}") from None
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise InputError(f"not a readable image: {path} ({type(e).__name__})") from None


def image_from_array(arr: np.ndarray, size: int = IMAGE_SIZE) -> np.ndarray:
    """Validate/resize an in-memory image (H, W[, C]) to (size, size, 3) uint8."""
    a = np.asarray(arr)
    if a.ndim == 2:
        a = np.stack([a] * 3, -1)
    if a.ndim != 3 or a.shape[-1] not in (3, 4) or min(a.shape[:2]) < 4:
        raise InputError(f"expected an RGB image array (H, W, 3), got shape {a.shape}")
    if a.dtype != np.uint8:
        a = np.clip(a * (255 if a.max() <= 1.0 else 1), 0, 255).astype(np.uint8)
    im = Image.fromarray(a[..., :3]).resize((size, size), Image.BILINEAR)
    return np.asarray(im, np.uint8).copy()


def _read_json(path: Path, what: str):
    if not path.is_file():
        raise DataError(f"missing {what}: {path}")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise DataError(f"{what} is not valid JSON: {path} ({e.msg})") from None


# ----------------------------------------------------------------------------- builder


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


def load_meta(root: Path) -> dict:
    """``meta.json`` of a built benchmark variant root (``<out>/<variant>``); DataError when absent."""
    path = Path(root) / "meta.json"
    if not path.is_file():
        raise DataError(f"{root} is not a synthetic benchmark root (missing meta.json; run `moa3cir build-data`)")
    meta = _read_json(path, "meta file")
    if not isinstance(meta, dict):
        raise DataError(f"{path} must hold a JSON object")
    return meta


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
    )


def _change(attrs: Attributes, group: str, rng: np.random.Generator) -> Attributes:
    """Attributes with ``group`` set to a different valid value (category stays in its FIQ group)."""
    cur = attrs.as_list()[GROUPS.index(group)]
    if group == "category":
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
                    tgt = _change(tgt, group, vrng)
                    mentioned.append(group)
                if "category" in mentioned and not by_cat[tgt.category]:
                    continue  # no garment of that category in this split
                if variant == "confounded" and vrng.random() < config.confound_prob:
                    hidden = [
                        g
                        for g in ("colour", "finish", "fabric", "pattern")
                        if g not in mentioned and not (g == "pattern" and "scale" in mentioned)
                    ]
                    tgt = _change(tgt, str(vrng.choice(hidden)), vrng)
                tgt_garment = garment
                if tgt.category != ref.category:
                    cands = by_cat[tgt.category]
                    tgt_garment = cands[int(vrng.integers(len(cands)))]
                tgt_id = _add_item(items, key_to_id, prefix, tgt_garment, tgt)
                if config.annotators:
                    captions = annotator_captions(ref, tgt, mentioned, vrng)
                else:
                    captions = [modification_text(ref, tgt, mentioned, vrng)]
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
                Image.fromarray(img).save(root / "images" / f"{iid}.png")
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


# ----------------------------------------------------------------------------- loaders


def _find_image(images_dir: Path, iid: str) -> Path:
    for ext in (".png", ".jpg", ".jpeg"):
        p = images_dir / f"{iid}{ext}"
        if p.is_file():
            return p
    raise DataError(f"image for id {iid!r} not found in {images_dir}")


def load_fashioniq(root: Path, split: str = "val", categories: list[str] | None = None) -> CIRSplit:
    """FashionIQ layout (also used by the synthetic benchmark).

    Protocol: per-category gallery = ``image_splits/split.<cat>.<split>.json``; the reference
    is not excluded (official evaluation); captions are joined with " and ".
    """
    root = Path(root)
    if split not in SPLITS:
        raise InputError(f"split must be one of {SPLITS}, got {split!r}")
    if not root.is_dir():
        raise DataError(f"dataset root {root} does not exist")
    if not (root / "captions").is_dir() or not (root / "image_splits").is_dir():
        raise DataError(f"{root} is not in FashionIQ layout (needs captions/, image_splits/, images/)")
    if categories is None:
        found = sorted(p.name.split(".")[1] for p in (root / "captions").glob(f"cap.*.{split}.json"))
        if not found:
            raise DataError(f"no caption files cap.<category>.{split}.json in {root / 'captions'}")
        categories = found
    triplets, galleries, all_ids = [], {}, {}
    for cat in categories:
        gal = _read_json(root / "image_splits" / f"split.{cat}.{split}.json", "split file")
        caps = _read_json(root / "captions" / f"cap.{cat}.{split}.json", "caption file")
        if not isinstance(gal, list) or not isinstance(caps, list):
            raise DataError(f"{root}: split/caption files for {cat!r} must hold JSON lists")
        galleries[cat] = [str(g) for g in gal]
        for g in galleries[cat]:
            all_ids[g] = None
        for n, c in enumerate(caps):
            try:
                text = " and ".join(s.strip().rstrip(".") for s in c["captions"] if s.strip())
                ref, tgt = str(c["candidate"]), str(c["target"])
            except (KeyError, TypeError, AttributeError):
                raise DataError(
                    f"caption file {cat}.{split} entry {n} lacks candidate/target/captions"
                ) from None
            if not text:
                raise DataError(f"caption file {cat}.{split} entry {n} has empty captions")
            for key in (ref, tgt):
                if key not in all_ids and key not in galleries[cat]:
                    all_ids[key] = None
            triplets.append(Triplet(ref, tgt, text, cat, c.get("changed")))
    ids = list(all_ids)
    images_dir = root / "images"
    if not images_dir.is_dir():
        raise DataError(f"{root} is not in FashionIQ layout: missing images/")
    images = (
        np.stack([load_image(_find_image(images_dir, i)) for i in ids])
        if ids
        else np.zeros((0, IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8)
    )
    descriptions, desc_files = read_descriptions(root, split, ids, categories)
    attr_path = root / "attributes" / f"attr.{split}.json"
    attributes = None
    if attr_path.is_file():
        a = _read_json(attr_path, "attribute file")
        attributes = np.array([a[i] for i in ids], np.int64).reshape(len(ids), len(GROUPS))
    return CIRSplit(
        "fashioniq",
        split,
        ids,
        images,
        triplets,
        galleries,
        descriptions,
        attributes,
        exclude_reference=False,
        description_files=desc_files,
    )


def load_shoes(root: Path, split: str = "test") -> CIRSplit:
    """Shoes (Guo et al., 2018) official layout.

    ``relative_captions_shoes.json`` ([{"ImageName", "ReferenceImageName", "RelativeCaption"}]),
    ``train_im_names.txt`` / ``eval_im_names.txt`` and images anywhere below ``root`` (the
    ``attributedata/<category>/.../img_*.jpg`` tree). Protocol: gallery = all eval images,
    reference excluded, R@1/10/50.
    """
    root = Path(root)
    if split not in ("train", "test"):
        raise InputError(f"Shoes split must be 'train' or 'test', got {split!r}")
    if not root.is_dir():
        raise DataError(f"dataset root {root} does not exist")
    names_file = root / ("train_im_names.txt" if split == "train" else "eval_im_names.txt")
    if not names_file.is_file():
        raise DataError(f"{root} is not in Shoes layout: missing {names_file.name}")
    names = [ln.strip() for ln in names_file.read_text().splitlines() if ln.strip()]
    caps = _read_json(root / "relative_captions_shoes.json", "caption file")
    name_set = set(names)
    paths = {}
    for p in root.rglob("*"):
        if p.suffix.lower() in (".jpg", ".jpeg", ".png") and p.name in name_set:
            paths[p.name] = p
    missing = [n for n in names if n not in paths]
    if missing:
        raise DataError(f"Shoes image {missing[0]!r} listed in {names_file.name} not found under {root}")
    triplets = []
    for n, c in enumerate(caps):
        try:
            ref, tgt, text = c["ReferenceImageName"], c["ImageName"], c["RelativeCaption"].strip()
        except (KeyError, TypeError, AttributeError):
            raise DataError(
                f"Shoes caption entry {n} lacks ImageName/ReferenceImageName/RelativeCaption"
            ) from None
        if ref in name_set and tgt in name_set:
            if not text:
                raise DataError(f"Shoes caption entry {n} has an empty caption")
            triplets.append(Triplet(ref, tgt, text, "shoes"))
    images = np.stack([load_image(paths[n]) for n in names])
    descriptions, desc_files = read_descriptions(root, split, names)
    return CIRSplit("shoes", split, names, images, triplets, {"shoes": list(names)}, descriptions,
                    exclude_reference=True, description_files=desc_files)


def load_synthetic(root: Path, split: str, variant: str | None = None) -> CIRSplit:
    """Load the synthetic benchmark (FashionIQ layout + descriptions + attributes)."""
    root = Path(root)
    if variant is not None:
        if variant not in VARIANTS:
            raise InputError(f"variant must be one of {VARIANTS}, got {variant!r}")
        root = root / variant
    if not (root / "meta.json").is_file():
        raise DataError(
            f"{root} is not a synthetic benchmark root (missing meta.json; run `moa3cir build-data`)"
        )
    s = load_fashioniq(root, split, categories=list(FIQ_CATEGORIES))
    if s.descriptions is None or s.attributes is None:
        raise DataError(f"{root}: synthetic benchmark lacks descriptions/ or attributes/ for {split}")
    s.name = f"synthetic-{_read_json(root / 'meta.json', 'meta file').get('variant', '?')}"
    return s


def load_dataset(dataset: str, root: Path, split: str, variant: str | None = None) -> CIRSplit:
    if dataset == "synthetic":
        return load_synthetic(root, split, variant)
    if dataset == "fashioniq":
        return load_fashioniq(root, split, categories=None)
    if dataset == "shoes":
        return load_shoes(root, "train" if split == "train" else "test")
    raise InputError(f"unknown dataset {dataset!r} (synthetic, fashioniq, shoes)")
