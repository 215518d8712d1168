"""Category classifier and category fidelity on a tiny dataset with clearly separable categories."""

import numpy as np
import pytest
import torch

from generation3d import classifier as C
from generation3d.data import CATEGORIES, PartDataset

# three categories whose clouds differ in shape: a flat slab, an upright rod, a sphere shell
KINDS = {"chair": "slab", "table": "rod", "lamp": "ball"}


def _cloud(kind: str, rng: np.random.Generator, n: int = 64) -> np.ndarray:
    if kind == "slab":
        return rng.uniform([-1, -1, -0.05], [1, 1, 0.05], (n, 3))
    if kind == "rod":
        return rng.uniform([-0.05, -0.05, -1], [0.05, 0.05, 1], (n, 3))
    v = rng.normal(size=(n, 3))
    return 0.8 * v / np.linalg.norm(v, axis=1, keepdims=True)


def separable_dataset(per_split=(12, 5, 3), seed: int = 0) -> PartDataset:
    """Two parts per shape (two halves of the same kind of cloud), splits train/test/val."""
    rng = np.random.default_rng(seed)
    points, cats, splits = [], [], []
    for split, count in enumerate(per_split):  # 0 train, 1 test, 2 val
        for cat, kind in KINDS.items():
            for _ in range(count):
                points += [_cloud(kind, rng), _cloud(kind, rng)]
                cats.append(CATEGORIES.index(cat))
                splits.append(split)
    pts = np.stack(points).astype(np.float32)
    boxes = np.concatenate([(pts.max(1) + pts.min(1)) / 2, pts.max(1) - pts.min(1)], 1).astype(np.float32)
    n_shapes = len(cats)
    return PartDataset(pts, boxes, np.arange(0, 2 * n_shapes + 1, 2, dtype=np.int64), np.array(cats, dtype=np.int64),
                       np.array(splits, dtype=np.int64), np.array(["part"] * len(pts)))


def test_classifier_separates_categories_and_fidelity_follows_the_requested_labels(tmp_path, monkeypatch):
    monkeypatch.setenv("MOE_APPS_CACHE", str(tmp_path))
    torch.set_num_threads(1)
    ds = separable_dataset()
    model, info = C.get_classifier(ds, epochs=30)
    assert info["test_accuracy"] >= 0.9 and info["n_train"] == 36 and info["n_test"] == 15
    assert info["categories"] == ["chair", "table", "lamp"]
    # real test shapes fed as "generated": they are what they claim to be
    ids = ds.shape_ids("test")
    clouds, labels = C.dataset_clouds(ds, ids, seed=7)
    assert C.category_fidelity(model, clouds, labels.numpy()) >= 0.9
    # the same shapes requested as another category (each label moved to the next kind): low fidelity
    wrong = {CATEGORIES.index(a): CATEGORIES.index(b) for a, b in zip(KINDS, list(KINDS)[1:] + list(KINDS)[:1], strict=True)}
    assert C.category_fidelity(model, clouds, [wrong[int(y)] for y in labels]) <= 0.1
    # shuffled labels: about chance (1/3)
    shuffled = np.random.default_rng(0).permutation(labels.numpy())
    assert C.category_fidelity(model, clouds, shuffled) <= 0.6

    # cached by dataset hash: the second call loads, a changed dataset trains a new one
    monkeypatch.setattr(C, "train_classifier", lambda *a, **k: pytest.fail("trained again"))
    again, info2 = C.get_classifier(ds, epochs=30)
    assert info2 == info
    assert torch.equal(again(clouds[:4]), model(clouds[:4]))
    other = separable_dataset(seed=1)
    assert C.dataset_hash(other, epochs=30) != C.dataset_hash(ds, epochs=30)
    assert C.dataset_hash(ds, epochs=31) != C.dataset_hash(ds, epochs=30)
    with pytest.raises(pytest.fail.Exception, match="trained again"):
        C.get_classifier(other, epochs=30)


def test_damaged_cache_is_retrained_and_clouds_have_a_fixed_size(tmp_path):
    ds = separable_dataset(per_split=(4, 1, 0))
    cache = tmp_path / "clf"
    _, info = C.get_classifier(ds, cache=cache, epochs=2)
    (cache / "model.safetensors").write_bytes(b"broken")
    model, info2 = C.get_classifier(ds, cache=cache, epochs=2)  # rebuilt, not an error
    assert info2["dataset_sha1"] == info["dataset_sha1"] and C.ShapeClassifier.from_pretrained(cache) is not None
    few = [np.zeros((3, 3)), np.ones((2, 3))]  # 5 points -> sampled with replacement to N
    cloud = C.shape_cloud_fixed(few, 16, seed=0)
    assert cloud.shape == (16, 3) and set(np.unique(cloud)) == {0.0, 1.0}
    assert C.predict(model, cloud[None]).shape == (1,)
