"""Why MoSAIC's completion does not help on MovieLens as a rating stream: on the evaluated events
right after the tuning part, compare each warm prediction's MoSAIC completion ``c = ŷ − ŷ_biases``
with the residual it should predict, ``e = y − ŷ_biases``: their correlation, the least-squares
scale of ``c`` (1 = as large as it should be, 0 = no signal) and both RMS values.

    python -m experiments.streaming.progressive_diagnosis results/ml_ratings.npz [--K 2 --r 1 --eta0 1.0]

(``results/ml_ratings.npz`` from ``mosaic data movielens --protocol ratings``; the setting is the one
``mosaic eval --protocol progressive`` chose on the tuning part.)
"""

import argparse

import numpy as np

from streaming.harness import limit_threads
from streaming.ratings import load_ratings
from streaming.recommend import MoSAICRecommender


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("ratings")
    p.add_argument("--K", type=int, default=2)
    p.add_argument("--r", type=int, default=1)
    p.add_argument("--eta0", type=float, default=1.0)
    p.add_argument("--tune-frac", type=float, default=0.2)
    a = p.parse_args()
    limit_threads()
    s = load_ratings(a.ratings)
    cut = int(a.tune_frac * len(s))
    rec = MoSAICRecommender(a.r, a.K, pretrain_at=cut, eta0=a.eta0, eta_min=min(0.05, a.eta0))
    c_all, e_all = [], []
    for t in range(2 * cut):  # the tuning part, then as many evaluated events
        u, i, y = int(s.user[t]), int(s.item[t]), float(s.rating[t])
        base, full = rec.biases.predict_one(u, i), rec.predict_one(u, i)
        if t >= cut and full != base:
            c_all.append(full - base)
            e_all.append(y - base)
        rec.learn_one(u, i, y)
    c, e = np.array(c_all), np.array(e_all)
    print(f"events {cut}..{2 * cut}: {c.size} predictions with a completion; corr(c, e) {np.corrcoef(c, e)[0, 1]:.3f}, "
          f"least-squares scale {(c @ e) / (c @ c):.3f}, RMS c {np.sqrt(np.mean(c * c)):.3f}, RMS e "
          f"{np.sqrt(np.mean(e * e)):.3f}; RMSE biases {np.sqrt(np.mean(e * e)):.3f} vs MoSAIC "
          f"{np.sqrt(np.mean((e - c) ** 2)):.3f} on them")


if __name__ == "__main__":
    main()
