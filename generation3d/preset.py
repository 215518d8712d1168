"""``moca train --preset demo``: the model the hub's 3D tab shows, trained once on real furniture.

The preset is the README's results recipe on Debian's Sweet Home 3D furniture: ``build-data
--source sweethome3d --points 128`` into ``<out>/data``, the part autoencoder for ``ae_steps``
(600) steps, then the generator (``moca train``'s model flags, MoCA by default) for 2400 steps; the
pipeline is saved to ``<out>`` (``ae/``, ``generator/``, like any ``moca train --out``), with one
sample per trained category in ``<out>/samples/`` (GLB + PNG, at the category's median part
count in the training shapes) and ``<out>/preset.json`` (recipe, AE test metrics, final loss,
sample files). The default ``<out>`` is ``cache_dir("generation3d")/demo_real_model``, which the
tab (``demo.default_checkpoint``) prefers to ``make demo``'s procedural model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from common.data_dir import cache_dir
from common.errors import InputError

DEMO_REAL_MODEL = "demo_real_model"
PRESETS = {"demo": {"source": "sweethome3d", "points": 128, "ae_steps": 600, "steps": 2400, "sample_steps": 25}}


def demo_real_model_dir() -> Path:
    """Where ``moca train --preset demo`` saves by default (the hub tab's first choice)."""
    return cache_dir("generation3d") / DEMO_REAL_MODEL


def preset_recipe(name: str) -> dict:
    if name not in PRESETS:
        raise InputError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
    return dict(PRESETS[name])


def build_preset_data(name: str, out: Path, seed: int = 0, max_parts: int = 64):
    """Build the preset's dataset in ``out`` (the Sweet Home 3D archives are read in place from
    ``$MOE_APPS_SWEETHOME3D`` or ``/usr/share/sweethome3d/furniture``) and return it loaded."""
    from generation3d.data import PartDataset
    from generation3d.sources import build_real_dataset

    recipe = preset_recipe(name)
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
    from generation3d.export import export_meshes, shape_meshes
    from generation3d.render import render_preview

    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for cat, n in typical_part_counts(ds, pipe.categories, pipe.gen.config.max_parts).items():
        g = pipe.sample(cat, n, seed=seed, steps=steps)[0]
        meshes = shape_meshes(g.points, g.boxes)
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
                                tokens_per_part: int = 8, device: str = "auto", precision: str = "32"):
    """The preset's dataset (in ``out/data``) and its part autoencoder (``ae_steps``, default the
    recipe's, with ``tokens_per_part`` latent tokens); returns ``(dataset, autoencoder, info)``
    with ``info = {"ae_steps", "ae_test"}`` (test reconstruction metrics)."""
    from generation3d.evaluate import reconstruction_metrics
    from generation3d.model import AEConfig
    from generation3d.train import pretrain

    ds = build_preset_data(name, out / "data", seed=seed, max_parts=max_parts)
    ae_steps = ae_steps or preset_recipe(name)["ae_steps"]
    ae, _ = pretrain(ds, AEConfig(n_latents=tokens_per_part, d_latent=8), steps=ae_steps, batch_size=64, lr=2e-3,
                     seed=seed, progress=True, device=device, precision=precision)
    return ds, ae, {"ae_steps": ae_steps, "ae_test": reconstruction_metrics(ae, ds, "test")}


def write_preset_samples(name: str, pipe, ds, out: Path, info: dict) -> list[dict]:
    """The preset's samples (``write_samples`` into ``out/samples``) and ``out/preset.json``
    (``recipe_summary`` of ``info`` and the samples); returns the sample rows."""
    from common.io import write_json

    samples = write_samples(pipe, ds, out / "samples", seed=info.get("seed", 0), steps=preset_recipe(name)["sample_steps"])
    write_json(out / "preset.json", recipe_summary(name, {**info, "samples": samples}))
    return samples
