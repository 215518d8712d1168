"""MoCA's sparse-attention kernels agree: flex_attention with a block mask (the CUDA kernel, run
eagerly on the CPU here: flex_attention has no CPU backward, so its q/k/v gradients are checked on
a GPU only) against the fused CPU kernel and the pure-PyTorch reference."""

import pytest
import torch

from generation3d.attention import LocalWindowAttention, MoCAAttention, TopKAttention
from generation3d.kernels import KERNELS, default_kernel, sparse_component_attention

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")

VALID = torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0]], dtype=torch.bool)


def _layers():
    torch.manual_seed(0)
    return {"moca": MoCAAttention(16, 2, top_k=2, n_compressed=2), "moca_c1": MoCAAttention(16, 2, top_k=3, n_compressed=1),
            "topk": TopKAttention(16, 2, top_k=2), "local": LocalWindowAttention(16, 2, window=3)}


@pytest.mark.parametrize("name", ["moca", "moca_c1", "topk", "local"])
@pytest.mark.parametrize("valid", [None, VALID])
def test_flex_forward_matches_the_cpu_kernel_and_the_reference(name, valid):
    m = _layers()[name].double().eval()
    g = torch.Generator().manual_seed(1)
    x, boxes = torch.randn(2, 6, 4, 16, generator=g, dtype=torch.float64), torch.rand(2, 6, 6, generator=g, dtype=torch.float64)
    outs = {}
    with torch.no_grad():
        for kernel in KERNELS:
            m.kernel = kernel
            outs[kernel] = m(x, boxes, valid)
    for kernel in ("flex", "reference"):
        torch.testing.assert_close(outs[kernel], outs["fused_cpu"], atol=1e-12, rtol=0)


def test_flex_gate_term_gives_the_router_the_reference_gradient():
    torch.manual_seed(0)
    m = MoCAAttention(16, 2, top_k=2, n_compressed=2).double().train()
    g = torch.Generator().manual_seed(2)
    x, boxes = torch.randn(2, 6, 4, 16, generator=g, dtype=torch.float64), torch.rand(2, 6, 6, generator=g, dtype=torch.float64)
    args = list(m.kernel_inputs(x, boxes, VALID))
    gate = args[5]
    assert gate is not None and gate.requires_grad
    for i in (0, 1, 2, 3, 4):  # everything but the gate is constant: flex has no CPU backward for q/k/v
        args[i] = args[i].detach()
    w = torch.randn(2, 6, 4, 16, generator=g, dtype=torch.float64)
    grads = {}
    for kernel in ("flex", "reference", "fused_cpu"):
        out = sparse_component_attention(*args, kernel=kernel)
        grads[kernel] = torch.autograd.grad((out * w).sum(), gate)[0]
    assert grads["reference"].abs().sum() > 0
    torch.testing.assert_close(grads["flex"], grads["reference"], atol=1e-12, rtol=0)
    torch.testing.assert_close(grads["fused_cpu"], grads["reference"], atol=1e-12, rtol=0)


def test_kernel_is_chosen_by_device():
    assert default_kernel(torch.device("cpu")) == "fused_cpu"
    assert default_kernel(torch.device("cuda")) == "flex"
    with pytest.raises(ValueError, match="unknown attention kernel"):
        sparse_component_attention(torch.zeros(1, 2, 4), kernel="nope")
