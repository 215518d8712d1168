"""Shared checks for the bad-input tests of every app (``tests/<app>/test_bad_input.py``) and
``tests/common/test_cli_safety.py``: a bad input ends in exactly one ``error:`` line and exit 2, with no
traceback and nothing written; a long command stops soon after SIGINT / SIGTERM with the usual exit
code and no stray temporary file. Each check has a time bound, so a hang fails instead of blocking.

    from tests.bad_input import assert_refused, assert_stops_on_signal

    assert_refused(moh_main, ["sample", "--n", "1000000000000"], tmp_path, match="at most")
    assert_stops_on_signal(["-m", "vision.cli", "train", ...], tmp_path, signal.SIGINT, after_s=5)
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXIT_BAD_INPUT = 2
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


def snapshot(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file below ``root``."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def stray_temps(root: Path) -> list[str]:
    """Temporary files an interrupted write could leave below ``root``."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and (p.name.endswith((".tmp", ".part")) or ".tmp." in p.name))


class _TimedOut(BaseException):
    """Raised by the alarm that bounds :func:`assert_refused`."""


def assert_refused(main: Callable[[list[str]], int], argv: Sequence[str], root: Path, *, match: str | None = None,
                   timeout_s: float = 60.0, capsys=None) -> str:
    """Run ``main(argv)`` in this (the main) thread, bounded by ``timeout_s`` through SIGALRM, and
    assert exit 2, exactly one ``error:`` line on stderr (containing ``match`` when given), no
    traceback and every file below ``root`` unchanged. Returns the error line. (Not a worker thread:
    ``contextlib.redirect_stderr`` swaps the process-wide ``sys.stderr``, and a thread that outlived
    its test would put a stale stream back under a later test.)"""
    import contextlib
    import io

    before = snapshot(root)
    err, out = io.StringIO(), io.StringIO()

    def alarm(signum, frame):
        raise _TimedOut

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            code = main(list(argv))
    except _TimedOut:
        raise AssertionError(f"{list(argv)} still running after {timeout_s} s (a bound must refuse it)") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    text = err.getvalue()
    assert code == EXIT_BAD_INPUT, (code, out.getvalue()[-500:], text[-2000:])
    assert "Traceback" not in text
    lines = text.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), text
    if match is not None:
        assert match in lines[0], lines[0]
    assert snapshot(root) == before, "a refused command changed files"
    return lines[0]


def run_cli(argv: Sequence[str], cwd: Path | None = None, timeout_s: float = 120.0,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python <argv>`` (e.g. ``["-m", "vision.cli", ...]``) in a subprocess with the checkout on
    its path; killed after ``timeout_s``."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, *argv], cwd=cwd or ROOT, env=full_env, capture_output=True, text=True,
                          timeout=timeout_s)


def assert_stops_on_signal(argv: Sequence[str], workdir: Path, sig: int = signal.SIGINT, *, after_s: float = 3.0,
                           within_s: float = 10.0, ready: str | None = None, env: dict[str, str] | None = None) -> str:
    """Start ``python <argv>`` in ``workdir``, send ``sig`` once ``ready`` appears on its stderr (or after
    ``after_s`` seconds), and assert it exits within ``within_s`` seconds with 130 (SIGINT) or 143
    (SIGTERM), no traceback and no stray temporary file below ``workdir``. Returns its stderr."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.Popen([sys.executable, *argv], cwd=workdir, env=full_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    seen: list[str] = []
    ready_event = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            seen.append(line)
            if ready is None or ready in line:
                ready_event.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        if ready is not None:
            assert ready_event.wait(120), f"{ready!r} never appeared: {''.join(seen)[-2000:]}"
        else:
            time.sleep(after_s)
        assert proc.poll() is None, f"the command ended before the signal: {''.join(seen)[-2000:]}"
        proc.send_signal(sig)
        try:
            code = proc.wait(within_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError(f"still running {within_s} s after {signal.Signals(sig).name}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(5)
    text = "".join(seen)
    assert code == EXIT_CODES[sig], (code, text[-2000:])
    assert "Traceback" not in text, text[-2000:]
    assert not stray_temps(workdir), stray_temps(workdir)
    return text
