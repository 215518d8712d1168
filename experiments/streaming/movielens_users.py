"""MovieLens users as samples: every online method predicts a user's held-out ratings when the user
arrives (``python -m experiments.streaming.movielens_users``; it was ``mosaic eval --compare``).

User + item means, GROUSE, PETRELS, MoSAIC and the pretrained k-GROUSE on the residuals of the
online means, and an offline Soft-Impute reference; each method's setting is chosen on the first
``--tune-users`` stream users, errors are on the others. The stream file comes from
``mosaic data movielens``. Writes the table and, with ``--out``, the JSON of
``docs/results/streaming/movielens.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from common.errors import DataError, InputError
from common.io import write_json
from streaming.data import Stream
from streaming.movielens import heldout_errors

#: a method maps a stream to its predictions ``(T, n)`` of every entry of each user, made when the
#: user arrived (from the source, the earlier users and the user's own observed ratings only)
Method = Callable[[Stream], np.ndarray]


RATING_RANGE = (0.5, 5.0)  # every prediction is clipped to the star scale


def bias_baseline(stream: Stream, damping: float = 5.0) -> tuple[np.ndarray, np.ndarray]:
    """Online user-mean + item-mean predictor ``μ + b_i + b_u`` (Koren 2008's baseline predictor,
    by damped means): ``μ`` the mean of every rating seen so far, ``b_i = Σ_u (x_ui − μ) / (d + c_i)``
    over the ``c_i`` earlier ratings of movie i, ``b_u = Σ_{i∈Ω_u} (x_ui − μ − b_i) / (d + |Ω_u|)``
    over the arriving user's observed ratings, ``d = damping``. Item statistics start from the
    source and take in each stream user's observed ratings after the user's prediction.
    Returns ``(source_baseline (S, n), baseline (T, n))`` (the source rows with the source's item
    statistics)."""
    S = stream.source_values if stream.source_values is not None else np.empty((0, stream.n))
    item_sum, item_cnt = np.nansum(S, 0), (~np.isnan(S)).sum(0).astype(float)

    def predict(row: np.ndarray) -> np.ndarray:
        total = item_cnt.sum()
        mu = item_sum.sum() / total if total else float(np.nanmean(row))
        b_item = (item_sum - mu * item_cnt) / (damping + item_cnt)
        obs = ~np.isnan(row)
        b_user = (row[obs] - mu - b_item[obs]).sum() / (damping + obs.sum())
        return mu + b_item + b_user

    source_base = np.array([predict(row) for row in S]).reshape(S.shape)
    base = np.empty_like(stream.values)
    for t, row in enumerate(stream.values):
        base[t] = predict(row)
        obs = ~np.isnan(row)
        item_sum[obs] += row[obs]
        item_cnt[obs] += 1
    return source_base, base


def user_item_means(damping: float = 5.0) -> Method:
    """The online user-mean + item-mean baseline (``bias_baseline``) as a method."""
    return lambda stream: bias_baseline(stream, damping)[1]


def on_residuals(make_model: Callable[[int], Any], damping: float = 5.0) -> Method:
    """An online subspace method run on the residuals of ``bias_baseline``: the model (from
    ``make_model(n)``) sees the source residuals first (``fit`` when it has one, else ``process``
    with the completions discarded), then each stream user's observed residuals;
    its completion plus the baseline is the prediction. A subspace through the origin cannot hold
    per-user and per-movie offsets with few ratings per user, which the baseline supplies."""

    def run(stream: Stream) -> np.ndarray:
        source_base, base = bias_baseline(stream, damping)
        model = make_model(stream.n)
        resid = stream.values - base
        if stream.source_values is not None:
            src = stream.source_values - source_base
            if hasattr(model, "fit"):
                model.fit(src)
            else:
                model.process(src)
        completed, _ = model.process(resid)
        return completed + base

    return run


def soft_impute_offline(lam_rel: float = 1.0, damping: float = 5.0, iters: int = 100) -> Method:
    """Offline reference (sees the future): Soft-Impute (Mazumder, Hastie & Tibshirani 2010;
    ``streaming.linalg.soft_impute``) of the whole observed matrix (source and stream users, held-out
    entries hidden) after removing offline damped user + item means; nuclear-norm threshold
    ``lam = lam_rel · σ_x √max(N, n)`` with ``σ_x`` the residuals' standard deviation (the size of
    a noise matrix's top singular value). Not a competitor of the online methods."""
    from streaming.linalg import soft_impute

    def run(stream: Stream) -> np.ndarray:
        S = stream.source_values if stream.source_values is not None else np.empty((0, stream.n))
        Y = np.vstack([S, stream.values])
        M = ~np.isnan(Y)
        mu = float(Y[M].mean())
        b_item = np.where(M, Y - mu, 0.0).sum(0) / (damping + M.sum(0))
        b_user = np.where(M, Y - mu - b_item, 0.0).sum(1) / (damping + M.sum(1))
        base = mu + b_item[None, :] + b_user[:, None]
        R0 = np.where(M, Y - base, 0.0)
        lam = lam_rel * float(R0[M].std()) * np.sqrt(max(Y.shape))
        _, _, Z = soft_impute(R0, M, lam, iters=iters)
        return (base + Z)[S.shape[0]:]

    return run


