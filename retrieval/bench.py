"""The app's results table (``moa3cir bench --suite table``): MoA³CIR vs baselines and ablations
on both benchmark variants, and the speed of the pretrained encoder's gallery features
(``--suite features``). The search speed study is ``experiments.retrieval.search_bench``.

``run_retrieval_bench`` trains every method with every image encoder (``scratch`` CNN towers,
the frozen ImageNet ``efficientnet-lite0``) at one model size on the same train split (same
seed, same epochs) and evaluates on the test split (FashionIQ protocol per category, R@1/10/50
averaged over categories); the augmentation run also reports acceptance rates.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from common.errors import InputError
from common.io import atomic_write, write_csv, write_json
from common.report import markdown_table

from .baselines import raw_pixel_embeddings
from .data import VARIANTS, load_meta, load_synthetic
from .embed import embed_gallery, embed_queries
from .evaluate import attribute_compliance, evaluate_split, routing_metrics
from .features import prepare_features
from .registry import DEFAULT_MODEL_SIZE, build_model, save_model
from .train import TrainConfig, fit

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
    root: Path, variant: str, train_split, n: int, seed: int, critic_dir: Path | None = None,
    device: str | torch.device | None = "auto",
):
    """``train_split`` + up to ``n`` accepted self-reflective edits and the augmentation stats.

    The critic's classifier is trained on ``train_split`` on ``device`` (or loaded from
    ``critic_dir`` when it holds a saved critic; a fresh one is saved there)."""
    from common.data_dir import load_fashion_mnist

    from .augment import AttributeCritic, RenderEditor, self_reflective_augment, train_attribute_classifier
    from .synth import item_renderer

    if critic_dir is not None and (Path(critic_dir) / "config.json").is_file():
        critic = AttributeCritic.load(critic_dir)
    else:
        clf = train_attribute_classifier(train_split.images, train_split.attributes, epochs=4, seed=seed,
                                         device=device)
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
    image_encoders=("scratch",),
    model_size: str = DEFAULT_MODEL_SIZE,
    device: str | torch.device | None = "auto",
    precision: str = "32",
) -> list[dict]:
    """Train/evaluate ``methods`` x ``image_encoders`` on each variant; writes
    ``retrieval_bench.csv/.json/.md`` + plot. Every trained method is built at ``model_size``
    (``retrieval.sizes.MODEL_SIZES``; the baselines matched to it) with each method's own
    ``build_model`` overrides, and trained on ``device`` in
    ``precision``; the untrained raw-pixel baseline runs once (image encoder "pixels"). Saved
    models (``save_models``) go to ``out_dir/models/<variant>/<image encoder>/<method>``."""
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
            aug_split, stats = augmented_train_split(data_root, variant, tr, augment_n, seed, critic_dir, device)
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
                model = build_model(kind, model_size, **over, image_encoder=encoder)
                fit(model, f_aug if aug else f_tr, replace(train_cfg, **tover), device=device, precision=precision)
                q, weights = embed_queries(model, f_te, device=device)
                g = embed_gallery(model, f_te, device=device)
            metrics = {**evaluate_split(te, q, g), **attribute_compliance(te, q, g)}
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
                "model_size": None if model is None else model_size,
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
        "compliance/colour",
        "compliance/pattern",
        "router P@k",
        "router R@k",
        "router w_mentioned",
        "router w_other",
    ]
    table = markdown_table(res, [c for c in cols if any(c in r for r in res)])
    with atomic_write(out_dir / "retrieval_bench.md", "w", encoding="utf-8") as f:
        f.write(table + "\n")
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


def bench_root(root: str | None, out: Path, benchmark: str, seed: int) -> Path:
    """The data root of ``moa3cir bench``: ``root`` when given (its preset must be ``benchmark``'s),
    else ``out/data`` (small) or ``out/data-hard`` (hard), built there on first use."""
    from .synth import PRESETS, build_benchmark

    if root is None:
        path = out / ("data" if benchmark == "small" else f"data-{benchmark}")
        if not (path / VARIANTS[0] / "meta.json").is_file():
            build_benchmark(path, PRESETS[benchmark](seed))
        return path
    path = Path(root)
    preset = load_meta(path / VARIANTS[0]).get("preset", "small")
    if ("hard" if preset.startswith("hard") else "small") != benchmark:
        raise InputError(f"--root {root} holds the {preset!r} benchmark, not {benchmark!r} (see --benchmark)")
    return path
