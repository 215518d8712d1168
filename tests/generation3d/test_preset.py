"""``moca train --preset demo`` on a tiny hand-made Sweet Home 3D archive, the hub tab loading the
real-furniture model it leaves, and ``evaluate_generator`` on the validation split."""

import json

import numpy as np
import pytest
import torch

from generation3d.cli import main as moca_main
from tests.generation3d.test_sources import _box, _chair_obj, _obj, write_archive

TINY = ["--steps", "2", "--ae-steps", "2", "--d-model", "32", "--layers", "1", "--threads", "1"]


def _table_obj() -> str:
    """A y-up table (cm): a top at height 74 and four legs."""
    legs = [_box((x, 36, z), (5, 72, 5)) for x in (-40, 40) for z in (-25, 25)]
    return _obj({"top_Cube": [_box((0, 74, 0), (90, 4, 60))], "legs_Cube": legs})


@pytest.fixture(scope="module")
def preset_run(tmp_path_factory):
    """The preset run once, into the default folder of a private cache: (cache, output, stdout)."""
    root = tmp_path_factory.mktemp("preset")
    furniture = root / "furniture"
    furniture.mkdir()
    write_archive(furniture / "BlendSwap-CC-0.sh3f", {
        "chair/chair.obj": _chair_obj(),
        "chair2/chair.obj": _chair_obj(),
        "table/table.obj": _table_obj(),  # catalogue item 3 ("Table"): now a usable model
    })
    mp = pytest.MonkeyPatch()
    mp.setenv("MOE_APPS_CACHE", str(root / "cache"))
    mp.setenv("MOE_APPS_SWEETHOME3D", str(furniture))
    mp.setenv("MOCA_RENDERER", "matplotlib")
    mp.delenv("MOCA_DEMO_CKPT", raising=False)
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = moca_main(["train", "--preset", "demo", *TINY])
    assert rc == 0
    yield root / "cache", root / "cache" / "generation3d" / "demo_real_model", buf.getvalue()
    mp.undo()


def test_preset_builds_real_data_trains_and_writes_samples(preset_run):
    from generation3d.data import CATEGORIES, PartDataset
    from generation3d.sampling import MoCAPipeline

    _, out, stdout = preset_run
    ds = PartDataset.load(out / "data")
    assert json.loads((out / "data" / "meta.json").read_text())["source"] == "sweethome3d"
    assert sorted(CATEGORIES[c] for c in ds.category) == ["chair", "chair", "table"]
    assert ds.points.shape[1] == 128  # the preset's --points
    pipe = MoCAPipeline.load(out)
    assert pipe.gen.config.attention == "moca" and pipe.gen.config.d_model == 32  # model flags still apply
    info = json.loads((out / "preset.json").read_text())
    assert info["preset"] == "demo" and info["steps"] == 2 and info["ae_steps"] == 2 and info["source"] == "sweethome3d"
    # one sample per trained category, at the category's median training part count:
    # chairs have seat, legs, back (the screw is merged), tables a top and legs
    trained = [c for c in ("chair", "table") if c in pipe.categories]
    assert [(r["category"], r["parts"]) for r in info["samples"]] == [(c, {"chair": 3, "table": 2}[c]) for c in trained]
    for r in info["samples"]:
        assert (out / "samples" / r["glb"]).stat().st_size > 0 and (out / "samples" / r["png"]).stat().st_size > 0
    assert "hub's 3D tab shows this model" in stdout


def test_preset_refuses_an_existing_model_without_overwrite(preset_run, capsys, monkeypatch):
    cache, out, _ = preset_run
    monkeypatch.setenv("MOE_APPS_CACHE", str(cache))
    before = (out / "preset.json").read_bytes()
    assert moca_main(["train", "--preset", "demo", *TINY]) == 2
    assert "not empty" in capsys.readouterr().err and (out / "preset.json").read_bytes() == before


