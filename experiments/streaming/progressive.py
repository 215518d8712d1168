"""Progressive validation of online recommenders on a rating stream (``mosaic eval --protocol
progressive``): every rating is predicted from everything before it, then learned.

Protocol (``evaluate_progressive``): the first ``tune_frac`` (20 %) of the events by time are the
tuning part, the rest the evaluated part. Each method is a small grid ``{setting: factory}``; a
setting is scored by a progressive run over the tuning part alone (a model built with
``pretrain_at`` = half of it, errors on its second half), the lowest RMSE wins, and that setting
runs once over the whole stream (``pretrain_at`` = the tuning part) with errors on the evaluated
part only. Predictions are clipped to the rating range of the tuning part. Reported per method:
RMSE and MAE overall, per time slice (``slices`` equal-count slices of the evaluated part), for
cold users (a user's first ``COLD`` ratings in the stream) and for new items (an item's first
``COLD`` ratings), the ratings per second of the whole run, and the tuning scores.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from common.cli import cli_main
from experiments.streaming.ratings import RatingStream

#: a user's (an item's) first this many ratings in the stream count as a cold user's (a new item's)
COLD = 5
TUNE_FRAC = 0.2
Factory = Callable[[int], object]  # pretrain_at -> a model with learn_one / predict_one


def predict_then_learn(stream: RatingStream, model, stop: int | None = None,
                       clip: tuple[float, float] | None = None) -> np.ndarray:
    """Progressive run over the first ``stop`` events (all when None): ``predictions (stop,)``, each
    made before its rating is learned, clipped to ``clip``."""
    stop = len(stream) if stop is None else stop
    out = np.empty(stop)
    users, items, ratings = stream.user.tolist(), stream.item.tolist(), stream.rating.tolist()
    for t in range(stop):
        out[t] = model.predict_one(users[t], items[t])
        model.learn_one(users[t], items[t], ratings[t])
    return out if clip is None else np.clip(out, *clip)


def prior_counts(index: np.ndarray) -> np.ndarray:
    """``(T,)``: how many earlier events share each event's user (or item) index."""
    seen: dict[int, int] = {}
    out = np.empty(index.shape[0], np.int64)
    for t, k in enumerate(index.tolist()):
        out[t] = seen.get(k, 0)
        seen[k] = out[t] + 1
    return out


