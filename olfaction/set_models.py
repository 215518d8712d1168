"""Distance regressors on set-level pair features (:mod:`olfaction.set_features`).

- ``kind="trees"``: extremely randomised trees (scikit-learn ``ExtraTreesRegressor``) on the RF's
  pair features ``[|m_a - m_b| ; m_a + m_b]`` ++ set features ++ dataset one-hot
  (:func:`olfaction.data.dataset_one_hot`: the experiments differ in protocol and scale) ++ target
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
The product fits both kinds through :class:`SetRegressors` (saved as arrays, nothing refitted at
prediction).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from common.errors import InputError

from .data import dataset_one_hot
from .features import compute_mordred, molecule_table
from .set_features import (
    Mixture,
    MoleculeSpaces,
    TargetEncoder,
    pair_features,
    pair_set_features,
)

KINDS = ("trees", "ridge")
PARTNER_MODES = ("off", "on", "gated")
# the mode of the shipped predictor: chosen on validation rows
# (`python -m experiments.olfaction.validation_choice`), where gated beat off on both split families
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
        # scikit-learn only where a model is fitted: prediction runs on saved arrays without it
        from sklearn.ensemble import ExtraTreesRegressor
        from sklearn.linear_model import RidgeCV
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

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


# ----------------------------------------------------------------------------- saved form
# The fitted regressors are stored as plain arrays (no pickle): a forest as its trees' node tables,
# a ridge pipeline as its standardisation and coefficients. Prediction from the arrays equals
# scikit-learn's (tests/olfaction/test_predictor.py checks it against the fitted estimators).


def forest_arrays(forest) -> dict[str, np.ndarray]:
    """Node tables of a fitted single-output ``ExtraTreesRegressor``, all trees concatenated: ``left``/``right``
    (global child index, -1 at a leaf), ``feature``, ``threshold``, ``value`` (``(N_nodes,)``)
    and ``roots`` (``(T,)`` first node of each tree)."""
    parts: dict[str, list] = {"left": [], "right": [], "feature": [], "threshold": [], "value": [], "roots": []}
    offset = 0
    for est in forest.estimators_:
        t = est.tree_
        leaf = t.children_left < 0
        parts["roots"].append(np.array([offset]))
        parts["left"].append(np.where(leaf, -1, t.children_left + offset))
        parts["right"].append(np.where(leaf, -1, t.children_right + offset))
        parts["feature"].append(np.where(leaf, 0, t.feature))
        parts["threshold"].append(t.threshold)
        parts["value"].append(t.value[:, 0, 0])
        offset += t.node_count
    out = {k: np.concatenate(v) for k, v in parts.items()}
    for k in ("left", "right", "feature", "roots"):
        out[k] = out[k].astype(np.int32)  # node and feature indices: int32 halves the checkpoint's trees
    for k in ("threshold", "value"):
        out[k] = out[k].astype(np.float64)
    return out


def predict_forest_arrays(arrays: dict[str, np.ndarray], X: np.ndarray) -> np.ndarray:
    """``(P,)`` mean over trees of the leaf values reached by the rows of ``X (P, F)``; rows are
    compared in float32, as scikit-learn's trees do."""
    X = np.asarray(X, dtype=np.float32).astype(np.float64)
    left, right, feature, threshold = arrays["left"], arrays["right"], arrays["feature"], arrays["threshold"]
    node = np.repeat(arrays["roots"][:, None], len(X), axis=1)  # (T, P)
    rows = np.arange(len(X))[None, :]
    while True:
        inner = left[node] >= 0
        if not inner.any():
            break
        go_left = X[rows, feature[node]] <= threshold[node]
        node = np.where(inner, np.where(go_left, left[node], right[node]), node)
    return arrays["value"][node].mean(axis=0)


