"""Procedural pretraining then real fine-tuning: one checkpoint with the real data's statistics and
categories, the history of both phases, and sampling from it works."""

import json

from experiments.generation3d.pretrain_procedural import main
from generation3d.data import PartDataset, trained_categories
from generation3d.losses import encode_parts, latent_stats
from generation3d.sampling import MoCAPipeline, load_autoencoder
from tests.generation3d.conftest import tiny_data, tiny_pipeline  # noqa: F401  (fixtures)


def test_pretrain_then_finetune_checkpoint(tiny_data, tiny_pipeline, tmp_path):  # noqa: F811
    out = tmp_path / "pre"
    main(["--data-dir", str(tiny_data), "--ae", str(tiny_pipeline / "ae"), "--out", str(out), "--steps", "3",
          "--pretrain-steps", "2", "--per-category", "2"])
    pipe = MoCAPipeline.load(out)
    real = PartDataset.load(tiny_data)
    stats = latent_stats(real, encode_parts(load_autoencoder(tiny_pipeline / "ae"), real))
    for k, v in stats.items():  # normalised with the fine-tuning (real) data's statistics
        assert pipe.stats[k].allclose(v.float())
    assert pipe.categories == trained_categories(real, pipe.gen.config.max_parts)
    extra = json.loads((out / "generator" / "config.json").read_text())["extra"]
    assert (extra["pretrain_steps"], extra["steps"]) == (2, 3)
    assert [h["step"] for h in extra["history"]] == [0, 1, 0]  # both phases (each logs its first and last step)
    assert len(pipe.sample("chair", 4, steps=2)[0].points) == 4
