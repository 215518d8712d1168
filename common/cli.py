"""CLI conventions shared by every command line of the suite.

- :class:`ArgumentParser`: argparse whose usage errors are one line (``error: ...``, exit 2 through
  :func:`cli_main`) instead of usage + ``prog: error:``.
- Number types (``positive_int``, ``nonneg_int``, ``seed_int``, ``positive_float``, ``finite_float``,
  ``float_in(lo, hi)``, ``fraction``, ``probability``, ``int_list``): zero, negative, NaN and inf are
  refused at parse time, before any work starts.
- :func:`check_outputs`: every path a command writes is checked up front (parent is a directory and
  writable, file vs directory, existing output needs ``--overwrite``, an input is never an output).
- :func:`cli_main`: a ``MoeAppsError`` prints ``error: <message>`` and returns 2; SIGTERM unwinds
  like Ctrl-C so atomic writes clean up; a closed stdout (``| head``) exits quietly.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from common.errors import InputError, MoeAppsError

EXIT_BAD_INPUT = 2
EXIT_BROKEN_PIPE = 128 + 13  # what a shell reports for a process killed by SIGPIPE
EXIT_SIGTERM = 128 + 15
SEED_MAX = 2**32 - 1

PathLike = str | os.PathLike


class UsageError(InputError):
    """A command-line argument is malformed (unknown option, bad number, missing value)."""


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors raise :class:`UsageError` (one line, exit 2 under
    :func:`cli_main`) instead of printing the usage block and exiting. Subparsers made by
    ``add_subparsers`` are of this class too."""

    def error(self, message: str):  # noqa: D102 - argparse hook
        raise UsageError(f"{message} (see '{self.prog} --help')")


# ----------------------------------------------------------------------------- number types


def _parse_number(text: str, kind: type) -> int | float:
    try:
        value = kind(text)
    except (TypeError, ValueError):
        noun = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"expected {noun}, got {text!r}") from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def whole_number(value, name: str, lo: int, hi: int) -> int:
    """A number a page sent (a slider or number box: int, float or numeric string) as an int in
    ``[lo, hi]``; InputError saying what to enter for anything else (a fraction, NaN, a bool)."""
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    if not math.isfinite(number) or number != int(number) or not lo <= number <= hi:
        raise InputError(f"{name} must be a whole number from {lo} to {hi}, got {value!r}")
    return int(number)


def int_in(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    """argparse type: an integer in ``[lo, hi]`` (a ``None`` bound is open-ended)."""

    def parse(text: str) -> int:
        value = _parse_number(text, int)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            if hi is None:
                raise argparse.ArgumentTypeError(f"must be an integer >= {lo}, got {text!r}")
            if lo is None:
                raise argparse.ArgumentTypeError(f"must be an integer <= {hi}, got {text!r}")
            raise argparse.ArgumentTypeError(f"must be an integer in [{lo}, {hi}], got {text!r}")
        return value

    parse.__name__ = "int"
    return parse


def float_in(
    lo: float | None = None, hi: float | None = None, *, lo_open: bool = False, hi_open: bool = False
) -> Callable[[str], float]:
    """argparse type: a finite float in the interval from ``lo`` to ``hi`` (closed unless
    ``lo_open``/``hi_open``; a ``None`` bound is open-ended). NaN and inf are always refused."""
    left = "(" if lo_open else "["
    right = ")" if hi_open else "]"
    interval = f"{left}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}{right}"

    def parse(text: str) -> float:
        value = _parse_number(text, float)
        too_low = lo is not None and (value <= lo if lo_open else value < lo)
        too_high = hi is not None and (value >= hi if hi_open else value > hi)
        if too_low or too_high:
            raise argparse.ArgumentTypeError(f"must be in {interval}, got {text!r}")
        return value

    parse.__name__ = "float"
    return parse


positive_int = int_in(1)
positive_int.__doc__ = "argparse type: an integer >= 1 (counts, sizes, epochs, steps)."
nonneg_int = int_in(0)
nonneg_int.__doc__ = "argparse type: an integer >= 0 (counts where 0 means none)."
seed_int = int_in(0, SEED_MAX)
seed_int.__doc__ = "argparse type: a random seed in [0, 2**32 - 1] (NumPy and torch both accept it)."
finite_float = float_in()
finite_float.__doc__ = "argparse type: any finite float."
positive_float = float_in(0.0, lo_open=True)
positive_float.__doc__ = "argparse type: a finite float > 0 (learning rates, guidance scales)."
nonneg_float = float_in(0.0)
nonneg_float.__doc__ = "argparse type: a finite float >= 0 (noise levels, weights)."
fraction = float_in(0.0, 1.0, lo_open=True)
fraction.__doc__ = "argparse type: a float in (0, 1] (an observed fraction, a share of the data)."
probability = float_in(0.0, 1.0)
probability.__doc__ = "argparse type: a float in [0, 1]."


def int_list(lo: int = 1) -> Callable[[str], tuple[int, ...]]:
    """argparse type: comma-separated integers, each >= ``lo`` (e.g. ``--parts 8,16,32``)."""
    item = int_in(lo)

    def parse(text: str) -> tuple[int, ...]:
        parts = [p.strip() for p in text.split(",") if p.strip()]
        if not parts:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
        try:
            return tuple(item(p) for p in parts)
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"comma-separated integers >= {lo} expected: {exc}") from None

    parse.__name__ = "int list"
    return parse


# ----------------------------------------------------------------------------- common options


