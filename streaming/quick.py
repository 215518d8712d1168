"""``make demo`` part of the streaming app: two groups of the benchmark behind the README's table
(abrupt and geodesic drift, one test seed, epochs given; a few seconds on one core)."""

from __future__ import annotations

from pathlib import Path

from common.io import write_csv

QUICK_FAMILIES = ("abrupt", "geodesic")


def run_quick(out_dir: Path, data_dir: Path | None = None, seed: int = 0) -> list[dict]:
    """The bench's methods (``streaming.bench.run_group``) on its abrupt and geodesic streams at 35 %
    observed, test seed index ``seed``; ``data_dir`` is unused (synthetic streams). Writes
    ``out_dir/streaming.csv`` and ``out_dir/streaming_cells.png``; returns summary rows."""
    from streaming.bench import OBS_FRACS, TEST_SEEDS, plot_cells, run_group, summarize

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stream_seed = TEST_SEEDS[seed % len(TEST_SEEDS)]
    rows = [row for family in QUICK_FAMILIES
            for row in run_group(family, OBS_FRACS[1], "exact", seed, stream_seed, epoch_settings=("given",))]
    write_csv(out_dir / "streaming.csv", rows)
    plot_cells(summarize(rows), out_dir / "streaming_cells.png")
    return [{"app": "streaming", "task": f"synthetic (60,4,4) {r['family']} drift", "method": r["method"],
             "metric": "NRMSE unobserved", "value": r["nrmse"], "split": "stream", "seed": seed} for r in rows]
