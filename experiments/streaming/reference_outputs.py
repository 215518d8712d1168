"""MoSAIC's outputs on fixed-seed streams, to show that a refactoring changes no number.

``python -m experiments.streaming.reference_outputs record FILE.npz`` with the old code checked out,
then ``... check FILE.npz`` with the new one: prints, per array, whether it is bit-identical and the
largest absolute difference. Five streams (shared rotation with and without epochs, abrupt with
re-seeds, an ALS provisional fit at m̄ < 2.25 r, ``epoch_reset="always"``) and a tiny abrupt one;
per stream: pretrained bases, ``complete`` and ``route`` of 50 samples, ``process`` completions and
routes, the pretrained k-GROUSE, MoSAIC without pretraining and k-GROUSE from random bases.
Used whenever MoSAIC's code is moved or restructured.
"""
import copy
import sys

import numpy as np

from experiments.streaming.variants import mosaic_variant
from streaming.baselines import KGrouse
from streaming.data import StreamConfig, generate_stream
from streaming.harness import run_online
from streaming.model import MoSAIC


def cases():
    out = {}
    s = generate_stream(StreamConfig(n=20, r=2, K=3, obs_frac=0.6, epochs=2, samples_per_epoch=120,
                                     drift="abrupt", source_per_class=40, seed=7))
    m = MoSAIC(2, 3, pretrain_restarts=2, seed=1).fit(s.source_values)
    m.process(s.values[:150], epoch=s.epoch[:150])
    c, r = m.process(s.values[150:170], None, s.epoch[150:170])
    out["tiny_c"], out["tiny_r"], out["tiny_bases"] = c, r, m.bases_.copy()
    for name, kw, mkw, eps in [
        ("shared", dict(n=60, r=4, K=4, obs_frac=0.35, drift="shared_rotation", angle_rad=0.2, seed=1), {}, True),
        ("shared_wh", dict(n=60, r=4, K=4, obs_frac=0.35, drift="shared_rotation", angle_rad=0.2, seed=1), {}, False),
        ("abrupt", dict(n=30, r=3, K=4, obs_frac=0.5, epochs=3, samples_per_epoch=300, drift="abrupt",
                        source_per_class=60, seed=11), dict(pretrain_restarts=2, seed=2), True),
        ("als", dict(n=40, r=8, K=3, obs_frac=0.3, epochs=2, samples_per_epoch=300, drift="abrupt",
                     source_per_class=80, seed=5), dict(pretrain_restarts=2, seed=1), True),
        ("always", dict(n=30, r=3, K=3, obs_frac=0.5, epochs=3, samples_per_epoch=200, drift="rotation",
                        source_per_class=60, seed=3), dict(pretrain_restarts=2, epoch_reset="always"), True),
    ]:
        s = generate_stream(StreamConfig(**kw))
        model = mosaic_variant(kw["r"], kw["K"], **mkw).fit(s.source_values)
        out[f"{name}_fit"] = model.bases_.copy()
        out[f"{name}_complete"] = model.transform(s.values[:50])
        out[f"{name}_route"] = model.route(s.values[:50])
        kg = KGrouse.from_mosaic(model)
        out[f"{name}_kg"] = run_online(kg, s.values, s.epoch).completed
        c, r = copy.deepcopy(model).process(s.values, epoch=s.epoch if eps else None)
        out[f"{name}_c"], out[f"{name}_r"] = c, r
        out[f"{name}_nop"] = run_online(MoSAIC(kw["r"], kw["K"], seed=0), s.values, s.epoch).completed
        out[f"{name}_kgr"] = run_online(KGrouse(kw["r"], kw["K"], eta=0.3, seed=0), s.values, s.epoch).completed
    return out


if __name__ == "__main__":
    mode, path = sys.argv[1], sys.argv[2]
    res = cases()
    if mode == "record":
        np.savez(path, **res)
    else:
        ref = np.load(path)
        worst = 0.0
        for k in ref.files:
            a, b = ref[k], res[k]
            same = np.array_equal(a, b)
            d = float(np.max(np.abs(a - b))) if a.shape == b.shape else np.inf
            worst = max(worst, d)
            print(f"{k:16s} identical={same} maxdiff={d:.3g}")
        print("WORST", worst)
