"""Predictions over files in bounded memory: distances of a DREAM-format pairs CSV
(``Dataset,Mixture_1,Mixture_2``, mixture labels of ``mixture_definitions.csv``; what ``mixscent
predict --csv`` runs) and the top odour labels of a mixtures text file (one ``;``-separated SMILES
mixture per line; ``mixscent labels --file``).

Two passes over the file, both streamed (:func:`iter_pairs_csv`):
:func:`check_pairs_csv` reads every row before the model loads (a bad row fails in one line naming
the file and the line, before any work), then :func:`predict_pairs_csv` predicts
:data:`CHUNK_ROWS` rows at a time and writes each chunk as it is done, with a tqdm bar on stderr.
Memory is the model, the mixture table and one chunk, whatever the number of rows
(``docs/results/olfaction/predict_memory.json``: peak RSS at 1k / 10k / 100k rows). The labels
file is read the same way: :func:`check_mixtures_text`, then :func:`predict_labels_file`.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import TextIO

from common.errors import DataError, InputError
from common.io import atomic_write

from .data import MixtureKey, resolve_mixture

CHUNK_ROWS = 1024  # rows predicted and written at once (the predictors batch them further)
OUT_COLUMNS = ("Dataset", "Mixture_1", "Mixture_2", "Predicted_Experimental_Values")
PAIR_COLUMNS = ("Dataset", "Mixture_1", "Mixture_2")


def iter_pairs_csv(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """``(line, {"Dataset", "Mixture_1", "Mixture_2"})`` for every row of a DREAM-format CSV
    (``mixscent predict --csv``), streamed (one row in memory at a time; extra columns are
    dropped). DataError naming the file, the line and what was expected: missing file, not UTF-8,
    malformed CSV (an over-long field included), missing columns, no rows, an empty value."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"CSV not found: {path}")
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            columns = reader.fieldnames or []
            if not columns:
                raise DataError(f"{path} is empty (expected a header {','.join(PAIR_COLUMNS)})")
            missing = [c for c in PAIR_COLUMNS if c not in columns]
            if missing:
                raise DataError(f"{path} needs columns {list(PAIR_COLUMNS)}; missing {missing}")
            n = 0
            for row in reader:
                n += 1
                line = reader.line_num
                if None in row:
                    raise DataError(f"{path} line {line}: {len(columns) + len(row[None])} fields, the header has "
                                    f"{len(columns)}")
                values = {c: (row.get(c) or "").strip() for c in PAIR_COLUMNS}
                empty = [c for c in PAIR_COLUMNS if not values[c]]
                if empty:
                    raise DataError(f"{path} line {line}: no value for {empty[0]}")
                yield line, values
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except csv.Error as exc:
        raise DataError(f"malformed CSV {path}: {exc}") from None
    if n == 0:
        raise DataError(f"{path} has a header but no rows")


def _resolved(path: Path, line: int, row: dict[str, str], mixtures: dict[MixtureKey, tuple[str, ...]]):
    try:
        return (resolve_mixture(mixtures, row["Dataset"], row["Mixture_1"]),
                resolve_mixture(mixtures, row["Dataset"], row["Mixture_2"]))
    except InputError as exc:
        raise DataError(f"{path} line {line}: {exc}") from None


def check_pairs_csv(path: Path, mixtures: dict[MixtureKey, tuple[str, ...]]) -> tuple[int, dict[str, int]]:
    """Every row of the CSV ``path`` read and its two mixtures resolved in ``mixtures``; returns
    ``(rows, {dataset: first line naming it})``. DataError naming the file and line otherwise."""
    n, datasets = 0, {}
    for line, row in iter_pairs_csv(path):
        _resolved(path, line, row, mixtures)
        datasets.setdefault(row["Dataset"], line)
        n += 1
    return n, datasets


def check_datasets(path: Path, datasets: dict[str, int], known: list[str]) -> None:
    """DataError naming the first line whose experiment the model does not know."""
    unknown = sorted((line, d) for d, line in datasets.items() if d not in known)
    if unknown and known:
        line, d = unknown[0]
        raise DataError(f"{path} line {line}: unknown dataset {d!r} (the model knows {', '.join(known)})")


def write_to(out: Path | None, write: Callable[[TextIO], int]) -> int:
    """``write(fh)`` into ``out`` atomically (nothing is left behind if it fails or is interrupted),
    or into stdout when ``out`` is None."""
    if out is None:
        return write(sys.stdout)
    with atomic_write(Path(out), "w", encoding="utf-8", newline="") as fh:
        return write(fh)


