"""Model invariants, determinism, training on tiny data, save/load round trip, CLI errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch

from olfaction.data import PairData, Split, validate_mixture
from olfaction.features import graphs_for
from olfaction.mixture_index import predict_distance
from olfaction.model import MixScentConfig, MixScentNet, MolEncoder, MolEncoderConfig, fully_connected_edges
from olfaction.predictor import embed_mixtures, network_distances
from olfaction.train import DistanceTrainConfig, PretrainConfig, fit, pretrain

MOLS = [
    "CCO",
    "CC(=O)O",
    "c1ccccc1",
    "CCCCCC=O",
    "COc1cc(C=O)ccc1O",
    "CC(C)=CCCC(C)=CC=O",
    "OCCc1ccccc1",
    "CCCC(=O)OCC",
]
TINY_ENC = MolEncoderConfig(hidden=16, layers=2, emb_dim=16)


def seeded_encoder(cfg: MolEncoderConfig = TINY_ENC, seed: int = 0) -> MolEncoder:
    """An unpretrained encoder, seeded, in eval mode."""
    torch.manual_seed(seed)
    return MolEncoder(cfg).eval()


def _net(conv="gatv2", readout="attention", n_datasets=0, seed=0):
    torch.manual_seed(seed)
    cfg = MixScentConfig(
        in_dim=16,
        hidden=16,
        heads=2,
        conv=conv,
        readout=readout,
        n_datasets=n_datasets,
        dropout=0.0,
        n_labels=3,
        mol_encoder=TINY_ENC.__dict__,
    )
    return MixScentNet(cfg).eval()


def _embed(net, mixtures):
    z, alpha = embed_mixtures(net, mixtures)
    comp_batch = torch.repeat_interleave(torch.arange(len(mixtures)), torch.tensor([len(m) for m in mixtures]))
    return z, alpha, comp_batch


def test_fully_connected_edges_by_hand():
    e = fully_connected_edges(torch.tensor([0, 0, 1, 1, 1]))
    pairs = set(map(tuple, e.t().tolist()))
    assert pairs == {(0, 1), (1, 0), (2, 3), (2, 4), (3, 2), (3, 4), (4, 2), (4, 3)}


@pytest.mark.parametrize("conv,readout", [("gatv2", "attention"), ("gat", "attention"), ("none", "mean")])
def test_permutation_invariance_and_attention(conv, readout):
    net = _net(conv, readout)
    a = tuple(MOLS[:5])
    shuffled = (MOLS[3], MOLS[0], MOLS[4], MOLS[2], MOLS[1])
    z1, alpha1, _ = _embed(net, [a])
    z2, alpha2, _ = _embed(net, [shuffled])
    torch.testing.assert_close(z1, z2, atol=1e-5, rtol=1e-5)
    assert float(alpha1.sum()) == pytest.approx(1.0, abs=1e-5)
    # attention follows the molecule, not the slot
    w1 = dict(zip(a, alpha1.tolist(), strict=False))
    w2 = dict(zip(shuffled, alpha2.tolist(), strict=False))
    for s in a:
        assert w1[s] == pytest.approx(w2[s], abs=1e-5)
    if readout == "mean":
        assert alpha1.tolist() == pytest.approx([0.2] * 5)


def test_batching_does_not_mix_mixtures():
    net = _net()
    alone, _, _ = _embed(net, [tuple(MOLS[:3])])
    together, _, _ = _embed(net, [tuple(MOLS[:3]), tuple(MOLS[3:])])
    torch.testing.assert_close(alone[0], together[0], atol=1e-5, rtol=1e-5)


def test_distance_symmetric_and_any_size():
    net = _net(n_datasets=7)
    big = tuple(sorted({"C" * n + "O" for n in range(1, 46)}))  # 45 components
    a, b = (MOLS[0],), tuple(MOLS[1:6])
    d_ab = network_distances(net, [a, big], [b, a], ["Bushdid", "Snitz 1"])
    d_ba = network_distances(net, [b, a], [a, big], ["Bushdid", "Snitz 1"])
    np.testing.assert_allclose(d_ab, d_ba, rtol=0, atol=1e-6)
    assert ((d_ab > 0) & (d_ab < 1)).all()


def test_pretraining_deterministic_and_learns():
    targets = np.stack([[len(s), s.count("O"), s.count("c")] for s in MOLS]).astype(np.float32)
    targets = (targets - targets.mean(0)) / targets.std(0)
    cfg = PretrainConfig(epochs=30, lr=5e-3, batch_size=4, heldout_frac=0.0, seed=3)
    m1, r1 = pretrain(MOLS, targets, TINY_ENC, cfg)
    m2, r2 = pretrain(MOLS, targets, TINY_ENC, cfg)
    assert r1 == r2 and r1["n_heldout"] == 0
    g = Batch.from_data_list(graphs_for(MOLS))
    with torch.no_grad():
        torch.testing.assert_close(m1.eval()(g), m2.eval()(g))
        # training fits the training molecules much better than predicting the mean
        mse = float(((m1(g).numpy() - targets) ** 2).mean())
    assert mse < 0.5


def _tiny_pairs():
    mixtures = {
        ("T", str(i)): validate_mixture(m)
        for i, m in enumerate(
            [MOLS[:2], MOLS[2:4], MOLS[4:6], MOLS[6:], MOLS[::2], MOLS[1::2], MOLS[:4], MOLS[4:]]
        )
    }
    keys = list(mixtures)
    rng = np.random.default_rng(0)
    ka, kb, y = [], [], []
    for i in range(len(keys)):
        for j in range(i, len(keys)):
            ka.append(keys[i])
            kb.append(keys[j])
            overlap = len(set(mixtures[keys[i]]) & set(mixtures[keys[j]]))
            y.append(1.0 - overlap / 4.0 + 0.01 * rng.standard_normal())
    return PairData(["T"] * len(y), ka, kb, np.clip(np.array(y, np.float32), 0, 1), mixtures)


def test_fit_distance_selects_on_validation_and_roundtrip(tmp_path):
    pairs = _tiny_pairs()
    n = len(pairs)
    split = Split("tiny", np.arange(0, n - 12), np.arange(n - 12, n - 6), np.arange(n - 6, n))
    torch.manual_seed(0)
    from olfaction.model import MolEncoder

    enc = MolEncoder(TINY_ENC).eval()
    mcfg = MixScentConfig(hidden=16, heads=2, dropout=0.0)
    tcfg = DistanceTrainConfig(epochs=25, lr=5e-3, batch_size=8, patience=25, seed=1)
    model, index, hist = fit(pairs, split, enc, mcfg, tcfg)
    model2, _, hist2 = fit(pairs, split, enc, mcfg, tcfg)
    # best epoch is the argmin of validation RMSE, recorded per epoch (test rows never scored)
    rmses = [h["rmse"] for h in hist["history"]]
    assert hist["best_epoch"] == int(np.argmin(rmses)) and hist == hist2
    ka = [pairs.keys_a[i] for i in range(n)]
    kb = [pairs.keys_b[i] for i in range(n)]
    p1 = predict_distance(model, index, ka, kb)
    np.testing.assert_array_equal(p1, predict_distance(model2, index, ka, kb))
    train_mse = float(np.mean((p1[split.training] - pairs.y[split.training]) ** 2))
    assert train_mse < float(np.var(pairs.y[split.training]))
    # save/load: identical outputs, and on-the-fly encoding agrees with the training path
    model.save_pretrained(tmp_path / "m")
    loaded = MixScentNet.from_pretrained(tmp_path / "m")
    ma = [pairs.mixtures[k] for k in ka]
    mb = [pairs.mixtures[k] for k in kb]
    ds = ["T"] * n
    np.testing.assert_array_equal(network_distances(model, ma, mb, ds), network_distances(loaded, ma, mb, ds))
    np.testing.assert_allclose(network_distances(loaded, ma, mb, ds), p1, atol=1e-5)


def test_corrupt_checkpoint(tmp_path):
    from common.errors import CheckpointError

    _net().save_pretrained(tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").write_bytes(b"\x00" * 10)
    with pytest.raises(CheckpointError):
        MixScentNet.from_pretrained(tmp_path / "m")


def test_cli_errors(tmp_path, capsys):
    from olfaction.cli import main
    from olfaction.predictor import MixturePredictor

    MixturePredictor.tiny_example()[0].save_pretrained(tmp_path / "m")
    ds = ["--dataset", "Bushdid"]
    assert main(["predict", "--model", str(tmp_path / "m"), "--mix1", "CCO;C1CC", "--mix2", "CCO", *ds]) == 2
    err = capsys.readouterr().err
    assert (
        "invalid SMILES 'C1CC'" in err
        and "mixture 1 component 2" in err
        and len(err.strip().splitlines()) == 1
    )
    assert main(["predict", "--model", str(tmp_path / "m"), "--mix1", "CCO;OCC", "--mix2", "CCO", *ds]) == 2
    assert "duplicate component" in capsys.readouterr().err
    assert main(["predict", "--model", str(tmp_path / "m"), "--mix1", ";", "--mix2", "CCO", *ds]) == 2
    assert "empty mixture" in capsys.readouterr().err
    assert main(["predict", "--model", str(tmp_path / "m"), "--mix1", "CCO", "--mix2", "CC(=O)O", *ds]) == 0
    d = float(capsys.readouterr().out.strip())
    assert 0 < d < 1
    assert main(["predict", "--model", str(tmp_path / "nope"), "--mix1", "CCO", "--mix2", "CCO", *ds]) == 2
    assert "no checkpoint" in capsys.readouterr().err


def test_olfactory_white_rows_and_pool_check():
    from common.errors import InputError
    from olfaction.predictor import MixturePredictor
    from olfaction.white import olfactory_white, white_trend

    pred = MixturePredictor.tiny_example()[0]
    rows = olfactory_white(pred, MOLS, n_values=[1, 2, 3, 4], samples=3, seed=0)
    assert [r["n"] for r in rows] == [1, 2, 3, 4]
    assert all(0 < r["mean_distance"] < 1 for r in rows)
    assert rows == olfactory_white(pred, MOLS, n_values=[1, 2, 3, 4], samples=3, seed=0)
    trend = white_trend([{"n": n, "mean_distance": 1.0 / n} for n in range(1, 6)])
    assert trend["falls_with_n"] and trend["spearman_n_vs_distance"] == pytest.approx(-1.0)
    with pytest.raises(InputError, match="too small"):
        olfactory_white(pred, MOLS, n_values=[5], samples=1)


def test_train_distance_with_descriptor_features(tmp_path, monkeypatch):
    """``features="embedding+mordred"``: the mixture level reads embedding ++ cleaned Mordred, and
    the model stays symmetric."""
    from olfaction.model import MolEncoder

    monkeypatch.setenv("MOE_APPS_CACHE", str(tmp_path))
    pairs = _tiny_pairs()
    n = len(pairs)
    split = Split("tiny", np.arange(0, n - 12), np.arange(n - 12, n - 6), np.arange(n - 6, n))
    torch.manual_seed(0)
    enc = MolEncoder(TINY_ENC).eval()
    mcfg = MixScentConfig(hidden=16, heads=2, dropout=0.0)
    tcfg = DistanceTrainConfig(epochs=3, lr=5e-3, batch_size=8, patience=3, seed=1)
    model, index, _ = fit(pairs, split, enc, mcfg, tcfg, features="embedding+mordred")
    assert model.mol_encoder is None and index.x.shape[1] > TINY_ENC.emb_dim + 100
    ka = [pairs.keys_a[i] for i in range(n)]
    kb = [pairs.keys_b[i] for i in range(n)]
    np.testing.assert_allclose(predict_distance(model, index, ka, kb), predict_distance(model, index, kb, ka))


def test_moe_label_head_routes_and_roundtrips(tmp_path):
    """The routed label head: each mixture uses exactly k experts with weights summing to 1, the
    router's aux loss reaches the training loss, and the net saves/loads exactly."""
    torch.manual_seed(0)
    cfg = MixScentConfig(
        in_dim=16,
        hidden=16,
        heads=2,
        n_labels=5,
        label_experts=4,
        label_top_k=2,
        mol_encoder={"hidden": 16, "layers": 2, "emb_dim": 16},
    )
    net = MixScentNet(cfg).eval()
    x = torch.randn(6, 16)
    comp = torch.tensor([0, 1, 2, 3, 4, 5])
    cb = torch.tensor([0, 0, 1, 1, 2, 2])
    logits = net.label_logits(x, comp, cb, 3)
    routing = net.labels.last_routing
    assert logits.shape == (3, 5) and routing.indices.shape == (3, 2)
    torch.testing.assert_close(routing.weights.sum(1), torch.ones(3))
    assert float(net.label_aux_loss().detach()) > 0
    # the output is the shared linear term plus the weighted chosen experts, recomputed by hand
    z, _ = net.embed(x, comp, cb, 3)
    by_hand = net.labels.shared(z)
    for m in range(3):
        for w, e in zip(routing.weights[m], routing.indices[m], strict=True):
            by_hand[m] = by_hand[m] + w * net.labels.moe.experts[int(e)](z[m : m + 1])[0]
    torch.testing.assert_close(logits, by_hand, atol=1e-5, rtol=1e-5)
    net.save_pretrained(tmp_path / "m")
    loaded = MixScentNet.from_pretrained(tmp_path / "m").eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded.label_logits(x, comp, cb, 3), net.label_logits(x, comp, cb, 3), atol=0, rtol=0)
