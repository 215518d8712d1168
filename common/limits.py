"""The suite's one set of limit helpers: ``--force``, the machine's RAM and byte counts in messages.

Each app keeps its own maxima and estimates (``<app>/limits.py``, ``retrieval/bounds.py``); they
share how a limit is offered, lifted and printed:

    add_force_arg(parser, "train more than 100000 steps")   # --force, saying what it allows
    physical_memory_bytes()                                  # RAM in bytes, None where unknown
    gib(3 * 2**30)                                           # "3.0 GiB"
"""

from __future__ import annotations

import argparse
import os


def add_force_arg(parser: argparse.ArgumentParser, what: str) -> None:
    """Add ``--force``: do ``what`` although it is over a documented maximum or budget."""
    parser.add_argument("--force", action="store_true", help=f"{what} (refused otherwise)")


def physical_memory_bytes() -> int | None:
    """The machine's RAM in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def gib(n_bytes: float) -> str:
    """``n_bytes`` in GiB with one decimal, as the refusals print it."""
    return f"{n_bytes / 2**30:,.1f} GiB"
