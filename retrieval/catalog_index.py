"""A searchable index of a shop's catalogue: batched, resumable embedding, incremental add and
remove, and search results as products.

    idx = build_catalog_index(read_catalog(Path("shop.csv")), model, Path("runs/idx"))
    idx = add_to_index(Path("runs/idx"), read_catalog(Path("new.csv"), seen=...), model)
    idx = remove_from_index(Path("runs/idx"), ["sku-17"])
    products = CatalogIndex.load(Path("runs/idx")).search(q, k=10)[0]   # list[Product]

Index directory::

    catalog.json     format, model directory + weight fingerprint, index kind and settings,
                     sources read, item and bad-row counts (written last: its presence = complete)
    items.jsonl      one product per line (id, path, title, description, metadata), row i = vector i
    vectors.npy      (N, E) float32 gallery embeddings (removal rebuilds the index from them)
    index.faiss/.json  the faiss index (``retrieval.index.GalleryIndex``)
    bad_rows.csv     every skipped row: source, row, id, path, problem
    .chunks/         embedded batches while building or adding, keyed by model + items + image
                     file size/mtime; a killed run resumes from them; removed when done

A directory written by ``moa3cir index --root`` (a dataset split) loads too: its products carry
only ids.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from common.errors import DataError, InputError
from common.io import write_csv, write_json

from .catalog import BadRow, Catalog, CatalogItem, load_items
from .data import CIRSplit
from .embed import embed_gallery
from .features import Features, description_tokens, prepare_features
from .index import GalleryIndex

FORMAT = 1
CHUNKS = ".chunks"


@dataclass
class Product:
    """One search result: the product's id, its score (inner product), image path, texts, metadata."""

    id: str
    score: float
    path: str = ""
    title: str = ""
    description: str = ""
    metadata: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def model_fingerprint(model: torch.nn.Module) -> str:
    """SHA-1 over the model's parameter and buffer values (names sorted): an index is tied to it."""
    h = hashlib.sha1()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class CatalogIndex:
    """Products + their vectors + a faiss index over them (module docstring: the directory)."""

    def __init__(self, path: Path, index: GalleryIndex, items: list[CatalogItem], vectors: np.ndarray, info: dict):
        self.path, self.index, self.items, self.vectors, self.info = Path(path), index, items, vectors, info

    def __len__(self) -> int:
        return len(self.items)

    @classmethod
    def load(cls, path: Path) -> CatalogIndex:
        path = Path(path)
        if not (path / "catalog.json").is_file() and (path / CHUNKS).is_dir():
            raise DataError(f"{path} holds an unfinished index; rerun the same `moa3cir index` to resume it")
        index = GalleryIndex.load(path)
        if not (path / "catalog.json").is_file():
            items = [CatalogItem(i, "") for i in index.ids]  # a dataset split's index
            return cls(path, index, items, np.zeros((0, index.dim), np.float32), {"format": 0})
        try:
            info = json.loads((path / "catalog.json").read_text(encoding="utf-8"))
            lines = (path / "items.jsonl").read_text(encoding="utf-8").splitlines()
            items = [CatalogItem(**json.loads(ln)) for ln in lines if ln.strip()]
            vectors = np.load(path / "vectors.npy", allow_pickle=False)
        except (OSError, ValueError, TypeError) as e:
            raise DataError(f"corrupt catalogue index in {path}: {(str(e).splitlines() or [type(e).__name__])[0]}") from None
        if not (len(items) == len(vectors) == len(index) == info.get("items")) or [i.id for i in items] != index.ids:
            raise DataError(f"catalogue index {path} is inconsistent (an interrupted update?): rebuild it with "
                            "`moa3cir index --overwrite`")
        return cls(path, index, items, vectors, info)

    def save(self) -> None:
        """Write vectors, items, faiss index, then ``catalog.json`` (each file atomically)."""
        self.path.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(self.vectors, np.float32))
        _atomic_bytes(self.path / "vectors.npy", buf.getvalue())
        _atomic_bytes(self.path / "items.jsonl",
                      "".join(json.dumps(it.as_dict(), ensure_ascii=False) + "\n" for it in self.items).encode())
        self.index.save(self.path)
        self.info["items"] = len(self.items)
        write_json(self.path / "catalog.json", self.info)

    def search(self, queries: np.ndarray, k: int = 10) -> list[list[Product]]:
        """The top-``k`` products of each query row (Q, E), best first."""
        scores, rows = self.index.search_rows(queries, k)
        out = []
        for srow, irow in zip(scores, rows, strict=True):
            out.append([Product(score=float(s), **self.items[r].as_dict()) for s, r in zip(srow, irow, strict=True)
                        if r >= 0])
        return out


