"""The clause router: per-clause max, and a trained router that follows the modification text."""

import pytest
import torch

from retrieval.data import load_synthetic
from retrieval.embed import encode_single_query
from retrieval.features import prepare_features
from retrieval.model import ClauseRouter, MoA3CIR, MoA3Config
from retrieval.render import GROUPS
from retrieval.text import MiniLMEncoder
from retrieval.train import TrainConfig, fit


def test_clause_router_takes_max_over_valid_clauses():
    router = ClauseRouter(d=4, groups=2)
    with torch.no_grad():
        router.net[0].weight.copy_(torch.eye(4))
        router.net[0].bias.zero_()
        router.net[2].weight.copy_(torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0]]))
        router.net[2].bias.zero_()
    # clause 0 names group 0, clause 1 names group 1, clause 2 (masked) would dominate group 1
    tok = torch.tensor([[[3.0, 0, 0, 0], [0, 2.0, 0, 0], [0, 9.0, 0, 0]]])
    logits = router(tok, torch.tensor([[True, True, False]]))
    gelu = torch.nn.functional.gelu
    expected = torch.tensor([[gelu(torch.tensor(3.0)), gelu(torch.tensor(2.0))]])
    assert torch.allclose(logits, expected)


@pytest.fixture(scope="module")
def trained_router_model(tiny_bench):
    """MoA³CIR trained briefly on the tiny benchmark with real (cached) MiniLM clause embeddings."""
    root, _ = tiny_bench
    enc = MiniLMEncoder()  # the app cache ($MOE_APPS_CACHE): texts are embedded once
    torch.manual_seed(0)
    model = MoA3CIR(MoA3Config())
    split = load_synthetic(root, "train", "controlled")
    fit(model, prepare_features(split, enc), TrainConfig(0, 20, batch_size=32, hard_negatives=False))
    return model, split, enc


def test_trained_router_weights_follow_the_text(trained_router_model):
    model, split, enc = trained_router_model
    image = split.images[0]
    w_red = encode_single_query(model, image, "make it red", encoder=enc)[1]
    w_striped = encode_single_query(model, image, "make it striped", encoder=enc)[1]
    w_both = encode_single_query(model, image, "make it red and with stripes", encoder=enc)[1]
    colour, pattern = GROUPS.index("colour"), GROUPS.index("pattern")
    assert w_red.argmax() == colour and w_striped.argmax() == pattern
    assert w_red[colour] > 0.5 > w_red[pattern] and w_striped[pattern] > 0.5 > w_striped[colour]
    assert w_both[colour] > 0.5 and w_both[pattern] > 0.5  # max over clauses keeps both


def test_clauses_split_before_with_so_the_router_sees_each_change():
    from retrieval.captions import split_clauses

    assert split_clauses("make it blue with stripes") == ["make it blue", "with stripes"]
    # the built benchmark's own captions split as before
    assert split_clauses("make it red, with bold stripes and glossy") == ["make it red", "with bold stripes", "glossy"]
    assert split_clauses("  ") == [""] and split_clauses("with dots") == ["with dots"]


def test_the_value_asked_for_and_the_value_replaced_are_separate_clauses():
    """One sentence embedding of "red instead of teal" cannot say which colour is wanted (the
    model returned teal items for it); split, the replaced value is a clause of its own."""
    from retrieval.captions import split_clauses

    assert split_clauses("red instead of teal, make it shirt") == ["red", "instead of teal", "make it shirt"]
    assert split_clauses("is blue rather than red and has dots") == ["is blue", "rather than red", "has dots"]
    assert split_clauses("has stripes instead of dots") == ["has stripes", "instead of dots"]
