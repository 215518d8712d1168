"""``retrieval.gallery``: the shipped demo gallery's file and the obedience measure."""

from __future__ import annotations

import numpy as np
import pytest

from common.errors import DataError
from common.shipped import shipped_models
from retrieval.data import load_synthetic
from retrieval.gallery import (
    GALLERY_FILE,
    load_gallery,
    obedience,
    obedience_requests,
    save_gallery,
    step_requests,
)
from retrieval.render import ATTRIBUTES, GROUPS


def test_a_gallery_round_trips_and_bad_files_are_one_line_errors(tiny_bench, tmp_path):
    root, _ = tiny_bench
    split = load_synthetic(root, "test", "controlled")
    path = save_gallery(split, tmp_path / GALLERY_FILE)
    back = load_gallery(path)
    assert back.ids == split.ids and np.array_equal(back.images, split.images)
    assert back.descriptions == split.descriptions and np.array_equal(back.attributes, split.attributes)
    with pytest.raises(DataError, match="no demo gallery at"):
        load_gallery(tmp_path / "none.npz")
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(DataError, match="is not a demo gallery") as info:
        load_gallery(tmp_path / "bad.npz")
    assert "\n" not in str(info.value)


def test_requests_cover_every_other_colour_of_every_product(tiny_bench):
    split = load_synthetic(tiny_bench[0], "test", "controlled")
    reqs = obedience_requests(split)
    assert len(reqs) == len(split.ids) * (len(ATTRIBUTES["colour"]) - 1) * 2
    col = GROUPS.index("colour")
    for t in reqs[:50]:
        asked = t.text.split()[2]
        assert asked != ATTRIBUTES["colour"][split.attributes[split.index[t.reference], col]]


def test_step_requests_ask_only_the_steps_a_product_can_take():
    from retrieval.data import CIRSplit

    # a: lightness 0 (deep), saturation 3 (vivid): only "lighter" and "less colourful" exist, and
    # "a lighter one in <colour>" for the 7 other colours; b: mid levels, every step
    attrs = np.array([[0, 0, 0, -1, 0, 0, 0, 3], [0, 5, 0, -1, 0, 0, 2, 1]])
    split = CIRSplit("g", "test", ["a", "b"], np.zeros((2, 32, 32, 3), np.uint8), [], {}, attributes=attrs)
    reqs = step_requests(split)
    texts_a = [t.text for t, *_ in reqs if t.reference == "a"]
    assert "make it darker" not in texts_a and "make it more colourful" not in texts_a
    assert texts_a.count("make it lighter") == 1 and "a lighter one in blue" in texts_a and "a lighter one in red" not in texts_a
    assert len(texts_a) == 2 + 7 and len([t for t, *_ in reqs if t.reference == "b"]) == 4 + 2 * 7
    assert all(t.changed == ["colour", "lightness"] for t, _, _, c in reqs if c >= 0)


def test_the_shipped_model_obeys_colour_and_stripes_requests():
    """The first 100 products of the shipped gallery (700 colour and 700 colour-with-stripes
    requests, searched over all 1,392 products): the top-1 has the asked colour and the stripes at least 90 % of the time (all 1,392:
    docs/results/retrieval/shipped.json); "make it darker" and "a darker / lighter one in <colour>" are
    obeyed at least 80 % of the time, colour and step together (measured 95 / 91 / 82 %)."""
    from retrieval.registry import load_model

    model, _ = load_model("moa3cir-fmnist")
    gallery = load_gallery(shipped_models()["moa3cir-fmnist"] / GALLERY_FILE)
    out = obedience(model, gallery, products=gallery.ids[:100], device="cpu")
    assert out["products"] == 100 and out["colour_requests"]["n"] == 700
    assert out["colour_requests"]["top1_colour"] >= 0.9
    assert out["stripes_requests"]["top1_striped"] >= 0.9
    assert out["step_requests"]["make it darker"]["top1_obeys"] >= 0.8
    assert min(out["step_in_colour"][s]["top1_both"] for s in ("darker", "lighter")) >= 0.8
