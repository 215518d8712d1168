"""Benchmarks: MoA³CIR vs baselines and ablations on both benchmark variants, and search speed.

``run_retrieval_bench`` trains every method on the same train split (same seed, same epochs) and
evaluates on the test split (FashionIQ protocol per category, R@1/10/50 averaged over
categories); the augmentation run also reports acceptance rates. ``run_search_bench`` times
NumPy brute force vs faiss exact vs IVF on random unit vectors.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from common.io import write_csv, write_json
from common.report import markdown_table

from .data import VARIANTS, load_synthetic
from .evaluate import evaluate_split
from .index import GalleryIndex
from .train import TrainConfig, build_model, embed_gallery, embed_queries, fit, prepare_features, save_model

# name -> (model kind, model overrides, train overrides, use augmentation)
METHODS: dict[str, tuple[str, dict, dict, bool]] = {
    "MoA3CIR": ("moa3cir", {}, {}, True),
    "MoA3CIR w/o augmentation": ("moa3cir", {}, {}, False),
    "MoA3CIR w/o descriptions": ("moa3cir", {"use_descriptions": False}, {}, False),
    "MoA3CIR w/o MoA3 (plain attention)": ("moa3cir", {"attention": "plain"}, {}, False),
    "MoA3CIR w/o routing (uniform groups)": ("moa3cir", {"routing": "uniform"}, {}, False),
    "MoA3CIR single-phase": ("moa3cir", {}, {"phase1_epochs": 0}, False),
    "CLIP4Cir-style combiner": ("combiner", {}, {}, False),
    "sum fusion": ("sum", {}, {}, False),
    "image-only": ("image", {}, {}, False),
    "text-only": ("text", {}, {}, False),
}
QUICK_METHODS = ["MoA3CIR w/o augmentation", "MoA3CIR", "CLIP4Cir-style combiner", "image-only"]


def augmented_train_split(root: Path, variant: str, train_split, n: int, seed: int):
    from common.data_dir import load_fashion_mnist

    from .augment import AttributeCritic, RenderEditor, self_reflective_augment, train_attribute_classifier

    clf = train_attribute_classifier(train_split.images, train_split.attributes, epochs=4, seed=seed)
    silhouettes, _ = load_fashion_mnist("train")
    return self_reflective_augment(
        train_split, silhouettes, RenderEditor(), AttributeCritic(clf), n, seed=seed
    )


def run_retrieval_bench(
    data_root: Path,
    out_dir: Path,
    variants=VARIANTS,
    methods: list[str] | None = None,
    train_cfg: TrainConfig | None = None,
    augment_n: int = 800,
    seed: int = 0,
    save_models: bool = False,
    log=print,
) -> list[dict]:
    """Train/evaluate ``methods`` on each variant; writes ``retrieval_bench.csv/.json/.md`` + plot."""
    torch.set_num_threads(1)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    train_cfg = train_cfg or TrainConfig(seed=seed)
    methods = methods or list(METHODS)
    rows: list[dict] = []
    for variant in variants:
        tr, te = load_synthetic(data_root, "train", variant), load_synthetic(data_root, "test", variant)
        f_tr, f_te = prepare_features(tr), prepare_features(te)
        f_aug, aug_stats = None, None
        if any(METHODS[m][3] for m in methods):
            aug_split, stats = augmented_train_split(data_root, variant, tr, augment_n, seed)
            f_aug, aug_stats = prepare_features(aug_split), stats.as_dict()
            log(f"[{variant}] augmentation: {aug_stats}")
            rows.append(
                {
                    "variant": variant,
                    "method": "augmentation",
                    **{k: round(v, 4) for k, v in aug_stats.items()},
                }
            )
        for name in methods:
            kind, over, tover, aug = METHODS[name]
            torch.manual_seed(seed)
            model = build_model(kind, **over)
            t0 = time.time()
            fit(model, f_aug if aug else f_tr, replace(train_cfg, **tover))
            q, _ = embed_queries(model, f_te)
            metrics = evaluate_split(te, q, embed_gallery(model, f_te))
            row = {
                "variant": variant,
                "method": name,
                **{k: round(v, 2) for k, v in metrics.items()},
                "train_s": round(time.time() - t0, 1),
                "seed": seed,
                "split": "test",
            }
            rows.append(row)
            log(f"[{variant}] {name}: R@1 {row['R@1']:.1f} R@10 {row['R@10']:.1f} R@50 {row['R@50']:.1f}")
            if save_models:
                save_model(model, out_dir / "models" / variant / name.replace(" ", "_").replace("/", ""))
    _write(out_dir, rows)
    return rows


def _write(out_dir: Path, rows: list[dict]) -> None:
    res = [r for r in rows if r["method"] != "augmentation"]
    write_csv(out_dir / "retrieval_bench.csv", res)
    write_json(out_dir / "retrieval_bench.json", rows)
    cols = [
        "variant",
        "method",
        "R@1",
        "R@10",
        "R@50",
        "R@10/tops",
        "R@10/bottoms",
        "R@10/accessories",
        "avg",
    ]
    table = markdown_table(res, [c for c in cols if any(c in r for r in res)])
    (out_dir / "retrieval_bench.md").write_text(table + "\n")
    print(table)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        variants = list(dict.fromkeys(r["variant"] for r in res))
        fig, axes = plt.subplots(1, len(variants), figsize=(6 * len(variants), 4), squeeze=False)
        for ax, v in zip(axes[0], variants, strict=False):
            vr = [r for r in res if r["variant"] == v]
            ax.barh([r["method"] for r in vr], [r["R@10"] for r in vr])
            ax.set_xlabel("R@10 (%)")
            ax.set_title(f"{v} test")
        fig.tight_layout()
        fig.savefig(out_dir / "retrieval_bench.png", dpi=100)
        plt.close(fig)
    except ImportError:  # pragma: no cover
        pass


def run_search_bench(
    out_dir: Path,
    n: int = 1_000_000,
    d: int = 256,
    n_queries: int = 1000,
    k: int = 10,
    nlist: int = 1024,
    nprobe: int = 16,
    seed: int = 0,
) -> list[dict]:
    """NumPy brute force vs faiss IndexFlatIP vs IVF on a clustered random gallery.

    Everything runs single-threaded (BLAS and faiss OpenMP) so the comparison is per core."""
    import faiss
    from threadpoolctl import threadpool_limits

    faiss.omp_set_num_threads(1)
    with threadpool_limits(1):
        return _search_bench(Path(out_dir), n, d, n_queries, k, nlist, nprobe, seed)


def _search_bench(out_dir: Path, n: int, d: int, n_queries: int, k: int, nlist: int, nprobe: int, seed: int):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((256, d)).astype(np.float32)
    gal = centers[rng.integers(0, 256, n)] + 0.7 * rng.standard_normal((n, d)).astype(np.float32)
    gal /= np.linalg.norm(gal, axis=1, keepdims=True)
    q = gal[rng.integers(0, n, n_queries)] + 0.1 * rng.standard_normal((n_queries, d)).astype(np.float32)
    q = (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)

    t = time.perf_counter()
    ref = np.empty((n_queries, k), np.int64)
    for s in range(0, n_queries, 100):
        sc = q[s : s + 100] @ gal.T
        part = np.argpartition(-sc, k, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(sc, part, 1), axis=1, kind="stable")
        ref[s : s + 100] = np.take_along_axis(part, order, 1)
    numpy_s = time.perf_counter() - t

    flat = GalleryIndex(d, "flat")
    flat.add(gal)
    t = time.perf_counter()
    _, flat_rows = flat.search_rows(q, k)
    flat_s = time.perf_counter() - t

    ivf = GalleryIndex(d, "ivf", nlist=nlist, nprobe=nprobe)
    t = time.perf_counter()
    ivf.add(gal)
    build_s = time.perf_counter() - t
    t = time.perf_counter()
    _, ivf_rows = ivf.search_rows(q, k)
    ivf_s = time.perf_counter() - t

    same = float(np.mean([set(a) == set(b) for a, b in zip(ref, flat_rows, strict=False)]))
    ivf_recall = float(np.mean([len(set(a) & set(b)) / k for a, b in zip(flat_rows, ivf_rows, strict=False)]))
    rows = [
        {
            "method": "numpy brute force",
            "n": n,
            "d": d,
            "queries": n_queries,
            "search_s": round(numpy_s, 3),
            "speedup_vs_numpy": 1.0,
            "recall@10_vs_exact": 1.0,
        },
        {
            "method": "faiss IndexFlatIP",
            "n": n,
            "d": d,
            "queries": n_queries,
            "search_s": round(flat_s, 3),
            "speedup_vs_numpy": round(numpy_s / flat_s, 2),
            "recall@10_vs_exact": round(same, 4),
        },
        {
            "method": f"faiss IVF{nlist} nprobe={nprobe}",
            "n": n,
            "d": d,
            "queries": n_queries,
            "search_s": round(ivf_s, 3),
            "speedup_vs_numpy": round(numpy_s / ivf_s, 2),
            "speedup_vs_flat": round(flat_s / ivf_s, 2),
            "recall@10_vs_exact": round(ivf_recall, 4),
            "build_s": round(build_s, 1),
        },
    ]
    write_csv(out_dir / "search_bench.csv", rows)
    write_json(out_dir / "search_bench.json", rows)
    print(markdown_table(rows))
    return rows
