"""Make the shipped vision models (``common.shipped``) and their committed report.

    python scripts/ship_vision.py classifier             # train + ship fmnist-classifier (a few minutes)
    python scripts/ship_vision.py moh --runs runs/ship   # evaluate + ship moh-fmnist and mamba-fmnist
    python scripts/ship_vision.py moh --only moh-fmnist  # one of them, keeping the other's report rows
    python scripts/ship_vision.py table                  # the README's results table from shipped.json

``moh`` expects two finished runs of the same recipe in ``--runs``:

    moh train --preset fmnist --model moh   --out runs/ship/moh_fmnist   --resume
    moh train --preset fmnist --model mamba --out runs/ship/mamba_fmnist --resume

and writes ``docs/results/vision/shipped.json`` (metrics of both models and the real-vs-real
floors, all against the Fashion-MNIST test split; learning curves from the runs' snapshots) and
the sample grids ``docs/results/vision/shipped_<name>.png``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "docs" / "results" / "vision"
DATA = "Fashion-MNIST (Debian dataset-fashion-mnist), 28x28 zero-padded to 32x32, scaled to [-1, 1]"
MODELS = {"moh-fmnist": ("moh", "moh_fmnist"), "mamba-fmnist": ("mamba", "mamba_fmnist")}


def ship_classifier(overwrite: bool) -> None:
    import torch

    from common.shipped import machine_description, ship
    from vision.classifier import EPOCHS, accuracy, train_classifier
    from vision.data import fashion_mnist_images

    torch.set_num_threads(1)
    x, y = fashion_mnist_images("train")
    xt, yt = fashion_mnist_images("test")
    t0 = time.perf_counter()
    model = train_classifier(x, y, epochs=EPOCHS, seed=0, progress=sys.stderr.isatty())
    wall = time.perf_counter() - t0
    acc = accuracy(model, xt, yt)
    print(f"test accuracy {acc:.4f} after {wall:.0f} s")
    path = ship(model, "fmnist-classifier", ROOT / "vision", command="python scripts/ship_vision.py classifier",
                data=DATA, split="train 60,000 / test 10,000 (the dataset's own split)", steps=EPOCHS * len(x) // 128,
                seed=0, metrics={"test_accuracy": acc, "train_images": int(len(x)), "epochs": EPOCHS},
                trained_on=machine_description(), wall_s=round(wall, 1), smoke="vision.classifier:smoke_classify",
                overwrite=overwrite)
    print(f"shipped {path}")


def ship_moh(runs: Path, n: int, steps: int, n_real: int, overwrite: bool, only: list[str] | None = None,
             commit: str | None = None) -> None:
    import torch

    from common.io import write_json
    from common.shipped import machine_description, ship, steps_to_reach
    from vision.classifier import get_classifier
    from vision.data import fashion_mnist_images
    from vision.evaluate import feature_encoder
    from vision.models import load_backbone
    from vision.release import (
        floors,
        grid_png,
        learning_curve,
        quality,
        sample,
        train_seconds,
    )
    from vision.sampling import SCHEDULER_FILE, read_train_state
    from vision.train import PRESETS

    torch.set_num_threads(1)
    classifier, cinfo = get_classifier()
    encoder = feature_encoder()
    real, _ = fashion_mnist_images("test", limit=n_real, seed=0)
    train, _ = fashion_mnist_images("train", limit=n, seed=1)
    report = {"protocol": {"samples": n, "sampler": f"DDIM-{steps}", "sample_seed": 0,
                           "real": f"{n_real} Fashion-MNIST test images (seeded subset)",
                           "floor": f"{n} Fashion-MNIST training images scored like the samples",
                           "classifier_test_accuracy": cinfo.get("test_accuracy"),
                           "recipe": PRESETS["fmnist"]},
              "floor": floors(train, real, classifier, encoder), "models": {}, "curves": {}}
    report_path = RESULTS / "shipped.json"
    if only and report_path.is_file():  # keep the other models' rows (same protocol, same floor)
        from common.io import read_json

        before = read_json(report_path)
        report["models"].update({k: v for k, v in before.get("models", {}).items() if k not in only})
        report["curves"].update({k: v for k, v in before.get("curves", {}).items() if k not in only})
    shipped = {}
    for name, (backbone, run_name) in MODELS.items():
        if only and name not in only:
            continue
        run = runs / run_name
        ckpt = run / "checkpoint"
        state = read_train_state(ckpt)
        if state["step"] != PRESETS["fmnist"]["steps"]:
            raise SystemExit(f"error: {run} stopped at step {state['step']} of {PRESETS['fmnist']['steps']}; "
                             "finish it with --resume first")
        fake, s_per_image = sample(ckpt, n, steps, seed=0)
        model = load_backbone(ckpt)
        metrics = quality(fake, real, classifier, encoder)
        metrics.update({"params": sum(p.numel() for p in model.parameters()), "sample_s_per_image": s_per_image,
                        "final_loss": state.get("loss")})
        wall = train_seconds(run)
        report["models"][name] = {"backbone": backbone, "train_s": wall, **metrics}
        curve = learning_curve(run, real, classifier, n=n, steps=steps)
        report["curves"][name] = curve
        report["models"][name]["extrapolation"] = {
            "confident_share_0.75": steps_to_reach(curve, "confident_share", 0.75)}
        grid_png(fake[:128], RESULTS / f"shipped_{name}.png")
        shipped[name] = (model, state, wall, metrics)
        print(f"{name}: confident {metrics['confident_share']:.3f}, min class {metrics['min_class_share']:.3f}, "
              f"classifier FID {metrics['fmnist_classifier_fid']:.2f}, EfficientNet FID "
              f"{metrics['efficientnet_lite0_fid']:.1f}")
    write_json(report_path, report)
    for name, (model, state, wall, metrics) in shipped.items():
        backbone, run_name = MODELS[name]
        keep = {k: v for k, v in metrics.items() if k != "class_shares"}
        path = ship(model, name, ROOT / "vision",
                    command=f"moh train --preset fmnist --model {backbone} --out runs/ship/{run_name} --resume",
                    data=DATA, split="train 60,000 (all) / metrics on the test split", steps=int(state["step"]),
                    seed=int(state["config"]["seed"]), metrics=keep, trained_on=machine_description(),
                    wall_s=round(wall, 1), smoke="vision.sampling:smoke_sample", overwrite=overwrite, commit=commit,
                    extra_files={SCHEDULER_FILE: runs / run_name / "checkpoint" / SCHEDULER_FILE})
        print(f"shipped {path}")
    print(f"wrote {RESULTS / 'shipped.json'}")


def table() -> str:
    """The README's results table (markdown) from ``docs/results/vision/shipped.json``."""
    from common.io import read_json

    rep = read_json(RESULTS / "shipped.json")
    head = ("| model | params | training (1 CPU thread) | confident >= 0.8 | smallest class share | FMNIST-classifier "
            "FID | precision / recall | EfficientNet-Lite0 FID | precision / recall |\n|---|---|---|---|---|---|---|---|---|")
    rows = []
    for name, label in (("moh-fmnist", "MoH `moh-fmnist`"), ("mamba-fmnist", "plain Mamba `mamba-fmnist`")):
        m = rep["models"].get(name)
        if m is None:
            continue
        rows.append(f"| {label} | {m['params']:,} | {m['train_s'] / 60:.0f} min | {m['confident_share']:.1%} | "
                    f"{m['min_class_share']:.1%} | {m['fmnist_classifier_fid']:.2f} | {m['precision']:.2f} / "
                    f"{m['recall']:.2f} | {m['efficientnet_lite0_fid']:.1f} | {m['efficientnet_lite0_precision']:.2f} / "
                    f"{m['efficientnet_lite0_recall']:.2f} |")
    f = rep["floor"]
    rows.append(f"| real training images (floor) | - | - | {f['confident_share']:.1%} | {f['min_class_share']:.1%} | "
                f"{f['fmnist_classifier_fid']:.2f} | {f['precision']:.2f} / {f['recall']:.2f} | "
                f"{f['efficientnet_lite0_fid']:.1f} | {f['efficientnet_lite0_precision']:.2f} / "
                f"{f['efficientnet_lite0_recall']:.2f} |")
    return "\n".join([head, *rows])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ship_vision", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    c = sub.add_parser("classifier")
    c.add_argument("--overwrite", action="store_true")
    m = sub.add_parser("moh")
    m.add_argument("--runs", type=Path, default=ROOT / "runs" / "ship")
    m.add_argument("--n", type=int, default=256)
    m.add_argument("--steps", type=int, default=25)
    m.add_argument("--n-real", type=int, default=1000)
    m.add_argument("--overwrite", action="store_true")
    m.add_argument("--only", nargs="+", choices=tuple(MODELS), help="evaluate and ship these models only, keeping "
                   "the other rows of an existing shipped.json")
    sub.add_parser("table", help="print the README's results table from shipped.json")
    m.add_argument("--trained-at", default=None, help="the commit the runs were trained at (default: HEAD)")
    a = p.parse_args(argv)
    if a.what == "classifier":
        ship_classifier(a.overwrite)
    elif a.what == "table":
        print(table())
    else:
        ship_moh(a.runs, a.n, a.steps, a.n_real, a.overwrite, a.only, a.trained_at)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