def default_methods(seed: int = 0, device: torch.device | None = None) -> dict[str, dict[str, Method]]:
    """The compared methods, each as a small grid ``{setting: method}`` whose setting is chosen on
    the tuning prefix: user + item means (damping), GROUSE and PETRELS (one rank-r subspace, from
    a random start warmed on the source), MoSAIC (K experts of rank r, pretrained on the source,
    step size η0), the pretrained k-GROUSE (MoSAIC's pretraining, then plain routed GROUSE steps of
    a constant size from ``KGROUSE_ETA_GRID``), all four on the baseline's residuals; the offline
    Soft-Impute reference. MoSAIC's and k-GROUSE's routing runs on ``device`` (None: the CPU)."""
    from experiments.streaming.stress_tuning import KGROUSE_ETA_GRID
    from streaming.baselines import Grouse, KGrouse, Petrels
    from streaming.model import MoSAIC

    def grouse(r, eta):
        return on_residuals(lambda n: Grouse(n, r, eta=eta, seed=seed))

    def petrels(r, lam):
        return on_residuals(lambda n: Petrels(n, r, lam=lam, seed=seed))

    def mosaic(K, r, eta0):
        return on_residuals(lambda n: MoSAIC(r, K, eta0=eta0, seed=seed).to(device))

    def kgrouse_pretrained(K, r, eta):
        return on_residuals(lambda n: KGrouse(r, K, eta=eta, seed=seed).to(device))

    return {
        "user_item_means": {f"damping={d}": user_item_means(d) for d in (1.0, 5.0, 25.0)},
        "grouse": {f"r={r},eta={e}": grouse(r, e) for r in (1, 2, 5) for e in (0.03, 0.1, 0.3)},
        "petrels": {f"r={r},lambda={lam}": petrels(r, lam) for r in (1, 2, 5) for lam in (0.98, 0.995, 1.0)},
        "mosaic": {f"K={K},r={r},eta0={e}": mosaic(K, r, e) for K in (2, 3, 5) for r in (1, 2, 5) for e in (0.3, 1.0)},
        "kgrouse_pretrained": {f"K={K},r={r},eta={e}": kgrouse_pretrained(K, r, e)
                               for K in (2, 3, 5) for r in (1, 2, 5) for e in KGROUSE_ETA_GRID},
        "soft_impute_offline": {f"lam_rel={v}": soft_impute_offline(v) for v in (0.25, 0.5, 1.0, 2.0)},
    }


OFFLINE = frozenset({"soft_impute_offline"})  # methods that see the whole matrix: references only


