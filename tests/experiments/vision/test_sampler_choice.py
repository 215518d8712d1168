"""``experiments.vision.sampler_choice``: the samplers it builds, its sampling loop, one tiny run."""

import json

import pytest
import torch

from experiments.vision.sampler_choice import build_sampler, main, sample
from vision.models import build_backbone
from vision.sampling import MoHPipeline, make_sampler, save_checkpoint


@pytest.fixture()
def checkpoint(tmp_path):
    torch.manual_seed(0)
    return save_checkpoint(build_backbone("moh", "XS").eval(), tmp_path / "ck")


def test_ddim_through_the_generic_loop_equals_the_product_pipeline(checkpoint):
    from vision.models import load_backbone

    model = load_backbone(checkpoint)
    ours, nfe = sample(model, build_sampler("ddim", checkpoint), 3, 4, seed=5)
    product = MoHPipeline(model, make_sampler("ddim"))(batch_size=3, num_inference_steps=4,
                                                        generator=torch.Generator().manual_seed(5))
    assert nfe == 4
    torch.testing.assert_close(((ours + 1) / 2).permute(0, 2, 3, 1).numpy(), product.images)


def test_samplers_follow_the_saved_schedule_and_count_model_evaluations(checkpoint):
    from vision.models import load_backbone

    model = load_backbone(checkpoint)
    for kind, steps, evaluations in (("dpmsolver++", 5, 5), ("heun", 5, 9)):  # Heun: 2 per step but the last
        sched = build_sampler(kind, checkpoint)
        assert sched.config.prediction_type == "sample" and sched.config.beta_schedule == "squaredcos_cap_v2"
        x, nfe = sample(model, sched, 2, steps, seed=0)
        assert nfe == evaluations and x.shape == (2, 1, 32, 32) and torch.isfinite(x).all()
    assert build_sampler("heun", checkpoint, "trailing").config.timestep_spacing == "trailing"
    for kind in ("ddim", "dpmsolver++"):
        assert build_sampler(kind, checkpoint).config.timestep_spacing == "leading"  # as saved


def test_main_scores_every_setting_of_every_model(checkpoint, tmp_path):
    out = tmp_path / "samplers.json"
    assert main(["--models", str(checkpoint), "--settings", "ddim:2", "heun:2:linspace", "--n", "6",
                 "--n-real", "20", "--no-efficientnet", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["sampler"], r["steps"], r["spacing"], r["model_evaluations"]) for r in rows] == \
        [("ddim", 2, "leading", 2), ("heun", 2, "linspace", 3)]
    for r in rows:
        assert r["fmnist_classifier_fid"] >= 0 and 0 <= r["confident_share"] <= 1


def test_main_refuses_an_unknown_setting():
    with pytest.raises(SystemExit):
        main(["--settings", "euler:20"])
