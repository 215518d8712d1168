"""Samples at the API boundary: validation of partially observed samples and the observed-count checks.

Samples are ``x (n,)`` or ``(B, n)`` with NaN marking the unobserved entries (or a boolean ``mask``,
True = observed). A sample identifies a rank-``r`` subspace only through ``m > r`` observed entries
(``check_observed``), and ``K`` experts are identified only by more observations than their degrees
of freedom (``check_source``).
"""

from __future__ import annotations

import sys
import warnings

import numpy as np

from common.errors import InputError

#: "most samples": the share of samples at m <= r above which the observed-count check warns
LOW_OBS_SHARE = 0.5


class InvalidSamples(InputError, ValueError, TypeError):
    """Samples that cannot be used (wrong shape, sparse, complex, non-numeric, no observed entry, a
    non-finite observed value): an ``InputError`` for the CLIs, and the ``ValueError`` / ``TypeError``
    that scikit-learn expects from an estimator."""


class LowObservationWarning(UserWarning):
    """Most samples have too few observed entries (``m <= r``) to identify a rank-``r`` subspace."""


class UnderdeterminedSourceWarning(UserWarning):
    """The source holds too few observations to identify ``K`` rank-``r`` experts: every partition
    of it fits exactly, so the pretrained experts are arbitrary (rounding picks one)."""


def as_observed(x: np.ndarray, mask: np.ndarray | None, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``x (n,)`` or ``(B, n)`` and ``mask`` (bool, same shape; None: observed where x is not NaN) ->
    ``(X0 (B, n) zero-filled float64, M (B, n) bool)``. ``InvalidSamples`` for a wrong dimension, a
    sample with no observed entry or a non-finite observed value; nothing is modified."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[None]
    if x.ndim != 2 or x.shape[1] != n:
        raise InvalidSamples(f"samples must have shape ({n},) or (B, {n}), got {x.shape}")
    if mask is None:
        M = ~np.isnan(x)
    else:
        M = np.asarray(mask)
        if M.ndim == 1:
            M = M[None]
        if M.shape != x.shape:
            raise InvalidSamples(f"mask must have the shape of x {x.shape}, got {M.shape}")
        M = M.astype(bool)
    empty = ~M.any(1)
    if empty.any():
        raise InvalidSamples(f"sample {int(np.flatnonzero(empty)[0])} has no observed entry")
    if not np.isfinite(x[M]).all():
        raise InvalidSamples("observed values contain NaN or inf")
    return np.where(M, x, 0.0), M


def check_samples(estimator, X, mask: np.ndarray | None = None, *, reset: bool, allow_1d: bool = False,
                  min_samples: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's ``validate_data`` (dense numeric 2-D, at least 2 features and ``min_samples``
    samples; ``reset`` learns ``estimator.n_features_in_``, otherwise checks it), then ``as_observed``
    (the values under ``~mask`` are not looked at). ``allow_1d``: a sample ``(n,)`` is read as
    ``(1, n)``. Returns ``(X0 (B, n), M (B, n))``; ``InvalidSamples`` on anything else."""
    from sklearn.utils.validation import validate_data

    if allow_1d and np.ndim(X) == 1:
        X = np.asarray(X)[None]
        mask = None if mask is None else np.asarray(mask)[None]
    try:
        X = validate_data(estimator, X, reset=reset, dtype=np.float64, accept_sparse=False,
                          ensure_all_finite="allow-nan" if mask is None else False,
                          ensure_min_features=2 if reset else 1, ensure_min_samples=min_samples)
    except (TypeError, ValueError) as exc:
        raise InvalidSamples(str(exc)) from None
    return as_observed(X, mask, X.shape[1])


def check_observed(M: np.ndarray, r: int, what: str = "samples", warn: bool = True) -> str | None:
    """Observed-count check for rank ``r`` on ``M (S, n)`` bool: InputError when no sample has more than
    ``r`` observed entries (with ``m <= r`` any subspace fits a sample exactly); a one-line message
    (a ``LowObservationWarning`` too when ``warn``) when more than half have ``m <= r``; else None."""
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


def check_source(M: np.ndarray, K: int, r: int, warn: bool = True) -> str | None:
    """Identifiability of ``K`` rank-``r`` experts pretrained on the source ``M (S, n)`` bool: each
    sample gives ``m - r`` constraints beyond its coefficients, the experts have ``K (n - r) r`` degrees
    of freedom. With fewer constraints every partition of the source fits exactly and rounding picks
    the experts: a one-line message (an ``UnderdeterminedSourceWarning`` too when ``warn``), else None."""
    M = np.asarray(M, dtype=bool)
    S, n = M.shape
    m = M.sum(1)
    constraints = int(np.clip(m - r, 0, None).sum())
    dof = K * (n - r) * r
    if constraints >= dof:
        return None
    per_sample = max(float(np.mean(np.clip(m - r, 0, None))), 1e-12)
    needed = int(np.ceil(dof / per_sample))
    msg = (f"the source's {S} samples give {constraints} observed constraints, fewer than the {dof} degrees of "
           f"freedom of K={K} rank-{r} experts in R^{n}: every partition fits exactly, so the pretrained experts "
           f"are arbitrary (about {needed} samples with this many observed entries identify them)")
    if warn:
        warnings.warn(msg, UnderdeterminedSourceWarning, stacklevel=3)
    return msg


def warn_low_observed(values: np.ndarray, r: int, what: str) -> None:
    """Print the observed-count check's ``warning:`` line (``check_observed``) for the CLIs; an
    InputError (exit 2) when no sample can identify a rank-r subspace."""
    msg = check_observed(~np.isnan(values), r, what, warn=False)
    if msg:
        print(f"warning: {msg}", file=sys.stderr)


def fit_warning_lines(model, source: np.ndarray) -> None:
    """``model.fit(source)`` for the CLIs, without its LowObservationWarning (they print the one-line
    ``warning:`` already, ``warn_low_observed``); a source too small to identify the experts
    (``check_source``) is one ``warning:`` line too."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("ignore", LowObservationWarning)
        warnings.simplefilter("always", UnderdeterminedSourceWarning)
        model.fit(source)
    for w in caught:
        if issubclass(w.category, UnderdeterminedSourceWarning):
            print(f"warning: {w.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
