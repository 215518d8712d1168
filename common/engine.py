"""The suite's one training engine: PyTorch Lightning with this project's defaults.

Every minibatch training is a ``lightning.pytorch.LightningModule`` (its ``training_step``,
``validation_step``, ``configure_optimizers``) fitted by a trainer from :func:`make_trainer`:

* CSV logs (``CSVLogger``) of every run in ``run_dir/logs/version_<n>/metrics.csv`` (a rerun or
  a resumed run adds a version, earlier logs stay);
* checkpoints in ``run_dir/checkpoints``: ``last.ckpt`` (resume) and, with a ``monitor``,
  ``best.ckpt`` (the best value of that validation metric); :func:`fit` resumes from
  ``last.ckpt`` when it exists;
* early stopping on ``monitor`` after ``patience`` validation rounds without improvement;
* gradient clipping by norm, ``max_steps`` / ``max_epochs``, tqdm progress;
* seeding (``seed_everything(seed, workers=True)``) and ``deterministic`` algorithms on request;
* a NaN/Inf training loss stops the run with :class:`TrainingDiverged` (before the bad
  gradient is applied), naming the step and the last good checkpoint;
* the device and precision chosen by the caller (``device="auto"``: a CUDA GPU when present,
  else the CPU; ``precision="32" | "bf16-mixed" | "16-mixed"``), resolved by ``common.device``;
* DDP when launched by ``torchrun`` (``WORLD_SIZE > 1``): NCCL with one GPU per rank on CUDA, gloo
  on the CPU; one plain process otherwise. Several nodes work the same way (``torchrun --nnodes``).

Lightning runs offline here: no logger but the CSV one, no model registry, no downloads.

    trainer = make_trainer(run_dir, max_epochs=20, monitor="val_loss", patience=3, grad_clip=1.0,
                           device="auto", precision="bf16-mixed")
    fit(trainer, module, train_loader, val_loader)        # resumes from run_dir/checkpoints/last.ckpt
    best = type(module).load_from_checkpoint(trainer.checkpoint_callback.best_model_path, ...)
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import sys
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import lightning.pytorch as L
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import Callback, Checkpoint, EarlyStopping, ModelCheckpoint, TQDMProgressBar
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.strategies import DDPStrategy
from torch.utils.data import DataLoader, Dataset, Sampler

from common.device import check_precision, resolve_device, trainer_kwargs
from common.errors import InputError, MoeAppsError

LOG_DIR = "logs"
CHECKPOINT_DIR = "checkpoints"
LAST = "last.ckpt"
BEST = "best"  # best.ckpt

# A CPU suite: Lightning's hints about dataloader workers and accelerators are noise here.
warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
warnings.filterwarnings("ignore", message=r".*is smaller than the logging interval.*")
warnings.filterwarnings("ignore", message=r".*Checkpoint directory .* exists and is not empty.*")  # resuming
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated.*")  # Lightning vs torch 2.13


class TrainingDiverged(MoeAppsError):
    """The training loss became NaN or infinite; the last good checkpoint (if any) is kept."""


class DivergenceGuard(Callback):
    """Stop training on a non-finite training loss, before its gradient is applied.

    Under DDP the check is one all-reduce, so every rank stops at the same step. The message names
    the 1-based step and where the last good checkpoint is: the ``last_model_path`` of the trainer's
    checkpoint callbacks' newest file (Lightning's ``ModelCheckpoint`` or an app's own ``Checkpoint``
    with a ``last_model_path``)."""

    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor) -> None:
        value = float(loss.detach())
        bad = not math.isfinite(value)
        if trainer.world_size > 1:
            bad = trainer.strategy.reduce_boolean_decision(bad, all=False)
        if not bad:
            return
        kept = [Path(p) for cb in trainer.checkpoint_callbacks
                for p in (getattr(cb, "last_model_path", ""), getattr(cb, "best_model_path", "")) if p]
        kept = sorted((p for p in kept if p.exists()), key=lambda p: p.stat().st_mtime_ns)
        where = f"last good checkpoint kept at {kept[-1]}" if kept else "no checkpoint was written"
        what = f"loss became {value}" if not math.isfinite(value) else "loss became non-finite on another rank"
        raise TrainingDiverged(
            f"{what} at step {trainer.global_step + 1} (learning rate too high or bad data); "
            f"training stopped, {where}"
        )


def world_size() -> int:
    """Processes in this run: ``WORLD_SIZE`` set by ``torchrun`` (1 without it)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def make_trainer(
    run_dir: str | os.PathLike | None = None,
    *,
    max_epochs: int | None = None,
    max_steps: int = -1,
    monitor: str | None = None,
    mode: str = "min",
    patience: int | None = None,
    grad_clip: float | None = None,
    seed: int | None = 0,
    deterministic: bool = False,
    progress: bool = True,
    checkpoint: bool = True,
    callbacks: Sequence[Callback] = (),
    find_unused_parameters: bool = False,
    use_distributed_sampler: bool = True,
    log_every_n_steps: int = 50,
    device: str | torch.device | None = "auto",
    precision: str = "32",
) -> L.Trainer:
    """A ``lightning.pytorch.Trainer`` with the suite's defaults (see the module docstring).

    Args:
        run_dir: where CSV logs (``logs/``) and checkpoints (``checkpoints/``) go; None writes
            neither (a throwaway run inside a benchmark).
        max_epochs, max_steps: stop after either (``max_steps=-1``: no step limit).
        monitor, mode: the logged validation metric to select ``best.ckpt`` and to early-stop on
            (``"min"`` or ``"max"``); None keeps only ``last.ckpt``.
        patience: early stopping after this many validation rounds without improvement
            (needs ``monitor``; None: no early stopping).
        grad_clip: max gradient norm (None: no clipping).
        seed: ``seed_everything(seed, workers=True)`` now (None: leave the RNGs alone).
        deterministic: ``torch.use_deterministic_algorithms`` for the run (where the math must
            repeat bit for bit on accelerators; CPU kernels are deterministic already).
        progress: tqdm progress bar (off in tests and batch jobs).
        checkpoint: write Lightning checkpoints (``last.ckpt`` / ``best.ckpt``) into ``run_dir``;
            False when the module's app writes its own through a ``Checkpoint`` in ``callbacks``.
        callbacks: more callbacks (run in this order, before the checkpoint callbacks).
        find_unused_parameters: DDP option for routed models whose unchosen experts get no gradient.
        use_distributed_sampler: under DDP, let Lightning shard a map-style ``DataLoader`` over the
            ranks; False when the module shards its own batches.
        log_every_n_steps: how often ``self.log`` values reach the CSV log.
        device: ``auto`` (CUDA when present, else CPU), ``cpu``, ``cuda`` or ``cuda:N``; under
            ``torchrun`` each rank takes its ``LOCAL_RANK``'s GPU. A GPU asked for and absent is a
            ``DeviceError``.
        precision: ``32``, ``bf16-mixed`` or ``16-mixed`` (CUDA only): Lightning's mixed precision.
    """
    if patience is not None and monitor is None:
        raise ValueError("early stopping (patience) needs a monitored metric")
    resolved = resolve_device(device)
    check_precision(precision, resolved)
    for name in ("lightning.pytorch", "lightning.fabric"):  # no "GPU available" / "Initializing" banners
        logging.getLogger(name).setLevel(logging.WARNING)
    if seed is not None:
        L.seed_everything(seed, workers=True, verbose=False)
    cbs: list[Callback] = [DivergenceGuard(), *callbacks]
    if progress:
        cbs.append(TQDMProgressBar())
    if patience is not None:
        cbs.append(EarlyStopping(monitor=monitor, mode=mode, patience=patience))
    if checkpoint and run_dir is not None:
        ckpt_dir = Path(run_dir) / CHECKPOINT_DIR
        if monitor is not None:  # first, so that trainer.checkpoint_callback is the best one
            cbs.append(ModelCheckpoint(dirpath=ckpt_dir, filename=BEST, monitor=monitor, mode=mode, save_top_k=1,
                                       enable_version_counter=False))
        # Lightning's save_last follows the monitored saves only; an unmonitored top-1 named "last"
        # is rewritten after every epoch (or validation round), which is what resuming needs.
        cbs.append(ModelCheckpoint(dirpath=ckpt_dir, filename=LAST.removesuffix(".ckpt"), save_top_k=1,
                                   enable_version_counter=False))
    world = world_size()
    dist_kw: dict[str, Any] = trainer_kwargs(resolved, world=world)
    if world > 1:  # under torchrun: devices per node and nodes from its environment
        dist_kw.update(
            num_nodes=world // dist_kw["devices"],
            strategy=DDPStrategy(process_group_backend="nccl" if resolved.type == "cuda" else "gloo",
                                 find_unused_parameters=find_unused_parameters),
        )
    else:
        dist_kw["strategy"] = "auto"
    return L.Trainer(
        **dist_kw,
        precision="32-true" if precision == "32" else precision,
        max_epochs=max_epochs,
        max_steps=max_steps,
        logger=CSVLogger(run_dir, name=LOG_DIR) if run_dir is not None else False,
        callbacks=cbs,
        enable_checkpointing=any(isinstance(cb, Checkpoint) for cb in cbs),
        enable_progress_bar=progress,
        enable_model_summary=False,
        gradient_clip_val=grad_clip,
        gradient_clip_algorithm="norm" if grad_clip is not None else None,
        deterministic=deterministic,
        use_distributed_sampler=use_distributed_sampler,
        log_every_n_steps=log_every_n_steps,
        num_sanity_val_steps=0,
    )


