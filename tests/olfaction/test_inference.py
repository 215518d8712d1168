"""The ONNX export of the predictor's networks and the torch-free prediction path
(olfaction.onnx_export, olfaction.inference, `mixscent predict`)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch
from torch_geometric.nn import global_max_pool

from olfaction.features import ATOM_DIM, BOND_DIM, batch_graph_arrays, graphs_for
from olfaction.inference import OnnxPredictor, onnx_problem
from olfaction.model import segment_max
from olfaction.onnx_export import DistanceGraph, _distance_feeds, max_deviation

ROOT = Path(__file__).resolve().parents[2]
# mixtures of 1 to 6 components (a one-atom molecule, a charged one, rings) not in the tiny model's training set
MIXTURES = [("CCO", "CCCO"), ("c1ccccc1",), ("C", "CC(=O)O", "O=C([O-])CCC(=O)O"), ("CC1=CCC(CC1)C(=C)C",),
            ("CCO", "CCCO", "CC(=O)O", "CCOC(C)=O", "c1ccccc1", "CC(C)=O"), ("N#Cc1ccccc1", "CCS")]


@pytest.fixture(scope="module")
def saved(tiny_predictor, tmp_path_factory):
    model, example = tiny_predictor
    path = model.save_pretrained(tmp_path_factory.mktemp("olf") / "m")
    return model, example, path


def test_graph_arrays_are_pyg_batches_and_ethanol_by_hand():
    mols = ["CCO", "c1ccccc1", "C"]
    a = batch_graph_arrays(mols)
    b = Batch.from_data_list(graphs_for(mols))
    for key, ref in (("atom_x", b.x), ("edge_index", b.edge_index), ("edge_attr", b.edge_attr), ("atom_mol", b.batch)):
        np.testing.assert_array_equal(a[key], ref.numpy(), err_msg=key)
    # ethanol: atoms C, C, O (element one-hot slots 0, 0, 2); bonds C-C, C-O, both directions
    assert a["atom_x"].shape == (3 + 6 + 1, ATOM_DIM) and a["edge_attr"].shape == (4 + 12, BOND_DIM)
    assert a["atom_x"][:3, :3].argmax(1).tolist() == [0, 0, 2]
    assert a["edge_index"][:, :4].T.tolist() == [[0, 1], [1, 0], [1, 2], [2, 1]]
    assert a["edge_index"][:, 4:].min() == 3 and a["atom_mol"].tolist() == [0, 0, 0] + [1] * 6 + [2]


def test_segment_max_is_the_per_segment_maximum_also_when_all_negative():
    x = torch.tensor([[-3.0, 1.0], [-2.0, -5.0], [-7.0, -1.0], [-4.0, -6.0], [2.0, -9.0]])
    index = torch.tensor([0, 0, 1, 1, 2])
    want = torch.tensor([[-2.0, 1.0], [-4.0, -1.0], [2.0, -9.0]])
    assert torch.equal(segment_max(x, index, 3), want)
    assert torch.equal(global_max_pool(x, index), want)
    assert torch.equal(segment_max(x, None), x.max(0, keepdim=True).values)


def test_onnx_export_equals_torch_on_other_sizes(saved):
    """The exported distance network run in onnxruntime on mixtures of sizes the trace did not see
    (random MiniMol-free inputs, dataset one-hot) gives torch's distances and attention."""
    model, _, path = saved
    module = DistanceGraph(model.distance_net, minimol=False).eval()
    blob = (path / "distance_net.onnx").read_bytes()
    for seed, mixes in enumerate((MIXTURES, MIXTURES[2:], MIXTURES[:2], MIXTURES[::-1]), start=10):
        assert max_deviation(blob, module, _distance_feeds(mixes, 0, seed), ["distance", "alpha"]) < 1e-5


def test_onnx_predictor_gives_the_torch_predictor_answers(saved):
    model, (mix_a, mix_b, datasets), path = saved
    light = OnnxPredictor(path)
    a, b = MIXTURES[:3], MIXTURES[3:]
    ds = ["Bushdid", "Snitz 1", "Bushdid"]
    for args in ((mix_a, mix_b, datasets), (a, b, ds)):
        want, got = model.predict_components(*args), light.predict_components(*args)
        assert set(got) == set(want)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], atol=1e-6, err_msg=k)
    np.testing.assert_allclose(light.predict_labels(MIXTURES), model.predict_labels(MIXTURES), atol=1e-6)
    want_att, got_att = model.attention(MIXTURES[4]), light.attention(MIXTURES[4])
    assert list(got_att) == list(want_att)
    np.testing.assert_allclose(list(got_att.values()), list(want_att.values()), atol=1e-6)
    assert light.datasets == model.datasets and light.label_names == model.label_names
    np.testing.assert_array_equal(light.weights, model.weights)


