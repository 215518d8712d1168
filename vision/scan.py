"""Selective state-space scan (S6, Mamba; Gu & Dao 2023) in pure PyTorch, and 2D scan orders.

Discretised recurrence per channel ``d`` and state ``n`` (zero-order hold for ``A``, Euler for
``B``, as in the Mamba reference code)::

    h_t = exp(Δ_t A) ⊙ h_{t-1} + Δ_t B_t u_t          (Mamba eq. 2a with Ā = exp(ΔA), B̄ ≈ ΔB)
    y_t = C_t · h_t + D u_t                            (eq. 2b)

Shapes: ``u, delta (b, L, d)``, ``A (d, n)`` (negative real), ``B, C (b, L, n)``, ``D (d,)``.

Two implementations with the same result:

* :func:`selective_scan_sequential`: the recurrence as a Python loop over ``L`` (reference).
* :func:`selective_scan_parallel`: a chunked cumulative scan. With ``S_t = Σ_{s≤t} Δ_s A``,
  ``h_t = Σ_{s≤t} exp(S_t - S_s) x_s`` (``x_s = Δ_s B_s u_s``), computed inside each chunk by
  cumulative sums (or, when decays are so strong that ``exp(-S)`` would overflow, by recursive
  doubling), then carried across chunks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

# exp(80) ~ 5.5e34 < float32 max (3.4e38): the cumulative-sum form is safe below this.
_MAX_EXPONENT = 80.0


def _check(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None) -> None:
    if u.dim() != 3:
        raise ValueError(f"u must be (b, L, d), got {tuple(u.shape)}")
    b, L, d = u.shape
    if delta.shape != u.shape:
        raise ValueError(f"delta must match u {tuple(u.shape)}, got {tuple(delta.shape)}")
    if A.dim() != 2 or A.shape[0] != d:
        raise ValueError(f"A must be (d={d}, n), got {tuple(A.shape)}")
    n = A.shape[1]
    for name, m in (("B", B), ("C", C)):
        if m.shape != (b, L, n):
            raise ValueError(f"{name} must be ({b}, {L}, {n}), got {tuple(m.shape)}")
    if D is not None and D.shape != (d,):
        raise ValueError(f"D must be ({d},), got {tuple(D.shape)}")


def selective_scan_sequential(
    u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None = None
) -> Tensor:
    """Reference S6 scan, one time step at a time. Returns ``y (b, L, d)``."""
    _check(u, delta, A, B, C, D)
    b, L, d = u.shape
    h = u.new_zeros(b, d, A.shape[1])
    ys = []
    for t in range(L):
        decay = torch.exp(delta[:, t, :, None] * A)  # (b, d, n)
        h = decay * h + (delta[:, t] * u[:, t])[:, :, None] * B[:, t, None, :]
        ys.append((h * C[:, t, None, :]).sum(-1))
    y = torch.stack(ys, dim=1)
    return y if D is None else y + u * D


def _chunk_states(x: Tensor, log_decay: Tensor, S: Tensor) -> Tensor:
    """Zero-initialised states inside each chunk: ``h_t = Σ_{s≤t} exp(S_t - S_s) x_s`` along dim 2.

    ``S = cumsum(log_decay)`` is the within-chunk cumulative log decay (``<= 0``, decreasing).
    When ``-S`` stays below ~80 the factorisation ``exp(S_t) · cumsum(exp(-S_s) x_s)`` is used;
    it is precise in float32 because it only multiplies and never cancels large terms. With
    stronger decay ``exp(-S)`` would overflow, so the chunk is scanned by recursive doubling
    (Hillis-Steele: ``log2(T)`` vectorised steps over pairs ``(a, h)``), which only multiplies
    decays ``<= 1``.
    """
    if float(-S.detach().min()) < _MAX_EXPONENT:
        return torch.exp(S) * torch.cumsum(torch.exp(-S) * x, dim=2)
    a, h, T, k = torch.exp(log_decay), x, x.shape[2], 1
    while k < T:
        h = torch.cat([h[:, :, :k], h[:, :, k:] + a[:, :, k:] * h[:, :, :-k]], dim=2)
        if 2 * k < T:
            a = torch.cat([a[:, :, :k], a[:, :, k:] * a[:, :, :-k]], dim=2)
        k *= 2
    return h


def selective_scan_parallel(
    u: Tensor,
    delta: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None = None,
    chunk_size: int = 32,
) -> Tensor:
    """Chunked parallel S6 scan; same result as :func:`selective_scan_sequential`.

    The sequence is cut into chunks of ``chunk_size``. Inside every chunk (all chunks at once)
    the states come from cumulative sums (:func:`_chunk_states`); the carry between chunks is a
    loop over ``L / chunk_size`` chunks only. Keeping the cumulative log decay local to a chunk
    bounds its magnitude, which keeps float32 precise for long sequences. Memory is
    ``O(b L d n)``. Returns ``y (b, L, d)``.
    """
    _check(u, delta, A, B, C, D)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    b, L, d = u.shape
    n = A.shape[1]
    T = min(chunk_size, L)
    pad = (-L) % T
    if pad:  # zero delta/input in the padding: decay 1 and no input, sliced off below
        u_, delta_ = F.pad(u, (0, 0, 0, pad)), F.pad(delta, (0, 0, 0, pad))
        B_ = F.pad(B, (0, 0, 0, pad))
    else:
        u_, delta_, B_ = u, delta, B
    nc = (L + pad) // T
    log_decay = (delta_[..., None] * A).reshape(b, nc, T, d, n)  # <= 0
    x = ((delta_ * u_)[..., None] * B_[:, :, None, :]).reshape(b, nc, T, d, n)
    S = torch.cumsum(log_decay, dim=2)
    h_local = _chunk_states(x, log_decay, S)  # (b, nc, T, d, n)
    # carry: state entering chunk c is H_{c-1}; H_c = exp(S_end_c) H_{c-1} + h_local_end_c
    decay_end, local_end = torch.exp(S[:, :, -1]), h_local[:, :, -1]
    carries = [u.new_zeros(b, d, n)]
    for c in range(nc - 1):
        carries.append(decay_end[:, c] * carries[-1] + local_end[:, c])
    carry_in = torch.stack(carries, dim=1)  # (b, nc, d, n)
    h = h_local + torch.exp(S) * carry_in[:, :, None]
    h = h.reshape(b, nc * T, d, n)[:, :L]
    y = torch.einsum("bldn,bln->bld", h, C)
    return y if D is None else y + u * D


# ---------------------------------------------------------------------------------------------
# 2D scan orders over an (h, w) grid of patch tokens stored row-major (index = row * w + col).

SCAN_ORDERS = ("raster", "raster_rev", "column", "column_rev", "zigzag", "zigzag_rev",
               "zigzag_col", "zigzag_col_rev")


def scan_order(name: str, h: int, w: int) -> Tensor:
    """Permutation ``perm (h*w,)``: ``tokens[:, perm]`` visits the grid in the named order.

    ``raster`` row by row, ``column`` column by column, ``zigzag`` row by row alternating
    direction (boustrophedon, so consecutive tokens are always spatial neighbours), ``zigzag_col``
    the same over columns; ``*_rev`` reverses the sequence.
    """
    if name not in SCAN_ORDERS:
        raise ValueError(f"unknown scan order {name!r}; choose from {', '.join(SCAN_ORDERS)}")
    grid = torch.arange(h * w).reshape(h, w)
    base = name.removesuffix("_rev")
    if base == "raster":
        perm = grid.reshape(-1)
    elif base == "column":
        perm = grid.t().reshape(-1)
    elif base == "zigzag":
        rows = [grid[i] if i % 2 == 0 else grid[i].flip(0) for i in range(h)]
        perm = torch.cat(rows)
    else:  # zigzag_col
        cols = [grid[:, j] if j % 2 == 0 else grid[:, j].flip(0) for j in range(w)]
        perm = torch.cat(cols)
    return perm.flip(0) if name.endswith("_rev") else perm


def inverse_permutation(perm: Tensor) -> Tensor:
    """``inv`` with ``inv[perm] = arange``: ``tokens[:, perm][:, inv] == tokens``."""
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel(), device=perm.device)
    return inv
