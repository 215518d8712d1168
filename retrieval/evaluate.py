"""Recall@K and the official protocols (FashionIQ, Shoes).

Ranking convention: gallery items are ordered by descending score with a *stable* sort, so a
tie is broken in favour of the lower gallery position; the rank of the target is its 0-based
position in that order, and Recall@K = mean(rank < K).

* FashionIQ: one gallery per category; the reference is **not** removed; report R@10 and R@50
  per category, their means over categories, and ``avg`` = (mean R@10 + mean R@50) / 2.
* Shoes: one gallery of all eval images, the reference **excluded**; R@1/10/50 and their mean.
"""

from __future__ import annotations

import numpy as np

from common.errors import DataError

from .data import CIRSplit


def target_ranks(
    scores: np.ndarray, target_cols: np.ndarray, exclude_cols: np.ndarray | None = None
) -> np.ndarray:
    """0-based rank of each query's target. scores (Q, N); target_cols (Q,); exclude_cols (Q,),
    -1 for none: that gallery column is removed for that query (must differ from the target)."""
    scores = np.array(scores, dtype=np.float64, copy=True)
    q, n = scores.shape
    target_cols = np.asarray(target_cols, np.int64)
    if target_cols.shape != (q,) or (target_cols < 0).any() or (target_cols >= n).any():
        raise DataError("target not in the gallery")
    if exclude_cols is not None:
        exclude_cols = np.asarray(exclude_cols, np.int64)
        rows = np.nonzero(exclude_cols >= 0)[0]
        if (exclude_cols[rows] == target_cols[rows]).any():
            raise DataError("a query's reference equals its target; cannot exclude it")
        scores[rows, exclude_cols[rows]] = -np.inf
    t = scores[np.arange(q), target_cols][:, None]
    cols = np.arange(n)[None, :]
    return ((scores > t) | ((scores == t) & (cols < target_cols[:, None]))).sum(1)


def recall_at_k(ranks: np.ndarray, ks=(1, 10, 50)) -> dict[int, float]:
    ranks = np.asarray(ranks)
    return {k: float((ranks < k).mean()) if len(ranks) else float("nan") for k in ks}


def evaluate_split(
    split: CIRSplit, query_emb: np.ndarray, gallery_emb: np.ndarray, ks=(1, 10, 50)
) -> dict[str, float]:
    """Protocol metrics for ``split``. query_emb (T, E) row t = triplet t; gallery_emb (N, E)
    row i = ``split.ids[i]``. Returns percentages."""
    if len(query_emb) != len(split.triplets) or len(gallery_emb) != len(split.ids):
        raise ValueError("embeddings do not match the split's triplets / items")
    out: dict[str, float] = {}
    per_k: dict[int, list[float]] = {k: [] for k in ks}
    tri_cat = np.array([t.category for t in split.triplets])
    for cat, gal_ids in split.galleries.items():
        sel = np.nonzero(tri_cat == cat)[0]
        if not len(sel):
            continue
        rows = split.rows(gal_ids)
        col_of = {i: n for n, i in enumerate(gal_ids)}
        missing = [split.triplets[t].target for t in sel if split.triplets[t].target not in col_of]
        if missing:
            raise DataError(f"target {missing[0]!r} is not in the {cat!r} gallery")
        tcols = np.array([col_of[split.triplets[t].target] for t in sel])
        excl = None
        if split.exclude_reference:
            excl = np.array([col_of.get(split.triplets[t].reference, -1) for t in sel])
        ranks = target_ranks(query_emb[sel] @ gallery_emb[rows].T, tcols, excl)
        r = recall_at_k(ranks, ks)
        for k in ks:
            out[f"R@{k}/{cat}"] = 100 * r[k]
            per_k[k].append(100 * r[k])
    for k in ks:
        out[f"R@{k}"] = float(np.mean(per_k[k])) if per_k[k] else float("nan")
    if split.exclude_reference:
        out["avg"] = float(np.mean([out[f"R@{k}"] for k in ks]))
    else:
        out["avg"] = (out.get("R@10", np.nan) + out.get("R@50", np.nan)) / 2
    return out


