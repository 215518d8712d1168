"""Training: self-supervised Mordred pretraining of the molecule encoder (:func:`pretrain`) and
the distance network on a split, with model selection on validation rows only (:func:`fit`).
Each is a LightningModule (:class:`PretrainModule`, :class:`DistanceModule`) run by
``common.engine.make_trainer`` (:func:`olfaction.fitting.fit_module`): early stopping on the
validation metric, and the weights of the best validation round restored at the end. The label
network trains in :mod:`olfaction.labels`; the whole product model in
:meth:`olfaction.predictor.MixturePredictor.fit`.

``device`` (``auto`` | ``cpu`` | ``cuda`` | ``cuda:N``) and ``precision`` (``32`` |
``bf16-mixed`` | ``16-mixed``) go to Lightning; the fitted models end on the CPU."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import lightning.pytorch as L
import numpy as np
import torch
import torch.nn.functional as F
from sklearn.metrics import r2_score
from torch_geometric.data import Batch

from common.errors import InputError

from .data import PairData, Split
from .evaluate import regression_metrics
from .features import graphs_for
from .fitting import all_rows, fit_module, shuffled_rows
from .mixture_index import MixtureIndex, pair_distances
from .model import (
    DescriptorPretrainer,
    DistanceTrainConfig,
    MixScentConfig,
    MixScentNet,
    MolEncoder,
    MolEncoderConfig,
)
from .molecules import embed_graphs, molecule_features

# ----------------------------------------------------------------------------- pretraining


@dataclass
class PretrainConfig:
    epochs: int = 40
    lr: float = 2e-3
    batch_size: int = 128
    heldout_frac: float = 0.1
    seed: int = 0


def pretrain(
    smiles: Sequence[str],
    targets: np.ndarray,
    enc_cfg: MolEncoderConfig,
    cfg: PretrainConfig,
    n_base: int | None = None,
    device: str = "auto",
    precision: str = "32",
) -> tuple[DescriptorPretrainer, dict]:
    """Train ``MolEncoder`` + linear head to regress cleaned Mordred vectors ``targets (N, D)``.

    A seeded ``heldout_frac`` of the first ``n_base`` molecules (default: all) is held out; the
    molecules after them (an extra unlabeled corpus) only ever train, so runs with corpora of
    different sizes share the same held-out molecules. Returns the model (on the CPU) and
    ``{"r2_heldout", "r2_heldout_random_encoder", "r2_heldout_pretrained_probe", "n_train",
    "n_heldout", "loss"}`` where R² is the uniform average over descriptor columns.
    :func:`olfaction.encoder.pretrain_encoder` runs it on the Mordred cache and saves the encoder."""
    gen = torch.Generator().manual_seed(cfg.seed)
    n = len(smiles)
    n_base = n if n_base is None else n_base
    if not 0 < n_base <= n:
        raise ValueError(f"n_base must be in 1..{n}, got {n_base}")
    perm = torch.randperm(n_base, generator=gen).numpy()
    n_hold = max(1, int(round(cfg.heldout_frac * n_base))) if cfg.heldout_frac > 0 and n_base > 4 else 0
    hold, train = perm[:n_hold], np.concatenate([perm[n_hold:], np.arange(n_base, n)])
    graphs = graphs_for(smiles)
    torch.manual_seed(cfg.seed)
    model = DescriptorPretrainer(enc_cfg, targets.shape[1])
    random_model = copy.deepcopy(model)
    module = PretrainModule(model, graphs, targets, cfg)
    fit_module(module, shuffled_rows(train, cfg.batch_size, cfg.seed), None, cfg.epochs, cfg.seed,
               device=device, precision=precision)
    model.cpu().eval()
    last = module.epoch_loss
    report = {"n_train": int(len(train)), "n_heldout": int(n_hold), "loss": last}
    if n_hold:
        report["r2_heldout"] = _r2(model, [graphs[i] for i in hold], targets[hold])
        # a random encoder with a linear head fitted by least squares: how much the features alone explain
        report["r2_heldout_random_encoder"] = _r2_linear_probe(
            random_model.encoder,
            [graphs[i] for i in train],
            targets[train],
            [graphs[i] for i in hold],
            targets[hold],
        )
        report["r2_heldout_pretrained_probe"] = _r2_linear_probe(
            model.encoder,
            [graphs[i] for i in train],
            targets[train],
            [graphs[i] for i in hold],
            targets[hold],
        )
    return model, report


class PretrainModule(L.LightningModule):
    """MSE of :class:`DescriptorPretrainer` predictions against cleaned Mordred rows
    ``targets (N, D)`` of the molecules ``graphs``; batches are index tensors ``(b,)``. AdamW with a
    cosine schedule over ``cfg.epochs``."""

    def __init__(self, model: DescriptorPretrainer, graphs: list, targets: np.ndarray, cfg: PretrainConfig):
        super().__init__()
        self.model, self.graphs, self.cfg = model, graphs, cfg
        self.register_buffer("targets", torch.as_tensor(targets, dtype=torch.float32), persistent=False)
        self.epoch_loss, self._losses = float("nan"), []

    def training_step(self, batch, batch_idx):
        (idx,) = batch
        graph = Batch.from_data_list([self.graphs[i] for i in idx.tolist()]).to(self.device)
        loss = F.mse_loss(self.model(graph).float(), self.targets[idx])
        self._losses.append(float(loss.detach()))
        return loss

    def on_train_epoch_end(self) -> None:
        self.epoch_loss, self._losses = float(np.mean(self._losses)), []

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.model.parameters(), lr=self.cfg.lr, weight_decay=1e-5)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, self.cfg.epochs))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}


@torch.no_grad()
def _r2(model: DescriptorPretrainer, graphs: list, targets: np.ndarray) -> float:
    model.eval()
    pred = np.concatenate(
        [model(Batch.from_data_list(graphs[s : s + 256])).numpy() for s in range(0, len(graphs), 256)]
    )
    return float(r2_score(targets, pred, multioutput="uniform_average"))


def _r2_linear_probe(encoder, g_train, y_train, g_test, y_test) -> float:
    from sklearn.linear_model import Ridge

    ridge = Ridge(alpha=1.0).fit(embed_graphs(encoder, g_train), y_train)
    return float(r2_score(y_test, ridge.predict(embed_graphs(encoder, g_test)), multioutput="uniform_average"))


# ----------------------------------------------------------------------------- distance network


class DistanceModule(L.LightningModule):
    """MSE of the distances a :class:`MixScentNet` gives training pairs of ``pairs`` (batches of
    row indices ``(b,)``); validation logs ``val_rmse`` and ``val_pearson`` over all validation
    rows (one batch)."""

    def __init__(self, model: MixScentNet, index: MixtureIndex, pairs: PairData, cfg: DistanceTrainConfig):
        super().__init__()
        self.model, self.index, self.pairs, self.cfg = model, index, pairs, cfg
        self.register_buffer("y", torch.as_tensor(pairs.y, dtype=torch.float32), persistent=False)
        self.history: list[dict] = []

    def _predict(self, rows: torch.Tensor) -> torch.Tensor:
        p = self.pairs
        rows = rows.tolist()
        return pair_distances(self.model, self.index, [p.keys_a[i] for i in rows], [p.keys_b[i] for i in rows],
                              [p.dataset[i] for i in rows])

    def training_step(self, batch, batch_idx):
        (rows,) = batch
        return F.mse_loss(self._predict(rows).float(), self.y[rows])

    def validation_step(self, batch, batch_idx):
        (rows,) = batch
        m = regression_metrics(self.pairs.y[rows.cpu().numpy()], self._predict(rows).float().cpu().numpy())
        self.history.append({"epoch": self.current_epoch, **m})
        self.log("val_rmse", m["rmse"], batch_size=len(rows))
        self.log("val_pearson", m["pearson"], batch_size=len(rows))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.model.parameters(), lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)


def fit(
    pairs: PairData,
    split: Split,
    encoder: MolEncoder,
    mcfg: MixScentConfig,
    tcfg: DistanceTrainConfig,
    features: str = "embedding",
    descriptors: dict[str, np.ndarray] | None = None,
    mol_features: dict[str, np.ndarray] | None = None,
    mixture_init: dict | None = None,
    pair_set: dict[tuple, np.ndarray] | None = None,
    mol_extra: dict[str, np.ndarray] | None = None,
    device: str = "auto",
    precision: str = "32",
) -> tuple[MixScentNet, MixtureIndex, dict]:
    """Fit a MixScentNet on ``split.training``, keeping the weights of the best epoch on
    ``split.validation`` (criterion ``tcfg.select``, early stopping after ``tcfg.patience``
    rounds; without validation rows, the last epoch). Test rows are never read. Returns the model
    (on the CPU), the index it was trained through and ``{"best_epoch", "history"}``.

    ``mol_features`` (``{smiles: (d,)}``) replace the ``features`` computed here (e.g. vectors
    whose Mordred scaler was fitted on a larger molecule set); ``mixture_init`` is a mixture-level
    state dict to start from (``experiments.olfaction.blend_pretrain``), fine-tuned with the rest.

    ``descriptors`` (``{smiles: (D,)}``, e.g. :func:`olfaction.features.scaled_molecule_table`)
    turn on the distance head's descriptor pair path (``MixScentConfig.desc_dim = D``).
    ``pair_set`` (``{(key_a, key_b): (K,)}`` for the pairs' mixture keys, e.g. rows of
    :func:`olfaction.set_features.pair_set_features`) turns on its set-feature path
    (``set_dim = K``), standardised with the mean / std of the training pairs' features.
    ``mol_extra`` (``{smiles: (k,)}``, e.g. standardised MiniMol embeddings) is appended to each
    molecule's features; with the encoder as molecule level, prediction then passes the same
    vectors as the graph batch's ``mol_extra`` (:meth:`MixScentNet.molecule_features`).

    ``features="embedding"``: the frozen ``encoder`` is the model's molecule level (the model
    then works on any SMILES, see :class:`~olfaction.predictor.MixturePredictor`); other
    :data:`~olfaction.molecules.FEATURE_KINDS` feed precomputed molecule vectors (e.g. embedding
    ++ cleaned Mordred) to the mixture level, a benchmark variant that predicts through the
    returned index only."""
    feats = (
        mol_features
        if mol_features is not None
        else molecule_features(sorted(pairs.molecules()), features, encoder)
    )
    if mol_extra is not None:
        feats = {s: np.concatenate([feats[s], mol_extra[s]]).astype(np.float32) for s in sorted(pairs.molecules())}
    index = MixtureIndex(pairs.mixtures, feats, descriptors, pair_set)
    torch.manual_seed(tcfg.seed)
    with_encoder = features == "embedding"
    mcfg = MixScentConfig(
        **{
            **asdict(mcfg),
            "in_dim": index.x.shape[1],
            "desc_dim": 0 if index.desc is None else index.desc.shape[1],
            "set_dim": 0 if pair_set is None else len(next(iter(pair_set.values()))),
            "mol_encoder": asdict(encoder.cfg) if with_encoder else None,
        }
    )
    model = MixScentNet(mcfg)
    if pair_set is not None:
        tr = index.set_features([pairs.keys_a[i] for i in split.training], [pairs.keys_b[i] for i in split.training])
        model.set_mean.copy_(tr.mean(0))
        model.set_std.copy_(tr.std(0).clamp(min=1e-6))
    if with_encoder:
        model.mol_encoder.load_state_dict(encoder.state_dict())
        for p in model.mol_encoder.parameters():
            p.requires_grad_(False)
    if mixture_init is not None:
        try:
            model.mixture.load_state_dict(mixture_init)
        except RuntimeError as exc:
            raise InputError(
                f"mixture_init does not fit this model's mixture level: {str(exc).splitlines()[0]}"
            ) from None
    module = DistanceModule(model, index, pairs, tcfg)
    has_val = len(split.validation) > 0
    monitor, mode = ("val_rmse", "min") if tcfg.select == "rmse" else ("val_pearson", "max")
    best = fit_module(module, shuffled_rows(split.training, tcfg.batch_size, tcfg.seed),
                      all_rows(split.validation) if has_val else None, tcfg.epochs, tcfg.seed,
                      monitor if has_val else None, mode, tcfg.patience if has_val else None,
                      device=device, precision=precision)
    best_epoch = best.best_epoch if best is not None else tcfg.epochs - 1
    return model.cpu(), index, {"best_epoch": best_epoch, "history": module.history}
