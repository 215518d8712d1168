"""The tuning side of the streaming benchmark (``streaming.bench``, the README's table): the tuning
seeds, MoSAIC with each online mechanism switched off (``ABLATIONS``) and the pretrained k-GROUSE
at every step of ``KGROUSE_ETA_GRID`` (how ``KGROUSE_ETA`` was chosen).

``python -m experiments.streaming.stress_tuning --out runs/stress_tuning [--ablations] [--eta-grid]
[--test-seeds] [--cells ...] [--families ...] [--seeds N] [--workers N]``: the bench's cells on the
tuning seeds (``--test-seeds``: the test seeds), plus the chosen extras; writes what ``mosaic bench``
writes, with ``ablations`` / ``kgrouse_eta_grid`` added to ``summary.json``.
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
from pathlib import Path

import numpy as np

from common.io import write_csv, write_json
from common.report import markdown_table
from experiments.streaming.variants import with_fixed
from streaming.bench import (
    EPOCH_INFO,
    TEST_SEEDS,
    TUNING_SEEDS,
    compare,
    group_stream,
    run_stress,
    select_cells,
    stream_model,
    summarize,
    trial_row,
)
from streaming.harness import limit_threads, map_jobs

#: MoSAIC with one online mechanism switched off (fixed hyper-parameters set after pretraining)
ABLATIONS: dict[str, dict] = {
    "mosaic-no_epoch_reset": {"epoch_reset": "never"},
    "mosaic-no_change_detect": {"detect": False},
    "mosaic-no_provisional": {"provisional": False},
}
#: the constant steps of the pretrained k-GROUSE tried with ``--eta-grid`` (``streaming.baselines.KGROUSE_ETA``)
KGROUSE_ETA_GRID = (0.1, 0.2, 0.3, 0.5, 0.7, 1.0)


def extra_rows(args) -> list[dict]:
    """The ablation and k-GROUSE step-grid rows of one group (the bench's stream and pretraining)."""
    from streaming.baselines import KGrouse
    from streaming.model import MoSAIC

    family, obs_frac, spec, seed_index, seed, epoch_settings, ablations, eta_grid = args
    limit_threads()
    stream, _, K, r = group_stream(family, obs_frac, spec, seed)
    mosaic = MoSAIC(r, K, seed=seed_index).fit(stream.source_values)
    rows = []
    grid = {f"kgrouse_pretrained-eta{eta:g}": stream_model(KGrouse.from_mosaic(mosaic, eta=eta), stream, "withheld")
            for eta in (KGROUSE_ETA_GRID if eta_grid else ())}
    for epochs in epoch_settings:
        for name, fixed in (ABLATIONS if ablations else {}).items():
            completed, us = stream_model(with_fixed(copy.deepcopy(mosaic), **fixed), stream, epochs)
            rows.append(trial_row(stream, family, obs_frac, spec, epochs, seed, name, K, r, completed, us))
        for name, (completed, us) in grid.items():
            rows.append(trial_row(stream, family, obs_frac, spec, epochs, seed, name, K, r, completed, us))
    return rows


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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--cells", nargs="+", default=None)
    p.add_argument("--families", nargs="+", default=None)
    p.add_argument("--seeds", type=int, default=None, help="only the first N seeds")
    p.add_argument("--test-seeds", action="store_true", help="the test seeds instead of the tuning seeds")
    p.add_argument("--ablations", action="store_true")
    p.add_argument("--eta-grid", action="store_true")
    p.add_argument("--workers", type=int, default=1)
    a = p.parse_args(argv)
    out = Path(a.out)
    seed_list = (TEST_SEEDS if a.test_seeds else TUNING_SEEDS)[: a.seeds or None]
    result = run_stress(out, cells=a.cells, families=a.families, workers=a.workers, seed_list=seed_list,
                        command="python -m experiments.streaming.stress_tuning " + " ".join(argv or sys.argv[1:]))
    rows = result.pop("rows")
    if a.ablations or a.eta_grid:
        groups: dict[tuple, list[str]] = {}
        for c in select_cells(a.cells, a.families):
            family, obs, spec, epochs = c.split("/")
            groups.setdefault((family, int(obs[3:]) / 100, spec), []).append(epochs)
        jobs = [(f, o, s, i, seed, tuple(eps), a.ablations, a.eta_grid)
                for (f, o, s), eps in groups.items() for i, seed in enumerate(seed_list)]
        rows += [r for rs in map_jobs(extra_rows, jobs, a.workers) for r in rs]
        summary = summarize(rows)
        result.update(summary=summary, comparison=compare(rows, summary))
        if a.ablations:
            result["ablations"] = ablation_effects(summary)
            print(markdown_table(result["ablations"], ["variant", "epochs", "cells", "geomean_ratio", "max_ratio",
                                                       "max_cell", "min_ratio", "cells_hurt_gt_2pct",
                                                       "cells_helped_gt_2pct"]))
        if a.eta_grid:
            result["kgrouse_eta_grid"] = eta_choice(summary)
            print("k-GROUSE step:", result["kgrouse_eta_grid"])
        write_csv(out / "trials.csv", rows)
        write_csv(out / "summary.csv", summary)
        write_json(out / "summary.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
