import numpy as np
import pytest
import torch

from retrieval.augment import (
    AttributeCritic,
    EditProposal,
    RenderEditor,
    mentioned_values,
    self_reflective_augment,
    train_attribute_classifier,
)
from retrieval.data import load_synthetic
from retrieval.render import Attributes, render

SIL = np.zeros((28, 28), np.uint8)
SIL[3:25, 5:23] = 220


class OracleClassifier:
    """Pluggable classifier for the critic: looks up the true attributes of rendered images."""

    def __init__(self):
        self.table = {}

    def register(self, image, attrs):
        self.table[image.tobytes()] = attrs.as_list()

    def predict(self, images):
        return np.array([self.table[im.tobytes()] for im in images])


def _proposal(ref, claimed, actual, text, oracle):
    img = render(SIL, actual)
    oracle.register(img, actual)
    return EditProposal("r", "colour", img, claimed, text, "desc", SIL, actual)


def test_critic_rejects_confounded_edit_and_accepts_clean_one():
    oracle = OracleClassifier()
    ref = Attributes(0, 0, 0, -1, 0, 0)  # red solid matte cotton t-shirt
    ref_img = render(SIL, ref)
    oracle.register(ref_img, ref)
    critic = AttributeCritic(oracle)
    blue = ref.replace(colour=5)
    clean = _proposal(ref, blue, blue, "make it blue", oracle)
    assert critic.check(ref_img, clean, ref).accepted
    confounded = _proposal(ref, blue, blue.replace(pattern=1, scale=0), "make it blue", oracle)
    v = critic.check(ref_img, confounded, ref)
    assert not v.accepted and any("unintended change in pattern" in r for r in v.reasons)
    wrong_text = _proposal(ref, blue, blue, "make it green", oracle)
    v = critic.check(ref_img, wrong_text, ref)
    assert not v.accepted and any(r.startswith("text") for r in v.reasons)
    unchanged = _proposal(ref, blue, ref, "make it blue", oracle)
    assert not critic.check(ref_img, unchanged, ref).accepted


def test_mentioned_values_lexicon():
    found = mentioned_values("make it cobalt, with bold stripes and a shiny look")
    assert found["colour"] == {"blue"} and "glossy" in found["finish"] and "bold" in found["scale"]


class RegisteringEditor(RenderEditor):
    def __init__(self, oracle, **kw):
        super().__init__(**kw)
        self.oracle = oracle

    def _make(self, ref, claimed, *a, **kw):
        p = super()._make(ref, claimed, *a, **kw)
        self.oracle.register(p.image, p.hidden_attrs)
        return p


def test_augment_loop_with_oracle_critic(tiny_bench):
    root, _ = tiny_bench
    split = load_synthetic(root, "train", "controlled")
    oracle = OracleClassifier()
    for img, a in zip(split.images, split.attributes, strict=False):
        oracle.register(img, Attributes(*[int(v) for v in a]))
    sil = np.tile(SIL, (70000, 1, 1))
    out, stats = self_reflective_augment(
        split,
        sil,
        RegisteringEditor(oracle, drift_prob=0.5, text_error_prob=0.2),
        AttributeCritic(oracle),
        n=60,
        max_retries=2,
        seed=0,
    )
    s = stats.as_dict()
    assert s["acceptance_first_try"] < s["acceptance_after_refine"] <= 1.0
    # oracle critic: accepted edits never hide a drifted visible attribute (fabric is invisible)
    assert s["precision_of_accepted"] == 1.0 or all(
        t.changed == ["fabric"] for t in out.triplets[len(split.triplets) :]
    )
    new = out.triplets[len(split.triplets) :]
    assert len(new) == stats.accepted and all(len(t.changed) == 1 for t in new)
    assert all(t.target in out.galleries[t.category] for t in new)


@pytest.mark.slow
def test_trained_classifier_learns_visible_attributes(tiny_bench):
    root, _ = tiny_bench
    tr, va = load_synthetic(root, "train", "controlled"), load_synthetic(root, "val", "controlled")
    clf = train_attribute_classifier(tr.images, tr.attributes, epochs=12)
    acc = (clf.predict(va.images) == va.attributes).mean(0)
    assert acc[1] > 0.6 and acc[2] > 0.6  # colour and pattern (chance 0.125 / 0.25)


def test_critic_save_load_round_trip(tmp_path):
    from common.errors import CheckpointError

    rng = np.random.default_rng(0)
    imgs = np.stack(
        [render(SIL, Attributes(0, c, p, -1 if p == 0 else 0, 0, 0)) for c in range(8) for p in range(2)]
    )
    attrs = np.array([[0, c, p, -1 if p == 0 else 0, 0, 0, 2, 3] for c in range(8) for p in range(2)])
    critic = AttributeCritic(train_attribute_classifier(imgs, attrs, epochs=1, seed=0))
    critic.save(tmp_path / "critic")
    loaded = AttributeCritic.load(tmp_path / "critic")
    probe = rng.integers(0, 256, (5, 32, 32, 3), dtype=np.uint8)
    assert np.array_equal(critic.classifier.predict(probe), loaded.classifier.predict(probe))
    with torch.no_grad():
        x = torch.from_numpy(probe).permute(0, 3, 1, 2).float()
        for a, b in zip(critic.classifier(x), loaded.classifier(x), strict=True):
            assert torch.equal(a, b)
    ref = Attributes(0, 0, 0, -1, 0, 0)
    prop = EditProposal("r", "colour", imgs[2], ref.replace(colour=1), "make it orange", "d", SIL)
    v1, v2 = critic.check(imgs[0], prop, ref), loaded.check(imgs[0], prop, ref)
    assert (v1.accepted, v1.reasons) == (v2.accepted, v2.reasons)
    with pytest.raises(CheckpointError):
        AttributeCritic.load(tmp_path / "missing")
