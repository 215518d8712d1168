import numpy as np
import pytest

from common.errors import DataError, InputError
from retrieval.index import GalleryIndex


def _data(n=2000, d=32, q=50, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((20, d))
    g = centers[rng.integers(0, 20, n)] + 0.5 * rng.standard_normal((n, d))
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    return g.astype(np.float32), g[rng.integers(0, n, q)].astype(np.float32)


def test_flat_matches_numpy_and_round_trip(tmp_path):
    g, q = _data()
    idx = GalleryIndex(32, "flat")
    idx.add(g, [f"id{i}" for i in range(len(g))])
    scores, ids = idx.search(q, 5, batch_size=7)  # several batches
    ref = np.argsort(-(q @ g.T), axis=1)[:, :5]
    assert [[f"id{j}" for j in row] for row in ref] == ids
    assert np.allclose(scores, np.take_along_axis(q @ g.T, ref, 1), atol=1e-5)
    idx.save(tmp_path / "ix")
    loaded = GalleryIndex.load(tmp_path / "ix")
    s2, ids2 = loaded.search(q, 5)
    assert ids2 == ids and np.array_equal(s2, scores)


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_approximate_indexes_recall(kind, tmp_path):
    g, q = _data()
    exact = GalleryIndex(32, "flat")
    exact.add(g)
    approx = GalleryIndex(32, kind, nlist=32, nprobe=8)
    approx.add(g)
    _, a = exact.search_rows(q, 10)
    _, b = approx.search_rows(q, 10)
    recall = np.mean([len(set(x) & set(y)) / 10 for x, y in zip(a, b, strict=False)])
    assert recall > 0.9
    approx.save(tmp_path / kind)
    _, c = GalleryIndex.load(tmp_path / kind).search_rows(q, 10)
    assert np.array_equal(b, c)


def test_index_errors(tmp_path):
    idx = GalleryIndex(8)
    with pytest.raises(InputError, match="empty"):
        idx.search(np.zeros((1, 8), np.float32))
    with pytest.raises(InputError, match="shape"):
        idx.add(np.zeros((3, 9), np.float32))
    with pytest.raises(InputError):
        GalleryIndex(8, "lsh")
    with pytest.raises(DataError):
        GalleryIndex.load(tmp_path)
