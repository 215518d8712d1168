"""``make demo`` part of retrieval: a tiny benchmark, MoA³CIR vs baselines, in a few minutes on 2 cores."""

from __future__ import annotations

from pathlib import Path

from .bench import QUICK_METHODS, run_retrieval_bench
from .synth import BuildConfig, build_benchmark
from .towers import DEFAULT_IMAGE_ENCODER
from .train import TrainConfig

QUICK_BUILD = dict(
    garments={"train": 200, "val": 40, "test": 80}, triplets={"train": 800, "val": 100, "test": 300}
)


def run_quick(out_dir: Path, data_dir: Path | None = None, seed: int = 0) -> list[dict]:
    """Build a small controlled benchmark from Fashion-MNIST, train MoA³CIR (with and without
    self-reflective augmentation), the CLIP4Cir-style combiner and image-only with the default
    image encoder (``DEFAULT_IMAGE_ENCODER``), evaluate on the test split; write ``out_dir/retrieval.csv`` (+ bench files and plot). ``data_dir`` is unused
    (Fashion-MNIST comes from ``common.data_dir``)."""
    out_dir = Path(out_dir)
    root = out_dir / "retrieval_data"
    if not (root / "controlled" / "meta.json").is_file():
        build_benchmark(root, BuildConfig(**QUICK_BUILD, seed=seed), overwrite=True)
    rows = run_retrieval_bench(
        root,
        out_dir / "retrieval_bench",
        variants=("controlled",),
        methods=QUICK_METHODS,
        train_cfg=TrainConfig(phase1_epochs=1, phase2_epochs=4, seed=seed),
        augment_n=300,
        seed=seed,
        save_models=True,
        image_encoders=(DEFAULT_IMAGE_ENCODER,),
    )
    summary = []
    for r in rows:
        if r["method"] == "gallery features":  # the encoder's speed row: in retrieval_bench.json
            continue
        if r["method"] == "augmentation":
            summary.append(
                {
                    "app": "retrieval",
                    "task": "self-reflective augmentation",
                    "method": "critic",
                    "metric": "acceptance_after_refine",
                    "value": r["acceptance_after_refine"],
                    "split": "train",
                    "seed": seed,
                }
            )
            continue
        for metric in ("R@1", "R@10", "R@50"):
            summary.append(
                {
                    "app": "retrieval",
                    "task": "CIR synthetic-controlled",
                    "method": r["method"],
                    "metric": metric,
                    "value": r[metric],
                    "split": "test",
                    "seed": seed,
                }
            )
    from common.io import write_csv

    write_csv(out_dir / "retrieval.csv", summary)
    return summary
