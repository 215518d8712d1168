"""Component-level attention for part-token transformers: MoCA and the baselines it is compared to.

All modules take part tokens ``x: (B, P, T, d)`` (B shapes, P components/parts, T tokens per
part), optional part boxes ``boxes: (B, P, 6)`` (centre xyz, size xyz) and an optional validity
mask ``valid: (B, P)`` bool (padding parts are False), and return ``(B, P, T, d)``.

MoCA (mixture of components attention), per layer:

1. pooled component features ``h_p = mean_t x_{p,t} + PE(box_p)``: ``(B, P, d)``;
2. a light router scores every (query component p, key component j) pair,
   ``s_pj = <W_q h_p, W_k h_j> / sqrt(d_r) - softplus(a) * ||c_p - c_j||``;
3. ``moe.topk_select`` keeps the top-k components per query component, the own one always;
4. query tokens of component p attend, in ONE softmax, to the full T tokens of the k selected
   components and to C compressed tokens of each of the other P - k components
   (learned-query pooling of the component's tokens, plus its box encoding), so every component is still seen: ``L = k*T + C*(P-k)`` keys per query block.

The joint softmax runs in ``kernels.py`` (fused CPU split-KV kernel, ``flex_attention`` with a block
mask on CUDA, and a pure-PyTorch reference), chosen by device; memory stays linear in P*T. With
``k = P`` and ``n_compressed = 0`` this is exactly full attention.

The router's top-k choice is not differentiable; in training the selected components' values are
multiplied by ``g / stopgrad(g)`` with ``g = sigmoid(s)``: the forward value is exactly 1, and the
gradient tells the router which selected components the output depends on (straight-through).

Training recipe (DeepSeek-V3.2 sparse attention; the MoCA default, see ``MoCAAttention``): a dense
warm-up with k = P (``full_attention``) and a router distillation loss towards the part-level
attention mass of full attention (``component_attention_mass``, ``router_distill_target``,
``router_kl``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from generation3d.geometry import fourier
from generation3d.kernels import chunk_ranges, sparse_component_attention, split_heads
from moe import topk_select

ATTENTION_KINDS = ("full", "moca", "topk", "local")
DISTILL_QUERIES = 32  # router distillation: at most this many query components per layer and step


class BoxEncoding(nn.Module):
    """Fourier features of part boxes: ``boxes (..., 6) -> (..., d)``.

    ``gamma(b) = [b, sin(2^f * pi * b), cos(2^f * pi * b)]_{f < n_freq}`` (``geometry.fourier``)
    followed by a linear map."""

    def __init__(self, d_model: int, n_freq: int = 6):
        super().__init__()
        self.n_freq = n_freq
        self.proj = nn.Linear(6 * 2 * n_freq + 6, d_model)

    def forward(self, boxes: Tensor) -> Tensor:
        feats = fourier(boxes, self.n_freq)
        return self.proj(feats)


class ComponentRouter(nn.Module):
    """Scores cross-component relevance from pooled features.

    ``forward(pooled (B, P, d), centers (B, P, 3) | None, valid (B, P) | None) -> scores (B, P, P)``;
    invalid key components get ``-inf``. ``select(scores, k) -> (indices (B, P, k), mask (B, P, P))``
    via ``moe.topk_select`` with the diagonal forced (own component always attended)."""

    def __init__(self, d_model: int, d_router: int = 32):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.to_q = nn.Linear(d_model, d_router)
        self.to_k = nn.Linear(d_model, d_router)
        self.dist_weight = nn.Parameter(torch.tensor(0.5))
        self.d_router = d_router

    def forward(self, pooled: Tensor, centers: Tensor | None = None, valid: Tensor | None = None) -> Tensor:
        h = self.norm(pooled)
        scores = self.to_q(h) @ self.to_k(h).transpose(-1, -2) / math.sqrt(self.d_router)
        if centers is not None:
            scores = scores - F.softplus(self.dist_weight) * torch.cdist(centers, centers)
        if valid is not None:
            scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
        return scores

    @staticmethod
    def select(scores: Tensor, k: int) -> tuple[Tensor, Tensor]:
        p = scores.shape[-1]
        own = torch.eye(p, dtype=torch.bool, device=scores.device).expand(scores.shape)
        return topk_select(scores, k, always=own)


class ComponentCompressor(nn.Module):
    """Compress each component's T tokens into C tokens carrying its box prior.

    ``forward(x (B, P, T, d), box_pe (B, P, d) | None) -> (B, P, C, d)``: C learned queries
    attend (one head) over the component's tokens."""

    def __init__(self, d_model: int, n_tokens: int):
        super().__init__()
        if n_tokens < 1:
            raise ValueError(f"n_tokens must be >= 1, got {n_tokens}")
        self.n_tokens = n_tokens
        self.queries = nn.Parameter(torch.randn(n_tokens, d_model) / math.sqrt(d_model))
        self.key = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: Tensor, box_pe: Tensor | None = None) -> Tensor:
        d = x.shape[-1]
        # <q_c, W x_t> = <W^T q_c, x_t>: fold the queries into the key map (no (B,P,T,d) keys)
        logits = torch.einsum("cd,bptd->bpct", self.queries @ self.key.weight, x) / math.sqrt(d)
        out = torch.einsum("bpct,bptd->bpcd", logits.softmax(-1), x)
        if box_pe is not None:
            out = out + box_pe.unsqueeze(2)
        return out


