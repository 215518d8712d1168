"""``moca train --preset NAME``: real-furniture models trained end to end by one command.

A preset is a recipe on Debian's Sweet Home 3D furniture: ``build-data --source sweethome3d
--points 128`` into ``<out>/data``, the part autoencoder for ``ae_steps`` (600) steps into
``<out>/ae``, then the generator (``moca train``'s model flags, MoCA by default) for ``steps``;
the pipeline is saved to ``<out>`` (``ae/``, ``generator/``, like any ``moca train --out``), with
one sample per trained category in ``<out>/samples/`` (GLB + PNG, at the category's median part
count in the training shapes) and ``<out>/preset.json`` (recipe, AE test metrics, final loss,
training time, sample files).

* ``demo``: the README's results recipe (2400 steps); the default ``<out>`` is
  ``cache_dir("generation3d")/demo_real_model``, which the hub tab prefers to ``make demo``'s
  procedural model when no shipped model exists.
* ``furniture``: the recipe of the shipped ``moca-furniture`` model (``scripts/
  ship_generation3d.py``): the same data and autoencoder, 20000 generator steps, the full training
  state every 250 steps (``--resume``) and a pipeline snapshot every 2500 steps (learning curves).
  ``--attention full|local`` trains the baselines with the same recipe and budget.

With ``--resume`` the data and the autoencoder already in ``<out>`` are reused when they were made
with this recipe (a finished autoencoder is loaded, not retrained) and refused when they were not.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from common.data_dir import cache_dir
from common.errors import InputError

DEMO_REAL_MODEL = "demo_real_model"
# The furniture budget: category fidelity rose from 0.41 (1200 steps) to 0.53 (2400) with the loss
# still falling, about +0.12 per doubling: 20000 steps (about three doublings more) leave room for
# 0.80. Size S on one thread takes 0.15-0.6 s/step by load, so 1-3 h per run.
PRESETS = {
    "demo": {"source": "sweethome3d", "points": 128, "ae_steps": 600, "steps": 2400, "sample_steps": 25},
    "furniture": {"source": "sweethome3d", "points": 128, "ae_steps": 600, "steps": 20000, "sample_steps": 25,
                  "checkpoint_every": 250, "snapshot_every": 2500},
}
AE_RECIPE = "preset_ae"  # the autoencoder's extra: the recipe it was trained with, its test metrics and time


def demo_real_model_dir() -> Path:
    """Where ``moca train --preset demo`` saves by default (the hub tab's first choice)."""
    return cache_dir("generation3d") / DEMO_REAL_MODEL


def preset_recipe(name: str) -> dict:
    if name not in PRESETS:
        raise InputError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
    return dict(PRESETS[name])


def _data_complete(out: Path) -> bool:
    """A dataset written to the end: ``meta.json`` and the files ``build_real_dataset`` writes after it."""
    return all((out / f).is_file() for f in ("parts.npz", "meta.json", "shapes.csv", "skipped.csv", "ATTRIBUTION.csv"))


def build_preset_data(name: str, out: Path, seed: int = 0, max_parts: int = 64, reuse: bool = False):
    """Build the preset's dataset in ``out`` (the Sweet Home 3D archives are read in place from
    ``$MOE_APPS_SWEETHOME3D`` or ``/usr/share/sweethome3d/furniture``) and return it loaded.
    ``reuse``: a complete dataset already in ``out`` is loaded when it was built with these
    settings (InputError when with others)."""
    from generation3d.data import PartDataset, read_meta
    from generation3d.sources import build_real_dataset

    recipe = preset_recipe(name)
    want = {"source": recipe["source"], "n_points": recipe["points"], "max_parts": max_parts, "seed": seed}
    if reuse and _data_complete(out):
        meta = read_meta(out)
        diff = sorted(k for k, v in want.items() if meta.get(k) != v)
        if diff:
            raise InputError(f"{out} holds a dataset built with other settings ({', '.join(diff)}); "
                             "resume with the same options or start a new --out")
        print(f"reusing the dataset in {out}")
        return PartDataset.load(out)
    build_real_dataset(out, recipe["source"], n_points=recipe["points"], max_parts=max_parts, seed=seed, progress=True)
    return PartDataset.load(out)


def typical_part_counts(ds, categories: list[str], max_parts: int) -> dict[str, int]:
    """Per category, the lower median part count of its training shapes with at most
    ``max_parts`` parts (a count some real shape has; Sweet Home 3D: chair 3, table 4, shelf 6,
    lamp 5, sofa 5, bed 7)."""
    from generation3d.data import CATEGORIES

    out = {}
    for cat in categories:
        counts = sorted(ds.n_parts(int(i)) for i in ds.shape_ids("train", max_parts=max_parts)
                        if CATEGORIES[int(ds.category[i])] == cat)
        if counts:
            out[cat] = counts[(len(counts) - 1) // 2]
    return out


def write_samples(pipe, ds, out: Path, seed: int = 0, steps: int = 25, renderer: str = "matplotlib") -> list[dict]:
    """One sample per trained category into ``out`` (``<category>_<P>parts.glb`` + ``.png``);
    returns ``[{"category", "parts", "glb", "png"}]``."""
    from generation3d.export import export_meshes
    from generation3d.render import render_preview

    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for cat, n in typical_part_counts(ds, pipe.categories, pipe.gen.config.max_parts).items():
        g = pipe.sample(cat, n, seed=seed, steps=steps)[0]
        meshes = pipe.meshes(g)[0]
        glb = export_meshes(meshes, out / f"{cat}_{n}parts.glb")
        png = glb.with_suffix(".png")
        render_preview(meshes, png, title=f"{cat}, {n} parts", renderer=renderer)
        rows.append({"category": cat, "parts": int(n), "glb": glb.name, "png": png.name})
    return rows


def sample_previews(ckpt: str | Path) -> list[tuple[str, str]]:
    """``(png path, caption)`` of the preset samples saved beside a checkpoint (none: ``[]``)."""
    d = Path(ckpt) / "samples"
    if not d.is_dir():
        return []
    return [(str(p), p.stem.replace("_", ", ").replace("parts", " parts")) for p in sorted(d.glob("*.png"))]


def recipe_summary(name: str, extra: dict) -> dict:
    """The JSON written to ``<out>/preset.json``."""
    return {"preset": name, **preset_recipe(name), **{k: (float(v) if isinstance(v, np.floating) else v)
                                                      for k, v in extra.items()}}


def preset_data_and_autoencoder(name: str, out: Path, seed: int = 0, max_parts: int = 64, ae_steps: int | None = None,
                                tokens_per_part: int = 8, device: str = "auto", precision: str = "32",
                                reuse: bool = False):
    """The preset's dataset (in ``out/data``) and its part autoencoder (``ae_steps``, default the
    recipe's, with ``tokens_per_part`` latent tokens), saved to ``out/ae`` as soon as it is
    trained; returns ``(dataset, autoencoder, info)`` with ``info = {"ae_steps", "ae_test",
    "ae_train_s"}`` (test reconstruction metrics, training seconds). ``reuse`` (``--resume``): the
    data and a finished autoencoder already in ``out`` are loaded when made with these settings,
    refused (InputError) when not."""
    from common.pretrained import checkpoint_info
    from generation3d.evaluate import reconstruction_metrics
    from generation3d.model import AEConfig
    from generation3d.sampling import load_autoencoder, save_autoencoder
    from generation3d.train import pretrain

    ds = build_preset_data(name, out / "data", seed=seed, max_parts=max_parts, reuse=reuse)
    ae_steps = ae_steps or preset_recipe(name)["ae_steps"]
    want = {"source": preset_recipe(name)["source"], "ae_steps": ae_steps, "seed": seed, "n_latents": tokens_per_part}
    if reuse and (out / "ae" / "config.json").is_file():
        saved = checkpoint_info(out / "ae").extra.get(AE_RECIPE) or {}
        diff = sorted(k for k, v in want.items() if saved.get(k) != v)
        if diff:
            raise InputError(f"{out / 'ae'} holds an autoencoder trained with other settings ({', '.join(diff)}); "
                             "resume with the same options or start a new --out")
        print(f"reusing the autoencoder in {out / 'ae'}")
        ae_test = {k: float("nan") if v is None else v for k, v in saved["ae_test"].items()}  # JSON has no NaN
        return ds, load_autoencoder(out / "ae"), {"ae_steps": ae_steps, "ae_test": ae_test,
                                                  "ae_train_s": saved["ae_train_s"]}
    t0 = time.perf_counter()
    ae, _ = pretrain(ds, AEConfig(n_latents=tokens_per_part, d_latent=8), steps=ae_steps, batch_size=64, lr=2e-3,
                     seed=seed, progress=True, device=device, precision=precision)
    info = {"ae_steps": ae_steps, "ae_test": reconstruction_metrics(ae, ds, "test"),
            "ae_train_s": time.perf_counter() - t0}
    save_autoencoder(ae, out / "ae", {AE_RECIPE: {**want, **info}})
    return ds, ae, info


def write_preset_samples(name: str, pipe, ds, out: Path, info: dict) -> list[dict]:
    """The preset's samples (``write_samples`` into ``out/samples``) and ``out/preset.json``
    (``recipe_summary`` of ``info`` and the samples); returns the sample rows."""
    from common.io import write_json

    samples = write_samples(pipe, ds, out / "samples", seed=info.get("seed", 0), steps=preset_recipe(name)["sample_steps"])
    write_json(out / "preset.json", recipe_summary(name, {**info, "samples": samples}))
    return samples
