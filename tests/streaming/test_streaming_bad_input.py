"""Bad input to ``mosaic``: sizes that parse but cannot run are refused before any work, malformed data files
are refused naming the file and entry, and long commands stop soon after SIGINT / SIGTERM."""

import signal

import numpy as np
import pytest

from streaming import cli
from streaming.cli import main
from tests.bad_input import assert_refused, assert_stops_on_signal


def test_simulate_refuses_a_stream_too_large_for_memory(tmp_path):
    out = tmp_path / "s.npz"
    line = assert_refused(main, ["simulate", "--epochs", "1000000000000", "--out", str(out)], tmp_path, match="GiB",
                          timeout_s=30)
    assert "--force" in line and not out.exists()


def test_simulate_force_lifts_the_memory_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "SIMULATE_MAX_BYTES", 1000)
    argv = ["simulate", "--n", "10", "--r", "2", "--K", "2", "--epochs", "1", "--samples-per-epoch", "20"]
    assert_refused(main, [*argv, "--out", str(tmp_path / "a.npz")], tmp_path, match="at most", timeout_s=30)
    assert main([*argv, "--out", str(tmp_path / "b.npz"), "--force"]) == 0 and (tmp_path / "b.npz").exists()


@pytest.mark.parametrize("flag", ["--restarts", "--select-restarts"])
def test_pretrain_refuses_restarts_that_would_run_for_years(tmp_path, flag):
    argv = ["pretrain", "--input", str(tmp_path / "none.npz"), "--K", "2", "--r", "2", flag, "1000000000000",
            "--out", str(tmp_path / "ck")]
    assert_refused(main, argv, tmp_path, match="1000", timeout_s=30)


@pytest.mark.parametrize("observed", ["partly", "fully"])
def test_stream_refuses_an_all_zero_source(tmp_path, observed):

    assert main(["simulate", "--n", "10", "--r", "2", "--K", "2", "--epochs", "1", "--samples-per-epoch", "50",
                 "--out", str(tmp_path / "s.npz")]) == 0
    d = dict(np.load(tmp_path / "s.npz", allow_pickle=False))
    for key in ("values", "source_values"):
        d[key] = np.where(np.isnan(d[key]), np.nan, 0.0) if observed == "partly" else np.zeros_like(d[key])
    np.savez(tmp_path / "zero.npz", **d)
    assert_refused(main, ["stream", "--input", str(tmp_path / "zero.npz"), "--output", str(tmp_path / "o.npz"),
                          "--K", "2", "--r", "2"], tmp_path, match="all zero", timeout_s=60)


# ----------------------------------------------------------------------------- bounds before work

BIG = "1000000000000"


@pytest.mark.parametrize("argv, match", [
    (["simulate", "--n", BIG], "100000"),
    (["simulate", "--K", BIG], "1000"),
    (["simulate", "--source-per-class", BIG], "GiB"),
    (["pretrain", "--K", "auto", "--r", "2", "--k-max", BIG], "1000"),
    (["pretrain", "--K", "2", "--r", "auto", "--r-max", BIG], "1000"),
    (["pretrain", "--K", BIG, "--r", "2"], "1000"),
    (["stream", "--K", BIG, "--r", "2"], "1000"),
    (["stream", "--K", "2", "--r", BIG], "1000"),
    (["bench", "--workers", BIG], "64"),
    (["bench", "--suite", "stress", "--stress-seeds", "6"], "only 5 test seeds"),
    (["data", "movielens", "--movies", BIG], "100000"),
])
def test_count_and_size_options_have_a_maximum(tmp_path, argv, match):
    paths = {"simulate": ["--out", str(tmp_path / "s.npz")], "pretrain": ["--input", str(tmp_path / "s.npz"),
             "--out", str(tmp_path / "ck")], "stream": ["--input", str(tmp_path / "s.npz"), "--output",
             str(tmp_path / "o.npz")], "bench": ["--out", str(tmp_path / "b")],
             "data": ["--out", str(tmp_path / "d.npz")]}
    assert_refused(main, [*argv, *paths[argv[0]]], tmp_path, match=match, timeout_s=30)


# ----------------------------------------------------------------------------- loaders name the problem

def _stream_file(tmp_path, **change):

    values = np.where(np.random.default_rng(0).random((30, 6)) < 0.6, 1.0, np.nan)
    values[:, 0] = 1.0
    arrays = {"format_version": np.array(1), "values": values, "labels": np.zeros(30, int), **change}
    arrays = {k: v for k, v in arrays.items() if v is not None}
    np.savez(tmp_path / "s.npz", **arrays)
    return tmp_path / "s.npz"


