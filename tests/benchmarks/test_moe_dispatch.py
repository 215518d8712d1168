"""benchmarks/moe_dispatch.py: the results file a README quotes is never replaced without
``--overwrite``, and bad settings stop before any measurement, with one ``error:`` line."""

from __future__ import annotations

import pytest

from benchmarks import moe_dispatch


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "exists; pass --overwrite"),
        (["--repeats", "0"], "--repeats must be at least 1"),
    ],
)
def test_refuses_before_measuring(tmp_path, capsys, extra, message):
    results = tmp_path / "dispatch.json"
    results.write_bytes(b'{"rows": []}\n')
    out = tmp_path / "scratch"
    code = moe_dispatch.main(["--json", str(results), "--out", str(out), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]
    assert results.read_bytes() == b'{"rows": []}\n'
    assert not out.exists()  # nothing was measured or written


def test_a_directory_is_not_a_results_file(tmp_path, capsys):
    code = moe_dispatch.main(["--json", str(tmp_path), "--out", str(tmp_path / "scratch")])
    assert code == 2 and "is a directory" in capsys.readouterr().err


def test_machine_info_names_the_device_and_threads():
    info = moe_dispatch.machine_info("cpu")
    assert info["device"] == "cpu" and info["torch_threads"] >= 1 and info["cpu_count"] >= 1
