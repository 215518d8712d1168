"""``fit(..., resume=True)``: an interrupted generator run continued from ``checkpoints/last.ckpt``
ends with the weights of an uninterrupted run, keeps its snapshots, and refuses a state written
with other settings."""

import pytest
import torch
from lightning.pytorch.callbacks import Callback

import generation3d.train as train_module
from common.errors import InputError
from generation3d.data import PartDataset
from generation3d.model import AEConfig, GenConfig
from generation3d.sampling import MoCAPipeline
from generation3d.train import fit, pretrain, resume_state, snapshot_steps

STEPS = 6


class _Killed(RuntimeError):
    pass


class _KillAt(Callback):
    """Raises once step ``at`` is done (after the snapshot callback, as a kill would land)."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.at:
            raise _Killed(f"killed after step {self.at}")


@pytest.fixture(scope="module")
def setup(tiny_data):
    torch.set_num_threads(1)
    ds = PartDataset.load(tiny_data)
    ae, _ = pretrain(ds, AEConfig(n_latents=4, d_latent=4, d_model=32, n_out=64), steps=2, batch_size=8)
    # MoCA with a dense warm-up over the first third: the cut at step 4 falls after the phase change
    cfg = GenConfig(n_latents=4, d_latent=4, max_parts=40, d_model=32, n_layers=1, dense_warmup=1 / 3)
    return ds, ae, cfg


def _run(setup, out, seed_init=0, kill_at=None, **kw):
    """``fit`` into ``out`` (resumable, full state every 2 steps, snapshots every 3), the model
    initialised from ``seed_init``; ``kill_at``: the run dies after that step."""
    ds, ae, cfg = setup
    torch.manual_seed(seed_init)
    kw = {"steps": STEPS, "batch_size": 4, "run_dir": out, "resume": True, "checkpoint_every": 2,
          "snapshot_every": 3, **kw}
    with pytest.MonkeyPatch.context() as mp:
        if kill_at is not None:
            make = train_module.make_trainer
            mp.setattr(train_module, "make_trainer",
                       lambda *a, callbacks=(), **k: make(*a, callbacks=[*callbacks, _KillAt(kill_at)], **k))
        return fit(ds, ae, cfg, **kw)


def test_resumed_run_matches_uninterrupted_run(setup, tmp_path):
    whole, _, hist_whole = _run(setup, tmp_path / "whole")
    with pytest.raises(_Killed):
        _run(setup, tmp_path / "cut", kill_at=5)
    assert resume_state(tmp_path / "cut")["step"] == 4
    # another initialisation: everything must come from the saved state
    resumed, _, hist = _run(setup, tmp_path / "cut", seed_init=1)
    for (name, a), b in zip(whole.state_dict().items(), resumed.state_dict().values(), strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=0, msg=name)
    assert [h["loss"] for h in hist] == [h["loss"] for h in hist_whole]  # the history spans both sittings
    assert resume_state(tmp_path / "cut")["step"] == STEPS
    assert [s for s, _ in snapshot_steps(tmp_path / "cut")] == [3, 6]
    snap = MoCAPipeline.load(tmp_path / "cut" / "snapshots" / "step_6")
    for a, b in zip(whole.state_dict().values(), snap.gen.state_dict().values(), strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=0)


def test_a_state_of_other_settings_is_refused(setup, tmp_path):
    _run(setup, tmp_path / "run", steps=2)
    with pytest.raises(InputError, match=r"other settings \(lr, steps\)"):
        _run(setup, tmp_path / "run", steps=4, lr=5e-4)
    ds, ae, cfg = setup
    with pytest.raises(InputError, match="checkpoint_every"):
        fit(ds, ae, cfg, steps=2, run_dir=tmp_path / "x", resume=True)
