"""Gradio tab: configure a drifting union-of-subspaces stream and watch MoSAIC's tracking error
against baselines as a live plot."""

from __future__ import annotations

import logging

import numpy as np

from common.cli import SEED_MAX


def tracking_figure(errs: dict, drifts: list[int], T: int):
    """Rolling-mean NRMSE of each method over the stream, drift points dashed (a ``Figure``)."""
    # a bare Figure, not pyplot: concurrent requests must not share pyplot's global figure list; and
    # plain tick labels: the log axis' default "$10^{-1}$" labels go through matplotlib's mathtext
    # parser, one shared parser that fails under concurrent requests
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, NullFormatter

    fig = Figure(figsize=(7, 3.5))
    ax = fig.subplots()
    w = 50
    for name, e in errs.items():
        if len(e) >= w:
            e = np.nan_to_num(np.minimum(np.asarray(e), 2.0))
            ax.plot(np.arange(w - 1, len(e)), np.convolve(e, np.ones(w) / w, mode="valid"), label=name, lw=1.2)
    for d in drifts:
        ax.axvline(d, color="k", ls="--", lw=0.8)
    ax.set_xlim(0, T)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("sample")
    ax.set_ylabel("NRMSE (rolling mean)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def run_demo(n: int, r: int, K: int, obs_frac: float, noise: float, drift: str, samples_per_epoch: int,
             seed: int, chunk: int = 250):
    """Generator: yields ``(figure, summary rows)`` after every ``chunk`` samples."""
    import torch
    from threadpoolctl import threadpool_limits

    from common.report import significant
    from streaming.baselines import Grouse, KGrouse, Petrels
    from streaming.data import StreamConfig, generate_stream
    from streaming.evaluate import per_sample_nrmse
    from streaming.model import MoSAIC

    torch.set_num_threads(1)
    with threadpool_limits(1):
        cfg = StreamConfig(n=int(n), r=int(r), K=int(K), obs_frac=float(obs_frac), noise_std=float(noise),
                           drift=drift, epochs=3, samples_per_epoch=int(samples_per_epoch), seed=int(seed))
        stream = generate_stream(cfg)
        mosaic = MoSAIC(cfg.r, cfg.K, seed=int(seed), pretrain_restarts=3).fit(stream.source_values)
        models = {
            "mosaic": mosaic,
            "kgrouse_pretrained": KGrouse.from_mosaic(mosaic),  # same experts, plain routed GROUSE
            "k-grouse": KGrouse(cfg.r, cfg.K, eta=0.3, seed=int(seed)),
            "grouse-r": Grouse(cfg.n, cfg.r, seed=int(seed)),
            "petrels": Petrels(cfg.n, cfg.r, seed=int(seed)),
        }
        T = stream.values.shape[0]
        errs = {k: [] for k in models}
        for s in range(0, T, chunk):
            sl = slice(s, min(s + chunk, T))
            for name, model in models.items():  # an unfitted k-GROUSE learns n here
                comp = model.process(stream.values[sl], epoch=stream.epoch[sl])[0]
                errs[name].extend(per_sample_nrmse(comp, stream.full[sl], stream.values[sl]).tolist())
            rows = [[name, significant(float(np.sqrt(np.nanmean(np.square(e))))), significant(float(np.nanmean(e[-chunk:])))]
                    for name, e in errs.items()]
            yield tracking_figure(errs, stream.drift_points(), T), rows


def tab_problem(n, r, seed) -> str | None:
    """What is wrong with the tab's settings, as a page message that says what to do (None: nothing)."""
    if seed is None:
        seed = 0
    try:
        seed_ok = float(seed).is_integer() and 0 <= float(seed) <= SEED_MAX
    except (TypeError, ValueError, OverflowError):
        seed_ok = False
    if not seed_ok:
        return f"The seed must be a whole number from 0 to {SEED_MAX}; enter one and run again."
    if int(r) >= int(n):
        return f"The rank r={int(r)} must be smaller than n={int(n)}; lower r or raise n and run again."
    return None


def run_tab(n_, r_, K_, obs_, noise_, drift_, spe_, seed_):
    """The tab's run button: ``run_demo`` with its settings checked, every error a page message
    (``gr.Error``) that says what to do, never raw exception text. Safe under concurrent requests
    (each run builds its own models and figures)."""
    import gradio as gr

    from common.errors import MoeAppsError

    problem = tab_problem(n_, r_, seed_)
    if problem:
        raise gr.Error(problem)
    try:
        yield from run_demo(n_, r_, K_, obs_, noise_, drift_, spe_, int(float(seed_ or 0)))
    except MoeAppsError as exc:
        raise gr.Error(f"{exc}. Change the settings and run again.") from None
    except Exception:  # noqa: BLE001 - logged for the operator, the page gets a plain message
        logging.getLogger(__name__).exception("streaming tab run failed")
        raise gr.Error("The run failed on these settings; try a smaller n or K, or another seed.") from None


def build_tab() -> None:
    """Create the streaming tab's components inside an open ``gr.Tab`` and wire the run button."""
    import gradio as gr

    gr.Markdown("### MoSAIC: online matrix completion on a drifting union of subspaces\n"
                "Each sample lies near one of K rank-r subspaces, only a fraction of its entries is "
                "observed, and the subspaces drift every epoch (dashed lines).")
    with gr.Row():
        n = gr.Slider(10, 200, value=50, step=1, label="n (dimension)")
        r = gr.Slider(1, 25, value=5, step=1, label="r (rank)")
        K = gr.Slider(1, 12, value=5, step=1, label="K (subspaces)")
    with gr.Row():
        obs = gr.Slider(0.2, 1.0, value=0.5, step=0.05, label="observed fraction")
        noise = gr.Slider(0.0, 0.3, value=0.05, step=0.01, label="noise σ")
        drift = gr.Dropdown(["rotation", "abrupt", "none"], value="abrupt", label="drift")
    with gr.Row():
        spe = gr.Slider(200, 3000, value=800, step=100, label="samples per epoch")
        seed = gr.Number(value=0, precision=0, label="seed")
    run = gr.Button("Run stream", variant="primary")
    plot = gr.Plot(label="Tracking error (NRMSE on unobserved entries)")
    table = gr.Dataframe(headers=["method", "NRMSE so far", "NRMSE last chunk"], label="Summary")

    run.click(run_tab, [n, r, K, obs, noise, drift, spe, seed], [plot, table], api_name="mosaic_run")
