import json

import numpy as np
import pytest
from PIL import Image

from common.errors import DataError, InputError
from retrieval.captions import describe
from retrieval.data import load_fashioniq, load_image, load_shoes, load_synthetic
from retrieval.render import GROUPS, Attributes, render
from retrieval.synth import BuildConfig, build_benchmark


def test_layout_and_item_disjoint_splits(tiny_bench):
    root, summary = tiny_bench
    for variant in ("controlled", "confounded"):
        v = root / variant
        assert (v / "meta.json").is_file()
        for split in ("train", "val", "test"):
            for cat in ("tops", "bottoms", "accessories"):
                assert (v / "captions" / f"cap.{cat}.{split}.json").is_file()
                assert (v / "image_splits" / f"split.{cat}.{split}.json").is_file()
            assert (v / "descriptions" / f"desc.{split}.json").is_file()
    garments = {}
    for split in ("train", "val", "test"):
        s = load_synthetic(root, split, "controlled")
        garments[split] = {i.split("_")[2] for i in s.ids}
        assert len(s.triplets) > 0 and s.descriptions is not None
    # val/test come from disjoint halves of Fashion-MNIST test; train from Fashion-MNIST train
    assert not garments["val"] & garments["test"]
    assert summary["variants"]["controlled"]["train"]["triplets"] > 100


def test_triplets_differ_in_mentioned_attributes(tiny_bench):
    root, _ = tiny_bench
    for variant in ("controlled", "confounded"):
        s = load_synthetic(root, "train", variant)
        extra = 0
        for t in s.triplets:
            a, b = s.attributes[s.index[t.reference]], s.attributes[s.index[t.target]]
            differ = {g for g, x, y in zip(GROUPS, a, b, strict=False) if x != y}
            assert 1 <= len(t.changed) <= 3
            assert set(t.changed) <= differ | {"scale"}
            if variant == "controlled":
                assert differ - {"scale"} <= set(t.changed) | {"scale"}
            extra += bool(differ - set(t.changed) - {"scale"})
        if variant == "controlled":
            assert extra == 0
        else:
            assert extra > len(s.triplets) * 0.3  # confounded: unmentioned attributes also vary


def test_build_is_deterministic_and_refuses_nonempty(tmp_path):
    cfg = BuildConfig(garments={"train": 8, "val": 4, "test": 4}, triplets={"train": 10, "val": 4, "test": 4})
    build_benchmark(tmp_path / "a", cfg)
    build_benchmark(tmp_path / "b", cfg)
    f = "controlled/captions/cap.tops.train.json"
    assert (tmp_path / "a" / f).read_text() == (tmp_path / "b" / f).read_text()
    before = (tmp_path / "a" / f).read_text()
    with pytest.raises(InputError, match="not empty"):
        build_benchmark(tmp_path / "a", cfg)
    assert (tmp_path / "a" / f).read_text() == before


def test_render_and_describe():
    sil = np.zeros((28, 28), np.uint8)
    sil[4:24, 6:22] = 200
    red = render(sil, Attributes(0, 0, 0, -1, 0, 0))
    blue = render(sil, Attributes(0, 5, 0, -1, 0, 0))
    assert red.shape == (32, 32, 3) and red.dtype == np.uint8
    assert red[16, 16, 0] > red[16, 16, 2] and blue[16, 16, 2] > blue[16, 16, 0]
    striped = render(sil, Attributes(0, 0, 1, 1, 0, 0))
    assert striped[8:24, 16].std() > red[8:24, 16].std()
    d = describe(Attributes(3, 5, 1, 0, 1, 3), np.random.default_rng(0), noise=0.0)
    assert "dress" in d.lower() or "frock" in d.lower()


def _write_fiq(root, bad_image=False):
    (root / "images").mkdir(parents=True)
    (root / "captions").mkdir()
    (root / "image_splits").mkdir()
    ids = ["B001", "B002", "B003"]
    for n, i in enumerate(ids):
        Image.fromarray(np.full((40, 30, 3), 60 * n, np.uint8)).save(root / "images" / f"{i}.png")
    if bad_image:
        (root / "images" / "B003.png").write_text("not an image")
    json.dump(ids, open(root / "image_splits" / "split.dress.val.json", "w"))
    json.dump(
        [{"candidate": "B001", "target": "B002", "captions": ["is red", "has long sleeves"]}],
        open(root / "captions" / "cap.dress.val.json", "w"),
    )


