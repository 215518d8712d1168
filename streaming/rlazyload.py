"""Reading an object from an R lazy-load database (``Rdata.rdx`` + ``Rdata.rdb``, as R packages ship
their data) with PyPI ``rdata`` and zlib / bz2 / xz, in place: nothing is copied."""

from __future__ import annotations

import bz2
import gzip
import lzma
import struct
import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from common.errors import DataError


def parse_r(raw: bytes, what: str) -> Any:
    """An R serialisation (XDR, ``X\\n`` header) -> Python object through ``rdata``."""
    try:
        import rdata
    except ImportError:  # pragma: no cover - a dependency of the project
        raise DataError("reading R data needs the Python package rdata (pip install rdata)") from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # rdata warns about attributes it converts loosely
            parsed = rdata.parser.parse_data(raw, extension=".rds")
            return rdata.conversion.convert(parsed)
    except Exception as exc:  # rdata raises many types on malformed input
        raise DataError(f"{what} is not a readable R serialisation: {type(exc).__name__}: {exc}") from None


#: R's compression type bytes (``serialize.c``): none, zlib, bzip2, xz
_CODECS = {"0": bytes, "1": zlib.decompress, "2": bz2.decompress, "Z": lzma.decompress}


def decompress_chunk(chunk: bytes, kind: int, what: str) -> bytes:
    """One ``.rdb`` chunk: 4-byte big-endian uncompressed length, then the payload (R's
    ``R_decompress1/2/3`` in ``serialize.c``): ``kind`` 1 = zlib; 2 and 3 carry a type byte
    (``'0'`` none, ``'1'`` zlib, ``'2'`` bzip2, ``'Z'`` xz) before the payload."""
    if len(chunk) < 5:
        raise DataError(f"{what}: chunk of {len(chunk)} bytes is too short")
    (length,) = struct.unpack(">I", chunk[:4])
    body, codec = chunk[4:], "1"
    if kind in (2, 3):
        codec, body = chr(chunk[4]), chunk[5:]
    if codec not in _CODECS:
        raise DataError(f"{what}: unknown compression type {codec!r}")
    try:
        raw = _CODECS[codec](body)
    except (zlib.error, OSError, ValueError, EOFError) as exc:
        raise DataError(f"{what}: cannot decompress ({exc})") from None
    if len(raw) != length:
        raise DataError(f"{what}: decompressed to {len(raw)} bytes, the header says {length}")
    return raw


def read_lazyload(folder: str | Path, name: str, db: str = "Rdata") -> Any:
    """The object ``name`` from the R lazy-load database ``folder/db.rdx`` + ``folder/db.rdb``.

    ``db.rdx`` is a (gzipped) R serialisation of ``list(variables = list(name = c(offset, length),
    ...), references = ..., compressed = TRUE | 2 | 3)``; the object is the R serialisation in
    bytes ``[offset, offset + length)`` of ``db.rdb``, compressed as ``decompress_chunk`` says.
    Returns what ``rdata.conversion.convert`` makes of it (a data frame becomes a
    ``pandas.DataFrame``). DataError naming the file on anything missing or malformed.
    """
    folder = Path(folder)
    rdx, rdb = folder / f"{db}.rdx", folder / f"{db}.rdb"
    for path in (rdx, rdb):
        if not path.is_file():
            raise DataError(f"R lazy-load database not found: {path}")
    raw = rdx.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(f"{rdx}: cannot decompress ({exc})") from None
    index = parse_r(raw, str(rdx))
    if not isinstance(index, dict) or "variables" not in index or not isinstance(index["variables"], dict):
        raise DataError(f"{rdx} is not a lazy-load index (no 'variables' list)")
    variables = {str(k): v for k, v in index["variables"].items()}
    if name not in variables:
        raise DataError(f"{rdx} has no object {name!r} (it holds {sorted(variables)[:10]}...)")
    try:
        offset, length = (int(v) for v in np.asarray(variables[name]).reshape(-1)[:2])
    except (TypeError, ValueError):
        raise DataError(f"{rdx}: malformed position of {name!r}: {variables[name]!r}") from None
    kind = int(np.asarray(index.get("compressed", [1])).reshape(-1)[0]) if "compressed" in index else 1
    size = rdb.stat().st_size
    if offset < 0 or length < 5 or offset + length > size:
        raise DataError(f"{rdb}: {name!r} at [{offset}, {offset + length}) lies outside the file ({size} bytes)")
    with open(rdb, "rb") as f:
        f.seek(offset)
        chunk = f.read(length)
    return parse_r(decompress_chunk(chunk, kind, f"{rdb} ({name})"), f"{rdb} ({name})")
