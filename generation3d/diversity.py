"""Are a generator's shapes diverse, and are they its training shapes? Measured on what users get.

* **Spread** (per trained category): the mean pairwise Chamfer among ``seeds`` samples of the
  category (at its median training part count, ``preset.typical_part_counts``) over the mean
  pairwise Chamfer among the real shapes of that category (all splits), both meshed alike:
  1 = as varied as the data, 0 = one shape whatever the seed.
* **Copies**: for every sample, its nearest and second-nearest training shape of the category; a
  sample is a copy when the nearest is under ``COPY_RATIO`` of the distance to the second (the
  criterion of Gu et al. 2023, "On memorization in diffusion models"). ``copy_share``: the share of
  copies.
* **Final meshes**: COV / MMD / 1-NNA (``evaluate.set_metrics``) between one sample per test shape
  (its category and part count) and the test shapes, on points sampled from the meshes a user gets
  (``MoCAPipeline.meshes`` with the chosen decoder), beside the **oracle** row: as many training
  shapes, drawn the same way (a generator that returned real shapes), against the same test shapes.

A shape shown to a user is a cloud of ``n_points`` surface samples of its part meshes; real shapes
are drawn alike (``decoder="points"``: their part clouds meshed by ``export.shape_meshes``;
``"retrieve"``: their true part meshes, since that decoder returns real components), so a copy of
a training shape is at distance 0 from it. The test shapes of the set metrics are the union of their
parts' true surface points (``"retrieve"``: sampled from their meshes like the generated ones). Chamfer is ``evaluate.chamfer_distance``
(squared, both directions).
"""

from __future__ import annotations

import numpy as np
import trimesh

from common.errors import DataError
from generation3d.data import CATEGORIES, SPLITS
from generation3d.evaluate import pairwise_chamfer, set_metrics
from generation3d.export import shape_meshes
from generation3d.geometry import shape_cloud
from generation3d.preset import typical_part_counts

COPY_RATIO = 1 / 3
SEEDS = 8
N_POINTS = 1024


def mesh_cloud(meshes: list[trimesh.Trimesh], n_points: int = N_POINTS, seed: int = 0) -> np.ndarray:
    """``n_points`` surface samples ``(n, 3)`` of a shape's part ``meshes``."""
    with np.errstate(divide="ignore", invalid="ignore"):  # trimesh's centre of mass of open (alpha) meshes
        mesh = trimesh.util.concatenate(meshes)
        return np.asarray(trimesh.sample.sample_surface(mesh, n_points, seed=seed)[0], dtype=np.float32)


def sample_cloud(pipe, g, decoder: str, n_points: int = N_POINTS, seed: int = 0) -> np.ndarray:
    """``mesh_cloud`` of the meshes a user gets for the generated shape ``g``."""
    return mesh_cloud(pipe.meshes(g, decoder)[0], n_points, seed)


def _point_clouds(ds, ids, n_points: int, seed: int) -> list[np.ndarray]:
    """Real shapes as the union of their parts' surface points, subsampled to ``n_points``."""
    return [shape_cloud(ds.shape(int(i))[0], n_points, seed) for i in ids]


def _drawn_clouds(ds, ids, n_points: int, decoder: str) -> list[np.ndarray]:
    """Real shapes as a generator's are shown with ``decoder`` (see the module docstring)."""
    if decoder != "points":
        if ds.meshes is None:
            return _point_clouds(ds, ids, n_points, 0)
        return [mesh_cloud([ds.part_mesh(p) for p in range(ds.offsets[i], ds.offsets[i + 1])], n_points, 0)
                for i in ids]
    return [mesh_cloud(shape_meshes(*ds.shape(int(i))[:2]), n_points, 0) for i in ids]


def _mean_offdiagonal(d: np.ndarray) -> float:
    return float(d[~np.eye(len(d), dtype=bool)].mean()) if len(d) > 1 else float("nan")


