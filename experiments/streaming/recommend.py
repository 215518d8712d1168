"""Online recommenders over a rating stream, with the method signatures of river's ``reco`` models:
``learn_one(user, item, y, x=None)`` learns one rating, ``predict_one(user, item, x=None)`` predicts
one before it is learned (users and items are any hashable ids; ``x``, river's optional context, is
accepted and ignored), so they are driven the way river's reco models are (``predict_one(**x)``,
``learn_one(**x, y=y)`` with ``x = {"user": u, "item": i}``). Neither class imports river;
``experiments.streaming.progressive`` runs them, and ``experiments.streaming.river_reco.RiverMoSAIC`` wraps the recommender as
a river regressor for ``river.evaluate.progressive_val_score``.

* ``OnlineBiases``: damped online user + item means, ``ŷ = μ + b_u + b_i`` with ``μ`` the running
  mean rating, ``b_i = Σ (y − μ) / (d + c_i)`` over item i's ``c_i`` earlier ratings and
  ``b_u = Σ (y − μ − b_i) / (d + c_u)`` over user u's ``c_u`` earlier ratings (each term with the
  values at the time of that rating), ``d = damping``.
* ``SGDBiases``: user + item biases learned by SGD (river ``reco.Baseline``'s rule, same values).
* ``MoSAICRecommender``: ``SGDBiases`` plus MoSAIC on each user's residual vector
  ``e_u = y − μ − b_u − b_i`` over the ``items`` most-rated items (the coordinates, ``n = items``):
  the routed expert completes ``e_u`` from the user's rated coordinates (fold-in; optionally a ridge
  fold-in, ``fold_ridge``, and only the user's last ``window`` ratings) and its value at item i is
  added to the biases; every learned rating of a coordinate streams ``e_u`` once through
  MoSAIC (one expert updated per rating, so a returning user's drift is followed). The experts are
  pretrained once, after ``pretrain_at`` ratings, on the residual vectors of the users seen so far;
  before that, for items outside the coordinates and for users with fewer than ``min_ratings``
  rated coordinates (cold users) the prediction is the biases'.
"""

from __future__ import annotations

import warnings
from collections import Counter, defaultdict
from collections.abc import Hashable

import numpy as np
import torch

from streaming.model import MoSAIC
from streaming.observed import LowObservationWarning


class OnlineBiases:
    """Damped online user + item means (see the module docstring). ``damping >= 0``."""

    def __init__(self, damping: float = 5.0) -> None:
        if not damping >= 0:
            raise ValueError(f"damping must be >= 0, got {damping}")
        self.damping = float(damping)
        self.total, self.count = 0.0, 0
        self.item_sum: dict[Hashable, float] = defaultdict(float)
        self.item_cnt: Counter = Counter()
        self.user_sum: dict[Hashable, float] = defaultdict(float)
        self.user_cnt: Counter = Counter()

    @property
    def mean(self) -> float:
        """``μ``, the mean of every rating learned so far (0 before the first)."""
        return self.total / self.count if self.count else 0.0

    def item_bias(self, item: Hashable) -> float:
        return self.item_sum.get(item, 0.0) / (self.damping + self.item_cnt.get(item, 0) or 1.0)

    def user_bias(self, user: Hashable) -> float:
        return self.user_sum.get(user, 0.0) / (self.damping + self.user_cnt.get(user, 0) or 1.0)

    def predict_one(self, user: Hashable, item: Hashable, x: dict | None = None) -> float:
        return self.mean + self.user_bias(user) + self.item_bias(item)

    def learn_one(self, user: Hashable, item: Hashable, y: float, x: dict | None = None) -> None:
        mu, b_i = self.mean, self.item_bias(item)
        self.item_sum[item] += y - mu
        self.item_cnt[item] += 1
        self.user_sum[user] += y - mu - b_i
        self.user_cnt[user] += 1
        self.total += y
        self.count += 1


class SGDBiases:
    """Online user + item biases learned by SGD, river ``reco.Baseline``'s rule: on each rating the
    running mean ``μ`` takes ``y`` first, then with ``g = 2 (μ + b_u + b_i − y)``
    ``b_u ← b_u − lr (g + l2 b_u)`` and ``b_i ← b_i − lr (g + l2 b_i)`` (both from the same ``g``);
    unseen users and items have bias 0."""

    def __init__(self, lr: float = 0.025, l2: float = 0.1) -> None:
        if not lr > 0 or not l2 >= 0:
            raise ValueError(f"lr must be > 0 and l2 >= 0, got {lr}, {l2}")
        self.lr, self.l2 = float(lr), float(l2)
        self.total, self.count = 0.0, 0
        self.u: dict[Hashable, float] = {}
        self.i: dict[Hashable, float] = {}

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    def item_bias(self, item: Hashable) -> float:
        return self.i.get(item, 0.0)

    def user_bias(self, user: Hashable) -> float:
        return self.u.get(user, 0.0)

    def predict_one(self, user: Hashable, item: Hashable, x: dict | None = None) -> float:
        return self.mean + self.u.get(user, 0.0) + self.i.get(item, 0.0)

    def learn_one(self, user: Hashable, item: Hashable, y: float, x: dict | None = None) -> None:
        self.total += y
        self.count += 1
        b_u, b_i = self.u.get(user, 0.0), self.i.get(item, 0.0)
        g = 2.0 * (self.mean + b_u + b_i - y)
        self.u[user] = b_u - self.lr * (g + self.l2 * b_u)
        self.i[item] = b_i - self.lr * (g + self.l2 * b_i)