def evaluate_heldout(stream: Stream, methods: dict[str, Method | dict[str, Method]], tune_users: int = 150) -> dict:
    """Held-out RMSE/NRMSE of every method on ``stream`` (which must have ``heldout``).

    ``methods``: name -> a ``Method`` or a grid ``{setting: Method}``; every grid point runs on the
    whole stream (methods are causal, so its predictions on the first ``tune_users`` users are
    those of a run on them alone), the setting with the lowest RMSE there is chosen, and the
    reported ``test`` errors are on the users after them. Predictions are clipped to
    ``RATING_RANGE``. Returns ``{"methods": {name: {"setting", "tune", "test", "all", "time_s",
    "grid": {setting: {"tune_rmse", "test_rmse"}}}}, "tune_users", "test_users", "ranking"}``
    with ``ranking`` the names by test RMSE.
    """
    if stream.heldout is None:
        raise DataError("the stream has no held-out entries (write it with `mosaic data movielens`)")
    T = stream.values.shape[0]
    if not 0 < tune_users < T:
        raise InputError(f"--tune-users must be in [1, {T - 1}] for a stream of {T} users")
    H = stream.heldout
    out: dict = {}
    for name, grid in methods.items():
        grid = grid if isinstance(grid, dict) else {"default": grid}
        rows, preds = {}, {}
        start = time.perf_counter()
        for setting, method in grid.items():
            P = np.clip(method(stream), *RATING_RANGE)
            if P.shape != H.shape:
                raise DataError(f"{name} ({setting}) predicted shape {P.shape}, expected {H.shape}")
            preds[setting] = P
            rows[setting] = {"tune_rmse": heldout_errors(P[:tune_users], H[:tune_users])["rmse"],
                             "test_rmse": heldout_errors(P[tune_users:], H[tune_users:])["rmse"]}
        best = min(rows, key=lambda k: rows[k]["tune_rmse"])
        P = preds[best]
        out[name] = {
            "setting": best, "offline": name in OFFLINE,
            "tune": heldout_errors(P[:tune_users], H[:tune_users]),
            "test": heldout_errors(P[tune_users:], H[tune_users:]),
            "all": heldout_errors(P, H),
            "time_s": (time.perf_counter() - start) / len(grid), "grid": rows,
        }
    ranking = sorted(out, key=lambda k: out[k]["test"]["rmse"])
    return {"tune_users": tune_users, "test_users": T - tune_users, "methods": out, "ranking": ranking}


def format_table(result: dict) -> str:
    """Markdown table of ``evaluate_heldout``'s result (test part; ratio to user + item means)."""
    ref = result["methods"].get("user_item_means", {}).get("test", {}).get("rmse", float("nan"))
    lines = ["| method | setting (chosen on tuning users) | test RMSE | test NRMSE | vs user+item means |",
             "|---|---|---|---|---|"]
    for name in result["ranking"]:
        m = result["methods"][name]
        label = f"{name} (offline reference)" if m["offline"] else name
        lines.append(f"| {label} | {m['setting']} | {m['test']['rmse']:.4f} | {m['test']['nrmse']:.4f} | "
                     f"{m['test']['rmse'] / ref:.3f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    from common.device import resolve_device
    from streaming.data import load_stream
    from streaming.harness import limit_threads

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", required=True, help="a stream file of `mosaic data movielens`")
    p.add_argument("--tune-users", type=int, default=150)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    stream = load_stream(a.input)
    if stream.heldout is None or stream.source_values is None:
        raise DataError(f"{a.input} needs 'heldout' and 'source_values' (write it with `mosaic data movielens`)")
    limit_threads()
    result = evaluate_heldout(stream, default_methods(seed=a.seed, device=resolve_device(a.device)),
                              tune_users=a.tune_users)
    result["command"] = "python -m experiments.streaming.movielens_users " + " ".join(argv or sys.argv[1:])
    result["stream"] = {"file": str(a.input), "users": int(stream.values.shape[0]), "n": int(stream.n),
                        "source_users": int(stream.source_values.shape[0]), "seed": a.seed}
    print(format_table(result))
    if a.out:
        write_json(a.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
