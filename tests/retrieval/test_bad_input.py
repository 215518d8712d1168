"""Bad device, precision, size and suite options of ``moa3cir``: one ``error:`` line, exit 2, nothing
written, before any data is read or any model is built."""

from __future__ import annotations

import pytest
import torch

from retrieval.cli import main
from tests.bad_input import assert_refused


@pytest.fixture()
def bench_root(tiny_bench):
    return tiny_bench[0]


@pytest.mark.parametrize(("argv", "match"), [
    (["train", "--model-size", "XL"], "--model-size"),
    (["train", "--precision", "8-mixed"], "--precision"),
    (["train", "--precision", "16-mixed", "--device", "cpu"], "16-mixed needs a CUDA GPU"),
    (["bench", "--suite", "everything"], "--suite"),
    (["bench", "--suite", "table", "--precision", "16-mixed", "--device", "cpu"], "16-mixed needs a CUDA GPU"),
    (["bench", "--model-size", "L"], "--model-size"),
    (["eval", "--device", "tpu"], "--device"),
])
def test_bad_options_are_one_line_and_write_nothing(argv, match, bench_root, tmp_path):
    out = tmp_path / "out"
    full = [*argv, "--out", str(out)]
    if argv[0] in ("train", "eval"):
        full += ["--root", str(bench_root)]
    if argv[0] == "eval":
        full += ["--model", str(tmp_path / "missing")]
    assert_refused(main, full, tmp_path, match=match)
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
@pytest.mark.parametrize("verb", ["train", "eval", "index", "search", "bench"])
def test_a_gpu_without_one_is_refused_before_the_other_arguments(verb, tmp_path):
    assert_refused(main, [verb, "--device", "cuda:0"], tmp_path, match="GPU")
