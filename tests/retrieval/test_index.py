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


def _recall(a, b, k=10):
    return np.mean([len(set(x[:k]) & set(y[:k])) / k for x, y in zip(a, b, strict=True)])


def test_ivfpq_compresses_and_reranking_restores_recall(tmp_path):
    g, q = _data(n=3000, d=32, q=100)
    exact = GalleryIndex(32, "flat")
    exact.add(g)
    _, truth = exact.search_rows(q, 10)
    pq = GalleryIndex(32, "ivfpq", nlist=16, nprobe=16, pq_m=4)
    pq.add(g)
    rr = GalleryIndex(32, "ivfpq", nlist=16, nprobe=16, pq_m=4, rerank=8)
    rr.add(g)
    r_pq, r_rr = _recall(truth, pq.search_rows(q, 10)[1]), _recall(truth, rr.search_rows(q, 10)[1])
    assert 0.2 < r_pq < r_rr and r_rr > 0.9
    # 4 bytes of code per item (+ 8 of id) against 128 bytes of floats
    assert pq.memory_bytes() < exact.memory_bytes() / 4 < rr.memory_bytes()
    rr.save(tmp_path / "ix")
    loaded = GalleryIndex.load(tmp_path / "ix")
    assert loaded.kind == "ivfpq" and loaded.rerank == 8
    assert loaded.search(q, 10)[1] == rr.search(q, 10)[1]
    loaded.rebuild(g[:2000], [str(i) for i in range(2000)])  # the trained quantiser stays
    assert len(loaded) == 2000 and _recall(exact.search_rows(q, 10)[1], loaded.search_rows(q, 10)[1]) > 0.5


def test_ivfpq_rejects_bad_settings():
    with pytest.raises(InputError, match="dividing"):
        GalleryIndex(30, "ivfpq", pq_m=4)
    idx = GalleryIndex(32, "ivfpq", nlist=8)
    with pytest.raises(InputError, match="at least 256 vectors"):
        idx.add(np.ones((100, 32), np.float32))
