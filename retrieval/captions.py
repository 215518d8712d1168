"""Caption text of the synthetic e-commerce CIR benchmark: item descriptions, templated
modification texts, FashionIQ-style relative captions of two annotators (the hard preset), and
the splitting of texts into the model's clause / sentence tokens.

Item descriptions (title + attribute text) use varied wording, random order, omissions and typos;
modification texts are built from clauses ("make it red", "with bold stripes") joined by ", " /
" and "; relative captions ("is darker", "has bigger dots") each name only part of a change.
The relative groups (lightness, saturation) are asked for by a step ("make it darker", "a lighter
blue one"); their phrasings come in two disjoint sets, ``"train"`` and ``"eval"`` (``PHRASINGS``),
so a test split asks with wordings no model trained on.
"""

from __future__ import annotations

import numpy as np

from .render import COLOURS, GROUPS, RELATIVE_GROUPS, Attributes

SYNONYMS = {
    "colour": {
        "red": ["red", "scarlet", "cherry red"],
        "orange": ["orange", "tangerine"],
        "yellow": ["yellow", "mustard", "lemon"],
        "green": ["green", "grass green"],
        "teal": ["teal", "turquoise"],
        "blue": ["blue", "royal blue", "cobalt"],
        "purple": ["purple", "violet"],
        "pink": ["pink", "rose"],
    },
    "pattern": {
        "solid": ["plain", "solid-colour", "solid"],
        "striped": ["striped", "stripy"],
        "checked": ["checked", "plaid", "check"],
        "dotted": ["polka-dot", "dotted"],
    },
    "scale": {"fine": ["fine", "small", "thin"], "bold": ["bold", "large", "wide"]},
    "finish": {
        "matte": ["matte", "flat"],
        "glossy": ["glossy", "shiny", "satin"],
        "faded": ["faded", "washed-out", "vintage wash"],
        "dark": ["dark", "deep-toned"],
    },
    "fabric": {
        "cotton": ["cotton", "100% cotton"],
        "linen": ["linen", "linen-blend"],
        "wool": ["wool", "merino wool"],
        "silk": ["silk", "pure silk"],
    },
    "category": {
        "t-shirt": ["t-shirt", "tee", "top"],
        "trousers": ["trousers", "pants"],
        "pullover": ["pullover", "sweater", "jumper"],
        "dress": ["dress", "frock"],
        "coat": ["coat", "jacket"],
        "sandals": ["sandals", "sandal"],
        "shirt": ["shirt", "button-down shirt"],
        "sneakers": ["sneakers", "trainers"],
        "bag": ["bag", "handbag", "tote"],
        "ankle boots": ["ankle boots", "booties"],
    },
}
_MOTIF = {"striped": "stripes", "checked": "checks", "dotted": "dots"}
_FILLER = [
    "Great for everyday wear.",
    "Free returns.",
    "Machine washable.",
    "Regular fit.",
    "New season.",
    "Bestseller!",
    "Limited stock.",
    "Pairs well with anything.",
]


# (group, step) -> comparatives; the templates around them differ between the phrasing sets
COMPARATIVES = {
    ("lightness", -1): ["darker", "deeper"],
    ("lightness", 1): ["lighter", "paler"],
    ("saturation", 1): ["more colourful", "brighter", "more vivid"],
    ("saturation", -1): ["less colourful", "duller", "more muted"],
}
PHRASINGS = ("train", "eval")
_RELATIVE_TEMPLATES = {
    "train": ["make it {c}", "{c} please", "a {c} shade", "go {c}"],
    "eval": ["I want it {c}", "could it be {c}", "a bit {c}", "the same but {c}"],
}
# one clause naming a colour and a relative step ("a darker blue one"): {c} comparative, {v} colour
_FUSED_TEMPLATES = {
    "train": ["a {c} {v} one", "make it {c} {v}"],
    "eval": ["a {c} one in {v}", "I'd like a {c} {v}"],
}


def _comparative(group: str, ref: Attributes, tgt: Attributes, rng: np.random.Generator) -> str:
    """A comparative for the step relative ``group`` takes from ``ref`` to ``tgt`` ("darker")."""
    i = GROUPS.index(group)
    options = COMPARATIVES[(group, 1 if tgt.as_list()[i] > ref.as_list()[i] else -1)]
    return options[int(rng.integers(len(options)))]


