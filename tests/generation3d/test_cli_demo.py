"""CLI end to end on a tiny run, its error exits, bench, and the demo tab."""

import json

import pytest

from generation3d.cli import main


def test_cli_end_to_end(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MOE_APPS_CACHE", str(tmp_path / "cache"))  # the category classifier is cached there
    data, ae, run = tmp_path / "data", tmp_path / "ae", tmp_path / "run"
    assert main(["build-data", "--out", str(data), "--per-category", "3", "--scenes", "1", "--points", "64",
                 "--scene-parts", "20"]) == 0
    assert main(["train-ae", "--data-dir", str(data), "--out", str(ae), "--steps", "3", "--batch-size", "8",
                 "--latents", "4", "--latent-dim", "4", "--threads", "1"]) == 0
    assert json.loads((ae / "metrics.json").read_text())["ae_cd"] > 0
    assert main(["train", "--data-dir", str(data), "--ae", str(ae), "--out", str(run), "--steps", "2",
                 "--max-parts", "40", "--d-model", "32", "--layers", "1", "--threads", "1"]) == 0
    out = tmp_path / "x.glb"
    assert main(["sample", "--ckpt", str(run), "--category", "chair", "--parts", "12", "--out", str(out), "--steps", "2"]) == 0
    assert out.stat().st_size > 0 and out.with_suffix(".png").stat().st_size > 0
    assert main(["load-mesh", str(out), "--out", str(tmp_path / "p.png")]) == 0
    assert "part_011" in capsys.readouterr().out
    assert main(["eval", "--ckpt", str(run), "--data-dir", str(data), "--n", "2", "--steps", "2",
                 "--out", str(tmp_path / "e.json")]) == 0
    res = json.loads((tmp_path / "e.json").read_text())
    assert {"cd", "fscore", "part_fscore", "coverage", "mmd", "1nna", "part_count_acc", "pen_gen"} <= set(res)
    assert 0 <= res["fidelity"] <= 1 and 0 <= res["classifier_test_acc"] <= 1
    assert sum(res["predicted_categories"].values()) == res["n_shapes"] and set(res["fidelity_by_category"]) <= {
        "chair", "table", "shelf", "lamp", "scene"}
    assert len(list((tmp_path / "cache" / "generation3d" / "classifier").iterdir())) == 1
    assert main(["train", "--data-dir", str(data), "--ae", str(ae), "--out", str(tmp_path / "run2"), "--steps", "1",
                 "--max-parts", "40", "--d-model", "32", "--layers", "1", "--threads", "1"]) == 0
    assert main(["flow-loss", "--ckpt", str(tmp_path / "run2"), "--data-dir", str(data), "--out", str(tmp_path / "f.json")]) == 0
    assert "held-out flow loss" in capsys.readouterr().out
    assert json.loads((tmp_path / "f.json").read_text())["loss"] > 0
    # bad input: one-line error, exit 2, nothing written
    for argv, msg in [
        (["sample", "--ckpt", str(run), "--category", "sofa", "--out", str(tmp_path / "y.glb")], "unknown category"),
        (["sample", "--ckpt", str(run), "--parts", "500", "--out", str(tmp_path / "y.glb")], "outside the trained range"),
        (["sample", "--ckpt", str(tmp_path / "nope"), "--out", str(tmp_path / "y.glb")], "no checkpoint"),
        (["sample", "--ckpt", str(run), "--out", str(tmp_path / "y.stl")], "must end in"),
        (["train-ae", "--data-dir", str(tmp_path), "--out", str(tmp_path / "ae2")], "no dataset"),
        (["bench", "--suite", "attention", "--parts", "8,x"], "comma-separated"),
        (["bench", "--suite", "attention", "--tokens", "8,16", "--out", str(tmp_path / "y_bench")], "one --tokens"),
        (["bench", "--suite", "sizes", "--parts", "4,8", "--out", str(tmp_path / "y.json")], "one --parts"),
        (["bench", "--suite", "attention", "--precision", "bf16-mixed", "--out", str(tmp_path / "y_bench")], "sizes only"),
        (["train", "--ae", str(ae), "--data-dir", str(data), "--model-size", "S", "--d-model", "32",
          "--out", str(tmp_path / "y_run")], "omit --d-model"),
        (["train", "--ae", str(ae), "--data-dir", str(data), "--model-size", "B", "--out", str(tmp_path / "y_run")],
         "T = 16 tokens per part"),
    ]:
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and msg in err and err.count("\n") == 1
    assert not (tmp_path / "y.glb").exists() and not (tmp_path / "ae2").exists()
    assert not (tmp_path / "y.json").exists() and not (tmp_path / "y_bench").exists()


def test_bench_attention_writes_csv_and_ratios(tmp_path):
    assert main(["bench", "--suite", "attention", "--parts", "4,8", "--tokens", "8", "--repeats", "1",
                 "--out", str(tmp_path)]) == 0
    import csv

    rows = list(csv.DictReader(open(tmp_path / "bench_attention.csv")))
    assert {r["method"] for r in rows} == {"full", "moca", "topk", "local"}
    assert all(float(r["peak_mem_mb"]) > 0 for r in rows)
    full8 = next(r for r in rows if r["method"] == "full" and r["parts"] == "8")
    assert float(full8["speedup_vs_full"]) == 1.0 and int(full8["keys_per_query"]) == 64
    moca8 = next(r for r in rows if r["method"] == "moca" and r["parts"] == "8")
    assert int(moca8["keys_per_query"]) == 4 * 8 + 2 * 4
    assert (tmp_path / "bench_attention.png").stat().st_size > 0


def test_demo_tab_builds_and_generates(tiny_pipeline, tmp_path, monkeypatch):
    gr = pytest.importorskip("gradio")
    from generation3d.demo import build_tab, generate

    monkeypatch.setenv("MOCA_RENDERER", "matplotlib")
    with gr.Blocks() as blocks, gr.Tab("3D"):
        build_tab()
    assert blocks is not None
    glb, png, status, rows = generate(str(tiny_pipeline), "table", 5, 0, 2, out_dir=str(tmp_path))
    assert glb.endswith(".glb") and (tmp_path / glb.split("/")[-1]).stat().st_size > 0
    assert "5 parts" in status and "matplotlib preview" in status and len(rows) == 5
    assert "nearest training description" not in status  # blank text: no text conditioning
    glb_t, _, status_t, _ = generate(str(tiny_pipeline), "none", 5, 0, 2, out_dir=str(tmp_path / "t"),
                                     text="a four-legged table with a lower shelf")
    assert "nearest training description" in status_t and glb_t != glb


def test_run_quick_tiny_config(tmp_path, monkeypatch):
    monkeypatch.setenv("MOE_APPS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MOCA_RENDERER", "matplotlib")
    from generation3d.quick import run_quick

    tiny = {"per_category": 3, "scenes": 1, "points": 32, "ae_steps": 2, "gen_steps": 2, "max_parts": 96,
            "eval_shapes": 2, "sample_steps": 2, "bench_parts": (4, 8), "d_model": 32, "layers": 1}
    rows = run_quick(tmp_path, None, seed=0, config=tiny)
    assert {"app", "task", "method", "metric", "value", "split", "seed"} <= set(rows[0])
    assert {r["method"] for r in rows} >= {"moca", "full", "topk", "part_ae"}
    assert {"fidelity", "classifier_test_acc"} <= {r["metric"] for r in rows if r["method"] == "moca"}
    assert (tmp_path / "generation3d.csv").is_file() and (tmp_path / "generation3d" / "scene_64parts.glb").is_file()
    assert (tmp_path / "generation3d" / "text_chair_9parts.png").is_file()
    assert (tmp_path / "cache" / "generation3d" / "demo_model" / "generator" / "config.json").is_file()


@pytest.mark.slow
@pytest.mark.browser
def test_demo_tab_in_a_browser(tiny_pipeline, monkeypatch):
    gr = pytest.importorskip("gradio")
    sync_api = pytest.importorskip("playwright.sync_api")
    from generation3d.demo import build_tab

    monkeypatch.setenv("MOCA_RENDERER", "matplotlib")
    monkeypatch.setenv("MOE_APPS_DEMO_ROOTS", str(tiny_pipeline))  # the typed path must be an allowed root
    with gr.Blocks() as blocks, gr.Tab("3D"):
        build_tab()
    _, url, _ = blocks.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            page = browser.new_page()
            page.goto(url)
            page.locator("#moca-ckpt textarea").fill(str(tiny_pipeline))
            page.locator("#moca-text textarea").fill("a chair with arms and a solid back")
            page.locator("#moca-generate").click()
            page.wait_for_function("document.querySelector('#moca-status').innerText.includes('generated')", timeout=120000)
            status = page.locator("#moca-status").inner_text()
            assert "parts (moca attention" in status and "nearest training description" in status
            page.wait_for_selector("#moca-download a", timeout=30000)
            assert ".glb" in page.locator("#moca-download").inner_text()
            page.locator("#moca-parts input[type=number]").fill("60")  # beyond the trained 40: error in the tab
            page.locator("#moca-parts input[type=number]").press("Enter")
            page.locator("#moca-generate").click()
            page.wait_for_function("document.querySelector('#moca-status').innerText.includes('error')", timeout=60000)
            assert "outside the trained range" in page.locator("#moca-status").inner_text()
            browser.close()
    finally:
        blocks.close()
