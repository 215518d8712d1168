"""Bounds checked before a retrieval command starts work (no torch import): the maxima of the
``moa3cir`` count options (refused at parse time) and the search suite's memory estimate.

    check_search_memory(n=1_000_000, n_queries=1000, force=False)   # InputError when it cannot fit
"""

from __future__ import annotations

from common.cli import int_in
from common.errors import InputError
from common.limits import gib, physical_memory_bytes

MAX_EPOCHS = 1000
MAX_AUGMENT = 100_000
MAX_THREADS = 256
MAX_K = 10_000
MAX_NLIST = 65_536
MAX_SEARCH_N = 1_000_000_000
MAX_SEARCH_QUERIES = 100_000
NUM_BLOCKS = 16  # MBConv blocks of EfficientNet-Lite0 (common.image_encoder.NUM_BLOCKS)
epochs_int = int_in(0, MAX_EPOCHS)


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
