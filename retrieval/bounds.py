"""Memory estimates checked before a retrieval command starts work (no torch import: the CLI
checks them before loading anything).

    check_search_memory(n=1_000_000, n_queries=1000, force=False)   # InputError when it cannot fit
"""

from __future__ import annotations

from common.errors import InputError
from common.limits import gib, physical_memory_bytes


def search_bench_bytes(n: int, n_queries: int, d: int = 256) -> int:
    """Peak memory estimate of the search suite: the float32 gallery, its copies in the flat and
    IVF indexes, three (64, n) score blocks of the brute force and the queries' results."""
    return 4 * n * (3 * d + 3 * 64) + 16 * n_queries * (d + 128)


def check_search_memory(n: int, n_queries: int, force: bool) -> None:
    """InputError naming the estimate when the search suite would not fit in RAM (unless ``force``)."""
    need, have = search_bench_bytes(n, n_queries), physical_memory_bytes()
    if have is not None and need > have and not force:
        raise InputError(f"--search-n {n:,} needs about {gib(need)} of memory, this machine has "
                         f"{gib(have)} (lower --search-n, or pass --force)")
