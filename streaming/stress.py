"""Stress suite (``mosaic bench --suite stress``): MoSAIC against the pretrained k-GROUSE, on streams
from generator families it was not tuned on.

A *cell* is ``family/obsPP/spec/epochs``:

* ``family``: a generator of ``streaming.data`` (``FAMILIES``): drift kinds (per-subspace geodesic,
  shared rotation, independent rotations, random walk inside epochs, abrupt replacement, abrupt +
  gradual) and, on the geodesic drift, non-uniform observation probabilities, heavy-tailed noise,
  class imbalance (one class 5 %), data not unit-scaled;
* ``obsPP``: observed fraction 20 / 35 / 50 %;
* ``spec``: the model's ``K`` and ``r`` exact, or over-/under-specified by one (``K+1``, ``K-1``,
  ``r+1``, ``r-1``; the oracle always knows the truth);
* ``epochs``: the epoch of every sample ``given`` to the models or ``withheld``.

Every (family, obs, spec) stream is drawn once per seed; both epoch settings see the same stream
and the same pretrained experts (paired). Test seeds and tuning seeds are disjoint
(``TEST_SEEDS``, ``TUNING_SEEDS``): defaults and the k-GROUSE step are chosen on tuning seeds only.
With ``ablations`` each of MoSAIC's online mechanisms is also switched off on its own
(``ABLATIONS``); with ``eta_grid`` the pretrained k-GROUSE runs at every step of
``KGROUSE_ETA_GRID``.

Writes ``trials.csv`` (one row per cell, seed, method), ``summary.csv`` (mean, standard deviation,
min and max over seeds per cell and method), ``cells.png`` (NRMSE per cell and method) and ``summary.json`` (the same, the per-cell comparison
MoSAIC vs k-GROUSE vs oracle, the issue's targets, the seeds and the command).
"""

from __future__ import annotations

import copy
import fnmatch
import math
import time
from pathlib import Path

import numpy as np
import torch

from common.errors import InputError
from common.io import write_csv, write_json
from common.report import markdown_table
from streaming.harness import announce, limit_threads, map_jobs, run_online

#: true (n, r, K) of every stress stream, its epochs and their length
SHAPE = (60, 4, 4)
EPOCHS = 4
SAMPLES_PER_EPOCH = 400
#: StreamConfig overrides of each family (on top of SHAPE, EPOCHS, SAMPLES_PER_EPOCH, noise 0.05)
FAMILIES: dict[str, dict] = {
    "geodesic": {"drift": "rotation", "angle_rad": 0.1},
    "shared_rotation": {"drift": "shared_rotation", "angle_rad": 0.2},
    "independent_rotation": {"drift": "independent_rotation", "angle_rad": 0.2},
    "random_walk": {"drift": "random_walk", "walk_rad": 0.01},
    "abrupt": {"drift": "abrupt", "n_replace": 1},
    "mixed": {"drift": "mixed", "angle_rad": 0.1, "n_replace": 1},
    "nonuniform_obs": {"drift": "rotation", "angle_rad": 0.1, "obs_spread": 0.9},
    "heavy_tail": {"drift": "rotation", "angle_rad": 0.1, "noise_dof": 2.5},
    "imbalance": {"drift": "rotation", "angle_rad": 0.1, "proportions": [0.05, 0.95 / 3, 0.95 / 3, 0.95 / 3]},
    "scaled": {"drift": "rotation", "angle_rad": 0.1, "scale": 100.0, "coord_scale_spread": 0.7},
}
OBS_FRACS = (0.2, 0.35, 0.5)
#: (ΔK, Δr) of the model against the truth
SPECS: dict[str, tuple[int, int]] = {"exact": (0, 0), "K+1": (1, 0), "K-1": (-1, 0), "r+1": (0, 1), "r-1": (0, -1)}
EPOCH_INFO = ("given", "withheld")
#: stream seeds (``StreamConfig.seed``); the model seed is the index in the tuple
TEST_SEEDS = (50_000, 50_001, 50_002, 50_003, 50_004)
TUNING_SEEDS = (60_000, 60_001, 60_002)
#: what ``--suite stress`` runs without ``--cells`` / ``--families``: every family at 35 % observed,
#: K and r exact, with and without epochs (20 cells, a few minutes on one core)
DEFAULT_CELLS = ("*/obs35/exact/*",)
METHODS = ("mosaic", "kgrouse_pretrained", "mosaic_no_pretrain", "grouse", "petrels", "oracle")
#: MoSAIC with one online mechanism switched off (config overrides applied after pretraining)
ABLATIONS: dict[str, dict] = {
    "mosaic-no_epoch_reset": {"epoch_reset": "never"},
    "mosaic-no_change_detect": {"detect": False},
    "mosaic-no_provisional": {"provisional": False},
}


