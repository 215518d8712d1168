"""A shop's own catalogue: a CSV of products or a folder of images, read into items and bad rows,
and a table of training triplets over it.

    cat = read_catalog(Path("shop/products.csv"))   # Catalog: items + bad rows (never raises for a row)
    split = read_triplets(Path("shop/triplets.csv"), cat)   # a CIRSplit to train on

CSV catalogue: one header line with ``id`` and ``image`` (alias ``path`` / ``image_path``: the
image file, relative to the CSV's folder), optional ``title`` and ``description``; every other
column is kept as the item's metadata. Folder catalogue: every image file below it (``.png``,
``.jpg``, ``.jpeg``, ``.webp``, ``.bmp``, ``.gif``), id = the path below the folder without the
extension (``/`` -> ``__``), a sidecar ``<name>.txt`` beside an image is its description.

A bad row (empty or path-like id, duplicate id, no image path, missing image file; unreadable
images are found when embedding) becomes a :class:`BadRow`; files that are no catalogue at all
(no header, no ``id`` column, not UTF-8) raise ``DataError``.

Triplet table: a CSV with ``reference``, ``target`` and ``text`` columns (aliases
``reference_id``, ``target_id``, ``request``); every malformed row is named in one ``DataError``.
"""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from common.errors import DataError, InputError

from .data import CIRSplit, Triplet, load_image
from .render import IMAGE_SIZE

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif")
IMAGE_COLUMNS = ("image", "path", "image_path")
TEXT_COLUMNS = ("title", "description")
TRIPLET_COLUMNS = {"reference": ("reference", "reference_id"), "target": ("target", "target_id"),
                   "text": ("text", "request")}
CATALOG_CATEGORY = "catalog"


@dataclass
class CatalogItem:
    """One product: ``path`` is the resolved image file; ``metadata`` the CSV's other columns."""

    id: str
    path: str
    title: str = ""
    description: str = ""
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """Title and description as one description text ("" when the item has neither)."""
        parts = [p.strip().rstrip(".") for p in (self.title, self.description) if p.strip()]
        return ". ".join(parts) + ("." if parts else "")

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class BadRow:
    """A skipped catalogue row: ``row`` is the CSV line number (header = 1) or the image's path
    below a folder catalogue."""

    row: str
    id: str
    path: str
    problem: str

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Catalog:
    source: str
    items: list[CatalogItem]
    bad: list[BadRow]

    def summary(self) -> str:
        return f"{len(self.items)} items, {len(self.bad)} bad rows"


def id_problem(item_id: str) -> str | None:
    """Why ``item_id`` cannot name a product (None when it can)."""
    if not item_id:
        return "empty id"
    if "/" in item_id or "\\" in item_id or item_id in (".", "..") or Path(item_id).suffix.lower() in IMAGE_SUFFIXES:
        return f"id {item_id!r} looks like a path (ids name products, the image column names files)"
    return None


def read_catalog(path: Path, seen: set[str] | None = None) -> Catalog:
    """Read a CSV or folder catalogue (module docstring); ``seen``: ids already indexed (rows
    reusing one are bad rows "duplicate id")."""
    path = Path(path)
    if path.is_dir():
        return _read_folder(path, set(seen or ()))
    if not path.is_file():
        raise InputError(f"catalogue {path} does not exist (a CSV file or a folder of images)")
    return _read_csv(path, set(seen or ()))


def _open_csv(path: Path, what: str) -> tuple[list[str], list[list[str]]]:
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            rows = list(csv.reader(f))
    except UnicodeDecodeError:
        raise DataError(f"{what} {path} is not UTF-8 text") from None
    except csv.Error as e:
        raise DataError(f"{what} {path} is not a valid CSV file ({e})") from None
    if not rows:
        raise DataError(f"{what} {path} is empty (it needs a header line)")
    return [h.strip().lower() for h in rows[0]], rows[1:]


def _read_csv(path: Path, seen: set[str]) -> Catalog:
    header, rows = _open_csv(path, "catalogue")
    if "id" not in header:
        raise DataError(f"catalogue {path}: the header has no 'id' column (columns: {', '.join(header)})")
    image_col = next((c for c in IMAGE_COLUMNS if c in header), None)
    if image_col is None:
        raise DataError(f"catalogue {path}: the header has no image column ({' / '.join(IMAGE_COLUMNS)})")
    base = path.parent
    items, bad = [], []
    for line, row in enumerate(rows, start=2):
        if not any(c.strip() for c in row):
            continue
        rec = {h: (row[n].strip() if n < len(row) else "") for n, h in enumerate(header) if h}
        iid, rel = rec.get("id", ""), rec.get(image_col, "")
        problem = id_problem(iid)
        if problem is None and iid in seen:
            problem = f"duplicate id {iid!r}"
        if problem is None and not rel:
            problem = "no image path"
        file = (base / rel).resolve() if rel else base
        if problem is None and not file.is_file():
            problem = f"image file not found: {rel}"
        if problem is not None:
            bad.append(BadRow(str(line), iid, rel, problem))
            continue
        seen.add(iid)
        meta = {k: v for k, v in rec.items() if k not in ("id", image_col, *TEXT_COLUMNS)}
        items.append(CatalogItem(iid, str(file), rec.get("title", ""), rec.get("description", ""), meta))
    return Catalog(str(path.resolve()), items, bad)


