"""Absurd counts, malformed dataset layouts and interrupted training of ``moa3cir``: one ``error:``
line naming the file, the entry and what was expected (exit 2, nothing written), or a clean stop
with exit 130 / 143 and no temporary file."""

from __future__ import annotations

import json
import signal

import numpy as np
import pytest
from PIL import Image

from common.errors import DataError
from retrieval.cli import main
from retrieval.data import load_fashioniq, load_shoes
from tests.bad_input import assert_refused, assert_stops_on_signal

HUGE = "1000000000000"


@pytest.mark.parametrize(("argv", "match"), [
    (["train", "--phase2-epochs", HUGE], "--phase2-epochs"),
    (["train", "--phase1-epochs", HUGE], "--phase1-epochs"),
    (["train", "--augment", HUGE], "--augment"),
    (["train", "--patience", HUGE], "--patience"),
    (["train", "--fine-tune-blocks", "17"], "[0, 16]"),
    (["index", "--nlist", HUGE], "--nlist"),
    (["search", "--k", HUGE], "--k"),
    (["bench", "--phase2-epochs", HUGE], "--phase2-epochs"),
    (["bench", "--augment", HUGE], "--augment"),
])
def test_counts_past_their_maximum_are_refused_at_parse(argv, match, tmp_path):
    line = assert_refused(main, [*argv, "--out", str(tmp_path / "out")], tmp_path, match=match)
    assert "at most" in line or "in [" in line


# ----------------------------------------------------------------------------- layouts


def _image(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((8, 8, 3), value, np.uint8)).save(path)


def _fashioniq(root, captions=None, split_ids=None, attributes=None):
    """A valid two-image FashionIQ layout (category dress, split val); arguments replace one file."""
    for n, iid in enumerate(("a1", "b2")):
        _image(root / "images" / f"{iid}.png", 60 * n)
    (root / "image_splits").mkdir(parents=True, exist_ok=True)
    (root / "captions").mkdir(parents=True, exist_ok=True)
    split_ids = ["a1", "b2"] if split_ids is None else split_ids
    captions = [{"candidate": "a1", "target": "b2", "captions": ["is red", "has sleeves"]}] \
        if captions is None else captions
    for path, value in ((root / "image_splits" / "split.dress.val.json", split_ids),
                        (root / "captions" / "cap.dress.val.json", captions)):
        path.write_bytes(value if isinstance(value, bytes) else json.dumps(value).encode())
    if attributes is not None:
        (root / "attributes").mkdir(exist_ok=True)
        (root / "attributes" / "attr.val.json").write_text(json.dumps(attributes))
    return root


def test_a_valid_fashioniq_layout_loads(tmp_path):
    s = load_fashioniq(_fashioniq(tmp_path / "fiq"), "val")
    assert s.ids == ["a1", "b2"] and s.triplets[0].text == "is red and has sleeves"


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"captions": [{"candidate": "a1", "target": "b2", "captions": "fine"}]},
     "entry 0: expected captions as a JSON list of strings"),
    ({"captions": [{"candidate": "a1", "target": "b2", "captions": [3]}]}, "JSON list of strings"),
    ({"captions": [{"candidate": "a1", "captions": ["x"]}]}, "entry 0 lacks target"),
    ({"captions": ["a1 b2 is red"]}, "entry 0: expected an object"),
    ({"captions": {"candidate": "a1"}}, "must hold a JSON list"),
    ({"captions": [{"candidate": "../../../x", "target": "b2", "captions": ["x"]}]}, "not a plain name"),
    ({"captions": [{"candidate": ["a1"], "target": "b2", "captions": ["x"]}]}, "expected an image id"),
    ({"split_ids": ["a1", "sub/b2"]}, "entry 1: image id 'sub/b2' is not a plain name"),
    ({"split_ids": ["a1", 7]}, "expected an image id (a string), got int"),
    ({"captions": "caf\xe9".encode("latin-1")}, "is not UTF-8"),
    ({"split_ids": b"[\"a1\", \"b\xff\"]"}, "is not UTF-8"),
    ({"captions": b"[{"}, "not valid JSON"),
    ({"attributes": {"a1": [0] * 8}}, "no entry for image id 'b2'"),
    ({"attributes": {"a1": [0] * 8, "b2": [0, 0]}}, "entry 'b2': expected 8 integers"),
    ({"attributes": {"a1": [0] * 8, "b2": ["red"] + [0] * 7}}, "expected 8 integers"),
])
def test_malformed_fashioniq_files_name_file_entry_and_expectation(kwargs, match, tmp_path):
    root = _fashioniq(tmp_path / "fiq", **kwargs)
    with pytest.raises(DataError, match=None) as err:
        load_fashioniq(root, "val")
    assert match in str(err.value), str(err.value)
    assert str(root) in str(err.value)


