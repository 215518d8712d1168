"""MoSAIC under scikit-learn's own estimator checks, and the estimator API's declared behaviour."""

import numpy as np
import pytest
import scipy.sparse
import torch
from sklearn.base import clone
from sklearn.utils import get_tags
from sklearn.utils.estimator_checks import parametrize_with_checks

from common.errors import InputError
from streaming.model import MoSAIC


@parametrize_with_checks([MoSAIC(1, 2)])
def test_scikit_learn_estimator_checks(estimator, check):
    """Every check of ``sklearn.utils.estimator_checks`` (none expected to fail)."""
    check(estimator)


def test_tags_declare_nan_as_missing_and_no_sparse_input():
    tags = get_tags(MoSAIC(1, 2))
    assert tags.input_tags.allow_nan and not tags.input_tags.sparse and not tags.target_tags.required
    assert tags.transformer_tags is not None


def test_sparse_input_is_refused_with_one_input_error():
    X = scipy.sparse.random(20, 6, density=0.5, format="csr", random_state=0)
    with pytest.raises(InputError, match="[Ss]parse"):
        MoSAIC(1, 2).fit(X)
    model = MoSAIC(1, 2, pretrain_restarts=1).fit(X.toarray())
    with pytest.raises(InputError, match="[Ss]parse"):
        model.transform(X)


def test_n_is_learned_from_the_data_and_the_old_three_argument_form_is_refused():
    rng = np.random.default_rng(0)
    model = MoSAIC(2, 3, pretrain_restarts=1)
    assert not hasattr(model, "n_features_in_")
    model.fit(rng.standard_normal((40, 9)))
    assert model.n_features_in_ == 9 and model.bases_.shape == (3, 9, 2)
    with pytest.raises(InputError, match="9 features"):
        model.partial_fit(rng.standard_normal((2, 8)))
    with pytest.raises(TypeError):
        MoSAIC(9, 2, 3)  # MoSAIC(n, r, K) of config version <= 5: n is no argument any more


def test_routing_device_changes_no_number():
    """``to(device)`` moves only the routing; on the CPU device the result equals the default's."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((60, 10))
    X[rng.random(X.shape) < 0.3] = np.nan
    a = MoSAIC(2, 3, pretrain_restarts=2, seed=0).fit(X)
    b = clone(a).to(torch.device("cpu")).fit(X)
    np.testing.assert_array_equal(a.bases_, b.bases_)
    np.testing.assert_array_equal(a.route(X), b.route(X))
    assert b.device == torch.device("cpu") and clone(b).device is None  # not a hyper-parameter
