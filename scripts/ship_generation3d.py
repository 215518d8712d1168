"""Ship the real-furniture MoCA pipeline (``moca-furniture``, ``common.shipped``) and its report.

    python scripts/ship_generation3d.py --runs runs/ship     # evaluate the three runs, ship MoCA

It expects three finished runs of the same recipe in ``--runs``:

    moca train --preset furniture --attention moca  --out runs/ship/moca_furniture  --threads 1 --resume
    moca train --preset furniture --attention full  --out runs/ship/full_furniture  --threads 1 --resume
    moca train --preset furniture --attention local --out runs/ship/local_furniture --threads 1 --resume

evaluates each on the held-out test shapes (``generation3d.release``: the README protocol, on the
weights as shipped), evaluates every snapshot the runs kept (learning curves), renders one grid per
category and model (``docs/results/generation3d/shipped_<attention>_<category>.png``), writes
``docs/results/generation3d/shipped.json``, ships the MoCA pipeline as ``generation3d/weights/
moca-furniture`` (float16, with the training items' creators and licences in ``ATTRIBUTION.json``)
and rewrites the README's shipped-model section from the JSON. Existing results and weights are
kept unless ``--overwrite``. With the defaults (all 46 test shapes, 20 Euler steps, the snapshots
of every 5,000th step) that is 15 evaluations of about 1-3 min each. Every snapshot evaluation is
cached beside the snapshot, so

    python scripts/ship_generation3d.py --runs runs/ship --curves-only

run while the three trainings go on evaluates the snapshots written so far, and the final call
only evaluates the finished models. ``--readme-only`` rewrites the README section from the
committed ``shipped.json`` without evaluating anything.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

APP_DIR = ROOT / "generation3d"  # the shipped model goes to APP_DIR/weights/<name>
RESULTS = ROOT / "docs" / "results" / "generation3d"
README = APP_DIR / "README.md"
PRESET = "furniture"
NAME = "moca-furniture"
RUNS = {"moca": "moca_furniture", "full": "full_furniture", "local": "local_furniture"}  # attention -> run
FIDELITY_TARGET = 0.80
ATTRIBUTION = "ATTRIBUTION.json"
DATA = ("Sweet Home 3D furniture (Debian sweethome3d-furniture, CC-BY 3.0 / CC0 items listed in "
        "ATTRIBUTION.json), `moca build-data --source sweethome3d --points 128`")


def attribution_json(csv_path: Path, out: Path) -> Path:
    """The training items' creators and licences (``ATTRIBUTION.csv`` of the dataset, required
    by CC-BY 3.0 beside anything made from them) as a JSON list of rows: the packaged weights
    carry ``*.json`` and ``*.safetensors`` files only (``pyproject.toml``)."""
    import csv

    from common.io import write_json

    with open(csv_path, encoding="utf-8", newline="") as f:
        write_json(out, list(csv.DictReader(f)))
    return out


def train_command(attention: str, run: str) -> str:
    return f"moca train --preset {PRESET} --attention {attention} --out runs/ship/{run} --threads 1 --resume"


def _machine() -> str:
    return f"CPU ({platform.processor() or platform.machine()}), 1 torch thread"


def curves_only(runs: Path, n: int, steps: int, every: int) -> int:
    """Evaluate (and cache) the snapshots the runs in ``runs`` have written so far; the number evaluated."""
    import torch

    from generation3d.classifier import get_classifier
    from generation3d.data import PartDataset
    from generation3d.release import learning_curve

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    done = 0
    for att, run in RUNS.items():
        if not (runs / run / "data" / "parts.npz").is_file():
            continue
        ds = PartDataset.load(runs / run / "data")
        rows = learning_curve(runs / run, ds, n, steps, get_classifier(ds), every=every, partial=True)
        done += len(rows)
        for row in rows:
            print(f"{att} step {row['step']}: fidelity {row['fidelity']:.3f}, CD {row['cd']:.3f}, F {row['fscore']:.3f}")
    return done


def readme_only(results: Path) -> None:
    """Rewrite the README's shipped-model section from ``results/shipped.json`` alone."""
    from common.errors import InputError
    from common.io import read_json
    from generation3d.release import readme_section, update_readme

    if not (results / "shipped.json").is_file():
        raise InputError(f"{results / 'shipped.json'} does not exist; run this script without --readme-only first")
    update_readme(README, readme_section(read_json(results / "shipped.json")))
    print(f"updated {README}")


