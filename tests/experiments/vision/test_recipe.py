"""``experiments.vision.recipe``: each variant's change, the patching it does, one tiny run."""

import copy
import json

import pytest
import torch

import experiments.vision.recipe as recipe_module
import vision.bench
import vision.compute
from experiments.vision.recipe import MIN_SNR_GAMMA, MoHLongSkip, build_variant, main, recipe, run
from vision.compute import ComputeConfig
from vision.models import build_backbone
from vision.models.moh import MoHBackbone


def test_long_skip_starts_as_the_baseline_and_then_acts():
    torch.manual_seed(0)
    base = build_backbone("moh", "XS").eval()
    torch.manual_seed(0)
    skip = build_variant("long_skip", "XS").eval()
    assert isinstance(skip, MoHLongSkip)
    shared = skip.state_dict()
    assert set(shared) - set(base.state_dict()) == {"long_skip.weight", "long_skip.bias"}
    assert all(torch.equal(v, shared[k]) for k, v in base.state_dict().items())  # same initial weights
    MoHBackbone.perturbed(base)  # the zero-initialised head would hide any difference
    skip.load_state_dict(base.state_dict(), strict=False)
    x, t = torch.randn(3, 1, 32, 32), torch.tensor([5, 400, 900])
    with torch.no_grad():
        torch.testing.assert_close(skip(x, t).sample, base(x, t).sample, rtol=0, atol=0)  # W = 0, same init
        torch.nn.init.normal_(skip.long_skip.weight)
        ema = copy.deepcopy(skip)  # the training's EMA copy: its hooks must read its own skip
        assert not torch.allclose(skip(x, t).sample, base(x, t).sample)
        torch.testing.assert_close(ema(x, t).sample, skip(x, t).sample)
        ema.long_skip.weight.zero_()
        torch.testing.assert_close(ema(x, t).sample, base(x, t).sample, rtol=0, atol=0)


def test_raster_only_scans_every_block_in_raster_order():
    model = build_variant("raster_only", "XS")
    assert set(model.config.scan_orders) == {"raster"}
    assert len(set(build_backbone("moh", "XS").config.scan_orders)) > 1


@pytest.mark.parametrize("variant, gamma", [("baseline", 0.0), ("min_snr", MIN_SNR_GAMMA), ("long_skip", 0.0)])
def test_only_min_snr_trains_with_min_snr_weighting(variant, gamma, tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(recipe_module, "train_and_score",
                        lambda name, cfg, out, device, log: seen.append((name, cfg.min_snr_gamma, cfg.seed)) or ({}, []))
    run(variant, 3, ComputeConfig(), tmp_path / "run")
    assert seen == [("moh", gamma, 3)]


def test_recipe_patches_and_restores():
    saved = vision.compute.build_backbone, vision.bench.build_backbone
    with recipe("long_skip"):
        assert isinstance(vision.bench.build_backbone("moh", "XS", sample_size=32, in_channels=1), MoHLongSkip)
        assert not isinstance(vision.compute.build_backbone("dit", "XS"), MoHLongSkip)
    assert (vision.compute.build_backbone, vision.bench.build_backbone) == saved
    with pytest.raises(ValueError), recipe("nope"):
        pass


def test_main_trains_and_scores_each_run(tmp_path):
    out = tmp_path / "recipe.json"
    assert main(["--runs", "baseline:0", "min_snr:0", "long_skip:1", "--budget-min", "0.002", "--model-size", "XS",
                 "--n-samples", "6", "--n-real", "16", "--train-limit", "64", "--batch-size", "4",
                 "--calibration-steps", "1", "--sample-steps", "2", "--out", str(tmp_path / "runs"),
                 "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert [(r["variant"], r["seed"]) for r in result["runs"]] == [("baseline", 0), ("min_snr", 0), ("long_skip", 1)]
    assert {(c["variant"], c["budget_fraction"]) for c in result["curve"]} == \
        {(v, f) for v in ("baseline", "min_snr", "long_skip") for f in (0.5, 1.0)}
    assert all(c["fmnist_classifier_fid"] >= 0 for c in result["curve"])
