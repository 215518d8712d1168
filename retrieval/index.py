"""faiss gallery index: exact inner product (``IndexFlatIP``), IVF, IVF-PQ (compressed codes,
optional exact re-ranking) or HNSW; save/load, batched search, rebuild from stored vectors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import faiss
import numpy as np

from common.errors import DataError, InputError

KINDS = ("flat", "ivf", "ivfpq", "hnsw")
PQ_BITS = 8  # bits per product-quantiser code: 256 centroids per sub-vector


class GalleryIndex:
    """Inner-product index over (N, d) float32 embeddings with string ids.

    kind: ``flat`` (exact), ``ivf`` (IndexIVFFlat, ``nlist`` cells, ``nprobe`` searched),
    ``ivfpq`` (IndexIVFPQ: ``pq_m`` bytes per item, ``pq_m`` divides ``dim``, 0 = ``dim // 8``;
    ``rerank`` > 0 wraps it in IndexRefineFlat, which keeps the float vectors and re-scores the
    top ``rerank * k`` candidates exactly) or ``hnsw`` (IndexHNSWFlat, ``m`` links).
    ``search(q (Q, d), k)`` -> (scores (Q, k), ids list).
    """

    def __init__(self, dim: int, kind: str = "flat", nlist: int = 1024, nprobe: int = 16, m: int = 32,
                 pq_m: int = 0, rerank: int = 0):
        if kind not in KINDS:
            raise InputError(f"index kind must be one of {KINDS}, got {kind!r}")
        pq_m = pq_m or max(1, dim // 8)
        if kind == "ivfpq" and dim % pq_m:
            raise InputError(f"IVF-PQ needs --pq-m dividing the embedding width {dim}, got {pq_m}")
        if rerank < 0:
            raise InputError(f"rerank must be >= 0, got {rerank}")
        self.dim, self.kind, self.nlist, self.nprobe, self.m = dim, kind, nlist, nprobe, m
        self.pq_m, self.rerank = pq_m, rerank
        self.ids: list[str] = []
        self.index = self._empty()

    def _empty(self):
        dim, kind = self.dim, self.kind
        if kind == "flat":
            return faiss.IndexFlatIP(dim)
        if kind in ("ivf", "ivfpq"):
            self._quantizer = faiss.IndexFlatIP(dim)
            if kind == "ivf":
                return faiss.IndexIVFFlat(self._quantizer, dim, self.nlist, faiss.METRIC_INNER_PRODUCT)
            pq = faiss.IndexIVFPQ(self._quantizer, dim, self.nlist, self.pq_m, PQ_BITS, faiss.METRIC_INNER_PRODUCT)
            if not self.rerank:
                return pq
            self._base = pq
            refine = faiss.IndexRefineFlat(pq)
            refine.k_factor = float(self.rerank)
            return refine
        index = faiss.IndexHNSWFlat(dim, self.m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efSearch = max(64, 2 * self.m)
        return index

    @property
    def min_train(self) -> int:
        """Vectors the first ``add`` / ``train`` needs: ``nlist`` (IVF), and 256 per PQ codebook."""
        return {"ivf": self.nlist, "ivfpq": max(self.nlist, 2**PQ_BITS)}.get(self.kind, 0)

    def memory_bytes(self) -> int:
        """Size of the serialised faiss index (codes, ids, quantisers; the item ids are extra)."""
        return int(len(faiss.serialize_index(self.index)))

    def rebuild(self, emb: np.ndarray, ids: list[str]) -> None:
        """Replace the contents by ``emb`` / ``ids`` (after a removal), keeping a trained IVF or
        IVF-PQ quantiser; nothing is re-embedded."""
        if self.kind in ("ivf", "ivfpq") and self.index.is_trained:
            self.index.reset()
        else:
            self.index = self._empty()
        self.ids = []
        if len(emb):
            self.add(emb, ids)

    def _ivf(self):
        return faiss.extract_index_ivf(self.index)

    def _check(self, x: np.ndarray, what: str) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise InputError(f"{what} must have shape (n, {self.dim}), got {x.shape}")
        if not np.isfinite(x).all():
            raise InputError(f"{what} contain NaN or inf")
        return x

    def train(self, sample: np.ndarray) -> None:
        """Train the IVF coarse quantiser (and the PQ codebooks) on ``sample (m, d)``
        (m >= ``min_train``); a no-op for flat/HNSW.

        ``add`` trains on the first batch it gets when this was not called; a sample is cheaper
        for big galleries."""
        if self.kind not in ("ivf", "ivfpq") or self.index.is_trained:
            return
        sample = self._check(sample, "training vectors")
        if len(sample) < self.min_train:
            raise InputError(f"{self.kind} index with nlist={self.nlist} needs at least {self.min_train} "
                             f"vectors to train, got {len(sample)} (use --kind flat for a small catalogue)")
        self.index.train(sample)

    def add(self, emb: np.ndarray, ids: list[str] | None = None) -> None:
        emb = self._check(emb, "embeddings")
        ids = [str(len(self.ids) + i) for i in range(len(emb))] if ids is None else [str(i) for i in ids]
        if len(ids) != len(emb):
            raise InputError(f"{len(ids)} ids for {len(emb)} embeddings")
        self.train(emb)
        self.index.add(emb)
        self.ids.extend(ids)
        if self.kind in ("ivf", "ivfpq"):
            self._ivf().nprobe = self.nprobe

    def set_nprobe(self, nprobe: int) -> None:
        """IVF / IVF-PQ: number of cells searched per query (recall/speed trade-off)."""
        if self.kind not in ("ivf", "ivfpq") or nprobe < 1:
            raise InputError("nprobe applies to IVF indexes and must be >= 1")
        self.nprobe = nprobe
        self._ivf().nprobe = nprobe

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
            "pq_m": self.pq_m,
            "rerank": self.rerank,
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
            obj.pq_m, obj.rerank = meta.get("pq_m", max(1, obj.dim // 8)), meta.get("rerank", 0)
            obj.index, obj.ids = index, list(meta["ids"])
        except (json.JSONDecodeError, UnicodeDecodeError, RuntimeError, KeyError, TypeError) as e:
            raise DataError(f"corrupt index in {path}: {(str(e).splitlines() or [type(e).__name__])[0]}") from None
        if obj.kind in ("ivf", "ivfpq"):
            faiss.extract_index_ivf(index).nprobe = obj.nprobe
        if index.ntotal != len(obj.ids):
            raise DataError(f"corrupt index in {path}: {index.ntotal} vectors but {len(obj.ids)} ids")
        return obj
