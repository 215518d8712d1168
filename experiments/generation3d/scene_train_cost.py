"""Training cost of MoCA vs full attention on real scenes, from two finished ``moca train`` runs.

Reads each run's training history (``generator/config.json``: ``time_s`` since the start of
training every 50 steps and at the last) and, when given, the ``/usr/bin/time -v`` report of the
process (maximum resident set size: the whole process, so it includes the fixed memory of Python,
torch, the data, the AE and the MiniLM encoder). Writes one JSON with seconds per step over all
steps and over the steps from ``--from-step`` on (MoCA's sparse phase after its 25 % dense warm-up),
the peak RSS, and the ratios full / MoCA (time: > 1 means MoCA is faster) and MoCA / full (memory).
The two runs should have run one after the other on the same machine (their wall times then see
similar load; the ratio is still only as steady as the machine).

    python -m experiments.generation3d.scene_train_cost --runs runs/sq/moca runs/sq/full \\
        --time-reports runs/sq_moca.time runs/sq_full.time --from-step 100 \\
        --out docs/results/generation3d/scenes/train_cost.json
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from common.errors import InputError
from common.io import read_json, write_json


def max_rss_mb(report: Path) -> float:
    """Maximum resident set size in MiB from a GNU ``time -v`` report."""
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", Path(report).read_text())
    if m is None:
        raise InputError(f"{report}: no 'Maximum resident set size' line (not a `/usr/bin/time -v` report)")
    return int(m.group(1)) / 1024


def run_cost(run: Path, from_step: int, report: Path | None) -> dict:
    cfg = read_json(Path(run) / "generator" / "config.json")
    extra, gen = cfg["extra"], cfg["config"]["config"]
    hist = extra["history"]
    last, start = hist[-1], next((h for h in hist if h["step"] >= from_step), None)
    if start is None or start["step"] >= last["step"]:
        raise InputError(f"{run}: no history entry between step {from_step} and the last step {last['step']}")
    out = {"run": str(run), "attention": gen["attention"], "steps": extra["steps"], "seed": extra["seed"],
           "train_s": last["time_s"], "s_per_step": last["time_s"] / last["step"],
           "s_per_step_from": (last["time_s"] - start["time_s"]) / (last["step"] - start["step"]),
           "from_step": start["step"], "final_loss": last["loss"], "max_parts": gen["max_parts"],
           "router_distill": gen.get("router_distill"), "dense_warmup": gen.get("dense_warmup")}
    if report is not None:
        out["max_rss_mb"] = max_rss_mb(report)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs=2, required=True, metavar=("MOCA", "FULL"))
    ap.add_argument("--time-reports", nargs=2, metavar=("MOCA", "FULL"))
    ap.add_argument("--from-step", type=int, default=100)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    reports = a.time_reports or (None, None)
    moca, full = (run_cost(Path(r), a.from_step, t and Path(t)) for r, t in zip(a.runs, reports, strict=True))
    res = {"moca": moca, "full": full,
           "speedup_all_steps": full["s_per_step"] / moca["s_per_step"],
           "speedup_from_step": full["s_per_step_from"] / moca["s_per_step_from"]}
    if a.time_reports:
        res["rss_ratio_moca_vs_full"] = moca["max_rss_mb"] / full["max_rss_mb"]
    write_json(a.out, res)
    print({k: v for k, v in res.items() if not isinstance(v, dict)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