def ship_furniture(runs: Path, n: int, steps: int, samples: int, results: Path, overwrite: bool,
                   every: int) -> Path:
    import torch

    from common.errors import InputError
    from common.io import sha256_file, write_json
    from common.shipped import ship, steps_to_reach
    from generation3d.classifier import get_classifier
    from generation3d.data import PartDataset, read_meta
    from generation3d.library import LIBRARY_FILE
    from generation3d.preset import preset_recipe
    from generation3d.release import (
        category_grids,
        evaluate,
        finished_run,
        learning_curve,
        readme_section,
        shipped_precision,
        update_readme,
    )
    from generation3d.sampling import MoCAPipeline

    torch.set_num_threads(2)
    extras = {att: finished_run(runs / run, PRESET, att) for att, run in RUNS.items()}
    data = runs / RUNS["moca"] / "data"
    digest = sha256_file(data / "parts.npz")
    for run in RUNS.values():
        if sha256_file(runs / run / "data" / "parts.npz") != digest:
            raise InputError(f"{runs / run / 'data'} differs from {data}: the runs must share one dataset")
    report_path = results / "shipped.json"
    taken = [p for p in (report_path, APP_DIR / "weights" / NAME) if p.exists()] + sorted(results.glob("shipped_*.png"))
    if taken and not overwrite:
        raise InputError(f"{taken[0]} exists (pass --overwrite to replace the shipped model and its results)")
    results.mkdir(parents=True, exist_ok=True)
    ds = PartDataset.load(data)
    classifier = get_classifier(ds)
    meta = read_meta(data)
    report = {"protocol": {"n_shapes": min(n, int(meta["n_test"])), "sampling_steps": steps, "guidance": 1.0,
                           "eval_seed": 0, "split": "test", "weights": "float16 as shipped (curves: float32 snapshots)",
                           "curve_every": every,
                           "classifier_test_acc": classifier[1].get("test_accuracy"),
                           "fidelity_target": FIDELITY_TARGET, "recipe": preset_recipe(PRESET),
                           "data": {k: meta[k] for k in ("n_shapes", "n_train", "n_val", "n_test")},
                           "grid_samples": samples, "trained_on": _machine()},
              "models": {}, "curves": {}, "grids": {}}
    pipes = {}
    for att, run in RUNS.items():
        pipe = shipped_precision(MoCAPipeline.load(runs / run))
        res = evaluate(pipe, ds, n, steps, classifier)
        extra = extras[att]
        report["models"][att] = {"run": run, "command": train_command(att, run), "train_s": extra["train_s"],
                                 "ae_train_s": extra["ae_train_s"], "final_loss": extra["history"][-1]["loss"],
                                 "params": sum(p.numel() for p in pipe.gen.parameters()), **res}
        report["curves"][att] = learning_curve(runs / run, ds, n, steps, classifier, every=every)
        report["models"][att]["extrapolation"] = {
            f"fidelity_{FIDELITY_TARGET:.2f}": steps_to_reach(report["curves"][att], "fidelity", FIDELITY_TARGET)}
        report["grids"][att] = category_grids(pipe, ds, results / f"shipped_{att}", samples=samples,
                                              steps=preset_recipe(PRESET)["sample_steps"])
        pipes[att] = pipe
        print(f"{att}: fidelity {res['fidelity']:.3f}, CD {res['cd']:.3f}, F {res['fscore']:.3f}, "
              f"COV {res['coverage']:.3f}, MMD {res['mmd']:.4f}; {extra['train_s'] / 3600:.2f} h of training")
    moca, extra = report["models"]["moca"], extras["moca"]
    report["shipped"] = {"name": NAME, "attention": "moca", "run": RUNS["moca"]}
    write_json(report_path, report)
    keep = ("cd", "fscore", "part_cd", "part_fscore", "coverage", "mmd", "1nna", "part_count_acc", "fidelity",
            "fidelity_real", "classifier_test_acc", "fidelity_by_category", "n_shapes", "steps", "split")
    with tempfile.TemporaryDirectory() as tmp:
        path = ship(pipes["moca"].checkpoint(), NAME, APP_DIR, command=train_command("moca", RUNS["moca"]), data=DATA,
                    split=f"train {meta['n_train']} / val {meta['n_val']} / test {meta['n_test']} shapes "
                          f"(build-data seed {meta.get('seed', 0)}); metrics on {moca['n_shapes']} test shapes",
                    steps=int(extra["steps"]), seed=int(extra["seed"]), metrics={k: moca[k] for k in keep},
                    trained_on=_machine(), wall_s=round(extra["train_s"] + extra["ae_train_s"], 1),
                    smoke="generation3d.sampling:smoke_sample", overwrite=overwrite,
                    extra_files={ATTRIBUTION: attribution_json(data / "ATTRIBUTION.csv", Path(tmp) / ATTRIBUTION),
                                 LIBRARY_FILE: runs / RUNS["moca"] / LIBRARY_FILE})
    update_readme(README, readme_section(report))
    print(f"shipped {path}; wrote {report_path} and the grids; updated {README}")
    return path