def _atomic_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _chunk_key(fingerprint: str, items: list[CatalogItem]) -> str:
    h = hashlib.sha1(fingerprint.encode())
    for it in items:
        try:
            st = os.stat(it.path)
            stamp = (st.st_size, st.st_mtime_ns)
        except OSError:
            stamp = (-1, -1)
        h.update(json.dumps([it.id, it.path, it.text, *stamp]).encode())
    return h.hexdigest()[:24]


def _item_features(images: np.ndarray, texts: list[str], encoder=None) -> Features:
    n = len(images)
    if any(t for t in texts):
        desc, mask = description_tokens(texts, encoder)
    else:  # what description_tokens gives for items without text, without loading the encoder
        desc, mask = torch.zeros(n, 1, 384), torch.zeros(n, 1, dtype=torch.bool)
    empty = torch.zeros(0, dtype=torch.long)
    return Features(images=torch.from_numpy(images).permute(0, 3, 1, 2).float(), desc=desc, desc_mask=mask,
                    text=torch.zeros(0, 1, 384), text_mask=torch.zeros(0, 1, dtype=torch.bool), ref=empty,
                    tgt=empty, changed=None, attrs=None)


def embed_items(
    model, items: list[CatalogItem], work_dir: Path, batch_size: int = 256, device="auto", encoder=None,
    progress: bool = True,
) -> tuple[np.ndarray, list[CatalogItem], list[BadRow]]:
    """Embed ``items`` in batches, each saved under ``work_dir/.chunks`` as it finishes (a rerun
    after a kill reuses them). Returns (vectors (n_ok, E), the items embedded, the unreadable ones
    as bad rows). A tqdm progress bar goes to stderr."""
    from tqdm import tqdm

    chunks = Path(work_dir) / CHUNKS
    chunks.mkdir(parents=True, exist_ok=True)
    fp = model_fingerprint(model)
    vecs, kept, bad = [], [], []
    bar = tqdm(total=len(items), unit="item", desc="embedding", file=sys.stderr, disable=not progress)
    for s in range(0, len(items), batch_size):
        part = items[s : s + batch_size]
        file = chunks / f"{_chunk_key(fp, part)}.npz"
        if file.is_file():
            with np.load(file, allow_pickle=False) as z:
                v, ok, problems = z["vectors"], z["ok"].tolist(), z["problems"].tolist()
        else:
            images, ok, problems = load_items(part)
            v = (embed_gallery(model, _item_features(images, [part[n].text for n in ok], encoder), batch_size,
                               device=device) if ok else np.zeros((0, 0), np.float32))
            buf = io.BytesIO()
            np.savez(buf, vectors=v, ok=np.array(ok, np.int64), problems=np.array(problems, dtype=str))
            _atomic_bytes(file, buf.getvalue())
        good = set(ok)
        failed = [n for n in range(len(part)) if n not in good]
        bad += [BadRow("", part[n].id, part[n].path, p) for n, p in zip(failed, problems, strict=True)]
        if ok:
            vecs.append(v)
            kept += [part[n] for n in ok]
        bar.update(len(part))
    bar.close()
    dim = vecs[0].shape[1] if vecs else 0
    return (np.concatenate(vecs) if vecs else np.zeros((0, dim), np.float32)), kept, bad