def test_a_malformed_fashioniq_layout_is_one_line_through_the_cli(tmp_path):
    root = _fashioniq(tmp_path / "fiq", captions=[{"candidate": "a1", "target": "b2", "captions": "fine"}])
    (root / "image_splits" / "split.dress.train.json").write_text(json.dumps(["a1", "b2"]))
    (root / "captions" / "cap.dress.train.json").write_text(
        json.dumps([{"candidate": "../../../etc/x", "target": "b2", "captions": ["x"]}]))
    out = tmp_path / "out"
    assert_refused(main, ["train", "--dataset", "fashioniq", "--root", str(root), "--out", str(out),
                          "--image-encoder", "scratch", "--model", "image"], tmp_path, match="not a plain name")
    assert not out.exists()


def _shoes(root, captions=None, names=None):
    for n, name in enumerate(("img_1.jpg", "img_2.jpg")):
        _image(root / "attributedata" / "boots" / name, 90 * n)
    (root / "eval_im_names.txt").write_bytes(names if names is not None else b"img_1.jpg\nimg_2.jpg\n")
    captions = [{"ImageName": "img_2.jpg", "ReferenceImageName": "img_1.jpg", "RelativeCaption": "is taller"}] \
        if captions is None else captions
    (root / "relative_captions_shoes.json").write_text(json.dumps(captions))
    return root


def test_a_valid_shoes_layout_loads(tmp_path):
    s = load_shoes(_shoes(tmp_path / "shoes"), "test")
    assert s.ids == ["img_1.jpg", "img_2.jpg"] and s.triplets[0].text == "is taller"


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"captions": [{"ImageName": ["img_2.jpg"], "ReferenceImageName": "img_1.jpg", "RelativeCaption": "x"}]},
     "entry 0 ImageName: expected an image id (a string), got list"),
    ({"captions": [{"ImageName": "img_2.jpg", "ReferenceImageName": "img_1.jpg", "RelativeCaption": ["x"]}]},
     "expected RelativeCaption as a string"),
    ({"captions": [{"ImageName": "img_2.jpg"}]}, "entry 0 lacks ImageName/ReferenceImageName/RelativeCaption"),
    ({"captions": {"ImageName": "img_2.jpg"}}, "must hold a JSON list"),
    ({"names": b"img_1.jpg\n../../../x.jpg\n"}, "line 2: image id '../../../x.jpg' is not a plain name"),
    ({"names": b"img_1.jpg\nimg_\xff.jpg\n"}, "is not UTF-8"),
])
def test_malformed_shoes_files_name_file_entry_and_expectation(kwargs, match, tmp_path):
    root = _shoes(tmp_path / "shoes", **kwargs)
    with pytest.raises(DataError) as err:
        load_shoes(root, "test")
    assert match in str(err.value), str(err.value)
    assert str(root) in str(err.value)