def _typo(word: str, rng: np.random.Generator) -> str:
    if len(word) < 4:
        return word
    i = int(rng.integers(1, len(word) - 2))
    return word[:i] + word[i + 1] + word[i] + word[i + 2 :]


def _syn(group: str, value: str, rng: np.random.Generator) -> str:
    options = SYNONYMS[group][value]
    return options[int(rng.integers(len(options)))]


def describe(attrs: Attributes, rng: np.random.Generator, noise: float = 0.1) -> str:
    """Item description: a title plus attribute sentences, varied wording and some noise.

    With probability ``noise`` each attribute sentence is dropped or gets a typo, and filler
    text is added; the title always names colour and category.
    """
    n = attrs.names()
    cat = _syn("category", n["category"], rng)
    col = _syn("colour", n["colour"], rng)
    pat = "" if n["pattern"] == "solid" and rng.random() < 0.5 else _syn("pattern", n["pattern"], rng)
    title = " ".join(w for w in [col.capitalize(), pat, cat] if w) + "."
    sentences = []
    if n["pattern"] != "solid":
        sentences.append(
            rng.choice(
                [
                    f"Features {_syn('scale', n['scale'], rng)} {_MOTIF[n['pattern']]}.",
                    f"{_syn('scale', n['scale'], rng).capitalize()} {n['pattern']} print.",
                ]
            )
        )
    sentences.append(
        rng.choice(
            [
                f"{_syn('finish', n['finish'], rng).capitalize()} finish.",
                f"Has a {_syn('finish', n['finish'], rng)} look.",
            ]
        )
    )
    sentences.append(
        rng.choice(
            [
                f"Made of {_syn('fabric', n['fabric'], rng)}.",
                f"Material: {_syn('fabric', n['fabric'], rng)}.",
                f"{_syn('fabric', n['fabric'], rng).capitalize()} fabric.",
            ]
        )
    )
    out = []
    for s in sentences:
        r = rng.random()
        if r < noise / 2:
            continue
        if r < noise:
            words = s.split(" ")
            j = int(rng.integers(len(words)))
            words[j] = _typo(words[j], rng)
            s = " ".join(words)
        out.append(s)
    rng.shuffle(out)
    if rng.random() < noise * 3:
        out.append(str(rng.choice(_FILLER)))
    return " ".join([title] + out)


def modification_clause(group: str, ref: Attributes, tgt: Attributes, rng: np.random.Generator,
                        phrasing: str = "train") -> str:
    """One clause saying how attribute ``group`` changes from ``ref`` to ``tgt`` (a relative group: by
    a step, in the ``phrasing`` set's wording)."""
    if group in RELATIVE_GROUPS:
        templates = _RELATIVE_TEMPLATES[phrasing]
        return templates[int(rng.integers(len(templates)))].format(c=_comparative(group, ref, tgt, rng))
    new = tgt.names()[group]
    old = ref.names()[group]
    if group == "colour":
        v = _syn("colour", new, rng)
        return str(
            rng.choice([f"make it {v}", f"in {v}", f"change the colour to {v}", f"{v} instead of {old}"])
        )
    if group == "category":
        v = _syn("category", new, rng)
        return str(rng.choice([f"as {v}", f"make it {v}", f"I want {v} instead"]))
    if group == "pattern":
        if new == "solid":
            return str(rng.choice(["plain, no pattern", "make it solid-colour", "remove the print"]))
        return str(
            rng.choice(
                [f"with {_MOTIF[new]}", f"make it {_syn('pattern', new, rng)}", f"add a {new} pattern"]
            )
        )
    if group == "scale":
        v = _syn("scale", new, rng)
        motif = _MOTIF[tgt.names()["pattern"]]
        return str(
            rng.choice(
                [
                    f"with {v} {motif}",
                    f"make the {motif} {v}er" if v in ("bold", "small") else f"{v} {motif}",
                    f"{'bigger' if new == 'bold' else 'smaller'} {motif}",
                ]
            )
        )
    if group == "finish":
        v = _syn("finish", new, rng)
        return str(rng.choice([f"{v} finish", f"make it look {v}", f"with a {v} look"]))
    if group == "fabric":
        v = _syn("fabric", new, rng)
        return str(rng.choice([f"in {v}", f"made of {v}", f"switch the fabric to {v}"]))
    raise ValueError(f"unknown attribute group {group!r}")


