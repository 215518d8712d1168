"""GS-LF odour transfer for blend pairs: a single-molecule odour predictor (138 GS-LF
descriptors) turns each blend molecule into a predicted odour profile, and the pair model works on
those profiles instead of raw descriptors.

Leakage rules (:func:`odour_profiles`): GS-LF molecules that are (up to stereo) excluded molecules,
i.e. the blend split's test molecules, never enter any fit, so a test molecule's profile is a true
out-of-sample prediction. Every other GS-LF molecule gets a cross-fitted profile (predicted by the
fold model that did not see it), so training-side and test-side profiles come from the same
out-of-sample distribution; molecules outside the fitting pool get the mean of the fold models.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
from rdkit import Chem

from common.errors import InputError
from experiments.olfaction.blends import MultiLabelLogReg
from olfaction.data import LabelData
from olfaction.features import morgan_counts
from olfaction.molecules import molecule_features


def stereo_free(smiles: str) -> str:
    """Canonical SMILES without stereo marks (a GS-LF row and a blend molecule that differ only in
    stereo are the same molecule for the leakage rule)."""
    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        raise InputError(f"invalid SMILES {smiles!r} in the odour-transfer molecules")
    return Chem.MolToSmiles(mol, isomericSmiles=False)


def transfer_inputs(smiles: Sequence[str]) -> dict[str, np.ndarray]:
    """``{smiles: (D,)}`` inputs of the single-molecule odour predictor: cleaned Mordred (scaler
    fitted on exactly ``smiles``, label-free) ++ log1p Morgan counts (2048 bits)."""
    smiles = list(dict.fromkeys(smiles))
    mord = molecule_features(smiles, "mordred")
    return {s: np.concatenate([mord[s], np.log1p(morgan_counts(s, 2048))]).astype(np.float32) for s in smiles}


def odour_profiles(
    gslf: LabelData,
    molecules: Sequence[str],
    exclude: Collection[str],
    inputs: dict[str, np.ndarray],
    folds: int = 5,
    seed: int = 0,
    C: float = 0.05,
) -> dict[str, np.ndarray]:
    """``{molecule: (L_gslf,)}`` predicted GS-LF odour logits for every molecule of ``molecules``.

    ``inputs`` maps every GS-LF and blend molecule to its predictor input (:func:`transfer_inputs`).
    The fitting pool is GS-LF minus ``exclude`` (compared stereo-free); it is split into ``folds``
    seeded folds, one :class:`~olfaction.baselines.MultiLabelLogReg` per fold is fitted on the
    other folds; pool molecules get their own fold's prediction, all others the fold mean."""
    if folds < 2:
        raise InputError(f"odour transfer needs folds >= 2, got {folds}")
    banned = {stereo_free(s) for s in exclude}
    free = [stereo_free(s) for s in gslf.smiles]
    pool = [i for i, f in enumerate(free) if f not in banned]
    if len(pool) < folds:
        raise InputError(f"odour transfer: only {len(pool)} GS-LF molecules left after the exclusion")
    missing = [s for s in list(molecules) + [gslf.smiles[i] for i in pool] if s not in inputs]
    if missing:
        raise InputError(f"odour transfer: no predictor input for molecule {missing[0]!r}")
    rng = np.random.default_rng(seed)
    fold_of = np.empty(len(pool), dtype=np.int64)
    fold_of[rng.permutation(len(pool))] = np.arange(len(pool)) % folds
    X_pool = np.stack([inputs[gslf.smiles[i]] for i in pool])
    Y_pool = gslf.y[pool]
    own = {free[i]: k for i, k in zip(pool, fold_of, strict=True)}
    targets = list(dict.fromkeys(molecules))
    X_t = np.stack([inputs[s] for s in targets])
    fold_preds = []
    for k in range(folds):
        fit = fold_of != k
        model = MultiLabelLogReg(C=C, log1p=False).fit(X_pool[fit], Y_pool[fit])
        fold_preds.append(model.predict_proba(X_t))
    stacked = np.stack(fold_preds)  # (folds, n_targets, L)
    out = {}
    for j, s in enumerate(targets):
        k = own.get(stereo_free(s))
        p = stacked[k, j] if k is not None else stacked[:, j].mean(0)
        p = np.clip(p, 1e-4, 1 - 1e-4)
        out[s] = np.log(p / (1 - p)).astype(np.float32)
    return out

