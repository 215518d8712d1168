"""``scripts/ship_generation3d.py`` end to end on tiny runs of a tiny ``--preset furniture``: the
three runs evaluated on their test shapes with learning curves and grids, ``shipped.json``, the
MoCA pipeline shipped (into a temporary package root) and loadable by name with its sha256
checked, by ``MoCAPipeline.load``, ``load_pretrained`` and ``moca sample``, and the README section
written from the JSON."""

from __future__ import annotations

import importlib.util
import json
import zipfile
from pathlib import Path

import pytest
import torch

from common import shipped
from common.errors import CheckpointError, InputError
from common.pretrained import load_pretrained
from generation3d import preset
from generation3d.cli import main as moca_main
from generation3d.release import README_END, README_START, readme_section, update_readme
from tests.generation3d.test_sources import _box, _obj

ROOT = Path(__file__).resolve().parents[2]
TINY_RECIPE = {"source": "sweethome3d", "points": 32, "ae_steps": 2, "steps": 4, "sample_steps": 2,
               "checkpoint_every": 2, "snapshot_every": 2}
MODEL = ["--d-model", "32", "--layers", "1", "--threads", "1"]


def _chair(h: float) -> str:
    legs = [_box((x, h / 2, z), (4, h, 4)) for x in (-18, 18) for z in (-18, 18)]
    return _obj({"seat": [_box((0, h + 1, 0), (40, 2, 40))], "legs": legs, "back": [_box((0, h + 20, -19), (40, 38, 2))]})


def _table(w: float) -> str:
    legs = [_box((x, 36, z), (5, 72, 5)) for x in (-w / 2, w / 2) for z in (-25, 25)]
    return _obj({"top": [_box((0, 74, 0), (w + 10, 4, 60))], "legs": legs})


def _archive(path: Path) -> None:
    """Four distinct chairs and four distinct tables (so each category has a test shape)."""
    items = [("chair", f"Chair {i}", _chair(40 + 3 * i)) for i in range(4)]
    items += [("table", f"Table {i}", _table(70 + 8 * i)) for i in range(4)]
    lines = ["id=Test", "provider=tester"]
    with zipfile.ZipFile(path, "w") as zf:
        for k, (kind, name, obj) in enumerate(items, 1):
            lines += [f"id#{k}=Test#{kind}{k}", f"name#{k}={name}", f"category#{k}=Living room",
                      f"icon#{k}=/t/{kind}{k}.png", f"model#{k}=/t/{kind}{k}/m.obj", f"creator#{k}=Alice"]
            zf.writestr(f"t/{kind}{k}.png", b"png")
            zf.writestr(f"t/{kind}{k}/m.obj", obj)
        zf.writestr("PluginFurnitureCatalog.properties", "\n".join(lines) + "\n")


