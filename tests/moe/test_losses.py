import math

import torch

from moe import TopKRouter, load_balance_loss, route_topk, router_z_loss, routing_stats


def test_balance_loss_is_one_for_uniform_routing():
    e, n = 4, 16
    probs = torch.full((n, e), 1.0 / e)
    indices = (torch.arange(n) % e)[:, None]
    assert load_balance_loss(probs, indices).item() == 1.0


def test_balance_loss_is_e_when_everything_goes_to_one_expert():
    e, n = 4, 10
    probs = torch.zeros(n, e)
    probs[:, 0] = 1.0
    indices = torch.zeros(n, 1, dtype=torch.long)
    assert load_balance_loss(probs, indices).item() == e


def test_balance_loss_ignores_masked_tokens():
    probs = torch.tensor([[0.5, 0.5], [1.0, 0.0], [0.5, 0.5]])
    indices = torch.tensor([[0], [0], [1]])
    mask = torch.tensor([True, False, True])
    assert load_balance_loss(probs, indices, mask).item() == 1.0


def test_z_loss_matches_definition():
    logits = torch.tensor([[0.0, 0.0], [1.0, 2.0]])
    expected = (math.log(2) ** 2 + math.log(math.e + math.e**2) ** 2) / 2
    assert abs(router_z_loss(logits).item() - expected) < 1e-6


def test_router_aux_losses_are_scaled_by_coefficients():
    torch.manual_seed(0)
    router = TopKRouter(4, 3, k=1, balance_coef=0.5, z_coef=0.25)
    x = torch.randn(8, 4)
    r = router(x)
    logits = router.gate(x)
    plain = route_topk(logits, 1)
    assert (
        abs(r.aux_losses["balance"].item() - 0.5 * load_balance_loss(plain.probs, plain.indices).item())
        < 1e-6
    )
    assert abs(r.aux_losses["z"].item() - 0.25 * router_z_loss(logits).item()) < 1e-6
    assert abs(r.aux_loss.item() - (r.aux_losses["balance"] + r.aux_losses["z"]).item()) < 1e-6


def test_routing_stats_balanced_and_skewed():
    balanced = route_topk(torch.eye(4).repeat(5, 1) * 10, 1)
    s = routing_stats(balanced)
    assert s["load"] == [0.25] * 4 and abs(s["load_entropy"] - 1.0) < 1e-9 and s["max_over_mean_load"] == 1.0
    skewed = route_topk(torch.tensor([[5.0, 0.0]] * 6), 1)
    s = routing_stats(skewed)
    assert s["load"] == [1.0, 0.0] and s["load_entropy"] == 0.0
