"""Torch-free prediction with a saved :class:`~olfaction.predictor.MixturePredictor`: what
``mixscent predict`` runs when the model folder holds the ONNX export of its networks.

``MixturePredictor.save_pretrained`` writes, beside ``model.safetensors`` and ``config.json``,
``distance_net.onnx`` (the MixScentNet: molecule GNN encoder, GATv2 mixture graph, readout and
distance head), ``label_net.onnx`` (the label network, when the predictor has one) and
``onnx.json`` (the files and the ``weights_id`` of the save they belong to;
:mod:`olfaction.onnx_export`). :class:`OnnxPredictor` reads that folder with numpy, RDKit,
onnxruntime and safetensors' numpy API only: the networks run in onnxruntime, the set regressors
from their stored arrays (:class:`olfaction.set_models.SetRegressors`, no scikit-learn), the atom
graphs come from :func:`olfaction.features.batch_graph_arrays` (the featuriser of the torch path
too). Nothing imports torch, PyG, scikit-learn, Lightning or Mordred, so a one-pair call starts in
well under a second (``docs/results/olfaction/predict_latency.json``).

Mordred descriptors (the set regressors' input; the network does not read them) of the training
molecules are saved with the model; a molecule the model has not seen takes its row from the
Mordred cache or has it computed (Mordred is imported then: seconds), with a note on stderr.

:class:`MixtureAPI` holds the prediction methods both predictors share (the combination of the
parts, the label ranking), so the two paths cannot drift apart.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from common.errors import CheckpointError, InputError

from .data import dataset_one_hot, validate_mixture
from .features import batch_graph_arrays, morgan_counts

COMPONENTS = ("network", "trees", "ridge")
LABEL_BITS = 2048
LABEL_FEATURES = ("morgan", "minimol", "morgan+minimol")

MANIFEST = "onnx.json"  # {"weights_id", "opset", "files": {"distance": ..., "labels": ...}}
DISTANCE_FILE = "distance_net.onnx"
LABEL_FILE = "label_net.onnx"
# Inputs of distance_net.onnx (U molecules, N atoms, E directed bonds, C component slots of M
# mixtures, P pairs); every first axis is dynamic. mol_ids / mix_ids only carry the sizes U / M.
# Optional after them: mol_extra (with MiniMol), dataset_onehot (with cfg.n_datasets).
DISTANCE_INPUTS = ("atom_x", "edge_index", "edge_attr", "atom_mol", "mol_ids", "comp", "comp_batch", "mix_ids",
                   "pair_a", "pair_b")
LABEL_INPUTS = ("mol_x", "comp", "comp_batch", "mix_ids")


def label_features(smiles: Sequence[str], kind: str = "morgan") -> dict[str, np.ndarray]:
    """``{smiles: (d,)}`` float32 molecule inputs of the label network: ``morgan`` = log1p Morgan
    counts (radius 2, ``d = LABEL_BITS``), ``minimol`` = MiniMol v1 embeddings (``d = 512``,
    :mod:`olfaction.minimol`, cached on disk), ``morgan+minimol`` = both concatenated."""
    if kind not in LABEL_FEATURES:
        raise InputError(f"unknown label features {kind!r} (choose from {', '.join(LABEL_FEATURES)})")
    smiles = list(dict.fromkeys(smiles))
    parts = []
    if "morgan" in kind:
        parts.append(np.stack([np.log1p(morgan_counts(s, LABEL_BITS)) for s in smiles]))
    if "minimol" in kind:
        from .minimol import minimol_table

        table = minimol_table(smiles)
        parts.append(np.stack([table[s] for s in smiles]))
    x = np.concatenate(parts, axis=1).astype(np.float32)
    return {s: x[i] for i, s in enumerate(smiles)}


def standardised_minimol(mols: Sequence[str], mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """``(U, 512)`` float32 MiniMol v1 rows of ``mols`` z-scored with the model's ``mean``/``std``
    (the distance network's extra molecule input of a ``minimol`` predictor)."""
    from .minimol import minimol_table

    raw = minimol_table(mols)
    return ((np.stack([raw[s] for s in mols]) - mean) / std).astype(np.float32)


def _mixture_slots(mixtures: Sequence[Sequence[str]]) -> tuple[list[str], dict[str, np.ndarray]]:
    """The sorted unique molecules ``mols (U,)`` of ``M`` mixtures and their component slots:
    ``{comp (C,), comp_batch (C,), mix_ids (M,)}`` (``comp[i]``: the molecule of slot ``i``,
    ``comp_batch[i]``: its mixture), the part both networks' inputs share."""
    mols = sorted({s for m in mixtures for s in m})
    pos = {s: i for i, s in enumerate(mols)}
    return mols, {
        "comp": np.asarray([pos[s] for m in mixtures for s in m], np.int64),
        "comp_batch": np.repeat(np.arange(len(mixtures), dtype=np.int64), [len(m) for m in mixtures]),
        "mix_ids": np.arange(len(mixtures), dtype=np.int64),
    }


def fit_minimol_scale(mols: Sequence[str]) -> tuple[tuple[np.ndarray, np.ndarray], dict[str, np.ndarray]]:
    """The z-scoring of MiniMol v1 rows fitted on ``mols`` (label-free: a predictor's pair molecules):
    ``((mean (512,), std (512,)), {smiles: standardised row (512,)})`` (std floored at 1e-6)."""
    from .minimol import minimol_table

    table = minimol_table(mols)
    raw = np.stack([table[s] for s in mols])
    scale = (raw.mean(0), np.maximum(raw.std(0), 1e-6))
    return scale, dict(zip(mols, standardised_minimol(mols, *scale), strict=True))


def mixture_inputs(mixtures: Sequence[Sequence[str]], mol_extra=None) -> tuple[list[str], dict[str, np.ndarray]]:
    """The network inputs of ``M`` mixtures of canonical SMILES: the sorted unique molecules
    ``mols (U,)`` and ``{atom_x (N, ATOM_DIM), edge_index (2, E), edge_attr (E, BOND_DIM),
    atom_mol (N,), mol_ids (U,), comp (C,), comp_batch (C,), mix_ids (M,)}`` (``comp[i]``: the
    molecule of component slot ``i``, ``comp_batch[i]``: its mixture), plus ``mol_extra (U, k)``
    when ``mol_extra(mols)`` is given. The torch path (:func:`olfaction.predictor.embed_mixtures`)
    and the ONNX path read these same arrays."""
    mols, slots = _mixture_slots(mixtures)
    feeds = batch_graph_arrays(mols)
    feeds["mol_ids"] = np.arange(len(mols), dtype=np.int64)
    feeds.update(slots)
    if mol_extra is not None:
        feeds["mol_extra"] = np.asarray(mol_extra(mols), np.float32)
    return mols, feeds


def label_inputs(mixtures: Sequence[Sequence[str]], kind: str) -> dict[str, np.ndarray]:
    """The label network's inputs of ``M`` mixtures: ``{mol_x (U, d), comp (C,), comp_batch (C,),
    mix_ids (M,)}`` (:func:`label_features` of kind ``kind``)."""
    mols, slots = _mixture_slots(mixtures)
    feats = label_features(mols, kind)
    return {"mol_x": np.stack([feats[s] for s in mols]), **slots}


def onnx_session(model, threads: int = 1):
    """An onnxruntime CPU session of ``model`` (a path or the bytes of an ONNX file) as the
    predictor runs it: graph optimisations off (they cost more start time than the small graphs
    gain; the plain graph is op by op torch's), ``threads`` threads, warnings of the exported
    graph's shape inference silenced."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = threads
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(model if isinstance(model, bytes) else str(model), options,
                                providers=["CPUExecutionProvider"])


def unique_mixtures(mixtures: Sequence[Sequence[str]]) -> tuple[list[tuple[str, ...]], np.ndarray]:
    """``(unique, pos)``: the distinct mixtures in first-seen order and ``pos (M,)`` with
    ``mixtures[i] == unique[pos[i]]`` (a mixture's embedding does not depend on the others in its
    batch, so each distinct one is embedded once)."""
    index: dict[tuple[str, ...], int] = {}
    pos = np.asarray([index.setdefault(tuple(m), len(index)) for m in mixtures], np.int64)
    return list(index), pos


def batches(n: int, size: int) -> list[slice]:
    """Slices ``[0, size), [size, 2 size), ...`` covering ``range(n)``."""
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


class MixtureAPI:
    """Prediction methods shared by :class:`~olfaction.predictor.MixturePredictor` (torch) and
    :class:`OnnxPredictor`. A subclass provides ``_network_distances(mix_a, mix_b, datasets) ->
    (P,)``, ``_label_probabilities(mixtures) -> (M, L)`` (validated mixtures) and the attributes
    ``set_regressors``, ``weights (3,)`` (of :data:`COMPONENTS`) and ``label_names``.

    Both paths work in batches of :attr:`pair_batch` pairs / :attr:`mixture_batch` mixtures, so
    memory stays bounded however many rows are passed (the results do not depend on the batching:
    every pair and mixture is computed on its own)."""

    pair_batch = 256
    mixture_batch = 512

    def _need(self, part: str):
        value = getattr(self, part)
        if value is None:
            what = "label network (train with GS-LF labels)" if part == "label_net" else "fitted predictor"
            raise InputError(f"this model has no {what}")
        return value

    def predict_components(self, mix_a, mix_b, datasets) -> dict[str, np.ndarray]:
        """``{"network", "trees", "ridge", "combined"}`` each ``(P,)`` for pairs of validated
        canonical component tuples ``mix_a[i], mix_b[i]`` of experiment ``datasets[i]``, in batches
        of :attr:`pair_batch` pairs."""
        mix_a, mix_b, datasets = list(mix_a), list(mix_b), list(datasets)
        parts = [self._components_batch(mix_a[b], mix_b[b], datasets[b]) for b in batches(len(mix_a), self.pair_batch)]
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else {}

    def _components_batch(self, mix_a, mix_b, datasets) -> dict[str, np.ndarray]:
        out = {"network": self._network_distances(mix_a, mix_b, datasets)}
        if self.set_regressors is not None:
            out.update(self.set_regressors.predict(mix_a, mix_b, datasets))
            out["combined"] = np.stack([out[c] for c in COMPONENTS], axis=1) @ self.weights
        else:
            out["combined"] = out["network"]
        return out

    def predict_labels(self, mixtures: Sequence[Sequence[str]]) -> np.ndarray:
        """``(M, L)`` odour-label probabilities (:attr:`label_names`) of ``M`` mixtures, in batches
        of :attr:`mixture_batch` mixtures."""
        mixes = [validate_mixture(m) for m in mixtures]
        if not mixes:
            raise InputError("predict_labels needs at least one mixture")
        return np.concatenate([self._label_probabilities(mixes[b]) for b in batches(len(mixes), self.mixture_batch)])

    def predict_distance(self, mix_a, mix_b, datasets) -> np.ndarray:
        """``(P,)`` perceptual distances in [0, 1] (higher = more different) of the pairs
        ``(mix_a[i], mix_b[i])`` (SMILES lists) measured in experiment ``datasets[i]`` (one of the
        training datasets, e.g. ``"Snitz 1"``; the set regressors read it)."""
        if not len(mix_a) or len(mix_a) != len(mix_b) or len(mix_a) != len(datasets):
            raise InputError("predict_distance needs equally many first and second mixtures and datasets (>= 1)")
        a = [validate_mixture(m, "mixture 1") for m in mix_a]
        b = [validate_mixture(m, "mixture 2") for m in mix_b]
        return self.predict_components(a, b, list(datasets))["combined"]

    def top_labels(self, mixture: Sequence[str], k: int = 5) -> list[tuple[str, float]]:
        """The ``k`` most probable odour labels of one mixture, most probable first."""
        prob = self.predict_labels([mixture])[0]
        return [(self.label_names[i], float(prob[i])) for i in np.argsort(-prob)[:k]]

    @property
    def datasets(self) -> list[str]:
        """The experiments a pair may name (the set regressors' vocabulary)."""
        return list(self.set_regressors.vocabulary_) if self.set_regressors is not None else []


def _read_manifest(path: Path) -> dict:
    """``onnx.json`` of a model folder whose ``weights_id`` matches its ``config.json`` and whose
    files exist; CheckpointError saying why not (no export, another save's export, a missing file)."""
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise CheckpointError(f"{path} has no ONNX export ({Path(exc.filename).name} missing)") from None
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as exc:
        raise CheckpointError(f"corrupt {path / MANIFEST} or config.json: {exc}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise CheckpointError(f"corrupt {path / MANIFEST}: no 'files' object")
    if (config.get("app"), config.get("model_type")) != ("olfaction", "mixture_predictor"):
        raise CheckpointError(f"{path} holds no olfaction mixture predictor")
    if manifest.get("weights_id") != config.get("weights_id"):
        raise CheckpointError(f"the ONNX export in {path} belongs to another save of the model (weights_id differs)")
    missing = [f for f in manifest["files"].values() if not (path / f).is_file()]
    if missing or "distance" not in manifest["files"]:
        raise CheckpointError(f"{path}: ONNX file {missing[0] if missing else DISTANCE_FILE} missing")
    return manifest


def onnx_problem(path: str | Path) -> str | None:
    """None when ``path`` holds a usable ONNX export (:class:`OnnxPredictor` loads it), else the
    reason in a few words."""
    try:
        _read_manifest(Path(path))
    except CheckpointError as exc:
        return str(exc)
    return None


class OnnxPredictor(MixtureAPI):
    """A saved :class:`~olfaction.predictor.MixturePredictor` without torch: the same
    ``predict_distance`` / ``predict_components`` / ``predict_labels`` / ``top_labels`` /
    ``attention`` / ``datasets`` (equal to the torch path's within float32 rounding), from the
    model folder's ONNX export and stored arrays."""

    def __init__(self, path: str | Path, threads: int = 1):
        from safetensors import SafetensorError, safe_open

        from .set_models import SetRegressors

        path = Path(path)
        manifest = _read_manifest(path)
        meta = json.loads((path / "config.json").read_text(encoding="utf-8"))
        state, config = meta.get("state") or {}, meta.get("config") or {}
        try:
            with safe_open(str(path / "model.safetensors"), framework="np") as fh:
                if (fh.metadata() or {}).get("weights_id") != meta.get("weights_id"):
                    raise CheckpointError(f"{path}: model.safetensors and config.json are of different saves")
                arrays = {k: fh.get_tensor(k) for k in fh.keys() if k.startswith(("set/", "minimol."))}
        except (SafetensorError, OSError) as exc:
            raise CheckpointError(f"corrupt {path / 'model.safetensors'}: {exc}") from None
        try:
            self.weights = np.asarray(state["weights"], np.float64)
            self.validation = dict(state.get("validation", {}))
            self.label_names = list(state.get("label_names", []))
            self.label_kind = (config.get("labels") or {}).get("features", "morgan")
            self.set_regressors = None
            if "set_regressors" in state:
                sets = {k.removeprefix("set/"): a for k, a in arrays.items() if k.startswith("set/")}
                self.set_regressors = SetRegressors.from_saved(state["set_regressors"], sets)
            self.minimol_scale = None
            if config.get("minimol"):
                self.minimol_scale = (arrays["minimol.mean"], arrays["minimol.std"])
            self.n_datasets = int(state["distance_net"].get("n_datasets", 0))
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{path} is not a complete mixture predictor ({type(exc).__name__}: {exc})") from None
        self.path, self.threads, self._files, self._sessions = path, threads, manifest["files"], {}

    def _session(self, name: str):
        """The onnxruntime session of the ``distance`` or ``labels`` network, opened on first use
        (a distance prediction never pays for the label network's)."""
        if name not in self._sessions:
            file = self._files.get(name)
            if file is None:
                what = "label network (train with GS-LF labels)" if name == "labels" else "distance network"
                raise InputError(f"this model has no {what}")
            try:
                self._sessions[name] = onnx_session(self.path / file, self.threads)
            except Exception as exc:  # onnxruntime raises its own exception types
                raise CheckpointError(f"cannot load {self.path / file}: {str(exc).splitlines()[0]}") from None
        return self._sessions[name]

    @classmethod
    def from_pretrained(cls, path: str | Path) -> OnnxPredictor:
        return cls(path)

    def _mol_extra(self):
        if self.minimol_scale is None:
            return None
        mean, std = self.minimol_scale
        return lambda mols: standardised_minimol(mols, mean, std)

    def _network_outputs(self, mixtures, pair_a, pair_b, datasets):
        _, feeds = mixture_inputs(mixtures, self._mol_extra())
        feeds["pair_a"], feeds["pair_b"] = np.asarray(pair_a, np.int64), np.asarray(pair_b, np.int64)
        if self.n_datasets:
            feeds["dataset_onehot"] = dataset_one_hot(datasets)
        return self._session("distance").run(["distance", "alpha"], feeds)

    def predict_components(self, mix_a, mix_b, datasets) -> dict[str, np.ndarray]:
        self._note_unseen(list(mix_a) + list(mix_b))
        return super().predict_components(mix_a, mix_b, datasets)

    def _network_distances(self, mix_a, mix_b, datasets) -> np.ndarray:
        n = len(mix_a)
        mixtures, pos = unique_mixtures(list(mix_a) + list(mix_b))
        dist, _ = self._network_outputs(mixtures, pos[:n], pos[n:], datasets)
        return dist.astype(np.float64)

    def _note_unseen(self, mixtures) -> None:
        """One stderr line when the set regressors need Mordred rows that neither the model nor
        the Mordred cache holds (they are computed then: the slow path, which imports Mordred)."""
        if self.set_regressors is None:
            return
        new = {s for m in mixtures for s in m if s not in self.set_regressors.mordred_}
        if new:
            from .features import mordred_cache_path

            path = mordred_cache_path()
            if path.is_file():
                try:
                    with np.load(path, allow_pickle=False) as z:  # reads only the SMILES member
                        new -= {str(s) for s in z["smiles"]}
                except (OSError, ValueError, KeyError):
                    pass  # compute_mordred reports and rebuilds a broken cache
        if new:
            print(f"note: computing Mordred descriptors of {len(new)} molecule(s) neither the model nor the "
                  f"Mordred cache holds (first: {min(new)}); this imports Mordred (seconds), the rows are cached",
                  file=sys.stderr)

    def _label_probabilities(self, mixtures: Sequence[Sequence[str]]) -> np.ndarray:
        session = self._session("labels")
        return session.run(["probability"], label_inputs(mixtures, self.label_kind))[0]

    def attention(self, mixture: Sequence[str]) -> dict[str, float]:
        """Per-component readout weights of the distance network (sum to 1)."""
        m = validate_mixture(mixture)
        _, alpha = self._network_outputs([m, m], [0], [1], [""])
        return {s: float(a) for s, a in zip(m, alpha[: len(m)], strict=True)}
