"""The olfaction experiment entry points reject bad input with one
error line before any work."""

from experiments.olfaction import corpus_curve, label_bench


def test_corpus_curve_rejects_bad_sizes(capsys):
    assert corpus_curve.main(["--sizes", "1,x"]) == 2
    assert "argument --sizes: comma-separated integers" in capsys.readouterr().err


def test_label_bench_rejects_bad_counts(tmp_path, capsys):
    assert label_bench.main(["--rf-trees", "0", "--out", str(tmp_path / "new")]) == 2
    assert "--rf-trees" in capsys.readouterr().err and not (tmp_path / "new").exists()
