import numpy as np
import pytest

from common.errors import InputError
from retrieval.text import MiniLMEncoder


def test_minilm_cache_round_trip(tmp_path):
    enc = MiniLMEncoder(cache=tmp_path)
    texts = ["make it red", "in blue with stripes", "make it red"]
    e = enc.encode(texts)
    assert e.shape == (3, 384) and np.allclose(np.linalg.norm(e, axis=1), 1, atol=1e-4)
    assert np.array_equal(e[0], e[2])
    sim = e @ e.T
    assert sim[0, 1] < 0.99
    enc2 = MiniLMEncoder(cache=tmp_path)
    e2 = enc2.encode(texts[:2])
    assert enc2._model is None  # served from the disk cache, model never loaded
    assert np.array_equal(e2, e[:2])


def test_empty_text_rejected(tmp_path):
    with pytest.raises(InputError, match="non-empty"):
        MiniLMEncoder(cache=tmp_path).encode(["ok", "  "])
