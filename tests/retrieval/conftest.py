"""Shared fixtures: a tiny synthetic benchmark (built once) and a fast deterministic text encoder."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from retrieval.synth import BuildConfig, build_benchmark


class HashEncoder:
    """Deterministic stand-in for MiniLM in unit tests: one random unit vector per text."""

    dim = 384

    def encode(self, texts):
        from common.errors import InputError

        out = []
        for t in texts:
            if not t.strip():
                raise InputError("text must be a non-empty string")
            seed = int(hashlib.sha1(t.encode()).hexdigest()[:8], 16)
            v = np.random.default_rng(seed).standard_normal(self.dim)
            out.append(v / np.linalg.norm(v))
        return np.array(out, np.float32).reshape(len(texts), self.dim)


@pytest.fixture(scope="session")
def hash_encoder():
    return HashEncoder()


@pytest.fixture(scope="session")
def tiny_bench(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    summary = build_benchmark(root, BuildConfig.tiny(seed=0))
    return root, summary


@pytest.fixture(scope="session")
def prefilled_cache(tiny_bench, tmp_path_factory, hash_encoder):
    """An embedding cache holding hash embeddings for every text of the tiny benchmark, so CLI
    tests exercise the cache path without loading MiniLM (MiniLM itself: test_text.py)."""
    import json

    from retrieval.captions import split_clauses, split_sentences
    from retrieval.text import MiniLMEncoder

    root, _ = tiny_bench
    texts = set()
    for variant in ("controlled", "confounded"):
        for f in (root / variant / "descriptions").glob("*.json"):
            for d in json.loads(f.read_text()).values():
                texts.update(split_sentences(d))
        for f in (root / variant / "captions").glob("*.json"):
            for c in json.loads(f.read_text()):
                texts.update(split_clauses(" and ".join(c["captions"])))
    cache = tmp_path_factory.mktemp("cache")
    enc = MiniLMEncoder(cache=cache / "retrieval")
    texts = sorted(texts)
    enc._write_shard(
        [__import__("retrieval.text", fromlist=["text_key"]).text_key(t) for t in texts],
        hash_encoder.encode(texts),
    )
    return cache
