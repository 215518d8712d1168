"""Sweet Home 3D furniture catalogues (Debian ``sweethome3d-furniture``), read in place.

Each ``.sh3f`` archive is a zip holding ``PluginFurnitureCatalog.properties`` (Java properties:
``name#i``, ``category#i``, ``icon#i``, ``model#i``, ``width#i``/``depth#i``/``height#i`` in cm,
``creator#i``, ...), one 128x128 PNG icon and one OBJ model (with its MTL and textures) per item.
Models are y-up, in centimetres. Nothing is copied out of the archives: items are listed from the
catalogues and their files are read from the zip on demand.

Licences: the BlendSwap-CC-0 archive is CC0 (public domain); every other archive is CC-BY 3.0
(attribution required), so each item keeps its creator and :func:`write_attribution` writes the
list that must ship beside anything derived from the items.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

import javaproperties

from common.errors import DataError
from common.io import write_csv

ENV = "MOE_APPS_SWEETHOME3D"
DEFAULT_DIR = Path("/usr/share/sweethome3d/furniture")
CATALOG = "PluginFurnitureCatalog.properties"
INSTALL_HINT = "install it with `apt-get install sweethome3d-furniture` (or run `make setup`)"

# Licence per archive (Debian's copyright file): CC0 for BlendSwap-CC-0, CC-BY 3.0 for the rest.
_CC0_ARCHIVES = {"BlendSwap-CC-0"}


@dataclass(frozen=True)
class FurnitureItem:
    """One catalogue entry. ``icon`` and ``model`` are member names inside ``archive``."""

    item_id: str  # catalogue id, unique across archives (e.g. "Blend Swap CC-0#armchair")
    name: str
    category: str
    tags: tuple[str, ...]
    creator: str
    license: str  # "CC0" or "CC-BY-3.0"
    archive: str  # path of the .sh3f file
    icon: str
    model: str
    width_cm: float
    depth_cm: float
    height_cm: float
    # row-major 3x3 rotation that Sweet Home 3D applies to the model before sizing it (``modelRotation``);
    # () when the catalogue gives none (identity)
    model_rotation: tuple[float, ...] = ()

    @property
    def key(self) -> str:
        """A file-name-safe unique key: ``<archive stem>__<model folder or stem>``."""
        stem = Path(self.model).parent.name or Path(self.model).stem
        return f"{Path(self.archive).stem}__{stem}".replace(" ", "_")


def furniture_dir(path: str | os.PathLike | None = None) -> Path:
    """The folder of ``.sh3f`` archives: ``path`` > ``$MOE_APPS_SWEETHOME3D`` > Debian's folder.
    DataError when it is missing or holds no archive."""
    root = Path(path or os.environ.get(ENV) or DEFAULT_DIR)
    if not root.is_dir():
        raise DataError(f"no Sweet Home 3D furniture folder at {root}; {INSTALL_HINT}")
    if not any(root.glob("*.sh3f")):
        raise DataError(f"no .sh3f archives in {root}; {INSTALL_HINT}")
    return root


def _rotation(props: dict, key: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in props.get(key, "").split())
    except ValueError:
        return ()
    return values if len(values) == 9 else ()


def _float(props: dict, key: str) -> float:
    try:
        return float(props.get(key, "nan"))
    except ValueError:
        return float("nan")


def read_archive(path: str | os.PathLike) -> list[FurnitureItem]:
    """The items of one ``.sh3f`` archive whose icon and model exist in it. DataError when the file
    is not a readable zip or has no catalogue."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
            if CATALOG not in names:
                raise DataError(f"{path} has no {CATALOG}: not a Sweet Home 3D furniture archive")
            props = javaproperties.loads(zf.read(CATALOG).decode("iso-8859-1"))
    except (zipfile.BadZipFile, EOFError, OSError) as exc:
        raise DataError(f"cannot read furniture archive {path}: {exc}") from exc
    licence = "CC0" if path.stem in _CC0_ARCHIVES else "CC-BY-3.0"
    items = []
    indices = sorted(int(k.split("#", 1)[1]) for k in props if k.startswith("id#") and k[3:].isdigit())
    for i in indices:
        icon, model = props.get(f"icon#{i}", "").lstrip("/"), props.get(f"model#{i}", "").lstrip("/")
        if icon not in names or model not in names:
            continue
        tags = tuple(t.strip() for t in props.get(f"tags#{i}", "").split(",") if t.strip())
        items.append(FurnitureItem(
            item_id=props[f"id#{i}"], name=props.get(f"name#{i}", ""), category=props.get(f"category#{i}", ""),
            tags=tags, creator=props.get(f"creator#{i}", "") or props.get("provider", ""), license=licence,
            archive=str(path), icon=icon, model=model, width_cm=_float(props, f"width#{i}"),
            depth_cm=_float(props, f"depth#{i}"), height_cm=_float(props, f"height#{i}"),
            model_rotation=_rotation(props, f"modelRotation#{i}")))
    return items


def load_catalog(path: str | os.PathLike | None = None) -> list[FurnitureItem]:
    """Every item of every ``.sh3f`` archive in :func:`furniture_dir` (sorted by archive name, then
    catalogue order)."""
    root = furniture_dir(path)
    return [item for archive in sorted(root.glob("*.sh3f")) for item in read_archive(archive)]


@cache
def _zip(archive: str) -> zipfile.ZipFile:
    return zipfile.ZipFile(archive)


def read_member(item: FurnitureItem, member: str) -> bytes:
    """The bytes of ``member`` (a name inside ``item.archive``)."""
    try:
        return _zip(item.archive).read(member)
    except (KeyError, zipfile.BadZipFile, OSError) as exc:
        raise DataError(f"cannot read {member} from {item.archive}: {exc}") from exc


def read_icon(item: FurnitureItem):
    """The item's icon as an RGB ``PIL.Image`` (transparent pixels composited on white), read by
    :func:`common.images.read_image`; DataError when it cannot be read."""
    from common.images import ImageError, read_image

    try:
        return read_image(read_member(item, item.icon), "RGB", what=f"icon {item.icon} in {item.archive}")
    except ImageError as exc:
        raise DataError(str(exc)) from exc


def write_attribution(items: list[FurnitureItem], path: str | os.PathLike) -> Path:
    """CSV of ``item_id, name, category, creator, license, archive`` for ``items`` (atomic): the
    attribution that CC-BY 3.0 requires beside anything made from them."""
    keep = ("item_id", "name", "category", "creator", "license", "archive")
    return write_csv(path, [{k: asdict(it)[k] for k in keep} for it in items])