def test_fashioniq_loader_official_layout(tmp_path):
    _write_fiq(tmp_path)
    s = load_fashioniq(tmp_path, "val")
    assert list(s.galleries) == ["dress"] and s.images.shape == (3, 32, 32, 3)
    assert s.triplets[0].text == "is red and has long sleeves"
    assert not s.exclude_reference and s.descriptions is None


def test_fashioniq_errors(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_fashioniq(tmp_path / "nope", "val")
    (tmp_path / "flat").mkdir()
    with pytest.raises(DataError, match="layout"):
        load_fashioniq(tmp_path / "flat", "val")
    _write_fiq(tmp_path / "bad", bad_image=True)
    with pytest.raises(InputError, match="not an image"):
        load_fashioniq(tmp_path / "bad", "val")
    _write_fiq(tmp_path / "miss")
    (tmp_path / "miss" / "image_splits" / "split.dress.val.json").unlink()
    with pytest.raises(DataError, match="missing split file"):
        load_fashioniq(tmp_path / "miss", "val")
    _write_fiq(tmp_path / "nocap")
    (tmp_path / "nocap" / "captions" / "cap.dress.val.json").unlink()
    with pytest.raises(DataError, match="no caption files"):
        load_fashioniq(tmp_path / "nocap", "val")
    with pytest.raises(DataError, match="missing caption file"):
        load_fashioniq(tmp_path / "nocap", "val", categories=["dress"])
    _write_fiq(tmp_path / "unk")
    json.dump(
        [{"candidate": "B001", "target": "ZZZ", "captions": ["x"]}],
        open(tmp_path / "unk" / "captions" / "cap.dress.val.json", "w"),
    )
    with pytest.raises(DataError, match="ZZZ"):
        load_fashioniq(tmp_path / "unk", "val")


def test_shoes_loader_official_layout(tmp_path):
    names = ["img_womens_clogs_1.jpg", "img_womens_clogs_2.jpg", "img_mens_boots_3.jpg"]
    for n, name in enumerate(names):
        d = tmp_path / "attributedata" / ("womens_clogs" if "clogs" in name else "boots") / "0"
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((50, 50, 3), 80 * n, np.uint8)).save(d / name)
    (tmp_path / "eval_im_names.txt").write_text("\n".join(names) + "\n")
    (tmp_path / "train_im_names.txt").write_text(names[0] + "\n")
    json.dump(
        [
            {"ImageName": names[1], "ReferenceImageName": names[0], "RelativeCaption": "is darker"},
            {"ImageName": "img_other.jpg", "ReferenceImageName": names[0], "RelativeCaption": "x"},
        ],
        open(tmp_path / "relative_captions_shoes.json", "w"),
    )
    s = load_shoes(tmp_path, "test")
    assert s.exclude_reference and len(s.triplets) == 1 and s.galleries["shoes"] == names
    (tmp_path / "eval_im_names.txt").unlink()
    with pytest.raises(DataError, match="Shoes layout"):
        load_shoes(tmp_path, "test")


def test_load_image_errors(tmp_path):
    (tmp_path / "x.png").write_bytes(b"garbage")
    with pytest.raises(InputError):
        load_image(tmp_path / "x.png")
    with pytest.raises(InputError, match="no such image file"):
        load_image(tmp_path / "missing.png")


def test_load_image_composites_transparency_on_white_and_resizes(tmp_path):
    rgba = np.zeros((64, 64, 4), np.uint8)
    rgba[:32] = (200, 10, 10, 255)  # opaque red top half, fully transparent bottom half
    Image.fromarray(rgba, "RGBA").save(tmp_path / "cutout.png")
    img = load_image(tmp_path / "cutout.png")
    assert img.shape == (32, 32, 3) and img.dtype == np.uint8
    assert img[2:14].tolist() == [[[200, 10, 10]] * 32] * 12  # far from the edge: the opaque colour
    assert img[18:30].tolist() == [[[255, 255, 255]] * 32] * 12  # transparent: white, not black
