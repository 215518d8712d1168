"""Bad input to ``mixscent``, each case time-bounded: counts that parse but cannot run are refused
before any work (one ``error:`` line, nothing written), mixtures over the component limit are
refused, the documented input layouts (pairs CSV, mixture text, split JSON) name the file, the
row or entry and what was expected, long commands stop on SIGINT / SIGTERM with 130 / 143 and no
temporary file, and the demo tab answers 8 concurrent requests correctly."""

from __future__ import annotations

import csv
import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from common.errors import InputError
from olfaction.cli import main
from tests.bad_input import assert_refused, assert_stops_on_signal

DATA = Path(os.environ.get("MOE_APPS_DATA", Path(__file__).resolve().parents[3] / "shared" / "data"))
needs_data = pytest.mark.skipif(not (DATA / "olfaction" / "mixture_pairs.csv").is_file(),
                                reason="shared data absent")
BIG = "1000000000000"


@pytest.fixture(scope="module")
def tiny_dir(tiny_predictor, tmp_path_factory):
    """The tiny predictor (set regressors of two datasets: Bushdid, Snitz 1) saved once."""
    path = tmp_path_factory.mktemp("olf_bad") / "model"
    tiny_predictor[0].save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def net_dir(tmp_path_factory):
    """A tiny network-only predictor (no set regressors, so no Mordred descriptors are needed):
    every real mixture can be predicted in milliseconds."""
    import torch

    from olfaction.data import PairData, Split
    from olfaction.model import DistanceTrainConfig, MixScentConfig, MolEncoder, MolEncoderConfig
    from olfaction.predictor import MixturePredictor

    mols = ["CCO", "CCCO", "CC(=O)O", "CCOC(C)=O", "c1ccccc1", "CC(C)=O"]
    mixtures = {("D", i): tuple(sorted({mols[i], mols[(i + 2) % 6]})) for i in range(6)}
    keys = list(mixtures)
    pairs = PairData(["Bushdid"] * 6, keys, keys[1:] + keys[:1], np.linspace(0.2, 0.8, 6).astype(np.float32),
                     mixtures)
    torch.manual_seed(0)
    encoder = MolEncoder(MolEncoderConfig(hidden=8, layers=1, emb_dim=8)).eval()
    model = MixturePredictor(MixScentConfig(hidden=8, heads=2), DistanceTrainConfig(epochs=1))
    model.fit(pairs, Split("t", np.arange(4), np.arange(4, 6), np.arange(0)), encoder, set_regressors=False)
    path = tmp_path_factory.mktemp("olf_net") / "model"
    model.save_pretrained(path)
    return path


def _csv(path: Path, rows: list[list[str]], header=("Dataset", "Mixture_1", "Mixture_2")) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        if header:
            w.writerow(header)
        w.writerows(rows)
    return path


def _refused(argv, root, match, timeout_s=60.0):
    return assert_refused(main, [str(a) for a in argv], root, match=match, timeout_s=timeout_s)


# ----------------------------------------------------------------------------- sizes


@pytest.mark.parametrize("argv, match", [
    (["white", "--model", "M", "--max-n", BIG], "in [1, 100]"),
    (["white", "--model", "M", "--samples", BIG], "--samples 1000000000000 is over the maximum of 10000"),
    (["train", "--out", "OUT", "--epochs", BIG], "--epochs 1000000000000 is over the maximum of 2000"),
    (["eval", "--label-epochs", BIG], "--label-epochs 1000000000000 is over the maximum"),
    (["pretrain", "--epochs", BIG, "--encoder", "OUT"], "pass --force"),
    (["bench", "--trees", BIG, "--out", "OUT/b.json"], "--trees 1000000000000 is over the maximum of 5000"),
    (["bench", "--folds", BIG, "--out", "OUT/b.json"], "in [1, 5]"),
    (["featurize", "--nproc", BIG], "in [1, 64]"),
])
def test_absurd_counts_are_refused_before_any_work(argv, match, tmp_path):
    argv = [str(tmp_path / a) if a in ("M", "OUT") else a.replace("OUT", str(tmp_path)) for a in argv]
    line = _refused(argv, tmp_path, match, timeout_s=30)
    assert BIG in line or "[1," in line


