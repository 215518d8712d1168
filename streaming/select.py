"""Unknown ``K`` and ``r``: model selection for MoSAIC's pretraining (streaming/README.md, "Unknown K and r").

``estimate_K_r(source)`` cross-validates MoSAIC's own pretraining (``streaming.kss``) entry-wise: a
share ``holdout`` of every sample's observed entries is hidden; for a candidate ``(K, r)`` the
subspaces are fitted to the visible entries and each sample's hidden entries predicted by the
subspace that fits its visible ones best (MAP ridge). Too small a ``K`` or ``r`` leaves signal
unexplained, too large an ``r`` fits noise, too large a ``K`` only splits clusters (flat error).
For ``K = 1, 2, …`` ranks are scanned upwards until ``LOOKAHEAD`` in a row fail to lower the error;
``K`` stops after ``patience`` values that gain less than ``K_GAIN``. The **one-standard-error rule**
(ESL §7.10) then picks, among the points within one paired standard error (or ``REL_TOL``) of the
lowest error, the one with the fewest parameters ``S r + K r (n - r)``. ``KrEstimate`` keeps the
evidence: every point's score, the margins of the neighbours and warnings.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from common.errors import InputError
from streaming.observed import as_observed, check_observed

#: defaults of the grid bounds, the held-out share, the restarts per fit, the K patience
K_MAX = 20
R_MAX = 20
HOLDOUT = 0.2
RESTARTS = 3
PATIENCE = 2
#: the rank scan of one K stops after this many ranks in a row that do not lower its error
LOOKAHEAD = 3
#: a K that lowers the best error by less than this fraction does not count as an improvement
K_GAIN = 0.01
#: the one-standard-error rule also admits a point whose mean held-out error is within this fraction of
#: the lowest (about half of it in NRMSE): at the noise floor the paired standard error is tiny, and an
#: extra expert fitting a few samples' noise would otherwise count as a real gain
REL_TOL = 0.1


def split_entries(M: np.ndarray, holdout: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Hide ``floor(holdout · m)`` random observed entries of every sample with ``m > 2``:
    ``M (S, n)`` -> ``(visible (S, n), hidden (S, n))`` bool, disjoint, union ``M``."""
    hidden = np.zeros_like(M)
    for s, m in enumerate(M.sum(1)):
        h = int(holdout * m) if m > 2 else 0
        if h:
            hidden[s, rng.choice(np.flatnonzero(M[s]), size=h, replace=False)] = True
    return M & ~hidden, hidden


@dataclass
class KrEstimate:
    """Chosen ``K`` and ``r`` and the evidence (see the module docstring). ``table``: one dict per
    evaluated point (``K``, ``r``, ``cv_nrmse``, ``diff`` and ``se`` of the paired difference to the
    lowest-error point in units of the mean hidden energy, ``params``, ``eligible``), in evaluation
    order."""

    K: int
    r: int
    best_error_K: int
    best_error_r: int
    cv_nrmse: float
    margin: dict
    table: list[dict]
    warnings: list[str] = field(default_factory=list)
    settings: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        """One line: the estimate, its held-out error and margins."""
        parts = [f"K={self.K} r={self.r}: held-out NRMSE {self.cv_nrmse:.4f} over {len(self.table)} (K, r) points"]
        for name, value in self.margin.items():
            if value is not None:
                parts.append(f"{name} {value:+.1%}")
        return "; ".join(parts)


def _check_int(value, name: str, hi: float = math.inf, auto: bool = False) -> int | None:
    """``value`` as an int in [1, hi] (``"auto"``: None, where ``auto``); InputError otherwise."""
    if auto and value == "auto":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= hi:
        what = ("'auto' or " if auto else "") + (f"an integer in [1, {hi}]" if hi < math.inf else "an integer >= 1")
        raise InputError(f"{name} must be {what}, got {value!r}")
    return int(value)


