"""Baselines in the same harness as MoSAIC (``step(idx, x_obs, epoch) -> (completion, route)``).

* ``Grouse``: one subspace of rank ``d`` (``r`` or ``K·r``, capped at ``n - 1``), greedy GROUSE
  steps with a constant step ``η``.
* ``Petrels``: one rank-``d`` subspace, PETRELS (Chi, Eldar & Calderbank, 2013): per-row
  recursive least squares with forgetting factor ``λ``.
* ``k_grouse``: ``K`` random experts, routed by residual and updated by GROUSE with constant step,
  no pretraining, no change detection.
* ``KGrousePretrained`` (``kgrouse_pretrained``): MoSAIC's pretraining (``train.fit``),
  then routing by residual (``linalg.residual_scores``) and a plain GROUSE step of constant size
  ``KGROUSE_ETA`` on the routed expert: the baseline that isolates MoSAIC's online mechanisms.
* ``mosaic_no_pretrain``: MoSAIC's online phase (schedule + change detection) from random bases.
* ``offline_kss``: batch k-subspaces on the whole stream (sees the future), a reference.
* ``oracle_completion``: true subspace and label of every sample, a lower bound.
"""

from __future__ import annotations

import numpy as np
import torch

from streaming import train
from streaming.config import MoSAICConfig
from streaming.kss import k_subspaces_missing
from streaming.linalg import batch_fit, fit_observed, grouse_step, orthonormalize, residual_scores
from streaming.model import MoSAIC
from streaming.observed import as_observed

#: constant GROUSE step of the pretrained k-GROUSE, chosen from ``KGROUSE_ETA_GRID`` on the stress
#: suite's tuning seeds (``mosaic bench --suite stress --tune``; ``streaming.stress.TUNING_SEEDS``)
KGROUSE_ETA = 0.5
KGROUSE_ETA_GRID = (0.1, 0.2, 0.3, 0.5, 0.7, 1.0)


