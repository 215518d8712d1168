"""MoCA attention: equivalence with full attention at k = P, routing, compression, gradients."""


import pytest
import torch

from generation3d.attention import (
    ComponentCompressor,
    ComponentRouter,
    FullAttention,
    LocalWindowAttention,
    MoCAAttention,
    TopKAttention,
    build_attention,
)


def _copy(dst, src):
    dst.load_state_dict(src.state_dict(), strict=False)
    return dst


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_k_equals_p_without_compression_is_full_attention(dtype, tol):
    torch.manual_seed(0)
    full = FullAttention(32, 4).to(dtype)
    moca = _copy(MoCAAttention(32, 4, top_k=6, n_compressed=0, gather_budget=0.2).to(dtype), full)
    x = torch.randn(2, 6, 5, 32, dtype=dtype, requires_grad=True)
    boxes = torch.rand(2, 6, 6, dtype=dtype)
    for train in (False, True):
        moca.train(train)
        y_full, y_moca = full(x), moca(x, boxes)
        torch.testing.assert_close(y_moca, y_full, atol=tol, rtol=0)
        g_full = torch.autograd.grad(y_full.square().sum(), [x, full.qkv.weight, full.out.weight])
        g_moca = torch.autograd.grad(y_moca.square().sum(), [x, moca.qkv.weight, moca.out.weight])
        # in training the x-gradient also carries the router's straight-through term (by design)
        for a, b in list(zip(g_moca, g_full, strict=True))[int(train):]:
            torch.testing.assert_close(a, b, atol=tol * 10, rtol=0)


def test_k_equals_p_with_padding_mask_matches_full_on_valid_parts():
    torch.manual_seed(1)
    full = FullAttention(16, 2).double()
    moca = _copy(MoCAAttention(16, 2, top_k=5, n_compressed=0).double(), full)
    x = torch.randn(2, 5, 3, 16, dtype=torch.float64)
    valid = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    torch.testing.assert_close(moca(x, None, valid)[valid], full(x, valid=valid)[valid], atol=1e-12, rtol=0)


def test_router_topk_always_contains_own_component_and_best_scores():
    scores = torch.tensor([[[0.0, 5.0, 4.0, -1.0],
                            [3.0, -9.0, 1.0, 2.0],
                            [0.0, 0.0, -5.0, 0.0],
                            [1.0, 2.0, 3.0, 4.0]]])
    idx, mask = ComponentRouter.select(scores, 2)
    # own component forced, the other slot goes to the best-scoring remaining component (ties: lower index)
    assert idx[0].tolist() == [[0, 1], [0, 1], [0, 2], [2, 3]]
    assert mask.sum(-1).eq(2).all() and mask[0].diagonal().all()


def test_moca_exposes_router_choices_and_key_count():
    torch.manual_seed(0)
    m = MoCAAttention(16, 2, top_k=3, n_compressed=2).eval()
    x, boxes = torch.randn(1, 7, 4, 16), torch.rand(1, 7, 6)
    m(x, boxes)
    sel = m.last_selection
    assert sel["indices"].shape == (1, 7, 3) and sel["scores"].shape == (1, 7, 7)
    assert (sel["indices"] == torch.arange(7)[:, None]).any(-1).all()  # own part always attended
    # scores are the router's: the top-scoring non-own component is selected
    s = sel["scores"][0].clone()
    s.fill_diagonal_(-float("inf"))
    assert all(int(s[p].argmax()) in sel["indices"][0, p].tolist() for p in range(7))
    assert m.keys_per_query(7, 4) == 3 * 4 + 2 * (7 - 3)


def test_compression_shapes_and_box_prior():
    comp = ComponentCompressor(16, 2)
    x = torch.randn(3, 5, 8, 16)
    pe = torch.randn(3, 5, 16)
    out = comp(x)
    assert out.shape == (3, 5, 2, 16)
    torch.testing.assert_close(comp(x, pe) - out, pe[:, :, None].expand(-1, -1, 2, -1))


def test_unselected_components_still_reach_the_output_only_with_compression():
    """Eval mode (no router gradient): d y[query 0] / d x[unselected part] is non-zero through the
    compressed tokens with MoCA and exactly zero for top-k without compression."""
    torch.manual_seed(0)
    boxes = torch.rand(1, 6, 6)
    for m, reaches in ((MoCAAttention(16, 2, top_k=2, n_compressed=2).eval(), True),
                       (TopKAttention(16, 2, top_k=2).eval(), False)):
        x = torch.randn(1, 6, 4, 16, requires_grad=True)
        y = m(x, boxes)
        far = int((~m.last_selection["mask"][0, 0]).nonzero()[0])
        g = torch.autograd.grad(y[0, 0].sum(), x)[0]
        assert bool(g[0, far].abs().sum() > 0) == reaches


@pytest.mark.parametrize("top_k", [2, 3])  # 3: the padded shape's valid parts are all selected, no compressed key left
def test_fused_backward_matches_autograd_reference(top_k):
    torch.manual_seed(0)
    m = MoCAAttention(16, 2, top_k=top_k, n_compressed=2, gather_budget=1.0).double().train()
    x = torch.randn(2, 5, 4, 16, dtype=torch.float64, requires_grad=True)
    boxes = torch.rand(2, 5, 6, dtype=torch.float64)
    valid = torch.tensor([[1] * 5, [1, 1, 1, 0, 0]], dtype=torch.bool)

    def run():
        y = m(x, boxes, valid)
        return y, torch.autograd.grad((y + y.square()).sum(), [x, *m.parameters()], allow_unused=True)

    y, g = run()
    m.kernel = "reference"
    y_ref, g_ref = run()
    torch.testing.assert_close(y, y_ref, atol=1e-12, rtol=0)
    for a, b in zip(g, g_ref, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, atol=1e-10, rtol=0)
    assert g[[n for n, _ in m.named_parameters()].index("router.to_q.weight") + 1].abs().sum() > 0  # router learns


def test_eval_mode_gradients_are_exact():
    torch.manual_seed(0)
    m = MoCAAttention(8, 2, top_k=2, n_compressed=1).double().eval()
    x = torch.randn(1, 4, 2, 8, dtype=torch.float64, requires_grad=True)
    boxes = torch.rand(1, 4, 6, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda z: m(z, boxes), (x,), fast_mode=True)


def test_local_window_selects_nearest_components():
    m = LocalWindowAttention(8, 2, window=2).eval()
    centres = torch.tensor([0.0, 0.1, 5.0, 5.2, 9.0])
    boxes = torch.zeros(1, 5, 6)
    boxes[0, :, 0] = centres
    m(torch.randn(1, 5, 2, 8), boxes)
    assert m.last_selection["indices"][0].tolist() == [[0, 1], [0, 1], [2, 3], [2, 3], [3, 4]]


def test_build_attention_rejects_unknown_kind_and_bad_heads():
    with pytest.raises(ValueError, match="unknown attention"):
        build_attention("dense", 16, 2)
    with pytest.raises(ValueError, match="divisible"):
        FullAttention(10, 3)
