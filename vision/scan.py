"""Selective state-space scan (S6, Mamba; Gu & Dao 2023) in pure PyTorch, and 2D scan orders.

Discretised recurrence per channel ``d`` and state ``n`` (zero-order hold for ``A``, Euler for
``B``, as in the Mamba reference code)::

    h_t = exp(Δ_t A) ⊙ h_{t-1} + Δ_t B_t u_t          (Mamba eq. 2a with Ā = exp(ΔA), B̄ ≈ ΔB)
    y_t = C_t · h_t + D u_t                            (eq. 2b)

Shapes: ``u, delta (b, L, d)``, ``A (d, n)`` (negative real), ``B, C (b, L, n)``, ``D (d,)``.

Three implementations with the same result; :func:`selective_scan` (what the models call) picks
the faster of the last two by sequence length:

* :func:`selective_scan_sequential`: the recurrence as a Python loop over ``L`` with autograd
  through every step (reference).
* :func:`selective_scan_recurrent`: the same recurrence run in place over one ``(b, L, n, d)``
  state buffer, with a hand-written backward (the adjoint recurrence run in reverse): the fewest
  passes over the states, no overflow for any decay. Fastest for short sequences.
* :func:`selective_scan_chunked`: a chunked cumulative scan. With ``S_t = Σ_{s≤t} Δ_s A``,
  ``h_t = Σ_{s≤t} exp(S_t - S_s) x_s`` (``x_s = Δ_s B_s u_s``), computed inside each chunk by
  cumulative sums (or, when decays are so strong that ``exp(-S)`` would overflow, by recursive
  doubling), then carried across chunks: a loop over ``L / chunk_size`` steps only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

# exp(80) ~ 5.5e34 < float32 max (3.4e38): the cumulative-sum form is safe below this.
_MAX_EXPONENT = 80.0
# selective_scan runs the recurrent form up to this length and the chunked scan above it: on one
# CPU thread the recurrent form was 1.4-14x faster at every length measured, 16 to 4096
# (experiments/vision/scan_step.py, docs/results/vision/scan_step.json); not yet timed on a GPU,
# where its L small kernels per pass may lose to the chunked scan at long lengths.
RECURRENT_MAX_LEN = 4096


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


def _sum_over_states(x: Tensor, w: Tensor) -> Tensor:
    """``Σ_n x[:, :, n] ⊙ w_n -> (b, L, d)`` for ``x (b, L, n, d)`` and ``w (b, L, n)`` or
    ``(n, d)``: one multiply-add per state, without a ``(b, L, n, d)`` temporary."""
    per_row = w.dim() == 3
    out = x[:, :, 0] * (w[:, :, 0, None] if per_row else w[0])
    for k in range(1, x.shape[2]):
        out.addcmul_(x[:, :, k], w[:, :, k, None] if per_row else w[k])
    return out


class _RecurrentScan(torch.autograd.Function):
    """``y = S6(u; Δ, A, B, C, D)`` with the states ``h (b, L, n, d)`` kept for the backward pass.

    Forward: ``h_0 = x_0``, ``h_t = a_t ⊙ h_{t-1} + x_t`` with ``a_t = exp(Δ_t A)`` and
    ``x_t = Δ_t u_t B_t``, then ``y_t = Σ_n C_t h_t + D u_t``. Backward: the adjoint
    ``g_t = ∂L/∂h_t`` obeys ``g_{L-1} = C ⊗ ∂L/∂y``, ``g_t = C_t ⊗ ∂L/∂y_t + a_{t+1} ⊙ g_{t+1}``;
    then ``∂L/∂x_t = g_t`` and ``∂L/∂(Δ_t A) = g_t ⊙ a_t ⊙ h_{t-1}``, from which the input
    gradients follow by the chain rule. ``n`` sits before ``d`` so every step is one contiguous
    ``(b, n, d)`` slab; the backward reuses its two ``(b, L, n, d)`` buffers in place.
    """

    @staticmethod
    def forward(ctx, u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None) -> Tensor:
        A_nd = A.t().contiguous()  # (n, d): broadcasts against (b, L, n, d) without strides
        decay = torch.exp(delta[:, :, None, :] * A_nd)  # (b, L, n, d)
        h = B[..., None] * (delta * u)[:, :, None, :]  # x, overwritten by the states
        for t in range(1, h.shape[1]):
            h[:, t].addcmul_(decay[:, t], h[:, t - 1])
        y = _sum_over_states(h, C)
        if D is not None:
            y = y.addcmul_(u, D)
        ctx.save_for_backward(u, delta, A_nd, B, C, D, decay, h)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y: Tensor):
        u, delta, A_nd, B, C, D, decay, h = ctx.saved_tensors
        g = C[..., None] * grad_y[:, :, None, :]  # ∂L/∂h through y_t only, then the adjoint in place
        for t in range(h.shape[1] - 2, -1, -1):
            g[:, t].addcmul_(decay[:, t + 1], g[:, t + 1])
        grad_C = (h * grad_y[:, :, None, :]).sum(-1)
        g_x = _sum_over_states(g, B)  # ∂L/∂(Δ u), (b, L, d)
        g_log_decay = torch.empty_like(h)  # ∂L/∂(Δ A); h_{-1} = 0
        g_log_decay[:, 0].zero_()
        torch.mul(g[:, 1:], decay[:, 1:], out=g_log_decay[:, 1:]).mul_(h[:, :-1])
        grad_B = g.mul_((delta * u)[:, :, None, :]).sum(-1)
        grad_delta = _sum_over_states(g_log_decay, A_nd).addcmul_(g_x, u)
        grad_A = g_log_decay.mul_(delta[:, :, None, :]).sum((0, 1)).t()
        grad_u = g_x * delta
        grad_D = None
        if D is not None:
            grad_u = grad_u.addcmul_(grad_y, D)
            grad_D = (grad_y * u).sum((0, 1))
        return grad_u, grad_delta, grad_A, grad_B, grad_C, grad_D


def selective_scan_recurrent(
    u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None = None
) -> Tensor:
    """The recurrence of :func:`selective_scan_sequential` vectorised over ``(b, n, d)`` and run in
    place, with a hand-written backward (:class:`_RecurrentScan`); the inputs are computed in
    their common dtype. Memory: the states and decays, ``2 b L d n``. Returns ``y (b, L, d)``."""
    _check(u, delta, A, B, C, D)
    dtype = torch.promote_types(torch.promote_types(u.dtype, delta.dtype), A.dtype)
    for m in (B, C) if D is None else (B, C, D):
        dtype = torch.promote_types(dtype, m.dtype)
    u, delta, A, B, C = (m.to(dtype) for m in (u, delta, A, B, C))
    return _RecurrentScan.apply(u, delta, A, B, C, None if D is None else D.to(dtype))


def selective_scan(
    u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None = None
) -> Tensor:
    """S6 scan ``y (b, L, d)``: :func:`selective_scan_recurrent` for ``L <= RECURRENT_MAX_LEN``,
    :func:`selective_scan_chunked` above."""
    if u.dim() == 3 and u.shape[1] <= RECURRENT_MAX_LEN:
        return selective_scan_recurrent(u, delta, A, B, C, D)
    return selective_scan_chunked(u, delta, A, B, C, D)


def selective_scan_chunked(
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
