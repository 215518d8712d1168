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
