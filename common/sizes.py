"""Named model sizes (DiT/timm style): one table type for every app's ``MODEL_SIZES``.

    MODEL_SIZES = SizeTable({"S": ModelSize(...), "B": ModelSize(...)}, default="S")
    MODEL_SIZES.lookup("B")      # the row; InputError "unknown model size 'XL'; choose from S, B"
    MODEL_SIZES.lookup(None)     # the default row
    tuple(MODEL_SIZES)           # the names in the README table's order (a CLI's choices)

A CLI that lists the names at parse time without importing torch keeps its app's table in a
torch-free module (``retrieval.sizes``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

from common.errors import InputError

Row = TypeVar("Row")


class SizeTable(Mapping[str, Row], Generic[Row]):
    """A read-only, ordered ``name -> row`` mapping with a ``default`` name and one checked lookup."""

    def __init__(self, rows: Mapping[str, Row], default: str):
        if default not in rows:
            raise ValueError(f"default size {default!r} is not one of {', '.join(rows)}")
        self._rows, self.default = dict(rows), default

    def __getitem__(self, name: str) -> Row:
        return self._rows[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def lookup(self, name: str | None = None) -> Row:
        """The row ``name`` (the default one when None); InputError naming the sizes for another name."""
        name = self.default if name is None else name
        if name not in self._rows:
            raise InputError(f"unknown model size {name!r}; choose from {', '.join(self._rows)}")
        return self._rows[name]