class MoSAICRecommender:
    """MoSAIC as an online recommender (see the module docstring).

    Args:
        r, K: MoSAIC's rank and number of experts; ``mosaic`` more of its constructor's arguments.
        experts: the class of the experts (``MoSAIC``; ``streaming.baselines.KGrouse`` for the
            pretrained k-GROUSE, whose ``mosaic`` is then ``eta=``).
        items: number of coordinates (the most-rated items when the experts are pretrained).
        bias_lr, bias_l2: learning rate and L2 of the SGD biases (``SGDBiases``).
        min_ratings: rated coordinates a user needs before MoSAIC completes their vector.
        pretrain_at: pretrain the experts once this many ratings have been learned (0: never, the
            biases alone).
        fold_ridge: ``λ`` of a ridge fold-in: the routed expert's coefficients are
            ``w = (U_Ωᵀ U_Ω + λ I)⁻¹ U_Ωᵀ e_Ω`` over the user's rated coordinates ``Ω``, so the
            completion shrinks toward the biases when the rated items carry little of the expert
            (few ratings); 0: MoSAIC's own completion (``MoSAIC.transform``).
        window: the fold-in uses each user's last ``window`` ratings only (None: all of them), so that
            a returning user whose taste drifted is completed from the new ratings.
        device: where MoSAIC's routing runs (``MoSAIC.to``).
    """

    def __init__(self, r: int = 1, K: int = 2, *, items: int = 500, min_ratings: int = 5,
                 pretrain_at: int = 0, fold_ridge: float = 0.0, window: int | None = None, seed: int = 0,
                 device: torch.device | None = None, bias_lr: float = 0.05, bias_l2: float = 0.1,
                 experts: type[MoSAIC] = MoSAIC, **mosaic) -> None:
        if window is not None and window < 1:
            raise ValueError(f"window must be >= 1 or None, got {window}")
        if not fold_ridge >= 0:
            raise ValueError(f"fold_ridge must be >= 0, got {fold_ridge}")
        self.window, self.fold_ridge = window, float(fold_ridge)
        self.biases = SGDBiases(bias_lr, bias_l2)
        self.items, self.min_ratings, self.pretrain_at = items, min_ratings, pretrain_at
        self.mosaic = experts(r, K, seed=seed, **mosaic).to(device)
        self.fitted = False
        self.column: dict[Hashable, int] = {}  # item -> coordinate, set at pretraining
        self.history: dict[Hashable, dict[Hashable, float]] = defaultdict(dict)  # user -> {item: rating}
        self.item_cnt: Counter = Counter()
        self.learned = 0

    def _residual_vector(self, user: Hashable) -> np.ndarray:
        """``e_u (n,)``: the user's residuals on their rated coordinates, NaN elsewhere."""
        b = self.biases
        mu, b_u = b.mean, b.user_bias(user)
        x = np.full(len(self.column), np.nan)
        for item, y in self.history[user].items():
            col = self.column.get(item)
            if col is not None:
                x[col] = y - mu - b_u - b.item_bias(item)
        return x

    def rated_columns(self, user: Hashable) -> int:
        """How many of the coordinates the user has rated (in the window)."""
        return sum(item in self.column for item in self.history.get(user, ()))

    def predict_one(self, user: Hashable, item: Hashable, x: dict | None = None) -> float:
        base = self.biases.predict_one(user, item)
        col = self.column.get(item)
        if not self.fitted or col is None or self.rated_columns(user) < self.min_ratings:
            return base
        e = self._residual_vector(user)
        if not self.fold_ridge:
            return base + float(self.mosaic.transform(e[None])[0, col])
        U = self.mosaic.bank_.bases[self.mosaic.route(e[None])[0]]  # (n, r), the routed expert
        rated = ~np.isnan(e)
        Uo = U[rated]
        w = np.linalg.solve(Uo.T @ Uo + self.fold_ridge * np.eye(U.shape[1]), Uo.T @ e[rated])
        return base + float(U[col] @ w)

    def learn_one(self, user: Hashable, item: Hashable, y: float, x: dict | None = None) -> None:
        self.biases.learn_one(user, item, y)
        seen = self.history[user]
        seen.pop(item, None)  # a re-rated item moves to the newest end
        seen[item] = float(y)
        if self.window is not None and len(seen) > self.window:
            del seen[next(iter(seen))]
        self.item_cnt[item] += 1
        self.learned += 1
        if self.fitted and item in self.column and self.rated_columns(user) >= self.min_ratings:
            self.mosaic.partial_fit(self._residual_vector(user))
        elif not self.fitted and self.learned == self.pretrain_at:
            self._pretrain()

    def _pretrain(self) -> None:
        """Coordinates = the ``items`` most-rated items so far; MoSAIC fitted on the residual vectors of
        the users with at least ``min_ratings`` rated coordinates (none fitted with fewer than 2 K)."""
        self.column = {item: c for c, (item, _) in enumerate(self.item_cnt.most_common(self.items))}
        users = [u for u in self.history if self.rated_columns(u) >= self.min_ratings]
        if len(self.column) <= self.mosaic.r or len(users) < 2 * self.mosaic.K:
            self.column = {}
            return
        with warnings.catch_warnings():  # few ratings per user is the norm here, not a mistake
            warnings.simplefilter("ignore", LowObservationWarning)
            self.mosaic.fit(np.stack([self._residual_vector(u) for u in users]))
        self.fitted = True
