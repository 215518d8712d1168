"""Where MoSAIC's abrupt-drift completion error comes from, and how its change-buffer knobs move it.

On abrupt streams of the standard configs (50-5-10, 100-10-10; 40 % observed, 4 epochs of 200·K
samples), with stream seeds 1100+s and model seeds 100+s (outside the ``mosaic bench`` seeds, so
nothing is tuned on them):

* ``breakdown``: the relative completion error of the replaced class's samples by their position
  after the drift, against all other samples and the oracle that knows the true subspaces, and
  the NRMSE the stream would have if the replaced class had the oracle's error (seed 0 only);
  and a degrees-of-freedom bound: the NRMSE if every other sample had the oracle's error and the
  new class's sample that follows ``s`` of its predecessors had relative squared error
  ``1 - q(s+1)/r``, ``q(s)`` the largest rank whose ``q (n - q) + s q`` unknowns ``s m``
  observations can determine (as if those ``q`` of the ``r`` equal-energy directions were
  known exactly; heuristic and optimistic, so no online method should beat it);
* ``sweep``: mean NRMSE over ``--seeds`` streams of the default MoSAIC config and of one-knob
  variants of it, in the same run.

    python -m experiments.streaming.drift_breakdown --out results/streaming_drift
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from common.io import write_json  # noqa: E402
from common.report import markdown_table  # noqa: E402
from experiments.streaming.variants import mosaic_variant  # noqa: E402
from streaming.baselines import oracle_completion  # noqa: E402
from streaming.change import identifiable_rank  # noqa: E402
from streaming.data import STANDARD_CONFIGS, StreamConfig, generate_stream  # noqa: E402
from streaming.evaluate import nrmse_unobserved  # noqa: E402
from streaming.harness import run_online  # noqa: E402

CONFIGS = ("50-5-10", "100-10-10")
VARIANTS = {
    "default": {},
    "posterior at every m/r": {"provisional_estimator": "posterior"},
    "previous estimator (ALS, growth 0.2)": {"provisional_estimator": "als", "provisional_growth": 0.2},
    "provisional_growth 0.2": {"provisional_growth": 0.2},
    "provisional_lambda 0.05": {"provisional_lambda": 0.05},
    "provisional_lambda 0.2": {"provisional_lambda": 0.2},
    "no completion cap": {"completion_cap": 0.0},
}
POSITIONS = ((0, 10), (10, 20), (20, 40), (40, 80), (80, None))


def _stream(config: str, s: int, obs_frac: float = 0.4):
    n, r, K = STANDARD_CONFIGS[config]
    cfg = StreamConfig(n=n, r=r, K=K, obs_frac=obs_frac, drift="abrupt", epochs=4, samples_per_epoch=200 * K, seed=1100 + s)
    return generate_stream(cfg), cfg


def _mosaic(stream, cfg, s: int, **overrides) -> np.ndarray:
    model = mosaic_variant(cfg.r, cfg.K, seed=100 + s, **overrides).fit(stream.source_values)
    return run_online(model, stream.values, stream.epoch).completed


def breakdown(config: str, obs_frac: float = 0.4) -> dict:
    stream, cfg = _stream(config, 0, obs_frac)
    completed = _mosaic(stream, cfg, 0)
    oracle = oracle_completion(stream.values, stream.labels, stream.epoch, stream.bases, cfg.noise_std)
    unobs = np.isnan(stream.values)
    den = np.where(unobs, stream.full**2, 0).sum(1)
    err = np.where(unobs, (completed - stream.full) ** 2, 0).sum(1)
    err_oracle = np.where(unobs, (oracle - stream.full) ** 2, 0).sum(1)
    changed = np.zeros(len(err), bool)
    position = np.zeros(len(err), int)
    for ep in range(1, stream.bases.shape[0]):
        for k in range(cfg.K):
            if not np.allclose(stream.bases[ep, k], stream.bases[ep - 1, k]):
                idx = np.flatnonzero((stream.epoch == ep) & (stream.labels == k))
                changed[idx], position[idx] = True, np.arange(len(idx))

    def rel(sel, e=err):
        return float(np.sqrt(e[sel].sum() / den[sel].sum()))

    row = {"config": config, "obs_frac": cfg.obs_frac, "nrmse": float(np.sqrt(err.sum() / den.sum())), "replaced_share_of_sq_err": float(err[changed].sum() / err.sum())}
    for lo, hi in POSITIONS:
        sel = changed & (position >= lo) & (position < (hi if hi is not None else len(err)))
        row[f"replaced {lo}-{hi - 1 if hi else ''}"] = rel(sel)
    row["other classes"] = rel(~changed)
    row["other classes (oracle)"] = rel(~changed, err_oracle)
    row["nrmse if replaced had oracle error"] = float(np.sqrt((err[~changed].sum() + err_oracle[changed].sum()) / den.sum()))
    m = cfg.obs_frac * cfg.n
    bound_rel = np.array([1.0 - identifiable_rank(cfg.n, cfg.r, m, int(p) + 1) / cfg.r for p in position[changed]])
    bound = np.maximum(bound_rel * den[changed], err_oracle[changed])
    row["dof bound nrmse"] = float(np.sqrt((err_oracle[~changed].sum() + bound.sum()) / den.sum()))
    return row


def sweep(config: str, seeds: int, obs_frac: float = 0.4) -> list[dict]:
    streams = [_stream(config, s, obs_frac) for s in range(seeds)]
    rows = []
    for name, overrides in VARIANTS.items():
        vals = [nrmse_unobserved(_mosaic(st, cfg, s, **overrides), st.full, st.values) for s, (st, cfg) in enumerate(streams)]
        rows.append({"config": config, "variant": name, "nrmse_mean": float(np.mean(vals)), "nrmse_per_seed": [round(v, 4) for v in vals]})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/streaming_drift")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--obs-frac", type=float, default=0.4)
    ap.add_argument("--no-sweep", action="store_true", help="only the breakdown")
    ap.add_argument("--configs", nargs="*", default=list(CONFIGS))
    a = ap.parse_args(argv)
    parts = [breakdown(c, a.obs_frac) for c in a.configs]
    knobs = [] if a.no_sweep else [r for c in a.configs for r in sweep(c, a.seeds, a.obs_frac)]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "drift_breakdown.json", {"breakdown": parts, "sweep": knobs})
    print(markdown_table(parts))
    if knobs:
        print(markdown_table(knobs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
