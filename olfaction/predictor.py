"""The product model: :class:`MixturePredictor`, what ``mixscent train`` writes and ``mixscent
predict`` / ``labels`` / ``white`` and the demo load.

It holds three fitted parts and how they are combined:

- the distance network (:class:`~olfaction.model.MixScentNet` with its frozen, Mordred-pretrained
  molecule encoder, so it reads any SMILES): mixture graph -> attention readout -> symmetric head;
  with ``minimol=True`` each molecule's input is the encoder's embedding ++ its MiniMol v1
  embedding (:mod:`olfaction.minimol`, z-scored with the mean / std of the training pairs'
  molecules, stored with the model);
- the set-feature regressors (:class:`~olfaction.set_models.SetRegressors`: extremely randomised
  trees and ridge on overlap, set distances, dataset and target encodings of the training pairs);
- the weights ``w (3,)`` of ``[network, trees, ridge]``: ``(alpha, (1 - alpha) / 2, (1 - alpha) / 2)``,
  the set regressors' equal mean plus a network share ``alpha`` decided on the split's validation
  rows only by a one-standard-error rule (:func:`olfaction.evaluate.gated_network_share`: the
  share with the lowest validation RMSE is kept only if it raises validation Pearson r by more
  than the bootstrap standard error of that gain over the validation rows, else ``alpha = 0``);
  the regressors are fitted on the training rows for that choice, then refitted on training +
  validation rows;
- optionally a label network (GS-LF's 138 odour descriptors): a MixScentNet mixture level on
  MiniMol v1 embeddings (512-d, :mod:`olfaction.minimol`, cached; about 75 s of one core to embed
  all 4,983 GS-LF molecules once, before training) by default, or on log1p Morgan
  count vectors (radius 2, 2048 bits; ``LabelNetConfig(features="morgan")``), a molecule being a
  mixture of one.

Saved as one ``common.pretrained`` directory: the networks' weights and the regressors' node
tables / coefficients in ``model.safetensors`` (no pickle), their configurations, the dataset
vocabulary, the molecule scalers and the training pairs of the target encodings in
``config.json``; beside them the ONNX export of the networks (``distance_net.onnx``,
``label_net.onnx``, ``onnx.json``; :mod:`olfaction.onnx_export`), which the torch-free
:class:`olfaction.inference.OnnxPredictor` (``mixscent predict``) runs. Nothing is refitted at
prediction time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from common.errors import CheckpointError
from common.pretrained import PretrainedMixin, register_model, register_to_config

from .data import LabelData, PairData, Split, dataset_one_hot, validate_mixture
from .inference import (  # noqa: F401  (LABEL_BITS, LABEL_FEATURES: part of this module's API)
    COMPONENTS,
    DISTANCE_FILE,
    LABEL_BITS,
    LABEL_FEATURES,
    LABEL_FILE,
    MANIFEST,
    MixtureAPI,
    fit_minimol_scale,
    label_features,
    label_inputs,
    mixture_inputs,
    standardised_minimol,
    unique_mixtures,
)
from .model import DistanceTrainConfig, MixScentConfig, MixScentNet, MolEncoder, graph_view
from .set_models import DEFAULT_PARTNERS, SetRegressors

# Loading and predicting import only torch, PyG, RDKit and numpy: training code (Lightning,
# scikit-learn, SciPy) is imported inside the fitting methods. With the ONNX export that
# save_pretrained writes, `mixscent predict` does not import torch at all (olfaction.inference).
# Prediction runs where the networks are (`predictor.to(device)`); results come back as numpy.


def _device(net: nn.Module) -> torch.device:
    return next(net.parameters()).device


@torch.no_grad()
def embed_mixtures(net: MixScentNet, mixtures: Sequence[Sequence[str]],
                   mol_extra=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Mixture embeddings ``z (M, hidden)`` and per-component readout weights ``alpha (C,)`` of an
    encoder-backed :class:`MixScentNet` (``cfg.mol_encoder`` set) for ``M`` mixtures of canonical
    SMILES; components are encoded on the fly, so any molecule works. ``mol_extra(mols) -> (U, d)``
    float32: extra per-molecule inputs appended to the molecule embedding (MiniMol), when the network
    was trained with them. The inputs are :func:`olfaction.inference.mixture_inputs`' arrays, the
    ONNX path's. Computed on the network's device."""
    _, feeds = mixture_inputs(mixtures, mol_extra)
    device = _device(net)
    t = {k: torch.from_numpy(v).to(device) for k, v in feeds.items()}
    return net.embed(graph_view(t), t["comp"], t["comp_batch"], len(mixtures))


