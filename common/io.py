"""Atomic file writes: a result or checkpoint is either the old file or the complete new one."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import math
import os
import signal
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from common.errors import DataError


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks (the suite's one file digest: data checksums,
    shipped weights, caches)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()

_TMP_SUFFIX = ".tmp"


def _temp_prefix(path: Path) -> str:
    return f".{path.name}."


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def sweep_stale_temps(path: str | os.PathLike) -> list[Path]:
    """Remove temp files of ``path`` left by a killed writer (``.<name>.<pid>.<random>.tmp`` whose
    process is gone; SIGKILL gives no chance to clean up). Returns the removed paths."""
    path = Path(path)
    removed = []
    prefix = _temp_prefix(path)
    try:
        candidates = [c for c in path.parent.iterdir() if c.name.startswith(prefix) and c.name.endswith(_TMP_SUFFIX)]
    except OSError:
        return removed
    for cand in candidates:
        pid = cand.name[len(prefix) :].split(".", 1)[0]
        if not pid.isdigit() or cand.resolve() in _ACTIVE or (int(pid) != os.getpid() and _pid_alive(int(pid))):
            continue
        with contextlib.suppress(OSError):
            cand.unlink()
            removed.append(cand)
    return removed


_ACTIVE: set[Path] = set()  # temp files this process is writing right now


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM arriving inside the block are held and delivered when it ends (to the
    handlers in force before it), so a short critical write (a checkpoint swap) is never cut in
    half. Main thread only (Python runs signal handlers there); elsewhere a plain block. An ignored
    signal stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    previous = {s: h for s, h in previous.items() if h not in (None, signal.SIG_IGN)}
    for s in previous:
        signal.signal(s, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        if held:
            signal.raise_signal(held[0])


def _umask() -> int:
    try:  # read it where the kernel reports it: setting it to read it races with other threads
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", **kwargs: Any) -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success it replaces ``path`` in one step
    (``os.replace``), on error (or SIGINT, or SIGTERM under :func:`common.cli.cli_main`) it is
    removed and ``path`` is left untouched.

    The new file keeps the permission bits of the file it replaces (a new file gets the usual
    ``0o666 & ~umask``). Temp files of ``path`` left by a killed earlier writer are swept first."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write supports modes 'w' and 'wb', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale_temps(path)
    try:
        perms = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        perms = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f"{_temp_prefix(path)}{os.getpid()}.", suffix=_TMP_SUFFIX, dir=path.parent)
    tmp = Path(tmp).resolve()
    _ACTIVE.add(tmp)
    try:
        os.chmod(tmp, perms)
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    finally:
        _ACTIVE.discard(tmp)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if getattr(obj, "ndim", 0) and hasattr(obj, "tolist"):  # numpy / torch arrays
        return _jsonable(obj.tolist())
    if hasattr(obj, "item") and callable(obj.item):  # numpy / torch scalars
        return _jsonable(obj.item())
    if isinstance(obj, Path):
        return str(obj)
    return obj


def dumps_json(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` of ``obj`` as strict JSON: NaN/inf become null, NumPy/torch scalars plain
    numbers (``allow_nan=False`` guards the result)."""
    return json.dumps(_jsonable(obj), allow_nan=False, **kwargs)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented strict JSON atomically (NaN/inf become null)."""
    text = dumps_json(obj, indent=2, sort_keys=False)
    with atomic_write(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")
    return Path(path)


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"missing JSON file {path}")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"malformed JSON in {path}: {exc}") from exc


def append_jsonl(path: str | os.PathLike, record: dict) -> None:
    """Append one record as a JSON line and flush it to disk (a resumable run's progress file):
    a kill leaves at most the last line torn, which :func:`read_jsonl_resumable` skips."""
    line = dumps_json(record) + "\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def read_jsonl_resumable(path: str | os.PathLike, what: str = "progress file") -> list[dict]:
    """The records of a JSON-lines progress file written by :func:`append_jsonl` (``[]`` when it
    does not exist). A torn last line (an interrupted append) is skipped with a warning on stderr;
    anything else malformed (a bad line before the last, a non-object, non-UTF-8 bytes) is a
    DataError naming the file and the line, since resuming from it would silently lose work."""
    import sys

    path = Path(path)
    if not path.exists():
        return []
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{what} {path} is not UTF-8 text ({exc.reason} at byte {exc.start}); "
                        "delete it to start over") from None
    lines = text.split("\n")
    complete = text.endswith("\n")
    if complete:
        lines = lines[:-1]
    records = []
    for i, line in enumerate(lines, 1):
        last = i == len(lines)
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            if last:
                print(f"warning: {what} {path}: skipped the torn last line {i} (an interrupted write)",
                      file=sys.stderr)
                continue
            raise DataError(f"{what} {path} line {i} is not JSON ({exc.msg}); delete it to start over") from None
        if not isinstance(rec, dict):
            raise DataError(f"{what} {path} line {i} is not a JSON object; delete it to start over")
        if last and not complete:
            print(f"warning: {what} {path}: line {i} has no newline (an interrupted write); kept, it parses",
                  file=sys.stderr)
        records.append(rec)
    return records


def read_npz(path: str | os.PathLike, what: str = "file") -> dict[str, Any]:
    """All arrays of an ``.npz`` archive (``allow_pickle=False``) as ``{name: ndarray}``; DataError
    naming the file and the problem when it is missing, empty, not a zip archive, truncated or
    holds pickled objects."""
    import zipfile
    import zlib

    import numpy as np

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{what} not found: {path}")
    if path.stat().st_size == 0:
        raise DataError(f"{what} {path} is empty")
    if not zipfile.is_zipfile(path):
        raise DataError(f"{what} {path} is not an .npz archive (truncated or another format)")
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise DataError(f"cannot read {what} {path}: {exc}") from exc


def write_csv(path: str | os.PathLike, rows: list[dict]) -> Path:
    """Write ``rows`` (dicts; columns = union of keys in first-seen order) as CSV atomically."""
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    with atomic_write(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return Path(path)
