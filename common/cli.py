"""CLI conventions: common options, one-line errors and exit code 2 on bad input."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable

from common.errors import MoeAppsError

EXIT_BAD_INPUT = 2


def add_common_args(parser: argparse.ArgumentParser, out_default: str | None = None) -> None:
    """Add ``--seed``, ``--out`` and ``--data-dir`` to a (sub)parser."""
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--out", default=out_default, help="output file or directory")
    parser.add_argument(
        "--data-dir",
        default=None,
        help="data directory (default: $MOE_APPS_DATA, else ../shared/data beside the project)",
    )


def cli_main(fn: Callable[..., int | None]) -> Callable[..., int]:
    """Wrap a CLI entry point: a ``MoeAppsError`` (bad input, missing file, corrupt
    checkpoint) prints ``error: <message>`` on stderr and returns 2; ``KeyboardInterrupt``
    returns 130. Other exceptions are bugs and propagate with a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs) -> int:
        try:
            code = fn(*args, **kwargs)
        except MoeAppsError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
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