def ridge_arrays(pipeline) -> dict[str, np.ndarray]:
    """``mean``, ``scale``, ``coef`` (``(F,)``) and ``intercept`` (``(1,)``) of a fitted
    ``StandardScaler`` + ``RidgeCV`` pipeline."""
    scaler, ridge = pipeline[0], pipeline[-1]
    return {
        "mean": np.asarray(scaler.mean_, np.float64),
        "scale": np.asarray(scaler.scale_, np.float64),
        "coef": np.asarray(ridge.coef_, np.float64),
        "intercept": np.atleast_1d(np.asarray(ridge.intercept_, np.float64)),
    }


def predict_ridge_arrays(arrays: dict[str, np.ndarray], X: np.ndarray) -> np.ndarray:
    """``(P,)`` ``((X - mean) / scale) @ coef + intercept``."""
    z = (np.asarray(X, np.float64) - arrays["mean"]) / arrays["scale"]
    return z @ arrays["coef"] + arrays["intercept"][0]


class SetRegressors:
    """Both set-feature regressors (trees and ridge, :data:`PARTNER_MODES` ``partners``) fitted on
    labelled pairs, with everything prediction needs and nothing refitted there: the
    label-free molecule scalers of the set features (fitted on the training molecules), the raw
    Mordred rows of the training molecules (so prediction computes descriptors only for molecules
    it has not seen), the dataset vocabulary, the training pairs of the target encodings, and the
    fitted models as arrays (:meth:`arrays` / :meth:`state`, :meth:`from_saved`).

    ``fit(mix_a, mix_b, datasets, y)`` on ``P`` pairs; ``predict(mix_a, mix_b, datasets)`` ->
    ``{"trees": (Q,), "ridge": (Q,)}``."""

    def __init__(self, seed: int = 0, n_estimators: int = 300, partners: str = DEFAULT_PARTNERS):
        self.seed, self.n_estimators, self.partners = seed, n_estimators, partner_mode(partners)

    def _mordred(self, mols: Sequence[str]) -> dict[str, np.ndarray]:
        """Raw Mordred rows: the saved ones, the rest from the cache (computed where missing)."""
        known = getattr(self, "mordred_", {})
        new = [s for s in mols if s not in known]
        return {**(compute_mordred(new, progress=False) if new else {}), **{s: known[s] for s in mols if s in known}}

    def _inputs(self, mix_a, mix_b, scalers=None):
        mols = sorted({s for m in list(mix_a) + list(mix_b) for s in m})
        mordred = self._mordred(mols)
        spaces = MoleculeSpaces(mols, mordred=mordred, scalers=scalers)
        pair_X = pair_features(mix_a, mix_b, molecule_table(mols))
        return pair_X, pair_set_features(mix_a, mix_b, spaces), spaces, mordred

    def fit(self, mix_a, mix_b, datasets, y, vocabulary: Sequence[str] | None = None) -> SetRegressors:
        """``vocabulary``: the experiments a pair may name (default: those of the training pairs);
        one the training pairs lack gets an all-zero dataset column in training."""
        mix_a, mix_b = [tuple(m) for m in mix_a], [tuple(m) for m in mix_b]
        self.mordred_ = {}
        pair_X, set_X, spaces, self.mordred_ = self._inputs(mix_a, mix_b)
        self.scalers_ = spaces.scalers
        self.vocabulary_ = sorted(set(vocabulary or ()) | set(datasets))
        self.train_ = (mix_a, mix_b, np.asarray(y, np.float64))
        self.models_ = {
            kind: SetFeatureRegressor(kind, self.vocabulary_, self.seed, self.n_estimators, self.partners).fit(
                pair_X, set_X, datasets, mix_a, mix_b, y
            )
            for kind in KINDS
        }
        self._arrays = self._to_arrays()
        return self

    def _to_arrays(self) -> dict[str, dict[str, np.ndarray]]:
        out = {}
        for kind, reg in self.models_.items():
            to = forest_arrays if kind == "trees" else ridge_arrays
            out[f"{kind}/plain"] = to(reg.model_)
            if self.partners == "gated":
                out[f"{kind}/partner"] = to(reg.partner_model_)
        return out

    def predict(self, mix_a, mix_b, datasets) -> dict[str, np.ndarray]:
        if not len(mix_a) or len(mix_a) != len(mix_b) or len(mix_a) != len(datasets):
            raise InputError("set-feature prediction needs equally many first and second mixtures and datasets (>= 1)")
        dataset_one_hot(list(datasets), self.vocabulary_)  # one-line error for an unknown dataset
        mix_a, mix_b = [tuple(m) for m in mix_a], [tuple(m) for m in mix_b]
        pair_X, set_X, _, _ = self._inputs(mix_a, mix_b, self.scalers_)
        out = {}
        for kind, reg in self.models_.items():
            te = reg.encoder_.transform(mix_a, mix_b)
            run = predict_forest_arrays if kind == "trees" else predict_ridge_arrays
            pred = run(self._arrays[f"{kind}/plain"], reg._design(pair_X, set_X, datasets, reg._main_encodings(te)))
            if self.partners == "gated":
                gate = te[:, -1] > 0  # has_partner
                if gate.any():
                    full = run(self._arrays[f"{kind}/partner"], reg._design(pair_X, set_X, datasets, te))
                    pred = np.where(gate, full, pred)
            out[kind] = pred
        return out

    # -- saved form: arrays (safetensors) + a JSON state
    def arrays(self) -> dict[str, np.ndarray]:
        """``{"<kind>/<plain|partner>/<name>": array}`` of the fitted models and
        ``"mordred/values"``, ``"mordred/missing"`` ``(N, D)``: the raw Mordred rows of the training
        molecules (NaN as 0 plus a mask)."""
        out = {f"{model}/{name}": a for model, arrs in self._arrays.items() for name, a in arrs.items()}
        values = np.stack([self.mordred_[s] for s in sorted(self.mordred_)]).astype(np.float32)
        # NaN (a failed descriptor) travels as a mask: saved tensors stay comparable
        out["mordred/values"], out["mordred/missing"] = np.nan_to_num(values, nan=0.0), np.isnan(values).astype(np.uint8)
        return out

    def state(self) -> dict:
        mix_a, mix_b, y = self.train_
        return {
            "seed": self.seed,
            "n_estimators": self.n_estimators,
            "partners": self.partners,
            "vocabulary": self.vocabulary_,
            "scalers": {k: v.to_dict() for k, v in self.scalers_.items()},
            "train_pairs": [[list(a), list(b), float(t)] for a, b, t in zip(mix_a, mix_b, y, strict=True)],
            "mordred_smiles": sorted(self.mordred_),
        }

    @classmethod
    def from_saved(cls, state: dict, arrays: dict[str, np.ndarray]) -> SetRegressors:
        """Rebuild from :meth:`state` and :meth:`arrays`: the target encoders re-count the stored
        training pairs (sums and counts, no model is fitted)."""
        from .features import DescriptorScaler

        self = cls(state["seed"], state["n_estimators"], state["partners"])
        self.vocabulary_ = list(state["vocabulary"])
        self.scalers_ = {k: DescriptorScaler.from_dict(v) for k, v in state["scalers"].items()}
        pairs = state["train_pairs"]
        mix_a, mix_b = [tuple(p[0]) for p in pairs], [tuple(p[1]) for p in pairs]
        y = np.asarray([p[2] for p in pairs], np.float64)
        self.train_ = (mix_a, mix_b, y)
        self.models_ = {}
        for kind in KINDS:
            reg = SetFeatureRegressor(kind, self.vocabulary_, self.seed, self.n_estimators, self.partners)
            reg.encoder_ = TargetEncoder(seed=self.seed, partners=self.partners != "off").fit(mix_a, mix_b, y)
            self.models_[kind] = reg
        self._arrays = {}
        arrays = dict(arrays)
        values = np.array(arrays.pop("mordred/values", np.zeros((0, 0))), np.float32)
        values[np.asarray(arrays.pop("mordred/missing", np.zeros(values.shape)), bool)] = np.nan
        self.mordred_ = dict(zip(state.get("mordred_smiles", []), np.asarray(values, np.float32), strict=True))
        for key, a in arrays.items():
            kind, part, name = key.split("/")
            self._arrays.setdefault(f"{kind}/{part}", {})[name] = np.asarray(a)
        return self
