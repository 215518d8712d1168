"""Benchmarks: MoA³CIR vs baselines and ablations on both benchmark variants, and search speed.

``run_retrieval_bench`` trains every method with every image encoder (``scratch`` CNN towers,
the frozen ImageNet ``efficientnet-lite0``) on the same train split (same seed, same epochs) and
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

from common.errors import InputError
from common.io import write_csv, write_json
from common.report import markdown_table

from .baselines import raw_pixel_embeddings
from .data import VARIANTS, load_synthetic
from .evaluate import evaluate_split, routing_metrics
from .index import GalleryIndex
from .train import TrainConfig, build_model, embed_gallery, embed_queries, fit, prepare_features, save_model

# name -> (model kind, model overrides, train overrides, use augmentation); kind "raw-pixel" is
# the untrained pixel baseline, every other kind goes to ``build_model``
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
    "raw-pixel cosine": ("raw-pixel", {}, {}, False),
}
# short names for ``moa3cir bench --methods``
METHOD_SLUGS: dict[str, str] = {
    "moa3cir": "MoA3CIR",
    "no-aug": "MoA3CIR w/o augmentation",
    "no-desc": "MoA3CIR w/o descriptions",
    "no-moa3": "MoA3CIR w/o MoA3 (plain attention)",
    "no-routing": "MoA3CIR w/o routing (uniform groups)",
    "single-phase": "MoA3CIR single-phase",
    "combiner": "CLIP4Cir-style combiner",
    "sum": "sum fusion",
    "image-only": "image-only",
    "text-only": "text-only",
    "raw-pixel": "raw-pixel cosine",
}
QUICK_METHODS = ["MoA3CIR w/o augmentation", "MoA3CIR", "CLIP4Cir-style combiner", "image-only"]


def resolve_methods(names: list[str] | None) -> list[str]:
    """Method names or slugs (``METHOD_SLUGS``) -> method names in table order; None = all."""
    if not names:
        return list(METHODS)
    out = []
    for n in names:
        name = METHOD_SLUGS.get(n, n)
        if name not in METHODS:
            raise InputError(f"unknown method {n!r}; choose from {', '.join(METHOD_SLUGS)}")
        out.append(name)
    return [m for m in METHODS if m in out]


def augmented_train_split(
    root: Path, variant: str, train_split, n: int, seed: int, critic_dir: Path | None = None
):
    """``train_split`` + up to ``n`` accepted self-reflective edits and the augmentation stats.

    The critic's classifier is trained on ``train_split`` (or loaded from ``critic_dir`` when it
    holds a saved critic; a fresh one is saved there)."""
    from common.data_dir import load_fashion_mnist

    from .augment import AttributeCritic, RenderEditor, self_reflective_augment, train_attribute_classifier
    from .data import item_renderer

    if critic_dir is not None and (Path(critic_dir) / "config.json").is_file():
        critic = AttributeCritic.load(critic_dir)
    else:
        clf = train_attribute_classifier(train_split.images, train_split.attributes, epochs=4, seed=seed)
        critic = AttributeCritic(clf)
        if critic_dir is not None:
            critic.save(critic_dir)
    silhouettes, _ = load_fashion_mnist("train")
    editor = RenderEditor(renderer=item_renderer(Path(root) / variant))
    return self_reflective_augment(train_split, silhouettes, editor, critic, n, seed=seed)


def gallery_feature_speed(images: np.ndarray, resolution: int = 64, token_block: int = 7) -> dict:
    """Throughput of the pretrained encoder's gallery features on ``images`` (n, H, W, 3) uint8,
    with the current torch threads: a cold run into a fresh cache (one CNN forward per image) and
    a second run over the same images (served from the cache). Returns images/s of both (wall
    clock, and of the cold run per CPU second of this process: with one thread the robust figure
    on a shared machine) and the number of images the second run's CNN saw (0 when the cache works)."""
    import tempfile

    from common.image_encoder import EfficientNetLite0Encoder

    with tempfile.TemporaryDirectory() as tmp:
        enc = EfficientNetLite0Encoder(resolution, token_block, cache=tmp)
        t, c = time.perf_counter(), time.process_time()
        enc.encode_tokens(images)
        cold, cold_cpu = time.perf_counter() - t, time.process_time() - c
        again = EfficientNetLite0Encoder(resolution, token_block, cache=tmp)  # a new process's view
        calls: list[int] = []  # CNN forwards of the second run, counted by a hook on the network
        again.net._conv_stem.register_forward_hook(lambda module, inputs, output: calls.append(len(inputs[0])))
        t = time.perf_counter()
        again.encode_tokens(images)
        warm = time.perf_counter() - t
    return {"images": len(images), "resolution_in": int(images.shape[1]), "encoder_resolution": resolution,
            "threads": torch.get_num_threads(), "cold_images_per_s": round(len(images) / cold, 1),
            "cold_images_per_cpu_s": round(len(images) / cold_cpu, 1),
            "cached_images_per_s": round(len(images) / warm, 1), "cached_run_cnn_images": sum(calls)}


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
    model_options: dict | None = None,
    image_encoders=("scratch",),
) -> list[dict]:
    """Train/evaluate ``methods`` x ``image_encoders`` on each variant; writes
    ``retrieval_bench.csv/.json/.md`` + plot. ``model_options`` go to ``build_model`` for every
    trained method, under each method's own overrides; the untrained raw-pixel baseline runs once
    (image encoder "pixels"). Saved models (``save_models``) go to
    ``out_dir/models/<variant>/<image encoder>/<method>``."""
    torch.set_num_threads(1)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    train_cfg = train_cfg or TrainConfig(seed=seed)
    methods = resolve_methods(methods)
    rows: list[dict] = []
    if "efficientnet-lite0" in image_encoders:
        te = load_synthetic(data_root, "test", variants[0])
        speed = gallery_feature_speed(te.images)
        log(f"gallery features (efficientnet-lite0, {speed['threads']} thread(s)): {speed}")
        rows.append({"variant": variants[0], "method": "gallery features", "image_encoder": "efficientnet-lite0",
                     **speed})
    for variant in variants:
        tr, te = load_synthetic(data_root, "train", variant), load_synthetic(data_root, "test", variant)
        f_tr, f_te = prepare_features(tr), prepare_features(te)
        f_aug, aug_stats = None, None
        if any(METHODS[m][3] for m in methods):
            critic_dir = out_dir / "models" / variant / "critic" if save_models else None
            aug_split, stats = augmented_train_split(data_root, variant, tr, augment_n, seed, critic_dir)
            f_aug, aug_stats = prepare_features(aug_split), stats.as_dict()
            log(f"[{variant}] augmentation: {aug_stats}")
            rows.append(
                {
                    "variant": variant,
                    "method": "augmentation",
                    **{k: round(v, 4) for k, v in aug_stats.items()},
                }
            )
        runs = [(m, e) for m in methods
                for e in (("pixels",) if METHODS[m][0] == "raw-pixel" else image_encoders)]
        for name, encoder in runs:
            kind, over, tover, aug = METHODS[name]
            t0 = time.time()
            model = None
            if kind == "raw-pixel":
                g = raw_pixel_embeddings(te.images)
                q, weights = g[f_te.ref.numpy()], None
            else:
                torch.manual_seed(seed)
                model = build_model(kind, **{**(model_options or {}), **over, "image_encoder": encoder})
                fit(model, f_aug if aug else f_tr, replace(train_cfg, **tover))
                q, weights = embed_queries(model, f_te)
                g = embed_gallery(model, f_te)
            metrics = evaluate_split(te, q, g)
            routed = {}
            if (
                weights is not None
                and f_te.changed is not None
                and kind == "moa3cir"
                and "routing" not in over
            ):
                routed = {
                    f"router {k}": round(v, 3)
                    for k, v in routing_metrics(weights, f_te.changed.numpy()).items()
                }
            row = {
                "variant": variant,
                "method": name,
                "image_encoder": encoder,
                **{k: round(v, 2) for k, v in metrics.items()},
                **routed,
                "train_s": round(time.time() - t0, 1),
                "seed": seed,
                "split": "test",
            }
            rows.append(row)
            log(f"[{variant}] {name} ({encoder}): R@1 {row['R@1']:.1f} R@10 {row['R@10']:.1f} R@50 {row['R@50']:.1f}")
            if save_models and model is not None:
                save_model(model, out_dir / "models" / variant / encoder / name.replace(" ", "_").replace("/", ""))
    _write(out_dir, rows)
    return rows


