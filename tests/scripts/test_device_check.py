"""``scripts/device_check.py --device cpu --dry``: the device check's code paths at toy size (CI has no GPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_dry_device_check_runs_every_part_on_the_cpu(tmp_path):
    out = tmp_path / "dry.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "device_check.py"), "--device", "cpu", "--dry",
                           "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    report = json.loads(out.read_text())
    errors = {k: v.get("error") for k, v in report["parts"].items() if "error" in v}
    assert proc.returncode == 0 and not errors, (proc.stderr[-2000:], errors)
    assert set(report["parts"]) == {"parity", "step_time", "moh_fmnist", "moca_attention"}
    parity = report["parts"]["parity"]
    assert parity["ok"] and not parity["skipped_apps"]
    torch_models = [m for m in parity["models"] if "max_abs_diff_output" in m]
    assert len(torch_models) >= 10 and all(m["max_abs_diff_output"] == 0.0 for m in torch_models)  # cpu vs cpu
    assert (tmp_path / report["parts"]["moh_fmnist"]["samples_png"]).is_file()
    assert report["parts"]["moca_attention"]["speedup_moca_vs_full"] > 0


def test_device_check_refuses_an_absent_gpu_and_an_existing_output(tmp_path):
    import torch

    script = str(ROOT / "scripts" / "device_check.py")
    if not torch.cuda.is_available():
        proc = subprocess.run([sys.executable, script, "--device", "cuda", "--out", str(tmp_path / "x.json")],
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert proc.returncode == 2 and proc.stderr.startswith("error:") and "GPU" in proc.stderr
    (tmp_path / "x.json").write_text("{}")
    proc = subprocess.run([sys.executable, script, "--device", "cpu", "--dry", "--out", str(tmp_path / "x.json")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and "--overwrite" in proc.stderr
