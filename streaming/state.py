"""The state of MoSAIC's components and its one save/load path.

Every component of ``streaming.model.MoSAIC`` is a ``StateComponent``: a dataclass with ``slots=True``
whose fields are its whole state, so a new piece of state is either a field (saved and restored) or
an ``AttributeError``, never silently dropped. ``to_state`` encodes a field by its type: an array as
the tensor ``"<component>.<field>"`` (JSON entry ``{"__array__": key}``), a list of arrays as tensors
``"<component>.<field>.<j>"`` (``{"__arrays__": [key, ...]}``), anything else (None, bool, int, float,
str, lists and dicts of them) as JSON. ``load_state`` raises ``CheckpointError`` for a missing or
unknown field and a missing tensor.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np
import torch

from common.errors import CheckpointError

_ARRAY, _ARRAYS = "__array__", "__arrays__"


def _json_value(value: Any, where: str) -> Any:
    """``value`` as JSON data (NumPy scalars as Python numbers, tuples as lists)."""
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_json_value(v, where) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v, where) for k, v in value.items()}
    raise TypeError(f"{where}: cannot save a {type(value).__name__} (use an array, a list of arrays or JSON data)")


@dataclasses.dataclass(slots=True)
class StateComponent:
    """Base of a component whose dataclass fields are its complete state (see the module docstring).

    Subclasses are ``@dataclasses.dataclass(slots=True)``. ``json_decoders`` maps a field name to a
    function applied to its JSON value on load (e.g. lists back to tuples)."""

    json_decoders: ClassVar[dict[str, Any]] = {}

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def to_state(self, prefix: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """``(tensors, json)`` of every field, tensors keyed ``"<prefix>.<field>[.<j>]"``."""
        tensors: dict[str, torch.Tensor] = {}
        out: dict[str, Any] = {}
        for name in self.field_names():
            value = getattr(self, name)
            key = f"{prefix}.{name}"
            if isinstance(value, np.ndarray):
                tensors[key] = torch.from_numpy(np.ascontiguousarray(value))
                out[name] = {_ARRAY: key}
            elif isinstance(value, list) and value and all(isinstance(v, np.ndarray) for v in value):
                keys = [f"{key}.{j}" for j in range(len(value))]
                for k, v in zip(keys, value, strict=True):
                    tensors[k] = torch.from_numpy(np.ascontiguousarray(v))
                out[name] = {_ARRAYS: keys}
            else:
                out[name] = _json_value(value, f"{type(self).__name__}.{name}")
        return tensors, out

    def load_state(self, tensors: dict[str, torch.Tensor], state: Any, source: str) -> None:
        """Set every field from ``(tensors, state)`` written by :meth:`to_state`; CheckpointError for
        a missing or unknown field or tensor."""
        what = type(self).__name__
        if not isinstance(state, dict):
            raise CheckpointError(f"{source}: no state of {what}")
        names = self.field_names()
        missing = [n for n in names if n not in state]
        unknown = [n for n in state if n not in names]
        if missing or unknown:
            raise CheckpointError(f"{source}: state of {what} has missing fields {missing} / unknown fields {unknown}")
        values = {}
        for name in names:
            value = state[name]
            try:
                if isinstance(value, dict) and set(value) == {_ARRAY}:
                    value = tensors[value[_ARRAY]].numpy().copy()
                elif isinstance(value, dict) and set(value) == {_ARRAYS}:
                    value = [tensors[k].numpy().copy() for k in value[_ARRAYS]]
                elif name in self.json_decoders:
                    value = self.json_decoders[name](value)
            except KeyError as exc:
                raise CheckpointError(f"{source}: tensor {exc} of {what}.{name} is missing") from None
            values[name] = value
        for name, value in values.items():  # only once everything decoded: a failed load changes nothing
            setattr(self, name, value)


class ComponentState:
    """Mixin of a model whose whole state is the ``StateComponent``s of ``COMPONENTS`` (checkpoint name
    -> class), each in the attribute ``<name>_``: their size and ``common.pretrained``'s
    ``checkpoint_state`` (read back by the model's ``load_checkpoint_state``)."""

    COMPONENTS: ClassVar[dict[str, type[StateComponent]]] = {}
    #: layout of the JSON state of a checkpoint
    STATE_LAYOUT: ClassVar[int] = 2

    def components(self) -> dict[str, StateComponent]:
        """The state components by their checkpoint name (``COMPONENTS``)."""
        return {name: getattr(self, name + "_") for name in self.COMPONENTS}

    def memory_bytes(self) -> int:
        """Bytes of every array the components hold (the tensors of ``checkpoint_state``)."""
        return sum(t.nbytes for t in self.checkpoint_state()[0].values())

    def checkpoint_state(self) -> tuple[dict[str, torch.Tensor], dict]:
        """``(tensors, state)``: every field of every component."""
        tensors: dict[str, torch.Tensor] = {}
        state: dict = {"layout": self.STATE_LAYOUT}
        for name, comp in self.components().items():
            t, s = comp.to_state(name)
            tensors.update(t)
            state[name] = s
        return tensors, state

    def components_from_state(self, tensors: dict[str, torch.Tensor], state: dict,
                              source: str) -> dict[str, StateComponent]:
        """New components from ``checkpoint_state``'s output (CheckpointError for another layout, an
        unknown component or a missing field)."""
        if state.get("layout") != self.STATE_LAYOUT:
            raise CheckpointError(f"{source}: state layout {state.get('layout')!r} is not {self.STATE_LAYOUT}")
        unknown = set(state) - {"layout", *self.COMPONENTS}
        if unknown:
            raise CheckpointError(f"{source}: unknown state {sorted(unknown)}")
        fresh = {name: cls.__new__(cls) for name, cls in self.COMPONENTS.items()}
        for name, comp in fresh.items():
            comp.load_state(tensors, state.get(name), source)
        return fresh
