"""Baselines for the mixture-distance task.

- :class:`PairForest`: random forest on symmetric pair features ``[|m_a - m_b| ; m_a + m_b]`` of
  mixture-mean molecule features (:func:`olfaction.set_features.pair_features`).
- :class:`PairBoosting`: histogram gradient-boosted trees on the same pair features.
- :class:`SnitzAngle`: Snitz et al. (2013) angle distance between the summed descriptor vectors
  of two mixtures, mapped to the label scale by a linear fit on the training rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

# torch only inside MultiLabelLogReg: the pair features serve the torch-free predict path


def sum_absdiff_pairs(pairs, vectors: dict[str, np.ndarray]) -> np.ndarray:
    """``(N, 2D)`` symmetric features ``[a + b ; |a - b|]`` of two-molecule pairs ``(a, b)`` from
    per-molecule vectors ``{smiles: (D,)}`` (blend pairs: Mordred or odour-profile logits)."""
    return np.stack([np.concatenate([vectors[a] + vectors[b], np.abs(vectors[a] - vectors[b])]) for a, b in pairs])


class PairForest:
    """Random forest regressor on :func:`pair_features` (scikit-learn estimator API)."""

    def __init__(self, n_estimators: int = 300, seed: int = 0, n_jobs: int = 1, max_features: float = 0.33):
        from sklearn.ensemble import RandomForestRegressor  # lazy: the predict path never fits

        self.rf = RandomForestRegressor(
            n_estimators=n_estimators,
            random_state=seed,
            n_jobs=n_jobs,
            max_features=max_features,
            min_samples_leaf=1,
        )

    def fit(self, X: np.ndarray, y: np.ndarray) -> PairForest:
        self.rf.fit(X, y)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.rf.predict(X)


class PairBoosting:
    """Histogram gradient-boosted trees (scikit-learn) on :func:`pair_features`: a fixed, small
    learning rate and number of rounds (no early stopping, so no rows are held out inside)."""

    def __init__(self, max_iter: int = 300, learning_rate: float = 0.05, seed: int = 0):
        from sklearn.ensemble import HistGradientBoostingRegressor

        self.gb = HistGradientBoostingRegressor(
            max_iter=max_iter,
            learning_rate=learning_rate,
            max_leaf_nodes=15,
            min_samples_leaf=10,
            l2_regularization=1.0,
            early_stopping=False,
            random_state=seed,
        )

    def fit(self, X: np.ndarray, y: np.ndarray) -> PairBoosting:
        self.gb.fit(X, y)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.gb.predict(X)


def angle_distance(mix_a: tuple[str, ...], mix_b: tuple[str, ...], table: dict[str, np.ndarray]) -> float:
    """Angle (radians) between the summed descriptor vectors of the two mixtures (Snitz 2013)."""
    va = np.sum([table[s] for s in mix_a], axis=0)
    vb = np.sum([table[s] for s in mix_b], axis=0)
    cos = float(va @ vb / (np.linalg.norm(va) * np.linalg.norm(vb) + 1e-12))
    return float(np.arccos(np.clip(cos, -1.0, 1.0)))


class SnitzAngle:
    """Angle distance on descriptor vectors (scaled to be non-negative, as in Snitz et al. the
    descriptors are normalised to [0, 1] over the molecule pool), linear map fitted on training
    rows so RMSE is comparable."""

    def __init__(self, table: dict[str, np.ndarray]):
        keys = sorted(table)
        mat = np.stack([table[k] for k in keys])
        lo, hi = mat.min(axis=0), mat.max(axis=0)
        span = np.where(hi - lo > 1e-12, hi - lo, 1.0)
        self.table = {k: (table[k] - lo) / span for k in keys}
        from sklearn.linear_model import LinearRegression

        self.lin = LinearRegression()

    def angles(self, mix_a, mix_b) -> np.ndarray:
        return np.array([angle_distance(a, b, self.table) for a, b in zip(mix_a, mix_b, strict=False)])[
            :, None
        ]

    def fit(self, mix_a, mix_b, y) -> SnitzAngle:
        self.lin.fit(self.angles(mix_a, mix_b), y)
        return self

    def predict(self, mix_a, mix_b) -> np.ndarray:
        return self.lin.predict(self.angles(mix_a, mix_b))


# ----------------------------------------------------------------------------- label baselines


def blend_fingerprints(pairs: list[tuple[str, ...]], table: dict[str, np.ndarray]) -> np.ndarray:
    """Order-free features of a mixture ``(P, D)``: the sum of its components' rows of ``table``
    (for the authors' Morgan baseline, the summed count fingerprints of the two molecules)."""
    return np.stack([np.sum([table[s] for s in p], axis=0) for p in pairs])


class MultiLabelLogReg:
    """L2-regularised logistic regression, one per label, fitted jointly (full-batch L-BFGS in
    torch, so 74-138 labels on 40k rows take seconds) on standardised ``log1p`` features;
    scikit-learn's objective per label, ``0.5 |w|^2 + C sum_i BCE_i``, divided by ``C n``.
    Labels without both classes in training get their constant training rate."""

    def __init__(self, C: float = 0.05, max_iter: int = 200, log1p: bool = True):
        self.C, self.max_iter, self.log1p = C, max_iter, log1p

    def _prep(self, X: np.ndarray) -> torch.Tensor:
        import torch

        X = np.log1p(np.maximum(X, 0)) if self.log1p else X
        return torch.as_tensor((X - self.mean_) / self.std_, dtype=torch.float32)

    def fit(self, X: np.ndarray, Y: np.ndarray) -> MultiLabelLogReg:
        """``X (N, D)``, ``Y (N, L)`` in {0, 1}."""
        import torch
        import torch.nn.functional as F

        Xl = np.log1p(np.maximum(X, 0)) if self.log1p else X
        self.mean_, self.std_ = Xl.mean(0), Xl.std(0) + 1e-6
        x = self._prep(X)
        y = torch.as_tensor(Y, dtype=torch.float32)
        self.const_ = Y.mean(0)
        self.active_ = (Y.sum(0) > 0) & (Y.sum(0) < len(Y))
        w = torch.zeros(x.shape[1], Y.shape[1], requires_grad=True)
        b = torch.zeros(Y.shape[1], requires_grad=True)
        opt = torch.optim.LBFGS([w, b], max_iter=self.max_iter, line_search_fn="strong_wolfe")
        penalty = 1.0 / (2.0 * self.C * len(Y))

        def closure():
            opt.zero_grad()
            bce = F.binary_cross_entropy_with_logits(x @ w + b, y, reduction="none").mean(0)
            loss = (bce + penalty * (w**2).sum(0)).sum()
            loss.backward()
            return loss

        opt.step(closure)
        self.w_, self.b_ = w.detach(), b.detach()
        return self

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """``(N, L)`` probabilities."""
        import torch

        with torch.no_grad():
            p = torch.sigmoid(self._prep(X) @ self.w_ + self.b_).numpy().astype(np.float64)
        p[:, ~self.active_] = self.const_[~self.active_]
        return p
