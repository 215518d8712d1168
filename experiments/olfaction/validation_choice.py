"""Validation-row scores of the distance bench's equal-weight means: the choice of the headline
MixScentNet ensemble in olfaction/README.md (session 13), made on validation rows only.

Reads the per-fold predictions that ``python -m experiments.olfaction.variant_bench`` dumps (``olfaction_bench_predictions.json``:
each component's predictions on the split's validation rows, from models fitted on the training
rows only, and on its test rows). Several runs on the same splits are merged fold by fold (the
components of a mean may come from different runs; a component in two runs must agree, and the
validation rows must be the same). For every mean of :data:`experiments.olfaction.variant_bench.EQUAL_MEANS` whose
components are all in the dump it prints Pearson r and RMSE on the validation rows (mean over
folds), and names the mean with the lowest validation RMSE per family. Test rows are never read.
The networks' validation rows are also the rows their epoch was chosen on, so their validation
scores are optimistic; the README says so.

    python -m experiments.olfaction.validation_choice results/olfaction_set_s13_random_cv \
        results/olfaction_set_s13_lso_molecules --out results/olfaction_validation_choice_s13
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from common.data_dir import resolve_data_dir  # noqa: E402
from common.io import read_json, write_csv  # noqa: E402
from common.report import markdown_table  # noqa: E402
from experiments.olfaction.variant_bench import EQUAL_MEANS  # noqa: E402
from olfaction.data import load_pairs  # noqa: E402
from olfaction.evaluate import regression_metrics  # noqa: E402


def merged_folds(run_dirs: list[Path]) -> dict[tuple[str, str], dict]:
    """``(family, split) -> {"validation": rows, "val_pred": {component: predictions}}`` over all
    runs; refuses runs whose validation rows or shared components disagree."""
    folds: dict[tuple[str, str], dict] = {}
    for run in run_dirs:
        for fold in read_json(Path(run) / "olfaction_bench_predictions.json"):
            key = (fold["family"], fold["split"])
            merged = folds.setdefault(key, {"validation": fold["validation"], "val_pred": {}})
            if merged["validation"] != fold["validation"]:
                raise SystemExit(f"{run}: validation rows of {key[1]} differ from an earlier run's")
            for name, pred in fold["val_pred"].items():
                if name in merged["val_pred"] and not np.allclose(merged["val_pred"][name], pred):
                    raise SystemExit(f"{run}: validation predictions of {name!r} on {key[1]} differ from an earlier run's")
                merged["val_pred"][name] = pred
    return folds


def validation_rows(run_dirs: list[Path], y: np.ndarray) -> list[dict]:
    """One row per (family, candidate): the components alone and every complete equal mean."""
    scores: dict[tuple[str, str], list[dict]] = {}
    for (family, _), fold in merged_folds(run_dirs).items():
        val = {k: np.asarray(v) for k, v in fold["val_pred"].items()}
        y_val = y[np.asarray(fold["validation"])]
        candidates = dict(val)
        for name, parts in EQUAL_MEANS.items():
            if all(p in val for p in parts):
                candidates[name] = np.mean([val[p] for p in parts], axis=0)
        for name, pred in candidates.items():
            scores.setdefault((family, name), []).append(regression_metrics(y_val, pred))
    rows = []
    for (family, name), folds in scores.items():
        rows.append(
            {
                "family": family,
                "method": name,
                "folds": len(folds),
                "val_pearson": float(np.mean([f["pearson"] for f in folds])),
                "val_rmse": float(np.mean([f["rmse"] for f in folds])),
                "equal_mean": name in EQUAL_MEANS,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="variant_bench output directories")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default=None, help="directory for validation_choice.csv")
    args = ap.parse_args(argv)
    y = load_pairs(resolve_data_dir(args.data_dir)).y
    rows = validation_rows([Path(r) for r in args.runs], y)
    print(
        markdown_table(
            [
                {**r, "val_pearson": f"{r['val_pearson']:.3f}", "val_rmse": f"{r['val_rmse']:.4f}"}
                for r in rows
            ]
        )
    )
    for family in dict.fromkeys(r["family"] for r in rows):
        means = [r for r in rows if r["family"] == family and r["equal_mean"]]
        if means:
            best = min(means, key=lambda r: r["val_rmse"])
            print(f"{family}: lowest validation RMSE among the equal means: {best['method']}")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        write_csv(Path(args.out) / "validation_choice.csv", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
