"""A small training loop: tqdm progress, early stopping on a validation score, resumable
checkpoints, and DDP (gloo on CPU) when launched by ``torchrun``."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist
from torch import Tensor, nn
from tqdm.auto import tqdm

from common.checkpoint import load_checkpoint, load_into, save_checkpoint
from common.errors import MoeAppsError
from common.io import atomic_write

OPTIMIZER_FILE = "optimizer.pt"


class TrainingDiverged(MoeAppsError):
    """The loss became NaN or inf; the last good checkpoint (if any) is kept."""


@dataclass
class TrainResult:
    history: list[dict] = field(default_factory=list)
    best_epoch: int = -1
    best_score: float = math.nan
    stopped_early: bool = False


def is_distributed() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def setup_distributed() -> tuple[int, int]:
    """Initialise the gloo process group when launched by torchrun; returns (rank, world)."""
    if not is_distributed():
        return 0, 1
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()


def shutdown_distributed() -> None:
    """Tear the process group down with every rank at the same point (a barrier first): a gloo
    rank that destroys its group while a peer still communicates can abort. No-op when not
    initialised."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def exit_distributed(code: int = 0) -> NoReturn:
    """End a process launched by ``torchrun`` once its results are written: shut the group down,
    flush the streams and leave with ``os._exit``. gloo's worker threads can still abort the
    interpreter during finalization ("terminate called without an active exception", SIGABRT,
    about 1 run in 20 here even after a barrier; upstream PyTorch PR #179291 describes the
    race), which torchrun reports as a failed rank; skipping finalization avoids it. Only for
    entry points: nothing after this call runs."""
    shutdown_distributed()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


class Trainer:
    """Fit ``model`` with ``loss_fn(model, batch) -> scalar loss`` over ``make_batches(epoch)``.

    Args:
        model, optimizer: the module and its optimizer.
        loss_fn: returns the scalar training loss of one batch.
        make_batches: ``epoch -> iterable of batches``; under DDP each rank should yield its own
            shard (``shard_indices`` helps).
        val_fn: ``model -> score`` on validation data (no test data here); None disables early
            stopping and best-model tracking.
        minimize: whether a lower validation score is better.
        max_epochs, patience: stop after ``patience`` epochs without improvement.
        ckpt_dir: where ``best/`` and ``last/`` checkpoints go; ``last/`` lets a rerun resume.
        config: stored with the checkpoints so the model can be rebuilt.
        grad_clip: max gradient norm (None = no clipping).
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        loss_fn: Callable[[nn.Module, Any], Tensor],
        make_batches: Callable[[int], Iterable[Any]],
        val_fn: Callable[[nn.Module], float] | None = None,
        minimize: bool = True,
        max_epochs: int = 10,
        patience: int | None = None,
        ckpt_dir: str | os.PathLike | None = None,
        config: dict | None = None,
        grad_clip: float | None = None,
        progress: bool = True,
    ) -> None:
        self.rank, self.world = setup_distributed()
        self.model = model
        if self.world > 1:
            self.model = nn.parallel.DistributedDataParallel(model)
        self.optimizer, self.loss_fn, self.make_batches = optimizer, loss_fn, make_batches
        self.val_fn, self.minimize = val_fn, minimize
        self.max_epochs, self.patience = max_epochs, patience
        self.ckpt_dir = None if ckpt_dir is None else Path(ckpt_dir)
        self.config, self.grad_clip = config or {}, grad_clip
        self.progress = progress and self.rank == 0

    def _better(self, score: float, best: float) -> bool:
        if math.isnan(best):
            return True
        return score < best if self.minimize else score > best

    def _save(self, name: str, result: TrainResult, epoch: int) -> None:
        if self.ckpt_dir is None or self.rank != 0:
            return
        extra = {
            "epoch": epoch,
            "best_epoch": result.best_epoch,
            "best_score": result.best_score,
            "history": result.history,
        }
        target = self.ckpt_dir / name
        save_checkpoint(target, _unwrap(self.model).state_dict(), self.config, extra)
        with atomic_write(target / OPTIMIZER_FILE, "wb") as f:
            torch.save(self.optimizer.state_dict(), f)

    def _resume(self, result: TrainResult) -> int:
        """Load ``last/`` when present; returns the first epoch still to run."""
        if self.ckpt_dir is None or not (self.ckpt_dir / "last").is_dir():
            return 0
        state, _, extra = load_checkpoint(self.ckpt_dir / "last")
        load_into(_unwrap(self.model), state, str(self.ckpt_dir / "last"))
        opt_path = self.ckpt_dir / "last" / OPTIMIZER_FILE
        if opt_path.is_file():
            self.optimizer.load_state_dict(torch.load(opt_path, weights_only=True))
        result.history = list(extra.get("history", []))
        result.best_epoch = int(extra.get("best_epoch", -1))
        best = extra.get("best_score")
        result.best_score = math.nan if best is None else float(best)
        return int(extra["epoch"]) + 1

    def fit(self) -> TrainResult:
        result = TrainResult()
        start = self._resume(result)
        stale = 0
        if result.best_epoch >= 0:
            stale = len(result.history) - 1 - result.best_epoch
        for epoch in range(start, self.max_epochs):
            self.model.train()
            total, n = 0.0, 0
            batches = self.make_batches(epoch)
            for batch in tqdm(batches, desc=f"epoch {epoch}", disable=not self.progress, leave=False):
                loss = self.loss_fn(self.model, batch)
                if not torch.isfinite(loss):
                    raise TrainingDiverged(
                        f"loss became {loss.item()} at epoch {epoch}; last good checkpoint kept"
                        + (f" in {self.ckpt_dir}" if self.ckpt_dir else "")
                    )
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if self.grad_clip is not None:
                    nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
                self.optimizer.step()
                total, n = total + float(loss.detach()), n + 1
            row = {"epoch": epoch, "train_loss": total / max(n, 1)}
            if self.val_fn is not None:
                self.model.eval()
                with torch.no_grad():
                    score = float(self.val_fn(_unwrap(self.model)))
                row["val_score"] = score
                if self._better(score, result.best_score):
                    result.best_score, result.best_epoch, stale = score, epoch, 0
                    result.history.append(row)
                    self._save("best", result, epoch)
                else:
                    stale += 1
                    result.history.append(row)
            else:
                result.history.append(row)
            self._save("last", result, epoch)
            if self.patience is not None and stale >= self.patience:
                result.stopped_early = True
                break
        return result

    def load_best(self) -> nn.Module:
        """Load the ``best/`` weights into the model (when a best checkpoint exists)."""
        model = _unwrap(self.model)
        if self.ckpt_dir is not None and (self.ckpt_dir / "best").is_dir():
            state, _, _ = load_checkpoint(self.ckpt_dir / "best")
            load_into(model, state, str(self.ckpt_dir / "best"))
        return model


def shard_indices(
    n: int, epoch: int, seed: int, batch_size: int, rank: int = 0, world: int = 1
) -> list[Tensor]:
    """Shuffled mini-batch index tensors of ``range(n)`` for this rank (same permutation on
    every rank for a given epoch and seed; ranks take interleaved, equally sized shards)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    perm = torch.randperm(n, generator=g)
    per_rank = n // world
    mine = perm[rank : per_rank * world : world]
    return list(mine.split(batch_size))
