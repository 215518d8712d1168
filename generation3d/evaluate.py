"""Metrics for part-based shape generation.

Chamfer distance here is the SQUARED version: ``CD(A, B) = mean_a min_b ||a-b||^2 +
mean_b min_a ||a-b||^2`` (sum of the two directions, no square root, no 1/2).
F-score@tau uses unsquared distances: precision = fraction of A within tau of B, recall the
reverse, F = 2PR / (P + R). Shapes live in the normalised frame (largest half-extent 1).
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor

from common.errors import DataError
from generation3d.classifier import N_POINTS, category_fidelity, get_classifier, predict, shape_cloud_fixed
from generation3d.geometry import shape_cloud
from generation3d.losses import chamfer_batch, collate, encode_parts, flow_errors

DEFAULT_TAU = 0.05


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else torch.as_tensor(np.asarray(x), dtype=torch.float32)


def chamfer_distance(a, b) -> float:
    """Squared Chamfer distance of two clouds ``(N,3)``, ``(M,3)``."""
    return float(chamfer_batch(_t(a)[None], _t(b)[None], exact=True)[0])


def fscore(a, b, tau: float = DEFAULT_TAU) -> float:
    """F-score at threshold ``tau`` (unsquared distance) between clouds ``a (N,3)`` and ``b (M,3)``."""
    d = torch.cdist(_t(a), _t(b), compute_mode="donot_use_mm_for_euclid_dist")
    precision = float((d.min(1).values <= tau).float().mean())
    recall = float((d.min(0).values <= tau).float().mean())
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def match_parts(gen_parts: list, ref_parts: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hungarian matching of parts by pairwise squared Chamfer distance.

    Returns ``(gen_idx, ref_idx, cost)`` with ``cost (len(gen), len(ref))``; unequal counts leave
    the surplus parts unmatched."""
    cost = np.array([[chamfer_distance(g, r) for r in ref_parts] for g in gen_parts])
    gi, ri = linear_sum_assignment(cost)
    return gi, ri, cost


def part_metrics(gen_parts: list, ref_parts: list, tau: float = DEFAULT_TAU) -> dict:
    """Per-part CD / F-score averaged over Hungarian-matched pairs; unmatched parts count as F = 0."""
    gi, ri, cost = match_parts(gen_parts, ref_parts)
    fs = [fscore(gen_parts[g], ref_parts[r], tau) for g, r in zip(gi, ri, strict=True)]
    n = max(len(gen_parts), len(ref_parts))
    return {"part_cd": float(cost[gi, ri].mean()), "part_fscore": float(sum(fs) / n), "matched": int(len(gi))}


def pairwise_chamfer(gen: list, ref: list) -> np.ndarray:
    """``(len(gen), len(ref))`` squared Chamfer distances between shape clouds."""
    return np.array([[chamfer_distance(g, r) for r in ref] for g in gen])


def set_metrics(gen: list, ref: list) -> dict:
    """Coverage, MMD and 1-NNA (Achlioptas et al. 2018; Yang et al. 2019) with squared CD.

    COV = fraction of reference shapes that are the nearest reference of some generated shape;
    MMD = mean over references of the distance to the closest generated shape;
    1-NNA = leave-one-out 1-nearest-neighbour accuracy of telling the two sets apart (0.5 ideal)."""
    d_gr = pairwise_chamfer(gen, ref)
    d_gg, d_rr = pairwise_chamfer(gen, gen), pairwise_chamfer(ref, ref)
    cov = len(set(d_gr.argmin(1).tolist())) / len(ref)
    mmd = float(d_gr.min(0).mean())
    ng, nr = len(gen), len(ref)
    full = np.block([[d_gg, d_gr], [d_gr.T, d_rr]])
    np.fill_diagonal(full, np.inf)
    labels = np.array([0] * ng + [1] * nr)
    nn_label = labels[full.argmin(1)]
    return {"coverage": float(cov), "mmd": mmd, "1nna": float((nn_label == labels).mean())}


def box_overlap(boxes: np.ndarray) -> np.ndarray:
    """Pairwise intersection volume over the smaller box volume, ``boxes (P,6)`` -> ``(P,P)``."""
    lo, hi = boxes[:, :3] - boxes[:, 3:] / 2, boxes[:, :3] + boxes[:, 3:] / 2
    inter = np.clip(np.minimum(hi[:, None], hi[None]) - np.maximum(lo[:, None], lo[None]), 0, None).prod(-1)
    vol = np.clip(boxes[:, 3:], 1e-9, None).prod(-1)
    return inter / np.minimum(vol[:, None], vol[None])


def penetration_rate(boxes: np.ndarray, threshold: float = 0.25) -> float:
    """Fraction of part pairs whose boxes interpenetrate by more than ``threshold`` of the smaller
    box's volume (touching / slightly embedded joints stay below it)."""
    p = len(boxes)
    if p < 2:
        return 0.0
    ov = box_overlap(np.asarray(boxes, dtype=np.float64))
    iu = np.triu_indices(p, 1)
    return float((ov[iu] > threshold).mean())


