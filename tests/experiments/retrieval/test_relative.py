"""The relative-request experiment's measures on hand-made data and real photos."""

import numpy as np

from experiments.retrieval.relative import NoRelativePath, real_photos, relative_compliance
from retrieval.data import CIRSplit, Triplet
from retrieval.model import MoA3Config


def _item(colour: int, lightness: int, saturation: int = 2) -> list[int]:
    return [0, colour, 0, -1, 0, 0, lightness, saturation]


def test_relative_compliance_counts_the_direction_and_the_exact_level():
    # a: red level 2; b: red level 1 (a step darker); c: red level 0 (two darker); d: red level 3; e: blue level 1
    attrs = np.array([_item(0, 2), _item(0, 1), _item(0, 0), _item(0, 3), _item(5, 1)])
    trip = [Triplet("a", "b", "darker", "t", ["lightness"]),        # top-1 c: darker, not the target level
            Triplet("a", "b", "darker", "t", ["lightness"]),        # top-1 d: lighter, a miss
            Triplet("a", "d", "lighter", "t", ["lightness"]),       # top-1 d: obeyed, exact
            Triplet("a", "e", "a darker blue one", "t", ["colour", "lightness"])]  # top-1 b: darker, not blue
    split = CIRSplit("s", "test", list("abcde"), np.zeros((5, 32, 32, 3), np.uint8), trip, {"t": list("abcde")},
                     attributes=attrs)
    out = relative_compliance(split, ["c", "d", "d", "b"])
    assert out["darker"] == {"n": 3, "obeyed": round(200 / 3, 2), "exact": round(100 / 3, 2)}
    assert out["lighter"] == {"n": 1, "obeyed": 100.0, "exact": 100.0}
    assert out["combined (colour + step)"] == {"n": 1, "obeyed": 0.0}
    assert out["more colourful"] == {"n": 0, "obeyed": None, "exact": None}


def test_real_photos_are_un_negated_with_the_garments_lightness():
    images, light, se = real_photos(20, seed=0)
    assert images.shape == (20, 32, 32, 3) and images.dtype == np.uint8
    assert (images[:, 0, 0] == 255).all()  # white backdrop: Fashion-MNIST's black, un-negated
    assert ((light > 0) & (light <= 1)).all() and ((se > 0) & (se < 0.05)).all()


def test_the_isolating_variant_has_no_relative_path():
    model = NoRelativePath(MoA3Config(d_model=16, d_slot=8, heads_per_group=1))
    assert model.relative == () and not hasattr(model, "level")


def test_real_path_scores_each_request_against_its_own_top1(monkeypatch):
    """Five photos of lightness 0.1 ... 0.9; a fake search returns the darkest other photo for
    "darker" and the lightest for "lighter", for references 0 and 1: darker is obeyed by reference
    1 only (50 %), lighter by both (100 %); chance 1/8 and 7/8."""
    import experiments.retrieval.relative as rel
    from retrieval.render import GROUPS

    light = np.array([0.1, 0.3, 0.5, 0.7, 0.9])
    monkeypatch.setattr(rel, "real_photos", lambda n, seed: (np.zeros((5, 32, 32, 3), np.uint8), light,
                                                             np.full(5, 1e-3)))
    monkeypatch.setattr(rel, "prepare_features", lambda split: split)
    monkeypatch.setattr(rel, "embed_gallery", lambda model, f: None)
    monkeypatch.setattr(rel, "embed_queries", lambda model, f: (None, np.ones((len(f.triplets), len(GROUPS)))))

    def top1(split, q, g):
        darkest = lambda t: "fmnist_1" if t.reference == "fmnist_0" else "fmnist_0"  # noqa: E731
        return [darkest(t) if "darker" in t.text else "fmnist_4" for t in split.triplets]

    monkeypatch.setattr(rel, "top1_items", top1)
    out = rel.real_path(None, 5, 2, 0)
    for phrasing, texts in rel.REAL_REQUESTS.items():
        assert out[f"darker ({phrasing}: '{texts[-1]}')"] == {"obeyed": 50.0, "chance": 12.5, "lightness_weight": 1.0}
        assert out[f"lighter ({phrasing}: '{texts[1]}')"] == {"obeyed": 100.0, "chance": 87.5, "lightness_weight": 1.0}
