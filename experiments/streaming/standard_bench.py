"""The in-house benchmark (it was ``mosaic bench --suite standard``): MoSAIC vs baselines on the
standard configs × drift kinds × seeds, a Fashion-MNIST stream (``--fashion``), the (10000, 10, 20)
memory check (``--large``) and the throughput table (``--throughput``, ``experiments.streaming.throughput``).
``python -m experiments.streaming.standard_bench --out DIR [--seeds 10] [--quick] [--configs ...]
[--drifts ...] [--no-fashion] [--large] [--throughput] [--workers N]``.

Writes ``trials.csv`` (tidy: one row per config, drift, seed, method), ``summary.csv`` and
``summary.md`` (mean ± 95% CI over seeds), ``targets.json`` (the issue's targets, checked),
and ``curve_<config>_<drift>.png`` (per-sample completion error over time, drift points marked).
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import numpy as np
import torch

from common.io import write_csv, write_json
from common.report import markdown_table
from streaming.harness import announce, limit_threads, map_jobs
from streaming.kss import k_subspaces_missing
from streaming.linalg import batch_fit

METHODS = ("mosaic", "kgrouse_pretrained", "mosaic-nopretrain", "k-grouse", "grouse-r", "grouse-Kr", "petrels", "offline-kss", "oracle")
#: observed fraction per config: 40%, except (25, 5, 5) where K·r = n and m ≈ 10 leaves 5 residual
#: dof per sample; there pretraining does not separate the clusters at 40% (measured), at 50% it does
OBS_FRAC = {"25-5-5": 0.5}
#: the offline reference sees the whole stream and costs more than all online methods together:
#: it runs on the first seeds only (its rows say how many), so the 10-seed bench fits in ~20 min
REFERENCE_SEEDS = 2
#: (n, r, K) of the memory-scaling check (``--large``)
LARGE_CONFIG: tuple[int, int, int] = (10000, 10, 20)
METRICS = ("nrmse", "nrmse_last_epoch", "subspace_err_final", "subspace_err_after_drift", "routing_acc",
           "recovery_mean", "recovered_frac", "us_per_sample", "memory_bytes")


def offline_kss(values: np.ndarray, K: int, r: int, seed: int = 0, restarts: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Batch k-subspaces on the whole ``(T, n)`` stream; returns ``(completed, routes, bases)``."""
    M = ~np.isnan(values)
    X0 = np.where(M, values, 0.0)
    res = k_subspaces_missing(X0, M, K, r, restarts=restarts, seed=seed)
    W, _ = batch_fit(res.bases, X0, M)
    est = np.einsum("tnr,tr->tn", res.bases[res.labels], W[np.arange(len(res.labels)), res.labels])
    return np.where(M, X0, est), res.labels, res.bases


def run_with_snapshots(model, stream, every: int) -> dict:
    """Stream ``stream`` through ``model`` in chunks of ``every`` samples (``model.process`` is the same
    on any chunking), with a copy of ``model.bases_`` after each: ``completed (T, n)``, ``routes (T,)``,
    ``snapshot_t`` (the last sample of each chunk), ``snapshots`` (each ``(K, n, r)``), the time per
    sample and ``memory_bytes``."""
    T = stream.values.shape[0]
    completed, routes, snapshot_t, snapshots = [], [], [], []
    elapsed = 0.0
    for s in range(0, T, every):
        e = min(s + every, T)
        t0 = time.perf_counter()
        c, r = model.process(stream.values[s:e], epoch=stream.epoch[s:e])
        elapsed += time.perf_counter() - t0
        completed.append(c), routes.append(r), snapshot_t.append(e - 1), snapshots.append(model.bases_.copy())
    return {"completed": np.concatenate(completed), "routes": np.concatenate(routes), "snapshot_t": snapshot_t,
            "snapshots": snapshots, "time_per_sample_s": elapsed / T, "memory_bytes": model.memory_bytes()}


