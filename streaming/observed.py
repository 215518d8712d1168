"""Samples at the API boundary: validation of partially observed samples and the observed-count check.

A sample of ambient dimension ``n`` is given as ``x (n,)`` or a batch ``(B, n)`` with NaN marking
the unobserved entries (or an explicit boolean ``mask``, True = observed). A rank-``r`` subspace is
identified by a sample only through ``m > r`` observed entries (with ``m <= r`` any subspace fits
it exactly): ``check_observed`` warns (``LowObservationWarning``) when most samples are at
``m <= r`` and refuses (``InputError``) when all are, since nothing can be learnt.
"""

from __future__ import annotations

import warnings

import numpy as np

from common.errors import InputError

#: "most samples": the share of samples at m <= r above which the observed-count check warns
LOW_OBS_SHARE = 0.5


class LowObservationWarning(UserWarning):
    """Most samples have too few observed entries (``m <= r``) to identify a rank-``r`` subspace."""


def as_observed(x: np.ndarray, mask: np.ndarray | None, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate samples at the API boundary.

    ``x (n,)`` or ``(B, n)``; ``mask`` bool of the same shape (True = observed) or None, meaning
    "observed where x is not NaN". Returns ``(X0 (B, n) zero-filled float64, M (B, n) bool)``.
    Raises InputError for a wrong dimension, a sample with no observed entry, or a NaN/inf
    observed value. Nothing is modified, so a rejected batch leaves a model untouched.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[None]
    if x.ndim != 2 or x.shape[1] != n:
        raise InputError(f"samples must have shape ({n},) or (B, {n}), got {x.shape}")
    if mask is None:
        M = ~np.isnan(x)
    else:
        M = np.asarray(mask)
        if M.ndim == 1:
            M = M[None]
        if M.shape != x.shape:
            raise InputError(f"mask must have the shape of x {x.shape}, got {M.shape}")
        M = M.astype(bool)
    empty = ~M.any(1)
    if empty.any():
        raise InputError(f"sample {int(np.flatnonzero(empty)[0])} has no observed entry")
    if not np.isfinite(x[M]).all():
        raise InputError("observed values contain NaN or inf")
    return np.where(M, x, 0.0), M


def check_observed(M: np.ndarray, r: int, what: str = "samples", warn: bool = True) -> str | None:
    """Observed-count check for rank ``r`` on ``M (S, n)`` bool (True = observed).

    Raises InputError when no sample has more than ``r`` observed entries (no subspace of rank
    ``r`` can be learnt or tracked); returns a one-line message, and issues it as a
    ``LowObservationWarning`` when ``warn``, when more than half of the samples have ``m <= r``
    (their completion is unconstrained); returns None otherwise."""
    m = np.asarray(M, dtype=bool).sum(1)
    if m.size == 0:
        return None
    if (m <= r).all():
        raise InputError(f"every one of the {m.size} {what} has at most {int(m.max())} observed entries: a rank-{r} "
                         f"subspace needs more than {r} observed entries per sample (lower r or observe more)")
    low = float((m <= r).mean())
    if low <= LOW_OBS_SHARE:
        return None
    msg = (f"{100 * low:.0f}% of the {m.size} {what} have at most r={r} observed entries (median "
           f"{float(np.median(m)):g}): a rank-{r} subspace is not identified by them and their completions are "
           f"unreliable (lower r or observe more)")
    if warn:
        warnings.warn(msg, LowObservationWarning, stacklevel=2)
    return msg