def add_overwrite_arg(parser: argparse.ArgumentParser) -> None:
    """Add ``--overwrite``: without it a command refuses to replace an existing output."""
    parser.add_argument(
        "--overwrite", action="store_true", help="replace existing outputs (never an input file)"
    )


def add_common_args(parser: argparse.ArgumentParser, out_default: str | None = None) -> None:
    """Add ``--seed``, ``--out``, ``--overwrite`` and ``--data-dir`` to a (sub)parser."""
    parser.add_argument("--seed", type=seed_int, default=0, help="random seed (default 0)")
    parser.add_argument("--out", default=out_default, help="output file or directory")
    add_overwrite_arg(parser)
    parser.add_argument(
        "--data-dir",
        default=None,
        help="data directory (default: $MOE_APPS_DATA, else ../shared/data beside the project)",
    )


# ----------------------------------------------------------------------------- output checks


def _resolved(path: PathLike) -> Path:
    return Path(path).expanduser().resolve()


def _same(a: Path, b: Path) -> bool:
    if a == b:
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)  # hard links
    except OSError:
        return False


def _check_writable_parent(path: Path) -> None:
    """The nearest existing ancestor of ``path`` must be a directory we can create files in."""
    anc = path.parent
    while not anc.exists() and not anc.is_symlink():
        anc = anc.parent
    if not anc.is_dir():
        raise InputError(f"cannot write {path}: {anc} is a file, not a directory")
    try:  # a real probe: permission bits, read-only mounts and /proc all answer here
        fd, probe = tempfile.mkstemp(prefix=".moe-apps-probe.", dir=anc)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {anc} is not writable ({exc.strerror})") from None
    os.close(fd)
    os.unlink(probe)


def check_outputs(
    files: Iterable[PathLike | None] = (),
    dirs: Iterable[PathLike | None] = (),
    *,
    inputs: Iterable[PathLike | None] = (),
    overwrite: bool = False,
) -> None:
    """Check every path a command will write, before any work starts (``None`` entries skipped).

    ``files`` are file outputs, ``dirs`` output directories, ``inputs`` every file or directory the
    command reads. Raises :class:`InputError` when an output is an input (even with
    ``overwrite``), its parent is a file or not writable, a file output is an existing directory
    or a directory output an existing file, or the output exists (a non-empty directory) and
    ``overwrite`` is false."""
    ins = [_resolved(p) for p in inputs if p is not None]
    for kind, paths in (("file", files), ("dir", dirs)):
        for raw in paths:
            if raw is None:
                continue
            path = _resolved(raw)
            for src in ins:
                if _same(path, src):
                    raise InputError(f"output {raw} is also an input of this command; choose another path")
            _check_writable_parent(path)
            if kind == "file":
                if path.is_dir():
                    raise InputError(f"{raw} is a directory; expected a file path")
                if path.exists() and not overwrite:
                    raise InputError(f"{raw} exists (pass --overwrite to replace it)")
            else:
                if path.exists() and not path.is_dir():
                    raise InputError(f"{raw} is a file; expected a directory")
                if path.is_dir():
                    if not os.access(path, os.W_OK | os.X_OK):
                        raise InputError(f"cannot write into {raw}: permission denied")
                    if not overwrite and any(path.iterdir()):
                        raise InputError(f"{raw} is not empty (pass --overwrite to replace its results)")


# ----------------------------------------------------------------------------- entry points


def _sigterm_handler(owner_pid: int):
    """SIGTERM -> SystemExit in the CLI's own process. A process forked from it (a
    multiprocessing pool worker, e.g. Mordred's) inherits the handler; there it restores the default
    action and re-sends the signal, so ``Pool.terminate()`` still ends the worker at once instead of
    leaving it alive (and holding the parent's pipes open)."""

    def handler(signum, frame):
        if os.getpid() != owner_pid:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise SystemExit(EXIT_SIGTERM)

    return handler


@contextlib.contextmanager
def _sigterm_unwinds():
    """While a CLI runs, SIGTERM raises SystemExit so ``with`` blocks (atomic writes) clean up."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _sigterm_handler(os.getpid()))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _silence_stdout() -> None:
    # stdout's reader is gone: point fd 1 at /dev/null so the interpreter's final flush is quiet
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def cli_main(fn: Callable[..., int | None]) -> Callable[..., int]:
    """Wrap a CLI entry point: a ``MoeAppsError`` (bad input, missing file, corrupt checkpoint,
    usage error) prints one ``error: <message>`` line on stderr and returns 2;
    ``KeyboardInterrupt`` returns 130, SIGTERM 143 (both after ``with`` blocks have cleaned up);
    a closed stdout returns 141 silently. Other exceptions are bugs and propagate with a
    traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs) -> int:
        try:
            with _sigterm_unwinds():
                code = fn(*args, **kwargs)
            sys.stdout.flush()
        except MoeAppsError as exc:
            message = " ".join(str(exc).split()) or type(exc).__name__
            print(f"error: {message}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except BrokenPipeError:
            _silence_stdout()
            return EXIT_BROKEN_PIPE
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        return 0 if code is None else int(code)

    return wrapper


def subcommand_main(build_parser: Callable[[], argparse.ArgumentParser]) -> Callable[..., int]:
    """``main(argv=None)`` for a parser whose subcommands ``set_defaults(fn=handler)``: parses,
    calls ``handler(args)``, and reports errors as :func:`cli_main` does."""

    @cli_main
    def main(argv: list[str] | None = None) -> int:
        args = build_parser().parse_args(argv)
        return args.fn(args)

    return main