class ShuffledBatches(Sampler[torch.Tensor]):
    """Index batches ``(b,)`` of a fresh random permutation of ``range(n)`` every epoch, all drawn
    from one ``torch.Generator`` seeded with ``seed``: epoch ``e`` is the ``e``-th
    ``torch.randperm(n, generator=g).split(batch_size)``. Lightning calls ``set_epoch`` before
    each epoch, so a resumed run draws the same permutations as an uninterrupted one. Under DDP
    every rank draws the same global batches and keeps its slice ``[rank::world]``, so the ranks
    together see the one-process batches (exactly when ``batch_size`` divides by ``world``)."""

    def __init__(self, n: int, batch_size: int, seed: int, rank: int = 0, world: int = 1) -> None:
        self.n, self.batch_size, self.seed, self.rank, self.world = n, batch_size, seed, rank, world
        self.generator = torch.Generator().manual_seed(seed)

    def set_epoch(self, epoch: int) -> None:
        """Put the generator where it stands after ``epoch`` epochs' permutations."""
        self.generator.manual_seed(self.seed)
        for _ in range(epoch):
            torch.randperm(self.n, generator=self.generator)

    def __len__(self) -> int:
        return math.ceil(self.n / self.batch_size)

    def __iter__(self):
        for idx in torch.randperm(self.n, generator=self.generator).split(self.batch_size):
            yield idx[self.rank :: self.world]


