"""Gradio tab: sample from a trained MoH model, step through the denoising, and see which
representation levels, transform expert and scan depth the router chose at each step."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from common.allowlist import check_allowed_path
from common.cli import whole_number
from common.errors import InputError, MoeAppsError
from common.images import served_png

MAX_IMAGES = 64  # the tab's sliders; a request outside them is refused
MAX_STEPS = 50
SEED_MAX = 2**32 - 1
log = logging.getLogger(__name__)

CKPT_ENV = "MOH_DEMO_CKPT"
BASELINE = "fashion-mnist, plain Mamba"
DATASETS = ("fashion-mnist", BASELINE, "sweethome3d")
SHIPPED = {"fashion-mnist": "moh-fmnist", BASELINE: "mamba-fmnist"}  # common.shipped names


def default_checkpoint(dataset: str = "fashion-mnist") -> str:
    """The model the tab samples for a ``DATASETS`` choice (InputError for any other name):
    ``$MOH_DEMO_CKPT`` for Fashion-MNIST if set; else the shipped model (``moh-fmnist``, or the
    plain-Mamba baseline ``mamba-fmnist`` trained with the same recipe); else the model that
    ``make demo`` (``vision.quick``) leaves in the cache (``demo_model`` /
    ``demo_model_sweethome3d``)."""
    from common.shipped import shipped_models
    from vision.quick import demo_model_dir

    if dataset not in DATASETS:
        raise InputError(f"dataset must be one of {', '.join(DATASETS)}, got {str(dataset)[:40]!r}")
    if dataset == "fashion-mnist" and os.environ.get(CKPT_ENV):
        return os.environ[CKPT_ENV]
    if dataset == BASELINE or SHIPPED.get(dataset) in shipped_models():  # the baseline exists only shipped
        return SHIPPED[dataset]
    return str(demo_model_dir(dataset))


def allowed_checkpoint(ckpt: str) -> Path | str:
    """The name of a shipped model as it is (``common.shipped`` verifies it), else ``ckpt``
    resolved, if it lies inside the hub's allowed roots (``common.allowlist``) or the operator's
    ``$MOH_DEMO_CKPT``; raises ``InputError`` otherwise, before anything is read."""
    from common.shipped import shipped_models

    if ckpt in shipped_models():
        return ckpt
    return check_allowed_path(ckpt, "checkpoint directory", extra_roots=[os.environ.get(CKPT_ENV, "")])


def sample_with_trace(ckpt: str, n: int, steps: int, seed: int):
    """Returns ``(final grid uint8, per-step grids list, trace rows, depth plot figure)``.
    Safe to call from several threads at once: each call loads its own model and draws on its
    own generator and figure."""
    import torch

    from vision.models import load_backbone
    from vision.sampling import MoHPipeline, checkpoint_dir, grid_image, load_sampler

    n, steps = whole_number(n, "images", 1, MAX_IMAGES), whole_number(steps, "DDIM steps", 1, MAX_STEPS)
    seed = whole_number(seed, "seed", 0, SEED_MAX)
    ckpt_dir = checkpoint_dir(ckpt)
    model = load_backbone(ckpt_dir)
    out = MoHPipeline(model, load_sampler(ckpt_dir, "ddim"))(batch_size=n, num_inference_steps=steps,
                                                   generator=torch.Generator().manual_seed(seed),
                                                   return_intermediates=True)
    final = grid_image(out.images)
    frames = [grid_image(((x + 1) / 2).transpose(0, 2, 3, 1)) for x in out.intermediates]
    rows = [[i + 1, r["timestep"], r.get("depth", float("nan")), " ".join(map(str, r.get("levels", []))),
             r.get("transform", -1), r["sample_layers"]] for i, r in enumerate(out.trace)]
    return final, frames, rows, _plot(out.trace, getattr(model, "transforms", None))


def run_sample(ckpt: str, n, steps, seed):
    """The tab's request: :func:`sample_with_trace` of an allowed checkpoint, or the page message
    (a string) saying what to do when the request cannot be served; never raw exception text."""
    try:
        if not isinstance(ckpt, str) or not ckpt.strip() or "\x00" in ckpt:
            raise InputError("enter a shipped model's name (moh-fmnist) or the directory of a trained checkpoint "
                             "(moh train --out DIR, or make demo)")
        return sample_with_trace(str(allowed_checkpoint(ckpt)), n, steps, seed)
    except MoeAppsError as exc:
        return f"**error:** {exc}"
    except MemoryError:
        return "**error:** not enough memory for this request; choose fewer images or steps"
    except Exception:  # a bug: logged for the operator, a plain message for the page
        log.exception("vision tab: sampling failed")
        return ("**error:** sampling failed unexpectedly; check that the checkpoint was written by `moh train` "
                "and try again (details are in the server log)")


def _plot(trace, transforms):
    # a bare Figure, not pyplot: concurrent requests must not share pyplot's global figure list
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 2.6))
    ax = fig.subplots()
    steps = np.arange(1, len(trace) + 1)
    ax.plot(steps, [r["sample_layers"] for r in trace], "s-", label="Mamba blocks run / image")
    if trace and "depth" in trace[0]:
        ax.plot(steps, [r["depth"] for r in trace], "o--", label="scan depth")
        ax.plot(steps, [len(r["levels"]) for r in trace], "^:", label="levels used")
    ax.set_xlabel("denoising step (noise -> image)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _served(img: np.ndarray) -> str:
    """A grid or frame as a PNG file that never changes while served (common.images.served_png)."""
    return served_png(img[..., 0] if img.ndim == 3 and img.shape[-1] == 1 else img)


def build_tab() -> None:
    """Create the vision tab's components inside an open ``gr.Tab`` context."""
    import gradio as gr

    gr.Markdown(
        "### MoH: Mamba diffusion with Mixture-of-Hierarchical experts\n"
        "A timestep-conditioned router picks token-grid levels, a feature-transform expert and the "
        "scan depth at every denoising step. Fashion-MNIST samples come from the shipped model `moh-fmnist` "
        "(12,000 steps); its plain-Mamba baseline `mamba-fmnist` was trained with the same recipe. The Sweet "
        "Home 3D icon model is the one `make demo` trains; a checkpoint of your own (`moh train --out DIR`) "
        "can be typed into the box."
    )
    with gr.Row():
        dataset = gr.Dropdown(list(DATASETS), value=DATASETS[0], label="dataset", elem_id="moh-dataset")
        ckpt = gr.Textbox(value=default_checkpoint(), label="shipped model or checkpoint directory",
                          elem_id="moh-ckpt")
        n = gr.Slider(1, 64, value=16, step=1, label="images")
        steps = gr.Slider(2, 50, value=25, step=1, label="DDIM steps")
        seed = gr.Number(value=0, precision=0, label="seed")
    run = gr.Button("Sample", variant="primary", elem_id="moh-sample")
    status = gr.Markdown(elem_id="moh-status")
    frames_state = gr.State([])
    with gr.Row():
        final = gr.Image(label="samples", type="filepath", elem_id="moh-final")
        with gr.Column():
            step = gr.Slider(1, 50, value=1, step=1, label="step through denoising (predicted clean images)",
                             elem_id="moh-step")
            frame = gr.Image(label="prediction at this step", type="filepath")
    trace = gr.Dataframe(headers=["step", "timestep", "depth", "levels", "transform", "blocks/image"],
                         label="router choices per step", elem_id="moh-trace", interactive=False)
    plot = gr.Plot(label="compute per step")

    def on_sample(ckpt_v, n_v, steps_v, seed_v):
        result = run_sample(ckpt_v, n_v, steps_v, seed_v)
        if isinstance(result, str):
            return (None, [], None, None, result, gr.update())
        g, frames, rows, fig = result
        msg = f"sampled {int(float(n_v))} images in {len(rows)} steps"
        return (_served(g), frames, rows, fig, msg,
                gr.update(maximum=len(frames), value=len(frames)))

    def on_step(frames, k):
        if not frames:
            return None
        return _served(frames[int(min(max(k, 1), len(frames))) - 1])

    def on_dataset(name):
        try:
            return default_checkpoint(name)
        except InputError:
            return gr.update()  # a name outside the dropdown (an API call) leaves the path as it is

    dataset.change(on_dataset, dataset, ckpt)
    run.click(on_sample, [ckpt, n, steps, seed], [final, frames_state, trace, plot, status, step],
              api_name="moh_sample").then(
        on_step, [frames_state, step], frame)
    step.change(on_step, [frames_state, step], frame)


if __name__ == "__main__":
    import gradio as gr

    with gr.Blocks() as app, gr.Tab("vision"):
        build_tab()
    app.launch()
