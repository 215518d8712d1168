"""The demo gallery that ships beside the ``moa3cir-fmnist`` weights, and how well a model obeys
plain requests on it.

The gallery is the controlled test split of the built benchmark (``moa3cir build-data``): every
product's image, description and attribute labels in one ``gallery.npz`` (uint8 images, no
pickle), so the hub's retrieval tab searches real products with no build step and no training.

    save_gallery(split, "gallery.npz")       # a CIRSplit with descriptions and attributes
    gallery = load_gallery("gallery.npz")    # a CIRSplit (no triplets)
    report = obedience(model, gallery)       # does the top-1 have the requested colour / pattern?

``obedience`` asks, for every product of the gallery and every colour the set knows other than the
product's own, "make it <colour>" (is the top-1 of that colour?) and "make it <colour> with
stripes" (is the top-1 striped, and of that colour?), and every step the product can take
("make it darker", ..., "a lighter one in <colour>": is the top-1 a level darker / lighter / more /
less colourful than the product, and of that colour?), each with the product's description, as the
hub does; ``scripts/ship_retrieval.py`` commits the result.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from common.errors import DataError
from common.io import atomic_write

from .data import CIRSplit, Triplet
from .render import ATTRIBUTES, GROUPS

GALLERY_FILE = "gallery.npz"
COLOUR_REQUEST = "make it {colour}"
STRIPES_REQUEST = "make it {colour} with stripes"
STEP_REQUESTS = {("lightness", -1): "make it darker", ("lightness", 1): "make it lighter",
                 ("saturation", 1): "make it more colourful", ("saturation", -1): "make it less colourful"}
STEP_IN_COLOUR = "a {step} one in {colour}"  # lightness steps only: "a lighter one in red"


def save_gallery(split: CIRSplit, path: str | os.PathLike) -> Path:
    """Write the products of ``split`` (ids, images, descriptions, attributes) to ``path`` (npz)."""
    if split.descriptions is None or split.attributes is None:
        raise DataError(f"{split.name}: a demo gallery needs descriptions and attribute labels")
    path = Path(path)
    with atomic_write(path, "wb") as f:
        np.savez_compressed(
            f, ids=np.array(split.ids), images=np.ascontiguousarray(split.images, np.uint8),
            descriptions=np.array([split.descriptions.get(i, "") for i in split.ids]),
            attributes=split.attributes.astype(np.int16), groups=np.array(GROUPS))
    return path


def load_gallery(path: str | os.PathLike, name: str = "gallery") -> CIRSplit:
    """The products of a ``gallery.npz`` as a :class:`~retrieval.data.CIRSplit` without triplets;
    DataError (one line) when the file is missing, not a gallery or made for other attribute groups."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            ids, images = [str(i) for i in z["ids"]], z["images"]
            descriptions, attributes, groups = z["descriptions"], z["attributes"].astype(np.int64), z["groups"]
    except FileNotFoundError:
        raise DataError(f"no demo gallery at {path}") from None
    except (OSError, KeyError, ValueError) as exc:
        raise DataError(f"{path} is not a demo gallery ({exc})") from None
    if [str(g) for g in groups] != GROUPS:
        raise DataError(f"{path} labels the groups {list(groups)}, this version knows {GROUPS}")
    if images.ndim != 4 or images.shape[0] != len(ids) or images.shape[-1] != 3 or len(attributes) != len(ids):
        raise DataError(f"{path}: images {images.shape} and attributes {attributes.shape} do not match {len(ids)} ids")
    return CIRSplit(name=name, split="test", ids=ids, images=images.astype(np.uint8), triplets=[], galleries={},
                    descriptions=dict(zip(ids, (str(d) for d in descriptions), strict=True)),
                    attributes=attributes)


def obedience_requests(gallery: CIRSplit, products: list[str] | None = None) -> list[Triplet]:
    """The requests ``obedience`` asks: for each product (of ``products``, default all) and each
    colour other than its own, the
    colour request and the colour-with-stripes request (``Triplet.target`` is the product itself,
    unused; ``changed`` names the groups the request sets)."""
    col = GROUPS.index("colour")
    out = []
    for i in gallery.ids if products is None else products:
        own = gallery.attributes[gallery.index[i], col]
        for c, colour in enumerate(ATTRIBUTES["colour"]):
            if c == own:
                continue
            out.append(Triplet(i, i, COLOUR_REQUEST.format(colour=colour), "all", ["colour"]))
            out.append(Triplet(i, i, STRIPES_REQUEST.format(colour=colour), "all", ["colour", "pattern"]))
    return out


