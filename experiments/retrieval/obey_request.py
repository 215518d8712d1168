"""Does MoA³CIR obey the request? Attribute compliance of MoA³CIR and its isolating variants
(no routing, no MoA³) on the small benchmark's controlled test split, and the hub's example query.

Compliance (``retrieval.evaluate.attribute_compliance``): over the test triplets whose text names
a colour (a pattern), the share whose top-1 item has the requested colour (pattern). The three
methods train with the bench budget (``moa3cir bench`` defaults: 1 + 3 epochs, frozen
EfficientNet-Lite0, MoA³CIR with the 800 augmentation proposals). Then the saved MoA³CIR answers
the hub's example: the first red checked coat of the test gallery (the hub's "Scarlet check coat")
and the request "make it blue with stripes"; its top 5 (colour, pattern) and routing weights are
stored, with where the colour misses go (the top-1 is the reference itself / which colour it
has). A rerun with the same ``--out`` reuses the trained models and their rows.

    python experiments/retrieval/obey_request.py --root runs/rbench/data \\
        --out runs/robey --json docs/results/retrieval/compliance.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common.io import read_json, write_json
from retrieval.bench import bench_root, run_retrieval_bench
from retrieval.data import load_synthetic
from retrieval.embed import embed_queries, encode_single_query
from retrieval.index import GalleryIndex
from retrieval.registry import load_model
from retrieval.render import ATTRIBUTES, GROUPS
from retrieval.train import TrainConfig

METHODS = ["moa3cir", "no-routing", "no-moa3"]
HUB_REFERENCE, HUB_REQUEST = {"category": "coat", "colour": "red", "pattern": "checked"}, "make it blue with stripes"


def hub_example(model_dir: Path, root: Path, variant: str = "controlled", k: int = 5) -> dict:
    """The hub's example query on the test gallery: top ``k`` with colour and pattern, and routing."""
    from retrieval.embed import embed_gallery
    from retrieval.features import prepare_features

    split = load_synthetic(root, "test", variant)
    want = [ATTRIBUTES[g_].index(v) for g_, v in HUB_REFERENCE.items()]
    cols = [GROUPS.index(g_) for g_ in HUB_REFERENCE]
    ref = next((i for i in split.ids if list(split.attributes[split.index[i], cols]) == want), None)
    if ref is None:
        return {"reference": None, "note": f"no test product with {HUB_REFERENCE}"}
    model, _ = load_model(model_dir)
    f = prepare_features(split)
    g = embed_gallery(model, f)
    index = GalleryIndex(g.shape[1], "flat")
    index.add(g, split.ids)
    q, weights = encode_single_query(model, split.images[split.index[ref]], HUB_REQUEST, split.descriptions[ref])
    scores, ids = index.search(q, k)
    col, pat = GROUPS.index("colour"), GROUPS.index("pattern")

    def named(i: str) -> dict:
        a = split.attributes[split.index[i]]
        return {"id": i, "colour": ATTRIBUTES["colour"][a[col]], "pattern": ATTRIBUTES["pattern"][a[pat]]}

    top = [{**named(i), "score": round(float(s), 4)} for i, s in zip(ids[0], scores[0], strict=True)]
    return {"reference": named(ref), "description": split.descriptions[ref], "request": HUB_REQUEST, "top": top,
            "blue_and_striped_in_top": sum(t["colour"] == "blue" and t["pattern"] == "striped" for t in top),
            "routing": {g_: round(float(w), 3) for g_, w in zip(GROUPS, weights, strict=True)},
            "colour_misses": colour_misses(split, *embed_queries(model, f), g)}


def colour_misses(split, q, weights, g) -> dict:
    """Where the top-1 of a colour request goes wrong: the reference itself, the reference's colour,
    or another colour; the most frequent (requested -> returned) pairs; and the router's mean colour
    weight on the missed and the obeyed requests (``weights`` (T, G), None for baselines)."""
    from collections import Counter

    from retrieval.evaluate import top1_items

    col = GROUPS.index("colour")
    top1 = top1_items(split, q, g)
    colour = lambda i: int(split.attributes[split.index[i], col])  # noqa: E731
    miss = [(t, top1[n]) for n, t in enumerate(split.triplets)
            if "colour" in t.changed and colour(top1[n]) != colour(t.target)]
    names = ATTRIBUTES["colour"]
    pairs = Counter(f"{names[colour(t.target)]} -> {names[colour(i)]}" for t, i in miss)
    missed = {id(t) for t, _ in miss}
    asked = [n for n, t in enumerate(split.triplets) if "colour" in t.changed]
    routed = {}
    if weights is not None:
        for name, rows in (("missed", [n for n in asked if id(split.triplets[n]) in missed]),
                           ("obeyed", [n for n in asked if id(split.triplets[n]) not in missed])):
            routed[name] = round(float(weights[rows, col].mean()), 4) if rows else None
    return {"colour_weight": routed,"misses": len(miss), "top1_is_reference": sum(i == t.reference for t, i in miss),
            "top1_keeps_reference_colour": sum(colour(i) == colour(t.reference) for t, i in miss),
            "top_pairs": dict(pairs.most_common(6))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", default=None, help="the small benchmark (built into --out/data when absent)")
    p.add_argument("--out", default="runs/robey")
    p.add_argument("--json", required=True)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    out = Path(args.out)
    root = bench_root(args.root, out, "small", args.seed)
    model_dir = out / "models" / "controlled" / "efficientnet-lite0" / "MoA3CIR"
    if (out / "retrieval_bench.json").is_file() and (model_dir / "config.json").is_file():
        rows = read_json(out / "retrieval_bench.json")
    else:
        rows = run_retrieval_bench(root, out, ["controlled"], METHODS, TrainConfig(1, 3, seed=args.seed),
                                   augment_n=800, seed=args.seed, save_models=True,
                                   image_encoders=("efficientnet-lite0",))
    result = {"config": vars(args), "methods": METHODS, "rows": rows, "hub_example": hub_example(model_dir, root)}
    write_json(Path(args.json), result)
    print(result["hub_example"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
