"""Featurisation, mixture validation, splits and data-file errors (tiny data)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from common.errors import DataError, InputError
from olfaction.data import (
    DATASETS,
    dataset_one_hot,
    load_pairs,
    load_split,
    parse_mixture_text,
    resolve_mixture,
    strict_molecule_split,
    validate_mixture,
)
from olfaction.features import (
    ATOM_DIM,
    BOND_DIM,
    DescriptorScaler,
    canonical_smiles,
    compute_mordred,
    load_mordred_cache,
    mol_graph,
)
from olfaction.molecules import molecule_features

DATA = Path(os.environ.get("MOE_APPS_DATA", Path(__file__).resolve().parents[3] / "shared" / "data"))
needs_data = pytest.mark.skipif(
    not (DATA / "olfaction" / "mixture_pairs.csv").is_file(), reason="shared data absent"
)


def test_canonical_smiles_equivalent_forms():
    assert canonical_smiles("OCC") == canonical_smiles("CCO") == "CCO"


def test_invalid_smiles_named_with_position():
    with pytest.raises(InputError, match=r"'C1CC'.*component 2"):
        validate_mixture(["CCO", "C1CC"], where="mixture X")


def test_empty_and_duplicate_mixture():
    with pytest.raises(InputError, match="empty mixture"):
        parse_mixture_text(" ; ")
    with pytest.raises(InputError, match="duplicate component 'OCC'.*positions 1 and 3"):
        validate_mixture(["CCO", "CC(=O)O", "OCC"])


def test_mixture_is_a_set():
    assert validate_mixture(["c1ccccc1", "CCO"]) == validate_mixture(["CCO", "c1ccccc1"])


def test_mol_graph_ethanol_by_hand():
    g = mol_graph("CCO")
    assert g.x.shape == (3, ATOM_DIM)
    assert g.edge_index.shape == (2, 4)  # 2 bonds, both directions
    assert g.edge_attr.shape == (4, BOND_DIM)
    # element one-hot: C, C, O in canonical order
    assert g.x[:, 0].tolist() == [1.0, 1.0, 0.0] and g.x[2, 2] == 1.0
    # all single, non-aromatic bonds
    assert g.edge_attr[:, 0].tolist() == [1.0] * 4


def test_descriptor_scaler_drops_constant_and_nan_columns():
    vals = np.array(
        [[1.0, 5.0, np.nan, 0.0], [2.0, 5.0, np.nan, 1.0], [3.0, 5.0, 1.0, 2.0], [4.0, 5.0, np.nan, np.nan]]
    )
    sc = DescriptorScaler.fit(vals, ["a", "const", "nan", "d"], max_nan=0.3)
    assert sc.columns == ["a", "d"]
    out = sc.transform(vals)
    assert out.shape == (4, 2) and np.isfinite(out).all()
    # median of column a is 2.5, IQR 1.5
    assert out[0, 0] == pytest.approx((1 - 2.5) / 1.5)
    rt = DescriptorScaler.from_dict(sc.to_dict())
    np.testing.assert_allclose(rt.transform(vals), out)


def test_mordred_cache_roundtrip_and_corruption(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MOE_APPS_CACHE", str(tmp_path))
    path = tmp_path / "m.npz"
    first = compute_mordred(["CCO", "c1ccccc1"], path=path, nproc=1, progress=False)
    assert set(first) == {"CCO", "c1ccccc1"}
    smi, vals, cols = load_mordred_cache(path)
    assert smi == ["CCO", "c1ccccc1"] and vals.shape == (2, len(cols)) and len(cols) > 1000
    # nHeavyAtom is an exact count: 3 for ethanol, 6 for benzene
    j = cols.index("nHeavyAtom")
    assert vals[:, j].tolist() == [3.0, 6.0]
    # corrupt the cache: it must be detected and rebuilt, not trusted
    path.write_bytes(b"garbage")
    again = compute_mordred(["CCO"], path=path, nproc=1, progress=False)
    assert "unusable" in capsys.readouterr().err
    np.testing.assert_array_equal(np.nan_to_num(again["CCO"]), np.nan_to_num(first["CCO"]))


def _write_split(tmp_path, **obj):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"identifier": "t", **obj}))
    return p


def test_split_loading_and_validation(tmp_path):
    s = load_split(_write_split(tmp_path, training=[0, 1, 2], validation=[3], testing=[4, 5]), n_rows=6)
    assert s.training.tolist() == [0, 1, 2] and s.testing.tolist() == [4, 5]
    with pytest.raises(DataError, match="index 9 out of range"):
        load_split(_write_split(tmp_path, training=[0, 9], validation=[3], testing=[4]), n_rows=6)
    with pytest.raises(DataError, match="both training and testing"):
        load_split(_write_split(tmp_path, training=[0, 1], validation=[3], testing=[1]), n_rows=6)
    with pytest.raises(DataError, match="integer"):
        load_split(_write_split(tmp_path, training=[0, "1"], validation=[3], testing=[4]), n_rows=6)
    with pytest.raises(DataError, match="lacks key 'validation'"):
        load_split(_write_split(tmp_path, training=[0], testing=[4]), n_rows=6)
    with pytest.raises(DataError, match="not found"):
        load_split(tmp_path / "missing.json", n_rows=6)


@needs_data
def test_pairs_and_unknown_label():
    pairs = load_pairs(DATA)
    assert len(pairs) == 865 and int(pairs.self_pair.sum()) == 61
    with pytest.raises(InputError, match="unknown mixture label '9999'"):
        resolve_mixture(pairs.mixtures, "Bushdid", 9999)
    assert resolve_mixture(pairs.mixtures, "Bushdid", "1.0") == pairs.mixtures[("Bushdid", "1")]


@needs_data
def test_corrupt_or_missing_data_file(tmp_path):
    for name in ("mixture_definitions.csv", "mixture_pairs.csv"):
        (tmp_path / "olfaction").mkdir(exist_ok=True)
        shutil.copy(DATA / "olfaction" / name, tmp_path / "olfaction" / name)
    with open(tmp_path / "olfaction" / "mixture_pairs.csv", "a") as fh:
        fh.write("Bushdid,1.0,2.0,0.5\n")
    with pytest.raises(DataError, match="checksum mismatch"):
        load_pairs(tmp_path)
    (tmp_path / "olfaction" / "mixture_definitions.csv").unlink()
    with pytest.raises(DataError, match="missing data file"):
        load_pairs(tmp_path)


@needs_data
def test_shared_split_files_load():
    from olfaction.data import split_path

    pairs = load_pairs(DATA)
    for name in ("random_cv0", "lso_molecules0"):
        s = load_split(split_path(DATA, name), len(pairs))
        assert len(s.training) + len(s.validation) + len(s.testing) == len(pairs)


@needs_data
def test_strict_split_has_no_test_molecule_in_training():
    pairs = load_pairs(DATA)
    s = strict_molecule_split(pairs, seed=1)
    held = {m for group in s.removed_smiles for m in group}
    assert held and len(s.testing) > 50
    train_mols = pairs.molecules(np.concatenate([s.training, s.validation]))
    assert not (held & train_mols)
    for i in s.testing:  # every test pair contains a held-out molecule
        assert held & (set(pairs.mixtures[pairs.keys_a[i]]) | set(pairs.mixtures[pairs.keys_b[i]]))


@needs_data
def test_cli_eval_rejects_bad_split(tmp_path, capsys):
    from olfaction.cli import main

    bad = _write_split(tmp_path, training=[0, 1], validation=[2], testing=[5000])
    assert main(["eval", "--split", str(bad), "--data-dir", str(DATA)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "index 5000 out of range [0, 865)" in err
    out = tmp_path / "model"
    assert main(["train", "--split", "random_cv0", "--data-dir", str(DATA)]) == 2
    assert "needs --out" in capsys.readouterr().err and not out.exists()


@pytest.mark.slow  # trains on the real data; tests/olfaction/test_predictor.py covers predict / labels fast
@needs_data
def test_cli_train_eval_predict_labels(tmp_path, capsys):
    """`mixscent train --out` writes one loadable MixturePredictor directory; `eval --model`
    reports the combined and per-component test metrics; `predict` answers from the saved model
    for a DREAM-format CSV (symmetric) and two SMILES mixtures; `labels` lists GS-LF labels; and
    the one-line errors."""
    from olfaction.cli import main

    from .test_model import seeded_encoder

    enc = seeded_encoder()
    enc.save_pretrained(tmp_path / "enc")
    model = tmp_path / "model"
    common = ["--split", "random_cv0", "--data-dir", str(DATA)]
    train = ["train", *common, "--encoder", str(tmp_path / "enc"), "--epochs", "1", "--label-epochs", "1"]
    assert main([*train, "--out", str(model)]) == 0
    assert sorted(p.name for p in model.iterdir()) == ["config.json", "model.safetensors"]
    out = tmp_path / "metrics.json"
    assert main(["eval", *common, "--model", str(model), "--out", str(out)]) == 0
    metrics = json.loads(out.read_text())
    for key in ("all_pearson", "network/all_pearson", "trees/noself_rmse", "ridge/all_rmse", "weights"):
        assert key in metrics, key
    assert abs(sum(metrics["weights"].values()) - 1.0) < 1e-9
    capsys.readouterr()

    csv_in = tmp_path / "pairs.csv"
    csv_in.write_text("Dataset,Mixture_1,Mixture_2\nBushdid,1,2\nBushdid,2,1\n")
    pred = tmp_path / "pred.csv"
    base = ["--model", str(model), "--data-dir", str(DATA)]
    assert main(["predict", "--csv", str(csv_in), "--out", str(pred), *base]) == 0
    lines = pred.read_text().splitlines()
    assert lines[0] == "Dataset,Mixture_1,Mixture_2,Predicted_Experimental_Values"
    p12, p21 = (float(line.split(",")[-1]) for line in lines[1:])
    assert abs(p12 - p21) < 1e-6 and 0.0 < p12 < 1.0
    assert main(["predict", "--csv", str(csv_in), "--out", str(pred), *base]) == 2  # no --overwrite
    assert "exists" in capsys.readouterr().err
    mixes = ["--mix1", "CCO;CC(=O)O", "--mix2", "c1ccccc1"]
    assert main(["predict", *mixes, "--dataset", "Snitz 1", *base]) == 0
    assert 0.0 < float(capsys.readouterr().out.strip()) < 1.0
    assert main(["predict", *mixes, *base]) == 2
    assert "needs --mix1, --mix2 and --dataset" in capsys.readouterr().err
    assert main(["predict", *mixes, "--dataset", "Nope", *base]) == 2
    assert "unknown dataset 'Nope'" in capsys.readouterr().err
    assert main(["labels", "--model", str(model), "--mix", "CCO", "--top", "3"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 3


def test_dataset_one_hot_one_rule_unknown_dataset_is_an_error():
    np.testing.assert_array_equal(dataset_one_hot(["b", "a"], ["a", "b"]), [[0, 1], [1, 0]])
    default = dataset_one_hot(["Snitz 1", "Bushdid"])
    assert default.dtype == np.float32 and default.shape == (2, len(DATASETS))
    assert default[0, DATASETS.index("Snitz 1")] == 1 and default[1, DATASETS.index("Bushdid")] == 1
    assert default.sum() == 2
    assert dataset_one_hot([]).shape == (0, len(DATASETS))
    for datasets, vocabulary in ((["c"], ["a", "b"]), ([""], DATASETS), (["Nowhere"], DATASETS)):
        with pytest.raises(InputError, match="unknown dataset"):
            dataset_one_hot(datasets, vocabulary)


def test_molecule_features_rejects_unknown_kind():
    with pytest.raises(InputError, match="unknown molecule feature kind 'fingerprint'"):
        molecule_features(["CCO"], "fingerprint")
    with pytest.raises(InputError, match="needs a pretrained encoder"):
        molecule_features(["CCO"], "embedding")
