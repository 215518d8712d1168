"""Does a higher-order sampler beat DDIM on the shipped models at the same number of model
evaluations?

#54 item 2 asks for DPM-Solver++ or Heun at 20 steps. Every sampler here is built from the
checkpoint's saved training schedule (``scheduler_config.json``: cosine betas, x0 prediction
``"sample"``, which DDIM, DPM-Solver++ and Heun all accept) with diffusers' ``from_config``:
``ddim`` (``vision.sampling.make_sampler("ddim")``), ``dpmsolver++`` (``DPMSolverMultistepScheduler``,
``algorithm_type="dpmsolver++"``, ``solver_order=2``: ``make_sampler("dpmsolver++")`` since this
comparison) and ``heun`` (``HeunDiscreteScheduler``: two model evaluations per step but the last,
so Heun-10 costs 19 evaluations, about DDIM-20's). The saved schedule spaces the timesteps ``"leading"`` (DDIM-20:
950, 900, ..., 0); each solver is also run with ``"linspace"`` and ``"trailing"`` spacing, since
Heun's second-order correction at the last pair of ``"leading"`` steps divides the model's x0
error by σ(t=0) ≈ 0.006. Protocol: ``moh eval``'s defaults (256 samples, initial noise
seed 0, 1,000 Fashion-MNIST **test** images chosen with seed 0), scored as ``moh eval`` scores
them: FMNIST-classifier FID, precision / recall, the classifier's confident share (p >= 0.8) and
smallest class share, and the EfficientNet-Lite0 FID. Every row samples the same initial noise.

    python -m experiments.vision.sampler_choice --json docs/results/vision/sampler_choice.json
"""

from __future__ import annotations

import argparse
import time

import torch
from diffusers import HeunDiscreteScheduler

from common.io import write_json
from vision.classifier import get_classifier
from vision.data import load_dataset
from vision.evaluate import classifier_metrics, feature_encoder, feature_metrics, recognisability
from vision.models import load_backbone
from vision.sampling import backbone_call, checkpoint_dir, load_sampler, make_sampler

SAMPLERS = ("ddim", "dpmsolver++", "heun")
SPACINGS = ("leading", "linspace", "trailing")  # diffusers' timestep_spacing; the saved schedule says "leading"
# (sampler, steps, spacing): 20 steps each, the settings that match DDIM-20 / DDIM-10 in model
# evaluations, and each solver with the two other timestep spacings at DDIM-20's evaluations
SETTINGS = (("ddim", 25, None), ("ddim", 20, None), ("dpmsolver++", 20, None), ("heun", 20, None),
            ("heun", 10, None), ("ddim", 10, None), ("dpmsolver++", 10, None),
            *((kind, steps, spacing) for spacing in SPACINGS[1:]
              for kind, steps in (("ddim", 20), ("dpmsolver++", 20), ("heun", 10))))


def build_sampler(kind: str, ckpt, spacing: str | None = None):
    """The ``kind`` sampler over the training schedule saved with the checkpoint ``ckpt`` (DDIM and
    DPM-Solver++ as the product builds them, ``vision.sampling.make_sampler``), its timesteps spaced
    as the checkpoint saved them (``spacing`` None) or by ``spacing``."""
    base = load_sampler(ckpt, "ddpm")  # the saved schedule, its prediction type checked
    sched = HeunDiscreteScheduler.from_config(base.config) if kind == "heun" else make_sampler(kind, base)
    return type(sched).from_config(sched.config, timestep_spacing=spacing or base.config.timestep_spacing)


@torch.no_grad()
def sample(model, scheduler, n: int, steps: int, seed: int) -> tuple[torch.Tensor, int]:
    """``n`` samples ``(n, c, H, W)`` in [-1, 1] by diffusers' generic loop (initial noise from a CPU
    generator seeded with ``seed`` times ``init_noise_sigma``, ``scale_model_input`` before each
    evaluation: the identity for DDIM, ``x / √(σ² + 1)`` for Heun's σ-space) and the number of
    model evaluations."""
    cfg = model.config
    model.eval()
    x = torch.randn((n, cfg.in_channels, cfg.sample_size, cfg.sample_size),
                    generator=torch.Generator().manual_seed(seed)) * scheduler.init_noise_sigma
    scheduler.set_timesteps(steps)
    for t in scheduler.timesteps:
        pred, _, _ = backbone_call(model, scheduler.scale_model_input(x, t), t.expand(n))
        x = scheduler.step(pred, t, x).prev_sample
    return x.clamp(-1, 1), len(scheduler.timesteps)


def score(model_name: str, settings, n: int, n_real: int, seed: int, efficientnet: bool = True, log=print) -> list:
    """One row per ``(sampler, steps)`` of ``settings`` for the checkpoint ``model_name``."""
    ckpt = checkpoint_dir(model_name)
    model = load_backbone(ckpt)
    classifier = get_classifier()[0]
    real = load_dataset("fashion-mnist", model.config.sample_size, model.config.in_channels, limit=n_real,
                        split="test", seed=seed)
    encoder = feature_encoder() if efficientnet else None
    rows = []
    for kind, steps, spacing in settings:
        scheduler = build_sampler(kind, ckpt, spacing)
        spacing = scheduler.config.timestep_spacing
        t0 = time.process_time()
        fake, nfe = sample(model, scheduler, n, steps, seed)
        cpu_s = time.process_time() - t0
        recog = recognisability(fake, classifier)
        row = {"model": model_name, "sampler": kind, "steps": steps, "spacing": spacing, "model_evaluations": nfe,
               "sample_cpu_s": round(cpu_s, 1), **classifier_metrics(real, fake, classifier),
               "confident_share": recog["confident_share"], "min_class_share": recog["min_class_share"]}
        if encoder is not None:
            row["efficientnet_lite0_fid"] = feature_metrics(real, fake, encoder)["efficientnet_lite0_fid"]
        log(f"{model_name} {kind}-{steps} {spacing} ({nfe} evaluations, {cpu_s:.0f} s): FID {row['fmnist_classifier_fid']:.2f}, "
            f"confident {row['confident_share']:.3f}, P/R {row['precision']:.2f}/{row['recall']:.2f}")
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", default=["moh-fmnist", "mamba-fmnist"],
                   help="shipped model names or checkpoint / run directories")
    p.add_argument("--settings", nargs="+", default=[":".join(map(str, filter(None, x))) for x in SETTINGS],
                   help=f"sampler:steps[:spacing], sampler one of {SAMPLERS}, spacing one of {SPACINGS} "
                        "(default: the saved schedule's)")
    p.add_argument("--n", type=int, default=256, help="samples per setting (moh eval's default)")
    p.add_argument("--n-real", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-efficientnet", action="store_true", help="skip the EfficientNet-Lite0 FID")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    settings = []
    for text in a.settings:
        kind, steps, *spacing = text.split(":")
        if kind not in SAMPLERS or not steps.isdigit() or int(steps) < 1 or spacing[1:] \
                or (spacing and spacing[0] not in SPACINGS):
            p.error(f"bad setting {text!r}: sampler:steps[:spacing], sampler one of {SAMPLERS}, spacing one of {SPACINGS}")
        settings.append((kind, int(steps), spacing[0] if spacing else None))
    rows = [r for m in a.models for r in score(m, settings, a.n, a.n_real, a.seed, not a.no_efficientnet)]
    if a.json:
        write_json(a.json, {"protocol": {"n": a.n, "n_real": a.n_real, "seed": a.seed, "threads": a.threads},
                            "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