# ----------------------------------------------------------------------------- interrupted runs


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_training_stops_on_a_signal_without_stray_files(sig, tiny_bench, prefilled_cache, tmp_path):
    root, _ = tiny_bench
    text = assert_stops_on_signal(
        ["-m", "retrieval.cli", "train", "--root", str(root), "--out", str(tmp_path / "model"),
         "--image-encoder", "scratch", "--phase1-epochs", "1000", "--phase2-epochs", "0"],
        tmp_path, sig, after_s=15.0, within_s=20.0, env={"MOE_APPS_CACHE": str(prefilled_cache)},
    )
    if sig == signal.SIGINT:
        assert "interrupted" in text
    assert not (tmp_path / "model" / "model.safetensors").exists()


def test_build_data_stops_on_sigterm_without_torn_files(tmp_path):
    out = tmp_path / "data"
    assert_stops_on_signal(["-m", "retrieval.cli", "build-data", "--out", str(out), "--preset", "hard"],
                           tmp_path, signal.SIGTERM, after_s=8.0, within_s=15.0)
    for png in out.rglob("*.png"):
        with Image.open(png) as im:
            im.load()  # every image written is whole


def test_a_checkpoint_write_interrupted_by_ctrl_c_keeps_the_old_one(tmp_path, monkeypatch):
    import os

    import torch

    import common.io
    from retrieval.registry import build_model, load_model, save_model
    from tests.bad_input import stray_temps

    torch.manual_seed(0)
    model = build_model("image", "XS", image_encoder="scratch")
    save_model(model, tmp_path / "m")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    real_replace = os.replace

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(common.io.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_model(model, tmp_path / "m")
    monkeypatch.setattr(common.io.os, "replace", real_replace)
    assert not stray_temps(tmp_path)
    loaded, _ = load_model(tmp_path / "m")
    for k, v in loaded.state_dict().items():
        assert torch.equal(v, before[k]), k


@pytest.mark.parametrize(("content", "match"), [
    (b'["a1 is a red dress"]', "must hold a JSON object"),
    (b'{"a1": ["red", "dress"]}', "the entry for 'a1' is not a string"),
    (b'{"a1": "caf\xe9"}', "is not UTF-8"),
])
def test_malformed_description_files_are_named(content, match, tmp_path):
    root = _fashioniq(tmp_path / "fiq")
    (root / "descriptions").mkdir()
    (root / "descriptions" / "desc.val.json").write_bytes(content)
    with pytest.raises(DataError) as err:
        load_fashioniq(root, "val")
    assert match in str(err.value) and "desc.val.json" in str(err.value), str(err.value)


def test_a_truncated_gallery_image_is_one_line_naming_the_file(tmp_path):
    from common.errors import MoeAppsError

    root = _fashioniq(tmp_path / "fiq")
    png = root / "images" / "b2.png"
    png.write_bytes(png.read_bytes()[:40])
    with pytest.raises(MoeAppsError) as err:
        load_fashioniq(root, "val")
    assert "b2.png" in str(err.value) and "\n" not in str(err.value)


def test_a_synthetic_root_with_a_bad_meta_file_is_one_line(tmp_path):
    root = tmp_path / "bench" / "controlled"
    root.mkdir(parents=True)
    (root / "meta.json").write_bytes(b"\xff\xfe{")
    assert_refused(main, ["bench", "--root", str(tmp_path / "bench"), "--out", str(tmp_path / "out"),
                          "--suite", "table"], tmp_path, match="meta.json")


def test_an_ivf_index_with_more_cells_than_items_is_refused_before_embedding(tiny_bench, tmp_path):
    from retrieval.registry import build_model, save_model

    save_model(build_model("image", "XS", image_encoder="scratch"), tmp_path / "m")
    out = tmp_path / "ix"
    assert_refused(main, ["index", "--root", str(tiny_bench[0]), "--model", str(tmp_path / "m"), "--kind", "ivf",
                          "--nlist", "60000", "--out", str(out)], tmp_path, match="--nlist 60000 exceeds")
    assert not out.exists()
