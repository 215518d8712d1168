import math

import pytest
import torch

from moe import Routing
from retrieval.baselines import CombinerCIR
from retrieval.model import LEVEL_FREQUENCIES, GroupedAttentionPool, MoA3CIR, MoA3Config, level_embedding
from retrieval.registry import MODEL_KINDS, build_model, load_model, save_model
from retrieval.render import GROUPS
from retrieval.towers import ImageTower, TextTower, info_nce


def _batch(b=4, ld=3, lt=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "ref_img": torch.randint(0, 256, (b, 3, 32, 32), generator=g).float(),
        "ref_desc": torch.randn(b, ld, 384, generator=g),
        "ref_desc_mask": torch.tensor([[1, 1, 0]] * b).bool(),
        "text": torch.randn(b, lt, 384, generator=g),
        "text_mask": torch.ones(b, lt, dtype=torch.bool),
        "img": torch.randint(0, 256, (b, 3, 32, 32), generator=g).float(),
        "desc": torch.randn(b, ld, 384, generator=g),
        "desc_mask": torch.ones(b, ld, dtype=torch.bool),
    }


def test_tower_shapes():
    assert ImageTower(64)(torch.zeros(2, 3, 32, 32)).shape == (2, 64, 64)
    assert TextTower(64)(torch.zeros(2, 5, 384)).shape == (2, 5, 64)
    pool = GroupedAttentionPool(64, groups=6, heads_per_group=2, d_slot=32)
    slots, attn = pool(torch.randn(2, 10, 64), torch.ones(2, 10, dtype=torch.bool))
    assert slots.shape == (2, 6, 32) and attn.shape == (2, 12, 10)
    assert torch.allclose(attn.sum(-1), torch.ones(2, 12))


def test_masked_tokens_get_no_attention():
    pool = GroupedAttentionPool(16, 2, 2, 8)
    x = torch.randn(1, 4, 16)
    mask = torch.tensor([[True, True, False, False]])
    _, attn = pool(x, mask)
    assert torch.all(attn[..., 2:] == 0)
    x2 = x.clone()
    x2[:, 2:] = 100.0  # changing masked tokens must not change the output
    assert torch.allclose(pool(x, mask)[0], pool(x2, mask)[0])


def test_moa3_query_gallery_shapes_and_routing():
    torch.manual_seed(0)
    m = MoA3CIR(MoA3Config(route_k=3)).eval()
    q, info = m.encode_query(_batch())
    assert q.shape == (4, 256) and torch.allclose(q.norm(dim=-1), torch.ones(4), atol=1e-5)
    assert m.encode_gallery(_batch()).shape == (4, 256)
    r = info["routing"]
    assert isinstance(r, Routing) and r.weights.shape == (4, 3) and r.indices.shape == (4, 3)
    w = info["group_weights"]
    assert w.shape == (4, 8) and ((w > 0).sum(1) == 3).all() and (w <= 1).all()


def test_router_zero_weight_keeps_reference_slots():
    torch.manual_seed(0)
    m = MoA3CIR(MoA3Config(route_k=1)).eval()
    with torch.no_grad():
        m.router.net[-1].weight.zero_()
        m.router.net[-1].bias.copy_(torch.tensor([30.0, -30, -30, -30, -30, -30, -30, -30]))  # all to 'category'
    _, info = m.encode_query(_batch())
    w = info["group_weights"]
    assert torch.allclose(w[:, 0], torch.ones(4)) and torch.all(w[:, 1:] == 0)
    c, r, t = info["composed_slots"], info["ref_slots"], info["text_slots"]
    assert torch.allclose(c[:, 1:6], r[:, 1:6]) and torch.allclose(c[:, 0], t[:, 0], atol=1e-6)


def _constant(linear: torch.nn.Linear, value: float) -> None:
    linear.weight.zero_()
    linear.bias.fill_(value)


def test_level_embedding_similarity_depends_only_on_the_level_difference():
    x, y = torch.tensor([0.0, 1.0, 2.5]), torch.tensor([1.0, 1.0, 0.5])
    cos = torch.nn.functional.cosine_similarity
    w = torch.linspace(*LEVEL_FREQUENCIES, 16)
    expected = torch.cos((x - y)[:, None] * w).mean(-1)  # mean over the bank of cos(w_k (x - y))
    assert torch.allclose(cos(level_embedding(x, 32), level_embedding(y, 32)), expected, atol=1e-5)
    assert torch.allclose(cos(level_embedding(x + 7, 32), level_embedding(y + 7, 32)), expected, atol=1e-5)
    assert level_embedding(x, 9).shape == (3, 9)


