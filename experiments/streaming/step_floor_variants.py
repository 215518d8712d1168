"""MoSAIC's step-size schedule variants on stress cells and in-house bench streams, against the pretrained
k-GROUSE (constant step 0.5) on the same pretrained experts.

``python -m experiments.streaming.step_floor_variants tuning|test VARIANT,... CELL ...`` with stress cells
``family/obsPP/spec`` (``streaming.stress``), e.g. ``tuning base,floor0.2,floor0.3 geodesic/obs35/exact``,
or in-house bench streams ``bench:CONFIG/DRIFT`` (``streaming.bench``'s stream of seed ``1000 + s``,
``tuning`` = seeds 100-102 (streams 1100-1102), ``test`` = seeds 0-2). Every stream is pretrained once;
each variant runs on a copy with epochs given and withheld. Prints per stream and writes
``runs/step_floor_<seeds>.json`` (per seed, and the mean NRMSE per cell, variant and epoch setting).

Variants: ``base`` (the schedule before the drift floor: ``drift_floor = 0``, every variant but
``product`` starts from it), ``product`` (the current defaults, drift floor 0.3), ``floorX`` (``eta_min = X``), ``wfloorX`` (``eta_min = X`` only
while the model has seen no epoch information: the withheld runs use X, the given ones the default),
``reflvlF`` (a per-expert floor ``F · sqrt(max(level / ref - 1, 0))``, ``ref`` the level after
pretraining; ``reflvlnrF``: not for re-seeded experts; ``refmM_F``: ``level / ref - 1 - M``), ``lvlF`` / ``sqlvlF`` (a per-expert
floor ``F`` × its fast / slow residual level, or × the square root of that ratio), ``dfX`` (``DRIFT_FACTOR = X``: the drift-triggered restart fires earlier), ``kgrouse`` (the baseline).
Issue 33: MoSAIC without epochs lost to the pretrained k-GROUSE on every gradual drift.
"""
import copy
import json
import math
import sys
from pathlib import Path

import numpy as np

import streaming.model as model_mod
from streaming import bench as stress
from streaming.baselines import KGrouse
from streaming.data import STANDARD_CONFIGS, StreamConfig, generate_stream
from streaming.evaluate import nrmse_unobserved
from streaming.model import MoSAIC

DEFAULT_DRIFT_FACTOR = model_mod.DRIFT_FACTOR


def make_stream(cell: str, i: int, tuning: bool):
    """(stream, n, r, K, model seed) of a stress cell or an in-house bench stream."""
    if cell.startswith("bench:"):
        config, drift = cell[6:].split("/")
        n, r, K = STANDARD_CONFIGS[config]
        seed = (100 if tuning else 0) + i
        frac = 0.5 if config == "25-5-5" else 0.4
        cfg = StreamConfig(n=n, r=r, K=K, obs_frac=frac, drift=drift, epochs=4, samples_per_epoch=200 * K,
                           seed=1000 + seed)
        return generate_stream(cfg), n, r, K, seed
    fam, obs, spec = cell.split("/")
    n, r0, K0 = stress.SHAPE
    dK, dr = stress.SPECS[spec]
    seed = (stress.TUNING_SEEDS if tuning else stress.TEST_SEEDS)[i]
    return generate_stream(stress.stream_config(fam, int(obs[3:]) / 100, seed)), n, r0 + dr, K0 + dK, i


def variant(name: str, epochs: str):
    """(config overrides, DRIFT_FACTOR) of a variant name under an epoch setting (``A+B``: both)."""
    if "+" in name:
        overrides, df = {}, DEFAULT_DRIFT_FACTOR
        for part in name.split("+"):
            o, d = variant(part, epochs)
            overrides.update(o)
            df = d if d != DEFAULT_DRIFT_FACTOR else df
        return overrides, df
    if name in ("base", "product"):
        return {}, DEFAULT_DRIFT_FACTOR
    if name.startswith("wfloor"):
        return ({"eta_min": float(name[6:])} if epochs == "withheld" else {}), DEFAULT_DRIFT_FACTOR
    if name.startswith("floor"):
        return {"eta_min": float(name[5:])}, DEFAULT_DRIFT_FACTOR
    if name.startswith("refm"):  # refmM_F: floor F · sqrt(max(level / ref - 1 - M, 0))
        margin, f = name[4:].split("_")
        return {"ref_floor": (float(f), False, float(margin))}, DEFAULT_DRIFT_FACTOR
    if name.startswith("reflvlnr"):
        return {"ref_floor": (float(name[8:]), True)}, DEFAULT_DRIFT_FACTOR
    if name.startswith("reflvl"):
        return {"ref_floor": (float(name[6:]), False)}, DEFAULT_DRIFT_FACTOR
    if name.startswith("lvl") or name.startswith("sqlvl"):
        return {"level_floor": (name.startswith("sq"), float(name.split("lvl")[1]))}, DEFAULT_DRIFT_FACTOR
    if name.startswith("df"):
        return {}, float(name[2:])
    raise ValueError(f"unknown variant {name}")