def shuffled_loader(dataset: Dataset, batch_size: int, seed: int, rank: int = 0, world: int = 1) -> DataLoader:
    """A ``DataLoader`` over ``dataset`` (indexable by an index tensor, e.g. ``TensorDataset``) in
    ``ShuffledBatches``; its own generator keeps the global RNG untouched. Under DDP pass
    ``use_distributed_sampler=False`` to ``make_trainer`` (the sampler already shards)."""
    return DataLoader(dataset, sampler=ShuffledBatches(len(dataset), batch_size, seed, rank, world),
                      batch_size=None, generator=torch.Generator().manual_seed(seed))


# Resumable runs: an app's LightningModule keeps its own settings (and anything else to carry over,
# such as the training time of earlier sittings) under RUN_STATE in last.ckpt (``on_save_checkpoint``),
# so that a resumed run with other settings is refused before it trains.
RUN_STATE = "run_state"
SNAPSHOTS = "snapshots"  # run_dir/snapshots/step_<n>: what a run keeps for learning curves
SNAPSHOT_PREFIX = "step_"


def resume_checkpoint(run_dir: str | os.PathLike, every: int) -> ModelCheckpoint:
    """The callback that writes Lightning's full state (weights, optimizer, schedule, loop, the
    module's ``RUN_STATE``) to ``run_dir/checkpoints/last.ckpt`` every ``every`` optimizer steps,
    which :func:`fit` resumes from (for apps that write their own model checkpoints and pass
    ``checkpoint=False`` to :func:`make_trainer`)."""
    return ModelCheckpoint(dirpath=Path(run_dir) / CHECKPOINT_DIR, filename=LAST.removesuffix(".ckpt"), save_top_k=1,
                           every_n_train_steps=every, enable_version_counter=False)


