"""Boundary checks of the retrieval data files: UTF-8 text and JSON read with one-line errors,
image ids that are names (never paths), lists of strings.

    from retrieval.layout_checks import check_id, read_json
    caps = read_json(path, "caption file")              # DataError: missing / not UTF-8 / not JSON
    ref = check_id(entry["candidate"], f"{path} entry 3")  # DataError: not a string, or a path
"""

from __future__ import annotations

import json
from pathlib import Path

from common.errors import DataError


def read_text(path: Path, what: str) -> str:
    """The UTF-8 text of ``path``; DataError naming ``what`` when it is missing or not UTF-8."""
    if not path.is_file():
        raise DataError(f"missing {what}: {path}")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{what} {path} is not UTF-8 text ({e.reason} at byte {e.start})") from None


def read_json(path: Path, what: str):
    """The JSON value in ``path``; DataError naming ``what`` when it is missing, not UTF-8 or not JSON."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{what} is not valid JSON: {path} ({e.msg} at line {e.lineno})") from None
    except RecursionError:
        raise DataError(f"{what} is not valid JSON: {path} (nested too deeply)") from None


def check_id(value, where: str) -> str:
    """``value`` as an image id: a non-empty string that is a file name stem, never a path
    (no ``/``, ``\\``, NUL, leading dot or surrounding space). ``where`` names the file and entry
    for the DataError."""
    if not isinstance(value, str):
        raise DataError(f"{where}: expected an image id (a string), got {type(value).__name__} {short(value)}")
    if (not value or value != value.strip() or value.startswith(".") or any(c in value for c in "/\\\0")
            or len(value) > 255):
        raise DataError(f"{where}: image id {short(value)} is not a plain name (ids are file names, not paths)")
    return value


def short(value, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for error messages."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def string_list(value, where: str, what: str) -> list[str]:
    """``value`` when it is a JSON list of strings, else a DataError naming ``where`` and ``what``
    (a caption string where a list belongs would otherwise be joined letter by letter)."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DataError(f"{where}: expected {what} as a JSON list of strings, got {short(value)}")
    return value
