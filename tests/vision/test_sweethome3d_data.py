"""The Sweet Home 3D dataset on a tiny built archive: seeded split by item, images, and the CLI
round trip train -> eval without repeating --data (the checkpoint remembers its data)."""

import csv
import io
import json
import zipfile

import numpy as np
import pytest
from PIL import Image

from vision.data import SWEETHOME3D_TEST_FRACTION, data_spec, load_dataset, sweethome3d_items

N_ITEMS = 25


def _icon(i: int) -> bytes:
    """A 128x128 RGBA icon: a disc of a colour that encodes ``i`` on a transparent background."""
    yy, xx = np.mgrid[:128, :128]
    img = np.zeros((128, 128, 4), np.uint8)
    disc = (xx - 64) ** 2 + (yy - 64) ** 2 < (20 + 2 * i) ** 2
    img[disc] = (10 * i, 255 - 10 * i, 100, 255)
    buf = io.BytesIO()
    Image.fromarray(img, "RGBA").save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def furniture(tmp_path, monkeypatch):
    lines = ["id=Tiny", "provider=tester"]
    with zipfile.ZipFile(tmp_path / "Tiny.sh3f", "w") as zf:
        for i in range(N_ITEMS):
            lines += [f"id#{i}=Tiny#item{i:02d}", f"name#{i}=Item {i}", f"category#{i}=Test",
                      f"icon#{i}=/t/item{i}.png", f"model#{i}=/t/item{i}/item.obj", f"creator#{i}=Maker {i}"]
            zf.writestr(f"t/item{i}.png", _icon(i))
            zf.writestr(f"t/item{i}/item.obj", "v 0 0 0\n")
        zf.writestr("PluginFurnitureCatalog.properties", "\n".join(lines).encode("iso-8859-1"))
    monkeypatch.setenv("MOE_APPS_SWEETHOME3D", str(tmp_path))
    return tmp_path


def test_split_by_item_is_seeded_disjoint_and_complete(furniture):
    train, test = sweethome3d_items("train", 0), sweethome3d_items("test", 0)
    ids_train, ids_test = {it.item_id for it in train}, {it.item_id for it in test}
    assert len(ids_test) == round(SWEETHOME3D_TEST_FRACTION * N_ITEMS) == 5
    assert not ids_train & ids_test and len(ids_train | ids_test) == N_ITEMS
    assert [it.item_id for it in sweethome3d_items("test", 0)] == [it.item_id for it in test]  # reproducible
    assert {it.item_id for it in sweethome3d_items("test", 1)} != ids_test


def test_images_are_the_icons_on_white(furniture):
    x = load_dataset("sweethome3d", 32, 3, split="test", seed=0)
    assert x.shape == (5, 3, 32, 32) and x.min() >= -1 and x.max() <= 1
    assert np.allclose(x[:, :, 0, 0].numpy(), 1.0)  # transparent corners composited on white
    i = int(sweethome3d_items("test", 0)[0].item_id[-2:])
    # the disc's colour in the centre pixel: (10 i, 255 - 10 i, 100) scaled to [-1, 1]
    np.testing.assert_allclose(x[0, :, 16, 16].numpy(), np.array([10 * i, 255 - 10 * i, 100]) / 127.5 - 1, atol=0.02)
    assert load_dataset("sweethome3d", 16, 1, limit=3).shape == (3, 1, 16, 16)


def test_data_spec_names_the_source(furniture, tmp_path):
    assert data_spec("sweethome3d", 64, 3, 2) == {"source": "sweethome3d", "size": 64, "channels": 3, "seed": 2}
    assert data_spec(None, 32, 1)["source"] == "fashion-mnist"
    assert data_spec(str(tmp_path), 32, 3)["source"] == str(tmp_path.resolve())


def test_cli_train_then_eval_defaults_to_the_checkpoint_data(furniture, tmp_path, capsys):
    from vision.cli import main

    run = tmp_path / "run"
    assert main(["train", "--data", "sweethome3d", "--size", "16", "--patch-size", "4", "--steps", "2",
                 "--batch-size", "2", "--out", str(run)]) == 0
    state = json.loads((run / "checkpoint" / "train_state.json").read_text())
    assert state["data"] == {"source": "sweethome3d", "size": 16, "channels": 3, "seed": 0}
    with open(run / "ATTRIBUTION.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["item_id"] for r in rows} == {it.item_id for it in sweethome3d_items("train", 0)}
    assert all(r["creator"].startswith("Maker") and r["license"] == "CC-BY-3.0" for r in rows)
    out = tmp_path / "metrics.json"
    assert main(["eval", "--ckpt", str(run), "--n", "6", "--steps", "2", "--out", str(out)]) == 0
    metrics = json.loads(out.read_text())
    assert metrics["data"] == "sweethome3d" and metrics["n_real"] == 5
    assert metrics["efficientnet_lite0_fid"] > 0 and "fmnist_classifier_fid" not in metrics
    assert not list(tmp_path.glob("*.sh3f.*"))  # nothing extracted beside the archive
