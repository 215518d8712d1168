"""Distance regressors on set-level pair features (:mod:`olfaction.set_features`).

- ``kind="trees"``: extremely randomised trees (scikit-learn ``ExtraTreesRegressor``) on the RF's
  pair features ``[|m_a - m_b| ; m_a + m_b]`` ++ set features ++ dataset one-hot ++ target
  encodings;
- ``kind="ridge"``: standardised ridge regression (``RidgeCV``, alpha by its efficient
  leave-one-out on the training rows) on set features, dataset one-hot, their products (a slope per
  dataset) and target encodings.

Both are fitted on the rows they are given; the target encodings of those rows are out-of-fold.
``partners`` adds the common-partner features of :class:`olfaction.set_features.TargetEncoder`:
``"on"`` for every row, ``"gated"`` through a second model that predicts only the pairs whose two
mixtures have a common training partner (the rest get the plain model's prediction). Gating keeps
pairs of never-measured mixtures (leave-molecules-out test rows) on the model whose training rows
looked like them.
Helpers: :func:`regressor_inputs` (both feature matrices), :func:`fit_predict_rows` (bench),
:func:`fit_predict_set_mean` (the equal mean of both kinds: quick, the lso ceiling script),
:func:`evaluate_set_regressors` (``mixscent eval --set-regressors``) and
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
PARTNER_MODES = ("off", "on", "gated")
# the mode of `mixscent eval/predict --set-regressors` and `mixscent quick`: chosen on validation
# rows (olfaction/README.md, session 14), where gated beat off on both split families
DEFAULT_PARTNERS = "gated"


def partner_mode(mode: str) -> str:
    """``mode``, checked against :data:`PARTNER_MODES` (one-line error otherwise)."""
    if mode not in PARTNER_MODES:
        raise InputError(f"unknown partner mode {mode!r} (choose from {', '.join(PARTNER_MODES)})")
    return mode


class SetFeatureRegressor:
    """Mixture-distance regressor on set-level pair features.

    ``fit(pair_X (P, 2D) | None, set_X (P, K), datasets (P,), mix_a, mix_b, y (P,))``;
    ``predict`` takes the same inputs without ``y`` and returns ``(P,)`` distances. ``partners``:
    one of :data:`PARTNER_MODES` (module docstring)."""

    def __init__(
        self,
        kind: str = "trees",
        datasets: Sequence[str] = (),
        seed: int = 0,
        n_estimators: int = 300,
        partners: str = "off",
    ):
        if kind not in KINDS:
            raise InputError(f"unknown set-feature regressor {kind!r} (choose from {', '.join(KINDS)})")
        self.kind, self.vocabulary, self.seed = kind, list(datasets), seed
        self.n_estimators, self.partners = n_estimators, partner_mode(partners)

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
        self.encoder_ = TargetEncoder(seed=self.seed, partners=self.partners != "off")
        te = self.encoder_.fit_transform(mix_a, mix_b, y)
        X = self._design(pair_X, set_X, datasets, self._main_encodings(te))
        if not np.all(np.isfinite(X)):
            raise InputError("set-feature regressor: non-finite feature")
        self.model_ = self._new_model().fit(X, y)
        if self.partners == "gated":
            self.partner_model_ = self._new_model().fit(self._design(pair_X, set_X, datasets, te), y)
        return self

    def _main_encodings(self, te: np.ndarray) -> np.ndarray:
        """The encodings ``model_`` reads: all of them with ``partners="on"``, else the plain five
        (with ``"gated"`` the partner columns go to ``partner_model_`` only)."""
        return te if self.partners == "on" else te[:, : TargetEncoder.BASE_FEATURES]

    def _new_model(self):
        if self.kind == "ridge":
            return make_pipeline(StandardScaler(), RidgeCV(alphas=np.logspace(-2, 3, 12)))
        return ExtraTreesRegressor(
            n_estimators=self.n_estimators,
            max_features=0.33,
            min_samples_leaf=2,
            random_state=self.seed,
            n_jobs=1,
        )

    def predict(
        self, pair_X, set_X, datasets, mix_a: Sequence[Mixture], mix_b: Sequence[Mixture]
    ) -> np.ndarray:
        te = self.encoder_.transform(mix_a, mix_b)
        pred = self.model_.predict(self._design(pair_X, set_X, datasets, self._main_encodings(te)))
        if self.partners == "gated":
            gate = te[:, -1] > 0  # has_partner
            if gate.any():
                full = self.partner_model_.predict(self._design(pair_X, set_X, datasets, te))
                pred = np.where(gate, full, pred)
        return pred


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
    ``kind``): the bench's "Set trees + ridge (equal)" row (which the bench forms from its per-kind
    predictions), as quick, ``predict --set-regressors`` and the lso ceiling script fit it."""
    return np.mean([fit_predict_rows(kind, *args, **kwargs) for kind in KINDS], axis=0)


def evaluate_set_regressors(
    pairs,
    split,
    seed: int = 0,
    others: dict[str, np.ndarray] | None = None,
    progress: bool = False,
    partners: str = DEFAULT_PARTNERS,
) -> dict[str, float]:
    """Fit both set-feature regressors on ``split``'s training + validation rows (as the bench
    does for its baselines) and score them, their equal mean and, for each ``others[name]`` (test
    predictions of another model, e.g. the network), the equal mean of all three on the test rows.
    Returns ``{"<method>/<metric>": value}`` with :func:`olfaction.evaluate.pair_metrics` keys."""
    mix_a, mix_b = pairs.sides()
    pair_X, set_X = regressor_inputs(mix_a, mix_b, progress)
    fit_rows = np.concatenate([split.training, split.validation])
    te = split.testing
    vocabulary = sorted(set(pairs.dataset))
    preds = {
        kind: fit_predict_rows(
            kind, pair_X, set_X, pairs.dataset, mix_a, mix_b, pairs.y, fit_rows, te, vocabulary, seed, partners
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
    pairs,
    mix_a: Sequence[Mixture],
    mix_b: Sequence[Mixture],
    datasets: Sequence[str],
    seed: int = 0,
    partners: str = DEFAULT_PARTNERS,
) -> np.ndarray:
    """Both set-feature regressors fitted on every labelled pair of ``pairs`` (a few seconds, so no
    sklearn model is serialised), then the ``(Q,)`` equal mean of their predictions for the query
    pairs ``(mix_a[q], mix_b[q])`` of experiment ``datasets[q]``. The label-free descriptor scalers
    are fitted on the labelled and query molecules together; a query mixture that no labelled pair
    contains gets the prior target encoding, and a query pair whose mixtures were both measured
    against a common third one goes through the partner-aware models (``partners``)."""
    if not len(mix_a) or len(mix_a) != len(mix_b) or len(mix_a) != len(datasets):
        raise InputError(
            "set-feature prediction needs equally many first mixtures, second mixtures and datasets (>= 1)"
        )
    vocabulary = sorted(set(pairs.dataset))
    dataset_one_hot(list(datasets), vocabulary)  # one-line error for an unknown dataset, before any work
    train_a, train_b = pairs.sides()
    all_a, all_b = train_a + list(mix_a), train_b + list(mix_b)
    pair_X, set_X = regressor_inputs(all_a, all_b)
    fit_rows, query_rows = np.arange(len(train_a)), np.arange(len(train_a), len(all_a))
    all_ds = list(pairs.dataset) + list(datasets)
    y = np.concatenate([pairs.y, np.zeros(len(mix_a))])  # query rows are never fitted
    return fit_predict_set_mean(
        pair_X, set_X, all_ds, all_a, all_b, y, fit_rows, query_rows, vocabulary, seed, partners
    )