@torch.no_grad()
def network_distances(net: MixScentNet, mix_a, mix_b, datasets, mol_extra=None) -> np.ndarray:
    """``(P,)`` float64 distances an encoder-backed :class:`MixScentNet` gives the pairs
    ``(mix_a[i], mix_b[i])`` of experiment ``datasets[i]`` (``mol_extra`` as in ``embed_mixtures``)."""
    mixtures, pos = unique_mixtures(list(mix_a) + list(mix_b))
    z, _ = embed_mixtures(net, mixtures, mol_extra)
    n = len(mix_a)
    z = z[torch.from_numpy(pos).to(z.device)]
    oh = torch.from_numpy(dataset_one_hot(list(datasets))).to(z.device) if net.cfg.n_datasets else None
    return net.distance_from_embeddings(z[:n], z[n:], oh).detach().cpu().numpy().astype(np.float64)


@dataclass
class LabelNetConfig:
    """The label network and its training (``fit`` holds out ``val_frac`` of the molecules to
    choose the epoch by macro ROC-AUC)."""

    hidden: int = 512
    dropout: float = 0.1
    epochs: int = 40
    patience: int = 8
    val_frac: float = 0.1
    features: str = "minimol"  # one of LABEL_FEATURES (MiniMol: 0.887 vs Morgan 0.841 test macro AUC)


