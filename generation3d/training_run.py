"""What a ``moca train`` run is made of, resolved from its options (the parsed ``argparse.Namespace``)
and a preset's recipe: the option combinations refused, the run directory, the step schedule (the
options, else the recipe's, else ``TRAIN_STEPS`` / ``CHECKPOINT_EVERY`` / ``SNAPSHOT_EVERY``), and the
data and autoencoder (a preset's, built or reused in the run directory, or the ones given)."""

from __future__ import annotations

import argparse
from pathlib import Path

from common.cli import check_outputs
from common.errors import InputError
from generation3d import limits as lim

TRAIN_STEPS = 2000
CHECKPOINT_EVERY = 100  # steps between full training states (what --resume continues from)
SNAPSHOT_EVERY = 0  # steps between kept pipelines (0: none)


def check_options(a: argparse.Namespace) -> None:
    """The option combinations ``moca train`` refuses."""
    if a.model_size and (a.d_model or a.layers):
        raise InputError("--model-size sets the width and depth; omit --d-model and --layers")
    if a.resume and a.overwrite:
        raise InputError("--resume continues the run in --out; --overwrite would replace it (choose one)")
    if a.preset and (a.ae or a.data_dir):
        raise InputError(f"--preset {a.preset} builds its own data and autoencoder; omit --ae and --data-dir")
    if not a.preset and not a.ae:
        raise InputError("--ae is required (a `moca train-ae` directory), or train everything with --preset demo")
    if not a.preset and a.ae_steps is not None:
        raise InputError("--ae-steps applies to --preset only (otherwise train the autoencoder with `moca train-ae`)")


def run_dir(a: argparse.Namespace, data_dir: Path) -> Path:
    """The run directory, checked writable (``--overwrite`` / ``--resume``); ``data_dir``: the dataset
    a run without a preset reads."""
    if a.preset:
        from generation3d.preset import demo_real_model_dir

        out = Path(a.out) if a.out else demo_real_model_dir() if a.preset == "demo" else Path(
            f"runs/{a.preset}_{a.attention}")
        check_outputs(dirs=[out], overwrite=a.overwrite or a.resume)
    else:
        out = Path(a.out or f"runs/{a.attention}")
        check_outputs(dirs=[out], inputs=[data_dir, a.ae], overwrite=a.overwrite or a.resume)
    return out


def schedule(a: argparse.Namespace, recipe: dict, out: Path) -> tuple[int, int, int]:
    """``(steps, checkpoint_every, snapshot_every)``: the options, else the recipe's, else the defaults."""
    steps = a.steps or recipe.get("steps", TRAIN_STEPS)
    every = a.checkpoint_every if a.checkpoint_every is not None else recipe.get("checkpoint_every", CHECKPOINT_EVERY)
    snapshot_every = a.snapshot_every if a.snapshot_every is not None else recipe.get("snapshot_every", SNAPSHOT_EVERY)
    if a.resume and not every:
        raise InputError("--resume needs --checkpoint-every > 0 (the full state is saved that often)")
    if a.resume and (out / "generator").is_dir() and not (out / "checkpoints" / "last.ckpt").is_file():
        raise InputError(f"{out} holds a trained generator but no training state to resume; "
                         "choose a new --out (or --overwrite without --resume to replace it)")
    lim.check_steps(steps, a.force)
    if a.ae_steps is not None:
        lim.check_steps(a.ae_steps, a.force, "--ae-steps")
    return steps, every, snapshot_every


def run_inputs(a: argparse.Namespace, size, width: int, depth: int, out: Path, data_dir: Path):
    """``(dataset, autoencoder, preset info)``: a preset's (built or reused in ``out``) or the given
    ones (``data_dir``, ``--ae``), checked against the model ``size`` and the memory budget."""
    if a.preset:
        from generation3d.preset import preset_data_and_autoencoder

        lim.check_generator_memory(width, depth, size.n_heads, a.max_parts, size.tokens_per_part, a.force)
        ds, ae, info = preset_data_and_autoencoder(a.preset, out, seed=a.seed, max_parts=a.max_parts,
                                                   ae_steps=a.ae_steps, tokens_per_part=size.tokens_per_part,
                                                   device=a.device, precision=a.precision, reuse=a.resume)
        print(f"autoencoder: test part CD (squared) {info['ae_test']['ae_cd']:.5f}, "
              f"F@{info['ae_test']['tau']} {info['ae_test']['ae_fscore']:.3f}")
        return ds, ae, info
    from generation3d.data import PartDataset
    from generation3d.sampling import load_autoencoder

    ds, ae = PartDataset.load(data_dir), load_autoencoder(a.ae)
    if a.model_size and ae.config.n_latents != size.tokens_per_part:
        raise InputError(f"--model-size {a.model_size} has T = {size.tokens_per_part} tokens per part but the "
                         f"autoencoder {a.ae} has {ae.config.n_latents}; train one with "
                         f"`moca train-ae --latents {size.tokens_per_part}`")
    lim.check_generator_memory(width, depth, size.n_heads, a.max_parts, ae.config.n_latents, a.force)
    return ds, ae, {}