def _write(out_dir: Path, rows: list[dict]) -> None:
    res = [r for r in rows if r["method"] not in ("augmentation", "gallery features")]
    write_csv(out_dir / "retrieval_bench.csv", res)
    write_json(out_dir / "retrieval_bench.json", rows)
    cols = [
        "variant",
        "method",
        "image_encoder",
        "R@1",
        "R@10",
        "R@50",
        "R@10/tops",
        "R@10/bottoms",
        "R@10/accessories",
        "avg",
        "router P@k",
        "router R@k",
        "router w_mentioned",
        "router w_other",
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
            ax.barh([f"{r['method']} ({r.get('image_encoder', 'scratch')})" for r in vr], [r["R@10"] for r in vr])
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
    nprobes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64),
    train_size: int = 100_000,
    threads: int = 1,
    seed: int = 0,
    log=print,
    full_sort: bool = True,
) -> list[dict]:
    """NumPy brute force (argpartition, and with ``full_sort`` also a full argsort) vs faiss ``IndexFlatIP`` vs IVF (an nprobe sweep) on a clustered gallery.

    Both sides run with the same number of ``threads`` (BLAS via threadpoolctl, faiss OpenMP),
    so the comparison is per core. Writes ``search_bench.csv/.json``; returns the rows, the last
    one a summary of the issue's targets (exact >= 5x NumPy with identical results; the smallest
    nprobe with IVF recall@10 >= 0.95 of exact, and whether it is >= 10x faster than exact)."""
    import faiss
    from threadpoolctl import threadpool_limits

    if n < nlist or n_queries < 1 or k < 1:
        raise InputError("search bench needs n >= nlist, n_queries >= 1 and k >= 1")
    faiss.omp_set_num_threads(threads)
    with threadpool_limits(threads):
        return _search_bench(
            Path(out_dir), n, d, n_queries, k, nlist, nprobes, train_size, threads, seed, log, full_sort
        )


