"""`mosaic` CLI end to end, bad input exit codes, quick run and demo tab construction."""

import json

import numpy as np
import pytest

from streaming.cli import main
from streaming.data import FORMAT_VERSION


def test_simulate_pretrain_stream_eval(tmp_path, capsys):
    s = tmp_path / "s.npz"
    assert main(["simulate", "--n", "20", "--r", "2", "--K", "3", "--epochs", "2", "--samples-per-epoch", "150",
                 "--drift", "abrupt", "--obs-frac", "0.6", "--source-per-class", "40", "--out", str(s)]) == 0
    ck = tmp_path / "ckpt"
    assert main(["pretrain", "--input", str(s), "--K", "3", "--r", "2", "--restarts", "2", "--out", str(ck)]) == 0
    out = tmp_path / "out.npz"
    assert main(["stream", "--input", str(s), "--model", str(ck), "--output", str(out)]) == 0
    with np.load(out) as z:
        assert int(z["format_version"]) == FORMAT_VERSION
        assert z["completed"].shape == (300, 20) and z["routes"].shape == (300,)
        assert np.isfinite(z["completed"]).all()
    capsys.readouterr()
    metrics = tmp_path / "m.json"
    assert main(["eval", "--input", str(s), "--completed", str(out), "--out", str(metrics)]) == 0
    row = json.loads(metrics.read_text())
    assert row["nrmse"] < 0.3 and row["routing_acc"] > 0.8


def test_stream_works_on_a_foreign_file_without_truth(tmp_path):
    rng = np.random.default_rng(0)
    U = np.linalg.qr(rng.standard_normal((12, 2)))[0]
    X = rng.standard_normal((200, 2)) @ U.T
    X[rng.random(X.shape) < 0.3] = np.nan
    X[np.isnan(X).all(1), 0] = 1.0
    f = tmp_path / "foreign.npz"
    np.savez(f, format_version=FORMAT_VERSION, values=X)
    out = tmp_path / "o.npz"
    assert main(["stream", "--input", str(f), "--K", "1", "--r", "2", "--n-source", "100", "--output", str(out)]) == 0
    with np.load(out) as z:
        assert z["completed"].shape == X.shape


@pytest.mark.parametrize("case", ["missing", "version", "rank"])
def test_bad_input_exits_2(tmp_path, case, capsys):
    f = tmp_path / "s.npz"
    if case == "version":
        np.savez(f, format_version=7, values=np.ones((3, 4)))
    elif case == "rank":
        np.savez(f, format_version=FORMAT_VERSION, values=np.ones((3, 4)))
    args = ["stream", "--input", str(f), "--output", str(tmp_path / "o.npz"), "--K", "2", "--r", "4" if case == "rank" else "1",
            "--no-pretrain"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and len(err.strip().splitlines()) == 1


def test_demo_tab_builds():
    gr = pytest.importorskip("gradio")
    from streaming.demo import build_tab

    with gr.Blocks() as blocks, gr.Tab("streaming"):
        build_tab()
    labels = [getattr(c, "label", None) or getattr(c, "value", None) for c in blocks.blocks.values()]
    assert "Run stream" in labels and "Tracking error (NRMSE on unobserved entries)" in labels


def test_demo_run_yields_plots_and_rows():
    from streaming.demo import run_demo

    outs = list(run_demo(15, 2, 2, 0.6, 0.02, "abrupt", 200, 0, chunk=200))
    assert len(outs) == 3
    fig, rows = outs[-1]
    assert {r[0] for r in rows} == {"mosaic", "kgrouse_pretrained", "k-grouse", "grouse-r", "petrels"}
    mosaic = next(r for r in rows if r[0] == "mosaic")
    grouse = next(r for r in rows if r[0] == "grouse-r")
    assert mosaic[1] < grouse[1]


@pytest.mark.slow
def test_run_quick(tmp_path):
    from streaming.quick import run_quick

    rows = run_quick(tmp_path, None, seed=0)
    assert (tmp_path / "streaming.csv").is_file() and (tmp_path / "streaming_cells.png").is_file()
    assert {"app", "task", "method", "metric", "value", "split", "seed"} <= rows[0].keys()
    for task in {r["task"] for r in rows}:  # MoSAIC beside the baseline that isolates its online mechanisms
        assert {"mosaic", "kgrouse_pretrained"} <= {r["method"] for r in rows if r["task"] == task}
