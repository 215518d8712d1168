"""Lightning fits that stay interruptible: Ctrl-C ends a retrieval training run with exit 130.

    trainer = make_trainer(None, max_epochs=2, checkpoint=False)
    fit_interruptible(trainer, module, loader)     # KeyboardInterrupt on Ctrl-C, not sys.exit(1)
"""

from __future__ import annotations

import signal
import threading

import lightning.pytorch as L
from lightning.pytorch.trainer.states import TrainerStatus

from common.engine import fit as engine_fit


def fit_interruptible(trainer: L.Trainer, module: L.LightningModule, *loaders) -> None:
    """``common.engine.fit`` (no resume) with Ctrl-C kept a KeyboardInterrupt: Lightning turns one
    into ``sys.exit(1)`` and ignores every later SIGINT; here the SIGINT handler is restored and
    the interrupt raised again, so the CLI exits 130 with its message and ``with`` blocks (the
    temporary run directory) clean up. SIGTERM's SystemExit passes through unchanged."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None
    try:
        engine_fit(trainer, module, *loaders, resume=False)
    except SystemExit as exc:
        if exc.code == 1 and trainer.state.status == TrainerStatus.INTERRUPTED:
            raise KeyboardInterrupt from None
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
