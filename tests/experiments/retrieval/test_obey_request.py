"""The compliance experiment's miss analysis and hub example on hand-made / tiny data."""

import numpy as np
import torch

from experiments.retrieval.obey_request import colour_misses, hub_example
from retrieval.data import CIRSplit, Triplet
from retrieval.registry import build_model, save_model
from tests.retrieval.conftest import hash_encoder, prefilled_cache, tiny_bench  # noqa: F401  (fixtures)


def test_colour_misses_counts_reference_and_pairs():
    # a red (0), b blue (5), c teal (4); colour is attribute column 1
    attrs = np.array([[0, 0, 0, 0, 0, 0], [0, 5, 0, 0, 0, 0], [0, 4, 0, 0, 0, 0]])
    trip = [Triplet("a", "b", "make it blue", "tops", ["colour"]),   # top-1 c: teal, a miss
            Triplet("a", "b", "make it blue", "tops", ["colour"]),   # top-1 a: the reference
            Triplet("c", "b", "make it blue", "tops", ["colour"]),   # top-1 b: obeyed
            Triplet("a", "c", "with stripes", "tops", ["pattern"])]  # not a colour request
    split = CIRSplit("s", "test", list("abc"), np.zeros((3, 32, 32, 3), np.uint8), trip, {"tops": list("abc")},
                     attributes=attrs)
    q = np.array([[0, 0, 1], [1, 0, 0], [0, 1, 0], [1, 0, 0]], np.float32)
    w = np.zeros((4, 6), np.float32)
    w[:, 1] = [0.5, 1.0, 0.9, 0.0]
    out = colour_misses(split, q, w, np.eye(3, dtype=np.float32))
    assert out.pop("colour_weight") == {"missed": 0.75, "obeyed": 0.9}
    assert colour_misses(split, q, None, np.eye(3, dtype=np.float32))["colour_weight"] == {}
    assert out == {"misses": 2, "top1_is_reference": 1, "top1_keeps_reference_colour": 1,
                   "top_pairs": {"blue -> teal": 1, "blue -> red": 1}}


def test_hub_example_reports_top_items_or_says_none(tiny_bench, prefilled_cache, tmp_path, monkeypatch):  # noqa: F811
    import experiments.retrieval.obey_request as exp
    from retrieval.data import load_synthetic
    from retrieval.render import ATTRIBUTES, GROUPS

    root, _ = tiny_bench
    monkeypatch.setenv("MOE_APPS_CACHE", str(prefilled_cache))
    torch.manual_seed(0)
    save_model(build_model("moa3cir", "XS", image_encoder="scratch"), tmp_path / "m")
    first = load_synthetic(root, "test", "controlled")
    have = {tuple(a[GROUPS.index(g)] for g in ("category", "colour", "pattern")) for a in first.attributes}
    absent = next((c, k, n) for c in range(10) for k in range(8) for n in range(4) if (c, k, n) not in have)
    monkeypatch.setattr(exp, "HUB_REFERENCE", {g: ATTRIBUTES[g][v] for g, v in zip(("category", "colour", "pattern"),
                                                                               absent, strict=True)})
    assert "no test product" in hub_example(tmp_path / "m", root)["note"]  # the tiny gallery has none of those
    a = first.attributes[0]
    want = {g: ATTRIBUTES[g][a[GROUPS.index(g)]] for g in ("category", "colour", "pattern")}
    monkeypatch.setattr(exp, "HUB_REFERENCE", want)
    out = hub_example(tmp_path / "m", root)
    assert out["reference"] == {"id": first.ids[0], "colour": want["colour"], "pattern": want["pattern"]}
    assert len(out["top"]) == 5 and out["top"][0]["score"] >= out["top"][-1]["score"]
    assert set(out["routing"]) == set(GROUPS) and out["request"] == "make it blue with stripes"
    assert 0 <= out["blue_and_striped_in_top"] <= 5 and out["colour_misses"]["misses"] >= 0
