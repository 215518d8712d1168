"""Default training and evaluation on the official FashionIQ and Shoes layouts as released (no
description or attribute files), through the CLI and the Python API; the descriptions file; the
validation carve and the phase-2 step budget."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from common.errors import DataError
from retrieval.captions import split_clauses, split_sentences
from retrieval.cli import main
from retrieval.data import carve_validation, load_dataset, load_fashioniq
from retrieval.embed import embed_gallery, embed_queries
from retrieval.evaluate import evaluate_split
from retrieval.features import prepare_features
from retrieval.registry import build_model, load_model
from retrieval.text import MiniLMEncoder, text_key
from retrieval.train import (
    PHASE2_BUDGET_EPOCHS,
    PHASE2_MAX_STEPS,
    PHASE2_MIN_STEPS,
    TrainConfig,
    fit,
    phase2_max_steps,
)

from .official_layouts import write_fashioniq, write_shoes

DESCRIPTIONS = {"Dt000": "A red square dress. Cotton.", "Dt001": "A red bar dress", "St000": "Red shirt."}


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    root = tmp_path_factory.mktemp("official")
    return {"fashioniq": write_fashioniq(root / "fiq"), "shoes": write_shoes(root / "shoes")}


@pytest.fixture(scope="module")
def official_cache(layouts, tmp_path_factory):
    """Text cache with hash embeddings for every caption clause and description sentence."""
    from .conftest import HashEncoder

    texts = set()
    for f in (layouts["fashioniq"] / "captions").glob("*.json"):
        for c in json.loads(f.read_text()):
            texts.update(split_clauses(" and ".join(c["captions"])))
    for c in json.loads((layouts["shoes"] / "relative_captions_shoes.json").read_text()):
        texts.update(split_clauses(c["RelativeCaption"]))
    for d in DESCRIPTIONS.values():
        texts.update(split_sentences(d))
    texts = sorted(texts)
    cache = tmp_path_factory.mktemp("cache")
    MiniLMEncoder(cache=cache / "retrieval")._write_shard([text_key(t) for t in texts], HashEncoder().encode(texts))
    return cache


@pytest.mark.parametrize("dataset", ["fashioniq", "shoes"])
def test_cli_default_train_and_eval_on_official_layout(dataset, layouts, official_cache, tmp_path, monkeypatch,
                                                       capsys):
    monkeypatch.setenv("MOE_APPS_CACHE", str(official_cache))
    root, model = layouts[dataset], tmp_path / "model"
    assert main(["train", "--dataset", dataset, "--root", str(root), "--out", str(model)]) == 0
    out = capsys.readouterr().out
    assert "descriptions: none found" in out
    assert "phase 1 objectives: image-image" in out and "attributes" not in out.split("phase 1 objectives")[1]
    stop = next(line for line in out.splitlines() if line.startswith("phase 2 stopped after"))
    assert "early stopping" in stop or "step budget" in stop
    assert (model / "model.safetensors").is_file()
    assert list((model / "training" / "phase2" / "logs").rglob("metrics.csv"))
    extra = json.loads((model / "config.json").read_text())["extra"]
    assert [h["phase"] for h in extra["training"]] == [1, 2]
    split = "val" if dataset == "fashioniq" else "test"
    metrics = tmp_path / "m.json"
    assert main(["eval", "--dataset", dataset, "--root", str(root), "--model", str(model), "--split", split,
                 "--out", str(metrics)]) == 0
    m = json.loads(metrics.read_text())
    cats = ["dress", "shirt"] if dataset == "fashioniq" else ["shoes"]
    assert {f"R@10/{c}" for c in cats} <= set(m) and all(0 <= m[f"R@1/{c}"] <= 100 for c in cats)


@pytest.mark.parametrize("dataset", ["fashioniq", "shoes"])
def test_python_api_trains_and_evaluates(dataset, layouts, hash_encoder):
    train = load_dataset(dataset, layouts[dataset], "train")
    assert train.descriptions is None and train.attributes is None
    model, lines = build_model("moa3cir"), []
    cfg = TrainConfig(phase1_epochs=1, phase2_epochs=8 if dataset == "fashioniq" else 2, batch_size=8, val_fraction=0)
    history = fit(model, train, cfg, log=lines.append, encoder=hash_encoder)
    assert history[-1]["phase"] == 2 and history[-1]["stopped"] == phase2_max_steps(len(train.triplets), cfg)
    assert any(line.startswith("phase 1 objectives: image-image") for line in lines)
    test = load_dataset(dataset, layouts[dataset], "val")
    f = prepare_features(test, hash_encoder)
    q, _ = embed_queries(model, f)
    m = evaluate_split(test, q, embed_gallery(model, f), ks=(1, 5, 10))
    assert 0 <= m["R@1"] <= m["R@5"] <= m["R@10"] <= 100
    if dataset == "fashioniq":  # 56 steps learn the colour/shape edits: chance R@1 is 1/8 per gallery
        assert m["R@1"] > 2 * 100 / 8


def test_descriptions_file_per_category_and_per_split(layouts, hash_encoder, tmp_path):
    import shutil

    root = shutil.copytree(layouts["fashioniq"], tmp_path / "fiq")
    (root / "descriptions").mkdir()
    (root / "descriptions" / "desc.dress.train.json").write_text(
        json.dumps({k: v for k, v in DESCRIPTIONS.items() if k.startswith("D")} | {"not_an_item": "x"}))
    (root / "descriptions" / "desc.train.json").write_text(json.dumps({"St000": DESCRIPTIONS["St000"]}))
    s = load_fashioniq(root, "train")
    assert s.descriptions == DESCRIPTIONS and len(s.description_files) == 2
    assert load_fashioniq(root, "val").descriptions is None  # no file for val
    f = prepare_features(s, hash_encoder)
    # items without a description have no description tokens; "Dt000" has two sentences
    assert f.desc_mask[s.index["Dt000"]].sum() == 2 and f.desc_mask[s.index["Dt002"]].sum() == 0
    lines = []
    fit(build_model("moa3cir"), s, TrainConfig(phase1_epochs=1, phase2_epochs=1), log=lines.append,
                encoder=hash_encoder)
    assert f"descriptions: found for 3 of {len(s.ids)} items" in lines[0]
    objectives = next(line for line in lines if line.startswith("phase 1 objectives"))
    assert "image-description" in objectives and "image-image" not in objectives
    (root / "descriptions" / "desc.train.json").write_text(json.dumps(["not", "a", "map"]))
    with pytest.raises(DataError, match="JSON object"):
        load_fashioniq(root, "train")
    (root / "descriptions" / "desc.train.json").write_text(json.dumps({"St000": 3}))
    with pytest.raises(DataError, match="not a string"):
        load_fashioniq(root, "train")


def test_carve_validation_holds_out_whole_targets(layouts):
    s = load_fashioniq(layouts["fashioniq"], "train")
    tr, val = carve_validation(s, 0.25, seed=3)
    train_targets, val_targets = {t.target for t in tr.triplets}, {t.target for t in val.triplets}
    assert not train_targets & val_targets
    assert len(tr.triplets) + len(val.triplets) == len(s.triplets)
    assert len(val_targets) == round(0.25 * len({t.target for t in s.triplets}))  # 16 targets -> 4
    assert val.galleries == s.galleries and val.ids == s.ids
    assert carve_validation(s, 0.0)[1] is None


def test_phase2_step_budget_rule():
    cfg = TrainConfig(batch_size=64)
    assert phase2_max_steps(10, cfg) == PHASE2_MIN_STEPS  # 1 step/epoch x 30 < minimum (200)
    assert phase2_max_steps(700, cfg) == PHASE2_BUDGET_EPOCHS * math.ceil(700 / 64)  # 330 steps
    assert phase2_max_steps(10**6, cfg) == PHASE2_MAX_STEPS
    assert phase2_max_steps(700, TrainConfig(phase2_epochs=4)) == 4 * 11


def test_fixed_budget_without_validation_reports_budget(layouts, hash_encoder):
    s = load_fashioniq(layouts["fashioniq"], "train")
    lines = []
    history = fit(build_model("combiner"), s, TrainConfig(phase1_epochs=1, phase2_epochs=2, val_fraction=0),
                          log=lines.append, encoder=hash_encoder)
    n_steps = 2 * math.ceil(len(s.triplets) / 64)
    assert history[-1]["stopped"] == n_steps and "step budget" in history[-1]["reason"]
    assert any("no validation split" in line for line in lines)
    assert np.isfinite([h["loss"] for h in history if "loss" in h]).all()


def test_saved_model_reloads_with_training_record(layouts, official_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("MOE_APPS_CACHE", str(official_cache))
    out = tmp_path / "m"
    assert main(["train", "--dataset", "shoes", "--root", str(layouts["shoes"]), "--out", str(out),
                 "--phase2-epochs", "2", "--val-fraction", "0"]) == 0
    model, extra = load_model(out)
    assert extra["dataset"] == "shoes" and "step budget" in extra["training"][-1]["reason"]
