"""Ceiling of the small benchmark: R@k of a Bayes oracle that perceives every item exactly.

The oracle knows each gallery item's garment (from its id) and its six attributes (from
``attributes/attr.<split>.json``), and each query's reference item and the attribute values its
text asks for (the triplet's ``changed`` groups, read off the target). It ranks gallery items by
their probability of being the target under the benchmark's generative process
(``retrieval.synth.build_benchmark``):

* the target keeps the reference's garment unless the category changes (then any garment of the
  new category, uniformly);
* its attributes are the reference's with the mentioned groups changed (the "ideal" item), and in
  the confounded variant, with probability ``confound_prob`` (0.7), one *unmentioned* group of
  colour / finish / fabric / pattern (not pattern when scale is mentioned) changed to a uniformly
  drawn other value.

So p(x) = [garment ok] * (0.3 [x == ideal] + 0.7 / |H| / (n_values(h) - 1) [x differs from the
ideal in exactly one hidden group h]). Ties are broken at random: the expected recall is
reported (a target tied with m other items at rank r is in the top k with probability
clip((k - r) / (m + 1), 0, 1)). FashionIQ protocol as ``retrieval.evaluate``: one gallery per
category, reference not excluded, R@k per category averaged. No training, a few seconds:

    python experiments/retrieval/confounded_ceiling.py --root runs/rbench/data --split test val
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from retrieval.data import load_synthetic
from retrieval.render import GROUPS, NUM_VALUES
from retrieval.synth import BuildConfig

HIDDEN = ("colour", "finish", "fabric", "pattern")


def garment_of(item_id: str) -> int:
    """``<variant[:4]>_<split>_<garment>_<n>`` -> garment index (``retrieval.data._add_item``)."""
    return int(item_id.split("_")[-2])


def ideal_attributes(split, trip) -> np.ndarray:
    """(G,) the reference's attributes with the groups the text mentions set to the target's (a
    mentioned pattern brings the target's pattern scale with it)."""
    ideal = split.attributes[split.index[trip.reference]].copy()
    for g in [*trip.changed, *(["scale"] if "pattern" in trip.changed else [])]:
        ideal[GROUPS.index(g)] = split.attributes[split.index[trip.target], GROUPS.index(g)]
    return ideal


def differences(split, trip) -> np.ndarray:
    """(N, G) bool: where each item's attributes differ from the ideal item's. The pattern scale
    counts as part of the pattern unless the text mentions the scale (a solid garment has scale -1,
    so a pattern change moves it too; the text names the pattern, not its scale)."""
    diff = split.attributes != ideal_attributes(split, trip)
    if "scale" not in trip.changed:
        p, sc = GROUPS.index("pattern"), GROUPS.index("scale")
        diff[:, p] |= diff[:, sc]
        diff[:, sc] = False
    return diff


def oracle_probabilities(split, confound_prob: float) -> np.ndarray:
    """(T, N) probability (up to a per-query factor) that gallery item n is triplet t's target."""
    attrs = split.attributes
    garments = np.array([garment_of(i) for i in split.ids])
    gi = {g: i for i, g in enumerate(GROUPS)}
    out = np.zeros((len(split.triplets), len(split.ids)))
    for t, trip in enumerate(split.triplets):
        r, ideal = split.index[trip.reference], ideal_attributes(split, trip)
        diff = differences(split, trip)  # (N, G)
        n_diff = diff.sum(1)
        if "category" in trip.changed:
            ok = attrs[:, gi["category"]] == ideal[gi["category"]]
        else:
            ok = garments == garments[r]
        p = np.where(n_diff == 0, 1.0 - confound_prob, 0.0)
        hidden = [h for h in HIDDEN if h not in trip.changed and not (h == "pattern" and "scale" in trip.changed)]
        if confound_prob > 0 and hidden:
            for h in hidden:
                one = (n_diff == 1) & diff[:, gi[h]]
                p = np.where(one, confound_prob / len(hidden) / (NUM_VALUES[gi[h]] - 1), p)
        out[t] = p * ok
    return out


def closest_attributes(split) -> np.ndarray:
    """(T, N) scores of a perfect-perception ranker that ignores confounding: items of the right
    garment (category, when it changes) first, then by the number of groups differing from the
    ideal item."""
    attrs = split.attributes
    garments = np.array([garment_of(i) for i in split.ids])
    gi = {g: i for i, g in enumerate(GROUPS)}
    out = np.zeros((len(split.triplets), len(split.ids)))
    for t, trip in enumerate(split.triplets):
        r, ideal = split.index[trip.reference], ideal_attributes(split, trip)
        ok = (attrs[:, gi["category"]] == ideal[gi["category"]]) if "category" in trip.changed \
            else garments == garments[r]
        out[t] = len(GROUPS) * ok - differences(split, trip).sum(1)
    return out


def triplet_hits(split, scores: np.ndarray, k: int) -> np.ndarray:
    """(T,) probability that triplet t's target is in the top ``k`` of its category's gallery
    (FashionIQ protocol, reference not excluded), ties broken at random."""
    tri_cat = np.array([t.category for t in split.triplets])
    hits = np.full(len(split.triplets), np.nan)
    for cat, gal_ids in split.galleries.items():
        sel = np.nonzero(tri_cat == cat)[0]
        if not len(sel):
            continue
        col_of = {i: n for n, i in enumerate(gal_ids)}
        s = scores[np.ix_(sel, np.array(split.rows(gal_ids)))]
        ts = s[np.arange(len(sel)), [col_of[split.triplets[t].target] for t in sel]][:, None]
        better, tied = (s > ts).sum(1), (s == ts).sum(1) - 1
        hits[sel] = np.clip((k - better) / (tied + 1), 0, 1)
    return hits


def expected_recall(split, scores: np.ndarray, ks=(1, 10, 50)) -> dict[str, float]:
    """FashionIQ-protocol R@k (percent, mean over categories) with random tie-breaking, in expectation."""
    cats = np.array([t.category for t in split.triplets])
    out = {}
    for k in ks:
        h = triplet_hits(split, scores, k)
        out[f"R@{k}"] = round(100 * float(np.mean([h[cats == c].mean() for c in split.galleries if (cats == c).any()])), 2)
    return out


def query_kinds(split) -> dict[str, np.ndarray]:
    """Boolean (T,) masks of the query kinds: the category changes or not, crossed with the
    target's hidden change (none, or the unmentioned group that changed)."""
    kinds = {}
    hidden = []
    for trip in split.triplets:
        diff = differences(split, trip)[split.index[trip.target]]
        hidden.append(next((GROUPS[i] for i in np.nonzero(diff)[0]), "none"))
    hidden = np.array(hidden)
    cat = np.array(["category" in t.changed for t in split.triplets])
    for c_name, c_mask in (("same garment", ~cat), ("category changes", cat)):
        for h in ("none", *HIDDEN):
            m = c_mask & (hidden == h)
            if m.any():
                kinds[f"{c_name}, hidden change: {h}"] = m
    return kinds


def train_scores(root: Path, split, variant: str, seed: int, augment: int, setting: dict) -> np.ndarray:
    """(T, N) scores q @ g^T of MoA³CIR trained as ``moa3cir bench`` does (1 + 3 epochs, batch 64,
    ``augment`` self-reflective proposals) with the model overrides ``setting``."""
    import torch

    from retrieval.bench import augmented_train_split
    from retrieval.embed import embed_gallery, embed_queries
    from retrieval.features import prepare_features
    from retrieval.registry import build_model
    from retrieval.train import TrainConfig, fit

    torch.set_num_threads(1)
    tr = load_synthetic(root, "train", variant)
    if augment:
        tr, _ = augmented_train_split(root, variant, tr, augment, seed)
    torch.manual_seed(seed)
    model = build_model("moa3cir", **setting)
    fit(model, prepare_features(tr), TrainConfig(1, 3, seed=seed))
    f = prepare_features(split)
    q, _ = embed_queries(model, f)
    return q @ embed_gallery(model, f).T


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--split", nargs="+", default=["test"])
    ap.add_argument("--variants", nargs="+", default=["controlled", "confounded"])
    ap.add_argument("--train", action="store_true",
                    help="also train MoA3CIR (bench budget) and break its R@10 down by query kind")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--augment", type=int, default=800)
    ap.add_argument("--out", default="experiments/retrieval/results/confounded_ceiling.jsonl")
    args = ap.parse_args()
    root = Path(args.root)
    for split_name in args.split:
        for variant in args.variants:
            sp = load_synthetic(root, split_name, variant)
            prob = BuildConfig().confound_prob if variant == "confounded" else 0.0
            rankers = {"bayes oracle": oracle_probabilities(sp, prob),
                       "fewest attribute differences": closest_attributes(sp)}
            if args.train:
                name = f"MoA3CIR (efficientnet-lite0, augment {args.augment}, seed {args.seed})"
                rankers[name] = train_scores(root, sp, variant, args.seed, args.augment, {})
            kinds = query_kinds(sp)
            for name, s in rankers.items():
                h10 = triplet_hits(sp, s, 10)
                row = {"variant": variant, "split": split_name, "ranker": name, **expected_recall(sp, s),
                       "R@10 by query kind (triplets, mean over triplets)":
                           {k: [int(m.sum()), round(100 * float(h10[m].mean()), 1)] for k, m in kinds.items()}}
                print(json.dumps(row), flush=True)
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
