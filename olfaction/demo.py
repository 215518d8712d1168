"""Gradio tab: two mixtures in -> perceptual distance, top odour labels, RDKit drawings of the
components and per-component attention.

The model, a :class:`~olfaction.predictor.MixturePredictor`, is the shipped ``mixscent-dream``
(``common.shipped``; the predictor the README's numbers describe), or the directory
``$MIXSCENT_MODEL`` names (``mixscent train --out``). Its label network is trained on all of GS-LF.

Safe under concurrent requests: the drawings reach gradio as PNG files written once, atomically,
under a content-hash name in a per-process temp folder (:func:`common.images.served_png`; gradio copies a file into its cache atomically, while
a PIL image it rewrites in place under its content hash, so two requests drawing the same mixture
rewrote the file a third was serving: "Too little data for declared Content-Length"), and every
error is a message on the page (:func:`compare`), never exception text."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from common.cache import LoaderCache
from common.errors import MoeAppsError
from common.images import served_png

from .data import DATASETS, parse_mixture_text

EXAMPLES = {
    "citrus-like (limonene, citral, linalool)": "CC1=CCC(CC1)C(=C)C;CC(C)=CCCC(C)=CC=O;CC(C)=CCCC(C)(O)C=C",
    "vanilla-like (vanillin, ethyl vanillin)": "COc1cc(C=O)ccc1O;CCOc1cc(C=O)ccc1O",
    "fruity esters (isoamyl acetate, ethyl butyrate)": "CC(C)CCOC(C)=O;CCCC(=O)OCC",
    "single: phenylethyl alcohol": "OCCc1ccccc1",
}


DEFAULT_DATASET = "Snitz 1"
SHIPPED_MODEL = "mixscent-dream"
MODEL_ENV = "MIXSCENT_MODEL"


def model_dir() -> Path:
    """The tab's predictor: ``$MIXSCENT_MODEL`` when set, else the shipped one (verified); a
    one-line CheckpointError that says which command makes one otherwise."""
    from common.errors import CheckpointError
    from common.shipped import resolve_checkpoint

    chosen = os.environ.get(MODEL_ENV)
    if chosen and not (Path(chosen) / "config.json").is_file():
        raise CheckpointError(f"no predictor at {chosen} (${MODEL_ENV}): make one with `mixscent train --split "
                              f"random_cv0 --out {chosen}`, or unset {MODEL_ENV} for the shipped {SHIPPED_MODEL}")
    return Path(chosen) if chosen else resolve_checkpoint(SHIPPED_MODEL)


_PREDICTOR = LoaderCache(2)


def get_predictor():
    """The predictor of :func:`model_dir`, loaded once (thread-safe; at most two paths kept) onto
    the ``auto`` device (a GPU when present)."""
    from common.device import resolve_device

    from .predictor import MixturePredictor

    path = model_dir()
    return _PREDICTOR.get(path, lambda: MixturePredictor.from_pretrained(path).to(resolve_device("auto")))


def draw_mixture(components, attention: dict[str, float] | None = None):
    """PIL grid image of the components, legends with their attention weight."""
    from rdkit import Chem
    from rdkit.Chem import Draw

    mols = [Chem.MolFromSmiles(s) for s in components]
    legends = [f"{attention[s]:.2f}" if attention else s[:24] for s in components]
    return Draw.MolsToGridImage(mols, molsPerRow=min(4, len(mols)), subImgSize=(200, 160), legends=legends)


def analyse(text_a: str, text_b: str, dataset: str = DEFAULT_DATASET) -> dict:
    """Distance (as measured in experiment ``dataset``), attentions and top labels for two
    ``;``-separated SMILES mixtures."""
    a = parse_mixture_text(text_a, "mixture 1")
    b = parse_mixture_text(text_b, "mixture 2")
    pred = get_predictor()
    att_a, att_b = pred.attention(a), pred.attention(b)
    return {
        "distance": float(pred.predict_distance([a], [b], [dataset])[0]),
        "attention_a": att_a,
        "attention_b": att_b,
        "labels_a": pred.top_labels(a),
        "labels_b": pred.top_labels(b),
        "image_a": draw_mixture(a, att_a),
        "image_b": draw_mixture(b, att_b),
    }


log = logging.getLogger(__name__)


def compare(text_a: str, text_b: str, dataset: str = DEFAULT_DATASET) -> tuple[str, str | None, str | None]:
    """The tab's answer: ``(markdown, image path 1, image path 2)``; bad input and any failure
    are a page message (``**error:** ...``) with no images, never exception text."""
    try:
        if dataset not in DATASETS:
            raise MoeAppsError(f"unknown experiment {dataset!r} (choose from {', '.join(DATASETS)})")
        r = analyse(text_a, text_b, dataset)
        paths = served_png(r["image_a"]), served_png(r["image_b"])
    except MoeAppsError as exc:
        return f"**error:** {' '.join(str(exc).split())}", None, None
    except Exception:  # a bug or a broken model: logged for the operator, a plain message for the page
        log.exception("olfaction comparison failed")
        return "**error:** the comparison failed on the server (the log has the details)", None, None
    lines = [f"**distance: {r['distance']:.3f}**", ""]
    for side in ("a", "b"):
        labels = ", ".join(f"{n} ({p:.2f})" for n, p in r[f"labels_{side}"]) or "(no label head)"
        att = ", ".join(f"`{s}` {w:.2f}" for s, w in sorted(r[f"attention_{side}"].items(), key=lambda t: -t[1]))
        lines += [f"mixture {'1' if side == 'a' else '2'}: top labels {labels}", f"attention: {att}", ""]
    return "\n".join(lines), paths[0], paths[1]


def build_tab() -> None:
    """Create the olfaction tab inside an open ``gr.Tab`` context."""
    import gradio as gr

    gr.Markdown(
        "### MixScentNet: how different do two odour mixtures smell?\n"
        "Components as `;`-separated SMILES. Distance in [0, 1] (higher = more different)."
    )
    with gr.Row():
        with gr.Column():
            pick_a = gr.Dropdown(list(EXAMPLES), label="example mixture 1", value=list(EXAMPLES)[0])
            box_a = gr.Textbox(label="mixture 1", value=EXAMPLES[list(EXAMPLES)[0]], elem_id="olf_mix1")
        with gr.Column():
            pick_b = gr.Dropdown(list(EXAMPLES), label="example mixture 2", value=list(EXAMPLES)[1])
            box_b = gr.Textbox(label="mixture 2", value=EXAMPLES[list(EXAMPLES)[1]], elem_id="olf_mix2")
    dataset = gr.Dropdown(DATASETS, value=DEFAULT_DATASET, label="experiment (scale of the distance)")
    run = gr.Button("Compare", variant="primary", elem_id="olf_run")
    result = gr.Markdown(elem_id="olf_result")
    with gr.Row():
        img_a = gr.Image(label="mixture 1 (attention)", type="filepath")
        img_b = gr.Image(label="mixture 2 (attention)", type="filepath")

    pick_a.change(lambda k: EXAMPLES[k], pick_a, box_a)
    pick_b.change(lambda k: EXAMPLES[k], pick_b, box_b)

    run.click(compare, [box_a, box_b, dataset], [result, img_a, img_b], api_name="olfaction_compare")
