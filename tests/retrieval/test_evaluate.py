import numpy as np
import pytest

from common.errors import DataError
from retrieval.data import CIRSplit, Triplet
from retrieval.evaluate import evaluate_split, recall_at_k, target_ranks


def test_target_ranks_hand_computed():
    scores = np.array(
        [
            [0.9, 0.1, 0.5, 0.3],  # target col 2: one item (0.9) above -> rank 1
            [0.2, 0.8, 0.7, 0.1],  # target col 1: best -> rank 0
            [0.4, 0.4, 0.4, 0.4],
        ]
    )  # all tied, target col 3: stable order puts 3 cols first -> 3
    ranks = target_ranks(scores, np.array([2, 1, 3]))
    assert ranks.tolist() == [1, 0, 3]
    assert recall_at_k(ranks, (1, 2, 4)) == {1: pytest.approx(1 / 3), 2: pytest.approx(2 / 3), 4: 1.0}


def test_reference_exclusion_moves_target_up():
    scores = np.array([[0.9, 0.1, 0.5, 0.3]])
    assert target_ranks(scores, np.array([2]), np.array([0])).tolist() == [0]
    assert target_ranks(scores, np.array([2]), np.array([-1])).tolist() == [1]
    with pytest.raises(DataError):
        target_ranks(scores, np.array([2]), np.array([2]))
    with pytest.raises(DataError):
        target_ranks(scores, np.array([7]))


def _split(exclude):
    ids = ["a", "b", "c", "d", "e"]
    imgs = np.zeros((5, 32, 32, 3), np.uint8)
    trip = [Triplet("a", "b", "t", "x"), Triplet("b", "c", "t", "x"), Triplet("d", "e", "t", "y")]
    return CIRSplit(
        "toy", "val", ids, imgs, trip, {"x": ["a", "b", "c"], "y": ["d", "e"]}, exclude_reference=exclude
    )


def test_fashioniq_and_shoes_protocols_hand_computed():
    # 1-d embeddings: score = q * g
    g = np.array([[3.0], [2.0], [1.0], [1.0], [2.0]])
    q = np.array([[1.0], [1.0], [1.0]])
    # gallery x = a(3) b(2) c(1): trip0 target b -> rank 1 (a above); trip1 target c -> rank 2
    # gallery y = d(1) e(2): trip2 target e -> rank 0
    m = evaluate_split(_split(False), q, g, ks=(1, 2, 3))
    assert m["R@1/x"] == 0 and m["R@2/x"] == 50 and m["R@3/x"] == 100
    assert m["R@1/y"] == 100
    assert m["R@1"] == pytest.approx(50) and m["R@2"] == pytest.approx(75)
    # Shoes-style: reference excluded. trip0 ref a removed -> b rank 0; trip1 ref b removed -> c rank 1
    s = evaluate_split(_split(True), q, g, ks=(1, 2, 3))
    assert s["R@1/x"] == 50 and s["R@2/x"] == 100
    assert s["avg"] == pytest.approx(np.mean([s["R@1"], s["R@2"], s["R@3"]]))


def test_split_rejects_ids_not_in_gallery():
    with pytest.raises(DataError, match="not in the gallery"):
        CIRSplit(
            "toy",
            "val",
            ["a"],
            np.zeros((1, 32, 32, 3), np.uint8),
            [Triplet("a", "zz", "t", "x")],
            {"x": ["a"]},
        )


def test_routing_metrics_hand_computed():
    from retrieval.evaluate import routing_metrics

    # 2 texts, 3 groups; top-2 routing (weight 0 outside the top k)
    weights = np.array([[0.9, 0.2, 0.0], [0.0, 0.6, 0.4]])
    mentioned = np.array([[True, False, False], [False, True, True]])
    m = routing_metrics(weights, mentioned)
    # selected (w > 0): {0, 1}, {1, 2} -> 3 of 4 selected are mentioned, all 3 mentioned found
    assert m["P@k"] == pytest.approx(3 / 4) and m["R@k"] == pytest.approx(1.0)
    # w > 0.5: {0}, {1} -> both mentioned, 2 of 3 mentioned found
    assert m["P@w>0.5"] == pytest.approx(1.0) and m["R@w>0.5"] == pytest.approx(2 / 3)
    assert m["w_mentioned"] == pytest.approx((0.9 + 0.6 + 0.4) / 3)
    assert m["w_other"] == pytest.approx((0.2 + 0.0 + 0.0) / 3)
    with pytest.raises(ValueError):
        routing_metrics(weights, mentioned[:, :2])


def test_attribute_compliance_hand_computed():
    from retrieval.evaluate import attribute_compliance, top1_items

    # items: a red-striped, b blue-striped, c blue-solid, d red-solid (colour col 1, pattern col 2)
    attrs = np.array([[0, 0, 1, 0, 0, 0], [0, 5, 1, 0, 0, 0], [0, 5, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]])
    trip = [
        Triplet("a", "b", "make it blue", "tops", ["colour"]),                 # top-1 c: blue -> obeyed
        Triplet("a", "b", "make it blue", "tops", ["colour"]),                 # top-1 a: red -> not
        Triplet("d", "b", "blue with stripes", "tops", ["colour", "pattern"]),  # top-1 b: both obeyed
        Triplet("c", "d", "make it red", "tops", ["colour"]),                  # top-1 a: red, obeyed
    ]
    split = CIRSplit("s", "test", list("abcd"), np.zeros((4, 32, 32, 3), np.uint8), trip, {"tops": list("abcd")},
                     attributes=attrs)
    g = np.eye(4, dtype=np.float32)
    q = np.array([[0, 0, 1, 0], [1, 0, 0, 0], [0, 1, 0, 0], [1, 0, 0, 0.5]], np.float32)
    assert top1_items(split, q, g) == ["c", "a", "b", "a"]
    out = attribute_compliance(split, q, g)
    assert out == {"compliance/colour": 75.0, "compliance_n/colour": 4.0, "compliance/pattern": 100.0,
                   "compliance_n/pattern": 1.0}
    # under the Shoes protocol the reference is removed: query 2 then gets its next best
    split.exclude_reference = True
    assert top1_items(split, q, g)[1] == "b"
    split.attributes = None
    with pytest.raises(DataError, match="attribute labels"):
        attribute_compliance(split, q, g)
