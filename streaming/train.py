"""MoSAIC's pretraining: k-subspaces with missing data on source samples, then the MAP ridge."""

from __future__ import annotations

import numpy as np
import torch

from streaming.kss import KSSResult, k_subspaces_missing, map_ridge
from streaming.observed import check_source


def fit(X0: np.ndarray, M: np.ndarray, K: int, r: int, *, device: torch.device | None = None,
        **kss) -> tuple[KSSResult, float]:
    """Pretrain ``K`` rank-``r`` experts on the source samples ``X0, M (S, n)`` (zero-filled, mask):
    ``streaming.kss.k_subspaces_missing`` (``kss``: its keyword arguments; routing on ``device``), then
    its MAP ridge (``map_ridge``). Returns ``(result, ridge)``, ``result.bases (K, n, r)``; an
    ``UnderdeterminedSourceWarning`` when the source cannot identify the experts (``check_source``)."""
    check_source(M, K, r)
    result = k_subspaces_missing(X0, M, K, r, device=device, **kss)
    return result, map_ridge(result.bases, X0, M, result.labels)


def assigned_levels(result, K: int) -> tuple[np.ndarray, np.ndarray]:
    """Each expert's residual level after pretraining, ``(K,)``: the median normalised residual of the
    source samples ``result`` assigned to it (1 for none, at least 1e-6), and their counts ``(K,)``."""
    levels, counts = np.ones(K), np.zeros(K)
    for k in range(K):
        s = result.scores[result.labels == k]
        levels[k] = max(float(np.median(s)) if s.size else 1.0, 1e-6)
        counts[k] = s.size
    return levels, counts
