"""CIR datasets in memory and their loaders (the built synthetic benchmark, FashionIQ, Shoes).

All loaders return a :class:`CIRSplit`: gallery images (uint8, resized to 32x32), optional
item descriptions and attribute labels, triplets, and the evaluation galleries (FashionIQ: one
per category; Shoes: one over all eval images, reference excluded).

On-disk layout of the built benchmark (``retrieval.synth.build_benchmark``; FashionIQ layout +
description files)::

    <out>/<variant>/images/<id>.png                 variant in {controlled, confounded}
    <out>/<variant>/image_splits/split.<cat>.<split>.json   list of image ids
    <out>/<variant>/captions/cap.<cat>.<split>.json  [{"candidate","target","captions",...}]
    <out>/<variant>/descriptions/desc.<split>.json   {id: description}
    <out>/<variant>/attributes/attr.<split>.json     {id: [8 attribute indices]}
    <out>/<variant>/meta.json

Every file is read as UTF-8 JSON (the Shoes name lists as UTF-8 text) and checked at the
boundary: a wrong type, a missing key or an id that is a path (``../x``, ``a/b``) is a
:class:`~common.errors.DataError` naming the file, the entry and what was expected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from common.errors import DataError, InputError
from common.images import read_image

from .layout_checks import check_id, read_json, read_text, short, string_list
from .render import FIQ_CATEGORIES, GROUPS, IMAGE_SIZE

SPLITS = ("train", "val", "test")
VARIANTS = ("controlled", "confounded")


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
    (real datasets); attributes: (N, 8) int64 with -1 for "not applicable".
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
        table = read_json(f, "description file")
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
    """Read an image file as (size, size, 3) uint8 RGB (``common.images.read_image``: EXIF
    orientation applied, transparency composited on white, 16-bit, palette and CMYK images
    converted), resized bilinearly; InputError when it is missing or unreadable."""
    im = read_image(Path(path), "RGB", what=f"image file {path}")
    if im.size != (size, size):
        im = im.resize((size, size), Image.BILINEAR)
    return np.asarray(im, np.uint8).copy()


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


def load_meta(root: Path) -> dict:
    """``meta.json`` of a built benchmark variant root (``<out>/<variant>``); DataError when absent."""
    path = Path(root) / "meta.json"
    if not path.is_file():
        raise DataError(f"{root} is not a synthetic benchmark root (missing meta.json; run `moa3cir build-data`)")
    meta = read_json(path, "meta file")
    if not isinstance(meta, dict):
        raise DataError(f"{path} must hold a JSON object")
    return meta


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
        gal = read_json(root / "image_splits" / f"split.{cat}.{split}.json", "split file")
        caps = read_json(root / "captions" / f"cap.{cat}.{split}.json", "caption file")
        split_file = root / "image_splits" / f"split.{cat}.{split}.json"
        cap_file = root / "captions" / f"cap.{cat}.{split}.json"
        for value, f in ((gal, split_file), (caps, cap_file)):
            if not isinstance(value, list):
                raise DataError(f"{f} must hold a JSON list, got a {type(value).__name__}")
        galleries[cat] = [check_id(g, f"split file {split_file} entry {n}") for n, g in enumerate(gal)]
        for g in galleries[cat]:
            all_ids[g] = None
        for n, c in enumerate(caps):
            triplets.append(_fashioniq_triplet(c, f"caption file {cap_file} entry {n}", cat))
            for key in (triplets[-1].reference, triplets[-1].target):
                all_ids.setdefault(key, None)
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
        attributes = _read_attributes(attr_path, ids)
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


def _fashioniq_triplet(c, where: str, cat: str) -> Triplet:
    """One FashionIQ caption entry ``{"candidate", "target", "captions": [str, ...], "changed"?}``."""
    if not isinstance(c, dict):
        raise DataError(f"{where}: expected an object with candidate/target/captions, got {short(c)}")
    missing = [k for k in ("candidate", "target", "captions") if k not in c]
    if missing:
        raise DataError(f"{where} lacks {'/'.join(missing)} (expected candidate, target and captions)")
    ref, tgt = check_id(c["candidate"], f"{where} candidate"), check_id(c["target"], f"{where} target")
    captions = string_list(c["captions"], where, "captions")
    text = " and ".join(s.strip().rstrip(".") for s in captions if s.strip())
    if not text:
        raise DataError(f"{where} has empty captions")
    changed = c.get("changed")
    if changed is not None:
        changed = string_list(changed, where, "changed (attribute group names)")
    return Triplet(ref, tgt, text, cat, changed)


def _read_attributes(path: Path, ids: list[str]) -> np.ndarray:
    """(len(ids), 8) int64 attribute indices from ``{id: [8 integers]}``, -1 = not applicable."""
    table = read_json(path, "attribute file")
    if not isinstance(table, dict):
        raise DataError(f"attribute file {path} must hold a JSON object {{image id: [{len(GROUPS)} integers]}}")
    out = np.empty((len(ids), len(GROUPS)), np.int64)
    for n, i in enumerate(ids):
        if i not in table:
            raise DataError(f"attribute file {path} has no entry for image id {i!r}")
        row = table[i]
        if (not isinstance(row, list) or len(row) != len(GROUPS)
                or not all(isinstance(v, int) and not isinstance(v, bool) and v >= -1 for v in row)):
            raise DataError(f"attribute file {path} entry {i!r}: expected {len(GROUPS)} integers >= -1 "
                            f"({', '.join(GROUPS)}), got {short(row)}")
        out[n] = row
    return out


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
    names = [ln.strip() for ln in read_text(names_file, "image name file").splitlines() if ln.strip()]
    for n, name in enumerate(names, 1):
        check_id(name, f"image name file {names_file} line {n}")
    cap_file = root / "relative_captions_shoes.json"
    caps = read_json(cap_file, "caption file")
    if not isinstance(caps, list):
        raise DataError(f"{cap_file} must hold a JSON list, got a {type(caps).__name__}")
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
        where = f"caption file {cap_file} entry {n}"
        keys = ("ImageName", "ReferenceImageName", "RelativeCaption")
        if not isinstance(c, dict) or any(k not in c for k in keys):
            raise DataError(f"{where} lacks ImageName/ReferenceImageName/RelativeCaption (got {short(c)})")
        ref, tgt = check_id(c["ReferenceImageName"], f"{where} ReferenceImageName"), check_id(
            c["ImageName"], f"{where} ImageName")
        if not isinstance(c["RelativeCaption"], str):
            raise DataError(f"{where}: expected RelativeCaption as a string, got {short(c['RelativeCaption'])}")
        text = c["RelativeCaption"].strip()
        if ref in name_set and tgt in name_set:
            if not text:
                raise DataError(f"{where} has an empty caption")
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
    s.name = f"synthetic-{read_json(root / 'meta.json', 'meta file').get('variant', '?')}"
    return s


def load_dataset(dataset: str, root: Path, split: str, variant: str | None = None) -> CIRSplit:
    if dataset == "synthetic":
        return load_synthetic(root, split, variant)
    if dataset == "fashioniq":
        return load_fashioniq(root, split, categories=None)
    if dataset == "shoes":
        return load_shoes(root, "train" if split == "train" else "test")
    raise InputError(f"unknown dataset {dataset!r} (synthetic, fashioniq, shoes)")