def auto_kr_cell(family: str, obs_frac: float) -> str:
    """Name of an auto-kr cell, ``family/obsPP`` (the stress cell name without spec and epochs)."""
    return f"{family}/obs{round(100 * obs_frac)}"


def cell_name(family: str, obs_frac: float, spec: str, epochs: str) -> str:
    return f"{auto_kr_cell(family, obs_frac)}/{spec}/{epochs}"


def all_cells() -> list[str]:
    return [cell_name(f, o, s, e) for f in FAMILIES for o in OBS_FRACS for s in SPECS for e in EPOCH_INFO]


def select_cells(patterns=None, families=None) -> list[str]:
    """Cells matching any of the glob ``patterns`` (default ``DEFAULT_CELLS``; ``all`` = every cell)
    and, when given, one of ``families``. InputError for an unknown family or a pattern matching nothing."""
    for f in families or ():
        if f not in FAMILIES:
            raise InputError(f"unknown family {f!r}; choose from {sorted(FAMILIES)}")
    patterns = list(patterns or DEFAULT_CELLS)
    if "all" in patterns:
        patterns = ["*"]
    cells = []
    for c in all_cells():
        if any(fnmatch.fnmatchcase(c, p) for p in patterns) and (not families or c.split("/")[0] in families):
            cells.append(c)
    if not cells:
        raise InputError(f"no stress cell matches {patterns} (cells are family/obsPP/spec/epochs, "
                         f"e.g. {all_cells()[0]}; families {sorted(FAMILIES)})")
    return cells


def stream_config(family: str, obs_frac: float, seed: int):
    from streaming.data import StreamConfig

    n, r, K = SHAPE
    return StreamConfig(n=n, r=r, K=K, obs_frac=obs_frac, epochs=EPOCHS, samples_per_epoch=SAMPLES_PER_EPOCH,
                        seed=seed, **FAMILIES[family])


def nrmse_rows(stream, completed: np.ndarray) -> dict:
    from streaming.evaluate import nrmse_unobserved

    per_epoch = [nrmse_unobserved(completed[stream.epoch == e], stream.full[stream.epoch == e],
                                  stream.values[stream.epoch == e]) for e in range(EPOCHS)]
    return {"nrmse": nrmse_unobserved(completed, stream.full, stream.values), "nrmse_last_epoch": per_epoch[-1],
            "nrmse_worst_epoch": float(np.nanmax(per_epoch))}


