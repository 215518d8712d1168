"""Gradio tab: choose a category, a number of parts and optionally a text, generate with MoCA,
view and download the GLB. A blank text box means no text conditioning."""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from pathlib import Path

from common.allowlist import check_allowed_path
from common.cache import LoaderCache
from common.cli import SEED_MAX, whole_number
from common.errors import InputError, MoeAppsError
from generation3d.limits import MAX_SAMPLING_STEPS, MAX_SCENE_PARTS

log = logging.getLogger(__name__)

CKPT_ENV = "MOCA_DEMO_CKPT"
SHIPPED = "moca-furniture"  # common.shipped name of the real-furniture pipeline


def _is_shipped(ckpt: str) -> bool:
    from common.shipped import shipped_models

    return ckpt in shipped_models()


def default_checkpoint() -> str:
    """``$MOCA_DEMO_CKPT``; else the shipped real-furniture pipeline ``moca-furniture``
    (``common.shipped``) when it is shipped; else the model of ``moca train --preset demo``
    (``preset.demo_real_model_dir``) when it has been trained; else the procedural pipeline left by
    ``make demo`` (``generation3d.quick``)."""
    if os.environ.get(CKPT_ENV):
        return os.environ[CKPT_ENV]
    if _is_shipped(SHIPPED):
        return SHIPPED
    from common.data_dir import cache_dir
    from generation3d.preset import demo_real_model_dir

    real = demo_real_model_dir()
    if (real / "generator" / "config.json").is_file():
        return str(real)
    return str(cache_dir("generation3d") / "demo_model")


def checkpoint_categories(ckpt: str) -> list[str]:
    """The categories a checkpoint (a pipeline directory or a shipped name) was trained on, read
    from its config without loading weights; all of ``data.CATEGORIES`` when it cannot be read
    (the tab then reports the error)."""
    from common.pretrained import checkpoint_info
    from generation3d.data import CATEGORIES

    try:
        if _is_shipped(ckpt):
            return list(checkpoint_info(ckpt).config.get("categories") or CATEGORIES)
        return list(checkpoint_info(Path(ckpt) / "generator").extra.get("categories") or CATEGORIES)
    except (MoeAppsError, OSError):
        return list(CATEGORIES)


def describe_model(ckpt: str) -> str:
    """One markdown sentence saying what the model ``ckpt`` is (the tab's default, or any)."""
    from common.data_dir import cache_dir
    from generation3d.preset import demo_real_model_dir

    if _is_shipped(ckpt):
        from common.shipped import read_manifest, shipped_models

        try:
            meta = read_manifest(shipped_models()[ckpt])
        except MoeAppsError as exc:
            return f"Model `{ckpt}`: {exc}"
        m = meta["metrics"]
        fidelity = (f"; category fidelity {m['fidelity']:.2f} on {m.get('n_shapes', '?')} held-out shapes"
                    if isinstance(m.get("fidelity"), (int, float)) else "")
        return (f"Model `{ckpt}`: the shipped MoCA pipeline, trained by `{meta['command']}` for {meta['steps']} "
                f"steps on {meta['data'].split(' (')[0]}{fidelity} (`generation3d/weights/{ckpt}/manifest.json`).")
    path = Path(ckpt)
    if path == demo_real_model_dir():
        return (f"Model `{ckpt}`: real furniture, the 2400-step `moca train --preset demo` recipe "
                "(not the shipped model).")
    if path == cache_dir("generation3d") / "demo_model":
        return (f"Model `{ckpt}`: the procedural chairs, tables, shelves and lamps of `make demo` (a small quick "
                "model); `moca train --preset demo` trains one on real furniture in about 15 min.")
    return f"Model `{ckpt}`: a checkpoint directory."


MAX_PIPELINES = 2
# (pipeline, lock) per resolved checkpoint path; the lock serialises sampling on one pipeline, whose
# attention layers keep the last forward's routing that ``generate`` reads back.
_PIPELINES = LoaderCache(MAX_PIPELINES)


def _load_pipeline(ckpt: str):
    from generation3d.sampling import MoCAPipeline

    return MoCAPipeline.load(ckpt), threading.Lock()


def allowed_checkpoint(ckpt: str) -> Path | str:
    """The name of a shipped model as it is (``common.shipped`` verifies it when it loads), else
    ``ckpt`` resolved, if it lies inside the hub's allowed roots (``common.allowlist``) or the
    operator's ``$MOCA_DEMO_CKPT``; raises ``InputError`` otherwise, before anything is read."""
    if isinstance(ckpt, str) and _is_shipped(ckpt):
        return ckpt
    return check_allowed_path(ckpt, "checkpoint directory", extra_roots=[os.environ.get(CKPT_ENV, "")])