def _script():
    spec = importlib.util.spec_from_file_location("ship_generation3d", ROOT / "scripts" / "ship_generation3d.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    """The three preset runs, trained with ``TINY_RECIPE`` as the furniture recipe: (root, runs)."""
    root = tmp_path_factory.mktemp("release")
    (root / "furniture").mkdir()
    _archive(root / "furniture" / "Tiny-CC-0.sh3f")
    mp = pytest.MonkeyPatch()
    mp.setenv("MOE_APPS_CACHE", str(root / "cache"))
    mp.setenv("MOE_APPS_SWEETHOME3D", str(root / "furniture"))
    mp.setitem(preset.PRESETS, "furniture", TINY_RECIPE)
    runs = root / "runs"
    for att in ("moca", "full", "local"):
        out = runs / f"{att}_furniture"
        assert moca_main(["train", "--preset", "furniture", "--attention", att, "--out", str(out), "--resume",
                          *MODEL]) == 0
    yield root, runs
    mp.undo()


@pytest.fixture
def pkg_root(tiny_runs, tmp_path, monkeypatch):
    """The script pointed at a temporary package root (weights), results folder and README."""
    root, _ = tiny_runs
    monkeypatch.setenv("MOE_APPS_CACHE", str(root / "cache"))
    monkeypatch.setitem(preset.PRESETS, "furniture", TINY_RECIPE)
    app = tmp_path / "generation3d"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "README.md").write_text(f"# x\n\n{README_START}\nnot yet trained\n{README_END}\n\nrest\n")
    monkeypatch.setattr(shipped, "ROOT", tmp_path)
    script = _script()
    monkeypatch.setattr(script, "APP_DIR", app)
    monkeypatch.setattr(script, "README", app / "README.md")
    return script, app, tmp_path / "results"


def _hub_tab_uses_the_shipped_model(tmp_path, monkeypatch) -> None:
    """Once ``moca-furniture`` is shipped, the 3D tab defaults to it, takes its name in the
    checkpoint box, samples from it and says what it is."""
    gr = pytest.importorskip("gradio")
    from generation3d import demo

    monkeypatch.delenv("MOCA_DEMO_CKPT", raising=False)
    monkeypatch.setenv("MOCA_RENDERER", "matplotlib")
    assert demo.default_checkpoint() == "moca-furniture"
    assert demo.allowed_checkpoint("moca-furniture") == "moca-furniture"
    assert demo.checkpoint_categories("moca-furniture") == ["chair", "table"]
    assert "the shipped MoCA pipeline" in demo.describe_model("moca-furniture")
    glb, png, _, status, _ = demo.generate_for_page("moca-furniture", "table", 4, 1, 2, "")
    assert glb.endswith("table_4parts_seed1.glb") and "generated 4 parts (moca attention" in status
    with gr.Blocks() as blocks, gr.Tab("3D"):
        demo.build_tab()
    texts = [b.value for b in blocks.blocks.values() if getattr(b, "elem_id", None) == "moca-model"]
    assert len(texts) == 1 and "`moca-furniture`: the shipped MoCA pipeline" in texts[0]
    box = [b for b in blocks.blocks.values() if getattr(b, "elem_id", None) == "moca-ckpt"]
    assert box[0].value == "moca-furniture"
    monkeypatch.setenv("MOCA_DEMO_CKPT", str(tmp_path / "mine"))  # the operator's choice still wins
    assert demo.default_checkpoint() == str(tmp_path / "mine")


def test_ship_evaluates_the_runs_and_ships_moca_by_name(tiny_runs, pkg_root, tmp_path, capsys, monkeypatch):
    from generation3d.sampling import MoCAPipeline, PipelineCheckpoint, smoke_sample

    _, runs = tiny_runs
    script, app, results = pkg_root
    # while runs train: the snapshots written so far are evaluated once and cached beside them
    cache = runs / "moca_furniture" / "snapshots" / "step_4" / "eval_test_n4_steps2.json"
    assert script.main(["--runs", str(runs), "--n", "4", "--steps", "2", "--curves-only", "--curve-every", "4"]) == 0
    assert "3 snapshot evaluations" in capsys.readouterr().out and cache.is_file()
    assert not (runs / "moca_furniture" / "snapshots" / "step_2" / "eval_test_n4_steps2.json").exists()
    stamp = cache.stat().st_mtime_ns
    assert script.main(["--runs", str(runs), "--n", "4", "--steps", "2", "--samples", "2", "--curve-every", "0",
                        "--results", str(results)]) == 0
    assert cache.stat().st_mtime_ns == stamp  # not evaluated again
    report = json.loads((results / "shipped.json").read_text())
    assert list(report["models"]) == ["moca", "full", "local"]
    for att, m in report["models"].items():
        assert m["attention"] == att and m["n_shapes"] == report["protocol"]["n_shapes"] >= 2
        assert 0 <= m["fidelity"] <= 1 and m["train_s"] > 0 and m["ae_train_s"] > 0
        assert [r["step"] for r in report["curves"][att]] == [2, 4]  # every snapshot of the run
        assert m["extrapolation"]["fidelity_0.80"]["points"] == 2
        assert {g["category"] for g in report["grids"][att]} == {"chair", "table"}
        for g in report["grids"][att]:
            assert (results / g["png"]).read_bytes().startswith(b"\x89PNG")
    # the shipped pipeline: found by name, verified, equal to the run's weights rounded to float16
    path = app / "weights" / "moca-furniture"
    meta = shipped.verify(path)
    assert meta["model_type"] == "moca_pipeline" and meta["steps"] == 4 and meta["dtype"] == "float16"
    assert meta["command"].startswith("moca train --preset furniture --attention moca")
    assert meta["metrics"]["fidelity"] == report["models"]["moca"]["fidelity"]
    assert meta["wall_s"] == pytest.approx(report["models"]["moca"]["train_s"] + report["models"]["moca"]["ae_train_s"], abs=0.1)
    rows = json.loads((path / "ATTRIBUTION.json").read_text())  # packaged: weights/*/*.json
    assert "ATTRIBUTION.json" in meta["files"] and {r.get("creator") for r in rows} == {"Alice"}
    pipe = MoCAPipeline.load("moca-furniture")
    run = MoCAPipeline.load(runs / "moca_furniture")
    for a, b in zip(run.gen.state_dict().values(), pipe.gen.state_dict().values(), strict=True):
        torch.testing.assert_close(b, a.half().float(), rtol=0, atol=0)
    assert pipe.categories == run.categories and pipe.stats.keys() == run.stats.keys()
    model = load_pretrained("moca-furniture")
    assert isinstance(model, PipelineCheckpoint) and shipped.smoke_function(meta) is smoke_sample
    assert torch.isfinite(torch.as_tensor(smoke_sample(model))).all()
    # moca sample by name
    out = tmp_path / "chair.glb"
    assert moca_main(["sample", "--ckpt", "moca-furniture", "--category", "chair", "--parts", "3", "--steps", "2",
                      "--renderer", "matplotlib", "--out", str(out)]) == 0
    assert out.stat().st_size > 0
    readme = (app / "README.md").read_text()
    assert "not yet trained" not in readme and "| moca (`moca_furniture`) |" in readme and readme.endswith("rest\n")
    assert f"{report['models']['moca']['fidelity']:.3f}" in readme
    real = tmp_path / "README.md"  # the real README with the section filled stays within 250 lines
    real.write_text((ROOT / "generation3d" / "README.md").read_text())
    assert update_readme(real, readme_section(report)) and len(real.read_text().splitlines()) <= 250
    _hub_tab_uses_the_shipped_model(tmp_path, monkeypatch)
    (app / "README.md").write_text(f"# x\n\n{README_START}\nstale\n{README_END}\n")  # rewritten from the JSON alone
    assert script.main(["--readme-only", "--results", str(results)]) == 0
    assert "stale" not in (app / "README.md").read_text() and "| moca (`moca_furniture`) |" in (app / "README.md").read_text()
    # an altered file is refused by name; a second ship needs --overwrite
    weights = path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="does not match its sha256"):
        MoCAPipeline.load("moca-furniture")
    capsys.readouterr()
    assert script.main(["--runs", str(runs), "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "--overwrite" in err and len(err.strip().splitlines()) == 1


def test_ship_refuses_an_unfinished_run(tiny_runs, pkg_root, tmp_path, monkeypatch, capsys):
    _, runs = tiny_runs
    script, _, results = pkg_root
    monkeypatch.setitem(preset.PRESETS, "furniture", {**TINY_RECIPE, "steps": 8})
    assert script.main(["--runs", str(runs), "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert "trained 4 steps, not the preset's 8" in err and len(err.strip().splitlines()) == 1
    assert not (results / "shipped.json").exists()
    with pytest.raises(InputError, match="holds no finished run"):
        from generation3d.release import finished_run

        finished_run(tmp_path, "furniture", "moca")


def test_learning_curve_skips_a_snapshot_being_written(tiny_runs, tmp_path, monkeypatch):
    """A snapshot whose generator is not written yet is skipped with ``partial`` and refused
    without; a cached result whose weights changed is measured again."""
    import shutil

    from generation3d.classifier import get_classifier
    from generation3d.data import PartDataset
    from generation3d.release import learning_curve

    root, runs = tiny_runs
    monkeypatch.setenv("MOE_APPS_CACHE", str(root / "cache"))
    run = tmp_path / "run"
    shutil.copytree(runs / "full_furniture", run)
    shutil.rmtree(run / "snapshots" / "step_4" / "generator")
    ds = PartDataset.load(run / "data")
    classifier = get_classifier(ds)
    assert [r["step"] for r in learning_curve(run, ds, 4, 2, classifier, partial=True)] == [2]
    with pytest.raises(CheckpointError, match="no complete pipeline"):
        learning_curve(run, ds, 4, 2, classifier)
    cache = run / "snapshots" / "step_2" / "eval_test_n4_steps2.json"
    saved = json.loads(cache.read_text())
    cache.write_text(json.dumps({**saved, "result": {**saved["result"], "fidelity": -1.0}}))
    assert learning_curve(run, ds, 4, 2, classifier, partial=True)[0]["fidelity"] == -1.0  # same weights: cached
    shutil.rmtree(run / "snapshots" / "step_2" / "generator")  # another complete generator in its place
    shutil.copytree(runs / "full_furniture" / "snapshots" / "step_4" / "generator", run / "snapshots" / "step_2" / "generator")
    assert learning_curve(run, ds, 4, 2, classifier, partial=True)[0]["fidelity"] >= 0  # new weights: measured


def test_readme_section_says_how_far_an_unmet_target_is():
    """Below the target the section gives the gap and the step the curve's line reaches it at."""
    from common.shipped import steps_to_reach

    curve = [{"step": s, "fidelity": f} for s, f in ((5000, 0.60), (10000, 0.65), (20000, 0.70))]
    metrics = {k: 0.5 for k in ("cd", "fscore", "part_fscore", "coverage", "mmd", "1nna", "part_count_acc")}
    moca = {"run": "moca_furniture", "train_s": 3600.0, **metrics, "fidelity": 0.70,
            "extrapolation": {"fidelity_0.80": steps_to_reach(curve, "fidelity", 0.80)}}
    report = {"protocol": {"fidelity_target": 0.80, "recipe": {"steps": 20000}, "n_shapes": 46, "sampling_steps": 20,
                           "classifier_test_acc": 0.89},
              "shipped": {"name": "moca-furniture", "attention": "moca"}, "models": {"moca": moca},
              "curves": {"moca": curve}, "grids": {"moca": []}}
    text = readme_section(report)
    assert "**not met**" in text and "0.10 short" in text and "+0.050 per doubling" in text
    assert "about 80,000 steps would reach 0.80" in text  # 0.70 + 2 doublings x 0.05
    assert "one shape moves fidelity by 0.022 (binomial sd 0.07 at 0.70)" in text
    flat = [{**r, "fidelity": 0.70 + 0.001 * k} for k, r in enumerate(curve)]  # 0.1 short at ~0.0007 per doubling
    moca["extrapolation"]["fidelity_0.80"] = steps_to_reach(flat, "fidelity", 0.80)
    assert "x the budget: more steps alone will not reach it" in readme_section(report)
    moca["fidelity"] = 0.85
    assert "short" not in readme_section(report) and "0.80: met" in readme_section(report)
