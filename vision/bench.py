"""Same-budget comparison of MoH against its baselines on Fashion-MNIST (32x32).

Every model trains for the same number of steps with the same batches (same seed), then samples
with the same DDIM schedule; metrics are the FMNIST-classifier FID (see ``vision.evaluate``),
precision/recall against held-out test images, training time per step, sampling time, and the
Mamba blocks actually run per image. For MoH the compute saved by its routes is measured in the
same run against the same model forced to its full route (deepest scan, all levels).

    python -m vision.bench --out runs/bench            # full table (tens of minutes on 2 CPU cores)
    python -m vision.bench --quick --out runs/quick    # minutes
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from common.io import write_csv, write_json
from common.report import markdown_table
from common.seed import seed_everything
from vision.baselines import MODEL_NAMES, build_model
from vision.data import fashion_mnist_images
from vision.evaluate import classifier_metrics, get_classifier, to_model_range
from vision.models.layers import count_parameters
from vision.pipeline import MoHPipeline, make_sampler, save_checkpoint, save_grid
from vision.train import TrainConfig, train


@dataclass
class BenchConfig:
    """Defaults: the README table (about 30 min on a loaded 2-core machine, one thread)."""

    steps: int = 500
    batch_size: int = 32
    n_samples: int = 256
    sample_steps: int = 25
    train_limit: int = 20000
    n_real: int = 1000
    eval_points: int = 4  # FID evaluated at steps * i / eval_points
    models: tuple[str, ...] = MODEL_NAMES
    seed: int = 0
    scan_lengths: tuple[int, ...] = (256, 1024)
    threads: int = 1  # on a shared 2-core machine more threads thrash (measured 10x slower)


QUICK = BenchConfig(steps=120, batch_size=32, n_samples=96, sample_steps=10, train_limit=5000, n_real=500,
                    eval_points=1, models=("moh", "mamba", "dit"))


def _sample(model, n: int, steps: int, seed: int, route: dict | None = None):
    pipe = MoHPipeline(model, make_sampler("ddim"))
    return pipe(batch_size=n, num_inference_steps=steps, generator=torch.Generator().manual_seed(seed), route=route)


def bench_scan(lengths=(256, 1024), batch: int = 2, d_inner: int = 64, d_state: int = 8, repeats: int = 3,
               seed: int = 0) -> list[dict]:
    """Wall time of the parallel vs the sequential S6 scan (forward + backward, float32), and
    their max abs difference, at each sequence length. Median of ``repeats`` runs."""
    from vision.scan import selective_scan_parallel, selective_scan_sequential

    g = torch.Generator().manual_seed(seed)
    rows = []
    for L in lengths:
        u = torch.randn(batch, L, d_inner, generator=g)
        delta = torch.nn.functional.softplus(torch.randn(batch, L, d_inner, generator=g) - 3)
        A = -torch.arange(1, d_state + 1, dtype=torch.float32).repeat(d_inner, 1)
        B, C = torch.randn(batch, L, d_state, generator=g), torch.randn(batch, L, d_state, generator=g)
        times, ys = {}, {}
        for name, fn in (("sequential", selective_scan_sequential), ("parallel", selective_scan_parallel)):
            runs = []
            for _ in range(repeats):
                args = [t.clone().requires_grad_() for t in (u, delta, A, B, C)]
                t0 = time.perf_counter()
                y = fn(*args)
                y.square().mean().backward()
                runs.append(time.perf_counter() - t0)
            times[name], ys[name] = float(np.median(runs)), y.detach()
        rows.append({"seq_len": L, "batch": batch, "d_inner": d_inner, "d_state": d_state,
                     "sequential_s": times["sequential"], "parallel_s": times["parallel"],
                     "speedup": times["sequential"] / times["parallel"],
                     "max_abs_diff": float((ys["sequential"] - ys["parallel"]).abs().max())})
    return rows


def plot_routing(route_log: list[dict], trace: list[dict], path: Path, depth_options, n_transforms: int, n_levels: int) -> None:
    """Routing statistics per timestep: mean scan depth, transform-expert shares and level use
    over timestep bins (training routes), plus the route taken at each sampling step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bins = np.linspace(0, 1000, 11)
    t = np.array([r["timestep"] for r in route_log])
    d = np.array([r["depth"] for r in route_log], dtype=float)
    tr = np.array([r["transform"] for r in route_log])
    lv = np.zeros((len(route_log), n_levels))
    for i, r in enumerate(route_log):
        lv[i, r["levels"]] = 1
    which = np.clip(np.digitize(t, bins) - 1, 0, 9)
    centers = (bins[:-1] + bins[1:]) / 2
    fig, ax = plt.subplots(1, 4, figsize=(17, 3.3))
    ax[0].plot(centers, [d[which == b].mean() if (which == b).any() else np.nan for b in range(10)], "o-")
    ax[0].set(xlabel="timestep", ylabel="mean scan depth", title="depth (training routes)", ylim=(0, max(depth_options) + 0.5))
    share = np.array([[(tr[which == b] == e).mean() if (which == b).any() else 0 for e in range(n_transforms)] for b in range(10)])
    ax[1].stackplot(centers, share.T, labels=[f"expert {e}" for e in range(n_transforms)])
    ax[1].set(xlabel="timestep", ylabel="share", title="transform expert")
    ax[1].legend(fontsize=7, loc="upper right")
    for lvl in range(n_levels):
        ax[2].plot(centers, [lv[which == b, lvl].mean() if (which == b).any() else np.nan for b in range(10)], "o-", label=f"level {lvl}")
    ax[2].set(xlabel="timestep", ylabel="use", title="representation levels", ylim=(-0.05, 1.05))
    ax[2].legend(fontsize=7)
    ax[3].plot([r["timestep"] for r in trace], [r["depth"] for r in trace], "s-")
    ax[3].invert_xaxis()
    ax[3].set(xlabel="timestep (sampling runs right to left)", ylabel="depth", title="route per sampling step")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def fid_curve_table(curve: list[dict]) -> list[dict]:
    """``fid_curve`` rows ``{"model", "step", "fmnist_classifier_fid", ...}`` -> one row per step
    with one FID column per model."""
    steps = sorted({c["step"] for c in curve})
    models = list(dict.fromkeys(c["model"] for c in curve))
    fid = {(c["model"], c["step"]): c["fmnist_classifier_fid"] for c in curve}
    return [{"step": st, **{m: fid.get((m, st), float("nan")) for m in models}} for st in steps]


