"""The online stream harness: feed a stream to an online method in order, timing it and taking
snapshots of its subspaces (``run_online``); shared by the benches, the demo and the experiments."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np


def limit_threads() -> None:
    """One BLAS and one torch thread: the per-sample work is many tiny matrix ops, where extra
    threads only add overhead (and parallel trials would oversubscribe the cores)."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    threadpool_limits(1)


def announce(what: str) -> None:
    """One status line on stderr as a long loop starts (stdout keeps the results only)."""
    print(f"{what} (Ctrl-C stops)", file=sys.stderr, flush=True)


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _worker_init() -> None:
    """Pool workers leave Ctrl-C to the parent, which terminates them (no traceback per worker), and
    take SIGTERM again (blocked in the parent while they were forked)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)


def map_jobs(fn: Callable, jobs: Sequence, workers: int = 1) -> list:
    """``[fn(j) for j in jobs]``, in order; with ``workers > 1`` in that many processes. On Ctrl-C or
    SIGTERM the workers are terminated at once (no job is left running after the command exits). The
    signals are held back while the workers are forked: one arriving inside ``fork`` would otherwise
    be swallowed by an after-fork hook ("Exception ignored") and the run would go on."""
    if workers <= 1:
        return [fn(j) for j in jobs]
    import multiprocessing

    pool = None
    try:
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            pool = multiprocessing.Pool(workers, initializer=_worker_init)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a signal that came meanwhile is raised here
        return pool.map(fn, jobs, chunksize=1)
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()


@dataclass
class StreamRun:
    """What an online method produced on a stream.

    ``completed (T, n)``: estimate at arrival time; ``routes (T,)`` (−1 for single-subspace
    methods); ``snapshot_t``: sample indices after which ``snapshots`` (each ``(K, n, r)``) were
    taken; ``time_per_sample_s``: mean wall time per sample; ``memory_bytes`` of the state.
    """

    method: str
    completed: np.ndarray
    routes: np.ndarray
    snapshot_t: list[int]
    snapshots: list[np.ndarray | None]
    time_per_sample_s: float
    memory_bytes: int
    reseeds: list = field(default_factory=list)


def run_online(
    model, values: np.ndarray, epoch: np.ndarray | None = None, snapshot_every: int = 0, name: str = ""
) -> StreamRun:
    """Feed the ``(T, n)`` stream (NaN = unobserved) to ``model`` in order: ``model.process(x (B, n),
    epoch=(B,)) -> (completed (B, n), routes (B,))`` on chunks of ``snapshot_every`` samples (the whole
    stream when 0), with a snapshot of ``model.bases_`` after each; ``epoch (T,)`` is passed on when
    given. ``model`` also has ``memory_bytes()``. Timing covers ``process`` (validation included).
    """
    T, n = values.shape
    completed = np.empty((T, n))
    routes = np.empty(T, np.int64)
    snap_t, snaps = [], []
    elapsed = 0.0
    chunk = snapshot_every or T
    for s in range(0, T, chunk):
        e = min(s + chunk, T)
        t0 = time.perf_counter()
        completed[s:e], routes[s:e] = model.process(values[s:e], epoch=None if epoch is None else epoch[s:e])
        elapsed += time.perf_counter() - t0
        if snapshot_every:
            snap_t.append(e - 1)
            snaps.append(model.bases_.copy())
    return StreamRun(
        method=name or type(model).__name__,
        completed=completed,
        routes=routes,
        snapshot_t=snap_t,
        snapshots=snaps,
        time_per_sample_s=elapsed / T,
        memory_bytes=model.memory_bytes(),
        reseeds=list(getattr(model, "reseeds_", [])),
    )
