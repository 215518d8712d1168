"""Training of the label network: a :class:`~olfaction.model.MixScentNet` mixture level with a
multi-label head (GS-LF's odour descriptors, or blend labels), fitted by Lightning on mixtures of
a :class:`~olfaction.mixture_index.MixtureIndex` with the epoch chosen by validation macro
ROC-AUC (:class:`LabelModule`, :func:`fit_labels`)."""

from __future__ import annotations

from dataclasses import dataclass

import lightning.pytorch as L
import numpy as np
import torch
import torch.nn.functional as F

from .evaluate import macro_roc_auc
from .fitting import all_rows, fit_module, shuffled_rows
from .mixture_index import MixtureIndex, mixture_label_logits
from .model import MixScentNet


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
        logits = mixture_label_logits(self.model, self.index, ids.tolist())
        return F.binary_cross_entropy_with_logits(logits, self.y[ids]) + self.model.label_aux_loss()

    def validation_step(self, batch, batch_idx):
        (ids,) = batch
        prob = torch.sigmoid(mixture_label_logits(self.model, self.index, ids.tolist()))
        ids_np = ids.cpu().numpy()
        self.log("val_auc", macro_roc_auc(self.y_np[ids_np], prob.float().cpu().numpy()), batch_size=len(ids))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.model.parameters(), lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)


def fit_labels(
    model: MixScentNet, index: MixtureIndex, y: np.ndarray, train_ids, val_ids, cfg: LabelTrainConfig,
    device: str = "auto", precision: str = "32",
) -> dict:
    """Fit :class:`LabelModule` on ``device`` in ``precision``; the epoch is chosen by validation
    macro ROC-AUC (early stopping with ``cfg.patience``); ``model`` ends on the CPU in eval mode.
    Returns ``{"best_epoch", "val_auc"}``."""
    module = LabelModule(model, index, y, cfg)
    best = fit_module(module, shuffled_rows(train_ids, cfg.batch_size, cfg.seed), all_rows(val_ids), cfg.epochs,
                      cfg.seed, "val_auc", "max", cfg.patience, device=device, precision=precision)
    model.cpu().eval()
    return {"best_epoch": best.best_epoch, "val_auc": best.best}
