"""The scaling trend of MoH and its parameter-matched baselines over budgets where width and
training steps grow together, on Fashion-MNIST and the Sweet Home 3D icons, scored with the
EfficientNet-Lite0 FID (``vision.evaluate``). Formerly ``moh bench --suite scaling``: a sweep
over budgets, not the product's same-budget bench, so it lives beside the product.

    python -m experiments.vision.scaling --out runs/scaling --json docs/results/vision/scaling.json
    python -m experiments.vision.scaling --budgets S --datasets fashion-mnist --models moh mamba --out runs/s
    python -m experiments.vision.scaling --resume --out runs/scaling   # keep an interrupted run's finished rows
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from common.cli import ArgumentParser, check_outputs, cli_main
from common.device import add_device_arg, add_precision_arg, check_precision, resolve_device
from common.errors import DataError
from common.io import append_jsonl, read_jsonl_resumable, write_csv, write_json
from common.report import markdown_table
from common.seed import seed_everything
from vision.evaluate import efficientnet_features, frechet_distance, to_model_range
from vision.models import MODEL_NAMES, build_backbone
from vision.models.layers import count_parameters
from vision.plots import save_png
from vision.sampling import sample_ddim, save_grid
from vision.train import TrainConfig, fit


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


def efficientnet_lite0_fid(real: torch.Tensor, fake: torch.Tensor, encoder=None) -> float:
    """Fréchet distance of ``real`` and ``fake`` (each ``(N, c, H, W)`` in [-1, 1]) in pooled
    EfficientNet-Lite0 features; ``real`` features are cached, ``fake`` ones are not (the FID of
    ``vision.evaluate.feature_metrics`` without its precision / recall)."""
    return frechet_distance(efficientnet_features(real, encoder), efficientnet_features(fake, encoder, False))


def _row_key(row: dict) -> tuple:
    return tuple(row[k] for k in ("dataset", "budget", "d_model", "steps", "seed", "model"))


ROW_FIELDS = {"dataset": str, "budget": str, "budget_index": int, "d_model": int, "steps": int, "seed": int,
              "model": str, "params": int, "train_s_per_step": (int, float),
              "efficientnet_lite0_fid": (int, float, type(None)), "wall_s": (int, float)}


def read_finished_rows(path: Path, cfg: ScalingConfig) -> dict[tuple, dict]:
    """Rows of an earlier (possibly interrupted) run in ``path`` made under the same settings.
    A torn last line is skipped with a warning; any other malformed record is a DataError naming
    the file, the line and what was expected."""
    done = {}
    sig = scaling_signature(cfg)
    for i, rec in enumerate(read_jsonl_resumable(path, "scaling progress file"), 1):
        row = rec.get("row")
        where = f"scaling progress file {path}, record {i}"
        if not isinstance(rec.get("signature"), dict) or not isinstance(row, dict):
            raise DataError(f"{where}: expected {{'signature': {{...}}, 'row': {{...}}}}; delete it to start over")
        for key, kind in ROW_FIELDS.items():
            if not isinstance(row.get(key), kind) or isinstance(row.get(key), bool):
                raise DataError(f"{where}: row field {key!r} missing or not {_type_name(kind)}; "
                                "delete it to start over")
        if rec["signature"] == sig:
            if row["efficientnet_lite0_fid"] is None:  # a NaN FID is written as null
                row["efficientnet_lite0_fid"] = float("nan")
            done[_row_key(row)] = row
    return done


def _type_name(kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({str: "a string", int: "an integer", float: "a number", type(None): "null"}[k] for k in kinds)


def scaling_signature(cfg: ScalingConfig) -> dict:
    return {k: getattr(cfg, k) for k in ("size", "batch_size", "train_limit", "n_real", "n_samples",
                                         "sample_steps")}


def run_scaling(out_dir: str | Path, cfg: ScalingConfig | None = None, log=None, resume: bool = False,
                device: str = "auto", precision: str = "32") -> dict:
    """MoH vs plain Mamba vs DiT vs UNet at each budget of ``cfg.budgets`` (``SCALING_BUDGETS``:
    MoH at ``d_model``, the baselines parameter-matched to it, all trained ``steps`` steps on the
    same batches per seed), on each dataset at ``cfg.size`` px. Quality: the EfficientNet-Lite0 FID
    of ``n_samples`` DDIM samples against the test split. Writes ``scaling.csv``,
    ``scaling_summary.csv``, ``scaling.json`` and ``scaling.png`` into ``out_dir``; returns
    ``{"config", "budgets", "rows", "summary"}`` (``summary``: mean FID and FID ratio to plain
    Mamba over seeds, per dataset, budget and model). Every finished run is appended to
    ``scaling_rows.jsonl``; with ``resume`` the runs found there under the same settings are not
    repeated (training is deterministic under its seed, so the rows are what a rerun would give).
    Training and sampling run on ``device`` (training at ``precision``)."""
    from vision.data import load_dataset

    cfg = cfg or ScalingConfig()
    dev = resolve_device(device)
    log = log or (lambda msg: print(msg, flush=True))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(cfg.threads)
    budgets = [b for b in SCALING_BUDGETS if b.name in cfg.budgets]
    channels = dict(SCALING_DATASETS)
    rows_path = out / "scaling_rows.jsonl"
    done = read_finished_rows(rows_path, cfg) if resume else {}
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
                    model = build_backbone(name, sample_size=cfg.size, in_channels=ch, d_model=b.d_model)
                    res = fit(model, x_train, TrainConfig(steps=b.steps, batch_size=cfg.batch_size, seed=seed,
                                                          checkpoint_every=0), device=device, precision=precision)
                    s = sample_ddim(model.to(dev), cfg.n_samples, cfg.sample_steps, seed + 1)
                    fid = efficientnet_lite0_fid(x_real, to_model_range(s.images))
                    if seed == b.seeds[0]:
                        save_grid(s.images[:64], out / f"samples_{ds}_{b.name}_{name}.png")
                    row = {"dataset": ds, "budget": b.name, "budget_index": bi, "d_model": b.d_model,
                           "steps": b.steps, "seed": seed, "model": name, "params": count_parameters(model),
                           "train_s_per_step": res.time_per_step_s, "efficientnet_lite0_fid": fid,
                           "wall_s": time.perf_counter() - t0}
                    rows.append(row)
                    append_jsonl(rows_path, {"signature": scaling_signature(cfg), "row": row})
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


def plot_scaling(summary: list[dict], path: Path) -> None:
    """FID ratio to plain Mamba (mean over seeds) vs budget, one panel per dataset."""
    from matplotlib.figure import Figure

    datasets = list(dict.fromkeys(r["dataset"] for r in summary))
    fig = Figure(figsize=(5 * len(datasets), 3.3))
    axes = fig.subplots(1, len(datasets), squeeze=False)
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
    save_png(fig, path)


@cli_main
def main(argv=None) -> int:
    p = ArgumentParser(description="the scaling trend of MoH and its baselines over width and training steps")
    p.add_argument("--out", default="runs/vision_scaling", help="run directory (rows, CSVs, plot, sample grids)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON (NaN as null), the plot beside it")
    p.add_argument("--budgets", nargs="+", choices=tuple(b.name for b in SCALING_BUDGETS), help="budgets to run")
    p.add_argument("--datasets", nargs="+", choices=tuple(d for d, _ in SCALING_DATASETS), help="datasets to run")
    p.add_argument("--models", nargs="+", choices=MODEL_NAMES)
    p.add_argument("--resume", action="store_true", help="continue in an existing --out, keeping its finished runs")
    p.add_argument("--overwrite", action="store_true", help="replace existing outputs")
    add_device_arg(p)
    add_precision_arg(p)
    a = p.parse_args(argv)
    check_precision(a.precision, resolve_device(a.device))
    json_path = Path(a.json) if a.json else None
    plot_path = json_path.with_suffix(".png") if json_path else None
    out = Path(a.out)
    check_outputs(files=[q for q in (json_path, plot_path) if q], dirs=[] if a.resume else [out],
                  overwrite=a.overwrite)
    overrides = {k: tuple(v) for k, v in (("budgets", a.budgets), ("datasets", a.datasets), ("models", a.models)) if v}
    result = run_scaling(out, ScalingConfig(**overrides), resume=a.resume, device=a.device, precision=a.precision)
    if json_path is not None:  # the results page's source: config, per-run rows and the summary, plot beside it
        write_json(json_path, result)
        shutil.copyfile(out / "scaling.png", plot_path)
        print(f"wrote {json_path} and {plot_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