def test_relative_path_adds_the_texts_step_to_the_reference_level():
    """Reference level 2 (query readout) plus a routed step -1 embeds level 1: exactly the gallery
    embedding of an item read as level 1; unrouted (saturation) the step is 0."""
    torch.manual_seed(0)
    m = MoA3CIR(MoA3Config(route_k=1)).eval()
    g, other = GROUPS.index("lightness"), GROUPS.index("saturation")
    n, k = m.relative_groups.index(g), len(m.relative_groups)
    with torch.no_grad():
        _constant(m.level[n], 2.0)
        _constant(m.level[k + n], 1.0)
        _constant(m.step[n], -1.0)
        _constant(m.step[1 - n], 5.0)
        m.router.net[-1].weight.zero_()
        m.router.net[-1].bias.copy_(torch.tensor([-30.0] * 8).index_fill(0, torch.tensor(g), 30.0))
    _, info = m.encode_query(_batch())
    assert torch.allclose(info["relative_levels"][:, n], torch.full((4,), 2.0))
    assert torch.allclose(info["relative_steps"][:, n], torch.full((4,), -1.0), atol=1e-5)
    assert torch.allclose(info["relative_steps"][:, 1 - n], torch.zeros(4), atol=1e-5)
    d = m.config.d_slot
    assert torch.allclose(info["composed_slots"][:, g], level_embedding(torch.ones(4), d), atol=1e-5)
    gal = m.encode_gallery(_batch()).reshape(4, 8, d)[:, g]
    assert torch.allclose(gal, torch.nn.functional.normalize(level_embedding(torch.ones(4), d), dim=-1) / 8 ** 0.5,
                          atol=1e-5)
    assert other in m.relative_groups


def test_uniform_routing_and_plain_attention():
    m = MoA3CIR(MoA3Config(routing="uniform")).eval()
    _, info = m.encode_query(_batch())
    assert torch.all(info["group_weights"] == 0.5) and "routing" not in info
    p = MoA3CIR(MoA3Config(attention="plain")).eval()
    q, info = p.encode_query(_batch())
    assert q.shape == (4, 256) and "group_weights" not in info
    with pytest.raises(ValueError):
        MoA3Config(attention="nope")


def test_info_nce_hand_computed():
    q = torch.eye(2)
    g = torch.eye(2)
    scale = torch.tensor(0.0)  # temperature 1
    expected = -math.log(math.e / (math.e + 1))
    assert info_nce(q, g, scale).item() == pytest.approx(expected, rel=1e-6)
    # a duplicate of the positive is masked, a hard negative equal to the positive is masked
    same = torch.tensor([[True, True], [True, True]])
    assert info_nce(q, g, scale, same=same).item() == pytest.approx(0.0, abs=1e-6)
    neg = torch.tensor([[1.0, 0.0]])
    with_neg = info_nce(q, g, scale, extra_neg=neg, neg_same=torch.tensor([[True], [False]]))
    row1 = -math.log(math.e / (math.e + 2))
    assert with_neg.item() == pytest.approx((expected + row1) / 2, rel=1e-6)


@pytest.mark.parametrize("kind", MODEL_KINDS)
def test_save_load_round_trip_identical(kind, tmp_path):
    torch.manual_seed(1)
    m = build_model(kind).eval()
    b = _batch()
    with torch.no_grad():
        q1, _ = m.encode_query(b)
        g1 = m.encode_gallery(b)
    save_model(m, tmp_path / kind)
    m2, _ = load_model(tmp_path / kind)
    with torch.no_grad():
        q2, _ = m2.encode_query(b)
        g2 = m2.encode_gallery(b)
    assert torch.equal(q1, q2) and torch.equal(g1, g2)
    assert type(m2) is (MoA3CIR if kind == "moa3cir" else CombinerCIR)


def test_deterministic_under_seed():
    torch.manual_seed(5)
    a = build_model("moa3cir").eval()
    torch.manual_seed(5)
    b = build_model("moa3cir").eval()
    with torch.no_grad():
        assert torch.equal(a.encode_query(_batch())[0], b.encode_query(_batch())[0])


def test_corrupt_checkpoint(tmp_path):
    from common.errors import CheckpointError

    with pytest.raises(CheckpointError):
        load_model(tmp_path / "missing")