def modification_text(ref: Attributes, tgt: Attributes, groups: list[str], rng: np.random.Generator,
                      phrasing: str = "train") -> str:
    """Modification text naming the changes of ``groups`` (other differences go unmentioned). A colour
    and a relative step are said in one clause half of the time ("a darker blue one")."""
    if not groups:
        raise ValueError("a modification needs at least one attribute group")
    relative = [g for g in groups if g in RELATIVE_GROUPS]
    if "colour" in groups and relative and rng.random() < 0.5:
        fused = _FUSED_TEMPLATES[phrasing][int(rng.integers(2))].format(
            c=_comparative(relative[0], ref, tgt, rng), v=_syn("colour", tgt.names()["colour"], rng))
        groups = [g for g in groups if g not in ("colour", relative[0])]
        clauses = [fused] + [modification_clause(g, ref, tgt, rng, phrasing) for g in groups]
        rng.shuffle(clauses)
    else:
        clauses = [modification_clause(g, ref, tgt, rng, phrasing) for g in groups]
    if len(clauses) == 1:
        return clauses[0]
    return ", ".join(clauses[:-1]) + " and " + clauses[-1]


def split_clauses(text: str) -> list[str]:
    """Split a modification text into clauses (the model's text tokens, the router's input) at
    ",", " and " and before " with ", " instead of " and " rather than " ("make it blue with
    stripes" -> "make it blue", "with stripes"; "red instead of teal" -> "red", "instead of teal":
    the value asked for and the value replaced become separate tokens, where one sentence
    embedding of both could not tell which colour is wanted). Never empty."""
    for word in (" with ", " instead of ", " rather than "):
        text = text.replace(word, f",{word}")
    parts = [p.strip() for p in text.replace(" and ", ",").split(",")]
    parts = [p for p in parts if p]
    return parts or [text.strip()]


def split_sentences(text: str) -> list[str]:
    """Split a description into sentences (the model's description tokens). Never empty."""
    parts = [p.strip() for p in text.replace("!", ".").split(".")]
    parts = [p for p in parts if p]
    return parts or [text.strip()]


# ----------------------------------------------------------------------------- hard preset: relative captions

WARM_COLOURS = {"red", "orange", "yellow", "pink"}  # the others (green, teal, blue, purple) are cool

_CATEGORY_HINTS = {
    "t-shirt": ["has short sleeves", "is more casual"],
    "trousers": ["is a pair of pants", "has legs"],
    "pullover": ["is a knit", "is warmer"],
    "dress": ["is one piece", "is longer"],
    "coat": ["is for outdoors", "is heavier"],
    "sandals": ["is open toed", "is more summery"],
    "shirt": ["has buttons", "is more formal"],
    "sneakers": ["is sporty", "has laces"],
    "bag": ["is for carrying things", "has a handle"],
    "ankle boots": ["covers the ankle", "is a boot"],
}
_FINISH_RELATIVE = {
    "matte": ["is less shiny", "is more matte", "has a flat look"],
    "glossy": ["is shinier", "is shiny", "has a satin sheen"],
    "faded": ["is more faded", "looks washed out", "has a faded look"],  # "lighter" is a lightness step
    "dark": ["has a dark finish", "is dark-toned", "looks dark-toned"],
}
_FABRIC_RELATIVE = {
    "cotton": ["looks like cotton", "is cotton"],
    "linen": ["is linen", "looks lighter weight"],
    "wool": ["is wool", "looks warmer"],
    "silk": ["is silk", "looks smoother", "looks softer"],
}
_CHATTER = ["is more fashionable", "looks nicer", "is cuter", "has a similar style", "is prettier"]


