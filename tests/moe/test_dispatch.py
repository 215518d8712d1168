import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from moe import (
    MoE,
    TopKRouter,
    dispatch_combine,
    dispatch_combine_einsum,
    dispatch_combine_loop,
    expert_capacity,
    route_topk,
)


def _experts(e, d_in, d_out, seed=0):
    torch.manual_seed(seed)
    return nn.ModuleList(nn.Sequential(nn.Linear(d_in, 8), nn.Tanh(), nn.Linear(8, d_out)) for _ in range(e))


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40), st.integers(1, 6), st.integers(1, 3), st.integers(0, 1000), st.booleans())
def test_fast_path_equals_loop_reference_values_and_gradients(n, e, k, seed, use_mask):
    k = min(k, e)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 5, generator=gen, requires_grad=True)
    logits = torch.randn(n, e, generator=gen, requires_grad=True)
    mask = (torch.rand(n, generator=gen) > 0.3) if use_mask else None
    if mask is not None:
        mask[0] = True  # at least one valid token, so the output has a gradient path
    experts = _experts(e, 5, 4, seed)
    outs, grads = [], []
    for fn in (dispatch_combine, dispatch_combine_loop):
        routing = route_topk(logits, k, mask=mask)
        y, _ = fn(x, routing, experts)
        (y * torch.arange(1.0, 5.0)).sum().backward()
        outs.append(y.detach())
        params = [x, logits, *experts.parameters()]
        grads.append([torch.zeros_like(t) if t.grad is None else t.grad.clone() for t in params])
        for t in (x, logits, *experts.parameters()):
            t.grad = None
    torch.testing.assert_close(outs[0], outs[1])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)


def test_one_expert_equals_the_dense_expert():
    x = torch.randn(12, 5)
    experts = _experts(1, 5, 3)
    layer = MoE(experts, TopKRouter(5, 1, k=1))
    y, routing = layer(x)
    torch.testing.assert_close(y, experts[0](x))
    assert routing.counts.tolist() == [12]


def test_topk_equal_e_with_softmax_is_the_dense_mixture():
    torch.manual_seed(0)
    x = torch.randn(9, 5)
    e = 4
    experts = _experts(e, 5, 3)
    router = TopKRouter(5, e, k=e)
    y, _ = MoE(experts, router)(x)
    p = torch.softmax(router.gate(x), -1)
    dense = sum(p[:, i : i + 1] * experts[i](x) for i in range(e))
    torch.testing.assert_close(y, dense)
    routing = route_topk(router.gate(x), e)
    torch.testing.assert_close(dispatch_combine_einsum(x, routing, experts), dense)


def test_masked_tokens_do_not_change_other_outputs():
    torch.manual_seed(0)
    x = torch.randn(10, 5)
    layer = MoE(_experts(3, 5, 5), TopKRouter(5, 3, k=2))
    mask = torch.ones(10, dtype=torch.bool)
    mask[[2, 7]] = False
    y1, _ = layer(x, mask)
    x2 = x.clone()
    x2[[2, 7]] = 1e3  # garbage in padded positions
    y2, _ = layer(x2, mask)
    torch.testing.assert_close(y1[mask], y2[mask])
    assert torch.all(y1[~mask] == 0)


def test_capacity_drops_and_accounts_overflow():
    x = torch.randn(8, 5)
    logits = torch.zeros(8, 2)
    logits[:, 0] = 5.0  # everyone wants expert 0
    routing = route_topk(logits, 1)
    experts = _experts(2, 5, 5)
    cap = expert_capacity(8, 2, 1.0)
    assert cap == 4
    y, info = dispatch_combine(x, routing, experts, capacity_factor=1.0)
    y_ref, info_ref = dispatch_combine_loop(x, routing, experts, capacity_factor=1.0)
    assert info.dropped == info_ref.dropped == 4 and info.capacity == 4
    torch.testing.assert_close(y, y_ref)
    # The first four tokens (token order) are kept, the rest get no expert output.
    assert info.kept_mask.squeeze(1).tolist() == [True] * 4 + [False] * 4
    assert torch.all(y[4:] == 0)
    torch.testing.assert_close(y[:4], experts[0](x[:4]) * routing.weights[:4])


def test_moe_layer_keeps_leading_dims_and_is_deterministic():
    def run():
        torch.manual_seed(5)
        layer = MoE(_experts(4, 6, 6), TopKRouter(6, 4, k=2))
        return layer(torch.randn(2, 3, 6))

    (y1, r1), (y2, r2) = run(), run()
    assert torch.equal(r1.indices, r2.indices)
    assert y1.shape == (2, 3, 6) and r1.indices.shape == (6, 2)
    assert torch.equal(y1, y2)


def test_dispatch_rejects_mismatched_inputs():
    routing = route_topk(torch.randn(4, 3), 1)
    with pytest.raises(ValueError, match="tokens"):
        dispatch_combine(torch.randn(5, 2), routing, _experts(3, 2, 2))
    with pytest.raises(ValueError, match="experts"):
        dispatch_combine(torch.randn(4, 2), routing, _experts(2, 2, 2))
    with pytest.raises(ValueError, match="capacity_factor"):
        dispatch_combine(torch.randn(4, 2), routing, _experts(3, 2, 2), capacity_factor=0)
