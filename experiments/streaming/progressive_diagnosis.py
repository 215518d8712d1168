"""Why MoSAIC's completion does not help on MovieLens as a rating stream: on the evaluated events
right after the tuning part, compare each warm prediction's MoSAIC completion ``c = ŷ − ŷ_biases``
with the residual it should predict, ``e = y − ŷ_biases``: their correlation, the least-squares
scale of ``c`` (1 = as large as it should be, 0 = no signal) and both RMS values, overall and by
the number of rated coordinates the user had (is it too few ratings per fold-in?).

    python -m experiments.streaming.progressive_diagnosis results/ml_ratings.npz [--K 2 --r 1 --eta0 1.0
        --fold-ridge 0.0]

(``results/ml_ratings.npz`` from ``mosaic data movielens --protocol ratings``; the setting is the one
``mosaic eval --protocol progressive`` chose on the tuning part.)
"""

import argparse

import numpy as np

from experiments.streaming.ratings import load_ratings
from experiments.streaming.recommend import MoSAICRecommender
from streaming.harness import limit_threads


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("ratings")
    p.add_argument("--K", type=int, default=2)
    p.add_argument("--r", type=int, default=1)
    p.add_argument("--eta0", type=float, default=1.0)
    p.add_argument("--fold-ridge", type=float, default=0.0)
    p.add_argument("--tune-frac", type=float, default=0.2)
    a = p.parse_args()
    limit_threads()
    s = load_ratings(a.ratings)
    cut = int(a.tune_frac * len(s))
    rec = MoSAICRecommender(a.r, a.K, pretrain_at=cut, eta0=a.eta0,
                            fold_ridge=a.fold_ridge)
    c_all, e_all, n_all = [], [], []
    for t in range(2 * cut):  # the tuning part, then as many evaluated events
        u, i, y = int(s.user[t]), int(s.item[t]), float(s.rating[t])
        base, full = rec.biases.predict_one(u, i), rec.predict_one(u, i)
        if t >= cut and full != base:
            c_all.append(full - base)
            e_all.append(y - base)
            n_all.append(rec.rated_columns(u))
        rec.learn_one(u, i, y)
    c, e = np.array(c_all), np.array(e_all)
    print(f"events {cut}..{2 * cut}: {c.size} predictions with a completion; corr(c, e) {np.corrcoef(c, e)[0, 1]:.3f}, "
          f"least-squares scale {(c @ e) / (c @ c):.3f}, RMS c {np.sqrt(np.mean(c * c)):.3f}, RMS e "
          f"{np.sqrt(np.mean(e * e)):.3f}; RMSE biases {np.sqrt(np.mean(e * e)):.3f} vs MoSAIC "
          f"{np.sqrt(np.mean((e - c) ** 2)):.3f} on them")
    n = np.array(n_all)
    for lo, hi in ((0, 10), (10, 20), (20, 50), (50, 100), (100, 10**9)):
        m = (n >= lo) & (n < hi)
        if m.sum() > 2:
            cm, em = c[m], e[m]
            print(f"  users with {lo}-{hi} rated coordinates: {m.sum()} predictions, corr {np.corrcoef(cm, em)[0, 1]:.3f}, "
                  f"scale {(cm @ em) / (cm @ cm):.3f}, RMSE biases {np.sqrt(np.mean(em * em)):.3f} vs MoSAIC "
                  f"{np.sqrt(np.mean((em - cm) ** 2)):.3f}")


if __name__ == "__main__":
    main()
