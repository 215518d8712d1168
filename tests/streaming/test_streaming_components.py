"""MoSAIC's components: every piece of state is a saved field; the scikit-learn API."""

import copy
import dataclasses
import inspect
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from common.errors import CheckpointError, InputError
from streaming.config import ETA0, PRETRAIN_RESTARTS, SEED, HyperParameters
from streaming.data import StreamConfig, generate_stream
from streaming.model import COMPONENTS, MoSAIC
from streaming.state import StateComponent

DATA = Path(__file__).parent / "data"


def state_equal(a: StateComponent, b: StateComponent) -> list[str]:
    """Names of the fields where two components differ (arrays by value, dtype and shape)."""

    def same(x, y) -> bool:
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            return (isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and x.dtype == y.dtype
                    and np.array_equal(x, y))
        if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
            return type(x) is type(y) and len(x) == len(y) and all(same(u, v) for u, v in zip(x, y, strict=True))
        return type(x) is type(y) and x == y

    return [n for n in a.field_names() if not same(getattr(a, n), getattr(b, n))]



@pytest.fixture(scope="module")
def busy():
    """A model part-way through an abrupt switch: a re-seed done, change buffer, provisional fit,
    Soft-Impute warm start; and the next samples."""
    return MoSAIC.tiny_example()


def test_the_model_holds_no_state_outside_its_components(busy):
    m, _ = busy
    params = set(m.get_params())
    assert set(vars(m)) == {*params, "n_features_in_", *(name + "_" for name in COMPONENTS)}
    for name, cls in COMPONENTS.items():
        comp = getattr(m, name + "_")
        assert type(comp) is cls and isinstance(comp, StateComponent)
        with pytest.raises(AttributeError):  # slots: an undeclared attribute cannot hold state
            comp.not_a_field = 1


def test_the_busy_example_has_every_field_in_use(busy):
    """So the round trip below compares real state, not defaults."""
    m, _ = busy
    assert len(m.change_buffer_) > 0 and m.change_buffer_.reseeds
    pf = m.provisional_fit_
    assert all(v is not None for v in (pf.basis, pf.loadings, pf.noise, pf.si_stamps, pf.si_Z)) and pf.at > 0
    assert m.stream_stats_.pretrained and m.stream_stats_.n_seen == 210 and m.epochs_.epoch == 1


def test_save_load_round_trips_every_field_of_every_component(busy, tmp_path):
    m, (x, mask, epoch) = busy
    tensors, state = m.checkpoint_state()
    for name, comp in m.components().items():
        assert set(state[name]) == set(comp.field_names())  # every field is written
    m.save_pretrained(tmp_path / "ckpt")
    back = MoSAIC.from_pretrained(tmp_path / "ckpt")
    for name, comp in m.components().items():
        assert state_equal(comp, getattr(back, name + "_")) == [], name
    assert back.get_params() == m.get_params() and back.n == m.n
    a = copy.deepcopy(m).process(x, mask, epoch)  # the fixture itself stays as it is
    b = back.process(x, mask, epoch)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_a_new_field_needs_no_change_to_the_save_path():
    @dataclasses.dataclass(slots=True)
    class Grown(StateComponent):
        arr: np.ndarray
        arrays: list
        note: str = "x"
        pair: tuple | None = None

    g = Grown(arr=np.arange(3, dtype=np.int32), arrays=[np.ones(2), np.zeros((2, 2), bool)], note="y", pair=None)
    tensors, state = g.to_state("g")
    h = Grown.__new__(Grown)
    h.load_state(tensors, json.loads(json.dumps(state)), "test")
    assert state_equal(g, h) == []
    h.arr[0] = 7
    assert state_equal(g, h) == ["arr"]


def test_a_checkpoint_missing_a_field_or_a_tensor_is_an_error(busy, tmp_path):
    m, _ = busy
    m.save_pretrained(tmp_path / "ckpt")
    path = tmp_path / "ckpt" / "config.json"
    meta = json.loads(path.read_text())
    del meta["state"]["expert_stats"]["level_slow"]
    path.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="level_slow"):
        MoSAIC.from_pretrained(tmp_path / "ckpt")
    meta["state"]["expert_stats"]["level_slow"] = {"__array__": "expert_stats.nowhere"}
    path.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="missing"):
        MoSAIC.from_pretrained(tmp_path / "ckpt")


def test_a_checkpoint_of_another_state_layout_is_refused():
    """Written by config version 3 (the flat layout, before the components): older than this
    version reads, refused in one line."""
    with pytest.raises(CheckpointError):
        MoSAIC.from_pretrained(DATA / "mosaic_v3_flat")