@register_model("mixture_predictor")
class MixturePredictor(PretrainedMixin, MixtureAPI, nn.Module):
    """Mixture distance (set regressors, plus the network where it clearly helps on validation
    rows) and odour labels. ``fit`` then ``predict_distance`` / ``predict_labels`` / ``top_labels`` /
    ``attention``; ``save_pretrained`` / ``from_pretrained``.

    Args are hyperparameters only (sklearn style); what ``fit`` learns is state. ``minimol``:
    MiniMol v1 embeddings beside the GNN as the distance network's molecule input."""

    config_version = 1
    # what save_pretrained writes beside config.json and model.safetensors (olfaction.onnx_export;
    # the label network's file only with a label network)
    extra_files = (DISTANCE_FILE, LABEL_FILE, MANIFEST)

    @register_to_config
    def __init__(
        self,
        network: MixScentConfig | None = None,
        training: DistanceTrainConfig | None = None,
        labels: LabelNetConfig | None = None,
        n_estimators: int = 300,
        partners: str = DEFAULT_PARTNERS,
        seed: int = 0,
        minimol: bool = False,
    ):
        super().__init__()
        self.network_cfg = network or MixScentConfig()
        self.training = training or DistanceTrainConfig()
        self.labels_cfg = labels or LabelNetConfig()
        self.n_estimators, self.partners, self.seed = n_estimators, partners, seed
        self.minimol = minimol
        self.minimol_scale: tuple[np.ndarray, np.ndarray] | None = None  # (mean (512,), std (512,))
        self.distance_net: MixScentNet | None = None
        self.label_net: MixScentNet | None = None
        self.label_names: list[str] = []
        self.set_regressors: SetRegressors | None = None
        self.weights = np.array([1.0, 0.0, 0.0])
        self.validation: dict = {}

    # ------------------------------------------------------------------ fit
    def fit(
        self,
        pairs: PairData,
        split: Split,
        encoder: MolEncoder,
        gslf: LabelData | None = None,
        set_regressors: bool = True,
        device: str = "auto",
        precision: str = "32",
    ) -> MixturePredictor:
        """Train the distance network on ``split.training`` (epoch chosen on
        ``split.validation``), the set regressors and the combination weights, and, with ``gslf``,
        the label network. Test rows are never read.

        Weights ``(alpha, (1 - alpha) / 2, (1 - alpha) / 2)`` of ``[network, trees, ridge]``: on the
        validation rows (regressors fitted on the training rows), ``alpha`` is the network share with
        the lowest RMSE if it raises Pearson r over the set regressors' equal mean by more than the
        bootstrap standard error of that gain (200 resamples of the validation rows), else 0
        (:func:`olfaction.evaluate.gated_network_share`); the regressors are then refitted on
        training + validation rows. ``validation`` records ``network_share``,
        ``network_share_unguarded``, ``network_gain`` and ``network_gain_se``.

        The networks train on ``device`` in ``precision`` (Lightning) and end on the CPU."""
        from .train import fit

        extra = None
        if self.minimol:  # MiniMol beside the GNN: z-scored over the pairs' molecules (label-free)
            self.minimol_scale, extra = fit_minimol_scale(sorted(pairs.molecules()))
        net, _, hist = fit(pairs, split, encoder, self.network_cfg, self.training, mol_extra=extra,
                           device=device, precision=precision)
        self.distance_net = net.eval()
        self.validation = {"network_best_epoch": hist["best_epoch"]}
        if set_regressors:
            self._fit_set_regressors(pairs, split)
        if gslf is not None:
            self.fit_labels(gslf, device=device, precision=precision)
        return self

    def _fit_set_regressors(self, pairs: PairData, split: Split) -> None:
        from .evaluate import gated_network_share, regression_metrics

        mix_a, mix_b = pairs.sides()
        # every experiment of the pair data is in the vocabulary (label-free), so a split that
        # holds one out (leave-dataset-out) can still be predicted
        vocabulary = sorted(set(pairs.dataset))

        def take(rows):
            return [mix_a[i] for i in rows], [mix_b[i] for i in rows], [pairs.dataset[i] for i in rows]

        tr, va = np.asarray(split.training), np.asarray(split.validation)
        regs = SetRegressors(self.seed, self.n_estimators, self.partners).fit(*take(tr), pairs.y[tr], vocabulary)
        val = regs.predict(*take(va))
        net_val = self._network_distances(*take(va))
        preds = np.stack([net_val, val["trees"], val["ridge"]], axis=1)  # (V, 3)
        # the set regressors' equal mean is the base; the network joins it only if it clearly helps
        # on the validation rows (one-standard-error rule, gated_network_share)
        gate = gated_network_share(net_val, (val["trees"] + val["ridge"]) / 2, pairs.y[va], seed=self.seed)
        share = gate["share"]
        self.weights = np.array([share, (1 - share) / 2, (1 - share) / 2])
        self.validation.update({f"network_{k}": v for k, v in gate.items()})
        self.validation.update(
            {f"{name}_val_{k}": v for name, p in zip(COMPONENTS, preds.T, strict=True)
             for k, v in regression_metrics(pairs.y[va], p).items()}
        )
        self.validation.update(
            {f"combined_val_{k}": v for k, v in regression_metrics(pairs.y[va], preds @ self.weights).items()}
        )
        fit_rows = np.concatenate([tr, va])
        self.set_regressors = SetRegressors(self.seed, self.n_estimators, self.partners).fit(
            *take(fit_rows), pairs.y[fit_rows], vocabulary
        )

    def fit_labels(self, gslf: LabelData, device: str = "auto", precision: str = "32") -> MixturePredictor:
        """Label network on all of ``gslf`` but a seeded ``val_frac`` (epoch choice), trained on
        ``device`` in ``precision``."""
        from .labels import LabelTrainConfig, fit_labels
        from .mixture_index import MixtureIndex

        cfg = self.labels_cfg
        feats = label_features(gslf.smiles, cfg.features)
        index = MixtureIndex({s: (s,) for s in gslf.smiles}, feats)
        torch.manual_seed(self.seed)
        net = MixScentNet(
            MixScentConfig(in_dim=index.x.shape[1], hidden=cfg.hidden, dropout=cfg.dropout, n_labels=len(gslf.labels))
        )
        order = np.random.default_rng(self.seed).permutation(len(gslf.smiles))
        n_val = max(1, int(round(cfg.val_frac * len(order))))
        hist = fit_labels(
            net, index, gslf.y, order[n_val:], order[:n_val],
            LabelTrainConfig(epochs=cfg.epochs, patience=cfg.patience, seed=self.seed),
            device=device, precision=precision,
        )
        self.label_net, self.label_names = net.cpu().eval(), list(gslf.labels)
        self.validation.update({"labels_val_macro_auc": hist["val_auc"], "labels_best_epoch": hist["best_epoch"]})
        return self

    def _minimol_rows(self, mols: Sequence[str]) -> np.ndarray:
        """``(U, 512)`` float32 z-scored MiniMol rows of ``mols`` (the distance network's extra
        molecule input when ``minimol``)."""
        return standardised_minimol(mols, *self.minimol_scale)

    def _mol_extra(self):
        """The distance network's extra molecule input (``_minimol_rows``), or None without MiniMol."""
        return self._minimol_rows if self.minimol_scale is not None else None

    # ------------------------------------------------------------------ predict
    # predict_components / predict_distance / top_labels / datasets: MixtureAPI (shared with the
    # torch-free olfaction.inference.OnnxPredictor)
    @torch.no_grad()
    def _network_distances(self, mix_a, mix_b, datasets) -> np.ndarray:
        return network_distances(self._need("distance_net"), mix_a, mix_b, datasets, self._mol_extra())

    @torch.no_grad()
    def _label_probabilities(self, mixes: Sequence[Sequence[str]]) -> np.ndarray:
        net = self._need("label_net")
        device = _device(net)
        t = {k: torch.from_numpy(v).to(device) for k, v in label_inputs(mixes, self.labels_cfg.features).items()}
        logits = net.label_logits(t["mol_x"], t["comp"], t["comp_batch"], len(mixes))
        return torch.sigmoid(logits).detach().cpu().numpy()

    @torch.no_grad()
    def attention(self, mixture: Sequence[str]) -> dict[str, float]:
        """Per-component readout weights of the distance network (sum to 1)."""
        m = validate_mixture(mixture)
        _, alpha = embed_mixtures(self._need("distance_net"), [m], self._mol_extra())
        return {s: float(a) for s, a in zip(m, alpha.detach().cpu(), strict=False)}

    # ------------------------------------------------------------------ saved form
    def save_pretrained(self, path_dir, extra: dict | None = None) -> Path:
        """The ``common.pretrained`` directory, then the ONNX export of the networks into it
        (:func:`olfaction.onnx_export.export_onnx`: checked against torch, or left out with a
        warning, in which case prediction takes the torch path)."""
        from .onnx_export import export_onnx

        path = super().save_pretrained(path_dir, extra)
        export_onnx(self, path)
        return path

    def checkpoint_state(self) -> tuple[dict[str, torch.Tensor], dict]:
        net = self._need("distance_net")
        tensors = {f"distance_net.{k}": v for k, v in net.state_dict().items()}
        validation = {k: (v if not isinstance(v, float) or np.isfinite(v) else None) for k, v in self.validation.items()}
        state: dict = {"distance_net": asdict(net.cfg), "weights": self.weights.tolist(), "validation": validation}
        if self.minimol_scale is not None:
            tensors.update({f"minimol.{k}": torch.from_numpy(np.asarray(v, np.float32))
                            for k, v in zip(("mean", "std"), self.minimol_scale, strict=True)})
        if self.label_net is not None:
            tensors.update({f"label_net.{k}": v for k, v in self.label_net.state_dict().items()})
            state["label_net"] = asdict(self.label_net.cfg)
            state["label_names"] = self.label_names
        if self.set_regressors is not None:
            tensors.update({f"set/{k}": torch.from_numpy(np.ascontiguousarray(a))
                            for k, a in self.set_regressors.arrays().items()})
            state["set_regressors"] = self.set_regressors.state()
        return tensors, state

    def load_checkpoint_state(self, tensors: dict[str, torch.Tensor], state: dict, source: str) -> None:
        try:
            self.distance_net = MixScentNet(MixScentConfig(**state["distance_net"])).eval()
            self._load_part(self.distance_net, "distance_net.", tensors, source)
            if "label_net" in state:
                self.label_net = MixScentNet(MixScentConfig(**state["label_net"])).eval()
                self._load_part(self.label_net, "label_net.", tensors, source)
                self.label_names = list(state["label_names"])
            if "set_regressors" in state:
                arrays = {k.removeprefix("set/"): t.numpy() for k, t in tensors.items() if k.startswith("set/")}
                self.set_regressors = SetRegressors.from_saved(state["set_regressors"], arrays)
            self.weights = np.asarray(state["weights"], np.float64)
            self.validation = dict(state.get("validation", {}))
            if self.minimol:
                self.minimol_scale = (tensors["minimol.mean"].numpy(), tensors["minimol.std"].numpy())
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{source} is not a complete mixture predictor ({type(exc).__name__}: {exc})") from None

    @staticmethod
    def _load_part(net: nn.Module, prefix: str, tensors: dict[str, torch.Tensor], source: str) -> None:
        own = {k.removeprefix(prefix): v for k, v in tensors.items() if k.startswith(prefix)}
        missing = [k for k in net.state_dict() if k not in own]
        if missing:
            raise CheckpointError(f"{source} does not match the model: missing key {prefix}{missing[0]!r}")
        net.load_state_dict(own, strict=True)

    @classmethod
    def tiny_example(cls):
        """A predictor fitted in seconds on 12 pairs of 6 small molecules (2 datasets), with a label
        network on 6 molecules; input: two pairs."""
        from .model import MolEncoderConfig

        mols = ["CCO", "CCCO", "CC(=O)O", "CCOC(C)=O", "c1ccccc1", "CC(C)=O"]
        mixtures = {("D", i): tuple(sorted({mols[i % 6], mols[(i + 2) % 6]})) for i in range(6)}
        mixtures.update({("D", 6 + i): (mols[i],) for i in range(6)})
        keys = list(mixtures)
        rng = np.random.default_rng(0)
        ka = [keys[i] for i in range(12)]
        kb = [keys[(i + 5) % 12] for i in range(12)]
        pairs = PairData(["Bushdid" if i % 2 else "Snitz 1" for i in range(12)], ka, kb,
                         rng.uniform(0.2, 0.8, 12).astype(np.float32), mixtures)
        split = Split("tiny", np.arange(8), np.arange(8, 12), np.arange(0))
        torch.manual_seed(0)
        encoder = MolEncoder(MolEncoderConfig(hidden=8, layers=1, emb_dim=8)).eval()
        model = cls(MixScentConfig(hidden=8, heads=2), DistanceTrainConfig(epochs=1),
                    LabelNetConfig(hidden=8, epochs=1, features="morgan"), n_estimators=3)
        y = (rng.uniform(size=(6, 3)) > 0.5).astype(np.float32)
        y[0], y[1] = [1, 1, 1], [0, 0, 0]  # both classes in every column
        model.fit(pairs, split, encoder, LabelData(mols, y, ["a", "b", "c"]))
        return model, ([("CCO", "CCCO"), ("c1ccccc1",)], [("CC(C)=O",), ("CCO", "CC(=O)O")], ["Bushdid", "Snitz 1"])

    def example_forward(self, mix_a, mix_b, datasets):
        return (torch.as_tensor(self.predict_distance(mix_a, mix_b, datasets)),
                torch.as_tensor(self.predict_labels(mix_a)))


def smoke_predict(model: MixturePredictor) -> np.ndarray:
    """Distances of two example pairs and the label probabilities of one mixture, ``(2 + L,)``
    (the shipped-weights test; ``common.shipped``)."""
    citrus, vanilla = ["CC1=CCC(CC1)C(=C)C", "CC(C)=CCCC(C)=CC=O"], ["COc1cc(C=O)ccc1O"]
    distances = model.predict_distance([citrus, citrus], [vanilla, citrus], ["Snitz 1", "Bushdid"])
    labels = model.predict_labels([citrus])[0] if model.label_net is not None else np.zeros(0)
    return np.concatenate([np.asarray(distances, np.float64), np.asarray(labels, np.float64)])