def snapshot_metrics(stream, run: dict | None) -> dict:
    """Matched subspace error (``streaming.evaluate.subspace_error``) of the last snapshot and the mean
    after the first drift point, time per sample and state bytes of a ``run_with_snapshots`` run
    (NaN without a run or for single-subspace methods)."""
    from streaming.evaluate import subspace_error

    row = {"subspace_err_final": float("nan"), "subspace_err_after_drift": float("nan")}
    if run is None:
        return row
    if run["snapshots"][0].shape[0] > 1:
        curve = np.array([subspace_error(S, stream.bases[stream.epoch[t]])[0]
                          for t, S in zip(run["snapshot_t"], run["snapshots"], strict=True)])
        drifts = stream.drift_points()
        after = np.asarray(run["snapshot_t"]) >= (drifts[0] if drifts else 0)
        row["subspace_err_final"] = float(curve[-1])
        row["subspace_err_after_drift"] = float(curve[after].mean()) if after.any() else float(curve.mean())
    return {**row, "us_per_sample": run["time_per_sample_s"] * 1e6, "memory_bytes": run["memory_bytes"]}


def run_trial(
    config: str, drift: str, seed: int, quick: bool = False, methods=METHODS, keep_curves: bool = False,
    obs_frac: float | None = None, device: torch.device | None = None,
) -> tuple[list[dict], dict]:
    """One stream, every method. Returns tidy rows and (if ``keep_curves``) per-sample errors.
    ``obs_frac`` overrides the config's observed fraction (``OBS_FRAC``, else 0.4); MoSAIC's routing
    runs on ``device`` (None: the CPU)."""
    from streaming.baselines import Grouse, KGrouse, Petrels, oracle_completion
    from streaming.data import STANDARD_CONFIGS, StreamConfig, generate_stream
    from streaming.evaluate import per_sample_nrmse, summarize
    from streaming.model import MoSAIC

    limit_threads()
    n, r, K = STANDARD_CONFIGS[config]
    spe = (100 if quick else 200) * K
    frac = obs_frac if obs_frac is not None else OBS_FRAC.get(config, 0.4)
    cfg = StreamConfig(n=n, r=r, K=K, obs_frac=frac, drift=drift, epochs=4, samples_per_epoch=spe, seed=1000 + seed)
    stream = generate_stream(cfg)
    every = max(spe // 10, 1)
    rows, curves = [], {}
    pretrained = None  # MoSAIC's pretrained experts, shared with the pretrained k-GROUSE
    base = {"config": config, "drift": drift, "seed": seed, "obs_frac": cfg.obs_frac, "T": stream.values.shape[0]}
    for method in methods:
        if method == "offline-kss" and seed >= REFERENCE_SEEDS:
            continue
        t0 = time.perf_counter()
        run = None
        if method == "oracle":
            completed, routes = oracle_completion(stream.values, stream.labels, stream.epoch, stream.bases, cfg.noise_std), stream.labels
        elif method == "offline-kss":
            completed, routes, _ = offline_kss(stream.values, K, r, seed=seed, restarts=2)
        else:
            if method in ("mosaic", "kgrouse_pretrained"):
                if pretrained is None:
                    pretrained = MoSAIC(r, K, seed=seed, pretrain_restarts=3 if quick else 16).to(device).fit(stream.source_values)
                model = copy.deepcopy(pretrained) if method == "mosaic" else KGrouse.from_mosaic(pretrained)
            elif method == "mosaic-nopretrain":
                model = MoSAIC(r, K, seed=seed)
            elif method == "k-grouse":
                model = KGrouse(r, K, eta=0.3, seed=seed)
            elif method == "grouse-r":
                model = Grouse(n, r, seed=seed)
            elif method == "grouse-Kr":
                model = Grouse(n, K * r, seed=seed)
            elif method == "petrels":
                model = Petrels(n, r, seed=seed)
            else:
                raise ValueError(f"unknown method {method}")
            run = run_with_snapshots(model, stream, every)
            completed, routes = run["completed"], run["routes"]
        row = {**base, "method": method, **summarize(stream, completed, routes), **snapshot_metrics(stream, run),
               "wall_s": time.perf_counter() - t0}
        rows.append(row)
        if keep_curves:
            curves[method] = per_sample_nrmse(completed, stream.full, stream.values)
    if keep_curves:
        curves["_drifts"] = np.asarray(stream.drift_points())
    return rows, curves


def mean_ci(values, confidence: float = 0.95) -> tuple[float, float]:
    """Mean and half-width of the t-based confidence interval (NaNs dropped)."""
    from scipy import stats

    v = np.asarray([x for x in values if np.isfinite(x)], float)
    if v.size == 0:
        return float("nan"), float("nan")
    if v.size == 1:
        return float(v[0]), 0.0
    half = stats.t.ppf(0.5 + confidence / 2, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size)
    return float(v.mean()), float(half)


def _trial_star(args):
    return run_trial(*args)


def fashion_trial(seed: int = 0, quick: bool = False, K_r: tuple[int, int] = (5, 10),
                  device: torch.device | None = None) -> list[dict]:
    """Fashion-MNIST stream (5 classes, 14×14, 40% observed): completion NRMSE per method."""
    from experiments.streaming.fashion import fashion_mnist_stream
    from streaming.baselines import Grouse, KGrouse, Petrels
    from streaming.evaluate import nrmse_unobserved, routing_accuracy
    from streaming.harness import run_online
    from streaming.model import MoSAIC

    limit_threads()
    K, r = K_r
    stream = fashion_mnist_stream(samples_per_epoch=400 if quick else 1000, source_per_class=150 if quick else 300, seed=seed)
    n = stream.n
    pretrained = MoSAIC(r, K, seed=seed, pretrain_restarts=2 if quick else 4).to(device).fit(stream.source_values)
    models = {
        "mosaic": lambda: copy.deepcopy(pretrained),
        "kgrouse_pretrained": lambda: KGrouse.from_mosaic(pretrained),
        "mosaic-nopretrain": lambda: MoSAIC(r, K, seed=seed),
        "k-grouse": lambda: KGrouse(r, K, eta=0.3, seed=seed),
        "grouse-r": lambda: Grouse(n, r, seed=seed),
        "grouse-Kr": lambda: Grouse(n, K * r, seed=seed),
        "petrels": lambda: Petrels(n, r, seed=seed),
    }
    rows = []
    for name, make in models.items():
        t0 = time.perf_counter()
        model = make()  # (the shared pretraining is not in MoSAIC's and k-GROUSE's wall_s)
        run = run_online(model, stream.values, stream.epoch)
        rows.append({
            "config": "fashion-mnist", "drift": "mix+appearance", "seed": seed, "method": name,
            "nrmse": nrmse_unobserved(run.completed, stream.full, stream.values),
            "routing_acc": routing_accuracy(run.routes, stream.labels, stream.epoch) if (run.routes >= 0).any() else float("nan"),
            "us_per_sample": run.time_per_sample_s * 1e6, "wall_s": time.perf_counter() - t0,
        })
    return rows


def aggregate(rows: list[dict]) -> list[dict]:
    """Mean ± 95% CI over seeds for each (config, drift, method)."""

    keys = sorted({(r["config"], r["drift"], r["method"]) for r in rows}, key=lambda k: (k[0], k[1], METHODS.index(k[2]) if k[2] in METHODS else 99))
    out = []
    for cfg, drift, method in keys:
        sel = [r for r in rows if (r["config"], r["drift"], r["method"]) == (cfg, drift, method)]
        row = {"config": cfg, "drift": drift, "method": method, "seeds": len(sel)}
        for m in METRICS:
            if m in sel[0]:
                mean, half = mean_ci([r.get(m, float("nan")) for r in sel])
                row[m] = mean
                row[m + "_ci"] = half
        out.append(row)
    return out


def check_targets(summary: list[dict]) -> dict:
    """The issue's benchmark targets, evaluated on the aggregated rows (synthetic configs)."""
    synth = [r for r in summary if r["config"] != "fashion-mnist"]

    def get(cfg, drift, method, metric):
        for r in synth:
            if (r["config"], r["drift"], r["method"]) == (cfg, drift, method):
                return r.get(metric, float("nan"))
        return float("nan")

    groups = sorted({(r["config"], r["drift"]) for r in synth})
    baselines = [m for m in METHODS if m not in ("mosaic", "oracle", "offline-kss")]
    t: dict = {"per_group": []}
    for cfg, drift in groups:
        mo_n, mo_s = get(cfg, drift, "mosaic", "nrmse"), get(cfg, drift, "mosaic", "subspace_err_final")
        best_n = np.nanmin([get(cfg, drift, m, "nrmse") for m in baselines])
        best_s = np.nanmin([get(cfg, drift, m, "subspace_err_final") for m in baselines])
        kg = get(cfg, drift, "k-grouse", "subspace_err_after_drift")
        orc = get(cfg, drift, "oracle", "nrmse")
        t["per_group"].append({
            "config": cfg, "drift": drift, "mosaic_nrmse": mo_n, "best_baseline_nrmse": best_n,
            "mosaic_subspace_err": mo_s, "best_baseline_subspace_err": best_s,
            "after_drift_ratio_vs_kgrouse": get(cfg, drift, "mosaic", "subspace_err_after_drift") / kg,
            "nrmse_ratio_vs_oracle": mo_n / orc, "mosaic_recovery": get(cfg, drift, "mosaic", "recovery_mean"),
            "kgrouse_recovery": get(cfg, drift, "k-grouse", "recovery_mean"),
            "us_ratio_vs_K_grouse": get(cfg, drift, "mosaic", "us_per_sample")
            / (int(cfg.split("-")[2]) * get(cfg, drift, "grouse-r", "us_per_sample")),
        })
    g = t["per_group"]
    t["nrmse_below_every_baseline"] = all(x["mosaic_nrmse"] < x["best_baseline_nrmse"] for x in g)
    t["subspace_err_below_every_baseline"] = all(x["mosaic_subspace_err"] < x["best_baseline_subspace_err"] for x in g)
    t["after_drift_le_half_kgrouse"] = all(x["after_drift_ratio_vs_kgrouse"] <= 0.5 for x in g)
    easy = [x for x in g if x["config"] in ("50-5-10", "100-10-10")]
    t["nrmse_le_0.1_easy"] = all(x["mosaic_nrmse"] <= 0.1 for x in easy) if easy else None
    t["within_2x_oracle_easy"] = all(x["nrmse_ratio_vs_oracle"] <= 2 for x in easy) if easy else None
    hard = [x for x in g if x["config"] == "100-25-5"]
    t["nrmse_lt_0.5_hard"] = all(x["mosaic_nrmse"] < 0.5 for x in hard) if hard else None
    abrupt = [x for x in g if x["drift"] == "abrupt"]
    t["recovery_le_100"] = all(x["mosaic_recovery"] <= 100 for x in abrupt) if abrupt else None
    t["time_le_1.5x_K_grouse"] = all(x["us_ratio_vs_K_grouse"] <= 1.5 for x in g)
    return t


def plot_curves(curves: dict, title: str, path: Path, window: int = 100) -> None:
    from matplotlib.figure import Figure  # not pyplot: no global figure list shared between threads

    fig = Figure(figsize=(8, 4))
    ax = fig.subplots()
    kernel = np.ones(window) / window
    for method, err in curves.items():
        if method.startswith("_"):
            continue
        e = np.nan_to_num(np.minimum(err, 2.0), nan=0.0)
        smooth = np.convolve(e, kernel, mode="valid")  # value at t averages samples t-window+1..t
        ax.plot(np.arange(window - 1, window - 1 + smooth.size), smooth, label=method, lw=1.2)
    for d in curves.get("_drifts", []):
        ax.axvline(d, color="k", ls="--", lw=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("sample")
    ax.set_ylabel(f"NRMSE on unobserved (rolling mean, {window})")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")


def run_bench(
    out: Path, seeds: int = 10, quick: bool = False, configs=None, drifts=None, workers: int = 1,
    fashion: bool = True, large: bool = False, obs_frac: float | None = None, device: torch.device | None = None,
) -> dict:
    """Run the benchmark, print the table, write CSV/markdown/JSON and plots into ``out``; MoSAIC's
    routing runs on ``device`` (None: the CPU)."""
    from streaming.data import STANDARD_CONFIGS

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    configs = list(configs or STANDARD_CONFIGS)
    drifts = list(drifts or ("rotation", "abrupt"))
    jobs = [(c, d, s, quick, METHODS, s == 0, obs_frac, device) for c in configs for d in drifts for s in range(seeds)]
    announce(f"mosaic bench: {len(jobs)} trials on {workers} worker(s), writing {out}")
    t0 = time.perf_counter()
    if workers > 1:
        results = map_jobs(_trial_star, jobs, workers)
    else:
        results = [run_trial(*j) for j in jobs]
    rows = [r for rs, _ in results for r in rs]
    for (c, d, s, *_), (_, curves) in zip(jobs, results, strict=True):
        if curves:
            plot_curves(curves, f"({c}) drift={d} seed={s}", out / f"curve_{c}_{d}.png")
    if fashion:
        frows = [r for s in range(min(seeds, 3)) for r in fashion_trial(seed=s, quick=quick, device=device)]
        rows += frows
    if large:
        rows += large_config_check(quick=quick, device=device)
    summary = aggregate([r for r in rows if r["method"] != "large-check"])
    targets = check_targets(summary)
    write_csv(out / "trials.csv", rows)
    write_csv(out / "summary.csv", summary)
    cols = ["config", "drift", "method", "seeds", "nrmse", "nrmse_ci", "subspace_err_final", "subspace_err_after_drift",
            "routing_acc", "recovery_mean", "us_per_sample"]
    table = markdown_table(summary, cols)
    (out / "summary.md").write_text(table, encoding="utf-8")
    write_json(out / "targets.json", {**targets, "wall_s": time.perf_counter() - t0, "quick": quick, "seeds": seeds})
    print(table)
    print("targets:", {k: v for k, v in targets.items() if k != "per_group"})
    return {"rows": rows, "summary": summary, "targets": targets}


def large_config_check(quick: bool = False, seed: int = 0, device: torch.device | None = None) -> list[dict]:
    """(10000, 10, 20): pretrain + stream a short stream; reports memory of the model state."""
    from experiments.streaming.throughput import float32_stream
    from streaming.data import StreamConfig, generate_stream
    from streaming.evaluate import nrmse_unobserved
    from streaming.harness import run_online
    from streaming.model import MoSAIC

    n, r, K = LARGE_CONFIG
    # identifiability needs about 2 n r / (m - r) samples per class: 80 at 30% observed
    cfg = StreamConfig(n=n, r=r, K=K, obs_frac=0.3, epochs=2, samples_per_epoch=200 if quick else 1000,
                       drift="rotation", source_per_class=80, seed=seed)
    stream = float32_stream(generate_stream(cfg))
    model = MoSAIC(r, K, seed=seed, pretrain_restarts=1).to(device).fit(stream.source_values)
    run = run_online(model, stream.values, stream.epoch)
    return [{"config": "10000-10-20", "drift": "rotation", "seed": seed, "method": "large-check",
             "nrmse": nrmse_unobserved(run.completed, stream.full, stream.values),
             "us_per_sample": run.time_per_sample_s * 1e6, "memory_bytes": run.memory_bytes,
             "memory_Knr_floats_bytes": K * n * r * 8}]


def main(argv=None) -> int:
    import argparse

    from common.device import resolve_device

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--configs", nargs="*", default=None)
    p.add_argument("--drifts", nargs="*", default=None)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--no-fashion", action="store_true")
    p.add_argument("--obs-frac", type=float, default=None)
    p.add_argument("--large", action="store_true")
    p.add_argument("--throughput", action="store_true", help="the throughput table instead")
    p.add_argument("--samples", type=int, default=4000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--throughput-drift", choices=("abrupt", "none"), default="abrupt")
    p.add_argument("--device", default="auto")
    a = p.parse_args(argv)
    device = resolve_device(a.device)
    limit_threads()
    if a.throughput:
        from experiments.streaming.throughput import throughput_bench

        throughput_bench(Path(a.out), configs=a.configs, samples=a.samples, repeats=a.repeats, large=a.large,
                         drift=a.throughput_drift, device=device)
        return 0
    run_bench(Path(a.out), seeds=a.seeds, quick=a.quick, configs=a.configs, drifts=a.drifts, workers=a.workers,
              fashion=not a.no_fashion, large=a.large, obs_frac=a.obs_frac, device=device)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
