"""Training: self-supervised Mordred pretraining of the molecule encoder, distance-model fitting
with model selection on validation rows only, and the label head. Each is a LightningModule
(:class:`PretrainModule`, :class:`DistanceModule`, :class:`LabelModule`) run by
``common.engine.make_trainer``: early stopping on the validation metric, and the weights of the
best validation round restored at the end (:class:`BestWeights`)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import lightning.pytorch as L
import numpy as np
import torch
import torch.nn.functional as F
from sklearn.metrics import r2_score
from torch.utils.data import DataLoader, TensorDataset
from torch_geometric.data import Batch

from common.engine import make_trainer, shuffled_loader

from .data import DATASETS, PairData, dataset_onehot  # noqa: F401  (DATASETS: re-exported)
from .evaluate import regression_metrics
from .features import graphs_for
from .model import DescriptorPretrainer, DistanceTrainConfig, MixScentNet, MolEncoder, MolEncoderConfig


class BestWeights(L.Callback):
    """Keep an in-memory copy of the module's weights at its best ``monitor`` value (``mode``
    ``"min"`` or ``"max"``; strict improvement, as ``EarlyStopping``) and load them when fitting
    ends; ``best_epoch`` / ``best`` record where (-1 / None without any validation round)."""

    def __init__(self, monitor: str, mode: str = "min"):
        self.monitor, self.mode = monitor, mode
        self.best, self.best_epoch, self.state = None, -1, None

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            return
        value = float(value)
        better = self.best is None or (value < self.best if self.mode == "min" else value > self.best)
        if better:
            self.best, self.best_epoch = value, trainer.current_epoch
            self.state = copy.deepcopy(pl_module.state_dict())

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.state is not None:
            pl_module.load_state_dict(self.state)


def _run(module: L.LightningModule, train_loader, val_loader, epochs: int, seed: int,
         monitor: str | None = None, mode: str = "min", patience: int | None = None) -> BestWeights | None:
    """Fit ``module`` for at most ``epochs`` epochs (throwaway run: no logs, no checkpoint files);
    with ``monitor``, early stopping after ``patience`` rounds and the best round's weights back."""
    best = BestWeights(monitor, mode) if monitor else None
    trainer = make_trainer(None, max_epochs=epochs, monitor=monitor, mode=mode, patience=patience, seed=seed,
                           progress=False, checkpoint=False, callbacks=[best] if best else [])
    trainer.fit(module, train_loader, val_loader)
    return best


def _all_rows(rows) -> DataLoader:
    """One batch holding every row of ``rows`` (validation: the metric is over all of them)."""
    data = TensorDataset(torch.as_tensor(np.asarray(rows), dtype=torch.long))
    return DataLoader(data, batch_size=max(1, len(data)), shuffle=False)


def _shuffled_rows(rows, batch_size: int, seed: int) -> DataLoader:
    return shuffled_loader(TensorDataset(torch.as_tensor(np.asarray(rows), dtype=torch.long)), batch_size, seed)


# ----------------------------------------------------------------------------- pretraining


@dataclass
class PretrainConfig:
    epochs: int = 40
    lr: float = 2e-3
    batch_size: int = 128
    heldout_frac: float = 0.1
    seed: int = 0


def pretrain_descriptors(
    smiles: Sequence[str],
    targets: np.ndarray,
    enc_cfg: MolEncoderConfig,
    cfg: PretrainConfig,
    progress: bool = False,
    n_base: int | None = None,
) -> tuple[DescriptorPretrainer, dict]:
    """Train ``MolEncoder`` + linear head to regress cleaned Mordred vectors ``targets (N, D)``.

    A seeded ``heldout_frac`` of the first ``n_base`` molecules (default: all) is held out; the
    molecules after them (an extra unlabeled corpus) only ever train, so runs with corpora of
    different sizes share the same held-out molecules. Returns the model and
    ``{"r2_heldout", "r2_heldout_random_encoder", "n_train", "n_heldout", "loss"}`` where R² is
    the uniform average over descriptor columns."""
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
    _run(module, _shuffled_rows(train, cfg.batch_size, cfg.seed), None, cfg.epochs, cfg.seed)
    model.eval()
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
        pred = self.model(Batch.from_data_list([self.graphs[i] for i in idx.tolist()]))
        loss = F.mse_loss(pred, self.targets[idx])
        self._losses.append(float(loss.detach()))
        return loss

    def on_train_epoch_end(self) -> None:
        self.epoch_loss, self._losses = float(np.mean(self._losses)), []

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.model.parameters(), lr=self.cfg.lr, weight_decay=1e-5)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, self.cfg.epochs))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}


@torch.no_grad()
def _embed(encoder: MolEncoder, graphs: list, batch_size: int = 256) -> np.ndarray:
    encoder.eval()
    out = [
        encoder(Batch.from_data_list(graphs[s : s + batch_size])) for s in range(0, len(graphs), batch_size)
    ]
    return torch.cat(out).numpy()


