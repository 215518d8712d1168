"""faiss gallery index: exact inner product (``IndexFlatIP``), IVF or HNSW, save/load, batched search."""

from __future__ import annotations

import json
import os
from pathlib import Path

import faiss
import numpy as np

from common.errors import DataError, InputError

KINDS = ("flat", "ivf", "hnsw")


class GalleryIndex:
    """Inner-product index over (N, d) float32 embeddings with string ids.

    kind: ``flat`` (exact), ``ivf`` (IndexIVFFlat, ``nlist`` cells, ``nprobe`` searched) or
    ``hnsw`` (IndexHNSWFlat, ``m`` links). ``search(q (Q, d), k)`` -> (scores (Q, k), ids list).
    """

    def __init__(self, dim: int, kind: str = "flat", nlist: int = 1024, nprobe: int = 16, m: int = 32):
        if kind not in KINDS:
            raise InputError(f"index kind must be one of {KINDS}, got {kind!r}")
        self.dim, self.kind, self.nlist, self.nprobe, self.m = dim, kind, nlist, nprobe, m
        self.ids: list[str] = []
        if kind == "flat":
            self.index = faiss.IndexFlatIP(dim)
        elif kind == "ivf":
            self._quantizer = faiss.IndexFlatIP(dim)
            self.index = faiss.IndexIVFFlat(self._quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        else:
            self.index = faiss.IndexHNSWFlat(dim, m, faiss.METRIC_INNER_PRODUCT)
            self.index.hnsw.efSearch = max(64, 2 * m)

    def _check(self, x: np.ndarray, what: str) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise InputError(f"{what} must have shape (n, {self.dim}), got {x.shape}")
        if not np.isfinite(x).all():
            raise InputError(f"{what} contain NaN or inf")
        return x

    def train(self, sample: np.ndarray) -> None:
        """Train the IVF coarse quantiser on ``sample (m, d)`` (m >= nlist); a no-op for flat/HNSW.

        ``add`` trains on the first batch it gets when this was not called; a sample is cheaper
        for big galleries."""
        if self.kind != "ivf" or self.index.is_trained:
            return
        sample = self._check(sample, "training vectors")
        if len(sample) < self.nlist:
            raise InputError(f"IVF index with nlist={self.nlist} needs at least that many vectors to train")
        self.index.train(sample)

    def add(self, emb: np.ndarray, ids: list[str] | None = None) -> None:
        emb = self._check(emb, "embeddings")
        ids = [str(len(self.ids) + i) for i in range(len(emb))] if ids is None else [str(i) for i in ids]
        if len(ids) != len(emb):
            raise InputError(f"{len(ids)} ids for {len(emb)} embeddings")
        self.train(emb)
        self.index.add(emb)
        self.ids.extend(ids)
        if self.kind == "ivf":
            self.index.nprobe = self.nprobe

    def set_nprobe(self, nprobe: int) -> None:
        """IVF: number of cells searched per query (recall/speed trade-off)."""
        if self.kind != "ivf" or nprobe < 1:
            raise InputError("nprobe applies to IVF indexes and must be >= 1")
        self.nprobe = nprobe
        self.index.nprobe = nprobe

    def __len__(self) -> int:
        return self.index.ntotal

    def search(
        self, queries: np.ndarray, k: int = 10, batch_size: int = 1024
    ) -> tuple[np.ndarray, list[list[str]]]:
        q = self._check(queries, "queries")
        if len(self) == 0:
            raise InputError("the index is empty")
        k = min(k, len(self))
        scores, rows = [], []
        for s in range(0, len(q), batch_size):
            d, i = self.index.search(q[s : s + batch_size], k)
            scores.append(d)
            rows.append(i)
        d = np.concatenate(scores) if scores else np.zeros((0, k), np.float32)
        i = np.concatenate(rows) if rows else np.zeros((0, k), np.int64)
        return d, [[self.ids[j] for j in row if j >= 0] for row in i]

    def search_rows(
        self, queries: np.ndarray, k: int = 10, batch_size: int = 1024
    ) -> tuple[np.ndarray, np.ndarray]:
        """Like ``search`` but returns gallery row numbers (Q, k) instead of ids."""
        q = self._check(queries, "queries")
        out_d, out_i = [], []
        for s in range(0, len(q), batch_size):
            d, i = self.index.search(q[s : s + batch_size], min(k, len(self)))
            out_d.append(d)
            out_i.append(i)
        return np.concatenate(out_d), np.concatenate(out_i)

    def save(self, path: Path) -> None:
        """Write ``index.faiss`` + ``index.json`` into directory ``path`` (atomically per file)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        tmp = path / ".index.faiss.tmp"
        faiss.write_index(self.index, str(tmp))
        os.replace(tmp, path / "index.faiss")
        meta = {
            "dim": self.dim,
            "kind": self.kind,
            "nlist": self.nlist,
            "nprobe": self.nprobe,
            "m": self.m,
            "ids": self.ids,
        }
        tmpj = path / ".index.json.tmp"
        tmpj.write_text(json.dumps(meta))
        os.replace(tmpj, path / "index.json")

    @classmethod
    def load(cls, path: Path) -> GalleryIndex:
        path = Path(path)
        if not (path / "index.faiss").is_file() or not (path / "index.json").is_file():
            raise DataError(f"{path} holds no saved index (index.faiss + index.json)")
        try:
            meta = json.loads((path / "index.json").read_text(encoding="utf-8"))
            index = faiss.read_index(str(path / "index.faiss"))
            obj = cls.__new__(cls)
            obj.dim, obj.kind, obj.nlist, obj.nprobe, obj.m = (
                meta[k] for k in ("dim", "kind", "nlist", "nprobe", "m")
            )
            obj.index, obj.ids = index, list(meta["ids"])
        except (json.JSONDecodeError, UnicodeDecodeError, RuntimeError, KeyError, TypeError) as e:
            raise DataError(f"corrupt index in {path}: {(str(e).splitlines() or [type(e).__name__])[0]}") from None
        if obj.kind == "ivf":
            faiss.extract_index_ivf(index).nprobe = obj.nprobe
        if index.ntotal != len(obj.ids):
            raise DataError(f"corrupt index in {path}: {index.ntotal} vectors but {len(obj.ids)} ids")
        return obj
