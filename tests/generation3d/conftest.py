import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)
    yield


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    from generation3d.shapes import build_dataset

    d = tmp_path_factory.mktemp("g3data")
    build_dataset(d, n_per_category=4, n_scenes=1, n_points=64, seed=0, min_scene_parts=20)
    return d


@pytest.fixture(scope="session")
def tiny_pipeline(tiny_data, tmp_path_factory):
    from generation3d.data import PartDataset, trained_categories
    from generation3d.model import AEConfig, GenConfig
    from generation3d.sampling import MoCAPipeline
    from generation3d.text import shape_descriptions
    from generation3d.train import fit, pretrain

    torch.set_num_threads(1)
    ds = PartDataset.load(tiny_data)
    ae, _ = pretrain(ds, AEConfig(n_latents=4, d_latent=4, d_model=32, n_out=64), steps=3, batch_size=8)
    gen, stats, _ = fit(ds, ae, GenConfig(n_latents=4, d_latent=4, max_parts=40, d_model=32, n_layers=1),
                                    steps=3, batch_size=4)
    path = tmp_path_factory.mktemp("g3pipe")
    MoCAPipeline(ae, gen, stats, shape_descriptions(ds, "train"), categories=trained_categories(ds, 40)).save(path)
    return path