@torch.no_grad()
def _r2(model: DescriptorPretrainer, graphs: list, targets: np.ndarray) -> float:
    model.eval()
    pred = np.concatenate(
        [model(Batch.from_data_list(graphs[s : s + 256])).numpy() for s in range(0, len(graphs), 256)]
    )
    return float(r2_score(targets, pred, multioutput="uniform_average"))


def _r2_linear_probe(encoder, g_train, y_train, g_test, y_test) -> float:
    from sklearn.linear_model import Ridge

    ridge = Ridge(alpha=1.0).fit(_embed(encoder, g_train), y_train)
    return float(r2_score(y_test, ridge.predict(_embed(encoder, g_test)), multioutput="uniform_average"))


def encode_molecules(encoder: MolEncoder, smiles: Sequence[str]) -> dict[str, np.ndarray]:
    """``{smiles: embedding (emb_dim,)}`` from a (frozen) encoder."""
    emb = _embed(encoder, graphs_for(smiles))
    return {s: emb[i] for i, s in enumerate(smiles)}


# ----------------------------------------------------------------------------- mixtures


class MixtureIndex:
    """Mixtures as index lists into ``U`` unique molecules with features ``x (U, d)``.

    ``mixtures``: ``{key: components}``; ``features``: ``{smiles: (d,)}`` (a frozen encoder's
    embeddings or descriptors); ``descriptors``: optional ``{smiles: (D,)}`` for a model with a
    descriptor pair path (``desc (U, D)``). Keys may be any hashable (dataset/label tuples or
    ad-hoc)."""

    def __init__(
        self,
        mixtures: dict,
        features: dict[str, np.ndarray],
        descriptors: dict[str, np.ndarray] | None = None,
        pair_set: dict[tuple, np.ndarray] | None = None,
    ):
        self.pair_set = pair_set
        self.keys = list(mixtures)
        self.pos = {k: i for i, k in enumerate(self.keys)}
        mols = sorted({s for comps in mixtures.values() for s in comps})
        self.mol_index = {s: i for i, s in enumerate(mols)}
        self.smiles = mols
        self.x = torch.as_tensor(np.stack([features[s] for s in mols]), dtype=torch.float32)
        self.desc = (
            torch.as_tensor(np.stack([descriptors[s] for s in mols]), dtype=torch.float32)
            if descriptors is not None
            else None
        )
        self.comps = [
            torch.tensor([self.mol_index[s] for s in mixtures[k]], dtype=torch.long) for k in self.keys
        ]

    def set_features(self, keys_a: Sequence, keys_b: Sequence) -> torch.Tensor:
        """``(P, K)`` set-level features of the pairs ``(keys_a[i], keys_b[i])`` from
        ``pair_set`` (``{(key_a, key_b): (K,)}``; looked up in either order, the features being
        symmetric)."""
        if self.pair_set is None:
            raise ValueError("this mixture index has no set-level pair features")
        rows = []
        for a, b in zip(keys_a, keys_b, strict=True):
            row = self.pair_set.get((a, b))
            row = self.pair_set.get((b, a)) if row is None else row
            if row is None:
                raise KeyError(f"no set-level features for the pair {a!r}, {b!r}")
            rows.append(row)
        return torch.as_tensor(np.stack(rows), dtype=torch.float32)

    def batch(self, mix_ids: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """``comp (C,)`` molecule indices and ``comp_batch (C,)`` local mixture ids 0..len-1."""
        parts = [self.comps[i] for i in mix_ids]
        comp = torch.cat(parts)
        comp_batch = torch.repeat_interleave(torch.arange(len(parts)), torch.tensor([len(p) for p in parts]))
        return comp, comp_batch


def _pair_forward(model: MixScentNet, index: MixtureIndex, ka, kb, datasets):
    ids_a = [index.pos[k] for k in ka]
    ids_b = [index.pos[k] for k in kb]
    uniq = sorted(set(ids_a) | set(ids_b))
    local = {m: i for i, m in enumerate(uniq)}
    comp, comp_batch = index.batch(uniq)
    pa = torch.tensor([local[m] for m in ids_a])
    pb = torch.tensor([local[m] for m in ids_b])
    oh = dataset_onehot(datasets) if model.cfg.n_datasets else None
    ps = index.set_features(ka, kb) if model.cfg.set_dim else None
    return model(index.x, comp, comp_batch, len(uniq), pa, pb, oh, index.desc, ps)


@torch.no_grad()
def predict_distance(model: MixScentNet, index: MixtureIndex, keys_a, keys_b, datasets=None) -> np.ndarray:
    """Distances ``(P,)`` for mixture keys ``keys_a[i]`` vs ``keys_b[i]``."""
    model.eval()
    datasets = datasets if datasets is not None else [""] * len(keys_a)
    out = [
        _pair_forward(model, index, keys_a[s : s + 256], keys_b[s : s + 256], datasets[s : s + 256])
        for s in range(0, len(keys_a), 256)
    ]
    return torch.cat(out).numpy() if out else np.zeros(0, np.float32)


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
        return _pair_forward(self.model, self.index, [p.keys_a[i] for i in rows], [p.keys_b[i] for i in rows],
                             [p.dataset[i] for i in rows])

    def training_step(self, batch, batch_idx):
        (rows,) = batch
        return F.mse_loss(self._predict(rows), self.y[rows])

    def validation_step(self, batch, batch_idx):
        (rows,) = batch
        m = regression_metrics(self.pairs.y[rows.numpy()], self._predict(rows).numpy())
        self.history.append({"epoch": self.current_epoch, **m})
        self.log("val_rmse", m["rmse"], batch_size=len(rows))
        self.log("val_pearson", m["pearson"], batch_size=len(rows))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.model.parameters(), lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)


