"""Streams of partially observed samples on a drifting union of subspaces, and their file format.

The stream file (``.npz``, format version 1; ``save_stream`` / ``load_stream``) is the table of
streaming/README.md: only ``values (T, n)`` (NaN = unobserved) is required; ``full`` (synthetic
streams) or ``heldout`` (real data, ``streaming.movielens``) enable evaluation.

Generative model: sample ``t`` of class ``k_t`` in epoch ``e`` is ``x = U_{e,k} w + σ ε`` with
``w ~ N(0, (n/r) I_r)`` (unit variance per entry), ``ε ~ N(0, I_n)`` (or Student-t with
``noise_dof`` degrees of freedom), and each coordinate ``i`` observed independently with probability
``obs_frac`` (or ``p_i``: with ``obs_spread = s > 0`` evenly spread over ``obs_frac (1 ± s)`` in a
random order, clipped to [0.01, 1]). Class proportions are ``proportions`` (default uniform). With
``scale != 1`` or ``coord_scale_spread = c > 0`` every entry is multiplied by ``scale · d_i``
(``log d_i ~ N(0, c²)``): class ``k`` then lies near ``span(D U_k)``, whose orthonormal basis
``bases`` holds. Drift:

* ``rotation`` (per-subspace geodesic): ``U_e = U_0 cos(eθ) + Q_k sin(eθ)`` (``Q_k ⟂ U_0``
  orthonormal, ``θ = angle_rad``): every principal angle grows by ``θ`` per epoch.
* ``shared_rotation``: at each epoch boundary every subspace is rotated by the same random
  orthogonal ``R_e = P diag(rot(θ), …) Pᵀ`` (``plane_rotation``): each principal angle between
  consecutive epochs is at most ``θ`` and the Gram matrices between classes are unchanged.
* ``independent_rotation``: the same, with an independent ``R_{e,k}`` per subspace.
* ``random_walk``: before every sample each subspace takes a step of ``walk_rad`` rad in a random
  tangent direction; ``bases[e]`` holds the subspaces at the first sample of epoch ``e`` (epochs
  are mere time segments) and ``Stream.sample_bases`` the true basis of every sample (not saved).
* ``abrupt``: at each epoch boundary ``n_replace`` random subspaces are replaced by fresh ones.
* ``mixed``: at each boundary ``n_replace`` subspaces are replaced and the others move on along
  their geodesic by ``angle_rad``.
* ``none``: fixed subspaces.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.errors import DataError, InputError
from common.io import atomic_write, read_npz
from streaming.linalg import orthonormalize, random_bases

FORMAT_VERSION = 1
DRIFT_KINDS = ("none", "rotation", "abrupt", "shared_rotation", "independent_rotation", "random_walk", "mixed")

#: the issue's standard (n, r, K) configurations (``mosaic simulate --config``)
STANDARD_CONFIGS: dict[str, tuple[int, int, int]] = {
    "25-5-5": (25, 5, 5),
    "50-5-10": (50, 5, 10),
    "100-10-10": (100, 10, 10),
    "100-25-5": (100, 25, 5),
}


@dataclass
class StreamConfig:
    """Parameters of a synthetic union-of-subspaces stream (see the module docstring)."""

    n: int = 100
    r: int = 10
    K: int = 10
    obs_frac: float = 0.4
    noise_std: float = 0.05
    proportions: list[float] | None = None  # class proportions (default uniform)
    epochs: int = 4
    samples_per_epoch: int = 2000
    drift: str = "rotation"
    angle_rad: float = 0.1  # per epoch, for drift="rotation"
    n_replace: int = 1  # subspaces replaced per epoch boundary, for drift="abrupt"
    source_per_class: int = 0  # pretraining samples per class; 0 = auto (max(30 r, 4 r n / (m - r)))
    walk_rad: float = 0.005  # per-sample step of drift="random_walk"
    obs_spread: float = 0.0  # spread of the per-coordinate observation probabilities (0 = uniform)
    noise_dof: float = 0.0  # Student-t noise with this many degrees of freedom (0 = Gaussian)
    scale: float = 1.0  # every entry × scale · d_i
    coord_scale_spread: float = 0.0  # log d_i ~ N(0, spread²)
    seed: int = 0

    def validate(self) -> None:
        if self.K < 1:
            raise InputError(f"K must be >= 1, got {self.K}")
        if not 1 <= self.r < self.n:
            raise InputError(f"rank r must satisfy 1 <= r < n, got r={self.r}, n={self.n}")
        if not 0.0 < self.obs_frac <= 1.0:
            raise InputError(f"obs_frac must be in (0, 1], got {self.obs_frac}")
        if self.noise_std < 0:
            raise InputError(f"noise_std must be >= 0, got {self.noise_std}")
        if self.epochs < 1 or self.samples_per_epoch < 1:
            raise InputError("epochs and samples_per_epoch must be >= 1")
        if self.drift not in DRIFT_KINDS:
            raise InputError(f"drift must be one of {DRIFT_KINDS}, got {self.drift!r}")
        if self.walk_rad < 0 or self.obs_spread < 0 or self.coord_scale_spread < 0 or self.scale <= 0:
            raise InputError("walk_rad, obs_spread and coord_scale_spread must be >= 0 and scale > 0")
        if self.noise_dof != 0 and self.noise_dof <= 1:
            raise InputError(f"noise_dof must be 0 (Gaussian) or > 1, got {self.noise_dof}")
        if self.drift in ("abrupt", "mixed") and not 1 <= self.n_replace <= self.K:
            raise InputError(f"n_replace must be in [1, K={self.K}], got {self.n_replace}")
        if self.proportions is not None:
            p = np.asarray(self.proportions, dtype=float)
            if p.shape != (self.K,) or (p < 0).any() or p.sum() <= 0:
                raise InputError(f"proportions must be {self.K} non-negative numbers with a positive sum")

    def n_source(self) -> int:
        if self.source_per_class > 0:
            return self.source_per_class
        m = max(self.obs_frac * self.n - self.r, 1.0)
        return int(max(30 * self.r, 4 * self.r * self.n / m))


@dataclass
class Stream:
    """A stream in memory; fields mirror the file keys (streaming/README.md)."""

    values: np.ndarray  # (T, n), NaN = unobserved
    labels: np.ndarray | None = None  # (T,)
    epoch: np.ndarray | None = None  # (T,)
    bases: np.ndarray | None = None  # (E, K, n, r)
    full: np.ndarray | None = None  # (T, n)
    source_values: np.ndarray | None = None  # (S, n)
    source_labels: np.ndarray | None = None  # (S,)
    heldout: np.ndarray | None = None  # (T, n), NaN = not held out
    label_names: np.ndarray | None = None  # (C,) str
    column_ids: np.ndarray | None = None  # (n,)
    sample_ids: np.ndarray | None = None  # (T,)
    sample_bases: np.ndarray | None = None  # (T, n, r) true basis of each sample (random walk; not saved)

    @property
    def n(self) -> int:
        return self.values.shape[1]

    def drift_points(self) -> list[int]:
        """Sample indices where a new epoch starts."""
        if self.epoch is None:
            return []
        return [int(t) for t in np.flatnonzero(np.diff(self.epoch) != 0) + 1]


def _draw_samples(rng, sample_bases: np.ndarray, cfg: StreamConfig, obs_prob: np.ndarray | None = None):
    """``sample_bases (N, n, r)`` (each sample's true basis) -> (values with NaN, full), both ``(N, n)``.
    ``obs_prob (n,)``: per-coordinate observation probabilities (default ``obs_frac``)."""
    N = sample_bases.shape[0]
    W = rng.standard_normal((N, cfg.r)) * np.sqrt(cfg.n / cfg.r)
    full = np.einsum("nir,nr->ni", sample_bases, W)
    noise = rng.standard_t(cfg.noise_dof, full.shape) if cfg.noise_dof else rng.standard_normal(full.shape)
    full += cfg.noise_std * noise
    observed = rng.random(full.shape) < (cfg.obs_frac if obs_prob is None else obs_prob)
    empty = ~observed.any(1)  # every sample keeps at least one observed entry
    observed[empty, rng.integers(0, cfg.n, empty.sum())] = True
    values = np.where(observed, full, np.nan)
    return values, full


def _geodesic_directions(rng, U0: np.ndarray) -> np.ndarray:
    """``U0 (K, n, r)`` -> orthonormal ``Q (K, n, q)``, ``Q_k ⟂ U0_k``, ``q = min(r, n - r)``."""
    K, n, r = U0.shape
    G = rng.standard_normal((K, n, min(r, n - r)))
    G -= U0 @ (U0.transpose(0, 2, 1) @ G)
    return orthonormalize(G)


def plane_rotation(rng: np.random.Generator, n: int, angle_rad: float) -> np.ndarray:
    """Random orthogonal ``R (n, n)`` that turns every vector by exactly ``angle_rad`` (``n`` even;
    for odd ``n`` one direction stays fixed): ``P diag(rot θ, rot θ, …) Pᵀ`` with ``P`` uniformly
    random orthogonal."""
    P = orthonormalize(rng.standard_normal((n, n)))
    c, s = np.cos(angle_rad), np.sin(angle_rad)
    J = np.eye(n)
    for i in range(0, n - 1, 2):
        J[i : i + 2, i : i + 2] = [[c, -s], [s, c]]
    return P @ J @ P.T


def epoch_bases(cfg: StreamConfig, rng: np.random.Generator) -> np.ndarray:
    """True bases ``(epochs, K, n, r)`` for the configured drift (``random_walk``: the initial
    subspaces in every epoch; ``generate_stream`` walks them)."""
    U0 = random_bases(rng, cfg.K, cfg.n, cfg.r)
    bases = np.empty((cfg.epochs, cfg.K, cfg.n, cfg.r))
    bases[0] = U0
    if cfg.drift == "rotation":
        Q = _geodesic_directions(rng, U0)
        q = Q.shape[2]
        for e in range(1, cfg.epochs):
            c, s = np.cos(e * cfg.angle_rad), np.sin(e * cfg.angle_rad)
            Ue = U0.copy()
            Ue[:, :, :q] = U0[:, :, :q] * c + Q * s
            bases[e] = Ue
    elif cfg.drift == "abrupt":
        for e in range(1, cfg.epochs):
            bases[e] = bases[e - 1]
            for k in rng.choice(cfg.K, size=cfg.n_replace, replace=False):
                bases[e, k] = random_bases(rng, 1, cfg.n, cfg.r)[0]
    elif cfg.drift in ("shared_rotation", "independent_rotation"):
        for e in range(1, cfg.epochs):
            if cfg.drift == "shared_rotation":
                bases[e] = plane_rotation(rng, cfg.n, cfg.angle_rad) @ bases[e - 1]
            else:
                bases[e] = np.stack([plane_rotation(rng, cfg.n, cfg.angle_rad) @ U for U in bases[e - 1]])
    elif cfg.drift == "mixed":
        # the geodesic of every class from its current basis; a replaced class starts a new one
        Q = _geodesic_directions(rng, U0)
        c, s = np.cos(cfg.angle_rad), np.sin(cfg.angle_rad)
        for e in range(1, cfg.epochs):
            prev = bases[e - 1]
            moved = prev.copy()
            q = Q.shape[2]
            moved[:, :, :q] = prev[:, :, :q] * c + Q * s
            Q = -prev[:, :, :q] * s + Q * c  # the geodesic's direction at the new point
            for k in rng.choice(cfg.K, size=cfg.n_replace, replace=False):
                moved[k] = random_bases(rng, 1, cfg.n, cfg.r)[0]
                Q[k] = _geodesic_directions(rng, moved[k][None])[0]
            bases[e] = moved
    else:
        bases[1:] = U0
    return bases


def _random_walk(rng, U: np.ndarray, steps: int, walk_rad: float) -> np.ndarray:
    """``steps`` random-walk steps of the ``K`` subspaces ``U (K, n, r)`` (see the module
    docstring); returns the bases before each step ``(steps, K, n, r)`` and leaves ``U`` at the end."""
    out = np.empty((steps, *U.shape))
    for t in range(steps):
        out[t] = U
        G = rng.standard_normal(U.shape)
        G -= U @ (U.transpose(0, 2, 1) @ G)
        G /= np.linalg.norm(G, axis=(1, 2), keepdims=True)
        U[:] = orthonormalize(U + walk_rad * G)
    return out


def generate_stream(cfg: StreamConfig) -> Stream:
    """Draw a stream and its pretraining source (samples of the epoch-0 subspaces)."""
    cfg.validate()
    rng = np.random.default_rng(cfg.seed)
    bases = epoch_bases(cfg, rng)
    p = np.full(cfg.K, 1.0 / cfg.K) if cfg.proportions is None else np.asarray(cfg.proportions, float)
    p = p / p.sum()
    obs_prob = None
    if cfg.obs_spread > 0:
        spread = cfg.obs_frac * (1.0 + cfg.obs_spread * np.linspace(-1.0, 1.0, cfg.n))
        obs_prob = np.clip(rng.permutation(spread), 0.01, 1.0)
    d = None
    if cfg.scale != 1.0 or cfg.coord_scale_spread > 0:
        d = cfg.scale * np.exp(cfg.coord_scale_spread * rng.standard_normal(cfg.n))
    src_labels = np.repeat(np.arange(cfg.K), cfg.n_source())
    rng.shuffle(src_labels)
    src_values, _ = _draw_samples(rng, bases[0][src_labels], cfg, obs_prob)
    values, full, labels, epoch, per_sample = [], [], [], [], []
    walk = bases[0].copy()
    for e in range(cfg.epochs):
        lab = rng.choice(cfg.K, size=cfg.samples_per_epoch, p=p)
        if cfg.drift == "random_walk":
            bases[e] = walk
            Ut = _random_walk(rng, walk, cfg.samples_per_epoch, cfg.walk_rad)[np.arange(lab.size), lab]
            per_sample.append(Ut)
        else:
            Ut = bases[e][lab]
        v, f = _draw_samples(rng, Ut, cfg, obs_prob)
        values.append(v), full.append(f), labels.append(lab), epoch.append(np.full(lab.shape, e))
    values, full = np.concatenate(values), np.concatenate(full)
    sample_bases = np.concatenate(per_sample) if per_sample else None
    if d is not None:  # x -> D x: the subspaces become span(D U), re-orthonormalised
        values, full, src_values = values * d, full * d, src_values * d
        bases = orthonormalize(bases * d[:, None])
        if sample_bases is not None:
            sample_bases = orthonormalize(sample_bases * d[:, None])
    return Stream(
        values=values,
        labels=np.concatenate(labels),
        epoch=np.concatenate(epoch),
        bases=bases,
        full=full,
        source_values=src_values,
        source_labels=src_labels,
        sample_bases=sample_bases,
    )


# ---- file format
_OPTIONAL = (
    "labels", "epoch", "bases", "full", "source_values", "source_labels",
    "heldout", "label_names", "column_ids", "sample_ids",
)


#: integer keys of a stream file (label_names are strings, every other key floats)
_INT_KEYS = ("labels", "epoch", "source_labels", "column_ids", "sample_ids")


def save_stream(path: str | os.PathLike, stream: Stream) -> Path:
    """Write ``stream`` as a version-1 ``.npz`` (atomically)."""
    arrays = {"format_version": np.array(FORMAT_VERSION), "values": stream.values}
    for key in _OPTIONAL:
        value = getattr(stream, key)
        if value is not None:
            arrays[key] = value
    path = Path(path)
    with atomic_write(path, "wb") as f:
        np.savez_compressed(f, **arrays)
    return path


def check_values(values: np.ndarray, name: str = "values") -> np.ndarray:
    """Validate a ``(T, n)`` float matrix with NaN = unobserved; returns it as float64."""
    values = np.asarray(values)
    if values.ndim != 2 or values.shape[0] < 1 or values.shape[1] < 2:
        raise DataError(f"{name} must be a (T, n) matrix with T >= 1 and n >= 2, got shape {values.shape}")
    if not np.issubdtype(values.dtype, np.floating):
        raise DataError(f"{name} must be floating point (NaN marks unobserved), got {values.dtype}")
    if np.isinf(values).any():
        raise DataError(f"{name} contain inf; mark unobserved entries with NaN")
    empty = np.flatnonzero(np.isnan(values).all(1))
    if empty.size:
        raise DataError(f"{name}: sample {int(empty[0])} has no observed entry ({empty.size} such samples)")
    return values.astype(np.float64, copy=False)


def load_stream(path: str | os.PathLike) -> Stream:
    """Read and validate a stream file (DataError on unreadable, wrong version or bad shapes)."""
    path = Path(path)
    data = read_npz(path, "stream file")
    if "format_version" not in data:
        raise DataError(f"{path} is not a stream file: no format_version key")
    try:
        version = int(np.asarray(data["format_version"]).reshape(-1)[0])
    except (TypeError, ValueError, IndexError, OverflowError):
        raise DataError(f"{path} has a malformed format_version {data['format_version']!r}") from None
    if version != FORMAT_VERSION:
        raise DataError(f"{path} has stream format version {version}, this reader supports {FORMAT_VERSION}")
    if "values" not in data:
        raise DataError(f"{path} has no 'values' array")
    values = check_values(data["values"], f"{path.name}: values")
    T, n = values.shape
    out = Stream(values=values, **{key: data[key] for key in _OPTIONAL if key in data})
    shapes = (("labels", (T,)), ("epoch", (T,)), ("full", (T, n)), ("heldout", (T, n)), ("column_ids", (n,)),
              ("sample_ids", (T,)))
    for key in _OPTIONAL:
        arr, want = getattr(out, key), "integers" if key in _INT_KEYS else "strings" if key == "label_names" else "floats"
        if arr is not None and arr.dtype.kind not in {"integers": "iu", "strings": "U", "floats": "f"}[want]:
            raise DataError(f"{path.name}: {key} must be {want}, got dtype {arr.dtype}")
    if out.source_labels is not None and out.source_labels.shape != (np.shape(out.source_values)[:1] or (0,)):
        raise DataError(f"{path.name}: source_labels must have one entry per row of source_values")
    for key, shape in shapes:
        arr = getattr(out, key)
        if arr is not None and arr.shape != shape:
            raise DataError(f"{path.name}: {key} must have shape {shape}, got {arr.shape}")
    if out.bases is not None and (out.bases.ndim != 4 or out.bases.shape[2] != n):
        raise DataError(f"{path.name}: bases must have shape (epochs, K, {n}, r), got {out.bases.shape}")
    if out.epoch is not None and (np.diff(out.epoch) < 0).any():
        raise DataError(f"{path.name}: epoch must be non-decreasing")
    if out.heldout is not None:
        if np.isinf(out.heldout).any():
            raise DataError(f"{path.name}: heldout must be finite floats with NaN where nothing is held out")
        if (~np.isnan(out.heldout) & ~np.isnan(values)).any():
            raise DataError(f"{path.name}: heldout overlaps the observed values")
    if out.label_names is not None:
        if out.label_names.ndim != 1:
            raise DataError(f"{path.name}: label_names must be a 1-d array of strings")
        if out.labels is not None and out.labels.size and not 0 <= out.labels.min() <= out.labels.max() < out.label_names.size:
            raise DataError(f"{path.name}: labels must index label_names (0..{out.label_names.size - 1})")
    if out.source_values is not None:
        out.source_values = check_values(out.source_values, f"{path.name}: source_values")
        if out.source_values.shape[1] != n:
            raise DataError(f"{path.name}: source_values must have {n} columns")
    return out