def clustered_gallery(n: int, d: int, n_queries: int, seed: int = 0, chunk: int = 100_000):
    """Unit vectors around 256 random centres, (n, d) float32 built in chunks (no float64 copy),
    and (n_queries, d) queries = gallery points + noise."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((256, d), dtype=np.float32)
    gal = np.empty((n, d), np.float32)
    for s in range(0, n, chunk):
        m = min(chunk, n - s)
        x = centers[rng.integers(0, 256, m)] + 0.7 * rng.standard_normal((m, d), dtype=np.float32)
        gal[s : s + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    q = gal[rng.integers(0, n, n_queries)] + 0.1 * rng.standard_normal((n_queries, d), dtype=np.float32)
    return gal, (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def numpy_topk(
    q: np.ndarray, gal: np.ndarray, k: int, block: int = 64, select: str = "partition"
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k inner product by brute force: matmul, then ``select`` = "partition"
    (``argpartition``, the tuned baseline) or "sort" (a full ``argsort`` of every score row, the
    textbook one), ``block`` queries at a time (scores block (block, n) float32). Returns scores
    and rows (Q, k), best first."""
    if select not in ("partition", "sort"):
        raise ValueError(f"select must be 'partition' or 'sort', got {select!r}")
    rows = np.empty((len(q), k), np.int64)
    scores = np.empty((len(q), k), np.float32)
    for s in range(0, len(q), block):
        sc = q[s : s + block] @ gal.T
        if select == "sort":
            part = np.argsort(-sc, axis=1, kind="stable")[:, :k]
        else:
            part = np.argpartition(-sc, k - 1, axis=1)[:, :k]
        top = np.take_along_axis(sc, part, 1)
        order = np.argsort(-top, axis=1, kind="stable")
        rows[s : s + block] = np.take_along_axis(part, order, 1)
        scores[s : s + block] = np.take_along_axis(top, order, 1)
    return scores, rows


def _timed(fn, *args):
    """(result, wall seconds, CPU seconds of this process) of ``fn(*args)``. With one thread the CPU
    time is the compute time, robust to other jobs on a shared machine; wall time is not."""
    t, c = time.perf_counter(), time.process_time()
    out = fn(*args)
    return out, time.perf_counter() - t, time.process_time() - c


