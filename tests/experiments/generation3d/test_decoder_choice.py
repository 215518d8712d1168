"""``experiments.generation3d.decoder_choice``: retrieved components scored against real parts."""

import numpy as np
import pytest
import torch

from experiments.generation3d.decoder_choice import points, retrieve, score, summary, with_setting
from generation3d.data import PartDataset
from generation3d.library import ComponentLibrary
from generation3d.model import AEConfig, GenConfig
from generation3d.sampling import MoCAPipeline
from generation3d.shapes import build_dataset
from generation3d.train import fit, pretrain


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("dc")
    build_dataset(d, n_per_category=3, n_scenes=0, n_points=64, seed=0)
    ds = PartDataset.load(d, with_meshes=True)
    ae, _ = pretrain(ds, AEConfig(n_latents=2, d_latent=4, d_model=16, n_out=64), steps=2, batch_size=8)
    gen, stats, _ = fit(ds, ae, GenConfig(n_latents=2, d_latent=4, max_parts=40, d_model=16, n_layers=1),
                        steps=1, batch_size=4)
    pipe = MoCAPipeline(ae, gen, stats)
    pipe.library = ComponentLibrary.build(pipe, ds)
    return pipe, ds


def test_a_training_part_retrieves_itself_and_scores_near_zero(tiny):
    pipe, ds = tiny
    # on the training split the nearest component by latent alone is the part itself, fitted exactly
    rows = score(pipe, ds, "train", {"retrieve": retrieve(0.0, 100.0), "points": points})
    own = [r["chamfer"] for r in rows if r["method"] == "retrieve"]
    assert max(own) < 0.02  # float16 box-frame vertices, 2000 surface samples
    table = {r["method"]: r for r in summary(rows) if r["category"] == "all"}
    assert table["retrieve"]["parts"] == table["points"]["parts"] == len(ds.part_indices("train"))
    assert table["points"]["chamfer"] > table["retrieve"]["chamfer"]  # a 2-step autoencoder is far off


def test_a_setting_is_the_library_under_other_constants(tiny):
    pipe, ds = tiny
    lib = pipe.library
    variant = with_setting(lib, 0.0, 100.0)
    box = ds.boxes[ds.part_indices("train")[0]] * [1, 1, 1, 3, 1, 1]  # stretched 3x along x
    assert (variant.fit(0, box).vertices == lib.fit(0, box, 100.0).vertices).all()
    with torch.no_grad():
        key = lib.standardise(pipe.ae.encode(torch.zeros(1, 8, 3)).numpy())[0]
    pool = np.arange(len(lib))
    assert (variant.distances(key, box[3:], pool) == lib.distances(key, box[3:], pool, 0.0)).all()