def estimate_K_r(
    source: np.ndarray,
    mask: np.ndarray | None = None,
    K: int | str = "auto",
    r: int | str = "auto",
    k_max: int = K_MAX,
    r_max: int = R_MAX,
    holdout: float = HOLDOUT,
    restarts: int = RESTARTS,
    patience: int = PATIENCE,
    seed: int = 0,
    device: torch.device | None = None,
) -> KrEstimate:
    """Estimate the number of subspaces ``K`` and their rank ``r`` of source samples ``(S, n)``
    (NaN = unobserved, or ``mask (S, n)`` bool) by held-out completion error (module docstring).

    ``K`` / ``r``: ``"auto"`` or a fixed int (only the other is searched). Grid: ``1 <= K <= k_max``,
    ``1 <= r <= min(r_max, n - 1, median visible count - 1)``; the fits' routing runs on ``device``
    (None: the CPU). Returns a ``KrEstimate``; InputError
    for bad samples or bounds; a ``LowObservationWarning`` when most samples have ``m <= r``."""
    from streaming.experts import ExpertBank
    from streaming.kss import k_subspaces_missing, map_ridge

    x = np.asarray(source, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] < 2:
        raise InputError(f"source samples must be a (S, n) array with S, n >= 2, got shape {x.shape}")
    X0, M = as_observed(x, mask, x.shape[1])
    S, n = X0.shape
    for name, v in (("k_max", k_max), ("r_max", r_max), ("restarts", restarts), ("patience", patience)):
        _check_int(v, name)
    if not 0.0 < holdout < 1.0:
        raise InputError(f"holdout must be in (0, 1), got {holdout!r}")
    K_fixed, r_fixed = _check_int(K, "K", max(k_max, S), auto=True), _check_int(r, "r", n - 1, auto=True)
    rng = np.random.default_rng([seed, 7])
    visible, hidden = split_entries(M, holdout, rng)
    Xv = np.where(visible, X0, 0.0)
    hidden_energy = float((X0[hidden] ** 2).sum())
    if not hidden.any() or hidden_energy <= 0:
        raise InputError("the source samples have too few observed entries to hold any out (need m >= 3 per sample)")
    unit = hidden_energy / S  # per-sample errors in units of the mean hidden energy
    m_vis = visible.sum(1)
    r_lim = min(r_max, n - 1, max(1, int(np.median(m_vis)) - 1))
    notes: list[str] = []
    if r_fixed is not None:
        r_lim = r_fixed
        msg = check_observed(M, r_fixed, "source samples", warn=True)
        if msg:
            notes.append(msg)
    elif r_lim < r_max:
        notes.append(f"r searched up to {r_lim} only: the median sample has {int(np.median(m_vis))} visible "
                     f"entries, and a rank-r fit needs more than r")

    cache: dict[tuple[int, int], np.ndarray] = {}

    def errors(k: int, q: int) -> np.ndarray:
        """Per-sample held-out squared errors ``(S,)`` of the (k, q) model, in units of ``unit``."""
        if (k, q) not in cache:
            res = k_subspaces_missing(Xv, visible, k, q, restarts=1 if k == 1 else restarts, seed=seed,
                                      device=device)
            bank = ExpertBank(res.bases, map_ridge(res.bases, Xv, visible, res.labels))
            W, route = bank.batch_route(Xv, visible, device)
            pred = np.einsum("sir,sr->si", res.bases[route], W[np.arange(S), route])
            cache[(k, q)] = (np.where(hidden, pred - X0, 0.0) ** 2).sum(1) / unit
        return cache[(k, q)]

    def cv(k: int, q: int) -> float:
        return float(errors(k, q).mean())

    def best_rank(k: int) -> int:
        """Scan r = 1, 2, ... until ``LOOKAHEAD`` ranks in a row fail to lower the error; the best."""
        if r_fixed is not None:
            cv(k, r_fixed)
            return r_fixed
        q_best, q = 1, 1
        while q <= r_lim and q - q_best <= LOOKAHEAD:
            if cv(k, q) < cv(k, q_best):
                q_best = q
            q += 1
        return q_best

    Ks = [K_fixed] if K_fixed is not None else range(1, min(k_max, S) + 1)
    best, stale = math.inf, 0
    for k in Ks:
        e = cv(k, best_rank(k))
        stale = 0 if e < best * (1 - K_GAIN) else stale + 1
        best = min(best, e)
        if stale >= patience:
            break

    keys = list(cache)
    k0, q0 = min(keys, key=lambda kq: cv(*kq))
    table = []
    for k, q in keys:
        d = cache[(k, q)] - cache[(k0, q0)]
        se = float(d.std(ddof=1) / math.sqrt(S))
        table.append({"K": k, "r": q, "cv_nrmse": math.sqrt(cv(k, q) * unit * S / hidden_energy),
                      "diff": float(d.mean()), "se": se, "params": S * q + k * q * (n - q),
                      "eligible": bool(d.mean() <= se or cv(k, q) <= (1 + REL_TOL) * cv(k0, q0))})
    chosen = min((t for t in table if t["eligible"]), key=lambda t: (t["params"], t["K"]))
    K_hat, r_hat = chosen["K"], chosen["r"]

    def rel(k: int, q: int) -> float | None:
        return cv(k, q) / cv(K_hat, r_hat) - 1.0 if (k, q) in cache else None

    margin = {"one_expert_fewer": rel(K_hat - 1, r_hat), "one_rank_fewer": rel(K_hat, r_hat - 1),
              "one_expert_more": rel(K_hat + 1, r_hat), "one_rank_more": rel(K_hat, r_hat + 1)}
    if K_fixed is None and K_hat == min(k_max, S):
        notes.append(f"K={K_hat} is the grid's upper bound: the true K may be larger (raise k_max)")
    if r_fixed is None and r_hat == r_lim:
        notes.append(f"r={r_hat} is the grid's upper bound: the true r may be larger (raise r_max or observe more)")
    if r_fixed is None:
        msg = check_observed(M, r_hat, "source samples", warn=True)
        if msg:
            notes.append(msg)
    return KrEstimate(
        K=K_hat, r=r_hat, best_error_K=k0, best_error_r=q0, cv_nrmse=chosen["cv_nrmse"], margin=margin,
        table=table, warnings=notes,
        settings={"k_max": k_max, "r_max": r_max, "r_searched_up_to": r_lim, "holdout": holdout,
                  "restarts": restarts, "patience": patience, "seed": seed, "samples": S, "n": n,
                  "K": K if K == "auto" else int(K), "r": r if r == "auto" else int(r)},
    )


def save_model(model, path_dir) -> None:
    """``model.save_pretrained(path_dir)`` with ``model.selection_`` (when set) as the checkpoint's
    ``extra["auto_K_r"]`` (read back by ``selection_of``)."""
    estimate = getattr(model, "selection_", None)
    model.save_pretrained(path_dir, extra={"auto_K_r": estimate.to_dict()} if estimate is not None else None)


def selection_of(path_dir) -> dict | None:
    """The ``KrEstimate.to_dict()`` stored in a checkpoint directory by ``save_model`` (None if none)."""
    from common.pretrained import checkpoint_info

    return checkpoint_info(path_dir).extra.get("auto_K_r")