def test_bad_bases_shape_in_a_checkpoint_is_an_error(busy, tmp_path):
    from safetensors.torch import load_file, save_file

    m, _ = busy
    m.save_pretrained(tmp_path / "ckpt")
    w = tmp_path / "ckpt" / "model.safetensors"
    tensors = load_file(str(w))
    tensors["bank.bases"] = torch.zeros(3, 20, 3, dtype=torch.float64)
    meta = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    save_file(tensors, str(w), metadata={"weights_id": meta["weights_id"]})
    with pytest.raises(CheckpointError, match="bases"):
        MoSAIC.from_pretrained(tmp_path / "ckpt")


# ------------------------------------------------------------------ scikit-learn API


def test_the_constructor_takes_what_users_set_and_the_rest_are_the_config_defaults():
    m = MoSAIC(2, 3)
    assert set(m.get_params()) == {"r", "K", "eta0", "pretrain_restarts", "seed"}
    sig = inspect.signature(MoSAIC.__init__).parameters
    assert (sig["eta0"].default, sig["pretrain_restarts"].default, sig["seed"].default) == (ETA0, PRETRAIN_RESTARTS, SEED)
    assert not set(sig) & set(HyperParameters.__annotations__)  # the fixed ones are class attributes
    with pytest.raises(TypeError):
        MoSAIC(2, 3, detect=False)  # a variant is a subclass (streaming.baselines.KGrouse)


def test_set_params_only_stores_fit_and_partial_fit_validate():
    from sklearn.base import clone

    X = np.random.default_rng(0).standard_normal((40, 10))
    m = MoSAIC(2, 3, seed=0)
    m.set_params(eta0=0.5, seed=3)
    assert m.eta0 == 0.5 and m.seed == 3 and not hasattr(m, "n_features_in_")
    m.set_params(eta0=2.0)  # stored as given (scikit-learn: validation belongs to fit)
    assert m.eta0 == 2.0
    with pytest.raises(InputError, match="step sizes"):
        m.fit(X)
    with pytest.raises(InputError, match="step sizes"):
        m.partial_fit(X)
    assert not hasattr(m, "bank_")  # nothing was learned from a rejected call
    m.set_params(eta0=0.5, pretrain_restarts=1).fit(X)
    assert m.n == 10 and m.eta0 == 0.5 and m.bases_.shape == (3, 10, 2)
    m.set_params(K=4)  # the fitted experts keep their shape until the next fit
    with pytest.raises(InputError, match="call fit"):
        m.partial_fit(X[:2])
    assert m.fit(X).bases_.shape == (4, 10, 2) and m.expert_stats_.level.shape == (4,)
    c = clone(m)
    assert c.get_params() == m.get_params() and c is not m and not hasattr(c, "bank_")


def test_fit_partial_fit_transform_beat_the_mean_on_a_planted_stream():
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    from streaming.evaluate import nrmse_unobserved

    s = generate_stream(StreamConfig(n=30, r=2, K=3, obs_frac=0.5, noise_std=0.01, epochs=1,
                                     samples_per_epoch=300, drift="none", source_per_class=40, seed=3))
    model = MoSAIC(2, 3, pretrain_restarts=2, seed=0)
    with pytest.raises(NotFittedError):
        check_is_fitted(model)
    assert not hasattr(model, "bases_")
    assert model.fit(s.source_values) is model
    check_is_fitted(model)
    assert model.bases_.shape == (3, 30, 2) and model.n_features_in_ == 30
    assert model.n_samples_seen_ == 0
    assert model.partial_fit(s.values[:200]) is model
    assert model.n_samples_seen_ == 200
    before = model.bases_.copy()
    completed = model.transform(s.values[200:])
    np.testing.assert_array_equal(model.bases_.copy(), before)  # transform does not update
    observed = ~np.isnan(s.values[200:])
    np.testing.assert_array_equal(completed[observed], s.values[200:][observed])
    # the mean baseline: every unobserved entry is its column's mean over the observed ones
    col_mean = np.nanmean(s.values[:200], axis=0)
    mean_fill = np.where(observed, s.values[200:], col_mean)
    ours = nrmse_unobserved(completed, s.full[200:], s.values[200:])
    base = nrmse_unobserved(mean_fill, s.full[200:], s.values[200:])
    assert base > 0.9 and ours < 0.1 * base
    # a boolean mask instead of NaNs gives the same completion
    np.testing.assert_array_equal(model.transform(np.nan_to_num(s.values[200:]), mask=observed), completed)


def test_partial_fit_without_pretraining_makes_the_model_fitted():
    m = MoSAIC(2, 2, seed=0)
    m.partial_fit(np.ones((3, 10)))
    assert m.n_samples_seen_ == 3 and m.bases_.shape == (2, 10, 2)
