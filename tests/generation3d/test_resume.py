"""``fit(..., resume=True)``: an interrupted generator run continued from ``checkpoints/last.ckpt``
ends with the weights of an uninterrupted run, keeps its snapshots, and refuses a state written
with other settings."""

import pytest
import torch
from lightning.pytorch.callbacks import Callback

import generation3d.train as train_module
from common.engine import resume_state, snapshots
from common.errors import InputError
from generation3d.data import PartDataset
from generation3d.model import AEConfig, GenConfig
from generation3d.sampling import MoCAPipeline
from generation3d.train import fit, pretrain

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
def setup(tmp_path_factory):
    """Procedural shapes and a scene of more than ``DISTILL_QUERIES`` parts (whose distillation
    target draws its query parts from the global RNG), a tiny autoencoder and a MoCA config with
    a dense warm-up over the first third (the cut at step 4 falls after the phase change)."""
    from generation3d.attention import DISTILL_QUERIES
    from generation3d.shapes import build_dataset

    torch.set_num_threads(1)
    data = tmp_path_factory.mktemp("resume_data")
    build_dataset(data, n_per_category=1, n_scenes=6, n_points=32, seed=0, min_scene_parts=DISTILL_QUERIES + 4)
    ds = PartDataset.load(data)
    assert max(ds.n_parts(int(i)) for i in ds.shape_ids("train")) > DISTILL_QUERIES
    ae, _ = pretrain(ds, AEConfig(n_latents=4, d_latent=4, d_model=32, n_out=32), steps=2, batch_size=8)
    cfg = GenConfig(n_latents=4, d_latent=4, max_parts=64, d_model=32, n_layers=1, dense_warmup=1 / 3)
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
    assert [s for s, _ in snapshots(tmp_path / "cut")] == [3, 6]
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


def test_cli_resume_without_a_preset(tiny_data, tiny_pipeline, tmp_path, capsys):
    """``moca train --resume`` with ``--data-dir`` and ``--ae``: the same command starts and
    continues a run; ``--overwrite`` or ``--checkpoint-every 0`` with it are one-line errors."""
    from generation3d.cli import main as moca_main

    out = tmp_path / "run"
    args = ["train", "--data-dir", str(tiny_data), "--ae", str(tiny_pipeline / "ae"), "--out", str(out), "--resume",
            "--steps", "3", "--checkpoint-every", "1", "--d-model", "32", "--layers", "1", "--max-parts", "40",
            "--threads", "1"]
    assert moca_main(args) == 0
    assert resume_state(out)["step"] == 3
    first = MoCAPipeline.load(out).gen.state_dict()
    assert moca_main(args) == 0  # continued: nothing left to train, the same generator saved again
    for a, b in zip(first.values(), MoCAPipeline.load(out).gen.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    capsys.readouterr()
    for extra, message in ((["--overwrite"], "choose one"), (["--checkpoint-every", "0"], "--checkpoint-every > 0")):
        assert moca_main([*args, *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error:") and message in err and len(err.strip().splitlines()) == 1
    assert moca_main([a for a in args if a != "--resume"]) == 2  # without --resume a used --out is refused
    assert "not empty" in capsys.readouterr().err
    (out / "checkpoints" / "last.ckpt").unlink()  # a finished run without a state is never retrained over
    before = (out / "generator" / "model.safetensors").read_bytes()
    assert moca_main(args) == 2
    assert "no training state to resume" in capsys.readouterr().err
    assert (out / "generator" / "model.safetensors").read_bytes() == before