def plot_fid_curve(curve: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.3))
    for m in dict.fromkeys(c["model"] for c in curve):
        pts = sorted((c["step"], c["fmnist_classifier_fid"]) for c in curve if c["model"] == m)
        ax.plot(*zip(*pts, strict=True), "o-", label=m)
    ax.set(xlabel="training step", ylabel="FMNIST-classifier FID", title="FID vs training steps")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def run_bench(out_dir: str | Path, cfg: BenchConfig | None = None, log=None) -> list[dict]:
    """Train and evaluate ``cfg.models`` under one budget; writes ``bench.csv``, ``bench.json``,
    ``fid_curve.csv``, ``samples_<model>.png``, ``routing_moh.png`` / ``.csv`` into ``out_dir``
    and returns the table rows."""
    cfg = cfg or BenchConfig()
    log = log or (lambda msg: print(msg, flush=True))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(cfg.threads)
    classifier, cinfo = get_classifier()
    x_train, _ = fashion_mnist_images("train", limit=cfg.train_limit, seed=cfg.seed)
    x_real, _ = fashion_mnist_images("test", limit=cfg.n_real, seed=cfg.seed)
    log(f"FMNIST classifier for features: test accuracy {cinfo.get('test_accuracy', float('nan')):.3f}")
    rows, curve, extras = [], [], {}
    eval_at = {max(1, round(cfg.steps * (i + 1) / cfg.eval_points)) for i in range(cfg.eval_points)}
    for name in cfg.models:
        t_model = time.perf_counter()
        seed_everything(cfg.seed)
        model = build_model(name)
        params = count_parameters(model)
        log(f"[{name}] {params:,} parameters, training {cfg.steps} steps x {cfg.batch_size}")

        def on_step(step, m, sampling_model, name=name):
            if step in eval_at and step != cfg.steps:
                s = _sample(sampling_model, cfg.n_samples, cfg.sample_steps, cfg.seed + 1)
                met = classifier_metrics(x_real, to_model_range(s.images), classifier)
                curve.append({"model": name, "step": step, **met})
                log(f"[{name}] step {step}: FMNIST-classifier FID {met['fmnist_classifier_fid']:.2f}")

        result = train(model, x_train, TrainConfig(steps=cfg.steps, batch_size=cfg.batch_size, seed=cfg.seed,
                                                   checkpoint_every=0), callback=on_step)
        save_checkpoint(model, out / f"model_{name}")
        s = _sample(model, cfg.n_samples, cfg.sample_steps, cfg.seed + 1)
        met = classifier_metrics(x_real, to_model_range(s.images), classifier)
        curve.append({"model": name, "step": cfg.steps, **met})
        save_grid(s.images[:64], out / f"samples_{name}.png")
        layers = float(np.mean([r["sample_layers"] for r in s.trace]))
        row = {"model": name, "params": params, "train_steps": cfg.steps, "final_loss": round(result.final_loss, 4),
               "train_s_per_step": result.time_per_step_s, **met,
               "sample_s_per_image": s.time_s / cfg.n_samples, "blocks_per_image_step": layers}
        if name == "moh":
            full = {"depth": max(model.depth_options), "levels": list(range(model.config.num_levels))}
            s_full = _sample(model, cfg.n_samples, cfg.sample_steps, cfg.seed + 1, route=full)
            full_layers = float(np.mean([r["sample_layers"] for r in s_full.trace]))
            row["full_route_blocks"] = full_layers
            row["blocks_saved_frac"] = 1 - layers / full_layers
            row["sample_time_vs_full_route"] = s.time_s / s_full.time_s
            row["full_route_fid"] = classifier_metrics(x_real, to_model_range(s_full.images), classifier)["fmnist_classifier_fid"]
            write_csv(out / "routing_moh.csv", [{**r, "levels": " ".join(map(str, r["levels"]))} for r in result.route_log])
            write_json(out / "sampling_trace_moh.json", s.trace)
            plot_routing(result.route_log, s.trace, out / "routing_moh.png", model.depth_options,
                         len(model.transforms), model.config.num_levels)
            late = [r for r in result.route_log if r["step"] > cfg.steps // 2]
            for lo, hi in ((0, 333), (333, 666), (666, 1000)):
                sel = [r["depth"] for r in late if lo <= r["timestep"] < hi]
                row[f"train_depth_t{lo}-{hi}"] = float(np.mean(sel)) if sel else float("nan")
            extras["moh_trace"] = s.trace
        row["wall_s"] = time.perf_counter() - t_model
        rows.append(row)
        log(f"[{name}] FMNIST-classifier FID {met['fmnist_classifier_fid']:.2f}  "
            f"{result.time_per_step_s:.3f} s/step  ({row['wall_s']:.0f} s in all)")
    base = next((r for r in rows if r["model"] == "mamba"), None)
    for r in rows:
        if base:
            r["fid_vs_mamba"] = r["fmnist_classifier_fid"] / base["fmnist_classifier_fid"]
            r["step_time_vs_mamba"] = r["train_s_per_step"] / base["train_s_per_step"]
    scan_rows = bench_scan(lengths=cfg.scan_lengths, repeats=1 if cfg.steps < 200 else 3)
    write_csv(out / "scan.csv", scan_rows)
    log(markdown_table(scan_rows))
    write_csv(out / "bench.csv", rows)
    write_csv(out / "fid_curve.csv", curve)
    plot_fid_curve(curve, out / "fid_curve.png")
    write_json(out / "bench.json", {"config": cfg.__dict__, "classifier": cinfo, "rows": rows, "fid_curve": curve,
                                    "scan": scan_rows})
    cols = ["model", "params", "train_s_per_step", "step_time_vs_mamba", "fmnist_classifier_fid", "fid_vs_mamba",
            "precision", "recall", "sample_s_per_image", "blocks_per_image_step"]
    log(markdown_table(rows, cols))
    log("FMNIST-classifier FID vs training steps:\n" + markdown_table(fid_curve_table(curve)))
    if any(r["model"] == "moh" for r in rows):
        m = next(r for r in rows if r["model"] == "moh")
        log(f"MoH routes ran {m['blocks_per_image_step']:.2f} Mamba blocks per image per step vs "
            f"{m['full_route_blocks']:.2f} on the full route ({100 * m['blocks_saved_frac']:.0f}% fewer); "
            f"sampling time ratio {m['sample_time_vs_full_route']:.2f}; full-route FID {m['full_route_fid']:.2f}")
        log("MoH mean routed depth by timestep (second half of training): " + ", ".join(
            f"{k.removeprefix('train_depth_')}: {v:.2f}" for k, v in m.items() if k.startswith("train_depth_")))
    return rows


@dataclass(frozen=True)
class Budget:
    """One point of the scaling trend: model width and training steps grow together."""

    name: str
    d_model: int
    steps: int
    seeds: tuple[int, ...] = (0,)


SCALING_BUDGETS = (
    Budget("S", d_model=16, steps=200, seeds=(0, 1)),
    Budget("M", d_model=24, steps=500),
    Budget("L", d_model=32, steps=700),  # about 5-15 min per model on one CPU thread (Mamba slowest)
)
SCALING_DATASETS = (("fashion-mnist", 1), ("sweethome3d", 3))  # (data spec, channels), both at 32 px


@dataclass
class ScalingConfig:
    budgets: tuple[str, ...] = ("S", "M", "L")
    datasets: tuple[str, ...] = tuple(d for d, _ in SCALING_DATASETS)
    models: tuple[str, ...] = MODEL_NAMES
    size: int = 32
    batch_size: int = 32
    train_limit: int = 20000
    n_real: int = 500  # Sweet Home 3D's test split holds 164 images: all of them
    n_samples: int = 128
    sample_steps: int = 10
    threads: int = 1


def plot_scaling(summary: list[dict], path: Path) -> None:
    """FID ratio to plain Mamba (mean over seeds) vs budget, one panel per dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(r["dataset"] for r in summary))
    fig, axes = plt.subplots(1, len(datasets), figsize=(5 * len(datasets), 3.3), squeeze=False)
    for ax, ds in zip(axes[0], datasets, strict=True):
        for m in dict.fromkeys(r["model"] for r in summary):
            pts = [(r["budget_index"], r["fid_vs_mamba"]) for r in summary if r["dataset"] == ds and r["model"] == m]
            ax.plot(*zip(*sorted(pts), strict=True), "o-", label=m)
        names = sorted({(r["budget_index"], r["budget"]) for r in summary if r["dataset"] == ds})
        ax.set_xticks([i for i, _ in names], [n for _, n in names])
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set(xlabel="budget (width and steps grow together)", ylabel="EfficientNet-Lite0 FID / plain Mamba's",
               title=ds)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _row_key(row: dict) -> tuple:
    return tuple(row[k] for k in ("dataset", "budget", "d_model", "steps", "seed", "model"))


def _load_done_rows(path: Path, cfg: ScalingConfig) -> dict[tuple, dict]:
    """Rows of an earlier (possibly interrupted) run in ``path`` made under the same settings."""
    done = {}
    if not path.exists():
        return done
    sig = _scaling_signature(cfg)
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:  # a line torn by an interruption
            continue
        if rec.get("signature") == sig:
            done[_row_key(rec["row"])] = rec["row"]
    return done


def _scaling_signature(cfg: ScalingConfig) -> dict:
    return {k: getattr(cfg, k) for k in ("size", "batch_size", "train_limit", "n_real", "n_samples",
                                         "sample_steps")}


def run_scaling(out_dir: str | Path, cfg: ScalingConfig | None = None, log=None, resume: bool = False) -> dict:
    """MoH vs plain Mamba vs DiT vs UNet at each budget of ``cfg.budgets`` (``SCALING_BUDGETS``:
    MoH at ``d_model``, the baselines parameter-matched to it, all trained ``steps`` steps on the
    same batches per seed), on each dataset at ``cfg.size`` px. Quality: the EfficientNet-Lite0 FID
    of ``n_samples`` DDIM samples against the test split. Writes ``scaling.csv``,
    ``scaling_summary.csv``, ``scaling.json`` and ``scaling.png`` into ``out_dir``; returns
    ``{"config", "budgets", "rows", "summary"}`` (``summary``: mean FID and FID ratio to plain
    Mamba over seeds, per dataset, budget and model). Every finished run is appended to
    ``scaling_rows.jsonl``; with ``resume`` the runs found there under the same settings are not
    repeated (training is deterministic under its seed, so the rows are what a rerun would give)."""
    from vision.data import load_dataset
    from vision.evaluate import efficientnet_lite0_fid

    cfg = cfg or ScalingConfig()
    log = log or (lambda msg: print(msg, flush=True))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(cfg.threads)
    budgets = [b for b in SCALING_BUDGETS if b.name in cfg.budgets]
    channels = dict(SCALING_DATASETS)
    rows_path = out / "scaling_rows.jsonl"
    done = _load_done_rows(rows_path, cfg) if resume else {}
    if not resume:
        rows_path.unlink(missing_ok=True)
    if done:
        log(f"resuming: {len(done)} finished runs found in {rows_path}")
    rows = []
    for ds in cfg.datasets:
        ch = channels[ds]
        x_train = load_dataset(ds, cfg.size, ch, limit=cfg.train_limit)
        x_real = load_dataset(ds, cfg.size, ch, limit=cfg.n_real, split="test")
        log(f"[{ds}] {len(x_train)} training / {len(x_real)} test images at {cfg.size} px")
        for bi, b in enumerate(SCALING_BUDGETS):
            if b not in budgets:
                continue
            for seed in b.seeds:
                for name in cfg.models:
                    key = (ds, b.name, b.d_model, b.steps, seed, name)
                    if key in done:
                        rows.append(done[key])
                        continue
                    t0 = time.perf_counter()
                    seed_everything(seed)
                    model = build_model(name, sample_size=cfg.size, in_channels=ch, d_model=b.d_model)
                    res = train(model, x_train, TrainConfig(steps=b.steps, batch_size=cfg.batch_size, seed=seed,
                                                            checkpoint_every=0))
                    s = _sample(model, cfg.n_samples, cfg.sample_steps, seed + 1)
                    fid = efficientnet_lite0_fid(x_real, to_model_range(s.images))
                    if seed == b.seeds[0]:
                        save_grid(s.images[:64], out / f"samples_{ds}_{b.name}_{name}.png")
                    row = {"dataset": ds, "budget": b.name, "budget_index": bi, "d_model": b.d_model,
                           "steps": b.steps, "seed": seed, "model": name, "params": count_parameters(model),
                           "train_s_per_step": res.time_per_step_s, "efficientnet_lite0_fid": fid,
                           "wall_s": time.perf_counter() - t0}
                    rows.append(row)
                    with open(rows_path, "a") as fh:
                        fh.write(json.dumps({"signature": _scaling_signature(cfg), "row": row}) + "\n")
                    log(f"[{ds} {b.name} seed {seed}] {name}: {row['params']:,} params, FID {fid:.1f}, "
                        f"{res.time_per_step_s:.3f} s/step, {row['wall_s']:.0f} s in all")
    summary = []
    for ds in cfg.datasets:
        for b in budgets:
            sel = [r for r in rows if r["dataset"] == ds and r["budget"] == b.name]
            base = {r["seed"]: r["efficientnet_lite0_fid"] for r in sel if r["model"] == "mamba"}
            for name in cfg.models:
                mine = [r for r in sel if r["model"] == name]
                ratios = [r["efficientnet_lite0_fid"] / base[r["seed"]] for r in mine if r["seed"] in base]
                summary.append({"dataset": ds, "budget": b.name, "budget_index": SCALING_BUDGETS.index(b),
                                "d_model": b.d_model, "steps": b.steps, "model": name, "seeds": len(mine),
                                "params": mine[0]["params"],
                                "efficientnet_lite0_fid": float(np.mean([r["efficientnet_lite0_fid"] for r in mine])),
                                "fid_vs_mamba": float(np.mean(ratios)) if ratios else float("nan"),
                                "fid_vs_mamba_spread": float(np.ptp(ratios)) if ratios else float("nan"),
                                "train_s_per_step": float(np.mean([r["train_s_per_step"] for r in mine])),
                                "wall_s_per_run": float(np.mean([r["wall_s"] for r in mine]))})
    result = {"config": {**cfg.__dict__, "budgets": list(cfg.budgets)},
              "budgets": [b.__dict__ for b in budgets], "rows": rows, "summary": summary}
    write_csv(out / "scaling.csv", rows)
    write_csv(out / "scaling_summary.csv", summary)
    write_json(out / "scaling.json", result)
    plot_scaling(summary, out / "scaling.png")
    log(markdown_table(summary, ["dataset", "budget", "model", "params", "efficientnet_lite0_fid", "fid_vs_mamba",
                                 "fid_vs_mamba_spread", "train_s_per_step", "wall_s_per_run"]))
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="vision.bench", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/vision_bench")
    p.add_argument("--quick", action="store_true", help="tiny budget (minutes on 2 CPU cores)")
    p.add_argument("--steps", type=int)
    p.add_argument("--n-samples", type=int)
    p.add_argument("--models", nargs="+", choices=MODEL_NAMES)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    cfg = QUICK if a.quick else BenchConfig()
    cfg = BenchConfig(**{**cfg.__dict__, "seed": a.seed,
                         **({"steps": a.steps} if a.steps else {}),
                         **({"n_samples": a.n_samples} if a.n_samples else {}),
                         **({"models": tuple(a.models)} if a.models else {})})
    t0 = time.perf_counter()
    run_bench(a.out, cfg)
    print(f"done in {time.perf_counter() - t0:.0f} s; results in {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
