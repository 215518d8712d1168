"""river's online recommenders as progressive baselines, and MoSAIC as a river estimator.

Needs the ``bench`` extra (``river``). ``river_methods(seed)`` gives the grids of river's ``reco``
models that ``experiments.streaming.progressive`` chooses from on the tuning part (settings around river's
documented ones: SGD learning rates and L2 penalties, 10 latent factors, latent weights drawn from
``N(0, 0.1²)``):

* ``river_baseline``: ``reco.Baseline``, ``ŷ = μ + b_u + b_i`` learned by SGD.
* ``river_biased_mf``: ``reco.BiasedMF``, ``ŷ = μ + b_u + b_i + ⟨p_u, q_i⟩``.
* ``river_funk_mf``: ``reco.FunkMF``, ``ŷ = ⟨p_u, q_i⟩`` (no biases).

``RiverMoSAIC`` wraps ``experiments.streaming.recommend.MoSAICRecommender`` as a river ``base.Regressor`` over
``x = {"user": u, "item": i}`` (``learn_one(x, y)`` / ``predict_one(x)``), the form
``river.evaluate.progressive_val_score`` drives (river's ``reco.Ranker`` models take
``(user, item)`` instead and are not accepted by its regression metrics).
"""

from __future__ import annotations

from collections.abc import Callable

from river import base, optim, reco

from experiments.streaming.recommend import MoSAICRecommender

Factory = Callable[[int], object]  # pretrain_at -> a model with learn_one / predict_one


def _normal(seed: int) -> optim.initializers.Normal:
    return optim.initializers.Normal(mu=0.0, sigma=0.1, seed=seed)


def river_methods(seed: int = 0) -> dict[str, dict[str, Factory]]:
    """``{method: {setting: factory}}`` for river's Baseline, BiasedMF and FunkMF (module docstring)."""

    def baseline(lr: float, l2: float) -> Factory:
        return lambda pretrain_at: reco.Baseline(optimizer=optim.SGD(lr), l2=l2, seed=seed)

    def biased_mf(lr: float, l2: float) -> Factory:
        return lambda pretrain_at: reco.BiasedMF(
            n_factors=10, bias_optimizer=optim.SGD(lr), latent_optimizer=optim.SGD(2 * lr), l2_bias=l2,
            l2_latent=l2, weight_initializer=optim.initializers.Zeros(), latent_initializer=_normal(seed), seed=seed)

    def funk_mf(lr: float, l2: float) -> Factory:
        return lambda pretrain_at: reco.FunkMF(n_factors=10, optimizer=optim.SGD(lr), l2=l2,
                                               initializer=_normal(seed), seed=seed)

    return {
        "river_baseline": {f"lr={lr},l2={l2}": baseline(lr, l2) for lr in (0.005, 0.025, 0.05) for l2 in (0.0, 0.1)},
        "river_biased_mf": {f"lr={lr},l2={l2}": biased_mf(lr, l2) for lr in (0.005, 0.025, 0.05) for l2 in (0.0, 0.1)},
        "river_funk_mf": {f"lr={lr},l2={l2}": funk_mf(lr, l2) for lr in (0.01, 0.05) for l2 in (0.0, 0.1)},
    }


class RiverMoSAIC(base.Regressor):
    """``MoSAICRecommender`` as a river regressor over ``x = {"user": u, "item": i}``; the keyword
    arguments are ``MoSAICRecommender``'s."""

    def __init__(self, r: int = 1, K: int = 2, items: int = 500, pretrain_at: int = 0, seed: int = 0,
                 **kwargs) -> None:
        self.r, self.K, self.items, self.pretrain_at, self.seed = r, K, items, pretrain_at, seed
        self.kwargs = kwargs
        self.recommender = MoSAICRecommender(r, K, items=items, pretrain_at=pretrain_at, seed=seed, **kwargs)

    def _get_params(self) -> dict:
        return {"r": self.r, "K": self.K, "items": self.items, "pretrain_at": self.pretrain_at,
                "seed": self.seed, **self.kwargs}

    def learn_one(self, x: dict, y: float) -> None:
        self.recommender.learn_one(x["user"], x["item"], y)

    def predict_one(self, x: dict) -> float:
        return self.recommender.predict_one(x["user"], x["item"])
