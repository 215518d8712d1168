"""The named sizes of the retrieval towers (the README's model sizes table), torch-free so that
the CLI lists them at parse time: ``d_model`` (every tower's token width), ``d_slot`` (the width of
one attribute-group slot; the embedding is ``G * d_slot``) and ``heads_per_group`` (attention heads
per group). A baseline of a size gets the same ``d_model`` and an embedding as wide as MoA³CIR's
(``embed_dim = G * d_slot``).
"""

from __future__ import annotations

from dataclasses import dataclass

from common.sizes import SizeTable

from .render import GROUPS


@dataclass(frozen=True)
class TowerSize:
    """Widths of one named size (see the module docstring)."""

    d_model: int
    d_slot: int
    heads_per_group: int

    def overrides(self, kind: str) -> dict:
        """Config fields of a model of ``kind`` at this size."""
        if kind == "moa3cir":
            return {"d_model": self.d_model, "d_slot": self.d_slot, "heads_per_group": self.heads_per_group}
        return {"d_model": self.d_model, "embed_dim": len(GROUPS) * self.d_slot}


MODEL_SIZES = SizeTable({
    "XS": TowerSize(d_model=32, d_slot=16, heads_per_group=1),
    "S": TowerSize(d_model=64, d_slot=32, heads_per_group=2),  # MoA3Config's defaults
    "B": TowerSize(d_model=128, d_slot=64, heads_per_group=4),
}, default="S")
DEFAULT_MODEL_SIZE = MODEL_SIZES.default