def relative_clause(group: str, ref: Attributes, tgt: Attributes, rng: np.random.Generator,
                    disagree: float = 0.15, phrasing: str = "train") -> str:
    """One FashionIQ-style clause about the target relative to the reference (``"is darker"``,
    ``"has bigger stripes"``, ``"is not red"``), often vaguer than :func:`modification_clause`.

    With probability ``disagree`` a colour is named as the neighbouring hue (annotators perceive
    colour differently, more so under a colour cast).
    """
    if group in RELATIVE_GROUPS:
        if phrasing == "train":
            return "is " + _comparative(group, ref, tgt, rng)
        return modification_clause(group, ref, tgt, rng, phrasing)
    new, old = tgt.names()[group], ref.names()[group]
    r = rng.random()
    if group == "colour":
        if r < disagree:
            i = COLOURS.index(new) + int(rng.choice([-1, 1]))
            return f"is more {COLOURS[i % len(COLOURS)]}"
        if r < disagree + 0.15 and (new in WARM_COLOURS) != (old in WARM_COLOURS):
            return str(rng.choice(["has a warmer color", "is warmer toned"] if new in WARM_COLOURS
                                  else ["has a cooler color", "is cooler toned"]))
        if r < disagree + 0.25:
            return f"is not {old}"
        v = _syn("colour", new, rng)
        return str(rng.choice([f"is {v}", f"is {v} colored", f"{v} instead of {old}", f"has a {v} color"]))
    if group == "category":
        if r < 0.35:
            return str(rng.choice(_CATEGORY_HINTS[new]))
        v = _syn("category", new, rng)
        return str(rng.choice([f"is a {v}", f"is more like {v}", f"{v} instead"]))
    if group == "pattern":
        if new == "solid":
            return str(rng.choice(["is plain", "has no pattern", "is solid", "is less busy"]))
        if r < 0.2:
            return str(rng.choice(["has a print", "is patterned", "is busier"]))
        if old != "solid" and r < 0.5:
            return f"has {_MOTIF[new]} instead of {_MOTIF[old]}"
        return str(rng.choice([f"has {_MOTIF[new]}", f"is {_syn('pattern', new, rng)}"]))
    if group == "scale":
        motif = _MOTIF[tgt.names()["pattern"]]
        bigger = new == "bold"
        return str(rng.choice([f"has {'bigger' if bigger else 'smaller'} {motif}",
                               f"the {motif} are {'wider' if bigger else 'thinner'}",
                               f"has a {'larger' if bigger else 'finer'} print"]))
    if group == "finish":
        return str(rng.choice(_FINISH_RELATIVE[new]))
    if group == "fabric":
        return str(rng.choice(_FABRIC_RELATIVE[new]))
    raise ValueError(f"unknown attribute group {group!r}")


def annotator_captions(ref: Attributes, tgt: Attributes, groups: list[str], rng: np.random.Generator,
                       disagree: float = 0.15, chatter: float = 0.2, typo: float = 0.05,
                       phrasing: str = "train") -> list[str]:
    """Two annotators' captions of one triplet, as in FashionIQ: lower case, relative phrasing,
    each naming only part of the change.

    Every group of ``groups`` is described by annotator 1, annotator 2 or both (each annotator
    gets at least one, so together they cover all of ``groups``); each writes their own clause
    (:func:`relative_clause`, so two descriptions of one change can disagree). With probability
    ``chatter`` an annotator adds an uninformative clause ("looks nicer"), with ``typo`` a typo.
    Returns two strings, clauses joined by " and ".
    """
    if not groups:
        raise ValueError("a modification needs at least one attribute group")
    who = [int(rng.choice(3, p=[0.3, 0.3, 0.4])) for _ in groups]  # 0: first, 1: second, 2: both
    for k in (0, 1):
        if not any(w in (k, 2) for w in who):
            who[int(rng.integers(len(who)))] = 2
    captions = []
    for k in (0, 1):
        clauses = [relative_clause(g, ref, tgt, rng, disagree, phrasing) for g, w in zip(groups, who, strict=True)
                   if w in (k, 2)]
        rng.shuffle(clauses)
        if rng.random() < chatter:
            clauses.insert(int(rng.integers(len(clauses) + 1)), str(rng.choice(_CHATTER)))
        text = " and ".join(clauses)
        if rng.random() < typo:
            words = text.split(" ")
            j = int(rng.integers(len(words)))
            words[j] = _typo(words[j], rng)
            text = " ".join(words)
        captions.append(text)
    return captions
