"""Does shape augmentation (``generation3d.augment``: mirror, per-axis scale, component swaps) make
the shipped generator's samples more varied without losing their category?

Protocol: the shipped ``moca-furniture`` generator is trained ``--steps`` more steps on its dataset
at learning rate ``LR`` (same seed, same batches, the recipe's dense warm-up and distillation), once
with ``augment=False`` (the isolating baseline: the same extra compute) and once with
``augment=True``; each variant, and the shipped model as it is, is scored on the **val** shapes
with the retrieve decoder: category fidelity of the final meshes (``evaluate_generator``, seed
``SEED``), the 8-seed spread over the real shapes' per category and the copy share
(``diversity.spread_and_copies`` from seed ``SEED``, so not the seeds the test report uses).

One variant per process (two cores: run both at once), then ``--merge``:

``python -m experiments.generation3d.augment_choice --data-dir DIR --variant none --out PART_NONE.json``
``python -m experiments.generation3d.augment_choice --data-dir DIR --variant augment --out PART_AUG.json``
``python -m experiments.generation3d.augment_choice --merge PART_SHIPPED.json PART_NONE.json PART_AUG.json --out augment_choice.json``
(``--variant shipped`` scores the shipped model without training; ``--strength P S W`` sets the
augmentation's ``AUGMENT_PROB``, ``SCALE_MAX`` and ``SWAP_PROB`` for a stronger or weaker variant.)
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time

import torch

import generation3d.augment
import generation3d.train
from common.report import markdown_table
from generation3d.data import PartDataset
from generation3d.diversity import spread_and_copies
from generation3d.evaluate import evaluate_generator
from generation3d.sampling import MoCAPipeline
from generation3d.train import fit

LR = 3e-4
SEED = 100
SAMPLE_STEPS = 20


def finetuned(pipe: MoCAPipeline, ds: PartDataset, steps: int, augment: bool) -> tuple[MoCAPipeline, float]:
    """The shipped pipeline with its generator trained ``steps`` more steps (and the seconds it took)."""
    t0 = time.perf_counter()
    gen, _, _ = fit(ds, pipe.ae, init=copy.deepcopy(pipe.gen), stats=pipe.stats, steps=steps, lr=LR, seed=0,
                    augment=augment, device="cpu", progress=False)
    out = MoCAPipeline(pipe.ae, gen, pipe.stats, pipe.descriptions, categories=pipe.categories)
    out.library = pipe.library
    return out, time.perf_counter() - t0


def score(pipe: MoCAPipeline, ds: PartDataset) -> dict:
    ev = evaluate_generator(pipe, ds, n_shapes=len(ds.shape_ids("val")), seed=SEED, steps=SAMPLE_STEPS,
                            split="val", decoder="retrieve")
    div = spread_and_copies(pipe, ds, steps=SAMPLE_STEPS, decoder="retrieve", first_seed=SEED)
    return {"fidelity": ev["fidelity"], "fidelity_real": ev["fidelity_real"], "coverage": ev["coverage"],
            "1nna": ev["1nna"], "copy_share": div["copy_share"], "min_spread_ratio": div["min_spread_ratio"],
            "spread_ratio": {c: r["spread_ratio"] for c, r in div["categories"].items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", help="moca build-data --source sweethome3d --points 128 output")
    ap.add_argument("--variant", choices=("shipped", "none", "augment"))
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--strength", nargs=3, type=float, metavar=("PROB", "SCALE_MAX", "SWAP_PROB"))
    ap.add_argument("--merge", nargs="+", help="per-variant JSON files to combine")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    torch.manual_seed(0)
    if a.merge:
        rows = [json.load(open(f)) for f in a.merge]
        result = {"protocol": __doc__.split("\n\n")[1].replace("\n", " "), "lr": LR, "seed": SEED, "rows": rows}
        flat = [{"variant": r["variant"] + (" (strong)" if r.get("strength") else ""), "fidelity": r["fidelity"], "copy_share": r["copy_share"],
                 **{f"spread {c}": v for c, v in r["spread_ratio"].items()}} for r in rows]
        print(markdown_table(flat, list(flat[0])))
    else:
        if not a.data_dir or not a.variant:
            ap.error("--data-dir and --variant are needed without --merge")
        pipe = MoCAPipeline.load("moca-furniture")
        ds = PartDataset.load(a.data_dir, with_meshes=True)
        train_s, strength = 0.0, None
        if a.strength:  # an experiment's setting of the augmentation's constants
            generation3d.train.AUGMENT_PROB, generation3d.augment.SCALE_MAX, generation3d.augment.SWAP_PROB = a.strength
            strength = {"augment_prob": a.strength[0], "scale_max": a.strength[1], "swap_prob": a.strength[2]}
        if a.variant != "shipped":
            pipe, train_s = finetuned(pipe, ds, a.steps, a.variant == "augment")
        result = {"variant": a.variant, "extra_steps": 0 if a.variant == "shipped" else a.steps,
                  "train_s": train_s, "strength": strength, **score(pipe, ds)}
        print(json.dumps(result))
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
