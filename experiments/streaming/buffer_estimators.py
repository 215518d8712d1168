"""How well can *any* estimator complete the first samples of a new subspace? A bound for the
abrupt-drift NRMSE of MoSAIC (default: (100,10,10) at 40 % observed; ``--config``, ``--obs``).

After an abrupt replacement, the new class's ``(s+1)``-th sample can only be completed from the
``s`` samples of that class seen before it (a fresh random subspace: nothing else carries
information about it). This script draws such buffers from the stream generator's model (a
random rank-``r`` subspace, coefficients ``N(0, n/r)``, noise σ, each entry observed with
probability ``p``) and measures the relative completion error of a fresh sample for each buffer
size ``s`` under:

* ``soft-impute``: MoSAIC's provisional estimator while a rank-r subspace is under-determined
  (Soft-Impute directions as a Gaussian posterior, ``streaming.linalg.soft_impute``);
* ``ppca``: rank-r probabilistic PCA by EM with missing values (MoSAIC's estimator once the rank
  is identifiable), started at Soft-Impute's directions;
* ``bayes``: the posterior-predictive mean under the *true* generative prior (Bayesian PCA with
  loadings ``N(0, τ²)``, scores ``N(0, I)``, the true noise), by annealed Gibbs sampling. This is
  the Bayes-optimal completion when the chain mixes, so an online method should not beat it;
* ``oracle``: the true subspace.

It then replaces, on the tuning stream of ``drift_breakdown.py`` (stream seed 1100,
model seed 100), the replaced class's error at each position ``p < 80`` by the best of these
estimators at ``s = p`` (measured every ``--step`` sizes, interpolated between) and prints the stream NRMSE that would give. Run:

    python -m experiments.streaming.buffer_estimators --out results/streaming_buffer_estimators
    python -m experiments.streaming.buffer_estimators --obs 0.3 --max-s 119 --out results/streaming_buffer_estimators_100_30
    python -m experiments.streaming.buffer_estimators --config 50-5-10 --obs 0.3 --out results/streaming_buffer_estimators_50_30
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from common.io import write_json  # noqa: E402
from common.report import markdown_table  # noqa: E402
from streaming.linalg import orthonormalize, posterior_mean, ppca_missing, soft_impute  # noqa: E402

POSITIONS = ((0, 10), (10, 20), (20, 40), (40, 80))


def draw(rng, U, N, p, sigma):
    n, r = U.shape
    full = (rng.standard_normal((N, r)) * math.sqrt(n / r)) @ U.T + sigma * rng.standard_normal((N, n))
    return full, rng.random((N, n)) < p


def soft_impute_posterior(X0, M, sigma, lam_factor=0.1):
    """MoSAIC's under-determined posterior: loadings ``(n, q)`` and noise variance."""
    B, obs = X0.shape[0], max(int(M.sum()), 1)
    energy = float((X0 * X0).sum()) / obs
    V, sv, Z = soft_impute(X0, M, lam_factor * math.sqrt(energy * obs / B), tol=1e-3)
    return V * (sv / math.sqrt(B)), max(energy - float((Z * Z).mean()), sigma**2)


def ppca_posterior(X0, M, r, sigma):
    L, v = soft_impute_posterior(X0, M, sigma)
    energy = float((X0 * X0).sum()) / max(int(M.sum()), 1)
    L0 = np.zeros((X0.shape[1], r))
    k = min(r, L.shape[1])
    L0[:, :k] = L[:, :k]
    if k < r:
        L0[:, k:] = 1e-3 * math.sqrt(energy) * np.random.default_rng(0).standard_normal((X0.shape[1], r - k))
    L, v = ppca_missing(X0, M, L0, v, iters=30)
    return L, max(v, sigma**2)


def gibbs_loadings(X0, M, r, v, rng, sweeps=200, burn=120, thin=2):
    """Draws ``[(n, r)]`` from the posterior of the loadings of ``x = L a + e`` (``a ~ N(0, I)``,
    rows of ``L ~ N(0, τ² I)`` with ``τ²`` matching the observed energy, ``e ~ N(0, v)``),
    annealing the noise variance from half the energy down to ``v`` over the first half."""
    s, n = X0.shape
    Mf = M.astype(float)
    energy = float((X0 * X0).sum()) / max(int(M.sum()), 1)
    tau2 = max(energy - v, 1e-3) / r
    L = rng.standard_normal((n, r)) * math.sqrt(tau2)
    eye, draws = np.eye(r), []
    for it in range(sweeps):
        vt = v * (0.5 * energy / v) ** max(0.0, 1.0 - it / (0.5 * sweeps))
        G = (Mf @ np.einsum("ia,ib->iab", L, L).reshape(n, r * r)).reshape(s, r, r) / vt + eye
        A = _sample_gaussian(rng, G, X0 @ L / vt)
        G2 = (Mf.T @ np.einsum("sa,sb->sab", A, A).reshape(s, r * r)).reshape(n, r, r) / vt + eye / tau2
        L = _sample_gaussian(rng, G2, X0.T @ A / vt)
        if it >= burn and (it - burn) % thin == 0:
            draws.append(L.copy())
    return draws


def _sample_gaussian(rng, precision, b):
    """One draw per row of ``N(P⁻¹ b, P⁻¹)``: ``precision (B, q, q)``, ``b (B, q)``."""
    C = np.linalg.cholesky(precision)  # P = C Cᵀ: x = P⁻¹ b + C⁻ᵀ z
    mu = np.linalg.solve(precision, b[..., None])[..., 0]
    z = rng.standard_normal(b.shape)
    return mu + np.linalg.solve(np.swapaxes(C, 1, 2), z[..., None])[..., 0]


