"""The Sweet Home 3D catalogue reader on a tiny hand-made .sh3f archive."""

import io
import zipfile

import pytest
from PIL import Image

from common.errors import DataError
from common.sweethome3d import furniture_dir, load_catalog, read_icon, read_member, write_attribution

CATALOG = """# test catalogue
id=Test
provider=tester
id#1=Test#chair
name#1=Chair \\u00e9
tags#1=Seat, Wood
category#1=Living room
icon#1=/t/chair.png
model#1=/t/chair/chair.obj
width#1=50
depth#1=40.5
height#1=90
creator#1=Alice
modelRotation#1=1 0 0 0 0 1 0 -1 0
id#2=Test#ghost
name#2=Missing model
icon#2=/t/ghost.png
model#2=/t/ghost/ghost.obj
"""


def _png(colour) -> bytes:
    buf = io.BytesIO()
    Image.new("RGBA", (4, 4), colour).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def folder(tmp_path):
    with zipfile.ZipFile(tmp_path / "BlendSwap-CC-0.sh3f", "w") as zf:
        zf.writestr("PluginFurnitureCatalog.properties", CATALOG.encode("iso-8859-1"))
        zf.writestr("t/chair.png", _png((255, 0, 0, 0)))  # fully transparent: becomes white
        zf.writestr("t/chair/chair.obj", "v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
        zf.writestr("t/ghost.png", _png((0, 0, 0, 255)))
    with zipfile.ZipFile(tmp_path / "Other.sh3f", "w") as zf:
        zf.writestr("PluginFurnitureCatalog.properties", CATALOG.replace("Alice", "").encode("iso-8859-1"))
        zf.writestr("t/chair.png", _png((0, 0, 255, 255)))
        zf.writestr("t/chair/chair.obj", "v 0 0 0\n")
    return tmp_path


def test_catalog_items_licences_and_icons(folder, tmp_path):
    items = load_catalog(folder)
    assert [(i.name, i.license, i.creator) for i in items] == [
        ("Chair é", "CC0", "Alice"), ("Chair é", "CC-BY-3.0", "tester")]  # item without a model skipped
    chair = items[0]
    assert chair.tags == ("Seat", "Wood") and (chair.width_cm, chair.depth_cm, chair.height_cm) == (50, 40.5, 90)
    assert chair.model_rotation == (1, 0, 0, 0, 0, 1, 0, -1, 0)
    assert read_member(chair, chair.model).startswith(b"v 0 0 0")
    assert read_icon(chair).getpixel((0, 0)) == (255, 255, 255)
    assert read_icon(items[1]).getpixel((0, 0)) == (0, 0, 255)
    assert len({i.key for i in items}) == 2
    out = write_attribution(items, tmp_path / "attr" / "ATTRIBUTION.csv")
    assert "Alice" in out.read_text() and "CC-BY-3.0" in out.read_text()


def test_bad_folders_and_archives(tmp_path, monkeypatch):
    monkeypatch.delenv("MOE_APPS_SWEETHOME3D", raising=False)
    with pytest.raises(DataError, match="no Sweet Home 3D furniture folder"):
        furniture_dir(tmp_path / "missing")
    with pytest.raises(DataError, match="no .sh3f archives"):
        furniture_dir(tmp_path)
    (tmp_path / "broken.sh3f").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(DataError, match="cannot read furniture archive"):
        load_catalog(tmp_path)
