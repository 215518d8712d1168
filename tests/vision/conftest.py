import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)
    yield


def tiny_moh(**kw):
    from vision.models import MoHBackbone

    cfg = dict(sample_size=16, in_channels=1, patch_size=4, d_model=16, d_state=2, depth_choices=(1, 3),
               num_levels=3, k_levels=2, level_layers=1)
    cfg.update(kw)
    return MoHBackbone(**cfg)


def tiny_models():
    """One tiny instance of every backbone (16x16 grayscale)."""
    from diffusers import UNet2DModel

    from vision.models import DiTBackbone, PlainMambaBackbone

    torch.manual_seed(0)
    return {
        "moh": tiny_moh(),
        "mamba": PlainMambaBackbone(sample_size=16, patch_size=4, d_model=16, d_state=2, depth=2),
        "dit": DiTBackbone(sample_size=16, patch_size=4, d_model=16, depth=2, heads=2),
        "unet": UNet2DModel(sample_size=16, in_channels=1, out_channels=1, block_out_channels=(8, 16),
                            layers_per_block=1, norm_num_groups=4,
                            down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                            up_block_types=("AttnUpBlock2D", "UpBlock2D")),
    }
