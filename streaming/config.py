"""MoSAIC's hyper-parameters: one dataclass, the single source of their defaults and their checks.

``MoSAIC``'s constructor takes the ones users set (``r``, ``K``, ``eta0``, ``pretrain_restarts``,
``seed``); the others are fixed class attributes of ``HyperParameters``, which a variant (a baseline,
an ablation) overrides in a subclass. ``n`` is learned by ``fit``, which validates them all.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from common.errors import InputError


@dataclass(frozen=True)
class MoSAICConfig:
    """Hyper-parameters of MoSAIC for ``n`` features (defaults are the ones used in the benchmarks);
    every field is set by a command, a baseline, an ablation or a test."""

    n: int
    r: int
    K: int
    eta0: float = 1.0  # with epoch_reset="detect", chosen on the tuning seeds
    eta_min: float = 0.05
    drift_floor: float = 0.3  # ``streaming.schedule.drift_floor``'s coefficient, chosen on the tuning seeds; 0 = off
    schedule: str = "sublinear"  # or "constant" (η = eta0 always, k-GROUSE style)
    detect: bool = True  # change detection (novel samples -> change buffer -> re-seed)
    epoch_reset: str = "detect"  # restart the schedule at an epoch start: "detect" (only experts that moved), "always", "never"
    provisional: bool = True  # complete novel samples with a growing-rank fit of the change buffer
    provisional_growth: float = 0.0  # refit it when the buffer has grown by this fraction (0 = auto: 0.05 posterior, 0.2 als)
    provisional_lambda: float = 0.1  # Soft-Impute threshold of the under-determined buffer, × rms(x_Ω) sqrt(m̄)
    provisional_estimator: str = "auto"  # "posterior", "als" (least-squares completion, shrunk and capped) or
    # "auto": posterior when the mean observed count m̄ >= PROVISIONAL_MIN_RATIO × r, else als
    completion_cap: float = 10.0  # energy cap of a routed expert's completion (``cap_completion``); 0 = off
    pretrain_restarts: int = 16  # restarts stop at the first clean solution, so only hard cases pay
    # rounds of the robust refit of a cluster that fits far worse than the others (kss.repair_clusters); 0 = off
    pretrain_repair: int = 2
    seed: int = 0

    def validate(self) -> None:
        if self.K < 1:
            raise InputError(f"K must be >= 1, got {self.K}")
        if self.n < 2:
            raise InputError(f"n must be >= 2, got {self.n}")
        if not 1 <= self.r < self.n:
            raise InputError(f"rank r must satisfy 1 <= r < n, got r={self.r}, n={self.n}")
        if self.provisional_lambda <= 0:
            raise InputError(f"provisional_lambda must be > 0, got {self.provisional_lambda}")
        for name, choices in (("provisional_estimator", ("auto", "posterior", "als")),
                              ("epoch_reset", ("detect", "always", "never")), ("schedule", ("sublinear", "constant"))):
            if getattr(self, name) not in choices:
                raise InputError(f"{name} must be one of {choices}, got {getattr(self, name)!r}")
        for name in ("completion_cap", "provisional_growth", "pretrain_repair"):
            if getattr(self, name) < 0:
                raise InputError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not (0 < self.eta0 <= 1 and 0 <= self.eta_min <= self.eta0):
            raise InputError("step sizes must satisfy 0 <= eta_min <= eta0 <= 1, eta0 > 0")
        if not (0 <= self.drift_floor <= 1):
            raise InputError(f"drift_floor must be in [0, 1] (0 = off), got {self.drift_floor}")


class HyperParameters:
    """Mixin of ``streaming.model.MoSAIC``: the fixed hyper-parameters (``MoSAICConfig``'s defaults,
    chosen on the tuning seeds) as class attributes, and the whole set as a validated ``MoSAICConfig``."""

    eta_min: float = MoSAICConfig.eta_min  # capped at eta0 (``step_floor``)
    drift_floor: float = MoSAICConfig.drift_floor
    schedule: str = MoSAICConfig.schedule
    detect: bool = MoSAICConfig.detect
    epoch_reset: str = MoSAICConfig.epoch_reset
    provisional: bool = MoSAICConfig.provisional
    provisional_growth: float = MoSAICConfig.provisional_growth
    provisional_lambda: float = MoSAICConfig.provisional_lambda
    provisional_estimator: str = MoSAICConfig.provisional_estimator
    completion_cap: float = MoSAICConfig.completion_cap
    pretrain_repair: int = MoSAICConfig.pretrain_repair

    def hyper_parameters(self) -> dict:
        """Every hyper-parameter (``MoSAICConfig``'s fields but ``n``): the constructor's and the fixed ones."""
        values = {f.name: getattr(self, f.name) for f in fields(MoSAICConfig) if f.name != "n"}
        values["eta_min"] = self.step_floor
        return values

    @property
    def step_floor(self) -> float:
        """The floor of the sublinear step: ``eta_min``, capped at ``eta0``."""
        return min(self.eta_min, self.eta0)

    def _checked_config(self, n: int) -> MoSAICConfig:
        """The hyper-parameters for ``n`` features, validated (InputError on a bad value)."""
        config = MoSAICConfig(n=n, **self.hyper_parameters())
        config.validate()
        return config
