"""MoSAIC's expert bank (the subspaces), its per-expert statistics, and the completion rules.

Shapes: ``n`` ambient dimension, ``r`` rank, ``K`` experts; a sample is observed on ``idx (m,)``
with values ``xo (m,)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from moe.routing import route_by_score
from streaming.linalg import RIDGE, TINY, batch_fit
from streaming.state import StateComponent


def route_scores(score: np.ndarray, device: torch.device | None = None) -> np.ndarray:
    """Expert of each sample ``(B,)`` from its scores ``(B, K)`` (lower is better) by
    ``moe.route_by_score`` (argmin, ties to the lower index) on ``device`` (None: the CPU)."""
    scores = torch.from_numpy(score)
    if device is not None:
        scores = scores.to(device)
    return route_by_score(scores).indices[:, 0].detach().cpu().numpy().copy()


def cap_completion(completion: np.ndarray, xo: np.ndarray, n: int, factor: float, typical: float = 0.0,
                   xx: float | None = None) -> np.ndarray:
    """Scale the unobserved part of ``completion (n,)`` (0 on Ω; in place, returned) down to at most
    ``factor`` × the energy of ``n - m`` entries at the larger of the observed values' mean square and
    ``typical`` (a running per-entry energy): a fit through an ill-conditioned ``U_Ω`` can extrapolate
    to hundreds of times the sample's energy. ``xx``: ``xo @ xo`` when the caller has it."""
    m = xo.size
    cap = factor * max((float(xo @ xo) if xx is None else xx) / m, typical) * (n - m)
    energy = float(completion @ completion)
    if energy > cap:
        completion *= math.sqrt(cap / energy)
    return completion


@dataclass(slots=True)
class ExpertBank(StateComponent):
    """The ``K`` orthonormal bases ``bases (K, n, r)`` and the ridge ``λ`` of their least-squares
    fits (``RIDGE`` until pretraining sets the MAP value ``σ̂²/var(w)``)."""

    bases: np.ndarray
    ridge: float = RIDGE

    def batch_route(self, X0: np.ndarray, M: np.ndarray,
                    device: torch.device | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Coefficients ``W (B, K, r)`` and the expert of each sample ``(B,)`` (``route_scores`` on
        ``device``) of validated samples ``X0, M (B, n)``; no update."""
        W, res = batch_fit(self.bases, X0, M, ridge=self.ridge)
        score = res / np.maximum((X0 * X0).sum(1), TINY)[:, None]
        return W, route_scores(score, device)


@dataclass(slots=True)
class ExpertStats(StateComponent):
    """Per-expert statistics ``(K,)``: EWMAs of the normalised residual of accepted samples
    (``level`` fast, ``level_slow``), whether the expert is ``mature`` (trusted for change
    detection), its update count, its long-run traffic count, and the sample counts at its last
    update and its last re-seed."""

    level: np.ndarray
    level_slow: np.ndarray
    mature: np.ndarray
    n_updates: np.ndarray
    long_counts: np.ndarray
    last_update: np.ndarray
    reseeded_at: np.ndarray

    @classmethod
    def new(cls, K: int) -> ExpertStats:
        return cls(level=np.ones(K), level_slow=np.ones(K), mature=np.zeros(K, bool),
                   n_updates=np.zeros(K, np.int64), long_counts=np.zeros(K), last_update=np.zeros(K, np.int64),
                   reseeded_at=np.full(K, -(10**12), np.int64))


@dataclass(slots=True)
class StreamStats(StateComponent):
    """Running statistics of the stream: samples seen, the mean observed count ``m̄`` (EWMA), the
    mean square of an observed entry (the completion cap's floor), and whether the experts were
    pretrained."""

    n_seen: int = 0
    mean_m: float = 0.0
    entry_energy: float = 0.0
    pretrained: bool = False

    def observe(self, m: int, xx: float) -> None:
        """Count one sample of ``m`` observed values of energy ``xx``."""
        self.n_seen += 1
        self.mean_m += (m - self.mean_m) * 0.01
        self.entry_energy += (xx / m - self.entry_energy) * 0.01
