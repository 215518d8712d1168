"""Models: save/load round trips, determinism, part-range and checkpoint errors."""

import numpy as np
import pytest
import torch

from common.errors import CheckpointError, InputError
from generation3d.model import AEConfig, GenConfig, PartAutoencoder, PartFlowTransformer
from generation3d.sampling import MoCAPipeline, load_autoencoder, save_autoencoder


@pytest.mark.parametrize("attention", ["moca", "full", "topk", "local"])
def test_generator_shapes_and_save_load_round_trip(attention, tmp_path):
    torch.manual_seed(0)
    cfg = GenConfig(n_latents=4, d_latent=3, max_parts=10, d_model=16, n_heads=2, n_layers=2, attention=attention)
    model = PartFlowTransformer(cfg)
    for p in model.parameters():  # zero-init heads would make every output 0: perturb
        p.data.add_(0.01 * torch.randn_like(p))
    model.eval()
    z, box = torch.randn(2, 7, 4, 3), torch.randn(2, 7, 6)
    args = (z, box, torch.tensor([10.0, 900.0]), torch.tensor([0, 5]), torch.tensor([7, 5]),
            torch.tensor([[1] * 7, [1] * 5 + [0] * 2], dtype=torch.bool))
    vz, vb = model(*args)
    assert vz.shape == z.shape and vb.shape == box.shape
    model.save_pretrained(tmp_path)
    clone = PartFlowTransformer.from_pretrained(tmp_path)
    for a, b in zip(model(*args), clone(*args), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_autoencoder_round_trip_and_determinism(tmp_path):
    torch.manual_seed(0)
    ae = PartAutoencoder(AEConfig(n_latents=4, d_latent=4, d_model=16, n_out=32)).eval()
    pts = torch.rand(3, 50, 3) * 2 - 1
    z = ae.encode(pts)
    assert z.shape == (3, 4, 4) and ae.decode(z).shape == (3, 32, 3)
    save_autoencoder(ae, tmp_path / "ae")
    torch.testing.assert_close(load_autoencoder(tmp_path / "ae")(pts), ae(pts), rtol=0, atol=0)
    # permutation invariance of the encoder (a set encoder)
    torch.testing.assert_close(ae.encode(pts[:, torch.randperm(50)]), z, atol=1e-5, rtol=0)


def test_pipeline_sampling_is_deterministic_and_checks_requests(tiny_pipeline):
    pipe = MoCAPipeline.load(tiny_pipeline)
    a = pipe.sample("chair", 6, seed=3, steps=3)[0]
    b = MoCAPipeline.load(tiny_pipeline).sample("chair", 6, seed=3, steps=3)[0]
    assert a.points.shape == (6, 64, 3) and a.boxes.shape == (6, 6)
    np.testing.assert_array_equal(a.points, b.points)
    assert not np.array_equal(a.points, pipe.sample("chair", 6, seed=4, steps=3)[0].points)
    with pytest.raises(InputError, match="unknown category"):
        pipe.sample("spaceship", 6)
    with pytest.raises(InputError, match="outside the trained range"):
        pipe.sample("chair", 41)
    pipe.sample("none", 3, steps=2)  # unconditional
    layout = np.tile(np.array([[0.0, 0, 0, 0.4, 0.4, 0.2]], np.float32), (3, 1))
    layout[:, 0] = [-0.5, 0.0, 0.5]
    g = pipe.sample("table", 3, steps=2, layout=layout)[0]
    np.testing.assert_allclose(g.boxes, layout, atol=1e-5)
    lo, hi = layout[:, None, :3] - layout[:, None, 3:] / 2, layout[:, None, :3] + layout[:, None, 3:] / 2
    assert ((g.points >= lo - 1e-5) & (g.points <= hi + 1e-5)).all()
    with pytest.raises(InputError, match="layout"):
        pipe.sample("table", 3, layout=layout[:2])


def test_pipelines_refuse_categories_they_were_not_trained_on(tiny_pipeline, tmp_path):
    pipe = MoCAPipeline.load(tiny_pipeline)
    assert pipe.categories == ["chair", "table", "shelf", "lamp", "scene"]  # the procedural training data
    with pytest.raises(InputError, match="unknown category 'sofa' for this model; it was trained on chair, table"):
        pipe.sample("sofa", 3, steps=1)
    # a checkpoint saved before the list was kept: its first n_categories categories
    pipe.gen.config.n_categories = 5
    old = MoCAPipeline(pipe.ae, pipe.gen, {k: v.tolist() for k, v in pipe.stats.items()})
    assert old.categories == ["chair", "table", "shelf", "lamp", "scene"]
    with pytest.raises(InputError, match="'bed'"):
        old.sample("bed", 3, steps=1)
    # a model trained on chairs only, saved and loaded
    MoCAPipeline(pipe.ae, pipe.gen, {k: v.tolist() for k, v in pipe.stats.items()}, categories=["chair"]).save(tmp_path)
    only = MoCAPipeline.load(tmp_path)
    assert only.sample("chair", 3, steps=1)[0].boxes.shape == (3, 6)
    with pytest.raises(InputError, match="'table'"):
        only.sample("table", 3, steps=1)


def test_corrupt_and_missing_checkpoints(tiny_pipeline, tmp_path):
    import shutil

    with pytest.raises(CheckpointError, match="no checkpoint"):
        MoCAPipeline.load(tmp_path / "missing")
    bad = tmp_path / "bad"
    shutil.copytree(tiny_pipeline, bad)
    weights = bad / "generator" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    before = weights.read_bytes()
    with pytest.raises(CheckpointError, match="corrupt"):
        MoCAPipeline.load(bad)
    assert weights.read_bytes() == before  # nothing overwritten
    (bad / "generator" / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError):
        MoCAPipeline.load(bad)


def test_training_reduces_loss_and_is_seeded(tiny_data):
    from generation3d.data import PartDataset
    from generation3d.train import pretrain

    ds = PartDataset.load(tiny_data)
    cfg = AEConfig(n_latents=4, d_latent=4, d_model=16, n_out=64)
    ae1, h1 = pretrain(ds, cfg, steps=40, batch_size=16, lr=3e-3, seed=0)
    ae2, h2 = pretrain(ds, cfg, steps=40, batch_size=16, lr=3e-3, seed=0)
    assert h1 == h2
    assert h1[-1]["loss"] < 0.5 * h1[0]["loss"]


def test_box_parameterisation_round_trip_keeps_sizes_positive():
    from generation3d.geometry import MIN_SIZE, box_to_param, param_to_box

    boxes = np.array([[0.1, -0.2, 0.3, 0.01, 0.5, 2.0], [0, 0, 0, 1e-5, 1.0, 1.0]], np.float32)
    p = box_to_param(boxes)
    np.testing.assert_allclose(p[0, 3:], np.log([0.01, 0.5, 2.0]), rtol=1e-6)
    np.testing.assert_allclose(param_to_box(p)[0], boxes[0], rtol=1e-6)
    assert param_to_box(p)[1, 3] == pytest.approx(MIN_SIZE)  # clamped, never zero
    # any generator output, however far off, decodes to a positive size
    assert (param_to_box(torch.tensor([[0, 0, 0, -30.0, -5.0, 3.0]]))[:, 3:] > 0).all()
    torch.testing.assert_close(box_to_param(torch.from_numpy(boxes)), torch.from_numpy(p))


def test_generator_rejects_more_parts_than_trained_and_bad_configs():
    model = PartFlowTransformer(GenConfig(n_latents=2, d_latent=2, max_parts=4, d_model=16, n_heads=2, n_layers=1))
    z, box = torch.zeros(1, 5, 2, 2), torch.zeros(1, 5, 6)
    with pytest.raises(InputError, match="exceeds the trained maximum 4"):
        model(z, box, torch.tensor([1.0]), torch.tensor([0]), torch.tensor([4]))
    with pytest.raises(InputError, match="divisible"):
        GenConfig(d_model=30, n_heads=4)
    with pytest.raises(InputError, match="top_k >= 1"):
        GenConfig(top_k=0)
    with pytest.raises(InputError, match="unknown attention"):
        GenConfig(attention="linear")


def test_checkpoints_of_the_wrong_kind_or_version_are_refused(tiny_pipeline, tmp_path):
    import json
    import shutil

    old = tmp_path / "old"
    shutil.copytree(tiny_pipeline, old)
    meta = old / "generator" / "config.json"
    d = json.loads(meta.read_text())
    del d["extra"]["box_param"]  # as written before boxes were generated as centre + log size
    meta.write_text(json.dumps(d))
    with pytest.raises(CheckpointError, match="older box parameterisation"):
        MoCAPipeline.load(old)
    swapped = tmp_path / "swapped"
    shutil.copytree(tiny_pipeline, swapped)
    shutil.rmtree(swapped / "ae")
    shutil.copytree(tiny_pipeline / "generator", swapped / "ae")  # a generator where the AE should be
    with pytest.raises(CheckpointError, match="holds a generation3d model 'moca_generator', not generation3d 'part_autoencoder'"):
        MoCAPipeline.load(swapped)


def test_training_with_too_small_max_parts_is_a_clear_error(tiny_data, tiny_pipeline, tmp_path, capsys):
    from generation3d.cli import main

    out = tmp_path / "run"
    assert main(["train", "--data-dir", str(tiny_data), "--ae", str(tiny_pipeline / "ae"), "--out", str(out),
                 "--steps", "1", "--max-parts", "2", "--d-model", "16", "--layers", "1"]) == 2
    assert "no training shapes with at most 2 parts" in capsys.readouterr().err and not out.exists()
    assert main(["train", "--data-dir", str(tiny_data), "--ae", str(tiny_pipeline / "ae"), "--out", str(out),
                 "--steps", "1", "--d-model", "30"]) == 2
    assert "divisible" in capsys.readouterr().err


def test_generator_checkpoints_of_an_older_version_are_refused_in_one_line(tiny_pipeline, tmp_path):
    """Config version 1 (with the removed MoCA variants' fields) and format 1 (``common.checkpoint``)
    were never shipped: loading one is a one-line CheckpointError, not a guess."""
    import json
    import shutil

    from common.errors import CheckpointError

    for fmt, match in ((1, "format version 1, older than this version reads \\(2\\); retrain"),
                       (2, "generation3d 'moca_generator' config version 1, older than this version reads "
                           "\\(2\\); retrain")):
        old = tmp_path / f"v{fmt}"
        shutil.copytree(tiny_pipeline, old)
        meta = old / "generator" / "config.json"
        d = json.loads(meta.read_text())
        d["format_version" if fmt == 1 else "config_version"] = 1
        meta.write_text(json.dumps(d))
        with pytest.raises(CheckpointError, match=match) as err:
            MoCAPipeline.load(old)
        assert "\n" not in str(err.value)
