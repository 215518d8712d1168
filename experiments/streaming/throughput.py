"""Throughput (``mosaic bench --throughput``): time per sample of MoSAIC vs GROUSE on the same stream,
one thread, and the memory of the model state (``throughput_bench``, ``large_memory``)."""

from __future__ import annotations

import copy
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch

from common.io import write_csv, write_json
from common.report import markdown_table
from experiments.streaming.standard_bench import LARGE_CONFIG, OBS_FRAC
from streaming.harness import limit_threads


def float32_stream(stream):
    """``stream`` with its values, full matrix and source as float32 (half the memory of the large
    configs; MoSAIC computes in float64 all the same)."""
    for key in ("values", "full", "source_values"):
        setattr(stream, key, getattr(stream, key).astype(np.float32))
    return stream

def _time_per_sample_us(fn, T: int, repeats: int) -> tuple[float, float]:
    """Per-sample CPU time and wall time (µs) of ``fn()`` (which streams ``T`` samples), each the
    best of ``repeats`` runs. CPU time (``time.process_time``, one thread) is what one core
    spends; on a shared machine the wall time also counts the time other processes held it."""
    cpu, wall = [], []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        cpu.append((time.process_time() - c0) / T * 1e6)
        wall.append((time.perf_counter() - t0) / T * 1e6)
    return float(np.min(cpu)), float(np.min(wall))


def _stream_by_steps(model, X0: np.ndarray, M: np.ndarray, epoch: np.ndarray, fresh_copy: bool) -> None:
    """The stream one sample per ``process`` call (what a caller with one sample at a time pays)."""
    model = copy.deepcopy(model) if fresh_copy else model
    values = np.where(M, X0, np.nan)
    for j in range(X0.shape[0]):
        model.process(values[j : j + 1], epoch=epoch[j : j + 1])


def _process_copy(model, values: np.ndarray, epoch: np.ndarray) -> None:
    copy.deepcopy(model).process(values, epoch=epoch)


def _state_bytes(model, values: np.ndarray, epoch: np.ndarray, chunk: int = 50) -> tuple[int, int]:
    """Bytes of the model state (``memory_bytes``: every array of every component) at the end of the
    stream and their peak, read every ``chunk`` samples (untimed, on a copy of ``model``)."""
    model = copy.deepcopy(model)
    peak = model.memory_bytes()
    for s in range(0, values.shape[0], chunk):
        model.process(values[s : s + chunk], epoch=epoch[s : s + chunk])
        peak = max(peak, model.memory_bytes())
    return model.memory_bytes(), peak