def errors(pred: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """RMSE and MAE of predictions against ratings (NaN for none) and their count."""
    if y.size == 0:
        return {"rmse": float("nan"), "mae": float("nan"), "ratings": 0}
    d = pred - y
    return {"rmse": float(np.sqrt(np.mean(d * d))), "mae": float(np.mean(np.abs(d))), "ratings": int(y.size)}


def progressive_metrics(stream: RatingStream, pred: np.ndarray, start: int, slices: int = 8) -> dict:
    """Errors of ``pred (T,)`` on the events from ``start`` on: overall, per time slice, cold users,
    new items."""
    y = stream.rating[start:]
    p = pred[start:]
    cold = prior_counts(stream.user)[start:] < COLD
    new = prior_counts(stream.item)[start:] < COLD
    parts = np.array_split(np.arange(y.size), slices)
    ts = stream.timestamp[start:]
    return {
        **errors(p, y),
        "slices": [{"slice": k, **errors(p[s], y[s]), "from_ts": int(ts[s[0]]), "to_ts": int(ts[s[-1]])}
                   for k, s in enumerate(parts) if s.size],
        "cold_users": errors(p[cold], y[cold]),
        "warm_users": errors(p[~cold], y[~cold]),
        "new_items": errors(p[new], y[new]),
    }


def evaluate_progressive(stream: RatingStream, methods: dict[str, dict[str, Factory]], tune_frac: float = TUNE_FRAC,
                         slices: int = 8) -> dict:
    """Every method of ``methods`` under the protocol of the module docstring. Returns
    ``{"protocol", "methods": {name: {"setting", "tuning": {setting: rmse}, metrics...,
    "ratings_per_s"}}}``."""
    T = len(stream)
    cut = int(tune_frac * T)
    if cut < 2 or cut >= T:
        raise ValueError(f"the tuning part ({cut} of {T} events) must hold at least 2 and leave some to evaluate")
    clip = (float(stream.rating[:cut].min()), float(stream.rating[:cut].max()))
    half = cut // 2
    out: dict = {"protocol": {"events": T, "tuning_events": cut, "tune_frac": tune_frac, "clip": list(clip),
                              "cold": COLD, "slices": slices, "users": stream.n_users, "items": stream.n_items},
                 "methods": {}}
    for name, grid in methods.items():
        tuning = {}
        for setting, make in grid.items():
            pred = predict_then_learn(stream, make(half), stop=cut, clip=clip)
            tuning[setting] = errors(pred[half:], stream.rating[half:cut])["rmse"]
        best = min(tuning, key=tuning.get)
        t0 = time.process_time()
        pred = predict_then_learn(stream, grid[best](cut), clip=clip)
        cpu_s = time.process_time() - t0
        out["methods"][name] = {"setting": best, **progressive_metrics(stream, pred, cut, slices),
                                "ratings_per_s": T / max(cpu_s, 1e-9), "tuning": tuning}
    return out


def default_methods(seed: int = 0, items: int = 500, device: torch.device | None = None) -> dict[str, dict[str, Factory]]:
    """The compared online methods as grids chosen on the tuning part: the damped online user + item
    means (damping), MoSAIC on the residuals of its SGD biases (``MoSAICRecommender``: the biases'
    learning rate, r, η0 and the fold-in ridge λ; K = 2, the choice of a K in {2, 3} grid on the
    tuning part) and the pretrained
    k-GROUSE on the same residuals (the same recommender with MoSAIC's pretraining but plain routed
    GROUSE steps of a constant size: no schedule, change detection or completion cap; K, r, η), and
    river's reco models (``experiments.streaming.river_reco.river_methods``; needs the ``bench`` extra)."""
    from experiments.streaming.recommend import MoSAICRecommender, OnlineBiases
    from experiments.streaming.river_reco import river_methods
    from streaming.baselines import KGrouse

    def biases(d: float) -> Factory:
        return lambda pretrain_at: OnlineBiases(d)

    def mosaic(K: int, r: int, eta0: float, lam: float, lr: float) -> Factory:
        return lambda pretrain_at: MoSAICRecommender(r, K, items=items, pretrain_at=pretrain_at, seed=seed,
                                                     eta0=eta0, fold_ridge=lam,
                                                     bias_lr=lr, device=device)

    def kgrouse(K: int, r: int, eta: float) -> Factory:
        return lambda pretrain_at: MoSAICRecommender(
            r, K, items=items, pretrain_at=pretrain_at, seed=seed, experts=KGrouse, eta=eta, device=device)

    return {
        "user_item_means": {f"damping={d}": biases(d) for d in (1.0, 5.0, 25.0)},
        "kgrouse_pretrained": {f"K=2,r={r},eta={e}": kgrouse(2, r, e) for r in (1, 2) for e in (0.1, 0.5)},
        "mosaic": {f"K=2,r={r},eta0={e},fold_ridge={lam},bias_lr={lr}": mosaic(2, r, e, lam, lr)
                   for r in (1, 2) for e in (0.3, 1.0) for lam in (0.5, 5.0) for lr in (0.025, 0.05)},
        **river_methods(seed),
    }


def format_table(result: dict) -> str:
    """The result as a markdown table, one row per method (online methods, then the offline references
    of ``result["references"]``, if any; a reference refit on fewer slices is scored on those only)."""
    rows = ["| method | setting | RMSE | MAE | cold users RMSE | new items RMSE | last slice RMSE | ratings/s |",
            "|---|---|---|---|---|---|---|---|"]
    groups = [("", result["methods"]), ("offline ", result.get("references", {}))]
    for kind, methods in groups:
        for name, m in sorted(methods.items(), key=lambda kv: kv[1]["rmse"]):
            where = f" ({m['refits']} last slice{'s' if m['refits'] > 1 else ''} only)" if (
                kind and m["refits"] < result["protocol"]["slices"]) else ""
            rows.append(f"| {kind}{name} | {m['setting']}{where} | {m['rmse']:.4f} | {m['mae']:.4f} | "
                        f"{m['cold_users']['rmse']:.4f} | {m['new_items']['rmse']:.4f} | {m['slices'][-1]['rmse']:.4f} | "
                        f"{m['ratings_per_s']:,.0f} |")
    return "\n".join(rows)


@cli_main
def main(argv: list[str] | None = None) -> int:
    """``python -m experiments.streaming.progressive --input FILE [--out r.json]``: every method of
    ``default_methods`` predicts each rating before learning it, settings chosen on the first
    ``--tune-frac`` of the stream, with the offline references of ``experiments.streaming.refit``
    (it was ``mosaic eval --protocol progressive``). ``FILE`` is a rating-stream ``.npz``
    (``--write-stream``), a CSV with the columns user,item,rating,timestamp, or ``movielens`` (dslabs'
    MovieLens latest-small from the Debian package ``r-cran-dslabs``, or ``--data-dir``)."""
    import sys

    from common.cli import ArgumentParser, check_outputs, float_in, int_in, seed_int
    from common.device import add_device_arg, resolve_device
    from common.errors import InputError
    from common.io import write_json
    from experiments.streaming.ratings import from_movielens, load_ratings, read_ratings_csv, save_ratings
    from streaming.harness import announce, limit_threads

    p = ArgumentParser(prog="python -m experiments.streaming.progressive", description=main.__doc__.splitlines()[0])
    p.add_argument("--input", required=True, help="a rating-stream .npz, a ratings CSV, or 'movielens'")
    p.add_argument("--data-dir", default=None, help="--input movielens: the dslabs data directory")
    p.add_argument("--write-stream", default=None, help="also save the rating stream (.npz) here")
    p.add_argument("--tune-frac", type=float_in(0.0, 1.0, lo_open=True, hi_open=True), default=0.2)
    p.add_argument("--items", type=int_in(2, 100_000), default=500, help="MoSAIC's coordinates, the most-rated items")
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--out", default=None, help="write the result JSON here")
    p.add_argument("--overwrite", action="store_true")
    add_device_arg(p)
    a = p.parse_args(argv)
    check_outputs(files=[a.out, a.write_stream], inputs=[] if a.input == "movielens" else [a.input],
                  overwrite=a.overwrite)
    if a.input == "movielens":
        from streaming.movielens import MOVIELENS_ROWS, load_movielens

        stream = from_movielens(load_movielens(a.data_dir, expected_rows=None if a.data_dir else MOVIELENS_ROWS))
    elif a.input.endswith(".csv"):
        stream = read_ratings_csv(a.input)
    else:
        stream = load_ratings(a.input)
    if a.write_stream:
        save_ratings(a.write_stream, stream)
    limit_threads()
    try:
        from experiments.streaming.refit import evaluate_refit, surprise_methods

        methods = default_methods(seed=a.seed, items=a.items, device=resolve_device(a.device))
        references = surprise_methods(seed=a.seed)
    except ImportError as exc:
        raise InputError(f"needs the bench extra (river, scikit-surprise): {exc}") from None
    announce(f"progressive: {len(stream)} ratings")
    try:
        result = evaluate_progressive(stream, methods, tune_frac=a.tune_frac)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    result["references"] = evaluate_refit(stream, references, tune_frac=a.tune_frac)
    result["command"] = "python -m experiments.streaming.progressive " + " ".join(argv if argv is not None else sys.argv[1:])
    result["stream"] = {"file": str(a.input), "seed": a.seed, "items": a.items}
    print(format_table(result))
    if a.out:
        write_json(a.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
