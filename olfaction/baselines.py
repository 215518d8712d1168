"""Baselines for the mixture-distance task.

- :class:`PairForest`: random forest on symmetric pair features ``[|m_a - m_b| ; m_a + m_b]`` of
  mixture-mean molecule features (:func:`olfaction.set_features.pair_features`).
- :class:`SnitzAngle`: Snitz et al. (2013) angle distance between the summed descriptor vectors
  of two mixtures, mapped to the label scale by a linear fit on the training rows.
"""

from __future__ import annotations

import numpy as np


class PairForest:
    """Random forest regressor on :func:`olfaction.set_features.pair_features` (scikit-learn estimator API)."""

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
