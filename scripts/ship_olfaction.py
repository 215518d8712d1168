"""Ship ``mixscent-dream`` (``common.shipped``): the MixturePredictor whose numbers the olfaction
README reports, for the hub's olfaction tab and ``mixscent predict --model mixscent-dream``.

    mixscent featurize --limit 503
    mixscent pretrain --epochs 20 --encoder runs/bench_encoder
    mixscent train --split random_cv0 --epochs 40 --trees 150 --encoder runs/bench_encoder --out runs/olf_ship
    python scripts/ship_olfaction.py --model runs/olf_ship [--overwrite]

The recipe is the README benchmark's (its small encoder, 40 network epochs, 150 trees) on the
``random_cv0`` split; the label network is trained on all of GS-LF. The networks are stored in half
precision (rounded before the ONNX export, so the torch and ONNX paths agree); the set regressors'
trees, ridge coefficients and Mordred rows keep their exact dtypes. The test metrics of the
shipped weights on ``random_cv0``'s test rows go into the manifest and
``docs/results/olfaction/shipped.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NAME = "mixscent-dream"
RESULTS = ROOT / "docs" / "results" / "olfaction" / "shipped.json"
COMMAND = ("mixscent featurize --limit 503 && mixscent pretrain --epochs 20 --encoder runs/bench_encoder && "
           "mixscent train --split random_cv0 --epochs 40 --trees 150 --encoder runs/bench_encoder --out runs/olf_ship")
#: two forests of 150 trees (float64 thresholds, which half precision would move), the label
#: network and the training molecules' Mordred rows do not fit the usual 10 MiB
MAX_BYTES = 20 * 2**20


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ship_olfaction", description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, default=Path("runs/olf_ship"), help="mixscent train --out directory")
    p.add_argument("--wall-s", type=float, default=0.0, help="the training's wall-clock seconds (manifest)")
    p.add_argument("--overwrite", action="store_true")
    args = p.parse_args(argv)

    import torch

    from common.data_dir import resolve_data_dir
    from common.io import write_json
    from common.shipped import machine_description, ship
    from olfaction.data import load_pairs, load_split, split_path
    from olfaction.evaluate import evaluate_predictor
    from olfaction.inference import OnnxPredictor
    from olfaction.predictor import MixturePredictor

    torch.set_num_threads(1)
    data_dir = resolve_data_dir(None)
    pairs = load_pairs(data_dir)
    split = load_split(split_path(data_dir, "random_cv0"), len(pairs))
    model = MixturePredictor.from_pretrained(args.model)
    model.half().float()  # the networks as shipped: half-precision values, so the ONNX export matches them
    metrics = {k: round(v, 4) for k, v in evaluate_predictor(model, pairs, split).items() if isinstance(v, float)}
    metrics["n_test"] = int(len(split.testing))
    out = ship(model, NAME, ROOT / "olfaction", command=COMMAND,
               data="DREAM mixture pairs (Bushdid, Snitz 1-3, Ravia 1/2/4) and GS-LF, from ../shared/data/olfaction",
               split="random_cv0: distances fitted on its training rows (network share on its validation rows), "
                     "metrics on its test rows; labels on all of GS-LF",
               steps=40, seed=0, metrics=metrics, trained_on=machine_description(),
               wall_s=args.wall_s, smoke="olfaction.predictor:smoke_predict", overwrite=args.overwrite,
               exact=("set/",), max_bytes=MAX_BYTES)
    shipped = MixturePredictor.from_pretrained(NAME)
    light = OnnxPredictor(out)
    check = {k: round(v, 4) for k, v in evaluate_predictor(shipped, pairs, split).items() if isinstance(v, float)}
    onnx = {k: round(v, 4) for k, v in evaluate_predictor(light, pairs, split).items() if isinstance(v, float)}
    assert check["all_pearson"] == metrics["all_pearson"], (check["all_pearson"], metrics["all_pearson"])
    assert abs(onnx["all_pearson"] - metrics["all_pearson"]) < 1e-3, (onnx["all_pearson"], metrics["all_pearson"])
    size = sum(f.stat().st_size for f in out.iterdir())
    write_json(RESULTS, {"command": "python scripts/ship_olfaction.py --model runs/olf_ship", "model": NAME,
                         "train_command": COMMAND, "split": "random_cv0", "test": metrics,
                         "test_onnx_path": onnx, "weights": dict(zip(("network", "trees", "ridge"),
                                                                     shipped.weights.tolist(), strict=True)),
                         "size_bytes": size})
    print(f"shipped {out}: test r {metrics['all_pearson']:.3f}, RMSE {metrics['all_rmse']:.3f} ({size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
