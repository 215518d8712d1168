"""MoSAIC variants for experiments: a model whose fixed hyper-parameters (the class attributes of
``streaming.config.HyperParameters``: ``eta_min``, ``drift_floor``, ``schedule``, ``detect``,
``epoch_reset``, ``provisional*``, ``completion_cap``, ``pretrain_repair``) are overridden on the
instance. The product's ``MoSAIC()`` takes only what users set."""

from __future__ import annotations

from streaming.config import HyperParameters
from streaming.model import MoSAIC

CONSTRUCTOR = ("eta0", "pretrain_restarts", "seed")


def with_fixed(model: MoSAIC, **fixed) -> MoSAIC:
    """``model`` with the fixed hyper-parameters ``fixed`` set on it (TypeError for another name);
    they are validated by its next ``fit`` / ``process``. Returns the model."""
    for name, value in fixed.items():
        if name.startswith("_") or not hasattr(HyperParameters, name) or callable(getattr(HyperParameters, name)):
            raise TypeError(f"{name!r} is not a fixed hyper-parameter of MoSAIC (streaming.config.HyperParameters)")
        setattr(model, name, value)
    return model


def mosaic_variant(r: int, K: int, **options) -> MoSAIC:
    """``MoSAIC(r, K, eta0=, pretrain_restarts=, seed=)`` from ``options``, the rest of them through
    ``with_fixed``."""
    ctor = {k: options.pop(k) for k in CONSTRUCTOR if k in options}
    return with_fixed(MoSAIC(r, K, **ctor), **options)