def resume_state(run_dir: str | os.PathLike) -> dict | None:
    """``{"step", **RUN_STATE}`` of the resume state in ``run_dir`` (None when there is none);
    InputError naming the file when it cannot be read."""
    path = Path(run_dir) / CHECKPOINT_DIR / LAST
    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated or foreign file: say which, never a traceback
        raise InputError(f"{path} is not a readable training state ({str(exc).splitlines()[0][:120]}); "
                         "delete it to start the run again") from None
    return {"step": int(state.get("global_step", 0)), **state.get(RUN_STATE, {})}


def check_resumable(run_dir: str | os.PathLike, settings: dict) -> int:
    """The step the resume state in ``run_dir`` was saved at (0 when there is none); InputError
    when it was written by a run with other ``settings`` (its ``RUN_STATE["settings"]``)."""
    state = resume_state(run_dir)
    if state is None:
        return 0
    saved = state.get("settings")
    if saved != settings:
        saved = saved or {}
        diff = sorted(k for k in settings.keys() | saved.keys() if saved.get(k) != settings.get(k))
        raise InputError(f"{Path(run_dir) / CHECKPOINT_DIR / LAST} was written by a run with other settings "
                         f"({', '.join(diff)}); resume with the same options or start a new --out")
    return state["step"]


def snapshot_dir(run_dir: str | os.PathLike, step: int) -> Path:
    """Where a run keeps its snapshot of optimizer step ``step``."""
    return Path(run_dir) / SNAPSHOTS / f"{SNAPSHOT_PREFIX}{step}"


def snapshots(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """``(step, directory)`` of the snapshots a run kept, by step."""
    base = Path(run_dir) / SNAPSHOTS
    found = [(int(p.name.removeprefix(SNAPSHOT_PREFIX)), p) for p in base.glob(f"{SNAPSHOT_PREFIX}*")
             if p.name.removeprefix(SNAPSHOT_PREFIX).isdigit()] if base.is_dir() else []
    return sorted(found)


def last_checkpoint(trainer: L.Trainer) -> Path | None:
    """``last.ckpt`` of the trainer's ``ModelCheckpoint`` when it exists on disk, else None."""
    for cb in trainer.checkpoint_callbacks:
        if isinstance(cb, ModelCheckpoint) and cb.dirpath is not None and (Path(cb.dirpath) / LAST).is_file():
            return Path(cb.dirpath) / LAST
    return None


class _Interrupted(BaseException):
    """Ctrl-C inside a Lightning fit. Lightning answers a ``KeyboardInterrupt`` with a silent
    ``sys.exit(1)`` and SIGINT ignored from then on; SIGINT raises this instead, Lightning tears down
    and re-raises it, and :func:`ctrl_c_interrupts` turns it back into ``KeyboardInterrupt``."""


def _raise_interrupted(signum, frame):
    raise _Interrupted


@contextlib.contextmanager
def ctrl_c_interrupts():
    """Around a Lightning ``trainer.fit``: Ctrl-C raises ``KeyboardInterrupt`` out of the block (a
    CLI's "interrupted" and exit 130, after Lightning's teardown) instead of Lightning's silent exit 1.
    Main thread with Python's default SIGINT handler only; elsewhere a no-op. :func:`fit` uses it."""
    ours = threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
    previous = signal.signal(signal.SIGINT, _raise_interrupted) if ours else None
    try:
        yield
    except _Interrupted:
        raise KeyboardInterrupt from None
    finally:
        if ours:
            signal.signal(signal.SIGINT, previous)


def fit(trainer: L.Trainer, module: L.LightningModule, train_dataloaders: Any = None,
        val_dataloaders: Any = None, resume: bool = True) -> L.Trainer:
    """``trainer.fit``, continuing from ``last.ckpt`` (weights, optimizer, scheduler, loop and
    callback state) when ``resume`` and one exists; Ctrl-C leaves as ``KeyboardInterrupt``
    (:func:`ctrl_c_interrupts`). Returns the trainer."""
    ckpt = last_checkpoint(trainer) if resume else None
    with ctrl_c_interrupts():
        trainer.fit(module, train_dataloaders, val_dataloaders, ckpt_path=ckpt)
    return trainer


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
