"""The hub's MoSAIC tab under concurrent requests."""


def test_demo_figures_render_concurrently_without_shared_state():
    """Concurrent requests each render their own figure (the hub's MoSAIC tab under load): no error
    from shared matplotlib state such as the mathtext parser of log-scale tick labels."""
    import io
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from streaming.demo import tracking_figure

    rng = np.random.default_rng(0)
    errs = {name: list(10 ** rng.uniform(-2, 0, 400)) for name in ("mosaic", "petrels")}

    def render(_):
        fig = tracking_figure(errs, [100, 200], 400)
        buf = io.BytesIO()
        FigureCanvasAgg(fig).print_png(buf)
        texts = [t.get_text() for t in fig.axes[0].get_yticklabels()]
        return buf.tell(), texts

    with ThreadPoolExecutor(16) as pool:
        out = list(pool.map(render, range(64)))
    assert all(size > 1000 for size, _ in out)
    assert all("$" not in t for _, texts in out for t in texts)  # plain tick labels: no mathtext to parse


def test_tab_runs_concurrently_and_match_a_serial_run():
    """8 requests to the tab's run function at once, two settings: each returns the same table as a
    run on its own (seeded), and a figure of its own."""
    from concurrent.futures import ThreadPoolExecutor

    import pytest

    pytest.importorskip("gradio")
    from streaming.demo import run_tab

    def request(i):
        outs = list(run_tab(12, 2, 2, 0.6, 0.02, "abrupt", 200, i % 2))
        return outs[-1][1], [fig for fig, _ in outs]

    alone = [request(0)[0], request(1)[0]]
    with ThreadPoolExecutor(8) as pool:
        out = list(pool.map(request, range(8)))
    for i, (rows, _) in enumerate(out):
        assert rows == alone[i % 2]
    figs = [id(f) for _, fs in out for f in fs]
    assert len(set(figs)) == len(figs)


def test_tab_errors_are_page_messages_that_say_what_to_do():
    import pytest

    gr = pytest.importorskip("gradio")
    from streaming.demo import run_tab

    for seed, r, match in [(1e30, 2, "seed must be a whole number"), (float("nan"), 2, "seed"), (-1, 2, "seed"),
                           (0.5, 2, "seed"), (0, 12, "lower r or raise n")]:
        with pytest.raises(gr.Error, match=match) as info:
            list(run_tab(12, r, 2, 0.6, 0.02, "abrupt", 200, seed))
        assert "Traceback" not in str(info.value) and "run again" in str(info.value)
