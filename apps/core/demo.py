"""Gradio tab of the routing core: route a batch through a chosen router, plot expert load."""

from __future__ import annotations

import gradio as gr
from matplotlib.figure import Figure

from apps.core.routing_demo import ROUTERS, route_batch
from moe import plot_expert_load


def _run(router_name: str, num_experts: float, k: float, num_tokens: float, skew: float, seed: float):
    try:
        routing, stats = route_batch(
            router_name, int(num_experts), int(k), int(num_tokens), float(skew), int(seed)
        )
    except ValueError as exc:
        raise gr.Error(str(exc)) from exc
    # a bare Figure, not pyplot: concurrent requests must not share pyplot's global figure list
    fig = Figure(figsize=(6, 3))
    ax = fig.subplots()
    plot_expert_load(routing.counts, ax=ax, title=f"{router_name}: assignments per expert")
    fig.tight_layout()
    summary = (
        f"load entropy {stats['load_entropy']:.3f} (1 = balanced), "
        f"max/mean load {stats['max_over_mean_load']:.2f}, tokens {stats['num_tokens']}"
    )
    rows = [
        [e, int(c), round(f, 4)]
        for e, (c, f) in enumerate(zip(routing.counts.tolist(), stats["load"], strict=True))
    ]
    return fig, summary, rows


def build_tab() -> None:
    """Components of the core tab (called inside an open ``gr.Tab``)."""
    gr.Markdown("Route a batch of synthetic tokens (skewed toward expert 0) through a router from `moe/`.")
    with gr.Row():
        router = gr.Dropdown(list(ROUTERS), value=ROUTERS[0], label="Router")
        num_experts = gr.Slider(1, 64, value=8, step=1, label="Experts E")
        k = gr.Slider(1, 8, value=2, step=1, label="Top-k")
    with gr.Row():
        num_tokens = gr.Slider(16, 8192, value=1024, step=16, label="Tokens")
        skew = gr.Slider(0.0, 6.0, value=3.0, step=0.5, label="Skew toward expert 0")
        seed = gr.Number(value=0, precision=0, label="Seed")
    button = gr.Button("Route batch", variant="primary")
    summary = gr.Textbox(label="Routing summary", elem_id="core-routing-summary")
    plot = gr.Plot(label="Per-expert load")
    table = gr.Dataframe(headers=["expert", "assignments", "fraction"], label="Load table")
    button.click(
        _run, [router, num_experts, k, num_tokens, skew, seed], [plot, summary, table], api_name="route_batch"
    )
