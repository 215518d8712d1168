"""Metrics and protocols: Pearson r, Kendall tau, RMSE with bootstrap 95% CI; macro ROC-AUC; a
predictor's test metrics on a split."""

from __future__ import annotations

import numpy as np
from scipy.stats import kendalltau, pearsonr
from sklearn.metrics import roc_auc_score


def regression_metrics(y: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    """``{"pearson", "kendall", "rmse"}`` of predictions ``pred (N,)`` against ``y (N,)``."""
    y, pred = np.asarray(y, np.float64), np.asarray(pred, np.float64)
    if len(y) < 3 or np.std(pred) < 1e-12 or np.std(y) < 1e-12:
        r = tau = float("nan")
    else:
        r = float(pearsonr(y, pred)[0])
        tau = float(kendalltau(y, pred)[0])
    return {"pearson": r, "kendall": tau, "rmse": float(np.sqrt(np.mean((y - pred) ** 2)))}


def pair_metrics(y: np.ndarray, pred: np.ndarray, self_pair: np.ndarray) -> dict[str, float]:
    """:func:`regression_metrics` on all pairs (``all_*``) and without self-pairs (``noself_*``);
    ``self_pair (N,)`` bool marks a mixture compared with itself."""
    y, pred, keep = np.asarray(y), np.asarray(pred), ~np.asarray(self_pair, bool)
    out = {f"all_{k}": v for k, v in regression_metrics(y, pred).items()}
    out.update({f"noself_{k}": v for k, v in regression_metrics(y[keep], pred[keep]).items()})
    return out


def gated_network_share(
    net: np.ndarray, base: np.ndarray, y: np.ndarray, step: float = 0.05, n_boot: int = 200, seed: int = 0
) -> dict[str, float]:
    """Share ``alpha`` of a network in the blend ``alpha * net + (1 - alpha) * base`` (each ``(n,)``
    validation predictions, ``y (n,)`` their targets), by a one-standard-error rule: the base is kept
    alone unless adding the network clearly improves it.

    1. ``alpha*``: the multiple of ``step`` in [0, 1] with the lowest RMSE of the blend;
    2. ``gain = r(blend(alpha*)) - r(base)`` (Pearson r on the rows);
    3. ``se``: standard deviation of ``gain`` over ``n_boot`` paired bootstrap resamples of the rows
       (``alpha*`` fixed, seeded by ``seed``);
    4. ``alpha = alpha*`` if ``gain > se``, else 0.

    The rule and its constants are fixed a priori (the usual one-SE rule; not tuned on any test
    rows). Returns ``{"share", "share_unguarded", "gain", "gain_se"}``."""
    net, base, y = (np.asarray(a, np.float64) for a in (net, base, y))
    if not (net.shape == base.shape == y.shape) or net.ndim != 1:
        raise ValueError(f"net, base and y must be (n,) of one length, got {net.shape}, {base.shape}, {y.shape}")
    alphas = np.linspace(0.0, 1.0, int(round(1.0 / step)) + 1)
    rmse = [float(np.sqrt(np.mean((a * net + (1 - a) * base - y) ** 2))) for a in alphas]
    best = float(alphas[int(np.argmin(rmse))])  # ties go to the smaller share
    blend = best * net + (1 - best) * base

    def r(t, p):
        return float(np.corrcoef(t, p)[0, 1]) if np.std(p) > 1e-12 and np.std(t) > 1e-12 else 0.0

    gain = r(y, blend) - r(y, base)
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        i = rng.integers(0, len(y), len(y))
        boots.append(r(y[i], blend[i]) - r(y[i], base[i]))
    se = float(np.std(boots, ddof=1)) if n_boot > 1 else float("inf")
    keep = best > 0 and gain > se
    return {"share": best if keep else 0.0, "share_unguarded": best, "gain": gain, "gain_se": se}


def bootstrap_ci(
    y: np.ndarray, pred: np.ndarray, n_boot: int = 1000, seed: int = 0, alpha: float = 0.05
) -> dict[str, tuple[float, float]]:
    """Percentile bootstrap CI (resampling rows) for each metric of :func:`regression_metrics`."""
    rng = np.random.default_rng(seed)
    y, pred = np.asarray(y), np.asarray(pred)
    stats: dict[str, list[float]] = {"pearson": [], "kendall": [], "rmse": []}
    for _ in range(n_boot):
        idx = rng.integers(0, len(y), len(y))
        for k, v in regression_metrics(y[idx], pred[idx]).items():
            stats[k].append(v)
    return {
        k: (float(np.nanpercentile(v, 100 * alpha / 2)), float(np.nanpercentile(v, 100 * (1 - alpha / 2))))
        for k, v in stats.items()
    }


def summarize_folds(folds: list[dict], n_boot: int = 1000, seed: int = 0) -> dict[str, float]:
    """Aggregate per-fold test predictions ``[{"y", "pred", "self_pair"}]``: mean/std over folds of
    each metric, and a bootstrap CI on the pooled predictions; once on all test pairs (``all_``)
    and once without self-pairs (``noself_``)."""
    out: dict[str, float] = {}
    for tag in ("all", "noself"):
        per_fold = []
        ys, ps = [], []
        for f in folds:
            keep = np.ones(len(f["y"]), bool) if tag == "all" else ~np.asarray(f["self_pair"], bool)
            per_fold.append(regression_metrics(f["y"][keep], f["pred"][keep]))
            ys.append(f["y"][keep])
            ps.append(f["pred"][keep])
        ci = bootstrap_ci(np.concatenate(ys), np.concatenate(ps), n_boot=n_boot, seed=seed)
        for m in ("pearson", "kendall", "rmse"):
            vals = np.array([p[m] for p in per_fold])
            out[f"{tag}_{m}"] = float(np.nanmean(vals))
            out[f"{tag}_{m}_std"] = float(np.nanstd(vals))
            out[f"{tag}_{m}_lo"], out[f"{tag}_{m}_hi"] = ci[m]
    return out


def macro_roc_auc(y: np.ndarray, scores: np.ndarray, min_pos: int = 1) -> float:
    """Unweighted mean ROC-AUC over label columns that have both classes (>= ``min_pos`` each)."""
    aucs = []
    for j in range(y.shape[1]):
        pos = y[:, j].sum()
        if pos >= min_pos and len(y) - pos >= min_pos:
            aucs.append(roc_auc_score(y[:, j], scores[:, j]))
    return float(np.mean(aucs)) if aucs else float("nan")


def evaluate_predictor(predictor, pairs, split) -> dict:
    """Test metrics of a :class:`~olfaction.predictor.MixturePredictor` (or
    :class:`~olfaction.inference.OnnxPredictor`) on ``split.testing`` of ``pairs``: the combined
    distance (``all_*`` / ``noself_*``, :func:`pair_metrics`), each component's
    (``network/...``, ``trees/...``, ``ridge/...``) and ``n_test``."""
    rows = split.testing
    mix_a, mix_b = pairs.sides()
    parts = predictor.predict_components(
        [mix_a[i] for i in rows], [mix_b[i] for i in rows], [pairs.dataset[i] for i in rows]
    )
    out = pair_metrics(pairs.y[rows], parts.pop("combined"), pairs.self_pair[rows])
    for name, pred in parts.items():
        out.update({f"{name}/{k}": v for k, v in pair_metrics(pairs.y[rows], pred, pairs.self_pair[rows]).items()})
    out["n_test"] = int(len(rows))
    return out
