"""The olfaction experiment entry points reject bad input with one
error line before any work."""

from experiments.olfaction import corpus_curve, label_bench


def test_corpus_curve_rejects_bad_sizes(capsys):
    assert corpus_curve.main(["--sizes", "1,x"]) == 2
    assert "argument --sizes: comma-separated integers" in capsys.readouterr().err


def test_label_bench_rejects_bad_counts(tmp_path, capsys):
    assert label_bench.main(["--rf-trees", "0", "--out", str(tmp_path / "new")]) == 2
    assert "--rf-trees" in capsys.readouterr().err and not (tmp_path / "new").exists()


def test_predict_memory_rejects_bad_backends_and_sizes(tmp_path, capsys):
    from experiments.olfaction import predict_memory

    out = tmp_path / "m.json"
    assert predict_memory.main(["--backends", "gpu", "--out", str(out), "--work", str(tmp_path / "w")]) == 2
    assert "unknown backend 'gpu'" in capsys.readouterr().err
    assert predict_memory.main(["--sizes", "10,2000000", "--out", str(out), "--work", str(tmp_path / "w")]) == 2
    assert "at most 1000000 rows" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "w").exists()
