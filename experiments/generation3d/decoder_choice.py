"""How close the retrieve-and-fit decoder's meshes come to held-out real parts, against the points
decoder, and which size weight and distortion cap it uses (``generation3d.library``).

Protocol: every part of the ``val`` / ``test`` shapes of the shipped model's dataset is encoded by
the pipeline's autoencoder. With its true box, the ``points`` decoder decodes the latents and meshes
the points (``export.points_to_mesh``, the alpha shape); ``retrieve`` takes the nearest training
component (k = 1, so no seed) under ``SIZE_WEIGHT = w`` and fits it with the cap ``MAX_DISTORTION =
c``. Each mesh is scored against the real part's true surface (``SAMPLES`` points of its mesh):
``excess`` (mesh samples to the part), ``miss`` (part to the mesh samples), ``chamfer`` their sum,
mean per part (shape units). ``w`` and ``c`` are chosen on ``val``; ``test`` is reported per category.

``--system``: instead, the whole pipeline per setting on the ``val`` shapes (``moca eval --split val
--decoder retrieve``: category fidelity, COV / MMD / 1-NNA of final meshes), for settings the part
scores cannot tell apart by what users see.

``python -m experiments.generation3d.decoder_choice --data-dir DIR --out decoder_choice.json [--system]``
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import torch
import trimesh

from common.report import markdown_table
from experiments.generation3d.mesher_choice import part_scores, summary
from generation3d.data import CATEGORIES, PartDataset
from generation3d.export import points_to_mesh
from generation3d.geometry import from_canonical, to_canonical
from generation3d.library import ComponentLibrary
from generation3d.sampling import MoCAPipeline

WEIGHTS = (0.0, 0.3, 1.0, 3.0)
CAPS = (1.0, 1.5, 2.0, 100.0)
SAMPLES = 2000


@torch.no_grad()
def score(pipe, ds: PartDataset, split: str, methods: dict, seed: int = 0) -> list[dict]:
    rows, lib = [], pipe.library
    parts = ds.part_indices(split)
    owner = np.repeat(ds.shape_ids(split), [ds.n_parts(int(i)) for i in ds.shape_ids(split)])
    canon = torch.from_numpy(to_canonical(ds.points[parts], ds.boxes[parts])).float()
    z = pipe.ae.encode(canon)
    decoded = from_canonical(pipe.ae.decode(z).clamp(-1, 1), torch.from_numpy(ds.boxes[parts])).numpy()
    for j, (p, shape) in enumerate(zip(parts, owner, strict=True)):
        true = trimesh.sample.sample_surface(ds.part_mesh(int(p)), SAMPLES, seed=seed)[0]
        for name, make in methods.items():
            mesh = make(lib, z[j].numpy(), ds.boxes[p], int(ds.category[shape]), decoded[j])
            excess, miss = part_scores(true, mesh, true, seed)
            rows.append({"shape": int(shape), "category": CATEGORIES[int(ds.category[shape])], "method": name,
                         "excess": excess, "miss": miss, "chamfer": excess + miss})
    return rows


def retrieve(weight: float, cap: float):
    def make(lib, z, box, cat, _decoded):
        pool = np.nonzero(lib.category == cat)[0]
        pool = pool if len(pool) else np.arange(len(lib))
        return lib.fit(int(pool[np.argmin(lib.distances(lib.standardise(z), box[3:], pool, weight))]), box, cap)
    return make


def points(lib, z, box, cat, decoded):
    return points_to_mesh(decoded, box)


def with_setting(lib: ComponentLibrary, size_weight: float, max_distortion: float) -> ComponentLibrary:
    """``lib``'s components under another size weight and distortion cap (a variant, not a flag)."""

    class Setting(ComponentLibrary):
        def distances(self, key, size, candidates, size_weight=size_weight):
            return super().distances(key, size, candidates, size_weight)

        def fit(self, i, box, max_distortion=max_distortion):
            return super().fit(i, box, max_distortion)

    return Setting(**{k: getattr(lib, k) for k in lib.arrays()})


def system_rows(pipe, ds, settings: list[tuple[float, float]], steps: int = 20) -> list[dict]:
    """``evaluate_generator`` on every val shape with the retrieve decoder at each ``(w, c)``."""
    from generation3d.evaluate import evaluate_generator

    rows, library = [], pipe.library
    try:
        for w, c in settings:
            pipe.library = with_setting(library, w, c)
            res = evaluate_generator(pipe, ds, n_shapes=len(ds), steps=steps, split="val", decoder="retrieve")
            rows.append({"method": f"retrieve w{w:g} c{c:g}", **{k: res[k] for k in
                         ("fidelity", "coverage", "mmd", "1nna", "cd", "fscore", "n_shapes")}})
    finally:
        pipe.library = library
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", required=True, help="the shipped model's dataset (moca build-data --source sweethome3d --points 128)")
    p.add_argument("--ckpt", default="moca-furniture")
    p.add_argument("--out", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--system", action="store_true", help="score whole pipelines on val per setting instead")
    a = p.parse_args(argv)
    torch.manual_seed(a.seed)
    pipe, ds = MoCAPipeline.load(a.ckpt), PartDataset.load(a.data_dir, with_meshes=True)
    if pipe.library is None:
        print(f"error: {a.ckpt} has no component library", file=sys.stderr)
        return 2
    if a.system:
        rows = system_rows(pipe, ds, [(0.0, 100.0), (1.0, 1.5), (0.0, 2.0), (1.0, 100.0)])
        print(markdown_table(rows, list(rows[0])))
        if a.out:
            with open(a.out, "w", encoding="utf-8") as f:
                json.dump({"command": "python -m experiments.generation3d.decoder_choice " + " ".join(argv or sys.argv[1:]),
                           "ckpt": a.ckpt, "split": "val", "rows": rows}, f, indent=1)
        return 0
    grid = {f"retrieve w{w:g} c{c:g}": retrieve(w, c) for w in WEIGHTS for c in CAPS}
    val = summary(score(pipe, ds, "val", {"points": points, **grid}, a.seed))
    best = min((r for r in val if r["category"] == "all" and r["method"] != "points"), key=lambda r: r["chamfer"])
    test = summary(score(pipe, ds, "test", {"points": points, best["method"]: grid[best["method"]]}, a.seed))
    print("validation:\n" + markdown_table([r for r in val if r["category"] == "all"], ["method", "parts", "excess", "miss", "chamfer"]))
    print(f"\ntest, {best['method']}:\n" + markdown_table(test, ["category", "method", "parts", "excess", "miss", "chamfer"]))
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump({"command": "python -m experiments.generation3d.decoder_choice " + " ".join(argv or sys.argv[1:]),
                       "ckpt": a.ckpt, "seed": a.seed, "weights": list(WEIGHTS), "caps": list(CAPS),
                       "chosen": best["method"], "val": val, "test": test}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
