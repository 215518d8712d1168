"""Peak memory and throughput of ``mixscent predict --csv`` at 1k / 10k / 100k pairs, each size in a
fresh process per backend (``--backend onnx``: the torch-free path, ``--backend torch``): the peak
resident set size of the child (its own ``VmHWM``), its wall time and rows per second.

    python -m experiments.olfaction.predict_memory --out docs/results/olfaction/predict_memory.json

The pairs are drawn (seeded) from the real data: a dataset of ``mixture_definitions.csv``, then two
of its mixture labels, so every row names real DREAM mixtures of real molecules. Without
``--model`` the script first fits a predictor of the shipped sizes on ``random_cv0`` (default
MixScentNet on an untrained default-size molecule encoder, 2 network epochs, 300-tree set
regressors, no label network: the work and memory of a shipped model, not its accuracy) into
``--work``. ``predict --csv`` streams the file in chunks of ``olfaction.batch_predict.CHUNK_ROWS``
rows, so the peak should not grow with the number of rows.
"""

from __future__ import annotations

import csv
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from common.cli import ArgumentParser, add_common_args, check_outputs, cli_main, int_list, positive_int
from common.data_dir import resolve_data_dir
from common.errors import InputError
from common.io import write_json

BACKENDS = ("onnx", "torch")


def write_pairs(path: Path, n: int, data_dir: Path, seed: int) -> Path:
    """``n`` rows ``Dataset,Mixture_1,Mixture_2`` of two mixture labels of one dataset, drawn with
    ``seed`` from ``mixture_definitions.csv``."""
    from olfaction.data import load_mixtures

    by_dataset: dict[str, list[str]] = {}
    for dataset, label in load_mixtures(data_dir):
        by_dataset.setdefault(dataset, []).append(label)
    names = sorted(by_dataset)
    rng = np.random.default_rng(seed)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["Dataset", "Mixture_1", "Mixture_2"])
        for d in rng.integers(0, len(names), n):
            labels = by_dataset[names[d]]
            i, j = rng.integers(0, len(labels), 2)
            w.writerow([names[d], labels[i], labels[j]])
    return path


def fit_model(out: Path, data_dir: Path, seed: int) -> Path:
    """A predictor of the shipped sizes fitted on ``random_cv0`` (see the module docstring)."""
    import torch

    from olfaction.data import load_pairs, load_split, split_path
    from olfaction.model import DistanceTrainConfig, MixScentConfig, MolEncoder, MolEncoderConfig
    from olfaction.predictor import MixturePredictor

    pairs = load_pairs(data_dir)
    split = load_split(split_path(data_dir, "random_cv0"), len(pairs))
    torch.manual_seed(seed)
    encoder = MolEncoder(MolEncoderConfig()).eval()
    model = MixturePredictor(MixScentConfig(), DistanceTrainConfig(epochs=2, seed=seed), seed=seed)
    model.fit(pairs, split, encoder, device="cpu")
    model.save_pretrained(out)
    return out


# The child reports its own peak (VmHWM of /proc/self/status) at exit: wait4's ru_maxrss would
# carry over the high-water mark of this process (which fitted the model) across fork and exec.
CHILD = ("import atexit, runpy, sys\n"
         "def peak():\n"
         "    for line in open('/proc/self/status'):\n"
         "        if line.startswith('VmHWM:'):\n"
         "            print('peak_rss_kb', line.split()[1], file=sys.stderr)\n"
         "atexit.register(peak)\n"
         "sys.argv = ['mixscent'] + sys.argv[1:]\n"
         "runpy.run_module('olfaction.cli', run_name='__main__')\n")