def part_clouds(meshes: list, n_points: int, seed: int = 0) -> np.ndarray:
    """``n_points`` surface samples of each part mesh: ``(P, n_points, 3)`` float32."""
    import trimesh

    return np.stack([trimesh.sample.sample_surface(m, n_points, seed=seed + i)[0]
                     for i, m in enumerate(meshes)]).astype(np.float32)


def outside_rate(boxes: np.ndarray, bound: float = 1.0, tol: float = 0.05) -> float:
    """Fraction of parts whose box ``(P,6)`` (centre + size) reaches more than ``tol`` beyond the
    normalised frame ``[-bound, bound]^3`` on some axis. Every real shape lies inside the frame (its
    bounding box is scaled to largest half-extent 1), so for a scene it is the rate of generated parts
    outside the room's extent; 0 for every real shape."""
    b = np.asarray(boxes, dtype=np.float64)
    if len(b) == 0:
        return 0.0
    reach = np.abs(b[:, :3]) + b[:, 3:] / 2
    return float((reach > bound + tol).any(1).mean())


def count_valid_parts(boxes: np.ndarray, min_size: float = 0.005, bound: float = 1.5) -> int:
    """Parts whose box is non-degenerate (all sizes > min_size) and inside ``[-bound, bound]^3``."""
    b = np.asarray(boxes)
    ok = (b[:, 3:] > min_size).all(1) & (np.abs(b[:, :3]) <= bound).all(1)
    return int(ok.sum())


def reconstruction_metrics(ae, ds, split: str = "test", tau: float = DEFAULT_TAU, max_parts: int = 2000) -> dict:
    """Part autoencoder on held-out parts: mean squared CD and F-score@tau in world coordinates."""
    from generation3d.geometry import from_canonical, to_canonical

    idx = ds.part_indices(split)[:max_parts]
    pts = torch.from_numpy(to_canonical(ds.points[idx], ds.boxes[idx])).float()
    with torch.no_grad():
        rec = from_canonical(ae(pts.to(next(ae.parameters()).device)).clamp(-1, 1).cpu(), torch.from_numpy(ds.boxes[idx]))
    world = torch.from_numpy(ds.points[idx])
    cds = chamfer_batch(rec, world, exact=True)
    fs = [fscore(r, w, tau) for r, w in zip(rec, world, strict=True)]
    return {"ae_cd": float(cds.mean()), "ae_fscore": float(np.mean(fs)), "n_parts": int(len(idx)), "split": split, "tau": tau}


def evaluate_generator(pipe, ds, n_shapes: int = 16, seed: int = 0, steps: int = 20, tau: float = DEFAULT_TAU,
                       guidance: float = 1.0, n_points: int = 1024, use_text: bool = False,
                       fidelity: bool = True, classifier: tuple | None = None, split: str = "test",
                       decoder: str = "points") -> dict:
    """Generate one shape per shape of ``split`` (same category and part count, seed ``seed + i``;
    with ``use_text`` also conditioned on that shape's ``text.describe_shape``) and compare; the
    default is the test split, ``"val"`` chooses sampling settings without the test shapes.

    Paired metrics: shape CD / F-score and Hungarian part CD / F-score against the test shape
    with the same request. Set metrics: COV / MMD / 1-NNA between the generated and test clouds.
    Also part-count accuracy (non-degenerate generated boxes == requested P), penetration rate and
    the rate of parts outside the normalised frame (``outside_rate``; for scenes: outside the room),
    generated vs test. With ``fidelity``, category fidelity (``classifier.py``): the rate at
    which the category classifier of ``ds`` (``classifier.get_classifier``, cached; or the given
    ``(model, info)``) labels a generated shape with its requested category (``fidelity``), the
    same rate for the paired test shapes (``fidelity_real``) and the classifier's accuracy on all
    test shapes (``classifier_test_acc``), the fidelity per requested category
    (``fidelity_by_category``) and the counts of the predicted categories (``predicted_categories``).
    ``decoder``: ``"points"`` scores the decoded part points; ``"retrieve"`` (or any
    ``MoCAPipeline.meshes`` decoder) the part meshes a user gets, each sampled at as many surface
    points as a decoded part has. Returns a dict with all settings."""
    from generation3d.data import CATEGORIES
    from generation3d.text import describe_shape

    ids = ds.shape_ids(split, max_parts=pipe.gen.config.max_parts)[:n_shapes]
    if len(ids) == 0:
        raise DataError(f"no {split} shapes with at most {pipe.gen.config.max_parts} parts (the generator's trained maximum)")
    rows, gen_clouds, ref_clouds, fixed_gen, fixed_ref, requested = [], [], [], [], [], []
    for j, i in enumerate(ids):
        ref_pts, ref_boxes, cat = ds.shape(int(i))
        a, b = ds.offsets[i], ds.offsets[i + 1]
        text = describe_shape(CATEGORIES[cat], ds.part_names[a:b], ref_boxes) if use_text else None
        g = pipe.sample(CATEGORIES[cat], len(ref_pts), seed=seed + j, steps=steps, guidance=guidance, text=text)[0]
        if decoder != "points":
            g.points = part_clouds(pipe.meshes(g, decoder)[0], g.points.shape[1], seed + j)
        gc, rc = shape_cloud(g.points, n_points, seed), shape_cloud(ref_pts, n_points, seed)
        gen_clouds.append(gc)
        ref_clouds.append(rc)
        if fidelity:
            fixed_gen.append(shape_cloud_fixed(g.points, N_POINTS, seed + j))
            fixed_ref.append(shape_cloud_fixed(ref_pts, N_POINTS, seed + j))
            requested.append(cat)
        pm = part_metrics(list(g.points), list(ref_pts), tau)
        rows.append({
            "cd": chamfer_distance(gc, rc), "fscore": fscore(gc, rc, tau), **pm,
            "count_ok": float(count_valid_parts(g.boxes) == len(ref_pts)),
            "pen_gen": penetration_rate(g.boxes), "pen_ref": penetration_rate(ref_boxes),
            "outside_gen": outside_rate(g.boxes), "outside_ref": outside_rate(ref_boxes),
        })
    out = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
    out.update(set_metrics(gen_clouds, ref_clouds))
    out["part_count_acc"] = out.pop("count_ok")
    if fidelity:
        model, info = classifier if classifier is not None else get_classifier(ds)
        req, pred = np.asarray(requested), predict(model, np.stack(fixed_gen))
        out.update({"fidelity": category_fidelity(model, np.stack(fixed_gen), requested),
                    "fidelity_real": category_fidelity(model, np.stack(fixed_ref), requested),
                    "classifier_test_acc": info.get("test_accuracy"),
                    "fidelity_by_category": {CATEGORIES[c]: float((pred[req == c] == c).mean()) for c in sorted(set(requested))},
                    "predicted_categories": {CATEGORIES[c]: int((pred == c).sum()) for c in sorted(set(pred.tolist()))}})
    out.update({"n_shapes": int(len(ids)), "seed": seed, "steps": steps, "tau": tau, "guidance": guidance,
                "n_points": n_points, "chamfer": "squared, sum of both directions", "attention": pipe.gen.config.attention,
                "text_conditioned": use_text, "split": split, "decoder": decoder})
    return out