@pytest.mark.parametrize("change, match", [
    ({"labels": "strings"}, "labels must be integers"),
    ({"epoch": "floats"}, "epoch must be integers"),
    ({"full": "ints"}, "full must be floats"),
    ({"values": None}, "no 'values'"),
    ({"format_version": "text"}, "format_version"),
    ({"values": "ints"}, "floating point"),
    ({"source_labels": "alone"}, "source_labels must have one entry per row"),
])
def test_stream_file_errors_name_the_entry(tmp_path, change, match):

    made = {"strings": np.array(["a"] * 30), "floats": np.linspace(0, 1, 30), "ints": np.ones((30, 6), int),
            "text": np.array("one"), "alone": np.zeros(5, int), None: None}
    path = _stream_file(tmp_path, **{k: made[v] for k, v in change.items()})
    assert_refused(main, ["stream", "--input", str(path), "--output", str(tmp_path / "o.npz"), "--K", "1", "--r", "1",
                          "--no-pretrain"], tmp_path, match=match, timeout_s=30)


# ----------------------------------------------------------------------------- signals stop long loops

@pytest.fixture(scope="module")
def long_stream(tmp_path_factory):
    """A stream long enough that `mosaic stream` / `pretrain` run well past the signal."""
    path = tmp_path_factory.mktemp("long") / "long.npz"
    assert main(["simulate", "--n", "40", "--r", "4", "--K", "4", "--epochs", "40", "--samples-per-epoch", "5000",
                 "--source-per-class", "3000", "--out", str(path)]) == 0
    return path


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_stream_stops_on_signal(tmp_path, long_stream, sig):
    assert_stops_on_signal(["-m", "streaming.cli", "stream", "--input", str(long_stream), "--output", "o.npz",
                            "--K", "4", "--r", "4", "--no-pretrain"], tmp_path, sig, ready="mosaic stream:")
    assert not (tmp_path / "o.npz").exists()


def test_pretrain_stops_on_sigterm(tmp_path, long_stream):
    assert_stops_on_signal(["-m", "streaming.cli", "pretrain", "--input", str(long_stream), "--K", "4", "--r", "4",
                            "--restarts", "1000", "--out", "ck"], tmp_path, signal.SIGTERM, ready="mosaic pretrain:")
    assert not (tmp_path / "ck").exists() or not any((tmp_path / "ck").iterdir())


@pytest.mark.parametrize("workers", ["1", "2"])
def test_stress_bench_stops_on_sigint(tmp_path, workers):
    assert_stops_on_signal(["-m", "streaming.cli", "bench", "--suite", "stress", "--families", "geodesic",
                            "--workers", workers, "--out", "b"], tmp_path, signal.SIGINT, ready="mosaic bench:")


@pytest.mark.parametrize("argv, match", [
    (["--families", "../../x"], "unknown family '../../x'"),
    (["--cells", "/etc/passwd"], "no stress cell matches"),
])
def test_bench_names_are_names_not_paths(tmp_path, argv, match):
    assert_refused(main, ["bench", "--out", str(tmp_path / "b"), *argv], tmp_path, match=match, timeout_s=30)


def test_ctrl_c_while_the_checkpoint_is_written_keeps_the_old_one(tmp_path, monkeypatch, capsys):
    import contextlib

    import common.pretrained
    from streaming.model import MoSAIC
    from tests.bad_input import snapshot, stray_temps

    s, ck = tmp_path / "s.npz", tmp_path / "ck"
    assert main(["simulate", "--n", "10", "--r", "2", "--K", "2", "--epochs", "1", "--samples-per-epoch", "50",
                 "--out", str(s)]) == 0
    argv = ["pretrain", "--input", str(s), "--K", "2", "--r", "2", "--restarts", "1", "--out", str(ck)]
    assert main(argv) == 0
    old = snapshot(ck)
    real = common.pretrained.atomic_write

    @contextlib.contextmanager
    def torn(path, mode="w", **kw):
        with real(path, mode, **kw) as f:
            if "b" in mode:  # the weights: Ctrl-C halfway through writing them
                f.write(b"partial")
                raise KeyboardInterrupt
            yield f

    monkeypatch.setattr(common.pretrained, "atomic_write", torn)
    capsys.readouterr()
    assert main([*argv[:-2], "--seed", "1", "--out", str(ck), "--overwrite"]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert not stray_temps(tmp_path)
    assert snapshot(ck) == old and MoSAIC.from_pretrained(ck).K == 2  # the old checkpoint, whole and loadable


def test_simulate_stops_on_sigint(tmp_path):
    assert_stops_on_signal(["-m", "streaming.cli", "simulate", "--n", "20", "--r", "2", "--K", "2", "--epochs", "2000",
                            "--samples-per-epoch", "2000", "--out", "s.npz"], tmp_path, signal.SIGINT,
                           ready="mosaic simulate:")
    assert not (tmp_path / "s.npz").exists()