def _chunks(rows: Iterator, size: int) -> Iterator[list]:
    while chunk := list(islice(rows, size)):
        yield chunk


def predict_pairs_csv(predictor, path: Path, mixtures: dict[MixtureKey, tuple[str, ...]], out: TextIO,
                      total: int | None = None, progress: bool = True, chunk_rows: int = CHUNK_ROWS) -> int:
    """Write ``Dataset,Mixture_1,Mixture_2,Predicted_Experimental_Values`` for every row of the
    CSV ``path`` to ``out``, :data:`CHUNK_ROWS` rows at a time, with ``predictor`` (a
    :class:`~olfaction.predictor.MixturePredictor` or :class:`~olfaction.inference.OnnxPredictor`);
    returns the number of rows. ``total`` (from :func:`check_pairs_csv`) sizes the progress bar."""
    from tqdm import tqdm

    writer = csv.writer(out)
    writer.writerow(OUT_COLUMNS)
    done = 0
    with tqdm(total=total, desc="predict", unit="pair", file=sys.stderr, disable=not progress) as bar:
        for chunk in _chunks(iter_pairs_csv(path), chunk_rows):
            sides = [_resolved(path, line, row, mixtures) for line, row in chunk]
            # the mixtures of the table are validated and canonical: predict_components skips re-parsing
            pred = predictor.predict_components([a for a, _ in sides], [b for _, b in sides],
                                                [row["Dataset"] for _, row in chunk])["combined"]
            writer.writerows([row["Dataset"], row["Mixture_1"], row["Mixture_2"], float(p)]
                             for (_, row), p in zip(chunk, pred, strict=True))
            done += len(chunk)
            bar.update(len(chunk))
    return done


# ----------------------------------------------------------------------------- mixtures text


def iter_mixtures_text(path: Path) -> Iterator[tuple[int, tuple[str, ...]]]:
    """``(line, validated canonical mixture)`` for every line of a mixtures text file (one
    ``;``-separated SMILES mixture per line; blank lines and lines starting with ``#`` skipped),
    streamed. DataError naming the file and line: missing file, not UTF-8, a bad mixture (invalid
    or duplicate SMILES, too many components), no mixture at all."""
    from .data import parse_mixture_text

    path = Path(path)
    if not path.is_file():
        raise DataError(f"mixtures file not found: {path}")
    n = 0
    try:
        with open(path, encoding="utf-8-sig") as fh:
            for line_no, text in enumerate(fh, start=1):
                if not text.strip() or text.lstrip().startswith("#"):
                    continue
                try:
                    mixture = parse_mixture_text(text.strip(), where=f"mixture of line {line_no}")
                except InputError as exc:
                    raise DataError(f"{path} line {line_no}: {exc}") from None
                n += 1
                yield line_no, mixture
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if n == 0:
        raise DataError(f"{path} holds no mixture (one ';'-separated SMILES mixture per line)")


def check_mixtures_text(path: Path) -> int:
    """Every line of the mixtures file parsed (see :func:`iter_mixtures_text`); their number."""
    return sum(1 for _ in iter_mixtures_text(path))


def predict_labels_file(predictor, path: Path, out: TextIO, k: int = 5, total: int | None = None,
                        progress: bool = True, chunk_rows: int = CHUNK_ROWS) -> int:
    """Write ``Line,Mixture,Label_1,Probability_1,...,Label_k,Probability_k`` (the ``k`` most
    probable odour labels) for every mixture of the file ``path`` to ``out``, :data:`CHUNK_ROWS`
    mixtures at a time; returns the number of mixtures."""
    from tqdm import tqdm

    k = min(k, len(predictor.label_names)) or k
    writer = csv.writer(out)
    writer.writerow(["Line", "Mixture"] + [f"{c}_{i}" for i in range(1, k + 1) for c in ("Label", "Probability")])
    done = 0
    with tqdm(total=total, desc="labels", unit="mixture", file=sys.stderr, disable=not progress) as bar:
        for chunk in _chunks(iter_mixtures_text(path), chunk_rows):
            prob = predictor.predict_labels([m for _, m in chunk])
            for (line, mixture), p in zip(chunk, prob, strict=True):
                top = p.argsort()[::-1][:k]
                writer.writerow([line, ";".join(mixture)]
                                + [v for i in top for v in (predictor.label_names[i], round(float(p[i]), 6))])
            done += len(chunk)
            bar.update(len(chunk))
    return done