def test_preset_with_missing_furniture_is_one_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MOE_APPS_SWEETHOME3D", str(tmp_path / "nowhere"))
    assert moca_main(["train", "--preset", "demo", "--out", str(tmp_path / "run"), *TINY]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "nowhere" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run" / "generator").exists()


def test_hub_tab_defaults_to_the_real_furniture_model(preset_run, tmp_path, monkeypatch):
    gr = pytest.importorskip("gradio")
    from common import shipped
    from generation3d.demo import build_tab, checkpoint_categories, default_checkpoint, generate
    from generation3d.preset import sample_previews

    cache, out, _ = preset_run
    monkeypatch.setenv("MOE_APPS_CACHE", str(cache))
    monkeypatch.setenv("MOCA_RENDERER", "matplotlib")
    monkeypatch.delenv("MOCA_DEMO_CKPT", raising=False)
    monkeypatch.setattr(shipped, "ROOT", tmp_path)  # no shipped moca-furniture: the cache's models come next
    assert default_checkpoint() == str(out)
    assert checkpoint_categories(str(out))[0] == "chair" and "scene" not in checkpoint_categories(str(out))
    assert [p for p, _ in sample_previews(out)] == sorted(str(p) for p in (out / "samples").glob("*.png"))
    with gr.Blocks() as blocks, gr.Tab("3D"):
        build_tab()
    gallery = [b for b in blocks.blocks.values() if getattr(b, "elem_id", None) == "moca-samples"]
    assert len(gallery) == 1
    glb, png, status, _ = generate(default_checkpoint(), "chair", 3, 0, 2, out_dir=str(tmp_path))
    assert glb.endswith("chair_3parts_seed0.glb") and "generated 3 parts (moca attention" in status
    # without the real model the tab falls back to make demo's procedural one
    monkeypatch.setenv("MOE_APPS_CACHE", str(tmp_path / "empty_cache"))
    assert default_checkpoint() == str(tmp_path / "empty_cache" / "generation3d" / "demo_model")


def test_evaluate_on_the_validation_split(tiny_pipeline, tiny_data):
    from generation3d.data import SPLITS, PartDataset
    from generation3d.evaluate import evaluate_generator
    from generation3d.sampling import MoCAPipeline

    ds = PartDataset.load(tiny_data)
    train = ds.shape_ids("train", max_parts=40)
    ds.split = ds.split.copy()
    ds.split[train[:2]] = SPLITS["val"]
    res = evaluate_generator(MoCAPipeline.load(tiny_pipeline), ds, n_shapes=10, steps=2, fidelity=False, split="val")
    assert res["split"] == "val" and res["n_shapes"] == 2
    assert np.isfinite(res["cd"])


def test_furniture_preset_resumes_reusing_its_data_and_autoencoder(preset_run, tmp_path, capsys, monkeypatch):
    """``--preset furniture --resume`` starts a run and, run again, continues it: the data and the
    finished autoencoder in ``--out`` are loaded (not rebuilt), the generator goes on from its last
    full state to the new end; other settings are refused with one line."""
    from common.engine import resume_state, snapshots
    from common.pretrained import checkpoint_info
    from generation3d.sampling import load_autoencoder

    cache, _, _ = preset_run
    monkeypatch.setenv("MOE_APPS_SWEETHOME3D", str(cache.parent / "furniture"))
    monkeypatch.setenv("MOCA_RENDERER", "matplotlib")
    out = tmp_path / "run"
    args = ["train", "--preset", "furniture", "--out", str(out), "--resume", "--checkpoint-every", "1",
            "--snapshot-every", "2", *TINY]
    assert moca_main(args) == 0
    std = capsys.readouterr()
    assert "reusing" not in std.out and "training the autoencoder" in std.err
    ae_before = load_autoencoder(out / "ae").state_dict()
    data_stamp = (out / "data" / "parts.npz").stat().st_mtime_ns
    recipe = checkpoint_info(out / "ae").extra["preset_ae"]
    assert recipe["ae_steps"] == 2 and recipe["source"] == "sweethome3d" and recipe["ae_train_s"] > 0
    assert resume_state(out)["step"] == 2 and [s for s, _ in snapshots(out)] == [2]
    assert moca_main([*args, "--steps", "4"]) == 2  # --steps is part of the settings
    err = capsys.readouterr().err
    assert err.startswith("error:") and "other settings (steps)" in err and len(err.strip().splitlines()) == 1
    assert moca_main(args) == 0  # a finished run: nothing left to train, the same pipeline again
    std = capsys.readouterr()
    assert "reusing the dataset" in std.out and "reusing the autoencoder" in std.out
    assert "training the autoencoder" not in std.err
    for a, b in zip(ae_before.values(), load_autoencoder(out / "ae").state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert (out / "data" / "parts.npz").stat().st_mtime_ns == data_stamp
    assert checkpoint_info(out / "ae").extra["preset_ae"] == recipe  # the final save keeps the recipe
    assert json.loads((out / "preset.json").read_text())["preset"] == "furniture"
    assert moca_main([*args, "--ae-steps", "3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "other settings (ae_steps)" in err and len(err.strip().splitlines()) == 1
    assert moca_main([*args, "--overwrite"]) == 2
    assert "choose one" in capsys.readouterr().err
