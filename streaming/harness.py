"""The online stream harness: feed a stream to an online method in order, timed (``run_online``), and
the process plumbing of the long commands (threads, status line, worker pool); shared by the bench and
the experiments."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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
    """What an online method produced on a stream: ``completed (T, n)`` (the estimate when each sample
    arrived), ``routes (T,)`` (−1 for single-subspace methods), the mean wall time per sample and the
    bytes of the method's state."""

    completed: np.ndarray
    routes: np.ndarray
    time_per_sample_s: float
    memory_bytes: int


def run_online(model, values: np.ndarray, epoch: np.ndarray | None = None) -> StreamRun:
    """Feed the ``(T, n)`` stream (NaN = unobserved) to ``model`` in order through ``model.process(values,
    epoch=epoch) -> (completed (T, n), routes (T,))``, timed (validation included); ``epoch (T,)`` is
    optional. ``model`` also has ``memory_bytes()``."""
    t0 = time.perf_counter()
    completed, routes = model.process(values, epoch=epoch)
    elapsed = time.perf_counter() - t0
    return StreamRun(completed, routes, elapsed / values.shape[0], model.memory_bytes())
