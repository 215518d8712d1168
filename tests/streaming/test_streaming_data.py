"""Generators and the versioned stream file format."""

import numpy as np
import pytest

from common.errors import DataError, InputError
from streaming.data import FORMAT_VERSION, StreamConfig, generate_stream, load_stream, save_stream
from streaming.linalg import projection_distance


def small(**kw):
    base = dict(n=20, r=3, K=3, obs_frac=0.5, epochs=3, samples_per_epoch=60, source_per_class=20, seed=0)
    base.update(kw)
    return StreamConfig(**base)


def test_shapes_and_orthonormal_bases():
    s = generate_stream(small())
    assert s.values.shape == (180, 20) and s.full.shape == (180, 20)
    assert s.bases.shape == (3, 3, 20, 3)
    for U in s.bases.reshape(-1, 20, 3):
        np.testing.assert_allclose(U.T @ U, np.eye(3), atol=1e-10)
    observed = ~np.isnan(s.values)
    np.testing.assert_array_equal(s.values[observed], s.full[observed])
    assert 0.4 < observed.mean() < 0.6
    assert s.drift_points() == [60, 120]


def test_rotation_moves_every_principal_angle_by_theta():
    theta = 0.2
    s = generate_stream(small(drift="rotation", angle_rad=theta))
    for k in range(3):
        # equal ranks: normalised projection distance = RMS sine of the principal angles
        assert projection_distance(s.bases[0, k], s.bases[1, k]) == pytest.approx(np.sin(theta), abs=1e-9)
        cosines = np.linalg.svd(s.bases[0, k].T @ s.bases[2, k], compute_uv=False)
        np.testing.assert_allclose(cosines, np.cos(2 * theta), atol=1e-9)


def test_abrupt_replaces_exactly_n_replace_subspaces():
    s = generate_stream(small(drift="abrupt", n_replace=1, K=4))
    for e in (1, 2):
        changed = [k for k in range(4) if projection_distance(s.bases[e - 1, k], s.bases[e, k]) > 1e-8]
        assert len(changed) == 1


def test_noise_free_samples_lie_in_their_subspace():
    s = generate_stream(small(noise_std=0.0))
    U = s.bases[s.epoch, s.labels]  # (T, n, r)
    proj = np.einsum("tnr,tmr,tm->tn", U, U, s.full)
    np.testing.assert_allclose(proj, s.full, atol=1e-9)


def test_file_round_trip(tmp_path):
    s = generate_stream(small())
    path = save_stream(tmp_path / "s.npz", s)
    t = load_stream(path)
    for key in ("values", "labels", "epoch", "bases", "full", "source_values", "source_labels"):
        np.testing.assert_array_equal(getattr(t, key), getattr(s, key))


def test_minimal_file_with_values_only(tmp_path):
    values = np.array([[1.0, np.nan, 2.0], [np.nan, 3.0, 4.0]])
    np.savez(tmp_path / "m.npz", format_version=FORMAT_VERSION, values=values)
    t = load_stream(tmp_path / "m.npz")
    assert t.labels is None and t.values.shape == (2, 3)


@pytest.mark.parametrize("case", ["version", "garbage", "missing", "inf", "empty_row", "no_values"])
def test_bad_files_raise_data_error(tmp_path, case):
    path = tmp_path / "bad.npz"
    values = np.array([[1.0, np.nan, 2.0], [np.nan, 3.0, 4.0]])
    if case == "version":
        np.savez(path, format_version=99, values=values)
    elif case == "garbage":
        path.write_bytes(b"not a zip file")
    elif case == "inf":
        values[0, 0] = np.inf
        np.savez(path, format_version=FORMAT_VERSION, values=values)
    elif case == "empty_row":
        values[1] = np.nan
        np.savez(path, format_version=FORMAT_VERSION, values=values)
    elif case == "no_values":
        np.savez(path, format_version=FORMAT_VERSION, other=values)
    with pytest.raises(DataError):
        load_stream(path)


@pytest.mark.parametrize("kw", [dict(r=20), dict(K=0), dict(obs_frac=0.0), dict(drift="spiral")])
def test_bad_config(kw):
    with pytest.raises(InputError):
        generate_stream(small(**kw))


def test_deterministic_under_seed():
    a, b = generate_stream(small(seed=3)), generate_stream(small(seed=3))
    np.testing.assert_array_equal(a.values, b.values)
