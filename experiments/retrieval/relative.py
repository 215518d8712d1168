"""Does MoA³CIR obey relative requests ("darker", "more colourful")? MoA³CIR with its relative path
beside the isolating variant without it (the relative groups composed like the absolute ones,
``c_g = (1 - a_g) r_g + a_g t_g``), same data and budget (the bench's MoA3CIR row: frozen
EfficientNet-Lite0, 800 self-reflective augmentation proposals, but ``--phase1-epochs`` 2 +
``--phase2-epochs`` 20 instead of the bench's 1 + 3: the relative levels need them), on two paths:

* the small benchmark's controlled **test** split, whose relative requests use phrasings no
  training triplet uses (``retrieval.captions.PHRASINGS``): R@k, absolute compliance (the top-1 has
  the requested colour / pattern) and relative compliance per relation: over the test triplets
  asking for that step, the share whose top-1 is a level darker / lighter / more / less colourful
  than the reference (one level moves the garment's luma by at least 3.6 times the render's colour
  noise, ``retrieval.render``); "combined": requests naming a colour and a step, both obeyed;
* the **real-image user path**: un-negated Fashion-MNIST test photos (grey garments on white, as a
  shop would upload them, no description), a gallery of ``--real-n`` of them, ``--real-queries``
  references each asked "darker" and "lighter" in a training and an evaluation phrasing; the top-1
  (reference excluded) obeys when its garment's mean pixel lightness differs from the reference's
  in the asked direction by more than two standard errors of that difference (the measurement's
  noise). ``chance``: the share of the gallery that would obey, averaged over the queries. Measured
  as trained (request emphasis 0) and with the shipped model's request emphasis 5; and the shipped
  ``moa3cir-fmnist`` on the same path.

    python -m experiments.retrieval.relative --root runs/rel/data --out runs/rrel \\
        --json docs/results/retrieval/relative.json

A rerun with the same ``--out`` reuses the rows already measured (``rows.json``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from common.io import read_json, write_json
from retrieval.bench import augmented_train_split, bench_root
from retrieval.data import CIRSplit, Triplet, image_from_array, load_synthetic
from retrieval.embed import embed_gallery, embed_queries
from retrieval.evaluate import attribute_compliance, evaluate_split, top1_items
from retrieval.features import prepare_features
from retrieval.model import MoA3CIR
from retrieval.registry import build_model, load_model, save_model
from retrieval.render import GROUPS, RELATIVE_GROUPS
from retrieval.train import TrainConfig, fit

RELATIONS = {("lightness", -1): "darker", ("lightness", 1): "lighter",
             ("saturation", 1): "more colourful", ("saturation", -1): "less colourful"}
REAL_REQUESTS = {"train": {-1: "make it darker", 1: "make it lighter"},
                 "eval": {-1: "I want it darker", 1: "a bit lighter"}}
TODAY = "docs/results/retrieval/compliance.json"  # MoA3CIR before the relative groups, same budget


def _percent(hits: list) -> float | None:
    return round(100 * float(np.mean(hits)), 2) if hits else None


class NoRelativePath(MoA3CIR):
    """The isolating variant: lightness and saturation are routed and composed like absolute groups."""

    relative_groups = ()


def relative_compliance(split: CIRSplit, top1: list[str]) -> dict:
    """Per relation of ``RELATIONS``: ``n`` test triplets asking for it, ``obeyed`` (percent) whose
    top-1 moved from the reference's level in the asked direction, ``exact`` (percent) on the
    target's level; ``combined``: triplets naming a colour and a step with both obeyed."""
    out, both = {}, []
    level = lambda i, g: int(split.attributes[split.index[i], GROUPS.index(g)])  # noqa: E731
    for (group, step), name in RELATIONS.items():
        rows = [n for n, t in enumerate(split.triplets) if group in t.changed
                and np.sign(level(t.target, group) - level(t.reference, group)) == step]
        moved = [np.sign(level(top1[n], group) - level(split.triplets[n].reference, group)) == step for n in rows]
        exact = [level(top1[n], group) == level(split.triplets[n].target, group) for n in rows]
        out[name] = {"n": len(rows), "obeyed": _percent(moved), "exact": _percent(exact)}
    col = GROUPS.index("colour")
    for n, t in enumerate(split.triplets):
        steps = [g for g in RELATIVE_GROUPS if g in t.changed]
        if "colour" in t.changed and steps:
            ok = split.attributes[split.index[top1[n]], col] == split.attributes[split.index[t.target], col]
            for g in steps:
                ok &= np.sign(level(top1[n], g) - level(t.reference, g)) == np.sign(level(t.target, g) - level(t.reference, g))
            both.append(bool(ok))
    out["combined (colour + step)"] = {"n": len(both), "obeyed": _percent(both)}
    return out