def run_group(family: str, obs_frac: float, spec: str, seed_index: int, seed: int, epoch_settings=EPOCH_INFO,
              ablations: bool = False, eta_grid: bool = False, device: torch.device | None = None) -> list[dict]:
    """One stream (``family``, ``obs_frac``, stream seed ``seed``) and every method, for each epoch
    setting in ``epoch_settings``: rows of ``trials.csv``. Methods that ignore epochs (k-GROUSE,
    GROUSE, PETRELS, the oracle) run once and are reported under each setting. MoSAIC's routing runs
    on ``device`` (None: the CPU)."""
    from streaming.baselines import (
        KGROUSE_ETA,
        KGROUSE_ETA_GRID,
        Grouse,
        KGrousePretrained,
        Petrels,
        mosaic_no_pretrain,
        oracle_completion,
    )
    from streaming.data import generate_stream
    from streaming.model import MoSAIC

    limit_threads()
    cfg = stream_config(family, obs_frac, seed)
    stream = generate_stream(cfg)
    n, r_true, K_true = SHAPE
    dK, dr = SPECS[spec]
    K, r = K_true + dK, r_true + dr
    rows: list[dict] = []

    def record(method: str, epochs: str, completed: np.ndarray, us: float, extra: dict | None = None) -> None:
        rows.append({"cell": cell_name(family, obs_frac, spec, epochs), "family": family, "obs_frac": obs_frac,
                     "spec": spec, "epochs": epochs, "seed": seed, "method": method, "K": K, "r": r,
                     **nrmse_rows(stream, completed), "us_per_sample": us, **(extra or {})})

    def stream_model(model, epochs: str):
        run = run_online(model, stream.values, stream.epoch if epochs == "given" else None)
        return run.completed, run.time_per_sample_s * 1e6

    t0 = time.perf_counter()
    mosaic = MoSAIC(r, K, seed=seed_index).to(device).fit(stream.source_values)
    pretrain_s = time.perf_counter() - t0
    once: dict[str, tuple[np.ndarray, float]] = {}
    etas = KGROUSE_ETA_GRID if eta_grid else (KGROUSE_ETA,)
    for eta in etas:
        name = "kgrouse_pretrained" if eta == KGROUSE_ETA else f"kgrouse_pretrained-eta{eta:g}"
        once[name] = stream_model(KGrousePretrained.from_mosaic(mosaic, eta=eta), "withheld")
        if eta_grid and eta == KGROUSE_ETA:
            once[f"kgrouse_pretrained-eta{eta:g}"] = once[name]
    once["grouse"] = stream_model(Grouse(n, r, seed=seed_index), "withheld")
    once["petrels"] = stream_model(Petrels(n, r, seed=seed_index), "withheld")
    # the MAP ridge σ² r / n is relative to the coefficients' variance: the same at any data scale
    oracle = oracle_completion(stream.values, stream.labels, stream.epoch, stream.bases, cfg.noise_std,
                               stream.sample_bases)
    once["oracle"] = (oracle, float("nan"))
    variants = {"mosaic": {}, **(ABLATIONS if ablations else {})}
    for epochs in epoch_settings:
        for name, overrides in variants.items():
            model = copy.deepcopy(mosaic)
            for key, value in overrides.items():
                setattr(model, key, value)
            completed, us = stream_model(model, epochs)
            record(name, epochs, completed, us, {"pretrain_s": pretrain_s, "reseeds": len(model.reseeds)})
        completed, us = stream_model(mosaic_no_pretrain(r, K, seed=seed_index), epochs)
        record("mosaic_no_pretrain", epochs, completed, us)
        for name, (completed, us) in once.items():
            record(name, epochs, completed, us)
    return rows


def _group_star(args):
    return run_group(*args[:-3], ablations=args[-3], eta_grid=args[-2], device=args[-1])


def summarize(rows: list[dict]) -> list[dict]:
    """Mean, standard deviation (ddof 1), min and max of each metric over seeds, per (cell, method)."""
    keys = sorted({(r["cell"], r["method"]) for r in rows},
                  key=lambda k: (k[0], METHODS.index(k[1]) if k[1] in METHODS else 99, k[1]))
    out = []
    for cell, method in keys:
        sel = [r for r in rows if (r["cell"], r["method"]) == (cell, method)]
        row = {"cell": cell, "method": method, "seeds": len(sel)}
        for metric in ("nrmse", "nrmse_last_epoch", "nrmse_worst_epoch", "us_per_sample"):
            v = np.array([r[metric] for r in sel], float)
            v = v[np.isfinite(v)]
            row[metric] = float(v.mean()) if v.size else float("nan")
            row[metric + "_sd"] = float(v.std(ddof=1)) if v.size > 1 else 0.0
            if metric == "nrmse":
                row["nrmse_min"], row["nrmse_max"] = (float(v.min()), float(v.max())) if v.size else (math.nan,) * 2
        out.append(row)
    return out


def _paired(rows: list[dict], cell: str, a: str, b: str, cell_b: str | None = None) -> np.ndarray:
    """Per-seed ``nrmse(a) - nrmse(b)`` (``b`` in ``cell_b`` when given), seeds in common."""
    va = {r["seed"]: r["nrmse"] for r in rows if r["cell"] == cell and r["method"] == a}
    vb = {r["seed"]: r["nrmse"] for r in rows if r["cell"] == (cell_b or cell) and r["method"] == b}
    return np.array([va[s] - vb[s] for s in sorted(set(va) & set(vb))])