def test_white_sizes_are_checked_without_iterating_them():
    from olfaction.white import check_white_sizes, olfactory_white

    start = time.monotonic()
    with pytest.raises(InputError, match="too small for two disjoint 999999999999-component"):
        olfactory_white(None, [f"C{'C' * i}" for i in range(10)], range(1, 10**12))
    with pytest.raises(InputError, match=r"at most 101"):
        check_white_sizes(range(1, 200), 203)
    check_white_sizes(range(1, 102), 203)
    assert time.monotonic() - start < 5


def test_mixture_over_the_component_limit_is_refused(tiny_predictor, tiny_dir, tmp_path):
    from olfaction.data import MAX_COMPONENTS

    model, _ = tiny_predictor
    huge = [f"C{'C' * i}O" for i in range(10_000)]
    start = time.monotonic()
    with pytest.raises(InputError, match=f"10000 components; at most {MAX_COMPONENTS}"):
        model.predict_distance([huge], [["CCO"]], ["Bushdid"])
    with pytest.raises(InputError, match="at most 100"):
        model.predict_labels([huge])
    assert time.monotonic() - start < 5  # refused before any SMILES is parsed
    text = ";".join(huge[:101])
    _refused(["labels", "--model", tiny_dir, "--mix", text], tmp_path, "101 components; at most 100")
    _refused(["predict", "--model", tiny_dir, "--mix1", ";".join(huge), "--mix2", "CCO", "--dataset", "Bushdid"],
             tmp_path, "10000 components")


def test_mixture_text_with_a_nul_byte_or_an_unknown_dataset(tiny_dir, tmp_path):
    _refused(["labels", "--model", tiny_dir, "--mix", "CCO;C\x00C"], tmp_path, "NUL byte")
    line = _refused(["labels", "--model", tiny_dir, "--mix", "CCO;" + "C" * 1_000_000], tmp_path,
                    "has 1000000 characters; at most 1000")
    assert len(line) < 300  # the message quotes the start of the SMILES, not all of it
    _refused(["predict", "--model", tiny_dir, "--mix1", "CCO", "--mix2", "CC(=O)O", "--dataset", "Nowhere"],
             tmp_path, "unknown dataset 'Nowhere'")


# ----------------------------------------------------------------------------- pairs CSV


@pytest.mark.parametrize("content, match", [
    (b"Dataset,Mixture_1,Mixture_2\nBushdid,1,\xff\xfe\n", "is not UTF-8 text"),
    (b"Dataset,Mixture_1\nBushdid,1\n", "missing ['Mixture_2']"),
    (b"Dataset,Mixture_1,Mixture_2\nBushdid,1,2\nBushdid,,2\n", "line 3: no value for Mixture_1"),
    (b"Dataset,Mixture_1,Mixture_2\nBushdid,1,2,7\n", "line 2: 4 fields, the header has 3"),
    (b"Dataset,Mixture_1,Mixture_2\n", "has a header but no rows"),
    (b"", "is empty"),
    (b"Dataset,Mixture_1,Mixture_2\nBushdid,1," + b"9" * 200_000 + b"\n", "malformed CSV"),
])
def test_pairs_csv_layout_errors_name_file_and_line(content, match, tiny_dir, tmp_path):
    path = tmp_path / "pairs.csv"
    path.write_bytes(content)
    line = _refused(["predict", "--model", tiny_dir, "--csv", path], tmp_path, match)
    assert str(path) in line


