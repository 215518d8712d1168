"""Seed spread of ``moa3cir bench`` rows: mean and sample standard deviation over seeds of the
rows (variant, method, image encoder) that every given bench JSON holds.

    moa3cir build-data --out runs/rbench/data --seed 0      # the small benchmark of the README table
    for s in 0 1 2; do
      moa3cir bench --root runs/rbench/data --out runs/rbench_s$s --methods moa3cir combiner \\
          --image-encoders efficientnet-lite0 --seed $s --json runs/bench_small_seed$s.json
    done
    python experiments/retrieval/seed_spread.py runs/bench_small_seed0.json \\
        runs/bench_small_seed1.json runs/bench_small_seed2.json \\
        --out docs/results/retrieval/bench_small_seeds.json

Writes ``{"command": [these lines], "runs": [{"file", "config"}], "rows": [per-seed rows], "summary": [{"variant",
"method", "image_encoder", "seeds", "R@k": [values], "R@k mean", "R@k sd"}]}``.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from common.io import read_json, write_json

METRICS = ("R@1", "R@10", "R@50")
COMMAND = [
    "moa3cir build-data --out runs/rbench/data --seed 0",
    "for s in 0 1 2; do moa3cir bench --root runs/rbench/data --out runs/rbench_s$s --methods moa3cir combiner "
    "--image-encoders efficientnet-lite0 --seed $s --json runs/bench_small_seed$s.json; done",
    "python experiments/retrieval/seed_spread.py runs/bench_small_seed0.json runs/bench_small_seed1.json "
    "runs/bench_small_seed2.json --out docs/results/retrieval/bench_small_seeds.json",
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", help="bench --json files, one per seed")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    runs, by_key = [], {}
    for path in args.runs:
        d = read_json(Path(path))
        runs.append({"file": path, "config": d["config"]})
        for r in d["rows"] or []:
            if "R@10" in r:
                by_key.setdefault((r["variant"], r["method"], r["image_encoder"]), []).append(r)
    seeds = [r["config"]["seed"] for r in runs]
    if len(set(seeds)) != len(seeds):
        raise SystemExit(f"error: the runs repeat a seed: {seeds}")
    rows, summary = [], []
    for (variant, method, encoder), rs in by_key.items():
        if len(rs) != len(runs):
            continue  # a row not in every run
        rows += rs
        s = {"variant": variant, "method": method, "image_encoder": encoder, "seeds": [r["seed"] for r in rs]}
        for m in METRICS:
            vals = [r[m] for r in rs]
            s[m] = vals
            s[f"{m} mean"] = round(statistics.mean(vals), 2)
            s[f"{m} sd"] = round(statistics.stdev(vals), 2) if len(vals) > 1 else None
        summary.append(s)
        print(f"{variant:10s} {method:30s} {encoder:18s} " + "  ".join(
            f"{m} {s[f'{m} mean']:.1f} ± {s[f'{m} sd'] or 0:.1f}" for m in METRICS))
    write_json(Path(args.out), {"command": COMMAND, "runs": runs, "rows": rows, "summary": summary})


if __name__ == "__main__":
    main()