def compare(rows: list[dict], summary: list[dict]) -> list[dict]:
    """Per cell: MoSAIC vs the pretrained k-GROUSE vs the oracle, and the issue's targets.

    ``mosaic_le_kgrouse``: MoSAIC's mean NRMSE is at most k-GROUSE's, or worse by less than the
    seed spread of the paired differences (their standard deviation / sqrt(seeds) × 2, ~ a 95 %
    interval). ``within_2x_oracle``: MoSAIC <= 2 × oracle, required where k-GROUSE is (else None).
    ``epochs_given_le_1.05_withheld``: on ``given`` cells, MoSAIC with epochs <= 1.05 × without."""
    mean = {(s["cell"], s["method"]): s["nrmse"] for s in summary}
    out = []
    for cell in sorted({s["cell"] for s in summary}):
        mo, kg, orc = (mean.get((cell, m), math.nan) for m in ("mosaic", "kgrouse_pretrained", "oracle"))
        d = _paired(rows, cell, "mosaic", "kgrouse_pretrained")
        spread = 2 * d.std(ddof=1) / math.sqrt(d.size) if d.size > 1 else 0.0
        row = {"cell": cell, "mosaic": mo, "kgrouse_pretrained": kg, "oracle": orc,
               "mosaic_over_kgrouse": mo / kg, "mosaic_over_oracle": mo / orc, "kgrouse_over_oracle": kg / orc,
               "mosaic_le_kgrouse": bool(d.size and d.mean() <= spread),
               "within_2x_oracle": bool(mo <= 2 * orc) if kg <= 2 * orc else None}
        if cell.endswith("/given"):
            other = cell[: -len("given")] + "withheld"
            wh = mean.get((other, "mosaic"), math.nan)
            row["mosaic_withheld"] = wh
            row["epochs_given_over_withheld"] = mo / wh
            row["epochs_given_le_1.05_withheld"] = bool(mo <= 1.05 * wh) if math.isfinite(wh) else None
        out.append(row)
    return out


def ablation_effects(summary: list[dict]) -> list[dict]:
    """Per ablation and epoch setting: geometric mean over cells of NRMSE(variant) / NRMSE(mosaic),
    the worst and best cell ratio, and how many cells it improves by > 2 % / worsens by > 2 %.
    A ratio > 1 means the mechanism pays (switching it off hurts)."""
    mean = {(s["cell"], s["method"]): s["nrmse"] for s in summary}
    out = []
    variants = sorted({m for _, m in mean if m.startswith("mosaic-")})
    for v in variants:
        for epochs in EPOCH_INFO:
            cells = sorted({c for c, m in mean if m == v and c.endswith("/" + epochs)})
            ratio = np.array([mean[(c, v)] / mean[(c, "mosaic")] for c in cells])
            if not ratio.size:
                continue
            worst = cells[int(np.argmax(ratio))]
            best = cells[int(np.argmin(ratio))]
            out.append({"variant": v, "epochs": epochs, "cells": len(cells),
                        "geomean_ratio": float(np.exp(np.log(ratio).mean())),
                        "max_ratio": float(ratio.max()), "max_cell": worst, "min_ratio": float(ratio.min()),
                        "min_cell": best, "cells_hurt_gt_2pct": int((ratio > 1.02).sum()),
                        "cells_helped_gt_2pct": int((ratio < 0.98).sum())})
    return out


def eta_choice(summary: list[dict]) -> dict:
    """The k-GROUSE step of the grid with the lowest geometric mean of NRMSE / oracle over cells."""
    mean = {(s["cell"], s["method"]): s["nrmse"] for s in summary}
    scores = {}
    for cell, method in mean:
        if method.startswith("kgrouse_pretrained-eta"):
            eta = float(method.split("eta")[1])
            scores.setdefault(eta, []).append(math.log(mean[(cell, method)] / mean[(cell, "oracle")]))
    if not scores:
        return {}
    geo = {eta: float(np.exp(np.mean(v))) for eta, v in sorted(scores.items())}
    return {"geomean_over_oracle": {f"{k:g}": v for k, v in geo.items()}, "best": min(geo, key=geo.get)}


