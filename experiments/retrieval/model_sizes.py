"""What does each named tower size cost? Per named size
(``retrieval.sizes.MODEL_SIZES``) MoA³CIR's widths, its trainable parameters and those of the
combiner baseline matched to it, the memory of the training state, and the time of one phase-2
training step.

A step is measured the way ``moa3cir train`` runs it: :func:`retrieval.train.fit` (Lightning,
AdamW, one-cycle schedule, in-batch and hard negatives, attribute and router losses) on synthetic
features of the built benchmark's shapes (frozen token grids as if cached, six description and
six clause tokens). Two runs of ``epochs`` and ``3 * epochs`` epochs give the marginal time of a
step, ``(t_long - t_short) / (steps_long - steps_short)``, without the trainer's start-up; CPU
time of this process is reported beside wall time (with one thread the robust figure on a shared
machine), and every size as a ratio to ``S`` from the same run.
Formerly ``moa3cir bench --suite sizes``; the README's model-sizes line quotes its JSON.

    python -m experiments.retrieval.model_sizes --json docs/results/retrieval/model_sizes.json
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from common.cli import ArgumentParser, add_overwrite_arg, check_outputs, cli_main, seed_int
from common.device import add_device_arg, add_precision_arg, check_precision, resolve_device
from common.io import write_json
from retrieval.features import Features
from retrieval.registry import DEFAULT_MODEL_SIZE, MODEL_SIZES, build_model
from retrieval.render import GROUPS, NUM_VALUES
from retrieval.text import EMBED_DIM
from retrieval.train import TrainConfig, fit

BYTES_FP32 = 4
TRAIN_STATE_COPIES = 4  # fp32 weights, gradients and AdamW's two moments


def synthetic_features(model: torch.nn.Module, n_items: int, n_triplets: int, seed: int = 0, tokens: int = 6) -> Features:
    """Random :class:`Features` of ``n_items`` items and ``n_triplets`` triplets with the built
    benchmark's shapes: images (n, 3, 32, 32), the frozen token grids ``model`` reads (when it has a
    frozen pretrained encoder, marked as attached), ``tokens`` description / clause embeddings of
    384 dims, attribute labels and mentioned groups."""
    g = torch.Generator().manual_seed(seed)
    f = Features(
        images=torch.randint(0, 256, (n_items, 3, 32, 32), generator=g).float(),
        desc=torch.nn.functional.normalize(torch.randn(n_items, tokens, EMBED_DIM, generator=g), dim=-1),
        desc_mask=torch.ones(n_items, tokens, dtype=torch.bool),
        text=torch.nn.functional.normalize(torch.randn(n_triplets, tokens, EMBED_DIM, generator=g), dim=-1),
        text_mask=torch.ones(n_triplets, tokens, dtype=torch.bool),
        ref=torch.randint(0, n_items, (n_triplets,), generator=g),
        tgt=torch.randint(0, n_items, (n_triplets,), generator=g),
        changed=torch.rand(n_triplets, len(GROUPS), generator=g) < 0.3,
        attrs=torch.stack([torch.randint(0, n, (n_items,), generator=g) for n in NUM_VALUES], 1),
    )
    image_input = model.image_input
    if image_input.token_spec is not None:
        e = image_input.encoder
        f.image_tokens = torch.randn(n_items, e.grid * e.grid, e.token_dim, generator=g)
        f.token_spec = image_input.token_spec
    return f


def _params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _timed_fit(model, f: Features, cfg: TrainConfig, device, precision: str) -> tuple[float, float]:
    t, c = time.perf_counter(), time.process_time()
    fit(model, f, cfg, device=device, precision=precision)
    return time.perf_counter() - t, time.process_time() - c


def model_size_rows(
    sizes=tuple(MODEL_SIZES),
    batch_size: int = 64,
    steps_per_epoch: int = 5,
    epochs: int = 2,
    seed: int = 0,
    device: str | torch.device | None = "auto",
    precision: str = "32",
    log=print,
) -> list[dict]:
    """One row per size (see the module docstring): ``d_model``, ``d_slot``, ``heads`` (G x h),
    ``embed_dim``, ``params_moa3cir`` / ``params_combiner`` (trainable; the frozen ImageNet
    encoder is not counted), ``train_state_mb`` (fp32 weights, gradients, AdamW moments),
    ``step_ms`` / ``step_cpu_ms`` (marginal time of one training step of ``batch_size``
    triplets) and ``step_cpu_vs_S`` (CPU time ratio to size S in this run)."""
    rows = []
    n_trip = batch_size * steps_per_epoch
    for size in sizes:
        s = MODEL_SIZES[size]
        torch.manual_seed(seed)
        model = build_model("moa3cir", size)
        f = synthetic_features(model, n_items=n_trip, n_triplets=n_trip, seed=seed)
        short = TrainConfig(phase1_epochs=0, phase2_epochs=epochs, batch_size=batch_size, seed=seed, val_fraction=0)
        long = TrainConfig(phase1_epochs=0, phase2_epochs=3 * epochs, batch_size=batch_size, seed=seed, val_fraction=0)
        wall_short, cpu_short = _timed_fit(model, f, short, device, precision)
        wall_long, cpu_long = _timed_fit(model, f, long, device, precision)
        steps = 2 * epochs * steps_per_epoch
        params = _params(model)
        row = {
            "size": size, "d_model": s.d_model, "d_slot": s.d_slot,
            "heads": f"{len(GROUPS)}x{s.heads_per_group}", "embed_dim": model.config.embed_dim,
            "params_moa3cir": params, "params_combiner": _params(build_model("combiner", size)),
            "train_state_mb": round(params * BYTES_FP32 * TRAIN_STATE_COPIES / 2**20, 2),
            "batch_size": batch_size, "threads": torch.get_num_threads(), "precision": precision,
            "step_ms": round(1000 * (wall_long - wall_short) / steps, 1),
            "step_cpu_ms": round(1000 * (cpu_long - cpu_short) / steps, 1),
        }
        rows.append(row)
        log(f"size {size}: {row}")
    base = next((r for r in rows if r["size"] == DEFAULT_MODEL_SIZE), None)
    for r in rows:
        r["step_cpu_vs_S"] = None if base is None else round(r["step_cpu_ms"] / base["step_cpu_ms"], 2)
    return rows


@cli_main
def main(argv=None) -> int:
    p = ArgumentParser(description="parameters, memory and phase-2 step time of every named tower size")
    p.add_argument("--sizes", nargs="+", choices=tuple(MODEL_SIZES), default=list(MODEL_SIZES))
    p.add_argument("--json", default=None, help="also write the rows and the settings to this JSON file")
    p.add_argument("--seed", type=seed_int, default=0)
    add_device_arg(p)
    add_precision_arg(p)
    add_overwrite_arg(p)
    a = p.parse_args(argv)
    check_precision(a.precision, resolve_device(a.device))
    check_outputs(files=[a.json], overwrite=a.overwrite)
    torch.set_num_threads(1)
    rows = model_size_rows(tuple(a.sizes), seed=a.seed, device=a.device, precision=a.precision)
    if a.json:
        config = {k: v for k, v in vars(a).items() if k not in ("json", "overwrite")}
        write_json(Path(a.json), {"config": config, "sizes": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
