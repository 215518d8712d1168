"""Does the pretraining repair (``kss.repair_clusters``, ``MoSAICConfig.pretrain_repair``) pay on
the stress suite?

MoSAIC pretrained with ``pretrain_repair`` = 2 (default) and 0 on the stress suite's streams
(``streaming.stress``: every family, K and r exact) at the given observed fractions, on the tuning
seeds only (``stress.TUNING_SEEDS``; model seed = the seed's index), each streamed with epochs given
and withheld. Prints the per-stream NRMSE where the two differ and the geometric mean over cells of
NRMSE(off) / NRMSE(on) per epoch setting (> 1: the repair pays).

    python -m experiments.streaming.pretrain_repair --obs 0.2 0.35 --out results/streaming_pretrain_repair_stress
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from common.io import write_json  # noqa: E402


def run(obs_fracs: list[float]) -> list[dict]:
    from experiments.streaming.variants import mosaic_variant
    from streaming import bench as stress
    from streaming.data import generate_stream
    from streaming.evaluate import nrmse_unobserved
    from streaming.harness import run_online

    n, r, K = stress.SHAPE
    rows = []
    for family in stress.FAMILIES:
        for obs in obs_fracs:
            for i, seed in enumerate(stress.TUNING_SEEDS):
                s = generate_stream(stress.stream_config(family, obs, seed))
                nrmse = {}
                for rounds in (2, 0):
                    model = mosaic_variant(r, K, seed=i, pretrain_repair=rounds).fit(s.source_values)
                    for epochs in stress.EPOCH_INFO:
                        run_ = run_online(copy.deepcopy(model), s.values, s.epoch if epochs == "given" else None)
                        nrmse[(rounds, epochs)] = nrmse_unobserved(run_.completed, s.full, s.values)
                for epochs in stress.EPOCH_INFO:
                    rows.append({"family": family, "obs_frac": obs, "seed": seed, "epochs": epochs,
                                 "repair": nrmse[(2, epochs)], "no_repair": nrmse[(0, epochs)]})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--obs", nargs="+", type=float, default=[0.2, 0.35])
    ap.add_argument("--out", default="results/streaming_pretrain_repair_stress")
    a = ap.parse_args(argv)
    rows = run(a.obs)
    summary = {}
    for epochs in ("given", "withheld"):
        cells: dict[tuple, list[dict]] = {}
        for r in rows:
            if r["epochs"] == epochs:
                cells.setdefault((r["family"], r["obs_frac"]), []).append(r)
        ratios = [np.mean([r["no_repair"] for r in v]) / np.mean([r["repair"] for r in v]) for v in cells.values()]
        summary[epochs] = {"cells": len(ratios), "geomean_off_over_on": float(math.exp(np.mean(np.log(ratios)))),
                           "max": float(max(ratios)), "min": float(min(ratios))}
    for r in rows:
        if r["repair"] != r["no_repair"]:
            print(f"{r['family']} obs {r['obs_frac']} seed {r['seed']} epochs {r['epochs']}: "
                  f"repair {r['repair']:.3f}, without {r['no_repair']:.3f}")
    print(summary)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "pretrain_repair.json", {"rows": rows, "summary": summary, "obs": a.obs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
