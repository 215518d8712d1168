"""The Lightning engine on a one-weight regression (seconds): early stopping, best checkpoint,
resume, divergence guard and CSV logs."""

import csv

import lightning.pytorch as L
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from common.engine import (
    BEST,
    CHECKPOINT_DIR,
    LAST,
    LOG_DIR,
    ShuffledBatches,
    TrainingDiverged,
    fit,
    make_trainer,
    shuffled_loader,
)
from common.errors import MoeAppsError


def _data(n=64):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 2, generator=g)
    return TensorDataset(x, x @ torch.tensor([2.0, -1.0]))


def _loader(n=64, batch_size=16):
    return DataLoader(_data(n), batch_size=batch_size)


def _shuffled(n=64, batch_size=16):
    return shuffled_loader(_data(n), batch_size, seed=3)


class Regression(L.LightningModule):
    """``y = x w + b`` by SGD. ``val_scores`` (when given) replaces the validation metric by a
    scripted sequence per epoch; ``nan_at_step`` makes that step's training loss NaN."""

    def __init__(self, lr=0.05, val_scores=None, nan_at_step=None):
        super().__init__()
        self.net = nn.Linear(2, 1)
        self.lr, self.val_scores, self.nan_at_step = lr, val_scores, nan_at_step

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x).squeeze(1), y)
        if self.global_step == self.nan_at_step:
            loss = loss * float("nan")
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        score = nn.functional.mse_loss(self.net(x).squeeze(1), y)
        if self.val_scores is not None:
            score = torch.tensor(self.val_scores[self.current_epoch])
        self.log("val_loss", score)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def _module(**kw):
    torch.manual_seed(1)
    return Regression(**kw)


def test_early_stopping_stops_when_the_metric_stalls_and_keeps_the_best_epoch(tmp_path):
    scores = [5.0, 4.0, 3.0, 3.5, 3.2, 3.1, 1.0, 0.5]  # best 3.0 at epoch 2, then 3 epochs without improving
    trainer = make_trainer(tmp_path, max_epochs=len(scores), monitor="val_loss", patience=3, progress=False)
    fit(trainer, _module(val_scores=scores), _loader(), _loader())
    assert trainer.current_epoch == 6  # epochs 0..5 ran: epochs 3, 4, 5 did not improve on epoch 2
    best = torch.load(tmp_path / CHECKPOINT_DIR / f"{BEST}.ckpt", weights_only=False)
    assert best["epoch"] == 2
    assert trainer.checkpoint_callback.best_model_score.item() == 3.0
    last = torch.load(tmp_path / CHECKPOINT_DIR / LAST, weights_only=False)
    assert last["epoch"] == 5


@pytest.fixture()
def deterministic_flag_restored():
    yield
    torch.use_deterministic_algorithms(False)  # Lightning leaves deterministic=True set process-wide


def test_resume_from_last_checkpoint_ends_with_the_uninterrupted_weights(tmp_path, deterministic_flag_restored):
    straight = _module()
    fit(make_trainer(tmp_path / "a", max_epochs=6, progress=False, deterministic=True), straight, _shuffled())
    assert torch.are_deterministic_algorithms_enabled()
    first = _module()
    fit(make_trainer(tmp_path / "b", max_epochs=3, progress=False, deterministic=True), first, _shuffled())
    torch.manual_seed(99)
    resumed = Regression()  # another init: resuming must replace it (and the momentum) from last.ckpt
    trainer = make_trainer(tmp_path / "b", max_epochs=6, progress=False, deterministic=True)
    fit(trainer, resumed, _shuffled())  # a fresh loader: epochs 3..5 must get epochs 3..5's shuffles
    assert trainer.global_step == 6 * 4
    assert not torch.equal(first.net.weight, straight.net.weight)  # the comparison is not vacuous
    torch.testing.assert_close(resumed.net.weight, straight.net.weight, rtol=0, atol=0)
    torch.testing.assert_close(resumed.net.bias, straight.net.bias, rtol=0, atol=0)
    fresh = _module()  # resume=False ignores last.ckpt and starts over
    restarted = make_trainer(tmp_path / "b", max_epochs=1, progress=False)
    fit(restarted, fresh, _shuffled(), resume=False)
    assert restarted.global_step == 4


def test_shuffled_batches_epoch_by_epoch_and_rank_slices():
    g = torch.Generator().manual_seed(5)
    expected = [list(torch.randperm(10, generator=g).split(4)) for _ in range(3)]  # one generator, 3 epochs
    sampler = ShuffledBatches(10, 4, seed=5)
    got = [list(sampler) for _ in range(3)]
    for e in range(3):
        assert [b.tolist() for b in got[e]] == [b.tolist() for b in expected[e]]
    sampler.set_epoch(2)
    assert [b.tolist() for b in sampler] == [b.tolist() for b in expected[2]]
    ranks = [list(ShuffledBatches(10, 4, seed=5, rank=r, world=2)) for r in (0, 1)]
    for b0, b1, whole in zip(*ranks, expected[0], strict=True):
        assert sorted(b0.tolist() + b1.tolist()) == sorted(whole.tolist()) and b0.tolist() == whole[0::2].tolist()


def test_nan_loss_raises_training_diverged_naming_step_and_last_checkpoint(tmp_path):
    module = _module(nan_at_step=5)  # 4 batches per epoch: step 6 (1-based) is in epoch 1
    trainer = make_trainer(tmp_path, max_epochs=3, progress=False)
    with pytest.raises(TrainingDiverged, match=r"loss became nan at step 6 .*last good checkpoint kept at .*last\.ckpt"):
        fit(trainer, module, _loader())
    assert issubclass(TrainingDiverged, MoeAppsError)
    assert torch.isfinite(module.net.weight).all()  # stopped before the NaN gradient was applied
    kept = torch.load(tmp_path / CHECKPOINT_DIR / LAST, weights_only=False)
    assert kept["global_step"] == 4 and all(torch.isfinite(v).all() for v in kept["state_dict"].values())


def test_nan_before_any_checkpoint_says_none_was_written():
    trainer = make_trainer(None, max_epochs=1, progress=False)
    with pytest.raises(TrainingDiverged, match="step 1 .*no checkpoint was written"):
        fit(trainer, _module(nan_at_step=0), _loader())


def test_csv_log_has_one_row_per_logged_step(tmp_path):
    trainer = make_trainer(tmp_path, max_epochs=2, progress=False, log_every_n_steps=2)
    fit(trainer, _module(), _loader(), _loader())
    with open(tmp_path / LOG_DIR / "version_0" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    train_steps = [int(r["step"]) for r in rows if r.get("train_loss")]
    assert train_steps == [1, 3, 5, 7]  # 8 steps, every 2nd logged (Lightning logs at step index 1, 3, ...)
    assert sum(1 for r in rows if r.get("val_loss")) == 2  # one validation per epoch


def test_gradient_clipping_bounds_the_update():
    module = _module(lr=1.0)
    x = torch.tensor([[100.0, 0.0]])
    loader = DataLoader(TensorDataset(x, torch.tensor([1e4])), batch_size=1)
    before = [p.detach().clone() for p in module.parameters()]
    trainer = make_trainer(None, max_steps=1, grad_clip=0.5, progress=False)
    trainer.fit(module, loader)
    step = torch.cat([(p.detach() - b).flatten() for p, b in zip(module.parameters(), before, strict=True)])
    assert step.norm().item() == pytest.approx(0.5, rel=1e-5)  # SGD lr 1, first step: update = clipped gradient


def test_patience_needs_a_monitor():
    with pytest.raises(ValueError, match="monitor"):
        make_trainer(None, patience=2)