def routing_metrics(weights: np.ndarray, mentioned: np.ndarray, threshold: float = 0.5) -> dict[str, float]:
    """How well the router's group weights pick the attribute groups a text mentions.

    weights (T, G): dense routing weights (0 outside the router's top k); mentioned (T, G) bool.
    ``P@k`` / ``R@k``: precision / recall of the top-k selected groups (weight > 0);
    ``P@w>thr`` / ``R@w>thr``: the same for the groups with weight above ``threshold``;
    ``w_mentioned`` / ``w_other``: mean weight on mentioned / unmentioned groups. Fractions in [0, 1].
    """
    weights = np.asarray(weights, np.float64)
    mentioned = np.asarray(mentioned, bool)
    if weights.shape != mentioned.shape or weights.ndim != 2:
        raise ValueError(f"weights {weights.shape} and mentioned {mentioned.shape} must both be (T, G)")
    out: dict[str, float] = {}
    for name, sel in (("@k", weights > 0), (f"@w>{threshold:g}", weights > threshold)):
        hit = (sel & mentioned).sum()
        out[f"P{name}"] = float(hit / max(sel.sum(), 1))
        out[f"R{name}"] = float(hit / max(mentioned.sum(), 1))
    out["w_mentioned"] = float(weights[mentioned].mean()) if mentioned.any() else float("nan")
    out["w_other"] = float(weights[~mentioned].mean()) if (~mentioned).any() else float("nan")
    return out


def top1_items(split: CIRSplit, query_emb: np.ndarray, gallery_emb: np.ndarray) -> list[str]:
    """The top-1 gallery id of every triplet under ``split``'s protocol (its category's gallery,
    the reference removed when the protocol removes it; ties to the lower gallery position)."""
    out = [""] * len(split.triplets)
    tri_cat = np.array([t.category for t in split.triplets])
    for cat, gal_ids in split.galleries.items():
        sel = np.nonzero(tri_cat == cat)[0]
        if not len(sel):
            continue
        scores = np.array(query_emb[sel] @ gallery_emb[split.rows(gal_ids)].T, np.float64)
        if split.exclude_reference:
            col_of = {i: n for n, i in enumerate(gal_ids)}
            for r, t in enumerate(sel):
                c = col_of.get(split.triplets[t].reference)
                if c is not None:
                    scores[r, c] = -np.inf
        for t, c in zip(sel, scores.argmax(1), strict=True):
            out[t] = gal_ids[c]
    return out


def attribute_compliance(
    split: CIRSplit, query_emb: np.ndarray, gallery_emb: np.ndarray, groups=("colour", "pattern")
) -> dict[str, float]:
    """Does the top-1 item obey the request? For each attribute group in ``groups``, over the
    triplets whose text names that group (``Triplet.changed``; the requested value is the
    target's): the percentage whose top-1 item (``top1_items``) has the requested value.
    Returns ``compliance/<group>`` (percent) and ``compliance_n/<group>`` (queries); needs
    attribute labels (the built benchmark)."""
    from .render import GROUPS

    if split.attributes is None or any(t.changed is None for t in split.triplets):
        raise DataError(f"{split.name}: attribute compliance needs attribute labels and the groups each text names")
    top1 = top1_items(split, query_emb, gallery_emb)
    out: dict[str, float] = {}
    for g in groups:
        col = GROUPS.index(g)
        sel = [n for n, t in enumerate(split.triplets) if g in t.changed]
        hits = [split.attributes[split.index[top1[n]], col] == split.attributes[split.index[split.triplets[n].target], col]
                for n in sel]
        out[f"compliance/{g}"] = 100 * float(np.mean(hits)) if hits else float("nan")
        out[f"compliance_n/{g}"] = float(len(sel))
    return out
