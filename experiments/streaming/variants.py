"""MoSAIC variants for experiments: a model whose fixed hyper-parameters (the class attributes of
``streaming.config.HyperParameters``: ``eta_min``, ``drift_floor``, ``schedule``, ``detect``,
``epoch_reset``, ``provisional``, ``completion_cap``, ``pretrain_repair``) and provisional-fit
settings (``MoSAICVariant``'s ``provisional_estimator``, ``provisional_growth``,
``provisional_lambda``) are overridden on the instance. The product's ``MoSAIC()`` takes only what
users set."""

from __future__ import annotations

from common.errors import InputError
from streaming.change import ALS_GROWTH, POSTERIOR_GROWTH, PROVISIONAL_LAMBDA
from streaming.config import HyperParameters
from streaming.model import MoSAIC

CONSTRUCTOR = ("eta0", "pretrain_restarts", "seed")


class MoSAICVariant(MoSAIC):
    """MoSAIC whose fixed hyper-parameters are checked when set (``_check_hyper_parameters``), with the
    provisional fit's settings as knobs too: ``provisional_estimator`` ("auto": the
    product's rule by the mean observed count; "posterior" or "als" at every m̄), ``provisional_growth``
    (refit when the buffer has grown by this fraction; 0 = the estimator's default) and
    ``provisional_lambda`` (Soft-Impute threshold, × rms(x_Ω) sqrt(m̄))."""

    provisional_estimator: str = "auto"
    provisional_growth: float = 0.0
    provisional_lambda: float = PROVISIONAL_LAMBDA

    def _check_hyper_parameters(self, n: int) -> None:
        """The product's check of what users set, then the fixed hyper-parameters a variant changes."""
        super()._check_hyper_parameters(n)
        if self.provisional_lambda <= 0:
            raise InputError(f"provisional_lambda must be > 0, got {self.provisional_lambda}")
        for name, choices in (("provisional_estimator", ("auto", "posterior", "als")),
                              ("epoch_reset", ("detect", "always", "never")), ("schedule", ("sublinear", "constant"))):
            if getattr(self, name) not in choices:
                raise InputError(f"{name} must be one of {choices}, got {getattr(self, name)!r}")
        for name in ("completion_cap", "provisional_growth", "pretrain_repair"):
            if getattr(self, name) < 0:
                raise InputError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 <= self.step_floor <= self.eta0:
            raise InputError("step sizes must satisfy 0 <= eta_min <= eta0 <= 1, eta0 > 0")
        if not (0 <= self.drift_floor <= 1):
            raise InputError(f"drift_floor must be in [0, 1] (0 = off), got {self.drift_floor}")

    def _provisional_settings(self) -> tuple[str, float, float]:
        estimator = super()._provisional_settings()[0]
        if self.provisional_estimator != "auto":
            estimator = self.provisional_estimator
        growth = self.provisional_growth or (ALS_GROWTH if estimator == "als" else POSTERIOR_GROWTH)
        return estimator, growth, self.provisional_lambda


#: the fixed hyper-parameters: the product's and the variant's
FIXED = (*HyperParameters.__annotations__, *MoSAICVariant.__annotations__)


def with_fixed(model: MoSAIC, **fixed) -> MoSAIC:
    """``model`` with the fixed hyper-parameters ``fixed`` set on it (TypeError for another name);
    they are validated by its next ``fit`` / ``process``. Returns the model."""
    cls = type(model)
    for name, value in fixed.items():
        if name not in FIXED or not hasattr(cls, name):
            raise TypeError(f"{name!r} is not a fixed hyper-parameter of {cls.__name__}")
        setattr(model, name, value)
    return model


def mosaic_variant(r: int, K: int, **options) -> MoSAICVariant:
    """``MoSAICVariant(r, K, eta0=, pretrain_restarts=, seed=)`` from ``options``, the rest of them
    through ``with_fixed``."""
    ctor = {k: options.pop(k) for k in CONSTRUCTOR if k in options}
    return with_fixed(MoSAICVariant(r, K, **ctor), **options)