class ComponentAttention(nn.Module):
    """Shared projections; subclasses choose which keys each query component sees.

    ``forward(x (B, P, T, d), boxes (B, P, 6) | None = None, valid (B, P) | None = None) -> (B, P, T, d)``."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.d_model, self.n_heads = d_model, n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def project(self, x: Tensor, queries: bool = True) -> tuple[Tensor | None, Tensor, Tensor]:
        """``x (B, N, d) -> q, k, v`` each ``(B, N, d)`` contiguous (q is None when not needed)."""
        d, w, bias = self.d_model, self.qkv.weight, self.qkv.bias
        q = F.linear(x, w[:d], bias[:d]) if queries else None
        return q, F.linear(x, w[d : 2 * d], bias[d : 2 * d]), F.linear(x, w[2 * d :], bias[2 * d :])

    def full_attention(self, x: Tensor, valid: Tensor | None = None) -> Tensor:
        """Global attention of this layer over all P*T tokens (fused SDPA), ``(B, P, T, d)``."""
        b, p, t, d = x.shape
        q, k, v = (rearrange(z, "b n (h e) -> b h n e", h=self.n_heads) for z in self.project(x.reshape(b, p * t, d)))
        mask = None
        if valid is not None and not bool(valid.all()):
            mask = valid.repeat_interleave(t, dim=1)[:, None, None, :]  # (B, 1, 1, P*T)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(rearrange(o, "b h (p t) e -> b p t (h e)", p=p))


class FullAttention(ComponentAttention):
    """Global attention over all P*T tokens (fused SDPA); the reference and the main baseline."""

    def forward(self, x: Tensor, boxes: Tensor | None = None, valid: Tensor | None = None) -> Tensor:
        return self.full_attention(x, valid)


class SparseComponentAttention(ComponentAttention):
    """Each query component attends to a chosen set of k components at full resolution (and,
    when ``n_compressed > 0``, to C compressed tokens of every other component), in one softmax.

    Subclasses implement ``choose(x, boxes, valid, k, kc) -> (indices (B,P,k), mask (B,P,P), scores|None)``.
    The selected components' keys+values are gathered for chunks of query components that stay
    below ``gather_budget`` times the size of the layer's own K and V, and gathered again in
    backward (``GatheredAttention``); the compressed keys are shared by all query components and
    never gathered (only a ``(B, P*T, P*C)`` logit mask marks the selected ones)."""

    def __init__(
        self, d_model: int, n_heads: int, top_k: int, n_compressed: int = 0, gather_budget: float = 1.0,
        n_freq: int = 6,
    ):
        super().__init__(d_model, n_heads)
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        if n_compressed < 0:
            raise ValueError(f"n_compressed must be >= 0, got {n_compressed}")
        self.top_k, self.n_compressed = top_k, n_compressed
        self.gather_budget = gather_budget
        self.box_pe = BoxEncoding(d_model, n_freq)
        self.compressor = ComponentCompressor(d_model, n_compressed) if n_compressed else None
        self.last_selection: dict[str, Tensor] = {}
        self.kernel: str | None = None  # one of kernels.KERNELS; None: by device (flex on CUDA, fused on CPU)

    def choose(self, x: Tensor, boxes: Tensor | None, valid: Tensor | None, k: int, kc: Tensor | None = None):
        """``kc (B, P*C, d)``: keys of the compressed tokens when compression is on, else None."""
        raise NotImplementedError

    def keys_per_query(self, p: int, t: int) -> int:
        """L = k*T + C*(P-k): keys seen by one query component."""
        k = min(self.top_k, p)
        return k * t + (self.n_compressed * (p - k) if self.compressor is not None else 0)

    def kernel_inputs(self, x: Tensor, boxes: Tensor | None = None, valid: Tensor | None = None) -> tuple:
        """Route and compress ``x (B, P, T, d)``: the arguments of ``kernels.sparse_component_attention``
        (``last_selection`` is updated)."""
        b, p, t, d = x.shape
        h, c = self.n_heads, self.n_compressed
        k_eff = min(self.top_k, p)
        use_comp = self.compressor is not None and k_eff < p
        kc = vc = comp_ok = None
        if use_comp:
            pe = self.box_pe(boxes) if boxes is not None else None
            # compressed tokens only need keys and values (same projections as the full tokens)
            _, kc, vc = self.project(self.compressor(x, pe).reshape(b, p * c, d), queries=False)
        sel, sel_mask, scores = self.choose(x, boxes, valid, k_eff, kc)
        self.last_selection = {"indices": sel.detach(), "mask": sel_mask.detach()}
        if scores is not None:
            self.last_selection["scores"] = scores.detach()
        boff = torch.arange(b, device=x.device)[:, None, None] * p
        if use_comp:
            # compressed tokens of the unselected (valid) components
            comp_ok = ~sel_mask if valid is None else ~sel_mask & valid[:, None, :]
        gate = None
        if scores is not None and self.training and torch.is_grad_enabled():
            g = torch.sigmoid(scores.gather(-1, sel).clamp(min=-30.0))
            gate = g / g.detach()  # (B, P, k), value exactly 1, gradient to the router
        bias = None
        if valid is not None and not bool(valid.all()):
            bi = torch.arange(b, device=x.device)[:, None, None]
            own = sel == torch.arange(p, device=x.device)[None, :, None]
            key_valid = (valid[bi, sel] | own).repeat_interleave(t, dim=-1)  # (B, P, k*T)
            bias = torch.zeros(key_valid.shape, dtype=x.dtype, device=x.device).masked_fill(~key_valid, float("-inf"))
        # chunk so that the gathered selected K+V of a chunk stay within gather_budget * (size of K and V)
        step = max(1, min(p, int(self.gather_budget * p // (2 * k_eff))))
        return (x.reshape(b, p * t, d), self.qkv.weight, self.qkv.bias, kc, vc, gate, sel + boff, bias, comp_ok, p, h, step)

    def forward(self, x: Tensor, boxes: Tensor | None = None, valid: Tensor | None = None) -> Tensor:
        b, p, t, d = x.shape
        o = sparse_component_attention(*self.kernel_inputs(x, boxes, valid), kernel=self.kernel)
        return self.out(o.reshape(b, p, t, d))


@torch.no_grad()
def component_attention_mass(q: Tensor, k: Tensor, p: int, n_heads: int, valid: Tensor | None = None,
                             queries: Tensor | None = None) -> Tensor:
    """Part-level attention of full attention: ``q, k (B, P*T, d)`` (one layer's queries and keys
    of all full-resolution tokens) -> ``(B, P, P)``, entry ``(p, j)`` = the softmax mass (over all
    valid keys) that the queries of component p put on the tokens of component j, averaged over
    p's tokens and the heads. Rows sum to 1 over the valid key components; no gradient. With
    ``queries (G,)`` (component indices) only those rows are computed; the others are 0."""
    b, n, d = q.shape
    t, e = n // p, d // n_heads
    kh = split_heads(k, n_heads)
    key_ok = None if valid is None else valid.repeat_interleave(t, dim=1)[:, None, None, :]
    out = q.new_empty(b, p, p) if queries is None else q.new_zeros(b, p, p)
    q4 = q.view(b, p, t, d)
    rows = torch.arange(p, device=q.device) if queries is None else queries
    # query components in chunks whose logits (B, H, G*T, P*T) stay within twice the size of K:
    # memory linear in P*T (the target is O((P*T)^2 / P * G) in time only)
    for a, z in chunk_ranges(len(rows), max(1, 2 * d // (n_heads * t))):
        r = rows[a:z]
        logits = split_heads(q4[:, r].reshape(b, len(r) * t, d), n_heads) @ kh.transpose(-1, -2) / math.sqrt(e)
        if key_ok is not None:
            logits = logits.masked_fill(~key_ok, float("-inf"))
        out[:, r] = logits.softmax(-1).view(b, n_heads, len(r), t, p, t).sum(-1).mean((1, 3))
    return out


def router_distill_target(mass: Tensor, valid: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Distillation target of the router from ``component_attention_mass`` ``(B, P, P)``: the own
    component (always selected, so not the router's choice) and invalid ones are dropped and each
    row is renormalised over the remaining valid key components. Returns ``(target (B, P, P),
    rows (B, P) bool)``; ``rows`` marks the valid query components with at least one valid other
    component (the rows the loss is taken over; the others are all zero)."""
    b, p, _ = mass.shape
    allowed = ~torch.eye(p, dtype=torch.bool, device=mass.device).expand(b, p, p)
    if valid is not None:
        allowed = allowed & valid[:, None, :] & valid[:, :, None]
    target = torch.where(allowed, mass, 0.0)
    total = target.sum(-1, keepdim=True)
    rows = (total[..., 0] > 0) & allowed.any(-1)
    return torch.where(rows[..., None], target / total.clamp(min=1e-30), 0.0), rows