def _run_cli(args: list[str]) -> subprocess.CompletedProcess:
    """`mixscent <args>` in a fresh interpreter; stdout ends with the sorted names of the modules
    the process imported (one line, after the marker)."""
    code = ("import sys\nfrom olfaction.cli import main\nrc = main(sys.argv[1:])\n"
            "print('MODULES', ' '.join(sorted(sys.modules)))\nsys.exit(rc)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300)


def _numbers(out: str) -> list[float]:
    lines = out.split("MODULES")[0].strip().splitlines()
    return [float(lines[0])] + [float(item.split()[1]) for item in lines[1].split(", ")]


def test_cli_predict_without_torch_gives_the_torch_answer(saved):
    model, (mix_a, mix_b, datasets), path = saved
    args = ["predict", "--model", str(path), "--mix1", ";".join(mix_a[0]), "--mix2", ";".join(mix_b[0]),
            "--dataset", datasets[0], "--components"]
    light, heavy = _run_cli(args), _run_cli([*args, "--backend", "torch"])
    assert light.returncode == 0 and heavy.returncode == 0, light.stderr + heavy.stderr
    imported = set(light.stdout.split("MODULES")[1].split())
    assert "onnxruntime" in imported and "olfaction.inference" in imported
    for heavy_module in ("torch", "torch_geometric", "sklearn", "lightning", "mordred", "scipy.optimize", "pandas"):
        assert heavy_module not in imported, heavy_module
    assert "torch" in set(heavy.stdout.split("MODULES")[1].split())
    want = model.predict_components(mix_a[:1], mix_b[:1], datasets[:1])
    want = [want["combined"][0], want["network"][0], want["trees"][0], want["ridge"][0]]
    np.testing.assert_allclose(_numbers(light.stdout), want, atol=5.1e-5)  # printed with 4 decimals
    np.testing.assert_allclose(_numbers(light.stdout), _numbers(heavy.stdout), atol=1.1e-4)
    assert light.stderr == ""


def test_missing_or_stale_export_falls_back_to_torch(saved, tmp_path, capsys):
    import shutil

    from olfaction.cli import main

    model, (mix_a, mix_b, datasets), path = saved
    copy = tmp_path / "m"
    shutil.copytree(path, copy)
    manifest = json.loads((copy / "onnx.json").read_text())
    manifest["weights_id"] = "0" * 32  # an export of another save
    (copy / "onnx.json").write_text(json.dumps(manifest))
    assert "another save" in onnx_problem(copy)
    args = ["predict", "--model", str(copy), "--mix1", ";".join(mix_a[0]), "--mix2", ";".join(mix_b[0]),
            "--dataset", datasets[0]]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert float(out) == pytest.approx(model.predict_components(mix_a[:1], mix_b[:1], datasets[:1])["combined"][0],
                                       abs=5.1e-5)
    assert err.startswith("note: ") and "torch" in err
    (copy / "onnx.json").unlink()
    assert "no ONNX export" in onnx_problem(copy)
    assert main([*args, "--backend", "onnx"]) == 2
    assert capsys.readouterr().err.startswith("error: --backend onnx")


def test_assignment_solver_is_scipys():
    from scipy.optimize import linear_sum_assignment

    from olfaction.set_features import assignment_solver

    rng = np.random.default_rng(0)
    for shape in ((4, 4), (3, 7), (6, 2)):
        cost = rng.uniform(size=shape)
        rows, cols = assignment_solver()(cost)
        want_rows, want_cols = linear_sum_assignment(cost)
        assert cost[rows, cols].sum() == pytest.approx(cost[want_rows, want_cols].sum(), abs=1e-12)
        assert len(set(cols.tolist())) == len(cols) == min(shape)


def test_export_with_minimol_and_dataset_inputs_equals_torch():
    """The optional inputs: MiniMol rows beside the GNN embedding and a dataset one-hot in the head."""
    from dataclasses import asdict

    from olfaction.model import MixScentConfig, MixScentNet, MolEncoderConfig
    from olfaction.onnx_export import TRACE_MIXTURES, _export

    torch.manual_seed(0)
    enc = asdict(MolEncoderConfig(hidden=8, layers=2, emb_dim=8))
    net = MixScentNet(MixScentConfig(in_dim=8 + 5, hidden=8, heads=2, n_datasets=7, mol_encoder=enc)).eval()
    module = DistanceGraph(net, minimol=True).eval()
    assert module.names[-2:] == ["mol_extra", "dataset_onehot"]
    blob = _export(module, _distance_feeds(TRACE_MIXTURES, 5, 0), ["distance", "alpha"])
    for seed, mixes in enumerate((MIXTURES, MIXTURES[1:5]), start=1):
        assert max_deviation(blob, module, _distance_feeds(mixes, 5, seed), ["distance", "alpha"]) < 1e-5


def test_an_export_that_differs_from_torch_is_not_written(tiny_predictor, tmp_path, monkeypatch, capsys):
    from olfaction import onnx_export

    model, _ = tiny_predictor
    monkeypatch.setattr(onnx_export, "TOLERANCE", -1.0)  # every export now "differs"
    path = model.save_pretrained(tmp_path / "m")
    assert "differs from torch" in capsys.readouterr().err
    assert not (path / "onnx.json").exists() and not (path / "distance_net.onnx").exists()
    assert "no ONNX export" in onnx_problem(path)
