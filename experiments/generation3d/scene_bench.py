"""Where MoCA's training step pays on scenes: time and peak memory of one whole generator training
step (forward + backward + AdamW of the ``PartFlowTransformer``, rectified-flow loss, one scene of
P components of T tokens), full attention vs MoCA in its sparse phase with router distillation (the
recipe's steady state) and without. Same inputs for all methods, interleaved repeats so machine
load hits them alike; peak memory by ``generation3d.bench.peak_memory_bytes``. Formerly ``moca
bench --suite scenes`` (same options, same JSON: ``{"rows", "settings"}``).

    python -m experiments.generation3d.scene_bench --parts 32,64,128,256 --tokens 8 --repeats 2 \\
        --out docs/results/generation3d/scenes.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from common.cli import ArgumentParser, add_overwrite_arg, check_outputs, cli_main, int_list, seed_int
from common.device import add_device_arg, describe, resolve_device
from common.io import write_json
from common.limits import add_force_arg
from common.report import markdown_table
from generation3d import limits as lim
from generation3d.bench import interleaved_median_ms, peak_memory_bytes, ratios_vs_full, training_step
from generation3d.model import GenConfig

SCENE_PARTS = (32, 64, 128, 256)
SCENE_METHODS = ("full", "moca", "moca_no_distill")


def bench_scene_training(
    parts: tuple[int, ...] = SCENE_PARTS, tokens: tuple[int, ...] = (8,), d_model: int = 128, n_layers: int = 4,
    top_k: int = 4, n_compressed: int = 2, repeats: int = 3, seed: int = 0, threads: int | None = None,
    device: str = "auto",
) -> list[dict]:
    """Rows ``{method, parts, tokens, time_ms (median), peak_mem_mb, speedup_vs_full, mem_ratio_vs_full,
    ...settings}`` of ``SCENE_METHODS`` on ``device`` (module docstring)."""
    dev = resolve_device(device)
    if threads:
        torch.set_num_threads(threads)
    rows = []
    for t in tokens:
        for p in parts:
            if p < 1 or t < 1:
                raise ValueError(f"parts and tokens must be >= 1, got {p} and {t}")
            steps = {}
            for m in SCENE_METHODS:
                cfg = GenConfig(n_latents=t, d_latent=8, max_parts=p, d_model=d_model, n_layers=n_layers,
                                attention="full" if m == "full" else "moca", top_k=top_k, n_compressed=n_compressed,
                                router_distill=0.5 if m == "moca" else 0.0, dense_warmup=0.0)
                steps[m] = training_step(cfg, 1, dev, seed=seed)[1]
            times = interleaved_median_ms(lambda m, steps=steps: steps[m](), SCENE_METHODS, repeats, dev)  # warm-up: optimizer state
            for m in SCENE_METHODS:
                rows.append({"method": m, "parts": p, "tokens": t, "time_ms": times[m],
                             "peak_mem_mb": peak_memory_bytes(steps[m], dev) / 2**20, "d_model": d_model,
                             "n_layers": n_layers, "top_k": top_k, "n_compressed": n_compressed, "repeats": repeats,
                             "threads": torch.get_num_threads(), **({} if dev.type == "cpu" else {"device": describe(dev)})})
    return ratios_vs_full(rows)


@cli_main
def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", type=int_list(1), default=SCENE_PARTS, help="components P (default 32,64,128,256)")
    ap.add_argument("--tokens", type=int_list(1), default=(8,), help="tokens T per component (default 8, the AE's)")
    ap.add_argument("--repeats", type=lim.bounded(lim.MAX_REPEATS), default=3, help="timed repeats")
    ap.add_argument("--top-k", type=lim.bounded(lim.MAX_TOP_K), default=4)
    ap.add_argument("--compressed", type=lim.bounded(lim.MAX_COMPRESSED), default=2)
    ap.add_argument("--threads", type=lim.bounded(lim.MAX_THREADS), default=1)
    ap.add_argument("--seed", type=seed_int, default=0)
    ap.add_argument("--out", default="docs/results/generation3d/scenes.json", help="the JSON to write")
    add_overwrite_arg(ap)
    add_force_arg(ap, "run sizes whose full-attention scores exceed the memory budget")
    add_device_arg(ap)
    a = ap.parse_args(argv)
    parts, tokens = tuple(a.parts), tuple(a.tokens)
    lim.check_bench_memory("scenes", parts, tokens, a.force)
    check_outputs(files=[Path(a.out)], overwrite=a.overwrite)
    torch.set_num_threads(a.threads)
    kw = {"parts": parts, "tokens": tokens, "repeats": a.repeats, "top_k": a.top_k, "n_compressed": a.compressed,
          "seed": a.seed, **({} if a.device == "auto" else {"device": a.device})}
    rows = bench_scene_training(**kw)
    write_json(Path(a.out), {"rows": rows, "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in kw.items()}})
    print(markdown_table(rows, ["method", "parts", "tokens", "time_ms", "speedup_vs_full", "peak_mem_mb",
                                "mem_ratio_vs_full"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