def throughput_bench(
    out: Path, configs=None, samples: int = 4000, repeats: int = 3, seed: int = 0, large: bool = True,
    large_samples: int = 400, drift: str = "abrupt", device: torch.device | None = None,
) -> dict:
    """Time per sample of MoSAIC vs GROUSE (rank r) on the same stream, single thread.

    Per config: a 2-epoch stream of ``samples`` samples at the bench's observed fraction with
    ``drift`` at the epoch boundary (``"abrupt"``: one subspace replaced, so the change buffer and
    its provisional fits are timed too; ``"none"``: the steady-state path only); MoSAIC pretrained once, then each timed run starts from a copy of that model.
    Timed: ``MoSAIC.process`` on the whole stream (the batched path, validation included),
    ``MoSAIC.step`` per sample (routing through a ``moe.route_by_score`` call each), and GROUSE's
    ``step`` per sample (index extraction outside the timer, so the ratio is conservative).
    ``ratio = MoSAIC.process µs / (K × GROUSE µs)``; the targets are ratio ≤ 1.5 and
    ≥ 10,000 samples/s at (100, 10, 10), both on CPU time (wall-clock columns alongside).
    The model state's bytes (``memory_bytes``) are read every 50 samples of an untimed run:
    ``state_bytes_peak`` and its ratio to ``K n r`` float64s (the target: O(K n r)).
    Optionally the large config's memory (``large_memory``).
    Writes ``throughput.csv`` / ``throughput.json`` and prints a table.
    """
    from streaming.baselines import Grouse
    from streaming.data import STANDARD_CONFIGS, StreamConfig, generate_stream
    from streaming.model import MoSAIC

    limit_threads()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for config in configs or STANDARD_CONFIGS:
        n, r, K = STANDARD_CONFIGS[config]
        cfg = StreamConfig(n=n, r=r, K=K, obs_frac=OBS_FRAC.get(config, 0.4), drift=drift, epochs=2,
                           samples_per_epoch=samples // 2, seed=1000 + seed)
        stream = generate_stream(cfg)
        M = ~np.isnan(stream.values)
        X0 = np.where(M, stream.values, 0.0)
        T = stream.values.shape[0]
        pretrained = MoSAIC(r, K, seed=seed).to(device).fit(stream.source_values)
        proc_cpu, proc_wall = _time_per_sample_us(
            partial(_process_copy, pretrained, stream.values, stream.epoch), T, repeats)
        step_cpu, step_wall = _time_per_sample_us(
            partial(_stream_by_steps, pretrained, X0, M, stream.epoch, True), T, repeats)
        gr_cpu, gr_wall = _time_per_sample_us(
            partial(_stream_by_steps, Grouse(n, r, seed=seed), X0, M, stream.epoch, True), T, repeats)
        state_end, state_peak = _state_bytes(pretrained, stream.values, stream.epoch)
        rows.append({
            "config": config, "drift": drift, "n": n, "r": r, "K": K, "obs_frac": cfg.obs_frac, "T": T, "repeats": repeats,
            "mosaic_process_us": proc_cpu, "mosaic_process_wall_us": proc_wall,
            "mosaic_step_us": step_cpu, "mosaic_step_wall_us": step_wall,
            "grouse_us": gr_cpu, "grouse_wall_us": gr_wall,
            "mosaic_samples_per_s": 1e6 / proc_cpu, "mosaic_samples_per_s_wall": 1e6 / proc_wall,
            "ratio_vs_K_grouse": proc_cpu / (K * gr_cpu),
            "ratio_vs_K_grouse_wall": proc_wall / (K * gr_wall),
            "state_bytes_peak": state_peak, "state_bytes_end": state_end, "Knr_float64_bytes": K * n * r * 8,
            "state_peak_over_Knr": state_peak / (K * n * r * 8),
        })
    result: dict = {"rows": rows}
    main = [x for x in rows if x["config"] == "100-10-10"]
    result["targets"] = {
        "samples_per_s_ge_10000_at_100-10-10": bool(main and main[0]["mosaic_samples_per_s"] >= 10_000) if main else None,
        "ratio_le_1.5_all": all(x["ratio_vs_K_grouse"] <= 1.5 for x in rows),
        "state_peak_over_Knr_max": max((x["state_peak_over_Knr"] for x in rows), default=None),
    }
    if large:
        result["large"] = large_memory(samples=large_samples, seed=seed, device=device)
        result["targets"]["large_state_le_2_Knr_floats"] = result["large"]["state_over_Knr"] <= 2.0
    write_csv(out / "throughput.csv", rows)
    write_json(out / "throughput.json", result)
    cols = ["config", "drift", "T", "mosaic_process_us", "mosaic_samples_per_s", "mosaic_samples_per_s_wall", "mosaic_step_us",
            "grouse_us", "ratio_vs_K_grouse", "ratio_vs_K_grouse_wall", "state_peak_over_Knr"]
    print(markdown_table(rows, cols))
    if large:
        print("large:", result["large"])
    print("targets:", result["targets"])
    return result


def large_memory(samples: int = 400, seed: int = 0, device: torch.device | None = None) -> dict:
    """(10000, 10, 20): pretrain, then stream ``samples`` samples one by one under ``tracemalloc``.

    Reports the model state (``memory_bytes``: bases, counters, change buffer) against ``K n r``
    float64s, and the peak extra memory allocated while streaming (per-sample work arrays and any
    buffer growth), with the stream itself allocated before tracing starts.
    """
    import tracemalloc

    from streaming.data import StreamConfig, generate_stream
    from streaming.evaluate import nrmse_unobserved
    from streaming.model import MoSAIC

    n, r, K = LARGE_CONFIG
    # identifiability needs about 2 n r / (m - r) samples per class: 80 at 30% observed
    cfg = StreamConfig(n=n, r=r, K=K, obs_frac=0.3, epochs=2, samples_per_epoch=max(samples // 2, 1),
                       drift="abrupt", source_per_class=80, seed=seed)
    stream = float32_stream(generate_stream(cfg))
    t0 = time.perf_counter()
    model = MoSAIC(r, K, seed=seed, pretrain_restarts=1).to(device).fit(stream.source_values)
    pretrain_s = time.perf_counter() - t0
    M = ~np.isnan(stream.values)
    X0 = np.where(M, stream.values, 0.0).astype(np.float64)
    completed = np.empty(X0.shape)
    Knr_bytes = K * n * r * 8
    tracemalloc.start()
    base_now, _ = tracemalloc.get_traced_memory()
    t0 = time.perf_counter()
    for j in range(X0.shape[0]):
        completed[j] = model.process(stream.values[j : j + 1], epoch=stream.epoch[j : j + 1])[0][0]
    us = (time.perf_counter() - t0) / X0.shape[0] * 1e6
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    state = model.memory_bytes()
    return {
        "config": "10000-10-20", "T": int(X0.shape[0]), "state_bytes": state, "Knr_float64_bytes": Knr_bytes,
        "state_over_Knr": state / Knr_bytes, "stream_peak_extra_bytes": int(peak - base_now),
        "stream_peak_over_Knr": (peak - base_now) / Knr_bytes, "us_per_sample": us, "pretrain_s": pretrain_s,
        "nrmse": nrmse_unobserved(completed, stream.full, stream.values), "reseeds": len(model.reseeds_),
    }
