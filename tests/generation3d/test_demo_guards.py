"""The 3D tab under the hub's rules: typed checkpoint paths outside the allow-list are refused in
the tab without loading anything, and loaded pipelines are kept in a bounded LRU."""

import shutil

import pytest

from generation3d import demo


@pytest.fixture()
def fresh_cache(monkeypatch):
    monkeypatch.setattr(demo, "_PIPELINES", demo.LoaderCache(demo.MAX_PIPELINES))
    monkeypatch.setenv("MOCA_RENDERER", "matplotlib")
    return demo._PIPELINES


def test_pipeline_cache_is_bounded_lru(tiny_pipeline, tmp_path, fresh_cache):
    ckpts = []
    for i in range(demo.MAX_PIPELINES + 2):
        ckpts.append(tmp_path / f"ck{i}")
        shutil.copytree(tiny_pipeline, ckpts[-1])
        rows_when_loaded = demo.generate(str(ckpts[-1]), "table", 4, 0, 2, out_dir=str(tmp_path / f"out{i}"))[3]
        assert len(fresh_cache) == min(i + 1, demo.MAX_PIPELINES)
    assert fresh_cache.keys() == [str(p.resolve()) for p in ckpts[-demo.MAX_PIPELINES :]]
    # the same request gives the same router choices from the cached pipeline
    cached = demo.generate(str(ckpts[-1]), "table", 4, 0, 2, out_dir=str(tmp_path / "again"))[3]
    assert len(fresh_cache) == demo.MAX_PIPELINES and cached == rows_when_loaded and len(cached) == 4


def test_tab_refuses_paths_outside_the_allow_list(tiny_pipeline, tmp_path, monkeypatch, fresh_cache):
    import gradio as gr
    from gradio_client import Client

    monkeypatch.setenv("MOE_APPS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MOCA_DEMO_CKPT", str(tiny_pipeline))
    (tmp_path / "escape").symlink_to("/etc", target_is_directory=True)
    with gr.Blocks() as blocks, gr.Tab("3D"):
        demo.build_tab()
    _, url, _ = blocks.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    try:
        client = Client(url, verbose=False)
        for path in ("/etc", str(tmp_path / "escape"), f"{tiny_pipeline}/../.."):
            out = client.predict(path, "chair", 4, 0, 2, "", api_name="/moca_generate")
            assert out[3].startswith("**error:** checkpoint directory") and "outside" in out[3], out[3]
        assert len(fresh_cache) == 0  # nothing was loaded
        out = client.predict(str(tiny_pipeline), "chair", 4, 0, 2, "", api_name="/moca_generate")
        assert out[3].startswith("generated 4 parts")
        assert fresh_cache.keys() == [str(tiny_pipeline.resolve())]
    finally:
        blocks.close()