class Grouse:
    """GROUSE on one rank-``d`` subspace ``U (n, d)``; ``route`` is always −1."""

    def __init__(self, n: int, d: int, eta: float = 0.3, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.d = min(d, n - 1)
        self.U = orthonormalize(rng.standard_normal((n, self.d)))
        self.eta = eta

    def step(self, idx, xo, epoch=None):
        w, _ = fit_observed(self.U[None], idx, xo)
        completion = self.U @ w[0]
        completion[idx] = xo
        if idx.size > self.d:
            grouse_step(self.U, idx, xo, w[0], self.eta)
        return completion, -1

    def subspaces(self):
        return self.U[None].copy()

    def memory_bytes(self) -> int:
        return int(self.U.nbytes)


class Petrels:
    """PETRELS on one rank-``d`` subspace ``U (n, d)`` with per-row inverse covariances
    ``R⁻¹ (n, d, d)``. For each observed row i: ``R_i ← λ R_i + w wᵀ`` (Sherman–Morrison on the
    inverse) and ``U_i ← U_i + (x_i − U_i w) R_i⁻¹ w``, with ``w`` the least-squares coefficient."""

    def __init__(self, n: int, d: int, lam: float = 0.98, delta: float = 1.0, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.d = min(d, n - 1)
        self.U = orthonormalize(rng.standard_normal((n, self.d)))
        self.Rinv = np.tile(np.eye(self.d) / delta, (n, 1, 1))
        self.lam = lam

    def step(self, idx, xo, epoch=None):
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
        return completion, -1

    def subspaces(self):
        return orthonormalize(self.U)[None]

    def memory_bytes(self) -> int:
        return int(self.U.nbytes + self.Rinv.nbytes)


def k_grouse(r: int, K: int, eta: float = 0.3, seed: int = 0) -> MoSAIC:
    """k-GROUSE: MoSAIC's routing with constant-step GROUSE updates, no pretraining or detection
    (``n`` is learned from the first samples streamed)."""
    return MoSAIC(r, K, schedule="constant", eta0=eta, eta_min=eta, detect=False, seed=seed)


class KGrousePretrained:
    """Pretrained k-GROUSE: ``K`` experts ``bases (K, n, r)`` pretrained exactly as MoSAIC's
    (``fit``), then per sample: route to ``k = argmin_k residual_scores`` (ridge ``λ`` from
    pretraining), complete with expert ``k``'s fit, one GROUSE step of constant size ``eta`` on
    expert ``k``. Nothing else: no schedule, no epoch handling, no change detection. The routing of
    the pretraining runs on ``device`` (None: the CPU)."""

    def __init__(self, n: int, r: int, K: int, eta: float = KGROUSE_ETA, seed: int = 0,
                 pretrain_restarts: int = MoSAICConfig.pretrain_restarts, device: torch.device | None = None) -> None:
        MoSAICConfig(n=n, r=r, K=K, eta0=eta, eta_min=eta, seed=seed).validate()
        self.n, self.r, self.K, self.eta, self.seed = n, r, K, eta, seed
        self.pretrain_restarts = pretrain_restarts
        self.device = device
        self.bases = orthonormalize(np.random.default_rng(seed).standard_normal((K, n, r)))
        self.ridge = 1e-10
        self.n_updates = np.zeros(K, np.int64)

    def fit(self, source: np.ndarray, mask: np.ndarray | None = None) -> KGrousePretrained:
        """Pretrain on ``source (S, n)`` (NaN = unobserved): MoSAIC's defaults of ``MoSAICConfig``."""
        X0, M = as_observed(source, mask, self.n)
        c = MoSAICConfig(n=self.n, r=self.r, K=self.K, seed=self.seed, pretrain_restarts=self.pretrain_restarts)
        result, self.ridge = train.fit(
            X0, M, self.K, self.r, restarts=c.pretrain_restarts, seed=c.seed, repair_rounds=c.pretrain_repair,
            device=self.device)
        self.bases = result.bases.copy()
        return self

    @classmethod
    def from_mosaic(cls, model: MoSAIC, eta: float = KGROUSE_ETA) -> KGrousePretrained:
        """The same pretrained experts and ridge as a freshly ``fit`` MoSAIC (what ``fit`` with the
        same seed and restarts gives, without pretraining twice)."""
        kg = cls(model.n, model.r, model.K, eta=eta, seed=model.seed,
                 pretrain_restarts=model.pretrain_restarts)
        kg.bases, kg.ridge = model.bases.copy(), model.ridge
        return kg

    def step(self, idx: np.ndarray, xo: np.ndarray, epoch: int | None = None) -> tuple[np.ndarray, int]:
        """One sample ``idx (m,)``, ``xo (m,)`` -> ``(completion (n,), routed expert)`` (before the update)."""
        w, score = residual_scores(self.bases, idx, xo, self.ridge)
        k = int(score.argmin())
        p = self.bases[k] @ w[k]
        completion = p.copy()
        completion[idx] = xo
        if idx.size > self.r:  # with m <= r the fit is exact whatever the subspace
            grouse_step(self.bases[k], idx, xo, w[k], self.eta, p=p)
            self.n_updates[k] += 1
            if self.n_updates[k] % 100 == 0:  # ridge fits leave the step slightly off-orthogonal
                self.bases[k] = orthonormalize(self.bases[k])
        return completion, k

    def subspaces(self) -> np.ndarray:
        return self.bases.copy()

    def memory_bytes(self) -> int:
        return int(self.bases.nbytes + self.n_updates.nbytes)


def kgrouse_pretrained(n: int, r: int, K: int, source: np.ndarray, eta: float = KGROUSE_ETA, seed: int = 0,
                       pretrain_restarts: int = MoSAICConfig.pretrain_restarts) -> KGrousePretrained:
    """The pretrained k-GROUSE baseline, fitted on ``source (S, n)`` (NaN = unobserved)."""
    return KGrousePretrained(n, r, K, eta=eta, seed=seed, pretrain_restarts=pretrain_restarts).fit(source)


def mosaic_no_pretrain(r: int, K: int, seed: int = 0, **kwargs) -> MoSAIC:
    """MoSAIC's online phase from random bases (the ablation "MoSAIC without pretraining"; ``n`` is
    learned from the first samples streamed)."""
    return MoSAIC(r, K, seed=seed, **kwargs)


def _complete_with(bases_per_sample: np.ndarray, X0: np.ndarray, M: np.ndarray, ridge: float) -> np.ndarray:
    """(Ridge) least-squares completion of each sample with its own basis ``(T, n, r)``."""
    Ut = bases_per_sample
    G = np.einsum("tn,tna,tnb->tab", M.astype(float), Ut, Ut) + ridge * np.eye(Ut.shape[2])
    b = np.einsum("tn,tna->ta", X0, Ut)
    w = np.linalg.solve(G, b[..., None])[..., 0]
    return np.where(M, X0, np.einsum("tna,ta->tn", Ut, w))


def offline_kss(values: np.ndarray, K: int, r: int, seed: int = 0, restarts: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Batch k-subspaces on the whole ``(T, n)`` stream; returns ``(completed, routes, bases)``."""
    M = ~np.isnan(values)
    X0 = np.where(M, values, 0.0)
    res = k_subspaces_missing(X0, M, K, r, restarts=restarts, online_passes=1, seed=seed)
    W, _ = batch_fit(res.bases, X0, M)
    est = np.einsum("tnr,tr->tn", res.bases[res.labels], W[np.arange(len(res.labels)), res.labels])
    return np.where(M, X0, est), res.labels, res.bases


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
    chunk = max(16, 4_000_000 // (bases.shape[2] * bases.shape[3]))
    for s in range(0, len(values), chunk):
        sl = slice(s, s + chunk)
        Ut = bases[epoch[sl], labels[sl]] if sample_bases is None else sample_bases[sl]
        out[sl] = _complete_with(Ut, X0[sl], M[sl], ridge)
    return out
