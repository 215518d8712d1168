"""Training: self-supervised Mordred pretraining of the molecule encoder, distance-model fitting
with model selection on validation rows only, and the single-molecule label head."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.metrics import r2_score
from torch_geometric.data import Batch

from common.seed import seed_everything

from .data import PairData
from .evaluate import regression_metrics
from .features import mol_graph
from .model import DescriptorPretrainer, MixScentNet, MolEncoder, MolEncoderConfig

DATASETS = ["Bushdid", "Ravia 1", "Ravia 2", "Ravia 4", "Snitz 1", "Snitz 2", "Snitz 3"]

_GRAPHS: dict[str, object] = {}


def graphs_for(smiles: Sequence[str]) -> list:
    """PyG graphs for canonical ``smiles`` (memoised in-process)."""
    out = []
    for s in smiles:
        if s not in _GRAPHS:
            _GRAPHS[s] = mol_graph(s)
        out.append(_GRAPHS[s])
    return out


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
    gen = seed_everything(cfg.seed)
    n = len(smiles)
    n_base = n if n_base is None else n_base
    if not 0 < n_base <= n:
        raise ValueError(f"n_base must be in 1..{n}, got {n_base}")
    perm = torch.randperm(n_base, generator=gen).numpy()
    n_hold = max(1, int(round(cfg.heldout_frac * n_base))) if cfg.heldout_frac > 0 and n_base > 4 else 0
    hold, train = perm[:n_hold], np.concatenate([perm[n_hold:], np.arange(n_base, n)])
    graphs = graphs_for(smiles)
    y = torch.as_tensor(targets, dtype=torch.float32)
    model = DescriptorPretrainer(enc_cfg, targets.shape[1])
    random_model = copy.deepcopy(model)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=1e-5)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, cfg.epochs))
    iterator = range(cfg.epochs)
    if progress:
        from tqdm import tqdm

        iterator = tqdm(iterator, desc="pretrain", unit="epoch")
    last = float("nan")
    for _ in iterator:
        model.train()
        order = train[torch.randperm(len(train), generator=gen).numpy()]
        losses = []
        for s in range(0, len(order), cfg.batch_size):
            idx = order[s : s + cfg.batch_size]
            batch = Batch.from_data_list([graphs[i] for i in idx])
            loss = F.mse_loss(model(batch), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        sched.step()
        last = float(np.mean(losses))
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


def dataset_onehot(datasets: Sequence[str]) -> torch.Tensor:
    """``(P, len(DATASETS))`` one-hot; unknown datasets get an all-zero row."""
    out = torch.zeros(len(datasets), len(DATASETS))
    for i, d in enumerate(datasets):
        if d in DATASETS:
            out[i, DATASETS.index(d)] = 1.0
    return out


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


@dataclass
class DistanceTrainConfig:
    epochs: int = 150
    lr: float = 1e-3
    weight_decay: float = 1e-4
    batch_size: int = 32
    patience: int = 12
    seed: int = 0
    select: str = "rmse"  # validation criterion: "rmse" (lower) or "pearson" (higher)


def fit_distance(
    model: MixScentNet, index: MixtureIndex, pairs: PairData, train_rows, val_rows, cfg: DistanceTrainConfig
) -> dict:
    """Train on ``train_rows``; after each epoch score ``val_rows`` and keep the best weights
    (early stopping with ``patience``). Test rows are never seen. Returns the history."""
    gen = seed_everything(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    train_rows = np.asarray(train_rows)
    val_rows = np.asarray(val_rows)
    y = torch.as_tensor(pairs.y)
    best, best_state, best_epoch, history = None, copy.deepcopy(model.state_dict()), -1, []
    for epoch in range(cfg.epochs):
        model.train()
        order = train_rows[torch.randperm(len(train_rows), generator=gen).numpy()]
        for s in range(0, len(order), cfg.batch_size):
            rows = order[s : s + cfg.batch_size]
            # random side order: the head is symmetric anyway, this only shuffles the batch layout
            pred = _pair_forward(
                model,
                index,
                [pairs.keys_a[i] for i in rows],
                [pairs.keys_b[i] for i in rows],
                [pairs.dataset[i] for i in rows],
            )
            loss = F.mse_loss(pred, y[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
        if len(val_rows):
            pv = predict_distance(
                model,
                index,
                [pairs.keys_a[i] for i in val_rows],
                [pairs.keys_b[i] for i in val_rows],
                [pairs.dataset[i] for i in val_rows],
            )
            m = regression_metrics(pairs.y[val_rows], pv)
            score = m["rmse"] if cfg.select == "rmse" else -m["pearson"]
            history.append({"epoch": epoch, **m})
            if best is None or score < best:
                best, best_state, best_epoch = score, copy.deepcopy(model.state_dict()), epoch
            elif epoch - best_epoch >= cfg.patience:
                break
        else:
            best_state, best_epoch = copy.deepcopy(model.state_dict()), epoch
    model.load_state_dict(best_state)
    return {"best_epoch": best_epoch, "history": history}


# ----------------------------------------------------------------------------- labels


@dataclass
class LabelTrainConfig:
    epochs: int = 60
    lr: float = 2e-3
    weight_decay: float = 1e-4
    batch_size: int = 128
    patience: int = 10
    seed: int = 0


def fit_labels(
    model: MixScentNet, index: MixtureIndex, y: np.ndarray, train_ids, val_ids, cfg: LabelTrainConfig
) -> dict:
    """Multi-label BCE on mixtures ``index.keys[i]`` with targets ``y (M, L)``; the epoch is chosen
    by validation macro ROC-AUC. Returns the history."""
    from .evaluate import macro_roc_auc

    gen = seed_everything(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    yt = torch.as_tensor(y, dtype=torch.float32)
    train_ids, val_ids = np.asarray(train_ids), np.asarray(val_ids)
    best, best_state, best_epoch = None, copy.deepcopy(model.state_dict()), -1
    for epoch in range(cfg.epochs):
        model.train()
        order = train_ids[torch.randperm(len(train_ids), generator=gen).numpy()]
        for s in range(0, len(order), cfg.batch_size):
            ids = order[s : s + cfg.batch_size]
            comp, cb = index.batch(ids)
            loss = F.binary_cross_entropy_with_logits(
                model.label_logits(index.x, comp, cb, len(ids)), yt[ids]
            )
            loss = loss + model.label_aux_loss()
            opt.zero_grad()
            loss.backward()
            opt.step()
        auc = macro_roc_auc(y[val_ids], predict_labels(model, index, val_ids))
        if best is None or auc > best:
            best, best_state, best_epoch = auc, copy.deepcopy(model.state_dict()), epoch
        elif epoch - best_epoch >= cfg.patience:
            break
    model.load_state_dict(best_state)
    return {"best_epoch": best_epoch, "val_auc": best}


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