def step_requests(gallery: CIRSplit, products: list[str] | None = None) -> list[tuple[Triplet, str, int, int]]:
    """The relative requests ``obedience`` asks: ``(request, group, step, colour)`` for each product
    and each step its level allows, alone (colour -1) and, for lightness, in every other colour."""
    out = []
    for i in gallery.ids if products is None else products:
        a = gallery.attributes[gallery.index[i]]
        for (group, step), text in STEP_REQUESTS.items():
            if not 0 <= a[GROUPS.index(group)] + step < len(ATTRIBUTES[group]):
                continue
            out.append((Triplet(i, i, text, "all", [group]), group, step, -1))
            if group == "lightness":
                out += [(Triplet(i, i, STEP_IN_COLOUR.format(step=text.split()[-1], colour=colour), "all",
                                 ["colour", group]), group, step, c)
                        for c, colour in enumerate(ATTRIBUTES["colour"]) if c != a[GROUPS.index("colour")]]
    return out


def obedience(model, gallery: CIRSplit, products: list[str] | None = None, device: str = "auto") -> dict:
    """Top-1 compliance of ``model`` on :func:`obedience_requests` of ``products`` (default: every
    product), searched over the whole ``gallery``.

    Returns ``{"products", "colour_requests": {"n", "top1_colour"}, "stripes_requests": {"n",
    "top1_striped", "top1_colour", "top1_both"}, "per_colour": {colour: top1_colour share},
    "top1_is_reference", "step_requests": {request: {"n", "top1_obeys"}}, "step_in_colour": {"darker" |
    "lighter": {"n", "top1_obeys", "top1_colour", "top1_both"}}}`` (:func:`step_requests`), shares in [0, 1]."""
    from dataclasses import replace

    from .embed import embed_gallery, embed_queries
    from .features import prepare_features

    requests = obedience_requests(gallery, products)
    split = replace(gallery, triplets=requests)
    f = prepare_features(split)
    g = embed_gallery(model, f, device=device)
    q, _ = embed_queries(model, f, device=device)
    top1 = (q @ g.T).argmax(1)
    col, pat = GROUPS.index("colour"), GROUPS.index("pattern")
    striped = ATTRIBUTES["pattern"].index("striped")
    want = np.array([ATTRIBUTES["colour"].index(t.text.split()[2]) for t in requests])
    got_colour = gallery.attributes[top1, col] == want
    got_striped = gallery.attributes[top1, pat] == striped
    stripes = np.array(["pattern" in t.changed for t in requests])
    top1_is_reference = top1 == np.array(gallery.rows([t.reference for t in requests]))

    def share(mask: np.ndarray) -> float:
        return round(float(mask.mean()), 4) if mask.size else float("nan")

    per_colour = {c: share(got_colour[~stripes & (want == k)]) for k, c in enumerate(ATTRIBUTES["colour"])}
    steps = step_requests(gallery, products)
    f = prepare_features(replace(gallery, triplets=[t for t, *_ in steps]))
    top1 = (embed_queries(model, f, device=device)[0] @ g.T).argmax(1)
    ref_rows = np.array(gallery.rows([t.reference for t, *_ in steps]))
    group_of, step_of, colour_of = (np.array(x) for x in zip(*[s[1:] for s in steps], strict=True))
    moved = np.array([step * (gallery.attributes[t, GROUPS.index(grp)] - gallery.attributes[r, GROUPS.index(grp)]) > 0
                      for t, r, grp, step in zip(top1, ref_rows, group_of, step_of, strict=True)])
    coloured = gallery.attributes[top1, col] == colour_of
    alone = {text: {"n": int(m.sum()), "top1_obeys": share(moved[m])} for (grp, st), text in STEP_REQUESTS.items()
             for m in [(group_of == grp) & (step_of == st) & (colour_of < 0)]}
    in_colour = {text.split()[-1]: {"n": int(m.sum()), "top1_obeys": share(moved[m]), "top1_colour": share(coloured[m]),
                                    "top1_both": share(moved[m] & coloured[m])}
                 for (grp, st), text in STEP_REQUESTS.items() if grp == "lightness"
                 for m in [(group_of == grp) & (step_of == st) & (colour_of >= 0)]}
    return {
        "products": len(gallery.ids if products is None else products),
        "colour_requests": {"n": int((~stripes).sum()), "top1_colour": share(got_colour[~stripes])},
        "stripes_requests": {"n": int(stripes.sum()), "top1_striped": share(got_striped[stripes]),
                             "top1_colour": share(got_colour[stripes]),
                             "top1_both": share(got_colour[stripes] & got_striped[stripes])},
        "per_colour": per_colour,
        "top1_is_reference": share(top1_is_reference),
        "step_requests": alone,
        "step_in_colour": in_colour,
    }
