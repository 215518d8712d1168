"""The Lightning plumbing the app's three trainings share (encoder pretraining, the distance
network, the label network): a throwaway ``common.engine`` run that restores the weights of the
best validation round (:class:`BestWeights`, :func:`fit_module`), and the loaders of index
batches it feeds them (:func:`all_rows`, :func:`shuffled_rows`)."""

from __future__ import annotations

import copy

import lightning.pytorch as L
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from common.engine import ctrl_c_interrupts, make_trainer, shuffled_loader


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


def fit_module(module: L.LightningModule, train_loader, val_loader, epochs: int, seed: int,
               monitor: str | None = None, mode: str = "min", patience: int | None = None,
               device: str = "auto", precision: str = "32") -> BestWeights | None:
    """Fit ``module`` for at most ``epochs`` epochs on ``device`` in ``precision`` (throwaway run:
    no logs, no checkpoint files); with ``monitor``, early stopping after ``patience`` rounds and
    the best round's weights back. The fitted module ends on the CPU (Lightning's teardown)."""
    best = BestWeights(monitor, mode) if monitor else None
    trainer = make_trainer(None, max_epochs=epochs, monitor=monitor, mode=mode, patience=patience, seed=seed,
                           progress=False, checkpoint=False, callbacks=[best] if best else [],
                           device=device, precision=precision)
    with ctrl_c_interrupts():  # Ctrl-C: "interrupted" and exit 130, not Lightning's silent exit 1
        trainer.fit(module, train_loader, val_loader)
    return best


def all_rows(rows) -> DataLoader:
    """One batch holding every row of ``rows`` (validation: the metric is over all of them)."""
    data = TensorDataset(torch.as_tensor(np.asarray(rows), dtype=torch.long))
    return DataLoader(data, batch_size=max(1, len(data)), shuffle=False)


def shuffled_rows(rows, batch_size: int, seed: int) -> DataLoader:
    """Index batches ``(b,)`` of ``rows`` in a seeded fresh order every epoch
    (:func:`common.engine.shuffled_loader`)."""
    return shuffled_loader(TensorDataset(torch.as_tensor(np.asarray(rows), dtype=torch.long)), batch_size, seed)
