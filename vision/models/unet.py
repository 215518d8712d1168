"""Registry adapter of the diffusers ``UNet2DModel`` baseline: the UNet is trained and sampled as
diffusers builds it; this wrapper only gives it the shared checkpoint format of
``common.pretrained`` (``vision.sampling.save_checkpoint`` wraps it, ``vision.models.load_backbone``
unwraps it).

Shapes: ``sample (b, c, H, W)``, ``timestep`` scalar or ``(b,)`` -> ``UNet2DOutput.sample``.
"""

from __future__ import annotations

import torch
from diffusers import UNet2DModel
from torch import Tensor

from common.pretrained import register_model, register_to_config
from vision.models.layers import DiffusionBackbone


@register_model("unet")
class UNetBaseline(DiffusionBackbone):
    """``unet_config``: the ``UNet2DModel`` constructor arguments (its ``config`` without the
    ``_``-prefixed bookkeeping keys)."""

    @register_to_config
    def __init__(self, unet_config: dict) -> None:
        super().__init__()
        self.unet = UNet2DModel.from_config(unet_config)

    @classmethod
    def wrap(cls, unet: UNet2DModel) -> UNetBaseline:
        """An adapter holding ``unet`` itself (not a copy)."""
        adapter = cls({k: v for k, v in unet.config.items() if not k.startswith("_")})
        adapter.unet = unet
        return adapter

    def forward(self, sample: Tensor, timestep, return_dict: bool = True):
        return self.unet(sample, timestep, return_dict=return_dict)

    @classmethod
    def tiny_example(cls):
        torch.manual_seed(0)
        unet = UNet2DModel(sample_size=16, in_channels=1, out_channels=1, block_out_channels=(8, 16),
                           layers_per_block=1, norm_num_groups=4, down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                           up_block_types=("AttnUpBlock2D", "UpBlock2D"))
        return cls.perturbed(cls.wrap(unet)), cls.example_input()
