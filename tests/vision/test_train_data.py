import numpy as np
import pytest
import torch
from PIL import Image

from common.engine import TrainingDiverged
from common.errors import DataError, InputError
from tests.vision.conftest import tiny_moh
from vision import cli
from vision.data import check_images, fashion_mnist_images, load_image_folder
from vision.models import load_backbone
from vision.sampling import CHECKPOINT, SAMPLERS, MoHPipeline, grid_image, make_sampler, read_train_state
from vision.train import TrainConfig, fit


def _images(n=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 16, 16, generator=g) * 2 - 1


def test_fashion_mnist_is_padded_and_scaled():
    x, y = fashion_mnist_images("test", size=32, limit=10)
    assert x.shape == (10, 1, 32, 32) and y.shape == (10,)
    assert x.min() >= -1 and x.max() <= 1
    assert torch.all(x[:, :, :2] == -1) and torch.all(x[:, :, :, -2:] == -1)  # padding is background
    with pytest.raises(InputError, match="28 \\+ an even padding"):
        fashion_mnist_images("test", size=31, limit=1)


def test_image_folder_loader(tmp_path):
    for i, size in enumerate([(40, 30), (20, 20)]):
        Image.fromarray(np.full((size[1], size[0], 3), 60 * i, dtype=np.uint8)).save(tmp_path / f"{i}.png")
    x = load_image_folder(tmp_path, size=16, channels=3)
    assert x.shape == (2, 3, 16, 16)
    assert torch.allclose(x[0], torch.full_like(x[0], -1.0)) and torch.allclose(x[1], torch.full_like(x[1], 60 / 127.5 - 1))
    assert load_image_folder(tmp_path, size=8, channels=1).shape == (2, 1, 8, 8)


def test_image_folder_errors(tmp_path):
    with pytest.raises(DataError, match="no images"):
        load_image_folder(tmp_path, size=16)
    with pytest.raises(DataError, match="does not exist"):
        load_image_folder(tmp_path / "nope", size=16)
    (tmp_path / "bad.png").write_bytes(b"garbage")
    with pytest.raises(DataError, match="cannot read image"):
        load_image_folder(tmp_path, size=16)


def test_check_images_rejects_wrong_size_channels_nan():
    check_images(_images(), 1, 16)
    with pytest.raises(InputError, match="channels"):
        check_images(torch.zeros(2, 3, 16, 16), 1, 16)
    with pytest.raises(InputError, match="expects \\(16, 16\\)"):
        check_images(torch.zeros(2, 1, 32, 32), 1, 16)
    bad = _images()
    bad[0, 0, 0, 0] = float("nan")
    with pytest.raises(InputError, match="NaN"):
        check_images(bad, 1, 16)


def test_training_reduces_loss_and_checkpoint_round_trips(tmp_path):
    torch.manual_seed(0)
    model = tiny_moh()
    x = _images(32)
    res = fit(model, x, TrainConfig(steps=30, batch_size=16, lr=3e-3, log_every=5, checkpoint_every=10), out_dir=tmp_path)
    first = np.mean([h["loss"] for h in res.history[:2]])
    last = np.mean([h["loss"] for h in res.history[-2:]])
    assert last < first
    assert read_train_state(tmp_path / CHECKPOINT)["step"] == 30
    loaded = load_backbone(tmp_path / CHECKPOINT)
    xt = _images(2, seed=3)
    with torch.no_grad():
        assert torch.equal(model(xt, 100).sample, loaded(xt, 100).sample)
    assert res.route_log and {"timestep", "depth", "transform", "levels"} <= set(res.route_log[0])


def test_training_is_deterministic_under_seed():
    losses = []
    for _ in range(2):
        torch.manual_seed(0)
        model = tiny_moh()
        losses.append([h["loss"] for h in fit(model, _images(), TrainConfig(steps=4, batch_size=8, log_every=1)).history])
    assert losses[0] == losses[1]


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
    torch.manual_seed(0)
    model = tiny_moh()
    fit(model, _images(), TrainConfig(steps=2, batch_size=8, checkpoint_every=1), out_dir=tmp_path)
    ck = tmp_path / CHECKPOINT
    before = {p.name: p.read_bytes() for p in ck.iterdir()}
    with torch.no_grad():
        model.final.out.bias.fill_(float("nan"))
    with pytest.raises(TrainingDiverged, match="loss became nan at step 1 .*no checkpoint was written"):
        fit(model, _images(), TrainConfig(steps=3, batch_size=8, checkpoint_every=1), out_dir=tmp_path)
    assert {p.name: p.read_bytes() for p in ck.iterdir()} == before
    assert read_train_state(ck)["step"] == 2


