"""The GPU check's CPU path: flex agrees with the reference in the forward, and the timing rows
are written."""

import json

import pytest

from experiments.generation3d.gpu_check import main

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


def test_gpu_check_runs_on_the_cpu(tmp_path):
    res = main(["--device", "cpu", "--parts", "6", "--tokens", "2", "--steps", "1", "--precision", "32",
                "--out", str(tmp_path / "c.json")])
    assert not res["kernels"]["gradients_checked"] and res["kernels"]["worst"] < 1e-5
    saved = json.loads((tmp_path / "c.json").read_text())
    step = saved["steps"][0]
    assert step["moca"]["params"] > step["full"]["params"] and step["moca_speedup_vs_full"] > 0
