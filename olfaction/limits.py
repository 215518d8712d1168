"""Documented maxima of the ``mixscent`` counts, checked before any work starts (README: Limits).

Hard maxima are parse-time ranges (``--nproc``, ``--folds``, ``white --max-n``, components per
mixture: :data:`olfaction.data.MAX_COMPONENTS`); soft ones (:data:`SOFT_LIMITS`: a long run a user
may really mean) are refused with one ``error:`` line naming the cost unless ``--force`` is given.
Imports nothing heavy: the parser is built from it.
"""

from __future__ import annotations

import argparse

from common.errors import InputError

MAX_NPROC = 64  # featurize --nproc
MAX_FOLDS = 5  # bench --folds: the shipped random_cv / lso_molecules families have 5 splits
MAX_WHITE_N = 100  # white --max-n (olfaction.data.MAX_COMPONENTS; also at most half the molecule pool)
SOFT_LIMITS = {  # option: (maximum, what a larger value costs)
    "epochs": (2000, "every epoch is a pass over the training rows; early stopping ends most runs within 100"),
    "label_epochs": (2000, "every epoch is a pass over GS-LF's 4,983 molecules"),
    "trees": (5000, "each set regressor keeps every tree's nodes in memory and in the checkpoint"),
    "samples": (10_000, "each is a pair of mixtures predicted at every n"),
}


def check_soft_limits(args: argparse.Namespace) -> None:
    """InputError naming the first option over its :data:`SOFT_LIMITS` maximum, unless ``--force``."""
    if getattr(args, "force", False):
        return
    for name, (limit, cost) in SOFT_LIMITS.items():
        value = getattr(args, name, None)
        if value is not None and value > limit:
            flag = "--" + name.replace("_", "-")
            extra = f"; {value * args.max_n:,} predicted pairs" if name == "samples" else ""
            raise InputError(f"{flag} {value} is over the maximum of {limit} ({cost}{extra}); pass --force to run it "
                             "anyway")


FORCE_HELP = "run with a count over its documented maximum (README: Limits)"