def _write_bad_rows(out: Path, source: str, bad: list[BadRow], append: bool) -> Path:
    path = out / "bad_rows.csv"
    rows = []
    if append and path.is_file():
        import csv

        with open(path, encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
    rows += [{"source": source, **b.as_dict()} for b in bad]
    if rows:
        write_csv(path, rows)
    elif path.exists():
        path.unlink()
    return path


def bad_summary(bad: list[BadRow]) -> str:
    """'3 bad rows (2 image file not found, 1 duplicate id)'."""
    kinds = Counter(re.sub(r" ?'[^']*'", "", b.problem).split(":")[0].split(" (")[0] for b in bad)
    detail = ", ".join(f"{n} {k}" for k, n in kinds.most_common())
    return f"{len(bad)} bad row{'s' * (len(bad) != 1)}" + (f" ({detail})" if bad else "")


def build_catalog_index(
    catalog: Catalog, model, out: Path, kind: str = "flat", *, nlist: int = 64, nprobe: int = 16, pq_m: int = 0,
    rerank: int = 0, model_dir: Path | None = None, batch_size: int = 256, device="auto", encoder=None,
    progress: bool = True,
) -> tuple[CatalogIndex, list[BadRow]]:
    """Embed ``catalog`` with ``model`` into a new index directory ``out`` (resuming the batches a
    killed run left there). Returns the index and every bad row (also in ``out/bad_rows.csv``);
    DataError when no item is usable."""
    out = Path(out)
    vectors, items, unreadable = embed_items(model, catalog.items, out, batch_size, device, encoder, progress)
    bad = catalog.bad + unreadable
    _write_bad_rows(out, catalog.source, bad, append=False)
    if not items:
        raise DataError(f"catalogue {catalog.source}: no usable item, {bad_summary(bad)} (listed in "
                        f"{out / 'bad_rows.csv'})")
    index = GalleryIndex(vectors.shape[1], kind, nlist=nlist, nprobe=nprobe, pq_m=pq_m, rerank=rerank)
    index.add(vectors, [it.id for it in items])
    info = {"format": FORMAT, "model": None if model_dir is None else str(Path(model_dir).resolve()),
            "model_fingerprint": model_fingerprint(model), "kind": kind, "sources": [catalog.source],
            "bad_rows": len(bad)}
    idx = CatalogIndex(out, index, items, vectors, info)
    idx.save()
    shutil.rmtree(out / CHUNKS, ignore_errors=True)
    return idx, bad


def split_index(model, split: CIRSplit, kind: str = "flat", *, nlist: int = 64, nprobe: int = 16, pq_m: int = 0,
                rerank: int = 0, device="auto") -> GalleryIndex:
    """The gallery of a dataset ``split``, embedded by ``model``, in a new ``GalleryIndex`` of ``kind``."""
    emb = embed_gallery(model, prepare_features(split), device=device)
    index = GalleryIndex(emb.shape[1], kind, nlist=nlist, nprobe=nprobe, pq_m=pq_m, rerank=rerank)
    index.add(emb, split.ids)
    return index


def _check_model(idx: CatalogIndex, model) -> None:
    if idx.info.get("format", 0) < FORMAT:
        raise InputError(f"{idx.path} indexes a dataset split, not a catalogue; build one with --catalog")
    if model_fingerprint(model) != idx.info.get("model_fingerprint"):
        raise InputError(f"{idx.path} was built with another model ({idx.info.get('model')}); use that model "
                         "or rebuild the index")


def add_to_index(
    path: Path, catalog: Catalog, model, *, batch_size: int = 256, device="auto", encoder=None, progress: bool = True
) -> tuple[CatalogIndex, list[BadRow]]:
    """Embed the new items of ``catalog`` (read with ``seen=`` the index's ids, so a reused id is a
    bad row) and append them; nothing already indexed is re-embedded. Returns (index, bad rows)."""
    idx = CatalogIndex.load(path)
    _check_model(idx, model)
    vectors, items, unreadable = embed_items(model, catalog.items, idx.path, batch_size, device, encoder, progress)
    bad = catalog.bad + unreadable
    _write_bad_rows(idx.path, catalog.source, bad, append=True)
    if not items:
        raise DataError(f"catalogue {catalog.source}: nothing to add, {bad_summary(bad)} (listed in "
                        f"{idx.path / 'bad_rows.csv'})")
    idx.index.add(vectors, [it.id for it in items])
    idx.items += items
    idx.vectors = np.concatenate([idx.vectors, vectors]) if len(idx.vectors) else vectors
    idx.info["sources"] = [*idx.info.get("sources", []), catalog.source]
    idx.info["bad_rows"] = idx.info.get("bad_rows", 0) + len(bad)
    idx.save()
    shutil.rmtree(idx.path / CHUNKS, ignore_errors=True)
    return idx, bad


def remove_from_index(path: Path, ids: list[str]) -> CatalogIndex:
    """Drop the products ``ids`` (InputError naming unknown ones, nothing removed then); the faiss
    index is rebuilt from the stored vectors, nothing is re-embedded."""
    idx = CatalogIndex.load(path)
    if idx.info.get("format", 0) < FORMAT:
        raise InputError(f"{idx.path} indexes a dataset split, not a catalogue; build one with --catalog")
    known = {it.id for it in idx.items}
    unknown = [i for i in dict.fromkeys(ids) if i not in known]
    if unknown:
        raise InputError(f"not in the index {idx.path}: {', '.join(map(repr, unknown[:5]))}"
                         + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "") + " (nothing removed)")
    drop = set(ids)
    keep = [n for n, it in enumerate(idx.items) if it.id not in drop]
    if not keep:
        raise InputError(f"removing {len(drop)} ids would leave {idx.path} empty; delete the directory instead")
    idx.items = [idx.items[n] for n in keep]
    idx.vectors = idx.vectors[keep]
    idx.index.rebuild(idx.vectors, [it.id for it in idx.items])
    idx.save()
    return idx


def search_products(
    model, index: CatalogIndex, image: np.ndarray, text: str, description: str | None = None, k: int = 10,
    device="auto", encoder=None,
) -> tuple[list[Product], dict[str, float]]:
    """The top-``k`` products for one query (reference image (32, 32, 3) uint8 + request text
    [+ the reference's description]) and the router's attribute-group weights ({} for baselines)."""
    from .embed import encode_single_query
    from .render import GROUPS

    q, weights = encode_single_query(model, image, text, description, encoder, device=device)
    routing = {} if weights is None else {g: float(w) for g, w in zip(GROUPS, weights, strict=True)}
    return index.search(q, k)[0], routing