def rel_sq_error(predict, full, M):
    num = den = 0.0
    for x, mk in zip(full, M, strict=True):
        idx = np.flatnonzero(mk)
        c = predict(idx, x[idx])
        num += float(((c[~mk] - x[~mk]) ** 2).sum())
        den += float((x[~mk] ** 2).sum())
    return num / den


def estimator_curve(n, r, p, sigma, sizes, trials, test):
    rows = []
    for s in sizes:
        acc: dict[str, list[float]] = {}
        for trial in range(trials):
            rng = np.random.default_rng(1000 * s + trial)
            U = orthonormalize(rng.standard_normal((n, r)))
            full, M = draw(rng, U, s, p, sigma)
            X0 = np.where(M, full, 0.0)
            tf, tM = draw(rng, U, test, p, sigma)
            L, v = soft_impute_posterior(X0, M, sigma)
            acc.setdefault("soft-impute", []).append(rel_sq_error(lambda i, xo, L=L, v=v: posterior_mean(L, v, i, xo), tf, tM))
            Lp, vp = ppca_posterior(X0, M, r, sigma)
            acc.setdefault("ppca", []).append(rel_sq_error(lambda i, xo, L=Lp, v=vp: posterior_mean(L, v, i, xo), tf, tM))
            D = gibbs_loadings(X0, M, r, sigma**2, rng)
            acc.setdefault("bayes", []).append(
                rel_sq_error(lambda i, xo, D=D: np.mean([posterior_mean(Ld, sigma**2, i, xo) for Ld in D], 0), tf, tM))
            Uo = U * math.sqrt(n / r)
            acc.setdefault("oracle", []).append(rel_sq_error(lambda i, xo, Uo=Uo: posterior_mean(Uo, sigma**2, i, xo), tf, tM))
        row = {"s": s, **{k: float(np.mean(v)) for k, v in acc.items()}}
        row["best"] = min(row["soft-impute"], row["ppca"], row["bayes"], 1.0)
        rows.append(row)
        print(f"s={s}: " + ", ".join(f"{k} {math.sqrt(row[k]):.3f}" for k in ("soft-impute", "ppca", "bayes", "oracle")), flush=True)
    return rows


def implied_stream_nrmse(curve, config="100-10-10", obs=0.4):
    """MoSAIC's per-sample errors on the tuning stream, with the replaced class's first samples
    given the best estimator's expected relative squared error at their position."""
    from experiments.streaming.drift_breakdown import _mosaic, _stream

    stream, cfg = _stream(config, 0, obs)
    completed = _mosaic(stream, cfg, 0)
    unobs = np.isnan(stream.values)
    den = np.where(unobs, stream.full**2, 0).sum(1)
    err = np.where(unobs, (completed - stream.full) ** 2, 0).sum(1)
    sizes = np.array([row["s"] for row in curve])
    best_curve = np.array([row["best"] for row in curve])
    # linear interpolation between the measured buffer sizes
    best = {p: float(np.interp(p, sizes, best_curve)) for p in range(int(sizes.max()) + 1)}
    new = err.copy()
    pos_rows = []
    for ep in range(1, stream.bases.shape[0]):
        for k in range(cfg.K):
            if not np.allclose(stream.bases[ep, k], stream.bases[ep - 1, k]):
                idx = np.flatnonzero((stream.epoch == ep) & (stream.labels == k))
                for pos, j in enumerate(idx):
                    if pos in best:
                        new[j] = min(err[j], best[pos] * den[j])
                pos_rows.append(idx)
    replaced = np.concatenate(pos_rows)
    position = np.concatenate([np.arange(len(i)) for i in pos_rows])
    out = {"mosaic_nrmse": float(np.sqrt(err.sum() / den.sum())), "best_estimator_nrmse": float(np.sqrt(new.sum() / den.sum()))}
    for lo, hi in POSITIONS:
        sel = replaced[(position >= lo) & (position < hi)]
        out[f"mosaic rel {lo}-{hi - 1}"] = float(np.sqrt(err[sel].sum() / den[sel].sum()))
        out[f"best rel {lo}-{hi - 1}"] = float(np.sqrt(new[sel].sum() / den[sel].sum()))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/streaming_buffer_estimators")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--test", type=int, default=60, help="fresh samples per trial")
    ap.add_argument("--max-s", type=int, default=79)
    ap.add_argument("--step", type=int, default=4, help="buffer sizes 1, 1+step, ..., max-s (interpolated between)")
    ap.add_argument("--config", default="100-10-10", help="a standard (n-r-K) config")
    ap.add_argument("--obs", type=float, default=0.4, help="observed fraction")
    a = ap.parse_args(argv)
    from streaming.data import STANDARD_CONFIGS

    n, r, _ = STANDARD_CONFIGS[a.config]
    curve = estimator_curve(n, r, a.obs, 0.05, sorted(set(range(1, a.max_s + 1, a.step)) | {a.max_s}), a.trials, a.test)
    curve = [{"s": 0, "soft-impute": 1.0, "ppca": 1.0, "bayes": 1.0, "oracle": float("nan"), "best": 1.0}] + curve
    stream = implied_stream_nrmse(curve, a.config, a.obs)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "buffer_estimators.json", {"config": a.config, "obs": a.obs, "curve": curve, "stream": stream,
                                                "trials": a.trials, "test": a.test})
    table = [{"s": r["s"], **{k: round(math.sqrt(r[k]), 3) for k in ("soft-impute", "ppca", "bayes", "oracle") if r["s"] > 0}}
             for r in curve if r["s"] > 0]
    print(markdown_table(table))
    print(markdown_table([stream]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