def ship_library(data: Path) -> Path:
    """Build the component library of the shipped pipeline from its dataset ``data`` (``moca
    build-data --source sweethome3d --points 128``: the split counts must be the manifest's) and
    add it to the shipped files, for a pipeline shipped before it had one."""
    from common.errors import InputError
    from common.shipped import add_file, read_manifest, resolve_checkpoint
    from generation3d.data import PartDataset, read_meta
    from generation3d.library import LIBRARY_FILE, ComponentLibrary, read_records
    from generation3d.model import PipelineCheckpoint
    from generation3d.sampling import MoCAPipeline

    meta, shipped = read_meta(data), resolve_checkpoint(NAME)
    counts = f"train {meta.get('n_train')} / val {meta.get('n_val')} / test {meta.get('n_test')} shapes"
    split = read_manifest(shipped)["split"]
    if not split.startswith(counts):
        raise InputError(f"{data} holds {counts}, not the shipped model's dataset ({split})")
    pipe = MoCAPipeline.from_checkpoint(PipelineCheckpoint.from_pretrained(shipped))  # without the old library
    library = ComponentLibrary.build(pipe, PartDataset.load(data, with_meshes=True), read_records(data))
    with tempfile.TemporaryDirectory() as tmp:
        path = add_file(shipped, LIBRARY_FILE, library.save(tmp))
    print(f"added {path} ({len(library)} components, {path.stat().st_size / 2**20:.1f} MiB)")
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ship_generation3d", description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=Path, default=ROOT / "runs" / "ship")
    p.add_argument("--n", type=int, default=46, help="test shapes evaluated (46: all of them)")
    p.add_argument("--steps", type=int, default=20, help="Euler steps per evaluated sample")
    p.add_argument("--samples", type=int, default=4, help="samples per category in each grid")
    p.add_argument("--curve-every", type=int, default=5000,
                   help="evaluate the snapshots of every N-th step for the learning curves (0: all kept)")
    p.add_argument("--curves-only", action="store_true",
                   help="only evaluate (and cache) the snapshots written so far, e.g. while the runs train")
    p.add_argument("--readme-only", action="store_true",
                   help="only rewrite the README's shipped-model section from the committed shipped.json")
    p.add_argument("--library", type=Path, default=None, metavar="DATA",
                   help="only add the component library, built from the shipped model's dataset DATA")
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--overwrite", action="store_true")
    a = p.parse_args(argv)
    from common.errors import MoeAppsError

    try:
        if a.library:
            ship_library(a.library)
        elif a.readme_only:
            readme_only(a.results)
        elif a.curves_only:
            print(f"{curves_only(a.runs, a.n, a.steps, a.curve_every)} snapshot evaluations (cached beside the snapshots)")
        else:
            ship_furniture(a.runs, a.n, a.steps, a.samples, a.results, a.overwrite, a.curve_every)
    except MoeAppsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