@needs_data
def test_pairs_csv_unknown_label_or_dataset_is_named(tiny_dir, tmp_path):
    path = _csv(tmp_path / "p.csv", [["Bushdid", "1", "2"], ["Bushdid", "1", "../../etc/passwd"]])
    _refused(["predict", "--model", tiny_dir, "--csv", path, "--data-dir", DATA], tmp_path,
             "line 3: unknown mixture label '../../etc/passwd' in dataset 'Bushdid'")
    path = _csv(tmp_path / "q.csv", [["Bushdid", "1", "2"], ["Ravia 2", "1", "2"]])
    _refused(["predict", "--model", tiny_dir, "--csv", path, "--data-dir", DATA, "--out", tmp_path / "o.csv"],
             tmp_path, "line 3: unknown dataset 'Ravia 2' (the model knows Bushdid, Snitz 1)")


# ----------------------------------------------------------------------------- split JSON


@pytest.mark.parametrize("content, match", [
    (b'{"training": [0, "a"], "testing": [2]}', "training[1] is 'a'; expected an integer row index"),
    (b'\xff{"training": [0]}', "is not UTF-8 text"),
    (b'[0, 1, 2]', "must be a JSON object"),
    (b'{"training": [0], "validation": [1], "testing": [2], "removed_smiles": "CCO"}', "'removed_smiles' must be"),
    (b'{"training": 5, "validation": [1], "testing": [2]}', "got int"),
    (b"[" * 100_000, "nested too deeply"),
])
def test_split_json_errors_name_file_and_entry(content, match, tmp_path):
    from common.errors import DataError
    from olfaction.data import load_split

    path = tmp_path / "split.json"
    path.write_bytes(content)
    with pytest.raises(DataError, match=None) as info:
        load_split(path, 10)
    assert match in str(info.value) and str(path) in str(info.value)


@needs_data
def test_split_ids_are_names_never_paths(tmp_path):
    _refused(["eval", "--split", "../../../etc/passwd", "--data-dir", DATA], tmp_path, "is not a name")
    bad = tmp_path / "s.json"
    bad.write_text(json.dumps({"training": [0, 1.5], "validation": [2], "testing": [3]}))
    _refused(["eval", "--split", bad, "--data-dir", DATA], tmp_path, "training[1] is 1.5")


# ----------------------------------------------------------------------------- batching


