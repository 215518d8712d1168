"""``experiments.vision.prediction_target``: one short run per regression target, scored."""

import json

import vision.sampling as sampling
from experiments.vision.prediction_target import main


def test_each_target_trains_its_own_checkpoint_and_is_scored(tmp_path):
    out = tmp_path / "pt"
    assert main(["--steps", "2", "--limit", "64", "--n", "8", "--targets", "v_prediction", "epsilon",
                 "--out", str(out)]) == 0
    rows = json.loads((out / "prediction_target.json").read_text())
    assert [r["target"] for r in rows] == ["v_prediction", "epsilon"]
    for r in rows:
        saved = json.loads((out / r["target"] / "checkpoint" / "scheduler_config.json").read_text())
        assert saved["prediction_type"] == r["target"]  # the checkpoint samples with what it learned
        assert 0 <= r["confident_share"] <= 1 and r["fmnist_classifier_fid"] >= 0
    assert sampling.PREDICTION_TYPE == "sample"  # the product's target is restored
