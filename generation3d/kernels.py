"""Kernels of MoCA's sparse component attention: one softmax of each query component over the
full tokens of its k selected components and the compressed tokens of the others.

All kernels take the same arguments ``(x (B, P*T, d), w_qkv (3d, d), b_qkv (3d,), kc, vc
(B, P*C, d) | None, gate (B, P, k) | None, sel (B, P, k) long, bias (B, P, k*T) | None, comp_ok
(B, P, P) bool | None, P, H, step)`` and return ``(B, P, T, d)``: ``sel`` holds global block ids
``b*P + j`` of the selected components, ``gate`` multiplies the selected components' values
(value 1 in training, the router's straight-through gradient), ``bias`` is the additive padding
mask of the selected keys, ``comp_ok`` marks the compressed tokens a query component sees, and
``step`` query components are gathered at a time.

- ``fused_cpu`` (``GatheredAttention``): PyTorch's fused CPU flash-attention kernel on the gathered
  selected blocks, merged with one call over all compressed keys by their log-sum-exps (split-KV),
  with a custom backward; linear memory in the selected blocks. The CPU default.
- ``flex`` (``flex_component_attention``): ``torch.nn.attention.flex_attention`` over all P*T full
  and P*C compressed keys with a block mask built from the router's selection and ``comp_ok``
  (compiled on CUDA; the CUDA default). The router's gate enters through a zero-valued term with
  the exact gradient of the gated values.
- ``reference`` (``gathered_attention_reference``): public SDPA with plain autograd over the
  concatenated keys; the fallback and the test reference of the other two.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

KERNELS = ("fused_cpu", "flex", "reference")


def chunk_ranges(p: int, step: int) -> list[tuple[int, int]]:
    """``[(start, stop)]`` covering ``range(p)`` in chunks of ``step``."""
    return [(s, min(p, s + step)) for s in range(0, p, step)]


_cpu_flash = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
_cpu_flash_bwd = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)


NEG = -1e30  # additive logit of a masked compressed key (finite: a row may mask all of them)


def _gather_chunk(kb, vb, sel_c, gate_c, t):
    """Gather the keys/values of the selected components of one chunk of G query components.

    kb, vb: (B*P, T*d) component blocks; sel_c: (B, G, k) global block ids; gate_c: (B, G, k) or None.
    Returns k, v: (B*G, k*T, d) and the raw (ungated) selected values (B*G, k, T*d)."""
    b, g, kk = sel_c.shape
    d = kb.shape[1] // t
    vf_raw = vb.index_select(0, sel_c.reshape(-1)).view(b * g, kk, t * d)
    vf = vf_raw if gate_c is None else vf_raw * gate_c.reshape(b * g, kk, 1)
    kf = kb.index_select(0, sel_c.reshape(-1)).view(b * g, kk * t, d)
    return kf, vf.view(b * g, kk * t, d), vf_raw


def _chunk_mask(bias, a, z, n_keys):
    """Additive logit mask of query components ``a:z``, ``(B*G, 1, 1, L)``, from the padding mask
    ``bias (B, P, L)``, or None."""
    return None if bias is None else bias[:, a:z].reshape(-1, 1, 1, n_keys)


def _compressed_mask(comp_ok: Tensor, t: int, c: int, dtype) -> Tensor:
    """``comp_ok (B, P, P)`` bool (query component p may see the compressed tokens of j) ->
    additive mask ``(B, 1, P*T, P*C)`` (0 or ``NEG``) over all compressed keys."""
    b, p, _ = comp_ok.shape
    ok = comp_ok[:, :, None, :, None].expand(b, p, t, p, c).reshape(b, 1, p * t, p * c)
    return torch.zeros(ok.shape, dtype=dtype, device=comp_ok.device).masked_fill_(~ok, NEG)


def split_heads(z: Tensor, h: int) -> Tensor:
    """(N, L, H*e) -> (N, H, L, e) view."""
    n, length, d = z.shape
    return z.view(n, length, h, d // h).transpose(1, 2)


def _project(x, w_qkv, b_qkv):
    """``x (B, N, d)`` -> ``[q, k, v]`` each ``(B, N, d)``, from the fused ``(3d, d)`` weight and ``(3d,)`` bias."""
    d = x.shape[-1]
    return [F.linear(x, w_qkv[i * d : (i + 1) * d], b_qkv[i * d : (i + 1) * d]) for i in range(3)]


class GatheredAttention(torch.autograd.Function):
    """Block-sparse attention with linear memory in the selected blocks (CPU fused flash kernel).

    ``forward(x (B, P*T, d), w_qkv (3d, d), b_qkv (3d,), kc, vc (B, P*C, d) | None,
    gate (B,P,k) | None, sel (B,P,k) long, bias (B,P,k*T) additive float mask | None,
    comp_ok (B,P,P) bool | None, P, H, step) -> (B, P, T, d)``; ``sel`` holds global block ids
    ``b*P + j``.

    The one softmax of a query component over [the k*T tokens of its selected components, the
    compressed tokens of the others] is computed as two attentions merged by their log-sum-exps
    (split-KV): (A) the selected blocks, gathered for ``step`` query components at a time; (B)
    every query against all P*C compressed keys at once (they are shared by all queries), with
    the selected (and padding) components' compressed keys masked by ``comp_ok``. Backward calls
    the fused flash backward kernel for A (per chunk, gathered again) and B with the merged output
    and log-sum-exp, which gives exactly the gradients of the joint softmax; dK/dV of A are
    accumulated per block with ``index_add_``. The Q/K/V projection is part of the function so
    that its backward writes dx directly."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)  # fp32 under CPU autocast (bf16-mixed)
    def forward(ctx, x, w_qkv, b_qkv, kc, vc, gate, sel, bias, comp_ok, p, h, step):
        b, n, d = x.shape
        t, e = n // p, d // h
        q, k, v = _project(x, w_qkv, b_qkv)
        kb, vb = k.view(b * p, t * d), v.view(b * p, t * d)
        q5 = q.view(b, p, t, d)
        out = torch.empty(b, p, t, h, e, dtype=x.dtype, device=x.device)
        lse = None
        for a, z in chunk_ranges(p, step):
            g = z - a
            kf, vf, _ = _gather_chunk(kb, vb, sel[:, a:z], None if gate is None else gate[:, a:z], t)
            o, lse_c = _cpu_flash(split_heads(q5[:, a:z].reshape(b * g, t, d), h), split_heads(kf, h), split_heads(vf, h), 0.0, False,
                                  attn_mask=_chunk_mask(bias, a, z, kf.shape[1]))
            out[:, a:z] = o.transpose(1, 2).reshape(b, g, t, h, e)
            if lse is None:
                lse = torch.empty(b, p, h, t, dtype=lse_c.dtype, device=x.device)
            lse[:, a:z] = lse_c.view(b, g, h, t)
            del kf, vf, o  # free this chunk before the next one is gathered
        if kc is not None:
            oc, lse_c = _cpu_flash(split_heads(q, h), split_heads(kc, h), split_heads(vc, h), 0.0, False,
                                   attn_mask=_compressed_mask(comp_ok, t, kc.shape[1] // p, x.dtype))
            lse_c = lse_c.view(b, h, p, t).permute(0, 2, 1, 3)  # (B, P, H, T)
            total = torch.logaddexp(lse, lse_c)
            w_sel, w_comp = ((lse - total).exp().transpose(2, 3)[..., None],
                             (lse_c - total).exp().transpose(2, 3)[..., None])  # (B, P, T, H, 1)
            out = out * w_sel.to(x.dtype) + oc.view(b, h, p, t, e).permute(0, 2, 3, 1, 4) * w_comp.to(x.dtype)
            lse = total
        out = out.reshape(b, p, t, d)
        ctx.save_for_backward(x, w_qkv, b_qkv, k, v, kc, vc, gate, sel, bias, comp_ok, out, lse)
        ctx.meta = (p, h, step)
        return out

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx, grad_out):
        x, w_qkv, b_qkv, k, v, kc, vc, gate, sel, bias, comp_ok, out, lse = ctx.saved_tensors
        p, h, step = ctx.meta
        b, n, d = x.shape
        t = n // p
        wq, wk, wv = w_qkv[:d], w_qkv[d : 2 * d], w_qkv[2 * d :]
        grad_out = grad_out.contiguous()
        q = F.linear(x, wq, b_qkv[:d])  # recomputed: no full-size Q is kept between forward and backward
        kb, vb = k.view(b * p, t * d), v.view(b * p, t * d)
        dq = torch.empty_like(q)
        dk, dv = torch.zeros_like(k), torch.zeros_like(v)
        dkb, dvb = dk.view(b * p, t * d), dv.view(b * p, t * d)
        dgate = None if gate is None else torch.empty_like(gate)
        q5, dq5, go5, out5 = q.view(b, p, t, d), dq.view(b, p, t, d), grad_out.view(b, p, t, d), out.view(b, p, t, d)
        for a, z in chunk_ranges(p, step):
            g = z - a
            sel_c, gate_c = sel[:, a:z], None if gate is None else gate[:, a:z]
            kf, vf, vf_raw = _gather_chunk(kb, vb, sel_c, gate_c, t)
            gq, gk, gv = _cpu_flash_bwd(split_heads(go5[:, a:z].reshape(b * g, t, d), h), split_heads(q5[:, a:z].reshape(b * g, t, d), h),
                                        split_heads(kf, h), split_heads(vf, h), split_heads(out5[:, a:z].reshape(b * g, t, d), h),
                                        lse[:, a:z].reshape(b * g, h, t), 0.0, False,
                                        attn_mask=_chunk_mask(bias, a, z, kf.shape[1]))
            dq5[:, a:z] = gq.transpose(1, 2).reshape(b, g, t, d)
            kk = sel_c.shape[-1]
            gk = gk.transpose(1, 2).reshape(b * g * kk, t * d)
            gvf = gv.transpose(1, 2).reshape(b * g, kk, t * d)
            if gate is not None:
                dgate[:, a:z] = (gvf * vf_raw).sum(-1).view(b, g, kk)
                gvf = gvf * gate_c.reshape(b * g, kk, 1)
            dkb.index_add_(0, sel_c.reshape(-1), gk)
            dvb.index_add_(0, sel_c.reshape(-1), gvf.reshape(b * g * kk, t * d))
            del kf, vf, vf_raw, gq, gk, gv, gvf  # free this chunk before the next one is gathered
        dkc = dvc = None
        if kc is not None:
            lse_all = lse.permute(0, 2, 1, 3).reshape(b, h, p * t)
            gq, gkc, gvc = _cpu_flash_bwd(split_heads(grad_out.view(b, p * t, d), h), split_heads(q, h), split_heads(kc, h), split_heads(vc, h),
                                          split_heads(out.view(b, p * t, d), h), lse_all, 0.0, False,
                                          attn_mask=_compressed_mask(comp_ok, t, kc.shape[1] // p, x.dtype))
            dq += gq.transpose(1, 2).reshape(b, p * t, d)
            dkc, dvc = gkc.transpose(1, 2).reshape(kc.shape), gvc.transpose(1, 2).reshape(vc.shape)
        x2, dq2, dk2, dv2 = x.view(-1, d), dq.view(-1, d), dk.view(-1, d), dv.view(-1, d)
        dx = torch.mm(dq2, wq).addmm_(dk2, wk).addmm_(dv2, wv).view(b, n, d)
        dw = torch.cat([dq2.t() @ x2, dk2.t() @ x2, dv2.t() @ x2])
        db = torch.cat([dq2.sum(0), dk2.sum(0), dv2.sum(0)])
        return dx, dw, db, dkc, dvc, dgate, None, None, None, None, None, None


def gathered_attention_reference(x, w_qkv, b_qkv, kc, vc, gate, sel, bias, comp_ok, p, h, step):
    """Same computation as ``GatheredAttention`` with plain autograd (public SDPA, no custom
    backward; one softmax per query component over its concatenated selected and compressed keys):
    the fallback off CPU / without the fused kernel, and the test reference."""
    b, n, d = x.shape
    t = n // p
    q, k, v = _project(x, w_qkv, b_qkv)
    kb, vb = k.reshape(b * p, t * d), v.reshape(b * p, t * d)
    q5 = q.reshape(b, p, t, d)
    outs = []
    for a, z in chunk_ranges(p, step):
        g = z - a
        kf, vf, _ = _gather_chunk(kb, vb, sel[:, a:z], None if gate is None else gate[:, a:z], t)
        mask = _chunk_mask(bias, a, z, kf.shape[1])
        if kc is not None:
            n_c = kc.shape[1]
            kf = torch.cat([kf, kc.repeat_interleave(g, dim=0)], 1)
            vf = torch.cat([vf, vc.repeat_interleave(g, dim=0)], 1)
            ok = comp_ok[:, a:z].repeat_interleave(n_c // p, dim=-1).reshape(b * g, 1, 1, n_c)
            comp_bias = torch.zeros(ok.shape, dtype=x.dtype, device=x.device).masked_fill(~ok, float("-inf"))
            sel_bias = mask if mask is not None else torch.zeros(b * g, 1, 1, kf.shape[1] - n_c, dtype=x.dtype,
                                                                  device=x.device)
            mask = torch.cat([sel_bias, comp_bias], -1)
        o = F.scaled_dot_product_attention(split_heads(q5[:, a:z].reshape(b * g, t, d), h), split_heads(kf, h), split_heads(vf, h), attn_mask=mask)
        outs.append(o.transpose(1, 2).reshape(b, g, t, d))
    return torch.cat(outs, 1)


def component_block_mask(sel: Tensor, bias: Tensor | None, comp_ok: Tensor | None, p: int, t: int, c: int):
    """flex_attention ``BlockMask`` of MoCA over ``P*T`` queries and ``P*T + P*C`` keys (the full
    tokens, then the compressed ones): query token ``i`` (component ``i // T``) sees key token
    ``j < P*T`` when component ``j // T`` is selected and not masked by ``bias``, and compressed
    key ``j >= P*T`` when ``comp_ok`` allows component ``(j - P*T) // C``."""
    from torch.nn.attention.flex_attention import create_block_mask

    b, _, kk = sel.shape
    n = p * t
    local = sel - torch.arange(b, device=sel.device)[:, None, None] * p  # (B, P, k) component ids
    key_ok = torch.ones(b, p, kk, dtype=torch.bool, device=sel.device) if bias is None else \
        bias.view(b, p, kk, t)[..., 0] == 0
    full_ok = torch.zeros(b, p, p, dtype=torch.bool, device=sel.device).scatter_(2, local, key_ok)

    def mask_mod(bi, hi, qi, ki):
        ok = full_ok[bi, qi // t, ki.clamp(max=n - 1) // t]
        if comp_ok is None:
            return ok
        return torch.where(ki < n, ok, comp_ok[bi, qi // t, (ki - n).clamp(min=0) // c])

    n_keys = n + (p * c if comp_ok is not None else 0)
    return create_block_mask(mask_mod, b, None, n, n_keys, device=sel.device, _compile=sel.device.type == "cuda")


_compiled_flex = None


def _flex(device: torch.device):
    """flex_attention, compiled on CUDA (its fused kernel), eager elsewhere (CPU: forward only)."""
    global _compiled_flex
    from torch.nn.attention.flex_attention import flex_attention

    if device.type != "cuda":
        return flex_attention
    if _compiled_flex is None:
        _compiled_flex = torch.compile(flex_attention, dynamic=False)
    return _compiled_flex


def gate_gradient_term(q, k, v, gate, sel, bias, lse, p, h, step):
    """A ``(B, P, T, d)`` term of value 0 whose gradient to ``gate`` is that of the gated values:
    ``sum_s (gate_s - stopgrad(gate_s)) * U_s`` with ``U_s = sum_{keys i of selected component s}
    softmax_i * v_i`` (from the joint softmax's log-sum-exp ``lse (B, H, P*T)``), so
    ``d/d gate_s = U_s . dO`` exactly as when ``gate`` multiplies ``v`` inside the attention. No
    gradient reaches q, k or v through it."""
    b, n, d = q.shape
    t, e = n // p, d // h
    kk = sel.shape[-1]
    kb, vb = k.detach().reshape(b * p, t * d), v.detach().reshape(b * p, t * d)
    q5 = q.detach().reshape(b, p, t, d)
    lse5 = lse.detach().view(b, h, p, t)
    parts = []
    for a, z in chunk_ranges(p, step):
        g = z - a
        with torch.no_grad():
            kf, vf, _ = _gather_chunk(kb, vb, sel[:, a:z], None, t)
            logits = split_heads(q5[:, a:z].reshape(b * g, t, d), h) @ split_heads(kf, h).transpose(-1, -2) / math.sqrt(e)
            mask = _chunk_mask(bias, a, z, kf.shape[1])
            if mask is not None:
                logits = logits + mask
            weights = (logits - lse5[:, :, a:z].transpose(1, 2).reshape(b * g, h, t, 1)).exp()  # (B*G, H, T, k*T)
            u = torch.einsum("nhqst,nhste->nqshe", weights.view(b * g, h, t, kk, t),
                             split_heads(vf, h).reshape(b * g, h, kk, t, e))  # (B*G, T, k, H, e)
        gate_c = gate[:, a:z].reshape(b * g, 1, kk, 1, 1)
        parts.append(((gate_c - gate_c.detach()) * u).sum(2).reshape(b, g, t, d))
    return torch.cat(parts, 1)


def flex_component_attention(x, w_qkv, b_qkv, kc, vc, gate, sel, bias, comp_ok, p, h, step):
    """The joint softmax through ``flex_attention`` with ``component_block_mask`` (same arguments
    and result as ``GatheredAttention``); the gate's straight-through gradient through
    ``gate_gradient_term``. flex_attention has no CPU backward: on the CPU it serves inference
    and the tests."""
    from torch.nn.attention.flex_attention import AuxRequest

    b, n, d = x.shape
    t = n // p
    q, k, v = _project(x, w_qkv, b_qkv)
    keys, values = (k, v) if kc is None else (torch.cat([k, kc], 1), torch.cat([v, vc], 1))
    c = 0 if kc is None else kc.shape[1] // p
    mask = component_block_mask(sel, bias, comp_ok, p, t, c)
    o, aux = _flex(x.device)(split_heads(q, h), split_heads(keys, h), split_heads(values, h), block_mask=mask,
                             return_aux=AuxRequest(lse=True))
    out = o.transpose(1, 2).reshape(b, p, t, d)
    if gate is not None:
        out = out + gate_gradient_term(q, k, v, gate, sel, bias, aux.lse, p, h, step)
    return out


def default_kernel(device: torch.device) -> str:
    """``flex`` on CUDA, ``fused_cpu`` on the CPU (where it is faster), else ``reference``."""
    if device.type == "cuda":
        return "flex"
    if device.type == "cpu" and _cpu_flash is not None and _cpu_flash_bwd is not None:
        return "fused_cpu"
    return "reference"


def sparse_component_attention(*args, kernel: str | None = None) -> Tensor:
    """MoCA's joint softmax (arguments in the module docstring) with ``kernel`` (one of
    ``KERNELS``; None: ``default_kernel`` of the input's device) -> ``(B, P, T, d)``."""
    kernel = kernel or default_kernel(args[0].device)
    if kernel == "fused_cpu":
        return GatheredAttention.apply(*args)
    if kernel == "flex":
        return flex_component_attention(*args)
    if kernel == "reference":
        return gathered_attention_reference(*args)
    raise ValueError(f"unknown attention kernel {kernel!r}; choose from {', '.join(KERNELS)}")