def test_predictions_do_not_depend_on_the_batch_size(tiny_predictor, tiny_dir, monkeypatch):
    from olfaction.inference import MixtureAPI, OnnxPredictor

    model, (mix_a, mix_b, datasets) = tiny_predictor
    a, b, d = mix_a * 5, mix_b * 5, datasets * 5
    for predictor in (model, OnnxPredictor(tiny_dir)):
        whole = predictor.predict_components(a, b, d)
        labels = predictor.predict_labels(a)
        monkeypatch.setattr(MixtureAPI, "pair_batch", 3)
        monkeypatch.setattr(MixtureAPI, "mixture_batch", 4)
        parts = predictor.predict_components(a, b, d)
        for k in whole:
            np.testing.assert_allclose(parts[k], whole[k], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(predictor.predict_labels(a), labels, rtol=1e-5, atol=1e-6)
        monkeypatch.undo()


def test_pairs_csv_streams_in_chunks(tiny_predictor, tmp_path):
    import io

    from olfaction.batch_predict import check_pairs_csv, predict_pairs_csv

    model, _ = tiny_predictor
    mixtures = {("Bushdid", "1"): ("CCO", "CCCO"), ("Bushdid", "2"): ("c1ccccc1",), ("Snitz 1", "1"): ("CC(C)=O",),
                ("Snitz 1", "2"): ("CC(=O)O", "CCO")}
    rows = [["Bushdid", "1", "2"], ["Snitz 1", "2", "1.0"], ["Bushdid", "2", "1"]] * 4
    path = _csv(tmp_path / "p.csv", rows)
    assert check_pairs_csv(path, mixtures) == (12, {"Bushdid": 2, "Snitz 1": 3})
    out = io.StringIO()
    calls = []
    real = model.predict_components

    def spy(a, b, d):
        calls.append(len(a))
        return real(a, b, d)

    model.predict_components = spy
    try:
        assert predict_pairs_csv(model, path, mixtures, out, total=12, progress=False, chunk_rows=5) == 12
    finally:
        del model.predict_components
    assert calls == [5, 5, 2]
    got = list(csv.DictReader(io.StringIO(out.getvalue())))
    a = [mixtures[(r[0], r[1].removesuffix(".0"))] for r in rows]
    b = [mixtures[(r[0], r[2].removesuffix(".0"))] for r in rows]
    want = model.predict_distance(a, b, [r[0] for r in rows])
    np.testing.assert_allclose([float(r["Predicted_Experimental_Values"]) for r in got], want, rtol=1e-6)
    assert [r["Mixture_2"] for r in got] == [r[2] for r in rows]


# ----------------------------------------------------------------------------- signals


@needs_data
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_white_stops_on_signal(sig, net_dir, tmp_path):
    argv = ["-m", "olfaction.cli", "white", "--model", str(net_dir), "--max-n", "100", "--samples", "10000",
            "--out", str(tmp_path / "white"), "--data-dir", str(DATA)]
    assert_stops_on_signal(argv, tmp_path, sig, ready="white:", within_s=15)
    assert not (tmp_path / "white" / "white.csv").exists()


@needs_data
def test_predict_csv_stops_on_sigterm_without_a_partial_output(net_dir, tmp_path):
    pairs = list(csv.DictReader(open(DATA / "olfaction" / "mixture_pairs.csv", encoding="utf-8")))
    rng = np.random.default_rng(0)
    rows = [[p["Dataset"], p["Mixture 1"], p["Mixture 2"]] for p in (pairs[i] for i in rng.integers(0, len(pairs),
                                                                                                     200_000))]
    path = _csv(tmp_path / "big.csv", rows)
    argv = ["-m", "olfaction.cli", "predict", "--model", str(net_dir), "--csv", str(path), "--out",
            str(tmp_path / "out.csv"), "--data-dir", str(DATA)]
    assert_stops_on_signal(argv, tmp_path, signal.SIGTERM, ready="predict:", within_s=15)
    assert not (tmp_path / "out.csv").exists()


TRAIN_FOREVER = """
import sys
import lightning.pytorch as L
import torch
from common.cli import cli_main
from olfaction.fitting import fit_module, shuffled_rows

class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Linear(1, 1)
    def training_step(self, batch, _):
        if self.current_epoch == 2:
            print("training", file=sys.stderr, flush=True)
        return self.w(batch[0].float()[:, None]).pow(2).mean()
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-3)

@cli_main
def run():
    fit_module(Tiny(), shuffled_rows(range(8), 4, 0), None, epochs=10**9, seed=0, device="cpu")

sys.exit(run())
"""


def test_training_stops_on_ctrl_c_with_exit_130(tmp_path):
    text = assert_stops_on_signal(["-c", TRAIN_FOREVER], tmp_path, signal.SIGINT, ready="training", within_s=20)
    assert "interrupted" in text


# ----------------------------------------------------------------------------- the demo tab


def test_demo_tab_answers_8_concurrent_requests(tiny_dir, monkeypatch):
    from PIL import Image

    from olfaction import demo

    monkeypatch.setenv("MIXSCENT_MODEL", str(tiny_dir))
    demo._PREDICTOR.clear()
    want = demo.compare("CCO;c1ccccc1", "CC(=O)O", "Bushdid")
    assert want[0].startswith("**distance:") and Path(want[1]).is_file()
    inputs = [("CCO;c1ccccc1", "CC(=O)O"), ("CCCO", "CCO;CC(C)=O")] * 4
    barrier = threading.Barrier(8)
    results: list = [None] * 8

    def request(i):
        barrier.wait(30)
        results[i] = demo.compare(*inputs[i], "Bushdid")

    threads = [threading.Thread(target=request, args=(i,), daemon=True) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    other = demo.compare("CCCO", "CCO;CC(C)=O", "Bushdid")
    for i, (text, img_a, img_b) in enumerate(results):
        assert (text, img_a, img_b) == (want if i % 2 == 0 else other)
        for img in (img_a, img_b):
            with Image.open(img) as im:
                im.load()  # a complete PNG
                assert im.size[0] > 0


def test_demo_errors_are_page_messages(tiny_dir, monkeypatch):
    from olfaction import demo

    monkeypatch.setenv("MIXSCENT_MODEL", str(tiny_dir))
    demo._PREDICTOR.clear()
    text, a, b = demo.compare("CCO;xx", "CCO", "Bushdid")
    assert text.startswith("**error:**") and "invalid SMILES 'xx'" in text and a is b is None
    assert demo.compare("CC\x00O", "CCO", "Bushdid")[0].startswith("**error:**")
    assert "unknown experiment" in demo.compare("CCO", "CCC", "Nowhere")[0]

    def broken(*args):
        raise RuntimeError("secret /srv/internal/path")

    monkeypatch.setattr(demo, "analyse", broken)
    text, a, b = demo.compare("CCO", "CCC", "Bushdid")
    assert text.startswith("**error:**") and "secret" not in text and "RuntimeError" not in text and a is None


# ----------------------------------------------------------------------------- mixtures text (labels --file)


@pytest.mark.parametrize("content, match", [
    (b"CCO;CC(=O)O\n\xff\xfeCC\n", "is not UTF-8 text"),
    (b"# header\nCCO;CC(=O)O\n\nCCO;xx\n", "line 4: invalid SMILES 'xx' at mixture of line 4 component 2"),
    (b"CCO;OCC\n", "line 1: duplicate component"),
    (b"# only a comment\n\n", "holds no mixture"),
    ((";".join(f"C{'C' * i}O" for i in range(150)) + "\n").encode(), "line 1: mixture of line 1 has 150 components"),
])
def test_mixtures_text_errors_name_file_and_line(content, match, tiny_dir, tmp_path):
    path = tmp_path / "mixtures.txt"
    path.write_bytes(content)
    line = _refused(["labels", "--model", tiny_dir, "--file", path, "--out", tmp_path / "labels.csv"], tmp_path, match)
    assert str(path) in line


def test_labels_needs_exactly_one_of_mix_and_file(tiny_dir, tmp_path):
    _refused(["labels", "--model", tiny_dir], tmp_path, "labels needs --mix or --file")
    _refused(["labels", "--model", tiny_dir, "--mix", "CCO", "--file", tmp_path / "m.txt"], tmp_path,
             "labels needs --mix or --file")


def test_labels_file_streams_in_chunks(tiny_predictor, tiny_dir, tmp_path, capsys):
    import io

    from olfaction.batch_predict import check_mixtures_text, predict_labels_file

    model, _ = tiny_predictor
    path = tmp_path / "m.txt"
    path.write_text("# mixtures\nCCO;c1ccccc1\n\nCC(C)=O\nOCC;CC(=O)O\nCCCO\nc1ccccc1\n", encoding="utf-8")
    assert check_mixtures_text(path) == 5
    out = io.StringIO()
    assert predict_labels_file(model, path, out, k=2, total=5, progress=False, chunk_rows=2) == 5
    got = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert [int(r["Line"]) for r in got] == [2, 4, 5, 6, 7]
    assert got[2]["Mixture"] == "CC(=O)O;CCO"  # canonical, sorted
    for r in got:
        want = model.top_labels(r["Mixture"].split(";"), k=2)
        assert [r["Label_1"], r["Label_2"]] == [n for n, _ in want]
        assert float(r["Probability_1"]) == pytest.approx(want[0][1], abs=1e-5)
    assert main(["labels", "--model", str(tiny_dir), "--file", str(path), "--top", "3",
                 "--out", str(tmp_path / "l.csv")]) == 0
    rows = list(csv.DictReader(open(tmp_path / "l.csv", encoding="utf-8")))
    assert len(rows) == 5 and rows[0]["Label_3"] and "labels" in capsys.readouterr().err  # the progress bar