def measure(model: Path, csv_path: Path, backend: str, data_dir: Path, out_csv: Path) -> dict:
    """Peak RSS (MB, the child's VmHWM), wall seconds and rows/s of one ``mixscent predict --csv``
    process."""
    cmd = [sys.executable, "-c", CHILD, "predict", "--model", str(model), "--csv", str(csv_path),
           "--out", str(out_csv), "--overwrite", "--backend", backend, "--data-dir", str(data_dir)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    lines = proc.stderr.replace("\r", "\n").splitlines()
    if proc.returncode != 0:
        raise InputError(f"predict --csv failed (exit {proc.returncode}): {lines[-1:]}")
    peak = [int(line.split()[1]) for line in lines if line.startswith("peak_rss_kb ")]
    if not peak:
        raise InputError("the predict process reported no peak RSS (/proc/self/status unreadable?)")
    with open(out_csv, encoding="utf-8") as fh:
        rows = sum(1 for _ in fh) - 1
    return {"peak_rss_mb": round(peak[-1] / 1024, 1), "wall_s": round(seconds, 2),
            "rows_per_s": round(rows / seconds, 1), "rows_written": rows}


@cli_main
def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="predict_memory", description=__doc__.splitlines()[0])
    add_common_args(p, out_default="docs/results/olfaction/predict_memory.json")
    p.add_argument("--model", default=None, help="a saved predictor (default: fit one into --work)")
    p.add_argument("--work", default="runs/olfaction_predict_memory", help="folder of the CSVs (and model)")
    p.add_argument("--sizes", type=int_list(1), default=(1000, 10_000, 100_000), help="rows per run")
    p.add_argument("--backends", default="onnx,torch", help=f"comma-separated, of {', '.join(BACKENDS)}")
    p.add_argument("--torch-max-rows", type=positive_int, default=None,
                   help="run the torch backend only up to this many rows (the slower path)")
    args = p.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in backends if b not in BACKENDS] or ([] if backends else ["(none)"])
    if unknown:
        raise InputError(f"unknown backend {unknown[0]!r} (choose from {', '.join(BACKENDS)})")
    if max(args.sizes) > 1_000_000:
        raise InputError(f"--sizes: at most 1000000 rows per run, got {max(args.sizes)}")
    check_outputs(files=[args.out], inputs=[args.model], overwrite=args.overwrite)
    data_dir = resolve_data_dir(args.data_dir)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    model = Path(args.model) if args.model else fit_model(work / "model", data_dir, args.seed)
    from olfaction.batch_predict import CHUNK_ROWS
    from olfaction.inference import MixtureAPI

    command = ["python -m experiments.olfaction.predict_memory", "--sizes", ",".join(map(str, args.sizes)),
               "--backends", ",".join(backends), "--seed", str(args.seed)]
    if args.torch_max_rows:
        command += ["--torch-max-rows", str(args.torch_max_rows)]
    if args.model:
        command += ["--model", args.model]
    runs: list[dict] = []
    for n in args.sizes:
        csv_path = write_pairs(work / f"pairs_{n}.csv", n, data_dir, args.seed)
        for backend in backends:
            if backend == "torch" and args.torch_max_rows and n > args.torch_max_rows:
                continue
            result = {"rows": n, "backend": backend,
                      **measure(model, csv_path, backend, data_dir, work / f"pred_{n}_{backend}.csv")}
            print(result, flush=True)
            runs.append(result)
            write_json(Path(args.out), {  # after every run: an interrupted sweep keeps what it measured
                "command": " ".join(command),
                "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "loadavg": os.getloadavg(),
                            "python": platform.python_version()},
                "model": str(model) if args.model else "fitted by the script: shipped sizes, random_cv0, 2 network "
                                                       "epochs, untrained encoder, 300-tree set regressors",
                "protocol": "one fresh `mixscent predict --csv FILE --out FILE --backend B` process per size and "
                            "backend; peak RSS = the child's VmHWM (/proc/self/status) at exit; rows drawn from "
                            "mixture_definitions.csv",
                "chunk_rows": CHUNK_ROWS, "pair_batch": MixtureAPI.pair_batch,
                "runs": runs,
            })
    return 0


if __name__ == "__main__":
    sys.exit(main())
