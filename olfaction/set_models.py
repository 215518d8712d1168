"""Distance regressors on set-level pair features (:mod:`olfaction.set_features`).

- ``kind="trees"``: extremely randomised trees (scikit-learn ``ExtraTreesRegressor``) on the RF's
  pair features ``[|m_a - m_b| ; m_a + m_b]`` ++ set features ++ dataset one-hot ++ target
  encodings;
- ``kind="ridge"``: standardised ridge regression (``RidgeCV``, alpha by its efficient
  leave-one-out on the training rows) on set features, dataset one-hot, their products (a slope per
  dataset) and target encodings.

Both are fitted on the rows they are given; the target encodings of those rows are out-of-fold.
Helpers: :func:`regressor_inputs` (both feature matrices), :func:`fit_predict_rows` (bench,
quick), :func:`evaluate_set_regressors` (``mixscent eval --set-regressors``) and
:func:`fit_predict_new_pairs` (``mixscent predict --set-regressors``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.ensemble import ExtraTreesRegressor
from sklearn.linear_model import RidgeCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from common.errors import InputError

from .baselines import molecule_table, pair_features
from .evaluate import pair_metrics
from .features import compute_mordred
from .set_features import Mixture, MoleculeSpaces, TargetEncoder, dataset_one_hot, pair_set_features

KINDS = ("trees", "ridge")


class SetFeatureRegressor:
    """Mixture-distance regressor on set-level pair features.

    ``fit(pair_X (P, 2D) | None, set_X (P, K), datasets (P,), mix_a, mix_b, y (P,))``;
    ``predict`` takes the same inputs without ``y`` and returns ``(P,)`` distances."""

    def __init__(
        self, kind: str = "trees", datasets: Sequence[str] = (), seed: int = 0, n_estimators: int = 300
    ):
        if kind not in KINDS:
            raise InputError(f"unknown set-feature regressor {kind!r} (choose from {', '.join(KINDS)})")
        self.kind, self.vocabulary, self.seed = kind, list(datasets), seed
        self.n_estimators = n_estimators

    def _design(self, pair_X, set_X, datasets, te: np.ndarray) -> np.ndarray:
        set_X = np.asarray(set_X, dtype=np.float64)
        if set_X.ndim != 2 or len(set_X) != len(te):
            raise InputError(f"set features must be (P, K) with P = {len(te)}, got {set_X.shape}")
        onehot = dataset_one_hot(list(datasets), self.vocabulary)
        if self.kind == "ridge":
            per_dataset = [set_X * onehot[:, [j]] for j in range(onehot.shape[1])]
            return np.hstack([set_X, onehot, *per_dataset, te])
        if pair_X is None:
            raise InputError("the trees regressor needs the RF pair features")
        return np.hstack([np.asarray(pair_X, dtype=np.float64), set_X, onehot, te])

    def fit(
        self, pair_X, set_X, datasets, mix_a: Sequence[Mixture], mix_b: Sequence[Mixture], y
    ) -> SetFeatureRegressor:
        y = np.asarray(y, dtype=np.float64)
        if not np.all(np.isfinite(y)):
            raise InputError("set-feature regressor: non-finite training distance")
        if not self.vocabulary:
            self.vocabulary = sorted(set(datasets))
        self.encoder_ = TargetEncoder(seed=self.seed)
        X = self._design(pair_X, set_X, datasets, self.encoder_.fit_transform(mix_a, mix_b, y))
        if not np.all(np.isfinite(X)):
            raise InputError("set-feature regressor: non-finite feature")
        if self.kind == "ridge":
            self.model_ = make_pipeline(StandardScaler(), RidgeCV(alphas=np.logspace(-2, 3, 12)))
        else:
            self.model_ = ExtraTreesRegressor(
                n_estimators=self.n_estimators,
                max_features=0.33,
                min_samples_leaf=2,
                random_state=self.seed,
                n_jobs=1,
            )
        self.model_.fit(X, y)
        return self

    def predict(
        self, pair_X, set_X, datasets, mix_a: Sequence[Mixture], mix_b: Sequence[Mixture]
    ) -> np.ndarray:
        X = self._design(pair_X, set_X, datasets, self.encoder_.transform(mix_a, mix_b))
        return self.model_.predict(X)


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
) -> np.ndarray:
    """Fit a :class:`SetFeatureRegressor` on the pairs ``fit_rows`` of the full-length inputs
    (``P`` pairs each) and return its ``(len(pred_rows),)`` predictions for ``pred_rows``."""

    def take(rows):
        return [datasets[i] for i in rows], [mix_a[i] for i in rows], [mix_b[i] for i in rows]

    model = SetFeatureRegressor(kind, vocabulary, seed=seed).fit(
        pair_X[fit_rows], set_X[fit_rows], *take(fit_rows), np.asarray(y)[fit_rows]
    )
    return model.predict(pair_X[pred_rows], set_X[pred_rows], *take(pred_rows))


def evaluate_set_regressors(
    pairs, split, seed: int = 0, others: dict[str, np.ndarray] | None = None, progress: bool = False
) -> dict[str, float]:
    """Fit both set-feature regressors on ``split``'s training + validation rows (as the bench
    does for its baselines) and score them, their equal mean and, for each ``others[name]`` (test
    predictions of another model, e.g. the network), the equal mean of all three on the test rows.
    Returns ``{"<method>/<metric>": value}`` with :func:`olfaction.evaluate.pair_metrics` keys."""
    mix_a = [pairs.mixtures[k] for k in pairs.keys_a]
    mix_b = [pairs.mixtures[k] for k in pairs.keys_b]
    pair_X, set_X = regressor_inputs(mix_a, mix_b, progress)
    fit_rows = np.concatenate([split.training, split.validation])
    te = split.testing
    vocabulary = sorted(set(pairs.dataset))
    preds = {
        kind: fit_predict_rows(
            kind, pair_X, set_X, pairs.dataset, mix_a, mix_b, pairs.y, fit_rows, te, vocabulary, seed
        )
        for kind in KINDS
    }
    preds["set_mean"] = np.mean([preds[k] for k in KINDS], axis=0)
    for name, pred in (others or {}).items():
        preds[f"{name}+set_mean"] = np.mean([preds[k] for k in KINDS] + [np.asarray(pred)], axis=0)
    out = {}
    for name, pred in preds.items():
        for key, value in pair_metrics(pairs.y[te], pred, pairs.self_pair[te]).items():
            out[f"{name}/{key}"] = value
    return out


def fit_predict_new_pairs(
    pairs, mix_a: Sequence[Mixture], mix_b: Sequence[Mixture], datasets: Sequence[str], seed: int = 0
) -> np.ndarray:
    """Both set-feature regressors fitted on every labelled pair of ``pairs`` (a few seconds, so no
    sklearn model is serialised), then the ``(Q,)`` equal mean of their predictions for the query
    pairs ``(mix_a[q], mix_b[q])`` of experiment ``datasets[q]``. The label-free descriptor scalers
    are fitted on the labelled and query molecules together; a query mixture that no labelled pair
    contains gets the prior target encoding."""
    if not len(mix_a) or len(mix_a) != len(mix_b) or len(mix_a) != len(datasets):
        raise InputError(
            "set-feature prediction needs equally many first mixtures, second mixtures and datasets (>= 1)"
        )
    vocabulary = sorted(set(pairs.dataset))
    dataset_one_hot(list(datasets), vocabulary)  # one-line error for an unknown dataset, before any work
    train_a = [pairs.mixtures[k] for k in pairs.keys_a]
    train_b = [pairs.mixtures[k] for k in pairs.keys_b]
    all_a, all_b = train_a + list(mix_a), train_b + list(mix_b)
    pair_X, set_X = regressor_inputs(all_a, all_b)
    fit_rows, query_rows = np.arange(len(train_a)), np.arange(len(train_a), len(all_a))
    all_ds = list(pairs.dataset) + list(datasets)
    y = np.concatenate([pairs.y, np.zeros(len(mix_a))])  # query rows are never fitted
    return np.mean(
        [
            fit_predict_rows(
                kind, pair_X, set_X, all_ds, all_a, all_b, y, fit_rows, query_rows, vocabulary, seed
            )
            for kind in KINDS
        ],
        axis=0,
    )
