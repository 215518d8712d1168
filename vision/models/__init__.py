"""Diffusion backbones (diffusers ``ModelMixin`` + ``ConfigMixin``), one file per model."""

from vision.models.dit import DiTBackbone
from vision.models.moh import MoHBackbone
from vision.models.plain_mamba import PlainMambaBackbone

__all__ = ["DiTBackbone", "MoHBackbone", "PlainMambaBackbone"]