def _search_bench(out_dir, n, d, n_queries, k, nlist, nprobes, train_size, threads, seed, log, full_sort):
    (gal, q), wall, _ = _timed(clustered_gallery, n, d, n_queries, seed)
    log(f"gallery {n} x {d} float32 ({gal.nbytes / 2**30:.2f} GiB) in {wall:.1f} s")
    common = {"n": n, "d": d, "queries": n_queries, "k": k, "threads": threads}

    def timing(wall_s: float, cpu_s: float, ref: dict | None = None, flat: dict | None = None) -> dict:
        out = {"search_s": round(wall_s, 3), "search_cpu_s": round(cpu_s, 3)}
        for name, base in (("numpy", ref), ("flat", flat)):
            if base is not None:
                out[f"speedup_vs_{name}"] = round(base["_wall"] / wall_s, 2)
                out[f"cpu_speedup_vs_{name}"] = round(base["_cpu"] / cpu_s, 2)
        return {**out, "_wall": wall_s, "_cpu": cpu_s}

    (np_scores, np_rows), wall, cpu = _timed(numpy_topk, q, gal, k)
    numpy_row = {**common, "method": "numpy brute force (argpartition)", **timing(wall, cpu)}
    numpy_row.update(speedup_vs_numpy=1.0, cpu_speedup_vs_numpy=1.0)
    log(f"numpy brute force (argpartition): {wall:.2f} s wall, {cpu:.2f} s CPU")
    sort_row = None
    if full_sort:
        (_, sort_rows), wall, cpu = _timed(numpy_topk, q, gal, k, 64, "sort")
        sort_row = {**common, "method": "numpy brute force (full argsort)", **timing(wall, cpu, numpy_row)}
        sort_row["identical_topk_sets"] = round(
            float(np.mean([set(a) == set(b) for a, b in zip(np_rows, sort_rows, strict=True)])), 4
        )
        log(f"numpy brute force (full argsort): {wall:.2f} s wall, {cpu:.2f} s CPU")

    flat = GalleryIndex(d, "flat")
    flat.add(gal)
    (flat_scores, flat_rows), wall, cpu = _timed(flat.search_rows, q, k)
    del flat
    same_set = float(np.mean([set(a) == set(b) for a, b in zip(np_rows, flat_rows, strict=True)]))
    flat_row = {
        **common,
        "method": "faiss IndexFlatIP",
        **timing(wall, cpu, numpy_row),
        f"recall@{k}_vs_exact": round(
            float(np.mean([len(set(a) & set(b)) / k for a, b in zip(np_rows, flat_rows, strict=True)])), 4
        ),
        "identical_topk_sets": round(same_set, 4),
        "identical_topk_order": round(float(np.mean((np_rows == flat_rows).all(1))), 4),
        "max_score_diff": float(np.abs(np_scores - flat_scores).max()),
    }
    flat_row.update(speedup_vs_flat=1.0, cpu_speedup_vs_flat=1.0)
    log(f"faiss flat: {wall:.2f} s wall, {cpu:.2f} s CPU, identical top-{k} sets {same_set:.4f}")
    if sort_row is not None:
        flat_row["speedup_vs_numpy_sort"] = round(sort_row["_wall"] / flat_row["_wall"], 2)
        flat_row["cpu_speedup_vs_numpy_sort"] = round(sort_row["_cpu"] / flat_row["_cpu"], 2)
    ivf_results = []

    ivf = GalleryIndex(d, "ivf", nlist=nlist)
    rng = np.random.default_rng(seed + 1)
    m = min(n, max(train_size, nlist))
    t = time.perf_counter()
    ivf.train(gal[rng.choice(n, size=m, replace=False)])
    ivf.add(gal)
    build_s = time.perf_counter() - t
    log(f"IVF{nlist}: trained on {m} vectors + added {n} in {build_s:.1f} s")
    for nprobe in nprobes:
        ivf.set_nprobe(nprobe)
        (_, found), wall, cpu = _timed(ivf.search_rows, q, k)
        recall = float(np.mean([len(set(a) & set(b)) / k for a, b in zip(flat_rows, found, strict=True)]))
        ivf_results.append(
            {
                **common,
                "method": f"faiss IVF{nlist} nprobe={nprobe}",
                **timing(wall, cpu, numpy_row, flat_row),
                f"recall@{k}_vs_exact": round(recall, 4),
                "build_s": round(build_s, 1),
            }
        )
        log(f"IVF nprobe={nprobe}: {wall:.3f} s, recall@{k} {recall:.4f}")
    rows = [numpy_row, *([sort_row] if sort_row is not None else []), flat_row, *ivf_results]
    for r in rows:
        r.pop("_wall"), r.pop("_cpu")
    ok = [r for r in ivf_results if r[f"recall@{k}_vs_exact"] >= 0.95]
    chosen = ok[0] if ok else None
    rows.append(
        {
            **common,
            "method": "targets",
            "exact_speedup_vs_numpy": flat_row["speedup_vs_numpy"],
            "exact_cpu_speedup_vs_numpy": flat_row["cpu_speedup_vs_numpy"],
            "exact_identical": same_set == 1.0,
            "exact_target_5x_met": flat_row["speedup_vs_numpy"] >= 5 and same_set == 1.0,
            "exact_speedup_vs_numpy_sort": flat_row.get("speedup_vs_numpy_sort"),
            "exact_target_5x_vs_sort_met": bool(
                sort_row is not None and flat_row["speedup_vs_numpy_sort"] >= 5 and same_set == 1.0
            ),
            "ivf_chosen": chosen["method"] if chosen else "none reaches recall 0.95",
            "ivf_speedup_vs_flat": chosen["speedup_vs_flat"] if chosen else None,
            "ivf_cpu_speedup_vs_flat": chosen["cpu_speedup_vs_flat"] if chosen else None,
            "ivf_target_10x_met": bool(chosen and chosen["speedup_vs_flat"] >= 10),
        }
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(out_dir / "search_bench.csv", rows)
    write_json(out_dir / "search_bench.json", rows)
    print(
        markdown_table(
            rows[:-1],
            [
                "method",
                "search_s",
                "search_cpu_s",
                "speedup_vs_numpy",
                "cpu_speedup_vs_numpy",
                "speedup_vs_flat",
                "cpu_speedup_vs_flat",
                f"recall@{k}_vs_exact",
                "identical_topk_sets",
            ],
        )
    )
    print(markdown_table(rows[-1:]))
    return rows