def fit_distance(
    model: MixScentNet, index: MixtureIndex, pairs: PairData, train_rows, val_rows, cfg: DistanceTrainConfig
) -> dict:
    """Train on ``train_rows``; after each epoch score ``val_rows`` and keep the best weights
    (early stopping with ``patience``; criterion ``cfg.select``). Test rows are never seen.
    Returns ``{"best_epoch", "history"}``."""
    module = DistanceModule(model, index, pairs, cfg)
    has_val = len(val_rows) > 0
    monitor, mode = ("val_rmse", "min") if cfg.select == "rmse" else ("val_pearson", "max")
    best = _run(module, _shuffled_rows(train_rows, cfg.batch_size, cfg.seed),
                _all_rows(val_rows) if has_val else None, cfg.epochs, cfg.seed,
                monitor if has_val else None, mode, cfg.patience if has_val else None)
    best_epoch = best.best_epoch if best is not None else cfg.epochs - 1
    return {"best_epoch": best_epoch, "history": module.history}


# ----------------------------------------------------------------------------- labels


@dataclass
class LabelTrainConfig:
    epochs: int = 60
    lr: float = 2e-3
    weight_decay: float = 1e-4
    batch_size: int = 128
    patience: int = 10
    seed: int = 0


class LabelModule(L.LightningModule):
    """Multi-label BCE (+ the MoE head's router loss) on mixtures ``index.keys[i]`` with targets
    ``y (M, L)``; batches are mixture ids ``(b,)``; validation logs ``val_auc`` (macro ROC-AUC
    over all validation mixtures, one batch)."""

    def __init__(self, model: MixScentNet, index: MixtureIndex, y: np.ndarray, cfg: LabelTrainConfig):
        super().__init__()
        self.model, self.index, self.y_np, self.cfg = model, index, y, cfg
        self.register_buffer("y", torch.as_tensor(y, dtype=torch.float32), persistent=False)

    def training_step(self, batch, batch_idx):
        (ids,) = batch
        comp, cb = self.index.batch(ids.tolist())
        logits = self.model.label_logits(self.index.x, comp, cb, len(ids))
        return F.binary_cross_entropy_with_logits(logits, self.y[ids]) + self.model.label_aux_loss()

    def validation_step(self, batch, batch_idx):
        from .evaluate import macro_roc_auc

        (ids,) = batch
        comp, cb = self.index.batch(ids.tolist())
        prob = torch.sigmoid(self.model.label_logits(self.index.x, comp, cb, len(ids))).numpy()
        self.log("val_auc", macro_roc_auc(self.y_np[ids.numpy()], prob), batch_size=len(ids))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.model.parameters(), lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)


def fit_labels(
    model: MixScentNet, index: MixtureIndex, y: np.ndarray, train_ids, val_ids, cfg: LabelTrainConfig
) -> dict:
    """Fit :class:`LabelModule`; the epoch is chosen by validation macro ROC-AUC (early stopping
    with ``cfg.patience``). Returns ``{"best_epoch", "val_auc"}``."""
    module = LabelModule(model, index, y, cfg)
    best = _run(module, _shuffled_rows(train_ids, cfg.batch_size, cfg.seed), _all_rows(val_ids), cfg.epochs,
                cfg.seed, "val_auc", "max", cfg.patience)
    model.eval()
    return {"best_epoch": best.best_epoch, "val_auc": best.best}


@torch.no_grad()
def predict_labels(model: MixScentNet, index: MixtureIndex, ids) -> np.ndarray:
    """Label probabilities ``(len(ids), L)``."""
    model.eval()
    out = []
    for s in range(0, len(ids), 512):
        part = list(ids[s : s + 512])
        comp, cb = index.batch(part)
        out.append(torch.sigmoid(model.label_logits(index.x, comp, cb, len(part))))
    return torch.cat(out).numpy()
