"""Which changes to MoH's training recipe pay at the same training compute?

#54 item 2 lists recipe changes from the Mamba / ViT diffusion papers, each to be tried against the
current recipe at the same wall clock. The variants here (experiment-side subclasses, except
min-SNR, which paid and became the product's default, ``vision.train.MIN_SNR_GAMMA``):

- ``baseline``: MoH as ``moh bench --suite compute`` trained it before min-SNR (size Ti by
  default; uniform timestep weighting, ``min_snr_gamma = 0``); every other variant changes one thing.
- ``long_skip``: a U-ViT long skip (Bao et al. 2023): the first fine block's output, through a
  zero-initialised linear map, is added to the tokens the head reads, ``h_head = h + W h_1``
  (``W = 0`` at the start, so the variant starts as the baseline's function).
- ``min_snr``: min-SNR-γ weighting (Hang et al. 2023), γ = 5 (``vision.train.min_snr_weights``);
  for the x0 target the weight is ``min(SNR_t, γ)`` (``SNR_t = ᾱ_t / (1 - ᾱ_t)``), divided by its
  mean over the timesteps so the routers' auxiliary losses keep their share of the loss. It moves
  the loss towards the low-noise steps that remove the samples' grain.
- ``raster_only``: every fine block scans in raster order. MoH already cycles four orders over its
  blocks (raster, reversed zigzag, column, reversed column zigzag: the ZigMa / DiM idea), so this
  is that idea's ablation.

Protocol (``vision.compute.train_and_score``, the compute suite's machinery): each run converts the
budget of process CPU time into steps from its own timed training step, trains once with the same
seed, data (20,000 training images) and schedule, and scores its EMA weights at the snapshots on
the same DDIM-25 samples (seed + 1) against 1,000 Fashion-MNIST **test** images: FMNIST-classifier
FID, precision / recall, confident and smallest class share. ``--runs`` may repeat the baseline
with another seed to show the seed spread (a seed also changes the training subset, the sampling
noise and the test images drawn). Run one process at a time on an otherwise idle core.

    python -m experiments.vision.recipe --budget-min 3 --runs baseline:0 long_skip:0 min_snr:0 baseline:1 \\
        --out results/recipe --json docs/results/vision/recipe.json
"""

from __future__ import annotations

import argparse
import contextlib
import time
from dataclasses import asdict
from pathlib import Path

import torch
from torch import Tensor, nn

import vision.bench
import vision.compute
from common.io import write_json
from common.report import markdown_table
from vision.compute import ComputeConfig, train_and_score
from vision.models import build_backbone, moh_config
from vision.models.moh import MoHBackbone
from vision.train import MIN_SNR_GAMMA

VARIANTS = ("baseline", "long_skip", "min_snr", "raster_only")


