"""``experiments.retrieval.model_sizes`` (formerly ``moa3cir bench --suite sizes``): one row per
named size with parameters, training-state memory and step time; the command line writes them
with its settings."""

import json

from experiments.retrieval.model_sizes import main, model_size_rows


def test_model_size_rows_report_params_memory_and_step_time():
    rows = model_size_rows(sizes=("XS", "S"), batch_size=8, steps_per_epoch=1, epochs=1, device="cpu",
                           log=lambda *_: None)
    assert [r["size"] for r in rows] == ["XS", "S"]
    for r in rows:
        assert r["params_moa3cir"] > 0 and r["params_combiner"] > 0
        assert r["train_state_mb"] == round(r["params_moa3cir"] * 16 / 2**20, 2)  # 4 fp32 copies
        assert r["step_cpu_ms"] > 0
    assert rows[1]["step_cpu_vs_S"] == 1.0


def test_the_command_writes_the_rows_and_keeps_an_existing_file(tmp_path, monkeypatch):
    import experiments.retrieval.model_sizes as ms

    monkeypatch.setattr(ms, "model_size_rows", lambda sizes, **kw: [{"size": s, **kw} for s in sizes])
    res = tmp_path / "sizes.json"
    assert main(["--sizes", "XS", "S", "--device", "cpu", "--json", str(res)]) == 0
    doc = json.loads(res.read_text())
    assert [r["size"] for r in doc["sizes"]] == ["XS", "S"] and doc["config"]["sizes"] == ["XS", "S"]
    res.write_text("keep")
    assert main(["--json", str(res)]) == 2 and res.read_text() == "keep"