FLOW_LEVELS = (0.1, 0.3, 0.5, 0.7, 0.9)


@torch.no_grad()
def heldout_flow_loss(pipe, ds, levels: tuple[float, ...] = FLOW_LEVELS, batch_size: int = 16, seed: int = 0) -> dict:
    """Flow-matching loss of ``pipe.gen`` on every shape of ``ds`` (both splits; use a dataset the
    generator was not trained on, e.g. one built with another data seed), for model selection
    without test shapes: the training loss ``|| v(x_s, s) - (eps - x_0) ||^2`` (latents and boxes,
    mean per part) at fixed noise levels ``s`` with fixed noise (``seed``), category and text kept.
    Returns ``{"loss": z + box, "z", "box", "z_by_level", "box_by_level", "levels", "n_shapes"}``."""
    from generation3d.text import shape_descriptions

    gen = pipe.gen.eval()
    dev = next(gen.parameters()).device
    ids = np.array([i for i in range(len(ds)) if ds.n_parts(i) <= gen.config.max_parts], dtype=np.int64)
    if len(ids) == 0:
        raise DataError(f"no shapes with at most {gen.config.max_parts} parts (the generator's trained maximum)")
    ids = ids[np.argsort([ds.n_parts(i) for i in ids], kind="stable")]
    text = torch.from_numpy(pipe.encoder.encode(shape_descriptions(ds)))
    latents = encode_parts(pipe.ae, ds)
    g = torch.Generator().manual_seed(seed)
    err = {(key, s): 0.0 for key in ("z", "box") for s in levels}
    n_parts = {s: 0.0 for s in levels}
    for start in range(0, len(ids), batch_size):
        batch = collate(ds, latents, ids[start : start + batch_size], pipe.stats, text)
        batch = {k: None if v is None else v.to(dev) for k, v in batch.items()}
        z0, box0 = batch["z"], batch["box"]
        m = batch["valid"].float()
        for s in levels:
            ez, eb = torch.randn(z0.shape, generator=g).to(dev), torch.randn(box0.shape, generator=g).to(dev)
            err_z, err_b = flow_errors(gen, batch, torch.full((len(z0),), s, device=dev), ez, eb, batch["category"])
            err["z", s] += float((err_z * m).sum())
            err["box", s] += float((err_b * m).sum())
            n_parts[s] += float(m.sum())
    z_by = [err["z", s] / n_parts[s] for s in levels]
    box_by = [err["box", s] / n_parts[s] for s in levels]
    return {"loss": float(np.mean(z_by) + np.mean(box_by)), "z": float(np.mean(z_by)), "box": float(np.mean(box_by)),
            "z_by_level": z_by, "box_by_level": box_by, "levels": list(levels), "n_shapes": int(len(ids))}