class MoHLongSkip(MoHBackbone):
    """MoH with a U-ViT long skip from the first fine block to the head: ``final(h + W h_1, c)``
    with ``h_1 (b, L, d)`` block 0's output (every route runs it) and ``W (d, d)`` zero at the start.
    Built by :func:`build_variant` (MoH's constructor, then :meth:`attach_skip`)."""

    def attach_skip(self) -> MoHLongSkip:
        """Add ``W`` after the baseline's parameters, so those are drawn from the same random stream."""
        self.long_skip = nn.Linear(self.config.d_model, self.config.d_model)
        nn.init.zeros_(self.long_skip.weight)
        nn.init.zeros_(self.long_skip.bias)
        self._first: Tensor | None = None
        self.blocks[0].register_forward_hook(self._keep_first)
        self.final.register_forward_pre_hook(self._add_skip)
        return self

    def _keep_first(self, module, args, output: Tensor) -> None:
        self._first = output

    def _add_skip(self, module, args: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        h, c = args
        first, self._first = self._first, None
        return h + self.long_skip(first), c


def build_variant(variant: str, model_size: str, sample_size: int = 32, in_channels: int = 1, **overrides):
    """MoH of ``model_size`` as ``variant`` builds it (``min_snr`` changes the loss, not the model)."""
    if variant == "long_skip":
        return MoHLongSkip(sample_size=sample_size, in_channels=in_channels,
                           **{**moh_config(model_size), **overrides}).attach_skip()
    if variant == "raster_only":
        overrides["scan_orders"] = ("raster",)
    return build_backbone("moh", model_size, sample_size, in_channels, **overrides)


@contextlib.contextmanager
def recipe(variant: str):
    """While open, ``vision.compute`` (training) and ``vision.bench`` (its step timing) build MoH as
    ``variant`` (the objective is ``run``'s ``min_snr_gamma``)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; one of {VARIANTS}")

    def build(name, model_size="XS", sample_size=32, in_channels=1, **overrides):
        if name != "moh":
            return build_backbone(name, model_size, sample_size, in_channels, **overrides)
        return build_variant(variant, model_size, sample_size, in_channels, **overrides)

    saved = vision.compute.build_backbone, vision.bench.build_backbone
    vision.compute.build_backbone = vision.bench.build_backbone = build
    try:
        yield
    finally:
        vision.compute.build_backbone, vision.bench.build_backbone = saved


def run(variant: str, seed: int, cfg: ComputeConfig, out: Path, device: str = "cpu", log=print) -> tuple[dict, list]:
    """Train and score MoH as ``variant`` with ``seed`` (``train_and_score``); its row and curve."""
    gamma = MIN_SNR_GAMMA if variant == "min_snr" else 0.0
    cfg = ComputeConfig(**{**asdict(cfg), "seed": seed, "models": ("moh",), "min_snr_gamma": gamma})
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with recipe(variant):
        row, curve = train_and_score("moh", cfg, out, device=device, log=lambda m: log(f"{variant}:{seed} {m}"))
    tag = {"variant": variant, "seed": seed}
    return {**tag, **row, "wall_min": (time.perf_counter() - t0) / 60}, [{**tag, **c} for c in curve]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", nargs="+", default=["baseline:0", *(f"{v}:0" for v in VARIANTS[1:]), "baseline:1"],
                   help=f"variant:seed, variant one of {VARIANTS}")
    p.add_argument("--budget-min", type=float, default=3.0, help="training minutes (process CPU time) per run")
    p.add_argument("--model-size", default="Ti")
    p.add_argument("--fractions", type=float, nargs="+", default=[0.5, 1.0])
    p.add_argument("--n-samples", type=int, default=256)
    p.add_argument("--n-real", type=int, default=1000)
    p.add_argument("--train-limit", type=int, default=20000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--calibration-steps", type=int, default=10, help="timed steps behind the step count")
    p.add_argument("--sample-steps", type=int, default=25)
    p.add_argument("--out", default="results/recipe")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    runs = []
    for text in a.runs:
        variant, _, seed = text.partition(":")
        if variant not in VARIANTS or not seed.isdigit():
            p.error(f"bad run {text!r}: variant:seed, variant one of {VARIANTS}")
        runs.append((variant, int(seed)))
    torch.set_num_threads(1)
    cfg = ComputeConfig(model_size=a.model_size, budget_min=a.budget_min, fractions=tuple(a.fractions),
                        batch_size=a.batch_size, train_limit=a.train_limit, n_real=a.n_real, n_samples=a.n_samples,
                        sample_steps=a.sample_steps, calibration_steps=a.calibration_steps)
    rows, curve = [], []
    for variant, seed in runs:
        row, c = run(variant, seed, cfg, Path(a.out) / f"{variant}_seed{seed}")
        rows.append(row)
        curve.extend(c)
        if a.json:  # after every run, so a cut-short session keeps what finished
            write_json(a.json, {"config": {**asdict(cfg), "models": ["moh"]}, "min_snr_gamma": MIN_SNR_GAMMA,
                                "runs": rows, "curve": curve})
    full = [c for c in curve if c["budget_fraction"] == max(cfg.fractions)]
    print(markdown_table(full, ["variant", "seed", "step", "train_min", "fmnist_classifier_fid", "precision",
                                "recall", "confident_share", "min_class_share"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