def generate(ckpt: str, category: str, n_parts: int, seed: int, steps: int, out_dir: str | None = None,
             text: str = ""):
    """Returns ``(glb path, preview png path, status markdown, routing table rows)``; a blank
    ``text`` means no text conditioning. Every call writes into its own new folder (``out_dir``
    when given), so concurrent calls share no output file."""
    from common.io import write_csv
    from generation3d.export import export_meshes
    from generation3d.library import credit_line
    from generation3d.render import render_preview
    from generation3d.sampling import FAR_TEXT_COSINE

    n_parts = whole_number(n_parts, "number of parts", 1, MAX_SCENE_PARTS)
    seed = whole_number(seed, "seed", 0, SEED_MAX)
    steps = whole_number(steps, "sampling steps", 1, MAX_SAMPLING_STEPS)
    if not isinstance(category, str) or not isinstance(text or "", str):
        raise InputError("category and text must be text")
    key = ckpt if _is_shipped(ckpt) else str(Path(ckpt).resolve())
    pipe, lock = _PIPELINES.get(key, lambda: _load_pipeline(ckpt))
    text = (text or "").strip() or None
    with lock:
        g = pipe.sample(category, int(n_parts), seed=int(seed), steps=int(steps), text=text)[0]
        routing = pipe.gen.routing()
    meshes, credits = pipe.meshes(g)
    out = Path(out_dir or tempfile.mkdtemp(prefix="moca_"))
    glb = export_meshes(meshes, out / f"{category}_{int(n_parts)}parts_seed{int(seed)}.glb")
    png = out / (glb.stem + ".png")
    renderer = render_preview(meshes, png, title=f"{category}, {int(n_parts)} parts")
    rows = []
    if routing and "indices" in routing[-1]:
        idx = routing[-1]["indices"][0]
        rows = [[p, " ".join(str(int(j)) for j in idx[p])] for p in range(min(len(idx), 32))]
    status = (f"generated {int(n_parts)} parts ({pipe.gen.config.attention} attention, top-k {pipe.gen.config.top_k}, "
              f"{pipe.gen.config.n_compressed} compressed tokens per other part; {renderer} preview)")
    if credits:
        status += "\n\n" + credit_line(credits, write_csv(out / f"{glb.stem}_ATTRIBUTION.csv", credits).name)
    else:
        status += "\n\nparts drawn from the decoded points (this pipeline has no component library)"
    if text is not None:
        near, sim = pipe.nearest_description(text)
        status += f"\n\ntext {text!r}: nearest training description *{near}* (cosine {sim:.2f})"
        if sim < FAR_TEXT_COSINE:
            status += " (unlike every training description: expect the category and part count to dominate)"
    return str(glb), str(png), status, rows


def generate_for_page(ckpt, category, n_parts, seed, steps, text):
    """The tab's handler: ``(viewer GLB, preview PNG, download GLB, status markdown, routing rows)``.
    Every failure comes back as a status message saying what to do, never raw exception text:
    bad input and checkpoint problems name themselves (``MoeAppsError``); anything else is logged
    with its traceback for the operator."""
    try:
        glb, png, msg, rows = generate(str(allowed_checkpoint(str(ckpt))), category, n_parts, seed, steps, text=text)
    except MoeAppsError as exc:
        return None, None, None, f"**error:** {' '.join(str(exc).split())}", []
    except Exception:  # a bug or a resource failure: the page gets advice, the log the traceback
        log.exception("moca tab: generation failed")
        return None, None, None, ("**error:** the shape could not be generated from these inputs; check the "
                                  "checkpoint directory and the numbers, or try another seed"), []
    return glb, png, glb, msg, rows


def build_tab() -> None:
    """Create the generation3d tab's components inside an open ``gr.Tab`` context."""
    import gradio as gr

    from generation3d.preset import sample_previews

    default = default_checkpoint()
    gr.Markdown(
        "### MoCA: compositional 3D generation with component-level sparse attention\n"
        "Each part attends at full resolution to its router-selected top-k parts and to a few compressed "
        f"tokens of every other part. {describe_model(default)} Enter another shipped model's name or a "
        "checkpoint directory below.", elem_id="moca-model"
    )
    with gr.Row():
        ckpt = gr.Textbox(value=default, label="shipped model or checkpoint directory", elem_id="moca-ckpt")
        category = gr.Dropdown(checkpoint_categories(default) + ["none"], value="chair", label="category",
                               elem_id="moca-category")
        n_parts = gr.Slider(2, 96, value=12, step=1, label="number of parts", elem_id="moca-parts")
        seed = gr.Number(value=0, precision=0, label="seed")
        steps = gr.Slider(2, 50, value=12, step=1, label="sampling steps")
    text = gr.Textbox(value="", label="text (optional, e.g. 'a chair with arms and a slatted back'; blank = none)",
                      elem_id="moca-text")
    run = gr.Button("Generate", variant="primary", elem_id="moca-generate")
    status = gr.Markdown(elem_id="moca-status")
    with gr.Row():
        viewer = gr.Model3D(label="generated shape (GLB)", elem_id="moca-viewer")
        preview = gr.Image(label="preview", elem_id="moca-preview")
    download = gr.File(label="download GLB", elem_id="moca-download")
    routing = gr.Dataframe(headers=["part", "top-k parts attended (last layer)"], label="router choices", elem_id="moca-routing")
    previews = sample_previews(default)
    if previews:  # the preset's samples, one per category, drawn when the model was trained
        gr.Gallery(previews, label=f"samples of this model, one per category ({default})", columns=6,
                   elem_id="moca-samples")

    def _go(ck, cat, n, s, st, txt):
        return generate_for_page(ck, cat, n, s, st, txt)

    run.click(_go, [ckpt, category, n_parts, seed, steps, text], [viewer, preview, download, status, routing],
              api_name="moca_generate")