def router_kl(scores: Tensor, target: Tensor, rows: Tensor) -> Tensor:
    """``mean over rows of KL(target || softmax(scores))`` over the key components where the
    target can be non-zero (the own component and ``-inf`` scores are excluded)."""
    p = scores.shape[-1]
    allowed = ~torch.eye(p, dtype=torch.bool, device=scores.device) & torch.isfinite(scores)
    logits = scores.masked_fill(~allowed, float("-inf"))
    logits = torch.where(rows[..., None], logits, 0.0)  # rows without a target: any finite value
    logp = logits.log_softmax(-1)
    pos = target > 0
    terms = torch.where(pos, target * (target.clamp(min=1e-30).log() - torch.where(pos, logp, 0.0)), 0.0)
    return terms.sum(-1)[rows].sum() / rows.sum().clamp(min=1)


class MoCAAttention(SparseComponentAttention):
    """MoCA: router-selected top-k components at full resolution + compressed tokens of the rest.

    ``top_k`` components per query component (own included), ``n_compressed`` = C tokens for
    each other component (0 turns compression off, giving the top-k-only baseline).

    Two training-only switches (DeepSeek-V3.2 sparse-attention recipe; set by the training loop
    through ``PartFlowTransformer.set_sparse_training``, both off by default and in eval mode):
    ``distill``: store ``distill_loss`` = KL(target || softmax(router scores)), target = the
    part-level attention mass of this layer's own queries under full attention
    (``component_attention_mass``, own part dropped, ``router_distill_target``), detached, and the
    router scored from detached pooled features, so the loss trains the router only; above
    ``DISTILL_QUERIES`` components the KL is the mean over that many query components drawn at
    random (global RNG) each step, an unbiased estimate at a fraction of the cost;
    ``dense``: attend with k = P (computed as full attention, ``full_attention``; no routing, no
    compression) for a dense warm-up."""

    def __init__(self, d_model: int, n_heads: int, top_k: int = 4, n_compressed: int = 2, d_router: int = 32, **kw):
        super().__init__(d_model, n_heads, top_k, n_compressed, **kw)
        self.router = ComponentRouter(d_model, d_router)
        self.distill, self.dense = False, False
        self.distill_loss: Tensor | None = None

    def router_inputs(self, x: Tensor, boxes: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """Pooled component features (+ box encoding) and box centres the router scores."""
        pooled = x.mean(2)
        centers = None
        if boxes is not None:
            pooled = pooled + self.box_pe(boxes)
            centers = boxes[..., :3]
        return pooled, centers

    def router_distill_loss(self, x: Tensor, boxes: Tensor | None, valid: Tensor | None) -> Tensor:
        """KL(full-attention part mass || router distribution), mean over query components; the
        gradient reaches the router's own parameters only."""
        b, p, t, d = x.shape
        queries = None
        if p > DISTILL_QUERIES:  # an unbiased subsample of the rows: the target costs O(G*T * P*T), not O((P*T)^2)
            queries = torch.randperm(p, device=x.device)[:DISTILL_QUERIES].sort().values
        with torch.no_grad():
            q, k, _ = self.project(x.detach().reshape(b, p * t, d))
            mass = component_attention_mass(q, k, p, self.n_heads, valid, queries)
            target, rows = router_distill_target(mass, valid)
        pooled, centers = self.router_inputs(x, boxes)
        scores = self.router(pooled.detach(), None if centers is None else centers.detach(), valid)
        return router_kl(scores, target, rows)

    def forward(self, x: Tensor, boxes: Tensor | None = None, valid: Tensor | None = None) -> Tensor:
        self.distill_loss = None
        if self.distill and self.training and torch.is_grad_enabled():
            self.distill_loss = self.router_distill_loss(x, boxes, valid)
        if self.dense and self.training:
            b, p = x.shape[:2]
            every = torch.ones(b, p, p, dtype=torch.bool, device=x.device)
            self.last_selection = {"indices": torch.arange(p, device=x.device).expand(b, p, p), "mask": every}
            return self.full_attention(x, valid)
        return super().forward(x, boxes, valid)

    def choose(self, x: Tensor, boxes: Tensor | None, valid: Tensor | None, k: int, kc: Tensor | None = None):
        pooled, centers = self.router_inputs(x, boxes)
        scores = self.router(pooled, centers, valid)
        idx, mask = self.router.select(scores, k)
        return idx, mask, scores


class TopKAttention(MoCAAttention):
    """Baseline: MoCA's router and top-k, but distant components are dropped (no compressed tokens)."""

    def __init__(self, d_model: int, n_heads: int, top_k: int = 4, d_router: int = 32, **kw):
        kw.pop("n_compressed", None)
        super().__init__(d_model, n_heads, top_k=top_k, n_compressed=0, d_router=d_router, **kw)


class LocalWindowAttention(SparseComponentAttention):
    """Baseline: each component attends to its ``window`` nearest components by box centre
    (sequence neighbours ``-|i - j|`` when no boxes are given); no router, no compression."""

    def __init__(self, d_model: int, n_heads: int, window: int = 4, **kw):
        kw.pop("n_compressed", None)
        super().__init__(d_model, n_heads, top_k=window, n_compressed=0, **kw)

    def choose(self, x: Tensor, boxes: Tensor | None, valid: Tensor | None, k: int, kc: Tensor | None = None):
        b, p = x.shape[:2]
        if boxes is not None:
            c = boxes[..., :3].detach()
            scores = -torch.cdist(c, c)
        else:
            i = torch.arange(p, device=x.device, dtype=x.dtype)
            scores = -(i[:, None] - i[None, :]).abs().expand(b, p, p)
        if valid is not None:
            scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
        idx, mask = ComponentRouter.select(scores, k)
        return idx, mask, None


def build_attention(kind: str, d_model: int, n_heads: int, top_k: int = 4, n_compressed: int = 2, **kw) -> ComponentAttention:
    """Registry: ``kind`` in ``ATTENTION_KINDS`` -> an attention module (see the classes above)."""
    if kind == "full":
        return FullAttention(d_model, n_heads)
    if kind == "moca":
        return MoCAAttention(d_model, n_heads, top_k=top_k, n_compressed=n_compressed, **kw)
    if kind == "topk":
        return TopKAttention(d_model, n_heads, top_k=top_k, **kw)
    if kind == "local":
        return LocalWindowAttention(d_model, n_heads, window=top_k, **kw)
    raise ValueError(f"unknown attention kind {kind!r}; choose from {', '.join(ATTENTION_KINDS)}")
