"""How much faster is the training step with the recurrent S6 scan (#54 item 1)?

Three measurements in one run, all in process CPU time on one thread (the machine is shared, so
wall time would measure the neighbours), each variant interleaved with its baseline:

1. ``scan``: forward + backward of ``selective_scan_chunked`` (the scan before #54) against
   ``selective_scan_recurrent`` over sequence lengths and the widths of the sizes; the largest
   length at which the recurrent form wins at every width tested is the threshold
   ``vision.scan.RECURRENT_MAX_LEN`` was set from.
2. ``step``: the training step (``vision.bench.time_train_step``: AdamW, x0 loss; batch 32 at Ti,
   4 at S, whose step before the change takes minutes on one thread) of MoH at the sizes asked, with the model's scan (``selective_scan``) against the chunked scan
   everywhere (today's step before #54); the ratio is before / after.
3. ``split``: the same step with the scan replaced by a stand-in of negligible cost, which bounds
   what any scan could gain (the rest: projections, convolutions, routing, experts, AdamW).

Plus ``shipped``: the largest difference between DDIM samples of the shipped MoH drawn with the
chunked and with the model's scan (same seed), which must be float rounding only.

    python -m experiments.vision.scan_step --json docs/results/vision/scan_step.json
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time

import numpy as np
import torch

import vision.models.layers as layers
from common.io import write_json
from common.report import markdown_table
from vision.bench import time_train_step
from vision.scan import RECURRENT_MAX_LEN, selective_scan_chunked, selective_scan_recurrent


@contextlib.contextmanager
def model_scan(fn):
    """Every ``MambaMixer`` runs ``fn`` as its scan inside the block."""
    saved = layers.selective_scan
    layers.selective_scan = fn
    try:
        yield
    finally:
        layers.selective_scan = saved


def _no_scan(u, delta, A, B, C, D):
    """A stand-in of negligible cost that still passes gradient to every input."""
    return u * D + delta * (B.sum(-1) + C.sum(-1))[..., None] * A.sum(-1)


def bench_scan_forms(shapes: list[tuple[int, int, int, int]], repeats: int = 3, seed: int = 0) -> list[dict]:
    """``(b, L, d, n)`` -> CPU ms of forward + backward (min over ``repeats`` after a warm-up) of
    the chunked and the recurrent scan, interleaved."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for b, L, d, n in shapes:
        args = [torch.randn(b, L, d, generator=g),
                torch.nn.functional.softplus(torch.randn(b, L, d, generator=g) - 3),
                -torch.arange(1, n + 1, dtype=torch.float32).repeat(d, 1),
                torch.randn(b, L, n, generator=g), torch.randn(b, L, n, generator=g), torch.ones(d)]
        args = [a.requires_grad_() for a in args]
        times = {"chunked": [], "recurrent": []}
        for _ in range(repeats + 1):
            for name, fn in (("chunked", selective_scan_chunked), ("recurrent", selective_scan_recurrent)):
                t0 = time.process_time()
                fn(*args).square().sum().backward()
                times[name].append(1000 * (time.process_time() - t0))
        ch, rec = min(times["chunked"][1:]), min(times["recurrent"][1:])
        rows.append({"batch": b, "seq_len": L, "d_inner": d, "d_state": n, "chunked_ms": ch, "recurrent_ms": rec,
                     "chunked_over_recurrent": ch / rec})
    return rows


def threshold(rows: list[dict]) -> int:
    """The largest length up to which the recurrent form is faster at every shape measured."""
    best = 0
    for L in sorted({r["seq_len"] for r in rows}):
        if all(r["chunked_over_recurrent"] > 1 for r in rows if r["seq_len"] <= L):
            best = L
    return best


def bench_step(sizes: tuple[str, ...], batch_size: int, steps: int, repeats: int) -> list[dict]:
    """The MoH training step per size: before (chunked scan), after (the model's scan) and the
    scan-free bound, interleaved ``repeats`` times; medians of the per-step CPU times."""
    variants = {"before_chunked": selective_scan_chunked, "after": layers.selective_scan, "no_scan": _no_scan}
    rows = []
    for size in sizes:
        times = {k: [] for k in variants}
        for _ in range(repeats):
            for name, fn in variants.items():
                with model_scan(fn):
                    r = time_train_step(size, "moh", device="cpu", steps=steps, batch_size=batch_size,
                                        clock=time.process_time)
                times[name] += r["ms_per_step_all"]
        med = {k: float(np.median(v)) for k, v in times.items()}
        rows.append({"model_size": size, "batch_size": batch_size, "tokens": r["tokens"], "params": r["params"],
                     **{f"{k}_ms": v for k, v in med.items()},
                     "speedup": med["before_chunked"] / med["after"],
                     "scan_share_before": 1 - med["no_scan"] / med["before_chunked"],
                     "scan_share_after": 1 - med["no_scan"] / med["after"],
                     "bound_if_scan_free": med["before_chunked"] / med["no_scan"],
                     "ms_per_step_all": times})
    return rows


def shipped_sample_difference(n: int = 8, steps: int = 10) -> dict:
    """Max abs difference of the shipped MoH's DDIM samples, chunked scan vs the model's scan."""
    from common.shipped import shipped_models
    from vision.models import load_backbone
    from vision.sampling import sample_ddim

    model = load_backbone(shipped_models()["moh-fmnist"])
    with model_scan(selective_scan_chunked):
        before = sample_ddim(model, n, steps, seed=0).images
    after = sample_ddim(model, n, steps, seed=0).images
    return {"model": "moh-fmnist", "n": n, "ddim_steps": steps, "max_abs_diff_01": float(np.abs(before - after).max())}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", required=True)
    p.add_argument("--sizes", nargs="+", default=["Ti", "S"])
    p.add_argument("--batch-sizes", nargs="+", type=int, default=[32, 4],
                   help="one per size (S at 32 takes minutes per step on one thread before the change)")
    p.add_argument("--steps", type=int, default=2, help="timed steps per repeat (after one warm-up)")
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    shapes = [(32, L, 192, 4) for L in (16, 64, 128, 256, 512)] + [(8, L, 768, 16) for L in (64, 256)]
    shapes += [(2, L, 64, 8) for L in (64, 256, 1024, 4096)]
    scan_rows = bench_scan_forms(shapes)
    print(markdown_table(scan_rows), flush=True)
    print(f"recurrent faster at every width up to L = {threshold(scan_rows)} (RECURRENT_MAX_LEN = "
          f"{RECURRENT_MAX_LEN})", flush=True)
    step_rows = []
    for size, batch in zip(args.sizes, args.batch_sizes, strict=True):  # beyond Ti: one step, one repeat
        step_rows += bench_step((size,), batch, args.steps if size == "Ti" else 1, args.repeats if size == "Ti" else 1)
        print(markdown_table(step_rows, ["model_size", "batch_size", "tokens", "before_chunked_ms", "after_ms", "no_scan_ms",
                                         "speedup", "scan_share_before", "scan_share_after",
                                         "bound_if_scan_free"]), flush=True)
    shipped = shipped_sample_difference()
    print(shipped, flush=True)
    write_json(args.json, {"command": "python -m experiments.vision.scan_step " + " ".join(sys.argv[1:] if argv is None else argv),
                           "clock": "time.process_time, one torch thread", "recurrent_max_len": RECURRENT_MAX_LEN,
                           "threshold_measured": threshold(scan_rows), "scan": scan_rows, "step": step_rows,
                           "shipped": shipped})


if __name__ == "__main__":
    main()
