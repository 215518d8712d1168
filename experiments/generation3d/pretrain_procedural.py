"""Does pretraining the generator on procedural shapes help on real furniture?

Protocol: the README's real-object recipe (Sweet Home 3D data at 128 points, its 600-step AE,
MoCA defaults, seed 0) with the same total generator budget: ``--pretrain-steps`` steps on a
procedural dataset (``build_dataset``: ``--per-category`` chairs / tables / shelves / lamps, no
scenes), encoded with the *real* AE and normalised with the real data's latent statistics, then the
remaining ``--steps - --pretrain-steps`` steps on the real training shapes, each phase with its own
warm-up + cosine schedule and MoCA's dense warm-up / router distillation. The result is a normal
``moca train`` checkpoint; compare it with ``moca eval`` exactly as the README's rows.

    python -m experiments.generation3d.pretrain_procedural --data-dir runs/real/data --ae runs/real/ae \\
        --out runs/real/pre800_2400 --steps 2400 --pretrain-steps 800
    moca eval --ckpt runs/real/pre800_2400 --data-dir runs/real/data --n 46 --steps 20 --out x.json
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from generation3d.data import PartDataset, trained_categories
from generation3d.losses import encode_parts, latent_stats
from generation3d.model import GenConfig, PartFlowTransformer
from generation3d.sampling import MoCAPipeline, load_autoencoder
from generation3d.shapes import build_dataset
from generation3d.text import shape_descriptions
from generation3d.train import fit


def train_phase(ds: PartDataset, ae, model: PartFlowTransformer | None, cfg: GenConfig, stats: dict, steps: int,
                seed: int) -> tuple[PartFlowTransformer, list[dict]]:
    """``steps`` generator steps on ``ds``'s training shapes, starting from ``model`` (None: new)."""
    model, _, history = fit(ds, ae, cfg, steps=steps, batch_size=16, lr=1e-3, seed=seed, progress=True,
                            init=model, stats=stats)
    return model, history


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--ae", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=2400)
    ap.add_argument("--pretrain-steps", type=int, default=800)
    ap.add_argument("--per-category", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    real = PartDataset.load(a.data_dir)
    ae = load_autoencoder(a.ae)
    stats = latent_stats(real, encode_parts(ae, real))
    cfg = GenConfig(n_latents=ae.config.n_latents, d_latent=ae.config.d_latent)
    with tempfile.TemporaryDirectory() as tmp:
        build_dataset(tmp, n_per_category=a.per_category, n_scenes=0, n_points=real.points.shape[1], seed=a.seed)
        proc = PartDataset.load(tmp)
        model, h1 = train_phase(proc, ae, None, cfg, stats, a.pretrain_steps, a.seed)
    model, h2 = train_phase(real, ae, model, cfg, stats, a.steps - a.pretrain_steps, a.seed)
    MoCAPipeline(ae, model, {k: v.tolist() for k, v in stats.items()}, shape_descriptions(real, "train"),
                 categories=trained_categories(real, cfg.max_parts)).save(
        Path(a.out), {"history": h1 + h2, "seed": a.seed, "steps": a.steps, "pretrain_steps": a.pretrain_steps})
    print(f"pretrained {a.pretrain_steps} procedural + {a.steps - a.pretrain_steps} real steps; "
          f"final loss {h2[-1]['loss']:.4f}; saved {a.out}")


if __name__ == "__main__":
    main()
