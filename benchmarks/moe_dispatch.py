"""Dispatch/combine benchmark: the sort-based fast path vs the loop reference vs a dense
one-hot einsum, forward + backward, in one run.

For each (tokens, E, k) it reports the median time of each method and its peak extra memory,
and their ratios to the fast path. Peak memory on CPU is the rise of the resident high-water
mark (VmHWM, reset through ``/proc/self/clear_refs`` just before the call) over the RSS before
it, measured in a fresh subprocess per cell so memory freed by earlier calls cannot hide it; on
CUDA it is ``torch.cuda.max_memory_allocated``. Linux only.

    python benchmarks/moe_dispatch.py --out results/bench            # full grid (tokens to 64k)
    python benchmarks/moe_dispatch.py --quick --out results/bench    # small grid
    python benchmarks/moe_dispatch.py --json docs/results/moe/dispatch.json --overwrite  # README table

``--json PATH`` also writes the results file the top README's table is read from: the settings,
the command, the machine (CPU count, torch threads, versions) and one row per cell.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from common.cli import cli_main  # noqa: E402
from common.errors import InputError  # noqa: E402
from common.io import write_csv, write_json  # noqa: E402
from common.report import markdown_table  # noqa: E402
from moe import dispatch_combine, dispatch_combine_einsum, dispatch_combine_loop, route_topk  # noqa: E402

METHODS = {
    "fast": lambda x, r, ex: dispatch_combine(x, r, ex)[0],
    "loop": lambda x, r, ex: dispatch_combine_loop(x, r, ex)[0],
    "einsum": dispatch_combine_einsum,
}
D_MODEL, D_HIDDEN = 32, 64


def _setup(tokens: int, experts: int, k: int, device: str, seed: int = 0):
    torch.manual_seed(seed)
    ex = nn.ModuleList(
        nn.Sequential(nn.Linear(D_MODEL, D_HIDDEN), nn.GELU(), nn.Linear(D_HIDDEN, D_MODEL))
        for _ in range(experts)
    ).to(device)
    x = torch.randn(tokens, D_MODEL, device=device, requires_grad=True)
    logits = torch.randn(tokens, experts, device=device, requires_grad=True)
    return ex, x, logits


def _step(method: str, ex, x, logits, k: int) -> None:
    routing = route_topk(logits, k)
    y = METHODS[method](x, routing, ex)
    y.sum().backward()


def time_cell(method: str, tokens: int, experts: int, k: int, device: str, repeats: int) -> float:
    ex, x, logits = _setup(tokens, experts, k, device)
    _step(method, ex, x, logits, k)  # warm-up
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        _step(method, ex, x, logits, k)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peak_memory_mb(method: str, tokens: int, experts: int, k: int, device: str) -> float:
    """Peak extra memory of one forward+backward, measured in this (fresh) process."""
    ex, x, logits = _setup(tokens, experts, k, device)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        _step(method, ex, x, logits, k)
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    _reset_peak_rss()
    before = _status_kib("VmRSS")
    _step(method, ex, x, logits, k)
    return (_status_kib("VmHWM") - before) / 1024


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak_rss() -> None:
    """Reset the kernel's resident high-water mark (VmHWM) to the current RSS (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _memory_in_subprocess(method, tokens, experts, k, device) -> float:
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); from benchmarks.moe_dispatch import peak_memory_mb; "
        f"print(peak_memory_mb({method!r}, {tokens}, {experts}, {k}, {device!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def run(token_grid, expert_grid, k_grid, device: str, repeats: int, skip_loop_above: int) -> list[dict]:
    rows = []
    for tokens in token_grid:
        for experts in expert_grid:
            for k in k_grid:
                cell = {"tokens": tokens, "experts": experts, "k": k, "device": device}
                for method in METHODS:
                    if method == "loop" and tokens * experts > skip_loop_above:
                        cell[f"{method}_time_s"] = cell[f"{method}_peak_mb"] = None
                        continue
                    cell[f"{method}_time_s"] = time_cell(method, tokens, experts, k, device, repeats)
                    cell[f"{method}_peak_mb"] = _memory_in_subprocess(method, tokens, experts, k, device)
                for method in ("loop", "einsum"):
                    t, m = cell[f"{method}_time_s"], cell[f"{method}_peak_mb"]
                    cell[f"{method}/fast_time"] = None if t is None else t / cell["fast_time_s"]
                    cell[f"{method}/fast_mem"] = None if m is None else m / max(cell["fast_peak_mb"], 1e-3)
                rows.append(cell)
                print(
                    f"tokens={tokens:6d} E={experts:3d} k={k}: fast {cell['fast_time_s'] * 1e3:8.1f} ms, "
                    f"einsum/fast time {cell['einsum/fast_time']:.2f}x mem {cell['einsum/fast_mem']:.2f}x",
                    flush=True,
                )
    return rows


TABLE_COLUMNS = [
    "tokens",
    "experts",
    "k",
    "fast_time_s",
    "loop/fast_time",
    "einsum/fast_time",
    "fast_peak_mb",
    "loop/fast_mem",
    "einsum/fast_mem",
]


def machine_info(device: str) -> dict:
    """What the numbers were measured on (the README's table names it)."""
    info = {
        "device": device,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
    return info


@cli_main
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="results/bench", help="output directory for CSV/JSON")
    parser.add_argument(
        "--json", default=None, metavar="PATH", help="also write the results file a README table is read from"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --json file")
    parser.add_argument("--quick", action="store_true", help="small grid (tokens 1k and 4k)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        raise InputError(f"--repeats must be at least 1, got {args.repeats}")
    json_path = Path(args.json) if args.json else None
    if json_path is not None:
        if json_path.is_dir():
            raise InputError(f"--json {json_path} is a directory; give a file path")
        if json_path.exists() and not args.overwrite:
            raise InputError(f"--json {json_path} exists; pass --overwrite to replace it")
    tokens = [1024, 4096] if args.quick else [1024, 4096, 16384, 65536]
    experts, ks = [8, 64], [1, 2]
    rows = run(tokens, experts, ks, args.device, args.repeats, skip_loop_above=65536 * 64)
    settings = {"d_model": D_MODEL, "d_hidden": D_HIDDEN, "repeats": args.repeats}
    out = Path(args.out)
    write_csv(out / "moe_dispatch.csv", rows)
    write_json(out / "moe_dispatch.json", {**settings, "rows": rows})
    if json_path is not None:
        command = "python benchmarks/moe_dispatch.py " + shlex.join(
            argv if argv is not None else sys.argv[1:]
        )
        write_json(
            json_path,
            {
                "benchmark": "moe_dispatch",
                "command": command.strip(),
                "date": datetime.date.today().isoformat(),
                "grid": {"tokens": tokens, "experts": experts, "k": ks},
                **settings,
                "machine": machine_info(args.device),
                "columns": TABLE_COLUMNS,
                "rows": rows,
            },
        )
    print("\n" + markdown_table(rows, TABLE_COLUMNS))
    print(f"wrote {out / 'moe_dispatch.csv'}" + (f" and {json_path}" if json_path else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