def level_floor(m, sqrt: bool, f: float) -> None:
    """Per-expert floor ``min(eta0, f · level_k / level_slow_k)`` (``sqrt``: of the ratio's square root):
    the step rises when an expert's recent residuals exceed its long-run level."""
    orig = m._complete_and_update

    def complete_and_update(idx, xo, w, score, k, xx, m=m, orig=orig):
        st = m.expert_stats_
        ratio = float(st.level[k]) / max(float(st.level_slow[k]), 1e-12)
        m.eta_min = min(m.eta0, f * (math.sqrt(ratio) if sqrt else ratio))
        return orig(idx, xo, w, score, k, xx)

    m._complete_and_update = complete_and_update


def ref_floor(m, f: float, not_reseeded: bool, margin: float = 0.0) -> None:
    """Per-expert floor ``min(eta0, f · sqrt(max(level_k / ref_k - 1, 0)))`` with ``ref_k`` the expert's
    level after pretraining (its noise floor): zero for an expert that fits as well as at pretraining
    (``not_reseeded``: the default floor for an expert that was re-seeded in the stream)."""
    orig = m._complete_and_update
    ref = np.maximum(m.expert_stats_.level_slow.copy(), 1e-12)

    def complete_and_update(idx, xo, w, score, k, xx, m=m, orig=orig):
        excess = max(float(m.expert_stats_.level[k]) / ref[k] - 1.0 - margin, 0.0)
        m.eta_min = min(m.eta0, f * math.sqrt(excess))
        if not_reseeded and m.expert_stats_.reseeded_at[k] > -(10**12):
            m.eta_min = 0.05
        return orig(idx, xo, w, score, k, xx)

    m._complete_and_update = complete_and_update


def run(cells, n_seeds, names, tuning):
    out = {}
    for cell in cells:
        for i in range(n_seeds):
            s, n, r, K, mseed = make_stream(cell, i, tuning)
            base = MoSAIC(r, K, seed=mseed).fit(s.source_values)
            kg = KGrouse.from_mosaic(base)
            res = {"kgrouse": nrmse_unobserved(_run(kg, s.values), s.full, s.values)}
            for name in names:
                for epochs in ("given", "withheld"):
                    overrides, df = variant(name, epochs)
                    m = copy.deepcopy(base)
                    if name != "product":  # the variants start from the schedule before the drift floor
                        m.drift_floor = 0.0
                    for k, v in overrides.items():
                        if k == "level_floor":
                            level_floor(m, *v)
                        elif k == "ref_floor":
                            ref_floor(m, *v)
                        else:
                            setattr(m, k, v)
                    model_mod.DRIFT_FACTOR = df
                    try:
                        completed = m.process(s.values, epoch=s.epoch if epochs == "given" else None)[0]
                    finally:
                        model_mod.DRIFT_FACTOR = DEFAULT_DRIFT_FACTOR
                    res[f"{name}/{epochs}"] = nrmse_unobserved(completed, s.full, s.values)
            out.setdefault(cell, []).append(res)
            print(cell, i, {k: round(v, 4) for k, v in res.items()}, flush=True)
    return out


def _run(model, values):
    from streaming.harness import run_online

    return run_online(model, values).completed


if __name__ == "__main__":
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    threadpool_limits(1)
    tuning = sys.argv[1] == "tuning"
    n_seeds = int(sys.argv[2])
    names = sys.argv[3].split(",")
    cells = sys.argv[4:]
    out = run(cells, n_seeds, names, tuning)
    summ = {c: {k: float(np.mean([r[k] for r in rs])) for k in rs[0]} for c, rs in out.items()}
    for c, v in summ.items():
        print(f"{c:34s}", " ".join(f"{k}={x:.4f}" for k, x in v.items()))
    Path("runs").mkdir(exist_ok=True)
    tag = "_".join(x.replace("/", "-") for x in sys.argv[1:2] + [sys.argv[3]])[:80]
    Path(f"runs/step_floor_{tag}_{len(cells)}c.json").write_text(json.dumps({"argv": sys.argv, "per_seed": out,
                                                                             "mean": summ}, indent=1))
