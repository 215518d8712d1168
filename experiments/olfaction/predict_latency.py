"""Wall time of one-pair ``mixscent predict`` in a fresh process: the torch-free ONNX path
(``--backend onnx``, what ``auto`` picks for a folder with the export) vs the torch path
(``--backend torch``, the only path before the export), ``--runs`` times each, interleaved, after
one unmeasured warm-up call of each (file-system and bytecode caches: the children run without
``PYTHONDONTWRITEBYTECODE``, as an installed package does); wall seconds and the child's CPU
seconds (user + system, which the machine's load does not inflate); plus the largest difference
between the two paths' distances computed in-process at full precision, and the printed lines.

    python -m experiments.olfaction.predict_latency --model runs/q/olfaction_model \\
        --out docs/results/olfaction/predict_latency.json

The model is one trained by ``mixscent quick --out runs/q``. Times depend on the machine and its
load (recorded as ``loadavg``): compare the two paths of one run, not runs on different machines.
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common.cli import ArgumentParser, add_common_args, check_outputs, cli_main, positive_int
from common.io import write_json

# the README's example pair (limonene + citral vs vanillin)
MIX1, MIX2, DATASET = "CC1=CCC(CC1)C(=C)C;CC(C)=CCCC(C)=CC=O", "COc1cc(C=O)ccc1O", "Snitz 1"


def _predict_call(model: str, backend: str, mix1: str, mix2: str, dataset: str) -> tuple[float, float, str, str]:
    """``(wall seconds, CPU seconds, stdout, stderr)`` of one ``python -m olfaction.cli predict``
    process."""
    cmd = [sys.executable, "-m", "olfaction.cli", "predict", "--model", model, "--mix1", mix1, "--mix2", mix2,
           "--dataset", dataset, "--components", "--backend", backend]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    seconds, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd)} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return seconds, cpu, proc.stdout.strip(), proc.stderr.strip()


def full_precision_gap(model: Path, mix1: str, mix2: str, dataset: str) -> dict[str, float]:
    """Largest |ONNX - torch| per component of the pair, both predictors loaded in this process."""
    from olfaction.data import parse_mixture_text
    from olfaction.inference import OnnxPredictor
    from olfaction.predictor import MixturePredictor

    args = ([parse_mixture_text(mix1)], [parse_mixture_text(mix2)], [dataset])
    heavy = MixturePredictor.from_pretrained(model).predict_components(*args)
    light = OnnxPredictor(model).predict_components(*args)
    return {k: float(abs(light[k][0] - heavy[k][0])) for k in heavy}


@cli_main
def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="predict_latency", description=__doc__.splitlines()[0])
    add_common_args(p, out_default="docs/results/olfaction/predict_latency.json")
    p.add_argument("--model", required=True, help="a model folder with the ONNX export (mixscent quick)")
    p.add_argument("--runs", type=positive_int, default=5)
    p.add_argument("--mix1", default=MIX1)
    p.add_argument("--mix2", default=MIX2)
    p.add_argument("--dataset", default=DATASET)
    args = p.parse_args(argv)
    check_outputs(files=[args.out], inputs=[args.model], overwrite=args.overwrite)
    from olfaction.inference import onnx_problem

    problem = onnx_problem(args.model)
    if problem:
        from common.errors import InputError

        raise InputError(problem)
    backends = ("torch", "onnx")
    times: dict[str, list[float]] = {b: [] for b in backends}
    cpu: dict[str, list[float]] = {b: [] for b in backends}
    printed: dict[str, str] = {}
    notes: dict[str, str] = {}
    for b in backends:  # warm-up
        _predict_call(args.model, b, args.mix1, args.mix2, args.dataset)
    load_before = os.getloadavg()
    for _ in range(args.runs):
        for b in backends:
            seconds, cpu_seconds, out, err = _predict_call(args.model, b, args.mix1, args.mix2, args.dataset)
            times[b].append(round(seconds, 4))
            cpu[b].append(round(cpu_seconds, 4))
            printed[b], notes[b] = out, err
    load_after = os.getloadavg()
    median = {b: statistics.median(t) for b, t in times.items()}
    median_cpu = {b: statistics.median(t) for b, t in cpu.items()}
    result = {
        "command": " ".join(["python -m experiments.olfaction.predict_latency", *(argv or sys.argv[1:])]),
        "model": str(args.model),
        "pair": {"mix1": args.mix1, "mix2": args.mix2, "dataset": args.dataset},
        "runs": args.runs,
        "seconds": times,
        "median_seconds": median,
        "speedup_torch_over_onnx": round(median["torch"] / median["onnx"], 2),
        "cpu_seconds": cpu,
        "median_cpu_seconds": median_cpu,
        "cpu_speedup_torch_over_onnx": round(median_cpu["torch"] / median_cpu["onnx"], 2),
        "printed": printed,
        "stderr": notes,
        "printed_identical": printed["torch"] == printed["onnx"],
        "max_abs_difference_full_precision": full_precision_gap(Path(args.model), args.mix1, args.mix2, args.dataset),
        "loadavg": {"before": list(load_before), "after": list(load_after)},
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")},
    }
    write_json(Path(args.out), result)
    for b in backends:
        print(f"{b}: median wall {median[b]:.3f} s {times[b]}, CPU {median_cpu[b]:.3f} s {cpu[b]}")
    print(f"printed identical: {result['printed_identical']}; full-precision gap: "
          f"{result['max_abs_difference_full_precision']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
