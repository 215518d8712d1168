import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from moe import TopKRouter, expert_choice, route_by_score, route_topk, topk_select


def test_topk_picks_largest_logits_and_normalises():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0], [0.0, 0.0, 5.0, 4.0]])
    r = route_topk(logits, 2)
    assert r.indices.tolist() == [[1, 2], [2, 3]]
    p = torch.softmax(logits, -1)
    expected = torch.stack([p[0, [1, 2]] / p[0, [1, 2]].sum(), p[1, [2, 3]] / p[1, [2, 3]].sum()])
    torch.testing.assert_close(r.weights, expected)
    assert r.counts.tolist() == [0, 1, 2, 1]


def test_bias_changes_selection_not_weights():
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    plain = route_topk(logits, 1, activation="sigmoid", normalize=False)
    biased = route_topk(logits, 1, activation="sigmoid", normalize=False, bias=torch.tensor([0.0, 0.0, 1.0]))
    assert plain.indices.item() == 0 and biased.indices.item() == 2
    # The weight is the unbiased sigmoid of the chosen expert's logit.
    assert biased.weights.item() == pytest.approx(torch.sigmoid(torch.tensor(0.0)).item())


def test_bias_balancing_evens_skewed_load():
    torch.manual_seed(0)
    x = torch.randn(2000, 8)
    x[:, -1] = 1.0
    router = TopKRouter(8, 4, k=1, activation="sigmoid", bias_update_rate=0.02)
    with torch.no_grad():
        router.gate.weight[:, -1] = torch.tensor([3.0, 1.0, 0.0, 0.0])
        before = router(x).counts.float()
        for _ in range(200):
            router.update_bias(router(x))
        after = router(x).counts.float()
    assert before.max() / before.mean() > 2.0
    assert after.max() / after.mean() < 1.3


def test_mask_excludes_tokens_from_counts_and_weights():
    logits = torch.randn(5, 3)
    mask = torch.tensor([True, False, True, True, False])
    r = route_topk(logits, 2, mask=mask)
    assert int(r.counts.sum()) == 3 * 2
    assert torch.all(r.weights[~mask] == 0)
    unmasked = route_topk(logits[mask], 2)
    torch.testing.assert_close(r.weights[mask], unmasked.weights)


def test_route_by_score_lowest_residual_and_ties():
    scores = torch.tensor([[0.5, 0.1, 0.9], [0.2, 0.2, 0.3], [3.0, 2.0, 1.0]])
    r = route_by_score(scores)
    assert r.indices.squeeze(1).tolist() == [1, 0, 2]
    assert torch.all(r.weights == 1)
    assert r.counts.tolist() == [1, 1, 1]
    assert route_by_score(scores, lower_is_better=False).indices.squeeze(1).tolist() == [2, 2, 0]


def test_expert_choice_each_expert_takes_capacity_tokens():
    torch.manual_seed(1)
    logits = torch.randn(10, 4)
    r = expert_choice(logits, capacity=3)
    assert r.counts.tolist() == [3, 3, 3, 3]
    probs = torch.softmax(logits, -1)
    for e in range(4):
        chosen = set((r.weights[:, e] > 0).nonzero().squeeze(1).tolist())
        assert chosen == set(torch.topk(probs[:, e], 3).indices.tolist())


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 12), st.integers(0, 10_000))
def test_topk_select_forced_and_by_score(k, extra, seed):
    g = k + extra
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(3, g, generator=gen)
    own = torch.zeros(3, g, dtype=torch.bool)
    own[torch.arange(3), torch.tensor([0, g // 2, g - 1])] = True
    idx, mask = topk_select(scores, k, always=own)
    assert idx.shape == (3, k) and mask.sum(-1).tolist() == [k] * 3
    for row in range(3):
        assert own[row][mask[row]].sum() == 1  # own group always in
        rest = scores[row].clone()
        rest[own[row]] = float("inf")
        assert set(torch.topk(rest, k).indices.tolist()) == set(idx[row].tolist())


def test_topk_select_ties_go_to_lower_index():
    idx, _ = topk_select(torch.zeros(5), 2)
    assert idx.tolist() == [0, 1]


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: route_topk(torch.randn(4, 3), 4), "k must be in"),
        (lambda: route_topk(torch.randn(4, 3), 0), "k must be in"),
        (lambda: route_topk(torch.randn(4), 1), "shape"),
        (lambda: route_topk(torch.tensor([[0.0, float("nan")]]), 1), "NaN"),
        (lambda: route_by_score(torch.tensor([[float("inf"), 0.0]])), "NaN or inf"),
        (lambda: route_topk(torch.randn(4, 3), 1, activation="relu"), "activation"),
        (lambda: route_topk(torch.randn(4, 3), 1, mask=torch.ones(3, dtype=torch.bool)), "mask"),
        (lambda: topk_select(torch.randn(2, 3), 4), "k must be in"),
        (lambda: TopKRouter(8, 4, k=5), "k must be in"),
        (lambda: TopKRouter(8, 4)(torch.randn(3, 7)), "shape"),
        (lambda: expert_choice(torch.randn(4, 2), 5), "capacity"),
    ],
)
def test_bad_arguments_raise_clear_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_router_is_deterministic_under_a_seed():
    def run():
        torch.manual_seed(3)
        router = TopKRouter(6, 5, k=2, noisy=True)
        router.train()
        x = torch.randn(32, 6)
        return router(x)

    a, b = run(), run()
    assert torch.equal(a.indices, b.indices) and torch.equal(a.weights, b.weights)


def test_noise_only_in_training_mode():
    torch.manual_seed(0)
    router = TopKRouter(6, 5, k=2, noisy=True).eval()
    x = torch.randn(16, 6)
    torch.testing.assert_close(router(x).weights, router(x).weights)
