"""Bounds checked before a retrieval command starts work (no torch import): the maxima of the
``moa3cir`` count options, refused at parse time."""

from __future__ import annotations

from common.cli import int_in

MAX_EPOCHS = 1000
MAX_AUGMENT = 100_000
MAX_THREADS = 256
MAX_K = 10_000
MAX_NLIST = 65_536
NUM_BLOCKS = 16  # MBConv blocks of EfficientNet-Lite0 (common.image_encoder.NUM_BLOCKS)
epochs_int = int_in(0, MAX_EPOCHS)