def real_photos(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` Fashion-MNIST test photos un-negated (grey garment on white) as the hub takes an upload
    ((n, 32, 32, 3) uint8), their garments' mean pixel lightness in [0, 1] and its standard error."""
    from common.data_dir import load_fashion_mnist

    x, _ = load_fashion_mnist("test")
    rows = np.random.default_rng(seed).choice(len(x), n, replace=False)
    photos = 255 - x[rows]
    images = np.stack([image_from_array(p) for p in photos])
    light, se = np.empty(n), np.empty(n)
    for i, (p, raw) in enumerate(zip(photos, x[rows], strict=True)):
        px = p[raw > 25] / 255.0  # garment pixels (the negated photo is 0 off the garment)
        light[i], se[i] = px.mean(), px.std() / np.sqrt(len(px))
    return images, light, se


def real_path(model, n: int, queries: int, seed: int) -> dict:
    """Relative compliance on the real-image user path (module docstring) per phrasing and relation."""
    images, light, se = real_photos(n, seed)
    ids = [f"fmnist_{i}" for i in range(n)]
    asked = [(phrasing, step, text, r) for phrasing, texts in REAL_REQUESTS.items() for step, text in texts.items()
             for r in range(queries)]
    trips = [Triplet(ids[r], ids[r], text, "all", ["lightness"]) for _, _, text, r in asked]
    split = CIRSplit("fmnist-photos", "test", ids, images, trips, {"all": ids}, exclude_reference=True)
    f = prepare_features(split)
    q, w = embed_queries(model, f)
    top1 = np.array([split.index[i] for i in top1_items(split, q, embed_gallery(model, f))])
    out: dict = {"gallery": n, "references": queries}
    for phrasing, texts in REAL_REQUESTS.items():
        for step, text in texts.items():
            rows = [k for k, a in enumerate(asked) if a[:2] == (phrasing, step)]
            hits, chance = [], []
            for k in rows:
                r = asked[k][3]
                obeys = step * (light - light[r]) > 2 * np.sqrt(se[r] ** 2 + se**2)
                obeys[r] = False
                hits.append(bool(obeys[top1[k]]))
                chance.append(obeys.sum() / (n - 1))
            out[f"{RELATIONS[('lightness', step)]} ({phrasing}: '{text}')"] = {
                "obeyed": _percent(hits), "chance": _percent(chance),
                "lightness_weight": None if w is None else round(float(w[rows, GROUPS.index("lightness")].mean()), 3)}
    return out


def measure(name: str, model, root: Path, args) -> dict:
    te = load_synthetic(root, "test", "controlled")
    f = prepare_features(te)
    q, _ = embed_queries(model, f)
    g = embed_gallery(model, f)
    recall = evaluate_split(te, q, g)
    return {"method": name, "test_recall": {k: round(v, 2) for k, v in recall.items()},
            "absolute_compliance": {k: round(v, 2) for k, v in attribute_compliance(te, q, g).items()},
            "relative_compliance": relative_compliance(te, top1_items(te, q, g)),
            "real_path": real_path(model, args.real_n, args.real_queries, args.seed),
            "real_path_request_emphasis_5": real_path(_emphasised(model, 5.0), args.real_n, args.real_queries,
                                                      args.seed)}


def _emphasised(model, emphasis: float):
    """``model`` searching with request emphasis ``emphasis`` (as the shipped model does)."""
    import copy

    out = copy.deepcopy(model)
    out.config.request_emphasis = emphasis
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", default=None, help="the small benchmark (built into --out/data when absent)")
    p.add_argument("--out", default="runs/rrel")
    p.add_argument("--json", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--augment", type=int, default=800)
    p.add_argument("--phase1-epochs", type=int, default=2)
    p.add_argument("--phase2-epochs", type=int, default=20)
    p.add_argument("--real-n", type=int, default=600)
    p.add_argument("--real-queries", type=int, default=200)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    out = Path(args.out)
    root = bench_root(args.root, out, "small", args.seed)
    cached = {r["method"]: r for r in read_json(out / "rows.json")} if (out / "rows.json").is_file() else {}
    tr = load_synthetic(root, "train", "controlled")
    aug = None
    rows = []
    for name, cls in (("MoA3CIR", MoA3CIR), ("MoA3CIR w/o relative path", NoRelativePath)):
        if name not in cached:
            if aug is None:
                aug_split, stats = augmented_train_split(root, "controlled", tr, args.augment, args.seed,
                                                         out / "critic")
                aug = prepare_features(aug_split)
                print(f"augmentation: {stats.as_dict()}")
            torch.manual_seed(args.seed)
            model = build_model("moa3cir")
            if cls is not MoA3CIR:
                torch.manual_seed(args.seed)
                model = cls(model.config)
            fit(model, aug, TrainConfig(args.phase1_epochs, args.phase2_epochs, seed=args.seed))
            if cls is MoA3CIR:
                save_model(model, out / "models" / "MoA3CIR")
            cached[name] = measure(name, model, root, args)
            write_json(out / "rows.json", list(cached.values()))
        rows.append(cached[name])
        print(rows[-1])
    today = read_json(Path(TODAY))["rows"] if Path(TODAY).is_file() else []
    before = next((r for r in today if r.get("method") == "MoA3CIR"), None)
    shipped, _ = load_model("moa3cir-fmnist")  # what the hub searches with
    shipped = {"model": "moa3cir-fmnist", "request_emphasis": shipped.config.request_emphasis,
               "real_path": real_path(shipped, args.real_n, args.real_queries, args.seed)}
    result = {"config": vars(args), "rows": rows, "shipped_model": shipped,
              "before_relative_groups": None if before is None else
              {k: before[k] for k in ("R@1", "R@10", "R@50", "compliance/colour", "compliance/pattern")} | {
                  "source": TODAY}}
    write_json(Path(args.json), result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
