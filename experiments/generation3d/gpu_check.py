"""Does MoCA's CUDA kernel (flex_attention with a block mask) compute the same attention, with the
same gradients, as the reference, and how fast is a MoCA training step against full attention?

Protocol: (1) one MoCA layer (d = 64, 4 heads, k = 4, C = 2) on a batch of 2 shapes of P parts x T
tokens, the second padded to half its parts, in training mode (router gate on) and float32 with
TF32 off: the output and every gradient (input, projections, router, compressor) through
``kernel="flex"`` against ``kernel="reference"`` (public SDPA with plain autograd); on the CPU only
the forward (flex_attention has no CPU backward). (2) ``bench.time_train_step`` of size S, MoCA vs
full attention, at ``--parts`` x ``--tokens`` in each ``--precision``. Writes one JSON.

    python -m experiments.generation3d.gpu_check --device cuda --out results/g3_gpu_check.json
    python -m experiments.generation3d.gpu_check --device cpu --parts 6 --tokens 2 --steps 1 --out /tmp/c.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from common.device import describe, resolve_device
from common.io import write_json
from generation3d.attention import MoCAAttention
from generation3d.bench import time_train_step


def kernel_agreement(device: torch.device, parts: int = 12, tokens: int = 8, seed: int = 0) -> dict:
    """Largest absolute difference flex vs reference of the layer output and of each gradient
    (gradients only where flex_attention has a backward, i.e. on CUDA)."""
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        torch.manual_seed(seed)
        layer = MoCAAttention(64, 4, top_k=4, n_compressed=2).to(device).train()
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(2, parts, tokens, 64, generator=g).to(device)
        boxes = torch.rand(2, parts, 6, generator=g).to(device)
        valid = torch.ones(2, parts, dtype=torch.bool)
        valid[1, parts // 2:] = False
        valid = valid.to(device)
        grads = device.type == "cuda"
        out = {}
        for kernel in ("reference", "flex"):
            layer.kernel = kernel
            layer.zero_grad(set_to_none=True)
            xi = x.clone().requires_grad_(grads)
            with torch.set_grad_enabled(grads):
                y = layer(xi, boxes, valid)
                if grads:
                    (y * torch.linspace(-1, 1, y.numel(), device=device).view_as(y)).sum().backward()
            out[kernel] = {"output": y.detach(), **({"input": xi.grad} if grads else {}),
                           **({n: p.grad for n, p in layer.named_parameters() if p.grad is not None} if grads else {})}
        diff = {k: float((out["flex"][k] - out["reference"][k]).abs().max()) for k in out["reference"]}
        return {"max_abs_diff": diff, "worst": max(diff.values()), "gradients_checked": grads,
                "parts": parts, "tokens": tokens}
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--parts", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--precision", nargs="+", default=["32", "bf16-mixed"])
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    device = resolve_device(a.device)
    result = {"device": describe(device), "kernels": kernel_agreement(device), "steps": []}
    print(f"flex vs reference on {result['device']}: worst |diff| {result['kernels']['worst']:.2e}")
    for precision in a.precision:
        rows = {att: time_train_step("S", att, a.parts, a.tokens, device, precision, steps=a.steps)
                for att in ("full", "moca")}
        rows["moca_speedup_vs_full"] = rows["full"]["time_ms"] / rows["moca"]["time_ms"]
        rows["moca_mem_ratio_vs_full"] = rows["moca"]["peak_mem_mb"] / rows["full"]["peak_mem_mb"]
        result["steps"].append({"precision": precision, **rows})
        print(f"{precision}: full {rows['full']['time_ms']:.1f} ms, MoCA {rows['moca']['time_ms']:.1f} ms "
              f"({rows['moca_speedup_vs_full']:.2f}x), memory ratio {rows['moca_mem_ratio_vs_full']:.2f}")
    write_json(Path(a.out), result)
    return result


if __name__ == "__main__":
    main()
