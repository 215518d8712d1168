"""Diffusion backbones (``common.pretrained`` models), one file per model; ``UNetBaseline`` is the
registry adapter of diffusers' ``UNet2DModel`` baseline."""

from vision.models.dit import DiTBackbone
from vision.models.moh import MoHBackbone
from vision.models.plain_mamba import PlainMambaBackbone
from vision.models.unet import UNetBaseline

__all__ = ["DiTBackbone", "MoHBackbone", "PlainMambaBackbone", "UNetBaseline"]
