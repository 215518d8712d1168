"""Baselines, streamed as MoSAIC is (``process(x, epoch=) -> (completed, routes)``): ``Grouse`` and
``Petrels`` (one subspace), ``KGrouse`` (routed constant-step GROUSE; fitted, the pretrained k-GROUSE
that isolates MoSAIC's online mechanisms) and ``oracle_completion`` (the true subspaces, a lower
bound). MoSAIC without
pretraining is an unfitted ``MoSAIC``.
"""

from __future__ import annotations

import copy

import numpy as np

from streaming.config import PRETRAIN_RESTARTS, SEED
from streaming.linalg import fit_observed, grouse_step, orthonormalize
from streaming.model import MoSAIC

#: constant GROUSE step of the pretrained k-GROUSE, chosen on the stress suite's tuning seeds
#: (``python -m experiments.streaming.stress_tuning --eta-grid``)
KGROUSE_ETA = 0.5


class SingleSubspace:
    """A method tracking one random-started subspace ``U (n, d)`` (``d`` capped at ``n - 1``), streamed
    as MoSAIC is: ``process`` completes and updates on each sample in order (the subclass's ``step`` on
    its observed part) and returns the completions ``(B, n)`` and routes ``(B,)`` (always −1)."""

    def __init__(self, n: int, d: int, seed: int = 0) -> None:
        self.d = min(d, n - 1)
        self.U = orthonormalize(np.random.default_rng(seed).standard_normal((n, self.d)))

    def step(self, idx: np.ndarray, xo: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def process(self, x: np.ndarray, mask: np.ndarray | None = None, epoch=None) -> tuple[np.ndarray, np.ndarray]:
        x = np.atleast_2d(np.asarray(x, dtype=np.float64))
        M = ~np.isnan(x) if mask is None else np.asarray(mask, bool)
        completed = np.empty_like(x)
        for j in range(x.shape[0]):
            idx = np.flatnonzero(M[j])
            completed[j] = self.step(idx, x[j, idx])
        return completed, np.full(x.shape[0], -1, np.int64)

    @property
    def bases_(self) -> np.ndarray:
        """``(1, n, d)``."""
        return self.U[None]

    def memory_bytes(self) -> int:
        return int(sum(v.nbytes for v in vars(self).values() if isinstance(v, np.ndarray)))


class Grouse(SingleSubspace):
    """GROUSE on one rank-``d`` subspace ``U (n, d)`` with a constant step ``eta``."""

    def __init__(self, n: int, d: int, eta: float = 0.3, seed: int = 0) -> None:
        super().__init__(n, d, seed)
        self.eta = eta

    def step(self, idx: np.ndarray, xo: np.ndarray) -> np.ndarray:
        w, _ = fit_observed(self.U[None], idx, xo)
        completion = self.U @ w[0]
        completion[idx] = xo
        if idx.size > self.d:
            grouse_step(self.U, idx, xo, w[0], self.eta)
        return completion


class Petrels(SingleSubspace):
    """PETRELS on one rank-``d`` subspace ``U (n, d)`` with per-row inverse covariances
    ``R⁻¹ (n, d, d)``. For each observed row i: ``R_i ← λ R_i + w wᵀ`` (Sherman–Morrison on the
    inverse) and ``U_i ← U_i + (x_i − U_i w) R_i⁻¹ w``, with ``w`` the least-squares coefficient."""

    def __init__(self, n: int, d: int, lam: float = 0.98, delta: float = 1.0, seed: int = 0) -> None:
        super().__init__(n, d, seed)
        self.Rinv = np.tile(np.eye(self.d) / delta, (n, 1, 1))
        self.lam = lam

    def step(self, idx: np.ndarray, xo: np.ndarray) -> np.ndarray:
        Uo = self.U[idx]
        G = Uo.T @ Uo + 1e-8 * np.eye(self.d)
        w = np.linalg.solve(G, Uo.T @ xo)
        completion = self.U @ w
        completion[idx] = xo
        Ri = self.Rinv[idx]  # (m, d, d)
        Rw = Ri @ w  # (m, d)
        denom = self.lam + Rw @ w
        Ri = (Ri - Rw[:, :, None] * Rw[:, None, :] / denom[:, None, None]) / self.lam
        self.Rinv[idx] = Ri
        err = xo - Uo @ w
        self.U[idx] += err[:, None] * (Ri @ w)
        return completion

    @property
    def bases_(self) -> np.ndarray:
        return orthonormalize(self.U)[None]


class KGrouse(MoSAIC):
    """k-GROUSE (Balzano et al.): ``K`` experts, each sample routed to the one with the least residual
    (``linalg.residual_scores``, ridge ``λ``), completed by its fit, and one GROUSE step of constant
    size ``eta`` on that expert. Nothing else: no step-size schedule, epoch handling, change detection
    or completion cap. ``fit`` pretrains the experts exactly as MoSAIC's (the pretrained k-GROUSE, the
    baseline that isolates MoSAIC's online mechanisms); unfitted, the experts start from random bases
    drawn from ``seed`` (the classic k-GROUSE). Epochs passed to it change nothing."""

    schedule = "constant"
    detect = False
    completion_cap = 0.0

    def __init__(self, r: int, K: int, *, eta: float = KGROUSE_ETA,
                 pretrain_restarts: int = PRETRAIN_RESTARTS, seed: int = SEED) -> None:
        self.r = r
        self.K = K
        self.eta = eta
        self.pretrain_restarts = pretrain_restarts
        self.seed = seed

    @property
    def eta0(self) -> float:
        return self.eta

    @classmethod
    def from_mosaic(cls, model: MoSAIC, eta: float = KGROUSE_ETA) -> KGrouse:
        """The pretrained k-GROUSE on a fitted MoSAIC's experts and ridge: what ``fit`` with the same
        source, seed and restarts gives, without pretraining twice."""
        kg = cls(model.r, model.K, eta=eta, pretrain_restarts=model.pretrain_restarts, seed=model.seed)
        kg.n_features_in_ = model.n_features_in_
        for name, comp in copy.deepcopy(model.components()).items():
            setattr(kg, name + "_", comp)
        return kg


def oracle_completion(
    values: np.ndarray, labels: np.ndarray, epoch: np.ndarray, bases: np.ndarray, noise_std: float = 0.0,
    sample_bases: np.ndarray | None = None,
) -> np.ndarray:
    """Completion with the true subspace of every sample (``bases (E, K, n, r)``, or each sample's
    own ``sample_bases (T, n, r)`` where the subspaces move within an epoch), by the MAP (ridge)
    fit ``λ = σ² r / n`` for the generator's prior ``w ~ N(0, (n/r) I)`` and noise ``σ``."""
    n, r = bases.shape[2], bases.shape[3]
    ridge = max(noise_std**2 * r / n, 1e-10)
    M = ~np.isnan(values)
    X0 = np.where(M, values, 0.0)
    out = np.empty_like(X0)
    chunk = max(16, 4_000_000 // (n * r))
    for s in range(0, len(values), chunk):
        sl = slice(s, s + chunk)
        Ut = bases[epoch[sl], labels[sl]] if sample_bases is None else sample_bases[sl]  # (t, n, r)
        G = np.einsum("tn,tna,tnb->tab", M[sl].astype(float), Ut, Ut) + ridge * np.eye(r)
        w = np.linalg.solve(G, np.einsum("tn,tna->ta", X0[sl], Ut)[..., None])[..., 0]
        out[sl] = np.where(M[sl], X0[sl], np.einsum("tna,ta->tn", Ut, w))
    return out
