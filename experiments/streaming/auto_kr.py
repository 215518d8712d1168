"""The K/r estimator on the stress families (``mosaic bench --suite auto-kr``): per (family, observed
fraction) cell of ``streaming.stress``, how often ``streaming.select.estimate_K_r`` finds the true
``(K, r)`` and what MoSAIC's NRMSE loses with the estimate instead of the truth."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from common.cli import cli_main
from common.errors import DataError, InputError
from common.io import atomic_write, read_json, read_jsonl_resumable, write_json
from common.report import markdown_table
from streaming.bench import (
    EPOCHS,
    FAMILIES,
    OBS_FRACS,
    SAMPLES_PER_EPOCH,
    SHAPE,
    TEST_SEEDS,
    TUNING_SEEDS,
    auto_kr_cell,
    nrmse_rows,
    stream_config,
)
from streaming.harness import announce, limit_threads, run_online


def auto_kr_trial(family: str, obs_frac: float, seed_index: int, seed: int, device: torch.device | None = None) -> dict:
    """One stream of the stress suite: ``streaming.select.estimate_K_r`` on its source samples, and
    MoSAIC's NRMSE (epochs given) with the estimated and with the true ``(K, r)`` (one run when equal);
    the routing runs on ``device`` (None: the CPU)."""
    import warnings

    from streaming.data import generate_stream
    from streaming.model import MoSAIC
    from streaming.select import estimate_K_r

    limit_threads()
    stream = generate_stream(stream_config(family, obs_frac, seed))
    n, r_true, K_true = SHAPE
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = estimate_K_r(stream.source_values, seed=seed_index, device=device)
    select_s = time.perf_counter() - t0

    def nrmse(K: int, r: int) -> float:
        model = MoSAIC(r, K, seed=seed_index).to(device).fit(stream.source_values)
        return nrmse_rows(stream, run_online(model, stream.values, stream.epoch).completed)["nrmse"]

    true_nrmse = nrmse(K_true, r_true)
    correct = (est.K, est.r) == (K_true, r_true)
    est_nrmse = true_nrmse if correct else nrmse(est.K, est.r)
    return {"cell": auto_kr_cell(family, obs_frac), "family": family, "obs_frac": obs_frac, "seed": seed,
            "K_true": K_true, "r_true": r_true, "K_hat": est.K, "r_hat": est.r, "correct": correct,
            "nrmse_true_Kr": true_nrmse, "nrmse_estimated_Kr": est_nrmse, "nrmse_ratio": est_nrmse / true_nrmse,
            "select_s": select_s, "points": len(est.table), "margin": est.margin, "warnings": est.warnings}


def _json_scalar(value):
    """NumPy scalars in a trial record as Python numbers (``json.dumps``' ``default``)."""
    return value.item() if isinstance(value, np.generic) else str(value)


def partial_path(json_path) -> Path:
    """Where ``run_auto_kr`` appends each finished trial (one JSON line) while it runs: ``F.partial.jsonl``
    next to the result ``F.json``."""
    path = Path(json_path)
    return path.with_name(path.stem + ".partial.jsonl")


def run_auto_kr(json_path, families=None, obs_fracs=None, seeds: int | None = None, tuning: bool = False,
                command: str = "", resume: bool = False, device: torch.device | None = None) -> dict:
    """The K/r estimator on every (family, observed fraction) cell
    of the stress suite (true ``(K, r) = (4, 4)``), on the first ``seeds`` test seeds (``tuning``: the
    tuning seeds). Per cell: how often the estimate is exactly right and the mean ratio of MoSAIC's
    NRMSE with the estimated vs the true ``(K, r)``; the targets (>= 90 % of cells right, NRMSE
    within 10 %) over cells. Writes ``json_path`` (when given) and prints the table.

    The trials run seed after seed (every cell of the first seed, then of the second, ...), and each
    finished one is appended to ``partial_path(json_path)``; ``resume`` reuses the trials found there and
    in an existing ``json_path`` (same cell and seed; marked ``"resumed": true``) instead of recomputing
    them, so an interrupted run continues where it stopped and a run with more seeds extends a finished
    one. Once the JSON is written the partial file keeps only the trials the JSON does not hold (none:
    it is removed)."""
    for f in families or ():
        if f not in FAMILIES:
            raise InputError(f"unknown family {f!r}; choose from {sorted(FAMILIES)}")
    seed_list = (TUNING_SEEDS if tuning else TEST_SEEDS)[: seeds or None]
    partial = partial_path(json_path) if json_path else None
    done: dict[tuple[str, int], dict] = {}
    if resume and partial is not None:
        found = read_json(json_path).get("trials", []) if Path(json_path).exists() else []
        found += read_jsonl_resumable(partial, "auto-kr progress file")
        for t in found:
            if not isinstance(t, dict) or not isinstance(t.get("cell"), str) or not isinstance(t.get("seed"), int):
                raise DataError(f"a trial in {json_path} or {partial} has no cell and seed: {str(t)[:80]}; "
                                "delete the file to start over")
            done[(t["cell"], t["seed"])] = {**t, "resumed": True}
    if partial is not None:
        partial.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(partial, "w", encoding="utf-8") as fh:  # Ctrl-C here keeps the old progress file
            fh.write("".join(json.dumps(t, default=_json_scalar) + "\n" for t in done.values()))
    announce(f"auto-kr: {len(seed_list)} seeds, {len(done)} trials reused")
    t0 = time.perf_counter()
    trials = []
    for i, seed in enumerate(seed_list):
        for f in families or FAMILIES:
            for o in obs_fracs or OBS_FRACS:
                trial = done.get((auto_kr_cell(f, o), seed))
                if trial is None:
                    trial = auto_kr_trial(f, o, i, seed, device=device)
                    if partial is not None:
                        with partial.open("a") as fh:
                            fh.write(json.dumps(trial, default=_json_scalar) + "\n")
                            fh.flush()  # a kill leaves at most this line torn (read_jsonl_resumable skips it)
                trials.append(trial)
    order = {c: j for j, c in enumerate(auto_kr_cell(f, o) for f in families or FAMILIES for o in obs_fracs or OBS_FRACS)}
    trials.sort(key=lambda t: (order[t["cell"]], seed_list.index(t["seed"])))
    cells = []
    for cell in dict.fromkeys(t["cell"] for t in trials):
        sel = [t for t in trials if t["cell"] == cell]
        ratio = np.array([t["nrmse_ratio"] for t in sel])
        cells.append({"cell": cell, "seeds": len(sel), "correct_share": float(np.mean([t["correct"] for t in sel])),
                      "estimates": [f"{t['K_hat']},{t['r_hat']}" for t in sel],
                      "nrmse_true_Kr": float(np.mean([t["nrmse_true_Kr"] for t in sel])),
                      "nrmse_estimated_Kr": float(np.mean([t["nrmse_estimated_Kr"] for t in sel])),
                      "nrmse_ratio_mean": float(ratio.mean()), "nrmse_ratio_max": float(ratio.max()),
                      "select_s_mean": float(np.mean([t["select_s"] for t in sel]))})
    targets = {"cells": len(cells), "cells_right_ge_90pct": sum(c["correct_share"] >= 0.9 for c in cells),
               "trials_right": sum(t["correct"] for t in trials), "trials": len(trials),
               "cells_nrmse_within_10pct": sum(c["nrmse_ratio_mean"] <= 1.1 for c in cells)}
    result = {"command": command, "seeds": list(seed_list), "tuning": tuning, "test_seeds": list(TEST_SEEDS),
              "tuning_seeds": list(TUNING_SEEDS), "shape_n_r_K": list(SHAPE), "epochs": EPOCHS,
              "samples_per_epoch": SAMPLES_PER_EPOCH, "families": FAMILIES, "targets": targets, "cells": cells,
              "trials": trials, "resumed_trials": sum(bool(t.get("resumed")) for t in trials),
              "wall_s": time.perf_counter() - t0}
    if json_path:
        write_json(json_path, result)
        used = {(t["cell"], t["seed"]) for t in trials}
        rest = [t for key, t in done.items() if key not in used]  # trials of other seeds or cells: kept for later
        if rest:
            partial.write_text("".join(json.dumps(t, default=_json_scalar) + "\n" for t in rest))
        else:
            partial.unlink(missing_ok=True)
    print(markdown_table(cells, ["cell", "seeds", "correct_share", "estimates", "nrmse_true_Kr", "nrmse_estimated_Kr",
                                 "nrmse_ratio_mean"]))
    print("targets:", targets)
    return result


@cli_main
def main(argv: list[str] | None = None) -> int:
    """``python -m experiments.streaming.auto_kr --json F [--families ...] [--obs-fracs ...] [--seeds N]
    [--tuning] [--resume]`` (it was ``mosaic bench --suite auto-kr``)."""
    from common.cli import ArgumentParser, check_outputs, fraction, positive_int
    from common.device import add_device_arg, resolve_device

    p = ArgumentParser(prog="python -m experiments.streaming.auto_kr", description="the K/r estimator study")
    p.add_argument("--json", default=None, help="write the result JSON here")
    p.add_argument("--families", nargs="+", default=None)
    p.add_argument("--obs-fracs", type=fraction, nargs="+", default=None)
    p.add_argument("--seeds", type=positive_int, default=None, help="only the first N (test or tuning) seeds")
    p.add_argument("--tuning", action="store_true", help="the tuning seeds instead of the test seeds")
    p.add_argument("--resume", action="store_true", help="reuse the trials of an interrupted run (F.partial.jsonl)")
    p.add_argument("--overwrite", action="store_true")
    add_device_arg(p)
    a = p.parse_args(argv)
    available = len(TUNING_SEEDS if a.tuning else TEST_SEEDS)
    if a.seeds is not None and a.seeds > available:
        raise InputError(f"--seeds {a.seeds}: there are only {available} {'tuning' if a.tuning else 'test'} seeds")
    if a.resume and not a.json:
        raise InputError("--resume needs --json (the interrupted run's trials are in F.partial.jsonl)")
    check_outputs(files=[a.json], overwrite=a.overwrite)
    limit_threads()
    run_auto_kr(a.json, families=a.families, obs_fracs=a.obs_fracs, seeds=a.seeds, tuning=a.tuning,
                command="python -m experiments.streaming.auto_kr " + " ".join(argv if argv is not None else sys.argv[1:]),
                resume=a.resume, device=resolve_device(a.device))
    return 0


if __name__ == "__main__":
    sys.exit(main())