def spread_and_copies(pipe, ds, seeds: int = SEEDS, steps: int = 25, n_points: int = N_POINTS,
                      decoder: str = "points", first_seed: int = 0) -> dict:
    """Per trained category: ``parts``, ``spread`` (samples' mean pairwise Chamfer), ``real_spread``
    (real shapes'), their ``spread_ratio``, each sample's ``nn_ratio`` (nearest / second-nearest
    training shape) and ``copies``; over all categories ``copy_share`` and ``min_spread_ratio``. The
    samples use seeds ``first_seed, ..., first_seed + seeds - 1``."""
    cats = typical_part_counts(ds, pipe.categories, pipe.gen.config.max_parts)
    if not cats:
        raise DataError("the dataset has no training shapes of the categories this model was trained on")
    rows, ratios = {}, []
    for cat, parts in cats.items():
        c = CATEGORIES.index(cat)
        samples = [pipe.sample(cat, parts, seed=s, steps=steps)[0] for s in range(first_seed, first_seed + seeds)]
        gen = [sample_cloud(pipe, g, decoder, n_points, 0) for g in samples]  # one surface sampling: equal shapes, equal clouds
        ids = np.nonzero(ds.category == c)[0]
        real = _drawn_clouds(ds, ids, n_points, decoder)
        train = [cloud for i, cloud in zip(ids, real, strict=True) if ds.split[i] == SPLITS["train"]]
        near = np.sort(pairwise_chamfer(gen, train), axis=1)
        nn_ratio = near[:, 0] / np.maximum(near[:, 1], 1e-12) if near.shape[1] > 1 else np.full(len(gen), np.nan)
        spread, real_spread = _mean_offdiagonal(pairwise_chamfer(gen, gen)), _mean_offdiagonal(pairwise_chamfer(real, real))
        rows[cat] = {"parts": int(parts), "spread": spread, "real_spread": real_spread,
                     "spread_ratio": spread / real_spread, "nn_ratio": nn_ratio.round(4).tolist(),
                     "copies": int((nn_ratio < COPY_RATIO).sum()), "real_shapes": len(real), "train_shapes": len(train)}
        ratios.extend(nn_ratio.tolist())
    ratios = np.asarray(ratios)
    return {"categories": rows, "copy_share": float((ratios < COPY_RATIO).mean()),
            "min_spread_ratio": min(r["spread_ratio"] for r in rows.values()), "seeds": seeds, "steps": steps,
            "copy_ratio": COPY_RATIO, "decoder": decoder}


def final_mesh_set_metrics(pipe, ds, n_shapes: int = 64, steps: int = 25, n_points: int = N_POINTS,
                           seed: int = 0, decoder: str = "points") -> dict:
    """COV / MMD / 1-NNA of one sample per test shape (its category and part count, seed ``seed + i``)
    on mesh surface points (``generated``), and of as many training shapes (drawn with ``seed``)
    against the same test shapes (``oracle``)."""
    test = ds.shape_ids("test", max_parts=pipe.gen.config.max_parts)
    test = [i for i in test if CATEGORIES[int(ds.category[i])] in pipe.categories][:n_shapes]
    if not test:
        raise DataError("no test shapes of the categories and part counts this model makes")
    gen = []
    for j, i in enumerate(test):
        pts, _, cat = ds.shape(int(i))
        g = pipe.sample(CATEGORIES[cat], len(pts), seed=seed + j, steps=steps)[0]
        gen.append(sample_cloud(pipe, g, decoder, n_points, seed + j))
    ref = _point_clouds(ds, test, n_points, seed) if decoder == "points" else _drawn_clouds(ds, test, n_points, decoder)
    train = ds.shape_ids("train", max_parts=pipe.gen.config.max_parts)
    train = [i for i in train if CATEGORIES[int(ds.category[i])] in pipe.categories]
    pick = np.random.default_rng(seed).choice(len(train), size=min(len(test), len(train)), replace=False)
    oracle = _drawn_clouds(ds, [train[k] for k in sorted(pick)], n_points, decoder)
    return {"generated": set_metrics(gen, ref), "oracle": set_metrics(oracle, ref), "n_shapes": len(test),
            "steps": steps, "n_points": n_points, "seed": seed}


def diversity_report(pipe, ds, seeds: int = SEEDS, n_shapes: int = 64, steps: int = 25, decoder: str = "points") -> dict:
    """``spread_and_copies`` and ``final_mesh_set_metrics`` in one dict (``moca eval --diversity``)."""
    return {**spread_and_copies(pipe, ds, seeds=seeds, steps=steps, decoder=decoder),
            "final_meshes": final_mesh_set_metrics(pipe, ds, n_shapes=n_shapes, steps=steps, decoder=decoder)}


def summary_line(report: dict) -> str:
    """One line of ``diversity_report``'s headline numbers."""
    g, o = report["final_meshes"]["generated"], report["final_meshes"]["oracle"]
    spread = ", ".join(f"{c} {r['spread_ratio']:.2f}" for c, r in report["categories"].items())
    return (f"spread of {report['seeds']} seeds / real shapes' ({spread}); copy share {report['copy_share']:.2f}; "
            f"final meshes COV {g['coverage']:.2f} MMD {g['mmd']:.4f} 1-NNA {g['1nna']:.2f} "
            f"(oracle: train shapes {o['coverage']:.2f} / {o['mmd']:.4f} / {o['1nna']:.2f})")
