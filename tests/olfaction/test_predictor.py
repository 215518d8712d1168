"""MixturePredictor: the saved regressors predict as scikit-learn does, a save/load round trip
gives the same outputs, and the weights sum to one."""

import numpy as np
import pytest
from sklearn.ensemble import ExtraTreesRegressor
from sklearn.linear_model import RidgeCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from common.errors import InputError
from olfaction.predictor import MixturePredictor
from olfaction.set_models import forest_arrays, predict_forest_arrays, predict_ridge_arrays, ridge_arrays


def test_forest_and_ridge_arrays_predict_as_sklearn():
    rng = np.random.default_rng(0)
    X, Xq = rng.normal(size=(80, 6)), rng.normal(size=(30, 6))
    y = X[:, 0] - 2 * X[:, 1] ** 2 + rng.normal(scale=0.1, size=80)
    forest = ExtraTreesRegressor(n_estimators=7, min_samples_leaf=2, random_state=0).fit(X, y)
    np.testing.assert_allclose(predict_forest_arrays(forest_arrays(forest), Xq), forest.predict(Xq), rtol=1e-12)
    ridge = make_pipeline(StandardScaler(), RidgeCV(alphas=np.logspace(-2, 3, 12))).fit(X, y)
    np.testing.assert_allclose(predict_ridge_arrays(ridge_arrays(ridge), Xq), ridge.predict(Xq), rtol=1e-10)


@pytest.fixture(scope="module")
def tiny(tiny_predictor):
    return tiny_predictor


def test_round_trip_and_no_refit(tiny, tmp_path):
    model, (mix_a, mix_b, datasets) = tiny
    model.save_pretrained(tmp_path / "m")
    loaded = MixturePredictor.from_pretrained(tmp_path / "m")
    before, after = model.predict_components(mix_a, mix_b, datasets), loaded.predict_components(mix_a, mix_b, datasets)
    for k in before:
        np.testing.assert_allclose(after[k], before[k], rtol=1e-6)
    np.testing.assert_allclose(loaded.predict_labels(mix_a), model.predict_labels(mix_a), rtol=1e-6)
    assert abs(loaded.weights.sum() - 1.0) < 1e-9 and (loaded.weights >= 0).all()
    combined = np.stack([before[c] for c in ("network", "trees", "ridge")], axis=1) @ model.weights
    np.testing.assert_allclose(before["combined"], combined)
    assert not (tmp_path / "m" / "model.pkl").exists() and sorted(p.name for p in (tmp_path / "m").iterdir()) == [
        "config.json", "distance_net.onnx", "label_net.onnx", "model.safetensors", "onnx.json"]


def test_symmetric_and_bad_input(tiny):
    model, (mix_a, mix_b, datasets) = tiny
    np.testing.assert_allclose(model.predict_distance(mix_a, mix_b, datasets),
                               model.predict_distance(mix_b, mix_a, datasets), atol=1e-6)
    with pytest.raises(InputError, match="unknown dataset"):
        model.predict_distance(mix_a, mix_b, ["Nowhere", "Bushdid"])
    with pytest.raises(InputError):
        model.predict_distance(mix_a, mix_b[:1], datasets)


def test_cli_predict_and_labels_fit_nothing(tiny, tmp_path, capsys, monkeypatch):
    """`mixscent predict` / `labels` on a saved model answer from the saved state: every fitting
    entry point raises here, and molecules the model was trained on need no new descriptors."""
    import lightning.pytorch as L
    from sklearn.ensemble import ExtraTreesRegressor, RandomForestRegressor
    from sklearn.linear_model import RidgeCV

    from olfaction import labels, set_models, train
    from olfaction.cli import main
    from olfaction.set_models import SetFeatureRegressor, SetRegressors

    model, (mix_a, mix_b, datasets) = tiny
    model.save_pretrained(tmp_path / "m")
    want = model.predict_components(mix_a[:1], mix_b[:1], datasets[:1])

    def refit(*args, **kwargs):
        raise AssertionError("fitted at prediction time")

    for owner, name in ((MixturePredictor, "fit"), (MixturePredictor, "fit_labels"), (SetRegressors, "fit"),
                        (SetFeatureRegressor, "fit"), (ExtraTreesRegressor, "fit"), (RidgeCV, "fit"),
                        (RandomForestRegressor, "fit"), (L.Trainer, "fit"), (train, "fit"),
                        (labels, "fit_labels"), (set_models, "compute_mordred")):
        monkeypatch.setattr(owner, name, refit)
    args = ["--model", str(tmp_path / "m")]
    assert main(["predict", *args, "--mix1", ";".join(mix_a[0]), "--mix2", ";".join(mix_b[0]),
                 "--dataset", datasets[0], "--components"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert float(lines[0]) == pytest.approx(want["combined"][0], abs=1e-4)
    parts = dict(item.split() for item in lines[1].split(", "))
    for k in ("network", "trees", "ridge"):
        assert float(parts[k]) == pytest.approx(want[k][0], abs=1e-4), k
    assert main(["labels", *args, "--mix", "CCO;CCCO", "--top", "2"]) == 0
    top = [line.split("\t")[0] for line in capsys.readouterr().out.strip().splitlines()]
    assert top == [name for name, _ in model.top_labels(["CCO", "CCCO"], k=2)]