def _read_folder(path: Path, seen: set[str]) -> Catalog:
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    items, bad = [], []
    for file in files:
        rel = file.relative_to(path).as_posix()
        iid = rel.rsplit(".", 1)[0].replace("/", "__")
        if iid in seen:
            bad.append(BadRow(rel, iid, rel, f"duplicate id {iid!r}"))
            continue
        seen.add(iid)
        side = file.with_suffix(".txt")
        try:
            text = side.read_text(encoding="utf-8").strip() if side.is_file() else ""
        except (UnicodeDecodeError, OSError) as e:
            bad.append(BadRow(rel, iid, rel, f"unreadable sidecar text {side.name} ({type(e).__name__})"))
            continue
        items.append(CatalogItem(iid, str(file.resolve()), "", text, {}))
    return Catalog(str(path.resolve()), items, bad)


def load_items(items: list[CatalogItem]) -> tuple[np.ndarray, list[int], list[str]]:
    """Images of ``items`` as (n_ok, 32, 32, 3) uint8 through :func:`retrieval.data.load_image`;
    returns (images, positions of the readable items, problems of the others in item order)."""
    images, ok, problems = [], [], []
    for n, it in enumerate(items):
        try:
            images.append(load_image(Path(it.path)))
            ok.append(n)
        except InputError as e:
            problems.append(f"unreadable image: {e}")
    arr = np.stack(images) if images else np.zeros((0, IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8)
    return arr, ok, problems


def read_triplets(path: Path, catalog: Catalog) -> CIRSplit:
    """The training split of a shop: the catalogue's items (readable images only) and the
    triplets of the table at ``path``. DataError naming every malformed row (file, row, problem):
    a missing column value, an id the catalogue lacks (or holds as a bad row), reference equal
    to target. The gallery is the whole catalogue, the reference excluded (Shoes protocol)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"triplet table {path} does not exist")
    header, rows = _open_csv(path, "triplet table")
    cols = {}
    for key, names in TRIPLET_COLUMNS.items():
        col = next((c for c in names if c in header), None)
        if col is None:
            raise DataError(f"triplet table {path}: the header has no {' / '.join(names)} column")
        cols[key] = header.index(col)
    by_id = {it.id: it for it in catalog.items}
    bad_ids = {b.id: b.problem for b in catalog.bad if b.id}
    triplets, problems = [], []
    for line, row in enumerate(rows, start=2):
        if not any(c.strip() for c in row):
            continue
        val = {k: (row[c].strip() if c < len(row) else "") for k, c in cols.items()}
        missing = [k for k, v in val.items() if not v]
        if missing:
            problems.append(f"row {line}: empty {', '.join(missing)}")
            continue
        unknown = [f"{k} id {val[k]!r} " + (f"is a bad catalogue row ({bad_ids[val[k]]})" if val[k] in bad_ids
                                            else "is not in the catalogue")
                   for k in ("reference", "target") if val[k] not in by_id]
        if unknown:
            problems.append(f"row {line}: {'; '.join(unknown)}")
            continue
        if val["reference"] == val["target"]:
            problems.append(f"row {line}: reference and target are the same product")
            continue
        triplets.append(Triplet(val["reference"], val["target"], val["text"], CATALOG_CATEGORY))
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise DataError(f"triplet table {path}: {len(problems)} malformed rows: {'; '.join(problems[:5])}{more}")
    if not triplets:
        raise DataError(f"triplet table {path} holds no triplets")
    images, ok, img_problems = load_items(catalog.items)
    if img_problems:
        used = {i for t in triplets for i in (t.reference, t.target)}
        broken = [(catalog.items[n].id, p) for n, p in _failed(catalog.items, ok, img_problems)
                  if catalog.items[n].id in used]
        if broken:
            raise DataError(f"triplet table {path}: product {broken[0][0]!r} has an {broken[0][1]}")
    items = [catalog.items[n] for n in ok]
    descriptions = {it.id: it.text for it in items if it.text}
    ids = [it.id for it in items]
    return CIRSplit("catalog", "train", ids, images, triplets, {CATALOG_CATEGORY: ids},
                    descriptions or None, exclude_reference=True)


def _failed(items: list[CatalogItem], ok: list[int], problems: list[str]) -> list[tuple[int, str]]:
    good = set(ok)
    return list(zip((n for n in range(len(items)) if n not in good), problems, strict=True))
