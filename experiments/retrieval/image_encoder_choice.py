"""Choose the pretrained image encoder's setting on *validation* rows of the small benchmark:
MoA³CIR (bench budget: 1 + 3 epochs, batch 64; no augmentation unless ``--augment N``, which adds
the bench's N self-reflective proposals, computed once per variant and seed) trained on the train
split with each ``image_encoder`` setting and each ``--seeds`` seed (default 0), R@1/10/50 on the
val split of both variants.

    python experiments/retrieval/image_encoder_choice.py --root runs/rbench/data \\
        --settings scratch efficientnet-lite0:b10:r64 efficientnet-lite0:b7:r64 efficientnet-lite0:b4:r64

A setting is ``scratch`` or ``efficientnet-lite0:b<token_block>:r<resolution>[:t<trainable_blocks>]``.
Seed spread on validation, with augmentation (the bench's "MoA3CIR" row):

    python experiments/retrieval/image_encoder_choice.py --root runs/rbench/data --variants confounded \\
        --augment 800 --seeds 0 1 2 --settings efficientnet-lite0:b7:r64 efficientnet-lite0:b7:r96

Rows go to ``--out`` (JSON lines) as they finish.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from retrieval.bench import augmented_train_split
from retrieval.data import load_synthetic
from retrieval.embed import embed_gallery, embed_queries
from retrieval.evaluate import evaluate_split
from retrieval.features import prepare_features
from retrieval.registry import build_model
from retrieval.train import TrainConfig, fit


def parse_setting(s: str) -> dict:
    if s == "scratch":
        return {"image_encoder": "scratch"}
    name, *parts = s.split(":")
    out = {"image_encoder": name}
    keys = {"b": "token_block", "r": "encoder_resolution", "t": "trainable_blocks"}
    for p in parts:
        out[keys[p[0]]] = int(p[1:])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--settings", nargs="+", required=True)
    ap.add_argument("--variants", nargs="+", default=["confounded", "controlled"])
    ap.add_argument("--model", default="moa3cir")
    ap.add_argument("--split", default="val")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--augment", type=int, default=0, help="self-reflective proposals (0: none)")
    ap.add_argument("--out", default="experiments/retrieval/results/image_encoder_choice.jsonl")
    args = ap.parse_args()
    torch.set_num_threads(1)
    for variant in args.variants:
        tr = load_synthetic(Path(args.root), "train", variant)
        ev = load_synthetic(Path(args.root), args.split, variant)
        f_ev = prepare_features(ev)
        for seed in args.seeds:
            train_split = tr
            if args.augment:
                train_split, _ = augmented_train_split(Path(args.root), variant, tr, args.augment, seed)
            f_tr = prepare_features(train_split)
            for s in args.settings:
                torch.manual_seed(seed)
                model = build_model(args.model, **parse_setting(s))
                t0 = time.time()
                fit(model, f_tr, TrainConfig(1, 3, seed=seed))
                q, _ = embed_queries(model, f_ev)
                m = evaluate_split(ev, q, embed_gallery(model, f_ev))
                row = {"variant": variant, "model": args.model, "setting": s, "split": args.split,
                       "augment": args.augment, "seed": seed,
                       **{k: round(m[k], 2) for k in ("R@1", "R@10", "R@50")}, "s": round(time.time() - t0, 1)}
                print(json.dumps(row), flush=True)
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