def test_nan_mid_run_names_last_good_checkpoint(tmp_path):
    torch.manual_seed(0)
    model = tiny_moh()

    def poison(step, m, _sampling_model):
        if step == 2:
            with torch.no_grad():
                m.final.out.bias.fill_(float("nan"))

    with pytest.raises(TrainingDiverged, match="step 3 .*last good checkpoint kept at .*checkpoint"):
        fit(model, _images(), TrainConfig(steps=5, batch_size=8, checkpoint_every=1), out_dir=tmp_path, callback=poison)
    assert read_train_state(tmp_path / CHECKPOINT)["step"] == 2
    assert torch.isfinite(load_backbone(tmp_path / CHECKPOINT).final.out.bias).all()


def test_pipeline_samples_and_traces_routes():
    torch.manual_seed(0)
    model = tiny_moh().eval()
    pipe = MoHPipeline(model, make_sampler("ddim"))
    a = pipe(batch_size=3, num_inference_steps=4, generator=torch.Generator().manual_seed(0), return_intermediates=True)
    b = pipe(batch_size=3, num_inference_steps=4, generator=torch.Generator().manual_seed(0))
    assert a.images.shape == (3, 16, 16, 1) and a.images.min() >= 0 and a.images.max() <= 1
    assert np.array_equal(a.images, b.images)
    assert [r["timestep"] for r in a.trace] == sorted((r["timestep"] for r in a.trace), reverse=True)
    assert len(a.trace) == 4 and {"depth", "levels", "transform", "sample_layers"} <= set(a.trace[0])
    assert a.intermediates.shape == (4, 3, 1, 16, 16)
    ddpm = MoHPipeline(model, make_sampler("ddpm"))(batch_size=2, num_inference_steps=3, generator=torch.Generator().manual_seed(0))
    assert np.isfinite(ddpm.images).all()
    with pytest.raises(InputError):
        make_sampler("euler")
    assert make_sampler("dpmsolver++").config.timestep_spacing == "linspace"  # from T - 1 (sampler_choice)
    assert set(SAMPLERS) == set(cli.SAMPLERS)  # the CLI names them without importing torch


def test_dpmsolver_samples_deterministically_and_traces_its_x0_predictions():
    torch.manual_seed(0)
    model = tiny_moh()
    model = model.perturbed(model).eval()  # a zero-initialised head would give every sampler a grey image
    pipe = MoHPipeline(model, make_sampler("dpmsolver++"))
    a = pipe(batch_size=2, num_inference_steps=3, generator=torch.Generator().manual_seed(0), return_intermediates=True)
    b = pipe(batch_size=2, num_inference_steps=3, generator=torch.Generator().manual_seed(0))
    assert np.array_equal(a.images, b.images) and len(a.trace) == 3 and a.intermediates.shape == (3, 2, 1, 16, 16)
    # an x0-prediction model's first intermediate is its own output on the initial noise
    first_t = a.trace[0]["timestep"]
    noise = torch.randn((2, 1, 16, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        x0 = model(noise, torch.full((2,), first_t)).sample.clamp(-1, 1)
    np.testing.assert_allclose(a.intermediates[0], x0.numpy(), atol=1e-6)
    assert not np.array_equal(a.images, MoHPipeline(model, make_sampler("ddim"))(
        batch_size=2, num_inference_steps=3, generator=torch.Generator().manual_seed(0)).images)


def test_grid_image_layout():
    imgs = np.zeros((5, 2, 3, 1))
    imgs[4] = 1.0
    g = grid_image(imgs, nrow=3)
    assert g.shape == (2 * 3 + 1, 3 * 4 + 1, 1)
    assert g[4:6, 5:8].min() == 255 and g[1:3, 1:4].max() == 0  # 5th image at row 1, col 1


def test_resumed_run_matches_uninterrupted_run(tmp_path):
    """Killed after step 4 of 6 (full state saved every 2 steps), a ``resume`` run trains steps 5-6
    on the same batches, so its weights equal the uninterrupted run's; snapshots are kept."""
    cfg = TrainConfig(steps=6, batch_size=8, checkpoint_every=2, snapshot_every=3, ema_decay=0.9)
    torch.manual_seed(0)
    whole = tiny_moh()
    fit(whole, _images(), cfg, out_dir=tmp_path / "whole", resume=True)

    def stop(step, m, _sampling_model):
        if step == 5:
            raise RuntimeError("killed")

    torch.manual_seed(0)
    with pytest.raises(RuntimeError, match="killed"):
        fit(tiny_moh(), _images(), cfg, out_dir=tmp_path / "cut", resume=True, callback=stop)
    torch.manual_seed(1)  # a different initialisation: everything must come from the saved state
    resumed = tiny_moh()
    res = fit(resumed, _images(), cfg, out_dir=tmp_path / "cut", resume=True)
    assert res.steps == 6
    for a, b in zip(whole.state_dict().values(), resumed.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert read_train_state(tmp_path / "cut" / CHECKPOINT)["step"] == 6
    assert sorted(p.name for p in (tmp_path / "cut" / "snapshots").iterdir()) == ["step_3", "step_6"]
    other = TrainConfig(steps=6, batch_size=4, checkpoint_every=2)
    with pytest.raises(InputError, match="other settings .*batch_size"):
        fit(tiny_moh(), _images(), other, out_dir=tmp_path / "cut", resume=True)
