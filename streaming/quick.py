"""``make demo`` part of the streaming app: a short benchmark run on one standard config and a
small Fashion-MNIST stream (about a minute on two cores)."""

from __future__ import annotations

from pathlib import Path

from common.io import write_csv

QUICK_METHODS = ("mosaic", "kgrouse_pretrained", "k-grouse", "grouse-r", "petrels", "oracle")


def run_quick(out_dir: Path, data_dir: Path | None = None, seed: int = 0) -> list[dict]:
    """MoSAIC beside the pretrained k-GROUSE (same pretraining, plain routed updates) and the other
    baselines on (50, 5, 10) with abrupt drift and on Fashion-MNIST (5 classes).

    ``data_dir`` is unused (Fashion-MNIST is found through ``common.data_dir``). Writes
    ``out_dir/streaming.csv`` and ``out_dir/streaming_curve.png``; returns summary rows.
    """
    from streaming.bench import fashion_trial, plot_curves, run_trial

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, curves = run_trial("50-5-10", "abrupt", seed, quick=True, methods=QUICK_METHODS, keep_curves=True)
    plot_curves(curves, f"(50,5,10) abrupt drift, seed {seed}", out_dir / "streaming_curve.png")
    frows = fashion_trial(seed=seed, quick=True)
    frows = [r for r in frows if r["method"] in QUICK_METHODS]
    write_csv(out_dir / "streaming.csv", rows + frows)
    summary = []
    for r in rows:
        summary.append({"app": "streaming", "task": "synthetic (50,5,10) abrupt", "method": r["method"],
                        "metric": "NRMSE unobserved", "value": r["nrmse"], "split": "stream", "seed": seed})
    for r in frows:
        summary.append({"app": "streaming", "task": "Fashion-MNIST 5-class stream", "method": r["method"],
                        "metric": "NRMSE unobserved", "value": r["nrmse"], "split": "test stream", "seed": seed})
    return summary
