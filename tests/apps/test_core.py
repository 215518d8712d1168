import pytest

from apps.core.quick import run_quick
from apps.core.routing_demo import ROUTERS, route_batch
from apps.registry import APPS, CORE


@pytest.mark.parametrize("name", ROUTERS)
def test_every_router_routes_the_demo_batch(name):
    routing, stats = route_batch(name, 8, 2, 256, 3.0)
    assert routing.counts.sum() > 0 and 0 <= stats["load_entropy"] <= 1


def test_bias_balancing_is_more_balanced_than_plain_topk():
    _, plain = route_batch("softmax top-k", 8, 2, 2048, 4.0)
    _, biased = route_batch("sigmoid top-k + bias balancing", 8, 2, 2048, 4.0)
    assert biased["load_entropy"] > plain["load_entropy"]


def test_quick_run_trains_moe_on_digits(tmp_path):
    rows = run_quick(tmp_path, None, seed=0, epochs=8)
    acc = {r["method"]: r["value"] for r in rows if r["metric"] == "accuracy"}
    assert all(v > 0.85 for v in acc.values()), acc
    assert (tmp_path / "moe.csv").is_file() and (tmp_path / "moe_expert_load.png").is_file()


def test_registry_entries_are_importable():
    names = [e.name for e in (CORE, *APPS)]
    assert len(names) == len(set(names))