def plot_cells(summary: list[dict], path: Path) -> None:
    """Bar chart of mean NRMSE (± sd over seeds) per cell for MoSAIC, the pretrained k-GROUSE, MoSAIC
    without pretraining and the oracle (log scale)."""
    from matplotlib.figure import Figure  # not pyplot: no global figure list shared between threads

    cells = sorted({s["cell"] for s in summary})
    stat = {(s["cell"], s["method"]): (s["nrmse"], s["nrmse_sd"]) for s in summary}
    shown = ("mosaic", "kgrouse_pretrained", "mosaic_no_pretrain", "oracle")
    fig = Figure(figsize=(max(6.0, 0.35 * len(cells)), 4.5))
    ax = fig.subplots()
    width = 0.8 / len(shown)
    for i, method in enumerate(shown):
        mean = np.array([stat.get((c, method), (np.nan, 0.0))[0] for c in cells])
        sd = np.array([stat.get((c, method), (np.nan, 0.0))[1] for c in cells])
        ax.bar(np.arange(len(cells)) + (i - (len(shown) - 1) / 2) * width, mean, width, yerr=sd, label=method)
    ax.set_xticks(np.arange(len(cells)), cells, rotation=90, fontsize=6)
    ax.set_yscale("log")
    ax.set_ylabel("NRMSE on unobserved entries")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def run_stress(out: Path, cells=None, families=None, tuning: bool = False, ablations: bool = False,
               eta_grid: bool = False, workers: int = 1, seeds: int | None = None, command: str = "",
               device: torch.device | None = None) -> dict:
    """Run the selected cells on the test seeds (``tuning``: the tuning seeds), print the per-cell
    comparison and write ``trials.csv``, ``summary.csv`` and ``summary.json`` into ``out``. MoSAIC's
    routing runs on ``device`` (None: the CPU)."""
    from streaming.baselines import KGROUSE_ETA

    selected = select_cells(cells, families)
    seed_list = (TUNING_SEEDS if tuning else TEST_SEEDS)[: seeds or None]
    groups: dict[tuple, list[str]] = {}
    for c in selected:
        family, obs, spec, epochs = c.split("/")
        groups.setdefault((family, int(obs[3:]) / 100, spec), []).append(epochs)
    jobs = [(f, o, s, i, seed, tuple(eps), ablations, eta_grid, device)
            for (f, o, s), eps in groups.items() for i, seed in enumerate(seed_list)]
    announce(f"mosaic bench --suite stress: {len(selected)} cells x {len(seed_list)} seeds on {workers} worker(s)")
    t0 = time.perf_counter()
    if workers > 1:
        results = map_jobs(_group_star, jobs, workers)
    else:
        results = [_group_star(j) for j in jobs]
    rows = [r for rs in results for r in rs]
    summary = summarize(rows)
    comparison = compare(rows, summary)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "trials.csv", rows)
    write_csv(out / "summary.csv", summary)
    given = [c for c in comparison if "epochs_given_le_1.05_withheld" in c]
    targets = {
        "mosaic_le_kgrouse_cells": sum(c["mosaic_le_kgrouse"] for c in comparison),
        "within_2x_oracle_cells": sum(bool(c["within_2x_oracle"]) for c in comparison),
        "within_2x_oracle_required": sum(c["within_2x_oracle"] is not None for c in comparison),
        "epochs_never_hurt_cells": sum(bool(c["epochs_given_le_1.05_withheld"]) for c in given),
        "epochs_pairs": len(given), "cells": len(comparison),
    }
    result = {
        "command": command, "seeds": list(seed_list), "tuning": tuning, "test_seeds": list(TEST_SEEDS),
        "tuning_seeds": list(TUNING_SEEDS), "shape_n_r_K": list(SHAPE), "epochs": EPOCHS,
        "samples_per_epoch": SAMPLES_PER_EPOCH, "families": FAMILIES, "kgrouse_eta": KGROUSE_ETA,
        "targets": targets, "comparison": comparison, "summary": summary, "wall_s": time.perf_counter() - t0,
    }
    if ablations:
        result["ablations"] = ablation_effects(summary)
    if eta_grid:
        result["kgrouse_eta_grid"] = eta_choice(summary)
    write_json(out / "summary.json", result)
    plot_cells(summary, out / "cells.png")
    cols = ["cell", "mosaic", "kgrouse_pretrained", "oracle", "mosaic_over_kgrouse", "mosaic_over_oracle",
            "mosaic_le_kgrouse", "epochs_given_over_withheld"]
    print(markdown_table(comparison, cols))
    if ablations:
        print(markdown_table(result["ablations"], ["variant", "epochs", "cells", "geomean_ratio", "max_ratio",
                                                   "max_cell", "min_ratio", "cells_hurt_gt_2pct", "cells_helped_gt_2pct"]))
    if eta_grid:
        print("k-GROUSE step:", result["kgrouse_eta_grid"])
    print("targets:", targets)
    return result
