"""A garment-identity slot for MoA³ (validation rows of the small benchmark's confounded variant).

``confounded_ceiling.py --train`` shows MoA³CIR missing targets whose silent change is visible
(colour, pattern, finish): it keeps the reference's unmentioned colour and ranks other garments
with that colour above the same garment recoloured. The six MoA³ slots are attribute groups;
garment identity (the silhouette, which a silent change keeps) has none. This variant adds a
seventh head group, ``garment``: its attribute head classifies the training garment (the
garment index in the item id, ``retrieval.data._add_item``), and its router target is "the
category changes" (a new category means a new garment), so the composed query keeps the
reference's garment slot unless the text changes the category. Everything else (bench budget
1 + 3 epochs, batch 64, frozen EfficientNet-Lite0 block 7 at 64 px, ``--augment`` proposals)
as ``image_encoder_choice.py``; rows go to the same JSON lines file.

    python experiments/retrieval/identity_slot.py --root runs/rbench/data --augment 800 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from retrieval.bench import augmented_train_split
from retrieval.data import load_synthetic
from retrieval.embed import embed_gallery, embed_queries
from retrieval.evaluate import evaluate_split
from retrieval.features import prepare_features
from retrieval.registry import build_model
from retrieval.render import GROUPS, NUM_VALUES
from retrieval.train import TrainConfig, fit


def add_garment_group(split, f):
    """Features ``f`` of ``split`` with a 7th attribute column (garment class, (N,)) and a 7th
    ``changed`` column (the category changes, (T,)). Returns f and the number of garment classes."""
    garments = np.array([int(i.split("_")[-2]) for i in split.ids])
    _, cls = np.unique(garments, return_inverse=True)
    f.attrs = torch.cat([f.attrs, torch.from_numpy(cls).long()[:, None]], 1)
    f.changed = torch.cat([f.changed, f.changed[:, GROUPS.index("category"), None]], 1)
    return f, int(cls.max()) + 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--variant", default="confounded")
    ap.add_argument("--split", default="val")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--augment", type=int, default=800)
    ap.add_argument("--out", default="experiments/retrieval/results/image_encoder_choice.jsonl")
    args = ap.parse_args()
    torch.set_num_threads(1)
    root = Path(args.root)
    tr = load_synthetic(root, "train", args.variant)
    ev = load_synthetic(root, args.split, args.variant)
    f_ev = prepare_features(ev)
    for seed in args.seeds:
        train_split = augmented_train_split(root, args.variant, tr, args.augment, seed)[0] if args.augment else tr
        f_tr, n_garments = add_garment_group(train_split, prepare_features(train_split))
        torch.manual_seed(seed)
        model = build_model("moa3cir", num_groups=len(GROUPS) + 1, num_values=[*NUM_VALUES, n_garments])
        t0 = time.time()
        fit(model, f_tr, TrainConfig(1, 3, seed=seed))
        q, _ = embed_queries(model, f_ev)
        m = evaluate_split(ev, q, embed_gallery(model, f_ev))
        row = {"variant": args.variant, "model": "moa3cir + garment slot", "setting": "efficientnet-lite0:b7:r64",
               "split": args.split, "augment": args.augment, "seed": seed,
               **{k: round(m[k], 2) for k in ("R@1", "R@10", "R@50")}, "s": round(time.time() - t0, 1)}
        print(json.dumps(row), flush=True)
        with open(args.out, "a") as fh:
            fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
