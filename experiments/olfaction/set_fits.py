"""Set-feature regressors (:class:`olfaction.set_models.SetFeatureRegressor`) fitted on chosen rows
of the full pair table, as the research scripts fit them (``variant_bench``, ``lso_ceiling``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from olfaction.features import compute_mordred, molecule_table
from olfaction.set_features import Mixture, MoleculeSpaces, pair_features, pair_set_features
from olfaction.set_models import KINDS, SetFeatureRegressor


def regressor_inputs(
    mix_a: Sequence[Mixture], mix_b: Sequence[Mixture], progress: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """``(pair_X (P, 2D), set_X (P, K))`` of ``P`` pairs: the RF's pair features and the set
    features, with the label-free descriptor scalers fitted on exactly these pairs' molecules
    (Mordred from the cache, computed where missing)."""
    mols = sorted({s for m in list(mix_a) + list(mix_b) for s in m})
    spaces = MoleculeSpaces(mols, mordred=compute_mordred(mols, progress=progress))
    return pair_features(mix_a, mix_b, molecule_table(mols)), pair_set_features(mix_a, mix_b, spaces)


def fit_predict_rows(
    kind: str,
    pair_X: np.ndarray,
    set_X: np.ndarray,
    datasets: Sequence[str],
    mix_a: Sequence[Mixture],
    mix_b: Sequence[Mixture],
    y: np.ndarray,
    fit_rows: np.ndarray,
    pred_rows: np.ndarray,
    vocabulary: Sequence[str] = (),
    seed: int = 0,
    partners: str = "off",
) -> np.ndarray:
    """Fit a :class:`SetFeatureRegressor` on the pairs ``fit_rows`` of the full-length inputs
    (``P`` pairs each) and return its ``(len(pred_rows),)`` predictions for ``pred_rows``."""

    def take(rows):
        return [datasets[i] for i in rows], [mix_a[i] for i in rows], [mix_b[i] for i in rows]

    model = SetFeatureRegressor(kind, vocabulary, seed=seed, partners=partners).fit(
        pair_X[fit_rows], set_X[fit_rows], *take(fit_rows), np.asarray(y)[fit_rows]
    )
    return model.predict(pair_X[pred_rows], set_X[pred_rows], *take(pred_rows))


def fit_predict_set_mean(*args, **kwargs) -> np.ndarray:
    """The equal mean over :data:`KINDS` of :func:`fit_predict_rows` (same arguments after
    ``kind``), as the lso ceiling script fits it."""
    return np.mean([fit_predict_rows(kind, *args, **kwargs) for kind in KINDS], axis=0)
