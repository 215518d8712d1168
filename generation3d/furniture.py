"""Furniture types of Sweet Home 3D catalogue items (``furniture_type``).

The type comes from the catalogue's name, tags and category (room): items of the rooms "Doors and
windows", "Characters", "Vehicles" and "Staircases", items tagged "Toy" or "Fitness" and names
containing "room" (whole-room sets) have no type. Otherwise the head noun decides: the last word of three or more letters of the name cut at
" with ", " on " and the first digit ("Desk lamp" is a lamp, "Bedside table" a table, "Sofa 2
seats" a sofa, "Table fan" and "Chest freezer" nothing), looked up in ``NAME_WORDS``; when it is
not there, the first tag in ``TAG_WORDS`` ("Workbench" tagged Table is a table). Items with no
type ("Cup", "Ceiling fan", "Sleeping bag", trees, appliances) are skipped as "unknown type".
"""

from __future__ import annotations

import re
from collections.abc import Sequence

NAME_WORDS = {
    **dict.fromkeys(("chair", "chairs", "armchair", "stool", "bench", "ottoman", "puff", "seat"), "chair"),
    **dict.fromkeys(("table", "desk", "nightstand"), "table"),
    **dict.fromkeys(("shelf", "shelves", "bookcase", "bookshelf", "cabinet", "cupboard", "wardrobe", "dresser",
                     "drawers", "chest", "locker", "sideboard", "closet"), "shelf"),
    **dict.fromkeys(("lamp", "light", "lantern", "chandelier", "lamppost", "sconce"), "lamp"),
    **dict.fromkeys(("sofa", "couch", "settee", "loveseat"), "sofa"),
    **dict.fromkeys(("bed", "crib", "futon", "cradle"), "bed"),
}
TAG_WORDS = {
    "chair": "chair", "table": "table", "sofa": "sofa", "couch": "sofa",
    **dict.fromkeys(("bookcase", "bookshelf", "shelves", "shelf", "cabinet", "cupboard", "wardrobe"), "shelf"),
}
EXCLUDED_ROOMS = frozenset({"Doors and windows", "Characters", "Vehicles", "Staircases"})
EXCLUDED_TAGS = frozenset({"toy", "fitness"})


def furniture_type(name: str, tags: Sequence[str] = (), category: str = "") -> str | None:
    """The furniture type (one of ``data.FURNITURE_TYPES``) of a catalogue item, or None (rule in the
    module docstring)."""
    if category in EXCLUDED_ROOMS or EXCLUDED_TAGS & {t.lower() for t in tags}:
        return None
    head = re.split(r" with | on |\d", name.lower())[0]
    words = [w for w in re.findall(r"[a-z]+", head) if len(w) >= 3]
    if "room" in words:
        return None
    if words and words[-1] in NAME_WORDS:
        return NAME_WORDS[words[-1]]
    for t in tags:
        if t.lower() in TAG_WORDS:
            return TAG_WORDS[t.lower()]
    return None
