"""MoSAIC with epochs given, under variants of its epoch reset, against epochs withheld, on stress cells.

``python -m experiments.streaming.epoch_reset_variants tuning|test VARIANT,... CELL ...`` with cells
``family/obsPP/spec`` (``streaming.stress``), e.g. ``tuning given,rf4,always mixed/obs35/K-1``; prints
per seed and the mean NRMSE per variant with its ratio to epochs withheld, and writes
``runs/epoch_variants_<seeds>.json``. Variants: ``given`` (the default, ``epoch_reset="detect"``),
``never``, ``always``, ``rfF`` (detect with ``RESET_FACTOR`` F), ``gateF`` (detect only for experts
whose slow level is <= F × the median), ``always_gate`` / ``detect_gate`` (no restart for an expert
whose slow level is above half the novelty threshold), ``always_tMr`` (always, restarting at t = M r).
Issue 33, "epoch information must never hurt" (docs/experiments.md).
"""
import copy
import json
import sys
from pathlib import Path

import numpy as np

from streaming import bench as stress
from streaming.data import generate_stream
from streaming.evaluate import nrmse_unobserved
from streaming.model import MoSAIC


def run(cells, seeds, variants):
    out = {}
    for cell in cells:
        fam, obs, spec = cell.split("/")
        n, r0, K0 = stress.SHAPE
        dK, dr = stress.SPECS[spec]
        for i, seed in enumerate(seeds):
            s = generate_stream(stress.stream_config(fam, int(obs[3:]) / 100, seed))
            base = MoSAIC(r0 + dr, K0 + dK, seed=i).fit(s.source_values)
            res = {"withheld": nrmse_unobserved(copy.deepcopy(base).process(s.values)[0], s.full, s.values)}
            for name, fn in variants.items():
                m = copy.deepcopy(base)
                fn(m)
                res[name] = nrmse_unobserved(m.process(s.values, epoch=s.epoch)[0], s.full, s.values)
                restore(m)
            out.setdefault(cell, []).append(res)
            print(cell, seed, {k: round(v, 4) for k, v in res.items()}, flush=True)
    return out

def median_gate(factor):
    def apply(m):
        orig = m._set_epoch
        def set_epoch(epoch, orig=orig, m=m):
            changed = epoch != m.epochs_.epoch
            orig(epoch)
            if changed:
                lv = m.expert_stats_.level_slow
                m.epochs_.pending &= lv <= factor * np.median(lv)
        m._set_epoch = set_epoch
    return apply

import streaming.schedule as sched  # noqa: E402 (kept next to the variants that patch it)


def reset_factor(f):
    def apply(m):
        sched.RESET_FACTOR = f
    return apply


def restore(m):
    sched.RESET_FACTOR = 2.0


def fit_gate(mode):
    """epoch_reset=mode, but an expert whose slow level says it does not fit its samples (above half
    the novelty threshold, what a re-seed calls an inlier) keeps its schedule."""
    from streaming.change import NOVELTY

    def apply(m):
        m.epoch_reset = mode
        orig = m._set_epoch

        def set_epoch(epoch, orig=orig, m=m):
            changed = epoch != m.epochs_.epoch
            t = m.steps_.t.copy()
            orig(epoch)
            if changed:
                bad = m.expert_stats_.level_slow > 0.5 * NOVELTY * (1.0 - m.r / m.stream_stats_.mean_m)
                m.steps_.t[bad] = t[bad]
                m.epochs_.pending[bad] = False
        m._set_epoch = set_epoch
    return apply


def always_to(mult):
    """epoch_reset="always", restarting each schedule at t = mult·r (η0 / sqrt(1 + mult/2)) instead of 0."""
    def apply(m):
        m.epoch_reset = "always"
        orig = m._set_epoch

        def set_epoch(epoch, orig=orig, m=m):
            changed = epoch != m.epochs_.epoch
            t = m.steps_.t.copy()
            orig(epoch)
            if changed:
                m.steps_.t[:] = np.minimum(t, mult * m.r)
        m._set_epoch = set_epoch
    return apply



VARIANTS = {
    "always_t2r": always_to(2),
    "always_t8r": always_to(8),
    "always_gate": fit_gate("always"),
    "detect_gate": fit_gate("detect"),
    **{f"rf{f:g}": reset_factor(f) for f in (2.5, 3.0, 4.0, 6.0)},
    "always": lambda m: setattr(m, "epoch_reset", "always"),
    "given": lambda m: None,
    "never": lambda m: setattr(m, "epoch_reset", "never"),
    "gate2": median_gate(2.0),
    "gate3": median_gate(3.0),
}

if __name__ == "__main__":
    seeds = stress.TEST_SEEDS if sys.argv[1] == "test" else stress.TUNING_SEEDS
    out = run(sys.argv[3:], seeds, {k: VARIANTS[k] for k in sys.argv[2].split(",")})
    summ = {c: {k: float(np.mean([r[k] for r in rs])) for k in rs[0]} for c, rs in out.items()}
    for c, v in summ.items():
        print(f"{c:36s}", " ".join(f"{k}={x:.4f}({x / v['withheld']:.3f})" for k, x in v.items()))
    Path("runs").mkdir(exist_ok=True)
    Path(f"runs/epoch_variants_{sys.argv[1]}.json").write_text(json.dumps({"per_seed": out, "mean": summ}, indent=1))
